/* Rare work (src/record/rare_work.h): timed every time, counted once, and invisible to the
 * sampled timing's clock, so that a timed call that did some does not count it 16 times. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/record.h"
#include "record/main_stack.h"
#include "record/rare_work.h"

#define MS 1000000ull

/* Busy for at least ns of CLOCK_MONOTONIC (a sleep would do too; busy is what the recorder is). */
static void busy(uint64_t ns)
{
    uint64_t t0 = mt_clock_monotonic();
    while (mt_clock_monotonic() - t0 < ns) {
    }
}

Test(rare_work, a_section_is_counted_once_with_its_time)
{
    uint64_t pieces = atomic_load(&mt_rare_all.sections), all = atomic_load(&mt_rare_all.ns);
    uint64_t stacks = atomic_load(&mt_rare_all.kind_sections[MT_RARE_STACK]);
    uint64_t stack_ns = atomic_load(&mt_rare_all.kind_ns[MT_RARE_STACK]);
    uint64_t mine = mt_clock_tls.rare_ns;
    uint64_t t = mt_rare_begin();
    busy(3 * MS);
    mt_rare_end(t, MT_RARE_STACK);
    cr_expect_eq(atomic_load(&mt_rare_all.sections), pieces + 1);
    uint64_t took = mt_clock_tls.rare_ns - mine;
    cr_expect_geq(took, 3 * MS, "the section's time, %llu ns", (unsigned long long)took);
    cr_expect_lt(took, 500 * MS);
    cr_expect_eq(atomic_load(&mt_rare_all.ns) - all, took, "the total has it once");
    cr_expect_eq(atomic_load(&mt_rare_all.kind_sections[MT_RARE_STACK]), stacks + 1, "its kind");
    cr_expect_eq(atomic_load(&mt_rare_all.kind_ns[MT_RARE_STACK]) - stack_ns, took);
    cr_expect_geq(atomic_load(&mt_rare_all.kind_max_ns[MT_RARE_STACK]), took, "the longest");
    cr_expect_eq(mt_clock_tls.rare_depth, 0);
}

Test(rare_work, a_section_inside_another_is_part_of_it)
{
    uint64_t pieces = atomic_load(&mt_rare_all.sections), mine = mt_clock_tls.rare_ns;
    uint64_t walks = atomic_load(&mt_rare_all.kind_sections[MT_RARE_WALK]);
    uint64_t outer = mt_rare_begin();
    busy(1 * MS);
    uint64_t inner = mt_rare_begin();
    busy(2 * MS);
    mt_rare_end(inner, MT_RARE_WALK);
    cr_expect_eq(mt_clock_tls.rare_ns, mine, "nothing counted until the outer section ends");
    busy(1 * MS);
    mt_rare_end(outer, MT_RARE_STACK);
    cr_expect_eq(atomic_load(&mt_rare_all.sections), pieces + 1, "one piece, not two");
    cr_expect_eq(atomic_load(&mt_rare_all.kind_sections[MT_RARE_WALK]), walks,
                 "of the outer section's kind");
    cr_expect_geq(mt_clock_tls.rare_ns - mine, 4 * MS, "the inner section's time is in the outer's");
}

/* The sampled timing's clock stands still while rare work runs: a timed call that contained 5 ms
 * of it measures only its own ordinary work. */
Test(rare_work, the_cost_clock_leaves_rare_work_out)
{
    uint64_t c0 = mt_cost_clock(), t0 = mt_clock_now();
    busy(1 * MS); /* ordinary work */
    uint64_t t = mt_rare_begin();
    busy(5 * MS);
    mt_rare_end(t, MT_RARE_STACK);
    uint64_t ordinary = mt_cost_clock() - c0, wall = mt_clock_now() - t0;
    cr_expect_geq(wall, 6 * MS);
    cr_expect_geq(ordinary, 1 * MS, "%llu ns", (unsigned long long)ordinary);
    cr_expect_lt(ordinary, wall - 5 * MS + MS / 2, "the rare 5 ms are not in %llu ns of %llu",
                 (unsigned long long)ordinary, (unsigned long long)wall);
    /* a stamp taken just before converts to the same clock */
    uint64_t stamp = mt_clock_now();
    uint64_t at = mt_cost_clock_at(stamp), now = mt_cost_clock();
    cr_expect(at <= now && now - at < MS);
}

