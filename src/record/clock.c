/* The recorder's clock (clock.h says why and how). Here: the checks that decide whether the TSC
 * may be used, the writer's re-anchoring, and a thread's slow path.
 *
 * The function every thread copies is published under a sequence count (odd while the writer
 * changes it). Only the writer's tick (and tests) write it; they hold `lock` so that two never
 * interleave. */
#include "clock.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

__thread mt_clock_copy mt_clock_tls;

/* UNSTARTED (0: a stamp before mt_clock_start looks again later), OFF (decided: clock_gettime),
 * WAITING (the first reading taken, the rate not yet measured), ON. */
enum { CLOCK_UNSTARTED, CLOCK_OFF, CLOCK_WAITING, CLOCK_ON };

static struct {
    _Atomic uint32_t seq;                         /* odd while the function changes */
    _Atomic uint64_t tsc, ns, mult, span;         /* the function (clock.h), span for copies */
    _Atomic int state;
    _Atomic int no_stamps;                        /* MEMTRACE_CLOCK=monotonic: rate only */
    pthread_mutex_t lock;                         /* writers: the tick, tests */
    uint64_t first_tsc, first_ns;                 /* the reading at start (CLOCK_WAITING) */
    uint64_t last_tsc, last_ns;                   /* the last tick's reading */
    uint64_t ticks;                               /* readings compared with the function */
    uint64_t max_off, off_ns_sum;                 /* |distance| from CLOCK_MONOTONIC at ticks */
    char why[160];                                /* CLOCK_OFF: why */
} clk = {.lock = PTHREAD_MUTEX_INITIALIZER};

uint64_t mt_clock_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns(t) for the function (tsc, ns, mult); t may be a little before tsc (another core's reading,
 * or the function re-anchored after this thread read t). */
static inline uint64_t eval(uint64_t tsc, uint64_t ns, uint64_t mult, uint64_t t)
{
    if (t >= tsc) return ns + (uint64_t)(((unsigned __int128)(t - tsc) * mult) >> 32);
    return ns - (uint64_t)(((unsigned __int128)(tsc - t) * mult) >> 32);
}

/* The current function, or 0 when the writer is in the middle of changing it for too long (a
 * signal handler on the writer's own thread would otherwise wait for itself). */
static int read_function(uint64_t *tsc, uint64_t *ns, uint64_t *mult, uint64_t *span)
{
    for (int tries = 0; tries < 1000; tries++) {
        uint32_t s = atomic_load_explicit(&clk.seq, memory_order_acquire);
        if (s & 1) continue;
        *tsc = atomic_load_explicit(&clk.tsc, memory_order_relaxed);
        *ns = atomic_load_explicit(&clk.ns, memory_order_relaxed);
        *mult = atomic_load_explicit(&clk.mult, memory_order_relaxed);
        *span = atomic_load_explicit(&clk.span, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&clk.seq, memory_order_relaxed) == s) return 1;
    }
    return 0;
}

#if defined(__x86_64__)
/* Both clocks at (nearly) one moment: the TSC read before and after clock_gettime, the pair with
 * the shortest gap of five, stamped at its middle. 0 when every try was interrupted (a gap of
 * more than 2 000 cycles, ~1 us: the thread was preempted or the machine stole its time). */
static int reading(uint64_t *tsc, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        unsigned aux;
        _mm_lfence();
        uint64_t a = __rdtsc();
        _mm_lfence();
        uint64_t m = mt_clock_monotonic();
        uint64_t b = __rdtscp(&aux);
        _mm_lfence();
        if (b > a && b - a < best) {
            best = b - a;
            *tsc = a + (b - a) / 2;
            *ns = m;
        }
    }
    return best < 2000;
}

/* The kernel keeps CLOCK_MONOTONIC on the TSC ("tsc" clocksource) only when it found the TSC
 * stable and synchronized across cores; an invariant TSC keeps its rate in every power state. */
