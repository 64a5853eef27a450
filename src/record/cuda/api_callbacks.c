/* CUPTI driver-API callbacks -> memory events. This is the core record: every allocation and
 * release the program (or a library in it) asks the driver for, with our own monotonic timestamp,
 * the caller's thread, device, context, stream, result code and stack.
 *
 * Why the driver API and not the runtime API: cudaMalloc, cudaMallocAsync, cudaHostAlloc... all
 * end in a driver call, and libraries that skip the runtime (JAX/XLA, CuPy, NCCL) call the driver
 * directly. One layer sees everything, once.
 *
 * Only the callback ids below are enabled, never the whole domain: a kernel launch must not pay for
 * memory tracing.
 *
 * In tensor mode the stream-ordered calls from PyTorch reach us without CUPTI (async_hooks.c);
 * both paths end in mt_record_call.
 *
 * Timestamps: allocations are stamped at API exit (the address exists then); releases at API
 * entry. So when one thread frees an address and another gets it back, the free always sorts first.
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "memtrace/driver_calls.h"
#include "recorder.h"
#include "../hot_path.h"

/* What a traced call is to the recorder: the third column of MT_TRACED_DRIVER_CALLS, which lists
 * every driver call the recorder listens to (memtrace/driver_calls.h, shared with the names the
 * trace library gives the ids). The enabling, the activity-record bookkeeping and the hooks'
 * takeover all read that one table. */
enum {
    CALL_MEMORY2 = 1 << 0,        /* makes a MEMORY2 activity record (a duplicate of ours, not a
                                     driver-internal allocation) */
    CALL_STREAM_ORDERED = 1 << 1, /* async_hooks.c records it while its stand-ins are active */
    CALL_RELEASE = 1 << 2,        /* gives memory back: stamped when the call starts */
    CALL_CAPTURE = 1 << 3,        /* begins or ends a CUDA graph capture (capture.c) */
    CALL_POOL = 1 << 4,           /* makes or names a memory pool (pool_poll.c: host pools) */
    /* makes a MEMORY2 record in some cases only (a duplicate of ours too): no sign that records
     * should come (activity.c: the silence that says another tool took the activity API) */
    CALL_MEMORY2_SOMETIMES = 1 << 5,
    CALL_ARRAY = 1 << 6,   /* makes a CUDA array: its MEMORY2 record is the event (the driver's
                              size), given the stack noted here (activity.c) */
    CALL_CTX_END = 1 << 7, /* may destroy a context: see ctx_end below */
};

/* The table's ids are written out for the trace library, which builds without CUDA: each must be
 * the one the CUPTI header we build against gives that name. */
