/* NVML's process samples against the trace's live bytes at their moments: the rare half (a sample,
 * its look-back, the hand-out at the end). The per-change half is inline in nvml_pairing.h, which
 * also says how the pairing works and what keeps it linear. */
#include <stdlib.h>
#include <string.h>

#include "nvml_pairing.h"

#define HISTORY MT_PAIRING_HISTORY

int mt_pairing_alloc_history(mt_nvml_pairing *q)
{
    /* hist_t last: it says the others are there (all are freed with the pairing) */
    if ((!q->hist_delta && !(q->hist_delta = malloc(HISTORY * sizeof *q->hist_delta))) ||
        (!q->hist_dev && !(q->hist_dev = malloc(HISTORY * sizeof *q->hist_dev))) ||
        (!q->hix.mins && !(q->hix.mins = malloc(HISTORY * sizeof *q->hix.mins))) ||
        (!q->hix.bmax && !(q->hix.bmax = malloc(MT_HIST_BLOCKS * sizeof *q->hix.bmax))))
        return -1;
    return (q->hist_t = malloc(HISTORY * sizeof *q->hist_t)) ? 0 : -1;
}

/* Changes in the ring, and the number of its oldest. */
static inline uint64_t hist_count(const mt_hist_index *x)
{
    return x->pushed < HISTORY ? x->pushed : HISTORY;
}

/* mins for the ring as it is now: the changes that left the ring leave it (they are its oldest),
 * then each change pushed since joins it, after every change not older than it has left. */
static void hist_catch_up(mt_nvml_pairing *q)
{
    mt_hist_index *x = &q->hix;
    uint64_t first = x->pushed - hist_count(x);
    uint64_t *mins = x->mins;
    const uint64_t *ht = q->hist_t;
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

/* The walk back over the history that a sample's look-back is: newest change first, until one
 * more than MT_PAIRING_WINDOW_NS before the sample (c->t + MT_PAIRING_WINDOW_NS < t, in u64
 * arithmetic), one budget step per change stepped over; the changes after the sample's time are
 * taken off live. */
static int64_t hist_walk(mt_nvml_pairing *q, int32_t device, uint64_t t, int64_t live)
{
    uint64_t n = hist_count(&q->hix);
    for (uint64_t k = 0; k < n && q->budget; k++, q->budget--) {
        size_t at = (size_t)((q->hix.pushed - 1 - k) % HISTORY);
        if (q->hist_t[at] + MT_PAIRING_WINDOW_NS < t) break; /* before anything out of order */
        if (q->hist_dev[at] == device && q->hist_t[at] > t)
            live = mt_wrap_add(live, -(uint64_t)q->hist_delta[at]);
    }
    return live;
}

/* The same result and budget as hist_walk without stepping over every change (mt_hist_index). */
static int64_t hist_look_back(mt_nvml_pairing *q, int32_t device, uint64_t t, int64_t live)
{
    mt_hist_index *x = &q->hix;
    if (!x->pushed) return live; /* nothing to walk (and no ring yet) */
    if (x->last_wrap && x->last_wrap - 1 >= x->pushed - hist_count(x))
        return hist_walk(q, device, t, live);
    hist_catch_up(q);
    /* the steps of the walk: the changes newer than the newest with c->t < t - window */
    uint64_t steps = hist_count(x);
    if (t > MT_PAIRING_WINDOW_NS && x->n) {
        uint64_t before = t - MT_PAIRING_WINDOW_NS;
        size_t lo = 0, hi = x->n; /* mins[0 .. k) of the ring have t < before: find k */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (q->hist_t[x->mins[(x->lo + mid) % HISTORY] % HISTORY] < before) lo = mid + 1;
            else hi = mid;
        }
        if (lo) steps = x->pushed - 1 - x->mins[(x->lo + lo - 1) % HISTORY];
    }
    if (steps > q->budget) steps = q->budget;
    q->budget -= steps;
    for (uint64_t k = 0; k < steps; k++) {
        uint64_t m = x->pushed - 1 - k;
        /* no change from here back is after the sample */
        if (m % MT_HIST_BLOCK == MT_HIST_BLOCK - 1 &&
            x->bmax[(m / MT_HIST_BLOCK) % MT_HIST_BLOCKS] <= t)
            break;
        size_t at = (size_t)(m % HISTORY);
        if (q->hist_dev[at] == device && q->hist_t[at] > t)
            live = mt_wrap_add(live, -(uint64_t)q->hist_delta[at]);
    }
    return live;
}

/* A new sample: the live bytes of its place in the file, less the changes already read that
 * happened after it (newest first, within the bounds above). */
