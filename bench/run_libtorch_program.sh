#!/usr/bin/env bash
# Builds one LibTorch program twice, its source unchanged but for the include (<torch/torch.h> becomes
# <mpx/torch.h>): against mpx and against the LibTorch inside PyTorch's wheel. Then runs the two in alternation
# in the current folder (where the program looks for its data), printing each run's wall time and peak RSS.
# Usage: [PYTHON=python-with-torch] [OMP_NUM_THREADS=n] bench/run_libtorch_program.sh [-b build-dir] [-r rounds]
#          [-I include-dir]... SOURCE.cpp [program arguments...]
# -I: extra include folders for both builds (a program's own headers). The build folder is mpx's (default: the
# checkout's `build`), already built.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
rounds=3
incs=()
while getopts "b:r:I:" opt; do
  case $opt in
    b) build=$(cd "$OPTARG" && pwd) ;;
    r) rounds=$OPTARG ;;
    I) incs+=("-I$(cd "$OPTARG" && pwd)") ;;
    *) echo "usage: $0 [-b build-dir] [-r rounds] [-I dir]... SOURCE.cpp [args...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 && -f $1 ]] || { echo "run_libtorch_program: give the program's source file (got '${1:-}')" >&2; exit 2; }
src=$1
shift
[[ -f $build/libmpx.so ]] || { echo "run_libtorch_program: no libmpx.so in $build; build mpx first" >&2; exit 1; }
python=${PYTHON:-python3}
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))') ||
  { echo "run_libtorch_program: $python has no torch; set PYTHON to an interpreter with PyTorch" >&2; exit 1; }
abi=$("$python" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
name=$(basename "$src" .cpp)
cxx=${CXX:-g++}
grep -q '<torch/torch.h>' "$src" || { echo "run_libtorch_program: $src does not include <torch/torch.h>" >&2; exit 1; }
sed 's#<torch/torch.h>#<mpx/torch.h>#' "$src" > "$tmp/$name.cpp"
echo "building $name on mpx and on LibTorch $("$python" -c 'import torch; print(torch.__version__)')" >&2
"$cxx" -O2 -std=c++20 "${incs[@]}" -I"$here/include" -I"$here" -I"$build" -isystem /usr/include/eigen3 \
  "$tmp/$name.cpp" -L"$build" -Wl,-rpath,"$build" -lmpx -o "$tmp/$name-mpx" &
"$cxx" -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI="$abi" "${incs[@]}" -I"$torch_dir/include" \
  -I"$torch_dir/include/torch/csrc/api/include" "$src" -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" \
  -ltorch -ltorch_cpu -lc10 -o "$tmp/$name-libtorch"
wait $! || { echo "run_libtorch_program: the mpx build failed" >&2; exit 1; }
for r in $(seq "$rounds"); do
  for lib in mpx libtorch; do
    /usr/bin/time -f "$name round $r $lib: %e s wall, %M KiB peak RSS" -o "$tmp/time" "$tmp/$name-$lib" "$@" \
      > "$tmp/out-$lib-$r" 2>&1 || { cat "$tmp/out-$lib-$r" >&2; echo "run_libtorch_program: $lib run failed" >&2; exit 1; }
    tail -n 2 "$tmp/out-$lib-$r" | sed "s/^/  [$lib] /"
    cat "$tmp/time"
  done
done
