/* unwind_cache.h — process-wide pc -> mt_unwind_rule cache shared by every thread.
 * Private to src/record; design and slot layout in unwind_cache.c. Reads never lock (they are
 * inlined here, on the walker's per-frame path); an insert that races another is dropped. */
#ifndef MT_RECORD_UNWIND_CACHE_H
#define MT_RECORD_UNWIND_CACHE_H

#include <stdatomic.h>
#include <stdint.h>

#include "hash.h"
#include "unwind_rule.h"

#define MT_RULE_CACHE_BITS 14 /* 16384 slots = 256 KiB */
#define MT_RULE_CACHE_WAYS 4
#define MT_RULE_PC_MASK ((1ull << 48) - 1)

typedef struct mt_rule_slot {
    _Atomic uint64_t key;  /* generation << 48 | pc */
    _Atomic uint64_t rule; /* mt_rule_to_word(); 0 = empty */
} mt_rule_slot;

/* Defined in unwind_cache.c; hidden so no other object of the process can see it. */
extern mt_rule_slot mt_rule_cache_slots[1u << MT_RULE_CACHE_BITS]
    __attribute__((visibility("hidden")));

/* First slot of pc's set of MT_RULE_CACHE_WAYS slots (Fibonacci hashing). */
static inline unsigned mt_rule_cache_set(uintptr_t pc)
{
    uint64_t h = (uint64_t)pc * MT_GOLDEN64;
    return (unsigned)(h >> (64 - MT_RULE_CACHE_BITS)) & ~(unsigned)(MT_RULE_CACHE_WAYS - 1);
}

/* 1 and *rule set when pc is cached, else 0. Lock-free: a seqlock read of one slot. */
static inline int mt_rule_cache_get(uintptr_t pc, mt_unwind_rule *rule)
{
    if (pc - 1 >= MT_RULE_PC_MASK) return 0; /* pc 0 (empty slots hold it) or > 48 bits */
    mt_rule_slot *set = &mt_rule_cache_slots[mt_rule_cache_set(pc)];
    for (int i = 0; i < MT_RULE_CACHE_WAYS; i++) {
        uint64_t k1 = atomic_load_explicit(&set[i].key, memory_order_acquire);
        if ((k1 & MT_RULE_PC_MASK) != pc) continue;
        uint64_t w = atomic_load_explicit(&set[i].rule, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        uint64_t k2 = atomic_load_explicit(&set[i].key, memory_order_relaxed);
        if (k1 != k2 || w == 0) return 0; /* being rewritten, or pc 0 of an empty slot */
        *rule = mt_rule_from_word(w);
        return 1;
    }
    return 0;
}

/* Remembers the rule for pc (may evict another pc). */
void mt_rule_cache_put(uintptr_t pc, mt_unwind_rule rule);

#endif
