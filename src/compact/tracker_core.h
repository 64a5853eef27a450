/* tracker_core.h — the tracker's state and the path every ALLOC and FREE of a lifetime takes
 * (tracker.c has the rest: mappings, pools, contexts destroyed, categories). Private to the
 * compactor: tracker.c builds mt_tracker_event from it with the hooks the tracker was made with,
 * and pass 1 of the analysis (analyze.c) builds its own with its hooks known, so that they are
 * inlined into the event's path (two calls through pointers per event, with their prologues, were
 * ~10% of the analysis thread's instructions). Both run the same code on the same state; the hooks
 * passed must be those the tracker was made with (the rest of the tracker calls those).
 */
#ifndef MT_COMPACT_TRACKER_CORE_H
#define MT_COMPACT_TRACKER_CORE_H

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "live.h"

#define FREED_CACHE_BITS 15

typedef struct pool_entry {
    uint64_t handle, bytes;
    size_t slot;
} pool_entry;

struct mt_tracker {
    mt_tracker_hooks hooks;
    mt_live_table live;
    mt_usage *usages;
    size_t n_usages, cap_usages;
    int32_t ord_index[MT_MAX_DEVICE_ORDINAL + 1]; /* ordinal -> usage index + 1 (0 = not seen) */
    int32_t unknown_index;  /* usage index + 1 of the unknown device (-1) */
    int32_t host_index;     /* usage index + 1 of the host slot */
    mt_range_set *maps;     /* mapped ranges (UVA keeps ranges of all devices disjoint) */
    uint32_t *hits;         /* scratch: ids of the ranges an unmap touches */
    size_t cap_hits;
    pool_entry *pools;
    size_t n_pools, cap_pools;
    mt_u64map pool_index;   /* pool handle -> a: index in pools */
    mt_ctx_registry ctx_lifetimes; /* context -> live allocations (a: address, b: device, family),
                                      once a second context is seen (ctx_mode) */
    int ctx_mode;                  /* CTX_NONE, CTX_ONE (every live lifetime is ctx_one's) or
                                      CTX_MANY (ctx_lifetimes says whose each is) */
    uint32_t ctx_one;
    uint64_t ctx_live;             /* live lifetimes that name a context (not 0) */
    mt_ctx_registry ctx_maps;      /* context -> mapped ranges (a: range id) */
    /* with a categorizer: the live tensors of each temporary category (backward [0], optimizer
     * [1]), taken and promoted at the phase end (tracker.c, promote). Two lists indexed by
     * category, with the context registry's list operations (ctx_members.c: a freed tensor stays
     * in its list, counted out of `live`, until the list is compacted or taken). The registry
     * itself, with a hash per join, was half of what categorizing cost pass 1. */
    mt_ctx_list temps[2];
    uint32_t phase_ends;           /* backward passes and optimizer steps ended so far */
    uint64_t seq, serial;
    mt_anomalies an;
    uint64_t freed[1u << FREED_CACHE_BITS]; /* hashed keys of recently freed allocations */
    mt_categorizer *categorizer; /* NULL: tensors keep category 0 (mt_tracker_set_categorizer) */
};

static const uint8_t family_of_kind[MT_KIND_MAX_] = {
    [MT_KIND_UNKNOWN] = MT_FAM_OTHER,
    [MT_KIND_DEVICE] = MT_FAM_LINEAR,
    [MT_KIND_PITCH] = MT_FAM_LINEAR,
    [MT_KIND_ASYNC] = MT_FAM_LINEAR,
    [MT_KIND_MANAGED] = MT_FAM_LINEAR,
    [MT_KIND_HOST_PINNED] = MT_FAM_PINNED,
    [MT_KIND_HOST_REGISTERED] = MT_FAM_REGISTERED,
    [MT_KIND_VMM_RESERVE] = MT_FAM_VMM_RESERVE,
    [MT_KIND_VMM_PHYSICAL] = MT_FAM_VMM_PHYSICAL,
    [MT_KIND_VMM_MAP] = MT_FAM_OTHER,
    [MT_KIND_POOL] = MT_FAM_OTHER,
    [MT_KIND_DRIVER] = MT_FAM_DRIVER,
    [MT_KIND_TENSOR] = MT_FAM_TENSOR,
    [MT_KIND_ARRAY] = MT_FAM_LINEAR,
};

