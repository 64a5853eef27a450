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
# gives the median over runs (each on-phase against the off-phases either side of it, so that a
# steady drift cancels). ab_history does the same with torch's _record_memory_history;
# ab_control switches nothing (the A/A control: the method's own noise), ab_control_traced the
# same while recording with --tensors throughout.
# BASE=OTHER_BUILD_DIR adds ab_tensors_base, ab_tensors_python_base and ab_default_base: the same A/B with another
# build (say, the previous commit's), interleaved with this one, to tell a change from the lease.
# BUILDS="NAME=DIR ..." adds ab_tensors_NAME, ab_tensors_python_NAME and ab_default_NAME for each.
# AB_ORDER=random runs each pair of phases in a random order and averages the medians of the
# pairs that ran the recorder first and second (cancels what falls on every other phase).
# WORKLOAD=resnet18|gpt2 measures samples/train.py instead (a torchvision ResNet-18 or a GPT-2-like
# transformer, AdamW; WARGS="--batch 8" etc. passed on); step_ms then comes from its SAMPLE_STATS
# file.
# Between processes: rounds alternate their order (ABC, CBA, ...) so that no setting always runs
# first or last, and the table's "paired" column compares each run with the untraced run of its
# own round (the two nearest in time), median over rounds; untraced_again, an untraced process
# like untraced_default, is the control: its paired figure is the noise of the method itself.
# Each run's step time is also appended to $OUT/overhead-runs.txt as it finishes (an A/B run of
# train.py's: its A/B on the wall clock, then on the process's and the main thread's CPU time).
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
CMD[untraced_again]="$PY $CIFAR"
CMD[record_history]="$PY $CIFAR --record-history"
CMD[traced_default]="$MT record -q -f -o $W/t.mtrace -- $PY $CIFAR"
CMD[untraced_async]="env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync $PY $CIFAR"
CMD[tensors_both]="$MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR"
CMD[tensors_python]="$MT record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR"
# In-process A/B (cifar.py --ab): the recorder switched off and on every AB steps in one process.
AB=${AB:-50}
# AB_ORDER=random: each pair of phases in a random order (cifar.py --ab-order; docs/performance.md)
ABO=${AB_ORDER:+ --ab-order $AB_ORDER}
CMD[ab_tensors]="$MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
CMD[ab_tensors_python]="$MT record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
# Events alone: every tensor report without its stack (what the stack adds is the rest)
CMD[ab_tensors_nostacks]="$MT record -q -f --tensors --stacks none -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
CMD[ab_tensors_full]="$MT record -q -f --tensors --stacks full -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
# The same with time stamps from clock_gettime instead of the TSC (src/record/clock.h)
CMD[ab_tensors_monoclock]="env MEMTRACE_CLOCK=monotonic $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
CMD[ab_default]="$MT record -q -f -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
CMD[ab_default_nonvml]="env MEMTRACE_NVML=0 $MT record -q -f -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
# NVML sampled ten times less often (every 500 ms; MEMTRACE_NVML_MS): does its cost scale with it?
CMD[ab_default_nvml500]="env MEMTRACE_NVML_MS=500 $MT record -q -f -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
CMD[ab_tensors_nonvml]="env MEMTRACE_NVML=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
for nb in ${BASE:+base=$BASE} ${BUILDS:-}; do
  name=${nb%%=*}; MB=$PWD/${nb#*=}/src/cli/memtrace
  CMD[ab_tensors_$name]="$MB record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
  CMD[ab_tensors_python_$name]="$MB record -q -f --tensors --stacks python -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
  CMD[ab_default_$name]="$MB record -q -f -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO"
done
CMD[ab_history]="$PY $CIFAR --ab $AB$ABO --ab-what history"
# The in-process A/A controls: phases as above, nothing switched (untraced; recorded throughout).
CMD[ab_control]="$PY $CIFAR --ab $AB$ABO --ab-what none"
CMD[ab_control_traced]="$MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO --ab-what none"
# Their off_ms against ab_control's is what being recorded costs while paused; to find where it
# goes: default mode, no activity records, no NVML sampler, subscribed to CUPTI with nothing on.
CMD[ab_control_default]="$MT record -q -f -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO --ab-what none"
CMD[ab_control_noactivity]="env MEMTRACE_ACTIVITY=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO --ab-what none"
CMD[ab_control_nonvml]="env MEMTRACE_NVML=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO --ab-what none"
CMD[ab_control_subscribed]="env MEMTRACE_CALLBACKS=0 MEMTRACE_ACTIVITY=0 MEMTRACE_NVML=0 $MT record -q -f --tensors -o $W/t.mtrace -- $PY $CIFAR --ab $AB$ABO --ab-what none"
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
REVERSED=$(for c in $ORDER; do echo "$c"; done | tac | tr '\n' ' ')
for r in $(seq "$REPEATS"); do
  round=$ORDER; [ $((r % 2)) = 0 ] && round=$REVERSED
  for c in $round; do
    (cd "$W" && SAMPLE_STATS="$W/$c.$r.json" ${PIN:-} ${CMD[$c]} --steps "$STEPS") > "$W/$c.$r.out" 2> "$W/$c.$r.err"
    rc=$?; [ $rc = 0 ] || echo "$c run $r: exit status $rc" >> "$W/failures"
    # this run's step time: cifar.py prints it, train.py writes it to its SAMPLE_STATS file
    if [ "$WORKLOAD" = cifar ]; then
      ms=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$W/$c.$r.out" | tail -n 1)
      grep -o 'ab_off_ms.*' "$W/$c.$r.out" >> "$W/$c.ab"
    else
      ms=$($PY - "$W/$c.$r.json" "$W/$c.ab" <<'PYEOF' 2>> "$W/failures"
import json, sys
d = json.load(open(sys.argv[1]))
if "ab_off_ms" in d:
    keys = ("ab_off_ms", "ab_on_ms", "ab_overhead_pct", "ab_pairs", "ab_cpu_off_ms", "ab_cpu_pct",
            "ab_main_cpu_off_ms", "ab_main_cpu_pct")
    open(sys.argv[2], "a").write(" ".join("%s=%s" % (k, d[k]) for k in keys if k in d) + "\n")
print(d.get("step_ms", ""))
PYEOF
)
    fi
    [ -n "$ms" ] && echo "$r $ms" >> "$W/$c.ms"
    last=$(tail -n 1 "$W/$c.ab" 2>/dev/null) # this run's A/B (every line has the wall clock's three)
    echo "round $r $c rc=$rc step_ms=$ms $(grep -o 'ab_off_ms=[0-9.]* ab_on_ms=[0-9.]* ab_overhead_pct=[-0-9.]*' <<< "$last") $(grep -o 'ab_[a-z_]*cpu_[a-z_]*=[-0-9.]*' <<< "$last" | tr '\n' ' ')load=$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/overhead-runs.txt"
    case $c in tensors*|ab_tensors*|ab_default*|ab_control_?*) ;; *) continue ;; esac
    settle_trace "$W/t.mtrace"
    cost_notes "$MT" "$W/t.mtrace" "$c" > "$W/run.notes"
    cat "$W/run.notes" >> "$W/notes"
    # What the run's own notes predict for its A/B: reports per recorded step times a whole
    # report's average, against the off-phases' step (recorded steps: train.py's warm-up and
    # half of the phases; cifar.py's steps include its warm-up). An estimate: the notes count
    # "about" (1 call in 16 counted and timed), but it carries none of the A/B's spread between
    # processes (docs/performance.md, eleventh session).
    case $c in ab_tensors*)
      $PY - "$W/run.notes" "$W/$c.ab" "$STEPS" "$WORKLOAD" >> "$W/$c.direct" <<'PYEOF' 2>> "$W/failures"
