#!/usr/bin/env bash
# Builds the CPU library, the CLI and the tests with AddressSanitizer + UndefinedBehaviorSanitizer (leaks
# included) and runs the test suite: tools/sanitize.sh [BUILD_DIR] [extra ctest arguments...].
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
shift || true
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# CUDA, MPI and the fuzz sub-build stay out: their runtimes are not instrumented and report their own
# allocations; the fuzz targets carry the sanitizers themselves.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPX_CUDA=OFF -DMPX_DISTRIBUTED=OFF \
  -DMPX_FUZZ_TESTS=OFF -DMPX_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$san" -DCMAKE_C_FLAGS="$san" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
start=$(date +%s)
# install_consumer links an uninstrumented program against the instrumented library: not a sanitizer run.
ctest --test-dir "$dir" -j"$(nproc)" --output-on-failure --timeout 3600 -E install_consumer "$@"
echo "sanitized test run: $(( $(date +%s) - start )) s"
