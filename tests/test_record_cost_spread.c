/* The recorder's cost spread (src/record/cost_spread.h): every time falls in a bucket no wider
 * than 12.5% of it, and the quantiles the exit notes print are the bounds of the right buckets. */
#include <criterion/criterion.h>
#include <string.h>

#include "record/cost_spread.h"

static uint64_t bucket_start(unsigned b)
{
    return b ? mt_cost_bucket_end(b - 1) : 0;
}

Test(cost_spread, every_time_in_a_narrow_bucket_in_order)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    unsigned last = 0;
    for (uint64_t ns = 0; ns < 100000; ns++) { /* every small time, in order */
        unsigned b = mt_cost_bucket(ns);
        cr_assert_geq(b, last, "%llu ns", (unsigned long long)ns);
        last = b;
        cr_assert(bucket_start(b) <= ns && ns < mt_cost_bucket_end(b), "%llu ns in bucket %u",
                  (unsigned long long)ns, b);
    }
    for (int i = 0; i < 100000; i++) { /* and times up to ~2^49 ns at random */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t ns = x >> (15 + i % 49); /* 15..63 */
        unsigned b = mt_cost_bucket(ns);
        if (b == MT_COST_BUCKETS - 1) continue; /* open-ended */
        uint64_t lo = bucket_start(b), hi = mt_cost_bucket_end(b);
        cr_assert(lo <= ns && ns < hi, "%llu ns in [%llu, %llu)", (unsigned long long)ns,
                  (unsigned long long)lo, (unsigned long long)hi);
        if (ns >= 8) cr_assert_leq(hi - lo, lo / 8, "bucket [%llu, %llu) too wide",
                                   (unsigned long long)lo, (unsigned long long)hi);
    }
    cr_assert_eq(mt_cost_bucket(UINT64_MAX), MT_COST_BUCKETS - 1);
}

Test(cost_spread, quantiles_name_the_buckets_where_fractions_are_reached)
{
    static mt_cost_spread sp;
    memset(&sp, 0, sizeof sp);
    cr_assert_eq(mt_cost_quantile_end(&sp, 0.5), 0, "nothing counted");
    /* 900 calls of 200 ns, 90 of 1 us, 10 of 50 us: an average of 1.58 us says none of them */
    atomic_fetch_add(&sp.n[mt_cost_bucket(200)], 900);
    atomic_fetch_add(&sp.n[mt_cost_bucket(1000)], 90);
    atomic_fetch_add(&sp.n[mt_cost_bucket(50000)], 10);
    uint64_t m = mt_cost_quantile_end(&sp, 0.5), p90 = mt_cost_quantile_end(&sp, 0.9),
             p99 = mt_cost_quantile_end(&sp, 0.99), all = mt_cost_quantile_end(&sp, 1.0);
    cr_expect(m > 200 && m <= 225, "median under %llu", (unsigned long long)m);
    cr_expect_eq(p90, m, "900 of 1000 are 200 ns");
    cr_expect(p99 > 1000 && p99 <= 1125, "99%% under %llu", (unsigned long long)p99);
    cr_expect(all > 50000 && all <= 56250, "all under %llu", (unsigned long long)all);
    cr_expect_eq(mt_cost_quantile_end(&sp, 0.901), p99, "the 901st call is a 1 us one");
}
