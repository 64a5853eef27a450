#!/usr/bin/env bash
set -u
MT=$PWD/build-gpu/src/cli/memtrace
O=${OUT:-/tmp/out}; mkdir -p $O
for round in 1 2 3; do
 for model in resnet18 gpt2; do
   B=""; [ $model = gpt2 ] && B="--batch 2"
   t=/tmp/tlspf-$model-$round
   env MEMTRACE_EXP_LOCKPF=4 $MT record -q -f --tensors -o $t.%p.mtrace -- python3 samples/train.py --model $model $B --steps 300 --warmup 20 > $O/run-$model-$round.log 2>&1
   echo "== $model round $round rc=$?" >> $O/notes.txt
   for f in $t.*.mtrace; do echo "-- $f $($MT dump $f | grep -E 'EXPERIMENT' | sed 's/.*EXPERIMENT//')" >> $O/notes.txt; done
 done
done
