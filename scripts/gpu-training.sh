#!/usr/bin/env bash
# gpu-training.sh — real training runs recorded for the analyses that need them (categories,
# fixtures), and what recording costs on them. Part of the GPU checks (scripts/gpu-check.sh runs the
# correctness side); run on the GPU machine:
#
#   scripts/gpu-training.sh [BUILD_DIR]      -> $OUT/training.tar.gz, $OUT/training.log
#
# Records (each with PyTorch's own numbers beside it, samples/mt_stats.py):
#   resnet18_tensors   torchvision ResNet-18, batch 32, AdamW, --tensors
#   gpt2_tensors       GPT-2-like (4 layers, 512 wide), batch 8x256, AdamW, --tensors
#   gpt2_amp_tensors   the same under torch.autocast(bfloat16)
#   resnet18_compile_tensors  ResNet-18 under torch.compile
#   resnet18_default, gpt2_default   default allocator (no --tensors)
# Costs, in-process A/B (recording paused and resumed every K steps, median over adjacent phases):
#   --tensors with Python + native stacks, and PyTorch's _record_memory_history(stacks="python").
set -u
BUILD=${1:-build-gpu}
OUT=${OUT:-$PWD/gpu-check-out}
MT=$PWD/$BUILD/src/cli/memtrace
S=$PWD/samples
PY=${PYTHON:-python3}
W=$(mktemp -d /tmp/memtrace-training.XXXXXX)
mkdir -p "$OUT" "$W/t"
LOG=$OUT/training.log
: > "$LOG"
. "$(dirname "$0")/settle-trace.sh" # record adds the pid to a name: settle_trace takes it off
rec() { # rec NAME RECORD-OPTS -- TRAIN-ARGS
  local name=$1 opts=$2; shift 3
  (cd "$W" && SAMPLE_STATS="$W/t/$name.stats.json" timeout 300 "$MT" record -q $opts -o "$W/t/$name.mtrace" -- $PY "$S/train.py" "$@") >> "$LOG" 2>&1
  settle_trace "$W/t/$name.mtrace"
  echo "$name rc=$? $(stat -c %s "$W/t/$name.mtrace" 2>/dev/null) bytes" | tee -a "$LOG"
}
rec resnet18_tensors --tensors -- --model resnet18 --steps 4 --warmup 2
rec gpt2_tensors --tensors -- --model gpt2 --steps 4 --warmup 2
rec gpt2_amp_tensors --tensors -- --model gpt2 --steps 4 --warmup 2 --amp
rec resnet18_compile_tensors --tensors -- --model resnet18 --steps 4 --warmup 2 --compile
rec resnet18_default "" -- --model resnet18 --steps 4 --warmup 2
rec gpt2_default "" -- --model gpt2 --steps 4 --warmup 2
for m in resnet18 gpt2; do
  for what in memtrace history; do
    for i in 1 2; do
      if [ $what = memtrace ]; then
        (cd "$W" && SAMPLE_STATS="$W/ab.json" timeout 300 "$MT" record -q --tensors -o "$W/ab.mtrace" -f -- $PY "$S/train.py" --model $m --steps 400 --warmup 20 --ab 20) >> "$LOG" 2>&1
        settle_trace "$W/ab.mtrace"
        note=$("$MT" dump "$W/ab.mtrace" | grep -o 'tensor reports: [^"]*\|stack capture: [^"]*\|events: [^"]*' | tr '\n' ' ')
      else
        (cd "$W" && SAMPLE_STATS="$W/ab.json" timeout 300 $PY "$S/train.py" --model $m --steps 400 --warmup 20 --ab 20 --ab-what history) >> "$LOG" 2>&1
        note=""
      fi
      echo "ab $m $what run $i: $($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print("off %.3f ms on %.3f ms overhead %.2f%% pairs %d" % (d["ab_off_ms"], d["ab_on_ms"], d["ab_overhead_pct"], d["ab_pairs"]))' "$W/ab.json" 2>&1) $note" | tee -a "$LOG"
    done
  done
done
tar -C "$W" -czf "$OUT/training.tar.gz" t
ls -la "$W/t" >> "$LOG"
