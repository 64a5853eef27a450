#!/usr/bin/env bash
# gpu-check.sh — every check that needs a GPU, in one command.
#
#   scripts/gpu-check.sh [BUILD_DIR]        (default: build-gpu)
#   SECTIONS="basics programs cifar" scripts/gpu-check.sh build-gpu      (a subset)
#   ONLY="graphs_t threads" SECTIONS=programs scripts/gpu-check.sh         (named program runs only)
#
# Runs on the lent GPU machine, from the repository root, over a build made on the development
# machine (scripts/build-for-gpu.sh makes it: the GPU machine has no libdwarf or Criterion).
# Sections (all by default; "multigpu" needs two GPUs and says so when there is one):
#   basics    exit status, a killed process and a torn-down torchrun rank (their running cost totals),
#             every allocation kind of alloc_patterns, processes, memory another process maps
#             through CUDA IPC (samples/ipc.py, torch and CuPy; samples/ipc_v1.c), CUDA arrays
#             (samples/cuda_arrays.py; samples/array_kinds.c: every way, 3000 in a row),
#             cudaDeviceReset with memory live (samples/device_reset.c), other CUPTI clients
#   programs  real programs that must run unchanged under every mode, with PyTorch's own numbers
#             equal to the trace's: CUDA graphs, torch.compile(mode="reduce-overhead"), threads,
#             forked DataLoader workers, torch.profiler alongside, a burst of 1 M allocations,
#             a launcher (torchrun) that makes no context, ResNet-18 and a GPT-2-like model (and
#             with transformers' gradient checkpointing, and under its Trainer; fine-tuned: a frozen
#             backbone, LoRA; plain SGD; reentrant checkpointing), a GAN (samples/gan.py: two models,
#             two optimizers),
#             inference with transformers' generate() and its KV cache (samples/generate.py), a
#             torch.cuda.MemPool over an allocator of the program's own (CUDAPluggableAllocator);
#             samples/graph_nodes.c (graph memory nodes made every way, conditional nodes) against
#             the driver's graph-pool numbers; runs that die of torch.OutOfMemoryError (samples/
#             oom.py: a memory fraction, a full GPU, a CUDA graph's capture) against PyTorch's
#             counters at the error
#   cifar     samples/cifar.py under three allocator settings and tensor modes, report/export
#             outputs, timings, the fixtures for tests/data
#   training  ResNet-18 and a GPT-2-like model trained with AdamW (eager, bf16 autocast,
#             torch.compile) recorded by scripts/gpu-training.sh: the categories (parameters,
#             optimizer state, gradients) against PyTorch's own sums (scripts/categories_vs_torch.py),
#             the fixtures for tests/data, and what recording costs (in-process A/B)
#   hardening the recorder in a hostile process: 20 000 short-lived threads (memory kept per
#             thread), a program that takes the trace's descriptor number over, a file-size limit
#             (ulimit -f) the trace crosses; and check/diff/--markdown on fresh recordings
#   long      600-step training runs (scripts/long-traces.sh): bytes per event of the trace the
#             recorder wrote (<= 3 for tensor mode, issue 17), and PyTorch's allocated counter
#             read back from every tensor event (format version 2 predicts it)
#   pythons   samples/cuda_ctypes.py (the driver API through ctypes, no framework) under the machine's
#             python3 and Debian's 3.14 and 3.15 (scripts/newer-pythons.sh; carry
#             build/newer-pythons/debs and build/newer-pythons/files there): every stack live at
#             the peak with its Python functions and lines (scripts/python_frames_check.py)
#   multigpu  one process on two GPUs (model split across devices, a thread per device;
#             torch.nn.DataParallel with its categories), and torchrun jobs over every GPU: DDP
#             with uneven work per rank, FSDP2, FSDP1, per-rank peaks and categories against
#             each rank's PyTorch numbers, the rank table's imbalance, DDP with
#             NCCL_CUMEM_ENABLE=0 (NCCL's peer buffers mapped by CUDA IPC); a DDP job whose last
#             rank dies of torch.OutOfMemoryError and whose other ranks torchrun kills
# Writes logs and the traces worth keeping under $OUT (default ./gpu-check-out):
#   gpu-check.log   everything, summary.txt   the numbers, traces.tar.gz   fixtures for tests/data
# Exit status: 0 when every assertion held, 1 otherwise (the log says which).
set -u
BUILD=${1:-build-gpu}
OUT=${OUT:-$PWD/gpu-check-out}
STEPS=${CIFAR_STEPS:-300}
SECTIONS=${SECTIONS:-basics programs cifar training hardening long pythons multigpu}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/memtrace-gpu.XXXXXX)
LOG=$OUT/gpu-check.log
SUM=$OUT/summary.txt
MT=$PWD/$BUILD/src/cli/memtrace
AP=$PWD/$BUILD/samples/alloc_patterns
CONFLICT=$PWD/$BUILD/samples/cupti_conflict
S=$PWD/samples
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
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
# part TITLE: a heading in the summary, with the time the part before it took (the lent machines
# run one command for at most 10 minutes: these times say how to split SECTIONS across calls)
PART_T0=$(date +%s)
part() {
  local now; now=$(date +%s)
  [ -n "${PART_NAME:-}" ] && say "   ($PART_NAME: $((now - PART_T0)) s)"
  PART_NAME=${1%% (*}; PART_T0=$now
  [ -n "$1" ] && say "== $1"
}
. "$(dirname "$0")/settle-trace.sh" # record -o NAME.mtrace writes NAME.<pid>.mtrace

part "environment"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; uname -r
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  ldd "$MT" "$BUILD/src/record/libmemtrace_inject.so" | grep -i "not found" && echo "MISSING LIBRARIES"
} >> "$LOG" 2>&1
tail -n 4 "$LOG" | sed 's/^/  /' >&3
NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)

# ---- the same program, untraced and traced: same exit status, same output ----------------------
# same_run NAME "ENV..." "RECORD-OPTIONS" CMD...: runs CMD untraced, then under memtrace record,
# in $W/NAME/{plain,traced}, both with ENV (for --tensors=async: the backend it sets); compares
# exit status, stdout, and stderr without memtrace's lines and PyTorch's timestamped log prefixes. Leaves the trace at $W/NAME/t.mtrace, PyTorch's numbers at
# $W/NAME/{plain,traced}.json (samples/mt_stats.py) and the report at $W/NAME/t.json.
same_run() {
  local name=$1 envs=$2 opts=$3; shift 3
  local d=$W/$name
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
  mkdir -p "$d/plain" "$d/traced"
  # each run compiles for itself (a warm inductor cache would skip the first run's warnings)
  local cache="TORCHINDUCTOR_CACHE_DIR=$d/plain/inductor TRITON_CACHE_DIR=$d/plain/triton"
  (cd "$d/plain" && env $envs $cache SAMPLE_STATS="$d/plain.json" timeout 600 "$@") > "$d/plain.out" 2> "$d/plain.err"
  local rc0=$?
  cache="TORCHINDUCTOR_CACHE_DIR=$d/traced/inductor TRITON_CACHE_DIR=$d/traced/triton"
  (cd "$d/traced" && env $envs $cache SAMPLE_STATS="$d/traced.json" timeout 600 "$MT" record -q $opts -o "$d/t.mtrace" -- "$@") > "$d/traced.out" 2> "$d/traced.err"
  rc_=$?; settle_trace "$d/t.mtrace"; (exit $rc_)
  local rc1=$?
  { echo "--- $name ($envs) $opts: $*"; cat "$d/plain.err" "$d/traced.out" "$d/traced.err"; } >> "$LOG"
  # PyTorch's out-of-memory message gives the GPU's free bytes and the process's: both are
  # CUPTI's 12 MiB per context smaller and larger under memtrace (the devmem check below)
  clean() { grep -v '^memtrace: ' "$1" | sed -E -e 's/^\[[WIE][0-9]+ [0-9:.]+ [^]]*\]/[torch log]/' \
              -e 's/of which [0-9.]+ [KMGT]?i?B is free/of which N is free/' \
              -e 's/this process has [0-9.]+ [KMGT]?i?B memory in use/this process has N memory in use/' ; }
  check "$name: exit status as untraced" "$rc0" "$rc1"
  check "$name: stdout as untraced" ok "$(cmp -s "$d/plain.out" "$d/traced.out" && echo ok || diff "$d/plain.out" "$d/traced.out" | head -3 | tr '\n' ' ')"
  check "$name: stderr as untraced (memtrace's lines aside)" ok "$(diff <(clean "$d/plain.err") <(clean "$d/traced.err") > /dev/null && echo ok || diff <(clean "$d/plain.err") <(clean "$d/traced.err") | head -3 | tr '\n' ' ')"
  "$MT" report --json "$d/t.mtrace" > "$d/t.json" 2>> "$LOG"
}
# torch_match NAME MODE [--captured] [--devices N]: the trace of same_run NAME against PyTorch's
# numbers of that traced run (scripts/trace_vs_torch.py).
torch_match() {
  local name=$1 mode=$2; shift 2
  [ -f "$W/$name/t.json" ] || return 0 # not run (ONLY)
  check "$name: trace == PyTorch ($mode${*:+ $*}), no anomaly, no unknown device" ok \
    "$($PY scripts/trace_vs_torch.py "$mode" "$W/$name/t.json" "$W/$name/traced.json" "$@" 2>&1 | tail -1)"
}

if want basics; then
# ---- exit status is the command's --------------------------------------------------------------
part "exit status"
(cd "$W" && "$MT" record -q -- sh -c 'exit 7'); check "record returns the command's status" 7 $?
(cd "$W" && "$MT" record -q -- sh -c 'kill -TERM $$'); check "signal death is 128+N" 143 $?

# A process killed mid-run writes no notes at exit: its running totals (noted 5 s after the trace
# is created, then at doubling intervals) still say what recording cost, and up to when.
mkdir -p "$W/killed"
(cd "$W/killed" && timeout 120 "$MT" record -q --tensors -o "$W/killed/k.mtrace" -- $PY -c '
import os, time, torch
t0, keep = time.time(), []
while time.time() - t0 < 12:
    a = torch.randn(512, 512, device="cuda")
    keep = keep[-8:] + [(a @ a).sum()]
torch.cuda.synchronize()
os.kill(os.getpid(), 9)') >> "$LOG" 2>&1
check "a process killed by SIGKILL: record returns 137" 137 $?
settle_trace "$W/killed/k.mtrace"
"$MT" report --json "$W/killed/k.mtrace" > "$W/killed/k.json" 2>> "$LOG"
"$MT" report "$W/killed/k.mtrace" 2>> "$LOG" | grep '^recording cost' | tee -a "$LOG" | grep -q 'the process left no notes at exit: these are its last running totals'
check "... its report gives the recording cost of its last running totals" 0 $?
check "... which cover 5-13 s of the run, with tensor reports and rare work, no END" ok "$($PY - "$W/killed/k.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["recording_cost"]
ok = (c and c["until_ns"] and 5e9 <= c["until_ns"] <= 13e9 and c["until_ns"] <= r["duration_ns"]
      and c["tensor_reports"]["calls"] > 1000 and c["rare_work"]["calls"] > 0 and not r["ended_cleanly"])
print("ok" if ok else "cost %s, duration %s, ended %s" % (c, r["duration_ns"], r["ended_cleanly"]))
PYEOF
)"
say "info: killed process: $("$MT" dump "$W/killed/k.mtrace" 2>/dev/null | grep -c 'recording cost so far') running totals; $("$MT" report "$W/killed/k.mtrace" 2>/dev/null | grep '^recording cost' | cut -c1-160)"
# The same as it happens in a job: one rank fails after 12 s, torchrun tears the other down
# (SIGTERM: Python dies without its atexit handlers). Both ranks on this one GPU; no process group.
mkdir -p "$W/teardown"
cat > "$W/teardown/job.py" <<'PYEOF'
import os, sys, time, torch
rank, t0, keep = int(os.environ["RANK"]), time.time(), []
while time.time() - t0 < (12 if rank == 1 else 120):
    a = torch.randn(256, 256, device="cuda")
    keep = keep[-4:] + [(a @ a).sum()]
    time.sleep(0.001)
torch.cuda.synchronize()
sys.exit("rank %d fails" % rank)
PYEOF
(cd "$W/teardown" && timeout 180 "$MT" record -q --tensors -o "$W/teardown/job.rank%r.mtrace" -- torchrun --standalone --nproc-per-node 2 job.py) >> "$LOG" 2>&1
check "a torchrun job whose rank 1 fails: record returns its failure" 1 $?
for r in 0 1; do "$MT" report --json "$W/teardown/job.rank$r.mtrace" > "$W/teardown/r$r.json" 2>> "$LOG"; done
check "... rank 0, torn down: its running totals (no END); rank 1, exited: its notes at exit" ok "$($PY - "$W/teardown/r0.json" "$W/teardown/r1.json" <<'PYEOF'
import json, sys
r0, r1 = (json.load(open(p)) for p in sys.argv[1:3])
c0, c1 = r0["recording_cost"], r1["recording_cost"]
ok = (c0 and c0["until_ns"] and c0["tensor_reports"]["calls"] > 0 and not r0["ended_cleanly"]
      and c1 and c1["until_ns"] is None and r1["ended_cleanly"])
