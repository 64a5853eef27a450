#!/usr/bin/env bash
# pgo-train.sh BUILD: the training runs of a profile-guided build (scripts/pgo-build.sh). BUILD is
# an instrumented build (MEMTRACE_PGO=generate); each run of its memtrace adds to the profile.
#
# What is run is what users run, on what they run it on: every report and export format, on two
# synthetic traces of 1 M events (bench_compact --write: a program's cudaMalloc/cudaFree stream,
# and tensor mode's), which weigh the per-event paths as the 10 M-event benchmark does, and on
# every GPU-recorded fixture in tests/data (tensors, categories, DDP/FSDP ranks, OOMs, graphs,
# killed processes), which reach the paths the synthetic stream never takes. The profile only
# decides how the code is laid out and inlined; a path the training misses is compiled as
# without one (-fprofile-partial-training), so no trace reads differently, or slower than in a
# plain build, for want of training.
set -euo pipefail
BUILD=${1:?usage: pgo-train.sh BUILD}
cd "$(dirname "$0")/.."
M=$BUILD/src/cli/memtrace
TRAIN=$BUILD/train
mkdir -p "$TRAIN"
"$BUILD/tests/bench_compact" --write "$TRAIN/plain.mtrace" --events 1000000 > /dev/null
"$BUILD/tests/bench_compact" --write "$TRAIN/tensors.mtrace" --events 1000000 --tensors > /dev/null

# every command of one trace (its outputs are thrown away: only the runs count)
one() {
    set +e # a trace the analysis refuses, a gate that fails: runs like the others
    local t=$1 m=$2
    "$m" report "$t"
    "$m" report --json "$t"
    "$m" report --by-line "$t"
    "$m" report --markdown --top 20 "$t"
    "$m" export --format folded "$t"
    "$m" export --format folded --metric leak "$t"
    "$m" export --format speedscope "$t"
    "$m" export --format chrome "$t"
    "$m" export --format html "$t"
    "$m" check --json --max-peak 1g "$t"
    return 0
}
export -f one
# the synthetic traces on the reader's two threads (as `report` reads any trace of more than a
# few chunks) and once on one
for t in "$TRAIN/plain.mtrace" "$TRAIN/tensors.mtrace"; do
    one "$t" "$M" > /dev/null 2>&1
    MEMTRACE_READ_THREAD=0 "$M" report "$t" > /dev/null 2>&1
done
# the fixtures, one process a CPU (libgcov merges each process's counts into the profile under a
# lock)
ls tests/data/*.mtrace | xargs -P "$(nproc)" -I{} bash -c 'one "$1" "$2" > /dev/null 2>&1' _ {} "$M"
# several traces at once: a job's ranks, and two runs compared
"$M" report tests/data/ddp_oom_rank0.mtrace tests/data/ddp_oom_rank1.mtrace > /dev/null
"$M" report --json tests/data/ddp_oom_rank0.mtrace tests/data/ddp_oom_rank1.mtrace > /dev/null
"$M" diff tests/data/cifar_tensors.mtrace tests/data/cifar_tensors_b512.mtrace > /dev/null
