#!/usr/bin/env bash
# Data-parallel scaling on the CPU: bench_ddp_cpu at 1 rank, 2 independent ranks and 2 DDP ranks,
# one thread each, repeated in turns. The best of each is reported (other load only slows runs down),
# and the median over turns beside it (one lucky turn can make the best of one setting).
# usage: bench/run_ddp_cpu.sh BUILD_DIR [REPEATS] [extra bench_ddp_cpu flags]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [REPEATS] [flags]}
reps=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
extra=("$@")
bin=$build/bench/bench_ddp_cpu
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() { mpirun -np "$1" --oversubscribe --bind-to none "$bin" "${@:2}" | tail -1; }
declare -A best all
for ((i = 0; i < reps; ++i)); do
  for cfg in "1" "2 --no-ddp" "2"; do
    set -- $cfg
    line=$(run "$@" ${extra[@]+"${extra[@]}"} 2>/dev/null || true)
    echo "$line"
    ips=$(sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p' <<<"$line")
    key=$cfg
    [[ -n $ips ]] && all[$key]+="$ips "
    if [[ -n $ips ]] && awk -v a="$ips" -v b="${best[$key]:-0}" 'BEGIN { exit !(a > b) }'; then best[$key]=$ips; fi
  done
done
# report WHAT ONE INDEP DDP: the three figures and the scaling they give.
report() {
  echo "$1 images/s: 1 rank $2, 2 independent ranks $3, 2 DDP ranks $4"
  awk -v w="$1" -v o="$2" -v i="$3" -v d="$4" 'BEGIN {
    if (o > 0) printf "%s scaling efficiency at 2 ranks: %.0f %% of 2 x one rank", w, 100 * d / (2 * o);
    if (i > 0) printf "; %.0f %% of 2 independent ranks (communication cost alone)", 100 * d / i;
    print "" }'
}
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print 0 }'; }
report best "${best[1]:-0}" "${best[2 --no-ddp]:-0}" "${best[2]:-0}"
report median "$(median "${all[1]:-}")" "$(median "${all[2 --no-ddp]:-}")" "$(median "${all[2]:-}")"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
