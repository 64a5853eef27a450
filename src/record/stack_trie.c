/* stack_trie.c — stack deduplication (the spirit of heaptrack's TraceTree).
 *
 * Every distinct path of frames from the outermost frame (_start) down to a frame gets a node id;
 * an event carries only its leaf id, and each node is written once (through on_new). Ids are
 * sequential from 1 so the reader can keep nodes in a flat array; 0 is the root.
 *
 * Hot path: consecutive allocations on a thread share most of their stack (same training loop,
 * same framework code, different leaf). The caller's per-thread mt_trie_cache holds the last path
 * interned (words and ids, outermost first); the new stack is compared with it from the outermost
 * end and only the frames past the common prefix are looked up, under the mutex. A stack equal to
 * (or a prefix of) the previous one takes no lock at all.
 *
 * Slow path: an open-addressing hash table, key (parent id, frame word) -> child id, linear
 * probing, grown x2 at 1/2 load. One entry (16 bytes):
 *
 *   byte 0              8          12         16
 *        +--------------+----------+----------+
 *        | frame word   | parent   | id       |    id 0 = empty slot
 *        | uint64       | uint32   | uint32   |
 *        +--------------+----------+----------+
 *
 * A cache starts zeroed and must only ever be used with one trie (its ids mean nothing in
 * another).
 */
#include <pthread.h>
#include <stdlib.h>

#include "hash.h"
#include "memtrace/record.h"

typedef struct trie_entry {
    uint64_t word;
    uint32_t parent;
    uint32_t id;
} trie_entry;

struct mt_trie {
    pthread_mutex_t lock; /* guards everything below */
    trie_entry *slots;
    uint32_t mask;  /* capacity - 1 (capacity is a power of two) */
    uint32_t count; /* nodes created = last id given */
    int full;       /* a node was refused: MT_TRIE_MAX_NODES */
    mt_trie_new_node_fn on_new;
    void *ctx;
};

#define TRIE_INITIAL_CAPACITY 4096u

