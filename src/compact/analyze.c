/* mt_analyze: a trace file -> mt_analysis, in one streaming pass (two with tensors).
 *
 *   pass 1  every record: frames, process/devices/threads/notes, dropped/END; every event through
 *           a tracker. Gives each device's peak (value, time, event number), totals, the usage
 *           timeline, failed requests with what was live on their device at that moment, bytes
 *           allocated by stack, and what is still live at the end (by stack, and by holder:
 *           an allocator's cache, a library, the driver, or the program). Without tensors it also
 *           gathers what was live at each device's peak (peak_keep, below).
 *   pass 2  with tensors only: events, through a fresh tracker, until the last device's peak
 *           event: what was live at each device's peak is aggregated by stack (see pass 2 below),
 *           the tracker gives each tensor its category (categories.c), and the replay goes on
 *           past the peak until the phase of the peak has ended.
 * Memory: the live set, per-stack aggregates and frame tables; never the event count.
 *
 * The trace is opened once (mt_input_open: a pipe is copied to a temporary file) and both passes,
 * and the exporters' later reads, go through that descriptor, so a FIFO works and a file replaced
 * between the passes is not mixed with the old one. Damaged chunks are stepped over and counted
 * (a->damaged_*) unless opt->strict. Every step is linear in the trace whatever it holds: the
 * tracker keeps at most MT_MAX_DEVICE_ORDINAL + 2 device slots, and what is done per device (the
 * live set at its peak and at the end, its stack lists, its NVML samples) is done for all devices
 * in one walk; records that accumulate (threads, warnings, devices) grow geometrically and DEVICE
 * records are kept once per ordinal; the NVML pairing's look at recent changes is bounded (below).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grow.h" /* src/util: mt_grow */
#include "internal.h"
#include "tracker_core.h" /* pass 1's events take the tracker's path with its hooks inlined */

#define PROGRESS_EVERY 65536

/* Aggregate keys: slot key << 40 | driver << 32 | stack. Slot key 0 = host, else ordinal + 2
 * (the tracker keeps ordinals to -1..MT_MAX_DEVICE_ORDINAL, so slot keys are below N_SLOTS). */
#define N_SLOTS (MT_MAX_DEVICE_ORDINAL + 3)

static inline uint64_t slot_key(int32_t device, int is_host)
{
    return is_host ? 0 : ((uint64_t)(uint32_t)(device + 2) & 0xffffff);
}

static inline uint64_t agg_key(const mt_lifetime *l)
{
    return slot_key(l->device, mt_kind_is_host(l->kind)) << 40 |
           mt_stack_key(l->stack, l->kind == MT_KIND_DRIVER);
}

static inline size_t slot_of_lifetime(const mt_lifetime *l)
{
    return (size_t)slot_key(l->device, mt_kind_is_host(l->kind));
}

