#!/usr/bin/env bash
# Runs every fuzz target for longer and summarizes: fuzz/run_all.sh [SECONDS per target, default 600] [BUILD_DIR, default build].
# The targets are those the main build made in BUILD_DIR/fuzz-build/fuzz; each run's log goes to BUILD_DIR/fuzz-logs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=${1:-600}
build=${2:-$here/../build}
logs=$build/fuzz-logs
mkdir -p "$logs"
status=0
for name in safetensors idx cifar10 image checkpoint_meta token_shard; do
  bin=$build/fuzz-build/fuzz/fuzz_$name
  (cd "$logs" && bash "$here/run.sh" "$bin" "$name" "$seconds") > "$logs/$name.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$logs/$name.log" | grep -o '[0-9]*$')
  peak=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$logs/$name.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$logs/$name.log" | tail -1 | grep -o '[0-9]*')
  printf '%-16s %s  %10s execs  cov %6s  peak RSS %5s MB\n' "$name" "$([ $rc -eq 0 ] && echo clean || echo FOUND)" \
    "${execs:-?}" "${cov:-?}" "${peak:-?}"
done
exit $status
