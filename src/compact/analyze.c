/* mt_analyze: a trace file -> mt_analysis, in one streaming pass (two when the names that tensors'
 * categories come from came too late).
 *
 *   first   the symbols the trace ends with (`record` appends them after the recording), read
 *           from its end backwards (mt_reader_tail_symbols), so that stacks have their names as
 *           their events are read.
 *   pass 1  every record: frames, process/devices/threads/notes, dropped/END; every event through
 *           a tracker. Gives each device's peak (value, time, event number), totals, the usage
 *           timeline, failed requests with what was live on their device at that moment, bytes
 *           allocated by stack, and what is still live at the end (by stack, and by holder:
 *           an allocator's cache, a library, the driver, or the program). It also gathers what
 *           was live at each device's peak (mt_peak_keep, analysis_parts.h). With tensors its
 *           tracker gives each one its category (categories.c) from the first on, and pass 1
 *           notes after the latest peak what the categories there wait for (the phase end after
 *           it, the next backward pass's end: mt_after_peak) and the failures' categories at
 *           their moment. The categorizer remembers the names each category was made from; at
 *           the end they are compared with the final names (mt_categorizer_check).
 *   pass 2  only when that check fails (a record that names a frame came after a stack with it
 *           was categorized) or naming while reading cost more than a bound: events, through a
 *           fresh tracker, until the last device's peak event: what was live at each device's
 *           peak is aggregated by stack (peak_replay.c), the tracker gives each tensor its
 *           category, and the replay goes on past the peak until the phase of the peak has
 *           ended; on the way it takes what the kept failed requests need (failure_replay.c),
 *           and reads on up to the last of them if it has to. Without it a failure that needs
 *           its backward() call has a read of its own.
 * Memory: the live set, per-stack aggregates and frame tables; never the event count.
 *
 * The trace is opened once (mt_input_open: a pipe is copied to a temporary file) and both passes,
 * and the exporters' later reads, go through that descriptor, so a FIFO works and a file replaced
 * between the passes is not mixed with the old one. Damaged chunks are stepped over and counted
 * (a->damaged_*) unless opt->strict. Every step is linear in the trace whatever it holds: the
 * tracker keeps at most MT_MAX_DEVICE_ORDINAL + 2 device slots, and what is done per device (the
 * live set at its peak and at the end, its stack lists, its NVML samples) is done for all devices
 * in one walk; records that accumulate (threads, warnings, devices) grow geometrically and DEVICE
 * records are kept once per ordinal; the NVML pairing's look at recent changes is bounded
 * (nvml_pairing.h).
 *
 * This file is pass 1 and the analysis as a whole; the parts with a job of their own are
 * nvml_pairing.c (NVML's samples against the live bytes), live_sets.c (the live set at a failed
 * request and at the end), peak_replay.c (what was live at each peak: pass 2) and
 * failure_replay.c (what a failed request needs that pass 1 cannot know at its moment).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis_parts.h"
#include "err_text.h" /* src/util: mt_err_text */
#include "grow.h" /* src/util: mt_grow */
#include "internal.h"
#include "nvml_pairing.h"
#include "tracker_core.h" /* pass 1's events take the tracker's path with its hooks inlined */

typedef struct timeline {
    uint64_t api_visible; /* the slot's NVML-visible bytes less driver-internal */
    uint64_t width; /* ns per bucket; doubles when the trace outgrows MT_TIMELINE_POINTS buckets */
    uint64_t lo, hi, b; /* the last bucket noted and its times [lo, hi): most events fall in it,
                           and a division per event was a tenth of pass 1's own time */
    uint64_t n;     /* buckets in use (highest index + 1) */
    mt_timeline_point p[MT_TIMELINE_POINTS];
} timeline;

typedef struct dev_info {
    int32_t ordinal;
    char *name, *uuid;
    uint64_t total;
} dev_info;

