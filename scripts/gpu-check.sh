#!/usr/bin/env bash
# gpu-check.sh — every check that needs a GPU, in one command.
#
#   scripts/gpu-check.sh [BUILD_DIR]        (default: build-gpu)
#
# Runs on the lent GPU machine, from the repository root, over a build made on the development
# machine (scripts/build-for-gpu.sh makes it: the GPU machine has no libdwarf or Criterion).
# Writes logs and the traces worth keeping under $OUT (default ./gpu-check-out):
#   gpu-check.log   everything, summary.txt   the numbers, traces.tar.gz   fixtures for tests/data
# Exit status: 0 when every assertion held, 1 otherwise (the log says which).
set -u
BUILD=${1:-build-gpu}
OUT=${OUT:-$PWD/gpu-check-out}
STEPS=${CIFAR_STEPS:-300}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/memtrace-gpu.XXXXXX)
LOG=$OUT/gpu-check.log
SUM=$OUT/summary.txt
MT=$PWD/$BUILD/src/cli/memtrace
AP=$PWD/$BUILD/samples/alloc_patterns
CONFLICT=$PWD/$BUILD/samples/cupti_conflict
PY=${PYTHON:-python3}
FAILS=0
: > "$LOG"; : > "$SUM"
exec 3>&1
log() { echo "$*" >> "$LOG"; }
say() { echo "$*" | tee -a "$SUM" >&3; log "$*"; }
check() { # check NAME EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then say "PASS $1 ($3)"; else say "FAIL $1: expected $2, got $3"; FAILS=$((FAILS+1)); fi
}
run() { log "\$ $*"; "$@" >> "$LOG" 2>&1; }
calc() { $PY -c "print(round($1, 4))"; }  # the GPU machine has no bc
. "$(dirname "$0")/settle-trace.sh"

say "== environment"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; uname -r
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  ldd "$MT" "$BUILD/src/record/libmemtrace_inject.so" | grep -i "not found" && echo "MISSING LIBRARIES"
} >> "$LOG" 2>&1
tail -n 4 "$LOG" | sed 's/^/  /' >&3

# ---- exit status is the command's --------------------------------------------------------------
say "== exit status"
(cd "$W" && "$MT" record -q -- sh -c 'exit 7'); check "record returns the command's status" 7 $?
(cd "$W" && "$MT" record -q -- sh -c 'kill -TERM $$'); check "signal death is 128+N" 143 $?

# Exit with async allocations in flight, under every recorder setting: the writer's last tick once
# polled pools through a sink pointer that exit had already cleared (SIGSEGV at exit, rc 139).
AC=$PWD/$BUILD/samples/api_cost
for setting in "MEMTRACE_STACKS=none MEMTRACE_NVML=0 MEMTRACE_ACTIVITY=0" "MEMTRACE_STACKS=native MEMTRACE_NVML=0" \
               "MEMTRACE_STACKS=both" "MEMTRACE_ACTIVITY=0"; do
  for i in 1 2 3; do
    (cd "$W" && env $setting "$MT" record -q -f -o "$W/api_cost.mtrace" -- "$AC" 10) >> "$LOG" 2>&1
    rc=$?; settle_trace "$W/api_cost.mtrace"; [ $rc = 0 ] || break
  done
  check "api_cost exits 0 under memtrace ($setting), 3 runs" 0 $rc
done

# ---- alloc_patterns: every kind, exact counts ---------------------------------------------------
say "== alloc_patterns"
(cd "$W" && "$MT" record -o "$W/alloc_patterns.mtrace" -- "$AP") > "$W/ap.out" 2>> "$LOG"
check "alloc_patterns ran" 0 $?
settle_trace "$W/alloc_patterns.mtrace"
cat "$W/ap.out" >> "$LOG"
"$MT" dump "$W/alloc_patterns.mtrace" > "$W/ap.dump" 2>> "$LOG"; check "dump reads it" 0 $?
PITCHED=$(sed -n 's/.*pitched_bytes=\([0-9]*\).*/\1/p' "$W/ap.out")
G=$(sed -n 's/^granularity=\([0-9]*\)/\1/p' "$W/ap.out")
cnt() { grep '^event ' "$W/ap.dump" | grep -v ' activity' | grep -E -- "$1" | grep -c . ; }
check "cuMemAlloc_v2 allocs 1/3/6/5 MiB" "1048576 3145728 6291456 5242880" \
  "$(grep '^event ' "$W/ap.dump" | grep 'op=alloc kind=device' | grep -v activity | sed 's/.*bytes=\([0-9]*\).*/\1/' | tr '\n' ' ' | sed 's/ $//')"
