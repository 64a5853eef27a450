/* hash.h — the hashing primitives every stage shares (as heaptrack keeps its src/util):
 *
 *   MT_GOLDEN64   2^64 / phi, odd: Fibonacci hashing's multiplier (x * MT_GOLDEN64, high bits
 *                 taken), also a seed that is no small number
 *   mt_mix64      splitmix64's finalizer: a bijection in which every output bit depends on every
 *                 input bit (keys of the recorder's memos, the compactor's maps)
 *
 * Header-only; no stage's data lives here. */
#ifndef MT_UTIL_HASH_H
#define MT_UTIL_HASH_H

#include <stdint.h>

#define MT_GOLDEN64 0x9E3779B97F4A7C15ull

static inline uint64_t mt_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
