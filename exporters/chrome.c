/* Chrome Trace Event Format JSON for Perfetto UI / chrome://tracing.
 *
 *   {"traceEvents": [ ... ], "displayTimeUnit": "ns", "otherData": {...}}
 *
 * Per trace (process id = the traced pid):
 *   M  process_name / thread_name metadata
 *   C  counters per device: "<root> in use" {bytes}, "<root> by kind" {device, async, ...},
 *      "<root> pool reserved" {bytes} when the trace has pool information; the reconciliation
 *      (docs/analysis.md) as tracks "<root> allocator reserved", "<root> tensors allocated" (with
 *      pool information), "<root> other libraries", "<root> driver-internal", and at each NVML
 *      sample "<root> nvidia-smi (process)". When a trace has more
 *      than MAX_COUNTER_EVENTS events the counters are downsampled to time buckets, each keeping
 *      its highest point and its last point, so every peak is still exact.
 *   b/e one async slice per allocation lifetime, cat = device root, id = unique per lifetime,
 *      named "<size> <first user frame>", args {stack (root first, innermost 32 at most),
 *      address, bytes, stream, kind, ended}.
 *   i  an instant at each device's peak and at each failed request.
 * Timestamps are µs (3 decimals: exact ns) since the earliest trace start (wall clock), so several
 * traces of one job line up.
 *
 * Slices are limited by --min-bytes and --top-allocs; by default at most
 * MT_CHROME_DEFAULT_MAX_SLICES per trace (the largest kept), said in otherData. Selecting the N
 * largest takes one extra read of the trace with a size-N min-heap of sizes.
 */
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAX_COUNTER_EVENTS 200000u /* per device, before downsampling starts */
#define MAX_SLICE_FRAMES 32

typedef struct counter_state {
    uint64_t bucket;
    int have_max, have_last;
    mt_usage max, last; /* highest and latest point in the current bucket */
    uint64_t max_t, last_t;
    uint64_t max_caching, last_caching; /* caching allocator bytes at those points */
} counter_state;

/* Live bytes of the caching allocator's segments per device (index ordinal + 1: the tracker
 * keeps ordinals to -1..MT_MAX_DEVICE_ORDINAL): the one part of the reconciliation the tracker's
 * counters do not give (the others are by_kind and pool_reserved). */
#define N_DEVICE_SLOTS (MT_MAX_DEVICE_ORDINAL + 2)

typedef struct chrome {
    mt_out *o;
    mt_analysis *a;
    mt_tracker *t;
    const mt_chrome_options *opt;
    uint64_t pid, t_index, offset_ns; /* offset: this trace's start after the earliest start */
    uint64_t quantum;                 /* counter bucket width in ns, 0 = every change */
    counter_state *cs;
    size_t n_cs;
    /* slice selection */
    uint64_t threshold;   /* keep bytes > threshold, or == threshold while ties_left */
    uint64_t ties_left;
    int select;           /* threshold applies */
    uint64_t kept, skipped;
    mt_namebuf nb;
    uint64_t caching[N_DEVICE_SLOTS];
    int oom;
} chrome;

static void ts(mt_out *o, uint64_t ns);
static uint64_t rel_of(const chrome *c, uint64_t abs);

static uint64_t *caching_of(chrome *c, int32_t device)
{
    return device >= -1 && device <= MT_MAX_DEVICE_ORDINAL ? &c->caching[device + 1] : NULL;
}

static int mt_kind_is_host_kind(unsigned kind)
{
    return kind == MT_KIND_HOST_PINNED || kind == MT_KIND_HOST_REGISTERED;
}

static int is_caching_segment(chrome *c, unsigned kind, uint32_t stack)
{
    if (kind != MT_KIND_DEVICE && kind != MT_KIND_VMM_PHYSICAL) return 0;
    int alloc = 0;
    mt_frames_owner(c->a->frames, stack, &alloc);
    return alloc;
}