check "cuMemFree_v2 frees" 4 "$(cnt 'op=free kind=device .*api=cuMemFree_v2')"
check "pitched alloc bytes" "$PITCHED" "$(grep 'op=alloc kind=pitch' "$W/ap.dump" | sed 's/.*bytes=\([0-9]*\).*/\1/')"
check "managed alloc" 1 "$(cnt 'op=alloc kind=managed .*bytes=2097152 ')"
check "pinned host allocs (64K,128K)" 2 "$(cnt 'op=alloc kind=host_pinned dev=-1 .*bytes=(65536|131072) ')"
check "pinned host frees" 2 "$(cnt 'op=free kind=host_pinned')"
check "host register/unregister" "1 1" "$(cnt 'op=alloc kind=host_registered .*bytes=262144 ') $(cnt 'op=free kind=host_registered')"
check "async allocs (4 MiB, 8 MiB from pool)" "1 1" "$(cnt 'op=alloc kind=async .*bytes=4194304 ') $(cnt 'op=alloc kind=async .*bytes=8388608 .*from-pool')"
check "async frees" 2 "$(cnt 'op=free kind=async')"
check "pool trim" 1 "$(cnt 'op=pool_trim')"
check "VMM reserve/free 4 granules" "1 1" "$(cnt "op=alloc kind=vmm_reserve .*bytes=$((4*G)) ") $(cnt 'op=free kind=vmm_reserve')"
check "VMM create/release" "2 2" "$(cnt "op=alloc kind=vmm_physical .*bytes=$G ") $(cnt 'op=free kind=vmm_physical')"
check "VMM map x2, one unmap of both" "2 1" "$(cnt "op=alloc kind=vmm_map .*bytes=$G ") $(cnt "op=free kind=vmm_map .*bytes=$((2*G)) ")"
check "failed request 1 PiB, CUDA_ERROR_OUT_OF_MEMORY" 1 "$(cnt 'op=failed kind=device .*bytes=1125899906842624 .*result=2 ')"
check "context destroyed" 1 "$(cnt 'op=ctx_destroy')"
check "every API alloc/failed has a stack" 0 "$(grep '^event ' "$W/ap.dump" | grep -v activity | grep -E 'op=(alloc|failed)' | grep -c 'stack=0$')"
say "info: driver-internal events (activity): $(grep '^event ' "$W/ap.dump" | grep -c ' activity') ; stack nodes: $(grep -c '^node ' "$W/ap.dump"); modules: $(grep -c '^module ' "$W/ap.dump"); symbols: $(grep -c '^symbol ' "$W/ap.dump")"
grep '^note' "$W/ap.dump" | sed 's/^/  /' >> "$LOG"

# Peaks computed from the dump alone, an independent check of the compactor
# (scripts/dump_peaks.py: frees matched by family, context destroys honoured).
dump_peak() { # dump_peak DUMP KINDS -> device 0's peak of live bytes of those kinds
  $PY scripts/dump_peaks.py --kinds "$2" "$1" | sed -n 's/^dev=0 peak=\([0-9]*\).*/\1/p'
}
say "info: alloc_patterns API device peak from dump: $(dump_peak "$W/ap.dump" device,pitch,managed,async,vmm_physical)"