static int64_t sample_seen(mt_nvml_pairing *q, const mt_tracker *tracker, int32_t device,
                           uint64_t t)
{
    const mt_usage *u = mt_tracker_usage(tracker, device, 0);
    int64_t live = u ? (int64_t)(mt_breakdown_visible(u) - u->by_kind[MT_KIND_DRIVER]) : 0;
    return hist_look_back(q, device, t, live);
}

/* Every change the ring holds for its samples, into `live`. */
static void pending_settle(mt_pending_ring *r, int64_t *live)
{
    uint64_t sum = 0;
    for (uint32_t j = 0; j < r->n; j++) {
        sum += r->add[j];
        r->add[j] = 0;
        if (sum) live[r->ix[j]] = mt_wrap_add(live[r->ix[j]], sum);
    }
}

/* Puts sample ix (the latest in file order) into the ring, in time order; when the ring is full
 * the earliest in file order (the smallest index) leaves. */
static void pending_add(mt_pending_ring *r, const mt_nvml_sample *samples, int64_t *live,
                        uint32_t ix)
{
    pending_settle(r, live);
    if (r->n == MT_PAIRING_PENDING) {
        uint32_t m = 0;
        for (uint32_t j = 1; j < r->n; j++)
            if (r->ix[j] < r->ix[m]) m = j;
        if (mt_pairing_wraps(r->time[m])) r->wrapping--;
        memmove(&r->ix[m], &r->ix[m + 1], (r->n - m - 1) * sizeof *r->ix);
        memmove(&r->time[m], &r->time[m + 1], (r->n - m - 1) * sizeof *r->time);
        r->n--;
    }
    uint32_t j = r->n;
    uint64_t t = samples[ix].p.time_ns;
    if (mt_pairing_wraps(t)) r->wrapping++;
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

int mt_pairing_sample(mt_nvml_pairing *q, const mt_tracker *tracker, int32_t device, uint64_t t,
                      uint64_t value)
{
    if (q->n == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 256;
        mt_nvml_sample *nv = realloc(q->samples, ncap * sizeof *nv);
        if (!nv) return -1;
        q->samples = nv;
        int64_t *nl = realloc(q->live, ncap * sizeof *nl);
        if (!nl) return -1;
        q->live = nl;
        q->cap = ncap;
    }
    q->live[q->n] = sample_seen(q, tracker, device, t);
    q->samples[q->n] = (mt_nvml_sample){device, {t, value, 0}};
    if (device >= -1 && device <= MT_MAX_DEVICE_ORDINAL && q->n < UINT32_MAX) {
        mt_pending_ring **ring = &q->pending[device + 2];
        if (!*ring && !(*ring = calloc(1, sizeof **ring))) return -1;
        pending_add(*ring, q->samples, q->live, (uint32_t)q->n);
    }
    q->n++;
    return 0;
}

int mt_pairing_hand_out(mt_nvml_pairing *q, mt_device_report **by_slot)
{
    for (size_t j = 0; j < MT_N_SLOTS; j++) /* the changes the rings still hold for their samples */
        if (q->pending[j]) pending_settle(q->pending[j], q->live);
    size_t count[MT_N_SLOTS] = {0};
    for (size_t k = 0; k < q->n; k++) {
        int32_t dev = q->samples[k].device;
        if (dev >= -1 && dev <= MT_MAX_DEVICE_ORDINAL && by_slot[dev + 2]) count[dev + 2]++;
    }
    for (size_t j = 1; j < MT_N_SLOTS; j++)
        if (count[j] && !(by_slot[j]->nvml = malloc(count[j] * sizeof *by_slot[j]->nvml)))
            return -1;
    for (size_t k = 0; k < q->n; k++) {
        int32_t dev = q->samples[k].device;
        if (dev < -1 || dev > MT_MAX_DEVICE_ORDINAL || !by_slot[dev + 2]) continue;
        mt_device_report *d = by_slot[dev + 2];
        q->samples[k].p.api_visible = q->live[k] > 0 ? (uint64_t)q->live[k] : 0;
        const mt_sample_point *sp = &q->samples[k].p;
        if (!d->n_nvml || sp->value > d->nvml_max) {
            d->nvml_max = sp->value;
            d->nvml_max_time_ns = sp->time_ns;
        }
        d->nvml[d->n_nvml++] = *sp;
    }
    return 0;
}

void mt_pairing_free(mt_nvml_pairing *q)
{
    free(q->samples);
    free(q->live);
    free(q->hist_t);
    free(q->hist_delta);
    free(q->hist_dev);
    free(q->hix.mins);
    free(q->hix.bmax);
    for (size_t k = 0; k < MT_N_SLOTS; k++) free(q->pending[k]);
    mt_pairing_init(q);
}
