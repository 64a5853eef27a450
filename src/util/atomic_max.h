/* atomic_max.h — raise a shared maximum from any thread, without a lock.
 *
 *   mt_atomic_max_u64(p, v)   *p = max(*p, v); relaxed: a statistic, ordered with nothing else
 *
 * Only a value above the current maximum reaches the compare-and-swap, so a maximum that has
 * settled costs one load. Header-only; no stage's data lives here. */
#ifndef MT_UTIL_ATOMIC_MAX_H
#define MT_UTIL_ATOMIC_MAX_H

#include <stdatomic.h>
#include <stdint.h>

static inline void mt_atomic_max_u64(_Atomic uint64_t *p, uint64_t v)
{
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
    while (v > old &&
           !atomic_compare_exchange_weak_explicit(p, &old, v, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

#endif
