#!/usr/bin/env bash
# Installs the build tree into a scratch prefix and builds/runs the out-of-tree consumer.
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
# Linked against mpx::mpx only: no CUDA or MPI library among the program's own dependencies.
if ldd "$work/build/consumer" | grep -E 'libcudart|libcublas|libcudnn|libnccl|libnvjpeg|libmpi'; then
  echo "consumer links CUDA or MPI libraries (above) although it uses neither" >&2
  exit 1
fi
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/build/consumer"
