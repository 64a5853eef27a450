/* unwind_memo.c — allocation of the per-thread walk memos (see unwind_memo.h for what they do).
 *
 * Heap, not __thread arrays: up to 1 024 memos per thread would sit in every thread's dynamic TLS
 * block of the injected library. The __thread pointer below is the only per-thread state; a
 * pthread key destructor frees the memos when the thread exits.
 */
#include "unwind_memo.h"
#include "hot_path.h"
#include "rare_work.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static __thread mt_walk_memos *tls_memos; /* this thread's memos; (void *)1 once it is exiting */
static pthread_key_t memo_key;            /* its destructor frees them */
static int memo_key_ok;
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;

#define MEMOS_GONE ((mt_walk_memos *)1)

static void free_memos(void *p)
{
    mt_walk_memos *m = p;
    for (int i = 0; i < MT_MEMO_WAYS; i++) free(m->way[i]);
    free(m->spare);
    free(m);
    tls_memos = MEMOS_GONE; /* unwinds later in this thread's exit run without memo */
}

/* Bytes of a memo with room for cap steps: see the layout in unwind_memo.h. */
static size_t memo_bytes(int cap)
{
    return sizeof(mt_walk_memo) + mt_memo_words_bytes(cap) +
           (size_t)cap * (sizeof(uint64_t) + sizeof(mt_walk_step));
}

/* Zeroed memory starting on a cache line, in whole lines (see unwind_memo.h: why lines). */
static void *zeroed_lines(size_t bytes)
{
    bytes = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

mt_walk_memo *mt_walk_memo_new(int cap)
{
    if (cap < 0) cap = 0;
    mt_walk_memo *m = zeroed_lines(memo_bytes(cap)); /* the header and the check's first words */
    if (!m) return NULL;
    m->cap = cap;
    m->steps = (mt_walk_step *)(void *)(mt_memo_ra(m) + cap);
    return m;
}

mt_walk_memo *mt_walk_memo_copy(const mt_walk_memo *m)
{
    int n = m->n > 0 ? m->n : 0;
    mt_walk_memo *c = mt_walk_memo_new(n);
    if (!c) return NULL;
    c->id = m->id;
    c->n = m->n;
    c->end = m->end;
    memcpy(c->steps, m->steps, (size_t)n * sizeof(mt_walk_step));
    return c;
}

static void make_key(void)
{
    memo_key_ok = pthread_key_create(&memo_key, free_memos) == 0;
}

MT_HOT_PATH mt_walk_memos *mt_walk_memo_acquire(void)
{
    mt_walk_memos *m = tls_memos;
    if (m == MEMOS_GONE) return NULL;
    if (!m) { /* once a thread: rare work (rare_work.h), its pages touched for the first time */
        uint64_t rare = mt_rare_begin();
        pthread_once(&memo_once, make_key);
        m = memo_key_ok ? zeroed_lines(sizeof *m) : NULL; /* a set's tags: one line */
        if (m && pthread_setspecific(memo_key, m) != 0) {
            free(m);
            m = NULL;
        }
        mt_rare_end(rare, MT_RARE_THREAD);
        if (!m) return NULL;
        m->last = -1;
        tls_memos = m;
    }
    if (m->busy) return NULL;
    m->busy = 1;
    return m;
}

MT_HOT_PATH mt_walk_memos *mt_walk_memo_peek(void)
{
    mt_walk_memos *m = tls_memos;
    return m == MEMOS_GONE ? NULL : m;
}
