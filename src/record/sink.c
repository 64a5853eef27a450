/* The sink: how records get from the traced program's threads into the trace file.
 *
 *   app thread A --mt_sink_event--> [ring A] --\
 *   app thread B --mt_sink_event--> [ring B] ---+--> writer thread --> mt_writer --> file
 *   any thread --mt_sink_put_copy--> [side queue, mutex] --/
 *
 * Why per-thread single-producer rings: the hot path (a CUDA allocation in someone else's process)
 * must never block on a lock another thread may hold, and must never allocate. Each thread writes
 * only its own ring; the writer thread is the only consumer. A full ring drops the event and counts
 * it: memory stays bounded (ring_slots * sizeof(slot) per thread that ever allocated) and the trace
 * says how much is missing (MT_REC_DROPPED). Stack nodes are never dropped: a lost node would leave
 * every event that names it without a stack, so a full ring sends them the slow way.
 *
 * Why a writer thread that wakes on a timer: the file is written at least every flush_ms, so a
 * process killed by SIGKILL or the OOM killer loses at most that much; each wake-up ends with a
 * whole chunk on disk (mt_writer_flush), which is what makes a cut file readable.
 *
 * Ordering: events from different threads are merged by timestamp within each drain. An event
 * stamped just before a drain but committed just after it lands in the next drain, slightly out of
 * order; the compactor tolerates that (it is documented in docs/trace-format.md).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/record.h"

enum { SLOT_EVENT = 1, SLOT_NODE = 2 };

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
    uint64_t tail_cache;      /* producer's last view of tail (avoids a shared read per event) */
    uint64_t drain_head;      /* consumer only: head as seen by the drain in progress */
    _Atomic int retired;      /* its thread exited: freed once drained */
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

struct mt_sink {
    mt_writer *writer;
    int fd;
    uint32_t ring_slots, flush_ms;
    uint64_t generation; /* tells a thread's cached ring pointer from a previous sink's */

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake, flushed;
    mt_ring *rings;
    mt_side *side_head, **side_tail;
    uint64_t flush_requested, flush_done;
    int stopping;

    mt_sink_tick_fn tick;
    void *tick_ctx;

    pthread_t thread;
    pthread_key_t thread_exit; /* its destructor retires the exiting thread's ring */
    int has_key;
    mt_sink_stats stats; /* written by the writer thread only */
    /* drain scratch space, writer thread only */
    mt_slot **batch;
    size_t batch_cap;
};

/* The calling thread's ring for the sink of the given generation. A thread that outlives a sink
 * (tests start several) finds a stale generation and registers a new ring. When a thread exits,
 * the key's destructor retires its ring (the writer frees it once drained), so a program that
 * makes many short-lived threads does not accumulate rings; a destructor that runs CUDA after ours
 * simply gets a fresh ring (the generation is cleared). */
static __thread struct {
    uint64_t generation;
    mt_ring *ring;
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
    mt_ring *r = calloc(1, sizeof *r + (size_t)s->ring_slots * sizeof(mt_slot));
    if (!r) return NULL;
    r->mask = s->ring_slots - 1;
    pthread_mutex_lock(&s->lock);
    r->next = s->rings;
    s->rings = r;
    pthread_mutex_unlock(&s->lock);
    if (s->has_key) pthread_setspecific(s->thread_exit, r);
    tls_ring.generation = s->generation;
    tls_ring.ring = r;
    return r;
}

/* Frees the rings of exited threads that the drain emptied. Writer thread only. */
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
            free(r);
            s->stats.rings_freed++;
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

/* Claims a slot, or NULL when the ring is full. */
static mt_slot *ring_claim(mt_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (head - r->tail_cache > r->mask) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head - r->tail_cache > r->mask) return NULL;
    }
    return &r->slots[head & r->mask];
}

static void ring_commit(mt_ring *r)
{
    atomic_fetch_add_explicit(&r->head, 1, memory_order_release);
}

void mt_sink_event(mt_sink *s, const mt_event *ev)
{
    if (!s) return; /* the recorder is shutting down (or never started): nothing to record into */
    mt_ring *r = ring_for_this_thread(s);
    if (!r) return; /* out of memory: nothing sensible to count into */
    mt_slot *slot = ring_claim(r);
    if (!slot) {
        atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
        return;
    }
    slot->type = SLOT_EVENT;
    slot->u.ev = *ev;
    ring_commit(r);
}

void mt_sink_node(mt_sink *s, const mt_stack_node *node)
{
    if (!s) return;
    mt_ring *r = ring_for_this_thread(s);
    mt_slot *slot = r ? ring_claim(r) : NULL;
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
    if (!s) return;
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
    pthread_mutex_lock(&s->lock);
    *s->side_tail = e;
    s->side_tail = &e->next;
    pthread_mutex_unlock(&s->lock);
}

/* ---- writer thread -------------------------------------------------------------------------- */