print("ok" if ok else "rank 0 %s (ended %s); rank 1 %s (ended %s)" % (c0, r0["ended_cleanly"], c1, r1["ended_cleanly"]))
PYEOF
)"

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
part "alloc_patterns"
(cd "$W" && "$MT" record -o "$W/alloc_patterns.mtrace" -- "$AP") > "$W/ap.out" 2>> "$LOG"
rc_=$?; settle_trace "$W/alloc_patterns.mtrace"; (exit $rc_)
check "alloc_patterns ran" 0 $?
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
check "no event without a device (device kinds)" 0 "$(grep '^event ' "$W/ap.dump" | grep -E 'kind=(device|pitch|async|managed|vmm_physical) ' | grep -c 'dev=-1')"
check "no PyTorch segment flag outside PyTorch" 0 "$(grep -c ' segment' "$W/ap.dump")"
say "info: driver-internal events (activity): $(grep '^event ' "$W/ap.dump" | grep -c ' activity') ; stack nodes: $(grep -c '^node ' "$W/ap.dump"); modules: $(grep -c '^module ' "$W/ap.dump"); symbols: $(grep -c '^symbol ' "$W/ap.dump")"
grep '^note' "$W/ap.dump" | sed 's/^/  /' >> "$LOG"

# ---- host memory made by device-kind calls (samples/host_memory.c) ---------------------------------
# cuMemCreate on a host NUMA node and a memory pool on the host give pinned host RAM: on the host in
# the report, not on cuda:0, and their releases (which name no location) found there.
HM=$PWD/$BUILD/samples/host_memory
if [ -x "$HM" ]; then
  part "host_memory"
  (cd "$W" && "$MT" record -o "$W/host_memory.mtrace" -- "$HM") > "$W/hm.out" 2>> "$LOG"
  rc_=$?; settle_trace "$W/host_memory.mtrace"; (exit $rc_)
  check "host_memory ran" 0 $?
  cat "$W/hm.out" >> "$LOG"
  "$MT" report --json "$W/host_memory.mtrace" > "$W/hm.json" 2>> "$LOG"
  "$MT" report "$W/host_memory.mtrace" >> "$LOG" 2>&1
  "$MT" dump "$W/host_memory.mtrace" | grep '^event' | grep -v 'kind=driver' >> "$LOG" 2>&1
  cp "$W/host_memory.mtrace" "$OUT/host_memory.mtrace"; cp "$W/hm.out" "$OUT/host_memory.out" # tests/data
  check "host_memory: host-located VMM and pool memory counted on the host, device memory on cuda:0, every release found" ok "$($PY - "$W/hm.json" "$W/hm.out" <<'PYEOF'
import json, re, sys
rep = json.load(open(sys.argv[1]))
exp = {k: int(v) for k, v in re.findall(r"expect (\w+)=(\d+)", open(sys.argv[2]).read())}
d0 = [d for d in rep["devices"] if d["device"] == 0][0]
k = d0["peak_by_kind"]
host = rep.get("host") or {}
problems = []
if k.get("vmm_physical", 0) + k.get("async", 0) != exp["device_bytes"]:
    problems.append("cuda:0 peak by kind %s, expected %d" % (k, exp["device_bytes"]))
if d0["vmm_mapped_peak_bytes"] != 32 << 20:
    problems.append("cuda:0 mapped peak %d" % d0["vmm_mapped_peak_bytes"])
if host.get("peak_bytes", 0) != exp["host_peak"] or host.get("end_bytes", 0) != 0:
    problems.append("host peak %s end %s, expected %d and 0" % (host.get("peak_bytes"), host.get("end_bytes"), exp["host_peak"]))
if exp["host_peak"] == 0:
    problems.append("nothing on the host was made (skipped)")
an = rep["anomalies"]
if an["unmatched_frees"] or an["unknown_device_allocations"] or any(d["device"] < 0 for d in rep["devices"]):
    problems.append("anomalies %s, devices %s" % (an, [d["root"] for d in rep["devices"]]))
print("ok" if not problems else "; ".join(problems))
PYEOF
)"
fi

