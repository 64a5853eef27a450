#!/usr/bin/env bash
# EXPERIMENT: the allocator's lock -> report time, recording against paused phases. Not committed.
set -u
MT=$PWD/build-gpu/src/cli/memtrace
O=${OUT:-/tmp/out}; mkdir -p $O
for round in 1 2; do
 for model in resnet18 gpt2; do
   B=""; [ $model = gpt2 ] && B="--batch 2"
   t=/tmp/lgap-$model-$round
   env MEMTRACE_EXP_LOCKPF=3 SAMPLE_STATS=$O/stats-$model-$round.json $MT record -q -f --tensors -o $t.%p.mtrace -- python3 samples/train.py --model $model $B --steps 400 --warmup 20 --ab 20 --ab-order random > $O/run-$model-$round.log 2>&1
   echo "== $model round $round rc=$?" >> $O/notes.txt
   for f in $t.*.mtrace; do echo "-- $f $($MT dump $f | grep -E 'EXPERIMENT' | sed 's/.*EXPERIMENT//')" >> $O/notes.txt; done
   grep -v '^\[trans' $O/run-$model-$round.log | tail -3 >> $O/notes.txt
 done
done