static int tsc_usable(char *why, size_t len)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8))) {
        snprintf(why, len, "the CPU does not report an invariant TSC");
        return 0;
    }
    char src[64] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
    if (f) {
        if (!fgets(src, sizeof src, f)) src[0] = 0;
        fclose(f);
    }
    src[strcspn(src, "\n")] = 0;
    if (strcmp(src, "tsc") != 0) {
        snprintf(why, len, "the kernel's clocksource is %s, not tsc", src[0] ? src : "unknown");
        return 0;
    }
    return 1;
}
#endif

uint64_t mt_clock_slow(void)
{
#if defined(__x86_64__)
    mt_clock_copy *c = &mt_clock_tls;
    unsigned aux;
    uint64_t t = __rdtscp(&aux); /* ordered, as in mt_clock_now */
    if (t >= c->recheck) {
        int state = atomic_load_explicit(&clk.state, memory_order_acquire);
        uint64_t tsc, ns, mult, span;
        int stamps = !atomic_load_explicit(&clk.no_stamps, memory_order_relaxed);
        if (state == CLOCK_ON && stamps && read_function(&tsc, &ns, &mult, &span)) {
            uint64_t now = eval(tsc, ns, mult, t);
            /* A signal handler that interrupts this refresh sees span 0, comes here and leaves
             * the copy to us (writing). When handlers wrote it too, a copy half ours and half
             * theirs could be marked usable for a moment: under load, with a timer's handler
             * stamping every 20 us, tests/test_record_clock.c caught 49 such stamps in one run. */
            if (c->writing) return now;
            c->writing = 1;
            atomic_signal_fence(memory_order_seq_cst);
            c->span = 0;
            atomic_signal_fence(memory_order_seq_cst);
            c->tsc = t;
            c->ns = now;
            c->mult = mult;
            c->recheck = 0;
            atomic_signal_fence(memory_order_seq_cst);
            c->span = span;
            atomic_signal_fence(memory_order_seq_cst);
            c->writing = 0;
            return now;
        }
        if (!c->writing) {
            c->span = 0;
            /* Off for good, or not yet: look again in ~1 ms (2^21 cycles at 2 GHz), not per
             * stamp. */
            c->recheck = state == CLOCK_OFF || !stamps ? UINT64_MAX : t + (1ull << 21);
        }
    }
#endif
    return mt_clock_monotonic();
}

/* This thread's copy of the function forgotten (its rare work's counters kept). */
static void forget_copy(void)
{
    mt_clock_copy *c = &mt_clock_tls;
    c->tsc = c->ns = c->mult = c->span = c->recheck = 0;
}

/* Under clk.lock. */
static void publish(uint64_t tsc, uint64_t ns, uint64_t mult)
{
    uint64_t span = (uint64_t)(((unsigned __int128)MT_CLOCK_REFRESH_NS << 32) / mult);
    atomic_fetch_add_explicit(&clk.seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&clk.tsc, tsc, memory_order_relaxed);
    atomic_store_explicit(&clk.ns, ns, memory_order_relaxed);
    atomic_store_explicit(&clk.mult, mult, memory_order_relaxed);
    atomic_store_explicit(&clk.span, span, memory_order_relaxed);
    atomic_fetch_add_explicit(&clk.seq, 1, memory_order_release);
}

static void switch_off(const char *why)
{
    snprintf(clk.why, sizeof clk.why, "%s", why);
    atomic_store_explicit(&clk.state, CLOCK_OFF, memory_order_release);
}

