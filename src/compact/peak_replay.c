/* What was live at each device's peak, by stack (with tensors, by category too): pass 2, which
 * replays the trace up to the last peak, or, without tensors, pass 1's kept lists (mt_peak_keep,
 * analysis_parts.h) counted the same way. Pass 2 also feeds the failure watch (failure_replay.c)
 * on its way, and reads on for it alone, counting nothing more, when a failure comes later. */
#include <stdlib.h>
#include <string.h>

#include "analysis_parts.h"
#include "err_text.h" /* src/util: mt_err_text */

/* What was live at each device's peak, for every device in one replay: a lifetime was live at its
 * device's peak when it started at or before the peak event and ended after it. Pass 2 replays up
 * to the last peak; lifetimes that end after their device's peak are counted as they end
 * (on_release), those still live when the replay stops are counted then. Each lifetime is looked
 * at once, however many devices there are (a walk over the live set per device's peak made 8 KB
 * of trace take 15 s).
 *
 * With tensors (record --tensors) a tensor's category may only be final after its peak: a backward
 * tensor still live when the next optimizer step begins is a gradient, an optimizer temporary then
 * is state (categories.c). So the replay goes on until the first phase end after each device's
 * peak (or the trace's end), and a tensor live at the peak counts with the category it had when it
 * ended, if before that phase end, else right after it (mt_category_at: the tracker says when a
 * tensor was promoted). The replay also waits for the end of a backward pass after the peak: the
 * device's tensors live then, by their categories then, are by_category_after_backward. Both are
 * counted per tensor as above, never by a walk per device. */
typedef struct slot2 {
    mt_device_report *d;
    int reached;              /* the peak event was replayed */
    int categorize;           /* tensors by category (a GPU device of a tensor trace) */
    mt_after_peak ap;         /* what the categories wait for after the peak */
    uint64_t visible, driver; /* at the peak, for the NVML pairing */
    mt_breakdown_acc at_peak; /* GPU devices */
} slot2;

/* Sizes of the parameters [0], gradients [1] and optimizer state [2] at one moment. */
typedef struct size_lists {
    uint64_t *v[3];
    size_t n[3], cap[3];
    int oom;
} size_lists;

typedef struct pass2 {
    mt_tracker *t;
    mt_analysis *a;
    slot2 s[MT_N_SLOTS];
    size_lists at_peak_sizes[MT_N_SLOTS], after_bwd_sizes[MT_N_SLOTS];
    mt_u64map peak_map; /* agg_key (| category << CAT_SHIFT) -> bytes, count, for every device */
    size_t pending;     /* devices whose peak is not reached yet, or whose categories wait */
    int oom;
    int done; /* its own counts are final; the replay goes on for the failure watch alone */
} pass2;

#define CAT_SHIFT 33
#define CAT_MASK 0x3full

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
        rc = mt_category_fit_compute(s->v[0], s->n[0], s->v[2], s->n[2],
                                     copies ? (unsigned)copies : 2, &fit[1]);
    for (int k = 0; k < 3; k++) free(s->v[k]);
    memset(s, 0, sizeof *s);
    return rc;
}

/* A device is done when its peak was replayed and nothing about it waits any more. */
static void maybe_done(pass2 *p, slot2 *x)
{
    if (x->reached && !x->ap.waiting && !x->ap.waiting_backward && p->pending) p->pending--;
}

/* The backward pass after the peak of x's device has ended (at x->ap.backward_seq). */
static void backward_known(slot2 *x)
{
    x->d->after_backward_known = 1;
    x->d->after_backward_time_ns = x->ap.backward_time_ns;
    x->d->optimizer_stateless = x->ap.stateless;
}

