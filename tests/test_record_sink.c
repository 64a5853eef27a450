/* The sink: a synthetic event stream pushed through the same path the recorder uses (per-thread
 * rings -> writer thread -> chunked file), read back with the reader. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/record.h"
#include "testutil.h"

#define THREADS 4

typedef struct producer {
    mt_sink *sink;
    uint32_t tid;
    int events;
    int node_base;
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    for (int i = 0; i < p->events; i++) {
        if (i % 100 == 0) {
            mt_stack_node n = {.id = (uint32_t)(p->node_base + i / 100 + 1), .parent = 0,
                               .ip = 0x400000u + (uint64_t)i, .frame_kind = MT_FRAME_NATIVE};
            mt_sink_node(p->sink, &n);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        mt_event e = {.time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                      .tid = p->tid,
                      .op = (i % 2) ? MT_OP_FREE : MT_OP_ALLOC,
                      .kind = MT_KIND_DEVICE,
                      .device = 0,
                      .address = 0x7f0000000000ull + (uint64_t)(i / 2) * 4096,
                      .bytes = (i % 2) ? 0 : 4096,
                      .aux = (uint64_t)i, /* sequence number, to check per-thread order */
                      .stack = (uint32_t)(p->node_base + i / 100 + 1)};
        mt_sink_event(p->sink, &e);
    }
    return NULL;
}

/* p's events from a thread of their own (a thread of the program: its own ring), and back when
 * it has ended. */
static void produce_on_a_thread(producer *p)
{
    pthread_t th;
    pthread_create(&th, NULL, produce, p);
    pthread_join(th, NULL);
}

typedef struct readback {
    uint64_t events, nodes, notes, ends, dropped_records, dropped_total;
    uint64_t per_thread[THREADS + 1];
    int64_t last_seq[THREADS + 1];
    int order_ok;
    mt_end end;
} readback;

static void read_all(const char *path, readback *rb)
{
    memset(rb, 0, sizeof *rb);
    rb->order_ok = 1;
    for (int i = 0; i <= THREADS; i++) rb->last_seq[i] = -1;
    char err[256];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    mt_read_status st;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        switch (rec.type) {
        case MT_REC_EVENT: {
            uint32_t t = rec.u.event.tid;
            cr_assert(t >= 1 && t <= THREADS);
            rb->events++;
            rb->per_thread[t]++;
            if ((int64_t)rec.u.event.aux <= rb->last_seq[t]) rb->order_ok = 0;
            rb->last_seq[t] = (int64_t)rec.u.event.aux;
            break;
        }
        case MT_REC_STACK_NODE: rb->nodes++; break;
        case MT_REC_NOTE: rb->notes++; break;
        case MT_REC_DROPPED:
            rb->dropped_records++;
            rb->dropped_total += rec.u.dropped;
            break;
        case MT_REC_END:
            rb->ends++;
            rb->end = rec.u.end;
            break;
        default: break;
        }
    }
    cr_assert_eq(st, MT_READ_END, "%s", mt_reader_error(r));
    mt_reader_close(r);
}

static mt_sink *start(const char *path, uint32_t slots, uint32_t flush_ms)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    mt_sink_config cfg = {.fd = fd, .ring_slots = slots, .flush_ms = flush_ms,
                          .chunk_bytes = 16 * 1024};
    cfg.header.version = MT_TRACE_VERSION;
    cfg.header.pid = 42;
    cfg.header.start_monotonic_ns = 1;
    mt_sink *s = mt_sink_start(&cfg);
    cr_assert_not_null(s);
    return s;
}

