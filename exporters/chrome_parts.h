/* What the Chrome export's files share (not part of the public API): the layout of one trace's
 * export (chrome.c says what it writes), the per-device slots, and the parts' entry points:
 *   chrome.c           one trace (metadata, instants, the read that drives the tracker) and the
 *                      stream of traces
 *   chrome_counters.c  the counter tracks: points bucketed in time, the peak kept exact
 *   chrome_slices.c    one slice per allocation, with what it shares formatted once
 *   chrome_survey.c    the first read: streams per device and kind, the N largest lifetimes
 */
#ifndef MT_EXPORT_CHROME_PARTS_H
#define MT_EXPORT_CHROME_PARTS_H

#include <stddef.h>
#include <stdint.h>
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
#define OWNER_CACHE_BITS 10     /* is_caching_segment's answers kept, by stack */

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

static inline void point_of(point *p, const mt_usage *u, int categories)
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
    /* is_caching_segment's answers by stack, direct-mapped; all zero is a right entry (stack 0,
     * none). mt_frames_owner keeps its own in a map, looked up at every allocation and release of
     * device memory: with its hashing, ~5% of the export's main thread on 10 M synthetic events
     * (perf samples in mt_u64map_find and mt_frames_owner from these calls). */
    struct {
        uint32_t stack;
        int alloc;
    } owners[1u << OWNER_CACHE_BITS];
    int oom;
} chrome;

/* "ts":µs with ns precision */
static inline void ts(mt_out *o, uint64_t ns)
{
    char frac[5] = {'.', (char)('0' + ns % 1000 / 100), (char)('0' + ns % 100 / 10),
                    (char)('0' + ns % 10), 0};
    WRITE_LIT(o, "\"ts\":");
    mt_out_u64(o, ns / 1000);
    mt_out_write(o, frac, 4);
}

static inline uint64_t rel_of(const chrome *c, uint64_t abs)
{
    uint64_t s = c->a->header.start_monotonic_ns;
    return (abs > s ? abs - s : 0) + c->offset_ns;
}

/* Starts one event: the separator, then "{". */
static inline void begin_event(chrome *c)
{
    mt_out_puts(c->o, *c->first ? "\n{" : ",\n{");
    *c->first = 0;
}

static inline const char *root_of(int32_t device, int is_host, char *buf, size_t len)
{
    mt_device_report probe = {.u = {.device = device, .is_host = is_host}};
    return mt_device_root_name(&probe, buf, len);
}

/* Appends the slot of a device to t (its index + 1 in *ix); NULL when out of memory (t->oom). */
slot_info *mt_chrome_new_slot(slot_table *t, int32_t device, int is_host, uint16_t *ix);

/* The slot of a device (found by ordinal: the tracker keeps ordinals to -1..MT_MAX_DEVICE_ORDINAL,
 * so a sample naming another has none). */
static inline slot_info *table_slot(slot_table *t, int32_t device, int is_host)
{
    if (is_host) device = -1;
    if (device < -1 || device > MT_MAX_DEVICE_ORDINAL) return NULL;
    uint16_t *ix = &t->ix[is_host ? 0 : device + 2];
    return *ix ? &t->v[*ix - 1] : mt_chrome_new_slot(t, device, is_host, ix);
}

static inline slot_info *slot_of(chrome *c, int32_t device, int is_host)
{
    slot_info *si = table_slot(&c->slots, device, is_host);
    if (c->slots.oom) c->oom = 1;
    return si;
}

static inline int is_host_kind(unsigned kind)
{
    return kind == MT_KIND_HOST_PINNED || kind == MT_KIND_HOST_REGISTERED;
}

/* The made-up thread that holds a device's slices. */
static inline uint32_t virtual_tid(int32_t device, int is_host)
{
    return VIRTUAL_TID + (is_host ? 0u : (uint32_t)(device + 2) & 0xffffu);
}