import re, sys
notes, ab = open(sys.argv[1]).read(), open(sys.argv[2]).read().splitlines()
steps, workload = int(sys.argv[3]), sys.argv[4]
n = re.search(r'"tensor reports: about (\d+)', notes)
whole = re.search(r'"tensor reports, whole: (\d+) ns', notes)
off = re.findall(r"ab_off_ms=([0-9.]+)", ab[-1]) if ab else []
if n and whole and off:
    recorded = (steps - 20) / 2 + 20 if workload == "cifar" else steps / 2 + 20
    per_step = int(n.group(1)) / recorded
    print("%.3f %.0f %s" % (100.0 * per_step * int(whole.group(1)) / (float(off[0]) * 1e6), per_step, whole.group(1)))
PYEOF
    ;; esac
  done
done
{
  printf "%-20s %9s %9s %9s  %s\n" config median_ms overhead paired "runs_ms (paired: median over rounds of run / untraced_default of its round - 1)"
  for c in $ORDER; do
    case $c in ab_*) continue ;; esac
    # --tensors leaves PyTorch's allocator as it is (docs/tensor-mode.md): every setting is
    # compared with the untraced default allocator
    base=untraced_default
    $PY - "$W/$c.ms" "$W/$base.ms" "$c" <<'PYEOF'