static inline int is_host_family(unsigned fam)
{
    return fam == MT_FAM_PINNED || fam == MT_FAM_REGISTERED;
}

/* tracker.c's, for the rarer turns of the path */
long mt_tracker_new_slot_(mt_tracker *t, int32_t device, int is_host, uint64_t now, int32_t *ref);
void mt_tracker_promote_(mt_tracker *t, int phase);
int mt_tracker_ctx_join_more_(mt_tracker *t, const mt_lifetime *l);
void mt_tracker_release_(mt_tracker *t, mt_lifetime *p, uint64_t now, mt_end_reason why);
mt_lifetime *mt_tracker_find_handle_(mt_tracker *t, int32_t dev, uint64_t handle);
int mt_tracker_event_rest_(mt_tracker *t, const mt_event *e, unsigned kind, unsigned fam,
                           int host, int32_t dev, uint64_t now);

typedef void (*mt_usage_hook)(void *ctx, const mt_usage *u, uint64_t time_ns);
typedef void (*mt_release_hook)(void *ctx, const mt_lifetime *l, uint64_t end_ns,
                                mt_end_reason why);

static inline int counts_by_category(const mt_tracker *t, const mt_lifetime *l)
{
    return t->categorizer && l->kind == MT_KIND_TENSOR &&
           mt_counting(l->kind, l->flags) == MT_COUNT_IN_USE && l->category < MT_CAT_MAX;
}

static inline int is_temp_category(unsigned cat)
{
    return cat == MT_CAT_BACKWARD_TEMP || cat == MT_CAT_OPTIMIZER_TEMP;
}

static inline mt_ctx_list *temps_of(mt_tracker *t, unsigned cat)
{
    return &t->temps[cat == MT_CAT_OPTIMIZER_TEMP];
}

static inline int device_ok(int32_t device)
{
    return device >= -1 && device <= MT_MAX_DEVICE_ORDINAL;
}

/* Where slot_index keeps the index of (device, is_host); device must be device_ok. */
static inline int32_t *slot_ref(mt_tracker *t, int32_t device, int is_host)
{
    if (is_host) return &t->host_index;
    return device < 0 ? &t->unknown_index : &t->ord_index[device];
}

/* The usage slot of (device, is_host), created on first use. Returns an index or -1 (OOM). */
static inline long slot_index(mt_tracker *t, int32_t device, int is_host, uint64_t now)
{
    int32_t *ref = slot_ref(t, device, is_host);
    return *ref ? *ref - 1 : mt_tracker_new_slot_(t, device, is_host, now, ref);
}

static inline void note_in_use_peaks(mt_usage *u, uint64_t now, uint64_t seq)
{
    if (u->in_use > u->peak) {
        u->peak = u->in_use;
        u->peak_mono_ns = now;
        u->peak_seq = seq;
    }
    if (u->api_in_use > u->api_peak) {
        u->api_peak = u->api_in_use;
        u->api_peak_mono_ns = now;
    }
}

static inline void note_peaks(mt_usage *u, uint64_t now, uint64_t seq)
{
    note_in_use_peaks(u, now, seq);
    if (u->vmm_reserved > u->vmm_reserved_peak) u->vmm_reserved_peak = u->vmm_reserved;
    if (u->vmm_mapped > u->vmm_mapped_peak) u->vmm_mapped_peak = u->vmm_mapped;
    if (u->pool_reserved > u->pool_reserved_peak) u->pool_reserved_peak = u->pool_reserved;
}

/* Adds (sign > 0) or removes the bytes of a lifetime of `kind` with event flags `flags` from its
 * slot. */
