/* mt_analyze: a trace file -> mt_analysis, in two streaming passes.
 *
 *   pass 1  every record: frames, process/devices/threads/notes, dropped/END; every event through
 *           a tracker. Gives each device's peak (value, time, event number), totals, the usage
 *           timeline, failed requests with what was live on their device at that moment, bytes
 *           allocated by stack, and what is still live at the end (by stack, and by holder:
 *           an allocator's cache, a library, the driver, or the program).
 *   pass 2  events only, through a fresh tracker, until the last device's peak event: when a
 *           device reaches the event number of its peak, its live set is aggregated by stack.
 *           With tensors the tracker also gives each tensor its category (categories.c), and the
 *           replay goes on past the peak until the phase of the peak has ended (see below).
 * Memory: the live set, per-stack aggregates and frame tables; never the event count.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define PROGRESS_EVERY 65536

/* Aggregate keys: slot key << 40 | driver << 32 | stack. Slot key 0 = host, else ordinal + 2. */
static inline uint64_t slot_key(int32_t device, int is_host)
{
    return is_host ? 0 : ((uint64_t)(uint32_t)(device + 2) & 0xffffff);
}

static inline uint64_t agg_key(const mt_lifetime *l)
{
    return slot_key(l->device, mt_kind_is_host(l->kind)) << 40 |
           mt_stack_key(l->stack, l->kind == MT_KIND_DRIVER);
}

typedef struct timeline {
    uint64_t api_visible; /* the slot's NVML-visible bytes less driver-internal (see sample_seen) */
    uint64_t width; /* ns per bucket; doubles when the trace outgrows MT_TIMELINE_POINTS buckets */
    uint64_t n;     /* buckets in use (highest index + 1) */
    mt_timeline_point p[MT_TIMELINE_POINTS];
} timeline;

typedef struct dev_info {
    int32_t ordinal;
    char *name;
    uint64_t total;
} dev_info;

typedef struct nvml_sample {
    int32_t device;
    mt_sample_point p;
} nvml_sample;

/* What the trace had live when an NVML sample was read, by event time: a sample is written by the
 * sampler thread while other threads' events of the same moments may sit in their rings for a
 * while, so the file order of a sample and the events around it is not their time order. Each
 * sample starts from the live bytes of its place in the file, less the changes of the last
 * HISTORY events that happened after its time, and takes every change of an event from before its
 * time that comes later in the file, for SAMPLE_WINDOW_NS of event time after it. */
#define HISTORY 65536
#define SAMPLE_WINDOW_NS 2000000000ull

typedef struct change {
    uint64_t t; /* since trace start */
    int32_t device;
    int64_t delta;
} change;

typedef struct pass1 {
    nvml_sample *nvml; /* NVML process samples until finish_pass1 hands them to the devices */
    size_t n_nvml, cap_nvml;
    int64_t *nvml_live;  /* parallel to nvml: the trace's live bytes at the sample, so far */
    size_t first_pending; /* samples from here on may still take changes */
    change *hist;        /* the last HISTORY changes, a ring */
    size_t hist_n, hist_head;
    mt_tracker *t;
    uint64_t start;
    timeline *tl; /* parallel to the tracker's usage slots */
    size_t n_tl;
    int oom;
} pass1;

static void fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static inline uint64_t rel(uint64_t t, uint64_t start) { return t > start ? t - start : 0; }

/* Keeps the highest point of each bucket; halves the resolution when time runs past the end. */
static void timeline_note(timeline *tl, const mt_usage *u, uint64_t time_rel)
{
    if (!tl->width) tl->width = 1000;
    uint64_t b = time_rel / tl->width;
    while (b >= MT_TIMELINE_POINTS) {
        for (size_t i = 0; i < MT_TIMELINE_POINTS / 2; i++) {
            mt_timeline_point *x = &tl->p[2 * i], *y = &tl->p[2 * i + 1];
            tl->p[i] = (y->time_ns && y->in_use > x->in_use) || !x->time_ns ? *y : *x;
        }
        memset(&tl->p[MT_TIMELINE_POINTS / 2], 0, sizeof tl->p / 2);
        tl->n = (tl->n + 1) / 2;
        tl->width *= 2;
        b = time_rel / tl->width;
    }
    mt_timeline_point *p = &tl->p[b];
    /* time_ns + 1 marks the bucket used even at time 0; undone when copied out. */
    if (!p->time_ns || u->in_use > p->in_use) {
        p->time_ns = time_rel + 1;
        p->in_use = u->in_use;
        memcpy(p->by_kind, u->by_kind, sizeof p->by_kind);
    }
    if (b + 1 > tl->n) tl->n = b + 1;
}

static const mt_usage *find_usage(const mt_tracker *t, int32_t device, int is_host);

