/* The event state machine: applies memory events in file order to a live set and to per-device
 * counters, and finds each device's peak.
 *
 * Semantics (docs/analysis.md says the same for users):
 *  - A FREE matches the live ALLOC with the same (device, family, address); mt_family groups kinds
 *    that free each other (cuMemFree frees DEVICE, PITCH, MANAGED and ASYNC memory alike). Host
 *    kinds use device -1. A FREE whose device is -1 but whose family is a device family is looked
 *    up on every device seen so far (the recorder may not know which device a pointer is on). A
 *    device ALLOC whose device is -1 is tracked (so its FREE matches) but counted on no device:
 *    the analysis never makes up a device (anomaly unknown_device).
 *  - TENSOR (record --tensors) is a block PyTorch's caching allocator handed out of a segment:
 *    its own family, so a tensor at the start of a segment is not the segment. A segment flagged
 *    SEGMENT|TENSORS_TRACKED is the allocator's reservation around tensors that are in the trace:
 *    it counts in segment_bytes, not in_use (the tensors do); without TENSORS_TRACKED (default
 *    mode) it is an allocation like any other, and also counts in segment_bytes.
 *  - Device bytes in use = live DEVICE + PITCH + ASYNC + MANAGED + VMM_PHYSICAL + DRIVER; "API
 *    bytes" the same without DRIVER. VMM_RESERVE is address space (vmm_reserved), VMM_MAP ranges
 *    are tracked (vmm_mapped) but their bytes are already counted by their VMM_PHYSICAL handle.
 *    Host: HOST_PINNED + HOST_REGISTERED on the host slot.
 *  - ASYNC frees are stream ordered; they are applied when the FREE call is made (the memory may
 *    stay in use on the GPU until the stream reaches it, so peaks may read slightly low).
 *  - The peak is the first moment in_use reached its maximum (event time and event number).
 *  - Anomalies are counted, never fatal: a FREE without a live ALLOC is a double free if the same
 *    key was freed recently (a 32 Ki-entry direct-mapped cache of freed keys, so memory stays
 *    bounded), else an unmatched free; an ALLOC at a live key closes the old lifetime as
 *    "replaced"; an UNMAP that leaves part of a range mapped splits the range.
 *  - CTX_DESTROY ends every live lifetime (and mapping) of that context id. The driver's own
 *    release of one of them, which CUPTI reports in an activity record as the context is torn
 *    down (after the destruction), is expected: neither a double nor an unmatched free.
 *  - VMM handles are reference-counted: a VMM_PHYSICAL ALLOC flagged RETAIN adds a reference to
 *    the live handle (NCCL takes handles back from mapped addresses), and a FREE (cuMemRelease)
 *    drops one; the last one ends the lifetime. A handle flagged IMPORTED is a peer process's
 *    memory: tracked so its release matches, counted on nobody here. So is a DEVICE ALLOC
 *    flagged IMPORTED (cuIpcOpenMemHandle), whose opens of one handle are counted the same way.
 *  - POOL_RESERVED sets a pool's reservation; a device's pool_reserved is the sum over its pools.
 *  - An event naming a device ordinal outside -1..MT_MAX_DEVICE_ORDINAL is counted (bad_devices)
 *    and ignored: no machine has that many GPUs, and a bounded number of devices keeps every
 *    per-device step (lookups here, snapshots and lists in analyze.c) linear in the trace.
 *
 * Every event costs O(1) amortized (O(log n) for mappings), whatever the trace holds: usage slots
 * are found by ordinal, pools by handle (a hash), mappings in an interval treap (ranges.c), and a
 * context's destruction visits only what that context owns (ctx_members.c; while a single context
 * owns everything live, the live set, sorted once: see CTX_ONE).
 */
#include <stdlib.h>
#include <string.h>

#include "grow.h" /* src/util: MT_GROW */
#include "tracker_core.h"

mt_tracker *mt_tracker_new(const mt_tracker_hooks *hooks)
{
    mt_tracker *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (!(t->maps = mt_ranges_new())) {
        free(t);
        return NULL;
    }
    if (hooks) t->hooks = *hooks;
    return t;
}

