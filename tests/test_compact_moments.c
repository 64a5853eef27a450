/* Moments (src/compact/moments.c): the finer timeline with its series, the peaks it keeps, and
 * the live sets at chosen moments, checked against an independent replay of the same trace and
 * against the analysis, on synthetic traces and on every GPU fixture. */

#include "test_compact_fixture.h"
#include "trace/synthetic.h"

#define A ((uint64_t)0x7f0000000000)
#define SEG (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED)

static mt_moments *moments_of(const mt_analysis *a, const mt_moments_options *opt)
{
    char err[512] = "";
    mt_moments *m = NULL;
    cr_assert_eq(mt_moments_compute(a, opt, &m, err, sizeof err), 0, "%s", err);
    cr_assert(m);
    cr_assert_eq(m->n_devices, a->n_devices + (a->host != NULL));
    return m;
}

static const mt_device_report *report_at(const mt_analysis *a, size_t i)
{
    return i < a->n_devices ? &a->devices[i] : a->host;
}

static int cmp_stat(const void *pa, const void *pb) /* as the analysis sorts its lists */
{
    const mt_stack_stat *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    if (a->driver != b->driver) return a->driver > b->driver ? -1 : 1;
    return a->stack < b->stack ? -1 : a->stack > b->stack;
}

/* The analysis' peak stacks summed by (stack, driver), sorted as the analysis sorts. */
static mt_stack_list peak_by_stack(const mt_device_report *rep)
{
    mt_stack_list l = {calloc(rep->peak_stacks.n + 1, sizeof(mt_stack_stat)), 0};
    cr_assert(l.v);
    for (size_t i = 0; i < rep->peak_stacks.n; i++) {
        const mt_stack_stat *x = &rep->peak_stacks.v[i];
        size_t k = 0;
        while (k < l.n && !(l.v[k].stack == x->stack && l.v[k].driver == x->driver)) k++;
        if (k == l.n) l.v[l.n++] = (mt_stack_stat){.stack = x->stack, .driver = x->driver};
        l.v[k].bytes += x->bytes;
        l.v[k].count += x->count;
    }
    qsort(l.v, l.n, sizeof *l.v, cmp_stat);
    return l;
}

/* Every device's points: time order, series that add up to in_use, the peak among them; every
 * moment's stacks add up to its in_use; the peak is a moment and its stacks are the analysis'. */
