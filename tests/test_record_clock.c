/* The recorder's clock (src/record/clock.c): the TSC mapped to CLOCK_MONOTONIC.
 *
 * The arithmetic is tested on given readings (mt_clock_start_at, mt_clock_observe); the stamps
 * themselves against clock_gettime on this machine, where its kernel keeps time on the TSC (the
 * CI machines do; elsewhere those tests say why they are skipped). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "record/clock.h"

#define MS 1000000ull

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

/* Starts the real clock and ticks until it runs on the TSC; skips the test where it cannot. */
static void start_on_tsc(void)
{
    mt_clock_start();
    for (int i = 0; i < 40 && !mt_clock_tsc_khz(); i++) {
        sleep_ns(15 * MS);
        mt_clock_tick();
    }
    if (!mt_clock_tsc_khz()) {
        char why[320];
        mt_clock_describe(why, sizeof why);
        cr_skip_test("%s", why);
    }
}

/* The clock's note has both pieces of text. */
static void note_says(const char *a, const char *b)
{
    char line[320];
    mt_clock_describe(line, sizeof line);
    cr_assert(strstr(line, a) && strstr(line, b), "%s", line);
}

/* ---- the arithmetic, on given readings (2 GHz: 0.5 ns a cycle) ---- */

#define T0 1000000000ull
#define N0 5000000000ull

static void on_at_2ghz(void)
{
    mt_clock_start_at(T0, N0);
    cr_assert_eq(mt_clock_eval(T0), 0, "no function before the rate is measured");
    mt_clock_observe(T0 + 2 * 5 * MS, N0 + 5 * MS); /* 5 ms: too short a baseline */
    cr_assert_eq(mt_clock_tsc_khz(), 0);
    mt_clock_observe(T0 + 2 * 20 * MS, N0 + 20 * MS);
    cr_assert_eq(mt_clock_tsc_khz(), 2000000);
}

Test(record_clock, the_rate_comes_from_the_first_long_enough_baseline)
{
    on_at_2ghz();
    uint64_t t1 = T0 + 40 * MS;
    cr_assert_eq(mt_clock_eval(t1), N0 + 20 * MS);
    cr_assert_eq(mt_clock_eval(t1 + 2000), N0 + 20 * MS + 1000);
    cr_assert_eq(mt_clock_eval(t1 - 2000), N0 + 20 * MS - 1000, "a reading before the anchor");
}

Test(record_clock, a_tick_makes_up_the_distance_over_the_next_interval)
{
    on_at_2ghz();
    uint64_t t1 = T0 + 40 * MS, n1 = N0 + 20 * MS;
    /* 200 ms later CLOCK_MONOTONIC is 3 us ahead of the function */
    uint64_t t2 = t1 + 400 * MS, n2 = n1 + 200 * MS + 3000;
    uint64_t before = mt_clock_eval(t2);
    cr_assert_eq(before, n1 + 200 * MS);
    mt_clock_observe(t2, n2);
    cr_assert_eq(mt_clock_eval(t2), before, "continuous where it is re-anchored");
    /* at CLOCK_MONOTONIC's pace, one interval on, the function has caught up */
    uint64_t at = mt_clock_eval(t2 + 400 * MS);
    int64_t d = (int64_t)(at - (n2 + (200 * MS + 3000)));
    cr_assert(d >= -2 && d <= 2, "one interval on: %lld ns from CLOCK_MONOTONIC", (long long)d);
    note_says("the TSC (2.000 GHz)", "3000 ns at most");
}

Test(record_clock, a_tick_soon_after_the_last_only_measures)
{
    on_at_2ghz();
    uint64_t t1 = T0 + 40 * MS, n1 = N0 + 20 * MS;
    uint64_t later = t1 + 800 * MS, f_later = mt_clock_eval(later);
    mt_clock_observe(t1 + 2 * 10 * MS, n1 + 10 * MS + 2000); /* 10 ms on, 2 us ahead */
    cr_assert_eq(mt_clock_eval(later), f_later, "the function did not change");
    note_says("at the 1 ticks", "2000 ns at most");
}

Test(record_clock, a_bad_reading_cannot_bend_the_pace_by_more_than_200_ppm)
{
    on_at_2ghz();
    uint64_t t1 = T0 + 40 * MS, n1 = N0 + 20 * MS;
    uint64_t t2 = t1 + 120 * MS, n2 = n1 + 60 * MS + 90000; /* 90 us ahead after 60 ms */
    mt_clock_observe(t2, n2);
    /* pace: (60 ms + 90 us) / 120 M cycles; the slope may differ from it by 1/5000 at most */
    double pace = (60.0 * MS + 90000) / (120.0 * MS);
    double slope = (double)(mt_clock_eval(t2 + 120 * MS) - mt_clock_eval(t2)) / (120.0 * MS);
    cr_assert(slope <= pace * (1 + 1.0 / 5000) + 1e-9 && slope >= pace * (1 + 1.0 / 5000) - 1e-8,
              "slope %.9f, pace %.9f: the 200 ppm bound, reached", slope, pace);
}