typedef struct timeline {
    uint64_t api_visible; /* the slot's NVML-visible bytes less driver-internal (see sample_seen) */
    uint64_t width; /* ns per bucket; doubles when the trace outgrows MT_TIMELINE_POINTS buckets */
    uint64_t lo, hi, b; /* the last bucket noted and its times [lo, hi): most events fall in it,
                           and a division per event was a tenth of pass 1's own time */
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
/* Bounds that keep this linear on any trace (samples are cheap to write: a file of samples with
 * odd times could otherwise make every change visit every sample, or every sample the whole
 * history). The last PENDING_PER_DEVICE samples of a device take its later changes (the sampler
 * writes one per device every 50 ms: 40 in the window); a sample's look back at the history stops at a change
 * more than SAMPLE_WINDOW_NS before it (files keep events within a drain's reach of time order),
 * and the look-backs of all samples together take at most HISTORY_BUDGET_PER_EVENT steps per
 * event read (plus HISTORY): past that, samples start from their place in the file alone. */
#define PENDING_PER_DEVICE 64

/* The last PENDING_PER_DEVICE samples of one device (indexes into pass1.nvml, which grow in file
 * order), sorted by sample time: a change looks only at the samples at or after its own time,
 * from the latest down, usually none or one (a walk over all of them for every change was a
 * quarter of `report`'s time). The samples a change goes to are the ring's from some place on
 * (at or after the change's time and with their window still open: both grow with the sample's
 * time), so the change is added once, at that place, in `add`: sample j has taken the sum of
 * add[0..j], which goes to nvml_live when the ring changes and at the end (pending_settle). When
 * the synthetic trace's threads drift apart, a change goes to many samples: adding it to each
 * made the analysis 5% slower per event on 100 M events than on 10 M. */
typedef struct pending_ring {
    uint32_t ix[PENDING_PER_DEVICE];
    uint64_t time[PENDING_PER_DEVICE]; /* nvml[ix[j]].p.time_ns, here: reading it there missed the
                                          cache at most usage changes (a tenth of pass1_usage) */
    uint64_t add[PENDING_PER_DEVICE];  /* changes for samples j.. not yet in nvml_live (mod 2^64) */
    uint32_t n;
    uint32_t wrapping; /* samples whose time + SAMPLE_WINDOW_NS wraps around 2^64: while there are
                          any, each change goes to each sample, as the exact arithmetic of it */
    uint64_t latest; /* the latest sample time among them: most changes come after it */
} pending_ring;
#define HISTORY_BUDGET_PER_EVENT 64

/* The look-back of a sample, without walking the whole history: a walk of its 65536 changes for
 * every sample (1.5 MB each time) was a tenth of `report`. The result, and the budget it spends,
 * are those of the walk (sample_seen): it would step over the changes newer than the first one
 * (newest first) more than SAMPLE_WINDOW_NS before the sample, found by a binary search in the
 * changes that are older than every later change (`mins`, their numbers in push order, oldest
 * first, times increasing); and of those only the changes after the sample's time take part, so
 * the walk ends where every older change is at or before it.
 *
 * Pushing a change (every usage change: nearly every event) only writes its time, delta and device
 * and notes the running maximum of the times; `mins` is brought up to date when a sample looks
 * back (samples are rare: one per device every 50 ms), over the changes pushed since. Its content
 * is a function of the ring's changes alone (those older than every later change in the ring), so
 * it is the same as if it were kept at every push (which cost ~50 instructions per event). The
 * running maximum is kept at the last change of each block of HIST_BLOCK changes: the walk tests it
 * there only, so it may step over up to HIST_BLOCK - 1 more changes than it must, all at or before
 * the sample's time (they take no part): the same result, and the budget is counted before. */
#define HIST_BLOCK 64
#define HIST_BLOCKS (HISTORY / HIST_BLOCK)
typedef struct hist_index {
    uint64_t pushed;  /* changes ever pushed: change number k sits at slot k % HISTORY */
    uint64_t indexed; /* changes that mins has taken in */
    uint64_t tmax;    /* the latest t of every change pushed */
    uint64_t *bmax;   /* HIST_BLOCKS, a ring: tmax as of the last change of each block (a block
                         that shares its slot with a newer one reads the newer's: larger, so the
                         walk only goes on further) */
    uint64_t *mins;   /* a ring of HISTORY numbers: [lo, lo + n) */
    size_t lo, n;
    uint64_t last_wrap; /* 1 + the number of the latest change whose t + SAMPLE_WINDOW_NS wraps
                           around 2^64 (0: none). While it is in the ring the walk itself is
                           taken, as the exact arithmetic of it */
} hist_index;

/* Without tensors, pass 1 itself gathers what pass 2 would replay for: a lifetime was live at its
 * device's peak when it started at or before the peak event and ended after it, or never. For each
 * device pass 1 keeps its counters right after its latest peak so far and a copy of every lifetime
 * that started at or before that peak and has ended since; a new peak empties the list (what ended
 * before it was not live at it). At the end those, and the lifetimes still live that started at or
 * before the peak, are counted exactly as pass 2 counts them (count_at_peak). The list holds at
 * most the lifetimes live at the peak, so memory stays bounded by the live set; the trace is read
 * once instead of up to its last peak a second time. With tensors the categories of what was live
 * at the peak are only known after it (phase ends), so pass 2 replays as before. */
typedef struct peak_keep {
    uint64_t peak_seq; /* the device's latest peak so far */
    mt_usage at_peak;  /* its counters right after that event */
    mt_lifetime *ended; /* lifetimes live at that peak that have ended since */
    size_t n, cap;
} peak_keep;

typedef struct pass1 {
    nvml_sample *nvml; /* NVML process samples until finish_pass1 hands them to the devices */
    size_t n_nvml, cap_nvml;
    int64_t *nvml_live;  /* parallel to nvml: the trace's live bytes at the sample, so far */
    pending_ring *pending[MT_MAX_DEVICE_ORDINAL + 3]; /* by device + 2; made on a first sample */
    uint64_t latest_change; /* the latest event time of a change so far: closes windows */
    /* the last HISTORY changes (usage changes of GPU devices), a ring: slot k % HISTORY */
    uint64_t *hist_t;     /* its time, since trace start */
    int64_t *hist_delta;  /* the change of the device's api_visible */
    int16_t *hist_dev;    /* its device (-1..MT_MAX_DEVICE_ORDINAL) */
    hist_index hix;
    uint64_t hist_budget; /* look-back steps still allowed (HISTORY_BUDGET_PER_EVENT a change) */
    mt_tracker *t;
    uint64_t start;
    timeline *tl[N_SLOTS]; /* by slot key, made at a slot's first usage change (~28 KiB each) */
    size_t cap_threads, cap_warnings, cap_devs; /* of a->threads, a->warnings, the dev_info list */
    peak_keep *keep[N_SLOTS]; /* by slot key, made at a device's first peak */
    int oom;
    mt_recording_cost running_cost; /* the last running totals (MT_COST_NOTE_RUNNING): the
                                       cost when the notes at exit are missing */
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

/* a + b as the two's complement machine does it: byte counts from a hostile trace can be anything,
 * and a signed overflow would be undefined behaviour (found by fuzz_trace_payload) */
static inline int64_t wrap_add(int64_t a, uint64_t b) { return (int64_t)((uint64_t)a + b); }

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

static inline int wraps(uint64_t t)
{
    return t > UINT64_MAX - SAMPLE_WINDOW_NS;
}

/* Appends a change to the history (the oldest change leaves a full ring); mins takes it in later
 * (hist_catch_up). */
static inline void hist_push(pass1 *p, uint64_t t, int32_t device, int64_t delta)
{
    hist_index *x = &p->hix;
    size_t at = (size_t)(x->pushed % HISTORY);
    p->hist_t[at] = t;
    p->hist_delta[at] = delta;
    p->hist_dev[at] = (int16_t)device;
    if (t > x->tmax) x->tmax = t;
    x->bmax[(x->pushed / HIST_BLOCK) % HIST_BLOCKS] = x->tmax;
    if (wraps(t)) x->last_wrap = x->pushed + 1;
    x->pushed++;
}

/* Changes in the ring, and the number of its oldest. */
static inline uint64_t hist_count(const hist_index *x)
{
    return x->pushed < HISTORY ? x->pushed : HISTORY;
}

/* mins for the ring as it is now: the changes that left the ring leave it (they are its oldest),
 * then each change pushed since joins it, after every change not older than it has left. */
static void hist_catch_up(pass1 *p)
{
    hist_index *x = &p->hix;
    uint64_t first = x->pushed - hist_count(x);
    uint64_t *mins = x->mins;
    const uint64_t *ht = p->hist_t;
    size_t lo = x->lo, n = x->n;
    while (n && mins[lo] < first) {
        lo = (lo + 1) % HISTORY;
        n--;
    }
    /* the time of the newest in mins, kept at hand: times mostly grow, and then nothing leaves */
    uint64_t top = n ? ht[mins[(lo + n - 1) % HISTORY] % HISTORY] : 0;
    for (uint64_t k = x->indexed > first ? x->indexed : first; k < x->pushed; k++) {
        uint64_t t = ht[k % HISTORY];
        while (n && top >= t) {
            n--;
            if (n) top = ht[mins[(lo + n - 1) % HISTORY] % HISTORY];
        }
        mins[(lo + n) % HISTORY] = k;
        n++;
        top = t;
    }
    x->lo = lo;
    x->n = n;
    x->indexed = x->pushed;
}

static int hist_alloc(pass1 *p)
{
    /* hist_t last: it says the others are there (all are freed with pass1) */
    if ((!p->hist_delta && !(p->hist_delta = malloc(HISTORY * sizeof *p->hist_delta))) ||
        (!p->hist_dev && !(p->hist_dev = malloc(HISTORY * sizeof *p->hist_dev))) ||
        (!p->hix.mins && !(p->hix.mins = malloc(HISTORY * sizeof *p->hix.mins))) ||
        (!p->hix.bmax && !(p->hix.bmax = malloc(HIST_BLOCKS * sizeof *p->hix.bmax))))
        return -1;
    return (p->hist_t = malloc(HISTORY * sizeof *p->hist_t)) ? 0 : -1;
}

static inline __attribute__((always_inline)) void pass1_usage(void *ctx, const mt_usage *u,
                                                               uint64_t time_ns)
{
    pass1 *p = ctx;
    size_t k = (size_t)slot_key(u->device, u->is_host);
    /* found by slot key, not by the slot's index among the tracker's (a call and a division by
     * sizeof(mt_usage) per event) */
    if (k >= N_SLOTS) return; /* never: the tracker keeps ordinals to -1..MT_MAX_DEVICE_ORDINAL */
    timeline *tl = p->tl[k];
    if (!tl && !(tl = p->tl[k] = calloc(1, sizeof *tl))) {
        p->oom = 1;
        return;
    }
    uint64_t t = rel(time_ns, p->start);
    timeline_note(tl, u, t);
    if (u->peak && (!p->keep[k] || p->keep[k]->peak_seq != u->peak_seq)) {
        /* a new peak: what ended before it was not live at it */
        if (!p->keep[k] && !(p->keep[k] = calloc(1, sizeof *p->keep[k]))) {
            p->oom = 1;
            return;
        }
        p->keep[k]->peak_seq = u->peak_seq;
        p->keep[k]->at_peak = *u;
        p->keep[k]->n = 0;
    }
    p->hist_budget += HISTORY_BUDGET_PER_EVENT;
    if (u->is_host) return;
    uint64_t v = mt_breakdown_visible(u) - u->by_kind[MT_KIND_DRIVER];
    int64_t delta = (int64_t)(v - tl->api_visible);
    tl->api_visible = v;
    if (!delta) return;
    if (!p->hist_t && hist_alloc(p) < 0) {
        p->oom = 1;
        return;
    }
    hist_push(p, t, u->device, delta);
    if (t > p->latest_change) p->latest_change = t;
    pending_ring *ring = p->pending[k]; /* k = slot_key(u->device, 0): not host */
    if (!ring || t > ring->latest) return;
    if (ring->wrapping) {
        for (uint32_t j = ring->n; j-- > 0;) {
            uint64_t st = ring->time[j];
            if (t > st) break; /* and so for every earlier sample */
            /* a change from before the sample, read while the sample's window is open */
            if (st + SAMPLE_WINDOW_NS >= p->latest_change)
                p->nvml_live[ring->ix[j]] = wrap_add(p->nvml_live[ring->ix[j]], (uint64_t)delta);
        }
        return;
    }
    /* the samples at or after the change's time whose window is open: from the first one at or
     * after both bounds on */
    uint64_t from = t;
    if (p->latest_change >= SAMPLE_WINDOW_NS && p->latest_change - SAMPLE_WINDOW_NS > from)
        from = p->latest_change - SAMPLE_WINDOW_NS;
    if (!ring->n || ring->time[ring->n - 1] < from) return; /* none */
    /* the first at or after `from`: steps down from the latest doubling in length, then a binary
     * search in the last step (usually one or two samples are reached; when the trace's threads
     * have drifted apart, a change from a thread behind the others reaches all ~40 samples of the
     * last 2 s: a walk down to the first was 26 instructions per event on 100 M synthetic events) */
    uint32_t lo = 0, hi = ring->n - 1; /* time[hi] >= from */
    for (uint32_t step = 1; hi >= step; step *= 2) {
        if (ring->time[hi - step] < from) {
            lo = hi - step + 1;
            break;
        }
        hi -= step;
    }
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ring->time[mid] < from) lo = mid + 1;
        else hi = mid;
    }
    ring->add[lo] += (uint64_t)delta;
}

