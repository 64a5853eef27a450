/* The sink: how records get from the traced program's threads into the trace file.
 *
 *   app thread A --mt_sink_event--> [ring A] --\
 *   app thread B --mt_sink_event--> [ring B] ---+--> writer thread --> mt_writer --> file
 *   any thread --mt_sink_put_copy--> [side queue, mutex] --/
 *
 * Why per-thread single-producer rings: the hot path (a CUDA allocation in someone else's process)
 * must never block on a lock another thread may hold, and must never allocate. Each thread writes
 * only its own ring; the writer thread is the only consumer.
 *
 * Why a full ring makes its thread wait: an event lost is a peak that is wrong from then on (a
 * free that never arrives keeps its bytes "live" forever). So, like heaptrack and memray, the
 * producer waits for room instead of dropping: it wakes the writer and yields until the drain has
 * made room. The wait is bounded (max_wait_ms): a writer stuck on a dead disk must not hang the
 * program; then, and only then, an event is dropped, counted, and the trace says so. To make waits
 * rare, a producer whose ring passes half full wakes the writer early (once per drain), instead of
 * leaving it asleep until its timer. Stack nodes never wait: a full ring sends them the slow way.
 *
 * Why a writer thread that wakes on a timer: the file is written at least every flush_ms, so a
 * process killed by SIGKILL or the OOM killer loses at most that much; each wake-up ends with a
 * whole chunk on disk (mt_writer_flush), which is what makes a cut file readable.
 *
 * Ordering: events from all threads are written in time order. A drain sorts what it collected by
 * timestamp; an event stamped before the drain but committed just after it would land behind later
 * ones, so the drain holds back what was stamped in its last HOLDBACK_NS, and anything after the
 * oldest stamp a thread announced with mt_sink_hold (a free, stamped when the call starts and
 * committed when it returns), for the next drain to merge. PyTorch's allocator reports tensors in
 * the order of its lock; written in that order, the running sum of live bytes is exactly its own.
 * What slips through anyway (a thread preempted for over HOLDBACK_NS between stamping and
 * committing) is counted as "late". CUPTI activity records (driver-internal allocations) arrive in
 * buffers up to a flush period late by nature: they are written when they come.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "memtrace/record.h"
#include "hot_path.h"
#include "rare_work.h"

enum { SLOT_EVENT = 1, SLOT_NODE = 2 };

#define DEFAULT_RING_SLOTS 16384
#define DEFAULT_FLUSH_MS 200
#define HOLDBACK_NS 1000000ull  /* 1 ms: far longer than stamping-to-committing takes */
#define HOLD_MAX 65536          /* held-back events at most; older ones are then written */
#define WAIT_SPINS 64           /* a waiting producer yields this often, then sleeps */
#define WAIT_SLEEP_NS 50000     /* ... 50 us at a time */
/* A ring is 1.4 MiB of pages the kernel maps on first touch: until it had wrapped once, one event
 * in ~46 took a page fault on the recording thread (p99 of an event 2.8-3.9 us instead of 0.2 us
 * on this kind of machine). Once a thread has recorded POPULATE_AFTER events, the writer maps the
 * rest of its ring (MADV_POPULATE_WRITE, Linux 5.14+: the pages, not their contents, so it is safe
 * beside the producer); threads that record a few events keep their few pages. */
#define POPULATE_AFTER 512
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct mt_slot {
    uint8_t type;
    union {
        mt_event ev;
        mt_stack_node node;
    } u;
} mt_slot;

/* One per thread that ever emitted. Producer owns head, consumer owns tail. */
typedef struct mt_ring {
    _Atomic uint64_t head;    /* next slot the producer writes */
    _Atomic uint64_t tail;    /* next slot the consumer reads */
    _Atomic uint64_t dropped; /* events lost to a full ring, not yet reported */
    _Atomic uint64_t pending; /* mt_sink_hold's stamp: an event that old is still to come; 0 none */
    _Atomic uint64_t waits, wait_ns, max_wait_ns; /* producer only; read by the writer */
    uint64_t tail_cache;      /* producer's last view of tail (avoids a shared read per event) */
    uint64_t drain_head;      /* consumer only: head as seen by the drain in progress */
    _Atomic int retired;      /* its thread exited: freed once drained */
    int populated;            /* writer only: its pages were mapped (POPULATE_AFTER) */
    uint32_t mask;
    struct mt_ring *next; /* registry list, appended under the sink's mutex */
    mt_slot slots[];
} mt_ring;

