/* NVML's process samples against the trace: what the trace had live when each sample was read
 * (nvml_pairing.c). Pass 1 (analyze.c) tells it every change of a device's visible bytes, inline
 * (mt_pairing_change: nearly every event), and every sample (mt_pairing_sample: rare).
 *
 * What the trace had live when an NVML sample was read, by event time: a sample is written by the
 * sampler thread while other threads' events of the same moments may sit in their rings for a
 * while, so the file order of a sample and the events around it is not their time order. Each
 * sample starts from the live bytes of its place in the file, less the changes of the last
 * MT_PAIRING_HISTORY events that happened after its time, and takes every change of an event from
 * before its time that comes later in the file, for MT_PAIRING_WINDOW_NS of event time after it.
 *
 * Bounds that keep this linear on any trace (samples are cheap to write: a file of samples with
 * odd times could otherwise make every change visit every sample, or every sample the whole
 * history). The last MT_PAIRING_PENDING samples of a device take its later changes (the sampler
 * writes one per device every 50 ms: 40 in the window); a sample's look back at the history stops
 * at a change more than MT_PAIRING_WINDOW_NS before it (files keep events within a drain's reach
 * of time order), and the look-backs of all samples together take at most
 * MT_PAIRING_BUDGET_PER_EVENT steps per event read (plus MT_PAIRING_HISTORY): past that, samples
 * start from their place in the file alone.
 */
#ifndef MT_COMPACT_NVML_PAIRING_H
#define MT_COMPACT_NVML_PAIRING_H

#include <stdint.h>

#include "analysis_parts.h"

#define MT_PAIRING_HISTORY 65536
#define MT_PAIRING_WINDOW_NS 2000000000ull
#define MT_PAIRING_PENDING 64
#define MT_PAIRING_BUDGET_PER_EVENT 64

typedef struct mt_nvml_sample {
    int32_t device;
    mt_sample_point p;
} mt_nvml_sample;

/* The last MT_PAIRING_PENDING samples of one device (indexes into the pairing's samples, which
 * grow in file order), sorted by sample time: a change looks only at the samples at or after its
 * own time, from the latest down, usually none or one (a walk over all of them for every change
 * was a quarter of `report`'s time). The samples a change goes to are the ring's from some place
 * on (at or after the change's time and with their window still open: both grow with the sample's
 * time), so the change is added once, at that place, in `add`: sample j has taken the sum of
 * add[0..j], which goes to `live` when the ring changes and at the end (pending_settle). When
 * the synthetic trace's threads drift apart, a change goes to many samples: adding it to each
 * made the analysis 5% slower per event on 100 M events than on 10 M. */
typedef struct mt_pending_ring {
    uint32_t ix[MT_PAIRING_PENDING];
    uint64_t time[MT_PAIRING_PENDING]; /* samples[ix[j]].p.time_ns, here: reading it there missed
                                          the cache at most usage changes (a tenth of pass 1's
                                          usage hook) */
    uint64_t add[MT_PAIRING_PENDING];  /* changes for samples j.. not yet in `live` (mod 2^64) */
    uint32_t n;
    uint32_t wrapping; /* samples whose time + MT_PAIRING_WINDOW_NS wraps around 2^64: while there
                          are any, each change goes to each sample, as the exact arithmetic of it */
    uint64_t latest; /* the latest sample time among them: most changes come after it */
    uint32_t hint;   /* where the last search for a change's first sample ended: the next change
                        (the same thread's, a moment later) mostly finds the same one, checked
                        against the ring as it is (mt_pairing_change) */
} mt_pending_ring;

