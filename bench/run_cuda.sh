#!/usr/bin/env bash
# On a GPU machine: builds mpx with CUDA, runs the [cuda] tests, then times GEMM, the fused amp
# kernels and an MLP step at O0-O3 next to PyTorch on the same device. Usage:
#   bench/run_cuda.sh [out-dir] [parts]    parts: any of "tests gemm amp" (default: all three)
# (configure needs Eigen/Catch2/stb/zlib: see README, GPU section)
set -uo pipefail
out=${1:-bench-out}
parts=${2:-tests gemm amp}
has() { [[ " $parts " == *" $1 "* ]]; }
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
prefix=$PWD/.gpu-deps/prefix
# A staged static libz is not position-independent: link the machine's shared one, with the staged header.
zlib=$(ldconfig -p | awk '/libz\.so\.1 /{print $NF; exit}')
rm -f build-gpu/CMakeCache.txt
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$prefix" -DZLIB_INCLUDE_DIR="$prefix/include" ${zlib:+-DZLIB_LIBRARY_RELEASE="$zlib"} \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
start=$(date +%s)
cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
fail=0
: >"$out/tests.log"
has tests && for t in build-gpu/tests/test_cuda_*; do
  [ -x "$t" ] && [ -f "$t" ] && [[ "$t" != *.cmake ]] || continue
  "$t" >"$out/one.log" 2>&1 || fail=1
  echo "$(basename "$t"): $(tail -2 "$out/one.log" | head -1)"
  cat "$out/one.log" >>"$out/tests.log"
done
rm -f "$out/one.log"
[ "$fail" = 0 ] || grep -B3 -A12 "FAILED" "$out/tests.log" | head -80
{
  if has gemm; then build-gpu/bench/bench_gemm_cuda; python3 bench/peer_gemm_cuda.py; fi
  if has amp; then build-gpu/bench/bench_amp_cuda; python3 bench/peer_mlp_cuda.py; fi
} 2>&1 | tee "$out/bench.log" | grep -v "^csv,"
exit $fail