void mt_tracker_free(mt_tracker *t)
{
    if (!t) return;
    mt_live_destroy(&t->live);
    free(t->usages);
    mt_ranges_free(t->maps);
    free(t->hits);
    free(t->pools);
    mt_u64map_destroy(&t->pool_index);
    mt_ctx_registry_destroy(&t->ctx_lifetimes);
    mt_ctx_registry_destroy(&t->ctx_maps);
    free(t->temps[0].v);
    free(t->temps[1].v);
    free(t);
}

const mt_usage *mt_tracker_usage(const mt_tracker *t, int32_t device, int is_host)
{
    int32_t ix = is_host ? t->host_index
                 : device == -1 ? t->unknown_index
                 : device >= 0 && device <= MT_MAX_DEVICE_ORDINAL ? t->ord_index[device]
                                                                   : 0;
    return ix ? &t->usages[ix - 1] : NULL;
}

void mt_tracker_uncount_failed(mt_tracker *t, int32_t device, int is_host)
{
    if (!is_host && device < 0) return; /* not counted (mt_tracker_event) */
    const mt_usage *u = mt_tracker_usage(t, device, is_host);
    if (u && u->failed_count) t->usages[u - t->usages].failed_count--;
}

void mt_tracker_set_categorizer(mt_tracker *t, mt_categorizer *c)
{
    t->categorizer = c;
    if (c) mt_categorizer_restart(c); /* a new replay: no phase yet */
}

static mt_lifetime *member_lifetime(mt_tracker *t, mt_ctx_member m);
static int lifetime_still(void *arg, uint32_t ctx, mt_ctx_member m);

/* A backward pass or optimizer step (`phase`) has ended: its temporaries still live take their
 * final category, the slots' by_category follow. Only that category's tensors are visited, each
 * once: a promoted tensor is no temporary any more. */
static void promote(mt_tracker *t, int phase)
{
    unsigned temp = phase == MT_PHASE_BACKWARD    ? MT_CAT_BACKWARD_TEMP
                  : phase == MT_PHASE_OPTIMIZER   ? MT_CAT_OPTIMIZER_TEMP
                                                  : MT_CAT_MAX;
    if (temp == MT_CAT_MAX) return;
    t->phase_ends++;
    size_t n;
    mt_ctx_member *v = mt_ctx_list_take(temps_of(t, temp), &n);
    for (size_t i = 0; i < n; i++) {
        mt_lifetime *l = member_lifetime(t, v[i]);
        if (!l || l->category != temp) continue;
        unsigned cat = mt_categorizer_promote(t->categorizer, phase, l);
        if (cat == l->category) continue;
        long s = counts_by_category(t, l) && l->device >= 0 ? slot_index(t, l->device, 0, 0) : -1;
        if (s >= 0) t->usages[s].by_category[l->category] -= l->bytes;
        l->prior_category = l->category;
        l->category = (uint8_t)cat;
        l->promoted_at = t->phase_ends;
        if (s >= 0 && counts_by_category(t, l)) t->usages[s].by_category[l->category] += l->bytes;
    }
    free(v);
}

uint32_t mt_tracker_phase_ends(const mt_tracker *t)
{
    return t->phase_ends;
}

unsigned mt_category_at(const mt_lifetime *l, uint32_t phase_ends)
{
    return l->promoted_at && l->promoted_at > phase_ends ? l->prior_category : l->category;
}
uint64_t mt_tracker_seq(const mt_tracker *t) { return t->seq; }
size_t mt_tracker_live_count(const mt_tracker *t) { return t->live.len; }
const mt_anomalies *mt_tracker_anomalies(const mt_tracker *t) { return &t->an; }

size_t mt_tracker_usages(const mt_tracker *t, const mt_usage **out)
{
    *out = t->usages;
    return t->n_usages;
}

