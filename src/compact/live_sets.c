/* The live set by stack, at the two moments pass 1 looks at it whole: a failed request (what was
 * live on its device then) and the end of the trace (what is live by stack and by holder, what the
 * program itself holds, and each GPU device's reconciliation). Each is one walk over the
 * tracker's live set, for every device at once at the end. */
#include <stdlib.h>
#include <string.h>

#include "analysis_parts.h"

/* ---- at a failed request: what was live on its device ---------------------------------------- */

typedef struct snap {
    mt_u64map *map;
    uint64_t only_slot; /* slot key to keep */
    uint64_t bytes, count;
    int oom;
} snap;

static void snap_one(void *ctx, const mt_lifetime *l)
{
    snap *s = ctx;
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    uint64_t key = mt_agg_key(l);
    if ((key >> 40) != s->only_slot) return;
    mt_u64map_slot *m = mt_u64map_upsert(s->map, key);
    if (!m) {
        s->oom = 1;
        return;
    }
    m->a += l->bytes;
    m->b++;
    s->bytes += l->bytes;
    s->count++;
}

int mt_snapshot_failed(mt_analysis *a, const mt_tracker *t, const mt_event *e)
{
    if (!a->failed && !(a->failed = calloc(MT_MAX_FAILED_KEPT, sizeof *a->failed))) return -1;
    mt_failed_request *f = &a->failed[a->n_failed];
    int host = mt_is_host(e->kind, e->flags);
    *f = (mt_failed_request){.time_ns = mt_rel_time(e->time_ns, a->header.start_monotonic_ns),
                             .device = host ? -1 : e->device,
                             .kind = e->kind,
                             .is_host = (uint8_t)host,
                             .result = e->result,
                             .stack = e->stack,
                             .tid = e->tid,
                             .bytes = e->bytes,
                             .stream = e->stream,
                             .event_index = a->events};
    f->raised_as = -1; /* failed_ties.c says what came of it */
    const mt_usage *u = mt_tracker_usage(t, f->device, host);
    if (e->kind == MT_KIND_TENSOR) f->torch_allocated = e->aux;
    /* backend:cudaMallocAsync's memory_allocated(): its live cudaMallocAsync bytes (torch_async,
     * known once the stacks' names are: failed_ties.c) */
    if (e->kind == MT_KIND_ASYNC && u) f->torch_allocated = u->by_kind[MT_KIND_ASYNC];
    if (u) {
        f->in_use = u->in_use;
        if (e->kind == MT_KIND_TENSOR || (e->flags & MT_EF_SEGMENT))
            f->torch_reserved = u->segment_bytes;
        if (u->has_pool_info) {
            f->pool_free_known = 1;
            uint64_t async = u->by_kind[MT_KIND_ASYNC];
            f->pool_free = u->pool_reserved > async ? u->pool_reserved - async : 0;
        }
    }
    mt_u64map m = {0};
    snap s = {.map = &m, .only_slot = mt_slot_key(f->device, host)};
    mt_tracker_foreach_live(t, snap_one, &s);
    int rc = (s.oom || mt_stack_list_from_map(&m, ~0ull, &f->live) < 0) ? -1 : 0;
    mt_u64map_destroy(&m);
    a->n_failed++;
    return rc;
}

/* ---- what is live at the end, by stack and by holder ----------------------------------------- */

/* Holders of one device slot: a handful (static owner names, "program", "driver-internal"). */
typedef struct holder_list {
    mt_end_holder *v;
    size_t n;
} holder_list;

/* The end of the trace for every device in one walk over the live set: what is live by stack and
 * by holder, what the program itself holds (leaks), and each GPU device's reconciliation. */
typedef struct end_snap {
    mt_frames *f;
    mt_u64map live, program; /* agg key -> bytes, count */
    holder_list holders[MT_N_SLOTS];
    mt_breakdown_acc at_end[MT_N_SLOTS];
    int oom;
} end_snap;

static void add_to(mt_u64map *m, uint64_t key, uint64_t bytes, int *oom)
{
    mt_u64map_slot *s = mt_u64map_upsert(m, key);
    if (!s) {
        *oom = 1;
        return;
    }
    s->a += bytes;
    s->b++;
}