static inline void account(mt_usage *u, unsigned kind, unsigned flags, uint64_t bytes, int sign)
{
    uint64_t d = sign > 0 ? bytes : -bytes; /* unsigned wrap-around adds or subtracts */
    if (flags & MT_EF_SEGMENT) {
        u->segment_bytes += d;
        if (u->segment_bytes > u->segment_peak) u->segment_peak = u->segment_bytes;
    }
    int how = mt_counting(kind, flags);
    if (how == MT_COUNT_RESERVED) return; /* its tensors are counted instead */
    if (how == MT_COUNT_NONE && mt_kind_counts(kind)) { /* a graph memory node, an import */
        if (flags & MT_EF_IMPORTED) {
            u->imported += d;
            if (u->imported > u->imported_peak) u->imported_peak = u->imported;
        }
        return;
    }
    u->by_kind[kind] += d;
    /* per-kind high-water: the tensor peak (torch's max_memory_allocated) in tensor mode */
    if (sign > 0 && u->by_kind[kind] > u->by_kind_peak[kind]) u->by_kind_peak[kind] = u->by_kind[kind];
    if (how == MT_COUNT_IN_USE) {
        u->in_use += d;
        if (kind != MT_KIND_DRIVER) u->api_in_use += d;
    } else if (kind == MT_KIND_VMM_RESERVE) {
        u->vmm_reserved += d;
    }
}

/* A freed-key cache entry of a lifetime that its context's destruction ended: its hash with this
 * bit flipped (in the same slot no other key's hash can be that value). The driver reports its own
 * release of such an allocation (a CUDA array's, a driver-internal one's) as the context is torn
 * down, after the destruction: expected, not an unmatched free. */
#define FREED_BY_CTX_END 2u

/* The freed-key cache's hash of a key: the live table's (one hash serves both lookups). */
static inline uint64_t freed_hash(int32_t device, unsigned fam, uint64_t addr)
{
    return mt_live_hash(device, (uint8_t)fam, addr) | 1;
}

/* The freed-key cache's entry for hash h, by its bits 1..15: bit 0 is always set (freed_hash), and
 * bit 1, being part of the index, is what FREED_BY_CTX_END can flip without the value becoming
 * another key's of the same entry. Until 2026-12-03 the index was h's bits 0..15, so only the odd
 * half of a 64 Ki-entry table (512 KiB) was ever used: the same 32 Ki entries, and the same keys
 * sharing one, now in 256 KiB (no change in speed measured: docs/performance.md, "A sixth
 * processor"). */
static inline uint64_t *freed_slot(mt_tracker *t, uint64_t h)
{
    return &t->freed[(h >> 1) & ((1u << FREED_CACHE_BITS) - 1)];
}

/* Members of a context: a lifetime is (address, serial, device << 8 | family); a mapping is
 * (range id, serial). The serial tells a member from a later one at the same place. */
static inline mt_ctx_member lifetime_member(const mt_lifetime *l)
{
    return (mt_ctx_member){l->address, l->serial, (uint64_t)(uint32_t)l->device << 8 | l->family};
}

/* tracker.c: l joins its temporary category's list when the list is full (mt_ctx_list_join: it
 * may be compacted first). -1 when out of memory. */
int mt_tracker_temps_join_(mt_tracker *t, const mt_lifetime *l);

static inline int temps_join(mt_tracker *t, const mt_lifetime *l)
{
    mt_ctx_list *q = temps_of(t, l->category);
    if (q->n == q->cap) return mt_tracker_temps_join_(t, l);
    q->v[q->n++] = lifetime_member(l);
    q->live++;
    return 0;
}

/* Which context each live lifetime belongs to. A trace has one context or two, so while every
 * lifetime so far came from one context (CTX_ONE) no list is kept: MT_OP_CTX_DESTROY of that
 * context ends every live lifetime of it, found in the live set, ordered by serial. (A list per
 * context cost a join per allocation and, to keep it short, a lookup of each member now and then:
 * a tenth of `report`'s time.) The first lifetime of another context turns the live set into that
 * first context's list (CTX_MANY) and lists are kept from then on. Either way a destruction ends
 * its context's lifetimes in allocation order.
 *
 * Context 0 is no context: an event that names none (a tensor of record --tensors, a driver
 * allocation known from an activity record without one). Such a lifetime belongs to no list and
 * no destruction ends it; a destruction that names context 0 (which no recorder writes) ends
 * nothing. Before, context 0 was a context like another, so a --tensors trace (its tensors and
 * its segments' context) kept a list for every tensor: a twentieth of the analysis. */