/* A deep-copied rare record on the side queue: the record and its strings in one allocation. */
typedef struct mt_side {
    struct mt_side *next;
    mt_record rec;
    char strings[];
} mt_side;

/* An event a drain collected: where it is (a ring slot or the held-back copies), and its sort key. */
typedef struct pick {
    uint64_t time;
    uint64_t order; /* collection order: ties keep each thread's own order */
    const mt_event *ev;
} pick;

struct mt_sink {
    mt_writer *writer; /* NULL until the file is opened (mt_sink_open) */
    int fd;
    mt_file_header header;
    uint32_t ring_slots, flush_ms, chunk_bytes;
    uint64_t max_wait_ns;
    uint64_t generation; /* tells a thread's cached ring pointer from a previous sink's */
    _Atomic int urgent;  /* a producer asked for a drain now (its ring is half full) */
    _Atomic int open;    /* the writer exists */
    _Atomic int closed;  /* stopped: producers return at once (a late one must not wait) */
    int prefetchw;       /* the processor has PREFETCHW (mt_sink_prefetch) */

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake, flushed;
    mt_ring *rings;
    mt_side *side_head, **side_tail;
    size_t side_bytes;      /* held on the side queue now (at most MT_SINK_SIDE_MAX_BYTES) */
    uint64_t side_dropped;  /* records refused because it was full */
    uint64_t flush_requested, flush_done;
    int stopping;

    mt_sink_tick_fn tick;
    void *tick_ctx;

    pthread_t thread;
    pthread_key_t thread_exit; /* its destructor retires the exiting thread's ring */
    int has_key;
    mt_sink_stats stats; /* written by the writer thread only */
    /* drain state, writer thread only */
    pick *batch;
    size_t batch_cap;
    mt_event *held, *held_next; /* events held back by the last drain / being held by this one */
    size_t n_held, n_held_next;
    uint64_t last_written; /* time of the last event written, to count late ones */
    uint64_t last_tick_ns;
    uint64_t started_ns; /* mt_sink_start's time: the writer's wall time counts from it */
};

/* Writes made on a thread of the program (the file header at open, the END record at stop) must
 * not get it killed by SIGXFSZ when they cross a file-size limit (ulimit -f): the signal is blocked
 * around them, and one they raised is taken back before the program's mask returns; the write
 * itself fails with EFBIG and the trace says it ended early. (The writer thread blocks every
 * signal from its start.) */
typedef struct xfsz_guard {
    sigset_t old;
    int was_pending;
} xfsz_guard;

static void xfsz_block(xfsz_guard *g)
{
    sigset_t x, pending;
    sigemptyset(&x);
    sigaddset(&x, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &x, &g->old);
    g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ);
}

static void xfsz_restore(xfsz_guard *g)
{
    int saved = errno; /* the write's, for the caller */
    sigset_t x, pending;
    sigemptyset(&x);
    sigaddset(&x, SIGXFSZ);
    if (!g->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ)) {
        struct timespec now = {0, 0};
        sigtimedwait(&x, NULL, &now); /* ours: taken back */
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
    errno = saved;
}

/* The calling thread's ring for the sink of the given generation. A thread that outlives a sink
 * (tests start several) finds a stale generation and registers a new ring. When a thread exits,
 * the key's destructor retires its ring (the writer frees it once drained), so a program that
 * makes many short-lived threads does not accumulate rings; a destructor that runs CUDA after ours
 * simply gets a fresh ring (the generation is cleared). */
static __thread struct {
    uint64_t generation;
    mt_ring *ring;
    const mt_slot *next; /* the slot the next commit fills, for mt_sink_prefetch */
} tls_ring;

static _Atomic uint64_t next_generation = 1;

static void retire_ring(void *ring)
{
    tls_ring.generation = 0;
    atomic_store_explicit(&((mt_ring *)ring)->retired, 1, memory_order_release);
}

