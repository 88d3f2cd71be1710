#!/usr/bin/env bash
# Times LibTorch's MNIST input pipeline (bench/bench_mnist_chain.cpp, one source) on mpx and on the
# LibTorch inside PyTorch's wheel, interleaved round by round, plus mpx's own spelling (--path native).
# Usage: [PYTHON=python-with-torch] [DATA=dir] bench/run_mnist_chain.sh [build-dir] [rounds] [epochs]
# DATA: MNIST-format IDX files; default: Debian's Fashion-MNIST, unpacked to a temporary folder
# (LibTorch reads uncompressed files only).
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
epochs=${3:-5}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -n "${DATA:-}" ]]; then
  data=$DATA
else
  data=$tmp/data
  mkdir -p "$data"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte; do
    src=/usr/share/datasets/fashion-mnist/$f.gz
    [[ -f $src ]] || { echo "run_mnist_chain: $src not found; install dataset-fashion-mnist or set DATA" >&2; exit 1; }
    gunzip -c "$src" > "$data/$f"
  done
fi
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))') ||
  { echo "run_mnist_chain: $python has no torch; set PYTHON to an interpreter with PyTorch" >&2; exit 1; }
abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
peer=$tmp/bench_mnist_chain_libtorch
"${CXX:-g++}" -O2 -std=c++20 -DMPX_PEER_LIBTORCH -D_GLIBCXX_USE_CXX11_ABI="$abi" "$here/bench_mnist_chain.cpp" \
  -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" -L"$torch_dir/lib" \
  -Wl,-rpath,"$torch_dir/lib" -ltorch -ltorch_cpu -lc10 -o "$peer"
for r in $(seq "$rounds"); do
  for w in 0 2; do
    for p in chain native; do
      "$build/bench/bench_mnist_chain" --root "$data" --workers "$w" --epochs "$epochs" --path "$p"
    done
    "$peer" --root "$data" --workers "$w" --epochs "$epochs"
  done
done