static void counter(chrome *c, const char *root, const char *what, uint64_t when, uint64_t v)
{
    mt_out_printf(c->o, ",\n{\"ph\":\"C\",\"pid\":%llu,\"tid\":0,\"name\":\"%s %s\",",
                  (unsigned long long)c->pid, root, what);
    ts(c->o, rel_of(c, when));
    mt_out_printf(c->o, ",\"args\":{\"bytes\":%llu}}", (unsigned long long)v);
}

static void ts(mt_out *o, uint64_t ns) /* "ts":µs with ns precision */
{
    mt_out_printf(o, "\"ts\":%llu.%03llu", (unsigned long long)(ns / 1000),
                  (unsigned long long)(ns % 1000));
}

static uint64_t rel_of(const chrome *c, uint64_t abs)
{
    uint64_t s = c->a->header.start_monotonic_ns;
    return (abs > s ? abs - s : 0) + c->offset_ns;
}

static void emit_counters(chrome *c, const mt_usage *u, uint64_t caching, uint64_t when)
{
    char root[32];
    mt_device_report probe = {.u = *u};
    mt_device_root_name(&probe, root, sizeof root);
    mt_out *o = c->o;
    mt_out_printf(o, ",\n{\"ph\":\"C\",\"pid\":%llu,\"tid\":0,\"name\":\"%s in use\",",
                  (unsigned long long)c->pid, root);
    ts(o, rel_of(c, when));
    mt_out_printf(o, ",\"args\":{\"bytes\":%llu}}", (unsigned long long)u->in_use);
    mt_out_printf(o, ",\n{\"ph\":\"C\",\"pid\":%llu,\"tid\":0,\"name\":\"%s by kind\",",
                  (unsigned long long)c->pid, root);
    ts(o, rel_of(c, when));
    mt_out_puts(o, ",\"args\":{");
    static const unsigned dev_kinds[] = {MT_KIND_DEVICE, MT_KIND_PITCH, MT_KIND_ASYNC,
                                         MT_KIND_MANAGED, MT_KIND_VMM_PHYSICAL, MT_KIND_DRIVER};
    static const unsigned host_kinds[] = {MT_KIND_HOST_PINNED, MT_KIND_HOST_REGISTERED};
    const unsigned *k = u->is_host ? host_kinds : dev_kinds;
    size_t nk = u->is_host ? 2 : 6;
    for (size_t i = 0; i < nk; i++)
        mt_out_printf(o, "%s\"%s\":%llu", i ? "," : "", mt_kind_name(k[i]),
                      (unsigned long long)u->by_kind[k[i]]);
    mt_out_puts(o, "}}");
    if (u->has_pool_info) {
        mt_out_printf(o, ",\n{\"ph\":\"C\",\"pid\":%llu,\"tid\":0,\"name\":\"%s pool reserved\",",
                      (unsigned long long)c->pid, root);
        ts(o, rel_of(c, when));
        mt_out_printf(o, ",\"args\":{\"bytes\":%llu}}", (unsigned long long)u->pool_reserved);
    }
    if (u->is_host) return;
    uint64_t async = u->by_kind[MT_KIND_ASYNC], pool = 0;
    if (u->has_pool_info) pool = u->pool_reserved > async ? u->pool_reserved : async;
    uint64_t in_pool = u->has_pool_info ? async : 0, api = u->api_in_use;
    counter(c, root, "allocator reserved", when, caching + pool);
    if (u->has_pool_info) counter(c, root, "tensors allocated", when, async);
    counter(c, root, "other libraries", when, api > caching + in_pool ? api - caching - in_pool : 0);
    counter(c, root, "driver-internal", when, u->by_kind[MT_KIND_DRIVER]);
}

static void flush_bucket(chrome *c, counter_state *s)
{
    if (s->have_max) emit_counters(c, &s->max, s->max_caching, s->max_t);
    if (s->have_last && (!s->have_max || s->last_t != s->max_t || s->last.in_use != s->max.in_use))
        emit_counters(c, &s->last, s->last_caching, s->last_t);
    s->have_max = s->have_last = 0;
}

