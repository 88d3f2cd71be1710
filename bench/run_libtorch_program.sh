#!/usr/bin/env bash
# Builds one LibTorch program twice, its sources unchanged but for the includes (every <torch/...> header becomes
# <mpx/torch.h>, in its .cpp files and in its own headers): against mpx and against the LibTorch inside PyTorch's
# wheel. Then runs the two in alternation in the current folder (where the program looks for its data), printing
# each run's wall time and peak RSS.
# Usage: [PYTHON=python-with-torch] [OMP_NUM_THREADS=n] [TAIL_LINES=n] bench/run_libtorch_program.sh
#          [-b build-dir] [-r rounds] [-I include-dir]... SOURCE.cpp [MORE.cpp...] [program arguments...]
# TAIL_LINES: how many of each run's last output lines to print (2).
# -I: the program's own header folders (copied with their includes rewritten for the mpx build). The build folder
# is mpx's (default: the checkout's `build`), already built. Leading arguments naming existing .cpp files are
# the program's sources; the rest go to the program.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
rounds=3
inc_dirs=()
while getopts "b:r:I:" opt; do
  case $opt in
    b) build=$(cd "$OPTARG" && pwd) ;;
    r) rounds=$OPTARG ;;
    I) inc_dirs+=("$(cd "$OPTARG" && pwd)") ;;
    *) echo "usage: $0 [-b build-dir] [-r rounds] [-I dir]... SOURCE.cpp [MORE.cpp...] [args...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 && -f $1 ]] || { echo "run_libtorch_program: give the program's source file (got '${1:-}')" >&2; exit 2; }
srcs=()
while [[ $# -ge 1 && $1 == *.cpp && -f $1 ]]; do
  srcs+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")")
  shift
done
src=${srcs[0]}
[[ -f $build/libmpx.so ]] || { echo "run_libtorch_program: no libmpx.so in $build; build mpx first" >&2; exit 1; }
python=${PYTHON:-python3}
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))') ||
  { echo "run_libtorch_program: $python has no torch; set PYTHON to an interpreter with PyTorch" >&2; exit 1; }
abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
name=$(basename "$src" .cpp)
cxx=${CXX:-g++}
grep -q '<torch/' "${srcs[@]}" "${inc_dirs[@]}" -r ||
  { echo "run_libtorch_program: ${srcs[*]} include no <torch/...> header" >&2; exit 1; }
# The mpx side: sources and header folders copied with every <torch/...> include made <mpx/torch.h>.
rewrite() { sed -E 's#<torch/[A-Za-z0-9_/]+\.h>#<mpx/torch.h>#' "$1" > "$2"; }
mpx_srcs=() mpx_incs=() lt_incs=()
for i in "${!srcs[@]}"; do
  rewrite "${srcs[$i]}" "$tmp/src$i-$(basename "${srcs[$i]}")"
  mpx_srcs+=("$tmp/src$i-$(basename "${srcs[$i]}")")
done
for i in "${!inc_dirs[@]}"; do
  mkdir -p "$tmp/inc$i"
  (cd "${inc_dirs[$i]}" && find . -type f) | while read -r f; do
    mkdir -p "$tmp/inc$i/$(dirname "$f")"
    rewrite "${inc_dirs[$i]}/$f" "$tmp/inc$i/$f"
  done
  mpx_incs+=("-I$tmp/inc$i")
  lt_incs+=("-I${inc_dirs[$i]}")
done
echo "building $name on mpx and on LibTorch $("$python" -c 'import torch; print(torch.__version__)')" >&2
"$cxx" -O2 -std=c++20 "${mpx_incs[@]}" -I"$here/include" -I"$here" -I"$build" -isystem /usr/include/eigen3 \
  -I/usr/include/stb "${mpx_srcs[@]}" -L"$build" -Wl,-rpath,"$build" -lmpx -o "$tmp/$name-mpx" &
"$cxx" -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI="$abi" "${lt_incs[@]}" -I"$torch_dir/include" \
  -I"$torch_dir/include/torch/csrc/api/include" -I/usr/include/stb "${srcs[@]}" -L"$torch_dir/lib" \
  -Wl,-rpath,"$torch_dir/lib" -ltorch -ltorch_cpu -lc10 -o "$tmp/$name-libtorch"
wait $! || { echo "run_libtorch_program: the mpx build failed" >&2; exit 1; }
for r in $(seq "$rounds"); do
  for lib in mpx libtorch; do
    /usr/bin/time -f "$name round $r $lib: %e s wall, %M KiB peak RSS" -o "$tmp/time" "$tmp/$name-$lib" "$@" \
      > "$tmp/out-$lib-$r" 2>&1 || { cat "$tmp/out-$lib-$r" >&2; echo "run_libtorch_program: $lib run failed" >&2; exit 1; }
    tail -n "${TAIL_LINES:-2}" "$tmp/out-$lib-$r" | sed "s/^/  [$lib] /"
    cat "$tmp/time"
  done
done
