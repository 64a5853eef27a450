/* Per-stack aggregate maps (agg key -> bytes, count) turned into sorted stack lists. */
#include <stdlib.h>

#include "internal.h"

static int cmp_stat(const void *pa, const void *pb)
{
    const mt_stack_stat *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    if (a->driver != b->driver) return a->driver > b->driver ? -1 : 1;
    if (a->category != b->category) return a->category < b->category ? -1 : 1;
    return a->stack < b->stack ? -1 : a->stack > b->stack;
}

int mt_stack_list_from_map(const mt_u64map *m, uint64_t prefix, mt_stack_list *out)
{
    out->v = NULL;
    out->n = 0;
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].used && (prefix == ~0ull || (m->slots[i].key >> 40) == prefix)) n++;
    if (!n) return 0;
    out->v = malloc(n * sizeof *out->v);
    if (!out->v) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        const mt_u64map_slot *s = &m->slots[i];
        if (!s->used || (prefix != ~0ull && (s->key >> 40) != prefix)) continue;
        out->v[out->n++] = (mt_stack_stat){.stack = (uint32_t)s->key,
                                           .driver = (uint8_t)((s->key >> 32) & 1),
                                           .category = (uint8_t)((s->key >> 33) & 0x3f),
                                           .bytes = s->a,
                                           .count = s->b};
    }
    qsort(out->v, out->n, sizeof *out->v, cmp_stat);
    return 0;
}

static mt_stack_stat stat_of(const mt_u64map_slot *s)
{
    return (mt_stack_stat){.stack = (uint32_t)s->key, .driver = (uint8_t)((s->key >> 32) & 1),
                           .category = (uint8_t)((s->key >> 33) & 0x3f), .bytes = s->a,
                           .count = s->b};
}

/* heap of the `top` best so far, the worst (largest in cmp_stat's order) at the root */
static void sift_down(mt_stack_stat *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cmp_stat(&h[l], &h[w]) > 0) w = l;
        if (r < n && cmp_stat(&h[r], &h[w]) > 0) w = r;
        if (w == i) return;
        mt_stack_stat t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

int mt_stack_list_top_from_map(const mt_u64map *m, size_t top, mt_stack_list *out,
                               uint64_t *rest_bytes, uint64_t *rest_count, uint64_t *rest_stacks)
{
    *out = (mt_stack_list){0};
    uint64_t bytes = 0, count = 0, stacks = 0;
    mt_stack_stat *h = top ? malloc(top * sizeof *h) : NULL;
    if (top && !h) return -1;
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used || !m->slots[i].b) continue; /* nothing counted under this key */
        mt_stack_stat s = stat_of(&m->slots[i]);
        bytes += s.bytes;
        count += s.count;
        stacks++;
        if (n < top) {
            h[n++] = s;
            if (n == top) /* heapify */
                for (size_t k = top / 2; k-- > 0;) sift_down(h, n, k);
        } else if (top && cmp_stat(&s, &h[0]) < 0) {
            h[0] = s;
            sift_down(h, n, 0);
        }
    }
    if (n) qsort(h, n, sizeof *h, cmp_stat);
    for (size_t i = 0; i < n; i++) {
        bytes -= h[i].bytes;
        count -= h[i].count;
        stacks--;
    }
    if (!n) {
        free(h);
        h = NULL;
    }
    out->v = h;
    out->n = n;
    *rest_bytes += bytes;
    *rest_count += count;
    *rest_stacks += stacks;
    return 0;
}

int mt_stack_lists_by_prefix(const mt_u64map *m, mt_stack_list *lists, size_t n)
{
    for (size_t k = 0; k < n; k++) lists[k] = (mt_stack_list){0};
    size_t *count = calloc(n ? n : 1, sizeof *count);
    if (!count) return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].used && (m->slots[i].key >> 40) < n) count[m->slots[i].key >> 40]++;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        if (count[k] && !(lists[k].v = malloc(count[k] * sizeof *lists[k].v))) rc = -1;
    for (size_t i = 0; i < m->cap && rc == 0; i++) {
        const mt_u64map_slot *s = &m->slots[i];
        if (!s->used || (s->key >> 40) >= n) continue;
        mt_stack_list *l = &lists[s->key >> 40];
        l->v[l->n++] = (mt_stack_stat){.stack = (uint32_t)s->key,
                                       .driver = (uint8_t)((s->key >> 32) & 1),
                                       .category = (uint8_t)((s->key >> 33) & 0x3f),
                                       .bytes = s->a,
                                       .count = s->b};
    }
    for (size_t k = 0; k < n; k++) {
        if (rc == 0 && lists[k].n > 1) qsort(lists[k].v, lists[k].n, sizeof *lists[k].v, cmp_stat);
        if (rc != 0) {
            free(lists[k].v);
            lists[k] = (mt_stack_list){0};
        }
    }
    free(count);
    return rc;
}
