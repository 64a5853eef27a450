/* What mt_analyze (analyze.c) shares with the files that do parts of its work (not part of the
 * public API):
 *   nvml_pairing.c  NVML's process samples against the trace's live bytes at their moments
 *   live_sets.c     the live set by stack: at a failed request, and at the end (with holders)
 *   peak_replay.c   what was live at each device's peak: pass 2, or pass 1's kept lists
 *   failed_ties.c   what came of a failed request of PyTorch's allocator (recovered, or raised)
 *   backward_calls.c  which backward() call a failed request of autograd's workers belongs to
 *   failure_replay.c  what a failed request needs pass 1 cannot know then, taken in a replay
 */
#ifndef MT_COMPACT_ANALYSIS_PARTS_H
#define MT_COMPACT_ANALYSIS_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define MT_PROGRESS_EVERY 65536 /* records between calls of mt_analyze_options.progress */

/* Per-device state is kept by slot key: 0 = host, else ordinal + 2 (the tracker keeps ordinals to
 * -1..MT_MAX_DEVICE_ORDINAL, so slot keys are below MT_N_SLOTS). */
#define MT_N_SLOTS (MT_MAX_DEVICE_ORDINAL + 3)

static inline uint64_t mt_slot_key(int32_t device, int is_host)
{
    return is_host ? 0 : ((uint64_t)(uint32_t)(device + 2) & 0xffffff);
}

/* Aggregate keys: slot key << 40 | driver << 32 | stack. */
static inline uint64_t mt_agg_key(const mt_lifetime *l)
{
    return mt_slot_key(l->device, mt_is_host(l->kind, l->flags)) << 40 |
           mt_stack_key(l->stack, l->kind == MT_KIND_DRIVER);
}

static inline size_t mt_slot_of_lifetime(const mt_lifetime *l)
{
    return (size_t)mt_slot_key(l->device, mt_is_host(l->kind, l->flags));
}

/* ---- what was live at each peak (peak_replay.c) ---------------------------------------------- */

/* Pass 1 itself gathers what pass 2 would replay for: a lifetime was live at its device's peak
 * when it started at or before the peak event and ended after it, or never. For each device pass 1
 * keeps its counters right after its latest peak so far and a copy of every lifetime that started
 * at or before that peak and has ended since; a new peak empties the list (what ended before it
 * was not live at it). At the end those, and the lifetimes still live that started at or before
 * the peak, are counted exactly as pass 2 counts them (count_at_peak). The list holds at most the
 * lifetimes live at the peak, so memory stays bounded by the live set; the trace is read once
 * instead of up to its last peak a second time.
 *
 * With tensors a tensor's category at the peak is only known after it (the phase end after the
 * peak, categories.c), and its category comes from its stack's names. Pass 1 categorizes only when
 * it has those names as it reads (the trace's symbols read first from its end, analyze.c); then
 * it also notes what pass 2 would wait for after the peak (after_peak), and keeps the tensors
 * live when the backward pass after the peak ended that have ended since (after_backward). A
 * category at the peak is then mt_category_at the phase end after it, as in pass 2. */
typedef struct mt_after_peak {
    uint64_t bwd_at_peak, opt_at_peak; /* phases ended when the peak was reached */
    int waiting;                       /* the first phase end after the peak is still to come */
    int waiting_backward;              /* ... the first backward end after it */
    uint32_t end_phase;                /* phase ends counted once the one after the peak came */
    uint32_t backward_phase;           /* ... once the backward end after the peak came */
    uint64_t backward_seq;             /* the event at which it came */
    uint64_t backward_time_ns;         /* and when (since the start) */
    int stateless;                     /* and mt_categorizer_stateless then */
} mt_after_peak;

/* The peak was reached (c: the categorizer, NULL before the first tensor): x waits for both. */
void mt_after_peak_begin(mt_after_peak *x, const mt_categorizer *c);
/* A phase has ended (t: the tracker, before it applies the event that ended it; now_rel: since
 * the start): x takes note. 1 when the backward pass after the peak ended now. */
int mt_after_peak_note(mt_after_peak *x, const mt_categorizer *c, const mt_tracker *t,
                       uint64_t now_rel);

typedef struct mt_peak_keep {
    uint64_t peak_seq; /* the device's latest peak so far */
    mt_usage at_peak;  /* its counters right after that event */
    mt_lifetime *ended; /* lifetimes live at that peak that have ended since */
    size_t n, cap;
    mt_after_peak after;         /* with categories in pass 1 */
    mt_lifetime *after_backward; /* tensors live at after.backward_seq that have ended since */
    size_t n_after, cap_after;
} mt_peak_keep;

/* Pass 2: replays the trace (a->fd) up to the last device's peak, or with tensors until their
 * categories are known, and fills each device's peak_stacks, at_peak breakdown and category sums;
 * it feeds the failure watch (failure_replay.c) on the way, and reads on for it if it has to.
 * -1 with err set when the trace cannot be read again or memory runs out. */
int mt_peaks_replay(mt_analysis *a, const mt_analyze_options *opt, char *err, size_t errlen);
/* The same from pass 1's kept lists (keep: by slot key) and its tracker's live set; with
 * `categorized`, pass 1's tracker categorized the tensors (keep's after_peak is valid). -1: out of
 * memory. */
int mt_peaks_from_kept(mt_analysis *a, mt_peak_keep *const *keep, const mt_tracker *t,
                       int categorized);

/* ---- the live set by stack (live_sets.c) ----------------------------------------------------- */

/* Appends failed request e to a->failed with what was live on its device then. -1: out of
 * memory. */