# ---- processes, another profiler, another CUPTI subscriber -------------------------------------
say "== processes and other tools"
mkdir -p "$W/procs"
(cd "$W/procs" && timeout 300 "$MT" record -q -- $PY "$OLDPWD/samples/processes.py" --spawn 2) > "$W/procs.out" 2>> "$LOG"
check "processes.py: fork child and 2 spawn children ran (no hang)" "0 children_ok=3" "$? $(grep -o 'children_ok=[0-9]*' "$W/procs.out")"
check "one trace per CUDA process (parent + 2 spawned)" 3 "$(ls "$W/procs"/*.mtrace 2>/dev/null | wc -l)"
for f in "$W/procs"/*.mtrace; do "$MT" dump "$f" > /dev/null 2>> "$LOG" || say "FAIL dump $f"; done
(cd "$W" && timeout 300 "$MT" record -q --tensors -o "$W/profiler.mtrace" -- $PY "$OLDPWD/samples/profiler_inside.py") > "$W/profiler.out" 2>> "$LOG"
settle_trace "$W/profiler.mtrace"
check "torch.profiler inside a traced run still works" ok "$(grep -q 'profiler_cuda_events=[1-9]' "$W/profiler.out" && echo ok)"
"$MT" dump "$W/profiler.mtrace" > "$W/profiler.dump" 2>> "$LOG"
check "the trace says where recording paused for the profiler" 1 "$(grep -c 'recording paused: another CUPTI client' "$W/profiler.dump")"
prof_live=$(dump_peak "$W/profiler.dump" async)
check "tensor peak (before the profiler) == max_memory_allocated" "$(sed -n 's/.*max_memory_allocated=\([0-9]*\).*/\1/p' "$W/profiler.out")" "$prof_live"
mkdir -p "$W/conflict"
CUPTI_DIRS=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
(cd "$W/conflict" && LD_LIBRARY_PATH=$CUPTI_DIRS timeout 60 "$MT" record -- "$CONFLICT" subscribe) > "$W/conflict.out" 2> "$W/conflict.err"
rc=$?
cat "$W/conflict.out" "$W/conflict.err" >> "$LOG"
check "another CUPTI subscriber: program runs unchanged" "0 conflict_ok" "$rc $(grep -o 'conflict_ok' "$W/conflict.out")"
check "another CUPTI subscriber: one warning, no trace" "1 0" "$(grep -c 'refused a subscriber' "$W/conflict.err") $(ls "$W/conflict"/*.mtrace 2>/dev/null | wc -l)"
(cd "$W" && LD_LIBRARY_PATH=$CUPTI_DIRS timeout 60 "$MT" record -q -o "$W/stolen.mtrace" -- "$CONFLICT" activity) > "$W/stolen.out" 2>> "$LOG"
rc=$?
settle_trace "$W/stolen.mtrace"
cat "$W/stolen.out" >> "$LOG"
"$MT" dump "$W/stolen.mtrace" > "$W/stolen.dump" 2>> "$LOG"
check "another tool takes the activity API: it works, memtrace keeps all 401 cuMemAlloc" "0 conflict_ok 401" "$rc $(grep -o conflict_ok "$W/stolen.out") $(grep '^event ' "$W/stolen.dump" | grep -v activity | grep -c 'op=alloc kind=device')"
check "... and the trace says activity enrichment stopped" 1 "$(grep -c 'activity enrichment stopped' "$W/stolen.dump")"
(cd "$W" && timeout 300 "$MT" record -q --no-preload --tensors -o "$W/profiler_np.mtrace" -- $PY "$OLDPWD/samples/profiler_inside.py") > "$W/profiler_np.out" 2>> "$LOG"
settle_trace "$W/profiler_np.mtrace"
say "info: with --no-preload torch.profiler saw $(sed -n 's/profiler_cuda_events=//p' "$W/profiler_np.out") CUDA events (memtrace kept CUPTI)"