Test(record_sink, threads_events_nodes_and_notes_all_arrive)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink.mtrace");
    mt_sink *s = start(path, 1u << 16, 20); /* rings big enough: nothing may be dropped */
    pthread_t th[THREADS];
    producer p[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i] = (producer){.sink = s, .tid = (uint32_t)i + 1, .events = 20000,
                          .node_base = i * 1000};
        pthread_create(&th[i], NULL, produce, &p[i]);
    }
    mt_record note = {.type = MT_REC_NOTE};
    note.u.note = (mt_note){.time_ns = 5, .level = MT_NOTE_WARNING, .text = "hello from a test"};
    mt_sink_put_copy(s, &note);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    mt_sink_stats st;
    mt_sink_stop(s, &st);

    cr_assert_eq(st.dropped, 0);
    cr_assert_eq(st.events, THREADS * 20000);
    cr_assert_eq(st.write_failed, 0);
    readback rb;
    read_all(path, &rb);
    cr_assert_eq(rb.events, THREADS * 20000);
    for (int t = 1; t <= THREADS; t++) cr_assert_eq(rb.per_thread[t], 20000);
    cr_assert(rb.order_ok, "events of one thread must keep their order");
    cr_assert_eq(rb.nodes, THREADS * 200);
    cr_assert_eq(rb.notes, 1);
    cr_assert_eq(rb.ends, 1);
    cr_assert_eq(rb.end.events, THREADS * 20000);
    cr_assert_eq(rb.end.dropped, 0);
    unlink(path);
}

Test(record_sink, full_rings_make_the_thread_wait_never_drop)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-wait.mtrace");
    /* 64-slot rings and a writer whose timer fires every 2 s: the producer overtakes it at once */
    mt_sink *s = start(path, 64, 2000);
    producer p = {.sink = s, .tid = 1, .events = 50000, .node_base = 0};
    produce(&p);
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    cr_assert_eq(st.dropped, 0, "a full ring waits for the writer, it does not drop");
    cr_assert_gt(st.waits, 0, "the test needs the ring to fill up");
    cr_assert_leq(st.max_wait_ns, 1000000000ull, "a wait is one drain, not the 2 s timer");
    readback rb;
    read_all(path, &rb);
    cr_assert_eq(rb.events, 50000);
    cr_assert_eq(rb.dropped_total, 0);
    cr_assert_eq(rb.nodes, 500, "stack nodes are never dropped");
    cr_assert(rb.order_ok);
    unlink(path);
}

Test(record_sink, a_sink_that_cannot_write_drops_after_the_bounded_wait_and_counts)
{
    /* No file ever (fd -1, never opened): nothing drains, so once the 64 slots are used every
     * event waits max_wait_ms and is then dropped and counted. */
    mt_sink_config cfg = {.fd = -1, .ring_slots = 64, .flush_ms = 5, .max_wait_ms = 2};
    mt_sink *s = mt_sink_start(&cfg);
    cr_assert_not_null(s);
    producer p = {.sink = s, .tid = 1, .events = 200, .node_base = 0};
    produce(&p);
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    cr_assert_eq(st.opened, 0);
    cr_assert_eq(st.events, 0);
    /* the first node and 63 events fill the 64 slots; the second node goes the slow way */
    cr_assert_eq(st.dropped, 200 - 63, "dropped %llu", (unsigned long long)st.dropped);
    cr_assert_eq(st.waits, st.dropped);
}

typedef struct holder {
    mt_sink *sink;
    _Atomic int go;
} holder;

/* Thread 1 announces an event stamped now, then commits it 5 ms later; thread 2 makes events
 * meanwhile, and the writer drains every millisecond. */
static void *hold_then_commit(void *arg)
{
    holder *h = arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    mt_sink_hold(h->sink, t0);
    atomic_store(&h->go, 1);
    usleep(5000);
    mt_event e = {.time_ns = t0, .tid = 1, .op = MT_OP_FREE, .kind = MT_KIND_DEVICE,
                  .address = 0x1000};
    mt_sink_event(h->sink, &e);
    return NULL;
}

