/* mt_trie: ids, prefix sharing, the on_new callback, the per-thread cache, and concurrency. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "memtrace/record.h"

/* Every node the callback announced, indexed by id, plus how often each id was announced. */
#define MAX_NODES (1 << 19)
typedef struct nodes {
    mt_stack_node node[MAX_NODES];
    int calls[MAX_NODES];
    int bad_ids; /* ids out of range or not sequential */
    uint32_t last_id;
} nodes;

static void on_new(void *ctx, const mt_stack_node *n)
{
    nodes *ns = ctx; /* called under the trie's lock: no locking needed here */
    if (n->id == 0 || n->id >= MAX_NODES || n->id != ns->last_id + 1) {
        ns->bad_ids++;
        return;
    }
    ns->last_id = n->id;
    ns->node[n->id] = *n;
    ns->calls[n->id]++;
}

/* Rebuilds the frames (innermost first) of leaf from the announced nodes. */
static int path_of(const nodes *ns, uint32_t leaf, uint64_t *out, int max)
{
    uint64_t rev[512];
    int n = 0;
    for (uint32_t id = leaf; id && n < 512; id = ns->node[id].parent)
        rev[n++] = MT_FRAME_WORD(ns->node[id].frame_kind, ns->node[id].ip);
    for (int i = 0; i < n && i < max; i++)
        out[i] = rev[i]; /* rev is already innermost first */
    return n;
}

Test(record_trie, same_stack_same_leaf_and_prefix_sharing)
{
    nodes *ns = calloc(1, sizeof *ns);
    mt_trie *t = mt_trie_new(on_new, ns);
    cr_assert_not_null(t);
    /* innermost first: leaf frames differ, outer frames are shared */
    uint64_t a[] = {0x1000, 0x2000, 0x3000, 0x4000};
    uint64_t b[] = {0x1111, 0x2000, 0x3000, 0x4000};
    uint64_t c[] = {0x2000, 0x3000, 0x4000}; /* a prefix (from the outside) of both */
    uint32_t la = mt_trie_intern(t, NULL, a, 4);
    cr_expect_eq(mt_trie_size(t), 4);
    cr_expect_eq(mt_trie_intern(t, NULL, a, 4), la);
    uint32_t lb = mt_trie_intern(t, NULL, b, 4);
    cr_expect_neq(lb, la);
    cr_expect_eq(mt_trie_size(t), 5, "b shares 3 nodes with a");
    uint32_t lc = mt_trie_intern(t, NULL, c, 3);
    cr_expect_eq(mt_trie_size(t), 5);
    cr_expect_eq(ns->node[la].parent, lc);
    cr_expect_eq(ns->node[lb].parent, lc);
    cr_expect_eq(mt_trie_intern(t, NULL, a, 0), 0);
    /* The same ip as a different kind is a different frame. */
    uint64_t py[] = {MT_FRAME_WORD(MT_FRAME_PYTHON, 0x1000), 0x2000, 0x3000, 0x4000};
    uint32_t lp = mt_trie_intern(t, NULL, py, 4);
    cr_expect_neq(lp, la);
    cr_expect_eq(ns->node[lp].frame_kind, MT_FRAME_PYTHON);
    cr_expect_eq(ns->node[lp].ip, 0x1000);
    /* Callback: once per node, ids sequential from 1. */
    cr_expect_eq(ns->bad_ids, 0);
    cr_expect_eq(ns->last_id, mt_trie_size(t));
    for (uint32_t i = 1; i <= mt_trie_size(t); i++)
        cr_expect_eq(ns->calls[i], 1, "node %u", i);
    /* The root's children have parent 0: the outermost frame 0x4000. */
    uint32_t id = la;
    while (ns->node[id].parent)
        id = ns->node[id].parent;
    cr_expect_eq(ns->node[id].ip, 0x4000);
    mt_trie_free(t);
    free(ns);
}

/* Deterministic pseudo-random stacks with lots of shared prefixes: depth 1..40, each frame one
 * of a few values at each depth. */
static int make_stack(unsigned seed, uint64_t *f)
{
    unsigned x = seed * 2654435761u + 1;
    int n = 1 + (int)(x % 40);
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        int depth_from_outside = n - 1 - i;
        f[i] = 0x400000 + (uint64_t)depth_from_outside * 0x100 + ((x >> 16) % 3);
    }
    return n;
}

