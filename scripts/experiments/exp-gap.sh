#!/usr/bin/env bash
# EXPERIMENT (reverted with exp_gap.c): the program's own work between two tensor reports on a
# thread, recording phases against paused ones (MEMTRACE_EXP_GAP=1), for ResNet-18 b32 and
# GPT-2-like b2, ROUNDS runs each.
set -u
MT=$PWD/build-gpu/src/cli/memtrace
O=${OUT:-/tmp/out}; mkdir -p "$O"
ROUNDS=${1:-2}; STEPS=${2:-300}
for round in $(seq 1 "$ROUNDS"); do
 for model in resnet18 gpt2; do
   B=""; [ $model = gpt2 ] && B="--batch 2"
   t=/tmp/gap-$model-$round
   env MEMTRACE_EXP_GAP=1 SAMPLE_STATS=$O/stats-$model-$round.json $MT record -q -f --tensors -o $t.%p.mtrace -- python3 samples/train.py --model $model $B --steps "$STEPS" --warmup 20 --ab 20 --ab-order random > "$O/run-$model-$round.log" 2>&1
   echo "== $model round $round rc=$? $(grep -o "\"ab_overhead_pct\": [-0-9.]*" "$O/stats-$model-$round.json")" >> "$O/notes.txt"
   for f in $t.*.mtrace; do $MT dump "$f" | grep -E 'EXPERIMENT|whole' | sed 's/^note *//' >> "$O/notes.txt"; done
 done
done
cat "$O/notes.txt"
