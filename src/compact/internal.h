/* Internals of the compactor shared by its .c files (not part of the public API). */
#ifndef MT_COMPACT_INTERNAL_H
#define MT_COMPACT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "memtrace/compact.h"

/* splitmix64 finalizer: a cheap, well-mixed hash of a 64-bit key. */
static inline uint64_t mt_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* ---- u64map: uint64 key -> two uint64 values, open addressing, linear probing (u64map.c) ---- */
typedef struct mt_u64map_slot {
    uint64_t key, a, b;
    uint8_t used;
} mt_u64map_slot;

typedef struct mt_u64map {
    mt_u64map_slot *slots;
    size_t cap, len; /* cap is 0 or a power of two; len <= cap / 2 */
} mt_u64map;

/* Slot for key, inserted zeroed if missing. NULL when out of memory. The pointer is valid until
 * the next insertion. */
mt_u64map_slot *mt_u64map_upsert(mt_u64map *m, uint64_t key);
mt_u64map_slot *mt_u64map_find(const mt_u64map *m, uint64_t key);
void mt_u64map_clear(mt_u64map *m);
void mt_u64map_destroy(mt_u64map *m);

/* ---- live table: live lifetimes keyed by (device, family, address) (live.c) ---------------- */
typedef struct mt_live_table {
    mt_lifetime *slots; /* family == 0xff marks an empty slot */
    size_t cap, len;
} mt_live_table;

#define MT_LIVE_EMPTY 0xff

mt_lifetime *mt_live_find(const mt_live_table *t, int32_t device, uint8_t family, uint64_t addr);
/* Inserts a copy of l (its key must not be present). -1 when out of memory. */
int mt_live_insert(mt_live_table *t, const mt_lifetime *l);
/* Removes the slot p points into (from mt_live_find). */
void mt_live_remove(mt_live_table *t, mt_lifetime *p);
void mt_live_destroy(mt_live_table *t);

/* Kinds whose bytes are "in use" on their slot (device bytes, or host bytes for host kinds). */
static inline int mt_kind_counts(unsigned kind)
{
    switch (kind) {
    case MT_KIND_DEVICE: case MT_KIND_PITCH: case MT_KIND_ASYNC: case MT_KIND_MANAGED:
    case MT_KIND_VMM_PHYSICAL: case MT_KIND_DRIVER: case MT_KIND_HOST_PINNED:
    case MT_KIND_HOST_REGISTERED: case MT_KIND_TENSOR:
        return 1;
    default:
        return 0;
    }
}

/* How an allocation's bytes count on its device, from its kind and flags:
 *   IN_USE    device (or host) bytes in use: what the peak is the maximum of;
 *   RESERVED  a PyTorch segment whose tensors are in the trace (record --tensors): the tensors
 *             are what is in use, the segment is the allocator's reservation around them;
 *   NONE      address space, mappings, pool bookkeeping, graph memory nodes: tracked, never
 *             counted. */
enum { MT_COUNT_NONE = 0, MT_COUNT_IN_USE = 1, MT_COUNT_RESERVED = 2 };

static inline int mt_counting(unsigned kind, unsigned flags)
{
    if ((flags & (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED)) ==
        (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED))
        return MT_COUNT_RESERVED;
    /* a graph memory node: an address fixed at capture, backed from the graph memory pool only
     * while the graph runs (the pool's reservation is what is counted, as POOL_RESERVED) */
    if (kind == MT_KIND_ASYNC && (flags & MT_EF_CAPTURED)) return MT_COUNT_NONE;
    return mt_kind_counts(kind) ? MT_COUNT_IN_USE : MT_COUNT_NONE;
}

static inline int mt_kind_is_host(unsigned kind)
{
    return kind == MT_KIND_HOST_PINNED || kind == MT_KIND_HOST_REGISTERED;
}

/* ---- stack-stat lists ----------------------------------------------------------------------- */
/* Key used for per-stack aggregates: the driver flag sits above the 32-bit stack id. */
static inline uint64_t mt_stack_key(uint32_t stack, int driver)
{
    return (uint64_t)stack | ((uint64_t)(driver != 0) << 32);
}
/* Turns the entries of m whose key has `prefix` in bits 40.. (prefix = ~0 for all) into a
 * sorted list. -1 when out of memory. */
int mt_stack_list_from_map(const mt_u64map *m, uint64_t prefix, mt_stack_list *out);

/* ---- reconciliation (breakdown.c) --------------------------------------------------------------- */
/* Fills b from the tracker's live set on usage slot u (a GPU device) at time_rel (since start). */
int mt_breakdown_snapshot(mt_breakdown *b, mt_frames *f, const mt_tracker *t, const mt_usage *u,
                          uint64_t time_rel);
/* Sets the process total from the last sample at or before b->time_ns and the remainder. */
void mt_breakdown_set_process(mt_breakdown *b, const mt_sample_point *s, size_t n);
#endif
