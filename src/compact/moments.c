/* Moments: each device's usage over time at a finer grain than the analysis keeps, split into
 * series, and what was live at chosen moments, for viewers where a person points at a moment
 * (the HTML report). compact.h says what comes out; this file says how.
 *
 *   read 1  a tracker with three hooks. on_start/on_release keep, per device, the live bytes of
 *           every series label (mt_series_key: the allocation's kind; only allocations counted
 *           in in_use, so the labels always add up to in_use); a key whose labels change while
 *           an allocation lives (categories) splits the tracker's counters at each point instead.
 *           With categories the tracker categorizes tensors as the analysis did.
 *           on_usage records a point whenever the device's bytes or their split changed:
 *             every point,                   when the trace has at most `exact` events;
 *             per time bucket, the highest   (the first, in file order, of the bucket's highest
 *             and the last point,             in_use) otherwise: every peak stays exact and the
 *                                             curve ends each bucket where it really was;
 *           and per time span (`spans` of them) the highest point: the moments to snapshot.
 *   read 2  a fresh tracker up to the last chosen moment, whose on_start/on_release keep each
 *           device's live bytes by stack; after the event of each moment (event numbers are the
 *           same in both reads and in the analysis) the device's stacks are cut to the `top`
 *           largest plus "the rest".
 * Both reads stop early or fail cleanly on a damaged file exactly as the analysis did: the same
 * reader gives the same events.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define PROGRESS_EVERY 65536

/* ---- series by kind ---------------------------------------------------------------------------- */

static const char *kind_label(void *ctx, size_t key)
{
    (void)ctx;
    return mt_kind_name((unsigned)key);
}

static size_t kind_of(void *ctx, const mt_lifetime *l)
{
    (void)ctx;
    return l->kind;
}

static const mt_series_key by_kind = {.by = "kind", .n = MT_KIND_MAX_, .name = kind_label,
                                      .of = kind_of};

const mt_series_key *mt_series_by_kind(void) { return &by_kind; }

/* ---- series by category ------------------------------------------------------------------------
 * Keys: 0..MT_KIND_MAX_-1 the kinds (MT_KIND_TENSOR: tensors with no category), then
 * MT_KIND_MAX_ + c for category c >= 1. A tensor's category can change while it lives (a backward
 * temporary that outlives its pass is a gradient), so the split comes from the tracker's counters
 * (by_kind, by_category), not from each allocation's start. */

static const char *category_label(void *ctx, size_t key)
{
    if (key < MT_KIND_MAX_) return mt_kind_name((unsigned)key);
    return mt_category_name(ctx, (unsigned)(key - MT_KIND_MAX_));
}

static void category_split(void *ctx, const mt_usage *u, uint64_t *values)
{
    const mt_categorizer *c = ctx;
    size_t cats = mt_category_count(c);
    if (cats > MT_CAT_MAX) cats = MT_CAT_MAX;
    uint64_t categorized = 0;
    for (size_t k = 1; k < cats; k++) {
        values[MT_KIND_MAX_ + k] = u->by_category[k];
        categorized += u->by_category[k];
    }
    for (unsigned k = 0; k < MT_KIND_MAX_; k++) /* what counts in in_use (as moments' kinds) */
        values[k] = mt_kind_counts(k) ? u->by_kind[k] : 0;
    uint64_t t = values[MT_KIND_TENSOR];
    values[MT_KIND_TENSOR] = t > categorized ? t - categorized : 0;
}

int mt_series_by_category(const mt_analysis *a, mt_series_key *out)
{
    if (!a->categories) return -1;
    size_t cats = mt_category_count(a->categories);
    *out = (mt_series_key){.by = "category", .n = MT_KIND_MAX_ + (cats < MT_CAT_MAX ? cats : MT_CAT_MAX),
                           .name = category_label, .split = category_split, .ctx = a->categories};
    return 0;
}

/* ---- read 1 ------------------------------------------------------------------------------------- */

typedef struct bucket {
    mt_usage_point max, last;
    int have;
} bucket;

typedef struct span {
    mt_usage_point best;
    int have;
} span;

/* One device (or the host) as read 1 sees it. */
typedef struct slot {
    int32_t device;
    int is_host;
    uint64_t *sums;          /* live bytes by label, now */
    uint64_t *last_row;      /* the split of the last point recorded */
    mt_usage_point last_pt;
    int have_last;
    uint64_t changes;
    mt_usage_point *pts;     /* every change (when the trace is small) */
    uint64_t *rows;
    size_t n, cap;
    bucket *b;               /* or per bucket (rows: 2 per bucket, max then last) */
    uint64_t *brows;
    span *spans;
} slot;

