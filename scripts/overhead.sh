#!/usr/bin/env bash
# overhead.sh — what tracing costs, measured on samples/cifar.py, every setting in the same run.
#
#   scripts/overhead.sh [BUILD_DIR] [STEPS] [REPEATS]      (on the GPU machine; default build-gpu 1500 3)
#
# Each configuration runs REPEATS times, interleaved round-robin so that drift of the machine
# (clocks, other tenants) spreads over all of them; the table gives the median step time (ms, GPU
# synchronized, after warm-up) and the overhead against the untraced run of the same allocator.
# PIN="taskset -c 2-5" runs every configuration on the same cores (less spread between runs).
# Identical processes still spread by several percent on the lent machine, so the ab_* settings
# measure inside one process instead: cifar.py --ab switches the recorder off and on every AB
# (default 50) steps and reports the median ratio of adjacent phases; the table's second part
# gives the median over runs. ab_history does the same with torch's _record_memory_history.
# BASE=OTHER_BUILD_DIR adds ab_tensors_base and ab_tensors_python_base: the same A/B with another
# build (say, the previous commit's), interleaved with this one, to tell a change from the lease.
# BUILDS="NAME=DIR ..." adds ab_tensors_NAME and ab_tensors_python_NAME for each (variants).
# WORKLOAD=resnet18|gpt2 measures samples/train.py instead (a torchvision ResNet-18 or a GPT-2-like
# transformer, AdamW; WARGS="--batch 8" etc. passed on); step_ms then comes from its SAMPLE_STATS
# file, and only the settings train.py supports are offered (no --record-history: use ab_history).
set -u
. "$(dirname "$0")/cost-notes.sh"
. "$(dirname "$0")/settle-trace.sh"
BUILD=${1:-build-gpu}; STEPS=${2:-1500}; REPEATS=${3:-3}
MT=$PWD/$BUILD/src/cli/memtrace
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/overhead-out}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/memtrace-overhead.XXXXXX)
WORKLOAD=${WORKLOAD:-cifar}
if [ "$WORKLOAD" = cifar ]; then CIFAR=$PWD/samples/cifar.py
else CIFAR="$PWD/samples/train.py --model $WORKLOAD --warmup 20 ${WARGS:-}"; fi
declare -A CMD
CMD[untraced_default]="$PY $CIFAR"
CMD[record_history]="$PY $CIFAR --record-history"
CMD[traced_default]="$MT record -q -f -o $W/t.mtrace -- $PY $CIFAR"
CMD[untraced_async]="env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync $PY $CIFAR"
CMD[tensors_both]="$MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_python]="$MT record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR"
# In-process A/B (cifar.py --ab): the recorder switched off and on every AB steps in one process.
AB=${AB:-50}
CMD[ab_tensors]="$MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB"
CMD[ab_tensors_python]="$MT record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR --ab $AB"
CMD[ab_tensors_full]="$MT record -q -f --tensors --stacks full -o $W/t.mtrace -- $PY $CIFAR --ab $AB"
CMD[ab_default]="$MT record -q -f -o $W/t.mtrace -- $PY $CIFAR --ab $AB"
for nb in ${BASE:+base=$BASE} ${BUILDS:-}; do
  name=${nb%%=*}; MB=$PWD/${nb#*=}/src/cli/memtrace
  CMD[ab_tensors_$name]="$MB record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB"
  CMD[ab_tensors_python_$name]="$MB record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR --ab $AB"
done
CMD[ab_history]="$PY $CIFAR --ab $AB --ab-what history"
CMD[tensors_cupti]="env MEMTRACE_ASYNC_HOOKS=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_native]="$MT record -q -f --tensors --stacks native -o $W/t.mtrace -- $PY $CIFAR"
CMD[subscribed_only]="env MEMTRACE_CALLBACKS=0 MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_bare]="env MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0 $MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_bare_act]="env MEMTRACE_NVML=0 $MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_bare_nvml]="env MEMTRACE_ACTIVITY=0 $MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_python_bare]="env MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0 $MT record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_nonvml]="env MEMTRACE_NVML=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_nostack]="$MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_noactivity]="env MEMTRACE_ACTIVITY=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
[ "$WORKLOAD" = cifar ] || ORDER=${ORDER:-"untraced_default traced_default tensors_both ab_tensors ab_history ab_default"}
ORDER=${ORDER:-"untraced_default record_history traced_default untraced_async tensors_both tensors_python tensors_native tensors_nostack tensors_noactivity tensors_nonvml"}
for r in $(seq "$REPEATS"); do
  for c in $ORDER; do
    (cd "$W" && SAMPLE_STATS="$W/$c.$r.json" ${PIN:-} ${CMD[$c]} --steps "$STEPS") > "$W/$c.$r.out" 2> "$W/$c.$r.err"
    rc=$?; [ $rc = 0 ] || echo "$c run $r: exit status $rc" >> "$W/failures"
    sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$W/$c.$r.out" >> "$W/$c.ms"
    [ "$WORKLOAD" = cifar ] || $PY - "$W/$c.$r.json" "$W/$c.ms" "$W/$c.ab" <<'PYEOF' 2>> "$W/failures"
