/* Mapped VMM ranges, ordered by start address: a treap (a binary search tree whose nodes also
 * form a heap of random priorities, so it stays balanced whatever order the ranges come in) with
 * each node's subtree holding the largest end below it, so the ranges overlapping [a, b) are found
 * in O(log n + k). A sorted array did the same with an O(n) shift per insertion: quadratic on a
 * trace whose mappings come in descending order.
 *
 * Nodes live in one array with a free list; a range's id is its slot and stays valid until it is
 * removed. Keys are (start, id), so equal starts are fine. Priorities come from a generator seeded
 * per set from the clock: a trace cannot be built to meet them in a degenerate order.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grow.h" /* src/util: MT_GROW */
#include "internal.h"

#define NIL UINT32_MAX

typedef struct rnode {
    mt_range r;
    uint64_t max_end; /* largest end in this subtree */
    uint64_t prio;
    uint32_t left, right;
    uint8_t used;
} rnode;

struct mt_range_set {
    rnode *n;
    size_t cap;
    uint32_t root, free_head, count;
    uint64_t rng, serial;
};

mt_range_set *mt_ranges_new(void)
{
    mt_range_set *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->rng = mt_mix64((uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)s) | 1;
    s->root = s->free_head = NIL;
    return s;
}

void mt_ranges_free(mt_range_set *s)
{
    if (!s) return;
    free(s->n);
    free(s);
}

size_t mt_ranges_count(const mt_range_set *s)
{
    return s->count;
}

static int before(const mt_range_set *s, uint32_t x, uint32_t y) /* key(x) < key(y) */
{
    const mt_range *a = &s->n[x].r, *b = &s->n[y].r;
    return a->start != b->start ? a->start < b->start : x < y;
}

static void update(mt_range_set *s, uint32_t x)
{
    rnode *n = &s->n[x];
    n->max_end = n->r.end;
    if (n->left != NIL && s->n[n->left].max_end > n->max_end) n->max_end = s->n[n->left].max_end;
    if (n->right != NIL && s->n[n->right].max_end > n->max_end) n->max_end = s->n[n->right].max_end;
}

/* Splits tree t into keys before node k (*l) and the rest (*r). */
static void split(mt_range_set *s, uint32_t t, uint32_t k, uint32_t *l, uint32_t *r)
{
    if (t == NIL) {
        *l = *r = NIL;
        return;
    }
    if (before(s, t, k)) {
        split(s, s->n[t].right, k, &s->n[t].right, r);
        *l = t;
    } else {
        split(s, s->n[t].left, k, l, &s->n[t].left);
        *r = t;
    }
    update(s, t);
}

/* Joins l and r, every key of l before every key of r. */
static uint32_t merge(mt_range_set *s, uint32_t l, uint32_t r)
{
    if (l == NIL) return r;
    if (r == NIL) return l;
    if (s->n[l].prio > s->n[r].prio) {
        s->n[l].right = merge(s, s->n[l].right, r);
        update(s, l);
        return l;
    }
    s->n[r].left = merge(s, l, s->n[r].left);
    update(s, r);
    return r;
}

long mt_ranges_insert(mt_range_set *s, const mt_range *r)
{
    if (s->free_head == NIL) { /* grow: the new slots go onto the free list */
        if (s->cap >= NIL / 2) return -1;
        size_t ncap = s->cap ? s->cap * 2 : 64;
        rnode *nn = realloc(s->n, ncap * sizeof *nn);
        if (!nn) return -1;
        memset(nn + s->cap, 0, (ncap - s->cap) * sizeof *nn);
        for (size_t i = ncap; i-- > s->cap;) {
            nn[i].left = s->free_head;
            s->free_head = (uint32_t)i;
        }
        s->n = nn;
        s->cap = ncap;
    }
    uint32_t id = s->free_head;
    s->free_head = s->n[id].left;
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    s->n[id] = (rnode){.r = *r, .max_end = r->end, .prio = s->rng, .left = NIL, .right = NIL,
                       .used = 1};
    s->n[id].r.serial = ++s->serial;
    uint32_t l, g;
    split(s, s->root, id, &l, &g);
    s->root = merge(s, merge(s, l, id), g);
    s->count++;
    return (long)id;
}

/* Removes node id from tree t (found by its key). */
static uint32_t erase(mt_range_set *s, uint32_t t, uint32_t id)
{
    if (t == NIL) return NIL;
    if (t == id) return merge(s, s->n[t].left, s->n[t].right);
    if (before(s, id, t)) s->n[t].left = erase(s, s->n[t].left, id);
    else s->n[t].right = erase(s, s->n[t].right, id);
    update(s, t);
    return t;
}

void mt_ranges_remove(mt_range_set *s, uint32_t id)
{
    if (id >= s->cap || !s->n[id].used) return;
    s->root = erase(s, s->root, id);
    s->n[id].used = 0;
    s->n[id].left = s->free_head;
    s->free_head = id;
    s->count--;
}

mt_range *mt_ranges_get(mt_range_set *s, uint32_t id)
{
    return id < s->cap && s->n[id].used ? &s->n[id].r : NULL;
}

typedef struct query {
    uint64_t a, b;
    uint32_t *out;
    size_t n, cap;
    int oom;
} query;

static void visit(mt_range_set *s, uint32_t t, query *q)
{
    while (t != NIL && s->n[t].max_end > q->a) {
        visit(s, s->n[t].left, q);
        const mt_range *r = &s->n[t].r;
        if (r->start >= q->b) return; /* this one and everything to its right start too late */
        if (r->end > q->a) {
            if (MT_GROW(q->out, q->cap, q->n + 1) < 0) {
                q->oom = 1;
                return;
            }
            q->out[q->n++] = t;
        }
        t = s->n[t].right; /* the right subtree, without recursion */
    }
}

long mt_ranges_overlapping(mt_range_set *s, uint64_t a, uint64_t b, uint32_t **ids, size_t *cap)
{
    query q = {.a = a, .b = b, .out = *ids, .cap = *cap};
    visit(s, s->root, &q);
    *ids = q.out;
    *cap = q.cap;
    return q.oom ? -1 : (long)q.n;
}