/* Every change the ring holds for its samples, into nvml_live. */
static void pending_settle(pending_ring *r, int64_t *nvml_live)
{
    uint64_t sum = 0;
    for (uint32_t j = 0; j < r->n; j++) {
        sum += r->add[j];
        r->add[j] = 0;
        if (sum) nvml_live[r->ix[j]] = wrap_add(nvml_live[r->ix[j]], sum);
    }
}

/* Puts sample ix (the latest in file order) into the ring, in time order; when the ring is full
 * the earliest in file order (the smallest index) leaves. */
static void pending_add(pending_ring *r, const nvml_sample *nvml, int64_t *nvml_live, uint32_t ix)
{
    pending_settle(r, nvml_live);
    if (r->n == PENDING_PER_DEVICE) {
        uint32_t m = 0;
        for (uint32_t j = 1; j < r->n; j++)
            if (r->ix[j] < r->ix[m]) m = j;
        if (wraps(r->time[m])) r->wrapping--;
        memmove(&r->ix[m], &r->ix[m + 1], (r->n - m - 1) * sizeof *r->ix);
        memmove(&r->time[m], &r->time[m + 1], (r->n - m - 1) * sizeof *r->time);
        r->n--;
    }
    uint32_t j = r->n;
    uint64_t t = nvml[ix].p.time_ns;
    if (wraps(t)) r->wrapping++;
    while (j > 0 && r->time[j - 1] > t) {
        r->ix[j] = r->ix[j - 1];
        r->time[j] = r->time[j - 1];
        j--;
    }
    r->ix[j] = ix;
    r->time[j] = t;
    r->n++;
    r->latest = r->time[r->n - 1];
}

