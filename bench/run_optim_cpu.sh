#!/usr/bin/env bash
# One optimizer step over the same 14.2 M f32 parameters in mpx and in PyTorch, at 1 and 2 threads, twice each
# (alternated, so a change in the machine's load hits both alike).
# Usage: bench/run_optim_cpu.sh [build-dir] [python-with-torch]
set -euo pipefail
build=${1:-build}
py=${2:-python3}
here=$(dirname "$0")
for round in 1 2; do
  for t in 1 2; do
    echo "== round $round, $t thread(s)"
    OMP_NUM_THREADS=$t "$build/bench/bench_optim_cpu" --reps 20
    OMP_NUM_THREADS=$t "$build/bench/bench_optim_cpu" --reps 20 --dtype bf16 --only sgd,adamw,lamb
    OMP_NUM_THREADS=$t "$py" -W ignore "$here/peer_optim_cpu.py" --reps 20 --threads "$t"
  done
done
