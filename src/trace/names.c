/* names.c — printable names for the enums of trace.h and for CUPTI driver callback ids.
 *
 * The callback ids are copied from CUDA 13.0's cupti_driver_cbid.h (CUPTI_DRIVER_TRACE_CBID_*)
 * rather than included, so that the trace library, and every tool reading traces, builds on a
 * machine without the CUDA toolkit. CUPTI only ever appends ids, so these numbers stay valid.
 * Only the memory APIs the recorder traces are listed: anything else is "".
 */
#include <stddef.h>

#include "memtrace/trace.h"

const char *mt_op_name(unsigned op)
{
    static const char *const names[MT_OP_MAX_] = {
        [MT_OP_ALLOC] = "alloc",         [MT_OP_FREE] = "free",
        [MT_OP_FAILED] = "failed",       [MT_OP_POOL_RESERVED] = "pool_reserved",
        [MT_OP_POOL_TRIM] = "pool_trim", [MT_OP_CTX_DESTROY] = "ctx_destroy",
    };
    return op < MT_OP_MAX_ && names[op] ? names[op] : "?";
}

const char *mt_kind_name(unsigned kind)
{
    static const char *const names[MT_KIND_MAX_] = {
        [MT_KIND_UNKNOWN] = "unknown",
        [MT_KIND_DEVICE] = "device",
        [MT_KIND_PITCH] = "pitch",
        [MT_KIND_ASYNC] = "async",
        [MT_KIND_MANAGED] = "managed",
        [MT_KIND_HOST_PINNED] = "host_pinned",
        [MT_KIND_HOST_REGISTERED] = "host_registered",
        [MT_KIND_VMM_RESERVE] = "vmm_reserve",
        [MT_KIND_VMM_PHYSICAL] = "vmm_physical",
        [MT_KIND_VMM_MAP] = "vmm_map",
        [MT_KIND_POOL] = "pool",
        [MT_KIND_DRIVER] = "driver",
        [MT_KIND_TENSOR] = "tensor",
    };
    return kind < MT_KIND_MAX_ && names[kind] ? names[kind] : "?";
}

const char *mt_pseudo_name(uint64_t id)
{
    switch (id) {
    case MT_PSEUDO_DRIVER_INTERNAL:
        return "[driver internal]";
    case MT_PSEUDO_AUTOGRAD:
        return "[autograd backward]";
    case MT_PSEUDO_NO_STACK:
        return "[no stack]";
    case MT_PSEUDO_TRUNCATED:
        return "[truncated]";
    default:
        return "[?]";
    }
}

/* CUPTI_DRIVER_TRACE_CBID_<name> = <id>, CUDA 13.0. Sorted by id. */
static const struct {
    unsigned cbid;
    const char *name;
} api_names[] = {
    {11, "cuCtxDestroy"},
    {29, "cuMemAlloc"},
    {31, "cuMemAllocPitch"},
    {33, "cuMemFree"},
    {37, "cuMemAllocHost"},
    {38, "cuMemFreeHost"},
    {39, "cuMemHostAlloc"},
    {243, "cuMemAlloc_v2"},
    {244, "cuMemAllocPitch_v2"},
    {245, "cuMemFree_v2"},
    {271, "cuMemHostAlloc_v2"},
    {294, "cuMemAllocHost_v2"},
    {301, "cuMemHostRegister"},
    {302, "cuMemHostUnregister"},
    {322, "cuCtxDestroy_v2"},
    {371, "cuMemAllocManaged"},
    {379, "cuMemHostRegister_v2"},
    {387, "cuDevicePrimaryCtxRelease"},
    {389, "cuDevicePrimaryCtxReset"},
    {544, "cuDevicePrimaryCtxRelease_v2"},
    {545, "cuDevicePrimaryCtxReset_v2"},
    {547, "cuMemAddressReserve"},
    {548, "cuMemAddressFree"},
    {549, "cuMemCreate"},
    {550, "cuMemRelease"},
    {551, "cuMemMap"},
    {552, "cuMemUnmap"},
    {555, "cuMemImportFromShareableHandle"},
    {565, "cuMemRetainAllocationHandle"},
    {598, "cuMemAllocAsync"},
    {599, "cuMemAllocAsync_ptsz"},
    {600, "cuMemFreeAsync"},
    {601, "cuMemFreeAsync_ptsz"},
    {602, "cuMemPoolTrimTo"},
    {607, "cuMemPoolCreate"},
    {608, "cuMemPoolDestroy"},
    {611, "cuMemAllocFromPoolAsync"},
    {612, "cuMemAllocFromPoolAsync_ptsz"},
    {638, "cuGraphAddMemAllocNode"},
    {639, "cuGraphAddMemFreeNode"},
};

const char *mt_api_name(unsigned cbid)
{
    size_t lo = 0, hi = sizeof api_names / sizeof api_names[0];
    while (lo < hi) { /* binary search: the table is sorted by id */
        size_t mid = lo + (hi - lo) / 2;
        if (api_names[mid].cbid == cbid) return api_names[mid].name;
        if (api_names[mid].cbid < cbid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return "";
}
