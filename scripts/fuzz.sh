#!/usr/bin/env bash
# fuzz.sh — build the libFuzzer harnesses (tests/fuzz) with clang into ./build-fuzz and run them
# over a seed corpus made from the committed traces (tests/data) and the hostile cases, and the
# inputs that once failed (tests/fuzz/regressions/<harness>/, run first every time).
#
#   scripts/fuzz.sh                 CI: each harness for FUZZ_SECONDS (default 60) seconds
#   scripts/fuzz.sh RUNS [JOBS]     a long run: RUNS executions per harness, harnesses side by side
#                                   (JOBS processes each, default 1); corpus kept in build-fuzz/corpus
#
# Every harness runs with -rss_limit_mb=512 (and so a 512 MiB malloc limit), -timeout=1 (an input
# taking over 1 s is a failure) and leak detection; any crash, leak, timeout or memory excess
# fails the script, and the input is left in build-fuzz/artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang > /dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
        > /dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-dev > /dev/null
fi
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRACE_FUZZ=ON > /dev/null
cmake --build build-fuzz -j"$(nproc)" > /dev/null
B=build-fuzz/tests/fuzz
mkdir -p build-fuzz/seeds/file build-fuzz/seeds/payload build-fuzz/corpus/file \
         build-fuzz/corpus/payload build-fuzz/artifacts
"$B/make_seeds" build-fuzz/seeds/file build-fuzz/seeds/payload tests/data/*.mtrace
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
common=(-rss_limit_mb=512 -timeout=1 -max_len=4096 -print_final_stats=1
        -artifact_prefix=build-fuzz/artifacts/)
status=0
if [ $# -eq 0 ]; then
    for h in file payload; do
        echo "fuzz_trace_$h: ${FUZZ_SECONDS:-60} s"
        "$B/fuzz_trace_$h" "${common[@]}" -max_total_time="${FUZZ_SECONDS:-60}" \
            build-fuzz/corpus/$h build-fuzz/seeds/$h tests/fuzz/regressions/$h \
            > build-fuzz/fuzz_$h.log 2>&1 || status=1
        grep -E "^Done|stat::(number_of_executed_units|slowest_unit_time_sec|peak_rss_mb)" \
            build-fuzz/fuzz_$h.log || true
        [ $status = 0 ] || { tail -40 build-fuzz/fuzz_$h.log; exit 1; }
    done
    exit 0
fi
runs=$1 jobs=${2:-1}
pids=()
for h in file payload; do
    if [ "$jobs" -gt 1 ]; then par=(-jobs="$jobs" -workers="$jobs"); else par=(); fi
    "$B/fuzz_trace_$h" "${common[@]}" -runs="$runs" "${par[@]}" \
        build-fuzz/corpus/$h build-fuzz/seeds/$h tests/fuzz/regressions/$h > build-fuzz/fuzz_$h.log 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
for h in file payload; do
    echo "fuzz_trace_$h:"
    grep -E "^Done|stat::(number_of_executed_units|average_exec_per_sec|slowest_unit_time_sec|peak_rss_mb)" \
        build-fuzz/fuzz_$h.log || tail -20 build-fuzz/fuzz_$h.log
done
exit $status