typedef struct pass1 {
    mt_nvml_pairing nvml; /* NVML's samples against the live bytes (nvml_pairing.h) */
    mt_tracker *t;
    uint64_t start;
    timeline *tl[MT_N_SLOTS]; /* by slot key, made at a slot's first usage change (~28 KiB each) */
    size_t cap_threads, cap_warnings, cap_devs; /* of a->threads, a->warnings, the dev_info list */
    mt_peak_keep *keep[MT_N_SLOTS]; /* by slot key, made at a device's first peak */
    uint16_t kept[MT_N_SLOTS];      /* the slot keys that have one, in the order made */
    size_t n_kept;
    mt_categorizer *cats;  /* a->categories once the tracker categorizes (tensors, names at hand) */
    uint64_t symbols_from; /* the trace's trailing symbols, read before it: from this offset on */
    int oom;
    mt_recording_cost running_cost; /* the last running totals (MT_COST_NOTE_RUNNING): the
                                       cost when the notes at exit are missing */
    mt_failed_ties ties; /* refused requests of PyTorch's allocator, until their outcome */
    uint64_t driver_guessed[MT_N_SLOTS]; /* by slot key: MT_EF_DEVICE_GUESSED bytes allocated */
} pass1;

/* The bucket of time_rel, outside the last one noted: halves the resolution when time runs past
 * the end. */
static __attribute__((noinline)) uint64_t timeline_bucket(timeline *tl, uint64_t time_rel)
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
    tl->b = b;
    tl->lo = b * tl->width;
    tl->hi = tl->lo + tl->width; /* may wrap: then this bucket is never taken as the last */
    if (b + 1 > tl->n) tl->n = b + 1; /* (only here does b change, and n shrink) */
    return b;
}

/* Keeps the highest point of each bucket. */
static inline void timeline_note(timeline *tl, const mt_usage *u, uint64_t time_rel)
{
    uint64_t b = tl->b;
    if (time_rel < tl->lo || time_rel >= tl->hi) b = timeline_bucket(tl, time_rel);
    mt_timeline_point *p = &tl->p[b];
    /* time_ns + 1 marks the bucket used even at time 0; undone when copied out. */
    if (!p->time_ns || u->in_use > p->in_use) {
        p->time_ns = time_rel + 1;
        p->in_use = u->in_use;
        memcpy(p->by_kind, u->by_kind, sizeof p->by_kind);
    }
}

static inline __attribute__((always_inline)) void pass1_usage(void *ctx, const mt_usage *u,
                                                               uint64_t time_ns)
{
    pass1 *p = ctx;
    size_t k = (size_t)mt_slot_key(u->device, u->is_host);
    /* found by slot key, not by the slot's index among the tracker's (a call and a division by
     * sizeof(mt_usage) per event) */
    if (k >= MT_N_SLOTS) return; /* never: the tracker keeps ordinals in range */
    timeline *tl = p->tl[k];
    if (!tl && !(tl = p->tl[k] = calloc(1, sizeof *tl))) {
        p->oom = 1;
        return;
    }
    uint64_t t = mt_rel_time(time_ns, p->start);
    timeline_note(tl, u, t);
    if (u->peak && (!p->keep[k] || p->keep[k]->peak_seq != u->peak_seq)) {
        /* a new peak: what ended before it was not live at it */
        if (!p->keep[k]) {
            if (!(p->keep[k] = calloc(1, sizeof *p->keep[k]))) {
                p->oom = 1;
                return;
            }
            p->kept[p->n_kept++] = (uint16_t)k;
        }
        mt_peak_keep *pk = p->keep[k];
        pk->peak_seq = u->peak_seq;
        pk->at_peak = *u;
        pk->n = pk->n_after = 0;
        mt_after_peak_begin(&pk->after, p->cats); /* what pass 2 would wait for after it */
    }
    mt_pairing_event(&p->nvml);
    if (u->is_host) return;
    uint64_t v = mt_breakdown_visible(u) - u->by_kind[MT_KIND_DRIVER];
    int64_t delta = (int64_t)(v - tl->api_visible);
    tl->api_visible = v;
    if (delta && mt_pairing_change(&p->nvml, k, t, u->device, delta) < 0) p->oom = 1;
}

/* Appends l to a kept list; 0, or -1 when out of memory. */
static __attribute__((noinline)) int keep_lifetime(mt_lifetime **v, size_t *n, size_t *cap,
                                                   const mt_lifetime *l)
{
    if (*n == *cap && mt_grow((void **)v, cap, *n + 1, sizeof **v) < 0) return -1;
    (*v)[(*n)++] = *l;
    return 0;
}

/* A lifetime ends in pass 1: kept if it was live at its device's latest peak so far, and with
 * categories, if it was live when the backward pass after that peak ended. */
