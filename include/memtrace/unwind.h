/* memtrace/unwind.h — the recorder's native unwinder (src/record/unwind*.c): the protocol between
 * a walk and the caller that remembers what it derived from one (the stack trie's leaf), so a call
 * site that allocates again costs a check, not a walk. Part of the recorder stage (memtrace/record.h
 * includes it); its own header because stacks.c, the tests and the benchmarks use it alone. */
#ifndef MEMTRACE_UNWIND_H
#define MEMTRACE_UNWIND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_MAX_FRAMES 128

/* Return addresses of the calling thread's stack, innermost first, starting `skip` frames above
 * the caller of mt_unwind (skip = 0: the first entry is mt_unwind's caller's return address).
 * Reads only the thread's own stack and mapped unwind tables; never faults. Returns the count;
 * *truncated is set when it stopped for any reason other than reaching the outermost frame. */
int mt_unwind(uint64_t *ips, int max, int skip, int *truncated);
/* The same, with a hint: walks made under the same key from the same stack depth are remembered
 * together, so a call site that allocates again (next training step) validates its earlier walk
 * instead of unwinding. Any key is correct (the result never depends on it); a key that tells call
 * sites apart (the recorder uses the innermost Python frame) makes it fast.
 * *walk_id (may be NULL): nonzero when the calling thread remembers this exact result under that
 * id — an earlier walk with the same id returned the same frames and truncation, so whatever the
 * caller derived from them then still holds; 0 when it is not remembered. */
int mt_unwind_keyed(uint64_t *ips, int max, int skip, int *truncated, uint64_t key,
                    uint64_t *walk_id);
/* The same, for a caller that may not need the frames (the recorder, whose own memo usually
 * knows the stack a walk id stands for): when the thread remembers this walk whole, only
 * *walk_id and *truncated are set and MT_UNWIND_LATER is returned. mt_unwind_recall(walk_id, ...)
 * with the same max and skip then copies those frames, if no other walk ran on this thread in
 * between; it returns -1 (nothing copied) when one did. Otherwise as mt_unwind_keyed.
 * mt_unwind_slot(walk_id): MT_UNWIND_SLOT_BYTES bytes (8-byte aligned) that belong to the
 * thread's latest walk while walk_id names it (NULL otherwise), zero whenever that walk was stored
 * or changed, for what the caller derives from its frames. They sit in the lines the check has
 * just read.
 * Why: every line read at an allocation is a miss in a busy program, and misses that wait on
 * each other add up (see src/record/unwind_memo.h). */
#define MT_UNWIND_LATER (-1)
#define MT_UNWIND_SLOT_BYTES 64
int mt_unwind_keyed_lazy(uint64_t *ips, int max, int skip, int *truncated, uint64_t key,
                         uint64_t *walk_id);
void *mt_unwind_slot(uint64_t walk_id);
/* A walk under `key` is coming on this thread: starts fetching what its check will read, so that
 * the misses overlap with what the caller does meanwhile (the recorder's cudaMallocAsync
 * stand-ins, on a thread without Python frames, before the allocator runs). ~100 prefetches for a
 * set of 16 ways: in front of the Python walk they cost more than they saved (docs/performance.md,
 * "The memo's prefetch"). Does nothing for key 0. */
void mt_unwind_prefetch(uint64_t key);
int mt_unwind_recall(uint64_t walk_id, uint64_t *ips, int max, int skip, int *truncated);
/* Walks stop at the first frame whose pc lies in [lo, hi), after writing it; they count as
 * truncated (nothing says the outermost frame was reached). For the recorder of a Python program:
 * everything above the innermost frame of the interpreter's eval loop is the interpreter running
 * the thread's Python frames, which the recorder reads anyway (src/record/merge_python.c), so the
 * walk and the check of an unchanged walk stop there.
 * Process-wide, set once before the first walk (walks remembered before a change may still end at
 * the old range); lo = hi = 0 (the default) walks to the outermost frame. */
void mt_unwind_stop_at(uintptr_t lo, uintptr_t hi);
/* Finds the main thread's stack bounds from any thread (src/record/main_stack.c), so that the
 * main thread's first walk does not: for it glibc reads /proc/self/maps (0.5-3.7 ms in a PyTorch
 * process). The recorder's writer thread calls it at start-up. 1 when found (or found before). */
int mt_unwind_find_main_stack(void);
/* What the walks cost, totals since the process started. Exact for the calling thread; other
 * threads' last (< 64) walks may not be counted yet. */
typedef struct mt_unwind_totals {
    uint64_t walks;
    uint64_t memo_hits;          /* walks that ended on an earlier walk's frames */
    uint64_t whole_hits;         /* ... of which an earlier walk was the whole result */
    uint64_t keyless;            /* walks without a key (mt_unwind, or key 0) */
    uint64_t keyless_whole_hits; /* ... of which an earlier walk was the whole result */
    uint64_t ways_checked;       /* remembered walks compared as a whole */
    uint64_t rule_steps;         /* frames stepped with a cached or parsed rule */
    uint64_t rule_misses;        /* rule-cache misses (CFI parsed) */
    uint64_t stored;             /* walks remembered (each not held whole by a remembered one) */
    uint64_t evicted;            /* ... of which in place of another call site's walk */
} mt_unwind_totals;
void mt_unwind_stats(mt_unwind_totals *t);

#ifdef __cplusplus
}
#endif
#endif
