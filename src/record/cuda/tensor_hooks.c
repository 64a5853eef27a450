/* record --tensors: every block PyTorch's caching allocator hands to a tensor, without changing
 * the allocator.
 *
 * Why this way: the caching allocator serves tensors out of segments it keeps, so the driver sees
 * only the segments; the tensors are visible only inside PyTorch. Switching the allocator to
 * backend:cudaMallocAsync (memtrace's first tensor mode) makes every tensor a driver call, but it
 * changes the program: CUDA graph trees (torch.compile mode="reduce-overhead") refuse to run
 * under it, and expandable segments and the allocator's other settings are gone. PyTorch already
 * tells its profiler about every block: after each malloc and free, under the allocator's lock,
 * DeviceCachingAllocator calls
 *     c10::reportMemoryUsageToProfiler(ptr, +size / -size, allocated, reserved, Device)
 * (size = the block's size, what torch.cuda.memory_allocated() counts; allocated = that counter
 * for the device after the change), and c10::reportOutOfMemoryToProfiler(size, allocated,
 * reserved, Device) before it raises OutOfMemoryError. Both are defined in libc10 and called from
 * libc10_cuda through its import slots, so got_patch.c can put a stand-in there that records the
 * event and calls the original (torch.profiler's memory profiling keeps working). Measured on
 * torch 2.11 with an interposing prototype: the running sum of these reports equals `allocated` at
 * every report and its maximum is max_memory_allocated(), under the default allocator, expandable
 * segments, CUDA graphs, torch.compile(mode="reduce-overhead") and 8 threads. Under
 * backend:cudaMallocAsync PyTorch does not report; async_hooks.c sees those tensors instead.
 *
 * The out-of-memory report is taken in every mode, not only under --tensors: it is called once, as
 * the allocator gives up, so it costs nothing until then, and it is the only trace of a failure
 * the driver never saw. The allocator refuses without a failed cudaMalloc when the request would
 * take it past a limit of its own (torch.cuda.set_per_process_memory_fraction): before this, a
 * run that died of such an OutOfMemoryError left a trace with no failed request in it. Where the
 * driver did refuse, the report follows the allocator's failed requests (one, then one more after
 * it freed its cache) on the same thread, and says that they were not recovered from: the
 * analysis ties them together. It is recorded as a failed TENSOR request whose aux is
 * memory_allocated() at that moment (the report's own counter).
 *
 * The segments the blocks come from are still recorded by CUPTI (cudaMalloc / cuMemCreate from
 * libc10_cuda): mt_record_call flags them MT_EF_SEGMENT (and MT_EF_TENSORS_TRACKED while these
 * stand-ins record), so the analysis counts the tensors as what is in use and the segments as the
 * allocator's reservation around them (torch.cuda.memory_reserved()).
 *
 * Binary interface relied on (x86-64 System V; checked by the symbol names, which encode the
 * parameter types): c10::Device is {int8 type, int8 index}, passed by value in the low 16 bits of
 * the fifth integer register; DeviceType::CUDA is 1. Reports for other device types (the CPU
 * allocator's, pinned host memory's) pass through unrecorded.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "recorder.h"
#include "../hot_path.h"

#define USAGE_SYMBOL "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE"
#define OOM_SYMBOL "_ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE"
#define C10_DEVICE_CUDA 1

typedef void (*usage_fn)(void *, int64_t, size_t, size_t, uint32_t);
typedef void (*oom_fn)(int64_t, size_t, size_t, uint32_t);

static inline int cuda_device(uint32_t device, int32_t *index)
{
    if ((device & 0xff) != C10_DEVICE_CUDA) return 0;
    *index = (int8_t)((device >> 8) & 0xff);
    return 1;
}

/* One report timed whole, in cycles: allocations split by whether their stack had Python frames
 * (the forward pass's and the optimizer's against autograd's workers': no Python walk, a deeper
 * native one), which cost differently. */
