/* mix64.h — the one 64-bit mixer of the recorder's hashes (splitmix64's finalizer): keys and
 * tags of the unwinder's memos, the Python line cache and signature, the recorder's leaf memo.
 * A bijection, so distinct inputs stay distinct; what it adds is that every output bit depends on
 * every input bit. Private to src/record. */
#ifndef MT_RECORD_MIX64_H
#define MT_RECORD_MIX64_H

#include <stdint.h>

static inline uint64_t mt_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