static void pass1_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    pass1 *p = ctx;
    const mt_usage *base;
    size_t n = mt_tracker_usages(p->t, &base);
    size_t i = (size_t)(u - base);
    if (n > p->n_tl) {
        timeline *nt = realloc(p->tl, n * sizeof *nt);
        if (!nt) {
            p->oom = 1;
            return;
        }
        memset(nt + p->n_tl, 0, (n - p->n_tl) * sizeof *nt);
        p->tl = nt;
        p->n_tl = n;
    }
    uint64_t t = rel(time_ns, p->start);
    timeline_note(&p->tl[i], u, t);
    if (u->is_host) return;
    uint64_t v = mt_breakdown_visible(u) - u->by_kind[MT_KIND_DRIVER];
    int64_t delta = (int64_t)(v - p->tl[i].api_visible);
    p->tl[i].api_visible = v;
    if (!delta) return;
    if (!p->hist && !(p->hist = malloc(HISTORY * sizeof *p->hist))) {
        p->oom = 1;
        return;
    }
    p->hist[p->hist_head] = (change){t, u->device, delta};
    p->hist_head = (p->hist_head + 1) % HISTORY;
    if (p->hist_n < HISTORY) p->hist_n++;
    while (p->first_pending < p->n_nvml && p->nvml[p->first_pending].p.time_ns + SAMPLE_WINDOW_NS < t)
        p->first_pending++;
    for (size_t k = p->first_pending; k < p->n_nvml; k++)
        if (p->nvml[k].device == u->device && t <= p->nvml[k].p.time_ns) p->nvml_live[k] += delta;
}

/* A new sample: the live bytes of its place in the file, less the changes already read that
 * happened after it. */
static int64_t sample_seen(const pass1 *p, int32_t device, uint64_t t)
{
    const mt_usage *u = find_usage(p->t, device, 0);
    int64_t live = u ? (int64_t)(mt_breakdown_visible(u) - u->by_kind[MT_KIND_DRIVER]) : 0;
    for (size_t k = 0; k < p->hist_n; k++) {
        const change *c = &p->hist[(p->hist_head + HISTORY - 1 - k) % HISTORY];
        if (c->device == device && c->t > t) live -= c->delta;
    }
    return live;
}

/* ---- snapshots of the live set ----------------------------------------------------------------- */

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
    uint64_t key = agg_key(l);
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

static const mt_usage *find_usage(const mt_tracker *t, int32_t device, int is_host)
{
    const mt_usage *u;
    size_t n = mt_tracker_usages(t, &u);
    for (size_t i = 0; i < n; i++)
        if (u[i].is_host == is_host && (is_host || u[i].device == device)) return &u[i];
    return NULL;
}

static int snapshot_failed(mt_analysis *a, const mt_tracker *t, const mt_event *e)
{
    if (!a->failed && !(a->failed = calloc(MT_MAX_FAILED_KEPT, sizeof *a->failed))) return -1;
    mt_failed_request *f = &a->failed[a->n_failed];
    int host = mt_kind_is_host(e->kind);
    *f = (mt_failed_request){.time_ns = rel(e->time_ns, a->header.start_monotonic_ns),
                             .device = host ? -1 : e->device, .kind = e->kind,
                             .result = e->result, .stack = e->stack, .tid = e->tid,
                             .bytes = e->bytes, .stream = e->stream};
    const mt_usage *u = find_usage(t, f->device, host);
    if (u) {
        f->in_use = u->in_use;
        if (u->has_pool_info) {
            f->pool_free_known = 1;
            uint64_t async = u->by_kind[MT_KIND_ASYNC];
            f->pool_free = u->pool_reserved > async ? u->pool_reserved - async : 0;
        }
    }
    mt_u64map m = {0};
    snap s = {.map = &m, .only_slot = slot_key(f->device, host)};
    mt_tracker_foreach_live(t, snap_one, &s);
    int rc = (s.oom || mt_stack_list_from_map(&m, ~0ull, &f->live) < 0) ? -1 : 0;
    mt_u64map_destroy(&m);
    a->n_failed++;
    return rc;
}

/* ---- what is live at the end, by stack and by holder -------------------------------------------- */

typedef struct end_holder_sum {
    uint64_t slot;
    mt_end_holder h;
} end_holder_sum;

typedef struct end_snap {
    mt_frames *f;
    mt_u64map live, program; /* agg key -> bytes, count */
    end_holder_sum *sums;
    size_t n_sums;
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
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    uint64_t key = agg_key(l);
    add_to(&e->live, key, l->bytes, &e->oom);
    const char *holder;
    mt_holder_kind kind = mt_frames_holder(e->f, l, &holder);
    if (kind == MT_HOLD_PROGRAM) add_to(&e->program, key, l->bytes, &e->oom);
    uint64_t slot = key >> 40;
    size_t i = 0;
    while (i < e->n_sums && !(e->sums[i].slot == slot && e->sums[i].h.holder == holder)) i++;
    if (i == e->n_sums) { /* a handful: static owner names, "program", "driver-internal" */
        end_holder_sum *ns = realloc(e->sums, (e->n_sums + 1) * sizeof *ns);
        if (!ns) {
            e->oom = 1;
            return;
        }
        e->sums = ns;
        e->sums[e->n_sums++] = (end_holder_sum){slot, {.holder = holder, .kind = kind}};
    }
    e->sums[i].h.bytes += l->bytes;
    e->sums[i].h.count++;
}