enum { CTX_NONE = 0, CTX_ONE = 1, CTX_MANY = 2 };

/* Lifetime l (just inserted in the live set) joins its context. -1 when out of memory. */
static inline int ctx_join_lifetime(mt_tracker *t, const mt_lifetime *l)
{
    if (!l->context) return 0;
    if (t->ctx_mode == CTX_NONE || (t->ctx_mode == CTX_ONE && t->ctx_live == 0)) {
        t->ctx_mode = CTX_ONE; /* no other context's lifetime is live: l's context is the one */
        t->ctx_one = l->context;
    } else if (!(t->ctx_mode == CTX_ONE && l->context == t->ctx_one) &&
               mt_tracker_ctx_join_more_(t, l) < 0) {
        return -1;
    }
    t->ctx_live++;
    return 0;
}

/* The usage slot a lifetime counts on, or -1 (a device lifetime of an unknown device). */
static inline long slot_of(mt_tracker *t, const mt_lifetime *p, uint64_t now)
{
    int host = is_host_family(p->family) || (p->flags & MT_EF_HOST_MEMORY);
    return host || p->device >= 0 ? slot_index(t, p->device, host, now) : -1;
}

/* Ends lifetime p, whose slot is s (slot_of): tells on_release (the tracker's own hook), takes
 * its bytes off its slot, removes it. */
static inline __attribute__((always_inline)) void release_in(mt_tracker *t, mt_lifetime *p,
                                                               uint64_t now, mt_end_reason why,
                                                               long s, mt_release_hook on_release)
{
    if (on_release) on_release(t->hooks.ctx, p, now, why);
    if (s >= 0) account(&t->usages[s], p->kind, p->flags, p->bytes, -1);
    if (s >= 0 && counts_by_category(t, p)) t->usages[s].by_category[p->category] -= p->bytes;
    if (p->context) {
        t->ctx_live--;
        if (t->ctx_mode == CTX_MANY) mt_ctx_leave(&t->ctx_lifetimes, p->context);
    }
    if (t->categorizer && is_temp_category(p->category))
        mt_ctx_list_leave(temps_of(t, p->category));
    mt_live_remove(&t->live, p);
}

/* Out of memory while an allocation joined its lists: it is not live after all. in_temps: it joined
 * its temporaries' list (but not its context), and leaves that list by hand, as it is removed here
 * without release_in (its member, now stale, goes at the next compaction). Out of line and cold:
 * inlined into do_alloc, this path made every allocation slower (report on a 10 M-event --tensors
 * trace ~4% slower, docs/performance.md). (`unused`: a file that includes this header
 * without calling it is not warned of an unused function, as the inline ones here are not.) */
static __attribute__((noinline, cold, unused)) int alloc_undone(mt_tracker *t,
                                                                 const mt_lifetime *l, int in_temps)
{
    if (in_temps) mt_ctx_list_leave(temps_of(t, l->category));
    mt_lifetime *p = mt_live_find(&t->live, l->device, l->family, l->address);
    if (p) mt_live_remove(&t->live, p);
    return -1;
}

