#!/usr/bin/env bash
# speed-against.sh REV [EVENTS] [ROUNDS]: is this tree's analysis slower than REV's?
#
# Builds REV (a commit, tag or branch) in a worktree under build-ref/, writes two synthetic traces
# of EVENTS events (default 10 M: without and with tensors, `bench_compact --write`, kept in
# $TMPDIR between runs), then times `memtrace report` of each trace with both builds, ROUNDS times
# (default 8), the builds taking turns so that the machine's drift falls on both, and prints each
# build's median and the ratio. Last, it says whether both builds print the same `report --json`.
#
# Why: the analysis is the part of memtrace whose speed issue 17 asks for (docs/performance.md,
# "The analysis"), and a change that is right can still make every event slower: 07ca86f put a
# path no real trace takes into the inlined allocation path and cost 4% unseen for two sessions.
# Run it before landing a change to src/compact, src/trace or exporters/. On a shared 2-core VM
# rounds of one build spread by 5-15%: read the medians, and run it again before believing 3%.
#
# The tree's own build is build/ (scripts/setup.sh); its memtrace and bench_compact are rebuilt.
# The other commit's worktree stays for the next run: `git worktree remove --force build-ref/SHA`.
set -euo pipefail
REV=${1:?usage: speed-against.sh REV [EVENTS] [ROUNDS]}
EVENTS=${2:-10000000}
ROUNDS=${3:-8}
cd "$(dirname "$0")/.."
ROOT=$PWD
SHA=$(git rev-parse --short "$REV^{commit}")
REF=$ROOT/build-ref/$SHA
TMP=${TMPDIR:-/tmp}

cmake --build build -j"$(nproc)" --target memtrace bench_compact > /dev/null
# Each build as its own scripts/setup.sh makes it: with a profile of its own runs where the tree has
# scripts/pgo-build.sh (from the fourteenth round on: 8-18% faster), else plain. Said in the first
# line of the output, since two builds made differently differ by more than most changes.
how() { grep -q '^MEMTRACE_PGO:STRING=use' "$1/CMakeCache.txt" 2> /dev/null && echo profile || echo plain; }
if [ ! -x "$REF/build/src/cli/memtrace" ]; then
    rm -rf "$REF"
    git worktree add -f --detach "$REF" "$SHA" > /dev/null 2>&1
    if [ -f "$REF/scripts/pgo-build.sh" ]; then
        bash "$REF/scripts/pgo-build.sh" build > /dev/null
    else
        cmake -S "$REF" -B "$REF/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
        cmake --build "$REF/build" -j"$(nproc)" --target memtrace > /dev/null
    fi
fi

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
seconds() { # BIN TRACE: wall seconds of one `report`
    local t0 t1
    t0=$(date +%s.%N)
    "$1" report "$2" > /dev/null
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.4f\n", b - a}'
}

echo "this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src exporters include || echo ', changed'), built $(how build)) against $SHA (built $(how "$REF/build")); $EVENTS events, $ROUNDS rounds"
for kind in plain tensors; do
    trace=$TMP/speed-against.$kind.$EVENTS.mtrace
    if [ ! -s "$trace" ]; then
        flag=""
        [ $kind = tensors ] && flag=--tensors
        build/tests/bench_compact --write "$trace" --events "$EVENTS" $flag > /dev/null 2>&1
    fi
    : > "$TMP/speed-against.new" && : > "$TMP/speed-against.old"
    for _ in $(seq "$ROUNDS"); do
        seconds build/src/cli/memtrace "$trace" >> "$TMP/speed-against.new"
        seconds "$REF/build/src/cli/memtrace" "$trace" >> "$TMP/speed-against.old"
    done
    new=$(median < "$TMP/speed-against.new")
    old=$(median < "$TMP/speed-against.old")
    same=differ
    cmp -s <(build/src/cli/memtrace report --json "$trace") \
        <("$REF/build/src/cli/memtrace" report --json "$trace") && same=same
    awk -v k=$kind -v n="$new" -v o="$old" -v e="$EVENTS" -v r="$SHA" -v s=$same 'BEGIN {
        printf "%-8s this tree %.3f s (%.1f M events/s), %s %.3f s: %+.1f%%; report --json: %s\n",
               k, n, e / n / 1e6, r, o, (n / o - 1) * 100, s }'
done
