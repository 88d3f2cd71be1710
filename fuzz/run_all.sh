#!/usr/bin/env bash
# Runs every fuzz target for longer and summarizes: fuzz/run_all.sh [SECONDS per target, default 600] [BUILD_DIR, default build].
# The targets are those the main build made in BUILD_DIR/fuzz-build/fuzz; each run's log goes to BUILD_DIR/fuzz-logs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=${1:-600}
build=${2:-$here/../build}
[ -d "$build" ] || { echo "fuzz/run_all.sh: no build folder $build (give the main build's folder, e.g. build)" >&2; exit 1; }
# Absolute, because each target runs from the log folder (where libFuzzer leaves its findings),
# so a folder given relative to the caller's working directory would no longer resolve there.
build=$(cd "$build" && pwd)
logs=$build/fuzz-logs
mkdir -p "$logs"
status=0
# A figure of libFuzzer's final statistics in a target's log (-a: a log may hold an input's bytes).
final_stat() { grep -ao "stat::$2: *[0-9]*" "$logs/$1.log" | tail -1 | grep -o '[0-9]*$'; }
for name in safetensors idx cifar10 image checkpoint_meta token_shard; do
  bin=$build/fuzz-build/fuzz/fuzz_$name
  (cd "$logs" && bash "$here/run.sh" "$bin" "$name" "$seconds") > "$logs/$name.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  execs=$(final_stat "$name" number_of_executed_units) rate=$(final_stat "$name" average_exec_per_sec)
  peak=$(final_stat "$name" peak_rss_mb)
  cov=$(grep -ao 'cov: [0-9]*' "$logs/$name.log" | tail -1 | grep -o '[0-9]*')
  result=clean
  [ $rc -eq 0 ] || result="FOUND (see $logs/$name.log)"
  [ -x "$bin" ] || result="NOT BUILT ($bin)"
  printf '%-16s %10s execs  %7s execs/s  cov %6s  peak RSS %5s MB  %s\n' "$name" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "${peak:-?}" "$result"
done
exit $status
