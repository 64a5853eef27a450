/* Chrome Trace Event Format JSON for ui.perfetto.dev and the catapult trace viewer
 * (chrome://tracing).
 *
 *   {"traceEvents": [ ... ], "otherData": {...}}
 *
 * Layout, per traced process (pid = the traced pid, named by its command):
 *   counters  "<root> in use" {bytes}; "<root> by kind" {one key per kind of bytes in use the
 *             device ever had: they add up to "in use", since catapult draws a counter's keys
 *             stacked}; "<root> address space" {bytes} (reserved by cuMemAddressReserve, when the
 *             device reserved any: address space, not bytes in use);
 *             "<root> pool reserved" {bytes} (with pool information); the reconciliation
 *             (docs/analysis.md) "<root> allocator reserved", "<root> tensors allocated" (with pool
 *             information), "<root> other libraries", "<root> driver-internal", and
 *             "<root> nvidia-smi (process)" at each NVML sample; with tensors (record --tensors)
 *             "<root> by category" {one key per category: parameters, gradients, ...}, each
 *             tensor in its category at that moment (a backward tensor is a backward temporary
 *             until its pass has ended, then a gradient); one last point of each at the end
 *             of the trace, where the slices end. Perfetto names a counter track "<name> <key>";
 *             catapult fixes a counter's series at its first event, so a name always carries the
 *             same keys. Points are bounded: the trace's duration is cut into
 *             (cap - 1) / 2 time buckets per device (cap: mt_chrome_options.max_counter_points,
 *             default MT_CHROME_MAX_COUNTER_POINTS), each keeping its highest "in use" point
 *             (every track's values at that moment) and its last one, so every track of a device
 *             has at most `cap` points with the closing one, and the peak is exact. A short
 *             trace has buckets narrower than the time between its events: every change.
 *             A point's time is the latest event time read so far on its device (nvidia-smi's:
 *             the latest sample time): the recorder's threads reach the file in turns, so the
 *             time of file order steps back at each switch, and a counter must not (catapult
 *             draws a track in the order of its points; the old every-change flush also wrote a
 *             point each time the time went back into a different bucket).
 *   slices    one track per device and allocation kind, "cuda:0 async" (split by stream, "cuda:0
 *             async stream 2", when the kind used several streams): both viewers make a track
 *             per top-level slice name (Perfetto: per process and name, for ids scoped to the
 *             process with id2.local; catapult: per thread and title), so each allocation is a
 *             top-level slice named after its track with one child named after its first user
 *             frame (mt_frames_first_user), sharing its id. Sizes and the rest are the child's
 *             args: bytes, size, kind, stream, address, ended (free, replaced, context destroyed,
 *             trace end), tid and thread of the allocating thread, stack (the user view for
 *             Python programs, root first, innermost MAX_SLICE_FRAMES). The slices of a device
 *             sit on one made-up thread per device, "cuda:0 allocations" (VIRTUAL_TID), so that
 *             catapult groups them process -> device -> kind as Perfetto does.
 *             Driver-internal allocations (thousands of few-byte buffers alive to the end) get no
 *             slices unless asked for: their bytes are in the counters.
 *   instants  each device's peak and each failed request (process scope).
 *   A trace without memory events gets one slice "no GPU memory events" over the recording (on a
 *   made-up thread "memtrace"): with nothing else that has a time, catapult builds an empty model
 *   and shows a blank page.
 * Timestamps are µs with 3 decimals (exact ns) since the earliest trace start (wall clock), so
 * several traces of one job line up. Ids: trace index << 48 | lifetime serial.
 *
 * Slices are limited by --min-bytes and --top-allocs; by default at most
 * MT_CHROME_DEFAULT_MAX_SLICES per trace (the largest kept), said in otherData. A survey of the
 * trace finds the streams of each device and kind and, when a cap applies, the size of the N-th
 * largest allocation (sizes counted by value; past SURVEY_SIZES different ones, a size-N
 * min-heap): made while mt_analyze reads the trace (the CLI), or by a read of its own
 * (mt_chrome_add). The export itself is one more read.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "u64map.h" /* src/util: mt_u64map */
#include "util.h"

#define MAX_SLICE_FRAMES 32
#define STACK_CACHE_BYTES (32u << 20) /* formatted slice stacks kept per trace */
#define VIRTUAL_TID 2000000000u /* + slot: above any Linux tid (at most 2^22), below 2^32 */
#define MAX_STREAMS 16          /* per device and kind, named; later ones share one track */
#define WRITE_LIT(o, lit) mt_out_write((o), (lit), sizeof(lit) - 1) /* a literal, no strlen */
#define SURVEY_SIZES 65536    /* different slice sizes counted by value (survey) */
#define SIZE_CACHE 1024         /* formatted slice sizes kept (a power of two) */

enum { /* counter tracks of a device; "by kind" follows as COUNTERS_ + kind */
    COUNTER_IN_USE, COUNTER_POOL, COUNTER_RESERVED, COUNTER_TENSORS, COUNTER_OTHER, COUNTER_DRIVER,
    COUNTER_ADDRESS_SPACE, COUNTERS_
};

/* What a counter point shows of a device's usage (emit_counters). The whole mt_usage is ~660
 * bytes (~400 without by_category), and copying it at every event, twice at a new high, was a
 * tenth of the export's main thread. */
typedef struct point {
    int32_t device;
    int is_host, has_pool_info;
    uint64_t in_use, api_in_use, pool_reserved, vmm_reserved, segment_bytes;
    uint64_t by_kind[MT_KIND_MAX_];
    uint64_t by_category[MT_CAT_MAX]; /* copied only with a categorizer */
} point;

static void point_of(point *p, const mt_usage *u, int categories)
{
    p->device = u->device, p->is_host = u->is_host, p->has_pool_info = u->has_pool_info;
    p->in_use = u->in_use, p->api_in_use = u->api_in_use, p->pool_reserved = u->pool_reserved;
    p->vmm_reserved = u->vmm_reserved, p->segment_bytes = u->segment_bytes;
    memcpy(p->by_kind, u->by_kind, sizeof p->by_kind);
    if (categories) memcpy(p->by_category, u->by_category, sizeof p->by_category);
}

typedef struct counter_state {
    uint64_t clock;  /* latest event time so far on this device: points never step back */
    uint64_t bucket; /* of clock */
    uint64_t bucket_end; /* the first absolute time of the next bucket (saturated) */
    int have_max, have_last;
    int last_live; /* last is the tracker's usage as it is now, copied only when an event is about
                      to end the bucket (settle_last): a copy at every event was most of on_usage */
    point max, last; /* highest and latest point in the current bucket */
    uint64_t max_t, last_t;
    uint64_t max_caching, last_caching; /* caching allocator bytes at those points */
} counter_state;

/* Per device slot (host, cuda:?, cuda:N): caching allocator bytes (the one part of the
 * reconciliation the tracker's counters do not give), the kinds it ever used, streams by kind. */
