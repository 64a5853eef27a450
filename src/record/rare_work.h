/* rare_work.h — the recorder's rare, slow work on the program's threads, timed every time.
 *
 * Why: the recorder times its own work on one call in MT_TIME_SAMPLE (16), at random, and counts
 * each timed call 16 times (the cost notes, and `memtrace report`'s "recording cost"). For the
 * work every call does that is a fair estimate. For work a few calls do at a thousand times the
 * price it is not: the first stack from a call site (its walk, the unwinding tables it needs, its
 * frames named), a thread's first event (its buffers, its name), a CUDA context's birth, a pool's
 * reservation read from the driver, a wait for the writer. Such a call weighs 16 times when it
 * happens to be timed and nothing when not: three identical 300-step runs of samples/cifar.py
 * under backend:cudaMallocAsync put their callbacks at 147, 26 and 23 ms (H200, 2026-11-27;
 * allocation callbacks of 35-190 us were among the timed ones). So that work times itself, every
 * time (two clock reads against microseconds), and is counted once, as rare work; and the
 * sampled timing runs on a clock that stands still while it does (mt_cost_clock), so a timed
 * call that did some does not count it again, 16 times. The same runs then read 30-44 ms, of
 * which 10-21 ms rare work.
 *
 * A section inside another counts as part of the outer one. A signal handler that runs a section
 * while one is open on its thread adds to the open one, which is where its time went.
 *
 *   per thread, in its clock line (clock.h: mt_clock_tls.rare_ns, .rare_depth, read with the
 *   clock): the rare work it has done so far, ns; the sections it has open
 *   mt_rare_all (all threads): sections ended and ns in all, and per kind with the longest
 *   section (the cost note "rare work")
 */
#ifndef MT_RECORD_RARE_WORK_H
#define MT_RECORD_RARE_WORK_H

#include <stdatomic.h>
#include <stdint.h>

#include "clock.h"

/* What a section was, for the note's breakdown (a section inside another is the outer one's). */
typedef enum mt_rare_kind {
    MT_RARE_STACK,   /* a stack the leaf memo did not hold: built, its frames named */
    MT_RARE_WALK,    /* a walk the unwinder did not remember: unwinding tables read */
    MT_RARE_THREAD,  /* a thread's first event, stack or walk: its buffers, its name, its
                        stack's bounds */
    MT_RARE_CONTEXT, /* CUPTI's resource callbacks: a CUDA context made or destroyed, ... */
    MT_RARE_POOL,    /* a memory pool's reservation read from the driver */
    MT_RARE_WAIT,    /* a full ring: the thread waited for the writer */
    MT_RARE_OPEN,    /* the trace file created, its writer started (once, mt_trace_open) */
    MT_RARE_KINDS
} mt_rare_kind;

typedef struct mt_rare_totals {
    _Atomic uint64_t sections, ns; /* all kinds */
    _Atomic uint64_t kind_sections[MT_RARE_KINDS], kind_ns[MT_RARE_KINDS];
    _Atomic uint64_t kind_max_ns[MT_RARE_KINDS]; /* the longest section of each kind */
} mt_rare_totals;

extern mt_rare_totals mt_rare_all; /* defined in rare_work.c; read by the cost notes */
extern const char *const mt_rare_kind_names[MT_RARE_KINDS]; /* "stacks built", ... */

/* Opens a section; returns what mt_rare_end needs. Out of line and cold, as the work they time:
 * inlined, their clock reads grew the hot functions that hold the rare paths (mt_record_call by
 * 750 bytes, mt_sink_event by 340), and a whole tensor report cost 5-10% more on the H200
 * (2026-11-27, GPT-2-like batch 2, against the build before, 3-4 runs each in two leases); out
 * of line, 6% less. A call to a cold function also tells the compiler that the path to it is
 * unlikely, so that path is laid out apart from the common one. */
uint64_t mt_rare_begin(void) __attribute__((cold));
void mt_rare_end(uint64_t t0, mt_rare_kind kind) __attribute__((cold));

/* The rare work this thread did since its mt_clock_tls.rare_ns read rare0, in mt_clock_cycles
 * units, for a timing in cycles; MT_RARE_UNKNOWN while the TSC's rate is not known (the clock's
 * first 10 ms, or a machine where it is off): the caller drops that sample. */
#define MT_RARE_UNKNOWN UINT64_MAX
static inline uint64_t mt_rare_cycles_since(uint64_t rare0)
{
    uint64_t ns = mt_clock_tls.rare_ns - rare0;
    if (!ns) return 0;
#if defined(__x86_64__)
    uint64_t khz = mt_clock_tsc_khz();
    return khz ? ns * khz / 1000000u : MT_RARE_UNKNOWN;
#else
    return ns; /* mt_clock_cycles counts ns there */
#endif
}

/* The clock of the sampled self-timing: CLOCK_MONOTONIC ns less this thread's rare work, so that
 * the difference of two readings is the ordinary work between them. */
static inline uint64_t mt_cost_clock(void) { return mt_clock_now() - mt_clock_tls.rare_ns; }
/* The same for a time stamp just taken with mt_clock_now (no rare work since). */
static inline uint64_t mt_cost_clock_at(uint64_t stamp) { return stamp - mt_clock_tls.rare_ns; }

#endif