/* In TSC cycles for the whole-report timing: nothing when there was none, and "unknown" (the
 * sample is dropped) while the TSC's rate is not known. */
Test(rare_work, cycles_since)
{
    uint64_t r0 = mt_clock_tls.rare_ns;
    cr_expect_eq(mt_rare_cycles_since(r0), 0);
    uint64_t t = mt_rare_begin();
    busy(MS);
    mt_rare_end(t, MT_RARE_STACK);
    uint64_t c = mt_rare_cycles_since(r0);
#if defined(__x86_64__)
    if (!mt_clock_tsc_khz())
        cr_expect_eq(c, MT_RARE_UNKNOWN, "the clock was never started here");
    else
        cr_expect_geq(c, mt_clock_tsc_khz() / 2); /* over 1 ms of cycles, at any rate */
#else
    cr_expect_geq(c, MS);
#endif
}

/* A thread's first walk finds its stack (glibc reads /proc/self/maps for the main thread: up to a
 * millisecond in a large process) and makes its walk memos: rare work, once; its later walks do
 * none of it. */
static void *first_walks(void *arg)
{
    uint64_t *out = arg, ips[32];
    out[0] = atomic_load(&mt_rare_all.kind_sections[MT_RARE_THREAD]);
    out[1] = atomic_load(&mt_rare_all.kind_ns[MT_RARE_THREAD]);
    uint64_t mine = mt_clock_tls.rare_ns;
    int n = mt_unwind(ips, 32, 0, NULL);
    out[2] = atomic_load(&mt_rare_all.kind_sections[MT_RARE_THREAD]);
    out[3] = atomic_load(&mt_rare_all.kind_ns[MT_RARE_THREAD]);
    out[7] = mt_clock_tls.rare_ns - mine;
    for (int i = 0; i < 10; i++) n += mt_unwind(ips, 32, 0, NULL);
    out[4] = atomic_load(&mt_rare_all.kind_sections[MT_RARE_THREAD]);
    out[5] = atomic_load(&mt_rare_all.kind_ns[MT_RARE_THREAD]);
    out[6] = (uint64_t)n;
    return NULL;
}

Test(rare_work, a_threads_first_walk_sets_it_up_as_rare_work)
{
    uint64_t out[8];
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, first_walks, out), 0);
    pthread_join(t, NULL);
    cr_expect_gt(out[6], 0, "the walks found frames");
    cr_expect_geq(out[2] - out[0], 2, "its stack's bounds and its memos: two pieces");
    cr_expect_gt(out[3], out[1], "timed");
    cr_expect_geq(out[7], out[3] - out[1], "on the thread's own counter too");
    cr_expect_eq(out[4], out[2], "later walks: none");
    cr_expect_eq(out[5], out[3]);
}

/* The main thread's stack bounds, found by another thread as the recorder's writer does at
 * start-up (main_stack.c), are glibc's own; the main thread's first walk takes them and reads no
 * /proc/self/maps of its own: one thread-start piece (its walk memos), not two. */
static void *find_main_stack(void *arg)
{
    *(int *)arg = mt_unwind_find_main_stack();
    return NULL;
}

Test(rare_work, the_main_threads_stack_is_found_by_another_thread)
{
    cr_assert_eq(syscall(SYS_gettid), getpid(), "Criterion runs the test on its process's main "
                 "thread");
    pthread_attr_t attr;
    void *addr;
    size_t size;
    cr_assert_eq(pthread_getattr_np(pthread_self(), &attr), 0);
    cr_assert_eq(pthread_attr_getstack(&attr, &addr, &size), 0);
    pthread_attr_destroy(&attr);
    int found = 0;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, find_main_stack, &found), 0);
    pthread_join(t, NULL);
    cr_assert(found);
    cr_expect_eq(mt_main_stack.lo, (uintptr_t)addr, "%#lx against glibc's %p",
                 (unsigned long)mt_main_stack.lo, addr);
    cr_expect_eq(mt_main_stack.hi, (uintptr_t)addr + size);
    uint64_t threads = atomic_load(&mt_rare_all.kind_sections[MT_RARE_THREAD]), ips[32];
    int truncated = 1;
    int n = mt_unwind(ips, 32, 0, &truncated);
    cr_expect_gt(n, 0, "the walk found frames");
    cr_expect_eq(atomic_load(&mt_rare_all.kind_sections[MT_RARE_THREAD]) - threads, 1,
                 "its memos only");
}