Test(record_sink, events_are_written_in_time_order_across_threads_and_held_stamps)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-order.mtrace");
    mt_sink *s = start(path, 1024, 1);
    holder h = {.sink = s};
    pthread_t th;
    pthread_create(&th, NULL, hold_then_commit, &h);
    while (!atomic_load(&h.go)) sched_yield();
    producer p = {.sink = s, .tid = 2, .events = 3000, .node_base = 0};
    produce(&p); /* stamps after thread 1's, committed before it */
    pthread_join(th, NULL);
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    cr_assert_eq(st.late, 0, "no event may be written after a later-stamped one");
    char err[256];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    uint64_t last = 0, n = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type != MT_REC_EVENT) continue;
        cr_assert_geq(rec.u.event.time_ns, last, "event %llu out of order", (unsigned long long)n);
        last = rec.u.event.time_ns;
        n++;
    }
    mt_reader_close(r);
    cr_assert_eq(n, 3001);
    unlink(path);
}

Test(record_sink, a_sink_opened_late_writes_what_came_before)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-late.mtrace");
    mt_sink_config cfg = {.fd = -1, .ring_slots = 1024, .flush_ms = 1};
    cfg.header.version = MT_TRACE_VERSION;
    cfg.header.pid = 7;
    mt_sink *s = mt_sink_start(&cfg);
    cr_assert_not_null(s);
    mt_record note = {.type = MT_REC_NOTE};
    note.u.note = (mt_note){.time_ns = 5, .level = MT_NOTE_INFO, .text = "before the file"};
    mt_sink_put_copy(s, &note);
    producer p = {.sink = s, .tid = 3, .events = 500, .node_base = 0};
    produce(&p);
    usleep(20000); /* drains that find no file must keep everything */
    cr_assert_eq(mt_sink_is_open(s), 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(mt_sink_open(s, fd), 0);
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    cr_assert_eq(st.opened, 1);
    readback rb;
    read_all(path, &rb);
    cr_assert_eq(rb.events, 500);
    cr_assert_eq(rb.notes, 1);
    cr_assert_eq(rb.nodes, 5);
    unlink(path);
}

Test(record_sink, flush_puts_a_readable_chunk_on_disk_while_running)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-flush.mtrace");
    mt_sink *s = start(path, 1024, 60000); /* the timer never fires during the test */
    producer p = {.sink = s, .tid = 2, .events = 300, .node_base = 0};
    produce(&p);
    mt_sink_flush(s);
    /* The file is read while the sink is still open, as after a SIGKILL. */
    readback rb;
    read_all(path, &rb);
    cr_assert_eq(rb.events, 300);
    cr_assert_eq(rb.ends, 0);
    mt_sink_stop(s, NULL);
    read_all(path, &rb);
    cr_assert_eq(rb.ends, 1);
    unlink(path);
}

Test(record_sink, rings_of_exited_threads_are_freed_and_nothing_is_lost)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-threads.mtrace");
    mt_sink *s = start(path, 1024, 10);
    /* 4 waves of 4 short-lived threads: their rings must not pile up */
    for (int wave = 0; wave < 4; wave++) {
        pthread_t th[THREADS];
        producer p[THREADS];
        for (int i = 0; i < THREADS; i++) {
            p[i] = (producer){.sink = s, .tid = (uint32_t)i + 1, .events = 500,
                              .node_base = (wave * THREADS + i) * 1000};
            pthread_create(&th[i], NULL, produce, &p[i]);
        }
        for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
        mt_sink_flush(s);
        mt_sink_flush(s); /* a second drain frees what the first emptied */
    }
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    cr_expect_geq(st.rings_freed + st.rings_reused, 3 * THREADS,
                  "rings of exited threads freed or taken over while running");
    readback rb;
    read_all(path, &rb);
    cr_expect_eq(rb.events + rb.dropped_total, 4 * THREADS * 500);
    cr_expect_eq(rb.events, st.events);
    unlink(path);
}

/* The contract the recorder's exit relies on: its tick emits through a pointer that goes away at
 * exit, so it takes the tick away first (set_tick NULL, then flush), and then no tick may be
 * running or run again. (Exit without that step crashed the traced program on the GPU; the GPU
 * check now asserts every traced program's exit status.) */
