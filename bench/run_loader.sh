#!/usr/bin/env bash
# Times mpx's input pipeline and torchvision's on the same generated JPEG folder, interleaved
# (mpx, peer, mpx, peer, ...) so shared-machine noise hits both, and prints medians and ratios.
# Usage: [DATA=dir] [TRANSFORM=train|eval] bench/run_loader.sh [build-dir] [rounds] [images]
# The peer needs torchvision (Debian: apt-get install python3-torchvision).
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
images=${3:-400}
transform=${TRANSFORM:-train}
here=$(cd "$(dirname "$0")" && pwd)
py=python3
for p in python3 /usr/bin/python3; do  # the first with torchvision; else peer_loader.py's PIL peer
  if "$p" -c 'import torchvision' 2>/dev/null; then py=$p; break; fi
done
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
    "$build/bench/bench_loader" --data "$data" --workers "$w" --transform "$transform" --json | tee -a "$out"
    "$py" "$here/peer_loader.py" --data "$data" --workers "$w" --transform "$transform" --json | tee -a "$out" || true
  done
done
"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for key, what in (("images_per_s_per_core", "images/s per worker"), ("images_per_cpu_s", "images per CPU-second")):
    for w in (1, 2):
        m = [r[key] for r in rows if r["impl"] == "mpx" and r["workers"] == w]
        t = [r[key] for r in rows if r["impl"] != "mpx" and r["workers"] == w]
        peer = next((r["impl"] for r in rows if r["impl"] != "mpx"), "peer")
        if not m:
            continue
        line = f"workers={w} {what}: mpx {statistics.median(m):.1f} (runs {m})"
        if t:
            line += (f", {peer} {statistics.median(t):.1f} (runs {t}), "
                     f"ratio {statistics.median(m) / statistics.median(t):.2f}x")
        print(line)
PY
rm -f "$out"