/* Reference: number of distinct prefixes (from the outside) over a set of stacks. */
static int cmp_words(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    for (int i = 0; i < 41; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

static uint32_t distinct_prefixes(int nstacks)
{
    /* Each prefix as a 41-word row: length, then words outermost first, zero padded. */
    uint64_t *rows = calloc((size_t)nstacks * 40, 41 * sizeof(uint64_t));
    size_t count = 0;
    for (int s = 0; s < nstacks; s++) {
        uint64_t f[40];
        int n = make_stack((unsigned)s, f);
        for (int len = 1; len <= n; len++) {
            uint64_t *r = rows + count++ * 41;
            r[0] = (uint64_t)len;
            for (int i = 0; i < len; i++)
                r[1 + i] = f[n - 1 - i];
        }
    }
    qsort(rows, count, 41 * sizeof(uint64_t), cmp_words);
    uint32_t distinct = 0;
    for (size_t i = 0; i < count; i++)
        if (i == 0 || cmp_words(rows + i * 41, rows + (i - 1) * 41) != 0) distinct++;
    free(rows);
    return distinct;
}

Test(record_trie, cache_gives_the_same_ids_as_no_cache)
{
    nodes *ns = calloc(1, sizeof *ns);
    mt_trie *t = mt_trie_new(on_new, ns);
    mt_trie_cache *cache = calloc(1, sizeof *cache);
    enum { N = 3000 };
    uint32_t *with = malloc(N * sizeof *with);
    for (int s = 0; s < N; s++) {
        uint64_t f[40];
        int n = make_stack((unsigned)s, f);
        with[s] = mt_trie_intern(t, cache, f, n);
        /* The same stack again right away: served from the cache alone. */
        cr_expect_eq(mt_trie_intern(t, cache, f, n), with[s]);
    }
    cr_expect_eq(mt_trie_size(t), distinct_prefixes(N), "one node per distinct prefix");
    uint32_t size = mt_trie_size(t);
    for (int s = N - 1; s >= 0; s--) {
        uint64_t f[40], back[40];
        int n = make_stack((unsigned)s, f);
        cr_expect_eq(mt_trie_intern(t, NULL, f, n), with[s], "stack %d", s);
        cr_assert_eq(path_of(ns, with[s], back, 40), n);
        cr_expect_eq(memcmp(back, f, n * sizeof *f), 0, "stack %d rebuilt from its nodes", s);
    }
    cr_expect_eq(mt_trie_size(t), size, "nothing new when interning known stacks");
    cr_expect_eq(ns->bad_ids, 0);
    for (uint32_t i = 1; i <= size; i++)
        cr_expect_eq(ns->calls[i], 1);
    free(with);
    free(cache);
    mt_trie_free(t);
    free(ns);
}

typedef struct worker {
    mt_trie *t;
    int first;      /* each thread walks the stacks in its own order */
    uint32_t *leaf; /* [N] */
} worker;

enum { CONC_N = 5000 };

static void *work(void *p)
{
    worker *w = p;
    mt_trie_cache cache;
    memset(&cache, 0, sizeof cache);
    for (int k = 0; k < CONC_N; k++) {
        int s = (w->first + k * 7) % CONC_N;
        uint64_t f[40];
        int n = make_stack((unsigned)s, f);
        w->leaf[s] = mt_trie_intern(w->t, &cache, f, n);
    }
    return NULL;
}

Test(record_trie, concurrent_interning_is_consistent)
{
    nodes *ns = calloc(1, sizeof *ns);
    mt_trie *t = mt_trie_new(on_new, ns);
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){t, i * 1237, calloc(CONC_N, sizeof(uint32_t))};
        cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(ns->bad_ids, 0);
    cr_expect_eq(mt_trie_size(t), distinct_prefixes(CONC_N));
    for (uint32_t i = 1; i <= mt_trie_size(t); i++)
        cr_expect_eq(ns->calls[i], 1, "node %u", i);
    int mismatched = 0, wrong_path = 0;
    for (int s = 0; s < CONC_N; s++) {
        for (int i = 1; i < 4; i++)
            mismatched += w[i].leaf[s] != w[0].leaf[s];
        uint64_t f[40], back[40];
        int n = make_stack((unsigned)s, f);
        wrong_path +=
            path_of(ns, w[0].leaf[s], back, 40) != n || memcmp(back, f, n * sizeof *f) != 0;
    }
    cr_expect_eq(mismatched, 0, "threads disagree on the leaf of a stack");
    cr_expect_eq(wrong_path, 0, "a leaf's parent chain does not give back its frames");
    for (int i = 0; i < 4; i++)
        free(w[i].leaf);
    mt_trie_free(t);
    free(ns);
}

Test(record_trie, stacks_deeper_than_the_cache)
{
    mt_trie *t = mt_trie_new(NULL, NULL);
    mt_trie_cache cache;
    memset(&cache, 0, sizeof cache);
    enum { DEEP = MT_MAX_FRAMES + 50 };
    uint64_t f[DEEP];
    for (int i = 0; i < DEEP; i++)
        f[i] = 0x1000 + (uint64_t)i;
    uint32_t a = mt_trie_intern(t, &cache, f, DEEP);
    cr_expect_eq(mt_trie_size(t), DEEP);
    cr_expect_eq(mt_trie_intern(t, &cache, f, DEEP), a);
    cr_expect_eq(mt_trie_intern(t, NULL, f, DEEP), a);
    f[0] = 0x9999; /* new leaf, the rest beyond the cache's reach */
    uint32_t b = mt_trie_intern(t, &cache, f, DEEP);
    cr_expect_neq(b, a);
    cr_expect_eq(mt_trie_size(t), DEEP + 1);
    mt_trie_free(t);
}
