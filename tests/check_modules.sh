#!/usr/bin/env bash
# Checks that no engine module (libmpx_cuda.so, libmpx_mpi.so) defines a function libmpx.so also
# defines: the module's own calls to it would bind to libmpx's copy (libmpx is loaded first), and a
# libmpx function that forwards to the module would then call itself.
# Usage: tests/check_modules.sh LIBMPX MODULE...
set -euo pipefail
lib=$1
shift
strong() { nm -D --defined-only "$1" | awk '$2 == "T" {print $3}' | sort -u; }
status=0
for m in "$@"; do
  both=$(comm -12 <(strong "$lib") <(strong "$m"))
  if [ -n "$both" ]; then
    echo "$(basename "$m") defines functions libmpx.so defines too (give the module's its own names):" >&2
    echo "$both" | c++filt | head -20 >&2
    status=1
  else
    echo "$(basename "$m"): $(strong "$m" | wc -l) functions of its own, none shared with libmpx.so"
  fi
done
exit $status