/* A lifetime ends in pass 1: kept if it was live at its device's latest peak so far. */
static inline __attribute__((always_inline)) void pass1_release(void *ctx, const mt_lifetime *l,
                                                                 uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    (void)why;
    pass1 *p = ctx;
    size_t k = slot_of_lifetime(l);
    peak_keep *pk = k < N_SLOTS ? p->keep[k] : NULL;
    if (!pk || l->start_seq > pk->peak_seq) return;
    if (pk->n == pk->cap &&
        mt_grow((void **)&pk->ended, &pk->cap, pk->n + 1, sizeof *pk->ended) < 0) {
        p->oom = 1;
        return;
    }
    pk->ended[pk->n++] = *l;
}

/* The walk back over the history that a sample's look-back is: newest change first, until one
 * more than SAMPLE_WINDOW_NS before the sample (c->t + SAMPLE_WINDOW_NS < t, in u64 arithmetic),
 * one budget step per change stepped over; the changes after the sample's time are taken off
 * live. */
static int64_t hist_walk(pass1 *p, int32_t device, uint64_t t, int64_t live)
{
    uint64_t n = hist_count(&p->hix);
    for (uint64_t k = 0; k < n && p->hist_budget; k++, p->hist_budget--) {
        size_t at = (size_t)((p->hix.pushed - 1 - k) % HISTORY);
        if (p->hist_t[at] + SAMPLE_WINDOW_NS < t) break; /* before anything out of order could be */
        if (p->hist_dev[at] == device && p->hist_t[at] > t)
            live = wrap_add(live, -(uint64_t)p->hist_delta[at]);
    }
    return live;
}

/* The same result and budget as hist_walk without stepping over every change (hist_index). */
static int64_t hist_look_back(pass1 *p, int32_t device, uint64_t t, int64_t live)
{
    hist_index *x = &p->hix;
    if (!x->pushed) return live; /* nothing to walk (and no ring yet) */
    if (x->last_wrap && x->last_wrap - 1 >= x->pushed - hist_count(x))
        return hist_walk(p, device, t, live);
    hist_catch_up(p);
    /* the steps of the walk: the changes newer than the newest with c->t < t - SAMPLE_WINDOW_NS */
    uint64_t steps = hist_count(x);
    if (t > SAMPLE_WINDOW_NS && x->n) {
        uint64_t before = t - SAMPLE_WINDOW_NS;
        size_t lo = 0, hi = x->n; /* mins[0 .. k) of the ring have t < before: find k */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (p->hist_t[x->mins[(x->lo + mid) % HISTORY] % HISTORY] < before) lo = mid + 1;
            else hi = mid;
        }
        if (lo) steps = x->pushed - 1 - x->mins[(x->lo + lo - 1) % HISTORY];
    }
    if (steps > p->hist_budget) steps = p->hist_budget;
    p->hist_budget -= steps;
    for (uint64_t k = 0; k < steps; k++) {
        uint64_t m = x->pushed - 1 - k;
        /* no change from here back is after the sample */
        if (m % HIST_BLOCK == HIST_BLOCK - 1 && x->bmax[(m / HIST_BLOCK) % HIST_BLOCKS] <= t) break;
        size_t at = (size_t)(m % HISTORY);
        if (p->hist_dev[at] == device && p->hist_t[at] > t)
            live = wrap_add(live, -(uint64_t)p->hist_delta[at]);
    }
    return live;
}