static inline void add_whole(mt_recorder *r, uint8_t op, uint64_t cycles)
{
    int py_stacks = r->py && (r->cfg.stacks & MT_STACKS_PYTHON);
    int k = op == MT_OP_FREE                                   ? 1
            : py_stacks && mt_stacks_last_without_python() ? 2
                                                           : 0;
    atomic_fetch_add_explicit(&r->tensors.whole_cycles[k], cycles, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->tensors.whole_calls[k], 1, memory_order_relaxed);
}

MT_HOT_PATH static void hook_usage(void *ptr, int64_t size, size_t allocated, size_t reserved,
                                   uint32_t device)
{
    mt_recorder *r = &mt_rec;
    usage_fn orig = (usage_fn)r->tensors.table[MT_TENSOR_HOOK_USAGE].original;
    int32_t dev;
    /* Another sample of the reports is timed whole, in TSC cycles from here: the note above
     * starts after the time stamp and the in-flight count, and its clock reads (one here, more
     * in a timed stack) are work that an untimed report does not do; a cycle count reads no
     * memory and warms nothing (clock.h). */
    int timed = mt_time_this_call();
    int whole = !timed && mt_time_this_call();
    uint64_t entry = whole ? mt_clock_cycles() : 0;
    uint64_t rare0 = whole ? mt_clock_tls.rare_ns : 0; /* rare work counted apart (rare_work.h) */
    if (cuda_device(device, &dev) && mt_hook_enter(r, &r->tensors.active)) {
        mt_sink_prefetch(r->sink); /* the event's slot, fetched while the stack is taken */
        uint64_t now = mt_now_ns();
        uint64_t now_cost = timed ? mt_cost_clock_at(now) : 0;
        mt_event ev = {.kind = MT_KIND_TENSOR, .address = (uint64_t)(uintptr_t)ptr,
                       .device = dev, .aux = allocated};
        if (size >= 0) {
            ev.op = MT_OP_ALLOC;
            ev.bytes = (uint64_t)size;
        } else {
            ev.op = MT_OP_FREE;
            ev.bytes = (uint64_t)-size;
        }
        mt_record_call(r, &ev, CUDA_SUCCESS, now, 0);
        if (timed) mt_cost_add(&r->tensors.ns, &r->tensors.calls, now_cost, &r->tensors.spread);
        if (whole) {
            uint64_t cycles = mt_clock_cycles() - entry; /* before the bookkeeping below */
            /* rare work is counted apart; while it cannot be taken out, the sample is dropped */
            uint64_t rare = mt_rare_cycles_since(rare0);
            if (rare != MT_RARE_UNKNOWN && rare < cycles) add_whole(r, ev.op, cycles - rare);
        }
        mt_hook_leave(r);
    }
    if (orig) orig(ptr, size, allocated, reserved, device);
}

static void hook_oom(int64_t size, size_t allocated, size_t reserved, uint32_t device)
{
    mt_recorder *r = &mt_rec;
    oom_fn orig = (oom_fn)r->tensors.table[MT_TENSOR_HOOK_OOM].original;
    int32_t dev;
    if (cuda_device(device, &dev) && mt_hook_enter(r, &r->tensors.oom_active)) {
        /* the request PyTorch is about to raise OutOfMemoryError for, with its stack */
        mt_event ev = {.op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .bytes = (uint64_t)size,
                       .device = dev, .aux = allocated};
        mt_record_call(r, &ev, CUDA_ERROR_OUT_OF_MEMORY, mt_now_ns(), 0);
        mt_hook_leave(r);
    }
    if (orig) orig(size, allocated, reserved, device);
}

/* Where libc10_cuda is, once it is loaded. Found by name: PyTorch's libraries are loaded
 * RTLD_LOCAL (Python imports extension modules so), so dlsym(RTLD_DEFAULT) does not see them. */