static int cmp_holder(const void *pa, const void *pb)
{
    const mt_end_holder *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return strcmp(a->holder, b->holder);
}

/* The holders of device slot `slot`, largest first; past MT_MAX_END_HOLDERS the smallest are
 * added to the last kept entry of their kind, or dropped from the list (never from the totals). */
static void holders_of(const end_snap *e, uint64_t slot, mt_device_report *d)
{
    mt_end_holder all[64];
    size_t n = 0;
    for (size_t i = 0; i < e->n_sums && n < 64; i++)
        if (e->sums[i].slot == slot) all[n++] = e->sums[i].h;
    if (n) qsort(all, n, sizeof *all, cmp_holder);
    for (size_t i = 0; i < n; i++) {
        if (d->n_end_holders < MT_MAX_END_HOLDERS) {
            d->end_holders[d->n_end_holders++] = all[i];
            continue;
        }
        for (size_t k = d->n_end_holders; k-- > 0;)
            if (d->end_holders[k].kind == all[i].kind) {
                d->end_holders[k].bytes += all[i].bytes;
                d->end_holders[k].count += all[i].count;
                break;
            }
    }
}

/* ---- pass 2 ------------------------------------------------------------------------------------ */

/* With tensors (record --tensors) a tensor's category may only be final after its peak: a backward
 * tensor still live when the next optimizer step begins is a gradient, an optimizer temporary then
 * is state (categories.c). So the tensors live at a device's peak are kept as members, serial ->
 * (bytes, aggregate key), and the replay goes on until the phase after the peak ends (or the trace
 * does): a member released before then keeps the category it had, the others take theirs at that
 * moment. The replay also waits for the end of a backward pass after the peak, to show every
 * gradient live (by_category_after_backward).
 * Members' values: a = bytes, b = aggregate key | (category + 1) << CAT_SHIFT once final. */
#define CAT_SHIFT 33
#define CAT_MASK 0x3full

typedef struct dev2 {
    int reached;             /* the peak was seen */
    int waiting;             /* members wait for their final categories */
    int waiting_backward;    /* for the end of a backward pass (after_backward) */
    uint64_t bwd_at_peak, opt_at_peak; /* phases ended when the peak was reached */
    mt_u64map peak_map;      /* agg key (| category << CAT_SHIFT) -> bytes, count */
    mt_u64map members;       /* serial -> bytes, agg key | final category */
} dev2;

typedef struct pass2 {
    mt_tracker *t;
    mt_analysis *a;
    dev2 *dev; /* parallel to a->devices, then the host */
    size_t pending; /* devices whose peak is not reached yet, or whose members wait */
    int oom;
} pass2;

static mt_device_report *report_of(mt_analysis *a, const mt_usage *u, size_t *index)
{
    if (u->is_host) {
        *index = a->n_devices;
        return a->host;
    }
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == u->device) {
            *index = i;
            return &a->devices[i];
        }
    return NULL;
}

typedef struct peak_snap {
    dev2 *d;
    uint64_t only_slot;
    int categorize, oom;
} peak_snap;

static void peak_one(void *ctx, const mt_lifetime *l)
{
    peak_snap *s = ctx;
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    uint64_t key = agg_key(l);
    if ((key >> 40) != s->only_slot) return;
    mt_u64map_slot *m;
    if (s->categorize && l->kind == MT_KIND_TENSOR) {
        if (!(m = mt_u64map_upsert(&s->d->members, l->serial))) {
            s->oom = 1;
            return;
        }
        m->a = l->bytes;
        m->b = key;
        return;
    }
    if (!(m = mt_u64map_upsert(&s->d->peak_map, key))) {
        s->oom = 1;
        return;
    }
    m->a += l->bytes;
    m->b++;
}

