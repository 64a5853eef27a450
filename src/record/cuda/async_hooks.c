/* Tensor mode's hot path: PyTorch's cudaMallocAsync / cudaFreeAsync calls reach the recorder
 * directly, not through CUPTI.
 *
 * Why: with `backend:cudaMallocAsync` every tensor is one cudaMallocAsync and one cudaFreeAsync,
 * ~80 calls per training step of a small model. Through CUPTI each pair costs four callbacks
 * (driver API entry and exit of cuMemAllocAsync and cuMemFreeAsync); measured warm on the H200
 * (scripts/api-cost.sh) that is +536 ns a pair before any stack is taken, most of it CUPTI's own
 * dispatch. A stand-in called from the caller's GOT slot (got_patch.c) costs a function call.
 *
 * What is hooked: the import slots of every loaded object that imports cudaMallocAsync,
 * cudaFreeAsync or cudaMallocFromPoolAsync (and their _ptsz forms) from the shared libcudart; in
 * a PyTorch process that is libc10_cuda.so, loaded by `import torch`, before CUDA starts (which is
 * when the recorder is set up). While the stand-ins record, CUPTI's callbacks for cuMemAllocAsync,
 * cuMemFreeAsync and cuMemAllocFromPoolAsync are off, so each call is recorded once.
 *
 * What that costs in coverage, and how it is contained:
 *   - Stream-ordered allocations made without the shared libcudart's import slots (cuMemAllocAsync
 *     called on the driver directly, a statically linked cudart, a function pointer taken with
 *     dlsym) are not seen in this mode. Hooks are used only with `memtrace record --tensors`
 *     (MEMTRACE_ASYNC_HOOKS=1), whose purpose is PyTorch's allocator; the trace says so in a note.
 *   - No object imports them when the recorder starts (CUDA started before torch was imported):
 *     nothing is hooked, CUPTI records them as in every other mode.
 *   - A library loaded later that imports them is hooked at the writer's next tick (<= 200 ms); one
 *     that bound them to another libcudart (its own copy) cannot be: the recorder then goes back to
 *     CUPTI for good (the stand-ins pass calls through untouched) and says so.
 *
 * The event is what CUPTI's callbacks would have made of the driver call underneath (api =
 * cuMemAllocAsync..., the stack ending in the runtime function), without a correlation id.
 * Device and context are those current on the calling thread, where the pool cudaMallocAsync
 * draws from lives (PyTorch sets the device around every call); on a thread with no current
 * context, the pointer's own device.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "recorder.h"

typedef cudaError_t (*malloc_async_fn)(void **, size_t, cudaStream_t);
typedef cudaError_t (*free_async_fn)(void *, cudaStream_t);
typedef cudaError_t (*malloc_pool_fn)(void **, size_t, cudaMemPool_t, cudaStream_t);

#define ORIGINAL(h) (mt_rec.hooks.table[h].original)

/* The runtime's error as the driver's CUresult the event field holds. The codes that can come
 * back from these calls share their numbers (1 invalid value, 2 out of memory, 3 not
 * initialized); anything else is stored as "unknown". */
static CUresult as_curesult(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorInvalidValue: return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorInitializationError: return CUDA_ERROR_NOT_INITIALIZED;
    default: return CUDA_ERROR_UNKNOWN;
    }
}

/* Device and context id of the calling thread's current context, cached for the last context.
 * A thread PyTorch never made a context current on (a Python thread that only ran the runtime's
 * implicit initialization) has none: the device is then the pointer's own (cuPointerGetAttribute),
 * never "unknown" for memory that exists. */
static void current_context(mt_event *ev)
{
    static __thread CUcontext last;
    static __thread uint32_t last_id;
    CUcontext ctx = NULL;
    if (mt_rec.cuda.CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
        int ordinal = -1;
        ev->device = -1;
        if (ev->address && mt_rec.cuda.PointerGetAttribute &&
            mt_rec.cuda.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                            (CUdeviceptr)ev->address) == CUDA_SUCCESS)
            ev->device = ordinal;
        return;
    }
    if (ctx != last) {
        unsigned long long id = 0;
        mt_rec.cuda.CtxGetId(ctx, &id);
        last = ctx;
        last_id = (uint32_t)id;
    }
    ev->context = last_id;
    ev->device = mt_device_of(&mt_rec, ctx);
}

