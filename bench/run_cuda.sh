#!/usr/bin/env bash
# On a GPU machine: builds mpx with CUDA, runs the [cuda] tests, then times GEMM, the fused amp
# kernels, an MLP step and ResNet-50 training at O0-O3 next to PyTorch on the same device. Usage:
#   bench/run_cuda.sh [out-dir] [parts]    parts: any of "tests gemm amp resnet50" (default: all),
#   and, not in the default: "profile" (per-op kernel times of a ResNet-50 O1 step, mpx bench
#   --profile), "peer-profile" (PyTorch's, torch.profiler) and "table" (mpx bench's GPU table: ResNet-50, VGG-16, DCGAN at O0-O3 and O3-bnf32,
#   f16 and bf16, eager and CUDA graphs, with the PyTorch peer) and "loader" (nvJPEG decode
#   throughput, bench_loader --path gpu, beside the CPU pipeline) and "train" (one epoch of
#   ResNet-18 on generated JPEGs with and without --gpu-decode, then through DDP on NCCL with one rank) and "headline" (ResNet-50 O1/O2,
#   f16/bf16, eager with PyTorch's eager AMP beside, then as CUDA graphs) and "reduced" (ResNet-50
#   O2 f16 with MPX_CUDNN_REDUCED_PRECISION=0 and 1 in turns) and "attention" (cuDNN's fused attention and
#   mpx's flash kernels beside PyTorch's SDPA) and "gpt" (GPT-2 124M at O0-O2 bf16 beside PyTorch's eager AMP and
#   torch.compile) and "llmc" (llm.c's train_gpt2cu, GPT-2 124M from scratch on random tokens, built here from the
#   source at ${MPX_LLMC_SRC:-.gpu-deps/llmc}: copy a checkout there first, e.g. `git -C LLMC archive HEAD | tar -x
#   -C .gpu-deps/llmc`).
# (configure needs Eigen/Catch2/stb/zlib: see README, GPU section)
# MPX_PREBUILT=.gpu-bin (bench/pack_gpu_build.sh) runs binaries built elsewhere when they load
# here, which saves the build's minutes; otherwise it builds as usual.
# MPX_PEER_COMPILE=0 leaves torch.compile's columns out of "table" (they take most of its time);
# MPX_TABLE_MODELS=a,b runs the table for those models only (the three do not fit in one call).
# Only the [cuda] cases run, each test program within MPX_TEST_TIMEOUT seconds (default 150).
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
# NCCL (the [cuda] cases of test_distributed*): the toolkit's, else PyTorch's nvidia-nccl wheel.
nccl=()
if ! ls /usr/local/cuda/lib*/libnccl.so* >/dev/null 2>&1; then
  nccl_h=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)" -name nccl.h 2>/dev/null | head -1)
  if [ -n "$nccl_h" ]; then
    nccl_root=$(dirname "$(dirname "$nccl_h")")
    nccl=(-DNCCL_INCLUDE_DIR="$nccl_root/include" -DNCCL_LIBRARY="$(ls "$nccl_root"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
# cuDNN's frontend (fused attention): a staged copy in .gpu-deps/cudnn-frontend (tools/install-deps.sh's
# /opt/cudnn-frontend, copied over); without it the build keeps mpx's attention kernels. Its engines
# link NVRTC: the toolkit's, else the nvidia-cuda-nvrtc wheel's (PyTorch depends on it).
cfe=()
[ -f "$PWD/.gpu-deps/cudnn-frontend/include/cudnn_frontend.h" ] && cfe=(-DMPX_CUDNN_FRONTEND_ROOT="$PWD/.gpu-deps/cudnn-frontend")
if ! ls /usr/local/cuda/lib*/libnvrtc.so.* >/dev/null 2>&1 && ! ldconfig -p | grep -q 'libnvrtc\.so\.'; then
  nvrtc_so=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)" -name 'libnvrtc.so.*' 2>/dev/null | head -1)
  [ -n "$nvrtc_so" ] && export LD_LIBRARY_PATH="$(dirname "$nvrtc_so")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cuda_tests=$(grep -l '\[cuda\]' tests/test_*.cpp | xargs -n1 basename | sed 's/\.cpp$//')
bin=build-gpu
pre=${MPX_PREBUILT:-}
if [ -n "$pre" ] && [ -d "$pre" ]; then
  export LD_LIBRARY_PATH="$PWD/$pre/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Tests find their data through the source path compiled into them.
  src=$(cat "$pre/source-dir" 2>/dev/null || true)
  [ -z "$src" ] || [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; }
  # `mpx info` prints cuDNN's line only once the CUDA module has loaded (with every library it links).
  if "$pre/tools/mpx" info >"$out/prebuilt.log" 2>&1 && grep -q '^cuDNN:' "$out/prebuilt.log"; then
    bin=$pre
    echo "prebuilt binaries from commit $(cat "$pre/commit" | tr '\n' ' ')"
  else
    echo "prebuilt binaries do not run here, building:"; head -5 "$out/prebuilt.log"
  fi
