/* Reconciliation: what a device's memory is made of at one moment, in the terms people use.
 *
 *   allocator reserved  PyTorch's segments: live allocations the recorder flagged MT_EF_SEGMENT
 *                       (older traces: DEVICE and VMM_PHYSICAL allocations whose stack names the
 *                       caching allocator), plus, when the device has POOL_RESERVED events
 *                       (backend:cudaMallocAsync), the pools' reservation. Tensors allocated:
 *                       the live TENSOR blocks (record --tensors), or the live async
 *                       allocations under backend:cudaMallocAsync; the rest of the reservation is
 *                       "cached but free". Without either, the allocator's split of its segments
 *                       into tensors is invisible to the driver: unknown.
 *   other libraries     every other live API allocation (not DRIVER), grouped by mt_frames_owner.
 *   context & driver    the NVML process total minus the two above: the CUDA context, module
 *                       images, driver-internal memory (the DRIVER bytes the trace saw are shown
 *                       as a part of it). Negative when the ~50 ms NVML sample lags the trace.
 * Async allocations seen without any POOL_RESERVED count as "other" (no pool to put them in).
 * Classification by stack is cached per stack in mt_frames (mt_frames_owner).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct snap_ctx {
    mt_breakdown *b;
    mt_frames *f;
    int32_t device;
    mt_u64map owners; /* owner name pointer -> a: bytes, b: count */
} snap_ctx;

static void visit(void *ctx, const mt_lifetime *l)
{
    snap_ctx *c = ctx;
    if (l->device != c->device || mt_kind_is_host(l->kind) || l->kind == MT_KIND_DRIVER) return;
    /* PyTorch's segments, named by the recorder (MT_EF_SEGMENT): its reservation, whether their
     * tensors are in the trace (tensor mode) or not */
    if (l->flags & MT_EF_SEGMENT) {
        c->b->caching_bytes += l->bytes;
        return;
    }
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    if (l->kind == MT_KIND_TENSOR || (l->kind == MT_KIND_ASYNC && c->b->has_pool)) {
        c->b->allocated_bytes += l->bytes;
        return;
    }
    int caching = 0;
    const char *owner = mt_frames_owner(c->f, l->stack, &caching);
    /* traces of recorders that did not flag segments: the stack says who made it */
    if (caching && (l->kind == MT_KIND_DEVICE || l->kind == MT_KIND_VMM_PHYSICAL)) {
        c->b->caching_bytes += l->bytes;
        return;
    }
    c->b->other_bytes += l->bytes;
    mt_u64map_slot *s = mt_u64map_upsert(&c->owners, (uint64_t)(uintptr_t)owner);
    if (s) { /* out of memory: the owner list misses it, the totals do not */
        s->a += l->bytes;
        s->b++;
    }
}

static int cmp_owner(const void *pa, const void *pb)
{
    const mt_owner_bytes *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return strcmp(a->owner, b->owner);
}

int mt_breakdown_snapshot(mt_breakdown *b, mt_frames *f, const mt_tracker *t, const mt_usage *u,
                          uint64_t time_rel)
{
    int tensors = u->by_kind_peak[MT_KIND_TENSOR] > 0 || u->tensor_counter_peak > 0;
    *b = (mt_breakdown){.valid = 1, .time_ns = time_rel, .has_pool = u->has_pool_info,
                        .allocated_known = u->has_pool_info || tensors,
                        .driver_bytes = u->by_kind[MT_KIND_DRIVER]};
    snap_ctx c = {.b = b, .f = f, .device = u->device};
    mt_tracker_foreach_live(t, visit, &c);
    if (b->has_pool) {
        uint64_t async = b->allocated_bytes - (tensors ? u->by_kind[MT_KIND_TENSOR] : 0);
        b->pool_bytes = u->pool_reserved > async ? u->pool_reserved : async;
    }
    b->reserved_bytes = b->caching_bytes + b->pool_bytes;
    if (b->allocated_known)
        b->cached_free_bytes =
            b->reserved_bytes > b->allocated_bytes ? b->reserved_bytes - b->allocated_bytes : 0;
    /* owners, largest first; the tail summed into one entry so the list still adds up */
    size_t n = c.owners.len, k = 0;
    mt_owner_bytes *all = n ? malloc(n * sizeof *all) : NULL;
    int rc = n && !all ? -1 : 0;
    for (size_t i = 0; all && i < c.owners.cap; i++)
        if (c.owners.slots[i].used)
            all[k++] = (mt_owner_bytes){(const char *)(uintptr_t)c.owners.slots[i].key,
                                        c.owners.slots[i].a, c.owners.slots[i].b};
    if (k) qsort(all, k, sizeof *all, cmp_owner);
    for (size_t i = 0; i < k; i++) {
        if (k <= MT_MAX_OWNERS || i < MT_MAX_OWNERS - 1) {
            b->owners[b->n_owners++] = all[i];
            continue;
        }
        mt_owner_bytes *rest = &b->owners[MT_MAX_OWNERS - 1];
        if (b->n_owners < MT_MAX_OWNERS) {
            *rest = (mt_owner_bytes){.owner = "[other owners]"};
            b->n_owners = MT_MAX_OWNERS;
        }
        rest->bytes += all[i].bytes;
        rest->count += all[i].count;
    }
    free(all);
    mt_u64map_destroy(&c.owners);
    return rc;
}

void mt_breakdown_set_process(mt_breakdown *b, const mt_sample_point *s, size_t n)
{
    /* Samples are written in time order by one sampler thread; take the last one not after the
     * moment (a binary search would need that order to be strict: a scan is safe and cheap). */
    b->process_known = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i].time_ns <= b->time_ns &&
            (!b->process_known || s[i].time_ns >= b->process_sample_ns)) {
            b->process_known = 1;
            b->process_bytes = s[i].value;
            b->process_sample_ns = s[i].time_ns;
        }
    if (b->process_known)
        b->context_bytes = (int64_t)b->process_bytes - (int64_t)b->reserved_bytes -
                           (int64_t)b->other_bytes;
}
