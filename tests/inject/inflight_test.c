/* The recorder's count of calls in progress (src/record/cuda/inflight.c), which at_exit waits for
 * before it frees the sink: a thread inside is seen (in its own slot, or the shared counter when
 * the slots are all taken), a slot is given back when its thread exits, and counts nest. Built
 * from the recorder's source with CUPTI's headers (tests/inflight.cmake). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#include "recorder.h"

static mt_recorder rec; /* the tests' recorder: each test runs in a process of its own */

typedef struct inside {
    pthread_barrier_t *in, *out;
} inside;

/* Enters the recorder, waits at `in` (everybody is inside), then at `out`, then leaves. */
static void *stay_inside(void *arg)
{
    inside *w = arg;
    mt_inflight_begin(&rec);
    pthread_barrier_wait(w->in);
    pthread_barrier_wait(w->out);
    mt_inflight_end(&rec);
    return NULL;
}

static int slots_taken(void)
{
    int n = 0;
    for (int i = 0; i < MT_INFLIGHT_SLOTS; i++) n += atomic_load(&rec.inflight_slots.slot[i].taken);
    return n;
}

/* n threads inside at once: the recorder is not quiet until every one has left. Returns how many
 * counted themselves on the shared counter. */
static int threads_inside(int n)
{
    pthread_barrier_t in, out;
    pthread_barrier_init(&in, NULL, (unsigned)n + 1);
    pthread_barrier_init(&out, NULL, (unsigned)n + 1);
    inside w = {&in, &out};
    pthread_t *t = calloc((size_t)n, sizeof *t);
    cr_assert(t);
    for (int i = 0; i < n; i++) cr_assert_eq(pthread_create(&t[i], NULL, stay_inside, &w), 0);
    pthread_barrier_wait(&in);
    cr_expect_eq(mt_inflight_quiet(&rec), 0, "%d threads inside, yet quiet", n);
    int shared = atomic_load(&rec.inflight);
    pthread_barrier_wait(&out);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    cr_expect_eq(mt_inflight_quiet(&rec), 1, "every thread left, yet not quiet");
    free(t);
    pthread_barrier_destroy(&in);
    pthread_barrier_destroy(&out);
    return shared;
}

Test(inflight, a_thread_inside_is_seen_until_it_leaves)
{
    mt_inflight_init(&rec);
    cr_expect_eq(mt_inflight_quiet(&rec), 1);
    int shared = threads_inside(1);
    /* with membarrier (Linux 4.14+, as on the machines memtrace runs on) in a slot of its own */
    cr_expect_eq(shared, rec.inflight_slots.on ? 0 : 1);
}

Test(inflight, counts_nest_on_one_thread)
{
    mt_inflight_init(&rec);
    mt_inflight_begin(&rec);
    mt_inflight_begin(&rec); /* a signal handler's allocation inside a hook */
    cr_expect_eq(mt_inflight_quiet(&rec), 0);
    mt_inflight_end(&rec);
    cr_expect_eq(mt_inflight_quiet(&rec), 0, "the outer call is still inside");
    mt_inflight_end(&rec);
    cr_expect_eq(mt_inflight_quiet(&rec), 1);
}

static void *enter_and_exit(void *arg)
{
    (void)arg;
    mt_inflight_begin(&rec);
    mt_inflight_end(&rec);
    return NULL;
}

/* Thousands of short-lived threads (a server that makes one per request) never run out of slots:
 * each gives its own back when it exits. */
Test(inflight, a_thread_that_exits_gives_its_slot_back)
{
    mt_inflight_init(&rec);
    if (!rec.inflight_slots.on) cr_skip_test("no membarrier here: every thread shares the counter");
    for (int i = 0; i < 4 * MT_INFLIGHT_SLOTS; i++) {
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, enter_and_exit, NULL), 0);
        pthread_join(t, NULL);
    }
    cr_expect_eq(slots_taken(), 0, "slots kept by threads that exited");
    cr_expect_eq(threads_inside(1), 0, "a new thread found no free slot");
}

/* Enters and leaves the recorder (its thread now holds a slot), then stays alive until `out`. */
static void *hold_a_slot(void *arg)
{
    inside *w = arg;
    mt_inflight_begin(&rec);
    mt_inflight_end(&rec);
    pthread_barrier_wait(w->in);
    pthread_barrier_wait(w->out);
    return NULL;
}

/* More threads at once than there are slots: the rest count on the shared counter, and the
 * recorder is quiet only when all have left, whichever count they are in. */
Test(inflight, beyond_the_slots_threads_share_the_counter)
{
    mt_inflight_init(&rec);
    if (!rec.inflight_slots.on) cr_skip_test("no membarrier here: every thread shares the counter");
    int n = MT_INFLIGHT_SLOTS + 40;
    cr_expect_eq(threads_inside(n), 40);
    cr_expect_eq(slots_taken(), 0);
    /* every slot held by a thread that is not inside: one more thread inside, on the counter */
    pthread_barrier_t in, out;
    pthread_barrier_init(&in, NULL, MT_INFLIGHT_SLOTS + 1);
    pthread_barrier_init(&out, NULL, MT_INFLIGHT_SLOTS + 1);
    inside w = {&in, &out};
    pthread_t t[MT_INFLIGHT_SLOTS];
    for (int i = 0; i < MT_INFLIGHT_SLOTS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, hold_a_slot, &w), 0);
    pthread_barrier_wait(&in);
    cr_expect_eq(slots_taken(), MT_INFLIGHT_SLOTS);
    cr_expect_eq(mt_inflight_quiet(&rec), 1, "nobody inside");
    cr_expect_eq(threads_inside(1), 1, "the thread beyond the slots was not counted");
    pthread_barrier_wait(&out);
    for (int i = 0; i < MT_INFLIGHT_SLOTS; i++) pthread_join(t[i], NULL);
}