static void on_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    chrome *c = ctx;
    uint64_t *cp = u->is_host ? NULL : caching_of(c, u->device), caching = cp ? *cp : 0;
    if (!c->quantum) {
        emit_counters(c, u, caching, time_ns);
        return;
    }
    const mt_usage *base;
    size_t n = mt_tracker_usages(c->t, &base), i = (size_t)(u - base);
    if (n > c->n_cs) {
        counter_state *ns = realloc(c->cs, n * sizeof *ns);
        if (!ns) {
            c->oom = 1;
            return;
        }
        memset(ns + c->n_cs, 0, (n - c->n_cs) * sizeof *ns);
        c->cs = ns;
        c->n_cs = n;
    }
    counter_state *s = &c->cs[i];
    uint64_t b = rel_of(c, time_ns) / c->quantum;
    if (b != s->bucket) {
        flush_bucket(c, s);
        s->bucket = b;
    }
    if (!s->have_max || u->in_use > s->max.in_use) {
        s->max = *u;
        s->max_t = time_ns;
        s->max_caching = caching;
        s->have_max = 1;
    }
    s->last = *u;
    s->last_t = time_ns;
    s->last_caching = caching;
    s->have_last = 1;
}

static const char *const end_names[] = {"free", "replaced", "context destroyed", "trace end"};

static void on_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    chrome *c = ctx;
    if (l->device >= -1 && is_caching_segment(c, l->kind, l->stack)) {
        uint64_t *cp = caching_of(c, l->device);
        if (cp) *cp -= *cp >= l->bytes ? l->bytes : *cp;
    }
    if (l->bytes < c->opt->min_bytes || (c->select && l->bytes < c->threshold) ||
        (c->select && l->bytes == c->threshold && !c->ties_left)) {
        c->skipped++;
        return;
    }
    if (c->select && l->bytes == c->threshold) c->ties_left--;
    c->kept++;
    mt_out *o = c->o;
    char root[32], size[32];
    mt_device_report probe = {.u = {.device = l->device, .is_host = l->device < 0 &&
                                    (l->kind == MT_KIND_HOST_PINNED ||
                                     l->kind == MT_KIND_HOST_REGISTERED)}};
    mt_device_root_name(&probe, root, sizeof root);
    mt_format_bytes(l->bytes, size, sizeof size);
    mt_stack_stat st = {.stack = l->stack, .driver = l->kind == MT_KIND_DRIVER};
    const char *who = st.driver ? mt_pseudo_name(MT_PSEUDO_DRIVER_INTERNAL)
                                : mt_frames_first_user(c->a->frames, l->stack);
    char name[640];
    snprintf(name, sizeof name, "%s %s", size, who);
    uint64_t id = c->t_index << 48 | l->serial;
    uint64_t start = rel_of(c, l->start_ns), end = rel_of(c, end_ns);
    if (end < start) end = start; /* activity records may arrive late: never a negative slice */
    for (int phase = 0; phase < 2; phase++) {
        mt_out_printf(o, ",\n{\"ph\":\"%s\",\"cat\":\"%s\",\"id\":\"0x%llx\",\"pid\":%llu,"
                         "\"tid\":%u,\"name\":",
                      phase ? "e" : "b", root, (unsigned long long)id, (unsigned long long)c->pid,
                      l->tid);
        mt_out_json_string(o, name);
        mt_out_puts(o, ",");
        ts(o, phase ? end : start);
        if (phase) {
            mt_out_puts(o, "}");
            break;
        }
        if (mt_stat_frames(c->a->frames, &st, MT_NAME_REPORT, c->opt->frames, &c->nb) < 0) {
            c->oom = 1;
            c->nb.n = 0;
        }
        mt_out_puts(o, ",\"args\":{\"stack\":[");
        size_t from = c->nb.n > MAX_SLICE_FRAMES ? c->nb.n - MAX_SLICE_FRAMES : 0;
        for (size_t k = from; k < c->nb.n; k++) {
            if (k > from) mt_out_write(o, ",", 1);
            mt_out_json_string(o, c->nb.v[k]);
        }
        mt_out_printf(o, "],\"address\":\"0x%llx\",\"bytes\":%llu,\"stream\":\"0x%llx\","
                         "\"kind\":\"%s\",\"ended\":\"%s\"%s}}",
                      (unsigned long long)l->address, (unsigned long long)l->bytes,
                      (unsigned long long)l->stream, mt_kind_name(l->kind), end_names[why & 3],
                      from ? ",\"stack_truncated\":true" : "");
    }
}