static void end_one(void *ctx, const mt_lifetime *l)
{
    end_snap *e = ctx;
    size_t slot = mt_slot_of_lifetime(l);
    if (slot >= MT_N_SLOTS) return;
    mt_breakdown_add(&e->at_end[slot], l); /* a segment counts there though not in use */
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    uint64_t key = mt_agg_key(l);
    add_to(&e->live, key, l->bytes, &e->oom);
    const char *holder;
    mt_holder_kind kind = mt_frames_holder(e->f, l, &holder);
    if (kind == MT_HOLD_PROGRAM) add_to(&e->program, key, l->bytes, &e->oom);
    holder_list *hl = &e->holders[slot];
    size_t i = 0;
    while (i < hl->n && hl->v[i].holder != holder) i++;
    if (i == hl->n) {
        mt_end_holder *nv = realloc(hl->v, (hl->n + 1) * sizeof *nv);
        if (!nv) {
            e->oom = 1;
            return;
        }
        hl->v = nv;
        hl->v[hl->n++] = (mt_end_holder){.holder = holder, .kind = kind};
    }
    hl->v[i].bytes += l->bytes;
    hl->v[i].count++;
}

static int cmp_holder(const void *pa, const void *pb)
{
    const mt_end_holder *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return strcmp(a->holder, b->holder);
}

/* The holders of a device, largest first; past MT_MAX_END_HOLDERS the smallest are added to the
 * last kept entry of their kind, or dropped from the list (never from the totals). */
static void holders_of(holder_list *hl, mt_device_report *d)
{
    if (hl->n) qsort(hl->v, hl->n, sizeof *hl->v, cmp_holder);
    for (size_t i = 0; i < hl->n; i++) {
        if (d->n_end_holders < MT_MAX_END_HOLDERS) {
            d->end_holders[d->n_end_holders++] = hl->v[i];
            continue;
        }
        for (size_t k = d->n_end_holders; k-- > 0;)
            if (d->end_holders[k].kind == hl->v[i].kind) {
                d->end_holders[k].bytes += hl->v[i].bytes;
                d->end_holders[k].count += hl->v[i].count;
                break;
            }
    }
}

int mt_live_at_end(mt_analysis *a, const mt_tracker *t, const mt_u64map *allocs,
                   mt_device_report **by_slot)
{
    end_snap *e = calloc(1, sizeof *e); /* ~20 KiB: per-slot state for every possible device */
    if (!e) return -1;
    e->f = a->frames;
    for (size_t k = 1; k < MT_N_SLOTS; k++) /* slot 0 is host memory: no reconciliation */
        if (by_slot[k])
            mt_breakdown_begin(&e->at_end[k], &by_slot[k]->at_end, a->frames, &by_slot[k]->u,
                               a->duration_ns);
    mt_tracker_foreach_live(t, end_one, e);
    int rc = e->oom ? -1 : 0;
    for (size_t k = 1; k < MT_N_SLOTS; k++) {
        mt_device_report *d = by_slot[k];
        if (!d) continue;
        if (mt_breakdown_end(&e->at_end[k]) < 0) rc = -1;
        mt_breakdown_set_process(&d->at_end, d->nvml, d->n_nvml, mt_breakdown_visible(&d->u),
                                 d->u.by_kind[MT_KIND_DRIVER]);
    }
    mt_stack_list live[MT_N_SLOTS], program[MT_N_SLOTS], alloc_lists[MT_N_SLOTS];
    int have = 0; /* lists made so far */
    if (rc == 0 && mt_stack_lists_by_prefix(&e->live, live, MT_N_SLOTS) == 0) have = 1;
    if (have == 1 && mt_stack_lists_by_prefix(&e->program, program, MT_N_SLOTS) == 0) have = 2;
    if (have == 2 && mt_stack_lists_by_prefix(allocs, alloc_lists, MT_N_SLOTS) == 0) have = 3;
    for (size_t k = 0; k < MT_N_SLOTS; k++) {
        mt_device_report *d = have == 3 ? by_slot[k] : NULL;
        if (!d) {
            if (have >= 1) free(live[k].v);
            if (have >= 2) free(program[k].v);
            if (have >= 3) free(alloc_lists[k].v);
            continue;
        }
        d->live_end = live[k];
        d->leaks = program[k];
        d->allocs = alloc_lists[k];
        holders_of(&e->holders[k], d);
        for (size_t j = 0; j < d->leaks.n; j++) {
            d->leak_bytes += d->leaks.v[j].bytes;
            d->leak_count += d->leaks.v[j].count;
        }
    }
    mt_u64map_destroy(&e->live);
    mt_u64map_destroy(&e->program);
    for (size_t k = 0; k < MT_N_SLOTS; k++) {
        free(e->holders[k].v);
        mt_u64map_destroy(&e->at_end[k].owners);
    }
    free(e);
    return have == 3 ? rc : -1;
}