static void pass2_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    (void)time_ns;
    pass2 *p = ctx;
    size_t i;
    mt_device_report *d = report_of(p->a, u, &i);
    if (!d || p->dev[i].reached || d->u.peak_seq != mt_tracker_seq(p->t) || d->u.peak == 0) return;
    dev2 *x = &p->dev[i];
    x->reached = 1;
    peak_snap s = {.d = x, .only_slot = slot_key(u->device, u->is_host),
                   .categorize = p->a->categories != NULL && !u->is_host};
    mt_tracker_foreach_live(p->t, peak_one, &s);
    memcpy(d->by_kind_at_peak, u->by_kind, sizeof d->by_kind_at_peak);
    d->driver_at_peak = u->by_kind[MT_KIND_DRIVER];
    if (!u->is_host) {
        if (mt_breakdown_snapshot(&d->at_peak, p->a->frames, p->t, u, d->peak_time_ns) < 0)
            p->oom = 1;
        mt_breakdown_set_process(&d->at_peak, d->nvml, d->n_nvml, mt_breakdown_visible(u),
                                 u->by_kind[MT_KIND_DRIVER]);
    }
    if (s.oom) p->oom = 1;
    if (s.categorize) {
        x->waiting = x->waiting_backward = 1;
        mt_categorizer_phases(p->a->categories, &x->bwd_at_peak, &x->opt_at_peak);
        return; /* still pending: finish_members, after_backward */
    }
    if (mt_stack_list_from_map(&x->peak_map, ~0ull, &d->peak_stacks) < 0) p->oom = 1;
    if (!d->peak_stacks.v) d->peak_stacks.v = calloc(1, sizeof(mt_stack_stat)); /* mark done */
    mt_u64map_destroy(&x->peak_map);
    if (p->pending) p->pending--;
}

static void pass2_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    (void)why;
    pass2 *p = ctx;
    if (l->kind != MT_KIND_TENSOR) return;
    for (size_t i = 0; i < p->a->n_devices; i++) {
        if (!p->dev[i].waiting) continue;
        mt_u64map_slot *m = mt_u64map_find(&p->dev[i].members, l->serial);
        if (m && !(m->b >> CAT_SHIFT & CAT_MASK)) m->b |= (uint64_t)(l->category + 1) << CAT_SHIFT;
    }
}

/* Sizes of the parameters [0], gradients [1] and optimizer state [2] at one moment. */
typedef struct size_lists {
    uint64_t *v[3];
    size_t n[3], cap[3];
    int oom;
} size_lists;

static void sizes_add(size_lists *s, unsigned cat, uint64_t bytes)
{
    int k = cat == MT_CAT_PARAMETERS ? 0 : cat == MT_CAT_GRADIENTS ? 1
          : cat == MT_CAT_OPTIMIZER_STATE ? 2 : -1;
    if (k < 0 || s->oom) return;
    if (s->n[k] == s->cap[k]) {
        size_t ncap = s->cap[k] ? 2 * s->cap[k] : 256;
        uint64_t *nv = realloc(s->v[k], ncap * sizeof *nv);
        if (!nv) {
            s->oom = 1;
            return;
        }
        s->v[k] = nv;
        s->cap[k] = ncap;
    }
    s->v[k][s->n[k]++] = bytes;
}

/* Gradients and optimizer state against the parameters (mt_category_fit); frees the lists. */
static int sizes_fit(size_lists *s, const mt_categorizer *c, mt_category_fit fit[2])
{
    uint64_t copies = 0;
    mt_categorizer_optimizer(c, &copies);
    int rc = s->oom ? -1 : 0;
    if (rc == 0) rc = mt_category_fit_compute(s->v[0], s->n[0], s->v[1], s->n[1], 1, &fit[0]);
    if (rc == 0)
        rc = mt_category_fit_compute(s->v[0], s->n[0], s->v[2], s->n[2], copies ? (unsigned)copies : 2,
                             &fit[1]);
    for (int k = 0; k < 3; k++) free(s->v[k]);
    return rc;
}

typedef struct cat_sum {
    pass2 *p;
    int32_t device;
    uint64_t *sums;    /* by category, or NULL */
    size_lists *sizes; /* or NULL */
    dev2 *x;           /* members to finish, or NULL */
} cat_sum;

static void cat_live(void *ctx, const mt_lifetime *l)
{
    cat_sum *c = ctx;
    if (l->kind != MT_KIND_TENSOR || l->device != c->device) return;
    if (c->sums && l->category < MT_CAT_MAX && mt_counting(l->kind, l->flags) == MT_COUNT_IN_USE) {
        c->sums[l->category] += l->bytes;
        sizes_add(c->sizes, l->category, l->bytes);
    }
    if (!c->x) return;
    mt_u64map_slot *m = mt_u64map_find(&c->x->members, l->serial);
    if (m && !(m->b >> CAT_SHIFT & CAT_MASK)) m->b |= (uint64_t)(l->category + 1) << CAT_SHIFT;
}

/* The live tensors of device i by category when a backward pass after its peak has ended. */
static void after_backward(pass2 *p, size_t i, uint64_t now)
{
    mt_device_report *d = &p->a->devices[i];
    size_lists sizes = {0};
    cat_sum c = {.p = p, .device = d->u.device, .sizes = &sizes,
                 .sums = d->by_category_after_backward};
    mt_tracker_foreach_live(p->t, cat_live, &c);
    d->after_backward_known = 1;
    d->after_backward_time_ns = rel(now, p->a->header.start_monotonic_ns);
    if (sizes_fit(&sizes, p->a->categories, d->fit_after_backward) < 0) p->oom = 1;
    p->dev[i].waiting_backward = 0;
}