/* slot < 0: a device allocation on an unknown device (counted as an anomaly, on no device). */
static inline __attribute__((always_inline)) int do_alloc(mt_tracker *t, const mt_event *e,
                                                            unsigned kind, unsigned fam,
                                                            int32_t dev, long slot)
{
    uint64_t now = e->time_ns;
    uint64_t lh = mt_live_hash(dev, (uint8_t)fam, e->address);
    mt_lifetime *old = mt_live_find_h(&t->live, lh, dev, (uint8_t)fam, e->address);
    if (old) {
        /* a handle this context has open already, opened again: the driver gives the same
         * mapping and counts the opens; the last cuIpcCloseMemHandle ends it */
        if (kind == MT_KIND_DEVICE && old->kind == MT_KIND_DEVICE &&
            (e->flags & old->flags & MT_EF_IMPORTED)) {
            old->extra_refs++;
            return 0;
        }
        t->an.replaced++;
        mt_tracker_release_(t, old, now, MT_END_REPLACED);
    }
    uint64_t h = lh | 1; /* freed_hash */
    uint64_t *fc = freed_slot(t, h);
    if ((*fc | FREED_BY_CTX_END) == (h | FREED_BY_CTX_END)) *fc = 0;
    mt_lifetime l = {.address = e->address, .bytes = e->bytes, .start_ns = now,
                     .stream = e->stream, .aux = e->aux, .serial = ++t->serial,
                     .start_seq = t->seq,
                     .stack = e->stack, .tid = e->tid, .context = e->context, .device = dev,
                     .flags = e->flags, .kind = (uint8_t)kind, .family = (uint8_t)fam};
    if (t->categorizer && kind == MT_KIND_TENSOR) {
        /* categorized before it joins the live set: a phase that this tensor ends promotes what
         * was live before it, not the tensor itself */
        l.category = (uint8_t)mt_categorize(t->categorizer, &l);
        int ended = mt_categorizer_phase(t->categorizer, &l, e->tid);
        if (ended) mt_tracker_promote_(t, ended);
        if (ended && t->hooks.on_phase_end) t->hooks.on_phase_end(t->hooks.ctx, ended, now);
    }
    if (mt_live_insert_h(&t->live, lh, &l) < 0) return -1;
    int temp = t->categorizer && is_temp_category(l.category);
    if (temp && temps_join(t, &l) < 0) return alloc_undone(t, &l, 0);
    if (ctx_join_lifetime(t, &l) < 0) return alloc_undone(t, &l, temp);
    if (t->hooks.on_start) t->hooks.on_start(t->hooks.ctx, &l);
    if (slot < 0) {
        t->an.unknown_device++;
        return 0;
    }
    mt_usage *u = &t->usages[slot];
    account(u, kind, e->flags, e->bytes, +1);
    if (counts_by_category(t, &l)) u->by_category[l.category] += e->bytes;
    if (mt_counting(kind, e->flags) == MT_COUNT_IN_USE) {
        u->alloc_bytes += e->bytes;
        u->alloc_count++;
        if (e->bytes == 0) u->zero_byte_allocs++;
    }
    if (e->flags & MT_EF_CAPTURED) {
        u->captured_count++;
        u->captured_bytes += e->bytes;
    }
    if (kind == MT_KIND_TENSOR && e->aux > u->tensor_counter_peak) u->tensor_counter_peak = e->aux;
    return 0;
}

static inline __attribute__((always_inline)) void do_free(mt_tracker *t, const mt_event *e,
                                                           unsigned fam, int32_t dev, uint64_t now,
                                                           mt_usage_hook on_usage,
                                                           mt_release_hook on_release)
{
    if (t->categorizer && fam == MT_FAM_TENSOR) { /* a free may end the backward pass */
        int ended = mt_categorizer_phase(t->categorizer, NULL, e->tid);
        if (ended) mt_tracker_promote_(t, ended);
        if (ended && t->hooks.on_phase_end) t->hooks.on_phase_end(t->hooks.ctx, ended, now);
    }
    uint64_t lh = mt_live_hash(dev, (uint8_t)fam, e->address);
    mt_lifetime *p = mt_live_find_h(&t->live, lh, dev, (uint8_t)fam, e->address);
    if (!p && fam == MT_FAM_VMM_PHYSICAL) p = mt_tracker_find_handle_(t, dev, e->address);
    if (p && p->extra_refs) { /* cuMemRelease of a retained reference: the handle lives on */
        p->extra_refs--;
        return;
    }
    if (!p && dev < 0 && !is_host_family(fam))
        for (size_t i = 0; i < t->n_usages && !p; i++)
            if (!t->usages[i].is_host && t->usages[i].device != dev)
                p = mt_live_find(&t->live, t->usages[i].device, (uint8_t)fam, e->address);
    /* memory located on the host (a host pool's cudaFreeAsync names the context's device) */
    if (__builtin_expect(!p, 0) && dev >= 0 &&
        (p = mt_live_find(&t->live, -1, (uint8_t)fam, e->address)) &&
        !(p->flags & MT_EF_HOST_MEMORY))
        p = NULL;
    uint64_t h = !p || p->device == dev ? lh | 1 : freed_hash(p->device, fam, e->address);
    uint64_t *fc = freed_slot(t, h);
    if (!p) {
        if (*fc == h) t->an.double_frees++;
        else if (*fc == (h ^ FREED_BY_CTX_END) && (e->flags & MT_EF_ACTIVITY))
            *fc = h;
        else t->an.unmatched_frees++;
        return;
    }
    *fc = h;
    long s = slot_of(t, p, now);
    if (s >= 0) t->usages[s].free_count++;
    release_in(t, p, now, MT_END_FREE, s, on_release);
    if (s >= 0 && on_usage) on_usage(t->hooks.ctx, &t->usages[s], now);
}