static void check_moments(const mt_analysis *a, const mt_moments *m, size_t top)
{
    for (size_t i = 0; i < m->n_devices; i++) {
        const mt_device_report *rep = report_at(a, i);
        const mt_device_moments *d = &m->devices[i];
        char root[32];
        mt_device_root_name(rep, root, sizeof root);
        cr_expect_eq(d->is_host, rep->u.is_host);
        uint64_t max = 0;
        int peak_seen = !rep->u.peak;
        for (size_t k = 0; k < d->n_points; k++) {
            const mt_usage_point *p = &d->points[k];
            if (k) {
                const mt_usage_point *q = &d->points[k - 1];
                cr_expect(q->time_ns < p->time_ns || (q->time_ns == p->time_ns && q->seq < p->seq),
                          "%s: points out of order at %zu", root, k);
            }
            uint64_t sum = 0;
            for (size_t s = 0; s < m->n_series; s++) sum += d->series[k * m->n_series + s];
            cr_expect_eq(sum, p->in_use, "%s: point %zu: series %llu != in use %llu", root, k,
                         (unsigned long long)sum, (unsigned long long)p->in_use);
            if (p->in_use > max) max = p->in_use;
            if (p->seq == rep->u.peak_seq) {
                peak_seen = 1;
                cr_expect_eq(p->in_use, rep->u.peak, "%s: the peak's point", root);
                cr_expect_eq(p->time_ns, rep->peak_time_ns, "%s: the peak's time", root);
            }
        }
        cr_expect_eq(max, rep->u.peak, "%s: highest point %llu != peak %llu", root,
                     (unsigned long long)max, (unsigned long long)rep->u.peak);
        cr_expect(peak_seen, "%s: the peak is not a point", root);
        int peak_moment = 0;
        for (size_t k = 0; k < d->n_moments; k++) {
            const mt_moment *mo = &d->moments[k];
            if (k) cr_expect(d->moments[k - 1].time_ns <= mo->time_ns, "%s: moments out of order", root);
            cr_expect(mo->from_ns <= mo->time_ns && mo->time_ns < mo->to_ns, "%s: span", root);
            cr_expect(mo->top.n <= top);
            uint64_t sum = mo->rest_bytes;
            for (size_t s = 0; s < mo->top.n; s++) {
                sum += mo->top.v[s].bytes;
                if (s) cr_expect(mo->top.v[s - 1].bytes >= mo->top.v[s].bytes, "%s: top order", root);
            }
            cr_expect_eq(sum, mo->in_use, "%s: moment %zu: stacks %llu != in use %llu", root, k,
                         (unsigned long long)sum, (unsigned long long)mo->in_use);
            cr_expect_eq(mo->rest_stacks == 0, mo->rest_bytes == 0 && mo->rest_count == 0);
            if (!mo->is_peak) continue;
            peak_moment++;
            cr_expect_eq(mo->seq, rep->u.peak_seq);
            cr_expect_eq(mo->in_use, rep->u.peak);
            /* the analysis' own snapshot of the peak (split by category in tensor traces: summed
             * by stack here), cut to the same top */
            mt_stack_list by_stack = peak_by_stack(rep);
            cr_expect_eq(mo->top.n + mo->rest_stacks, by_stack.n, "%s: stacks at the peak", root);
            for (size_t s = 0; s < mo->top.n && s < by_stack.n; s++) {
                cr_expect_eq(mo->top.v[s].stack, by_stack.v[s].stack);
                cr_expect_eq(mo->top.v[s].driver, by_stack.v[s].driver);
                cr_expect_eq(mo->top.v[s].bytes, by_stack.v[s].bytes);
                cr_expect_eq(mo->top.v[s].count, by_stack.v[s].count);
            }
            free(by_stack.v);
        }
        cr_expect_eq(peak_moment, rep->u.peak ? 1 : 0, "%s: the peak is one moment", root);
    }
}

/* ---- an independent replay: every change of every device, by event number ---------------------- */

typedef struct change {
    uint64_t seq, time_ns, in_use;
    int32_t device;
    int is_host;
} change;

typedef struct history {
    mt_tracker *t;
    change *v;
    size_t n, cap;
    uint64_t start;
    size_t max_live; /* the largest live set, in allocations */
} history;

static void note(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    history *h = ctx;
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 1024;
        h->v = realloc(h->v, h->cap * sizeof *h->v);
        cr_assert(h->v);
    }
    h->v[h->n++] = (change){mt_tracker_seq(h->t), time_ns - h->start, u->in_use, u->device,
                            u->is_host};
}

static history history_of(const mt_analysis *a)
{
    history h = {.start = a->header.start_monotonic_ns};
    mt_tracker_hooks hooks = {.ctx = &h, .on_usage = note};
    h.t = mt_tracker_new(&hooks);
    char err[256];
    mt_reader *r = mt_reader_open(a->path, err, sizeof err);
    cr_assert(r, "%s", err);
    mt_record rec;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD)
        if (rec.type == MT_REC_EVENT) {
            mt_tracker_event(h.t, &rec.u.event);
            if (mt_tracker_live_count(h.t) > h.max_live) h.max_live = mt_tracker_live_count(h.t);
        }
    mt_reader_close(r);
    mt_tracker_free(h.t);
    return h;
}