#define CHECK_ID(name, cbid, ...)                                                                  \
    _Static_assert(cbid == CUPTI_DRIVER_TRACE_CBID_##name, "driver_calls.h: id of " #name);
MT_TRACED_DRIVER_CALLS(CHECK_ID)
MT_NAMED_DRIVER_CALLS(CHECK_ID)
#undef CHECK_ID

static const struct traced_call {
    CUpti_CallbackId cbid;
    unsigned what;
} traced[] = {
#define TRACED(name, cbid, what) {CUPTI_DRIVER_TRACE_CBID_##name, what},
    MT_TRACED_DRIVER_CALLS(TRACED)
#undef TRACED
};

#define N_TRACED (sizeof traced / sizeof *traced)

/* A switch rather than a walk over traced[]: one indexed jump on every callback, and a duplicate
 * id in the table is a compile error. */
static unsigned what_is(CUpti_CallbackId cbid)
{
    switch (cbid) {
#define WHAT(name, cbid, what)                                                                     \
    case CUPTI_DRIVER_TRACE_CBID_##name: return what;
        MT_TRACED_DRIVER_CALLS(WHAT)
#undef WHAT
    default: return 0;
    }
}

/* Which of the traced calls to enable. */
typedef enum calls_wanted {
    ALL_CALLS,             /* everything */
    ALL_BUT_STREAM_ORDERED, /* the hooks record the stream-ordered ones */
    ONLY_STREAM_ORDERED,   /* the hooks stopped: CUPTI takes the stream-ordered ones back */
} calls_wanted;

static int enable(mt_recorder *r, calls_wanted which)
{
    for (size_t i = 0; i < N_TRACED; i++) {
        int so = (traced[i].what & CALL_STREAM_ORDERED) != 0;
        if ((which == ALL_BUT_STREAM_ORDERED && so) || (which == ONLY_STREAM_ORDERED && !so))
            continue;
        CUptiResult rc = mt_mux_enable(r, 1, CUPTI_CB_DOMAIN_DRIVER_API, traced[i].cbid);
        if (rc != CUPTI_SUCCESS) {
            const char *msg = "?";
            r->cupti.GetResultString(rc, &msg);
            mt_warn_once("enable", "cannot enable CUPTI callback %u (%s); the program runs "
                         "untraced", (unsigned)traced[i].cbid, msg);
            return -1;
        }
    }
    if (which == ONLY_STREAM_ORDERED) return 0;
    /* Context creation/destruction: device names, and releasing what a dying context held. */
    mt_mux_enable(r, 1, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
    mt_mux_enable(r, 1, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    return 0;
}

int mt_callbacks_enable(mt_recorder *r)
{
    return enable(r, atomic_load(&r->hooks.active) ? ALL_BUT_STREAM_ORDERED : ALL_CALLS);
}

int mt_callbacks_enable_async(mt_recorder *r)
{
    return enable(r, ONLY_STREAM_ORDERED);
}

/* Device ordinal of a context; the last answer is cached per thread (one context per thread is
 * the common case). */
int32_t mt_device_of(mt_recorder *r, CUcontext ctx)
{
    static __thread CUcontext last_ctx;
    static __thread int32_t last_dev = -1;
    if (!ctx) return -1;
    if (ctx == last_ctx) return last_dev;
    uint32_t dev = 0;
    if (r->cupti.GetDeviceId(ctx, &dev) != CUPTI_SUCCESS) return -1;
    last_ctx = ctx;
    last_dev = (int32_t)dev;
    return last_dev;
}

static __thread int thread_named, thread_is_autograd;

int mt_thread_is_autograd(void) { return thread_is_autograd; }

/* The first event of each thread also names the thread. */
static void name_thread(mt_recorder *r, uint32_t tid)
{
    if (thread_named) return;
    thread_named = 1;
    uint64_t rare = mt_rare_begin(); /* once a thread: rare work (rare_work.h) */
    char path[64], name[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%u/comm", tid);
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(name, sizeof name, f)) name[strcspn(name, "\n")] = 0;
        fclose(f);
    }
    /* PyTorch names its backward-pass workers pt_autograd_<device> (c10::setThreadName). */
    thread_is_autograd = strncmp(name, "pt_autograd", 11) == 0;
    mt_record rec = {.type = MT_REC_THREAD, .u.thread = {.tid = tid, .name = name}};
    mt_sink_put_copy(r->sink, &rec);
    mt_rare_end(rare, MT_RARE_THREAD);
}

/* A context destroyed inside a call that the recorder traces (cuCtxDestroy,
 * cuDevicePrimaryCtxRelease and Reset: CALL_CTX_END) is written when that call returns, with the
 * time it began to be destroyed, after a forced flush of CUPTI's activity buffers. Why: CUPTI
 * delivers the records of that context's CUDA arrays and driver-internal allocations (and their
 * releases) up to a flush period late, some of them only once the context is gone; written after
 * its CTX_DESTROY, the analysis, which reads the trace in file order, ended those lifetimes at the
 * destruction, then found their releases unmatched and the later ones' allocations live after it
 * (seen on an H200: 1455 of 3000 arrays; the peak was half the real one). Meanwhile the thread
 * holds the writer back from what was stamped after that time (mt_sink_hold), as a release does.
 * A context destroyed anywhere else (by the driver at exit) is written at once. */
static __thread int tls_in_ctx_end;   /* inside a CALL_CTX_END call */
static __thread int tls_ctx_end_held; /* its CTX_DESTROY waits in tls_ctx_end_event */
static __thread mt_event tls_ctx_end_event;

static void ctx_end_exit(mt_recorder *r)
{
    tls_in_ctx_end = 0;
    if (!tls_ctx_end_held) return;
    tls_ctx_end_held = 0;
    if (mt_activity_ours(r)) mt_activity_flush(r);
    mt_sink_event(r->sink, &tls_ctx_end_event);
    mt_sink_hold(r->sink, 0);
}

static void on_resource(mt_recorder *r, CUpti_CallbackId cbid, const CUpti_ResourceData *rd)
{
    if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
        if (mt_trace_open(r) != 0) return;
        int32_t dev = mt_device_of(r, rd->context);
        char name[256] = "", uuid[48] = "";
        size_t total = 0;
        CUdevice d;
        /* libcuda is the caller: these are safe to call here and trigger no traced callback. */
        if (dev >= 0 && r->cuda.DeviceGet(&d, dev) == CUDA_SUCCESS) {
            r->cuda.DeviceGetName(name, sizeof name - 1, d);
            r->cuda.DeviceTotalMem(&total, d);
            CUuuid u;
            if (r->cuda.DeviceGetUuid && r->cuda.DeviceGetUuid(&u, d) == CUDA_SUCCESS)
                mt_format_gpu_uuid((const uint8_t *)u.bytes, uuid, sizeof uuid);
        }
        mt_record rec = {.type = MT_REC_DEVICE};
        rec.u.device =
            (mt_device){.ordinal = dev, .total_bytes = total, .name = name, .uuid = uuid};
        mt_sink_put_copy(r->sink, &rec);
    } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        mt_event ev = {.time_ns = mt_now_ns(), .tid = mt_gettid(), .op = MT_OP_CTX_DESTROY,
                       .device = mt_device_of(r, rd->context)};
        /* CUPTI gives no context uid in resource data; cuCtxGetId names the same id. */
        unsigned long long id = 0;
        if (r->cuda.CtxGetId(rd->context, &id) == CUDA_SUCCESS) ev.context = (uint32_t)id;
        if (tls_in_ctx_end && !tls_ctx_end_held && mt_activity_ours(r)) {
            tls_ctx_end_event = ev; /* written by ctx_end_exit */
            tls_ctx_end_held = 1;
            mt_sink_hold(r->sink, ev.time_ns);
            return;
        }
        mt_sink_event(r->sink, &ev);
    }
}

