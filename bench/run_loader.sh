#!/usr/bin/env bash
# Times mpx's input pipeline and torchvision's on the same generated JPEG folder, interleaved
# (mpx, peer, mpx, peer, ...) so shared-machine noise hits both, and prints medians and ratios.
# Usage: [DATA=dir] [TRANSFORM=train|eval] [PATHS="compose fused ..."] [PEERS="python ..."] [BATCH=n]
#        bench/run_loader.sh [build-dir] [rounds] [images]
# PATHS: bench_loader's --path values (default: fused); "compose" is a user's torchvision-style
# Compose, unchanged. PEERS: Python interpreters to run bench/peer_loader.py with, each its own
# torchvision (default: the first of python3, /usr/bin/python3 that has torchvision; Debian's is
# apt-get install python3-torchvision, a current one pip install torchvision pillow in a venv).
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
images=${3:-400}
transform=${TRANSFORM:-train}
paths=${PATHS:-fused}
batch=${BATCH:-32}
here=$(cd "$(dirname "$0")" && pwd)
peers=${PEERS:-}
if [[ -z "$peers" ]]; then
  peers=python3
  for p in python3 /usr/bin/python3; do  # the first with torchvision; else peer_loader.py's PIL peer
    if "$p" -c 'import torchvision' 2>/dev/null; then peers=$p; break; fi
  done
fi
if [[ -n "${DATA:-}" ]]; then
  data=$DATA  # a folder from an earlier run (or real images): root/<class>/<image>
else
  data=$(mktemp -d)
  trap 'rm -rf "$data"' EXIT
  "$build/bench/bench_loader" --data "$data" --generate "$images"
fi
out=$(mktemp)
for r in $(seq "$rounds"); do
  for w in 1 2; do
    for p in $paths; do
      "$build/bench/bench_loader" --data "$data" --workers "$w" --transform "$transform" --path "$p" --batch "$batch" \
        --json | tee -a "$out"
    done
    for py in $peers; do
      "$py" "$here/peer_loader.py" --data "$data" --workers "$w" --transform "$transform" --batch "$batch" --json \
        | tee -a "$out" || true
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def name(r):
    return f"mpx --path {r['path']} ({r.get('runs', '?')})" if r["impl"] == "mpx" else f"{r['impl']} {r['version']}"
names = list(dict.fromkeys(name(r) for r in rows))
for key, what in (("images_per_s_per_core", "images/s per worker"), ("images_per_cpu_s", "images per CPU-second")):
    for w in (1, 2):
        med = {n: statistics.median([r[key] for r in rows if name(r) == n and r["workers"] == w] or [0]) for n in names}
        print(f"workers={w} {what}:")
        peers = [n for n in names if not n.startswith("mpx")]
        for n in names:
            runs = [r[key] for r in rows if name(r) == n and r["workers"] == w]
            line = f"  {n}: {med[n]:.1f} (runs {runs})"
            if n.startswith("mpx"):
                line += "".join(f", {med[n] / med[p]:.2f}x {p}" for p in peers if med[p] > 0)
            print(line)
PY
rm -f "$out"
