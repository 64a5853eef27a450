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
 *                       as a part of it). The total is a sample taken while the trace had the
 *                       moment's bytes live (mt_breakdown_set_process); a ~50 ms sampler often
 *                       misses a burst, and then the total is unknown, not a stale number that
 *                       would make the remainder wrong or negative.
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
    int tensors = u->by_kind_peak[MT_KIND_TENSOR] > 0 || u->tensor_counter_peak > 0;
    *b = (mt_breakdown){.valid = 1, .time_ns = time_rel, .has_pool = u->has_pool_info,
                        .allocated_known = u->has_pool_info || tensors,
                        .driver_bytes = u->by_kind[MT_KIND_DRIVER]};
    *c = (mt_breakdown_acc){.b = b, .f = f, .device = u->device, .tensors = tensors,
                            .pool_reserved = u->pool_reserved,
                            .tensor_bytes = u->by_kind[MT_KIND_TENSOR]};
}

void mt_breakdown_add(mt_breakdown_acc *c, const mt_lifetime *l)
{
    if (!c->b || l->device != c->device || mt_is_host(l->kind, l->flags) ||
        l->kind == MT_KIND_DRIVER)
        return;
    /* PyTorch's segments, named by the recorder (MT_EF_SEGMENT): its reservation, whether their
     * tensors are in the trace (tensor mode) or not */
    if (l->flags & MT_EF_SEGMENT) {
        c->b->caching_bytes += l->bytes;
        c->b->torch_bytes += l->bytes;
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
        /* whose cache: PyTorch's, or XLA's / CuPy's, whose use of it no trace can see (words
         * about `record --tensors` would be wrong there) */
        if (!owner || strcmp(owner, MT_OWNER_CACHING_ALLOCATOR) == 0)
            c->b->torch_bytes += l->bytes;
        else if (!c->b->cache_owner)
            c->b->cache_owner = owner;
        else if (strcmp(c->b->cache_owner, owner) != 0)
            c->b->cache_owner = "several allocators";
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

static int cmp_owner_name(const void *pa, const void *pb)
{
    return strcmp(((const mt_owner_bytes *)pa)->owner, ((const mt_owner_bytes *)pb)->owner);
}

int mt_breakdown_end(mt_breakdown_acc *c)
{
    mt_breakdown *b = c->b;
    if (!b) return 0;
    if (b->has_pool) {
        uint64_t async = b->allocated_bytes - (c->tensors ? c->tensor_bytes : 0);
        b->pool_bytes = c->pool_reserved > async ? c->pool_reserved : async;
    }
    b->reserved_bytes = b->caching_bytes + b->pool_bytes;
    if (b->allocated_known)
        b->cached_free_bytes =
            b->reserved_bytes > b->allocated_bytes ? b->reserved_bytes - b->allocated_bytes : 0;
    /* owners, largest first; the tail summed into one entry so the list still adds up */
    size_t n = c->owners.len, k = 0;
    mt_owner_bytes *all = n ? malloc(n * sizeof *all) : NULL;
    int rc = n && !all ? -1 : 0;
    for (size_t i = 0; all && i < c->owners.cap; i++)
        if (c->owners.slots[i].used)
            all[k++] = (mt_owner_bytes){(const char *)(uintptr_t)c->owners.slots[i].key,
                                        c->owners.slots[i].a, c->owners.slots[i].b};
    /* one entry per name: owners are kept by pointer, and two frames can have one user name
     * (the same Python line reached from other callers) */
    if (k) qsort(all, k, sizeof *all, cmp_owner_name);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m && strcmp(all[m - 1].owner, all[i].owner) == 0) {
            all[m - 1].bytes += all[i].bytes;
            all[m - 1].count += all[i].count;
        } else {
            all[m++] = all[i];
        }
    }
    k = m;
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

void mt_breakdown_set_process(mt_breakdown *b, const mt_sample_point *s, size_t n, uint64_t visible,
                              uint64_t driver)
{
    /* 1. A sample read while the trace had the moment's bytes live (driver-internal aside: those
     *    records arrive late) saw the moment's memory: the nearest such sample.
     * 2. Else the first sample after the moment: the moment's memory was allocated at or before
     *    it (a peak is the moment its last allocation was made), so a later sample has seen it;
     *    at the end of a trace there is none after, and the last one stands.
     * A sample reading less than the trace had live cannot be the moment's total (a lagging
     * sample before a burst is what once made the remainder negative): then the other one, else
     * unknown. Samples are written in time order by one sampler thread; scans are safe if not. */
    b->process_known = b->process_sample_same = b->process_sample_after = 0;
    b->visible_bytes = visible;
    b->process_unknown = n ? MT_PROCESS_LAGGED : MT_PROCESS_NO_SAMPLES;
    uint64_t live = b->reserved_bytes + b->other_bytes;
    if (live > visible) visible = live; /* never a negative remainder */
    uint64_t api = visible - (driver < visible ? driver : visible);
    const mt_sample_point *before = NULL, *after = NULL, *same = NULL;
    uint64_t same_dist = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        uint64_t t = s[i].time_ns;
        if (t <= b->time_ns) {
            if (!before || t >= before->time_ns) before = &s[i];
        } else if (!after || t < after->time_ns) {
            after = &s[i];
        }
        uint64_t dist = t > b->time_ns ? t - b->time_ns : b->time_ns - t;
        if (s[i].api_visible == api && s[i].value >= visible && dist < same_dist) {
            same = &s[i];
            same_dist = dist;
        }
    }
    b->before_ns = before ? before->time_ns : 0;
    b->before_bytes = before ? before->value : 0;
    b->after_ns = after ? after->time_ns : 0;
    b->after_bytes = after ? after->value : 0;
    const mt_sample_point *pick = same                                  ? same
                                : after && after->value >= visible     ? after
                                : before && before->value >= visible   ? before
                                                                        : NULL;
    if (!pick) return;
    b->process_known = 1;
    b->process_unknown = MT_PROCESS_KNOWN;
    b->process_sample_same = pick == same;
    b->process_sample_after = pick->time_ns > b->time_ns;
    b->process_bytes = pick->value;
    b->process_sample_ns = pick->time_ns;
    b->context_bytes = (int64_t)(pick->value - live);
}