fi
if [ "$bin" = build-gpu ]; then
  rm -f build-gpu/CMakeCache.txt
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$prefix" -DZLIB_INCLUDE_DIR="$prefix/include" ${zlib:+-DZLIB_LIBRARY_RELEASE="$zlib"} \
    "${cudnn[@]}" "${nvjpeg[@]}" "${nccl[@]}" "${cfe[@]}" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  grep "mpx: cuDNN\|mpx: nvJPEG\|NCCL" "$out/configure.log"
  start=$(date +%s)
  # Only what this script runs: the library, the test files with [cuda] cases, the GPU benchmarks
  # and the CLI. MPX_CUDA_TESTS="test_cuda_conv ..." narrows the tests (and skips the rest's build).
  if [ -n "${MPX_CUDA_TESTS:-}" ]; then
    targets=(mpx $MPX_CUDA_TESTS)
  else
    targets=(mpx mpx_cli bench_loader $cuda_tests $(ls bench/bench_*_cuda.cpp | xargs -n1 basename | sed 's/\.cpp$//'))
  fi
  cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1 ||
    { grep -E "error|Error" -A3 "$out/build.log" | head -60; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
fail=0
# Test programs run MPX_TEST_JOBS at a time (default 4): each is small next to the GPU, and the
# lease is short. A program's log is kept whole in tests.log.
run_one() {
  local t=$1 log=$2 t0 rc
  t0=$(date +%s)
  timeout "${MPX_TEST_TIMEOUT:-150}" "$t" "[cuda]" >"$log" 2>&1; rc=$?
  [ $rc != 124 ] || echo "TIMED OUT after ${MPX_TEST_TIMEOUT:-150} s" >>"$log"
  echo "$(basename "$t") ($(( $(date +%s) - t0 )) s, rc $rc): $(grep -E "^(All tests|test cases|TIMED)" "$log" | tail -1)" \
    >"$log.rc$rc"
}
if has tests; then
  logs=$(mktemp -d)
  for t in $cuda_tests; do
    [ -x "$bin/tests/$t" ] || continue
    [ -z "${MPX_CUDA_TESTS:-}" ] || [[ " $MPX_CUDA_TESTS " == *" $t "* ]] || continue
    while [ "$(jobs -rp | wc -l)" -ge "${MPX_TEST_JOBS:-4}" ]; do wait -n; done
    run_one "$bin/tests/$t" "$logs/$t.log" &
  done
  wait
  cat "$logs"/*.log.rc*
  ls "$logs" | grep -qv '\.rc0$\|\.log$' && fail=1
  cat "$logs"/*.log >"$out/tests.log" 2>/dev/null
  rm -rf "$logs"
fi
[ "$fail" = 0 ] || grep -B3 -A12 "FAILED" "$out/tests.log" | head -80
# What the programs write beside their output goes here: only a few files come back from a lease.
scratch=$(mktemp -d)
{
  if has gemm; then $bin/bench/bench_gemm_cuda; python3 bench/peer_gemm_cuda.py; fi
  if has amp; then $bin/bench/bench_amp_cuda; python3 bench/peer_mlp_cuda.py; fi
  if has resnet50; then $bin/bench/bench_resnet50_cuda; python3 bench/peer_resnet50_cuda.py; fi
  if has profile; then
    $bin/tools/mpx bench --device cuda --models resnet50 --opt-levels O1 --dtype f16 --batch 256 --profile \
      --out "$scratch/profile"
  fi
  if has peer-profile; then python3 bench/peer_profile_resnet50_cuda.py 256 f16; fi
  # mpx train's imagefolder layout (DIR/train/<class>/...; val/ falls back to train/)
  if has loader || has train; then $bin/bench/bench_loader --data "$scratch/jpegs/train" --generate 512 >/dev/null; fi
  if has loader; then
    for p in "gpu 1" "gpu 2" "fused 1" "fused 2"; do
      set -- $p
      $bin/bench/bench_loader --data "$scratch/jpegs/train" --path "$1" --workers "$2" --batch 64 --epochs 2
    done
  fi
  if has train; then  # one epoch of ResNet-18 on those JPEGs, decoded on the CPU, then by nvJPEG
    for g in "" --gpu-decode; do
      echo "mpx train --device cuda${g:+ $g}:"
      $bin/tools/mpx train --device cuda --dataset imagefolder --data "$scratch/jpegs" -a resnet18 --channels-last \
        -b 64 --epochs 1 --print-freq 4 $g --out "$scratch/train$g"
    done
    # DDP's path with one rank: WORLD_SIZE=1 wraps the model, its all-reduces go to NCCL (no MPI needed)
    echo "WORLD_SIZE=1 RANK=0 mpx train --device cuda (DistributedDataParallel, NCCL, one rank):"
    WORLD_SIZE=1 RANK=0 $bin/tools/mpx train --device cuda --dataset imagefolder --data "$scratch/jpegs" -a resnet18 \
      --channels-last -b 64 --epochs 1 --print-freq 4 --out "$scratch/train-ddp"
  fi
  if has headline; then  # issue 16's target rows: ResNet-50 O1/O2 eager beside PyTorch's eager AMP, then replayed
    $bin/tools/mpx bench --device cuda --models resnet50 --opt-levels O1,O2 --dtype f16,bf16 --batch 256 --peer \
      --out "$scratch/headline"
    cp "$scratch/headline/bench.md" "$out/headline.md"
    $bin/tools/mpx bench --device cuda --models resnet50 --opt-levels O1,O2 --dtype f16,bf16 --batch 256 --cuda-graph \
      --out "$scratch/headline-graph"
    cp "$scratch/headline-graph/bench.md" "$out/headline-graph.md"
  fi
  if has attention; then  # cuDNN's fused attention, mpx's flash kernels, PyTorch's SDPA
    $bin/bench/bench_attention_cuda
    MPX_SDPA_CUDNN=0 $bin/bench/bench_attention_cuda | grep -v "^path"
    python3 bench/peer_attention_cuda.py
  fi
  if has gpt; then  # issue 33's GPU rows: GPT-2 124M, context 1024
    $bin/tools/mpx bench --device cuda --models gpt2 --opt-levels O0,O1,O2 --dtype bf16 --peer --peer-compile \
      --out "$scratch/gpt"
    cp "$scratch/gpt/bench.md" "$out/gpt.md"
  fi
  if has llmc; then  # the small-codebase anchor: llm.c's own GPT-2 124M step, bf16, on a random-token shard
    llmc_src=${MPX_LLMC_SRC:-.gpu-deps/llmc}
    if [ -f "$llmc_src/train_gpt2.cu" ]; then
      rm -rf "$scratch/llmc" && cp -r "$llmc_src" "$scratch/llmc"
      # CUDA 13 takes a cudaMemLocation where older toolkits took a device number.
      sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
        "$scratch/llmc/llmc/cuda_utils.cuh"
      cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
      make -C "$scratch/llmc" train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 GPU_COMPUTE_CAPABILITY="$cc" \
        >"$scratch/llmc-build.log" 2>&1 || tail -20 "$scratch/llmc-build.log"
      # llm.c's shard format: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
      python3 -c 'import sys, array, random
n = 1 << 21
random.seed(1)
h = array.array("i", [20240520, 1, n] + [0] * 253)
t = array.array("H", (random.randrange(50257) for _ in range(n)))
with open(sys.argv[1], "wb") as f: h.tofile(f); t.tofile(f)' "$scratch/tokens.bin"
      for b in 8 16; do
        echo "llm.c train_gpt2cu -e d12 -b $b -t 1024 (bf16):"
        (cd "$scratch/llmc" && ./train_gpt2cu -e d12 -b "$b" -t 1024 -x 30 -v 1000 -s 1000 -i "$scratch/tokens.bin" \
          -j "$scratch/tokens.bin") 2>&1 | grep -E "^step|error|Error" | tail -5
      done
    else
      echo "llmc: no llm.c source at $llmc_src (see the usage above)"
    fi
  fi
  if has reduced; then  # O2 f16 with and without convolution engines that reduce in 16 bits, in turns
    for r in 0 1 0 1; do
      echo "MPX_CUDNN_REDUCED_PRECISION=$r:"
      MPX_CUDNN_REDUCED_PRECISION=$r $bin/tools/mpx bench --device cuda --models resnet50 --opt-levels O2 --dtype f16 \
        --batch 256 --out "$scratch/reduced$r" | grep '^resnet50'
    done
  fi
  if has table; then
    # f32 (O0) on TF32 on both sides, as PyTorch runs its convolutions by default: exact f32 runs
    # on the CUDA cores, and VGG-16's O0 row alone then outlasts a call.
    for graph in "" --cuda-graph; do
      models=${MPX_TABLE_MODELS:-resnet50,vgg16,dcgan}
      [ -z "$graph" ] || models=$(echo "$models" | sed 's/,*dcgan//; s/^,//')  # dcgan is not captured yet
      [ -n "$models" ] || continue
      compiled=--peer-compile
      [ -z "$graph" ] && [ "${MPX_PEER_COMPILE:-1}" != 0 ] || compiled=""  # torch.compile's columns once, beside the eager rows
      $bin/tools/mpx bench --device cuda --models $models --dtype f16,bf16 --batch 256 --tf32 $graph --peer $compiled \
        --out "$scratch/table${graph:+-graph}"
      cp "$scratch/table${graph:+-graph}/bench.md" "$out/table${graph:+-graph}.md"
    done
  fi
} 2>&1 | tee "$out/bench.log" | grep -v "^csv,"
exit $fail