/* ---- slice selection: the N largest lifetimes --------------------------------------------------- */

static void heap_down(uint64_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] < h[m]) m = l;
        if (r < n && h[r] < h[m]) m = r;
        if (m == i) return;
        uint64_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_up(uint64_t *h, size_t i)
{
    while (i && h[(i - 1) / 2] > h[i]) {
        uint64_t t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* Every ALLOC (except VMM_MAP, which is a mapping, not a lifetime) starts one lifetime. Reads the
 * trace once keeping the `keep` largest sizes; sets the threshold when there are more than that. */
static int select_largest(chrome *c, uint64_t keep, char *err, size_t errlen)
{
    mt_reader *r = mt_reader_open_fd(c->a->fd, c->a->path, err, errlen);
    if (!r) return -1;
    uint64_t *heap = malloc(keep * sizeof *heap);
    if (!heap) {
        mt_reader_close(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = 0;
    uint64_t total = 0;
    mt_record rec;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        const mt_event *e = &rec.u.event;
        if (rec.type != MT_REC_EVENT || e->op != MT_OP_ALLOC || e->kind == MT_KIND_VMM_MAP ||
            e->bytes < c->opt->min_bytes)
            continue;
        total++;
        if (n < keep) {
            heap[n] = e->bytes;
            heap_up(heap, n++);
        } else if (e->bytes > heap[0]) {
            heap[0] = e->bytes;
            heap_down(heap, n, 0);
        }
    }
    if (total > keep) {
        c->select = 1;
        c->threshold = heap[0];
        uint64_t above = 0;
        for (size_t i = 0; i < n; i++) above += heap[i] > c->threshold;
        c->ties_left = keep - above;
    }
    free(heap);
    mt_reader_close(r);
    return 0;
}

/* ---- one trace ---------------------------------------------------------------------------------- */

static void metadata(chrome *c)
{
    mt_out *o = c->o;
    char name[300];
    snprintf(name, sizeof name, "%s (pid %u)", c->a->comm[0] ? c->a->comm : "process", c->a->pid);
    mt_out_printf(o, ",\n{\"ph\":\"M\",\"pid\":%llu,\"tid\":0,\"name\":\"process_name\","
                     "\"args\":{\"name\":", (unsigned long long)c->pid);
    mt_out_json_string(o, name);
    mt_out_puts(o, "}}");
    for (size_t i = 0; i < c->a->n_threads; i++) {
        mt_out_printf(o, ",\n{\"ph\":\"M\",\"pid\":%llu,\"tid\":%u,\"name\":\"thread_name\","
                         "\"args\":{\"name\":", (unsigned long long)c->pid, c->a->threads[i].tid);
        mt_out_json_string(o, c->a->threads[i].name);
        mt_out_puts(o, "}}");
    }
}

static void instants(chrome *c)
{
    mt_out *o = c->o;
    char root[32], b[32], name[128];
    mt_analysis *a = c->a;
    for (size_t i = 0; i < a->n_devices + (a->host != NULL); i++) {
        const mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        if (!d->u.peak) continue;
        snprintf(name, sizeof name, "peak %s %s", mt_device_root_name(d, root, sizeof root),
                 mt_format_bytes(d->u.peak, b, sizeof b));
        mt_out_printf(o, ",\n{\"ph\":\"i\",\"s\":\"p\",\"pid\":%llu,\"tid\":0,\"name\":\"%s\",",
                      (unsigned long long)c->pid, name);
        ts(o, d->peak_time_ns + c->offset_ns);
        mt_out_printf(o, ",\"args\":{\"bytes\":%llu,\"api_peak_bytes\":%llu,"
                         "\"driver_bytes_at_peak\":%llu}}",
                      (unsigned long long)d->u.peak, (unsigned long long)d->u.api_peak,
                      (unsigned long long)d->driver_at_peak);
    }
}

static void failed_instant(chrome *c, const mt_event *e)
{
    mt_out *o = c->o;
    char root[32], b[32], name[128];
    int host = e->kind == MT_KIND_HOST_PINNED || e->kind == MT_KIND_HOST_REGISTERED;
    mt_device_report probe = {.u = {.device = host ? -1 : e->device, .is_host = host}};
    snprintf(name, sizeof name, "failed %s %s %s", mt_device_root_name(&probe, root, sizeof root),
             mt_format_bytes(e->bytes, b, sizeof b), mt_kind_name(e->kind));
    const mt_usage *u = mt_tracker_usage(c->t, host ? -1 : e->device, host);
    uint64_t in_use = u ? u->in_use : 0;
    mt_out_printf(o, ",\n{\"ph\":\"i\",\"s\":\"p\",\"pid\":%llu,\"tid\":%u,\"name\":\"%s\",",
                  (unsigned long long)c->pid, e->tid, name);
    ts(o, rel_of(c, e->time_ns));
    mt_out_printf(o, ",\"args\":{\"bytes\":%llu,\"kind\":\"%s\",\"result\":%u,\"in_use\":%llu,"
                     "\"first_user_frame\":",
                  (unsigned long long)e->bytes, mt_kind_name(e->kind), e->result,
                  (unsigned long long)in_use);
    mt_out_json_string(o, mt_frames_first_user(c->a->frames, e->stack));
    mt_out_puts(o, "}}");
}

static int one_trace(chrome *c, char *err, size_t errlen)
{
    mt_analysis *a = c->a;
    uint64_t keep = c->opt->top_allocs ? c->opt->top_allocs : MT_CHROME_DEFAULT_MAX_SLICES;
    if ((c->opt->top_allocs || a->events > keep) && select_largest(c, keep, err, errlen) < 0)
        return -1;
    c->quantum = a->events > MAX_COUNTER_EVENTS ? a->duration_ns / (MAX_COUNTER_EVENTS / 2) + 1 : 0;
    metadata(c);
    instants(c);
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    mt_tracker_hooks hooks = {.ctx = c, .on_usage = on_usage, .on_release = on_release};
    c->t = mt_tracker_new(&hooks);
    if (!c->t) {
        mt_reader_close(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    mt_record rec;
    uint64_t n = 0, last = a->header.start_monotonic_ns;
    while (!c->oom && mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type == MT_REC_SAMPLE && rec.u.sample.counter == MT_COUNTER_NVML_PROCESS_BYTES) {
            char root[32];
            mt_device_report probe = {.u = {.device = rec.u.sample.device}};
            counter(c, mt_device_root_name(&probe, root, sizeof root), "nvidia-smi (process)",
                    rec.u.sample.time_ns, rec.u.sample.value);
            continue;
        }
        if (rec.type != MT_REC_EVENT) continue;
        const mt_event *e = &rec.u.event;
        /* counted before the tracker applies it: its usage hook must see the new segment */
        if (e->op == MT_OP_ALLOC && !mt_kind_is_host_kind(e->kind) &&
            is_caching_segment(c, e->kind, e->stack)) {
            uint64_t *cp = caching_of(c, e->device);
            if (cp) *cp += e->bytes;
        }
        if (rec.u.event.time_ns > last) last = rec.u.event.time_ns;
        if (rec.u.event.op == MT_OP_FAILED) failed_instant(c, &rec.u.event);
        if (mt_tracker_event(c->t, &rec.u.event) < 0) c->oom = 1;
        if (c->opt->progress && ++n % 65536 == 0)
            c->opt->progress(c->opt->progress_ctx,
                             (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
    }
    /* Lifetimes still open end where the trace ends (END record or last event). */
    uint64_t end = a->header.start_monotonic_ns + a->duration_ns;
    mt_tracker_finish(c->t, end > last ? end : last);
    for (size_t i = 0; i < c->n_cs; i++) flush_bucket(c, &c->cs[i]);
    mt_tracker_free(c->t);
    c->t = NULL;
    mt_reader_close(r);
    if (c->oom) snprintf(err, errlen, "%s: out of memory", a->path);
    return c->oom ? -1 : 0;
}

int mt_export_chrome(mt_out *o, mt_analysis *const *a, size_t n, const mt_chrome_options *opt,
                     char *err, size_t errlen)
{
    mt_chrome_options defaults = {0};
    if (!opt) opt = &defaults;
    uint64_t base = ~0ull;
    for (size_t i = 0; i < n; i++)
        if (a[i]->header.start_realtime_ns < base) base = a[i]->header.start_realtime_ns;
    /* The first element is metadata so that every later one can start with ",\n". */
    mt_out_puts(o, "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_name\","
                   "\"args\":{\"name\":\"memtrace\"}}");
    uint64_t kept = 0, skipped = 0;
    int capped = 0;
    for (size_t i = 0; i < n; i++) {
        chrome c = {.o = o, .a = a[i], .opt = opt, .pid = a[i]->pid, .t_index = i,
                    .offset_ns = a[i]->header.start_realtime_ns - base};
        int rc = one_trace(&c, err, errlen);
        free(c.cs);
        mt_namebuf_free(&c.nb);
        if (rc < 0) return -1;
        kept += c.kept;
        skipped += c.skipped;
        capped |= c.select && !opt->top_allocs;
    }
    mt_out_puts(o, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"memtrace "
                   MEMTRACE_VERSION "\",\"traces\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) mt_out_write(o, ",", 1);
        mt_out_json_string(o, a[i]->path);
    }
    mt_out_printf(o, "],\"slices_kept\":%llu,\"slices_left_out\":%llu,\"min_bytes\":%llu,"
                     "\"top_allocs\":%llu,\"default_cap_applied\":%s",
                  (unsigned long long)kept, (unsigned long long)skipped,
                  (unsigned long long)opt->min_bytes, (unsigned long long)opt->top_allocs,
                  capped ? "true" : "false");
    if (capped)
        mt_out_printf(o, ",\"note\":\"only the %u largest allocations per trace have slices "
                         "(default cap, about 200 MB); use --top-allocs or --min-bytes\"",
                      MT_CHROME_DEFAULT_MAX_SLICES);
    int truncated = 0;
    uint64_t dropped = 0, damaged = 0, damaged_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        truncated |= a[i]->truncated;
        dropped += a[i]->dropped;
        damaged += a[i]->damaged_chunks;
        damaged_bytes += a[i]->damaged_bytes;
    }
    mt_out_printf(o, ",\"truncated\":%s,\"dropped_events\":%llu,\"damaged_chunks\":%llu,"
                     "\"damaged_bytes\":%llu",
                  truncated ? "true" : "false", (unsigned long long)dropped,
                  (unsigned long long)damaged, (unsigned long long)damaged_bytes);
    mt_out_puts(o, ",\"damage\":[");
    for (size_t i = 0, k = 0; i < n; i++) {
        if (!a[i]->damaged_chunks && !a[i]->truncated) continue;
        if (k++) mt_out_write(o, ",", 1);
        mt_out_puts(o, "{\"trace\":");
        mt_out_json_string(o, a[i]->path);
        mt_out_printf(o, ",\"damaged_chunks\":%llu,\"damaged_bytes\":%llu,\"first\":",
                      (unsigned long long)a[i]->damaged_chunks,
                      (unsigned long long)a[i]->damaged_bytes);
        mt_out_json_string(o, a[i]->damage_msg ? a[i]->damage_msg : "");
        mt_out_puts(o, ",\"truncated\":");
        mt_out_json_string(o, a[i]->truncated ? a[i]->truncated_msg : "");
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "]}}\n");
    return 0;
}