Test(record_clock, a_jump_switches_the_tsc_off_for_good)
{
    on_at_2ghz();
    uint64_t t1 = T0 + 40 * MS, n1 = N0 + 20 * MS;
    mt_clock_observe(t1 + 400 * MS, n1 + 200 * MS + 250000); /* 250 us: beyond the bound */
    cr_assert_eq(mt_clock_tsc_khz(), 0);
    cr_assert_eq(mt_clock_eval(t1), 0);
    note_says("clock_gettime(CLOCK_MONOTONIC)", "switched off at a tick that found the TSC's "
              "time 250000 ns");
    mt_clock_observe(t1 + 800 * MS, n1 + 400 * MS + 250000); /* stays off */
    cr_assert_eq(mt_clock_tsc_khz(), 0);
    /* stamps come from clock_gettime now */
    uint64_t a = mt_clock_monotonic(), s = mt_clock_now(), b = mt_clock_monotonic();
    cr_assert(s >= a && s <= b);
}

Test(record_clock, a_rate_outside_what_a_tsc_can_be_is_refused)
{
    mt_clock_start_at(T0, N0);
    mt_clock_observe(T0 + 100, N0 + 20 * MS); /* 100 cycles in 20 ms: 5 kHz */
    cr_assert_eq(mt_clock_tsc_khz(), 0);
    note_says("clock_gettime(CLOCK_MONOTONIC)", "rate measured");
}

/* ---- the stamps, on this machine ---- */

static uint64_t mono(void) { return mt_clock_monotonic(); }

Test(record_clock, stamps_stay_within_a_microsecond_of_clock_monotonic)
{
    start_on_tsc();
    int checked = 0, outside = 0;
    int64_t worst = 0;
    for (int i = 0; i < 200000; i++) {
        if (i % 20000 == 0) { /* a tick now and then, as the writer's */
            sleep_ns(60 * MS);
            mt_clock_tick();
        }
        uint64_t a = mono(), s = mt_clock_now(), b = mono();
        if (b - a > 5000) continue; /* preempted in between: says nothing */
        checked++;
        int64_t d = s < a ? (int64_t)(s - a) : s > b ? (int64_t)(s - b) : 0;
        if (d < -1000 || d > 1000) outside++;
        if (llabs(d) > llabs(worst)) worst = d;
    }
    cr_assert_gt(checked, 100000);
    cr_assert_eq(outside, 0, "%d of %d stamps more than 1 us outside clock_gettime's, worst %lld ns",
                 outside, checked, (long long)worst);
    cr_assert_gt(mt_clock_tls.span, 0, "the stamps came from the thread's copy");
}

static _Atomic int flag, stop;
static _Atomic uint64_t handed;
static _Atomic int inverted, rounds;
static _Atomic uint64_t worst_back; /* ns */
static void went_back(uint64_t s, uint64_t before)
{
    atomic_fetch_add(&inverted, 1);
    uint64_t w = atomic_load(&worst_back);
    if (before - s > w) atomic_store(&worst_back, before - s);
}

static void *ponger(void *arg)
{
    (void)arg;
    for (unsigned spins = 0; !atomic_load(&stop);) {
        if (atomic_load_explicit(&flag, memory_order_acquire) != 1) {
            if (++spins % 1024 == 0) sched_yield();
            continue;
        }
        uint64_t s = mt_clock_now(), before = atomic_load_explicit(&handed, memory_order_relaxed);
        if (s < before) went_back(s, before);
        atomic_fetch_add(&rounds, 1);
        atomic_store_explicit(&handed, s, memory_order_relaxed);
        atomic_store_explicit(&flag, 0, memory_order_release);
    }
    return NULL;
}

static void *ticker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        sleep_ns(55 * MS);
        mt_clock_tick();
    }
    return NULL;
}