typedef struct slot_info {
    int32_t device;
    int is_host;
    char root[16]; /* "cuda:0", "cuda:?", "host" */
    uint64_t caching;
    uint64_t streams[MT_KIND_MAX_][MAX_STREAMS];
    uint8_t n_streams[MT_KIND_MAX_]; /* MAX_STREAMS + 1: more than that */
    /* nvidia-smi (process) samples, bucketed like the other counters on their own clock */
    uint64_t nvml_clock, nvml_bucket, nvml_max, nvml_max_t, nvml_last, nvml_last_t;
    int have_nvml, nvml_have_max, nvml_have_last;
    /* last value written of each counter track (COUNTER_*), to write only changes: the viewers
     * draw counters as steps, so a repeated value adds nothing */
    uint64_t last[COUNTERS_ + MT_KIND_MAX_];
    uint8_t written[COUNTERS_ + MT_KIND_MAX_];
    uint64_t last_cat[MT_CAT_MAX]; /* by_category last written */
} slot_info;

/* The device slots in the order first met (host, cuda:?, cuda:N): the survey makes them while the
 * trace is first read, and the export takes them over, streams and all. */
typedef struct slot_table {
    slot_info *v;
    size_t n;
    uint16_t ix[MT_MAX_DEVICE_ORDINAL + 3]; /* host, cuda:?, cuda:N -> index in v + 1 */
    int oom;
} slot_table;

typedef struct chrome {
    mt_out *o;
    mt_analysis *a;
    mt_tracker *t;
    const mt_chrome_options *opt;
    mt_frame_filter frames;
    uint64_t pid, t_index, offset_ns; /* offset: this trace's start after the earliest start */
    uint64_t quantum;                 /* counter bucket width in ns (>= 1) */
    int *first;                       /* no event written yet (no comma before the next one) */
    counter_state *cs;
    size_t n_cs;
    /* slice selection */
    uint64_t threshold; /* keep bytes > threshold, or == threshold while ties_left */
    uint64_t ties_left;
    int select;         /* threshold applies */
    uint64_t kept, skipped, driver_skipped;
    mt_namebuf nb;
    /* JSON formatted once and written again (offset, length in stack_blob, STACK_CACHE_BYTES in
     * all): slice stacks and first user frames by stack << 1 | driver, track names by track_key */
    mt_u64map stack_json, who_json, track_json;
    char *stack_blob;
    size_t stack_blob_n, stack_blob_cap;
    struct {
        uint64_t bytes;
        char text[24]; /* mt_format_bytes; "" = empty entry */
    } sizes[SIZE_CACHE]; /* direct-mapped by size: a trace's sizes repeat */
    char size_spill[32];  /* one too long for the table */
    slot_table slots; /* the survey's, taken over */
    int oom;
} chrome;

static void ts(mt_out *o, uint64_t ns) /* "ts":µs with ns precision */
{
    char frac[5] = {'.', (char)('0' + ns % 1000 / 100), (char)('0' + ns % 100 / 10),
                    (char)('0' + ns % 10), 0};
    WRITE_LIT(o, "\"ts\":");
    mt_out_u64(o, ns / 1000);
    mt_out_write(o, frac, 4);
}

static uint64_t rel_of(const chrome *c, uint64_t abs)
{
    uint64_t s = c->a->header.start_monotonic_ns;
    return (abs > s ? abs - s : 0) + c->offset_ns;
}

/* Starts one event: the separator, then "{". */
static void begin_event(chrome *c)
{
    mt_out_puts(c->o, *c->first ? "\n{" : ",\n{");
    *c->first = 0;
}

static const char *root_of(int32_t device, int is_host, char *buf, size_t len)
{
    mt_device_report probe = {.u = {.device = device, .is_host = is_host}};
    return mt_device_root_name(&probe, buf, len);
}

static slot_info *new_slot(slot_table *t, int32_t device, int is_host, uint16_t *ix)
{
    slot_info *n = realloc(t->v, (t->n + 1) * sizeof *n);
    if (!n) {
        t->oom = 1;
        return NULL;
    }
    t->v = n;
    t->v[t->n] = (slot_info){.device = device, .is_host = is_host};
    root_of(device, is_host, t->v[t->n].root, sizeof t->v[t->n].root);
    *ix = (uint16_t)++t->n;
    return &t->v[t->n - 1];
}

/* The slot of a device (found by ordinal: the tracker keeps ordinals to -1..MT_MAX_DEVICE_ORDINAL,
 * so a sample naming another has none). */
static inline slot_info *table_slot(slot_table *t, int32_t device, int is_host)
{
    if (is_host) device = -1;
    if (device < -1 || device > MT_MAX_DEVICE_ORDINAL) return NULL;
    uint16_t *ix = &t->ix[is_host ? 0 : device + 2];
    return *ix ? &t->v[*ix - 1] : new_slot(t, device, is_host, ix);
}

static inline slot_info *slot_of(chrome *c, int32_t device, int is_host)
{
    slot_info *si = table_slot(&c->slots, device, is_host);
    if (c->slots.oom) c->oom = 1;
    return si;
}

static int is_host_kind(unsigned kind)
{
    return kind == MT_KIND_HOST_PINNED || kind == MT_KIND_HOST_REGISTERED;
}


/* The made-up thread that holds a device's slices. */
static uint32_t virtual_tid(int32_t device, int is_host)
{
    return VIRTUAL_TID + (is_host ? 0u : (uint32_t)(device + 2) & 0xffffu);
}

static int is_caching_segment(chrome *c, unsigned kind, uint32_t stack)
{
    if (kind != MT_KIND_DEVICE && kind != MT_KIND_VMM_PHYSICAL) return 0;
    int alloc = 0;
    mt_frames_owner(c->a->frames, stack, &alloc);
    return alloc;
}

/* ---- counters ----------------------------------------------------------------------------------- */

static void counter(chrome *c, const char *root, const char *what, uint64_t when, uint64_t v);

/* A counter point unless the track already shows v (force: the trace's last point). */
static void counter_if(chrome *c, slot_info *si, int track, const char *root, const char *what,
                       uint64_t when, uint64_t v, int force)
{
    if (si && !force && si->written[track] && si->last[track] == v) return;
    if (si) {
        si->last[track] = v;
        si->written[track] = 1;
    }
    counter(c, root, what, when, v);
}

static void counter(chrome *c, const char *root, const char *what, uint64_t when, uint64_t v)
{
    mt_out *o = c->o;
    begin_event(c);
    mt_out_puts(o, "\"ph\":\"C\",\"pid\":");
    mt_out_u64(o, c->pid);
    mt_out_puts(o, ",\"tid\":0,\"name\":\"");
    mt_out_puts(o, root);
    WRITE_LIT(o, " ");
    mt_out_puts(o, what);
    WRITE_LIT(o, "\",");
    ts(o, rel_of(c, when));
    mt_out_puts(o, ",\"args\":{\"bytes\":");
    mt_out_u64(o, v);
    WRITE_LIT(o, "}}");
}

/* The kinds whose bytes are in use (mt_usage.in_use): the keys of "by kind". catapult draws a
 * counter's keys stacked, the track's height their sum, so "by kind" must add up to "in use";
 * VMM_RESERVE is address space (NCCL reserves more than it maps: a DDP rank's stack read 2.3 times
 * its bytes in use) and VMM_MAP ranges are counted by their VMM_PHYSICAL handle, as in the text
 * and HTML reports. Address space has a track of its own. */
static int in_use_kind(unsigned k)
{
    return k != MT_KIND_VMM_RESERVE && k != MT_KIND_VMM_MAP;
}

/* The device report of a usage slot: its kinds over the whole trace decide the counter keys. */
static const mt_device_report *report_of(const chrome *c, int32_t device, int is_host)
{
    const mt_analysis *a = c->a;
    if (is_host) return a->host;
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == device) return &a->devices[i];
    return NULL;
}

