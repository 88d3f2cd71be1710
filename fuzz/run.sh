#!/usr/bin/env bash
# Runs one fuzz target for a while from its committed seeds: fuzz/run.sh BINARY NAME SECONDS [libFuzzer flags...].
# Exit 0 when nothing was found; a finding leaves its input (crash-*, oom-*, timeout-*) in the working folder.
set -euo pipefail
bin=$1 name=$2 seconds=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$bin" ] || { echo "fuzz/run.sh: no fuzz target at $bin (from $PWD); build the main tree first, which makes them in BUILD_DIR/fuzz-build/fuzz" >&2; exit 1; }
corpus=$(mktemp -d)
# The targets' scratch files go to a folder of this run's own, so runs side by side never share one,
# in memory where /dev/shm exists: a target rewrites its file for every input, and on a disk file
# system each rewrite is written out to the disk (block-device work showed in profiles of fuzz_image).
shm=/dev/shm
{ [ -d "$shm" ] && [ -w "$shm" ]; } || shm=${TMPDIR:-/tmp}
scratch=$(mktemp -d "$shm/mpx-fuzz.XXXXXX")
trap 'rm -rf "$corpus" "$scratch"' EXIT
export TMPDIR=$scratch
cp "$here/corpus/$name"/* "$corpus/"
dict=()
case $name in safetensors|checkpoint_meta) dict=(-dict="$here/safetensors.dict") ;; esac
# Memory bound: every parser's allocation must stay far below this for inputs of max_len bytes.
export OMP_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
"$bin" "$corpus" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
  -max_len=65536 -print_final_stats=1 "$@"