/* A graph memory node, however it was added (cuGraphAddMemAllocNode, or the generic
 * cuGraphAddNode(_v2) that cudaGraphAddNode and CUDA 12.3+ libraries use for every node type):
 * memory the graph allocates each time it runs, at a virtual address fixed now; its physical
 * pages come from the device's graph memory pool. The two calls hold the same fields in two
 * struct types (CUDA_MEM_ALLOC_NODE_PARAMS v1 and v2), so the fields are passed one by one. */
static void describe_mem_alloc_node(const CUmemPoolProps *pool, size_t bytesize,
                                    CUdeviceptr dptr, int ok, mt_event *ev)
{
    ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_ASYNC, ev->flags |= MT_EF_CAPTURED;
    ev->bytes = bytesize;
    if (pool->location.type == CU_MEM_LOCATION_TYPE_DEVICE) ev->device = pool->location.id;
    else if (mt_location_is_host(pool->location.type))
        ev->device = -1, ev->flags |= MT_EF_HOST_MEMORY;
    if (ok) ev->address = dptr;
}

static void describe_mem_free_node(CUdeviceptr dptr, mt_event *ev)
{
    ev->op = MT_OP_FREE, ev->kind = MT_KIND_ASYNC, ev->flags |= MT_EF_CAPTURED;
    ev->address = dptr;
}

/* cuGraphAddNode(_v2): a memory node is the same event as from cuGraphAddMemAllocNode /
 * cuGraphAddMemFreeNode; any other node type is no memory event. */