/* A new sample: the live bytes of its place in the file, less the changes already read that
 * happened after it (newest first, within the bounds above). */
static int64_t sample_seen(pass1 *p, int32_t device, uint64_t t)
{
    const mt_usage *u = mt_tracker_usage(p->t, device, 0);
    int64_t live = u ? (int64_t)(mt_breakdown_visible(u) - u->by_kind[MT_KIND_DRIVER]) : 0;
    return hist_look_back(p, device, t, live);
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

static int snapshot_failed(mt_analysis *a, const mt_tracker *t, const mt_event *e)
{
    if (!a->failed && !(a->failed = calloc(MT_MAX_FAILED_KEPT, sizeof *a->failed))) return -1;
    mt_failed_request *f = &a->failed[a->n_failed];
    int host = mt_kind_is_host(e->kind);
    *f = (mt_failed_request){.time_ns = rel(e->time_ns, a->header.start_monotonic_ns),
                             .device = host ? -1 : e->device, .kind = e->kind,
                             .result = e->result, .stack = e->stack, .tid = e->tid,
                             .bytes = e->bytes, .stream = e->stream};
    const mt_usage *u = mt_tracker_usage(t, f->device, host);
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
    holder_list holders[N_SLOTS];
    mt_breakdown_acc at_end[N_SLOTS];
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
    size_t slot = slot_of_lifetime(l);
    if (slot >= N_SLOTS) return;
    mt_breakdown_add(&e->at_end[slot], l); /* a segment counts there though not in use */
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    uint64_t key = agg_key(l);
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

/* ---- pass 2 ------------------------------------------------------------------------------------ */

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
    int waiting;              /* the first phase end after the peak is still to come */
    int waiting_backward;     /* the first backward end after the peak is still to come */
    uint32_t end_phase;       /* phase ends counted once the one after the peak happened */
    uint32_t backward_phase;  /* ... once the backward end after the peak happened */
    uint64_t backward_seq;    /* the event at which it happened */
    uint64_t bwd_at_peak, opt_at_peak; /* phases ended when the peak was reached */
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
    slot2 s[N_SLOTS];
    size_lists at_peak_sizes[N_SLOTS], after_bwd_sizes[N_SLOTS];
    mt_u64map peak_map; /* agg_key (| category << CAT_SHIFT) -> bytes, count, for every device */
    size_t pending;     /* devices whose peak is not reached yet, or whose categories wait */
    int oom;
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
        rc = mt_category_fit_compute(s->v[0], s->n[0], s->v[2], s->n[2], copies ? (unsigned)copies : 2,
                                     &fit[1]);
    for (int k = 0; k < 3; k++) free(s->v[k]);
    memset(s, 0, sizeof *s);
    return rc;
}

/* A device is done when its peak was replayed and nothing about it waits any more. */
static void maybe_done(pass2 *p, slot2 *x)
{
    if (x->reached && !x->waiting && !x->waiting_backward && p->pending) p->pending--;
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
        x->categorize = x->waiting = x->waiting_backward = 1;
        mt_categorizer_phases(p->a->categories, &x->bwd_at_peak, &x->opt_at_peak);
    }
    maybe_done(p, x);
}

static void pass2_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    (void)time_ns;
    pass2 *p = ctx;
    size_t k = (size_t)slot_key(u->device, u->is_host);
    slot2 *x = k < N_SLOTS ? &p->s[k] : NULL;
    mt_device_report *d = x ? x->d : NULL;
    if (!d || x->reached || d->u.peak_seq != mt_tracker_seq(p->t) || d->u.peak == 0) return;
    reach_peak(p, x, u);
}

/* l was live at its device's peak (if the device has one and reached it): count it, `ended` when
 * it ends now (else the replay stopped with it live). */
static void count_at_peak(pass2 *p, const mt_lifetime *l, int ended)
{
    size_t k = slot_of_lifetime(l);
    if (k >= N_SLOTS || !p->s[k].reached || l->start_seq > p->s[k].d->u.peak_seq) return;
    slot2 *x = &p->s[k];
    mt_breakdown_add(&x->at_peak, l);
    if (mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE) return;
    uint64_t key = agg_key(l);
    if (x->categorize && l->kind == MT_KIND_TENSOR) {
        /* its category when it ended, if before the phase end after the peak; else then */
        unsigned cat = x->waiting ? l->category : mt_category_at(l, x->end_phase);
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
    size_t k = slot_of_lifetime(l);
    if (k >= N_SLOTS || l->kind != MT_KIND_TENSOR || !p->s[k].categorize || p->s[k].waiting_backward ||
        l->start_seq >= p->s[k].backward_seq || mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE)
        return;
    unsigned cat = mt_category_at(l, p->s[k].backward_phase);
    if (cat >= MT_CAT_MAX) return;
    p->s[k].d->by_category_after_backward[cat] += l->bytes;
    sizes_add(&p->after_bwd_sizes[k], cat, l->bytes);
}

static void pass2_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    (void)why;
    /* it ends after its device's peak: reached is set only once the peak event was applied */
    count_at_peak(ctx, l, 1);
    count_after_backward(ctx, l);
}

static void pass2_still_live(void *ctx, const mt_lifetime *l)
{
    count_at_peak(ctx, l, 0);
    count_after_backward(ctx, l);
}