# ---- cifar.py under three allocator settings ------------------------------------------------------
say "== cifar.py ($STEPS steps)"
cifar() { # cifar NAME ENV... : runs untraced if NAME starts with "plain", else traced
  local name=$1; shift
  local t0 t1 envs=(MEMTRACE_UNUSED=1)
  t0=$(date +%s.%N)
  local extra=() args=()
  for kv in "$@"; do
    case $kv in
      MEMTRACE_TENSORS=1) extra+=(--tensors) ;;
      MEMTRACE_STACKS=*) extra+=(--stacks "${kv#*=}") ;;
      CIFAR_ARGS=*) args+=("${kv#CIFAR_ARGS=}") ;;
      *) envs+=("$kv") ;;
    esac
  done
  if [[ $name == plain* ]]; then
    (cd "$W" && env "${envs[@]}" $PY "$OLDPWD/samples/cifar.py" --steps "$STEPS" "${args[@]}") > "$W/$name.out" 2>> "$LOG"
  else
    (cd "$W" && env "${envs[@]}" "$MT" record "${extra[@]}" -o "$W/$name.mtrace" -- $PY "$OLDPWD/samples/cifar.py" --steps "$STEPS" "${args[@]}") > "$W/$name.out" 2>> "$W/$name.err"
  fi
  local rc=$?
  t1=$(date +%s.%N)
  [[ $name == plain* ]] || settle_trace "$W/$name.mtrace"
  cat "$W/$name.out" "$W/$name.err" 2>/dev/null >> "$LOG"
  echo "wall=$(calc "$t1 - $t0")" >> "$W/$name.out"
  check "cifar $name exit status" 0 $rc
}
val() { sed -n "s/.*$2=\(-\?[0-9.]*\).*/\1/p" "$W/$1.out" | tail -1; }
# Runs are interleaved (untraced, traced, untraced, ...) so drift of the machine hits both sides.
cifar plain0
cifar default
cifar plain1
cifar expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cifar async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync MEMTRACE_STACKS=native
cifar plain_async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
cifar tensors MEMTRACE_TENSORS=1
cifar plain_async2 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
cifar tensors2 MEMTRACE_TENSORS=1
cifar plain_hist0 CIFAR_ARGS=--record-history
cifar tensors_nostack MEMTRACE_TENSORS=1 MEMTRACE_STACKS=none
cifar tensors_noact MEMTRACE_TENSORS=1 MEMTRACE_ACTIVITY=0
cifar tensors_pyonly MEMTRACE_TENSORS=1 MEMTRACE_STACKS=python
cifar tensors_cupti MEMTRACE_TENSORS=1 MEMTRACE_ASYNC_HOOKS=0
cifar plain_hist1 CIFAR_ARGS=--record-history
# In-process A/B (cifar.py --ab): the recorder off and on every 50 steps of one process, which the
# spread between identical processes (several percent on this machine) does not blur.
cifar ab_tensors MEMTRACE_TENSORS=1 CIFAR_ARGS=--steps CIFAR_ARGS=1500 CIFAR_ARGS=--ab CIFAR_ARGS=50
cifar plain_ab_history CIFAR_ARGS=--steps CIFAR_ARGS=1500 CIFAR_ARGS=--ab CIFAR_ARGS=50 CIFAR_ARGS=--ab-what CIFAR_ARGS=history
for n in default expandable async tensors tensors_cupti; do "$MT" dump "$W/$n.mtrace" > "$W/$n.dump" 2>> "$LOG"; done
for n in default expandable async tensors tensors2 tensors_nostack tensors_noact tensors_pyonly tensors_cupti; do
  "$MT" dump "$W/$n.mtrace" 2>/dev/null | grep '^note' | sed "s/^/  $n: /" >> "$LOG"
  say "info: $n: $("$MT" dump "$W/$n.mtrace" 2>/dev/null | grep -o 'stack capture: [^"]*')"
done