/* The device of x has reached its peak; u: its counters right after the peak event. */
static void reach_peak(pass2 *p, slot2 *x, const mt_usage *u)
{
    mt_device_report *d = x->d;
    x->reached = 1;
    memcpy(d->by_kind_at_peak, u->by_kind, sizeof d->by_kind_at_peak);
    d->driver_at_peak = u->by_kind[MT_KIND_DRIVER];
    if (!u->is_host) {
        mt_breakdown_begin(&x->at_peak, &d->at_peak, p->a->frames, u, d->peak_time_ns);
        x->visible = mt_breakdown_visible(u);
        x->driver = u->by_kind[MT_KIND_DRIVER];
    }
    if (p->a->categories && !u->is_host) {
        x->categorize = 1;
        mt_after_peak_begin(&x->ap, p->a->categories);
    }
    maybe_done(p, x);
}

static void pass2_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    (void)time_ns;
    pass2 *p = ctx;
    if (p->done) return;
    size_t k = (size_t)mt_slot_key(u->device, u->is_host);
    slot2 *x = k < MT_N_SLOTS ? &p->s[k] : NULL;
    mt_device_report *d = x ? x->d : NULL;
    if (!d || x->reached || d->u.peak_seq != mt_tracker_seq(p->t) || d->u.peak == 0) return;
    reach_peak(p, x, u);
}

/* l was live at its device's peak (if the device has one and reached it): count it, `ended` when
 * it ends now (else the replay stopped with it live). */
static void count_at_peak(pass2 *p, const mt_lifetime *l, int ended)
{
    size_t k = mt_slot_of_lifetime(l);
    if (k >= MT_N_SLOTS || !p->s[k].reached || l->start_seq > p->s[k].d->u.peak_seq) return;
    slot2 *x = &p->s[k];
    mt_breakdown_add(&x->at_peak, l);
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    uint64_t key = mt_agg_key(l);
    if (x->categorize && l->kind == MT_KIND_TENSOR) {
        /* its category when it ended, if before the phase end after the peak; else then */
        unsigned cat = x->ap.waiting ? l->category : mt_category_at(l, x->ap.end_phase);
        if (cat >= MT_CAT_MAX) cat = MT_CAT_OTHER;
        (void)ended;
        x->d->by_category_at_peak[cat] += l->bytes;
        sizes_add(&p->at_peak_sizes[k], cat, l->bytes);
        key |= (uint64_t)cat << CAT_SHIFT;
    }
    mt_u64map_slot *m = mt_u64map_upsert(&p->peak_map, key);
    if (!m) {
        p->oom = 1;
        return;
    }
    m->a += l->bytes;
    m->b++;
}

/* l was live when the backward pass after its device's peak ended: count it there. */
static void count_after_backward(pass2 *p, const mt_lifetime *l)
{
    size_t k = mt_slot_of_lifetime(l);
    if (k >= MT_N_SLOTS || l->kind != MT_KIND_TENSOR || !p->s[k].categorize ||
        p->s[k].ap.waiting_backward || l->start_seq >= p->s[k].ap.backward_seq ||
        mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE)
        return;
    unsigned cat = mt_category_at(l, p->s[k].ap.backward_phase);
    if (cat >= MT_CAT_MAX) return;
    p->s[k].d->by_category_after_backward[cat] += l->bytes;
    sizes_add(&p->after_bwd_sizes[k], cat, l->bytes);
}

static void pass2_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    (void)why;
    if (((pass2 *)ctx)->done) return;
    /* it ends after its device's peak: reached is set only once the peak event was applied */
    count_at_peak(ctx, l, 1);
    count_after_backward(ctx, l);
}

static void pass2_still_live(void *ctx, const mt_lifetime *l)
{
    count_at_peak(ctx, l, 0);
    count_after_backward(ctx, l);
}

void mt_after_peak_begin(mt_after_peak *x, const mt_categorizer *c)
{
    *x = (mt_after_peak){.waiting = 1, .waiting_backward = 1};
    if (c) mt_categorizer_phases(c, &x->bwd_at_peak, &x->opt_at_peak);
}

