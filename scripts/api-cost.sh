#!/usr/bin/env bash
# api-cost.sh — what memtrace adds to single CUDA calls (samples/api_cost.c), and how many CUDA
# calls a cifar.py step makes (the MEMTRACE_CALLBACKS=count census): together they explain the
# step-time overhead that scripts/overhead.sh measures.
#
#   scripts/api-cost.sh [BUILD_DIR] [REPEATS]        (on the GPU machine; default build-gpu 3)
#
# Every setting runs REPEATS times, interleaved; the table gives the median of the per-run medians
# in ns per call and the difference from the untraced run.
set -u
. "$(dirname "$0")/cost-notes.sh"
. "$(dirname "$0")/settle-trace.sh"
BUILD=${1:-build-gpu}; REPEATS=${2:-3}
MT=$PWD/$BUILD/src/cli/memtrace
AC=$PWD/$BUILD/samples/api_cost
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/api-cost-out}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/memtrace-apicost.XXXXXX)
QUIET="MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0"
declare -A CMD
CMD[untraced]="$AC"
CMD[subscribed]="env $QUIET MEMTRACE_CALLBACKS=0 $MT record -q -f --stacks none -o $W/t.mtrace -- $AC"
CMD[callbacks]="env $QUIET $MT record -q -f --stacks none -o $W/t.mtrace -- $AC"
CMD[native]="env $QUIET $MT record -q -f --stacks native -o $W/t.mtrace -- $AC"
CMD[default]="$MT record -q -f -o $W/t.mtrace -- $AC"
CMD[tensors]="$MT record -q -f --tensors -o $W/t.mtrace -- $AC"
CMD[tensors_cupti]="env MEMTRACE_ASYNC_HOOKS=0 $MT record -q -f --tensors -o $W/t.mtrace -- $AC"
ORDER=${ORDER:-"untraced subscribed callbacks native tensors tensors_cupti default"}
for r in $(seq "$REPEATS"); do
  for c in $ORDER; do
    (cd "$W" && ${CMD[$c]}) >> "$W/$c.out" 2>> "$W/$c.err"
    rc=$?; [ $rc = 0 ] || echo "exit status $rc" >> "$W/$c.err"
    [ $c = untraced ] || { settle_trace "$W/t.mtrace"; cost_notes "$MT" "$W/t.mtrace" "$c" >> "$W/notes"; }
  done
done
{
  $PY - "$W" $ORDER <<'PYEOF'
import re, statistics, sys
w, order = sys.argv[1], sys.argv[2:]
keys = ["event_ns", "launch_ns", "async_pair_ns"]
med = {}
for c in order:
    runs = [dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.]+)", l))
            for l in open(f"{w}/{c}.out") if "event_ns" in l]
    med[c] = {k: statistics.median(r[k] for r in runs) if runs else float("nan") for k in keys}
print("%-12s" % "ns per call" + "".join("%22s" % k for k in keys))
for c in order:
    print("%-12s" % c + "".join("%12.1f (%+7.1f)" % (med[c][k], med[c][k] - med[order[0]][k])
                                for k in keys))
PYEOF
  sort "$W/notes" 2>/dev/null | uniq -c
  for c in $ORDER; do grep -h . "$W/$c.err" | sort | uniq -c | sed "s/^/$c stderr: /"; done
} | tee "$OUT/api-cost.txt"

# ---- census: CUDA calls per cifar.py step -------------------------------------------------------
CIFAR=$PWD/samples/cifar.py
for mode in default tensors; do
  for steps in 200 400; do
    flag=; [ $mode = tensors ] && flag=--tensors
    (cd "$W" && env $QUIET MEMTRACE_CALLBACKS=count $MT record -q -f $flag -o "$W/c.mtrace" -- \
       $PY "$CIFAR" --steps $steps) > /dev/null 2>> "$W/census.err"
    settle_trace "$W/c.mtrace"
    "$MT" dump "$W/c.mtrace" 2>/dev/null | sed -n 's/.*text="\(census: [^"]*\)".*/\1/p' \
      | sed "s/^/$mode $steps steps: /"
  done
done | tee -a "$OUT/api-cost.txt"
echo "(calls per step = difference between the 400- and 200-step runs / 200)" | tee -a "$OUT/api-cost.txt"
