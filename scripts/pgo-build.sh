#!/usr/bin/env bash
# pgo-build.sh [BUILD]: builds memtrace into BUILD (default: build) with the analysis optimized by a
# profile of its own runs (CMakeLists.txt, MEMTRACE_PGO), in three steps:
#   1. build-pgo/: the analysis instrumented (memtrace and bench_compact only);
#   2. its runs on training traces (scripts/pgo-train.sh) write the profile to build-pgo/profile;
#   3. BUILD, everything, the analysis' libraries compiled with that profile.
# scripts/setup.sh calls it: the tests, CI's among them, run on this build. The profile is made
# anew every time from the tree as it is, so it always matches the sources; after an edit, a plain
# `cmake --build BUILD` still works (the edited files' functions lose their profile, a warning)
# until this runs again. Why: each command took 8-18% less time on 10 M synthetic events than built
# plain, with the same output (docs/performance.md, "Fourteenth round").
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
GEN=$PWD/build-pgo
PROFILE=$GEN/profile
rm -rf "$PROFILE" "$GEN/train"
cmake -S . -B "$GEN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
      -DMEMTRACE_PGO=generate -DMEMTRACE_PGO_DIR="$PROFILE" > /dev/null
cmake --build "$GEN" -j"$(nproc)" --target memtrace bench_compact > /dev/null
bash scripts/pgo-train.sh "$GEN"
test -n "$(ls "$PROFILE" 2> /dev/null)" || { echo "pgo-build: the training wrote no profile" >&2; exit 1; }
date > "$PROFILE/trained.stamp" # what the analysis' objects depend on in BUILD (CMakeLists.txt)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
      -DMEMTRACE_PGO=use -DMEMTRACE_PGO_DIR="$PROFILE"
cmake --build "$BUILD" -j"$(nproc)"
