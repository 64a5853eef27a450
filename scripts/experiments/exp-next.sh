#!/usr/bin/env bash
# EXPERIMENT: the next walk's memo fetched at the end of an allocation's report (MEMTRACE_NEXT_SITE=2:
# blocks of 256 allocations per thread, fetching and not, timed apart in one process).
set -u
MT=$PWD/build-gpu/src/cli/memtrace
O=${OUT:-/tmp/out}; mkdir -p $O
nproc > $O/notes.txt; lscpu | grep -E 'Model name|L2|L3' >> $O/notes.txt
for round in ${ROUNDS:-1 2 3}; do
 for model in resnet18 gpt2; do
   B=""; [ $model = gpt2 ] && B="--batch 2"
   t=/tmp/next-$model-$round
   rm -f $t.*.mtrace
   env MEMTRACE_NEXT_SITE=2 $MT record -q -f --tensors -o $t.%p.mtrace -- python3 samples/train.py --model $model $B --steps ${STEPS:-300} --warmup 20 > $O/run-$model-$round.log 2>&1
   echo "== $model round $round rc=$?" >> $O/notes.txt
   for f in $t.*.mtrace; do $MT dump $f | grep -E 'EXPERIMENT|tensor reports|unwind' | sed 's/^/   /' >> $O/notes.txt; done
   tail -2 $O/run-$model-$round.log >> $O/notes.txt
 done
done
