/* u64map.h — uint64 -> two uint64 values, open addressing with linear probing (u64map.c). Used by
 * the compactor (per-stack aggregates, lifetimes by serial, category caches) and the symbolizer
 * (instruction pointers). It never deletes, so it needs no tombstones; the load factor stays at
 * most 1/2, so probes stay short even with clustered keys (dense stack ids, return addresses). */
#ifndef MT_UTIL_U64MAP_H
#define MT_UTIL_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_u64map_slot {
    uint64_t key, a, b;
    uint8_t used;
} mt_u64map_slot;

typedef struct mt_u64map {
    mt_u64map_slot *slots;
    size_t cap, len; /* cap is 0 or a power of two; len <= cap / 2 */
} mt_u64map;

/* Slot for key, inserted zeroed if missing. NULL when out of memory. The pointer is valid until
 * the next insertion. A zeroed mt_u64map is an empty one. */
mt_u64map_slot *mt_u64map_upsert(mt_u64map *m, uint64_t key);
mt_u64map_slot *mt_u64map_find(const mt_u64map *m, uint64_t key);
void mt_u64map_clear(mt_u64map *m);
void mt_u64map_destroy(mt_u64map *m);

#endif