static inline __attribute__((always_inline)) void pass1_release(void *ctx, const mt_lifetime *l,
                                                                 uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    (void)why;
    pass1 *p = ctx;
    size_t k = mt_slot_of_lifetime(l);
    mt_peak_keep *pk = k < MT_N_SLOTS ? p->keep[k] : NULL;
    if (!pk) return;
    if (l->start_seq <= pk->peak_seq && keep_lifetime(&pk->ended, &pk->n, &pk->cap, l) < 0)
        p->oom = 1;
    if (__builtin_expect(p->cats != NULL, 0) && !pk->after.waiting_backward &&
        l->kind == MT_KIND_TENSOR && l->start_seq < pk->after.backward_seq &&
        keep_lifetime(&pk->after_backward, &pk->n_after, &pk->cap_after, l) < 0)
        p->oom = 1;
}

/* A backward pass or optimizer step has ended (pass 1 with categories): each device's latest peak
 * takes note, as pass 2's replay does (peak_replay.c). */
static void pass1_phase_end(void *ctx, int phase, uint64_t now)
{
    (void)phase;
    pass1 *p = ctx;
    uint64_t now_rel = mt_rel_time(now, p->start);
    for (size_t i = 0; i < p->n_kept; i++)
        if (p->kept[i]) /* not the host's (pass 2 looks at GPUs only) */
            mt_after_peak_note(&p->keep[p->kept[i]]->after, p->cats, p->t, now_rel);
}

/* ---- pass 1 ---------------------------------------------------------------------------------- */

static char *dupstr(const char *s) { return strdup(s ? s : ""); }

const char *mt_activity_name(mt_activity_state s)
{
    static const char *const name[] = {"on", "off", "unavailable", "stopped"};
    return (unsigned)s < 4 ? name[s] : "on";
}

