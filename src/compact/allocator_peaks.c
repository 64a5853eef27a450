/* PyTorch's two numbers for a device, max_memory_allocated() and max_memory_reserved(), taken from
 * whichever records a trace has:
 *
 *   record --tensors        every block the caching allocator hands out is a TENSOR event: the
 *                           allocated peak is the peak of live tensors, and the allocator's own
 *                           running counter came with each of them (u.tensor_counter_peak), so
 *                           the two can be compared; its segments (MT_EF_SEGMENT) are reserved
 *   --tensors=async         backend:cudaMallocAsync: each tensor is a cudaMallocAsync block, the
 *                           pools' reservation (POOL_RESERVED) is what the allocator reserved
 *   default                 the segments only: reserved is known, allocated is not (what the
 *                           allocator does inside its segments is invisible to CUDA)
 *
 * A trace is in a mode when any of its devices shows it: a device of a tensor-mode trace with no
 * tensor at all (a GPU only NCCL used) has allocated 0, not "unknown".
 */
#include "internal.h"

static int tensors_on(const mt_device_report *d)
{
    return d->u.by_kind_peak[MT_KIND_TENSOR] || d->u.tensor_counter_peak;
}

static int async_pools_on(const mt_device_report *d)
{
    return d->u.has_pool_info && d->u.by_kind_peak[MT_KIND_ASYNC];
}

int mt_allocated_kind(const mt_analysis *a)
{
    int async = 0;
    for (size_t i = 0; i < a->n_devices; i++) {
        if (tensors_on(&a->devices[i])) return MT_KIND_TENSOR;
        async |= async_pools_on(&a->devices[i]);
    }
    return async ? MT_KIND_ASYNC : -1;
}

void mt_allocator_peaks_of(const mt_analysis *a, const mt_device_report *d, mt_allocator_peaks *p)
{
    *p = (mt_allocator_peaks){0};
    if (d->u.is_host) return;
    int kind = mt_allocated_kind(a);
    if (kind >= 0) {
        p->allocated_known = 1;
        p->allocated_kind = (uint8_t)kind;
        p->allocated_peak = d->u.by_kind_peak[kind];
        if (kind == MT_KIND_TENSOR) p->counter_peak = d->u.tensor_counter_peak;
    }
    if (d->u.segment_peak) {
        p->reserved_known = 1;
        p->reserved_peak = d->u.segment_peak;
        p->reserved_source = "PyTorch segments";
    } else if (d->u.has_pool_info) {
        p->reserved_known = 1;
        p->reserved_peak = d->u.pool_reserved_peak;
        p->reserved_source = "pool reservations";
    }
}
