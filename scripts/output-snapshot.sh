#!/usr/bin/env bash
# output-snapshot.sh MEMTRACE OUTDIR [TRACE...]: every output memtrace makes of each trace (default:
# the GPU-recorded fixtures in tests/data), one file per (trace, command), so that two builds can
# be compared byte for byte: `diff -r OLD NEW`. Used to check that a change to the reader or the
# analysis leaves every report as it was (docs/trace-format.md, issue 17). Options that change with
# the build (the version in otherData) are left as they are: compare builds of one version.
set -uo pipefail
M=$1
OUT=$2
shift 2
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then set -- tests/data/*.mtrace; fi
mkdir -p "$OUT"
for t in "$@"; do
    b=$(basename "$t" .mtrace)
    run() { # NAME ARGS...: stdout, then the exit status and stderr
        local name=$1
        shift
        "$M" "$@" > "$OUT/$b.$name" 2> "$OUT/$b.$name.err"
        echo "exit $?" >> "$OUT/$b.$name.err"
    }
    run report.json report --json "$t"
    run report.txt report "$t"
    run report.all.txt report --frames all --full-stacks --top 50 "$t"
    run by-line.json report --json --by-line "$t"
    run by-line.txt report --by-line "$t"
    run report.md report --markdown "$t"
    run folded export --format folded "$t"
    run folded.alloc export --format folded --metric alloc "$t"
    run folded.end export --format folded --metric end "$t"
    run folded.leak export --format folded --metric leak "$t"
    run folded.category export --format folded --by category "$t"
    run speedscope export --format speedscope "$t"
    run chrome export --format chrome "$t"
    run html export --format html "$t"
    run check.json check --json --max-peak 1g "$t"
    run dump dump "$t"
done