int mt_after_peak_note(mt_after_peak *x, const mt_categorizer *c, const mt_tracker *t,
                       uint64_t now_rel)
{
    if (!x->waiting && !x->waiting_backward) return 0;
    uint64_t bwd, opt;
    mt_categorizer_phases(c, &bwd, &opt);
    int backward_now = 0;
    if (x->waiting_backward && bwd > x->bwd_at_peak) {
        x->waiting_backward = 0;
        x->backward_phase = mt_tracker_phase_ends(t);
        x->backward_seq = mt_tracker_seq(t);
        x->backward_time_ns = now_rel;
        x->stateless = mt_categorizer_stateless(c);
        backward_now = 1;
    }
    if (x->waiting && bwd + opt > x->bwd_at_peak + x->opt_at_peak) {
        x->waiting = 0;
        x->end_phase = mt_tracker_phase_ends(t);
    }
    return backward_now;
}

/* A phase has ended (before the event that told is applied): devices waiting for it take note. */
static void pass2_phase_end(void *ctx, int phase, uint64_t now)
{
    (void)phase;
    pass2 *p = ctx;
    if (p->done) return;
    uint64_t now_rel = mt_rel_time(now, p->a->header.start_monotonic_ns);
    for (size_t k = 1; k < MT_N_SLOTS; k++) {
        slot2 *x = &p->s[k];
        if (!x->ap.waiting && !x->ap.waiting_backward) continue;
        if (mt_after_peak_note(&x->ap, p->a->categories, p->t, now_rel)) backward_known(x);
        maybe_done(p, x);
    }
}

/* The per-device state of pass 2 for every device of a with a peak; NULL when out of memory. */
static pass2 *pass2_new(mt_analysis *a, uint64_t *last_seq)
{
    pass2 *p = calloc(1, sizeof *p); /* ~60 KiB: per-slot state for every possible device */
    if (!p) return NULL;
    p->a = a;
    *last_seq = 0;
    for (size_t i = 0; i < a->n_devices + (a->host != NULL); i++) {
        mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        size_t k = (size_t)mt_slot_key(d->u.device, d->u.is_host);
        if (k < MT_N_SLOTS) p->s[k].d = d;
        if (d->u.peak == 0) continue;
        p->pending++;
        if (d->u.peak_seq > *last_seq) *last_seq = d->u.peak_seq;
    }
    return p;
}

/* Every lifetime live at a peak has been counted: the devices' lists, breakdowns and fits. */
static void pass2_finish(pass2 *p, mt_analysis *a)
{
    mt_stack_list lists[MT_N_SLOTS];
    if (!p->oom && mt_stack_lists_by_prefix(&p->peak_map, lists, MT_N_SLOTS) == 0) {
        for (size_t k = 0; k < MT_N_SLOTS; k++) {
            if (p->s[k].d && p->s[k].reached) p->s[k].d->peak_stacks = lists[k];
            else free(lists[k].v);
        }
    } else {
        p->oom = 1;
    }
    for (size_t k = 0; k < MT_N_SLOTS; k++) {
        slot2 *x = &p->s[k];
        mt_device_report *d = x->d;
        if (x->at_peak.b) {
            if (mt_breakdown_end(&x->at_peak) < 0) p->oom = 1;
            mt_breakdown_set_process(&d->at_peak, d->nvml, d->n_nvml, x->visible, x->driver);
        }
        if (!x->categorize) continue;
        d->categories_known = 1;
        if (sizes_fit(&p->at_peak_sizes[k], a->categories, d->fit_at_peak) < 0) p->oom = 1;
        if (d->after_backward_known &&
            sizes_fit(&p->after_bwd_sizes[k], a->categories, d->fit_after_backward) < 0)
            p->oom = 1;
    }
}

static void pass2_free(pass2 *p)
{
    if (!p) return;
    mt_tracker_free(p->t);
    mt_u64map_destroy(&p->peak_map);
    for (size_t k = 0; k < MT_N_SLOTS; k++) {
        mt_u64map_destroy(&p->s[k].at_peak.owners);
        for (int j = 0; j < 3; j++) {
            free(p->at_peak_sizes[k].v[j]);
            free(p->after_bwd_sizes[k].v[j]);
        }
    }
    free(p);
}

/* Pass 2's own work is not done: a device's peak or categories wait for more of the trace. */
static int pass2_wants(const pass2 *p, uint64_t last_seq)
{
    /* without categories the replay ends at the last peak; with them, when nothing waits */
    return p->pending && (p->a->categories || mt_tracker_seq(p->t) < last_seq);
}

