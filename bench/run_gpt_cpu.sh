#!/usr/bin/env bash
# The GPT CPU comparison: mpx's bench_gpt_cpu and the PyTorch peer, alternated, at 1 and 2 threads, f32 and bf16 autocast.
# Usage: bench/run_gpt_cpu.sh BUILD_DIR PYTHON [STEPS] [MODEL]   (PYTHON: an interpreter with torch and safetensors)
set -euo pipefail
build=${1:?usage: bench/run_gpt_cpu.sh BUILD_DIR PYTHON [STEPS] [MODEL]}
py=${2:?usage: bench/run_gpt_cpu.sh BUILD_DIR PYTHON [STEPS] [MODEL]}
steps=${3:-300}
model=${4:-gpt-tiny}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
"$build/bench/bench_gpt_cpu" --model "$model" --steps 1 --warmup 0 --dir "$dir" --write >/dev/null
grep -m1 -o 'model name.*' /proc/cpuinfo || true
echo "cpu flags: $(grep -m1 -o -w -E 'avx512f|avx512_bf16|amx_bf16|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for threads in 1 2; do
  for dtype in f32 bf16; do
    OMP_NUM_THREADS=$threads "$build/bench/bench_gpt_cpu" --model "$model" --steps "$steps" --dtype "$dtype" --dir "$dir"
    OMP_NUM_THREADS=$threads "$py" "$here/peer_gpt_cpu.py" --model "$model" --steps "$steps" --dtype "$dtype" --dir "$dir"
  done
done