# ---- processes, other CUPTI clients ----------------------------------------------------------------
part "processes and other tools"
mkdir -p "$W/procs"
(cd "$W/procs" && timeout 300 "$MT" record -q -- $PY "$S/processes.py" --spawn 2) > "$W/procs.out" 2>> "$LOG"
check "processes.py: fork child and 2 spawn children ran (no hang)" "0 children_ok=3" "$? $(grep -o 'children_ok=[0-9]*' "$W/procs.out")"
check "one trace per CUDA process (parent + 2 spawned)" 3 "$(ls "$W/procs"/*.mtrace 2>/dev/null | wc -l)"
for f in "$W/procs"/*.mtrace; do "$MT" dump "$f" > /dev/null 2>> "$LOG" || say "FAIL dump $f"; done
# Another process's memory mapped here through legacy CUDA IPC (samples/ipc.py): the parent's 64 MiB
# are the parent's. The child's trace has the mapping as one imported allocation, closed, and no
# driver-internal record of it (CUPTI reports the mapping as a device allocation of the child's);
# each process's API peak is what its own allocator reserved.
for lib in torch cupy; do
  if [ "$lib" = cupy ] && ! $PY -c 'import cupy' 2> /dev/null; then say "SKIP ipc ($lib): no cupy"; continue; fi
  d=$W/ipc_$lib; mkdir -p "$d"
  (cd "$d" && timeout 300 "$MT" record -q -- $PY "$S/ipc.py" --lib $lib) > "$d.out" 2>> "$LOG"
  rc=$?; cat "$d.out" >> "$LOG"
  check "ipc.py --lib $lib: parent and child ran" "0 child_rc=0" "$rc $(grep -o 'child_rc=[0-9-]*' "$d.out")"
  child=""; parent=""
  for f in "$d"/*.mtrace; do
    "$MT" dump "$f" > "$f.dump" 2>> "$LOG"
    if grep -q 'api=cuIpcOpenMemHandle' "$f.dump"; then child=$f; else parent=$f; fi
  done
  [ -n "$child" ] && [ -n "$parent" ] || { say "FAIL ipc ($lib): no child trace with cuIpcOpenMemHandle"; FAILS=$((FAILS+1)); continue; }
  cp "$child" "$OUT/ipc_${lib}_child.mtrace"
  # CuPy's child opens the handle twice (the same mapping, counted) and closes it twice
  n=1; [ "$lib" = cupy ] && n=2
  check "ipc ($lib) child: the 64 MiB mapped, imported, $n open(s) and close(s), none unmatched or replaced" "$n $n 0" \
    "$(grep -c '^event .*op=alloc kind=device .*bytes=67108864 .*api=cuIpcOpenMemHandle.* imported' "$child.dump") $(grep -c '^event .*op=free kind=device .*api=cuIpcCloseMemHandle.* imported' "$child.dump") $("$MT" report --json "$child" | $PY -c 'import json,sys; a = json.load(sys.stdin)["anomalies"]; print(a["unmatched_frees"] + a["double_frees"] + a["replaced"])')"
  [ "$lib" = cupy ] && check "ipc (cupy) child: the second open gave the same mapping" 1 "$(grep -o 'same_mapping=[0-9]' "$d.out" | cut -d= -f2)"
  check "ipc ($lib) child: no driver-internal record of the mapping (none of 1 MiB or more)" 0 \
    "$(grep '^event .*kind=driver' "$child.dump" | grep -o ' bytes=[0-9]*' | awk -F= '$2 >= 1048576' | wc -l)"
  for who in child parent; do
    f=$child; [ $who = parent ] && f=$parent
    want_=$(grep -o "ipc_$who .*reserved_peak=[0-9]*" "$d.out" | grep -o 'reserved_peak=[0-9]*' | cut -d= -f2)
    check "ipc ($lib) $who: API peak == its own allocator's reserved peak" "$want_" \
      "$("$MT" report --json "$f" | $PY -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["api_peak_bytes"])')"
  done
done
# CUDA arrays (samples/cuda_arrays.py, CuPy): CUPTI reports them in activity records only; each is
# the program's, with its creating line's stack, freed by its release record; the refused one is
# a failed request of the bytes it asked for
if $PY -c 'import cupy' 2> /dev/null; then
  d=$W/arrays; mkdir -p "$d"
  (cd "$d" && timeout 300 "$MT" record -q -o "$d/a.mtrace" -- $PY "$S/cuda_arrays.py") > "$d.out" 2>> "$LOG"
  rc_=$?; settle_trace "$d/a.mtrace"; (exit $rc_)
  check "cuda_arrays.py: ran, the 2 TiB array refused" "0 refused=1" "$? $(grep -o 'refused=[0-9]' "$d.out")"
  "$MT" dump "$d/a.mtrace" > "$d/a.dump" 2>> "$LOG"; "$MT" report --json "$d/a.mtrace" > "$d/a.json" 2>> "$LOG"
  cp "$d/a.mtrace" "$OUT/cuda_arrays.mtrace"
  check "cuda arrays: 4 made (3 x 64 MiB, 16 MiB), 4 freed, none driver-internal of 1 MiB or more" "3 1 4 0" \
    "$(grep -c '^event .*op=alloc kind=array .*bytes=67108864 ' "$d/a.dump") $(grep -c '^event .*op=alloc kind=array .*bytes=16777216 ' "$d/a.dump") $(grep -c '^event .*op=free kind=array ' "$d/a.dump") $(grep '^event .*kind=driver' "$d/a.dump" | grep -o ' bytes=[0-9]*' | awk -F= '$2 >= 1048576' | wc -l)"
  check "cuda arrays: every array's bytes under its creating line's stack" 218103808 \
    "$("$MT" export --format folded --metric alloc --frames all "$d/a.mtrace" 2>> "$LOG" | grep 'make (.*cuda_arrays.py:[0-9]*)' | awk '{s += $NF} END {print s + 0}')"
  check "cuda arrays: the peak (208 MiB of arrays, none the driver's), all freed, no anomaly" "218103808 218103808 0 0 0" \
    "$($PY -c 'import json,sys; d = json.load(open(sys.argv[1])); v = d["devices"][0]; print(v["api_peak_bytes"], v["peak_by_kind"].get("array"), v["driver_bytes_at_peak"], v["leak_bytes"], d["anomalies"]["unmatched_frees"])' "$d/a.json")"
  check "cuda arrays: the refusal is a failed request of 2 TiB" 1 "$(grep -c '^event .*op=failed kind=array .*bytes=2199023255552 ' "$d/a.dump")"
  # the same under --activity off: no array in the trace (only the refused one), and the report
  # says "not recorded", not "0 B" (activity records off: the analysis reads the recorder's note)
  (cd "$d" && timeout 300 "$MT" record -q --activity off -o "$d/off.mtrace" -- $PY "$S/cuda_arrays.py") > "$d.off.out" 2>> "$LOG"
  rc_=$?; settle_trace "$d/off.mtrace"
  "$MT" report "$d/off.mtrace" > "$d/off.txt" 2>> "$LOG"; "$MT" report --json "$d/off.mtrace" > "$d/off.json" 2>> "$LOG"
  check "cuda arrays, --activity off: ran; no array made in the trace; the report says driver-internal memory and arrays were not recorded" "0 0 off 1" \
    "$rc_ $("$MT" dump "$d/off.mtrace" 2>> "$LOG" | grep -c '^event .*op=alloc kind=array ') $($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["activity_records"])' "$d/off.json") $(grep -c '^  driver-internal  not recorded, nor CUDA arrays' "$d/off.txt")"
  check "cuda arrays, recorded with activity records: the JSON says on" on "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["activity_records"])' "$d/a.json")"
else
  say "SKIP cuda arrays: no cupy"
fi
# CUDA arrays made every way the driver has (samples/array_kinds.c): 3000 in a row (more than the
# recorder once kept stacks for before their activity records came), the first versions of the
# calls, a mipmapped array, a refused one; then the primary context is released. Every array keeps
# its creating function's stack, and no record of the context lands after its destruction.
# samples/device_reset.c: cudaDeviceReset with a cudaMalloc and a CUDA array live, then a second
# context. samples/ipc_v1.c: another process's memory opened by the first cuIpcOpenMemHandle.
# order_check TRACE.dump: events of a context written after its CTX_DESTROY but stamped before it.
# late_check TRACE.dump: activity records written after a callback event stamped more than 2 ms
# after them (the writer's drain sorts what it holds; the recorder flushes CUPTI before each).
late_check() {
  $PY - "$1" <<'PYEOF'
import sys
latest, late = 0.0, 0
for line in open(sys.argv[1]):
    if not line.startswith("event "):
        continue
    f = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    t = float(f["t"])
    if line.rstrip().endswith(" activity") or " activity " in line:
        late += t < latest - 0.002
    elif f["op"] in ("alloc", "free", "failed"):
        latest = max(latest, t)
print(late)
PYEOF
}
order_check() {
  $PY - "$1" <<'PYEOF'
import sys
seen, bad = {}, 0
for line in open(sys.argv[1]):
    if not line.startswith("event "):
        continue
    f = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    t, ctx = float(f["t"]), f.get("ctx")
    if f["op"] == "ctx_destroy":
        seen[ctx] = t
    elif ctx in seen and t < seen[ctx]:
        bad += 1
print(bad)
PYEOF
}
AK=$PWD/$BUILD/samples/array_kinds DR=$PWD/$BUILD/samples/device_reset IV=$PWD/$BUILD/samples/ipc_v1
if [ -x "$AK" ]; then
  part "array kinds, cudaDeviceReset, IPC (first version)"
  d=$W/array_kinds; mkdir -p "$d"
  (cd "$d" && timeout 300 "$MT" record -q -o "$d/a.mtrace" -- "$AK") > "$d.out" 2>> "$LOG"
  rc_=$?; settle_trace "$d/a.mtrace"; cat "$d.out" >> "$LOG"
  check "array_kinds ran" "0 1" "$rc_ $(grep -c '^array_kinds ok' "$d.out")"
  "$MT" dump "$d/a.mtrace" > "$d/a.dump" 2>> "$LOG"
  "$MT" report --json "$d/a.mtrace" > "$d/a.json" 2>> "$LOG"
  "$MT" report "$d/a.mtrace" >> "$LOG" 2>&1
  "$MT" export --format folded --metric alloc --frames all "$d/a.mtrace" > "$d/a.folded" 2>> "$LOG"
  cp "$d/a.mtrace" "$OUT/array_kinds.mtrace"; cp "$d.out" "$OUT/array_kinds.out" # tests/data
  check "array_kinds: every array made is in the trace with its creating function's stack, freed, the first versions' failures and the refusal are failed requests with nothing in use, the peak is an array beside a cuMemCreate, nothing unmatched" ok "$($PY - "$d.out" "$d/a.dump" "$d/a.folded" "$d/a.json" <<'PYEOF'
import json, re, sys
exp = {k: int(v) for line in open(sys.argv[1]) if line.startswith("expect ")
       for k, v in re.findall(r"(\w+)=(\d+)", line)}
allocs, frees, failed, nostack = [], 0, [], 0
for line in open(sys.argv[2]):
    if not line.startswith("event ") or " kind=array " not in line:
        continue
    f = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    if f["op"] == "alloc":
        allocs.append(int(f["bytes"])); nostack += f["stack"] == "0"
    elif f["op"] == "free":
        frees += 1
    elif f["op"] == "failed":
        failed.append((f["api"], int(f["bytes"])))
folded = {}
for line in open(sys.argv[3]):
    stack, n = line.rsplit(" ", 1)
    for fn in ("many_arrays", "v1_arrays", "mipmapped", "beside_vmm"):
        if ";" + fn + " (" in stack:
            folded[fn] = folded.get(fn, 0) + int(n)
rep = json.load(open(sys.argv[4]))
d0, an = rep["devices"][0], rep["anomalies"]
many = exp["many"] * 16384
problems = []
if allocs.count(16384) < exp["many"] or folded.get("many_arrays") != many:
    problems.append("many: %d of 16 KiB, %s B under many_arrays" % (allocs.count(16384), folded.get("many_arrays")))
big = [b for b in allocs if b >= 64 << 20]  # beside_vmm's array
beside = big[0] if len(big) == 1 else 0
vmm = exp["beside_peak"] - (64 << 20)
if not beside or folded.get("beside_vmm") != beside + vmm:
    problems.append("beside_vmm: arrays %s, %s B under beside_vmm" % (big, folded.get("beside_vmm")))
mip = sum(allocs) - many - exp["v1_bytes"] - beside
if mip <= 4 << 20 or folded.get("mipmapped") != mip:
    problems.append("mipmapped: %d B of records, %s B under mipmapped" % (mip, folded.get("mipmapped")))
if folded.get("v1_arrays", 0) != exp["v1_bytes"]:
    problems.append("v1: %s B under v1_arrays, expected %d" % (folded.get("v1_arrays"), exp["v1_bytes"]))
want_failed = exp["v1_failed"] + exp["refused"]
if len(failed) != want_failed or (exp["refused"] and ("cuArray3DCreate", exp["refused_bytes"]) not in failed):
    problems.append("failed %s, expected %d" % (failed, want_failed))
if nostack or frees != len(allocs):
    problems.append("%d arrays without a stack, %d frees of %d" % (nostack, frees, len(allocs)))
# the run's peak: the array and the cuMemCreate together (its records applied in their place)
if d0["peak_bytes"] != beside + vmm or d0["end_bytes"] != 0:
    problems.append("peak %d (expected %d), end %d" % (d0["peak_bytes"], beside + vmm, d0["end_bytes"]))
if an["unmatched_frees"] or an["ctx_destroy_released"]:
    problems.append("anomalies %s" % an)
# every array was released before the refused requests: nothing in use at them (the releases'
# activity records are flushed before a failed request is written)
busy = [f["in_use_bytes"] for f in rep["failed_requests"] if f["in_use_bytes"]]
if busy:
    problems.append("in use at the failed requests: %s" % busy)
print("ok" if not problems else "; ".join(problems))
PYEOF
)"
  check "array_kinds: no event of the context written after its destruction, no warning about stacks, no activity record behind a later callback event" "0 0 0" \
    "$(order_check "$d/a.dump") $(grep -c 'without the stack' "$d/a.dump") $(late_check "$d/a.dump")"
  say "info: array_kinds: $(grep -c '^event .*op=alloc kind=array' "$d/a.dump") arrays, $(grep '^v1:' "$d.out")"

  d=$W/device_reset; mkdir -p "$d"
  (cd "$d" && timeout 300 "$MT" record -q -o "$d/r.mtrace" -- "$DR") > "$d.out" 2>> "$LOG"
  rc_=$?; settle_trace "$d/r.mtrace"; cat "$d.out" >> "$LOG"
  check "device_reset ran" "0 1" "$rc_ $(grep -c '^device_reset ok' "$d.out")"
  "$MT" dump "$d/r.mtrace" > "$d/r.dump" 2>> "$LOG"
  "$MT" report --json "$d/r.mtrace" > "$d/r.json" 2>> "$LOG"
  "$MT" report "$d/r.mtrace" >> "$LOG" 2>&1
  cp "$d/r.mtrace" "$OUT/device_reset.mtrace"; cp "$d.out" "$OUT/device_reset.out" # tests/data
  check "device_reset: the reset ends the 64 MiB and the 16 MiB array, nothing unmatched, none of the first context's records after its destruction, the second context's 32 MiB freed" ok "$($PY - "$d.out" "$d/r.dump" "$d/r.json" <<'PYEOF'
import json, re, sys
exp = {k: int(v) for k, v in re.findall(r"expect (\w+)=(\d+)", open(sys.argv[1]).read())}
ev = []
for line in open(sys.argv[2]):
    if line.startswith("event "):
        ev.append(dict(x.split("=", 1) for x in line.split()[1:] if "=" in x))
destroys = [i for i, e in enumerate(ev) if e["op"] == "ctx_destroy"]
problems = []
if not destroys:
    problems.append("no ctx_destroy")
else:
    first = destroys[0]
    c1 = ev[first]["ctx"]
    big = [i for i, e in enumerate(ev) if e["op"] == "alloc" and e["kind"] in ("device", "array") and e["ctx"] == c1 and int(e["bytes"]) >= 16 << 20]
    kinds = sorted(ev[i]["kind"] for i in big)
    if kinds != ["array", "device"] or any(i > first for i in big) or \
            sum(int(ev[i]["bytes"]) for i in big) < exp["ended_by_reset"]:
        problems.append("first context's big allocations %s (destroy at #%d)" % ([(ev[i]["kind"], ev[i]["bytes"], i) for i in big], first))
    late = [e for e in ev[first + 1:] if e["ctx"] == c1 and float(e["t"]) < float(ev[first]["t"])]
    if late:
        problems.append("%d events of context %s after its destruction, stamped before it" % (len(late), c1))
    second = [e for e in ev[first + 1:] if e["op"] in ("alloc", "free") and e["kind"] == "device"]
    if [(e["op"], e.get("bytes")) for e in second][:1] != [("alloc", str(exp["second"]))] or len(second) != 2:
        problems.append("second context: %s" % [(e["op"], e["bytes"], e["ctx"]) for e in second])
an = json.load(open(sys.argv[3]))["anomalies"]
if an["unmatched_frees"] or an["double_frees"] or an["ctx_destroy_released"] < 2:
    problems.append("anomalies %s" % an)
print("ok" if not problems else "; ".join(problems))
PYEOF
)"
  say "info: device_reset: $(grep -c '^event .*kind=driver' "$d/r.dump") driver-internal events, ctx_destroy_released $($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["anomalies"]["ctx_destroy_released"])' "$d/r.json")"

  d=$W/ipc_v1; mkdir -p "$d"
  (cd "$d" && timeout 300 "$MT" record -q -o "$d/i.%p.mtrace" -- "$IV") > "$d.out" 2>> "$LOG"
  rc_=$?; cat "$d.out" >> "$LOG"
  check "ipc_v1: parent and child ran" "0 child_rc=0" "$rc_ $(grep -o 'child_rc=[0-9-]*' "$d.out")"
  child=""
  for f in "$d"/*.mtrace; do
    "$MT" dump "$f" > "$f.dump" 2>> "$LOG"
    grep -q 'api=cuIpcOpenMemHandle ' "$f.dump" && child=$f
  done
  check "ipc_v1 child: the 64 MiB opened by the first cuIpcOpenMemHandle, imported, closed, nothing unmatched, API peak 0" "1 1 0 0" \
    "$(grep -c '^event .*op=alloc kind=device .*bytes=67108864 .*api=cuIpcOpenMemHandle .* imported' "$child.dump" 2>/dev/null) $(grep -c '^event .*op=free kind=device .*api=cuIpcCloseMemHandle.* imported' "$child.dump" 2>/dev/null) $("$MT" report --json "$child" 2>> "$LOG" | $PY -c 'import json,sys; a = json.load(sys.stdin); print(a["anomalies"]["unmatched_frees"], a["devices"][0]["api_peak_bytes"])')"
fi
mkdir -p "$W/conflict"
CUPTI_DIRS=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
(cd "$W/conflict" && LD_LIBRARY_PATH=$CUPTI_DIRS timeout 60 "$MT" record -o "$W/conflict/c.mtrace" -- "$CONFLICT" subscribe) > "$W/conflict.out" 2> "$W/conflict.err"
rc_=$?; settle_trace "$W/conflict/c.mtrace"; (exit $rc_)
rc=$?
cat "$W/conflict.out" "$W/conflict.err" >> "$LOG"
check "a CUPTI subscriber from before cuInit: it gets exactly its own callback" "0 conflict_ok" "$rc $(grep -o 'conflict_ok' "$W/conflict.out")"
check "... and memtrace records beside it (the 1 MiB cuMemAlloc)" 1 "$("$MT" dump "$W/conflict/c.mtrace" 2>/dev/null | grep '^event ' | grep -v activity | grep -c 'op=alloc kind=device .*bytes=1048576 ')"
check "... no warning" 0 "$(grep -c 'memtrace: .*refused' "$W/conflict.err")"
(cd "$W" && LD_LIBRARY_PATH=$CUPTI_DIRS timeout 60 "$MT" record -q -o "$W/stolen.mtrace" -- "$CONFLICT" activity) > "$W/stolen.out" 2>> "$LOG"
rc_=$?; settle_trace "$W/stolen.mtrace"; (exit $rc_)
rc=$?
cat "$W/stolen.out" >> "$LOG"
"$MT" dump "$W/stolen.mtrace" > "$W/stolen.dump" 2>> "$LOG"
check "another tool takes the activity API: it works, memtrace keeps all 401 cuMemAlloc" "0 conflict_ok 401" "$rc $(grep -o conflict_ok "$W/stolen.out") $(grep '^event ' "$W/stolen.dump" | grep -v activity | grep -c 'op=alloc kind=device')"
check "... and the trace says activity enrichment stopped" 1 "$(grep -c 'activity enrichment stopped' "$W/stolen.dump")"
check "... and the report says when" 1 "$("$MT" report "$W/stolen.mtrace" 2>/dev/null | grep -c 'WARNING (recorder, at +[0-9.]* s): activity enrichment stopped')"
fi

# ---- real programs: unchanged under every mode, numbers equal to PyTorch's -----------------------
if want programs; then
part "programs (issue 11: never break or mislead a real program)"
ASYNC=PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
same_run graphs "" "" $PY "$S/graphs.py";                           torch_match graphs default --captured
same_run graphs_t "" "--tensors" $PY "$S/graphs.py";                torch_match graphs_t tensors --captured
same_run graphs_ta "$ASYNC" "--tensors=async" $PY "$S/graphs.py";   torch_match graphs_ta async --captured
same_run graphs_async "$ASYNC" "" $PY "$S/graphs.py";               torch_match graphs_async async --captured
same_run graphs_exp "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" "--tensors" $PY "$S/graphs.py"
torch_match graphs_exp tensors --captured
# A torch.cuda.MemPool whose segments come from the program's own allocator (CUDAPluggableAllocator):
# its segments are PyTorch's like any other (vLLM and NCCL plug allocators in the same way)
PA=$PWD/$BUILD/samples/libpluggable_alloc.so
same_run mem_pool "" "" $PY "$S/mem_pool.py" "$PA";             torch_match mem_pool default
same_run mem_pool_t "" "--tensors" $PY "$S/mem_pool.py" "$PA";  torch_match mem_pool_t tensors
# Graph memory nodes made every way CUDA offers, and conditional nodes (if/else, switch, while),
# without PyTorch: against the driver's own graph-pool high-water mark.
GN=$PWD/$BUILD/samples/graph_nodes
for m in "graph_nodes|" "graph_nodes_t|--tensors" "graph_nodes_s|--stacks none --activity off"; do
  n=${m%%|*}
  same_run "$n" "" "${m#*|}" "$GN"
  [ -f "$W/$n/t.json" ] && check "$n: each graph memory node recorded once, captured; graph pool == driver's" ok \
    "$("$MT" dump "$W/$n/t.mtrace" > "$W/$n/t.dump" 2>> "$LOG"; cp "$W/$n/t.dump" "$OUT/$n.dump"; $PY scripts/graph_nodes_vs_trace.py "$W/$n/t.dump" "$W/$n/t.json" "$W/$n/traced.json" 2>&1 | tail -1)"
done
# Other libraries' caches, named after them and never called a leak: CuPy's pool, JAX's (XLA's)
# preallocation, against what the library itself says.
for lib in cupy jax; do
  same_run "holders_$lib" "" "" $PY "$S/holders.py" $lib
  [ -f "$W/holders_$lib/t.json" ] && check "holders_$lib: the cache named after its allocator, = the library's number, no leak" ok \
    "$($PY scripts/holders_vs_trace.py "$W/holders_$lib/t.json" "$W/holders_$lib/traced.json" 2>&1 | tail -1)"
done
# JAX with XLA's platform allocator (XLA_PYTHON_CLIENT_ALLOCATOR=platform, the report's advice
# where XLA's BFC region hides the arrays): every array its own driver allocation, so the MLP's
# weights and biases live at the peak under init()'s line are the parameters, each rounded up to
# the driver's granularity (2 MiB), and no XLA BFC reservation is seen
same_run jax_platform "XLA_PYTHON_CLIENT_ALLOCATOR=platform" "" $PY "$S/jax_train.py"
[ -f "$W/jax_platform/t.json" ] && check "jax_platform: the parameters at the peak under init(), one allocation each; no BFC region" ok \
  "$("$MT" export --format folded "$W/jax_platform/t.mtrace" 2>> "$LOG" | $PY -c '
import json, sys
st, rep = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
got = sum(int(l.rsplit(" ", 1)[1]) for l in sys.stdin if "init (samples/jax_train.py:" in l)
hi = st["param_bytes"] + st["param_arrays"] * (2 << 20)
owner = rep["devices"][0]["breakdown"]["at_peak"].get("other_cache_owner")
print("ok" if st["param_bytes"] <= got <= hi and owner is None else
      "under init() %d, parameters %d (at most %d rounded); cache owner %s" % (got, st["param_bytes"], hi, owner))' "$W/jax_platform/traced.json" "$W/jax_platform/t.json" 2>&1 | tail -1)"
same_run compile "" "" $PY "$S/graphs.py" --compile;                torch_match compile default --captured
same_run compile_t "" "--tensors" $PY "$S/graphs.py" --compile;     torch_match compile_t tensors --captured
same_run threads "" "" $PY "$S/threads.py" --dataloader;            torch_match threads default
same_run threads_t "" "--tensors" $PY "$S/threads.py" --dataloader; torch_match threads_t tensors
same_run threads_ta "$ASYNC" "--tensors=async" $PY "$S/threads.py"; torch_match threads_ta async
same_run profiler "" "" $PY "$S/profiler_inside.py";                torch_match profiler default
# What recording costs the GPU's memory: cudaMemGetInfo's used bytes, a context and one tensor,
# with and without memtrace (CUPTI's: the same with callbacks and activity off, MEMTRACE_CALLBACKS=0)
if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" devmem "* ]]; then
  mkdir -p "$W/devmem"
  cat > "$W/devmem/used.py" <<'PYEOF'
import torch
x = torch.empty(1 << 20, device="cuda")
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
print(total - free)
PYEOF
  u0=$(cd "$W/devmem" && $PY used.py 2>> "$LOG")
  u1=$(cd "$W/devmem" && "$MT" record -q -f -o "$W/devmem/u.mtrace" -- $PY used.py 2>> "$LOG")
  u2=$(cd "$W/devmem" && MEMTRACE_CALLBACKS=0 "$MT" record -q -f --activity off -o "$W/devmem/v.mtrace" -- $PY used.py 2>> "$LOG")
  say "info: device memory used, a context and a 4 MiB tensor: $u0 B untraced, $u1 B recorded, $u2 B with nothing enabled"
  check "memtrace's own device memory: at most 16 MiB, all of it CUPTI's (the same with nothing enabled)" ok \
    "$([ -n "$u0" ] && [ -n "$u1" ] && [ "$u1" = "$u2" ] && [ $((u1 - u0)) -ge 0 ] && [ $((u1 - u0)) -le 16777216 ] && echo ok || echo "$u0 $u1 $u2")"
fi
# Runs that die of torch.OutOfMemoryError (samples/oom.py), in every mode: under a memory fraction
# (the driver is never asked) and on a full GPU (the driver refuses; also with expandable segments,
# whose refusals are cuMemCreate's), and one that catches it and goes on; and in the backward pass
# (eager, in a CUDA graph's capture, and in activation checkpointing's recomputation on autograd's
# worker). The error is in the trace with PyTorch's own counters at that moment and its stack (in
# the backward pass, with --tensors, the backward() call that started it), and every refusal before
# it says what came of it (scripts/oom_check.py). Under backend:cudaMallocAsync (a full GPU: that
# backend checks a memory fraction itself) the error is the driver's refusal of a cudaMallocAsync
# of autograd's worker, which names its backward() call in any mode.
EXPANDABLE=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
for m in "oom_frac|||--fraction 0.05|" "oom_frac_t||--tensors|--fraction 0.05|" \
         "oom_caught_t||--tensors|--fraction 0.05 --catch|--caught" \
         "oom_dev||||--driver-refused" "oom_dev_t||--tensors||--driver-refused" \
         "oom_exp|$EXPANDABLE|||--driver-refused" "oom_exp_t|$EXPANDABLE|--tensors||--driver-refused" \
         "oom_graph|||--fraction 0.05 --graph|" "oom_graph_t||--tensors|--fraction 0.05 --graph|" \
         "oom_bwd|||--in-backward --layers 2|" "oom_bwd_t||--tensors|--in-backward --layers 2|" \
         "oom_ckpt|||--in-backward --layers 16 --checkpoint 8|--recompute" \
         "oom_ckpt_t||--tensors|--in-backward --layers 16 --checkpoint 8|--recompute" \
         "oom_bwd_async|$ASYNC||--in-backward --layers 2 --ballast|--async" \
         "oom_bwd_ta|$ASYNC|--tensors=async|--in-backward --layers 2 --ballast|--async"; do
  IFS='|' read -r n e o args flags <<< "$m"
  same_run "$n" "$e" "$o" $PY "$S/oom.py" $args
  [ -f "$W/$n/t.json" ] && check "$n: one torch.OutOfMemoryError, = PyTorch's counters, its line" ok \
    "$($PY scripts/oom_check.py "$W/$n/t.json" "$W/$n/traced.json" $flags 2>&1 | tail -1)"
  # the fixtures of tests/oom.cmake (with the source their line numbers refer to)
  [ -f "$W/$n/t.mtrace" ] && cp "$W/$n/t.mtrace" "$OUT/$n.mtrace" && cp "$W/$n/traced.json" "$OUT/$n.stats.json" && cp "$S/oom.py" "$OUT/oom.py"
done
# autograd's worker with and without Python frames (a Python backward beside C++ ones): each
# allocation's stack has the worker's Python frames exactly when it runs Python.
same_run autograd_py_t "" "--tensors" $PY "$S/autograd_python.py"; torch_match autograd_py_t tensors
if [ -f "$W/autograd_py_t/t.mtrace" ]; then
  PF=$W/autograd_py_t/peak.folded
  "$MT" export --format folded --metric peak "$W/autograd_py_t/t.mtrace" > "$PF" 2>> "$LOG"
  cat "$PF" >> "$LOG"
  check "autograd_py_t: the Python backward's blocks (>= 15 of 16 x 12 MiB at the peak) name its line, not [autograd backward]" ok \
    "$(grep 'Twice.backward (.*autograd_python.py:[0-9]*)' "$PF" | grep -v 'autograd backward' | awk '$NF >= 15 * 12582912 { ok = 1 } END { if (ok) print "ok" }')"
  # some C++ node's blocks (the gradients) under [autograd backward], and no such stack with a
  # Python frame in it
  check "autograd_py_t: the C++ nodes' blocks are [autograd backward] with no Python frame" ok \
    "$([ "$(grep -c '\[autograd backward\];MmBackward0' "$PF")" -gt 0 ] && [ "$(grep '\[autograd backward\]' "$PF" | grep -c '\.py:[0-9]*)')" = 0 ] && echo ok)"
fi
same_run profiler_t "" "--tensors" $PY "$S/profiler_inside.py" --profile-memory
torch_match profiler_t tensors
[ -d "$W/profiler_t" ] && check "torch.profiler saw CUDA kernels while memtrace recorded" ok "$($PY -c 'import json,sys; print("ok" if json.load(open(sys.argv[1]))["profiler_cuda_events"] > 0 else "none")' "$W/profiler_t/traced.json")"
[ -d "$W/profiler_t" ] && check "the trace says CUPTI was shared with the profiler" ok "$("$MT" dump "$W/profiler_t/t.mtrace" | grep -q 'CUPTI shared with' && echo ok)"
same_run burst "" "--tensors" $PY "$S/burst.py" --n 1000000 --threads 4
torch_match burst tensors
[ -d "$W/burst" ] && say "info: burst: $("$MT" dump "$W/burst/t.mtrace" | grep -c '^event ') events; $($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f allocations/s traced" % d["allocs_per_s"])' "$W/burst/traced.json"), $($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f untraced" % d["allocs_per_s"])' "$W/burst/plain.json"); $("$MT" dump "$W/burst/t.mtrace" | grep -o 'writer: [^"]*' | head -1)"
same_run resnet "" "" $PY "$S/train.py" --model resnet18 --steps 5;  torch_match resnet default
same_run resnet_t "" "--tensors" $PY "$S/train.py" --model resnet18 --steps 5; torch_match resnet_t tensors
same_run gpt2_t "" "--tensors" $PY "$S/train.py" --model gpt2 --steps 5; torch_match gpt2_t tensors
# categories_run NAME "PROGRAM ARGS" [categories_vs_torch.py OPTIONS]: same_run under --tensors,
# the trace against PyTorch's counters, and the categories against PyTorch's own sums
categories_run() {
  local name=$1 cmd=$2; shift 2
  same_run "$name" "" "--tensors" $PY $cmd; torch_match "$name" tensors
  [ -f "$W/$name/t.json" ] && check "$name: categories = PyTorch's sums${*:+ ($*)}" ok \
    "$($PY scripts/categories_vs_torch.py "$W/$name/t.json" "$W/$name/traced.json" "$@" 2>&1 | tee -a "$LOG" | tail -1)"
}
# transformers' gradient checkpointing (non-reentrant): the recomputed blocks run inside the
# backward pass from saved tensors' unpack hooks, on autograd's worker with Python frames; the
# gradients after the backward pass must still be every parameter's
categories_run gpt2_ckpt_t "$S/train.py --model gpt2 --steps 5 --checkpointing"
# transformers' Trainer through Accelerate (bf16, gradient checkpointing, clipping, its default
# fused AdamW, an evaluation loop): what it makes before loss.backward() is not a gradient
categories_run hf_trainer_t "$S/hf_trainer.py" --framework
# Fine-tuning: a ResNet-18 whose backbone is frozen (its fc alone trained) and a GPT-2-like model
# with LoRA adapters (the model frozen): the report's W_t, the parameters that get a gradient, is
# PyTorch's trained parameters, and the gradients' and the optimizer state's textbook are W_t's
categories_run resnet_ft_t "$S/train.py --steps 5 --model resnet18 --freeze" --fine-tune
categories_run gpt2_lora_t "$S/train.py --steps 5 --model gpt2 --lora 8" --fine-tune
# Plain SGD keeps no state (its textbook none, not momentum's W); a GAN, two models and two
# optimizers, keeps W (no backward pass gives every parameter a gradient, the optimizers' state
# covers both); transformers' reentrant checkpointing runs a backward pass inside the backward pass
categories_run resnet_sgd0_t "$S/train.py --model resnet18 --optim sgd0 --steps 5"
categories_run gan_t "$S/gan.py" --other 512
categories_run gpt2_ckpt_re_t "$S/train.py --model gpt2 --steps 5 --checkpointing --reentrant"
# Detection (torchvision's Faster R-CNN, MobileNetV3 backbone): lists of images and targets, a dict
# of losses, torchvision's own operators (NMS, RoIAlign) and tensors whose sizes change each step.
# Its parameters row is the allocator's blocks of 192 parameters and 138 buffers (BatchNorm's
# statistics), 1.58% over PyTorch's numel * element size of the parameters: the blocks say it to
# the byte. "other": the targets' boxes, made
# with torch.cat outside any module (4 x 512 B), and the losses' sum (512 B), as the GAN's
categories_run detection_t "$S/train.py --model fasterrcnn --steps 6" --other 2560
# A BERT-like masked LM (transformers), and a cuDNN LSTM language model: flatten_parameters()
# keeps the LSTM's 8 weights as views of one block, and Adam's state holds a tensor per view
categories_run bert_t "$S/train.py --model bert --steps 5"
categories_run lstm_t "$S/train.py --model lstm --steps 5" --views
# A resumed run: a checkpoint of the model and the optimizer loaded back with map_location="cuda"
# and kept referenced; its tensors are the checkpoint line, the optimizer's state among them
categories_run resume_t "$S/train.py --model resnet18 --resume --steps 3" --resume
# the same loaded with map_location="cpu", as the checkpoint line advises: no checkpoint on the
# GPU, and the state Optimizer.load_state_dict moves there is the optimizer's state
categories_run resume_cpu_t "$S/train.py --model resnet18 --resume --resume-map cpu --steps 3"
# the same resumed run with the model's weights in a .safetensors file, loaded with
# safetensors' load_file(device="cuda") (the optimizer's state still with torch.load)
categories_run resume_st_t "$S/train.py --model resnet18 --resume --resume-format safetensors --steps 3" --resume
# knowledge distillation: a frozen ResNet-50 teacher (eval, under no_grad) beside the ResNet-18
# student: W holds both, W_t the student's alone; "other": the two losses' sum (512 B), as the GAN's
categories_run distill_t "$S/train.py --model resnet18 --distill --steps 3" --fine-tune --other 512
# the loss computed in the training loop (F.cross_entropy on the logits, outside any module): its
# log-softmax, batch x tokens x vocab floats saved for the backward pass, is the forward's
categories_run gpt2_lossout_t "$S/train.py --model gpt2 --steps 4 --loss-outside"
# activations offloaded to pinned host memory (save_on_cpu): the GPU holds them only as the
# backward pass copies each back
categories_run offload_t "$S/train.py --model resnet18 --steps 3 --offload"
# PyTorch's other optimizers, each named and with its textbook state (k W), PyTorch's sums
for o in nadam:NAdam radam:RAdam adamax:Adamax adadelta:Adadelta rprop:Rprop asgd:ASGD; do
  categories_run "optim_${o%%:*}_t" "$S/train.py --model resnet18 --steps 3 --optim ${o%%:*}" --optimizer "${o#*:}"
done
# a recommendation model: a sparse EmbeddingBag (SparseAdam) and a dense MLP (AdamW); the
# table's gradient is sparse (the rows a batch touched), the size of no parameter
categories_run recsys_t "$S/train.py --model recsys --steps 4" --sparse
# each step's batch augmented on the GPU by torchvision's v2 transforms (Modules): inputs
categories_run resnet_aug_t "$S/train.py --model resnet18 --gpu-augment --steps 3"
# Fine-tuning starts from a saved model: from_pretrained(device_map=...) puts the weights straight
# onto the GPU (safetensors, Accelerate); and float16 with a GradScaler and gradient accumulation,
# whose loss divided by the steps and scaled are made outside any module ("other": 2 x 512 B)
categories_run gpt2_pre_t "$S/train.py --model gpt2 --steps 5 --pretrained"
categories_run fp16_accum_t "$S/train.py --model gpt2 --steps 4 --fp16 --accum 2" --other 1024
# torch.compile (default mode) of the GPT-2-like model: inductor's forward and compiled backward
categories_run gpt2_compile_t "$S/train.py --model gpt2 --steps 5 --compile"
# Inference as a server runs it: transformers' generate() with its KV cache (greedy, then beam
# search, whose cache is reordered at every step), outputs handed to a side stream with
# record_stream, then the cache emptied. The KV cache is a category of its own, of the model's
# shape; no gradient is expected; PyTorch's pinned staging blocks are its cache, not leaks.
same_run generate "" "" $PY "$S/generate.py" --side-stream;              torch_match generate default
same_run generate_t "" "--tensors" $PY "$S/generate.py" --side-stream;   torch_match generate_t tensors
same_run generate_exp_t "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" "--tensors" $PY "$S/generate.py" --side-stream
torch_match generate_exp_t tensors
same_run generate_small_t "" "--tensors" $PY "$S/generate.py" --layers 2 --width 256 --batch 2 --prompt 16 --new 24 --beams 2 --side-stream
torch_match generate_small_t tensors
for n in generate_t generate_exp_t generate_small_t; do
  [ -f "$W/$n/t.json" ] && check "$n: the KV cache at the peak fits the model's shape, no gradient expected, no pinned leak" ok \
    "$($PY scripts/kv_cache_check.py "$W/$n/t.json" "$W/$n/traced.json" 2>&1 | tee -a "$LOG" | tail -1)"
done
# A launcher initializes CUDA (it asks how many GPUs there are) but makes no context: no trace.
if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" launch "* ]]; then
mkdir -p "$W/launch" && (cd "$W/launch" && timeout 300 "$MT" record -- torchrun --nproc_per_node=1 "$S/cifar.py" --steps 5 --warmup 1) > "$W/launch.out" 2> "$W/launch.err"
check "torchrun: exit 0, one trace (the rank's), the launcher listed as skipped" "0 1 1" "$? $(ls "$W/launch"/*.mtrace 2>/dev/null | wc -l) $(grep -c 'no trace for 1 process' "$W/launch.err")"
cat "$W/launch.err" >> "$LOG"
fi
fi

# ---- cifar.py under three allocator settings ------------------------------------------------------
if want cifar; then
part "cifar.py ($STEPS steps)"
cifar() { # cifar NAME ENV... : runs untraced if NAME starts with "plain", else traced
  local name=$1; shift
  local t0 t1 envs=(MEMTRACE_UNUSED=1)
  t0=$(date +%s.%N)
  local extra=() args=()
  for kv in "$@"; do
    case $kv in
      MEMTRACE_TENSORS=1) extra+=(--tensors) ;;
      MEMTRACE_TENSORS=async) extra+=(--tensors=async) ;;
      MEMTRACE_STACKS=*) extra+=(--stacks "${kv#*=}") ;;
      CIFAR_ARGS=*) args+=("${kv#CIFAR_ARGS=}") ;;
      *) envs+=("$kv") ;;
    esac
  done
  if [[ $name == plain* ]]; then
    (cd "$W" && env "${envs[@]}" $PY "$S/cifar.py" --steps "$STEPS" "${args[@]}") > "$W/$name.out" 2>> "$LOG"
  else
    (cd "$W" && env "${envs[@]}" "$MT" record "${extra[@]}" -o "$W/$name.mtrace" -- $PY "$S/cifar.py" --steps "$STEPS" "${args[@]}") > "$W/$name.out" 2>> "$W/$name.err"
  fi
  local rc=$?
  t1=$(date +%s.%N)
  [[ $name == plain* ]] || settle_trace "$W/$name.mtrace"
  cat "$W/$name.out" "$W/$name.err" 2>/dev/null >> "$LOG"
  echo "wall=$(calc "$t1 - $t0")" >> "$W/$name.out"
  check "cifar $name exit status" 0 $rc
}
val() { sed -n "s/.*$2=\(-\?[0-9.]*\).*/\1/p" "$W/$1.out" | tail -1; }
jval() { $PY -c 'import json,sys; d=[x for x in json.load(open(sys.argv[1]))["devices"] if x["device"]==0][0]; print(d[sys.argv[2]])' "$W/$1.json" "$2"; }
# Runs are interleaved (untraced, traced, untraced, ...) so drift of the machine hits both sides.
cifar plain0
cifar default
cifar plain1
cifar expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cifar async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync MEMTRACE_STACKS=native
cifar plain_async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
cifar tensors MEMTRACE_TENSORS=1
cifar tensors_exp MEMTRACE_TENSORS=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
cifar tensors_async MEMTRACE_TENSORS=async
cifar plain2
cifar tensors2 MEMTRACE_TENSORS=1
cifar plain_hist0 CIFAR_ARGS=--record-history
cifar tensors_nostack MEMTRACE_TENSORS=1 MEMTRACE_STACKS=none
cifar tensors_pyonly MEMTRACE_TENSORS=1 MEMTRACE_STACKS=python
cifar tensors_cupti MEMTRACE_TENSORS=async MEMTRACE_ASYNC_HOOKS=0
cifar plain_hist1 CIFAR_ARGS=--record-history
# In-process A/B (cifar.py --ab): the recorder off and on every 50 steps of one process, which the
# spread between identical processes (several percent on this machine) does not blur.
cifar ab_tensors MEMTRACE_TENSORS=1 CIFAR_ARGS=--steps CIFAR_ARGS=1500 CIFAR_ARGS=--ab CIFAR_ARGS=50
cifar plain_ab_history CIFAR_ARGS=--steps CIFAR_ARGS=1500 CIFAR_ARGS=--ab CIFAR_ARGS=50 CIFAR_ARGS=--ab-what CIFAR_ARGS=history
for n in default expandable async tensors tensors2 tensors_exp tensors_async tensors_nostack tensors_pyonly tensors_cupti; do
  "$MT" dump "$W/$n.mtrace" > "$W/$n.dump" 2>> "$LOG"
  "$MT" report --json "$W/$n.mtrace" > "$W/$n.json" 2>> "$LOG"
  grep '^note' "$W/$n.dump" | sed "s/^/  $n: /" >> "$LOG"
  say "info: $n: $(grep -o 'stack capture: [^"]*' "$W/$n.dump"); $(grep -o 'tensor reports: [^"]*' "$W/$n.dump")"
done
# The writer thread's own CPU time, which no note on the program's threads holds (notes.c)
WN=$(grep -o 'writer thread: [^"]*' "$W/tensors.dump" | head -n 1)
say "info: tensors: $WN"
check "cifar tensors: a note gives the writer thread's own CPU time, under one core" yes \
  "$(echo "$WN" | $PY -c 'import re,sys; m=re.search(r"\(([0-9.]+)% of one core\)", sys.stdin.read()); print("yes" if m and 0 < float(m.group(1)) < 100 else "no")')"
# The caching allocator's segments (flagged by the recorder) against PyTorch's max_memory_reserved,
# in every mode that keeps that allocator; its tensors against max_memory_allocated in tensor mode.
for n in default expandable tensors tensors_exp tensors_nostack tensors_pyonly; do
  check "cifar $n: PyTorch segments peak == max_memory_reserved" "$(val $n max_memory_reserved)" "$(jval $n segments_peak_bytes)"
done
# Expandable segments ask cuMemCreate for a fabric handle first; without one (no IMEX) the driver
# says CUDA_ERROR_NOT_PERMITTED and PyTorch asks for a POSIX descriptor: no failed request, and
# `check --max-failed 0` passes (failed_ties.c, failed_probes).
for n in expandable tensors_exp; do
  check "cifar $n: no failed request; a cuMemCreate refused for a fabric handle and made again is counted apart" ok "$($PY - "$W/$n.json" "$W/$n.dump" <<'PYEOF'
import json, re, sys
rep = json.load(open(sys.argv[1]))
refused = []  # (result, handle types) of every failed cuMemCreate
for line in open(sys.argv[2]):
    if line.startswith("event ") and " op=failed kind=vmm_physical " in line:
        aux = re.search(r" aux=0x([0-9a-f]+)", line)
        refused.append((int(re.search(r" result=(\d+)", line).group(1)), int(aux.group(1), 16) if aux else 0))
probes = [r for r in refused if r[0] in (800, 801) and r[1] & 8]
problems = []
if rep["failed_total"] != 0: problems.append("failed_total %d" % rep["failed_total"])
if rep["failed_probes"] != len(probes) or len(probes) > 1: problems.append("failed_probes %d, fabric refusals in the trace %s" % (rep["failed_probes"], refused))
print("ok" if not problems else "; ".join(problems))
PYEOF
)"
  check "cifar $n: memtrace check --max-failed 0 passes" 0 "$("$MT" check --max-failed 0 "$W/$n.mtrace" >> "$LOG" 2>&1; echo $?)"
  say "info: cifar $n: failed cuMemCreate calls: $(grep '^event ' "$W/$n.dump" | grep -c 'op=failed kind=vmm_physical') ($(grep '^event ' "$W/$n.dump" | grep 'op=failed kind=vmm_physical' | grep -o 'aux=0x[0-9a-f]* .*result=[0-9]*' | sort | uniq -c | tr '\n' ' '))"