static int describe_graph_node(const CUgraphNodeParams *p, int ok, mt_event *ev)
{
    if (!p) return 0;
    if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        describe_mem_alloc_node(&p->alloc.poolProps, p->alloc.bytesize, p->alloc.dptr, ok, ev);
        return 1;
    }
    if (p->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
        describe_mem_free_node(p->free.dptr, ev);
        return 1;
    }
    return 0;
}

/* The bytes a CUDA array asks for (a failed request's size): width x height x depth x channels x
 * the element's size, for the formats with one; 0 (not known) for the others (packed, block
 * compressed). A mipmapped array's first level only. */
static uint64_t array_bytes(size_t w, size_t h, size_t d, unsigned channels, CUarray_format f)
{
    unsigned elem = 0;
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        elem = 1;
        break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        elem = 2;
        break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        elem = 4;
        break;
    default:
        return 0;
    }
    return (uint64_t)w * (h ? h : 1) * (d ? d : 1) * channels * elem;
}

/* CUDA_ARRAY_DESCRIPTOR_v1 and CUDA_ARRAY3D_DESCRIPTOR_v1, whose members cuda.h declares only
 * for the driver's own build (__CUDA_API_VERSION_INTERNAL): the first versions' fixed layout. */
typedef struct array_desc_v1 {
    unsigned width, height;
    CUarray_format format;
    unsigned channels;
} array_desc_v1;

typedef struct array3d_desc_v1 {
    unsigned width, height, depth;
    CUarray_format format;
    unsigned channels, flags;
} array3d_desc_v1;

static uint64_t array_bytes_asked(CUpti_CallbackId cbid, const void *params)
{
    const CUDA_ARRAY3D_DESCRIPTOR *d3 = NULL;
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2) {
        const CUDA_ARRAY_DESCRIPTOR *d = ((const cuArrayCreate_v2_params *)params)->pAllocateArray;
        return d ? array_bytes(d->Width, d->Height, 1, d->NumChannels, d->Format) : 0;
    }
    /* the first versions (32-bit sizes), still exported for programs built before CUDA 3.2 */
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuArrayCreate) {
        const array_desc_v1 *d =
            (const void *)((const cuArrayCreate_params *)params)->pAllocateArray;
        return d ? array_bytes(d->width, d->height, 1, d->channels, d->format) : 0;
    }
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate) {
        const array3d_desc_v1 *d =
            (const void *)((const cuArray3DCreate_params *)params)->pAllocateArray;
        return d ? array_bytes(d->width, d->height, d->depth, d->channels, d->format) : 0;
    }
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2)
        d3 = ((const cuArray3DCreate_v2_params *)params)->pAllocateArray;
    else
        d3 = ((const cuMipmappedArrayCreate_params *)params)->pMipmappedArrayDesc;
    return d3 ? array_bytes(d3->Width, d3->Height, d3->Depth, d3->NumChannels, d3->Format) : 0;
}

