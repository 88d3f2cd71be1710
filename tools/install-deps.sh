#!/usr/bin/env bash
# Installs the Debian packages mpx needs to build, test and train, skipping what is present, and nvJPEG where CUDA lacks it.
set -euo pipefail
want=(cmake ninja-build g++ ccache libeigen3-dev catch2 libstb-dev zlib1g-dev libdnnl-dev dataset-fashion-mnist
      openmpi-bin libopenmpi-dev clang libclang-rt-14-dev libturbojpeg0-dev libjpeg62-turbo-dev)
need=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
if [ ${#need[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  echo "installed: ${need[*]}"
fi

# nvJPEG (GPU JPEG decoding, `mpx train --gpu-decode`) comes with full CUDA toolkits; a toolkit
# without it gets NVIDIA's pip wheel for nvcc's major version, unpacked into NVJPEG_ROOT
# (default /opt/nvjpeg: include/, lib/), where cmake/nvjpeg.cmake looks. It is optional: when
# this fails the build simply has no GPU decoding, so every failure below is only a note.
install_nvjpeg() {
  local nvcc root major pkg sub tmp
  nvcc=$(command -v nvcc || true)
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  [ -n "$nvcc" ] || return 0  # no CUDA: nothing to add
  root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  for h in "$root"/include/nvjpeg.h "$root"/targets/*/include/nvjpeg.h; do
    [ -f "$h" ] && return 0  # the toolkit has it
  done
  local dest=${NVJPEG_ROOT:-/opt/nvjpeg}
  [ -f "$dest/include/nvjpeg.h" ] && return 0
  major=$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p')
  case "$major" in
    12) pkg="nvidia-nvjpeg-cu12==12.*" sub=nvidia/nvjpeg ;;
    13) pkg="nvidia-nvjpeg==13.*" sub=nvidia/cu13 ;;
    *) echo "note: no nvJPEG wheel is known for CUDA '$major'; GPU JPEG decoding stays off"; return 0 ;;
  esac
  python3 -m pip --version >/dev/null 2>&1 || {
    echo "note: nvJPEG not installed (needs python3 -m pip to fetch $pkg); GPU JPEG decoding stays off"
    return 0
  }
  tmp=$(mktemp -d) || return 1
  if ! python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$pkg" >/dev/null 2>&1 ||
     ! python3 -m zipfile -e "$tmp"/*.whl "$tmp/x" ||
     ! [ -f "$tmp/x/$sub/include/nvjpeg.h" ]; then
    rm -rf "$tmp"
    echo "note: could not download or unpack $pkg (offline?); GPU JPEG decoding stays off"
    return 0
  fi
  if ! { $sudo mkdir -p "$dest/include" "$dest/lib" &&
         $sudo cp "$tmp/x/$sub/include/nvjpeg.h" "$dest/include/" &&
         $sudo cp -P "$tmp/x/$sub"/lib/libnvjpeg.so* "$dest/lib/" &&
         $sudo ln -sf "libnvjpeg.so.$major" "$dest/lib/libnvjpeg.so"; }; then
    echo "note: could not write nvJPEG into $dest; set NVJPEG_ROOT to a writable folder"
  else
    $sudo cp "$tmp"/x/*.dist-info/licenses/License.txt "$dest/" 2>/dev/null || true
    echo "installed: nvJPEG for CUDA $major ($pkg) in $dest"
  fi
  rm -rf "$tmp"
  return 0
}
install_nvjpeg || echo "note: nvJPEG was not installed; GPU JPEG decoding stays off"

# cuDNN's frontend (header-only C++, NVIDIA's nvidia-cudnn-frontend wheel): scaled_dot_product_attention
# runs on cuDNN's fused attention through it. Optional like nvJPEG: without it CUDA attention keeps
# mpx's own kernels. Unpacked into CUDNN_FRONTEND_ROOT (default /opt/cudnn-frontend: include/).
install_cudnn_frontend() {
  local dest=${CUDNN_FRONTEND_ROOT:-/opt/cudnn-frontend} pkg="nvidia-cudnn-frontend==1.32.0" tmp
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || return 0  # no CUDA: nothing to add
  [ -f "$dest/include/cudnn_frontend.h" ] && return 0
  python3 -m pip --version >/dev/null 2>&1 || {
    echo "note: cuDNN's frontend not installed (needs python3 -m pip to fetch $pkg); CUDA attention keeps mpx's kernels"
    return 0
  }
  tmp=$(mktemp -d) || return 1
  # Any of the wheel's platform builds carries the same headers: take one for whatever Python is here.
  if ! python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$pkg" >/dev/null 2>&1 ||
     ! python3 -m zipfile -e "$tmp"/*.whl "$tmp/x" || ! [ -f "$tmp/x/include/cudnn_frontend.h" ]; then
    rm -rf "$tmp"
    echo "note: could not download or unpack $pkg (offline?); CUDA attention keeps mpx's kernels"
    return 0
  fi
  if $sudo mkdir -p "$dest" && $sudo cp -r "$tmp/x/include" "$dest/"; then
    $sudo cp "$tmp"/x/*.dist-info/licenses/LICENSE* "$dest/" 2>/dev/null || true
    echo "installed: cuDNN frontend headers ($pkg) in $dest"
  else
    echo "note: could not write cuDNN's frontend into $dest; set CUDNN_FRONTEND_ROOT to a writable folder"
  fi
  rm -rf "$tmp"
  return 0
}
install_cudnn_frontend || echo "note: cuDNN's frontend was not installed; CUDA attention keeps mpx's kernels"