/* The points of every counter track of a device that changed (all of them: force). The keys of
 * "by kind" and which tracks exist follow the device's usage over the whole trace (its report; a
 * usage slot without one: the tracker's so far). */
static void emit_counters(chrome *c, const point *u, uint64_t caching, uint64_t when, int force)
{
    char root[32];
    root_of(u->device, u->is_host, root, sizeof root);
    mt_out *o = c->o;
    slot_info *si = slot_of(c, u->device, u->is_host);
    counter_if(c, si, COUNTER_IN_USE, root, "in use", when, u->in_use, force);
    const mt_device_report *d = report_of(c, u->device, u->is_host);
    const mt_usage *whole = d ? &d->u : mt_tracker_usage(c->t, u->device, u->is_host);
    int first = 1, changed = force || !si;
    for (unsigned k = 0; k < MT_KIND_MAX_ && !changed; k++)
        changed = in_use_kind(k) &&
                  (!si->written[COUNTERS_ + k] || si->last[COUNTERS_ + k] != u->by_kind[k]);
    for (unsigned k = 0; k < MT_KIND_MAX_ && changed; k++) {
        /* every kind of bytes in use the device ever had, at every point (catapult keeps the keys
         * of a counter's first event); none is named here, so new kinds show up by themselves */
        if (!in_use_kind(k)) continue;
        if (si) {
            si->last[COUNTERS_ + k] = u->by_kind[k];
            si->written[COUNTERS_ + k] = 1;
        }
        if (!whole || !whole->by_kind_peak[k]) continue;
        if (first) {
            begin_event(c);
            mt_out_puts(o, "\"ph\":\"C\",\"pid\":");
            mt_out_u64(o, c->pid);
            mt_out_puts(o, ",\"tid\":0,\"name\":\"");
            mt_out_puts(o, root);
            mt_out_puts(o, " by kind\",");
            ts(o, rel_of(c, when));
            mt_out_puts(o, ",\"args\":{");
        }
        mt_out_puts(o, first ? "\"" : ",\"");
        mt_out_puts(o, mt_kind_name(k));
        WRITE_LIT(o, "\":");
        mt_out_u64(o, u->by_kind[k]);
        first = 0;
    }
    if (!first) mt_out_puts(o, "}}");
    const mt_categorizer *cz = c->a->categories;
    if (cz && !u->is_host &&
        (!si || force || memcmp(si->last_cat, u->by_category, sizeof si->last_cat) != 0)) {
        /* record --tensors: a stacked track of what the tensors are for, every category at every
         * point (catapult keeps the keys of the first) */
        if (si) memcpy(si->last_cat, u->by_category, sizeof si->last_cat);
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"C\",\"pid\":%llu,\"tid\":0,\"name\":\"%s by category\",",
                      (unsigned long long)c->pid, root);
        ts(o, rel_of(c, when));
        mt_out_puts(o, ",\"args\":{");
        for (unsigned k = MT_CAT_PARAMETERS; k < mt_category_count(cz) && k < MT_CAT_MAX; k++) {
            if (k > MT_CAT_PARAMETERS) WRITE_LIT(o, ",");
            mt_out_json_string(o, mt_category_name(cz, k));
            mt_out_printf(o, ":%llu", (unsigned long long)u->by_category[k]);
        }
        mt_out_puts(o, "}}");
    }
    if (u->has_pool_info)
        counter_if(c, si, COUNTER_POOL, root, "pool reserved", when, u->pool_reserved, force);
    if (u->is_host) return;
    if (whole && whole->vmm_reserved_peak) /* cuMemAddressReserve: not bytes */
        counter_if(c, si, COUNTER_ADDRESS_SPACE, root, "address space", when,
                   u->vmm_reserved, force);
    uint64_t async = u->by_kind[MT_KIND_ASYNC], pool = 0;
    if (u->has_pool_info) pool = u->pool_reserved > async ? u->pool_reserved : async;
    uint64_t in_pool = u->has_pool_info ? async : 0, api = u->api_in_use;
    /* PyTorch's segments: flagged by the recorder (its live bytes are the tracker's
     * segment_bytes); older traces: classified by stack */
    if (whole && whole->segment_peak) caching = u->segment_bytes;
    int tensors = whole && whole->by_kind_peak[MT_KIND_TENSOR] > 0;
    /* in tensor mode the segments are not in api_in_use (their tensors are) */
    uint64_t mine = tensors ? u->by_kind[MT_KIND_TENSOR] + in_pool : caching + in_pool;
    counter_if(c, si, COUNTER_RESERVED, root, "allocator reserved", when, caching + pool, force);
    if (tensors)
        counter_if(c, si, COUNTER_TENSORS, root, "tensors allocated", when,
                   u->by_kind[MT_KIND_TENSOR], force);
    else if (u->has_pool_info)
        counter_if(c, si, COUNTER_TENSORS, root, "tensors allocated", when, async, force);
    counter_if(c, si, COUNTER_OTHER, root, "other libraries", when, api > mine ? api - mine : 0,
               force);
    counter_if(c, si, COUNTER_DRIVER, root, "driver-internal", when, u->by_kind[MT_KIND_DRIVER],
               force);
}

/* The time bucket of an absolute time: 0 .. (cap - 1) / 2 - 1 for the times of the trace. */
static uint64_t bucket_of(const chrome *c, uint64_t abs)
{
    return (rel_of(c, abs) - c->offset_ns) / c->quantum;
}

/* Copies the last point of usage slot i out of the tracker, if it is still only there. */
static void take_last(chrome *c, size_t i)
{
    counter_state *s = &c->cs[i];
    if (!s->last_live) return;
    const mt_usage *u;
    size_t n = mt_tracker_usages(c->t, &u);
    if (i < n) point_of(&s->last, &u[i], c->a->categories != NULL);
    s->last_live = 0;
}

/* Before the tracker applies an event at time t: a slot whose bucket that event could end (were it
 * the slot's event) gets its last point copied now, while the tracker still shows it. A slot the
 * event does not touch keeps a copy that is still right. */
static void settle_last(chrome *c, uint64_t t)
{
    for (size_t i = 0; i < c->n_cs; i++)
        if (c->cs[i].last_live && t >= c->cs[i].bucket_end) take_last(c, i);
}

static void set_bucket(chrome *c, counter_state *s, uint64_t b)
{
    uint64_t start = c->a->header.start_monotonic_ns, span, end;
    s->bucket = b;
    if (__builtin_mul_overflow(b + 1, c->quantum, &span) || b + 1 == 0 ||
        __builtin_add_overflow(start, span, &end))
        end = UINT64_MAX;
    s->bucket_end = end;
}

static void flush_bucket(chrome *c, counter_state *s)
{
    take_last(c, (size_t)(s - c->cs));
    if (s->have_max) emit_counters(c, &s->max, s->max_caching, s->max_t, 0);
    if (s->have_last && (!s->have_max || s->last_t != s->max_t || s->last.in_use != s->max.in_use))
        emit_counters(c, &s->last, s->last_caching, s->last_t, 0);
    s->have_max = s->have_last = 0;
}

/* nvidia-smi's samples of a device: the highest and the last of each bucket, as on_usage. */
static void flush_nvml(chrome *c, slot_info *si)
{
    char root[32];
    root_of(si->device, 0, root, sizeof root);
    if (si->nvml_have_max) counter(c, root, "nvidia-smi (process)", si->nvml_max_t, si->nvml_max);
    if (si->nvml_have_last &&
        (!si->nvml_have_max || si->nvml_last_t != si->nvml_max_t || si->nvml_last != si->nvml_max))
        counter(c, root, "nvidia-smi (process)", si->nvml_last_t, si->nvml_last);
    si->nvml_have_max = si->nvml_have_last = 0;
}

