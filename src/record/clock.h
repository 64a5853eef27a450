/* The recorder's clock: CLOCK_MONOTONIC nanoseconds, read through the CPU's time-stamp counter.
 *
 * Why not clock_gettime: between two tensor reports the program runs ~10 us of its own code and
 * evicts what a report touched from the core's L2, so clock_gettime at the next report is a chain
 * of misses that wait on each other (libc's pointer to the vDSO, the vDSO's code, its data page,
 * then an ordered rdtsc that waits for every load before it). On the lent H200 (2.1 GHz TSC, a
 * 3 MiB eviction between calls, scratch benchmark of 2026-11-26, medians): 143-153 ns per cold
 * call above an empty one, against 42 ns for the stamp below (rdtscp, its thread line cold
 * too), and 26 vs 21 ns warm. A tensor report takes one stamp (and a sampled one several): in
 * the same lease, 50-58 ns less per report (docs/performance.md, "The clock").
 *
 * How: every thread maps TSC values to nanoseconds with the same linear function
 *     ns(t) = anchor_ns + (t - anchor_tsc) * mult / 2^32
 * that the writer thread re-anchors at each tick (mt_clock_tick: continuous at the new anchor,
 * its slope steered so that the distance to CLOCK_MONOTONIC seen at that tick is made up over
 * the next interval, as NTP slews a clock). One function for all threads, so events of different
 * threads keep the order of their stamps (the sink writes events in time order, and PyTorch's
 * allocator reports in the order of its lock). A thread keeps a copy of the function in its own
 * cache line and fetches the current one at most every MT_CLOCK_REFRESH_NS: a stamp touches that
 * line, and no other.
 *
 *   mt_clock_tls (per thread, one line):
 *   | tsc: start of this copy's span | ns: ns(tsc) | mult: ns per cycle, 32.32 fixed point |
 *   | span: cycles this copy is good for (0: take the slow path) | recheck: slow-path TSC deadline |
 *   | rare_ns, rare_depth: the thread's rare work (rare_work.h), not the clock's |
 * The rare work's counters share the line because the recorder's sampled self-timing reads them
 * with its clock: in the line every stamp reads anyway, a timed report touches no other for them.
 *
 * Used only where it is exact enough to be CLOCK_MONOTONIC (otherwise every stamp is
 * clock_gettime, as before): x86-64, the kernel's clocksource is "tsc" (it checked the TSC's
 * stability and synchronization across cores; CLOCK_MONOTONIC is itself a linear function of it),
 * the CPU says the TSC is invariant, MEMTRACE_CLOCK is not "monotonic" (then the TSC's rate is
 * still measured, for mt_clock_tsc_khz), and every tick finds the
 * function within MT_CLOCK_MAX_OFF_NS of CLOCK_MONOTONIC (else it is switched off for good and
 * the trace says why). Until the first tick at least MT_CLOCK_MIN_BASE_NS after mt_clock_start
 * (the rate needs a baseline), stamps are clock_gettime. mt_clock_describe gives the note. */
#ifndef MT_RECORD_CLOCK_H
#define MT_RECORD_CLOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#define MT_CLOCK_REFRESH_NS 1000000ull    /* a thread's copy is fetched again after 1 ms */
#define MT_CLOCK_MIN_BASE_NS 10000000ull  /* the first rate is measured over >= 10 ms */
#define MT_CLOCK_MIN_STEER_NS 50000000ull /* ticks closer than 50 ms only measure the distance */
#define MT_CLOCK_MAX_OFF_NS 100000ll      /* a tick further than this from CLOCK_MONOTONIC: off */

typedef struct mt_clock_copy {
    uint64_t tsc, ns, mult, span, recheck;
    uint64_t rare_ns;    /* rare_work.h: this thread's rare work so far, ns */
    uint32_t rare_depth; /* rare_work.h: sections open */
    uint32_t writing;    /* a refresh of this copy is under way on this thread (mt_clock_slow) */
} __attribute__((aligned(64))) mt_clock_copy;

extern __thread mt_clock_copy mt_clock_tls;

uint64_t mt_clock_monotonic(void);   /* clock_gettime(CLOCK_MONOTONIC), ns */
uint64_t mt_clock_slow(void);        /* the stamp when this thread's copy is stale or unusable */

/* Now, in CLOCK_MONOTONIC ns. Safe in signal handlers: a handler that interrupts the copy's
 * refresh finds it unusable (span 0) and takes the slow path's value without touching the copy
 * (writing); one that refreshes it while this thread reads it changes its tsc, which the reader
 * loaded first and checks again, and sends the reader to the slow path. */
static inline uint64_t mt_clock_now(void)
{
#if defined(__x86_64__)
    mt_clock_copy *c = &mt_clock_tls;
    /* rdtsc may run ahead of the loads before it: a thread that has just seen another thread's
     * store (a lock it took) could stamp earlier than that thread did (up to 60 ns measured
     * here, tests/test_record_clock.c). rdtscp reads the counter once every load before it is
     * done, as the vDSO's lfence + rdtsc does, but unlike lfence it lets the instructions after
     * it start meanwhile: the stack capture's first misses overlap with the wait. */
    uint64_t tsc = c->tsc;
    atomic_signal_fence(memory_order_seq_cst); /* tsc first: the check below covers the rest */
    uint64_t span = c->span, ns = c->ns, mult = c->mult;
    unsigned aux;
    uint64_t d = __rdtscp(&aux) - tsc;
    /* A signal handler that stamped between these loads may have refreshed the copy: then its
     * tsc differs (the counter never repeats) and this stamp takes the slow path. */
    atomic_signal_fence(memory_order_seq_cst);
    if (__builtin_expect(d < span && c->tsc == tsc, 1))
        return ns + (uint64_t)(((unsigned __int128)d * mult) >> 32);
#endif
    return mt_clock_slow();
}

/* A cycle count for timing our own work (the TSC; ns where there is none): no memory access, so
 * it does not warm what it times. mt_clock_tsc_khz turns it into time. */
static inline uint64_t mt_clock_cycles(void)
{
#if defined(__x86_64__)
    return __rdtsc();
#else
    return mt_clock_monotonic();
#endif
}

/* At start: decides whether the TSC may be used and takes the first reading. */
void mt_clock_start(void);
/* The writer's tick: a reading of both clocks, the function re-anchored. */
void mt_clock_tick(void);
/* The tick's arithmetic on a given reading (tsc, CLOCK_MONOTONIC ns), for tests. */
void mt_clock_observe(uint64_t tsc, uint64_t ns);
/* ns(tsc) with the current function; 0 while there is none. For tests. */
uint64_t mt_clock_eval(uint64_t tsc);
/* Starts over from a given first reading, the machine's checks skipped (tests). */
void mt_clock_start_at(uint64_t tsc, uint64_t ns);
/* One line for the trace's notes: which clock, and how far from CLOCK_MONOTONIC it was seen. */
void mt_clock_describe(char *buf, size_t len);
/* The TSC's rate in kHz, 0 while unknown (to turn cycle counts into time). */
uint64_t mt_clock_tsc_khz(void);

#endif
