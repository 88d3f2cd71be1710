#!/usr/bin/env bash
# Installs the Debian packages mpx needs to build, test and train, skipping what is present.
set -euo pipefail
want=(cmake ninja-build g++ ccache libeigen3-dev catch2 libstb-dev zlib1g-dev libdnnl-dev dataset-fashion-mnist
      openmpi-bin libopenmpi-dev clang libclang-rt-14-dev libturbojpeg0-dev libjpeg62-turbo-dev)
need=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  echo "installed: ${need[*]}"
fi
