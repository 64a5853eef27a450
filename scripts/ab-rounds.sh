#!/usr/bin/env bash
# ab-rounds.sh — the in-process A/B of scripts/overhead.sh, one process per setting and round, and
# one line per run: what the A/A control and --tensors read (on the wall clock, and on CPU time:
# the whole process's and the main thread's), the off-phases' step, and what the trace's own cost
# notes account for. For questions about the spread between processes (does
# pinning narrow it? does one model move with the other?), where one overhead.sh call per run
# lets the settings alternate.
#
#   scripts/ab-rounds.sh [BUILD_DIR] [ROUNDS] [STEPS]         (on the GPU machine; build-gpu 5 400)
#   MODELS="resnet18 gpt2" PINS="pin nopin" PIN_CPUS=2-9 scripts/ab-rounds.sh
#   GPT2_BATCH=8 SETTINGS="ab_control ab_tensors ab_history" scripts/ab-rounds.sh build-gpu 4 400
#
# Each round runs every model × pin setting; the pin settings swap their order every other round
# (pin: every process of the run under `taskset -c $PIN_CPUS`). gpt2 runs at batch $GPT2_BATCH: 2 by
# default (launch-bound, the harder case), 8 is issue 17's own GPT-2-like workload (8x256).
# SETTINGS: overhead.sh's A/B settings each run measures (ab_history: torch's own recorder).
# Output: $OUT/ab-rounds.txt (and stdout), each run's overhead.sh output beside it.
# Measured with it: docs/performance.md, "Pinned and not, two calls on one machine", "Torch's
# recorder in every run".
set -u
BUILD=${1:-build-gpu}; ROUNDS=${2:-5}; STEPS=${3:-400}
OUT=${OUT:-$PWD/ab-rounds-out}; mkdir -p "$OUT"
MODELS=${MODELS:-resnet18 gpt2}; PINS=${PINS:-pin nopin}; PIN_CPUS=${PIN_CPUS:-2-9}
GPT2_BATCH=${GPT2_BATCH:-2}; SETTINGS=${SETTINGS:-ab_control ab_tensors}
HERE=$(cd "$(dirname "$0")" && pwd)
# the same A/B on CPU time (train.py): the whole process's, then the main thread's, and its off-phase
cpu() { grep -o "$1 .*" "$2" | grep -o 'ab_[a-z_]*cpu_[a-z_]*=[-0-9.]*' | sed 's/ab_//; s/=\([-0-9]*\.[0-9][0-9]\)[0-9]*/=\1/' | tr '\n' ' '; }
pct() { grep -o "$1 .*ab_overhead_pct=[-0-9.]*" "$2" | grep -o 'pct=[-0-9.]*' | cut -c5-10; }
for r in $(seq 1 "$ROUNDS"); do
  order=$PINS; [ $((r % 2)) = 0 ] && order=$(echo "$PINS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for m in $MODELS; do
    for p in $order; do
      if [ "$p" = pin ]; then export PIN="taskset -c $PIN_CPUS"; else unset PIN; fi
      wargs=""; [ "$m" = gpt2 ] && wargs="--batch $GPT2_BATCH"
      d=$OUT/$m.$p.$r
      OUT=$d WORKLOAD=$m WARGS="$wargs" AB=20 AB_ORDER=random ORDER="$SETTINGS" \
        timeout 300 bash "$HERE/overhead.sh" "$BUILD" "$STEPS" 1 > "$d.txt" 2>&1
      runs=$d/overhead-runs.txt
      echo "$m $p $r control=$(pct ab_control "$runs") tensors=$(pct ab_tensors "$runs")" \
           "$(case " $SETTINGS " in *" ab_history "*) echo "history=$(pct ab_history "$runs")";; esac)" \
           "cpu: control $(cpu ab_control "$runs") tensors $(cpu ab_tensors "$runs")" \
           "off_ms=$(grep -o 'ab_tensors .*ab_off_ms=[0-9.]*' "$runs" | grep -o 'off_ms=[0-9.]*' | cut -c8-13)" \
           "| $(grep -o "notes' own time: [0-9.]*%.*ns" "$d.txt" | head -n 1)" \
           "| $(grep -o 'writer thread: [0-9.]* ms of CPU in [0-9.]* s ([0-9.]*% of one core)' "$d.txt" | head -n 1)" \
        | tee -a "$OUT/ab-rounds.txt"
    done
  done
done
