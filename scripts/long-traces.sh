#!/usr/bin/env bash
# long-traces.sh — long real recordings, for what the trace format costs on disk and to read
# (issue 17: bytes per event "on long runs"). Run on the GPU machine after build-for-gpu.sh:
#
#   scripts/long-traces.sh [BUILD_DIR] [STEPS]     -> $OUT/long/*.mtrace, $OUT/long.txt
#
# Each row of long.txt: name, events, file bytes, bytes per event (events from `report --json`).
# The traces themselves come back too, so the format can be measured and changed on a machine
# without a GPU (docs/performance.md says which were used).
set -u
BUILD=${1:-build-gpu}
STEPS=${2:-600}
OUT=${OUT:-$PWD/gpu-check-out}
MT=$PWD/$BUILD/src/cli/memtrace
S=$PWD/samples
PY=${PYTHON:-python3}
W=$(mktemp -d /tmp/memtrace-long.XXXXXX)
mkdir -p "$OUT/long"
. "$(dirname "$0")/settle-trace.sh"
rec() { # rec NAME RECORD-OPTS -- PROGRAM ARGS...
  local name=$1 opts=$2; shift 3
  (cd "$W" && timeout 300 "$MT" record -q $opts -o "$OUT/long/$name.mtrace" -- "$@") > "$W/$name.log" 2>&1
  local rc=$?
  settle_trace "$OUT/long/$name.mtrace"
  local ev sz
  ev=$("$MT" report --json "$OUT/long/$name.mtrace" 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["events"])' 2>/dev/null)
  sz=$(stat -c %s "$OUT/long/$name.mtrace" 2>/dev/null)
  echo "$name rc=$rc events=${ev:-?} bytes=${sz:-?} bytes/event=$($PY -c "print('%.2f' % ($sz/$ev))" 2>/dev/null)" | tee -a "$OUT/long.txt"
}
: > "$OUT/long.txt"
rec resnet18_tensors --tensors -- $PY "$S/train.py" --model resnet18 --steps "$STEPS" --warmup 2
rec gpt2_tensors --tensors -- $PY "$S/train.py" --model gpt2 --steps "$STEPS" --warmup 2
rec resnet18_default "" -- $PY "$S/train.py" --model resnet18 --steps "$STEPS" --warmup 2
rec cifar_tensors --tensors -- $PY "$S/cifar.py" --steps "$STEPS"
rec cifar_default "" -- $PY "$S/cifar.py" --steps "$STEPS"
rm -rf "$W"
