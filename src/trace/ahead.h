/* ahead.h — the next chunk, loaded and inflated ahead of the feed by a thread that would
 * otherwise wait (private to src/trace).
 *
 * Why: reading a trace on two threads (reader.c), the feed's thread reads, checks, inflates and
 * decodes every chunk while the caller's thread analyses the records, and either waits whenever
 * the other falls behind. On a 2-core VM whose two vCPUs were far apart (records crossing between
 * them cost both sides), the reader alone ran at 13-14 M events/s where it had run at 24 on
 * another day, and `report` at its speed (docs/performance.md, "Twelfth round"). Decoding must
 * stay in order on the feed's thread (a record's context may come from the chunks before), but
 * loading a chunk (read, CRC, inflate: about two fifths of the feed's work) needs only its offset,
 * which the header of the chunk before gives. So the feed offers that offset here, and a thread
 * with nothing to do (the caller, waiting for a batch; or the feed itself, waiting for room in the
 * ring) loads the chunk into a buffer of this slot; the feed, coming to that offset, takes the
 * buffer in exchange for the one it would have overwritten. Whichever thread is idle does the
 * loading, so the work balances itself chunk by chunk.
 *
 * What the feed sees is unchanged: a chunk loaded ahead passed the very checks the feed makes
 * (chunk_load.c); one that failed any is left for the feed to load again, whose resync and damage
 * report are then exactly those of a feed that reads alone.
 *
 * The feed offers the next chunk as soon as it has read the header of the one it loads itself (a
 * helper then inflates one while the feed inflates the other), or as soon as it takes one loaded
 * here. An offer is a guess until the feed's own chunk has passed its checks: after a damaged
 * chunk it may name no chunk at all. So the helpers' work is charged to a budget that only the
 * feed's good chunks earn (twice their lengths, plus 16 MiB to start with): on any file they do at
 * most about twice what the feed does, and reading stays linear in time (feed.c).
 *
 * One slot: states IDLE -> OFFERED (the feed) -> WORKING (a helper) -> READY or FAILED -> IDLE
 * (the feed takes it); or OFFERED -> IDLE when the feed comes first and loads it itself.
 */
#ifndef MT_TRACE_AHEAD_H
#define MT_TRACE_AHEAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chunk_load.h"

typedef struct mt_ahead {
    pthread_mutex_t mu;
    pthread_cond_t done; /* WORKING ended */
    atomic_int state;    /* written under mu; read without it only as a hint */
    uint64_t off;        /* the chunk offered */
    mt_chunk chunk;      /* what its load found (READY) */
    mt_chunk_io io;      /* the helper's: its own inflater and compressed buffer */
    uint8_t *raw;        /* the chunk, inflated (READY); else a spare buffer */
    size_t raw_cap;
    uint64_t budget;        /* bytes (compressed + raw) the helpers may still load */
    uint64_t loaded, taken; /* chunks loaded here, and taken by the feed: for tests */
} mt_ahead;

/* For the file fd (file_size bytes). -1 when out of memory. */
int mt_ahead_init(mt_ahead *a, int fd, uint64_t file_size);
void mt_ahead_free(mt_ahead *a);
/* The feed: the chunk at off is the next it will load. Only after mt_ahead_take. */
void mt_ahead_offer(mt_ahead *a, uint64_t off);
/* The feed: a good chunk of these lengths was read (whoever loaded it): the helpers' budget. */
void mt_ahead_earn(mt_ahead *a, uint64_t clen, uint64_t rlen);
/* Whether an offer waits for a helper (a hint: read without the lock). */
int mt_ahead_wanted(mt_ahead *a);
/* A helper: loads the chunk offered, if one is. 1 when it did, else 0. */
int mt_ahead_help(mt_ahead *a);
/* The feed, at off: when a helper loaded that chunk and it passed every check, exchanges *raw and
 * *cap with the slot's buffer (the chunk, inflated), sets *out and returns 1; waits while a helper
 * is at work on it. Else 0 (the feed loads it itself); an offer of off is withdrawn either way. */
int mt_ahead_take(mt_ahead *a, uint64_t off, uint8_t **raw, size_t *cap, mt_chunk *out,
                  uint64_t *file_size);

#endif