/* A phase has ended (before the event that told is applied): devices waiting for it take note. */
static void pass2_phase_end(void *ctx, int phase, uint64_t now)
{
    (void)phase;
    pass2 *p = ctx;
    uint64_t bwd, opt;
    mt_categorizer_phases(p->a->categories, &bwd, &opt);
    for (size_t k = 1; k < N_SLOTS; k++) {
        slot2 *x = &p->s[k];
        if (!x->waiting && !x->waiting_backward) continue;
        if (x->waiting_backward && bwd > x->bwd_at_peak) {
            x->waiting_backward = 0;
            x->backward_phase = mt_tracker_phase_ends(p->t);
            x->backward_seq = mt_tracker_seq(p->t);
            x->d->after_backward_known = 1;
            x->d->after_backward_time_ns = rel(now, p->a->header.start_monotonic_ns);
        }
        if (x->waiting && bwd + opt > x->bwd_at_peak + x->opt_at_peak) {
            x->waiting = 0;
            x->end_phase = mt_tracker_phase_ends(p->t);
        }
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
        size_t k = (size_t)slot_key(d->u.device, d->u.is_host);
        if (k < N_SLOTS) p->s[k].d = d;
        if (d->u.peak == 0) continue;
        p->pending++;
        if (d->u.peak_seq > *last_seq) *last_seq = d->u.peak_seq;
    }
    return p;
}