typedef struct read1 {
    const mt_series_key *key;
    size_t ns;               /* labels */
    mt_tracker *t;
    slot *slots;
    size_t n_slots;
    int32_t index[256];      /* device ordinal -> slot + 1 */
    int32_t host_index;      /* slot + 1 of the host */
    size_t points, spans;
    uint64_t width, span_width, start;
    size_t max_live;         /* the largest live set (every device), for read 2's cost */
    int exact;
    int oom;
} read1;

static slot *slot_for(read1 *r, int32_t device, int is_host)
{
    if (is_host && r->host_index) return &r->slots[r->host_index - 1];
    if (!is_host && device >= 0 && device < 256 && r->index[device])
        return &r->slots[r->index[device] - 1];
    if (!is_host && (device < 0 || device >= 256))
        for (size_t i = 0; i < r->n_slots; i++)
            if (!r->slots[i].is_host && r->slots[i].device == device) return &r->slots[i];
    slot *ns = realloc(r->slots, (r->n_slots + 1) * sizeof *ns);
    if (!ns) {
        r->oom = 1;
        return NULL;
    }
    r->slots = ns;
    slot *s = &r->slots[r->n_slots];
    *s = (slot){.device = is_host ? -1 : device, .is_host = is_host};
    s->sums = calloc(r->ns, sizeof *s->sums);
    s->last_row = calloc(r->ns, sizeof *s->last_row);
    s->spans = calloc(r->spans, sizeof *s->spans);
    if (!r->exact) {
        s->b = calloc(r->points, sizeof *s->b);
        s->brows = calloc(r->points * 2 * r->ns, sizeof *s->brows);
    }
    if (!s->sums || !s->last_row || !s->spans || (!r->exact && (!s->b || !s->brows))) {
        free(s->sums);
        free(s->last_row);
        free(s->spans);
        free(s->b);
        free(s->brows);
        r->oom = 1;
        return NULL;
    }
    r->n_slots++;
    if (is_host) r->host_index = (int32_t)r->n_slots;
    else if (device >= 0 && device < 256) r->index[device] = (int32_t)r->n_slots;
    return s;
}

/* The slot a lifetime's bytes count on, or NULL (not counted in in_use, or no device). */
static slot *counted_slot(read1 *r, const mt_lifetime *l)
{
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return NULL;
    int host = mt_is_host(l->kind, l->flags);
    if (!host && l->device < 0) return NULL; /* unknown device: the tracker counts it nowhere */
    return slot_for(r, l->device, host);
}

static size_t label_of(const read1 *r, const mt_lifetime *l)
{
    size_t k = r->key->of(r->key->ctx, l);
    return k < r->ns ? k : r->ns - 1;
}

static void on_start(void *ctx, const mt_lifetime *l)
{
    read1 *r = ctx;
    if (r->key->split) return;
    slot *s = counted_slot(r, l);
    if (s) s->sums[label_of(r, l)] += l->bytes;
}

static void on_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    (void)why;
    read1 *r = ctx;
    if (r->key->split) return;
    slot *s = counted_slot(r, l);
    if (s) s->sums[label_of(r, l)] -= l->bytes;
}

static int push_point(read1 *r, slot *s, const mt_usage_point *p)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        mt_usage_point *np = realloc(s->pts, ncap * sizeof *np);
        if (!np) return -1;
        s->pts = np;
        uint64_t *nr = realloc(s->rows, ncap * r->ns * sizeof *nr);
        if (!nr) return -1;
        s->rows = nr;
        s->cap = ncap;
    }
    s->pts[s->n] = *p;
    memcpy(&s->rows[s->n * r->ns], s->sums, r->ns * sizeof *s->sums);
    s->n++;
    return 0;
}

