#!/usr/bin/env bash
# sanitize.sh — the test suite once more, built with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DMEMTRACE_SANITIZE=ON) into ./build-asan. Any memory error, leak or undefined behaviour fails a
# test. Run after scripts/setup.sh (same packages).
#
# verify_asan_link_order=0: test_cli_record preloads the (instrumented) recorder library into
# ordinary programs such as sh, where the sanitizer runtime cannot come first.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRACE_SANITIZE=ON \
      -DCUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" > /dev/null
cmake --build build-asan -j"$(nproc)" > /dev/null
export ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
ctest --test-dir build-asan --output-on-failure
