#!/bin/bash
# Images/s of short `mpx train` runs (small CNN, Fashion-MNIST, 6,400 images) per OpenMP setting, idle or beside one busy loop.
# usage: bench/run_threads_shared.sh BUILD_DIR idle|busy REPS SETTING...
#   SETTING: comma-separated VAR=VALUE pairs put in the environment ("-" for none), e.g.
#   bench/run_threads_shared.sh build busy 5 OMP_NUM_THREADS=2,GOMP_SPINCOUNT=300000 OMP_NUM_THREADS=1 -
# Prints the median and the sorted values of each setting; the runs are interleaved so that a
# change in the machine's load hits every setting alike.
set -u
M="$1/tools/mpx"; LOAD=$2; REPS=$3; shift 3
OUT=$(mktemp -d)
one() {
  local envs=()
  [ "$1" != "-" ] && IFS=',' read -ra envs <<< "$1"
  env "${envs[@]}" "$M" train --limit-train 6400 --limit-test 128 -b 128 --epochs 1 --overwrite --out "$OUT" 2>&1 |
    grep -a "^epoch 1/1:" | sed 's/.*| \([0-9]*\) img\/s.*/\1/'
}
busy=
if [ "$LOAD" = busy ]; then timeout 1800 sh -c 'while :; do :; done' & busy=$!; sleep 0.5; fi
declare -A res
for _ in $(seq "$REPS"); do
  for cfg in "$@"; do res[$cfg]="${res[$cfg]:-} $(one "$cfg")"; done
done
[ -n "$busy" ] && kill "$busy"
for cfg in "$@"; do
  sorted=$(echo ${res[$cfg]} | tr ' ' '\n' | sort -n | tr '\n' ' ')
  echo "$LOAD $cfg: median $(echo $sorted | tr ' ' '\n' | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}') [$sorted]"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$OUT"