/* The look-back of a sample, without walking the whole history: a walk of its 65536 changes for
 * every sample (1.5 MB each time) was a tenth of `report`. The result, and the budget it spends,
 * are those of the walk (hist_walk, nvml_pairing.c): it would step over the changes newer than the
 * first one (newest first) more than MT_PAIRING_WINDOW_NS before the sample, found by a binary
 * search in the changes that are older than every later change (`mins`, their numbers in push
 * order, oldest first, times increasing); and of those only the changes after the sample's time
 * take part, so the walk ends where every older change is at or before it.
 *
 * Pushing a change (every usage change: nearly every event) only writes its time, delta and device
 * and notes the running maximum of the times; `mins` is brought up to date when a sample looks
 * back (samples are rare: one per device every 50 ms), over the changes pushed since. Its content
 * is a function of the ring's changes alone (those older than every later change in the ring), so
 * it is the same as if it were kept at every push (which cost ~50 instructions per event). The
 * running maximum is kept at the last change of each block of MT_HIST_BLOCK changes: the walk tests
 * it there only, so it may step over up to MT_HIST_BLOCK - 1 more changes than it must, all at or
 * before the sample's time (they take no part): the same result, and the budget is counted
 * before. */
#define MT_HIST_BLOCK 64
#define MT_HIST_BLOCKS (MT_PAIRING_HISTORY / MT_HIST_BLOCK)
typedef struct mt_hist_index {
    uint64_t pushed;  /* changes ever pushed: change number k sits at slot k % MT_PAIRING_HISTORY */
    uint64_t indexed; /* changes that mins has taken in */
    uint64_t tmax;    /* the latest t of every change pushed */
    uint64_t *bmax;   /* MT_HIST_BLOCKS, a ring: tmax as of the last change of each block (a block
                         that shares its slot with a newer one reads the newer's: larger, so the
                         walk only goes on further) */
    uint64_t *mins;   /* a ring of MT_PAIRING_HISTORY numbers: [lo, lo + n) */
    size_t lo, n;
    uint64_t last_wrap; /* 1 + the number of the latest change whose t + MT_PAIRING_WINDOW_NS
                           wraps around 2^64 (0: none). While it is in the ring the walk itself is
                           taken, as the exact arithmetic of it */
} mt_hist_index;

typedef struct mt_nvml_pairing {
    mt_nvml_sample *samples; /* NVML process samples, in file order, until mt_pairing_hand_out */
    size_t n, cap;
    int64_t *live; /* parallel to samples: the trace's live bytes at the sample, so far */
    mt_pending_ring *pending[MT_N_SLOTS]; /* by slot key; made at a device's first sample */
    uint64_t latest_change; /* the latest event time of a change so far: closes windows */
    /* the last MT_PAIRING_HISTORY changes (usage changes of GPU devices), a ring */
    uint64_t *hist_t;    /* its time, since trace start */
    int64_t *hist_delta; /* the change of the device's visible bytes less driver-internal */
    int16_t *hist_dev;   /* its device (-1..MT_MAX_DEVICE_ORDINAL) */
    mt_hist_index hix;
    uint64_t budget; /* look-back steps still allowed (MT_PAIRING_BUDGET_PER_EVENT a change) */
} mt_nvml_pairing;

static inline void mt_pairing_init(mt_nvml_pairing *q)
{
    *q = (mt_nvml_pairing){.budget = MT_PAIRING_HISTORY};
}

/* a + b as the two's complement machine does it: byte counts from a hostile trace can be anything,
 * and a signed overflow would be undefined behaviour (found by fuzz_trace_payload) */
static inline int64_t mt_wrap_add(int64_t a, uint64_t b) { return (int64_t)((uint64_t)a + b); }

static inline int mt_pairing_wraps(uint64_t t) { return t > UINT64_MAX - MT_PAIRING_WINDOW_NS; }

/* One event's usage change was seen (a look-back budget for every event). */
static inline void mt_pairing_event(mt_nvml_pairing *q)
{
    q->budget += MT_PAIRING_BUDGET_PER_EVENT;
}

int mt_pairing_alloc_history(mt_nvml_pairing *q); /* -1: out of memory */

/* Appends a change to the history (the oldest change leaves a full ring); mins takes it in later
 * (hist_catch_up, nvml_pairing.c). */
static inline void mt_pairing_push(mt_nvml_pairing *q, uint64_t t, int32_t device, int64_t delta)
{
    mt_hist_index *x = &q->hix;
    size_t at = (size_t)(x->pushed % MT_PAIRING_HISTORY);
    q->hist_t[at] = t;
    q->hist_delta[at] = delta;
    q->hist_dev[at] = (int16_t)device;
    if (t > x->tmax) x->tmax = t;
    x->bmax[(x->pushed / MT_HIST_BLOCK) % MT_HIST_BLOCKS] = x->tmax;
    if (mt_pairing_wraps(t)) x->last_wrap = x->pushed + 1;
    x->pushed++;
}