/* in_use of device d just after event seq (the last change at or before it) */
static uint64_t in_use_after(const history *h, const mt_device_moments *d, uint64_t seq)
{
    uint64_t v = 0;
    for (size_t i = 0; i < h->n && h->v[i].seq <= seq; i++)
        if (h->v[i].is_host == d->is_host && (d->is_host || h->v[i].device == d->device))
            v = h->v[i].in_use;
    return v;
}

/* A downsampled timeline keeps, in every bucket, the highest point and the last one. */
static void check_buckets(const history *h, const mt_device_moments *d)
{
    cr_assert(d->downsampled);
    cr_assert(d->bucket_ns > 0);
    size_t nb = 0;
    for (size_t i = 0; i < h->n; i++)
        if (h->v[i].time_ns / d->bucket_ns + 1 > nb) nb = h->v[i].time_ns / d->bucket_ns + 1;
    uint64_t *hi = calloc(nb, sizeof *hi), *last_seq = calloc(nb, sizeof *last_seq);
    uint64_t prev = ~0ull;
    for (size_t i = 0; i < h->n; i++) {
        const change *c = &h->v[i];
        if (c->is_host != d->is_host || (!d->is_host && c->device != d->device)) continue;
        if (c->in_use == prev) continue; /* not a change of the bytes (kinds are all one here) */
        prev = c->in_use;
        size_t b = c->time_ns / d->bucket_ns;
        if (c->in_use > hi[b]) hi[b] = c->in_use;
        last_seq[b] = c->seq;
    }
    uint64_t *got = calloc(nb, sizeof *got);
    for (size_t k = 0; k < d->n_points; k++) {
        size_t b = d->points[k].time_ns / d->bucket_ns;
        cr_assert(b < nb);
        if (d->points[k].in_use > got[b]) got[b] = d->points[k].in_use;
        if (d->points[k].seq == last_seq[b]) last_seq[b] = 0;
        cr_expect_eq(d->points[k].in_use, in_use_after(h, d, d->points[k].seq),
                     "point %zu is not what was in use after its event", k);
    }
    for (size_t b = 0; b < nb; b++) {
        cr_expect_eq(got[b], hi[b], "bucket %zu: highest kept %llu, was %llu", b,
                     (unsigned long long)got[b], (unsigned long long)hi[b]);
        cr_expect_eq(last_seq[b], 0, "bucket %zu: its last point is missing", b);
    }
    free(hi);
    free(last_seq);
    free(got);
}

/* ---- tests ------------------------------------------------------------------------------------- */

Test(compact_moments, a_small_trace_keeps_every_change_and_its_kinds)
{
    fx f;
    fx_open(&f, "moments_small.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 1000, 1, 1);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, 0, A + 0x10000, 300, 2, 2);
    fx_ev(&f, MT_OP_POOL_RESERVED, MT_KIND_POOL, 0, 0x99, 4096, 3, 0); /* no change of bytes */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_HOST_PINNED, -1, A + 0x20000, 64, 4, 3);
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A, 0, 5, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x30000, 2000, 6, 1);
    fx_ev(&f, MT_OP_FREE, MT_KIND_ASYNC, 0, A + 0x10000, 0, 7, 0);
    fx_end(&f, 10, 7, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_moments *m = moments_of(a, NULL);
    check_moments(a, m, MT_MOMENTS_TOP);
    cr_assert_str_eq(m->series_by, "kind");
    cr_assert_eq(m->n_series, MT_KIND_MAX_);
    cr_expect_str_eq(m->series_names[MT_KIND_ASYNC], "async");
    const mt_device_moments *d = &m->devices[0];
    cr_assert_eq(d->device, 0);
    cr_expect(!d->downsampled);
    /* alloc, alloc, free, alloc, free: five changes, the pool's reservation is none */
    cr_assert_eq(d->n_points, 5);
    cr_expect_eq(d->changes, 5);
    static const uint64_t in_use[] = {1000, 1300, 300, 2300, 2000};
    static const uint64_t dev[] = {1000, 1000, 0, 2000, 2000};
    static const uint64_t async[] = {0, 300, 300, 300, 0};
    for (size_t k = 0; k < 5; k++) {
        cr_expect_eq(d->points[k].in_use, in_use[k], "point %zu", k);
        cr_expect_eq(d->points[k].time_ns, (k < 2 ? k + 1 : k + 3) * MS, "point %zu", k);
        cr_expect_eq(d->series[k * m->n_series + MT_KIND_DEVICE], dev[k], "point %zu", k);
        cr_expect_eq(d->series[k * m->n_series + MT_KIND_ASYNC], async[k], "point %zu", k);
    }
    const mt_device_moments *h = &m->devices[1];
    cr_assert(h->is_host);
    cr_assert_eq(h->n_points, 1);
    cr_expect_eq(h->series[MT_KIND_HOST_PINNED], 64);
    /* the peak (2300 at 6 ms) is a moment, with both stacks live then */
    const mt_moment *pk = NULL;
    for (size_t k = 0; k < d->n_moments; k++)
        if (d->moments[k].is_peak) pk = &d->moments[k];
    cr_assert(pk);
    cr_expect_eq(pk->in_use, 2300);
    cr_assert_eq(pk->top.n, 2);
    cr_expect_eq(pk->top.v[0].stack, 1);
    cr_expect_eq(pk->top.v[0].bytes, 2000);
    cr_expect_eq(pk->top.v[1].stack, 2);
    mt_moments_free(m);
    mt_analysis_free(a);
}

