#!/usr/bin/env bash
# Runs the mpx and PyTorch CPU ResNet-18 training benchmarks side by side and prints the ratio.
# Usage: bench/run_resnet18_cpu.sh [build-dir] [steps]
set -euo pipefail
build=${1:-build}
steps=${2:-10}
threads=${OMP_NUM_THREADS:-$(nproc)}
mpx_json=$(OMP_NUM_THREADS=$threads "$build/bench/bench_resnet18_cpu" --steps "$steps" --json)
torch_json=$(/usr/bin/python3 "$(dirname "$0")/peer_resnet18_cpu.py" --steps "$steps" --threads "$threads" --json)
echo "$mpx_json"
echo "$torch_json"
/usr/bin/python3 - "$mpx_json" "$torch_json" <<'PY'
import json, sys
m, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
key = lambda d: d.get("images_per_s") or d.get("images_per_s_median")
print(f"mpx {key(m):.1f} images/s, PyTorch {key(t):.1f} images/s, ratio mpx/PyTorch = {key(m) / key(t):.2f}")
PY