static int starts_with(const char *s, const char *prefix)
{
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static int keep_record(mt_analysis *a, pass1 *p, const mt_record *rec, dev_info **devs,
                       size_t *n_devs, const mt_reader *r)
{
    switch (rec->type) {
    case MT_REC_SYMBOL:
        /* the symbols the trace ends with were read first (run_pass1) */
        if (mt_reader_offset(r) >= p->symbols_from) return 0;
        return mt_frames_add(a->frames, rec) < 0 ? -1 : 0;
    case MT_REC_SAMPLE: {
        if (rec->u.sample.counter != MT_COUNTER_NVML_PROCESS_BYTES) return 0;
        uint64_t t = mt_rel_time(rec->u.sample.time_ns, a->header.start_monotonic_ns);
        /* the sampler outlives the last event of a killed process: the trace lasts as long */
        if (t > a->duration_ns) a->duration_ns = t;
        /* NVML lists the process on a GPU where it allocated nothing (a context made by a CUDA
         * call before torch.cuda.set_device, hundreds of MiB): that GPU is reported too */
        int32_t dev = rec->u.sample.device;
        if (rec->u.sample.value && dev >= 0 && dev <= MT_MAX_DEVICE_ORDINAL &&
            slot_index(p->t, dev, 0, rec->u.sample.time_ns) < 0)
            return -1;
        return mt_pairing_sample(&p->nvml, p->t, rec->u.sample.device, t, rec->u.sample.value);
    }
    case MT_REC_PROCESS:
        free(a->comm);
        free(a->cmdline);
        free(a->hostname);
        a->pid = rec->u.process.pid;
        a->ppid = rec->u.process.ppid;
        a->comm = dupstr(rec->u.process.comm);
        a->cmdline = dupstr(rec->u.process.cmdline);
        a->hostname = dupstr(rec->u.process.hostname);
        return a->comm && a->cmdline && a->hostname ? 0 : -1;
    case MT_REC_DEVICE: {
        /* one per context: the first of an ordinal names it (the tracker ignores ordinals out of
         * range, so only those can name a device) */
        int32_t ord = rec->u.device.ordinal;
        if (ord < 0 || ord > MT_MAX_DEVICE_ORDINAL) return 0;
        for (size_t k = 0; k < *n_devs; k++)
            if ((*devs)[k].ordinal == ord) return 0;
        if (mt_grow((void **)devs, &p->cap_devs, *n_devs + 1, sizeof **devs) < 0) return -1;
        (*devs)[*n_devs] = (dev_info){ord, dupstr(rec->u.device.name), dupstr(rec->u.device.uuid),
                                      rec->u.device.total_bytes};
        (*n_devs)++;
        return 0;
    }
    case MT_REC_THREAD: {
        if (mt_grow((void **)&a->threads, &p->cap_threads, a->n_threads + 1,
                    sizeof *a->threads) < 0)
            return -1;
        a->threads[a->n_threads].tid = rec->u.thread.tid;
        a->threads[a->n_threads++].name = dupstr(rec->u.thread.name);
        return 0;
    }
    case MT_REC_NOTE: {
        const char *text = rec->u.note.text;
        uint64_t when = mt_rel_time(rec->u.note.time_ns, a->header.start_monotonic_ns);
        if (starts_with(text, MT_ACTIVITY_NOTE_OFF))
            a->activity = MT_ACTIVITY_OFF;
        else if (starts_with(text, MT_ACTIVITY_NOTE_UNAVAILABLE))
            a->activity = MT_ACTIVITY_UNAVAILABLE;
        else if (starts_with(text, MT_ACTIVITY_NOTE_STOPPED) && a->activity == MT_ACTIVITY_ON) {
            a->activity = MT_ACTIVITY_STOPPED; /* the first time they stopped */
            a->activity_stopped_ns = when;
        }
        if (rec->u.note.level != MT_NOTE_WARNING) {
            if (mt_cost_read_running(&p->running_cost, text))
                p->running_cost.until_ns = when;
            else
                mt_cost_read_note(&a->cost, text);
            return 0;
        }
        size_t cap = p->cap_warnings;
        if (mt_grow((void **)&a->warnings, &cap, a->n_warnings + 1, sizeof *a->warnings) < 0 ||
            mt_grow((void **)&a->warning_times_ns, &p->cap_warnings, a->n_warnings + 1,
                    sizeof *a->warning_times_ns) < 0)
            return -1;
        a->warning_times_ns[a->n_warnings] = when;
        a->warnings[a->n_warnings++] = dupstr(text);
        return 0;
    }
    case MT_REC_DROPPED:
        a->dropped += rec->u.dropped;
        return 0;
    case MT_REC_END: {
        a->ended_cleanly = 1;
        if (rec->u.end.dropped > a->dropped) a->dropped = rec->u.end.dropped;
        uint64_t t = mt_rel_time(rec->u.end.time_ns, a->header.start_monotonic_ns);
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

static int finish_pass1(mt_analysis *a, pass1 *p, mt_u64map *allocs, dev_info *devs,
                        size_t n_devs)
{
    const mt_usage *u;
    size_t n = mt_tracker_usages(p->t, &u);
    a->devices = calloc(n ? n : 1, sizeof *a->devices);
    if (!a->devices) return -1;
    mt_device_report *by_slot[MT_N_SLOTS] = {0}; /* valid until the devices are sorted below */
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
        by_slot[mt_slot_key(u[i].device, u[i].is_host)] = d;
        d->u = u[i];
        d->peak_time_ns = mt_rel_time(u[i].peak_mono_ns, a->header.start_monotonic_ns);
        d->api_peak_time_ns = mt_rel_time(u[i].api_peak_mono_ns, a->header.start_monotonic_ns);
        if (!u[i].is_host) d->driver_guessed = p->driver_guessed[mt_slot_key(u[i].device, 0)];
        for (size_t k = 0; k < n_devs; k++)
            if (!u[i].is_host && devs[k].ordinal == u[i].device) {
                /* one DEVICE record per context: a device with several contexts has several */
                d->name = devs[k].name;
                devs[k].name = NULL; /* the report owns it now */
                if (devs[k].uuid && devs[k].uuid[0]) {
                    d->uuid = devs[k].uuid;
                    devs[k].uuid = NULL;
                }
                d->capacity = devs[k].total;
                break;
            }
        const timeline *tl = p->tl[mt_slot_key(u[i].device, u[i].is_host)];
        if (tl) {
            d->timeline = malloc((tl->n ? tl->n : 1) * sizeof *d->timeline);
            if (!d->timeline) return -1;
            for (size_t k = 0; k < tl->n; k++)
                if (tl->p[k].time_ns) {
                    d->timeline[d->n_timeline] = tl->p[k];
                    d->timeline[d->n_timeline++].time_ns--;
                }
        }
    }
    if (mt_pairing_hand_out(&p->nvml, by_slot) < 0 ||
        mt_live_at_end(a, p->t, allocs, by_slot) < 0)
        return -1;
    if (a->n_devices) qsort(a->devices, a->n_devices, sizeof *a->devices, cmp_dev);
    a->anomalies = *mt_tracker_anomalies(p->t);
    a->anomalies.bad_stack_nodes = mt_frames_bad_nodes(a->frames);
    return 0;
}

/* Bytes allocated by stack: summed first in a small direct-mapped table, an entry going to the map
 * (mt_u64map) only when another key takes its place, and at the end. The sums are the same (the
 * lists made from the map are sorted by a total order, so the map's layout does not show); a map
 * lookup per allocation was ~5% of `report`'s time. */
#define ALLOC_SUMS_BITS 9
typedef struct alloc_sum {
    uint64_t key, bytes, count; /* count 0: empty */
} alloc_sum;

typedef struct alloc_sums {
    alloc_sum e[1u << ALLOC_SUMS_BITS];
    mt_u64map map; /* agg key -> bytes (a), count (b) */
} alloc_sums;

static int alloc_sum_flush(alloc_sums *s, const alloc_sum *x)
{
    mt_u64map_slot *m = mt_u64map_upsert(&s->map, x->key);
    if (!m) return -1;
    m->a += x->bytes;
    m->b += x->count;
    return 0;
}

static inline int alloc_sum_add(alloc_sums *s, uint64_t key, uint64_t bytes)
{
    alloc_sum *x = &s->e[(key * MT_GOLDEN64) >> (64 - ALLOC_SUMS_BITS)];
    if (x->key != key || !x->count) {
        if (x->count && alloc_sum_flush(s, x) < 0) return -1;
        *x = (alloc_sum){.key = key};
    }
    x->bytes += bytes;
    x->count++;
    return 0;
}

/* Everything summed is in the map. */
static int alloc_sums_end(alloc_sums *s)
{
    for (size_t i = 0; i < sizeof s->e / sizeof s->e[0]; i++)
        if (s->e[i].count && alloc_sum_flush(s, &s->e[i]) < 0) return -1;
    memset(s->e, 0, sizeof s->e);
    return 0;
}

/* Bounds on the naming work of pass 1 (mt_frames_work): per record read, and free. */
#define NAMING_WORK_PER_RECORD 16
#define NAMING_WORK_FREE (1u << 22)

static int add_symbol(void *frames, const mt_record *rec)
{
    return mt_frames_add(frames, rec) < 0 ? -1 : 0;
}

/* *peaks_done: what was live at each peak is counted too (without tensors, or with them when
 * pass 1 could categorize them as it read: pass 2 is not needed). */
static int run_pass1(mt_analysis *a, const mt_analyze_options *opt, char *err, size_t errlen,
                     int *peaks_done)
{
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    int strict = opt && opt->strict;
    mt_reader_set_strict(r, strict);
    a->header = *mt_reader_header(r);
    a->pid = a->header.pid;
    uint64_t symbols_from = UINT64_MAX;
    /* The names a tensor's category comes from: the symbols `record` appended after the
     * recording, read first so that pass 1 can categorize as it reads (else pass 2 replays). */
    int names_first = !(opt && opt->two_passes);
    if (names_first && mt_reader_tail_symbols(r, &symbols_from, add_symbol, a->frames) < 0) {
        /* a read error or no memory: some may be in the frames already, so no read goes on */
        mt_err_text(err, errlen, "%s: cannot read the symbols at the end of the trace", a->path);
        mt_reader_close(r);
        return -1;
    }
    pass1 p = {.start = a->header.start_monotonic_ns, .symbols_from = symbols_from};
    mt_pairing_init(&p.nvml);
    mt_tracker_hooks hooks = {.ctx = &p,
                              .on_usage = pass1_usage,
                              .on_release = pass1_release,
                              .on_phase_end = pass1_phase_end};
    p.t = mt_tracker_new(&hooks);
    alloc_sums *allocs = calloc(1, sizeof *allocs); /* 12 KiB */
    dev_info *devs = NULL;
    size_t n_devs = 0;
    int rc = p.t && allocs ? 0 : -1;
    const mt_record *group; /* in the reader's batch: not copied */
    size_t n_group = 0, g = 0;
    mt_read_status st = MT_READ_END;
    void (*progress)(void *, int, double) = opt ? opt->progress : NULL;
    void (*on_event)(void *, const mt_event *) = opt ? opt->on_event : NULL;
    uint64_t start = a->header.start_monotonic_ns, first_ns = UINT64_MAX, last_ns = 0;
    while (rc == 0) {
        if (g == n_group) {
            g = 0;
            if (!(n_group = mt_reader_next_group(r, &group, &st))) break;
            st = MT_READ_RECORD;
            /* naming while reading redoes work when records that name frames keep coming
             * between new stacks (a module: every native frame named so far is looked at again,
             * frames.c); past a bound proportional to the trace, pass 1 stops naming and pass 2
             * categorizes, so any trace stays linear */
            if (__builtin_expect(p.cats != NULL, 0) &&
                mt_frames_work(a->frames) > NAMING_WORK_PER_RECORD * a->records + NAMING_WORK_FREE)
                mt_categorizer_blind(p.cats);
        }
        const mt_record *rec = &group[g++];
        a->records++;
        if (progress && a->records % MT_PROGRESS_EVERY == 0)
            progress(opt->progress_ctx, 1,
                     (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
        if (rec->type != MT_REC_EVENT) {
            rc = keep_record(a, &p, rec, &devs, &n_devs, r);
            continue;
        }
        const mt_event *e = &rec->u.event;
        a->events++;
        if (on_event) on_event(opt->event_ctx, e);
        if (e->kind == MT_KIND_TENSOR && e->op == MT_OP_ALLOC && !a->categories) {
            if (!(a->categories = mt_categorizer_new(a->frames))) rc = -1;
            else if (opt && opt->category_rules &&
                     mt_categorizer_load_rules(a->categories, opt->category_rules, err, errlen) < 0)
                rc = -2;
            else if (names_first) { /* from here on, as pass 2 would (mt_categorizer_check) */
                p.cats = a->categories;
                mt_categorizer_watch(p.cats);
                mt_tracker_set_categorizer(p.t, p.cats);
            }
        }
        uint64_t t = mt_rel_time(e->time_ns, start);
        if (t < first_ns) first_ns = t;
        if (t > last_ns) last_ns = t;
        /* the tracker's path of each op compiled in apart (mt_tracker_event_op, the op known):
         * the op is tested here once, not again inside */
        int tracked = 0;
        if (e->op == MT_OP_FREE) {
            tracked = mt_tracker_event_op(p.t, e, MT_OP_FREE, pass1_usage, pass1_release);
        } else if (e->op == MT_OP_ALLOC) {
            if (__builtin_expect((p.ties.n | p.ties.n_calls) != 0, 0))
                mt_failed_ties_allocated(a, &p.ties, p.t, e);
            if (__builtin_expect(e->flags & MT_EF_DEVICE_GUESSED, 0) && e->device >= 0 &&
                e->device <= MT_MAX_DEVICE_ORDINAL)
                p.driver_guessed[mt_slot_key(e->device, 0)] += e->bytes;
            if (mt_counting(e->kind, e->flags) == MT_COUNT_IN_USE) {
                mt_lifetime l = {
                    .device = e->device, .kind = e->kind, .stack = e->stack, .flags = e->flags};
                if (alloc_sum_add(allocs, mt_agg_key(&l), e->bytes) < 0) rc = -1;
            }
            if (rc == 0)
                tracked = mt_tracker_event_op(p.t, e, MT_OP_ALLOC, pass1_usage, pass1_release);
        } else {
            if (e->op == MT_OP_FAILED) {
                a->failed_total++;
                int32_t kept = a->n_failed < MT_MAX_FAILED_KEPT ? (int32_t)a->n_failed : -1;
                if (kept >= 0 && mt_snapshot_failed(a, p.t, e) < 0)
                    rc = -1;
                else
                    mt_failed_ties_failed(a, &p.ties, e, kept);
                if (rc == 0 && kept >= 0 && p.cats)
                    mt_failure_categories_now(a, &a->failed[kept], p.t);
            }
            if (rc == 0) tracked = mt_tracker_event_with(p.t, e, pass1_usage, pass1_release);
        }
        if (tracked < 0 || p.oom) rc = -1;
    }
    if (a->events) { /* else both stay 0 */
        a->first_ns = first_ns;
        a->last_ns = last_ns;
    }
    mt_read_damage dmg;
    mt_reader_damage(r, &dmg);
    a->damaged_chunks = dmg.chunks;
    a->damaged_bytes = dmg.bytes;
    if (dmg.chunks && !(a->damage_msg = dupstr(dmg.first)) && rc == 0) rc = -1;
    if (rc == -2) {
        rc = -1; /* err says why */
    } else if (rc < 0) {
        mt_err_text(err, errlen, "%s: out of memory", a->path);
    } else if (st == MT_READ_TRUNCATED && strict) {
        mt_err_text(err, errlen, "%s (--strict)", mt_reader_error(r));
        rc = -1;
    } else if (st == MT_READ_TRUNCATED) {
        a->truncated = 1;
        a->truncated_msg = dupstr(mt_reader_error(r));
    } else if (st != MT_READ_END) {
        mt_err_text(err, errlen, "%s", mt_reader_error(r));
        rc = -1;
    }
    if (a->last_ns > a->duration_ns) a->duration_ns = a->last_ns;
    /* no notes at exit (a killed process): what recording had cost at its last running total */
    if (!(mt_recording_cost_ns(&a->cost) > 0) && mt_recording_cost_ns(&p.running_cost) > 0 &&
        p.running_cost.until_ns)
        a->cost = p.running_cost;
    if (rc == 0) rc = alloc_sums_end(allocs);
    int categorized = 0;
    if (p.cats) {
        categorized = mt_categorizer_check(p.cats) > 0;
        if (!categorized) mt_categorizer_forget(p.cats); /* pass 2 categorizes from scratch */
        mt_failure_categories_settle(a, categorized);
    }
    if (rc == 0) rc = finish_pass1(a, &p, &allocs->map, devs, n_devs);
    a->passes = a->categories && !categorized ? 2 : 1;
    if (rc == 0 && (!a->categories || categorized)) {
        rc = mt_peaks_from_kept(a, p.keep, p.t, categorized);
        *peaks_done = 1;
    }
    if (rc < 0 && err && !err[0]) mt_err_text(err, errlen, "%s: out of memory", a->path);
    for (size_t i = 0; i < n_devs; i++) {
        free(devs[i].name);
        free(devs[i].uuid);
    }
    free(devs);
    mt_pairing_free(&p.nvml);
    for (size_t k = 0; k < MT_N_SLOTS; k++) {
        free(p.tl[k]);
        if (p.keep[k]) free(p.keep[k]->ended), free(p.keep[k]->after_backward);
        free(p.keep[k]);
    }
    if (allocs) mt_u64map_destroy(&allocs->map);
    free(allocs);
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
    int peaks_done = 0;
    a->fd = -1;
    a->path = strdup(path);
    a->comm = dupstr("");
    a->cmdline = dupstr("");
    a->hostname = dupstr("");
    a->frames = mt_frames_new();
    if (a->path && (a->fd = mt_input_open(path, err, errlen)) < 0) {
        mt_analysis_free(a);
        return -1;
    }
    int rc = !a->path || !a->comm || !a->cmdline || !a->hostname || !a->frames ? -1 : 0;
    if (rc == 0) rc = run_pass1(a, opt, err, errlen, &peaks_done);
    if (rc == 0) {
        mt_failed_async_raised(a); /* by the stacks' names, known once pass 1 is done */
        /* pass 2 feeds the failure watch on the way; without it, the watch reads on its own */
        rc = peaks_done ? mt_failure_replay(a, err, errlen) : mt_peaks_replay(a, opt, err, errlen);
    }
    if (rc < 0) {
        if (err && errlen && !err[0]) mt_err_text(err, errlen, "%s: out of memory", path);
        mt_analysis_free(a);
        return -1;
    }
    *out = a;
    return 0;
}

static void free_device(mt_device_report *d)
{
    free((char *)d->name);
    free((char *)d->uuid);
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
    free(a->warning_times_ns);
    for (size_t i = 0; i < a->n_threads; i++) free(a->threads[i].name);
    free(a->threads);
    mt_categorizer_free(a->categories);
    mt_frames_free(a->frames);
    if (a->fd >= 0) close(a->fd);
    free(a->damage_msg);
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

const char *mt_failed_root_name(const mt_failed_request *f, char *buf, size_t len)
{
    mt_device_report probe = {.u = {.device = f->device, .is_host = f->is_host}};
    return mt_device_root_name(&probe, buf, len);
}