done
for n in tensors tensors2 tensors_exp tensors_nostack tensors_pyonly; do
  check "cifar $n: tensor peak == max_memory_allocated (allocator unchanged)" "$(val $n max_memory_allocated)" "$(jval $n tensors_peak_bytes)"
  check "cifar $n: ... == the allocator's own counter in the trace" "$(val $n max_memory_allocated)" "$(jval $n torch_allocated_peak_bytes)"
done
# backend:cudaMallocAsync (--tensors=async, or set by the user): live async bytes are the tensors.
for n in async tensors_async tensors_cupti; do
  check "cifar $n: live async peak == max_memory_allocated" "$(val $n max_memory_allocated)" "$($PY -c 'import json,sys; d=[x for x in json.load(open(sys.argv[1]))["devices"] if x["device"]==0][0]; print(d["peak_by_kind"].get("async",0))' "$W/$n.json")"
done
grep -q 'python code=' "$W/tensors.dump"; check "tensor mode trace has Python frames" 0 $?
check "tensor mode: tensors come from the allocator's reports, not CUPTI" "1 0" \
  "$(grep -c 'tensors: PyTorch.s caching allocator reports every block' "$W/tensors.dump") $(grep '^event ' "$W/tensors.dump" | grep 'kind=tensor' | grep -c 'corr=')"