void mt_clock_observe(uint64_t t, uint64_t n)
{
    pthread_mutex_lock(&clk.lock);
    int state = atomic_load_explicit(&clk.state, memory_order_relaxed);
    if (state == CLOCK_WAITING) {
        /* The first rate, over at least MT_CLOCK_MIN_BASE_NS; then steered at every tick. */
        if (t > clk.first_tsc && n >= clk.first_ns + MT_CLOCK_MIN_BASE_NS) {
            uint64_t mult = (uint64_t)(((unsigned __int128)(n - clk.first_ns) << 32) /
                                       (t - clk.first_tsc));
            if (mult < (1ull << 32) / 10 || mult > (1ull << 32) * 10) { /* not 0.1-10 GHz */
                char why[96];
                snprintf(why, sizeof why, "the TSC's rate measured %.3f GHz",
                         4294967296.0 / (double)mult);
                switch_off(why);
            } else {
                publish(t, n, mult);
                clk.last_tsc = t, clk.last_ns = n;
                atomic_store_explicit(&clk.state, CLOCK_ON, memory_order_release);
            }
        }
    } else if (state == CLOCK_ON && t > clk.last_tsc && n > clk.last_ns) {
        uint64_t ftsc = atomic_load_explicit(&clk.tsc, memory_order_relaxed);
        uint64_t fns = atomic_load_explicit(&clk.ns, memory_order_relaxed);
        uint64_t fmult = atomic_load_explicit(&clk.mult, memory_order_relaxed);
        uint64_t f = eval(ftsc, fns, fmult, t);
        int64_t off = (int64_t)(n - f); /* + : our stamps are behind CLOCK_MONOTONIC */
        uint64_t dist = (uint64_t)(off < 0 ? -off : off);
        clk.ticks++;
        clk.off_ns_sum += dist;
        if (dist > clk.max_off) clk.max_off = dist;
        if (off > MT_CLOCK_MAX_OFF_NS || off < -MT_CLOCK_MAX_OFF_NS) {
            char why[160];
            snprintf(why, sizeof why, "switched off at a tick that found the TSC's time %" PRId64
                     " ns from CLOCK_MONOTONIC (a clock change or a moved virtual machine?)", off);
            switch_off(why);
        } else if (n - clk.last_ns >= MT_CLOCK_MIN_STEER_NS) {
            /* From f at t, reach CLOCK_MONOTONIC's pace over the last interval plus the distance
             * seen now, over the next interval (of about the same length). Never more than
             * 200 ppm from that pace (NTP slews by at most 500), so a bad reading cannot bend
             * the clock. A tick sooner than MT_CLOCK_MIN_STEER_NS after the last (an explicit
             * flush) only measures: the pace over a short interval is mostly the readings'
             * own error. */
            uint64_t dn = n - clk.last_ns, dt = t - clk.last_tsc;
            uint64_t pace = (uint64_t)(((unsigned __int128)dn << 32) / dt);
            int64_t want = (int64_t)dn + off;
            uint64_t mult = want > 0 ? (uint64_t)(((unsigned __int128)want << 32) / dt) : 0;
            if (mult < pace - pace / 5000) mult = pace - pace / 5000;
            if (mult > pace + pace / 5000) mult = pace + pace / 5000;
            publish(t, f, mult);
            clk.last_tsc = t, clk.last_ns = n;
        }
    }
    pthread_mutex_unlock(&clk.lock);
}

void mt_clock_tick(void)
{
#if defined(__x86_64__)
    if (atomic_load_explicit(&clk.state, memory_order_acquire) == CLOCK_OFF) return;
    uint64_t t, n;
    if (reading(&t, &n)) mt_clock_observe(t, n);
#endif
}

uint64_t mt_clock_eval(uint64_t t)
{
    uint64_t tsc, ns, mult, span;
    if (atomic_load_explicit(&clk.state, memory_order_acquire) != CLOCK_ON ||
        !read_function(&tsc, &ns, &mult, &span))
        return 0;
    return eval(tsc, ns, mult, t);
}

/* Under clk.lock: a new start, nothing measured yet. */
static void forget(int no_stamps)
{
    clk.ticks = clk.max_off = clk.off_ns_sum = 0;
    clk.why[0] = 0;
    atomic_store(&clk.no_stamps, no_stamps);
}

