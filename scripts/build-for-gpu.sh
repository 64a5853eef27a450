#!/usr/bin/env bash
# build-for-gpu.sh — the build that travels to the GPU machine (which has no libdwarf, libelf or
# Criterion): release flags, static libdwarf/libelf, no tests. Run it here, then on the device:
#   scripts/gpu-check.sh build-gpu      (the device tool carries build-gpu along)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTRACE_TESTS=OFF > /dev/null
cmake --build build-gpu -j"$(nproc)" 2>&1 | grep -Ev '^\[|^-- ' || true
for f in build-gpu/src/cli/memtrace build-gpu/src/record/libmemtrace_inject.so build-gpu/samples/alloc_patterns; do
  test -f "$f" || { echo "build-for-gpu: $f was not built" >&2; exit 1; }
done
ldd build-gpu/src/cli/memtrace | grep -E 'dwarf|elf' && { echo "build-for-gpu: memtrace links libdwarf/libelf dynamically" >&2; exit 1; }
# the sink benchmark (tests/ is not built here: it needs Criterion), for a machine with more cores
cc -O2 -Iinclude -Isrc tests/bench/bench_sink.c build-gpu/src/record/libmt_record_core.a \
   build-gpu/src/trace/libmt_trace.a -lz -lpthread -ldl -o build-gpu/bench_sink
du -sh build-gpu | cut -f1