import json, sys
d = json.load(open(sys.argv[1]))
if "step_ms" in d:
    open(sys.argv[2], "a").write("%s\n" % d["step_ms"])
if "ab_off_ms" in d:
    open(sys.argv[3], "a").write(" ".join("%s=%s" % (k, d[k]) for k in ("ab_off_ms", "ab_on_ms", "ab_overhead_pct", "ab_pairs")) + "\n")
PYEOF
    grep -o 'ab_off_ms.*' "$W/$c.$r.out" >> "$W/$c.ab"
    case $c in tensors*|ab_tensors*) ;; *) continue ;; esac
    settle_trace "$W/t.mtrace"
    cost_notes "$MT" "$W/t.mtrace" "$c" >> "$W/notes"
  done
done
{
  printf "%-20s %9s %9s  %s\n" config median_ms overhead runs_ms
  for c in $ORDER; do
    case $c in ab_*) continue ;; esac
    # --tensors leaves PyTorch's allocator as it is (docs/tensor-mode.md): every setting is
    # compared with the untraced default allocator
    base=untraced_default
    $PY - "$W/$c.ms" "$W/$base.ms" "$c" <<'PYEOF'
import statistics, sys
v = [float(x) for x in open(sys.argv[1]) if x.strip()]
b = [float(x) for x in open(sys.argv[2]) if x.strip()]
m, mb = statistics.median(v), statistics.median(b)
print("%-20s %9.4f %8.2f%%  %s" % (sys.argv[3], m, 100.0 * (m / mb - 1), " ".join("%.4f" % x for x in v)))
PYEOF
  done
  if ls "$W"/*.ab > /dev/null 2>&1; then
    echo
    printf "%-20s %9s %9s %9s  %s\n" "in-process A/B" off_ms on_ms overhead "per-run medians of on/off - 1 over adjacent phase pairs"
    for c in $ORDER; do
      case $c in ab_*) ;; *) continue ;; esac
      $PY - "$W/$c.ab" "$c" <<'PYEOF'
import re, statistics, sys
runs = [dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.eE+-]+)", l)) for l in open(sys.argv[1]) if l.strip()]
if runs:
    med = lambda k: statistics.median(r[k] for r in runs)
    print("%-20s %9.4f %9.4f %8.2f%%  %s (pairs %d)" % (sys.argv[2], med("ab_off_ms"), med("ab_on_ms"), med("ab_overhead_pct"),
          " ".join("%.2f" % r["ab_overhead_pct"] for r in runs), sum(int(r["ab_pairs"]) for r in runs)))
PYEOF
    done
  fi
  [ -f "$W/failures" ] && { echo; cat "$W/failures"; }
  echo; sort "$W/notes" | uniq | head -300
} | tee "$OUT/overhead.txt"