static mt_ring *ring_for_this_thread(mt_sink *s)
{
    if (tls_ring.generation == s->generation) return tls_ring.ring;
    uint64_t rare = mt_rare_begin(); /* a thread's first event: rare work (rare_work.h) */
    /* An exited thread's ring first, drained or not: its events all come before ours, and a
     * program that makes threads by the thousand (one per request) then keeps as many rings as it
     * has threads at once, not one per thread the writer has not freed yet (1.4 MiB each). */
    pthread_mutex_lock(&s->lock);
    mt_ring *r = s->rings;
    while (r && !atomic_load_explicit(&r->retired, memory_order_acquire)) r = r->next;
    if (r) {
        atomic_store_explicit(&r->retired, 0, memory_order_relaxed); /* ours now: never freed */
        s->stats.rings_reused++;
    }
    pthread_mutex_unlock(&s->lock);
    if (!r && (r = calloc(1, sizeof *r + (size_t)s->ring_slots * sizeof(mt_slot)))) {
        r->mask = s->ring_slots - 1;
        pthread_mutex_lock(&s->lock);
        r->next = s->rings;
        s->rings = r;
        pthread_mutex_unlock(&s->lock);
    }
    if (r) {
        if (s->has_key) pthread_setspecific(s->thread_exit, r);
        tls_ring.generation = s->generation;
        tls_ring.ring = r;
        tls_ring.next = &r->slots[atomic_load_explicit(&r->head, memory_order_relaxed) & r->mask];
    }
    mt_rare_end(rare, MT_RARE_THREAD);
    return r;
}

/* Frees the rings of exited threads that the drain emptied, after adding up their waits. Writer
 * thread only. */