static int find_c10_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    if (strncmp(base, "libc10_cuda.so", 14) != 0) return 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (start < lo) lo = start;
        if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
    }
    if (hi <= lo) return 0;
    uintptr_t *range = data;
    range[0] = lo, range[1] = hi;
    return 1;
}

void mt_find_c10(mt_recorder *r)
{
    if (atomic_load(&r->tensors.c10_hi)) return;
    uintptr_t range[2] = {0, 0};
    dl_iterate_phdr(find_c10_object, range);
    if (!range[1]) return;
    atomic_store(&r->tensors.c10_lo, range[0]);
    atomic_store(&r->tensors.c10_hi, range[1]);
}

int mt_called_from_c10(mt_recorder *r)
{
    uintptr_t lo = atomic_load_explicit(&r->tensors.c10_lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&r->tensors.c10_hi, memory_order_relaxed);
    if (!hi) return 0;
    uint64_t ips[48];
    int truncated = 0;
    int n = mt_unwind(ips, 48, 0, &truncated);
    for (int i = 0; i < n; i++)
        if (ips[i] >= lo && ips[i] < hi) return 1;
    return 0;
}

static int patch(mt_recorder *r, int *slots)
{
    char conflict[512];
    *slots = mt_got_patch_new(r->tensors.patcher, conflict, sizeof conflict);
    if (!conflict[0]) return 0;
    mt_warn_once("tensors-conflict", "%s has its own copy of libc10: its %s not recorded", conflict,
                 r->cfg.tensors ? "tensors are" : "out-of-memory reports are");
    return -1;
}

/* The slots are in place: from now on the stand-ins record. */
static void activate(mt_recorder *r, int slots, int late)
{
    atomic_store(&r->tensors.oom_active, 1);
    if (!r->cfg.tensors) {
        mt_trace_note(MT_NOTE_INFO,
                      "PyTorch's out-of-memory reports are recorded (%d import "
                      "slots redirected), so an OutOfMemoryError its allocator raises without a "
                      "failed driver call is in the trace too",
                      slots);
        return;
    }
    if (atomic_exchange(&r->tensors.active, 1)) return;
    if (late)
        mt_trace_note(MT_NOTE_INFO,
                      "tensors: PyTorch's caching allocator loaded while "
                      "recording: %d import slots redirected; tensors it handed out before are "
                      "not in the trace",
                      slots);
    else
        mt_trace_note(MT_NOTE_INFO,
                      "tensors: PyTorch's caching allocator reports every block "
                      "it hands out (%d import slots redirected to memtrace); the allocator itself "
                      "is unchanged",
                      slots);
}

int mt_tensor_hooks_install(mt_recorder *r)
{
    r->tensors.table[MT_TENSOR_HOOK_USAGE] = (mt_got_hook){.name = USAGE_SYMBOL,
                                                           .hook = (void *)hook_usage};
    r->tensors.table[MT_TENSOR_HOOK_OOM] = (mt_got_hook){.name = OOM_SYMBOL,
                                                         .hook = (void *)hook_oom};
    /* without --tensors the usage reports keep going straight to PyTorch (the OOM entry is last) */
    int first = r->cfg.tensors ? 0 : MT_TENSOR_HOOK_OOM;
    r->tensors.patcher = mt_got_patcher_new(&r->tensors.table[first], MT_TENSOR_HOOK_COUNT - first);
    if (!r->tensors.patcher) return 0;
    int slots = 0;
    patch(r, &slots);
    if (slots <= 0) {
        if (r->cfg.tensors)
            mt_trace_note(MT_NOTE_INFO, "tensors: PyTorch's CUDA allocator is not loaded yet; "
                                        "its tensors are recorded from when it is");
        return 0;
    }
    activate(r, slots, 0);
    return 1;
}

void mt_tensor_hooks_tick(mt_recorder *r)
{
    if (!r->tensors.patcher) return;
    int slots = 0;
    patch(r, &slots);
    if (slots > 0 && !atomic_load(&r->tensors.oom_active)) activate(r, slots, 1);
}
