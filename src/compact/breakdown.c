/* Reconciliation: what a device's memory is made of at one moment, in the terms people use.
 *
 *   allocator reserved  live DEVICE and VMM_PHYSICAL allocations whose stack names the PyTorch
 *                       caching allocator (default and expandable_segments modes: the segments
 *                       it reserved), plus, when the device has POOL_RESERVED events (tensor mode,
 *                       backend:cudaMallocAsync), the pools' reservation. Async allocations are
 *                       tensors: their live bytes are "tensors allocated" and the rest of the
 *                       pools' reservation is "cached but free". In default mode the allocator's
 *                       split of its segments into tensors is invisible to the driver: unknown.
 *   other libraries     every other live API allocation (not DRIVER), grouped by mt_frames_owner.
 *   context & driver    the NVML process total minus the two above: the CUDA context, module
 *                       images, driver-internal memory (the DRIVER bytes the trace saw are shown
 *                       as a part of it). Negative when the ~50 ms NVML sample lags the trace.
 * Async allocations seen without any POOL_RESERVED count as "other" (no pool to put them in).
 * Classification by stack is cached per stack in mt_frames (mt_frames_owner).
 *
 * Built as an accumulator (begin, add each live lifetime, end) so that one walk over the live set
 * can fill the breakdowns of every device at once (analyze.c): a walk per device made a trace with
 * many devices and a large live set quadratic.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void mt_breakdown_begin(mt_breakdown_acc *c, mt_breakdown *b, mt_frames *f, const mt_usage *u,
                        uint64_t time_rel)
{
    *b = (mt_breakdown){.valid = 1, .time_ns = time_rel, .has_pool = u->has_pool_info,
                        .allocated_known = u->has_pool_info,
                        .driver_bytes = u->by_kind[MT_KIND_DRIVER]};
    *c = (mt_breakdown_acc){.b = b, .f = f, .device = u->device,
                            .pool_reserved = u->pool_reserved};
}

void mt_breakdown_add(mt_breakdown_acc *c, const mt_lifetime *l)
{
    if (!c->b || l->device != c->device || !mt_kind_counts(l->kind) || mt_kind_is_host(l->kind) ||
        l->kind == MT_KIND_DRIVER)
        return;
    if (l->kind == MT_KIND_ASYNC && c->b->has_pool) {
        c->b->allocated_bytes += l->bytes;
        return;
    }
    int caching = 0;
    const char *owner = mt_frames_owner(c->f, l->stack, &caching);
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

int mt_breakdown_end(mt_breakdown_acc *c)
{
    mt_breakdown *b = c->b;
    if (!b) return 0;
    if (b->has_pool) {
        b->pool_bytes = c->pool_reserved > b->allocated_bytes ? c->pool_reserved : b->allocated_bytes;
        b->cached_free_bytes = b->pool_bytes - b->allocated_bytes;
    }
    b->reserved_bytes = b->caching_bytes + b->pool_bytes;
    /* owners, largest first; the tail summed into one entry so the list still adds up */
    size_t n = c->owners.len, k = 0;
    mt_owner_bytes *all = n ? malloc(n * sizeof *all) : NULL;
    int rc = n && !all ? -1 : 0;
    for (size_t i = 0; all && i < c->owners.cap; i++)
        if (c->owners.slots[i].used)
            all[k++] = (mt_owner_bytes){(const char *)(uintptr_t)c->owners.slots[i].key,
                                        c->owners.slots[i].a, c->owners.slots[i].b};
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
    mt_u64map_destroy(&c->owners);
    c->b = NULL;
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