# What PyTorch's caching allocator reserved is what went through c10's CUDACachingAllocator; cuBLAS
# and friends also call cudaMalloc directly (their workspaces), which torch does not count.
for n in default expandable; do
  $PY scripts/dump_peaks.py --through CUDACachingAllocator "$W/$n.dump" > "$W/$n.peaks" 2>> "$LOG"
  cat "$W/$n.peaks" >> "$LOG"
  through=$(sed -n 's/^dev=0 .*peak_through=\([0-9]*\).*/\1/p' "$W/$n.peaks")
  check "cifar $n: peak device bytes via CUDACachingAllocator == max_memory_reserved" "$(val $n max_memory_reserved)" "$through"
  say "info: cifar $n: all API device bytes peak $(sed -n 's/^dev=0 peak=\([0-9]*\).*/\1/p' "$W/$n.peaks"); live at that peak outside the allocator: $(sed -n 's/^dev=0 .*other=//p' "$W/$n.peaks")"
done
# cudaMallocAsync: live async allocations vs max_memory_allocated; pool high-water vs reserved.
# Tensor mode: the peak of live tensor (async) bytes against torch's max_memory_allocated, within 1%.
tensor_live=$(dump_peak "$W/tensors.dump" async)
check "tensor mode: live tensor peak within 1% of max_memory_allocated" ok "$($PY -c "a=$tensor_live; b=$(val tensors max_memory_allocated); print('ok' if abs(a-b) <= 0.01*b else 'off by %.3f%% (%d vs %d)' % (100.0*(a-b)/b, a, b))")"
say "tensor mode: live tensor peak $tensor_live vs max_memory_allocated $(val tensors max_memory_allocated)"
grep -q 'python code=' "$W/tensors.dump"; check "tensor mode trace has Python frames" 0 $?
# Tensor mode takes the allocator's calls from libc10_cuda's import slots (async_hooks.c); with
# MEMTRACE_ASYNC_HOOKS=0 CUPTI's callbacks do. Both must see the same tensors.
check "tensor mode: cudaMallocAsync/cudaFreeAsync hooked, not through CUPTI" "1 0" \
  "$(grep -c 'import slots of cudaMallocAsync/cudaFreeAsync redirected' "$W/tensors.dump") $(grep '^event ' "$W/tensors.dump" | grep 'kind=async' | grep -c 'corr=')"
cupti_live=$(dump_peak "$W/tensors_cupti.dump" async)
check "tensor mode through CUPTI (MEMTRACE_ASYNC_HOOKS=0): live tensor peak within 1% of max_memory_allocated" ok "$($PY -c "a=$cupti_live; b=$(val tensors_cupti max_memory_allocated); print('ok' if abs(a-b) <= 0.01*b else 'off by %.3f%% (%d vs %d)' % (100.0*(a-b)/b, a, b))")"
check "tensor mode: as many async allocs hooked as through CUPTI" "$(grep '^event ' "$W/tensors_cupti.dump" | grep -c 'op=alloc kind=async')" "$(grep '^event ' "$W/tensors.dump" | grep -c 'op=alloc kind=async')"
async_live=$(dump_peak "$W/async.dump" async)
pool_hw=$(awk '/op=pool_reserved/ { for (i=2;i<=NF;i++){split($i,kv,"=");f[kv[1]]=kv[2]}; cur[f["addr"]]=f["bytes"]; s=0; for (p in cur) s+=cur[p]; if (s>pk) pk=s } END { print pk+0 }' "$W/async.dump")
pool_high=$($PY -c 'import re,sys; print(max([int(m.group(1),16) for m in re.finditer(r"op=pool_reserved .* aux=(0x[0-9a-f]+)", open(sys.argv[1]).read())] or [0]))' "$W/async.dump")
check "cifar async: pool RESERVED_MEM_HIGH == max_memory_reserved" "$(val async max_memory_reserved)" "$pool_high"
say "cifar async: peak live async bytes $async_live vs max_memory_allocated $(val async max_memory_allocated)"
say "cifar async: pool reserved high-water $pool_hw vs max_memory_reserved $(val async max_memory_reserved)"
for n in default expandable async; do
  say "info: cifar $n events: $(grep -c '^event ' "$W/$n.dump") (activity $(grep '^event ' "$W/$n.dump" | grep -c ' activity')), by op/kind: $(grep '^event ' "$W/$n.dump" | awk '{print $3"/"$4}' | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"
  say "info: cifar $n trace bytes $(stat -c %s "$W/$n.mtrace"), bytes/event $(calc "$(stat -c %s "$W/$n.mtrace") / $(grep -c '^event ' "$W/$n.dump")")"