/* Under clk.lock: the first reading of both clocks (CLOCK_WAITING). */
static void begin(uint64_t tsc, uint64_t ns)
{
    clk.first_tsc = tsc, clk.first_ns = ns;
    atomic_store_explicit(&clk.state, CLOCK_WAITING, memory_order_release);
}

void mt_clock_start(void)
{
    pthread_mutex_lock(&clk.lock);
    /* MEMTRACE_CLOCK=monotonic: stamps from clock_gettime, the TSC's rate still measured (the
     * cost notes' cycle counts need it; an A/B of the two clocks compares those). */
    const char *env = getenv("MEMTRACE_CLOCK");
    forget(env && strcmp(env, "monotonic") == 0);
#if defined(__x86_64__)
    char why[160];
    uint64_t tsc, ns;
    if (!tsc_usable(why, sizeof why))
        switch_off(why);
    else if (!reading(&tsc, &ns))
        switch_off("the first reading of both clocks was interrupted every time");
    else
        begin(tsc, ns);
#else
    switch_off("not an x86-64 machine");
#endif
    pthread_mutex_unlock(&clk.lock);
    forget_copy(); /* this thread looks again at its next stamp */
}

void mt_clock_start_at(uint64_t tsc, uint64_t ns)
{
    pthread_mutex_lock(&clk.lock);
    forget(0);
    begin(tsc, ns);
    pthread_mutex_unlock(&clk.lock);
    forget_copy();
}

/* The TSC's rate in kHz for a slope of `mult` ns per cycle (32.32). */
static uint64_t khz_of(uint64_t mult) { return mult ? (uint64_t)((1000000ull << 32) / mult) : 0; }

uint64_t mt_clock_tsc_khz(void)
{
    if (atomic_load_explicit(&clk.state, memory_order_acquire) != CLOCK_ON) return 0;
    return khz_of(atomic_load_explicit(&clk.mult, memory_order_relaxed));
}

void mt_clock_describe(char *buf, size_t len)
{
    pthread_mutex_lock(&clk.lock);
    int state = atomic_load(&clk.state);
    uint64_t khz = khz_of(atomic_load(&clk.mult));
    if (state == CLOCK_ON && atomic_load(&clk.no_stamps)) {
        snprintf(buf, len, "time stamps: clock_gettime(CLOCK_MONOTONIC) (MEMTRACE_CLOCK=monotonic; "
                 "the TSC runs at %.3f GHz)", (double)khz / 1e6);
    } else if (state == CLOCK_ON) {
        snprintf(buf, len, "time stamps: the TSC (%.3f GHz) mapped to CLOCK_MONOTONIC, re-anchored "
                 "at each writer tick; at the %" PRIu64 " ticks the stamps were %.0f ns from "
                 "CLOCK_MONOTONIC on average, %" PRIu64 " ns at most",
                 (double)khz / 1e6, clk.ticks,
                 clk.ticks ? (double)clk.off_ns_sum / (double)clk.ticks : 0.0, clk.max_off);
    } else if (state == CLOCK_WAITING) {
        snprintf(buf, len, "time stamps: clock_gettime(CLOCK_MONOTONIC) (the run ended before the "
                 "TSC's rate was measured)");
    } else if (state == CLOCK_OFF && clk.ticks) {
        snprintf(buf, len, "time stamps: clock_gettime(CLOCK_MONOTONIC) (%s; before that the TSC "
                 "mapped to it, at most %" PRIu64 " ns from it at %" PRIu64 " ticks)", clk.why,
                 clk.max_off, clk.ticks);
    } else {
        snprintf(buf, len, "time stamps: clock_gettime(CLOCK_MONOTONIC) (%s)",
                 clk.why[0] ? clk.why : "the clock was not started");
    }
    pthread_mutex_unlock(&clk.lock);
}