static void on_nvml(chrome *c, int32_t device, uint64_t time_ns, uint64_t value)
{
    slot_info *si = slot_of(c, device, 0);
    if (!si) return; /* an ordinal no device can have: no track */
    if (time_ns > si->nvml_clock) si->nvml_clock = time_ns;
    uint64_t b = bucket_of(c, si->nvml_clock);
    if (b != si->nvml_bucket) {
        flush_nvml(c, si);
        si->nvml_bucket = b;
    }
    if (!si->nvml_have_max || value > si->nvml_max) {
        si->nvml_max = value;
        si->nvml_max_t = si->nvml_clock;
        si->nvml_have_max = 1;
    }
    si->nvml_last = value;
    si->nvml_last_t = si->nvml_clock;
    si->nvml_have_last = si->have_nvml = 1;
}

static void on_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    chrome *c = ctx;
    slot_info *si = slot_of(c, u->device, u->is_host);
    uint64_t caching = si && !u->is_host ? si->caching : 0;
    const mt_usage *base;
    size_t n = mt_tracker_usages(c->t, &base), i = (size_t)(u - base);
    if (n > c->n_cs) {
        counter_state *ns = realloc(c->cs, n * sizeof *ns);
        if (!ns) {
            c->oom = 1;
            return;
        }
        memset(ns + c->n_cs, 0, (n - c->n_cs) * sizeof *ns);
        for (size_t k = c->n_cs; k < n; k++) set_bucket(c, &ns[k], 0);
        c->cs = ns;
        c->n_cs = n;
    }
    counter_state *s = &c->cs[i];
    if (time_ns > s->clock) s->clock = time_ns;
    uint64_t b = bucket_of(c, s->clock); /* never smaller than the last one */
    if (b != s->bucket) {
        flush_bucket(c, s);
        set_bucket(c, s, b);
    }
    int cats = c->a->categories != NULL;
    if (!s->have_max || u->in_use > s->max.in_use) {
        point_of(&s->max, u, cats);
        s->max_t = s->clock;
        s->max_caching = caching;
        s->have_max = 1;
    }
    s->last_live = 1;
    s->last_t = s->clock;
    s->last_caching = caching;
    s->have_last = 1;
}

/* ---- slices ------------------------------------------------------------------------------------- */

static const char *const end_names[] = {"free", "replaced", "context destroyed", "trace end"};

/* "cuda:0 async", "cuda:0 async stream 2", "host pinned". */
static void track_name(chrome *c, const mt_lifetime *l, int is_host, char *buf, size_t len)
{
    char root[32];
    root_of(l->device, is_host, root, sizeof root);
    const char *kind = mt_kind_name(l->kind);
    if (is_host && strncmp(kind, "host_", 5) == 0) kind += 5;
    slot_info *si = slot_of(c, l->device, is_host);
    size_t k = l->kind < MT_KIND_MAX_ ? l->kind : 0;
    if (!si || si->n_streams[k] <= 1) {
        snprintf(buf, len, "%s %s", root, kind);
        return;
    }
    size_t ix = 0;
    while (ix < si->n_streams[k] && ix < MAX_STREAMS && si->streams[k][ix] != l->stream) ix++;
    if (ix < MAX_STREAMS)
        snprintf(buf, len, "%s %s stream %zu", root, kind, ix + 1);
    else
        snprintf(buf, len, "%s %s, streams %u and more", root, kind, MAX_STREAMS + 1);
}

static const char *thread_name(const mt_analysis *a, uint32_t tid)
{
    for (size_t i = 0; i < a->n_threads; i++)
        if (a->threads[i].tid == tid) return a->threads[i].name;
    return NULL;
}

/* Keeps what was written to o since mark under key in map, to be written again (write_kept).
 * Nothing is kept once STACK_CACHE_BYTES are, or when it has already left the buffer. */
static void keep_written(chrome *c, mt_u64map *map, uint64_t key, uint64_t mark)
{
    size_t len;
    const char *p = mt_out_recent(c->o, mark, &len);
    if (!p || c->stack_blob_n + len > STACK_CACHE_BYTES) return; /* written, not kept */
    if (c->stack_blob_n + len > c->stack_blob_cap) {
        size_t cap = c->stack_blob_cap ? 2 * c->stack_blob_cap : 65536;
        while (cap < c->stack_blob_n + len) cap *= 2;
        char *nb = realloc(c->stack_blob, cap);
        if (!nb) return;
        c->stack_blob = nb;
        c->stack_blob_cap = cap;
    }
    mt_u64map_slot *slot = mt_u64map_upsert(map, key);
    if (!slot) return;
    memcpy(c->stack_blob + c->stack_blob_n, p, len);
    slot->a = c->stack_blob_n;
    slot->b = len;
    c->stack_blob_n += len;
}

/* Writes what keep_written kept under key; 0 when nothing is. */
static int write_kept(chrome *c, const mt_u64map *map, uint64_t key)
{
    const mt_u64map_slot *hit = mt_u64map_find(map, key);
    if (!hit) return 0;
    mt_out_write(c->o, c->stack_blob + hit->a, (size_t)hit->b);
    return 1;
}

/* ,"stack":[...] of a slice's args. Each stack is formatted once and its JSON kept (up to
 * STACK_CACHE_BYTES a trace): slices repeat a few thousand stacks, and naming and escaping their
 * frames again for each of 500 000 slices was most of the export's formatting. */
static void slice_stack(chrome *c, const mt_stack_stat *st)
{
    mt_out *o = c->o;
    uint64_t key = (uint64_t)st->stack << 1 | (st->driver != 0);
    if (write_kept(c, &c->stack_json, key)) return;
    uint64_t mark = mt_out_tell(o);
    if (mt_stat_frames(c->a->frames, st, c->opt->names, c->frames, 0, &c->nb) < 0) {
        c->oom = 1;
        c->nb.n = 0;
    }
    mt_out_puts(o, ",\"stack\":[");
    size_t from = c->nb.n > MAX_SLICE_FRAMES ? c->nb.n - MAX_SLICE_FRAMES : 0;
    for (size_t k = from; k < c->nb.n; k++) {
        if (k > from) WRITE_LIT(o, ",");
        mt_out_json_string(o, c->nb.v[k]);
    }
    mt_out_puts(o, from ? "],\"stack_truncated\":true" : "]");
    keep_written(c, &c->stack_json, key, mark);
}

