/* The spread of a sampled cost (the recorder's self-timing, notes.c), for a median and a tail
 * beside the average: an average alone is moved by a few slow calls (a thread's first call, a
 * preemption between the two clock reads).
 *
 * Buckets of nanoseconds: 0-7 one value each, then eight buckets for each power of two from 8 up
 * (each at most 12.5% of its lower bound wide) to 2^50 ns (13 days), the last one open-ended.
 * Counters are atomic: every recording thread adds to them. */
#ifndef MT_COST_SPREAD_H
#define MT_COST_SPREAD_H

#include <stdatomic.h>
#include <stdint.h>

#define MT_COST_BUCKETS (8 + 47 * 8)

typedef struct mt_cost_spread {
    _Atomic uint64_t n[MT_COST_BUCKETS];
} mt_cost_spread;

static inline unsigned mt_cost_bucket(uint64_t ns)
{
    if (ns < 8) return (unsigned)ns;
    unsigned k = 63u - (unsigned)__builtin_clzll(ns); /* 2^k <= ns < 2^(k+1), k >= 3 */
    unsigned b = (k - 2) * 8 + (unsigned)((ns >> (k - 3)) & 7);
    return b < MT_COST_BUCKETS ? b : MT_COST_BUCKETS - 1;
}

/* The first ns past bucket b: its upper bound (the last bucket's is that of its first 12.5%). */
static inline uint64_t mt_cost_bucket_end(unsigned b)
{
    if (b < 8) return b + 1;
    unsigned k = b / 8 + 2;
    return (uint64_t)(9 + b % 8) << (k - 3);
}

/* The upper bound of the bucket in which a fraction q (0 < q <= 1) of the counted calls is
 * reached; 0 when none was counted. */
static inline uint64_t mt_cost_quantile_end(const mt_cost_spread *sp, double q)
{
    uint64_t total = 0;
    for (unsigned b = 0; b < MT_COST_BUCKETS; b++)
        total += atomic_load_explicit(&sp->n[b], memory_order_relaxed);
    if (!total) return 0;
    uint64_t need = (uint64_t)(q * (double)total);
    if ((double)need < q * (double)total || !need) need++; /* rounded up, at least one call */
    uint64_t seen = 0;
    for (unsigned b = 0; b < MT_COST_BUCKETS; b++) {
        seen += atomic_load_explicit(&sp->n[b], memory_order_relaxed);
        if (seen >= need) return mt_cost_bucket_end(b);
    }
    return mt_cost_bucket_end(MT_COST_BUCKETS - 1);
}

#endif