Test(compact_moments, tensors_not_segments_and_a_top_with_the_rest)
{
    fx f;
    fx_open(&f, "moments_tensors.mtrace");
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 8 << 20, 1, 1, 1, SEG);
    for (unsigned i = 0; i < 10; i++) /* ten tensors of ten stacks, 1..10 KiB */
        fx_ev(&f, MT_OP_ALLOC, MT_KIND_TENSOR, 0, A + i * 65536, (i + 1) * 1024, 2 + i, 10 + i);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + (64 << 20), 4096, 20, 30); /* a workspace */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_moments_options o = {.top = 3};
    mt_moments *m = moments_of(a, &o);
    check_moments(a, m, 3);
    const mt_device_moments *d = &m->devices[0];
    const mt_usage_point *last = &d->points[d->n_points - 1];
    cr_expect_eq(last->in_use, 55 * 1024 + 4096, "the segment is not in use, its tensors are");
    cr_expect_eq(d->series[(d->n_points - 1) * m->n_series + MT_KIND_TENSOR], 55 * 1024);
    cr_expect_eq(d->series[(d->n_points - 1) * m->n_series + MT_KIND_DEVICE], 4096);
    const mt_moment *pk = &d->moments[d->n_moments - 1];
    cr_assert(pk->is_peak);
    cr_assert_eq(pk->top.n, 3);
    cr_expect_eq(pk->top.v[0].bytes, 10 * 1024);
    cr_expect_eq(pk->top.v[1].bytes, 9 * 1024);
    cr_expect_eq(pk->top.v[2].bytes, 8 * 1024);
    cr_expect_eq(pk->rest_stacks, 8, "7 tensor stacks and the workspace's");
    cr_expect_eq(pk->rest_count, 8);
    cr_expect_eq(pk->rest_bytes, (55 - 27) * 1024 + 4096);
    mt_moments_free(m);
    mt_analysis_free(a);
}

/* A label other than the kind: what a per-allocation category will be. */
static const char *parity_name(void *ctx, size_t key)
{
    (void)ctx;
    return key ? "odd stacks" : "even stacks";
}

static size_t parity_of(void *ctx, const mt_lifetime *l)
{
    ++*(int *)ctx;
    return l->stack & 1;
}