/* A new usage slot for (device, is_host); ref is where its index goes. Returns it or -1 (OOM). */
long mt_tracker_new_slot_(mt_tracker *t, int32_t device, int is_host, uint64_t now, int32_t *ref)
{
    if (t->n_usages == t->cap_usages) {
        size_t ncap = t->cap_usages ? t->cap_usages * 2 : 8;
        mt_usage *nu = realloc(t->usages, ncap * sizeof *nu);
        if (!nu) return -1;
        t->usages = nu;
        t->cap_usages = ncap;
    }
    size_t i = t->n_usages++;
    t->usages[i] = (mt_usage){.device = is_host ? -1 : device, .is_host = is_host,
                              .peak_mono_ns = now, .api_peak_mono_ns = now, .peak_seq = t->seq};
    *ref = (int32_t)i + 1;
    return (long)i;
}

static void usage_hook(mt_tracker *t, size_t slot, uint64_t now)
{
    if (t->hooks.on_usage) t->hooks.on_usage(t->hooks.ctx, &t->usages[slot], now);
}

/* ---- context membership ------------------------------------------------------------------ */

/* The lifetime member m names, if it is still live. */
static mt_lifetime *member_lifetime(mt_tracker *t, mt_ctx_member m)
{
    mt_lifetime *l = mt_live_find(&t->live, (int32_t)(uint32_t)(m.c >> 8), (uint8_t)m.c, m.a);
    return l && l->serial == m.b ? l : NULL;
}

static const mt_range *member_range(mt_tracker *t, mt_ctx_member m)
{
    const mt_range *r = mt_ranges_get(t->maps, (uint32_t)m.a);
    return r && r->serial == m.b ? r : NULL;
}

static int lifetime_still(void *arg, uint32_t ctx, mt_ctx_member m)
{
    (void)ctx; /* a lifetime never changes context */
    return member_lifetime(arg, m) != NULL;
}

int mt_tracker_temps_join_(mt_tracker *t, const mt_lifetime *l)
{
    return mt_ctx_list_join(temps_of(t, l->category), l->category, lifetime_member(l),
                            lifetime_still, t);
}

static int map_still(void *arg, uint32_t ctx, mt_ctx_member m)
{
    (void)ctx;
    return member_range(arg, m) != NULL;
}

static int cmp_member_serial(const void *pa, const void *pb)
{
    const mt_ctx_member *a = pa, *b = pb;
    return a->b < b->b ? -1 : a->b > b->b;
}

typedef struct members_acc {
    mt_ctx_member *v;
    size_t n;
    uint32_t context;
} members_acc;

static void add_member(void *ctx, mt_lifetime *l)
{
    members_acc *m = ctx;
    if (l->context == m->context) m->v[m->n++] = lifetime_member(l);
}

/* Every live lifetime of context ctx (CTX_ONE: the live set is its list) as a member, in
 * allocation order (malloc'd; NULL and *n = 0 when none, NULL and *n > 0 when out of memory). */
static mt_ctx_member *live_members(mt_tracker *t, uint32_t ctx, size_t *n)
{
    *n = t->ctx_live;
    if (!*n) return NULL;
    members_acc m = {malloc(t->live.len * sizeof *m.v), 0, ctx};
    if (!m.v) return NULL;
    mt_live_foreach(&t->live, add_member, &m);
    qsort(m.v, m.n, sizeof *m.v, cmp_member_serial);
    *n = m.n;
    if (!m.n) {
        free(m.v);
        return NULL;
    }
    return m.v;
}

/* Lifetime l (just inserted) joins its context when that is not the one context so far
 * (ctx_join_lifetime). -1 when out of memory. */
int mt_tracker_ctx_join_more_(mt_tracker *t, const mt_lifetime *l)
{
    if (t->ctx_mode == CTX_ONE) {
        /* a second context: what is live of a context (l aside) is ctx_one's, oldest first */
        size_t n;
        mt_ctx_member *v = live_members(t, t->ctx_one, &n);
        if (!v && n) return -1;
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++)
            if (v[i].b != l->serial)
                rc = mt_ctx_join(&t->ctx_lifetimes, t->ctx_one, v[i], lifetime_still, t);
        free(v);
        if (rc < 0) return -1;
        t->ctx_mode = CTX_MANY;
    }
    return mt_ctx_join(&t->ctx_lifetimes, l->context, lifetime_member(l), lifetime_still, t);
}