static void record(mt_event *ev, cudaError_t rc, uint64_t entry_ns, int h, uint64_t t_timed)
{
    if (ev->op != MT_OP_FREE) current_context(ev);
    uint64_t api_ip = (uint64_t)(uintptr_t)ORIGINAL(h);
    mt_record_call(&mt_rec, ev, as_curesult(rc), entry_ns, api_ip);
    if (t_timed) mt_cost_add(&mt_rec.hooks.ns, &mt_rec.hooks.calls, t_timed, &mt_rec.hooks.spread);
}

static cudaError_t malloc_async(int h, CUpti_CallbackId api, void **ptr, size_t size,
                                cudaStream_t stream)
{
    malloc_async_fn orig = (malloc_async_fn)ORIGINAL(h);
    if (!mt_hook_enter(&mt_rec, &mt_rec.hooks.active)) return orig(ptr, size, stream);
    mt_stacks_before_call(&mt_rec, (uintptr_t)__builtin_frame_address(0));
    mt_sink_prefetch(mt_rec.sink); /* its slot arrives while the allocator runs */
    cudaError_t rc = orig(ptr, size, stream);
    uint64_t t = mt_time_this_call() ? mt_cost_clock() : 0;
    mt_event ev = {.op = MT_OP_ALLOC, .kind = MT_KIND_ASYNC, .bytes = size, .api = (uint16_t)api,
                   .stream = (uint64_t)(uintptr_t)stream};
    if (rc == cudaSuccess && ptr) ev.address = (uint64_t)(uintptr_t)*ptr;
    record(&ev, rc, 0, h, t);
    mt_hook_leave(&mt_rec);
    return rc;
}

static cudaError_t malloc_from_pool(int h, CUpti_CallbackId api, void **ptr, size_t size,
                                    cudaMemPool_t pool, cudaStream_t stream)
{
    malloc_pool_fn orig = (malloc_pool_fn)ORIGINAL(h);
    if (!mt_hook_enter(&mt_rec, &mt_rec.hooks.active)) return orig(ptr, size, pool, stream);
    mt_stacks_before_call(&mt_rec, (uintptr_t)__builtin_frame_address(0));
    mt_sink_prefetch(mt_rec.sink); /* its slot arrives while the allocator runs */
    cudaError_t rc = orig(ptr, size, pool, stream);
    uint64_t t = mt_time_this_call() ? mt_cost_clock() : 0;
    mt_event ev = {.op = MT_OP_ALLOC, .kind = MT_KIND_ASYNC, .bytes = size, .api = (uint16_t)api,
                   .stream = (uint64_t)(uintptr_t)stream, .aux = (uint64_t)(uintptr_t)pool,
                   .flags = MT_EF_FROM_POOL};
    if (rc == cudaSuccess && ptr) ev.address = (uint64_t)(uintptr_t)*ptr;
    record(&ev, rc, 0, h, t);
    mt_hook_leave(&mt_rec);
    return rc;
}

static cudaError_t free_async(int h, CUpti_CallbackId api, void *ptr, cudaStream_t stream)
{
    free_async_fn orig = (free_async_fn)ORIGINAL(h);
    if (!mt_hook_enter(&mt_rec, &mt_rec.hooks.active)) return orig(ptr, stream);
    uint64_t entry = mt_now_ns(); /* a free is stamped at entry (see api_callbacks.c) */
    mt_event ev = {.op = MT_OP_FREE, .kind = MT_KIND_ASYNC, .api = (uint16_t)api,
                   .address = (uint64_t)(uintptr_t)ptr, .stream = (uint64_t)(uintptr_t)stream};
    current_context(&ev); /* before the call: the pointer is still valid */
    mt_sink_hold(mt_rec.sink, entry);
    mt_sink_prefetch(mt_rec.sink); /* its slot arrives while the allocator runs */
    cudaError_t rc = orig(ptr, stream);
    uint64_t t = mt_time_this_call() ? mt_cost_clock() : 0;
    record(&ev, rc, entry, h, t);
    mt_hook_leave(&mt_rec);
    return rc;
}