/* Every lifetime live at a peak has been counted: the devices' lists, breakdowns and fits. */
static void pass2_finish(pass2 *p, mt_analysis *a)
{
    mt_stack_list lists[N_SLOTS];
    if (!p->oom && mt_stack_lists_by_prefix(&p->peak_map, lists, N_SLOTS) == 0) {
        for (size_t k = 0; k < N_SLOTS; k++) {
            if (p->s[k].d && p->s[k].reached) p->s[k].d->peak_stacks = lists[k];
            else free(lists[k].v);
        }
    } else {
        p->oom = 1;
    }
    for (size_t k = 0; k < N_SLOTS; k++) {
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
    for (size_t k = 0; k < N_SLOTS; k++) {
        mt_u64map_destroy(&p->s[k].at_peak.owners);
        for (int j = 0; j < 3; j++) {
            free(p->at_peak_sizes[k].v[j]);
            free(p->after_bwd_sizes[k].v[j]);
        }
    }
    free(p);
}

static int run_pass2(mt_analysis *a, const mt_analyze_options *opt, char *err, size_t errlen)
{
    uint64_t last_seq;
    pass2 *p = pass2_new(a, &last_seq);
    if (!p) {
        fail(err, errlen, "%s: out of memory in pass 2", a->path);
        return -1;
    }
    mt_reader *r = NULL;
    int rc = 0;
    if (!p->pending) goto out;
    if (!(r = mt_reader_open_fd(a->fd, a->path, err, errlen))) {
        rc = -1;
        goto out;
    }
    mt_tracker_hooks hooks = {.ctx = p, .on_usage = pass2_usage, .on_release = pass2_release,
                              .on_phase_end = pass2_phase_end};
    p->t = mt_tracker_new(&hooks);
    rc = p->t ? 0 : -1;
    if (p->t && a->categories) mt_tracker_set_categorizer(p->t, a->categories);
    mt_record rec;
    uint64_t n = 0;
    /* without categories the replay ends at the last peak; with them, when nothing waits */
    while (rc == 0 && p->pending && !p->oom && (a->categories || mt_tracker_seq(p->t) < last_seq) &&
           mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type == MT_REC_EVENT && mt_tracker_event(p->t, &rec.u.event) < 0) rc = -1;
        if (opt && opt->progress && ++n % PROGRESS_EVERY == 0)
            opt->progress(opt->progress_ctx, 2,
                          (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
    }
    if (rc == 0) mt_tracker_foreach_live(p->t, pass2_still_live, p);
    if (rc == 0) pass2_finish(p, a);
    if (p->oom) rc = -1;
    if (rc < 0) fail(err, errlen, "%s: out of memory in pass 2", a->path);
out:
    mt_reader_close(r);
    pass2_free(p);
    return rc;
}

/* ---- what was live at each peak, from pass 1 ----------------------------------------------------- */

/* Counts what was live at each device's peak from pass 1's lists and its tracker's live set. */
static int peaks_from_pass1(mt_analysis *a, peak_keep *const *keep, const mt_tracker *t)
{
    uint64_t last_seq;
    pass2 *p = pass2_new(a, &last_seq);
    if (!p) return -1;
    for (size_t k = 0; k < N_SLOTS; k++) {
        slot2 *x = &p->s[k];
        if (!x->d || !keep[k] || x->d->u.peak == 0 || keep[k]->peak_seq != x->d->u.peak_seq)
            continue;
        reach_peak(p, x, &keep[k]->at_peak);
        for (size_t i = 0; i < keep[k]->n; i++) count_at_peak(p, &keep[k]->ended[i], 1);
    }
    mt_tracker_foreach_live(t, pass2_still_live, p);
    pass2_finish(p, a);
    int rc = p->oom ? -1 : 0;
    pass2_free(p);
    return rc;
}

/* ---- pass 1 ------------------------------------------------------------------------------------ */

static char *dupstr(const char *s) { return strdup(s ? s : ""); }

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
        int32_t dev = rec->u.sample.device;
        if (dev >= -1 && dev <= MT_MAX_DEVICE_ORDINAL && p->n_nvml < UINT32_MAX) {
            pending_ring **ring = &p->pending[dev + 2];
            if (!*ring && !(*ring = calloc(1, sizeof **ring))) return -1;
            p->nvml[p->n_nvml] = (nvml_sample){dev, {t, rec->u.sample.value, 0}};
            pending_add(*ring, p->nvml, p->nvml_live, (uint32_t)p->n_nvml);
            p->n_nvml++;
            return 0;
        }
        p->nvml[p->n_nvml++] = (nvml_sample){rec->u.sample.device, {t, rec->u.sample.value, 0}};
        return 0;
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
        (*devs)[*n_devs] = (dev_info){ord, dupstr(rec->u.device.name), rec->u.device.total_bytes};
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
        if (rec->u.note.level != MT_NOTE_WARNING) {
            if (mt_cost_read_running(&p->running_cost, rec->u.note.text))
                p->running_cost.until_ns = rel(rec->u.note.time_ns, a->header.start_monotonic_ns);
            else
                mt_cost_read_note(&a->cost, rec->u.note.text);
            return 0;
        }
        size_t cap = p->cap_warnings;
        if (mt_grow((void **)&a->warnings, &cap, a->n_warnings + 1, sizeof *a->warnings) < 0 ||
            mt_grow((void **)&a->warning_times_ns, &p->cap_warnings, a->n_warnings + 1,
                    sizeof *a->warning_times_ns) < 0)
            return -1;
        a->warning_times_ns[a->n_warnings] = rel(rec->u.note.time_ns, a->header.start_monotonic_ns);
        a->warnings[a->n_warnings++] = dupstr(rec->u.note.text);
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

/* Hands each device its NVML samples (file order) and their maximum, in one walk. */
static int group_samples(pass1 *p, mt_device_report **by_slot)
{
    for (size_t j = 0; j < N_SLOTS; j++) /* the changes the rings still hold for their samples */
        if (p->pending[j]) pending_settle(p->pending[j], p->nvml_live);
    size_t count[N_SLOTS] = {0};
    for (size_t k = 0; k < p->n_nvml; k++) {
        int32_t dev = p->nvml[k].device;
        if (dev >= -1 && dev <= MT_MAX_DEVICE_ORDINAL && by_slot[dev + 2]) count[dev + 2]++;
    }
    for (size_t j = 1; j < N_SLOTS; j++)
        if (count[j] && !(by_slot[j]->nvml = malloc(count[j] * sizeof *by_slot[j]->nvml)))
            return -1;
    for (size_t k = 0; k < p->n_nvml; k++) {
        int32_t dev = p->nvml[k].device;
        if (dev < -1 || dev > MT_MAX_DEVICE_ORDINAL || !by_slot[dev + 2]) continue;
        mt_device_report *d = by_slot[dev + 2];
        p->nvml[k].p.api_visible = p->nvml_live[k] > 0 ? (uint64_t)p->nvml_live[k] : 0;
        const mt_sample_point *sp = &p->nvml[k].p;
        if (!d->n_nvml || sp->value > d->nvml_max) {
            d->nvml_max = sp->value;
            d->nvml_max_time_ns = sp->time_ns;
        }
        d->nvml[d->n_nvml++] = *sp;
    }
    return 0;
}

static int finish_devices(mt_analysis *a, pass1 *p, mt_u64map *allocs, mt_device_report **by_slot,
                          end_snap *e)
{
    if (group_samples(p, by_slot) < 0) return -1;
    for (size_t k = 1; k < N_SLOTS; k++) /* slot 0 is host memory: no reconciliation */
        if (by_slot[k])
            mt_breakdown_begin(&e->at_end[k], &by_slot[k]->at_end, a->frames, &by_slot[k]->u,
                               a->duration_ns);
    mt_tracker_foreach_live(p->t, end_one, e);
    int rc = e->oom ? -1 : 0;
    for (size_t k = 1; k < N_SLOTS; k++) {
        mt_device_report *d = by_slot[k];
        if (!d) continue;
        if (mt_breakdown_end(&e->at_end[k]) < 0) rc = -1;
        mt_breakdown_set_process(&d->at_end, d->nvml, d->n_nvml, mt_breakdown_visible(&d->u),
                                 d->u.by_kind[MT_KIND_DRIVER]);
    }
    mt_stack_list live[N_SLOTS], program[N_SLOTS], alloc_lists[N_SLOTS];
    int have = 0; /* lists made so far */
    if (rc == 0 && mt_stack_lists_by_prefix(&e->live, live, N_SLOTS) == 0) have = 1;
    if (have == 1 && mt_stack_lists_by_prefix(&e->program, program, N_SLOTS) == 0) have = 2;
    if (have == 2 && mt_stack_lists_by_prefix(allocs, alloc_lists, N_SLOTS) == 0) have = 3;
    for (size_t k = 0; k < N_SLOTS; k++) {
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
    return have == 3 ? rc : -1;
}

static int finish_pass1(mt_analysis *a, pass1 *p, mt_u64map *allocs, dev_info *devs,
                        size_t n_devs)
{
    const mt_usage *u;
    size_t n = mt_tracker_usages(p->t, &u);
    a->devices = calloc(n ? n : 1, sizeof *a->devices);
    if (!a->devices) return -1;
    mt_device_report *by_slot[N_SLOTS] = {0}; /* valid until the devices are sorted below */
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
        by_slot[slot_key(u[i].device, u[i].is_host)] = d;
        d->u = u[i];
        d->peak_time_ns = rel(u[i].peak_mono_ns, a->header.start_monotonic_ns);
        d->api_peak_time_ns = rel(u[i].api_peak_mono_ns, a->header.start_monotonic_ns);
        for (size_t k = 0; k < n_devs; k++)
            if (!u[i].is_host && devs[k].ordinal == u[i].device) {
                /* one DEVICE record per context: a device with several contexts has several */
                d->name = devs[k].name;
                devs[k].name = NULL; /* the report owns it now */
                d->capacity = devs[k].total;
                break;
            }
        const timeline *tl = p->tl[slot_key(u[i].device, u[i].is_host)];
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
    end_snap *e = calloc(1, sizeof *e); /* ~20 KiB: per-slot state for every possible device */
    int rc = -1;
    if (e) {
        e->f = a->frames;
        rc = finish_devices(a, p, allocs, by_slot, e);
        mt_u64map_destroy(&e->live);
        mt_u64map_destroy(&e->program);
        for (size_t k = 0; k < N_SLOTS; k++) {
            free(e->holders[k].v);
            mt_u64map_destroy(&e->at_end[k].owners);
        }
        free(e);
    }
    if (rc < 0) return -1;
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

/* *peaks_done: what was live at each peak is counted too (no tensors: pass 2 is not needed). */
static int run_pass1(mt_analysis *a, const mt_analyze_options *opt, char *err, size_t errlen,
                     int *peaks_done)
{
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    int strict = opt && opt->strict;
    mt_reader_set_strict(r, strict);
    a->header = *mt_reader_header(r);
    a->pid = a->header.pid;
    pass1 p = {.start = a->header.start_monotonic_ns, .hist_budget = HISTORY};
    mt_tracker_hooks hooks = {.ctx = &p, .on_usage = pass1_usage, .on_release = pass1_release};
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
        }
        const mt_record *rec = &group[g++];
        a->records++;
        if (progress && a->records % PROGRESS_EVERY == 0)
            progress(opt->progress_ctx, 1,
                     (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
        if (rec->type != MT_REC_EVENT) {
            rc = keep_record(a, &p, rec, &devs, &n_devs);
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
        }
        uint64_t t = rel(e->time_ns, start);
        if (t < first_ns) first_ns = t;
        if (t > last_ns) last_ns = t;
        if (e->op == MT_OP_FAILED) {
            a->failed_total++;
            if (a->n_failed < MT_MAX_FAILED_KEPT && snapshot_failed(a, p.t, e) < 0) rc = -1;
        } else if (e->op == MT_OP_ALLOC && mt_counting(e->kind, e->flags) == MT_COUNT_IN_USE) {
            mt_lifetime l = {.device = e->device, .kind = e->kind, .stack = e->stack};
            if (alloc_sum_add(allocs, agg_key(&l), e->bytes) < 0) rc = -1;
        }
        /* mt_tracker_event, with the hooks p.t was made with known here */
        if (rc == 0 && mt_tracker_event_with(p.t, e, pass1_usage, pass1_release) < 0) rc = -1;
        if (p.oom) rc = -1;
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
        fail(err, errlen, "%s: out of memory", a->path);
    } else if (st == MT_READ_TRUNCATED && strict) {
        fail(err, errlen, "%s (--strict)", mt_reader_error(r));
        rc = -1;
    } else if (st == MT_READ_TRUNCATED) {
        a->truncated = 1;
        a->truncated_msg = dupstr(mt_reader_error(r));
    } else if (st != MT_READ_END) {
        fail(err, errlen, "%s", mt_reader_error(r));
        rc = -1;
    }
    if (a->last_ns > a->duration_ns) a->duration_ns = a->last_ns;
    /* no notes at exit (a killed process): what recording had cost at its last running total */
    if (!(mt_recording_cost_ns(&a->cost) > 0) && mt_recording_cost_ns(&p.running_cost) > 0 &&
        p.running_cost.until_ns)
        a->cost = p.running_cost;
    if (rc == 0) rc = alloc_sums_end(allocs);
    if (rc == 0) rc = finish_pass1(a, &p, &allocs->map, devs, n_devs);
    if (rc == 0 && !a->categories) {
        rc = peaks_from_pass1(a, p.keep, p.t);
        *peaks_done = 1;
    }
    if (rc < 0 && err && !err[0]) fail(err, errlen, "%s: out of memory", a->path);
    for (size_t i = 0; i < n_devs; i++) free(devs[i].name);
    free(devs);
    free(p.nvml);
    free(p.nvml_live);
    free(p.hist_t);
    free(p.hist_delta);
    free(p.hist_dev);
    free(p.hix.mins);
    free(p.hix.bmax);
    for (size_t k = 0; k < N_SLOTS; k++) {
        free(p.tl[k]);
        free(p.pending[k]);
        if (p.keep[k]) free(p.keep[k]->ended);
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
    if (!a->path || !a->comm || !a->cmdline || !a->hostname || !a->frames ||
        run_pass1(a, opt, err, errlen, &peaks_done) < 0 ||
        (!peaks_done && run_pass2(a, opt, err, errlen) < 0)) {
        if (err && errlen && !err[0]) fail(err, errlen, "%s: out of memory", path);
        mt_analysis_free(a);
        return -1;
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