/* Ends lifetime p however it ends (replaced, its context destroyed): tells t's hook. */
void mt_tracker_release_(mt_tracker *t, mt_lifetime *p, uint64_t now, mt_end_reason why)
{
    release_in(t, p, now, why, slot_of(t, p, now), t->hooks.on_release);
}

void mt_tracker_promote_(mt_tracker *t, int phase)
{
    promote(t, phase);
}

/* ---- VMM mappings ------------------------------------------------------------------------------ */

static int add_map(mt_tracker *t, const mt_range *r)
{
    long id = mt_ranges_insert(t->maps, r);
    if (id < 0) return -1;
    mt_ctx_member m = {(uint64_t)id, mt_ranges_get(t->maps, (uint32_t)id)->serial, 0};
    if (mt_ctx_join(&t->ctx_maps, r->context, m, map_still, t) < 0) {
        mt_ranges_remove(t->maps, (uint32_t)id);
        return -1;
    }
    return 0;
}

static void drop_map(mt_tracker *t, uint32_t id)
{
    const mt_range *r = mt_ranges_get(t->maps, id);
    if (!r) return;
    mt_ctx_leave(&t->ctx_maps, r->context);
    mt_ranges_remove(t->maps, id);
}

static int do_map(mt_tracker *t, const mt_event *e, int32_t dev, int host, size_t slot)
{
    mt_range r = {.start = e->address,
                  .end = e->address + e->bytes,
                  .handle = e->aux,
                  .context = e->context,
                  .device = dev,
                  .host = host};
    if (add_map(t, &r) < 0) return -1;
    t->usages[slot].vmm_mapped += e->bytes;
    t->usages[slot].by_kind[MT_KIND_VMM_MAP] += e->bytes;
    return 0;
}

/* UNMAP [address, address+bytes); bytes = 0 means "the range that starts at address". */
static int do_unmap(mt_tracker *t, const mt_event *e, uint64_t now)
{
    uint64_t a = e->address, b = e->bytes ? a + e->bytes : a + 1;
    if (b <= a) b = UINT64_MAX; /* a range reaching the top of the address space */
    long n = mt_ranges_overlapping(t->maps, a, b, &t->hits, &t->cap_hits);
    if (n < 0) return -1;
    int matched = 0, partial = 0;
    for (long i = 0; i < n; i++) {
        const mt_range *hit = mt_ranges_get(t->maps, t->hits[i]);
        if (!hit) continue;
        mt_range r = *hit;
        /* (a mapping of host memory: on the host whatever device the unmap names) */
        if ((e->device >= 0 && !r.host && r.device != e->device) || (e->bytes == 0 && r.start != a))
            continue;
        uint64_t lo = r.start > a ? r.start : a;
        uint64_t hi = e->bytes == 0 ? r.end : (r.end < b ? r.end : b);
        long s = slot_index(t, r.device, r.host, now);
        if (s < 0) return -1;
        t->usages[s].vmm_mapped -= hi - lo;
        t->usages[s].by_kind[MT_KIND_VMM_MAP] -= hi - lo;
        matched = 1;
        drop_map(t, t->hits[i]);
        if (r.start < lo || r.end > hi) { /* what stays mapped of it, left and right */
            partial = 1;
            mt_range left = r, right = r;
            left.end = lo;
            right.start = hi;
            if ((r.start < lo && add_map(t, &left) < 0) || (r.end > hi && add_map(t, &right) < 0))
                return -1;
        }
        usage_hook(t, (size_t)s, now);
    }
    if (!matched) t->an.unmatched_frees++;
    if (partial) t->an.partial_unmaps++;
    return 0;
}

/* ---- Events ------------------------------------------------------------------------------------ */