int mt_snapshot_failed(mt_analysis *a, const mt_tracker *t, const mt_event *e);
/* What t has live at the end, for every device of by_slot (by slot key) in one walk: the
 * reconciliation at the end (its NVML samples must be in place), live_end, leaks, holders, and
 * allocs from `allocs` (agg key -> bytes, count). -1: out of memory. */
int mt_live_at_end(mt_analysis *a, const mt_tracker *t, const mt_u64map *allocs,
                   mt_device_report **by_slot);

/* ---- what came of a failed request (failed_ties.c) ------------------------------------------- */

/* The caching allocator's refused device requests not yet followed, on their thread, by a request
 * that succeeded or by its torch.OutOfMemoryError. A thread has at most three open (the request,
 * the one after freeing blocks not in use, the one after freeing every cached block); the list is
 * bounded all the same, for any trace, the oldest forgotten first. */
#define MT_FAILED_OPEN_MAX 64
typedef struct mt_failed_ties {
    size_t n, n_calls; /* first: pass 1 reads them at every allocation */
    struct {
        uint32_t tid;
        int32_t device;
        int32_t kept; /* index in a->failed, -1 past the ones kept */
    } open[MT_FAILED_OPEN_MAX];
    /* the latest failed calls with a correlation id, or refused for their handle type, until
     * that call succeeds after all, its thread allocates again, or a second has passed */
    struct {
        uint64_t time_ns, bytes, handle_types;
        uint32_t tid, correlation;
        int32_t device, kept;
        int is_host, handle_refused;
    } calls[MT_FAILED_OPEN_MAX];
} mt_failed_ties;

/* A failed request e (op FAILED; kept: its index in a->failed, or -1): a refused segment request
 * is opened; a torch.OutOfMemoryError (kind TENSOR) closes its thread's open ones as raised. */
void mt_failed_ties_failed(mt_analysis *a, mt_failed_ties *t, const mt_event *e, int32_t kept);
/* An allocation e that succeeded: the same call as a failure just before (its correlation id, its
 * thread) takes that failure back (tr: its count on the device), and so does the same request
 * made with another handle type after one refused for its handle type; a segment closes its
 * thread's open ones as recovered. */
void mt_failed_ties_allocated(mt_analysis *a, mt_failed_ties *t, mt_tracker *tr, const mt_event *e);
/* After pass 1 (the stacks' names known): marks torch_async the kept failed requests that were
 * torch.OutOfMemoryErrors of PyTorch's backend:cudaMallocAsync. */
void mt_failed_async_raised(mt_analysis *a);

/* ---- the backward() call of a failed request (backward_calls.c) ------------------------------ */

/* The latest allocation seen whose stack passes through backward(): its caller and time. */
typedef struct mt_backward_seen {
    mt_u64map memo; /* stack -> a: its caller (0: none), b: 1 */
    uint32_t call;
    uint64_t call_time;
} mt_backward_seen;

/* 1 when f is a request of autograd's workers in a trace that can name its backward() call. */
int mt_backward_wanted(mt_analysis *a, const mt_failed_request *f);
/* Feeds one event read in the order of the trace; -1 when memory runs out. */
int mt_backward_see(mt_analysis *a, mt_backward_seen *s, const mt_event *e);
/* At f's event: sets its backward_stack and backward_time_ns when it wants them and a call was
 * seen. */
void mt_backward_name(mt_analysis *a, const mt_backward_seen *s, mt_failed_request *f);
void mt_backward_seen_free(mt_backward_seen *s);

/* ---- the failure replay (failure_replay.c) --------------------------------------------------- */

/* What the kept failed requests want from a replay: the backward() call of autograd's workers'
 * (backward_calls.c), and with tensors the categories of the tensors live on their GPU then
 * (by_category). A replay feeds it every event, in the order of the trace, until it wants no
 * more: up to the last failure that wants either. */
typedef struct mt_failure_watch {
    uint64_t last;   /* the event index of the last failure that wants anything; 0: none does */
    uint64_t events; /* events fed so far */
    size_t next;     /* the next of a->failed[] (in the order of the events) */
    int categorize;  /* a failure wants categories: the replay's tracker must have them */
    int calls;       /* a failure wants its backward() call */
    mt_backward_seen seen;
} mt_failure_watch;

void mt_failure_watch_begin(mt_analysis *a, mt_failure_watch *w);
/* Pass 1 with categories: failed request f (just kept, its event not yet applied) takes the
 * categories of t's live tensors now, as the watch would. */
void mt_failure_categories_now(mt_analysis *a, mt_failed_request *f, const mt_tracker *t);
/* After such a pass 1: the failures before its first tensor had no tensor live (their categories
 * are all 0), with `ok`; without, none keeps what pass 1 took (a replay takes them). */
void mt_failure_categories_settle(mt_analysis *a, int ok);
static inline int mt_failure_watch_wants(const mt_failure_watch *w)
{
    return w->events < w->last;
}
/* e, before t (the replay's tracker, with a->categories when w->categorize) applies it. -1 when
 * memory runs out. */
int mt_failure_watch_event(mt_analysis *a, mt_failure_watch *w, const mt_event *e, mt_tracker *t);
void mt_failure_watch_end(mt_failure_watch *w);

/* The watch fed by a read of its own, for a trace that has no pass 2 (mt_peaks_replay feeds it
 * otherwise): up to the last failure that wants anything; nothing is read when none does. -1
 * with err set when the trace cannot be read again or memory runs out. */
int mt_failure_replay(mt_analysis *a, char *err, size_t errlen);

#endif