done
p0=$(val plain0 step_ms); p1=$(val plain1 step_ms); d=$(val default step_ms)
pa=$(calc "($(val plain_async step_ms) + $(val plain_async2 step_ms)) / 2"); ta=$(calc "($(val tensors step_ms) + $(val tensors2 step_ms)) / 2")
ph=$(calc "($(val plain_hist0 step_ms) + $(val plain_hist1 step_ms)) / 2")
say "timing step_ms (tensor mode): untraced cudaMallocAsync $(val plain_async step_ms) / $(val plain_async2 step_ms); traced --tensors (Python+native stacks) $(val tensors step_ms) / $(val tensors2 step_ms); no stacks $(val tensors_nostack step_ms); no activity $(val tensors_noact step_ms); Python-only stacks $(val tensors_pyonly step_ms)"
say "overhead --tensors vs untraced cudaMallocAsync: $(calc "100.0 * ($ta / $pa - 1)") %"
say "in-process A/B, median over adjacent 50-step phases: --tensors (Python+native stacks) $(val ab_tensors ab_overhead_pct) % (off $(val ab_tensors ab_off_ms) ms, on $(val ab_tensors ab_on_ms) ms); torch _record_memory_history(stacks=python) $(val plain_ab_history ab_overhead_pct) % (off $(val plain_ab_history ab_off_ms) ms, on $(val plain_ab_history ab_on_ms) ms)"
check "in-process A/B ran (memtrace_set_paused found, pairs measured)" "ok ok" "$(grep -q 'ab_pairs=[1-9]' "$W/ab_tensors.out" && echo ok) $(grep -q 'ab_pairs=[1-9]' "$W/plain_ab_history.out" && echo ok)"
say "overhead torch _record_memory_history(stacks=python) vs untraced default allocator: $(calc "100.0 * ($ph / (($p0 + $p1) / 2) - 1)") % (step_ms $(val plain_hist0 step_ms) / $(val plain_hist1 step_ms))"
say "timing step_ms: untraced $p0 / $p1, traced default $d, expandable $(val expandable step_ms); async untraced $(val plain_async step_ms) traced $(val async step_ms)"
say "slowdown traced/untraced (step_ms, cudaMallocAsync: every tensor is an event): $(calc "$(val async step_ms) / $(val plain_async step_ms)")"
say "timing wall s: untraced $(val plain0 wall) / $(val plain1 wall), traced default $(val default wall)"
say "slowdown traced/untraced (step_ms, default allocator): $(calc "$d / (($p0 + $p1) / 2)")"
say "slowdown traced/untraced (wall, default allocator): $(calc "$(val default wall) / (($(val plain0 wall) + $(val plain1 wall)) / 2)")"

# ---- analysis commands on the recorded traces -------------------------------------------------------
if [ -x "$MT" ] && "$MT" report --help > /dev/null 2>&1; then
  say "== report / export"
  for n in alloc_patterns default expandable async tensors; do
    run "$MT" report "$W/$n.mtrace"
    "$MT" report --json "$W/$n.mtrace" > "$W/$n.json" 2>> "$LOG"; check "report --json $n" 0 $?
    "$MT" export --format folded --metric peak -o "$W/$n.folded" "$W/$n.mtrace" 2>> "$LOG"; check "export folded $n" 0 $?
    "$MT" export --format chrome -o "$W/$n.json.gz" "$W/$n.mtrace" 2>> "$LOG"; check "export chrome $n" 0 $?
    check "folded peak sums == report peak_bytes ($n)" ok "$($PY - "$W/$n.json" "$W/$n.folded" <<'PYEOF'