check "tensor mode through CUPTI (MEMTRACE_ASYNC_HOOKS=0): as many async allocs as hooked" "$(grep '^event ' "$W/tensors_async.dump" | grep -c 'op=alloc kind=async')" "$(grep '^event ' "$W/tensors_cupti.dump" | grep -c 'op=alloc kind=async')"
pool_high=$($PY -c 'import re,sys; print(max([int(m.group(1),16) for m in re.finditer(r"op=pool_reserved .* aux=(0x[0-9a-f]+)", open(sys.argv[1]).read())] or [0]))' "$W/async.dump")
check "cifar async: pool RESERVED_MEM_HIGH == max_memory_reserved" "$(val async max_memory_reserved)" "$pool_high"
for n in default expandable tensors; do
  say "info: cifar $n events: $(grep -c '^event ' "$W/$n.dump") (activity $(grep '^event ' "$W/$n.dump" | grep -c ' activity')), by op/kind: $(grep '^event ' "$W/$n.dump" | awk '{print $3"/"$4}' | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"
  say "info: cifar $n trace bytes $(stat -c %s "$W/$n.mtrace"), bytes/event $(calc "$(stat -c %s "$W/$n.mtrace") / $(grep -c '^event ' "$W/$n.dump")")"
done
p0=$(val plain0 step_ms); p1=$(val plain1 step_ms); p2=$(val plain2 step_ms); d=$(val default step_ms)
ta=$(calc "($(val tensors step_ms) + $(val tensors2 step_ms)) / 2")
ph=$(calc "($(val plain_hist0 step_ms) + $(val plain_hist1 step_ms)) / 2")
say "timing step_ms: untraced $p0 / $p1 / $p2; traced default $d, expandable $(val expandable step_ms); --tensors $(val tensors step_ms) / $(val tensors2 step_ms); no stacks $(val tensors_nostack step_ms); Python-only stacks $(val tensors_pyonly step_ms); --tensors=async $(val tensors_async step_ms) (untraced async $(val plain_async step_ms))"
say "overhead --tensors vs untraced (between processes): $(calc "100.0 * ($ta / (($p1 + $p2) / 2) - 1)") %"
say "in-process A/B, median over adjacent 50-step phases: --tensors (Python+native stacks) $(val ab_tensors ab_overhead_pct) % (off $(val ab_tensors ab_off_ms) ms, on $(val ab_tensors ab_on_ms) ms); torch _record_memory_history(stacks=python) $(val plain_ab_history ab_overhead_pct) % (off $(val plain_ab_history ab_off_ms) ms, on $(val plain_ab_history ab_on_ms) ms)"
check "in-process A/B ran (memtrace_set_paused found, pairs measured)" "ok ok" "$(grep -q 'ab_pairs=[1-9]' "$W/ab_tensors.out" && echo ok) $(grep -q 'ab_pairs=[1-9]' "$W/plain_ab_history.out" && echo ok)"
say "overhead torch _record_memory_history(stacks=python) vs untraced default allocator: $(calc "100.0 * ($ph / (($p0 + $p1) / 2) - 1)") %"