static void free_retired(mt_sink *s)
{
    pthread_mutex_lock(&s->lock);
    for (mt_ring **pp = &s->rings; *pp;) {
        mt_ring *r = *pp;
        /* acquire: the exited thread's last commits are visible once retired is */
        if (atomic_load_explicit(&r->retired, memory_order_acquire) &&
            atomic_load_explicit(&r->head, memory_order_acquire) == r->drain_head &&
            atomic_load_explicit(&r->dropped, memory_order_relaxed) == 0) {
            *pp = r->next;
            s->stats.waits += atomic_load_explicit(&r->waits, memory_order_relaxed);
            s->stats.wait_ns += atomic_load_explicit(&r->wait_ns, memory_order_relaxed);
            uint64_t m = atomic_load_explicit(&r->max_wait_ns, memory_order_relaxed);
            if (m > s->stats.max_wait_ns) s->stats.max_wait_ns = m;
            free(r);
            s->stats.rings_freed++;
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

/* Asks the writer for a drain now; one request per drain, so a busy producer costs one lock. */
static void wake_writer(mt_sink *s)
{
    /* read first: while one request is pending, other producers must not bounce its line */
    if (atomic_load_explicit(&s->urgent, memory_order_relaxed) ||
        atomic_exchange_explicit(&s->urgent, 1, memory_order_acq_rel))
        return;
    pthread_mutex_lock(&s->lock);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

/* Claims a slot, or NULL when the ring is full. Past half full it looks at the real tail (the
 * cached one may be a drain old) and, if the ring really is that full, wakes the writer. */
MT_HOT_PATH static mt_slot *ring_claim(mt_sink *s, mt_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (head - r->tail_cache > r->mask / 2) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head - r->tail_cache > r->mask / 2) wake_writer(s);
        if (head - r->tail_cache > r->mask) return NULL;
    }
    return &r->slots[head & r->mask];
}

/* The ring is full: wait (bounded) for the writer to make room. NULL when it did not in time. */
static mt_slot *ring_claim_waiting(mt_sink *s, mt_ring *r)
{
    uint64_t rare = mt_rare_begin(); /* the program waits for us: rare work (rare_work.h) */
    uint64_t t0 = mt_clock_monotonic(), now = t0;
    mt_slot *slot = NULL;
    for (int spin = 0; !slot; spin++) {
        wake_writer(s);
        if (spin < WAIT_SPINS) {
            sched_yield();
        } else {
            struct timespec ts = {0, WAIT_SLEEP_NS};
            nanosleep(&ts, NULL);
        }
        slot = ring_claim(s, r);
        now = mt_clock_monotonic();
        if (now - t0 > s->max_wait_ns || atomic_load_explicit(&s->closed, memory_order_acquire))
            break; /* no writer will come: a straggler at exit */
    }
    if (!slot) slot = ring_claim(s, r);
    uint64_t waited = now - t0;
    atomic_store_explicit(&r->waits, atomic_load_explicit(&r->waits, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&r->wait_ns,
                          atomic_load_explicit(&r->wait_ns, memory_order_relaxed) + waited,
                          memory_order_relaxed);
    if (waited > atomic_load_explicit(&r->max_wait_ns, memory_order_relaxed))
        atomic_store_explicit(&r->max_wait_ns, waited, memory_order_relaxed);
    mt_rare_end(rare, MT_RARE_WAIT);
    return slot;
}

/* Returns the slot count before this one (the producer's running count). The producer is head's
 * only writer, so a load and a release store do what a locked add would, without its full
 * barrier on the program's thread. */
static uint64_t ring_commit(mt_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    atomic_store_explicit(&r->head, head + 1, memory_order_release);
    tls_ring.next = &r->slots[(head + 1) & r->mask]; /* r is this thread's ring */
    return head;
}

/* A write-intent prefetch (PREFETCHW) where the processor has one (s->prefetchw): the line comes
 * exclusive, so the store that follows needs no second request. Elsewhere a plain prefetch. */
static inline void prefetch_for_write(const mt_sink *s, const void *p)
{
#if defined(__x86_64__)
    if (s->prefetchw) {
        __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
        return;
    }
#endif
    __builtin_prefetch(p, 1, 3);
}

static int detect_prefetchw(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
    if (a < 0x80000001u) return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000001u), "c"(0));
    return (c >> 8) & 1; /* CPUID.80000001H:ECX.PRFCHW */
#else
    return 0;
#endif
}

/* The slot the writer emptied a whole ring ago sits in the writer's core's cache (it read it
 * there), so a store to it waits for that core to let go of the line: with the lines asked for at
 * the start of a report, that wait overlaps the report's own work. The slot's address comes from
 * this thread's own variables, not from the ring's head (a line the program has usually evicted
 * since the last event: a miss the prefetch would wait for), and the ring's first line, which
 * ring_claim reads, is asked for at the same time. */
MT_HOT_PATH void mt_sink_prefetch(mt_sink *s)
{
    if (!s || tls_ring.generation != s->generation) return;
    const mt_slot *slot = tls_ring.next;
    prefetch_for_write(s, slot);
    prefetch_for_write(s, (const char *)(slot + 1) - 1);
    __builtin_prefetch(tls_ring.ring, 1, 3);
}

/* Writer thread: maps the pages of a ring whose thread records in earnest (POPULATE_AFTER). */
static void populate_rings(mt_sink *s, mt_ring *rings)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uint64_t done = 0;
    for (mt_ring *r = rings; r; r = r->next) {
        if (r->populated || atomic_load_explicit(&r->head, memory_order_relaxed) < POPULATE_AFTER)
            continue;
        r->populated = 1; /* tried once: an older kernel says EINVAL, and faults as before */
        uintptr_t lo = ((uintptr_t)r->slots + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
        uintptr_t hi = ((uintptr_t)&r->slots[r->mask + 1]) & ~((uintptr_t)page - 1);
        if (hi > lo && madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0) done++;
    }
    if (!done) return;
    pthread_mutex_lock(&s->lock); /* mt_sink_stats_now reads under it */
    s->stats.rings_populated += done;
    pthread_mutex_unlock(&s->lock);
}

MT_HOT_PATH void mt_sink_event(mt_sink *s, const mt_event *ev)
{
    /* the recorder is shutting down (or never started): nothing to record into */
    if (!s || atomic_load_explicit(&s->closed, memory_order_acquire)) return;
    mt_ring *r = ring_for_this_thread(s);
    if (!r) return; /* out of memory: nothing sensible to count into */
    mt_slot *slot = ring_claim(s, r);
    if (!slot) {
        /* While this thread waits, drains hold back what others stamp after this event. */
        if (!atomic_load_explicit(&r->pending, memory_order_relaxed))
            atomic_store_explicit(&r->pending, ev->time_ns, memory_order_release);
        slot = ring_claim_waiting(s, r);
    }
    if (!slot) {
        atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
    } else {
        slot->type = SLOT_EVENT;
        slot->u.ev = *ev;
        if (ring_commit(r) == POPULATE_AFTER - 1) wake_writer(s); /* once: populate_rings */
    }
    /* release: the writer that sees no pending stamp also sees the event (it reads pending first) */
    if (atomic_load_explicit(&r->pending, memory_order_relaxed))
        atomic_store_explicit(&r->pending, 0, memory_order_release);
}

void mt_sink_hold(mt_sink *s, uint64_t time_ns)
{
    if (!s || atomic_load_explicit(&s->closed, memory_order_acquire)) return;
    if (!time_ns && tls_ring.generation != s->generation) return; /* nothing held here */
    mt_ring *r = ring_for_this_thread(s);
    if (r) atomic_store_explicit(&r->pending, time_ns, memory_order_release);
}

void mt_sink_node(mt_sink *s, const mt_stack_node *node)
{
    if (!s || atomic_load_explicit(&s->closed, memory_order_acquire)) return;
    mt_ring *r = ring_for_this_thread(s);
    mt_slot *slot = r ? ring_claim(s, r) : NULL;
    if (!slot) {
        mt_record rec = {.type = MT_REC_STACK_NODE, .u.node = *node};
        mt_sink_put_copy(s, &rec);
        return;
    }
    slot->type = SLOT_NODE;
    slot->u.node = *node;
    ring_commit(r);
}

/* ---- side queue --------------------------------------------------------------------------- */

/* The string fields of a record, so copying and sizing share one list. */
static int record_strings(mt_record *r, const char ***out)
{
    switch (r->type) {
    case MT_REC_PROCESS:
        out[0] = &r->u.process.comm;
        out[1] = &r->u.process.cmdline;
        out[2] = &r->u.process.hostname;
        return 3;
    case MT_REC_MODULE: out[0] = &r->u.module.path; return 1;
    case MT_REC_THREAD: out[0] = &r->u.thread.name; return 1;
    case MT_REC_NOTE: out[0] = &r->u.note.text; return 1;
    case MT_REC_DEVICE:
        out[0] = &r->u.device.name;
        out[1] = &r->u.device.uuid;
        return 2;
    case MT_REC_SYMBOL:
        out[0] = &r->u.symbol.function;
        out[1] = &r->u.symbol.file;
        return 2;
    case MT_REC_PYCODE:
        out[0] = &r->u.pycode.filename;
        out[1] = &r->u.pycode.qualname;
        return 2;
    default: return 0;
    }
}

void mt_sink_put_copy(mt_sink *s, const mt_record *r)
{
    if (!s || atomic_load_explicit(&s->closed, memory_order_acquire)) return;
    mt_record tmp = *r;
    const char **fields[4];
    int nf = record_strings(&tmp, fields);
    size_t len = 0;
    for (int i = 0; i < nf; i++) len += (*fields[i] ? strlen(*fields[i]) : 0) + 1;
    size_t blen = (tmp.type == MT_REC_MODULE) ? tmp.u.module.build_id_len : 0;
    mt_side *e = malloc(sizeof *e + len + blen);
    if (!e) return;
    e->next = NULL;
    e->rec = tmp;
    char *p = e->strings;
    for (int i = 0; i < nf; i++) {
        const char *src = *fields[i] ? *fields[i] : "";
        size_t n = strlen(src) + 1;
        memcpy(p, src, n);
        /* point the copy's field at its own storage */
        const char **dst = (const char **)((char *)&e->rec + ((char *)fields[i] - (char *)&tmp));
        *dst = p;
        p += n;
    }
    if (blen) {
        memcpy(p, tmp.u.module.build_id, blen);
        e->rec.u.module.build_id = (const uint8_t *)p;
    }
    size_t bytes = sizeof *e + len + blen;
    pthread_mutex_lock(&s->lock);
    if (s->side_bytes + bytes > MT_SINK_SIDE_MAX_BYTES) { /* the writer is far behind, or there
                                                             is no file yet: counted, said at stop */
        s->side_dropped++;
        pthread_mutex_unlock(&s->lock);
        free(e);
        return;
    }
    s->side_bytes += bytes;
    *s->side_tail = e;
    s->side_tail = &e->next;
    pthread_mutex_unlock(&s->lock);
}

/* ---- writer thread -------------------------------------------------------------------------- */

static void put(mt_sink *s, const mt_record *r)
{
    if (mt_writer_put(s->writer, r) != 0 && !s->stats.write_failed) {
        s->stats.write_failed = 1;
        s->stats.write_errno = errno;
    }
    s->stats.records++;
    if (r->type == MT_REC_EVENT) s->stats.events++;
}

static int by_time(const void *a, const void *b)
{
    const pick *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    return x->order < y->order ? -1 : (x->order > y->order);
}

static int reserve_batch(mt_sink *s, size_t n)
{
    if (n <= s->batch_cap) return 0;
    size_t cap = n * 2;
    pick *nb = realloc(s->batch, cap * sizeof *nb);
    if (!nb) return -1;
    s->batch = nb;
    s->batch_cap = cap;
    return 0;
}

static void write_event(mt_sink *s, const mt_event *ev)
{
    /* CUPTI's activity records come in buffers, up to a flush period after the fact: only the
     * recorder's own events are expected in order */
    if (!(ev->flags & MT_EF_ACTIVITY)) {
        if (ev->time_ns < s->last_written) s->stats.late++;
        else s->last_written = ev->time_ns;
    }
    mt_record rec = {.type = MT_REC_EVENT, .u.event = *ev};
    put(s, &rec);
}

/* Writes everything that is queued now: side records, then stack nodes, then events by time,
 * except (all = 0) the events that a later drain may still have to put before (see the top). */
static void drain(mt_sink *s, int all)
{
    uint64_t cut = all ? UINT64_MAX : mt_clock_now() - HOLDBACK_NS; /* the events' clock */
    pthread_mutex_lock(&s->lock);
    mt_side *side = s->side_head;
    s->side_head = NULL;
    s->side_tail = &s->side_head;
    s->side_bytes = 0;
    mt_ring *rings = s->rings;
    pthread_mutex_unlock(&s->lock);

    for (mt_side *e = side, *next; e; e = next) {
        next = e->next;
        put(s, &e->rec);
        free(e);
    }

    /* What the last drain held back comes first; then each ring's new slots. Slots stay owned by
     * the consumer until tail moves, so pointers into the rings are stable during this drain. */
    size_t n = 0;
    uint64_t dropped = 0, order = 0;
    for (size_t i = 0; i < s->n_held; i++, n++) /* batch_cap >= HOLD_MAX, from the start */
        s->batch[n] = (pick){s->held[i].time_ns, order++, &s->held[i]};
    for (mt_ring *r = rings; r; r = r->next) {
        /* pending before head: a stamp withdrawn after its commit is seen with the commit */
        uint64_t pending = atomic_load_explicit(&r->pending, memory_order_acquire);
        if (!all && pending && pending < cut) cut = pending;
        uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        dropped += atomic_exchange_explicit(&r->dropped, 0, memory_order_relaxed);
        if (reserve_batch(s, n + (head - tail)) != 0) head = tail; /* OOM: the next drain */
        r->drain_head = head;
        for (uint64_t i = tail; i < head; i++) {
            mt_slot *slot = &r->slots[i & r->mask];
            if (slot->type == SLOT_NODE) {
                mt_record rec = {.type = MT_REC_STACK_NODE, .u.node = slot->u.node};
                put(s, &rec);
            } else {
                s->batch[n++] = (pick){slot->u.ev.time_ns, order++, &slot->u.ev};
            }
        }
    }
    if (n) qsort(s->batch, n, sizeof *s->batch, by_time);
    /* Hold back from the cut on (at most HOLD_MAX: the oldest of the rest go out now). */
    size_t keep_from = n;
    while (keep_from > 0 && s->batch[keep_from - 1].time >= cut) keep_from--;
    if (n - keep_from > HOLD_MAX) keep_from = n - HOLD_MAX;
    for (size_t i = 0; i < keep_from; i++) write_event(s, s->batch[i].ev);
    s->n_held_next = 0;
    for (size_t i = keep_from; i < n; i++) s->held_next[s->n_held_next++] = *s->batch[i].ev;
    mt_event *t = s->held;
    s->held = s->held_next;
    s->held_next = t;
    s->n_held = s->n_held_next;
    /* Only now give the slots back to the producers. */
    for (mt_ring *r = rings; r; r = r->next)
        atomic_store_explicit(&r->tail, r->drain_head, memory_order_release);
    populate_rings(s, rings);
    if (dropped) {
        mt_record rec = {.type = MT_REC_DROPPED, .u.dropped = dropped};
        put(s, &rec);
        s->stats.dropped += dropped;
    }
    if (mt_writer_flush(s->writer) != 0 && !s->stats.write_failed) {
        s->stats.write_failed = 1;
        s->stats.write_errno = errno;
    }
    free_retired(s);
}

/* The calling thread's CPU time. A system call, not the vDSO: a few per writer cycle, which
 * wakes five times a second when the program is quiet and at most once per half ring when not. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *writer_main(void *arg)
{
    mt_sink *s = arg;
    uint64_t tick_cpu_ns = 0;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        int stopping = s->stopping;
        uint64_t want = s->flush_requested;
        if (!stopping && want == s->flush_done && !atomic_load(&s->urgent)) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)(s->flush_ms % 1000) * 1000000L;
            until.tv_sec += s->flush_ms / 1000 + until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&s->wake, &s->lock, &until);
            stopping = s->stopping;
            want = s->flush_requested;
        }
        /* Read under the lock, after `want`: once mt_sink_set_tick(NULL) has returned, the
         * cycle that serves any later flush request runs no tick (see record.h). */
        mt_sink_tick_fn tick = s->tick;
        void *tick_ctx = s->tick_ctx;
        int asked = want != s->flush_done || stopping;
        pthread_mutex_unlock(&s->lock);
        atomic_store(&s->urgent, 0);
        /* The tick (pool polls, module refresh) runs on the timer and on explicit flushes, not
         * when a full ring asked: a thread may be waiting, maybe holding a lock the tick needs. */
        uint64_t now = mt_clock_monotonic();
        if (tick && (asked || now - s->last_tick_ns >= (uint64_t)s->flush_ms * 1000000ull)) {
            uint64_t t0 = thread_cpu_ns();
            tick(tick_ctx, s);
            tick_cpu_ns += thread_cpu_ns() - t0;
            s->last_tick_ns = now;
        }
        if (atomic_load(&s->open)) drain(s, asked);
        uint64_t cpu_ns = thread_cpu_ns(), wall_ns = mt_clock_monotonic() - s->started_ns;
        pthread_mutex_lock(&s->lock);
        /* under the lock, so that mt_sink_stats_now reads one cycle's figures together */
        s->stats.writer_cycles++;
        s->stats.writer_cpu_ns = cpu_ns;
        s->stats.writer_tick_cpu_ns = tick_cpu_ns;
        s->stats.writer_wall_ns = wall_ns;
        s->flush_done = want;
        pthread_cond_broadcast(&s->flushed);
        if (stopping) break;
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static uint32_t round_pow2(uint32_t v)
{
    uint32_t p = 64;
    while (p < v && p < (1u << 24)) p <<= 1;
    return p;
}

mt_sink *mt_sink_start(const mt_sink_config *cfg)
{
    mt_sink *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->fd = cfg->fd;
    s->header = cfg->header;
    s->chunk_bytes = cfg->chunk_bytes;
    s->ring_slots = round_pow2(cfg->ring_slots ? cfg->ring_slots : DEFAULT_RING_SLOTS);
    s->flush_ms = cfg->flush_ms ? cfg->flush_ms : DEFAULT_FLUSH_MS;
    s->max_wait_ns = (uint64_t)(cfg->max_wait_ms ? cfg->max_wait_ms : MT_SINK_MAX_WAIT_MS) * 1000000ull;
    s->generation = atomic_fetch_add(&next_generation, 1);
    s->started_ns = mt_clock_monotonic();
    s->prefetchw = detect_prefetchw();
    s->side_tail = &s->side_head;
    s->held = malloc(HOLD_MAX * sizeof *s->held);
    s->held_next = malloc(HOLD_MAX * sizeof *s->held_next);
    /* room for what is held back, so that it can always be put in front of the next batch */
    if (!s->held || !s->held_next || reserve_batch(s, HOLD_MAX) != 0) goto fail;
    if (cfg->fd >= 0) {
        s->writer = mt_writer_open_fd(cfg->fd, &cfg->header, cfg->chunk_bytes);
        if (!s->writer) goto fail;
        atomic_store(&s->open, 1);
    }
    pthread_mutex_init(&s->lock, NULL);
    s->has_key = pthread_key_create(&s->thread_exit, retire_ring) == 0;
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->flushed, NULL);
    /* The writer thread must not receive the program's signals (its handlers expect its own
     * threads), so block them all while it is created; it inherits the mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, writer_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        if (s->writer) mt_writer_close(s->writer, 0);
        goto fail;
    }
    pthread_setname_np(s->thread, "memtrace-writer");
    return s;
fail:
    free(s->batch);
    free(s->held);
    free(s->held_next);
    free(s);
    return NULL;
}

int mt_sink_open(mt_sink *s, int fd)
{
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    if (!atomic_load(&s->open)) {
        /* The writer thread touches s->writer only once `open` says so (after this store). */
        xfsz_guard g;
        xfsz_block(&g);
        s->writer = mt_writer_open_fd(fd, &s->header, s->chunk_bytes);
        xfsz_restore(&g);
        if (s->writer) {
            s->fd = fd;
            mt_writer_guard_fd(s->writer); /* the program may close our fd: write only to it */
            atomic_store(&s->open, 1);
        } else {
            rc = -1;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

MT_HOT_PATH int mt_sink_is_open(const mt_sink *s) { return s && atomic_load(&s->open); }

void mt_sink_stats_now(mt_sink *s, mt_sink_stats *st)
{
    pthread_mutex_lock(&s->lock);
    *st = s->stats; /* the writer's counters: exact right after a mt_sink_flush */
    for (mt_ring *r = s->rings; r; r = r->next) {
        st->waits += atomic_load_explicit(&r->waits, memory_order_relaxed);
        st->wait_ns += atomic_load_explicit(&r->wait_ns, memory_order_relaxed);
        uint64_t m = atomic_load_explicit(&r->max_wait_ns, memory_order_relaxed);
        if (m > st->max_wait_ns) st->max_wait_ns = m;
    }
    pthread_mutex_unlock(&s->lock);
}

void mt_sink_set_tick(mt_sink *s, mt_sink_tick_fn fn, void *ctx)
{
    pthread_mutex_lock(&s->lock);
    s->tick = fn;
    s->tick_ctx = ctx;
    if (fn) pthread_cond_signal(&s->wake); /* its first run now, not a flush interval later */
    pthread_mutex_unlock(&s->lock);
}

void mt_sink_flush(mt_sink *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t ticket = ++s->flush_requested;
    pthread_cond_signal(&s->wake);
    while (s->flush_done < ticket && !s->stopping) pthread_cond_wait(&s->flushed, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void stop(mt_sink *s, mt_sink_stats *stats, int keep_memory);

void mt_sink_stop(mt_sink *s, mt_sink_stats *stats) { stop(s, stats, 0); }
void mt_sink_stop_keeping_memory(mt_sink *s, mt_sink_stats *stats) { stop(s, stats, 1); }

static void stop(mt_sink *s, mt_sink_stats *stats, int keep_memory)
{
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    s->flush_requested++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    if (s->has_key) pthread_key_delete(s->thread_exit); /* no destructor may touch freed rings */

    for (mt_ring *r = s->rings; r; r = r->next) {
        s->stats.dropped += atomic_exchange(&r->dropped, 0); /* a sink that never drained */
        s->stats.waits += atomic_load(&r->waits);
        s->stats.wait_ns += atomic_load(&r->wait_ns);
        if (atomic_load(&r->max_wait_ns) > s->stats.max_wait_ns)
            s->stats.max_wait_ns = atomic_load(&r->max_wait_ns);
    }
    if (atomic_load(&s->open)) {
        xfsz_guard g;
        xfsz_block(&g);
        if (s->side_dropped) {
            char text[200];
            snprintf(text, sizeof text, "%llu records (names, modules, notes) were not written: "
                     "more than %d MiB of them waited for the writer at once",
                     (unsigned long long)s->side_dropped, MT_SINK_SIDE_MAX_BYTES >> 20);
            mt_record note = {.type = MT_REC_NOTE};
            note.u.note.level = MT_NOTE_WARNING;
            note.u.note.text = text;
            put(s, &note);
        }
        mt_record end = {.type = MT_REC_END};
        end.u.end.time_ns = mt_clock_now();
        end.u.end.events = s->stats.events;
        end.u.end.dropped = s->stats.dropped;
        put(s, &end);
        if (mt_writer_flush(s->writer) != 0 && !s->stats.write_failed) {
            s->stats.write_failed = 1;
            s->stats.write_errno = errno;
        }
        s->stats.bytes = mt_writer_bytes_written(s->writer);
        if (mt_writer_close(s->writer, 1) != 0 && !s->stats.write_failed) {
            s->stats.write_failed = 1;
            s->stats.write_errno = errno;
        }
        xfsz_restore(&g);
        s->stats.opened = 1;
    } else {
        for (mt_side *e = s->side_head, *next; e; e = next) {
            next = e->next;
            free(e);
        }
    }
    if (stats) *stats = s->stats;
    atomic_store_explicit(&s->closed, 1, memory_order_release);
    /* A thread that got past `closed` before it was set may still be writing into its ring or
     * the side queue: the caller says whether one can be (see inject.c at_exit). */
    if (keep_memory) return;

    for (mt_ring *r = s->rings, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    free(s->batch);
    free(s->held);
    free(s->held_next);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->flushed);
    free(s);
}

void mt_sink_abandon_in_child(mt_sink *s)
{
    /* The child has no writer thread, and the mutex may have been held by another thread at
     * fork time: touching either could hang. Leak the memory (it is copy-on-write anyway) and
     * close the child's copy of the file descriptor so the child never writes to the parent's
     * trace. */
    if (s && s->fd >= 0) close(s->fd);
}