import json, sys, collections
rep = json.load(open(sys.argv[1]))
sums = collections.Counter()
for line in open(sys.argv[2]):
    stack, _, b = line.rstrip("\n").rpartition(" ")
    sums[stack.split(";")[0]] += int(b)
want = {("cuda:%d" % d["device"]): d["peak_bytes"] for d in rep["devices"] if d.get("device", -1) >= 0}
print("ok" if all(sums.get(k, 0) == v for k, v in want.items()) else "mismatch %s vs %s" % (dict(sums), want))
PYEOF
)"
  done
  api=$($PY -c 'import json,sys; print([d.get("api_peak_bytes") for d in json.load(open(sys.argv[1]))["devices"] if d["device"]==0][0])' "$W/default.json" 2>>"$LOG")
  check "compactor api_peak_bytes == peak computed from the dump (default)" "$(sed -n 's/^dev=0 peak=\([0-9]*\).*/\1/p' "$W/default.peaks")" "$api"
  for n in tensors default; do
    "$MT" report --json "$W/$n.mtrace" > "$W/$n.json" 2>> "$LOG"
    check "$n: breakdown's process total at exit within 2 MiB of the program's own NVML reading" ok "$($PY - "$W/$n.json" "$(val $n nvml_process_bytes)" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]["breakdown"]["at_end"]
mine, theirs = d["process_bytes"], int(sys.argv[2] or 0)
print("ok" if theirs and abs(mine - theirs) <= 2 << 20 else "report %s vs NVML %s" % (mine, theirs))
PYEOF
)"
  done
  "$MT" report --by-line --file cifar.py "$W/tensors.mtrace" > "$W/tensors.byline" 2>> "$LOG"
  cat "$W/tensors.byline" >> "$LOG"
  grep -A2 'at peak   allocated' "$W/tensors.byline" | sed -n 2p | grep -q 'fc1'; check "by-line table: the fc1 line leads" 0 $?
  grep -q 'request_too_much' <("$MT" report "$W/alloc_patterns.mtrace" 2>&1); check "report names request_too_much" 0 $?
  grep -q 'alloc_patterns.c:[0-9]' <("$MT" report "$W/alloc_patterns.mtrace" 2>&1); check "report shows alloc_patterns.c:LINE" 0 $?
  grep -Eq 'c10::|at::' "$W/default.folded"; check "cifar folded stacks show demangled c10/at names" 0 $?
  grep -q 'mallocAsync.*;cudaMallocAsync ' "$W/tensors.folded"; check "hooked tensor stacks end in c10's mallocAsync -> cudaMallocAsync" 0 $?
fi

# ---- fixtures (tests/data: see its README) ---------------------------------------------------------
say "== fixtures"
(cd "$W" && "$MT" record -q -o "$W/cifar_default.mtrace" -- $PY "$OLDPWD/samples/cifar.py" --steps 5 --warmup 1) > "$W/cifar_default.out" 2>> "$LOG"
settle_trace "$W/cifar_default.mtrace"
(cd "$W" && "$MT" record -q --tensors -o "$W/cifar_tensors.mtrace" -- $PY "$OLDPWD/samples/cifar.py" --steps 30 --warmup 5) > "$W/cifar_tensors.out" 2>> "$LOG"
settle_trace "$W/cifar_tensors.mtrace"
cat "$W/cifar_default.out" "$W/cifar_tensors.out" >> "$LOG"
cp "$W/ap.out" "$W/alloc_patterns.out"
cp samples/cifar.py "$W/cifar.py" # the source the fixtures' line numbers refer to
tar -C "$W" -czf "$OUT/traces.tar.gz" alloc_patterns.mtrace alloc_patterns.out cifar_default.mtrace cifar_default.out \
    cifar_tensors.mtrace cifar_tensors.out cifar.py \
    $(cd "$W" && ls *.out *.json *.folded *.peaks 2>/dev/null | grep -v '^plain' | head -60)
ls -la "$W" >> "$LOG"
say "== $FAILS failed"
[ "$FAILS" -eq 0 ]
