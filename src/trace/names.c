/* names.c — printable names for the enums of trace.h and for CUPTI driver callback ids.
 *
 * The callback ids come from memtrace/driver_calls.h, where they are written out (CUDA 13.0's
 * cupti_driver_cbid.h) rather than included, so that the trace library, and every tool reading
 * traces, builds on a machine without the CUDA toolkit. Only the calls listed there are named:
 * anything else is "".
 */
#include <stddef.h>
#include <stdio.h>

#include "memtrace/driver_calls.h"
#include "memtrace/driver_results.h"
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
        [MT_KIND_ARRAY] = "array",
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

/* CUresult -> "CUDA_ERROR_OUT_OF_MEMORY" (memtrace/driver_results.h); "" for a code it does not
 * list (a newer driver's). */
const char *mt_result_name(unsigned result)
{
    switch (result) {
#define RESULT_NAME(name, value) case value: return #name;
        MT_DRIVER_RESULTS(RESULT_NAME)
#undef RESULT_NAME
    default: return "";
    }
}

/* The names of the driver calls in memtrace/driver_calls.h, the table the recorder enables its
 * callbacks from. A switch: the compiler finds the id (and refuses an id listed twice). */
const char *mt_api_name(unsigned cbid)
{
    switch (cbid) {
#define TRACED_NAME(name, id, what) case id: return #name;
#define NAMED_NAME(name, id) case id: return #name;
        MT_TRACED_DRIVER_CALLS(TRACED_NAME)
        MT_NAMED_DRIVER_CALLS(NAMED_NAME)
#undef TRACED_NAME
#undef NAMED_NAME
    default: return "";
    }
}

void mt_format_gpu_uuid(const uint8_t bytes[16], char *buf, size_t len)
{
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
    snprintf(buf, len, "GPU-%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}
