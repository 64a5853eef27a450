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

/* ---- mapped VMM ranges, ordered by start (ranges.c) --------------------------------------- */
typedef struct mt_range {
    uint64_t start, end, handle;
    uint64_t serial; /* set by mt_ranges_insert: unique among the ranges a set ever held */
    uint32_t context;
    int32_t device;
} mt_range;

typedef struct mt_range_set mt_range_set;

mt_range_set *mt_ranges_new(void);
void mt_ranges_free(mt_range_set *s);
size_t mt_ranges_count(const mt_range_set *s);
/* Adds a copy of r; returns its id (valid until it is removed), or -1 when out of memory. */
long mt_ranges_insert(mt_range_set *s, const mt_range *r);
void mt_ranges_remove(mt_range_set *s, uint32_t id);
mt_range *mt_ranges_get(mt_range_set *s, uint32_t id); /* NULL when id is not in the set */
/* The ids of the ranges overlapping [a, b) (start < b, end > a), in start order, into *ids (grown
 * as needed, capacity *cap). Returns the count, -1 when out of memory. */
long mt_ranges_overlapping(mt_range_set *s, uint64_t a, uint64_t b, uint32_t **ids, size_t *cap);

/* ---- members of CUDA contexts (ctx_members.c) ---------------------------------------------- */
typedef struct mt_ctx_member {
    uint64_t a, b, c; /* what the owner needs to find the member again, with a serial number */
} mt_ctx_member;

typedef struct mt_ctx_list {
    mt_ctx_member *v;
    size_t n, cap;
    uint64_t live; /* members that joined and did not leave */
} mt_ctx_list;

typedef struct mt_ctx_registry {
    mt_u64map index; /* context -> a: index in lists, b: 1 */
    mt_ctx_list *lists;
    size_t n_lists, cap_lists;
    int have_last; /* the last context looked up, and its list */
    uint32_t last_ctx;
    size_t last_ix;
} mt_ctx_registry;

/* Does member m still belong to context ctx? (compaction asks) */
typedef int (*mt_ctx_still_fn)(void *arg, uint32_t ctx, mt_ctx_member m);
int mt_ctx_join(mt_ctx_registry *r, uint32_t ctx, mt_ctx_member m, mt_ctx_still_fn still,
                void *arg); /* -1 when out of memory */
void mt_ctx_leave(mt_ctx_registry *r, uint32_t ctx);
/* Hands over the context's list (malloc'd, caller frees): every member that may still belong,
 * some perhaps gone or repeated. The context starts empty again. */
mt_ctx_member *mt_ctx_take(mt_ctx_registry *r, uint32_t ctx, size_t *n);
void mt_ctx_registry_destroy(mt_ctx_registry *r);

/* Kinds whose bytes are "in use" on their slot (device bytes, or host bytes for host kinds). */
static inline int mt_kind_counts(unsigned kind)
{
    switch (kind) {
    case MT_KIND_DEVICE: case MT_KIND_PITCH: case MT_KIND_ASYNC: case MT_KIND_MANAGED:
    case MT_KIND_VMM_PHYSICAL: case MT_KIND_DRIVER: case MT_KIND_HOST_PINNED:
    case MT_KIND_HOST_REGISTERED:
        return 1;
    default:
        return 0;
    }
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
/* The same for every prefix at once, in one walk: lists[k] gets the entries with prefix k
 * (k < n; entries with a larger prefix are left out). -1 when out of memory. */
int mt_stack_lists_by_prefix(const mt_u64map *m, mt_stack_list *lists, size_t n);

/* ---- reconciliation (breakdown.c) --------------------------------------------------------------- */
/* b is filled from usage slot u (a GPU device) at time_rel (since start) and from the live
 * lifetimes given to mt_breakdown_add (those of other devices are passed over); mt_breakdown_end
 * finishes it. -1 when out of memory (the owner list is then short). */
typedef struct mt_breakdown_acc {
    mt_breakdown *b; /* NULL: not begun, or ended */
    mt_frames *f;
    int32_t device;
    uint64_t pool_reserved;
    mt_u64map owners; /* owner name pointer -> a: bytes, b: count */
} mt_breakdown_acc;
void mt_breakdown_begin(mt_breakdown_acc *acc, mt_breakdown *b, mt_frames *f, const mt_usage *u,
                        uint64_t time_rel);
void mt_breakdown_add(mt_breakdown_acc *acc, const mt_lifetime *l);
int mt_breakdown_end(mt_breakdown_acc *acc);
/* Sets the process total from the last sample at or before b->time_ns and the remainder. */
void mt_breakdown_set_process(mt_breakdown *b, const mt_sample_point *s, size_t n);
#endif