/* Decimal digits of v at the end of b[20]; returns where they start. */
static char *digits(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

/* The parts of a slice event that its four events share, formatted once into buf (>= 96 bytes):
 * ","id2":{"local":"0x.."},"pid":P,"tid":T,"name": (slice_event). Returns the length. */
static size_t slice_head(const chrome *c, char *buf, uint64_t id, uint32_t tid)
{
    char num[20], *q;
    size_t n = 0;
#define PUT(s, len) (memcpy(buf + n, (s), (len)), n += (len))
#define PUTL(lit) PUT(lit, sizeof lit - 1)
    PUTL("\",\"id2\":{\"local\":\"0x");
    q = num + sizeof num;
    do {
        *--q = "0123456789abcdef"[id & 15];
        id >>= 4;
    } while (id);
    PUT(q, (size_t)(num + sizeof num - q));
    PUTL("\"},\"pid\":");
    q = digits(num + sizeof num, c->pid);
    PUT(q, (size_t)(num + sizeof num - q));
    PUTL(",\"tid\":");
    q = digits(num + sizeof num, tid);
    PUT(q, (size_t)(num + sizeof num - q));
    PUTL(",\"name\":");
#undef PUTL
#undef PUT
    return n;
}

/* The key of l's track name (track_name): its slot, kind and stream. */
static uint64_t track_key(chrome *c, const mt_lifetime *l, int is_host)
{
    slot_info *si = slot_of(c, l->device, is_host);
    size_t k = l->kind < MT_KIND_MAX_ ? l->kind : 0;
    uint64_t stream = 0; /* one track for the kind */
    if (si && si->n_streams[k] > 1) {
        size_t ix = 0;
        while (ix < si->n_streams[k] && ix < MAX_STREAMS && si->streams[k][ix] != l->stream) ix++;
        stream = ix + 1;
    }
    return (uint64_t)(uint32_t)l->device << 32 | (uint64_t)l->kind << 16 | stream << 2 |
           (uint64_t)(si != NULL) << 1 | (uint64_t)(is_host != 0);
}

/* One half of a slice: "b" or "e" of the track slice (child = 0) or of the named child. head is
 * from slice_head, ts_text the "ts":... part; the name's JSON is the one kept under key in names,
 * else name's, which is then kept. */
static void slice_event(chrome *c, int end, const char *cat, const char *head, size_t head_n,
                        mt_u64map *names, uint64_t key, const char *name, const char *ts,
                        size_t ts_n)
{
    mt_out *o = c->o;
    begin_event(c);
    if (end) WRITE_LIT(o, "\"ph\":\"e\",\"cat\":\"");
    else WRITE_LIT(o, "\"ph\":\"b\",\"cat\":\"");
    mt_out_puts(o, cat);
    mt_out_write(o, head, head_n);
    if (!write_kept(c, names, key)) {
        uint64_t mark = mt_out_tell(o);
        mt_out_json_string(o, name);
        keep_written(c, names, key, mark);
    }
    WRITE_LIT(o, ",");
    mt_out_write(o, ts, ts_n);
}

/* "ts":µs with ns precision (as ts()) into buf (>= 32 bytes); returns the length. */
static size_t ts_text(char *buf, uint64_t ns)
{
    char num[20], *q = digits(num + sizeof num, ns / 1000);
    size_t n = (size_t)(num + sizeof num - q);
    memcpy(buf, "\"ts\":", 5);
    memcpy(buf + 5, q, n);
    n += 5;
    buf[n++] = '.';
    buf[n++] = (char)('0' + ns % 1000 / 100);
    buf[n++] = (char)('0' + ns % 100 / 10);
    buf[n++] = (char)('0' + ns % 10);
    return n;
}

/* mt_format_bytes(bytes), kept in a small table: a trace's sizes repeat. */
static const char *slice_size(chrome *c, uint64_t bytes)
{
    unsigned i = (unsigned)((bytes * 0x9E3779B97F4A7C15ull) >> 54) & (SIZE_CACHE - 1);
    if (c->sizes[i].text[0] && c->sizes[i].bytes == bytes) return c->sizes[i].text;
    char buf[32];
    mt_format_bytes(bytes, buf, sizeof buf);
    if (strlen(buf) >= sizeof c->sizes[i].text) {
        c->sizes[i].text[0] = 0;
        snprintf(c->size_spill, sizeof c->size_spill, "%s", buf);
        return c->size_spill;
    }
    c->sizes[i].bytes = bytes;
    memcpy(c->sizes[i].text, buf, strlen(buf) + 1);
    return c->sizes[i].text;
}

static void on_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    chrome *c = ctx;
    int is_host = l->device < 0 && is_host_kind(l->kind);
    if (!is_host && is_caching_segment(c, l->kind, l->stack)) {
        slot_info *si = slot_of(c, l->device, 0);
        if (si) si->caching -= si->caching >= l->bytes ? l->bytes : si->caching;
    }
    if (l->kind == MT_KIND_DRIVER && !c->opt->driver_slices) {
        c->driver_skipped++;
        return;
    }
    if (l->bytes < c->opt->min_bytes || (c->select && l->bytes < c->threshold) ||
        (c->select && l->bytes == c->threshold && !c->ties_left)) {
        c->skipped++;
        return;
    }
    if (c->select && l->bytes == c->threshold) c->ties_left--;
    c->kept++;
    mt_out *o = c->o;
    /* 500 000 slices of 4 events each: what they share is formatted once per slice, names and
     * sizes once per trace (they repeat) */
    char rootbuf[32], track[96], head[96], ts_start[32], ts_end[32];
    slot_info *si = slot_of(c, l->device, is_host);
    const char *root = si ? si->root : root_of(l->device, is_host, rootbuf, sizeof rootbuf);
    uint64_t track_k = track_key(c, l, is_host);
    if (!mt_u64map_find(&c->track_json, track_k)) track_name(c, l, is_host, track, sizeof track);
    mt_stack_stat st = {.stack = l->stack, .driver = l->kind == MT_KIND_DRIVER};
    uint64_t who_k = (uint64_t)st.stack << 1 | (st.driver != 0);
    const char *who = NULL;
    if (!mt_u64map_find(&c->who_json, who_k))
        who = st.driver ? mt_pseudo_name(MT_PSEUDO_DRIVER_INTERNAL)
                        : mt_frames_first_user(c->a->frames, l->stack, c->opt->names);
    uint64_t id = c->t_index << 48 | l->serial;
    uint32_t vt = virtual_tid(l->device, is_host);
    uint64_t start = rel_of(c, l->start_ns), end = rel_of(c, end_ns);
    if (end < start) end = start; /* activity records may arrive late: never a negative slice */
    size_t head_n = slice_head(c, head, id, vt);
    size_t start_n = ts_text(ts_start, start), end_n = ts_text(ts_end, end);
    char bytes_buf[20], *bytes = digits(bytes_buf + sizeof bytes_buf, l->bytes);
    size_t bytes_n = (size_t)(bytes_buf + sizeof bytes_buf - bytes);
    slice_event(c, 0, root, head, head_n, &c->track_json, track_k, track, ts_start, start_n);
    WRITE_LIT(o, ",\"args\":{\"bytes\":");
    mt_out_write(o, bytes, bytes_n);
    WRITE_LIT(o, "}}");
    slice_event(c, 0, root, head, head_n, &c->who_json, who_k, who, ts_start, start_n);
    WRITE_LIT(o, ",\"args\":{\"bytes\":");
    mt_out_write(o, bytes, bytes_n);
    WRITE_LIT(o, ",\"size\":\"");
    mt_out_puts(o, slice_size(c, l->bytes));
    WRITE_LIT(o, "\",\"kind\":\"");
    mt_out_puts(o, mt_kind_name(l->kind));
    WRITE_LIT(o, "\",\"stream\":\"");
    mt_out_hex(o, l->stream);
    WRITE_LIT(o, "\",\"address\":\"");
    mt_out_hex(o, l->address);
    WRITE_LIT(o, "\",\"ended\":\"");
    mt_out_puts(o, end_names[why & 3]);
    WRITE_LIT(o, "\",\"tid\":");
    mt_out_u64(o, l->tid);
    if (l->category && c->a->categories) { /* final: it is ending */
        mt_out_puts(o, ",\"category\":");
        mt_out_json_string(o, mt_category_name(c->a->categories, l->category));
    }
    const char *tn = thread_name(c->a, l->tid);
    if (tn) {
        mt_out_puts(o, ",\"thread\":");
        mt_out_json_string(o, tn);
    }
    slice_stack(c, &st);
    WRITE_LIT(o, "}}");
    slice_event(c, 1, root, head, head_n, &c->who_json, who_k, who, ts_end, end_n);
    WRITE_LIT(o, "}");
    slice_event(c, 1, root, head, head_n, &c->track_json, track_k, track, ts_end, end_n);
    WRITE_LIT(o, "}");
}