static inline uint32_t hash_key(uint32_t parent, uint64_t word)
{
    uint64_t h = (word ^ ((uint64_t)parent << 32 | parent)) * MT_GOLDEN64;
    return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

mt_trie *mt_trie_new(mt_trie_new_node_fn on_new, void *ctx)
{
    mt_trie *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->slots = calloc(TRIE_INITIAL_CAPACITY, sizeof *t->slots);
    if (!t->slots) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->mask = TRIE_INITIAL_CAPACITY - 1;
    t->on_new = on_new;
    t->ctx = ctx;
    return t;
}

/* Doubles the table. -1 when memory is short (the table stays as it was). Lock held. */
static int grow(mt_trie *t)
{
    uint32_t cap = (t->mask + 1) * 2;
    if (cap == 0) return -1;
    trie_entry *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (uint32_t i = 0; i <= t->mask; i++) {
        const trie_entry *e = &t->slots[i];
        if (!e->id) continue;
        uint32_t j = hash_key(e->parent, e->word) & (cap - 1);
        while (slots[j].id)
            j = (j + 1) & (cap - 1);
        slots[j] = *e;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}

/* The child of parent for word, created (and announced) if new. 0 when memory ran out or ids
 * are exhausted. Lock held. */
static uint32_t child(mt_trie *t, uint32_t parent, uint64_t word)
{
    uint32_t i = hash_key(parent, word) & t->mask;
    for (;; i = (i + 1) & t->mask) {
        trie_entry *e = &t->slots[i];
        if (!e->id) break;
        if (e->parent == parent && e->word == word) return e->id;
    }
    if (t->count >= MT_TRIE_MAX_NODES) {
        __atomic_store_n(&t->full, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if ((uint64_t)(t->count + 1) * 2 > (uint64_t)t->mask + 1) {
        if (grow(t)) return 0;
        i = hash_key(parent, word) & t->mask;
        while (t->slots[i].id)
            i = (i + 1) & t->mask;
    }
    uint32_t id = t->count + 1;
    t->slots[i] = (trie_entry){word, parent, id};
    __atomic_store_n(&t->count, id, __ATOMIC_RELEASE); /* mt_trie_size reads it unlocked */
    if (t->on_new) {
        mt_stack_node node = {.id = id,
                              .parent = parent,
                              .ip = MT_FRAME_WORD_IP(word),
                              .frame_kind = (uint8_t)MT_FRAME_WORD_KIND(word)};
        t->on_new(t->ctx, &node);
    }
    return id;
}

static uint32_t intern_uncached(mt_trie *t, mt_trie_cache *cache, const uint64_t *frames, int n);

/* 64-bit hash of a whole stack. Why a hash may stand for the stack: in a real PyTorch process the
 * lookups that miss the last-stack memo below cost ~1 µs (a mutex and a dozen hash probes into a
 * cold table for every frame that differs), and a training step allocates from the same few
 * hundred stacks over and over. Two different stacks of equal depth would have to collide in 64
 * bits AND land in the same slot to be confused: about 1e-8 for a million distinct stacks. */
static uint64_t stack_hash(const uint64_t *frames, int n)
{
    uint64_t h = MT_GOLDEN64 ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h = (h ^ frames[i]) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    return h | 1; /* never 0, the empty mark */
}

uint32_t mt_trie_intern(mt_trie *t, mt_trie_cache *cache, const uint64_t *frames, int n)
{
    if (!t || n <= 0) return 0;
    uint64_t h = 0;
    unsigned slot = 0;
    if (cache) {
        h = stack_hash(frames, n);
        slot = (unsigned)(h >> 40) & (MT_TRIE_RECENT - 1);
        if (cache->recent[slot].hash == h && cache->recent[slot].n == (uint32_t)n)
            return cache->recent[slot].leaf;
    }
    uint32_t leaf = intern_uncached(t, cache, frames, n);
    if (cache && leaf) {
        cache->recent[slot].hash = h;
        cache->recent[slot].n = (uint32_t)n;
        cache->recent[slot].leaf = leaf;
    }
    return leaf;
}

static uint32_t intern_uncached(mt_trie *t, mt_trie_cache *cache, const uint64_t *frames, int n)
{
    /* Position i counts from the outermost frame: word i = frames[n - 1 - i]. */
    int common = 0;
    if (cache) {
        if (cache->n < 0 || cache->n > MT_MAX_FRAMES) cache->n = 0; /* never zeroed: distrust */
        int lim = cache->n < n ? cache->n : n;
        while (common < lim && cache->words[common] == frames[n - 1 - common])
            common++;
        if (common == n) return cache->ids[n - 1];
    }
    uint32_t parent = common > 0 ? cache->ids[common - 1] : 0;
    pthread_mutex_lock(&t->lock);
    for (int i = common; i < n; i++) {
        uint64_t word = frames[n - 1 - i];
        uint32_t id = child(t, parent, word);
        if (!id) { /* out of memory or full: the deepest node we have, and forget the cache */
            if (cache) cache->n = 0;
            pthread_mutex_unlock(&t->lock);
            return parent;
        }
        if (cache && i < MT_MAX_FRAMES) {
            cache->words[i] = word;
            cache->ids[i] = id;
        }
        parent = id;
    }
    pthread_mutex_unlock(&t->lock);
    if (cache) cache->n = n < MT_MAX_FRAMES ? n : MT_MAX_FRAMES;
    return parent;
}

uint32_t mt_trie_size(const mt_trie *t)
{
    return t ? __atomic_load_n(&t->count, __ATOMIC_ACQUIRE) : 0;
}

int mt_trie_full(const mt_trie *t) { return t && __atomic_load_n(&t->full, __ATOMIC_RELAXED); }

void mt_trie_free(mt_trie *t)
{
    if (!t) return;
    pthread_mutex_destroy(&t->lock);
    free(t->slots);
    free(t);
}