/* mt_tracker_event, with the tracker's own hooks passed as on_usage and on_release (NULL where it
 * has none): an ALLOC or FREE of a lifetime takes the path above, everything else
 * mt_tracker_event_rest_. op is e->op: a caller that has tested it passes the constant, and the
 * tests here fold away (the op of a stream of allocations and frees is what the processor
 * predicts worst: testing it once made `report` ~5% faster on the synthetic trace, 2026-11-28). */
static inline __attribute__((always_inline)) int mt_tracker_event_op(mt_tracker *t,
                                                                     const mt_event *e, unsigned op,
                                                                     mt_usage_hook on_usage,
                                                                     mt_release_hook on_release)
{
    uint64_t now = e->time_ns;
    t->seq++;
    unsigned kind = e->kind < MT_KIND_MAX_ ? e->kind : MT_KIND_UNKNOWN;
    unsigned fam = family_of_kind[kind];
    /* the flag only where a lifetime or a pool starts: a release names no location */
    int host = is_host_family(fam) || ((e->flags & MT_EF_HOST_MEMORY) && op != MT_OP_FREE);
    int32_t dev = host ? -1 : e->device;
    if (!device_ok(dev) || (op == MT_OP_POOL_RESERVED && !device_ok(e->device))) {
        t->an.bad_devices++;
        return 0;
    }
    if (op == MT_OP_ALLOC && kind != MT_KIND_VMM_MAP &&
        !(kind == MT_KIND_VMM_PHYSICAL && (e->flags & MT_EF_RETAIN))) {
        /* The recorder names every device allocation's device; one it could not (an older
         * recorder, a thread with no context) is tracked but put on no device. */
        long s = host || dev >= 0 ? slot_index(t, dev, host, now) : -1;
        if (s < 0 && (host || dev >= 0)) return -1;
        if (do_alloc(t, e, kind, fam, dev, s) < 0) return -1;
        if (s < 0) return 0;
        /* an allocation raises in_use (and then only the address space of that kind; pool
         * reservations only with POOL_RESERVED) */
        mt_usage *u = &t->usages[s];
        note_in_use_peaks(u, now, t->seq);
        if (kind == MT_KIND_VMM_RESERVE && u->vmm_reserved > u->vmm_reserved_peak)
            u->vmm_reserved_peak = u->vmm_reserved;
        if (on_usage) on_usage(t->hooks.ctx, u, now);
        return 0;
    }
    if (op == MT_OP_FREE && kind != MT_KIND_VMM_MAP) {
        do_free(t, e, fam, dev, now, on_usage, on_release);
        return 0;
    }
    return mt_tracker_event_rest_(t, e, kind, fam, host, dev, now);
}

/* The same, the op read from the event. */
static inline __attribute__((always_inline)) int mt_tracker_event_with(mt_tracker *t,
                                                                       const mt_event *e,
                                                                       mt_usage_hook on_usage,
                                                                       mt_release_hook on_release)
{
    return mt_tracker_event_op(t, e, e->op, on_usage, on_release);
}

#endif
