#!/usr/bin/env bash
# EXPERIMENT: lock prefetch, per-report split in one process. Not committed.
set -u
MT=$PWD/build-gpu/src/cli/memtrace
O=${OUT:-/tmp/out}; mkdir -p $O
C10=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib","libc10_cuda.so"))')
readelf -rW $C10 | grep -c pthread_mutex_lock > $O/c10-imports.txt
readelf -rW $C10 | grep pthread_mutex >> $O/c10-imports.txt
STEPS=${STEPS:-400}
for round in ${ROUNDS:-1 2 3}; do
 for model in resnet18 gpt2; do
  for mode in 1 2; do
   B=""; [ $model = gpt2 ] && B="--batch 2"
   t=/tmp/lpfb-$model-$mode-$round
   /usr/bin/time -f "%e s" env MEMTRACE_EXP_LOCKPF=$mode $MT record -q -f --tensors -o $t.%p.mtrace -- python3 samples/train.py --model $model $B --steps $STEPS --warmup 20 > $O/run-$model-$mode-$round.log 2>&1
   echo "== $model mode $mode round $round rc=$?" >> $O/notes.txt
   for f in $t.*.mtrace; do echo "-- $f $($MT dump $f | grep EXPERIMENT | sed "s/.*EXPERIMENT//")" >> $O/notes.txt; done
   tail -1 $O/run-$model-$mode-$round.log >> $O/notes.txt
  done
 done
done