/* ---- survey: streams per device and kind, the N largest lifetimes ------------------------------- */

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

static void note_stream(slot_table *t, const mt_event *e)
{
    int is_host = is_host_kind(e->kind);
    slot_info *si = table_slot(t, e->device, is_host);
    if (!si || e->kind >= MT_KIND_MAX_) return;
    uint8_t *n = &si->n_streams[e->kind];
    for (size_t i = 0; i < *n && i < MAX_STREAMS; i++)
        if (si->streams[e->kind][i] == e->stream) return;
    if (*n < MAX_STREAMS) si->streams[e->kind][*n] = e->stream;
    if (*n <= MAX_STREAMS) (*n)++;
}

/* The `keep` largest sizes, as a size-keep min-heap of them (heap[0]: the keep-th largest). */
typedef struct top_sizes {
    uint64_t *heap;
    size_t n, keep;
} top_sizes;

static void top_add(top_sizes *t, uint64_t bytes)
{
    if (t->n < t->keep) {
        t->heap[t->n] = bytes;
        heap_up(t->heap, t->n++);
    } else if (bytes > t->heap[0]) {
        t->heap[0] = bytes;
        heap_down(t->heap, t->n, 0);
    }
}

typedef struct size_count {
    uint64_t bytes, count;
} size_count;

static int by_size_desc(const void *pa, const void *pb)
{
    const size_count *a = pa, *b = pb;
    return a->bytes > b->bytes ? -1 : a->bytes < b->bytes;
}

/* What the export must know before it writes a slice, from a first read of the trace: the streams
 * of each device and kind, and the `keep` largest sizes (the threshold is set when there are more
 * lifetimes than that). Every ALLOC (except VMM_MAP, which is a mapping, not a lifetime) starts one
 * lifetime. Sizes repeat, so they are counted by value while there are at most SURVEY_SIZES
 * different ones, and the threshold found from the counts; a trace of more goes on in a heap of the
 * `keep` largest (a heap of 500 000 sizes for every allocation was half of the survey's time).
 * Either gives the same threshold and ties: the keep-th largest size, and how many of that size
 * are kept. The CLI makes the survey while mt_analyze reads the trace (mt_analyze_options.on_event):
 * the survey's own read was a third of the export's time. */
struct mt_chrome_survey {
    const mt_chrome_options *opt;
    slot_table slots;
    mt_event last; /* device, kind and stream of the last ALLOC noted: most repeat it */
    int have_last;
    top_sizes top;     /* top.keep: the cap (the default one or --top-allocs) */
    mt_u64map counts;  /* size -> a: how many (until there are too many sizes: heap) */
    size_t n_sizes;
    uint64_t total;    /* lifetimes that could have a slice */
    int oom;
};

void mt_chrome_survey_free(mt_chrome_survey *sv)
{
    if (!sv) return;
    free(sv->slots.v);
    free(sv->top.heap);
    mt_u64map_destroy(&sv->counts);
    free(sv);
}

void mt_chrome_survey_event(void *survey, const mt_event *e)
{
    mt_chrome_survey *sv = survey;
    if (sv->oom || e->op != MT_OP_ALLOC || e->kind == MT_KIND_VMM_MAP) return;
    if (e->kind == MT_KIND_DRIVER && !sv->opt->driver_slices) return;
    if (!sv->have_last || e->device != sv->last.device || e->kind != sv->last.kind ||
        e->stream != sv->last.stream) {
        note_stream(&sv->slots, e);
        sv->last = *e;
        sv->have_last = 1;
    }
    if (e->bytes < sv->opt->min_bytes) return;
    sv->total++;
    top_sizes *top = &sv->top;
    if (top->heap) {
        top_add(top, e->bytes);
        return;
    }
    mt_u64map_slot *sl = mt_u64map_upsert(&sv->counts, e->bytes);
    if (!sl) {
        sv->oom = 1;
        return;
    }
    if (!sl->a++) sv->n_sizes++;
    if (sv->n_sizes <= SURVEY_SIZES) return;
    /* too many different sizes: those counted so far go into the heap */
    if (!(top->heap = malloc(top->keep * sizeof *top->heap))) {
        sv->oom = 1;
        return;
    }
    for (size_t i = 0; i < sv->counts.cap; i++)
        for (uint64_t k = 0; sv->counts.slots[i].used && k < sv->counts.slots[i].a; k++)
            top_add(top, sv->counts.slots[i].key);
    mt_u64map_destroy(&sv->counts);
}

/* The survey's own read, for a caller that did not make it alongside the analysis. */
static int survey_read(mt_chrome_survey *sv, const mt_analysis *a, char *err, size_t errlen)
{
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    mt_record rec;
    while (!sv->oom && mt_reader_next(r, &rec) == MT_READ_RECORD)
        if (rec.type == MT_REC_EVENT) mt_chrome_survey_event(sv, &rec.u.event);
    mt_reader_close(r);
    return 0;
}

/* The threshold from the survey, when more than `keep` lifetimes could have slices; the export
 * takes over the survey's slots. */
static int survey_finish(chrome *c, mt_chrome_survey *sv, uint64_t keep, char *err, size_t errlen)
{
    int oom = sv->oom || sv->slots.oom;
    c->slots = sv->slots;
    sv->slots = (slot_table){0};
    if (!oom && keep && sv->total > keep) {
        c->select = 1;
        uint64_t above = 0;
        if (sv->top.heap) {
            c->threshold = sv->top.heap[0];
            for (size_t i = 0; i < sv->top.n; i++) above += sv->top.heap[i] > c->threshold;
        } else { /* the largest sizes first, until keep lifetimes are covered */
            size_count *v = malloc((sv->n_sizes ? sv->n_sizes : 1) * sizeof *v);
            size_t m = 0;
            if (!v) oom = 1;
            for (size_t i = 0; v && i < sv->counts.cap; i++)
                if (sv->counts.slots[i].used)
                    v[m++] = (size_count){sv->counts.slots[i].key, sv->counts.slots[i].a};
            if (v) qsort(v, m, sizeof *v, by_size_desc);
            for (size_t i = 0; v && i < m; i++) {
                if (above + v[i].count >= keep) {
                    c->threshold = v[i].bytes;
                    break;
                }
                above += v[i].count;
            }
            free(v);
        }
        c->ties_left = keep - above;
    }
    if (oom) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* ---- one trace ---------------------------------------------------------------------------------- */

static void metadata(chrome *c)
{
    mt_out *o = c->o;
    begin_event(c);
    mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":0,\"name\":\"process_name\","
                     "\"args\":{\"name\":", (unsigned long long)c->pid);
    /* the viewers add the pid themselves: "rank 3 (host)" for a job's rank, else the command */
    char label[256];
    if (c->a->header.flags & MT_HDR_RANK && c->a->header.rank >= 0)
        mt_out_json_string(o, mt_trace_label(c->a, label, sizeof label));
    else
        mt_out_json_string(o, c->a->comm[0] ? c->a->comm : "process");
    mt_out_puts(o, "}}");
    if (c->a->header.flags & MT_HDR_RANK && c->a->header.rank >= 0) { /* ranks in rank order */
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":0,\"name\":\"process_sort_index\","
                         "\"args\":{\"sort_index\":%d}}",
                      (unsigned long long)c->pid, (int)c->a->header.rank);
    }
    char root[32], name[64];
    for (size_t i = 0; i < c->a->n_devices + (c->a->host != NULL); i++) {
        const mt_device_report *d = i < c->a->n_devices ? &c->a->devices[i] : c->a->host;
        begin_event(c);
        snprintf(name, sizeof name, "%s allocations", mt_device_root_name(d, root, sizeof root));
        mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":%u,\"name\":\"thread_name\","
                         "\"args\":{\"name\":\"%s\"}}",
                      (unsigned long long)c->pid, virtual_tid(d->u.device, d->u.is_host), name);
    }
}