static void on_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    read1 *r = ctx;
    slot *s = slot_for(r, u->device, u->is_host);
    if (!s) return;
    size_t rowsz = r->ns * sizeof *s->sums;
    if (r->key->split) r->key->split(r->key->ctx, u, s->sums);
    if (s->have_last && s->last_pt.in_use == u->in_use && memcmp(s->last_row, s->sums, rowsz) == 0)
        return; /* a pool's reservation or a mapping changed; the bytes in use did not */
    mt_usage_point p = {mt_rel_time(time_ns, r->start), mt_tracker_seq(r->t), u->in_use};
    s->changes++;
    s->last_pt = p;
    s->have_last = 1;
    memcpy(s->last_row, s->sums, rowsz);
    if (r->exact) {
        if (push_point(r, s, &p) < 0) r->oom = 1;
    } else {
        uint64_t i = p.time_ns / r->width;
        if (i >= r->points) i = r->points - 1;
        bucket *b = &s->b[i];
        uint64_t *rows = &s->brows[i * 2 * r->ns];
        if (!b->have || p.in_use > b->max.in_use) {
            b->max = p;
            memcpy(rows, s->sums, rowsz);
        }
        b->last = p;
        memcpy(rows + r->ns, s->sums, rowsz);
        b->have = 1;
    }
    uint64_t j = p.time_ns / r->span_width;
    if (j >= r->spans) j = r->spans - 1;
    span *sp = &s->spans[j];
    if (!sp->have || p.in_use > sp->best.in_use) {
        sp->best = p;
        sp->have = 1;
    }
}

static void slot_free(slot *s)
{
    free(s->sums);
    free(s->last_row);
    free(s->pts);
    free(s->rows);
    free(s->b);
    free(s->brows);
    free(s->spans);
}