/* 1 when an allocation of this kind and stack is a caching allocator's segment. */
static inline int is_caching_segment(chrome *c, unsigned kind, uint32_t stack)
{
    if (kind != MT_KIND_DEVICE && kind != MT_KIND_VMM_PHYSICAL) return 0;
    /* a stack's owner is fixed once the analysis has named its frames */
    unsigned i = (stack * 0x9E3779B1u) >> (32 - OWNER_CACHE_BITS);
    if (c->owners[i].stack == stack) return c->owners[i].alloc;
    int alloc = 0;
    mt_frames_owner(c->a->frames, stack, &alloc);
    c->owners[i].stack = stack;
    c->owners[i].alloc = alloc;
    return alloc;
}

/* ---- counters (chrome_counters.c) ------------------------------------------------------------ */

/* The tracker's usage hook: a device's usage changed at time_ns. */
void mt_chrome_on_usage(void *ctx, const mt_usage *u, uint64_t time_ns);
/* An nvidia-smi (process) sample of a device. */
void mt_chrome_on_nvml(chrome *c, int32_t device, uint64_t time_ns, uint64_t value);
/* One counter point: "<root> <what>" = v at `when` (an absolute time). */
void mt_chrome_counter(chrome *c, const char *root, const char *what, uint64_t when, uint64_t v);
/* The last point of every counter, at the end of the trace (where the slices end too). */
void mt_chrome_final_counters(chrome *c, uint64_t end);
void mt_chrome_take_last(chrome *c, size_t i); /* see mt_chrome_settle_last */

/* Before the tracker applies an event at time t: a slot whose bucket that event could end (were it
 * the slot's event) gets its last point copied now, while the tracker still shows it. A slot the
 * event does not touch keeps a copy that is still right. (Every event: inline.) */
static inline void mt_chrome_settle_last(chrome *c, uint64_t t)
{
    for (size_t i = 0; i < c->n_cs; i++)
        if (c->cs[i].last_live && t >= c->cs[i].bucket_end) mt_chrome_take_last(c, i);
}

/* ---- slices (chrome_slices.c) ---------------------------------------------------------------- */

/* The tracker's release hook: a lifetime ended; its slice, unless the selection skips it. */
void mt_chrome_on_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why);
/* The parts of a slice event that its four events share, formatted once into buf (>= 96 bytes):
 * ","id2":{"local":"0x.."},"pid":P,"tid":T,"name": (slice_event). Returns the length. */
size_t mt_chrome_slice_head(const chrome *c, char *buf, uint64_t id, uint32_t tid);
/* "ts":µs with ns precision (as ts()) into buf (>= 32 bytes); returns the length. */
size_t mt_chrome_ts_text(char *buf, uint64_t ns);

/* ---- survey (chrome_survey.c) ---------------------------------------------------------------- */

/* The `keep` largest sizes, as a size-keep min-heap of them (heap[0]: the keep-th largest). */
typedef struct top_sizes {
    uint64_t *heap;
    size_t n, keep;
} top_sizes;

/* What the export must know before it writes a slice, from a first read of the trace: the streams
 * of each device and kind, and the `keep` largest sizes (the threshold is set when there are more
 * lifetimes than that). Every ALLOC (except VMM_MAP, which is a mapping, not a lifetime) starts one
 * lifetime. Sizes repeat, so they are counted by value while there are at most SURVEY_SIZES
 * different ones, and the threshold found from the counts; a trace of more goes on in a heap of the
 * `keep` largest (a heap of 500 000 sizes for every allocation was half of the survey's time).
 * Either gives the same threshold and ties: the keep-th largest size, and how many of that size
 * are kept. The CLI makes the survey while mt_analyze reads the trace
 * (mt_analyze_options.on_event): the survey's own read was a third of the export's time. */
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

mt_chrome_survey *mt_chrome_survey_new(const mt_chrome_options *opt);
/* The survey's own read, for a caller that did not make it alongside the analysis. */
int mt_chrome_survey_read(mt_chrome_survey *sv, const mt_analysis *a, char *err, size_t errlen);
/* The threshold from the survey, when more than `keep` lifetimes could have slices; the export
 * takes over the survey's slots. */
int mt_chrome_survey_finish(chrome *c, mt_chrome_survey *sv, uint64_t keep, char *err,
                            size_t errlen);

#endif