static void put(mt_sink *s, const mt_record *r)
{
    if (mt_writer_put(s->writer, r) != 0) s->stats.write_failed = 1;
    s->stats.records++;
    if (r->type == MT_REC_EVENT) s->stats.events++;
}

static int by_time(const void *a, const void *b)
{
    const mt_slot *x = *(mt_slot *const *)a, *y = *(mt_slot *const *)b;
    if (x->u.ev.time_ns != y->u.ev.time_ns) return x->u.ev.time_ns < y->u.ev.time_ns ? -1 : 1;
    return x < y ? -1 : (x > y); /* stable within a ring (slots of one ring are contiguous) */
}

/* Writes everything that is queued now: side records, then stack nodes, then events by time. */
static void drain(mt_sink *s)
{
    pthread_mutex_lock(&s->lock);
    mt_side *side = s->side_head;
    s->side_head = NULL;
    s->side_tail = &s->side_head;
    mt_ring *rings = s->rings;
    pthread_mutex_unlock(&s->lock);

    for (mt_side *e = side, *next; e; e = next) {
        next = e->next;
        put(s, &e->rec);
        free(e);
    }

    /* Snapshot each ring's head, then write nodes and collect events. Slots stay owned by the
     * consumer until tail moves, so pointers into the rings are stable during this drain. */
    size_t n = 0;
    uint64_t dropped = 0;
    for (mt_ring *r = rings; r; r = r->next) {
        uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        dropped += atomic_exchange_explicit(&r->dropped, 0, memory_order_relaxed);
        if (n + (head - tail) > s->batch_cap) {
            size_t cap = (n + (head - tail)) * 2;
            mt_slot **nb = realloc(s->batch, cap * sizeof *nb);
            if (!nb) { /* out of memory: leave this ring for the next drain */
                head = tail;
            } else {
                s->batch = nb;
                s->batch_cap = cap;
            }
        }
        r->drain_head = head;
        for (uint64_t i = tail; i < head; i++) {
            mt_slot *slot = &r->slots[i & r->mask];
            if (slot->type == SLOT_NODE) {
                mt_record rec = {.type = MT_REC_STACK_NODE, .u.node = slot->u.node};
                put(s, &rec);
            } else {
                s->batch[n++] = slot;
            }
        }
    }
    if (n) qsort(s->batch, n, sizeof *s->batch, by_time);
    for (size_t i = 0; i < n; i++) {
        mt_record rec = {.type = MT_REC_EVENT, .u.event = s->batch[i]->u.ev};
        put(s, &rec);
    }
    /* Only now give the slots back to the producers. */
    for (mt_ring *r = rings; r; r = r->next)
        atomic_store_explicit(&r->tail, r->drain_head, memory_order_release);
    if (dropped) {
        mt_record rec = {.type = MT_REC_DROPPED, .u.dropped = dropped};
        put(s, &rec);
        s->stats.dropped += dropped;
    }
    if (mt_writer_flush(s->writer) != 0) s->stats.write_failed = 1;
    free_retired(s);
}

static void *writer_main(void *arg)
{
    mt_sink *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        int stopping = s->stopping;
        uint64_t want = s->flush_requested;
        if (!stopping && want == s->flush_done) {
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
        pthread_mutex_unlock(&s->lock);
        if (tick) tick(tick_ctx, s);
        drain(s);
        pthread_mutex_lock(&s->lock);
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
    s->ring_slots = round_pow2(cfg->ring_slots ? cfg->ring_slots : 16384);
    s->flush_ms = cfg->flush_ms ? cfg->flush_ms : 200;
    s->generation = atomic_fetch_add(&next_generation, 1);
    s->side_tail = &s->side_head;
    s->writer = mt_writer_open_fd(cfg->fd, &cfg->header, cfg->chunk_bytes);
    if (!s->writer) {
        free(s);
        return NULL;
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
        mt_writer_close(s->writer, 0);
        free(s);
        return NULL;
    }
    pthread_setname_np(s->thread, "memtrace-writer");
    return s;
}

void mt_sink_set_tick(mt_sink *s, mt_sink_tick_fn fn, void *ctx)
{
    pthread_mutex_lock(&s->lock);
    s->tick = fn;
    s->tick_ctx = ctx;
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

void mt_sink_stop(mt_sink *s, mt_sink_stats *stats)
{
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    s->flush_requested++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    if (s->has_key) pthread_key_delete(s->thread_exit); /* no destructor may touch freed rings */

    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    mt_record end = {.type = MT_REC_END};
    end.u.end.time_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    end.u.end.events = s->stats.events;
    end.u.end.dropped = s->stats.dropped;
    put(s, &end);
    if (mt_writer_flush(s->writer) != 0) s->stats.write_failed = 1;
    s->stats.bytes = mt_writer_bytes_written(s->writer);
    if (mt_writer_close(s->writer, 1) != 0) s->stats.write_failed = 1;
    if (stats) *stats = s->stats;

    for (mt_ring *r = s->rings, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    free(s->batch);
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
    if (s) close(s->fd);
}