/* The members of device i take their final categories; its peak stacks are made. */
static void finish_members(pass2 *p, size_t i)
{
    dev2 *x = &p->dev[i];
    mt_device_report *d = &p->a->devices[i];
    size_lists at_peak_sizes = {0};
    cat_sum c = {.p = p, .device = d->u.device, .x = x};
    mt_tracker_foreach_live(p->t, cat_live, &c);
    for (size_t k = 0; k < x->members.cap; k++) {
        const mt_u64map_slot *m = &x->members.slots[k];
        if (!m->used) continue;
        unsigned cat = (unsigned)(m->b >> CAT_SHIFT & CAT_MASK);
        cat = cat ? cat - 1 : MT_CAT_OTHER;
        if (cat >= MT_CAT_MAX) cat = MT_CAT_OTHER;
        d->by_category_at_peak[cat] += m->a;
        sizes_add(&at_peak_sizes, cat, m->a);
        uint64_t key = (m->b & ~(CAT_MASK << CAT_SHIFT)) | (uint64_t)cat << CAT_SHIFT;
        mt_u64map_slot *s = mt_u64map_upsert(&x->peak_map, key);
        if (!s) {
            p->oom = 1;
            break;
        }
        s->a += m->a;
        s->b++;
    }
    if (sizes_fit(&at_peak_sizes, p->a->categories, d->fit_at_peak) < 0) p->oom = 1;
    d->categories_known = 1;
    if (mt_stack_list_from_map(&x->peak_map, ~0ull, &d->peak_stacks) < 0) p->oom = 1;
    if (!d->peak_stacks.v) d->peak_stacks.v = calloc(1, sizeof(mt_stack_stat)); /* mark done */
    mt_u64map_destroy(&x->peak_map);
    mt_u64map_destroy(&x->members);
    x->waiting = 0;
}

/* A phase has ended (before the event that told is applied): devices whose members or
 * after_backward snapshot were waiting for it; a device is done when neither waits. */
static void pass2_phase_end(void *ctx, int phase, uint64_t now)
{
    (void)phase;
    pass2 *p = ctx;
    uint64_t bwd, opt;
    mt_categorizer_phases(p->a->categories, &bwd, &opt);
    for (size_t i = 0; i < p->a->n_devices; i++) {
        dev2 *x = &p->dev[i];
        if (!x->waiting && !x->waiting_backward) continue;
        if (x->waiting_backward && bwd > x->bwd_at_peak) after_backward(p, i, now);
        if (x->waiting && bwd + opt > x->bwd_at_peak + x->opt_at_peak) finish_members(p, i);
        if (!x->waiting && !x->waiting_backward && p->pending) p->pending--;
    }
}