static void instants(chrome *c)
{
    mt_out *o = c->o;
    char root[32], b[32], name[128];
    mt_analysis *a = c->a;
    if (!a->n_devices && !a->host) {
        /* Nothing else of this trace has a time: catapult would build an empty model and show a
         * blank page (an instant of the process does not count in its bounds), Perfetto an empty
         * process. One slice over the recording says why, on a made-up thread of its own. */
        uint32_t tid = VIRTUAL_TID + 0xffffu;
        uint64_t id = c->t_index << 48; /* no lifetime has serial 0 here: there are none */
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":%u,\"name\":\"thread_name\","
                         "\"args\":{\"name\":\"memtrace\"}}",
                      (unsigned long long)c->pid, tid);
        char head[96], t[40];
        size_t head_n = slice_head(c, head, id, tid);
        for (int end = 0; end < 2; end++) {
            begin_event(c);
            mt_out_puts(o, end ? "\"ph\":\"e\",\"cat\":\"memtrace" : "\"ph\":\"b\",\"cat\":\"memtrace");
            mt_out_write(o, head, head_n);
            mt_out_puts(o, "\"no GPU memory events\",");
            mt_out_write(o, t, ts_text(t, c->offset_ns + (end ? a->duration_ns : 0)));
            mt_out_puts(o, "}");
        }
    }
    for (size_t i = 0; i < a->n_devices + (a->host != NULL); i++) {
        const mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        if (!d->u.peak) continue;
        snprintf(name, sizeof name, "peak %s %s", mt_device_root_name(d, root, sizeof root),
                 mt_format_bytes(d->u.peak, b, sizeof b));
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"i\",\"s\":\"p\",\"pid\":%llu,\"tid\":0,\"name\":\"%s\",",
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
    int host = is_host_kind(e->kind);
    snprintf(name, sizeof name, "failed %s %s %s", root_of(host ? -1 : e->device, host, root, sizeof root),
             mt_format_bytes(e->bytes, b, sizeof b), mt_kind_name(e->kind));
    const mt_usage *u = mt_tracker_usage(c->t, host ? -1 : e->device, host);
    uint64_t in_use = u ? u->in_use : 0;
    begin_event(c);
    mt_out_printf(o, "\"ph\":\"i\",\"s\":\"p\",\"pid\":%llu,\"tid\":%u,\"name\":\"%s\",",
                  (unsigned long long)c->pid, e->tid, name);
    ts(o, rel_of(c, e->time_ns));
    mt_out_printf(o, ",\"args\":{\"bytes\":%llu,\"kind\":\"%s\",\"result\":%u,\"in_use\":%llu,"
                     "\"first_user_frame\":",
                  (unsigned long long)e->bytes, mt_kind_name(e->kind), e->result,
                  (unsigned long long)in_use);
    mt_out_json_string(o, mt_frames_first_user(c->a->frames, e->stack, c->opt->names));
    mt_out_puts(o, "}}");
}

/* The last point of every counter, at the end of the trace (where the slices end too). */
static void final_counters(chrome *c, uint64_t end)
{
    const mt_usage *u;
    size_t n = mt_tracker_usages(c->t, &u);
    for (size_t i = 0; i < c->n_cs; i++) flush_bucket(c, &c->cs[i]);
    char root[32];
    for (size_t i = 0; i < n; i++) {
        if (!u[i].alloc_count && !u[i].free_count && !u[i].has_pool_info) continue;
        slot_info *si = slot_of(c, u[i].device, u[i].is_host);
        point p;
        point_of(&p, &u[i], c->a->categories != NULL);
        emit_counters(c, &p, si && !u[i].is_host ? si->caching : 0, end, 1);
    }
    for (size_t i = 0; i < c->slots.n; i++) {
        slot_info *si = &c->slots.v[i];
        if (!si->have_nvml) continue;
        flush_nvml(c, si);
        counter(c, root_of(si->device, 0, root, sizeof root), "nvidia-smi (process)", end,
                si->nvml_last);
    }
}