typedef struct slow_tick {
    _Atomic int running, calls;
} slow_tick;

static void slow_tick_fn(void *ctx, mt_sink *s)
{
    (void)s;
    slow_tick *t = ctx;
    atomic_store(&t->running, 1);
    usleep(20000); /* long enough that set_tick below lands in the middle of one */
    atomic_fetch_add(&t->calls, 1);
    atomic_store(&t->running, 0);
}

Test(record_sink, no_tick_runs_after_set_tick_null_and_flush)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-tick.mtrace");
    mt_sink *s = start(path, 1024, 1); /* ticks back to back */
    slow_tick t = {0};
    mt_sink_set_tick(s, slow_tick_fn, &t);
    while (atomic_load(&t.calls) < 2) usleep(1000);
    while (!atomic_load(&t.running)) usleep(100); /* one is in progress now */
    mt_sink_set_tick(s, NULL, NULL);
    mt_sink_flush(s);
    cr_assert_eq(atomic_load(&t.running), 0, "a tick still runs after set_tick(NULL) + flush");
    int calls = atomic_load(&t.calls);
    usleep(50000); /* dozens of writer cycles */
    cr_assert_eq(atomic_load(&t.calls), calls, "a tick ran after set_tick(NULL) + flush");
    mt_sink_stop(s, NULL);
    unlink(path);
}

Test(record_sink, a_null_sink_is_ignored)
{
    mt_event e = {.op = MT_OP_ALLOC, .bytes = 1};
    mt_stack_node n = {.id = 1};
    mt_record r = {.type = MT_REC_NOTE, .u.note = {.text = "x"}};
    mt_sink_event(NULL, &e);
    mt_sink_node(NULL, &n);
    mt_sink_put_copy(NULL, &r);
}

/* Issue 13: the trace descriptor is a number the program may close and reuse. Once the sink has
 * opened its file, chunks go only to that file: a file the program puts on the same number gets
 * nothing, is not closed by the sink, and the stop says the write failed (EBADF). */
Test(record_sink, a_descriptor_taken_over_by_the_program_gets_no_chunk)
{
    char path[256], theirs[256];
    mt_test_tmpname(path, sizeof path, "sink-fd.mtrace");
    mt_test_tmpname(theirs, sizeof theirs, "program-file.txt");
    mt_sink_config cfg = {.fd = -1, .ring_slots = 1024, .flush_ms = 1, .chunk_bytes = 16 * 1024};
    cfg.header.version = MT_TRACE_VERSION;
    mt_sink *s = mt_sink_start(&cfg);
    cr_assert_not_null(s);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(mt_sink_open(s, fd), 0);
    producer p = {.sink = s, .tid = 1, .events = 200, .node_base = 0};
    produce(&p);
    mt_sink_flush(s);
    /* the program closes "its" descriptor and opens a file of its own: same number */
    int other = open(theirs, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(other >= 0);
    cr_assert_eq(dup2(other, fd), fd);
    close(other);
    p.events = 2000;
    produce(&p);
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    cr_expect_eq(st.write_failed, 1);
    cr_expect_eq(st.write_errno, EBADF);
    size_t n = 0;
    uint8_t *b = mt_test_slurp(theirs, &n);
    cr_expect_eq(n, 0, "the program's file got %zu bytes of trace", n);
    free(b);
    cr_expect_eq(write(fd, "x", 1), 1, "the program's descriptor is still open");
    close(fd);
    unlink(path);
    unlink(theirs);
}

/* Issue 13: a file-size limit (ulimit -f) crossed by a write the sink makes on the program's own
 * thread (the file header when the first context opens the trace; the END record at stop) must not
 * kill the program with SIGXFSZ. In a child: its exit status says whether it survived. */
Test(record_sink, a_file_size_limit_does_not_kill_the_program)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-fsize.mtrace");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        struct rlimit lim = {.rlim_cur = 16, .rlim_max = RLIM_INFINITY}; /* under the header */
        setrlimit(RLIMIT_FSIZE, &lim);
        mt_sink_config cfg = {.fd = -1, .ring_slots = 1024, .flush_ms = 1};
        cfg.header.version = MT_TRACE_VERSION;
        mt_sink *s = mt_sink_start(&cfg);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        int rc = s && fd >= 0 ? mt_sink_open(s, fd) : 0; /* the header: on this thread */
        int e = errno;
        if (s) mt_sink_stop(s, NULL);
        _exit(rc == -1 && e == EFBIG ? 0 : 3);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status), "killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    cr_expect_eq(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0, "the open failed with EFBIG");
    unlink(path);
}

