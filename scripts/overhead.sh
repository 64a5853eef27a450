#!/usr/bin/env bash
# overhead.sh — what tracing costs, measured on samples/cifar.py, every setting in the same run.
#
#   scripts/overhead.sh [BUILD_DIR] [STEPS] [REPEATS]      (on the GPU machine; default build-gpu 1500 3)
#
# Each configuration runs REPEATS times, interleaved round-robin so that drift of the machine
# (clocks, other tenants) spreads over all of them; the table gives the median step time (ms, GPU
# synchronized, after warm-up) and the overhead against the untraced run of the same allocator.
# PIN="taskset -c 2-5" runs every configuration on the same cores (less spread between runs).
set -u
. "$(dirname "$0")/cost-notes.sh"
BUILD=${1:-build-gpu}; STEPS=${2:-1500}; REPEATS=${3:-3}
MT=$PWD/$BUILD/src/cli/memtrace
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/overhead-out}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/memtrace-overhead.XXXXXX)
CIFAR=$PWD/samples/cifar.py
declare -A CMD
CMD[untraced_default]="$PY $CIFAR"
CMD[record_history]="$PY $CIFAR --record-history"
CMD[traced_default]="$MT record -q -f -o $W/t.mtrace -- $PY $CIFAR"
CMD[untraced_async]="env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync $PY $CIFAR"
CMD[tensors_both]="$MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_python]="$MT record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_native]="$MT record -q -f --tensors --stacks native -o $W/t.mtrace -- $PY $CIFAR"
CMD[subscribed_only]="env MEMTRACE_CALLBACKS=0 MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_bare]="env MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0 $MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_bare_act]="env MEMTRACE_NVML=0 $MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_bare_nvml]="env MEMTRACE_ACTIVITY=0 $MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_python_bare]="env MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0 $MT record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_nonvml]="env MEMTRACE_NVML=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_nostack]="$MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_noactivity]="env MEMTRACE_ACTIVITY=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
ORDER=${ORDER:-"untraced_default record_history traced_default untraced_async tensors_both tensors_python tensors_native tensors_nostack tensors_noactivity tensors_nonvml"}
for r in $(seq "$REPEATS"); do
  for c in $ORDER; do
    (cd "$W" && ${PIN:-} ${CMD[$c]} --steps "$STEPS") > "$W/$c.$r.out" 2> "$W/$c.$r.err"
    rc=$?; [ $rc = 0 ] || echo "$c run $r: exit status $rc" >> "$W/failures"
    sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$W/$c.$r.out" >> "$W/$c.ms"
    case $c in tensors*) ;; *) continue ;; esac
    cost_notes "$MT" "$W/t.mtrace" "$c" >> "$W/notes"
  done
done
{
  printf "%-20s %9s %9s  %s\n" config median_ms overhead runs_ms
  for c in $ORDER; do
    base=untraced_default
    case $c in tensors*|untraced_async|subscribed_only) base=untraced_async ;; esac
    $PY - "$W/$c.ms" "$W/$base.ms" "$c" <<'PYEOF'
import statistics, sys
v = [float(x) for x in open(sys.argv[1]) if x.strip()]
b = [float(x) for x in open(sys.argv[2]) if x.strip()]
m, mb = statistics.median(v), statistics.median(b)
print("%-20s %9.4f %8.2f%%  %s" % (sys.argv[3], m, 100.0 * (m / mb - 1), " ".join("%.4f" % x for x in v)))
PYEOF
  done
  [ -f "$W/failures" ] && { echo; cat "$W/failures"; }
  echo; sort "$W/notes" | uniq | head -40
} | tee "$OUT/overhead.txt"