/* A live VMM handle, on whichever device (handles are unique in the process). */
mt_lifetime *mt_tracker_find_handle_(mt_tracker *t, int32_t dev, uint64_t handle)
{
    mt_lifetime *p = mt_live_find(&t->live, dev, MT_FAM_VMM_PHYSICAL, handle);
    for (size_t i = 0; i < t->n_usages && !p; i++)
        if (!t->usages[i].is_host && t->usages[i].device != dev)
            p = mt_live_find(&t->live, t->usages[i].device, MT_FAM_VMM_PHYSICAL, handle);
    return p ? p : mt_live_find(&t->live, -1, MT_FAM_VMM_PHYSICAL, handle);
}

static int do_pool_reserved(mt_tracker *t, const mt_event *e, size_t slot)
{
    mt_u64map_slot *ix = mt_u64map_upsert(&t->pool_index, e->address);
    if (!ix) return -1;
    if (!ix->b) { /* a pool not seen before */
        if (t->n_pools == t->cap_pools) {
            size_t ncap = t->cap_pools ? t->cap_pools * 2 : 8;
            pool_entry *np = realloc(t->pools, ncap * sizeof *np);
            if (!np) return -1;
            t->pools = np;
            t->cap_pools = ncap;
        }
        ix->a = t->n_pools++;
        ix->b = 1;
        t->pools[ix->a] = (pool_entry){.handle = e->address, .slot = slot};
    }
    pool_entry *pe = &t->pools[ix->a];
    t->usages[pe->slot].pool_reserved -= pe->bytes;
    pe->bytes = e->bytes;
    pe->slot = slot;
    t->usages[slot].pool_reserved += e->bytes;
    t->usages[slot].has_pool_info = 1;
    return 0;
}

static int do_ctx_destroy(mt_tracker *t, const mt_event *e, uint64_t now)
{
    /* What the context owns, in the order it was allocated; members that left meanwhile find
     * nothing and are passed over. */
    if (!e->context) return 0; /* no context, nothing of it (tracker_core.h) */
    size_t n;
    mt_ctx_member *v = NULL;
    if (t->ctx_mode == CTX_MANY)
        v = mt_ctx_take(&t->ctx_lifetimes, e->context, &n);
    else if (t->ctx_mode == CTX_ONE && e->context == t->ctx_one)
        v = live_members(t, e->context, &n);
    else
        n = 0;
    if (n && !v) return -1;
    uint64_t released = 0;
    for (size_t i = 0; i < n; i++) {
        mt_lifetime *p = member_lifetime(t, v[i]);
        if (p) {
            uint64_t h = freed_hash(p->device, p->family, p->address);
            mt_tracker_release_(t, p, now, MT_END_CTX_DESTROY);
            *freed_slot(t, h) = h ^ FREED_BY_CTX_END;
            released++;
        }
    }
    free(v);
    t->an.ctx_destroy_released += released;
    v = mt_ctx_take(&t->ctx_maps, e->context, &n);
    for (size_t i = 0; i < n; i++) {
        const mt_range *r = member_range(t, v[i]);
        if (!r) continue;
        long s = slot_index(t, r->device, r->host, now);
        if (s >= 0) {
            t->usages[s].vmm_mapped -= r->end - r->start;
            t->usages[s].by_kind[MT_KIND_VMM_MAP] -= r->end - r->start;
        }
        drop_map(t, (uint32_t)v[i].a);
    }
    free(v);
    for (size_t i = 0; i < t->n_usages; i++) usage_hook(t, i, now);
    return 0;
}

