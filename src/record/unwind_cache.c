/* unwind_cache.c — the unwinder's rule cache: a fixed, process-wide, 4-way set-associative table
 * of pc -> rule, read without locks by any number of threads.
 *
 * Why process-wide and not per thread: rules depend only on the code, so every thread of a
 * PyTorch process (dozens) shares the same few thousand return addresses; and large __thread
 * arrays in a library loaded by dlopen (CUDA_INJECTION64_PATH) would live in dynamic TLS anyway.
 *
 * One slot (16 bytes):
 *
 *   byte 0                    6        8                        16
 *        +--------------------+--------+------------------------+
 *        | pc (48 bits)       | gen    | rule (mt_unwind_rule)  |
 *        +--------------------+--------+------------------------+
 *        \------- key (uint64) -------/
 *
 * The key packs the pc with a 16-bit generation that changes on every write of the slot, which
 * makes the slot a tiny seqlock: a writer first claims the slot by CAS-ing its key from an even
 * generation to (gen+1, pc 0) — odd = "being written", so no second writer can claim it — stores
 * the rule, then publishes (gen+2, pc). A reader loads
 * the key, the rule, then the key again; it trusts the rule only when both keys are equal and
 * name its pc. A reader therefore never uses a rule that belongs to another pc, even when the
 * slot is rewritten under it (wrap-around would need 32768 rewrites between two loads).
 * Writers that lose the CAS just skip caching: the rule is recomputed on a later miss.
 *
 * The table mt_rule_cache_slots is the only state (global only so that unwind_cache.h can inline
 * the lookup into the walker: ~3 ns per frame saved); it is never freed (the recorder lives as long
 * as the process) and starts all-zero = all empty (a real rule word is never 0).
 */
#include "unwind_cache.h"

/* The table (declared in unwind_cache.h so that lookups inline into the walker). */
mt_rule_slot mt_rule_cache_slots[1u << MT_RULE_CACHE_BITS] __attribute__((aligned(64)));

void mt_rule_cache_put(uintptr_t pc, mt_unwind_rule rule)
{
    if (pc == 0 || pc > MT_RULE_PC_MASK) return;
    mt_rule_slot *set = &mt_rule_cache_slots[mt_rule_cache_set(pc)];
    /* An empty way if there is one, else a victim picked by pc bits (cheap pseudo-random). */
    int way = (int)((pc >> 4) & (MT_RULE_CACHE_WAYS - 1));
    for (int i = 0; i < MT_RULE_CACHE_WAYS; i++) {
        if ((atomic_load_explicit(&set[i].key, memory_order_relaxed) & MT_RULE_PC_MASK) == 0) {
            way = i;
            break;
        }
    }
    mt_rule_slot *s = &set[way];
    uint64_t old = atomic_load_explicit(&s->key, memory_order_relaxed);
    uint64_t gen = old >> 48;
    if (gen & 1) return;                        /* another writer holds this slot */
    uint64_t busy = ((gen + 1) & 0xffff) << 48; /* pc 0: nobody matches it while written */
    if (!atomic_compare_exchange_strong_explicit(&s->key, &old, busy, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return; /* another writer claimed it first */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->rule, mt_rule_to_word(rule), memory_order_relaxed);
    atomic_store_explicit(&s->key, (((gen + 2) & 0xffff) << 48) | pc, memory_order_release);
}