Test(compact_moments, series_by_any_label_of_an_allocation)
{
    fx f;
    fx_open(&f, "moments_label.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 100, 1, 1);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 4096, 20, 2, 2);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, 0, A + 8192, 3, 3, 3);
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A, 0, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    int calls = 0;
    mt_series_key key = {.by = "stack parity", .n = 2, .name = parity_name, .of = parity_of,
                         .ctx = &calls};
    mt_moments_options o = {.series = &key};
    mt_moments *m = moments_of(a, &o);
    check_moments(a, m, MT_MOMENTS_TOP);
    cr_expect_str_eq(m->series_by, "stack parity");
    cr_assert_eq(m->n_series, 2);
    cr_expect_str_eq(m->series_names[1], "odd stacks");
    cr_expect_eq(calls, 4, "asked once per allocation and once per release");
    const mt_device_moments *d = &m->devices[0];
    cr_assert_eq(d->n_points, 4);
    static const uint64_t odd[] = {100, 100, 103, 3}, even[] = {0, 20, 20, 20};
    for (size_t k = 0; k < 4; k++) {
        cr_expect_eq(d->series[k * 2 + 1], odd[k], "point %zu", k);
        cr_expect_eq(d->series[k * 2], even[k], "point %zu", k);
    }
    mt_moments_free(m);
    mt_analysis_free(a);
}

/* The synthetic stream of bench_compact: 200 000 events, downsampled to 128 buckets. */
Test(compact_moments, a_long_trace_keeps_each_buckets_highest_and_last_point, .timeout = 120)
{
    fx f;
    fx_open(&f, "moments_long.mtrace");
    mt_synth s;
    mt_synth_init(&s, 7);
    mt_record r = {.type = MT_REC_EVENT};
    for (int i = 0; i < 200000; i++) {
        mt_synth_next(&s, &r.u.event);
        r.u.event.time_ns -= 3600ull * 1000000000ull - FX_T0; /* the fixture's clock */
        fx_put(&f, &r);
    }
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_moments_options o = {.points = 128, .spans = 40, .top = 5, .exact = 1000};
    mt_moments *m = moments_of(a, &o);
    check_moments(a, m, 5);
    const mt_device_moments *d = &m->devices[0];
    cr_expect_eq(m->thinned, 1);
    cr_expect(d->n_points <= 2 * 128);
    cr_expect(d->n_points > 128, "a busy trace fills every bucket with two points");
    cr_expect(d->n_moments >= 40 && d->n_moments <= 41);
    history h = history_of(a);
    check_buckets(&h, d);
    /* each moment is the highest point of its span, and what was in use after its event */
    for (size_t k = 0; k < d->n_moments; k++) {
        const mt_moment *mo = &d->moments[k];
        cr_expect_eq(mo->in_use, in_use_after(&h, d, mo->seq), "moment %zu", k);
        uint64_t hi = 0;
        for (size_t i = 0; i < h.n; i++)
            if (h.v[i].time_ns >= mo->from_ns && h.v[i].time_ns < mo->to_ns && h.v[i].in_use > hi)
                hi = h.v[i].in_use;
        cr_expect_eq(mo->in_use, hi, "moment %zu is not its span's highest", k);
    }
    /* a quarter of the work 40 snapshots of the largest live set would take: every 4th span's
     * moment and the peak, each still adding up */
    o.work = 40 * h.max_live / 4;
    free(h.v);
    mt_moments_free(m);
    m = moments_of(a, &o);
    check_moments(a, m, 5);
    cr_expect_eq(m->thinned, 4);
    d = &m->devices[0];
    cr_expect(d->n_moments == 10 || d->n_moments == 11, "%zu moments", d->n_moments);
    mt_moments_free(m);
    mt_analysis_free(a);
}

/* Twenty devices: fewer buckets each, so memory does not grow with the devices' count. */
Test(compact_moments, many_devices_get_fewer_buckets_each)
{
    fx f;
    fx_open(&f, "moments_devices.mtrace");
    for (uint64_t i = 0; i < 40000; i++) /* 2000 changes per device, spread over 4 s */
        fx_ev(&f, (i / 20) % 2 ? MT_OP_FREE : MT_OP_ALLOC, MT_KIND_DEVICE, (int)(i % 20),
              A + (i % 20) * 0x10000000 + ((i / 40) % 4) * 4096, 4096, i / 10, 1);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_devices, 20);
    mt_moments_options o = {.exact = 100, .points = 4096};
    mt_moments *m = moments_of(a, &o);
    check_moments(a, m, MT_MOMENTS_TOP);
    for (size_t i = 0; i < m->n_devices; i++) {
        cr_expect(m->devices[i].downsampled);
        cr_expect_eq(m->devices[i].bucket_ns, a->duration_ns / (4096 * 8 / 20) + 1, "bucket");
    }
    mt_moments_free(m);
    mt_analysis_free(a);
}