/* The stand-ins, one per name: each calls its own original. */
static cudaError_t hook_malloc_async(void **p, size_t n, cudaStream_t s)
{
    return malloc_async(MT_HOOK_MALLOC_ASYNC, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, p, n, s);
}
static cudaError_t hook_malloc_async_ptsz(void **p, size_t n, cudaStream_t s)
{
    return malloc_async(MT_HOOK_MALLOC_ASYNC_PTSZ, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, p,
                        n, s);
}
static cudaError_t hook_free_async(void *p, cudaStream_t s)
{
    return free_async(MT_HOOK_FREE_ASYNC, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, p, s);
}
static cudaError_t hook_free_async_ptsz(void *p, cudaStream_t s)
{
    return free_async(MT_HOOK_FREE_ASYNC_PTSZ, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, p, s);
}
static cudaError_t hook_malloc_from_pool(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
    return malloc_from_pool(MT_HOOK_MALLOC_FROM_POOL_ASYNC,
                            CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, p, n, pool, s);
}
static cudaError_t hook_malloc_from_pool_ptsz(void **p, size_t n, cudaMemPool_t pool,
                                              cudaStream_t s)
{
    return malloc_from_pool(MT_HOOK_MALLOC_FROM_POOL_ASYNC_PTSZ,
                            CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, p, n, pool, s);
}

/* Goes back to CUPTI for good: the stand-ins pass calls through, CUPTI's callbacks record. */
static void fall_back(mt_recorder *r, const char *why)
{
    if (!atomic_exchange(&r->hooks.active, 0)) return;
    if (atomic_load(&r->mux.subscribed)) mt_callbacks_enable_async(r);
    mt_warn_once("hooks", "%s: stream-ordered allocations are recorded through CUPTI from here on "
                 "(slower)", why);
}

int mt_async_hooks_install(mt_recorder *r)
{
    static const struct {
        const char *name;
        void *hook;
    } names[MT_HOOK_COUNT] = {
        [MT_HOOK_MALLOC_ASYNC] = {"cudaMallocAsync", (void *)hook_malloc_async},
        [MT_HOOK_MALLOC_ASYNC_PTSZ] = {"cudaMallocAsync_ptsz", (void *)hook_malloc_async_ptsz},
        [MT_HOOK_FREE_ASYNC] = {"cudaFreeAsync", (void *)hook_free_async},
        [MT_HOOK_FREE_ASYNC_PTSZ] = {"cudaFreeAsync_ptsz", (void *)hook_free_async_ptsz},
        [MT_HOOK_MALLOC_FROM_POOL_ASYNC] = {"cudaMallocFromPoolAsync",
                                            (void *)hook_malloc_from_pool},
        [MT_HOOK_MALLOC_FROM_POOL_ASYNC_PTSZ] = {"cudaMallocFromPoolAsync_ptsz",
                                                 (void *)hook_malloc_from_pool_ptsz},
    };
    for (int h = 0; h < MT_HOOK_COUNT; h++)
        r->hooks.table[h] = (mt_got_hook){.name = names[h].name, .hook = names[h].hook};
    r->hooks.patcher = mt_got_patcher_new(r->hooks.table, MT_HOOK_COUNT);
    char conflict[512];
    int slots = mt_got_patch_new(r->hooks.patcher, conflict, sizeof conflict);
    if (conflict[0]) {
        /* Slots of other objects may have been redirected: they pass calls through. */
        mt_trace_note(MT_NOTE_WARNING, "stream-ordered allocations: %s has its own libcudart; "
                      "they are recorded through CUPTI", conflict);
        return 0;
    }
    if (slots <= 0) {
        mt_trace_note(MT_NOTE_INFO, "stream-ordered allocations: no loaded library imports "
                      "cudaMallocAsync yet; recorded through CUPTI");
        return 0;
    }
    atomic_store(&r->hooks.active, 1);
    mt_trace_note(MT_NOTE_INFO, "stream-ordered allocations: %d import slots of cudaMallocAsync/"
                  "cudaFreeAsync redirected to memtrace (not through CUPTI); cuMemAllocAsync "
                  "called on the driver directly is not recorded in this mode", slots);
    return 1;
}

void mt_async_hooks_tick(mt_recorder *r)
{
    if (!r->hooks.patcher || !atomic_load(&r->hooks.active)) return;
    char conflict[512];
    int slots = mt_got_patch_new(r->hooks.patcher, conflict, sizeof conflict);
    if (conflict[0]) {
        char why[600];
        snprintf(why, sizeof why, "%s, loaded while recording, has its own libcudart", conflict);
        fall_back(r, why);
    } else if (slots > 0) {
        mt_trace_note(MT_NOTE_INFO, "stream-ordered allocations: %d more import slots redirected "
                      "(a library loaded while recording; its calls before this were not seen)",
                      slots);
    }
}