# ---- analysis commands on the recorded traces -------------------------------------------------------
part "report / export"
for n in default expandable async tensors; do
  run "$MT" report "$W/$n.mtrace"
  "$MT" export --format folded --frames all --metric peak -o "$W/$n.folded" "$W/$n.mtrace" 2>> "$LOG"; check "export folded $n" 0 $?
  "$MT" export --format chrome -o "$W/$n.chrome.json.gz" "$W/$n.mtrace" 2>> "$LOG"; check "export chrome $n" 0 $?
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
for n in tensors default; do
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
# the source as recorded: quoted unmarked; once the file is touched, marked as maybe not what ran
grep -q 'cifar.py:[0-9]* in [^|]*  | ' "$W/tensors.byline" && ! grep -q '|?' "$W/tensors.byline"
check "by-line quotes cifar.py unmarked (not modified since the recording)" 0 $?
touch "$S/cifar.py"
"$MT" report --by-line --file cifar.py "$W/tensors.mtrace" 2>> "$LOG" | tee -a "$LOG" | grep -q '|? [0-9]* lines* from files modified after the recording began'
check "by-line marks cifar.py's lines once the file is touched" 0 $?
# what recording cost, read back from the recorder's notes: the whole report's average (this
# recorder notes it), on enough timed calls, and a call count that agrees with the trace's own
# (~25 000 reports, ~1 500 timed at random: the count's error is ~2.5%)
"$MT" report "$W/tensors.mtrace" 2>> "$LOG" | grep '^recording cost: about .* tensor reports × [0-9]* ns[,;]' >> "$LOG"
check "report: a recording cost line with the whole tensor report" 0 $?
check "recording cost: tensor reports as many as the trace's tensor events (±10%), whole, >= 100 timed; rare work timed every time" ok "$($PY - "$W/tensors.json" <(grep -c ' kind=tensor ' "$W/tensors.dump") <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))["recording_cost"]
events = int(open(sys.argv[2]).read())
t = c["tensor_reports"] if c else {}
ok = c and c["tensor_report_whole"] and t["timed"] >= 100 and abs(t["calls"] - events) <= 0.1 * events
# rare work (first stacks, thread starts...) is timed every time: there is some, all of it timed
rare = c["rare_work"] if c else {}
ok = ok and rare["calls"] > 0 and rare["timed"] == rare["calls"]
print("ok" if ok else "cost %s against %d tensor events" % (c, events))
PYEOF
)"
# the notes say where the rare work and the slowest callbacks went: the trace file made once, the
# longest timed callback named
grep '^note' "$W/tensors.dump" | grep -E 'rare work|^note.*callbacks:' | sed 's/^/  info: /' | tee -a "$SUM" >> "$LOG"
check "rare work: the trace file created once, apart from the context's other work" 1 "$(grep '^note' "$W/tensors.dump" | grep 'rare work' | grep -o 'trace file created [0-9]*:' | grep -o '[0-9]*')"
check "callbacks' note names the longest timed one" 1 "$(grep '^note' "$W/tensors.dump" | grep 'callbacks: about' | grep -c 'the longest [0-9.]* [nu]s: cu[A-Za-z_0-9]*, at its \(entry\|exit\))')"
# record's own summary (stderr) ends with the short form of the same figure
check "record's summary: the recording cost of the report's JSON" ok "$($PY - "$W/tensors.json" "$W/tensors.err" <<'PYEOF'
import json, re, sys
c = json.load(open(sys.argv[1]))["recording_cost"]
m = re.search(r"^  recording cost: ~?([0-9.]+) (ns|µs|ms|s) \(([0-9.]+)% of the run\), memtrace's own work",
              open(sys.argv[2], encoding="utf-8").read(), re.M)
ns = m and float(m.group(1)) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[m.group(2)]
ok = c and m and abs(ns - c["ns"]) <= 0.006 * c["ns"] and m.group(3) == "%.2f" % (100 * c["share_of_duration"])
print("ok" if ok else "summary %s against %s" % (m and m.group(0), c))
PYEOF
)"
if want basics; then
  grep -q 'request_too_much' <("$MT" report "$W/alloc_patterns.mtrace" 2>&1); check "report names request_too_much" 0 $?
  grep -q 'alloc_patterns.c:[0-9]' <("$MT" report "$W/alloc_patterns.mtrace" 2>&1); check "report shows alloc_patterns.c:LINE" 0 $?
fi
grep -Eq 'c10::|at::' "$W/default.folded"; check "cifar folded stacks show demangled c10/at names" 0 $?
"$MT" export --format folded --frames all --metric peak "$W/tensors.mtrace" 2>> "$LOG" | grep -q 'DeviceCachingAllocator::'; check "tensor stacks end inside PyTorch's caching allocator" 0 $?

# ---- fixtures (tests/data: see its README) ---------------------------------------------------------
part "fixtures"
(cd "$W" && "$MT" record -q -o "$W/cifar_default.mtrace" -- $PY "$S/cifar.py" --steps 5 --warmup 1) > "$W/cifar_default.out" 2>> "$LOG"
rc_=$?; settle_trace "$W/cifar_default.mtrace"; (exit $rc_)
(cd "$W" && "$MT" record -q --tensors -o "$W/cifar_tensors.mtrace" -- $PY "$S/cifar.py" --steps 30 --warmup 5) > "$W/cifar_tensors.out" 2>> "$LOG"
rc_=$?; settle_trace "$W/cifar_tensors.mtrace"; (exit $rc_)
(cd "$W" && "$MT" record -q --tensors -o "$W/cifar_tensors_b512.mtrace" -- $PY "$S/cifar.py" --steps 30 --warmup 5 --batch 512) > "$W/cifar_tensors_b512.out" 2>> "$LOG"
rc_=$?; settle_trace "$W/cifar_tensors_b512.mtrace"; (exit $rc_)
cat "$W/cifar_default.out" "$W/cifar_tensors.out" "$W/cifar_tensors_b512.out" >> "$LOG"
cp samples/cifar.py "$W/cifar.py" # the source the fixtures' line numbers refer to
[ -f "$W/ap.out" ] && cp "$W/ap.out" "$W/alloc_patterns.out"
FIX=$(cd "$W" && ls alloc_patterns.mtrace alloc_patterns.out cifar_default.* cifar_tensors.* cifar_tensors_b512.* cifar.py 2>/dev/null)
for n in graphs_t threads_t resnet_t gpt2_t generate_small_t gpt2_ckpt_t hf_trainer_t resnet_ft_t gpt2_lora_t resnet_sgd0_t gan_t gpt2_ckpt_re_t; do [ -f "$W/$n/t.mtrace" ] && cp "$W/$n/t.mtrace" "$W/$n.mtrace" && cp "$W/$n/traced.json" "$W/$n.stats.json" && FIX="$FIX $n.mtrace $n.stats.json"; done
tar -C "$W" -czf "$OUT/traces.tar.gz" $FIX
fi

# ---- training: categories against PyTorch, fixtures, costs ------------------------------------------
if want training; then
  part "training"
  OUT="$OUT" bash scripts/gpu-training.sh "$BUILD" >> "$LOG" 2>&1
  mkdir -p "$W/training" && tar -C "$W/training" -xzf "$OUT/training.tar.gz" 2>> "$LOG"
  for n in resnet18_tensors gpt2_tensors gpt2_amp_tensors resnet18_compile_tensors; do
    "$MT" report --json "$W/training/t/$n.mtrace" > "$W/training/$n.json" 2>> "$LOG"
    res=$($PY scripts/categories_vs_torch.py "$W/training/$n.json" "$W/training/t/$n.stats.json" 2>&1)
    echo "$n: $res" | head -1 >> "$SUM"
    check "training $n: categories == PyTorch's parameters, state, gradients" ok "$(echo "$res" | tail -1)"
  done
  grep "^ab " "$OUT/training.log" >> "$SUM"
fi

# ---- hardening: the recorder inside a hostile process ---------------------------------------------
# ---- long: what the trace format costs on long runs -----------------------------------------------
if want long; then
  part "long"
  OUT="$OUT" bash scripts/long-traces.sh "$BUILD" 600 >> "$LOG" 2>&1
  for n in resnet18_tensors gpt2_tensors cifar_tensors; do
    bpe=$(grep "^$n " "$OUT/long.txt" | sed 's/.*bytes\/event=//')
    check "long $n: at most 3 bytes/event ($bpe)" yes "$($PY -c "print('yes' if '$bpe' and float('$bpe') <= 3 else 'no')" 2>&1)"
    check "long $n: tensor peak equal to PyTorch's own counter" 1 \
      "$("$MT" report "$OUT/long/$n.mtrace" 2>> "$LOG" | grep -c "equal to PyTorch's own counter")"
  done
  grep . "$OUT/long.txt" >> "$SUM"