/* Every event but an ALLOC or FREE of a lifetime (tracker_core.h's path), after the checks there. */
int mt_tracker_event_rest_(mt_tracker *t, const mt_event *e, unsigned kind, unsigned fam,
                           int host, int32_t dev, uint64_t now)
{
    switch (e->op) {
    case MT_OP_ALLOC: { /* a mapping, or a VMM handle retained */
        if (kind == MT_KIND_VMM_MAP) { /* the mapping of a handle located on the host is there */
            const mt_lifetime *h = mt_tracker_find_handle_(t, dev, e->aux);
            if (h && (h->flags & MT_EF_HOST_MEMORY)) host = 1, dev = -1;
        }
        long s = host || dev >= 0 || kind == MT_KIND_VMM_MAP ? slot_index(t, dev, host, now) : -1;
        if (s < 0 && (host || dev >= 0 || kind == MT_KIND_VMM_MAP)) return -1;
        if (kind == MT_KIND_VMM_PHYSICAL && (e->flags & MT_EF_RETAIN)) {
            mt_lifetime *p = mt_tracker_find_handle_(t, dev, e->address);
            if (p) { /* one more reference to memory already counted */
                p->extra_refs++;
                t->an.retained++;
                return 0;
            } /* else a handle made before the trace: tracked uncounted, so its release matches */
        }
        int rc = kind == MT_KIND_VMM_MAP ? do_map(t, e, dev, host, (size_t)s)
                                         : do_alloc(t, e, kind, fam, dev, s);
        if (rc < 0) return -1;
        if (s < 0) return 0;
        mt_usage *u = &t->usages[s];
        note_in_use_peaks(u, now, t->seq);
        if (kind == MT_KIND_VMM_MAP && u->vmm_mapped > u->vmm_mapped_peak)
            u->vmm_mapped_peak = u->vmm_mapped;
        usage_hook(t, (size_t)s, now);
        return 0;
    }
    case MT_OP_FREE: /* an unmapping */
        return do_unmap(t, e, now);
    case MT_OP_FAILED: {
        if (!host && dev < 0) return 0; /* no device to count it on; the analysis lists it */
        long s = slot_index(t, dev, host, now);
        if (s < 0) return -1;
        t->usages[s].failed_count++;
        return 0;
    }
    case MT_OP_POOL_RESERVED: { /* (a pool on the host: host, dev -1) */
        long s = slot_index(t, dev, host, now);
        if (s < 0 || do_pool_reserved(t, e, (size_t)s) < 0) return -1;
        note_peaks(&t->usages[s], now, t->seq);
        usage_hook(t, (size_t)s, now);
        return 0;
    }
    case MT_OP_POOL_TRIM:
        return 0; /* informational: the next POOL_RESERVED says what the trim achieved */
    case MT_OP_CTX_DESTROY:
        return do_ctx_destroy(t, e, now);
    default:
        t->an.unknown_events++;
        return 0;
    }
}

int mt_tracker_event(mt_tracker *t, const mt_event *e)
{
    /* the path of the two common ops compiled in apart: the op is tested once */
    if (e->op == MT_OP_FREE)
        return mt_tracker_event_op(t, e, MT_OP_FREE, t->hooks.on_usage, t->hooks.on_release);
    if (e->op == MT_OP_ALLOC)
        return mt_tracker_event_op(t, e, MT_OP_ALLOC, t->hooks.on_usage, t->hooks.on_release);
    return mt_tracker_event_with(t, e, t->hooks.on_usage, t->hooks.on_release);
}

typedef struct finish_ctx {
    mt_tracker *t;
    uint64_t end_ns;
} finish_ctx;

static void finish_one(void *ctx, mt_lifetime *l)
{
    finish_ctx *f = ctx;
    f->t->hooks.on_release(f->t->hooks.ctx, l, f->end_ns, MT_END_TRACE_END);
}

void mt_tracker_finish(mt_tracker *t, uint64_t end_ns)
{
    finish_ctx f = {t, end_ns};
    if (t->hooks.on_release) mt_live_foreach(&t->live, finish_one, &f);
    mt_live_destroy(&t->live);
}

typedef struct foreach_ctx {
    void (*fn)(void *ctx, const mt_lifetime *l);
    void *ctx;
} foreach_ctx;

static void foreach_one(void *ctx, mt_lifetime *l)
{
    foreach_ctx *f = ctx;
    f->fn(f->ctx, l);
}

void mt_tracker_foreach_live(const mt_tracker *t, void (*fn)(void *ctx, const mt_lifetime *l),
                             void *ctx)
{
    foreach_ctx f = {fn, ctx};
    mt_live_foreach(&t->live, foreach_one, &f);
}