/* record --tensors: the tensors by what they are for at each point, everything else by kind. */
Test(compact_moments, series_by_category_where_the_trace_has_them)
{
    mt_analysis *plain = fx_analyze(MT_TEST_DATA_DIR "/gpt2_default.mtrace");
    mt_series_key key = {0};
    cr_expect_eq(mt_series_by_category(plain, &key), -1, "no tensors, no categories");
    cr_expect_null(key.split);
    mt_analysis_free(plain);
    mt_analysis *a = fx_analyze(MT_TEST_DATA_DIR "/gpt2_tensors.mtrace");
    cr_assert_eq(mt_series_by_category(a, &key), 0);
    mt_moments_options o = {.series = &key};
    mt_moments *m = moments_of(a, &o);
    check_moments(a, m, MT_MOMENTS_TOP); /* every point's series add up to its bytes */
    cr_expect_str_eq(m->series_by, "category");
    size_t params = m->n_series, grads = m->n_series;
    for (size_t k = 0; k < m->n_series; k++) {
        if (strcmp(m->series_names[k], "parameters") == 0) params = k;
        if (strcmp(m->series_names[k], "gradients") == 0) grads = k;
    }
    cr_assert(params < m->n_series && grads < m->n_series);
    const mt_device_moments *d = &m->devices[0];
    uint64_t p_max = 0, g_max = 0, tensor_rest = 0;
    for (size_t i = 0; i < d->n_points; i++) {
        const uint64_t *row = &d->series[i * m->n_series];
        if (row[params] > p_max) p_max = row[params];
        if (row[grads] > g_max) g_max = row[grads];
        tensor_rest += row[MT_KIND_TENSOR];
    }
    /* what PyTorch said of its model (tests/data/gpt2_tensors.json: param_bytes = grad_bytes =
     * 153892864): every parameter, and after a backward pass every gradient, live at some point
     * (caching-allocator blocks round sizes up, never down) */
    cr_expect(p_max >= 153892864, "parameters %llu", (unsigned long long)p_max);
    cr_expect(g_max >= 153892864, "gradients %llu", (unsigned long long)g_max);
    cr_expect_eq(tensor_rest, 0, "every tensor has a category");
    mt_moments_free(m);
    mt_analysis_free(a);
}

static void check_fixture_moments(const char *path, void *ctx)
{
    (void)ctx;
    mt_analysis *a = fx_analyze(path);
    for (size_t points = 16; points <= MT_MOMENTS_POINTS; points *= 128) {
        mt_series_key by_category;
        mt_moments_options o = {.exact = points, .points = points, .spans = points / 2};
        mt_moments *m = moments_of(a, &o);
        check_moments(a, m, MT_MOMENTS_TOP);
        mt_moments_free(m);
        if (mt_series_by_category(a, &by_category) < 0) continue;
        o.series = &by_category;
        m = moments_of(a, &o);
        check_moments(a, m, MT_MOMENTS_TOP);
        mt_moments_free(m);
    }
    mt_analysis_free(a);
}

Test(compact_moments, every_gpu_fixture, .timeout = 120)
{
    int n = mt_test_each_gpu_fixture(check_fixture_moments, NULL);
    cr_expect(n >= 5, "fixtures found: %d", n);
}