fi

if want hardening; then
  part "hardening"
  # per-thread state: the growth of the process per short-lived thread, traced vs untraced
  same_run churn "" "--tensors" $PY "$S/thread_churn.py" --threads 20000
  if [ -f "$W/churn/traced.json" ]; then
    g0=$($PY -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["rss_growth_per_thread_bytes"]))' "$W/churn/plain.json")
    g1=$($PY -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["rss_growth_per_thread_bytes"]))' "$W/churn/traced.json")
    say "  churn: resident growth per thread untraced $g0 B, traced $g1 B (17.5 KB kept per thread before)"
    check "churn: the recorder keeps < 2 KB per exited thread" ok "$([ $((g1 - g0)) -lt 2048 ] && echo ok || echo "$((g1 - g0)) B")"
    check "churn: trace == PyTorch, no anomaly" ok "$($PY scripts/trace_vs_torch.py tensors "$W/churn/t.json" "$W/churn/traced.json" 2>&1 | tail -1)"
  fi
  # the trace's descriptor number taken over by the program
  same_run fdtake "" "--tensors" $PY "$S/fd_takeover.py" own.txt
  check "fdtake: the program's file holds only its own line" "fd_takeover: FILE holds only its own line" "$(cat "$W/fdtake/traced.out")"
  check "fdtake: memtrace says so" 1 "$(grep -c "closed memtrace's trace descriptor" "$W/fdtake/traced.err")"
  "$MT" report "$W/fdtake/t.mtrace" > /dev/null 2>> "$LOG"; check "fdtake: the trace up to the takeover reads" 0 $?
  # a file-size limit the trace crosses: the program runs on, its exit status and output its own
  mkdir -p "$W/fsize"
  (cd "$W/fsize" && bash -c 'ulimit -f 64; exec "$@"' _ $PY "$S/train.py" --model resnet18 --steps 30 --warmup 1) > "$W/fsize/plain.out" 2> "$W/fsize/plain.err"; rc0=$?
  (cd "$W/fsize" && bash -c 'ulimit -f 64; exec "$@"' _ "$MT" record -q --tensors -o "$W/fsize/t.mtrace" -- $PY "$S/train.py" --model resnet18 --steps 30 --warmup 1) > "$W/fsize/traced.out" 2> "$W/fsize/traced.err"; rc1=$?
  cat "$W/fsize/traced.err" >> "$LOG"
  check "fsize: exit status as untraced under ulimit -f 64" "$rc0" "$rc1"
  check "fsize: stdout as untraced" ok "$(cmp -s "$W/fsize/plain.out" "$W/fsize/traced.out" && echo ok || echo differs)"
  check "fsize: memtrace says the trace ends early" 1 "$([ "$(grep -c 'File too large\|ends early\|file-size' "$W/fsize/traced.err")" -ge 1 ] && echo 1 || echo 0)"
  # CI gates on fresh recordings (issue 15): budgets at PyTorch's own number, and a diff
  for b in 256 512; do
    (cd "$W" && "$MT" record -q -f --tensors -o "$W/gate$b.mtrace" -- $PY "$S/cifar.py" --steps 30 --warmup 5 --batch $b) > "$W/gate$b.out" 2>> "$LOG"
    settle_trace "$W/gate$b.mtrace"
  done
  ma=$(sed -n 's/.*max_memory_allocated=\([0-9]*\).*/\1/p' "$W/gate256.out")
  "$MT" check --max-allocated-peak "$ma" "$W/gate256.mtrace" >> "$LOG" 2>&1; check "check at max_memory_allocated passes" 0 $?
  "$MT" check --max-allocated-peak "$((ma - 1))" "$W/gate256.mtrace" >> "$LOG" 2>&1; check "check at max_memory_allocated - 1 fails" 1 $?
  "$MT" diff --fail-on-increase 10 "$W/gate256.mtrace" "$W/gate512.mtrace" >> "$LOG" 2>&1; check "diff batch 256 -> 512 fails a 10% gate" 1 $?
  "$MT" report --markdown "$W/gate512.mtrace" > "$W/gate512.md" 2>> "$LOG"; check "report --markdown" 0 $?
fi

# ---- Python frames on every interpreter: the machine's, and Debian's 3.14 and 3.15 ----------------
if want pythons; then
  part "pythons"
  NP=$PWD/build/newer-pythons
  if [ -d "$NP/debs" ] && [ -f "$NP/files" ]; then
    NEWER_PYTHONS_OFFLINE=1 bash scripts/newer-pythons.sh "$NP" >> "$LOG" 2>&1
  fi
  for py in "$PY" "$NP/bin/python3.14" "$NP/bin/python3.15"; do
    v=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>> "$LOG")
    if [ -z "$v" ]; then say "FAIL python $py: not there or does not run (scripts/newer-pythons.sh makes it: carry build/newer-pythons/debs and files)"; FAILS=$((FAILS+1)); continue; fi
    d=$W/py$v; mkdir -p "$d"
    (cd "$d" && "$MT" record -q -o "$d/t.mtrace" -- "$py" "$S/cuda_ctypes.py") > "$d/out" 2>> "$LOG"
    rc_=$?; settle_trace "$d/t.mtrace"
    check "python $v: cuda_ctypes.py exits 0 under record" 0 $rc_
    grep -q 'cuda_ctypes: done' "$d/out"; check "python $v: its output" 0 $?
    "$MT" export --format folded --frames python "$d/t.mtrace" > "$d/peak.folded" 2>> "$LOG"
    $PY scripts/python_frames_check.py "$d/peak.folded" "$S/cuda_ctypes.py" > "$d/check" 2>&1
    rc_=$?; cat "$d/check" >> "$LOG"
    check "python $v: every stack at the peak, with its Python lines ($(grep -c PASS "$d/check") of 4)" 0 $rc_
    cp "$d/t.mtrace" "$OUT/cuda_ctypes_py$v.mtrace"
  done
fi

# ---- one process, two GPUs -------------------------------------------------------------------------
if want multigpu; then
if [ "$NGPU" -ge 2 ]; then
  part "multigpu ($NGPU GPUs)"
  same_run multi "" "" $PY "$S/multi_gpu.py";            torch_match multi default --devices "$NGPU"
  same_run multi_t "" "--tensors" $PY "$S/multi_gpu.py"; torch_match multi_t tensors --devices "$NGPU"
  same_run multi_ta "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync" "--tensors=async" $PY "$S/multi_gpu.py"
  torch_match multi_ta async --devices "$NGPU"
  # torch.nn.DataParallel: one process, every GPU; the weights, gradients and state on cuda:0,
  # the replicas elsewhere; each GPU's part of the backward pass on a thread of its own
  same_run resnet_dp_t "" "--tensors" $PY "$S/train.py" --model resnet18 --data-parallel --steps 3
  torch_match resnet_dp_t tensors --devices "$NGPU"
  [ -f "$W/resnet_dp_t/t.json" ] && check "resnet_dp_t: categories = PyTorch's sums (--dp)" ok \
    "$($PY scripts/categories_vs_torch.py "$W/resnet_dp_t/t.json" "$W/resnet_dp_t/traced.json" --dp 2>&1 | tee -a "$LOG" | tail -1)"
  # naive model parallelism: a GPT-2-like model loaded with a device_map that puts half its
  # blocks on each of two GPUs; autograd's thread per GPU in one backward pass; the model's W,
  # gradients and state are its GPUs' sums
  same_run gpt2_split_t "" "--tensors" $PY "$S/train.py" --model gpt2 --pretrained --split --steps 4
  torch_match gpt2_split_t tensors --devices "$NGPU"
  [ -f "$W/gpt2_split_t/t.json" ] && check "gpt2_split_t: categories = PyTorch's sums over the GPUs (--split)" ok \
    "$($PY scripts/categories_vs_torch.py "$W/gpt2_split_t/t.json" "$W/gpt2_split_t/traced.json" --split 2>&1 | tee -a "$LOG" | tail -1)"
  # torchrun jobs: one trace per rank (%r), each against that rank's own PyTorch numbers
  for job in "ddp::" "ddp_t:--tensors:" "fsdp::--fsdp" "fsdp_t:--tensors:--fsdp" "fsdp1_t:--tensors:--fsdp1" \
             "fsdp_mp_t:--tensors:--fsdp --bf16 --checkpointing" "hsdp_t:--tensors:--fsdp --hsdp" \
             "fsdp_pf_t:--tensors:--fsdp --post-forward" \
             "ddp_stray::--stray 256" "ddp_stray_t:--tensors:--stray 256" \
             "ddp_strayctx_t:--tensors:--stray-context" "ddp_ipc:::NCCL_CUMEM_ENABLE=0"; do
    IFS=: read -r name opts jargs envs <<< "$job"
    [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
    d=$W/$name; mkdir -p "$d/plain" "$d/traced"
    (cd "$d/plain" && env $envs SAMPLE_STATS="$d/plain.{rank}.json" timeout 600 torchrun --nproc_per_node="$NGPU" "$S/ddp.py" $jargs) > "$d/plain.out" 2> "$d/plain.err"
    rc0=$?
    (cd "$d/traced" && env $envs SAMPLE_STATS="$d/traced.{rank}.json" timeout 600 "$MT" record -q $opts -o "$d/traced/memtrace.rank%r.mtrace" -- torchrun --nproc_per_node="$NGPU" "$S/ddp.py" $jargs) > "$d/traced.out" 2> "$d/traced.err"
    rc1=$?
    cat "$d/plain.err" "$d/traced.err" >> "$LOG"
    check "$name: exit status as untraced" "$rc0" "$rc1"
    lines() { grep -o 'rank [0-9]* of [0-9]* done ([a-z0-9]*)' "$1" | sort; } # ranks' prints may interleave
    check "$name: stdout as untraced (ranks print in any order)" ok "$(cmp -s <(lines "$d/plain.out") <(lines "$d/traced.out") && echo ok || diff <(lines "$d/plain.out") <(lines "$d/traced.out") | head -3 | tr '\n' ' ')"
    check "$name: one trace per rank, none for the launcher" "$NGPU" "$(ls "$d"/traced/memtrace.rank*.mtrace 2>/dev/null | wc -l)"
    mode=default; [ -n "$opts" ] && mode=tensors
    for ((r = 0; r < NGPU; r++)); do
      "$MT" report --json "$d/traced/memtrace.rank$r.mtrace" > "$d/rank$r.json" 2>> "$LOG"
      check "$name rank $r: trace == that rank's PyTorch ($mode), no anomaly" ok "$($PY scripts/trace_vs_torch.py "$mode" "$d/rank$r.json" "$d/traced.$r.json" 2>&1 | tail -1)"
      # each rank's categories against its own PyTorch: DDP's buckets beside the .grad tensors
      # (DDP's logging sizes them), FSDP's shards as W and its all-gathers apart from them
      case $name in ddp_t) how=--ddp ;; fsdp_t | fsdp1_t | fsdp_mp_t | hsdp_t | fsdp_pf_t) how=--fsdp ;; *) how= ;; esac
      [ -n "$how" ] && check "$name rank $r: categories = that rank's PyTorch sums ($how)" ok \
        "$($PY scripts/categories_vs_torch.py "$d/rank$r.json" "$d/traced.$r.json" $how 2>&1 | tee -a "$LOG" | tail -1)"
      # reshard_after_forward=int: the copies FSDP keeps from a forward to its backward pass were
      # made (else the categories check above proves nothing about them)
      [ "$name" = fsdp_pf_t ] && check "$name rank $r: FSDP kept post-forward copies (reshard_after_forward=int)" yes \
        "$($PY -c 'import json,sys; print("yes" if json.load(open(sys.argv[1])).get("post_forward_bytes", 0) > 0 else "no")' "$d/traced.$r.json" 2>&1)"
      # NCCL tries cuMem host memory with a 2 MiB cuMemCreate on a host NUMA node
      # (ncclCuMemHostEnable): the host's, on no GPU
      if [ "$name" = ddp ]; then
        t=$d/traced/memtrace.rank$r.mtrace
        on_gpu=$(for g in $($PY -c 'import json,sys; print(" ".join(str(x["device"]) for x in json.load(open(sys.argv[1]))["devices"]))' "$d/rank$r.json"); do
                   "$MT" export --format folded --frames all --metric alloc --device "$g" "$t" 2>> "$LOG"; done | grep -c ncclCuMemHostEnable)
        on_host=$("$MT" export --format folded --frames all --metric alloc --device host "$t" 2>> "$LOG" | grep -c 'ncclCuMemHostEnable.* 2097152$')
        check "$name rank $r: NCCL's cuMem host probe (ncclCuMemHostEnable, 2 MiB) is the host's, on no GPU" "1 0" "$on_host $on_gpu"
      fi
      # NCCL_CUMEM_ENABLE=0: NCCL maps its peers' buffers with cudaIpcOpenMemHandle; they are the
      # peers' (imported), never a driver-internal allocation of this rank
      if [ "$name" = ddp_ipc ]; then
        "$MT" dump "$d/traced/memtrace.rank$r.mtrace" > "$d/rank$r.dump" 2>> "$LOG"
        check "$name rank $r: NCCL's peer buffers mapped by IPC, imported; no driver record of 1 MiB or more" "yes 0" \
          "$(grep -q '^event .*op=alloc kind=device .*api=cuIpcOpenMemHandle.* imported' "$d/rank$r.dump" && echo yes || echo no) $(grep '^event .*kind=driver' "$d/rank$r.dump" | grep -o ' bytes=[0-9]*' | awk -F= '$2 >= 1048576' | wc -l)"
      fi
    done
    "$MT" report "$d/traced" > "$d/ranks.txt" 2>> "$LOG"; sed -n 1,12p "$d/ranks.txt" >> "$LOG"
    # (The last rank trains on the largest batch, but it is not always the largest: on 2 x H200 on
    # 2026-11-23 DDP's first-step bucket buffers, 112 MiB on rank 0 only, made rank 0's tensor peak
    # 851 MiB against rank 1's 741 MiB, and PyTorch's own max_memory_allocated agreed. So the
    # check below asks PyTorch which rank peaked, not the batch sizes.)
    # the rank table's largest rank is the one whose own peaks are: tensors (or segments) plus what
    # every rank has alike (context, NCCL); PyTorch says which rank's allocator peaked highest
    # (FSDP's ranks are alike: their allocators' peaks can differ by less than what the rank table
    # adds to them, the context's static memory and NCCL's; on 2 x H200 on 2026-11-27 they tied at
    # 3.07 GiB. Within one 2 MiB segment of PyTorch's, either rank is the largest.)
    key=max_reserved; [ "$mode" = tensors ] && key=max_allocated
    "$MT" report --json "$d/traced" > "$d/ranks.json" 2>> "$LOG"
    check "$name: the rank table's largest rank is PyTorch's ($key), or ties with it within 2 MiB" ok "$($PY -c '