/* The first of ring's samples at or after `from`, which the caller knows exists (the last one is):
 * steps down from the latest doubling in length, then a binary search in the last step (usually
 * one or two samples are reached; when the trace's threads have drifted apart, a change from a
 * thread behind the others reaches all ~40 samples of the last 2 s: a walk down to the first was
 * 26 instructions per event on 100 M synthetic events). Out of line and cold: the hint in
 * mt_pairing_change answers most changes. */
static __attribute__((noinline, cold, unused)) uint32_t
mt_pairing_first_at(const mt_pending_ring *ring, uint64_t from)
{
    uint32_t hi = ring->n - 1; /* time[hi] >= from */
    uint32_t lo = 0;
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
    return lo;
}

/* The visible bytes (less driver-internal) of GPU device `device` (slot key k) changed by delta
 * (not 0) at t (since trace start): into the history, and to the samples whose window it falls
 * in. -1: out of memory. Inlined in pass 1's usage hook, as it was when it was written there (a
 * call was ~20 instructions more per event). */
static inline __attribute__((always_inline)) int
mt_pairing_change(mt_nvml_pairing *q, size_t k, uint64_t t, int32_t device, int64_t delta)
{
    if (!q->hist_t && mt_pairing_alloc_history(q) < 0) return -1;
    mt_pairing_push(q, t, device, delta);
    if (t > q->latest_change) q->latest_change = t;
    mt_pending_ring *ring = q->pending[k];
    if (!ring || t > ring->latest) return 0;
    if (ring->wrapping) {
        for (uint32_t j = ring->n; j-- > 0;) {
            uint64_t st = ring->time[j];
            if (t > st) break; /* and so for every earlier sample */
            /* a change from before the sample, read while the sample's window is open */
            if (st + MT_PAIRING_WINDOW_NS >= q->latest_change)
                q->live[ring->ix[j]] = mt_wrap_add(q->live[ring->ix[j]], (uint64_t)delta);
        }
        return 0;
    }
    /* the samples at or after the change's time whose window is open: from the first one at or
     * after both bounds on */
    uint64_t from = t;
    if (q->latest_change >= MT_PAIRING_WINDOW_NS && q->latest_change - MT_PAIRING_WINDOW_NS > from)
        from = q->latest_change - MT_PAIRING_WINDOW_NS;
    if (!ring->n || ring->time[ring->n - 1] < from) return 0; /* none */
    /* the first at or after `from` (times are sorted): where the last search ended, when it is
     * that one still (one at or after `from` with none before it that is), which two compares
     * tell; else mt_pairing_first_at, whose branches no predictor learns. The changes of one
     * thread's late batch mostly find the same sample: `report` of the synthetic 10 M events on
     * one thread 5% faster (docs/performance.md, "A sixth processor") */
    uint32_t lo = ring->hint;
    if (__builtin_expect(!(lo < ring->n && ring->time[lo] >= from &&
                           (lo == 0 || ring->time[lo - 1] < from)), 0)) {
        lo = mt_pairing_first_at(ring, from);
        ring->hint = lo;
    }
    ring->add[lo] += (uint64_t)delta;
    return 0;
}

/* An NVML process sample of `device` read at t (since trace start): what the trace had live then
 * (tracker t's counters at this place in the file, corrected by the history) is worked out as the
 * changes come. -1: out of memory. */
int mt_pairing_sample(mt_nvml_pairing *q, const mt_tracker *tracker, int32_t device, uint64_t t,
                      uint64_t value);
/* Hands each device of by_slot (by slot key) its samples (file order), each with the trace's
 * visible bytes at it, and their maximum. -1: out of memory. */
int mt_pairing_hand_out(mt_nvml_pairing *q, mt_device_report **by_slot);
void mt_pairing_free(mt_nvml_pairing *q);

#endif