/* Issue 13: the side queue holds at most MT_SINK_SIDE_MAX_BYTES; more is counted and said in a
 * warning note, and what was kept is written. A sink with no file yet is where it fills up. */
Test(record_sink, the_side_queue_is_bounded_and_says_what_it_refused)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-side.mtrace");
    mt_sink_config cfg = {.fd = -1, .ring_slots = 1024, .flush_ms = 1};
    cfg.header.version = MT_TRACE_VERSION;
    mt_sink *s = mt_sink_start(&cfg);
    cr_assert_not_null(s);
    static char text[60000];
    memset(text, 'n', sizeof text - 1);
    mt_record note = {.type = MT_REC_NOTE};
    note.u.note = (mt_note){.time_ns = 5, .level = MT_NOTE_INFO, .text = text};
    int puts = (MT_SINK_SIDE_MAX_BYTES / (int)sizeof text) + 100;
    for (int i = 0; i < puts; i++) mt_sink_put_copy(s, &note);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(mt_sink_open(s, fd), 0);
    mt_sink_stop(s, NULL);
    char err[256];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    int kept = 0, warned = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD)
        if (rec.type == MT_REC_NOTE) {
            if (rec.u.note.level == MT_NOTE_WARNING && strstr(rec.u.note.text, "were not written"))
                warned = 1;
            else
                kept++;
        }
    mt_reader_close(r);
    cr_expect_lt(kept, puts, "some were refused");
    cr_expect_gt(kept, puts - 200, "the queue held about %d MiB", MT_SINK_SIDE_MAX_BYTES >> 20);
    cr_expect(warned, "the refusal is said");
    unlink(path);
}

/* Issue 13: after stop, producers return at once (a thread still inside a CUDA call when the
 * process exits must neither wait for a writer that is gone nor touch freed memory). */
Test(record_sink, a_stopped_sink_kept_in_memory_refuses_producers_at_once)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-kept.mtrace");
    mt_sink *s = start(path, 64, 1000);
    mt_sink_stop_keeping_memory(s, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    producer p = {.sink = s, .tid = 1, .events = 1000, .node_base = 0}; /* 15 times the ring */
    produce(&p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    cr_expect_lt(ms, 100.0, "producers waited %.0f ms for a writer that is gone", ms);
    readback rb;
    read_all(path, &rb);
    cr_expect_eq(rb.ends, 1);
    cr_expect_eq(rb.events, 0);
    unlink(path);
}

/* Issue 13: a program that makes threads one after another (one per request) keeps one ring, not
 * one per thread until the writer frees it: each new thread takes over the last one's ring, and
 * every event arrives. */
Test(record_sink, sequential_threads_take_over_the_ring_of_the_last)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-churn.mtrace");
    mt_sink *s = start(path, 1024, 1000); /* the writer's own drains far apart */
    for (int i = 0; i < 200; i++) {
        producer p = {.sink = s, .tid = 1 + (uint32_t)(i % THREADS), .events = 5, .node_base = i * 10};
        produce_on_a_thread(&p);
    }
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    /* a ring is made only when none is retired: the first thread's, and one after each time the
     * writer happened to free the retired one first */
    cr_expect_leq(200 - st.rings_reused, 10, "rings made for 200 threads: %llu (%llu freed)",
                  (unsigned long long)(200 - st.rings_reused), (unsigned long long)st.rings_freed);
    readback rb;
    read_all(path, &rb);
    cr_expect_eq(rb.events, 200 * 5);
    unlink(path);
}