static int run_pass2(mt_analysis *a, const mt_analyze_options *opt, char *err, size_t errlen)
{
    size_t n_slots = a->n_devices + (a->host != NULL);
    pass2 p = {.a = a, .dev = calloc(n_slots ? n_slots : 1, sizeof(dev2))};
    if (!p.dev) return -1;
    uint64_t last_seq = 0;
    for (size_t i = 0; i < n_slots; i++) {
        const mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        if (d->u.peak == 0) continue;
        p.pending++;
        if (d->u.peak_seq > last_seq) last_seq = d->u.peak_seq;
    }
    if (!p.pending) {
        free(p.dev);
        return 0;
    }
    mt_reader *r = mt_reader_open(a->path, err, errlen);
    if (!r) {
        free(p.dev);
        return -1;
    }
    mt_tracker_hooks hooks = {.ctx = &p, .on_usage = pass2_usage, .on_release = pass2_release,
                              .on_phase_end = pass2_phase_end};
    p.t = mt_tracker_new(&hooks);
    int rc = p.t ? 0 : -1;
    if (p.t && a->categories) mt_tracker_set_categorizer(p.t, a->categories);
    mt_record rec;
    uint64_t n = 0;
    /* without categories the replay ends at the last peak; with them, when no member waits */
    while (rc == 0 && p.pending && !p.oom &&
           (a->categories || mt_tracker_seq(p.t) < last_seq) &&
           mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type != MT_REC_EVENT) continue;
        if (mt_tracker_event(p.t, &rec.u.event) < 0) rc = -1;
        if (opt && opt->progress && ++n % PROGRESS_EVERY == 0)
            opt->progress(opt->progress_ctx, 2,
                          (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
    }
    for (size_t i = 0; i < a->n_devices && rc == 0 && p.t; i++)
        if (p.dev[i].waiting) finish_members(&p, i); /* the trace ended first */
    if (p.oom) rc = -1;
    if (rc < 0) fail(err, errlen, "%s: out of memory in pass 2", a->path);
    mt_tracker_free(p.t);
    for (size_t i = 0; i < n_slots; i++) {
        mt_u64map_destroy(&p.dev[i].peak_map);
        mt_u64map_destroy(&p.dev[i].members);
    }
    free(p.dev);
    mt_reader_close(r);
    return rc;
}

/* ---- pass 1 ------------------------------------------------------------------------------------ */

static char *dup(const char *s) { return strdup(s ? s : ""); }

static int keep_record(mt_analysis *a, pass1 *p, const mt_record *rec, dev_info **devs,
                       size_t *n_devs)
{
    switch (rec->type) {
    case MT_REC_SAMPLE: {
        if (rec->u.sample.counter != MT_COUNTER_NVML_PROCESS_BYTES) return 0;
        if (p->n_nvml == p->cap_nvml) {
            size_t ncap = p->cap_nvml ? p->cap_nvml * 2 : 256;
            nvml_sample *nv = realloc(p->nvml, ncap * sizeof *nv);
            if (!nv) return -1;
            p->nvml = nv;
            int64_t *nl = realloc(p->nvml_live, ncap * sizeof *nl);
            if (!nl) return -1;
            p->nvml_live = nl;
            p->cap_nvml = ncap;
        }
        uint64_t t = rel(rec->u.sample.time_ns, a->header.start_monotonic_ns);
        p->nvml_live[p->n_nvml] = sample_seen(p, rec->u.sample.device, t);
        p->nvml[p->n_nvml++] = (nvml_sample){rec->u.sample.device, {t, rec->u.sample.value, 0}};
        return 0;
    }
    case MT_REC_PROCESS:
        free(a->comm);
        free(a->cmdline);
        free(a->hostname);
        a->pid = rec->u.process.pid;
        a->ppid = rec->u.process.ppid;
        a->comm = dup(rec->u.process.comm);
        a->cmdline = dup(rec->u.process.cmdline);
        a->hostname = dup(rec->u.process.hostname);
        return a->comm && a->cmdline && a->hostname ? 0 : -1;
    case MT_REC_DEVICE: {
        dev_info *nd = realloc(*devs, (*n_devs + 1) * sizeof *nd);
        if (!nd) return -1;
        *devs = nd;
        nd[*n_devs] = (dev_info){rec->u.device.ordinal, dup(rec->u.device.name),
                                 rec->u.device.total_bytes};
        (*n_devs)++;
        return 0;
    }
    case MT_REC_THREAD: {
        void *nt = realloc(a->threads, (a->n_threads + 1) * sizeof *a->threads);
        if (!nt) return -1;
        a->threads = nt;
        a->threads[a->n_threads].tid = rec->u.thread.tid;
        a->threads[a->n_threads++].name = dup(rec->u.thread.name);
        return 0;
    }
    case MT_REC_NOTE: {
        if (rec->u.note.level != MT_NOTE_WARNING) return 0;
        char **nw = realloc(a->warnings, (a->n_warnings + 1) * sizeof *nw);
        if (!nw) return -1;
        a->warnings = nw;
        a->warnings[a->n_warnings++] = dup(rec->u.note.text);
        return 0;
    }
    case MT_REC_DROPPED:
        a->dropped += rec->u.dropped;
        return 0;
    case MT_REC_END: {
        a->ended_cleanly = 1;
        if (rec->u.end.dropped > a->dropped) a->dropped = rec->u.end.dropped;
        uint64_t t = rel(rec->u.end.time_ns, a->header.start_monotonic_ns);
        if (t > a->duration_ns) a->duration_ns = t;
        return 0;
    }
    default:
        return mt_frames_add(a->frames, rec) < 0 ? -1 : 0;
    }
}

static int cmp_dev(const void *pa, const void *pb)
{
    const mt_device_report *a = pa, *b = pb;
    /* ordinals ascending, the unknown device (-1) last */
    uint32_t x = (uint32_t)a->u.device, y = (uint32_t)b->u.device;
    return x < y ? -1 : x > y;
}

/* Hands the device its NVML samples (and their maximum) and reconciles the end of the trace. */
static int finish_device_samples(mt_analysis *a, pass1 *p, mt_device_report *d, const mt_usage *u)
{
    size_t n = 0;
    for (size_t k = 0; k < p->n_nvml; k++) n += p->nvml[k].device == u->device;
    if (n && !(d->nvml = malloc(n * sizeof *d->nvml))) return -1;
    for (size_t k = 0; k < p->n_nvml; k++) {
        if (p->nvml[k].device != u->device) continue;
        const mt_sample_point *s = &p->nvml[k].p;
        p->nvml[k].p.api_visible = p->nvml_live[k] > 0 ? (uint64_t)p->nvml_live[k] : 0;
        if (!d->n_nvml || s->value > d->nvml_max) {
            d->nvml_max = s->value;
            d->nvml_max_time_ns = s->time_ns;
        }
        d->nvml[d->n_nvml++] = *s;
    }
    if (mt_breakdown_snapshot(&d->at_end, a->frames, p->t, u, a->duration_ns) < 0) return -1;
    mt_breakdown_set_process(&d->at_end, d->nvml, d->n_nvml, mt_breakdown_visible(u),
                             u->by_kind[MT_KIND_DRIVER]);
    return 0;
}

static int finish_pass1(mt_analysis *a, pass1 *p, mt_u64map *allocs, dev_info *devs,
                        size_t n_devs)
{
    const mt_usage *u;
    size_t n = mt_tracker_usages(p->t, &u);
    a->devices = calloc(n ? n : 1, sizeof *a->devices);
    if (!a->devices) return -1;
    end_snap ends = {.f = a->frames};
    mt_tracker_foreach_live(p->t, end_one, &ends);
    if (ends.oom) {
        mt_u64map_destroy(&ends.live);
        mt_u64map_destroy(&ends.program);
        free(ends.sums);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        mt_device_report *d;
        /* A context destroyed while its device could not be named leaves an empty "unknown
         * device" slot behind: nothing to report there. */
        if (!u[i].is_host && u[i].device < 0 && u[i].alloc_count == 0 && u[i].failed_count == 0 &&
            u[i].free_count == 0 && !u[i].has_pool_info && u[i].peak == 0)
            continue;
        if (u[i].is_host) {
            if (!(a->host = calloc(1, sizeof *a->host))) return -1;
            d = a->host;
        } else {
            d = &a->devices[a->n_devices++];
        }
        d->u = u[i];
        d->peak_time_ns = rel(u[i].peak_time, a->header.start_monotonic_ns);
        d->api_peak_time_ns = rel(u[i].api_peak_time, a->header.start_monotonic_ns);
        for (size_t k = 0; k < n_devs; k++)
            if (!u[i].is_host && devs[k].ordinal == u[i].device) {
                /* one DEVICE record per context: a device with several contexts has several */
                d->name = devs[k].name;
                devs[k].name = NULL; /* the report owns it now */
                d->capacity = devs[k].total;
                break;
            }
        uint64_t sk = slot_key(u[i].device, u[i].is_host);
        if (mt_stack_list_from_map(&ends.live, sk, &d->live_end) < 0 ||
            mt_stack_list_from_map(&ends.program, sk, &d->leaks) < 0 ||
            mt_stack_list_from_map(allocs, sk, &d->allocs) < 0)
            return -1;
        holders_of(&ends, sk, d);
        for (size_t k = 0; k < d->leaks.n; k++) {
            d->leak_bytes += d->leaks.v[k].bytes;
            d->leak_count += d->leaks.v[k].count;
        }
        if (!u[i].is_host && finish_device_samples(a, p, d, &u[i]) < 0) return -1;
        if (i < p->n_tl) {
            const timeline *tl = &p->tl[i];
            d->timeline = malloc((tl->n ? tl->n : 1) * sizeof *d->timeline);
            if (!d->timeline) return -1;
            for (size_t k = 0; k < tl->n; k++)
                if (tl->p[k].time_ns) {
                    d->timeline[d->n_timeline] = tl->p[k];
                    d->timeline[d->n_timeline++].time_ns--;
                }
        }
    }
    mt_u64map_destroy(&ends.live);
    mt_u64map_destroy(&ends.program);
    free(ends.sums);
    if (a->n_devices) qsort(a->devices, a->n_devices, sizeof *a->devices, cmp_dev);
    a->anomalies = *mt_tracker_anomalies(p->t);
    return 0;
}

static int run_pass1(mt_analysis *a, const mt_analyze_options *opt, char *err, size_t errlen)
{
    mt_reader *r = mt_reader_open(a->path, err, errlen);
    if (!r) return -1;
    a->header = *mt_reader_header(r);
    a->pid = a->header.pid;
    pass1 p = {.start = a->header.start_monotonic_ns};
    mt_tracker_hooks hooks = {.ctx = &p, .on_usage = pass1_usage};
    p.t = mt_tracker_new(&hooks);
    mt_u64map allocs = {0};
    dev_info *devs = NULL;
    size_t n_devs = 0;
    int rc = p.t ? 0 : -1, have_time = 0;
    mt_record rec;
    mt_read_status st = MT_READ_END;
    while (rc == 0 && (st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        a->records++;
        if (opt && opt->progress && a->records % PROGRESS_EVERY == 0)
            opt->progress(opt->progress_ctx, 1,
                          (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
        if (rec.type != MT_REC_EVENT) {
            rc = keep_record(a, &p, &rec, &devs, &n_devs);
            continue;
        }
        const mt_event *e = &rec.u.event;
        a->events++;
        if (e->kind == MT_KIND_TENSOR && e->op == MT_OP_ALLOC && !a->categories) {
            if (!(a->categories = mt_categorizer_new(a->frames))) rc = -1;
            else if (opt && opt->category_rules &&
                     mt_categorizer_load_rules(a->categories, opt->category_rules, err, errlen) < 0)
                rc = -2;
        }
        uint64_t t = rel(e->time_ns, a->header.start_monotonic_ns);
        if (!have_time || t < a->first_ns) a->first_ns = t;
        if (t > a->last_ns) a->last_ns = t;
        have_time = 1;
        if (e->op == MT_OP_FAILED) {
            a->failed_total++;
            if (a->n_failed < MT_MAX_FAILED_KEPT && snapshot_failed(a, p.t, e) < 0) rc = -1;
        } else if (e->op == MT_OP_ALLOC && mt_counting(e->kind, e->flags) == MT_COUNT_IN_USE) {
            mt_lifetime l = {.device = e->device, .kind = e->kind, .stack = e->stack};
            mt_u64map_slot *s = mt_u64map_upsert(&allocs, agg_key(&l));
            if (!s) rc = -1;
            else {
                s->a += e->bytes;
                s->b++;
            }
        }
        if (rc == 0 && mt_tracker_event(p.t, e) < 0) rc = -1;
        if (p.oom) rc = -1;
    }
    if (rc == -2) {
        rc = -1; /* err says why */
    } else if (rc < 0) {
        fail(err, errlen, "%s: out of memory", a->path);
    } else if (st == MT_READ_TRUNCATED) {
        a->truncated = 1;
        a->truncated_msg = dup(mt_reader_error(r));
    } else if (st != MT_READ_END) {
        fail(err, errlen, "%s", mt_reader_error(r));
        rc = -1;
    }
    if (a->last_ns > a->duration_ns) a->duration_ns = a->last_ns;
    if (rc == 0) rc = finish_pass1(a, &p, &allocs, devs, n_devs);
    if (rc < 0 && err && !err[0]) fail(err, errlen, "%s: out of memory", a->path);
    for (size_t i = 0; i < n_devs; i++) free(devs[i].name);
    free(devs);
    free(p.tl);
    free(p.nvml);
    free(p.nvml_live);
    free(p.hist);
    mt_u64map_destroy(&allocs);
    mt_tracker_free(p.t);
    mt_reader_close(r);
    return rc;
}

int mt_analyze(const char *path, const mt_analyze_options *opt, mt_analysis **out, char *err,
               size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = 0;
    mt_analysis *a = calloc(1, sizeof *a);
    if (!a) return -1;
    a->path = strdup(path);
    a->comm = dup("");
    a->cmdline = dup("");
    a->hostname = dup("");
    a->frames = mt_frames_new();
    if (!a->path || !a->comm || !a->cmdline || !a->hostname || !a->frames ||
        run_pass1(a, opt, err, errlen) < 0 || run_pass2(a, opt, err, errlen) < 0) {
        if (err && errlen && !err[0]) fail(err, errlen, "%s: out of memory", path);
        mt_analysis_free(a);
        return -1;
    }
    /* A device whose peak was 0 has an empty snapshot; a marker-only allocation means "done". */
    for (size_t i = 0; i < a->n_devices + (a->host != NULL); i++) {
        mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        if (d->peak_stacks.n == 0) {
            free(d->peak_stacks.v);
            d->peak_stacks.v = NULL;
        }
    }
    *out = a;
    return 0;
}

static void free_device(mt_device_report *d)
{
    free((char *)d->name);
    free(d->peak_stacks.v);
    free(d->leaks.v);
    free(d->live_end.v);
    free(d->allocs.v);
    free(d->timeline);
    free(d->nvml);
}

void mt_analysis_free(mt_analysis *a)
{
    if (!a) return;
    for (size_t i = 0; i < a->n_devices; i++) free_device(&a->devices[i]);
    if (a->host) free_device(a->host);
    free(a->host);
    free(a->devices);
    for (size_t i = 0; i < a->n_failed; i++) free(a->failed[i].live.v);
    free(a->failed);
    for (size_t i = 0; i < a->n_warnings; i++) free(a->warnings[i]);
    free(a->warnings);
    for (size_t i = 0; i < a->n_threads; i++) free(a->threads[i].name);
    free(a->threads);
    mt_categorizer_free(a->categories);
    mt_frames_free(a->frames);
    free(a->truncated_msg);
    free(a->comm);
    free(a->cmdline);
    free(a->hostname);
    free(a->path);
    free(a);
}

const char *mt_device_root_name(const mt_device_report *d, char *buf, size_t len)
{
    if (d->u.is_host) snprintf(buf, len, "host");
    else if (d->u.device < 0) snprintf(buf, len, "cuda:?");
    else snprintf(buf, len, "cuda:%d", d->u.device);
    return buf;
}