import json, sys
k, t = sys.argv[1], json.load(open(sys.argv[2]))["rank_table"]
v = [json.load(open(p))["devices"][str(r)][k] for r, p in enumerate(sys.argv[3:])]
got = t["rows"][t["imbalance"]["max"]]["rank"]
print("ok" if v[got] >= max(v) - (2 << 20) else "rank %d, PyTorch %s" % (got, v))' "$key" "$d/ranks.json" $(for ((r = 0; r < NGPU; r++)); do echo "$d/traced.$r.json"; done) 2>&1 | tail -1)"
  done
  # A checkpoint loaded before torch.cuda.set_device (ddp.py --stray 256): every rank holds a
  # context and 256 MiB of weights on cuda:0, rank 0's GPU. Each rank's trace has cuda:0 (its
  # numbers there = that rank's PyTorch's, above), its DEVICE records name the physical GPUs (the
  # same UUID for every rank's cuda:0), and NVML saw each rank on cuda:0.
  for name in ddp_stray ddp_stray_t ddp_strayctx_t; do
    [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
    what="with the checkpoint's line"; line=".* allocated at its peak there, the most by load_checkpoint (.*ddp.py:[0-9]*)"
    [ "$name" = ddp_strayctx_t ] && what="as a context alone" && line="a CUDA context alone, nothing allocated"
    d=$W/$name
    for ((r = 0; r < NGPU; r++)); do
      "$MT" dump "$d/traced/memtrace.rank$r.mtrace" 2>> "$LOG" | grep '^device ' | sort -u > "$d/devices$r.txt"
      cp "$d/traced/memtrace.rank$r.mtrace" "$OUT/${name}_rank$r.mtrace"
      cp "$d/traced.$r.json" "$OUT/${name}_rank$r.stats.json" 2>/dev/null
    done
    cat "$d"/devices*.txt >> "$LOG"
    check "$name: every rank's cuda:0 is one GPU by UUID, each rank's own GPU another" ok "$(cat "$d"/devices*.txt | $PY -c '
import re, sys
by = {}
for l in sys.stdin:
    m = re.search(r"ordinal=(\d+) .* uuid=\"(GPU-[0-9a-f-]{36})\"", l)
    if m: by.setdefault(int(m.group(1)), set()).add(m.group(2))
u = [next(iter(v)) for v in by.values() if len(v) == 1]
print("ok" if by and all(len(v) == 1 for v in by.values()) and len(set(u)) == len(by) else "uuids by ordinal %s" % by)')"
    for ((r = 1; r < NGPU; r++)); do
      check "$name rank $r: memory on cuda:0 and on its own cuda:$r, NVML saw it on both" ok "$($PY -c '
import json, sys
rep, r = json.load(open(sys.argv[1])), int(sys.argv[2])
devs = {d["device"]: d for d in rep["devices"]}
bad = [k for k in (0, r) if k not in devs or not (devs[k]["peak_bytes"] or k == 0) or not devs[k].get("nvml_max_bytes")]
print("ok" if not bad else "devices %s" % {k: (v["peak_bytes"], v.get("nvml_max_bytes")) for k, v in devs.items()})' "$d/rank$r.json" "$r" 2>&1 | tail -1)"
    done
    "$MT" report "$d/traced" > "$d/ranks.txt" 2>> "$LOG"; cp "$d/ranks.txt" "$OUT/${name}_ranks.txt"
    sed -n 1,12p "$d/ranks.txt" >> "$LOG"
    "$MT" check --max-other-gpus 0 "$d/traced" >> "$LOG" 2>&1; rc_=$?
    "$MT" check --max-other-gpus 0 "$d/traced/memtrace.rank0.mtrace" >> "$LOG" 2>&1
    check "$name: check --max-other-gpus 0 fails on the job, holds on rank 0 alone" "1 0" "$rc_ $?"
    check "$name: the rank table names every other rank on rank 0's GPU, $what" ok \
      "$(n=$(grep -c "^  rank [0-9]* holds memory on cuda:0, rank 0's GPU (its own is cuda:[0-9]*): .* by NVML, its CUDA context included; $line$" "$d/ranks.txt"); [ "$n" = $((NGPU - 1)) ] && echo ok || echo "$n lines")"
  done
  # A torchrun job that dies of torch.OutOfMemoryError (samples/oom.py under DDP, a memory fraction
  # per rank): the last rank, on the largest batch, raises it and exits 1; the others wait for it
  # in an all-reduce until torchrun kills them. The dying rank's trace holds the error with its
  # PyTorch counters; every other rank's trace is whole up to the kill (no END, no failed request).
  for name in ddp_oom ddp_oom_t; do
    [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
    opts=; [ "$name" = ddp_oom_t ] && opts=--tensors
    d=$W/$name; mkdir -p "$d/plain" "$d/traced"
    (cd "$d/plain" && env $envs SAMPLE_STATS="$d/plain.{rank}.json" timeout 600 torchrun --nproc_per_node="$NGPU" "$S/oom.py" --fraction 0.05) > "$d/plain.out" 2> "$d/plain.err"
    rc0=$?
    (cd "$d/traced" && env $envs SAMPLE_STATS="$d/traced.{rank}.json" timeout 600 "$MT" record -q $opts -o "$d/traced/memtrace.rank%r.mtrace" -- torchrun --nproc_per_node="$NGPU" "$S/oom.py" --fraction 0.05) > "$d/traced.out" 2> "$d/traced.err"
    rc1=$?
    cat "$d/plain.out" "$d/plain.err" "$d/traced.out" "$d/traced.err" >> "$LOG"
    check "$name: exit status as untraced (1)" "1 $rc0" "$rc1 $rc1"
    check "$name: stdout as untraced (ranks print in any order)" ok "$(cmp -s <(sort "$d/plain.out") <(sort "$d/traced.out") && echo ok || diff <(sort "$d/plain.out") <(sort "$d/traced.out") | head -3 | tr '\n' ' ')"
    check "$name: one trace per rank" "$NGPU" "$(ls "$d"/traced/memtrace.rank*.mtrace 2>/dev/null | wc -l)"
    last=$((NGPU - 1))
    for ((r = 0; r < NGPU; r++)); do
      "$MT" report --json "$d/traced/memtrace.rank$r.mtrace" > "$d/rank$r.json" 2>> "$LOG"
      cp "$d/traced/memtrace.rank$r.mtrace" "$OUT/${name}_rank$r.mtrace"
    done
    cp "$d/traced.$last.json" "$OUT/${name}_rank$last.stats.json" 2>/dev/null
    check "$name rank $last: one torch.OutOfMemoryError, = its PyTorch's counters, its line" ok \
      "$($PY scripts/oom_check.py "$d/rank$last.json" "$d/traced.$last.json" 2>&1 | tail -1)"
    for ((r = 0; r < last; r++)); do
      check "$name rank $r: killed by torchrun: its trace reads whole, no END, no failed request" ok \
        "$($PY -c 'import json,sys; r=json.load(open(sys.argv[1])); print("ok" if not r["ended_cleanly"] and not r["failed_requests"] and not r.get("truncated") and not r.get("damaged_chunks") else {k: r.get(k) for k in ("ended_cleanly","failed_total","truncated","damaged_chunks")})' "$d/rank$r.json" 2>&1 | tail -1)"
    done
    "$MT" report "$d/traced" > "$d/ranks.txt" 2>> "$LOG"; sed -n 1,40p "$d/ranks.txt" >> "$LOG"
    cp "$d/ranks.txt" "$OUT/${name}_ranks.txt"
    check "$name: the rank table names rank $last's error first, and the ranks with no END" ok \
      "$(grep -q "^  torch.OutOfMemoryError: rank $last at .* (the first), .* on cuda:$last with .* allocated, in step (.*oom.py:[0-9]*)$" "$d/ranks.txt" && grep -q '^  no END record (killed, or still recording): rank 0' "$d/ranks.txt" && echo ok)"
    check "$name: every rank's GPUs are its own (a context's static memory on its GPU)" ok \
      "$(awk -v n="$NGPU" '/^  rank [0-9]/ && $4 ~ /^[0-9]+$/ { if ($5 != $2) bad = bad " " $2 "->" $5; k++ } END { if (k == n && !bad) print "ok"; else print k " rows" bad }' "$d/ranks.txt")"
  done
  # A context's static memory (CUPTI: no context, device 0) belongs to its own GPU: as much on
  # cuda:1 as on cuda:0 for a process that uses both, nothing on cuda:0 for one on cuda:1 alone
  # (NVML lists that process on cuda:1 only).
  if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" context_memory "* ]]; then
    d=$W/context_memory; mkdir -p "$d"
    (cd "$d" && "$MT" record -q -o "$d/both.mtrace" -- $PY "$S/context_memory.py" > "$d/both.out" 2>> "$LOG"); settle_trace "$d/both.mtrace"
    (cd "$d" && "$MT" record -q -o "$d/gpu1.mtrace" -- $PY "$S/context_memory.py" --gpu1-only > "$d/gpu1.out" 2>> "$LOG"); settle_trace "$d/gpu1.mtrace"
    "$MT" report --json "$d/both.mtrace" > "$d/both.json" 2>> "$LOG"; "$MT" report --json "$d/gpu1.mtrace" > "$d/gpu1.json" 2>> "$LOG"
    check "context_memory: each context's static memory on its own GPU" ok "$($PY -c '
import json, sys
b, g = (json.load(open(p))["devices"] for p in sys.argv[1:3])
drv = lambda ds: {d["device"]: d["driver_bytes_at_peak"] for d in ds}
db, dg = drv(b), drv(g)
ok = sorted(db) == [0, 1] and db[0] == db[1] > 100000 and sorted(dg) == [1] and dg[1] == db[1]
print("ok" if ok else "both %s, gpu1 only %s" % (db, dg))' "$d/both.json" "$d/gpu1.json" 2>&1 | tail -1)"
    cp "$d/both.mtrace" "$OUT/contexts_two_gpus.mtrace"; cp "$d/gpu1.mtrace" "$OUT/contexts_gpu1.mtrace"
  fi
  mkdir -p "$W/ranks"; cp "$W/ddp_t/traced/memtrace.rank0.mtrace" "$W/ddp_rank0.mtrace" 2>/dev/null; cp "$W/ddp_t/traced/memtrace.rank1.mtrace" "$W/ddp_rank1.mtrace" 2>/dev/null
  cp "$W/ddp_t/traced.0.json" "$W/ddp_rank0.stats.json" 2>/dev/null; cp "$W/ddp_t/traced.1.json" "$W/ddp_rank1.stats.json" 2>/dev/null
  (cd "$W" && tar -czf "$OUT/ranks.tar.gz" ddp_rank*.mtrace ddp_rank*.stats.json 2>/dev/null)
else
  part "multigpu: skipped (one GPU here; run on a machine with two)"
fi
fi

ls -la "$W" >> "$LOG"
part ""
say "== $FAILS failed"
[ "$FAILS" -eq 0 ]