/* Fills ev from the call's parameters. Returns 0 when the call is not one we record. */
static int describe(CUpti_CallbackId cbid, const void *params, int ok, mt_event *ev)
{
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
        const cuMemAlloc_v2_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_DEVICE, ev->bytes = p->bytesize;
        if (ok) ev->address = *p->dptr;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
        const cuMemAllocPitch_v2_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_PITCH;
        ev->bytes = (uint64_t)p->WidthInBytes * p->Height; /* what was asked for */
        if (ok) {
            ev->address = *p->dptr;
            ev->aux = *p->pPitch;
            ev->bytes = (uint64_t)*p->pPitch * p->Height; /* what was given */
        }
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: {
        const cuMemFree_v2_params *p = params;
        /* frees device, pitch and managed memory alike: the compactor matches by address */
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_DEVICE, ev->address = p->dptr;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
        const cuMemAllocHost_v2_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_HOST_PINNED, ev->bytes = p->bytesize;
        ev->device = -1;
        if (ok) ev->address = (uint64_t)(uintptr_t)*p->pp;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc:
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc_v2: {
        const cuMemHostAlloc_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_HOST_PINNED, ev->bytes = p->bytesize;
        ev->device = -1, ev->aux = p->Flags;
        if (ok) ev->address = (uint64_t)(uintptr_t)*p->pp;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost: {
        const cuMemFreeHost_params *p = params;
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_HOST_PINNED, ev->device = -1;
        ev->address = (uint64_t)(uintptr_t)p->p;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister:
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2: {
        const cuMemHostRegister_v2_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_HOST_REGISTERED, ev->bytes = p->bytesize;
        ev->device = -1, ev->aux = p->Flags, ev->address = (uint64_t)(uintptr_t)p->p;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister: {
        const cuMemHostUnregister_params *p = params;
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_HOST_REGISTERED, ev->device = -1;
        ev->address = (uint64_t)(uintptr_t)p->p;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
        const cuMemAllocManaged_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_MANAGED, ev->bytes = p->bytesize;
        ev->aux = p->flags;
        if (ok) ev->address = *p->dptr;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve: {
        const cuMemAddressReserve_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_VMM_RESERVE, ev->bytes = p->size;
        if (ok) ev->address = *p->ptr;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree: {
        const cuMemAddressFree_params *p = params;
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_VMM_RESERVE, ev->address = p->ptr;
        ev->bytes = p->size;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
        const cuMemCreate_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_VMM_PHYSICAL, ev->bytes = p->size;
        if (p->prop && p->prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
            ev->device = p->prop->location.id;
        else if (p->prop && mt_location_is_host(p->prop->location.type))
            ev->device = -1, ev->flags |= MT_EF_HOST_MEMORY; /* pinned host pages */
        /* the handle types it asks for: a request for a fabric handle that the machine refuses
         * (no IMEX) is how PyTorch's expandable segments and NCCL find out they cannot have one */
        if (p->prop) ev->aux = (uint64_t)p->prop->requestedHandleTypes;
        if (ok) ev->address = (uint64_t)*p->handle;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRetainAllocationHandle: {
        /* a handle is reference-counted: NCCL takes one back from a mapped address, then
         * releases it; only the last release frees the memory */
        const cuMemRetainAllocationHandle_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_VMM_PHYSICAL, ev->flags |= MT_EF_RETAIN;
        if (ok && p->handle) ev->address = (uint64_t)*p->handle;
        return ok; /* a failed retain is not a failed allocation */
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemImportFromShareableHandle: {
        /* another process's memory (a peer's buffers, over IPC): tracked so that its release
         * matches, counted as nobody's here */
        const cuMemImportFromShareableHandle_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_VMM_PHYSICAL, ev->flags |= MT_EF_IMPORTED;
        if (ok && p->handle) ev->address = (uint64_t)*p->handle;
        return ok;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle:
    case CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2: {
        /* another process's cudaMalloc, mapped into this one (legacy CUDA IPC): its bytes are the
         * exporter's, and NVML counts them there. Tracked so that cuIpcCloseMemHandle matches, and
         * so that CUPTI's record of the mapping is not taken for a driver-internal allocation of
         * ours; its size is the range's, asked for once the call has returned (mt_on_callback) */
        const cuIpcOpenMemHandle_v2_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_DEVICE, ev->flags |= MT_EF_IMPORTED;
        if (ok && p->pdptr) ev->address = *p->pdptr;
        return ok; /* a handle that cannot be opened is no request for memory */
    }
    case CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle: {
        const cuIpcCloseMemHandle_params *p = params;
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_DEVICE, ev->flags |= MT_EF_IMPORTED;
        ev->address = p->dptr;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuArrayCreate:
    case CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate:
    case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayCreate:
        /* only a refused one (note_array has the others): the bytes it asked for */
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_ARRAY, ev->bytes = array_bytes_asked(cbid, params);
        return !ok;
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease: {
        const cuMemRelease_params *p = params;
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_VMM_PHYSICAL, ev->address = (uint64_t)p->handle;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
        const cuMemMap_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_VMM_MAP, ev->address = p->ptr;
        ev->bytes = p->size, ev->aux = (uint64_t)p->handle;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
        const cuMemUnmap_params *p = params;
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_VMM_MAP, ev->address = p->ptr;
        ev->bytes = p->size;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
        const cuMemAllocAsync_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_ASYNC, ev->bytes = p->bytesize;
        ev->stream = (uint64_t)(uintptr_t)p->hStream;
        if (ok) ev->address = *p->dptr;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
        const cuMemAllocFromPoolAsync_params *p = params;
        ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_ASYNC, ev->bytes = p->bytesize;
        ev->stream = (uint64_t)(uintptr_t)p->hStream;
        ev->aux = (uint64_t)(uintptr_t)p->pool, ev->flags |= MT_EF_FROM_POOL;
        if (ok) ev->address = *p->dptr;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
        const cuMemFreeAsync_params *p = params;
        ev->op = MT_OP_FREE, ev->kind = MT_KIND_ASYNC, ev->address = p->dptr;
        ev->stream = (uint64_t)(uintptr_t)p->hStream;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode: {
        const cuGraphAddMemAllocNode_params *p = params;
        if (p->nodeParams)
            describe_mem_alloc_node(&p->nodeParams->poolProps, p->nodeParams->bytesize,
                                    p->nodeParams->dptr, ok, ev);
        else /* CUDA refuses the call; the failed request is still recorded */
            ev->op = MT_OP_ALLOC, ev->kind = MT_KIND_ASYNC, ev->flags |= MT_EF_CAPTURED;
        return 1;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemFreeNode:
        describe_mem_free_node(((const cuGraphAddMemFreeNode_params *)params)->dptr, ev);
        return 1;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode:
        return describe_graph_node(((const cuGraphAddNode_params *)params)->nodeParams, ok, ev);
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2:
        return describe_graph_node(((const cuGraphAddNode_v2_params *)params)->nodeParams, ok, ev);
    case CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo: {
        const cuMemPoolTrimTo_params *p = params;
        ev->op = MT_OP_POOL_TRIM, ev->kind = MT_KIND_POOL;
        ev->address = (uint64_t)(uintptr_t)p->pool, ev->bytes = p->minBytesToKeep;
        return 1;
    }
    default: return 0;
    }
}

/* The stream a capture call names (all of them take it first). */
static uint64_t capture_stream(const void *params)
{
    return (uint64_t)(uintptr_t)((const cuStreamEndCapture_params *)params)->hStream;
}
/* A pool made, or a device's or the host's default or current pool named: one located on the host
 * or a host NUMA node is noted, so that what is allocated from it is host memory (pool_poll.c). */
static void note_pool_place(mt_recorder *r, CUpti_CallbackId cbid, const void *params)
{
    const CUmemLocation *at = NULL;
    CUmemoryPool *pool = NULL;
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate) {
        const cuMemPoolCreate_params *p = params;
        at = p->poolProps ? &p->poolProps->location : NULL, pool = p->pool;
    } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemGetDefaultMemPool) {
        const cuMemGetDefaultMemPool_params *p = params;
        at = p->location, pool = p->pool_out;
    } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemGetMemPool) {
        const cuMemGetMemPool_params *p = params;
        at = p->location, pool = p->pool;
    }
    if (at && pool && mt_location_is_host(at->type))
        mt_pool_note_host(r, (uint64_t)(uintptr_t)*pool);
}

/* The size of an IPC mapping: cuIpcOpenMemHandle gives only its address. The whole allocation
 * of the exporter is mapped (its range); 0 when the driver will not say. libcuda is the caller
 * here: cuPointerGetAttribute is not traced. */
static uint64_t ipc_range_bytes(mt_recorder *r, uint64_t address)
{
    size_t bytes = 0;
    if (!address || !r->cuda.PointerGetAttribute ||
        r->cuda.PointerGetAttribute(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                    (CUdeviceptr)address) != CUDA_SUCCESS)
        return 0;
    return bytes;
}

/* cuArrayCreate and the like: no event here. Its activity record has the driver's size (a
 * callback cannot ask it: cuArrayGetMemoryRequirements answers only for arrays made with deferred
 * mapping) and becomes the event, with the stack noted now (activity.c). A refused one is a failed
 * request like any other (describe). */
static void note_array(mt_recorder *r, uint32_t correlation)
{
    if (mt_trace_open(r) != 0) return;
    uint32_t tid = mt_gettid();
    name_thread(r, tid);
    uint16_t flags = 0;
    uint32_t stack = mt_capture_stack(r, &flags, 0, 0);
    mt_array_note(r, correlation, stack, tid, flags);
}

/* When the memory call in progress on this thread started: stamped at API entry, read at exit.
 * Per thread, not in CUPTI's correlationData, which the guest client (cupti_mux.c) shares. */
static __thread uint64_t tls_entry_ns;

void CUPTIAPI mt_on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *cbdata)
{
    mt_recorder *r = userdata;
    if (r->cfg.census) {
        mt_census_count(domain, cbid, cbdata);
        return;
    }
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
        on_resource(r, cbid, cbdata);
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const CUpti_CallbackData *cb = cbdata;
    unsigned what = what_is(cbid);

    if (cb->callbackSite == CUPTI_API_ENTER) {
        tls_entry_ns = mt_now_ns();
        /* A release is written with its entry stamp: until its event commits, later events wait
         * in the writer (the trace stays in time order while the call runs). */
        if (what & CALL_RELEASE) mt_sink_hold(r->sink, tls_entry_ns);
        if (what & CALL_CTX_END) tls_in_ctx_end = 1;
        if ((what & (CALL_MEMORY2 | CALL_MEMORY2_SOMETIMES)) && mt_activity_ours(r)) {
            mt_corr_insert(&r->activity.corr, cb->correlationId);
            if (what & CALL_MEMORY2)
                atomic_fetch_add_explicit(&r->activity.memory_api_calls, 1, memory_order_relaxed);
        }
        return;
    }

    mt_sink_prefetch(r->sink); /* the event's slot, fetched while the call is described */
    CUresult res = cb->functionReturnValue ? *(const CUresult *)cb->functionReturnValue
                                           : CUDA_SUCCESS;
    int ok = res == CUDA_SUCCESS;
    if (what & CALL_CTX_END) {
        ctx_end_exit(r);
        return;
    }
    if (what & CALL_CAPTURE) {
        if (cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture ||
            cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz)
            mt_capture_end(r, capture_stream(cb->functionParams)); /* ended even when it failed */
        else if (ok)
            mt_capture_begin(r, capture_stream(cb->functionParams));
        return;
    }
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy) {
        if (ok) mt_pool_forget(r, (uint64_t)(uintptr_t)((const cuMemPoolDestroy_params *)
                                                            cb->functionParams)->pool);
        return;
    }
    if (what & CALL_POOL) {
        if (ok) note_pool_place(r, cbid, cb->functionParams);
        return;
    }
    if ((what & CALL_ARRAY) && ok) {
        note_array(r, cb->correlationId);
        return;
    }
    mt_event ev = {0};
    ev.context = cb->contextUid;
    ev.correlation = cb->correlationId;
    ev.api = (uint16_t)cbid;
    ev.device = mt_device_of(r, cb->context);
    if (!describe(cbid, cb->functionParams, ok, &ev)) {
        if (what & CALL_RELEASE) mt_sink_hold(r->sink, 0);
        return;
    }
    if (ev.op == MT_OP_ALLOC && ev.kind == MT_KIND_DEVICE && (ev.flags & MT_EF_IMPORTED))
        ev.bytes = ipc_range_bytes(r, ev.address);
    mt_record_call(r, &ev, res, tls_entry_ns, 0);
}

MT_HOT_PATH void mt_record_call(mt_recorder *r, mt_event *ev, CUresult res,
                                uint64_t entry_ns, uint64_t api_ip)
{
    int ok = res == CUDA_SUCCESS;
    /* cudaFree(0) / cuMemFree(0) is the classic "make sure a context exists" call: no event. */
    if ((ev->op == MT_OP_FREE && ev->address == 0) || mt_trace_open(r) != 0) {
        if (ev->op == MT_OP_FREE) mt_sink_hold(r->sink, 0);
        return;
    }
    ev->tid = mt_gettid();
    name_thread(r, ev->tid);
    if (mt_capture_this_thread(r, ev->tid)) ev->flags |= MT_EF_CAPTURED;

    if (ev->kind == MT_KIND_ASYNC && ev->op == MT_OP_ALLOC) {
        if ((ev->flags & MT_EF_FROM_POOL) && mt_pool_is_host(r, ev->aux))
            ev->device = -1, ev->flags |= MT_EF_HOST_MEMORY; /* a pool on the host */
        if ((ev->flags & MT_EF_CAPTURED) && ev->device >= 0 && ev->device < 64)
            atomic_fetch_or(&r->graph_devices, 1ull << ev->device); /* its pages: graph pool */
        else
            mt_pool_note_use(r, ev->device, (ev->flags & MT_EF_FROM_POOL) ? ev->aux : 0);
    }
    if (!ok) {
        /* A failed release changes nothing; a failed request is an event of its own. */
        if (ev->op != MT_OP_ALLOC) {
            mt_sink_hold(r->sink, 0);
            return;
        }
        if (ev->kind == MT_KIND_ASYNC) mt_pool_poll_rare(r); /* the reservation at that moment */
        mt_activity_flush_before_failure(r); /* what was in use then, activity records included */
        ev->op = MT_OP_FAILED;
        ev->result = (uint16_t)res;
        ev->address = 0;
    }
    /* PyTorch's segments: its cache, around the tensors (tensor_hooks.c). Rare calls, so the
     * extra walk up the stack costs nothing that shows. */
    if ((ev->op == MT_OP_ALLOC || ev->op == MT_OP_FAILED) &&
        (ev->kind == MT_KIND_DEVICE || ev->kind == MT_KIND_VMM_PHYSICAL) &&
        !(ev->flags & (MT_EF_RETAIN | MT_EF_IMPORTED)) && mt_called_from_c10(r)) {
        ev->flags |= MT_EF_SEGMENT;
        if (atomic_load_explicit(&r->tensors.active, memory_order_relaxed))
            ev->flags |= MT_EF_TENSORS_TRACKED;
    }
    /* A free is stamped at entry (see the top of this file). So is a tensor: PyTorch reports a
     * block after its allocator has handed it out, so the report's entry is the event's time (one
     * clock read fewer per tensor; 40 ns on the lent H100s). Anything else is stamped now, once
     * the call has returned. The stack capture times itself from t0 when the cost is sampled:
     * from the stamp when it was just taken, else (0) from a clock read of its own. */
    int at_entry = ev->op == MT_OP_FREE || ev->kind == MT_KIND_TENSOR;
    ev->time_ns = at_entry ? entry_ns : mt_now_ns();
    if (ev->op == MT_OP_ALLOC || ev->op == MT_OP_FAILED)
        ev->stack = mt_capture_stack(r, &ev->flags, at_entry ? 0 : ev->time_ns, api_ip);
    /* its own sample: what the ring costs, apart from the stack (the cost notes) */
    uint64_t t_sink = mt_time_this_call() ? mt_cost_clock() : 0;
    mt_sink_event(r->sink, ev);
    if (t_sink) mt_cost_add(&r->costs.sink_ns, &r->costs.sink_calls, t_sink, &r->costs.sink_spread);
    if (ev->op == MT_OP_POOL_TRIM) mt_pool_poll_rare(r); /* what the trim released */
    if (ev->op == MT_OP_ALLOC && ev->kind == MT_KIND_ASYNC) mt_pool_poll_if_due(r, ev->time_ns);
}
