/* The interval treap behind VMM mappings (src/compact/ranges.c) against a plain list: random
 * inserts, removals and overlap queries, with overlapping and equal-start ranges. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "compact/internal.h"

enum { OPS = 20000, MAXR = 4096 };

typedef struct ref {
    mt_range r;
    long id;
    int used;
} ref;

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_id(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

Test(compact_ranges, matches_a_plain_list)
{
    static ref refs[MAXR];
    mt_range_set *s = mt_ranges_new();
    cr_assert_not_null(s);
    uint32_t *ids = NULL, want[MAXR];
    size_t cap = 0, live = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t what = next() % 10;
        if (what < 4 || live == 0) { /* insert */
            size_t k = 0;
            while (k < MAXR && refs[k].used) k++;
            if (k == MAXR) continue;
            uint64_t start = next() % 100000, len = 1 + next() % 3000;
            if (next() % 8 == 0 && k > 0 && refs[k - 1].used) start = refs[k - 1].r.start;
            refs[k].r = (mt_range){.start = start, .end = start + len, .context = (uint32_t)k};
            refs[k].id = mt_ranges_insert(s, &refs[k].r);
            cr_assert_geq(refs[k].id, 0);
            refs[k].used = 1;
            live++;
        } else if (what < 7) { /* remove */
            size_t k = next() % MAXR;
            if (!refs[k].used) continue;
            mt_ranges_remove(s, (uint32_t)refs[k].id);
            cr_assert_null(mt_ranges_get(s, (uint32_t)refs[k].id));
            refs[k].used = 0;
            live--;
        } else { /* query */
            uint64_t a = next() % 105000, b = a + 1 + next() % 5000;
            long n = mt_ranges_overlapping(s, a, b, &ids, &cap);
            cr_assert_geq(n, 0);
            size_t m = 0;
            for (size_t k = 0; k < MAXR; k++)
                if (refs[k].used && refs[k].r.start < b && refs[k].r.end > a)
                    want[m++] = (uint32_t)refs[k].id;
            cr_assert_eq((size_t)n, m, "op %d: [%llu, %llu)", op, (unsigned long long)a,
                         (unsigned long long)b);
            for (long i = 1; i < n; i++) /* in start order */
                cr_assert_leq(mt_ranges_get(s, ids[i - 1])->start, mt_ranges_get(s, ids[i])->start);
            if (n) qsort(ids, (size_t)n, sizeof *ids, cmp_id);
            if (m) qsort(want, m, sizeof *want, cmp_id);
            for (size_t i = 0; i < m; i++) cr_assert_eq(ids[i], want[i]);
        }
        cr_assert_eq(mt_ranges_count(s), live);
    }
    free(ids);
    mt_ranges_free(s);
}
