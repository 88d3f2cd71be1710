#!/usr/bin/env bash
# Builds mpx with sanitizers and runs its tests: tools/sanitize.sh [--thread] [BUILD_DIR] [extra ctest arguments...].
#
# Default: AddressSanitizer + UndefinedBehaviorSanitizer (leaks included) over the CPU library with
# MPI, the CLI and every test, in BUILD_DIR (build-asan); the multi-rank tests run under mpirun as
# in a normal build, each rank instrumented. --thread: ThreadSanitizer (BUILD_DIR build-tsan) over
# the code with threads: the data loader and its prefetcher, the gradient hooks, and the process
# group and DDP reducer (a worker thread owns every MPI call) at 1 and 2 ranks.
# MPX_SANITIZE_TARGETS="t1 t2 ..." builds only those targets (the default run builds everything).
# MPX_SANITIZE_JOBS=N: parallel build and test jobs (default: nproc); 1 keeps a shared machine usable.
# Open MPI is not instrumented: what it allocates for the life of the process and its own threads'
# locking are suppressed with tools/sanitize-openmpi.supp (LSan) and tools/tsan-openmpi.supp (TSan),
# each entry explained there; mpx's own code is never suppressed.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=address
if [ "${1:-}" = --thread ]; then
  mode=thread
  shift
fi
dir=${1:-build-$([ $mode = thread ] && echo tsan || echo asan)}
shift || true
jobs=${MPX_SANITIZE_JOBS:-$(nproc)}
if [ $mode = thread ]; then
  san="-fsanitize=thread -fno-omit-frame-pointer"
  link="-fsanitize=thread"
  targets=${MPX_SANITIZE_TARGETS:-test_data test_hooks test_distributed test_distributed_ddp test_distributed_syncbn}
else
  san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  link="-fsanitize=address,undefined"
  targets=${MPX_SANITIZE_TARGETS:-all}
fi
# CUDA and the fuzz sub-build stay out: the CUDA runtime is not instrumented and reports its own
# allocations; the fuzz targets carry the sanitizers themselves. MPI is ON (not AUTO): a machine
# without Open MPI fails here instead of passing a run that never started a second rank.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPX_CUDA=OFF -DMPX_DISTRIBUTED=ON \
  -DMPX_FUZZ_TESTS=OFF -DMPX_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$san" -DCMAKE_C_FLAGS="$san" \
  -DCMAKE_EXE_LINKER_FLAGS="$link" -DCMAKE_SHARED_LINKER_FLAGS="$link" -DCMAKE_MODULE_LINKER_FLAGS="$link"
# shellcheck disable=SC2086  # a list of targets
cmake --build "$dir" -j"$jobs" --target $targets

supp=$PWD/tools
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The documented commands (docs_commands) run instrumented too, several times slower: a longer
# per-command limit than the plain build's 300 s.
export MPX_DOC_COMMAND_TIMEOUT=${MPX_DOC_COMMAND_TIMEOUT:-1800}
# Multi-rank tests and test_cli_ddp start their ranks with mpirun, which passes this environment on.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
if [ $mode = thread ]; then
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan-openmpi.supp}
  # OMP_NUM_THREADS=1 (CTest sets it for every Catch2 case): libgomp is not instrumented, so
  # TSan cannot see its barriers and would report every parallel loop; the threads checked here
  # are mpx's own.
  select='DataLoader|Loader transforms|DevicePrefetcher|hook|queue_callback|process group|all_reduce|broadcast|'
  select+='collectives|DDP|no_sync|overflow on one rank|GradScaler|SyncBatchNorm|convert_sync_batchnorm|_np2$'
  ctest --test-dir "$dir" -j"$jobs" --output-on-failure --timeout 3600 -R "$select" "$@"
else
  # fast_unwind_on_malloc=0: Open MPI's components are shared objects it unloads in MPI_Finalize,
  # so the frame-pointer unwinder leaves their allocations without the libmpi/libopen-* frames
  # the suppressions name; the full unwinder records them.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/sanitize-openmpi.supp:print_suppressions=0}
  # install_consumer links an uninstrumented program against the instrumented library: not a sanitizer run.
  ctest --test-dir "$dir" -j"$jobs" --output-on-failure --timeout 3600 -E install_consumer "$@"
fi
echo "sanitized ($mode) test run: $(( $(date +%s) - start )) s"