/* A thread that records in earnest gets its whole ring mapped by the writer (no page fault per ~46
 * events on the recording thread while the ring fills the first time); one that records a few
 * events keeps its few pages. Where the kernel has no MADV_POPULATE_WRITE (before 5.14) nothing
 * is mapped ahead, and nothing else changes. */
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

Test(record_sink, the_ring_of_a_busy_thread_is_mapped_ahead)
{
    long page = sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(probe != MAP_FAILED);
    int kernel_can = madvise(probe, (size_t)page, MADV_POPULATE_WRITE) == 0;
    munmap(probe, (size_t)page);

    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-populate.mtrace");
    mt_sink *s = start(path, 16384, 1000); /* the writer's own drains far apart */
    producer few = {.sink = s, .tid = 1, .events = 100, .node_base = 0};
    produce_on_a_thread(&few);
    mt_sink_flush(s);
    mt_sink_stats st;
    mt_sink_stats_now(s, &st);
    cr_expect_eq(st.rings_populated, 0, "a thread of 100 events keeps its few pages");
    producer busy = {.sink = s, .tid = 2, .events = 600, .node_base = 1000};
    produce_on_a_thread(&busy);
    /* the 512th event woke the writer, which maps the ring after its drain */
    for (int i = 0; i < 200 && kernel_can; i++) {
        mt_sink_flush(s);
        mt_sink_stats_now(s, &st);
        if (st.rings_populated) break;
        usleep(10000);
    }
    cr_expect_eq(st.rings_populated, (uint64_t)kernel_can, "kernel can: %d", kernel_can);
    mt_sink_stop(s, &st);
    readback rb;
    read_all(path, &rb);
    cr_expect_eq(rb.events, 700);
    cr_expect(rb.order_ok);
    unlink(path);
}

/* The writer's own CPU time, which no cost note on the program's threads holds (notes.c says it
 * at exit): a tick that burns 20 ms of CPU shows in the tick's part, the drain of 20 000 events
 * in the rest, and neither more than the wall time since the sink's start. */
static void burn_tick(void *ctx, mt_sink *s)
{
    (void)s;
    atomic_int *once = ctx;
    if (atomic_exchange(once, 1)) return;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 20000000L);
}

Test(record_sink, the_writer_counts_its_own_cpu_time)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "sink-writer-cpu.mtrace");
    mt_sink *s = start(path, 4096, 1000);
    atomic_int once = 0;
    mt_sink_set_tick(s, burn_tick, &once);
    producer p = {.sink = s, .tid = 1, .events = 20000, .node_base = 0};
    produce_on_a_thread(&p);
    mt_sink_flush(s);
    mt_sink_stats st;
    mt_sink_stats_now(s, &st);
    cr_expect_eq(atomic_load(&once), 1, "the tick ran");
    cr_expect_geq(st.writer_cycles, 2, "cycles: %llu", (unsigned long long)st.writer_cycles);
    cr_expect_geq(st.writer_tick_cpu_ns, 20000000ull, "tick: %llu ns",
                  (unsigned long long)st.writer_tick_cpu_ns);
    cr_expect_gt(st.writer_cpu_ns, st.writer_tick_cpu_ns, "the drains count too: %llu ns",
                 (unsigned long long)st.writer_cpu_ns);
    cr_expect_leq(st.writer_cpu_ns, st.writer_wall_ns, "CPU %llu ns, wall %llu ns",
                  (unsigned long long)st.writer_cpu_ns, (unsigned long long)st.writer_wall_ns);
    mt_sink_set_tick(s, NULL, NULL);
    mt_sink_stop(s, &st);
    readback rb;
    read_all(path, &rb);
    cr_expect_eq(rb.events, 20000);
    unlink(path);
}