static int one_trace(chrome *c, mt_chrome_survey *sv, char *err, size_t errlen)
{
    mt_analysis *a = c->a;
    uint64_t keep = sv->top.keep;
    if (!c->opt->top_allocs && a->events <= keep) keep = 0; /* no cap can apply */
    if (survey_finish(c, sv, keep, err, errlen) < 0) return -1;
    uint64_t cap = c->opt->max_counter_points ? c->opt->max_counter_points
                                              : MT_CHROME_MAX_COUNTER_POINTS;
    if (cap < 3) cap = 3;
    c->quantum = a->duration_ns / ((cap - 1) / 2) + 1; /* so bucket_of < (cap - 1) / 2 */
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
    if (a->categories) mt_tracker_set_categorizer(c->t, a->categories);
    mt_record rec;
    uint64_t n = 0, last = a->header.start_monotonic_ns;
    while (!c->oom && mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type == MT_REC_SAMPLE && rec.u.sample.counter == MT_COUNTER_NVML_PROCESS_BYTES) {
            on_nvml(c, rec.u.sample.device, rec.u.sample.time_ns, rec.u.sample.value);
            continue;
        }
        if (rec.type != MT_REC_EVENT) continue;
        const mt_event *e = &rec.u.event;
        /* counted before the tracker applies it: its usage hook must see the new segment */
        if (e->op == MT_OP_ALLOC && !is_host_kind(e->kind) &&
            is_caching_segment(c, e->kind, e->stack)) {
            slot_info *si = slot_of(c, e->device, 0);
            if (si) si->caching += e->bytes;
        }
        if (e->time_ns > last) last = e->time_ns;
        if (e->op == MT_OP_FAILED) failed_instant(c, e);
        settle_last(c, e->time_ns);
        if (mt_tracker_event(c->t, e) < 0) c->oom = 1;
        if (c->opt->progress && ++n % 65536 == 0)
            c->opt->progress(c->opt->progress_ctx,
                             (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
    }
    /* Lifetimes still open end where the trace ends (END record or last event); so do the
     * counters. */
    uint64_t end = a->header.start_monotonic_ns + a->duration_ns;
    if (last > end) end = last;
    final_counters(c, end);
    mt_tracker_finish(c->t, end);
    mt_tracker_free(c->t);
    c->t = NULL;
    mt_reader_close(r);
    if (c->oom) snprintf(err, errlen, "%s: out of memory", a->path);
    return c->oom ? -1 : 0;
}

/* Several traces, one at a time (the CLI frees each analysis before the next): what the closing
 * otherData needs is kept here. */
typedef struct damage_note {
    char *path, *first, *truncated; /* first: the first damaged chunk; truncated: why, or NULL */
    uint64_t chunks, bytes;
} damage_note;

struct mt_chrome_stream {
    mt_out *o;
    mt_chrome_options opt;
    uint64_t base;
    uint64_t kept, skipped, driver, dropped, damaged, damaged_bytes;
    int capped, first, truncated;
    size_t n;
    char **paths;
    damage_note *damage; /* the traces that were damaged or truncated */
    size_t n_damage;
};

mt_chrome_stream *mt_chrome_begin(mt_out *o, const mt_chrome_options *opt,
                                  uint64_t base_realtime_ns)
{
    mt_chrome_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = o;
    if (opt) s->opt = *opt;
    s->base = base_realtime_ns;
    s->first = 1;
    mt_out_puts(o, "{\"traceEvents\":[");
    return s;
}

mt_chrome_survey *mt_chrome_survey_begin(const mt_chrome_stream *s)
{
    mt_chrome_survey *sv = calloc(1, sizeof *sv);
    if (!sv) return NULL;
    sv->opt = &s->opt;
    sv->top.keep = s->opt.top_allocs ? s->opt.top_allocs : MT_CHROME_DEFAULT_MAX_SLICES;
    return sv;
}

int mt_chrome_add(mt_chrome_stream *s, mt_analysis *a, char *err, size_t errlen)
{
    mt_chrome_survey *sv = mt_chrome_survey_begin(s);
    if (!sv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (survey_read(sv, a, err, errlen) < 0) {
        mt_chrome_survey_free(sv);
        return -1;
    }
    return mt_chrome_add_surveyed(s, a, sv, err, errlen);
}

int mt_chrome_add_surveyed(mt_chrome_stream *s, mt_analysis *a, mt_chrome_survey *sv, char *err,
                           size_t errlen)
{
    char **np = realloc(s->paths, (s->n + 1) * sizeof *np);
    if (!np || !(np[s->n] = strdup(a->path ? a->path : ""))) {
        if (np) s->paths = np;
        mt_chrome_survey_free(sv);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->paths = np;
    uint64_t start = a->header.start_realtime_ns;
    chrome c = {.o = s->o, .a = a, .opt = &s->opt, .pid = a->pid, .t_index = s->n++,
                .offset_ns = start > s->base ? start - s->base : 0, .first = &s->first,
                .frames = mt_frames_resolve(a->frames, s->opt.frames)};
    int rc = one_trace(&c, sv, err, errlen);
    mt_chrome_survey_free(sv);
    free(c.cs);
    free(c.slots.v);
    mt_namebuf_free(&c.nb);
    mt_u64map_destroy(&c.stack_json);
    mt_u64map_destroy(&c.who_json);
    mt_u64map_destroy(&c.track_json);
    free(c.stack_blob);
    s->kept += c.kept;
    s->skipped += c.skipped;
    s->driver += c.driver_skipped;
    s->capped |= c.select && !s->opt.top_allocs;
    s->truncated |= a->truncated;
    s->dropped += a->dropped;
    s->damaged += a->damaged_chunks;
    s->damaged_bytes += a->damaged_bytes;
    if (a->damaged_chunks || a->truncated) {
        damage_note *nd = realloc(s->damage, (s->n_damage + 1) * sizeof *nd);
        if (!nd) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        s->damage = nd;
        nd[s->n_damage++] = (damage_note){
            strdup(a->path ? a->path : ""), a->damage_msg ? strdup(a->damage_msg) : NULL,
            a->truncated && a->truncated_msg ? strdup(a->truncated_msg) : NULL, a->damaged_chunks,
            a->damaged_bytes};
    }
    return rc;
}

void mt_chrome_abandon(mt_chrome_stream *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->paths[i]);
    for (size_t i = 0; i < s->n_damage; i++) {
        free(s->damage[i].path);
        free(s->damage[i].first);
        free(s->damage[i].truncated);
    }
    free(s->damage);
    free(s->paths);
    free(s);
}

int mt_chrome_end(mt_chrome_stream *s)
{
    mt_out *o = s->o;
    mt_out_puts(o, "\n],\"otherData\":{\"generator\":\"memtrace " MEMTRACE_VERSION "\",\"traces\":[");
    for (size_t i = 0; i < s->n; i++) {
        if (i) WRITE_LIT(o, ",");
        mt_out_json_string(o, s->paths[i]);
        free(s->paths[i]);
    }
    mt_out_printf(o, "],\"slices_kept\":%llu,\"slices_left_out\":%llu,"
                     "\"driver_internal_slices_left_out\":%llu,\"min_bytes\":%llu,"
                     "\"top_allocs\":%llu,\"default_cap_applied\":%s",
                  (unsigned long long)s->kept, (unsigned long long)s->skipped,
                  (unsigned long long)s->driver, (unsigned long long)s->opt.min_bytes,
                  (unsigned long long)s->opt.top_allocs, s->capped ? "true" : "false");
    if (s->capped)
        mt_out_printf(o, ",\"note\":\"only the %u largest allocations per trace have slices "
                         "(default cap, about 200 MB); use --top-allocs or --min-bytes\"",
                      MT_CHROME_DEFAULT_MAX_SLICES);
    mt_out_printf(o, ",\"truncated\":%s,\"dropped_events\":%llu,\"damaged_chunks\":%llu,"
                     "\"damaged_bytes\":%llu,\"damage\":[",
                  s->truncated ? "true" : "false", (unsigned long long)s->dropped,
                  (unsigned long long)s->damaged, (unsigned long long)s->damaged_bytes);
    for (size_t i = 0; i < s->n_damage; i++) { /* per damaged or truncated trace: what was lost */
        damage_note *d = &s->damage[i];
        mt_out_puts(o, i ? ",{\"trace\":" : "{\"trace\":");
        mt_out_json_string(o, d->path);
        mt_out_printf(o, ",\"damaged_chunks\":%llu,\"damaged_bytes\":%llu,\"first\":",
                      (unsigned long long)d->chunks, (unsigned long long)d->bytes);
        mt_out_json_string(o, d->first ? d->first : "");
        mt_out_puts(o, ",\"truncated\":");
        mt_out_json_string(o, d->truncated ? d->truncated : "");
        WRITE_LIT(o, "}");
        free(d->path);
        free(d->first);
        free(d->truncated);
    }
    mt_out_puts(o, "]}}\n");
    free(s->damage);
    free(s->paths);
    free(s);
    return 0;
}

int mt_export_chrome(mt_out *o, mt_analysis *const *a, size_t n, const mt_chrome_options *opt,
                     char *err, size_t errlen)
{
    uint64_t base = ~0ull;
    for (size_t i = 0; i < n; i++)
        if (a[i]->header.start_realtime_ns < base) base = a[i]->header.start_realtime_ns;
    mt_chrome_stream *s = mt_chrome_begin(o, opt, n ? base : 0);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (mt_chrome_add(s, a[i], err, errlen) < 0) {
            mt_chrome_abandon(s);
            return -1;
        }
    return mt_chrome_end(s);
}