int mt_peaks_replay(mt_analysis *a, const mt_analyze_options *opt, char *err, size_t errlen)
{
    uint64_t last_seq;
    pass2 *p = pass2_new(a, &last_seq);
    if (!p) {
        mt_err_text(err, errlen, "%s: out of memory in pass 2", a->path);
        return -1;
    }
    mt_failure_watch w;
    mt_failure_watch_begin(a, &w);
    mt_reader *r = NULL;
    int rc = 0;
    if (!p->pending && !mt_failure_watch_wants(&w)) goto out;
    if (!(r = mt_reader_open_fd(a->fd, a->path, err, errlen))) {
        rc = -1;
        goto out;
    }
    mt_tracker_hooks hooks = {.ctx = p, .on_usage = pass2_usage, .on_release = pass2_release,
                              .on_phase_end = pass2_phase_end};
    p->t = mt_tracker_new(&hooks);
    rc = p->t ? 0 : -1;
    if (p->t && a->categories) mt_tracker_set_categorizer(p->t, a->categories);
    const mt_record *rec; /* in the reader's batch, not copied: valid until the next read */
    uint64_t n = 0;
    while (rc == 0 && !p->oom) {
        if (!p->done && !pass2_wants(p, last_seq)) {
            /* what is live now was live at the peaks it was live at: counted as it is, as if the
             * replay ended here, and the hooks count nothing more */
            mt_tracker_foreach_live(p->t, pass2_still_live, p);
            p->done = 1;
        }
        if ((p->done && !mt_failure_watch_wants(&w)) || mt_reader_next_ref(r, &rec) != MT_READ_RECORD)
            break;
        if (rec->type == MT_REC_EVENT && (mt_failure_watch_event(a, &w, &rec->u.event, p->t) < 0 ||
                                          mt_tracker_event(p->t, &rec->u.event) < 0))
            rc = -1;
        if (opt && opt->progress && ++n % MT_PROGRESS_EVERY == 0)
            opt->progress(opt->progress_ctx, 2,
                          (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
    }
    if (rc == 0 && !p->done) mt_tracker_foreach_live(p->t, pass2_still_live, p);
    if (rc == 0) pass2_finish(p, a);
    if (p->oom) rc = -1;
    if (rc < 0) mt_err_text(err, errlen, "%s: out of memory in pass 2", a->path);
out:
    mt_failure_watch_end(&w);
    mt_reader_close(r);
    pass2_free(p);
    return rc;
}

/* ---- what was live at each peak, from pass 1 ------------------------------------------------- */

/* Counts what was live at each device's peak from pass 1's lists and its tracker's live set; with
 * `categorized`, with what pass 1 noted after each peak in place of what pass 2 would have. */
int mt_peaks_from_kept(mt_analysis *a, mt_peak_keep *const *keep, const mt_tracker *t,
                       int categorized)
{
    uint64_t last_seq;
    pass2 *p = pass2_new(a, &last_seq);
    if (!p) return -1;
    for (size_t k = 0; k < MT_N_SLOTS; k++) {
        slot2 *x = &p->s[k];
        const mt_peak_keep *pk = keep[k];
        if (!x->d || !pk || x->d->u.peak == 0 || pk->peak_seq != x->d->u.peak_seq) continue;
        reach_peak(p, x, &pk->at_peak);
        if (x->categorize && categorized) {
            x->ap = pk->after; /* what pass 1 noted after the peak, in place of the replay's */
            if (!x->ap.waiting_backward) backward_known(x);
        }
        for (size_t i = 0; i < pk->n; i++)
            count_at_peak(p, &pk->ended[i], 1);
        for (size_t i = 0; categorized && i < pk->n_after; i++)
            count_after_backward(p, &pk->after_backward[i]);
    }
    mt_tracker_foreach_live(t, pass2_still_live, p);
    pass2_finish(p, a);
    int rc = p->oom ? -1 : 0;
    pass2_free(p);
    return rc;
}