import statistics, sys
rounds = lambda f: dict((int(r), float(ms)) for r, ms in (l.split() for l in open(f) if l.strip()))
v, b = rounds(sys.argv[1]), rounds(sys.argv[2])
if v and b:
    m, mb = statistics.median(v.values()), statistics.median(b.values())
    pairs = [100.0 * (v[r] / b[r] - 1) for r in sorted(v) if r in b]
    print("%-20s %9.4f %8.2f%% %8.2f%%  %s  (paired per round: %s)" % (sys.argv[3], m, 100.0 * (m / mb - 1),
          statistics.median(pairs) if pairs else float("nan"),
          " ".join("%.4f" % v[r] for r in sorted(v)), " ".join("%.2f" % p for p in pairs)))
PYEOF
  done
  if ls "$W"/*.ab > /dev/null 2>&1; then
    echo
    printf "%-20s %9s %9s %9s  %s\n" "in-process A/B" off_ms on_ms overhead "per-run ab_overhead_pct (cifar.py: alternate, on / (mean of the off-phases either side) - 1; random, the mean of the two orders' medians)"
    for c in $ORDER; do
      case $c in ab_*) ;; *) continue ;; esac
      $PY - "$W/$c.ab" "$c" <<'PYEOF'
import re, statistics, sys
runs = [dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.eE+-]+)", l)) for l in open(sys.argv[1]) if l.strip()]
if runs:
    med = lambda k: statistics.median(r[k] for r in runs)
    direct = ""
    try:  # ab_tensors*: what the run's own cost notes account for (see the loop above)
        d = [l.split() for l in open(sys.argv[1][:-3] + ".direct") if l.strip()]
        if d:
            direct = "; the notes' own time: %.2f%% (runs %s; %.0f reports a step, whole report %s ns)" % (
                statistics.median(float(x[0]) for x in d), " ".join("%.2f" % float(x[0]) for x in d),
                statistics.median(float(x[1]) for x in d), "/".join(x[2] for x in d))
    except OSError:
        pass
    print("%-20s %9.4f %9.4f %8.2f%%  %s (pairs %d)%s" % (sys.argv[2], med("ab_off_ms"), med("ab_on_ms"), med("ab_overhead_pct"),
          " ".join("%.2f" % r["ab_overhead_pct"] for r in runs), sum(int(r["ab_pairs"]) for r in runs), direct))
PYEOF
    done
  fi
  [ -f "$W/failures" ] && { echo; cat "$W/failures"; }
  echo; sort "$W/notes" | uniq | head -300
} | tee "$OUT/overhead.txt"