/* Feeds every event of the trace at `path` to t, up to event number `until` (0: all). */
static int replay(const mt_analysis *a, mt_tracker *t, uint64_t until, const mt_moments_options *opt,
                  int read, int (*after)(void *ctx), void *ctx, char *err, size_t errlen)
{
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen); /* a spooled pipe too */
    if (!r) return -1;
    const mt_record *rec; /* in the reader's batch, not copied: valid until the next read */
    uint64_t n = 0;
    int rc = 0;
    while (rc == 0 && (!until || mt_tracker_seq(t) < until) &&
           mt_reader_next_ref(r, &rec) == MT_READ_RECORD) {
        if (rec->type != MT_REC_EVENT) continue;
        if (mt_tracker_event(t, &rec->u.event) < 0) rc = -1;
        else if (after) rc = after(ctx);
        if (opt && opt->progress && ++n % PROGRESS_EVERY == 0)
            opt->progress(opt->progress_ctx, read,
                          (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
    }
    mt_reader_close(r);
    if (rc < 0) snprintf(err, errlen, "%s: out of memory", a->path);
    return rc;
}

static int after_read1(void *ctx)
{
    read1 *r = ctx;
    size_t live = mt_tracker_live_count(r->t);
    if (live > r->max_live) r->max_live = live;
    return r->oom ? -1 : 0;
}

static int cmp_point(const void *pa, const void *pb)
{
    const mt_usage_point *x = pa, *y = pb;
    if (x->time_ns != y->time_ns) return x->time_ns < y->time_ns ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The points of slot s into d, time order. */
static int take_points(const read1 *r, slot *s, mt_device_moments *d)
{
    size_t ns = r->ns, n = 0;
    d->changes = s->changes;
    d->downsampled = !r->exact;
    d->bucket_ns = r->exact ? 0 : r->width;
    if (r->exact) {
        n = s->n;
    } else {
        for (size_t i = 0; i < r->points; i++)
            if (s->b[i].have) n += 1 + (s->b[i].last.seq != s->b[i].max.seq);
    }
    if (!n) return 0;
    /* sort an index so the rows follow their points */
    typedef struct { mt_usage_point p; const uint64_t *row; } ref;
    ref *v = malloc(n * sizeof *v);
    d->points = malloc(n * sizeof *d->points);
    d->series = malloc(n * ns * sizeof *d->series);
    if (!v || !d->points || !d->series) {
        free(v);
        return -1;
    }
    size_t k = 0;
    if (r->exact) {
        for (size_t i = 0; i < s->n; i++) v[k++] = (ref){s->pts[i], &s->rows[i * ns]};
    } else {
        for (size_t i = 0; i < r->points; i++) {
            const bucket *b = &s->b[i];
            if (!b->have) continue;
            const uint64_t *rows = &s->brows[i * 2 * ns];
            v[k++] = (ref){b->max, rows};
            if (b->last.seq != b->max.seq) v[k++] = (ref){b->last, rows + ns};
        }
    }
    /* points are unique by seq, so sorting (time, seq) is a total order */
    for (size_t i = 1; i < n; i++) { /* nearly sorted already: insertion sort */
        ref x = v[i];
        size_t j = i;
        while (j > 0 && cmp_point(&v[j - 1].p, &x.p) > 0) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    for (size_t i = 0; i < n; i++) {
        d->points[i] = v[i].p;
        memcpy(&d->series[i * ns], v[i].row, ns * sizeof *d->series);
    }
    d->n_points = n;
    free(v);
    return 0;
}

/* The moments of slot s into d: the highest point of every span with points (of every k-th such
 * span when thinned), and the peak. */
static int take_moments(const read1 *r, slot *s, const mt_device_report *rep, size_t k,
                        mt_device_moments *d)
{
    size_t n = 0;
    for (size_t i = 0; i < r->spans; i++) n += s->spans[i].have;
    d->moments = calloc(n + 1, sizeof *d->moments);
    if (!d->moments) return -1;
    int have_peak = 0;
    for (size_t i = 0, seen = 0; i < r->spans; i++) {
        if (!s->spans[i].have || seen++ % k) continue;
        const mt_usage_point *p = &s->spans[i].best;
        mt_moment *m = &d->moments[d->n_moments++];
        *m = (mt_moment){.time_ns = p->time_ns, .seq = p->seq, .in_use = p->in_use,
                         .from_ns = i * r->span_width, .to_ns = (i + 1) * r->span_width};
        m->is_peak = rep->u.peak && p->seq == rep->u.peak_seq;
        have_peak |= m->is_peak;
    }
    if (rep->u.peak && !have_peak) {
        /* the peak is its span's highest point unless times run backwards in file order across
         * a span border; it is always a moment */
        mt_moment pk = {.time_ns = rep->peak_time_ns, .seq = rep->u.peak_seq,
                        .in_use = rep->u.peak, .from_ns = rep->peak_time_ns,
                        .to_ns = rep->peak_time_ns + 1, .is_peak = 1};
        size_t at = 0;
        while (at < d->n_moments && d->moments[at].time_ns <= pk.time_ns) at++;
        memmove(&d->moments[at + 1], &d->moments[at], (d->n_moments - at) * sizeof pk);
        d->moments[at] = pk;
        d->n_moments++;
    }
    return 0;
}

/* ---- read 2 ------------------------------------------------------------------------------------- */

typedef struct want {
    uint64_t seq;
    mt_device_moments *d;
    mt_moment *m;
} want;

/* Read 2 keeps, for every device with moments, its live bytes and allocations by stack as
 * allocations start and end (the tracker's on_start/on_release: the live set is exactly what
 * started and has not been released), so a snapshot costs the stacks live on that device, not
 * a walk of every live allocation of every device: a trace of 256 devices over a live set of
 * 600 000 would otherwise walk it for each device's peak. */
typedef struct dev_stacks {
    mt_u64map map;  /* stack key -> a: bytes, b: allocations (0: none live now) */
    size_t nonzero; /* keys with allocations live */
    int wanted;
} dev_stacks;

#define HOST_SLOT (MT_MAX_DEVICE_ORDINAL + 1)

typedef struct read2 {
    mt_tracker *t;
    want *w;
    size_t n, next;
    size_t top;
    dev_stacks dev[HOST_SLOT + 1]; /* device ordinals 0..MT_MAX_DEVICE_ORDINAL, then the host */
    int oom;
} read2;

static dev_stacks *stacks_of(read2 *r, const mt_lifetime *l)
{
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return NULL;
    int host = mt_is_host(l->kind, l->flags);
    if (!host && (l->device < 0 || l->device > MT_MAX_DEVICE_ORDINAL)) return NULL;
    dev_stacks *d = &r->dev[host ? HOST_SLOT : l->device];
    return d->wanted ? d : NULL;
}

static void r2_start(void *ctx, const mt_lifetime *l)
{
    read2 *r = ctx;
    dev_stacks *d = stacks_of(r, l);
    if (!d) return;
    mt_u64map_slot *m = mt_u64map_upsert(&d->map, mt_stack_key(l->stack, l->kind == MT_KIND_DRIVER));
    if (!m) {
        r->oom = 1;
        return;
    }
    if (m->b++ == 0) d->nonzero++;
    m->a += l->bytes;
}

static void r2_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    (void)why;
    read2 *r = ctx;
    dev_stacks *d = stacks_of(r, l);
    mt_u64map_slot *m = d ? mt_u64map_find(&d->map, mt_stack_key(l->stack, l->kind == MT_KIND_DRIVER))
                          : NULL;
    if (!m || !m->b) return; /* started before an out-of-memory: r->oom already says so */
    m->a -= l->bytes;
    if (--m->b == 0) d->nonzero--;
}

/* Drops the keys with nothing live when they are most of the map, so a snapshot's cost stays
 * the stacks live now (plus those started since the last one), not every stack ever seen. */
static int compact_stacks(dev_stacks *d)
{
    if (d->map.len <= 2 * d->nonzero + 64) return 0;
    mt_u64map fresh = {0};
    for (size_t i = 0; i < d->map.cap; i++) {
        const mt_u64map_slot *s = &d->map.slots[i];
        if (!s->used || !s->b) continue;
        mt_u64map_slot *n = mt_u64map_upsert(&fresh, s->key);
        if (!n) {
            mt_u64map_destroy(&fresh);
            return -1;
        }
        n->a = s->a;
        n->b = s->b;
    }
    mt_u64map_destroy(&d->map);
    d->map = fresh;
    return 0;
}

static int snapshot(read2 *r, const want *w)
{
    if (r->oom) return -1;
    int32_t dev = w->d->device;
    if (!w->d->is_host && (dev < 0 || dev > MT_MAX_DEVICE_ORDINAL)) return 0; /* none such */
    dev_stacks *d = &r->dev[w->d->is_host ? HOST_SLOT : dev];
    if (compact_stacks(d) < 0) return -1;
    mt_moment *m = w->m;
    /* the top stacks by a bounded heap (keys with nothing live are skipped) */
    return mt_stack_list_top_from_map(&d->map, r->top, &m->top, &m->rest_bytes, &m->rest_count,
                                      &m->rest_stacks);
}

static int after_read2(void *ctx)
{
    read2 *r = ctx;
    uint64_t seq = mt_tracker_seq(r->t);
    for (; r->next < r->n && r->w[r->next].seq <= seq; r->next++)
        if (r->w[r->next].seq == seq && snapshot(r, &r->w[r->next]) < 0) return -1;
    return 0;
}

static int cmp_want(const void *pa, const void *pb)
{
    const want *x = pa, *y = pb;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int run_read2(const mt_analysis *a, mt_moments *mo, const mt_moments_options *opt,
                     size_t top, char *err, size_t errlen)
{
    read2 r = {.top = top};
    for (size_t i = 0; i < mo->n_devices; i++) r.n += mo->devices[i].n_moments;
    if (!r.n) return 0;
    r.w = malloc(r.n * sizeof *r.w);
    if (!r.w) {
        snprintf(err, errlen, "%s: out of memory", a->path);
        return -1;
    }
    size_t k = 0;
    uint64_t last = 0;
    for (size_t i = 0; i < mo->n_devices; i++)
        for (size_t j = 0; j < mo->devices[i].n_moments; j++) {
            mt_moment *m = &mo->devices[i].moments[j];
            r.w[k++] = (want){m->seq, &mo->devices[i], m};
            if (m->seq > last) last = m->seq;
        }
    qsort(r.w, r.n, sizeof *r.w, cmp_want);
    for (size_t i = 0; i < mo->n_devices; i++) {
        const mt_device_moments *d = &mo->devices[i];
        if (!d->n_moments) continue;
        if (d->is_host) r.dev[HOST_SLOT].wanted = 1;
        else if (d->device >= 0 && d->device <= MT_MAX_DEVICE_ORDINAL) r.dev[d->device].wanted = 1;
    }
    mt_tracker_hooks hooks = {.ctx = &r, .on_start = r2_start, .on_release = r2_release};
    r.t = mt_tracker_new(&hooks);
    int rc = r.t ? replay(a, r.t, last, opt, 2, after_read2, &r, err, errlen) : -1;
    if (rc < 0 && !err[0]) snprintf(err, errlen, "%s: out of memory", a->path);
    mt_tracker_free(r.t);
    for (size_t i = 0; i <= HOST_SLOT; i++) mt_u64map_destroy(&r.dev[i].map);
    free(r.w);
    return rc;
}

/* ---- the whole ---------------------------------------------------------------------------------- */

void mt_moments_free(mt_moments *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_devices; i++) {
        mt_device_moments *d = &m->devices[i];
        free(d->points);
        free(d->series);
        for (size_t k = 0; k < d->n_moments; k++) free(d->moments[k].top.v);
        free(d->moments);
    }
    free(m->devices);
    free(m->series_names);
    free(m);
}

static int fill(const mt_analysis *a, read1 *r, mt_moments *mo, uint64_t work)
{
    /* read 2 visits every live allocation once per moment: keep every k-th span's moment when
     * all of them would visit more than `work` (each device keeps its peak) */
    size_t wanted = 0;
    for (size_t i = 0; i < r->n_slots; i++)
        for (size_t k = 0; k < r->spans; k++) wanted += r->slots[i].spans[k].have;
    uint64_t cost = (uint64_t)wanted * (r->max_live ? r->max_live : 1);
    mo->thinned = cost > work ? (size_t)((cost + work - 1) / work) : 1;
    mo->spans = r->spans;
    mo->series_by = r->key->by;
    mo->n_series = r->ns;
    mo->series_names = malloc(r->ns * sizeof *mo->series_names);
    mo->n_devices = a->n_devices + (a->host != NULL);
    mo->devices = calloc(mo->n_devices ? mo->n_devices : 1, sizeof *mo->devices);
    if (!mo->series_names || !mo->devices) return -1;
    for (size_t k = 0; k < r->ns; k++) mo->series_names[k] = r->key->name(r->key->ctx, k);
    for (size_t i = 0; i < mo->n_devices; i++) {
        const mt_device_report *rep = i < a->n_devices ? &a->devices[i] : a->host;
        mt_device_moments *d = &mo->devices[i];
        d->device = rep->u.is_host ? -1 : rep->u.device;
        d->is_host = rep->u.is_host;
        slot *s = NULL;
        for (size_t k = 0; k < r->n_slots && !s; k++)
            if (r->slots[k].is_host == d->is_host && (d->is_host || r->slots[k].device == d->device))
                s = &r->slots[k];
        if (s && (take_points(r, s, d) < 0 || take_moments(r, s, rep, mo->thinned, d) < 0))
            return -1;
    }
    return 0;
}

int mt_moments_compute(const mt_analysis *a, const mt_moments_options *opt, mt_moments **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = 0;
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    read1 r = {.key = opt && opt->series ? opt->series : mt_series_by_kind(),
               .points = opt && opt->points ? opt->points : MT_MOMENTS_POINTS,
               .spans = opt && opt->spans ? opt->spans : MT_MOMENTS_SPANS,
               .start = a->header.start_monotonic_ns};
    size_t top = opt && opt->top ? opt->top : MT_MOMENTS_TOP;
    uint64_t work = opt && opt->work ? opt->work : MT_MOMENTS_WORK;
    /* buckets cost memory per device: a trace of many devices gets fewer each */
    size_t n_dev = a->n_devices + (a->host != NULL);
    if (n_dev > 8 && r.points > 256) {
        size_t fewer = r.points * 8 / n_dev;
        r.points = fewer > 256 ? fewer : 256;
    }
    r.ns = r.key->n ? r.key->n : 1;
    r.exact = a->events <= (opt && opt->exact ? opt->exact : MT_MOMENTS_EXACT);
    r.width = a->duration_ns / r.points + 1;
    r.span_width = a->duration_ns / r.spans + 1;
    mt_moments *mo = calloc(1, sizeof *mo);
    mt_tracker_hooks hooks = {.ctx = &r, .on_usage = on_usage, .on_release = on_release,
                              .on_start = on_start};
    r.t = mt_tracker_new(&hooks);
    /* tensors get their categories as in the analysis (by_category for a split by category) */
    if (r.t && a->categories) mt_tracker_set_categorizer(r.t, a->categories);
    int rc = mo && r.t ? 0 : -1;
    if (rc == 0) rc = replay(a, r.t, 0, opt, 1, after_read1, &r, err, errlen);
    if (rc == 0 && r.oom) rc = -1;
    if (rc == 0) {
        mo->top = top;
        rc = fill(a, &r, mo, work);
    }
    mt_tracker_free(r.t);
    for (size_t i = 0; i < r.n_slots; i++) slot_free(&r.slots[i]);
    free(r.slots);
    if (rc == 0) rc = run_read2(a, mo, opt, top, err, errlen);
    if (rc < 0) {
        if (!err[0]) snprintf(err, errlen, "%s: out of memory", a->path);
        mt_moments_free(mo);
        return -1;
    }
    *out = mo;
    return 0;
}