Test(record_clock, a_stamp_taken_after_another_threads_is_not_earlier)
{
    start_on_tsc();
    pthread_t p, t;
    pthread_create(&p, NULL, ponger, NULL);
    pthread_create(&t, NULL, ticker, NULL);
    /* 600 ms and at least 5 000 hand-overs. Spinning threads on an overloaded machine (a
     * sanitizer build beside the suite on two cores) hand over a few dozen times in 600 ms, each
     * waiting for the other's time slice: the spin loops yield now and then, and the test goes on
     * for up to 20 s until it has seen enough. */
    uint64_t start = mono(), until = start + 600 * MS, give_up = start + 20000 * MS;
    int mine = 0;
    for (unsigned spins = 0;;) {
        uint64_t now = mono();
        if (now >= give_up || (now >= until && atomic_load(&rounds) >= 5000)) break;
        if (atomic_load_explicit(&flag, memory_order_acquire) != 0) {
            if (++spins % 1024 == 0) sched_yield();
            continue;
        }
        uint64_t s = mt_clock_now(), before = atomic_load_explicit(&handed, memory_order_relaxed);
        if (s < before) went_back(s, before);
        atomic_store_explicit(&handed, s, memory_order_relaxed);
        atomic_store_explicit(&flag, 1, memory_order_release);
        mine++;
    }
    atomic_store(&stop, 1);
    pthread_join(p, NULL);
    pthread_join(t, NULL);
    cr_assert_gt(atomic_load(&rounds), 1000, "the threads handed over %d times", atomic_load(&rounds));
    cr_assert_eq(atomic_load(&inverted), 0, "%d of %d hand-overs went back in time, by %llu ns at most",
                 atomic_load(&inverted), mine + atomic_load(&rounds),
                 (unsigned long long)atomic_load(&worst_back));
}

static _Atomic int handler_bad, handler_runs;

/* The thread's copy is one function (read as mt_clock_now reads it: tsc first, again if a
 * handler refreshed it meanwhile). */
static int copy_consistent(void)
{
    mt_clock_copy c;
    do {
        c.tsc = mt_clock_tls.tsc;
        atomic_signal_fence(memory_order_seq_cst);
        c.span = mt_clock_tls.span;
        c.ns = mt_clock_tls.ns;
        atomic_signal_fence(memory_order_seq_cst);
    } while (c.tsc != mt_clock_tls.tsc);
    if (!c.span) return 1; /* between refreshes: the next stamp takes the slow path */
    uint64_t f = mt_clock_eval(c.tsc);
    return c.ns + 2 >= f && c.ns <= f + 2;
}

static void on_alarm(int sig)
{
    (void)sig;
    mt_clock_now();
    atomic_fetch_add(&handler_runs, 1);
    if (!copy_consistent()) atomic_fetch_add(&handler_bad, 1);
}

Test(record_clock, a_signal_handler_stamping_during_a_refresh_leaves_a_whole_copy)
{
    start_on_tsc();
    struct sigaction sa = {.sa_handler = on_alarm};
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 20}, {0, 20}};
    setitimer(ITIMER_REAL, &it, NULL);
    int bad = 0;
    for (int i = 0; i < 300000; i++) {
        mt_clock_tls.span = 0; /* every stamp refreshes the copy */
        mt_clock_now();
        if (!copy_consistent()) bad++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    cr_assert_gt(atomic_load(&handler_runs), 100, "the handler ran %d times", atomic_load(&handler_runs));
    cr_assert_eq(bad + atomic_load(&handler_bad), 0, "%d + %d copies were not one function", bad,
                 atomic_load(&handler_bad));
}

/* What a signal handler does when it interrupts this thread's refresh: its stamp is the
 * function's, and the copy being written is left alone (it would otherwise be half the
 * handler's, half the interrupted refresh's: the stress test above caught that under load). */
Test(record_clock, a_stamp_during_a_refresh_leaves_the_copy_to_it)
{
    start_on_tsc();
    mt_clock_now();
    mt_clock_tls.span = 0; /* as the refresh leaves it before its fields */
    mt_clock_tls.tsc = 1;
    mt_clock_tls.writing = 1;
    uint64_t a = mono(), s = mt_clock_now(), b = mono();
    cr_expect(s + 1000 >= a && s <= b + 1000, "the function's stamp: %llu in [%llu, %llu]",
              (unsigned long long)s, (unsigned long long)a, (unsigned long long)b);
    cr_expect_eq(mt_clock_tls.tsc, 1, "the copy was written");
    cr_expect_eq(mt_clock_tls.span, 0);
    mt_clock_tls.writing = 0;
    mt_clock_now();
    cr_expect(mt_clock_tls.span && mt_clock_tls.tsc != 1, "refreshed once the refresh is done");
}

Test(record_clock, memtrace_clock_monotonic_keeps_clock_gettime_and_still_measures_the_rate)
{
    setenv("MEMTRACE_CLOCK", "monotonic", 1);
    start_on_tsc();
    for (int i = 0; i < 1000; i++) mt_clock_now();
    cr_assert_eq(mt_clock_tls.span, 0, "no stamp came from the TSC");
    note_says("clock_gettime(CLOCK_MONOTONIC) (MEMTRACE_CLOCK=monotonic; the TSC runs", "GHz");
}
