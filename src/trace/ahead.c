/* ahead.c — the next chunk, loaded by an idle thread (ahead.h). */
#include <stdlib.h>
#include <string.h>

#include "ahead.h"

enum { AH_IDLE, AH_OFFERED, AH_WORKING, AH_READY, AH_FAILED };

#define START_BUDGET (16u << 20)

int mt_ahead_init(mt_ahead *a, int fd, uint64_t file_size)
{
    memset(a, 0, sizeof *a);
    if (mt_chunk_io_init(&a->io, fd, file_size) != 0) {
        mt_chunk_io_free(&a->io);
        return -1;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->done, NULL);
    atomic_init(&a->state, AH_IDLE);
    a->budget = START_BUDGET;
    return 0;
}

void mt_ahead_free(mt_ahead *a)
{
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->done);
    mt_chunk_io_free(&a->io);
    free(a->raw);
    memset(a, 0, sizeof *a);
}

void mt_ahead_offer(mt_ahead *a, uint64_t off)
{
    pthread_mutex_lock(&a->mu);
    /* the feed offers only after mt_ahead_take, which leaves the slot IDLE: no helper is at work */
    a->off = off;
    atomic_store_explicit(&a->state, AH_OFFERED, memory_order_relaxed);
    pthread_mutex_unlock(&a->mu);
}

void mt_ahead_earn(mt_ahead *a, uint64_t clen, uint64_t rlen)
{
    pthread_mutex_lock(&a->mu);
    a->budget += 2 * (clen + rlen);
    pthread_mutex_unlock(&a->mu);
}

int mt_ahead_wanted(mt_ahead *a)
{
    return atomic_load_explicit(&a->state, memory_order_relaxed) == AH_OFFERED;
}

/* The helper's part, outside the lock: the slot's buffers are this thread's while WORKING. */
static mt_chunk_status load(mt_ahead *a, uint64_t off)
{
    char why[128];
    mt_chunk_status st = mt_chunk_head(&a->io, off, &a->chunk, why, sizeof why);
    if (st != MT_CH_OK) return st;
    uint64_t charge = (uint64_t)a->chunk.clen + a->chunk.rlen;
    pthread_mutex_lock(&a->mu);
    int afford = charge <= a->budget;
    if (afford) a->budget -= charge;
    pthread_mutex_unlock(&a->mu);
    if (!afford) return MT_CH_BAD; /* the feed loads it, if it is a chunk at all */
    return mt_chunk_body(&a->io, &a->chunk, NULL, &a->raw, &a->raw_cap, why, sizeof why);
}

int mt_ahead_help(mt_ahead *a)
{
    pthread_mutex_lock(&a->mu);
    if (atomic_load_explicit(&a->state, memory_order_relaxed) != AH_OFFERED) {
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    atomic_store_explicit(&a->state, AH_WORKING, memory_order_relaxed);
    uint64_t off = a->off;
    pthread_mutex_unlock(&a->mu);
    mt_chunk_status st = load(a, off);
    pthread_mutex_lock(&a->mu);
    atomic_store_explicit(&a->state, st == MT_CH_OK ? AH_READY : AH_FAILED, memory_order_relaxed);
    a->loaded += st == MT_CH_OK;
    pthread_cond_broadcast(&a->done);
    pthread_mutex_unlock(&a->mu);
    return 1;
}

int mt_ahead_take(mt_ahead *a, uint64_t off, uint8_t **raw, size_t *cap, mt_chunk *out,
                  uint64_t *file_size)
{
    pthread_mutex_lock(&a->mu);
    while (atomic_load_explicit(&a->state, memory_order_relaxed) == AH_WORKING)
        pthread_cond_wait(&a->done, &a->mu);
    int got = atomic_load_explicit(&a->state, memory_order_relaxed) == AH_READY && a->off == off;
    if (got) {
        uint8_t *b = *raw;
        size_t c = *cap;
        *raw = a->raw;
        *cap = a->raw_cap;
        a->raw = b;
        a->raw_cap = c;
        *out = a->chunk;
        if (a->io.file_size > *file_size) *file_size = a->io.file_size;
        a->taken++;
    }
    atomic_store_explicit(&a->state, AH_IDLE, memory_order_relaxed);
    pthread_mutex_unlock(&a->mu);
    return got;
}
