#!/usr/bin/env bash
# On a GPU machine: builds mpx with CUDA, runs the [cuda] tests, then times GEMM, the fused amp
# kernels, an MLP step and ResNet-50 training at O0-O3 next to PyTorch on the same device. Usage:
#   bench/run_cuda.sh [out-dir] [parts]    parts: any of "tests gemm amp resnet50" (default: all),
#   and, not in the default: "profile" (per-op kernel times of a ResNet-50 O1 step, mpx bench
#   --profile) and "table" (mpx bench's GPU table: ResNet-50, VGG-16, DCGAN at O0-O3 and O3-bnf32,
#   f16 and bf16, eager and CUDA graphs, with the PyTorch peer).
# (configure needs Eigen/Catch2/stb/zlib: see README, GPU section)
set -uo pipefail
out=${1:-bench-out}
parts=${2:-tests gemm amp resnet50}
has() { [[ " $parts " == *" $1 "* ]]; }
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
prefix=$PWD/.gpu-deps/prefix
# A staged static libz is not position-independent: link the machine's shared one, with the staged header.
zlib=$(ldconfig -p | awk '/libz\.so\.1 /{print $NF; exit}')
# cuDNN (conv, batch norm): the toolkit's own when it has one, else PyTorch's nvidia-cudnn wheel,
# whose lib/ may hold only libcudnn.so.9 (no unversioned link): name the file itself.
cudnn=()
if [ -f /usr/local/cuda/include/cudnn.h ] && ls /usr/local/cuda/lib*/libcudnn.so* >/dev/null 2>&1; then
  echo "cuDNN: /usr/local/cuda"
else
  cudnn_dir=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
  cudnn_lib=$(ls "$cudnn_dir"/lib/libcudnn.so "$cudnn_dir"/lib/libcudnn.so.[0-9]* 2>/dev/null | head -1)
  if [ -n "$cudnn_dir" ] && [ -f "$cudnn_dir/include/cudnn.h" ] && [ -n "$cudnn_lib" ]; then
    echo "cuDNN: $cudnn_lib"
    cudnn=(-DCUDNN_INCLUDE_DIR="$cudnn_dir/include" -DCUDNN_LIBRARY="$cudnn_lib")
    # libcudnn.so.9 loads its sub-libraries (cnn, ops, engines) by name at run time.
    export LD_LIBRARY_PATH="$cudnn_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    echo "cuDNN: not found (conv and batch norm get no CUDA kernels)"
  fi
fi
# nvJPEG (--gpu-decode, test_gpu_decode): the toolkit's when it has one (CMake takes it first), else
# a staged copy in .gpu-deps/nvjpeg (tools/install-deps.sh's /opt/nvjpeg, copied over), else the
# nvidia-nvjpeg wheel of the machine's Python (nvidia/cu13 or nvidia/nvjpeg).
nvjpeg=()
if [ -f "$PWD/.gpu-deps/nvjpeg/include/nvjpeg.h" ]; then
  nvjpeg=(-DMPX_NVJPEG_ROOT="$PWD/.gpu-deps/nvjpeg")
else
  nvidia_dir=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
  [ -n "$nvidia_dir" ] && nvjpeg=(-DMPX_NVJPEG_ROOT="$nvidia_dir")
fi
rm -f build-gpu/CMakeCache.txt
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$prefix" -DZLIB_INCLUDE_DIR="$prefix/include" ${zlib:+-DZLIB_LIBRARY_RELEASE="$zlib"} \
  "${cudnn[@]}" "${nvjpeg[@]}" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep "mpx: cuDNN\|mpx: nvJPEG" "$out/configure.log"
start=$(date +%s)
# Only what this script runs: the library, the test files with [cuda] cases, the GPU benchmarks
# and the CLI. MPX_CUDA_TESTS="test_cuda_conv ..." narrows the tests (and skips the rest's build).
cuda_tests=$(grep -l '\[cuda\]' tests/test_*.cpp | xargs -n1 basename | sed 's/\.cpp$//')
if [ -n "${MPX_CUDA_TESTS:-}" ]; then
  targets=(mpx $MPX_CUDA_TESTS)
else
  targets=(mpx mpx_cli $cuda_tests $(ls bench/bench_*_cuda.cpp | xargs -n1 basename | sed 's/\.cpp$//'))
fi
cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
fail=0
: >"$out/tests.log"
has tests && for t in $cuda_tests; do
  t=build-gpu/tests/$t
  [ -x "$t" ] || continue
  [ -z "${MPX_CUDA_TESTS:-}" ] || [[ " $MPX_CUDA_TESTS " == *" $(basename "$t") "* ]] || continue
  "$t" >"$out/one.log" 2>&1 || fail=1
  echo "$(basename "$t"): $(tail -2 "$out/one.log" | head -1)"
  cat "$out/one.log" >>"$out/tests.log"
done
rm -f "$out/one.log"
[ "$fail" = 0 ] || grep -B3 -A12 "FAILED" "$out/tests.log" | head -80
{
  if has gemm; then build-gpu/bench/bench_gemm_cuda; python3 bench/peer_gemm_cuda.py; fi
  if has amp; then build-gpu/bench/bench_amp_cuda; python3 bench/peer_mlp_cuda.py; fi
  if has resnet50; then build-gpu/bench/bench_resnet50_cuda; python3 bench/peer_resnet50_cuda.py; fi
  if has profile; then
    build-gpu/tools/mpx bench --device cuda --models resnet50 --opt-levels O1 --dtype f16 --batch 256 --profile \
      --out "$out/profile"
  fi
  if has table; then
    for graph in "" --cuda-graph; do
      models=resnet50,vgg16,dcgan
      [ -z "$graph" ] || models=resnet50,vgg16  # dcgan is not captured yet
      compiled=--peer-compile
      [ -z "$graph" ] || compiled=""  # torch.compile's columns once, beside the eager rows
      build-gpu/tools/mpx bench --device cuda --models $models --dtype f16,bf16 --batch 256 $graph --peer $compiled \
        --out "$out/table${graph:+-graph}"
    done
  fi
} 2>&1 | tee "$out/bench.log" | grep -v "^csv,"
exit $fail
