/* unwind_memo.h — per-thread memo of the last walk, so that the unchanged outer part of a stack
 * is validated instead of unwound again. Private to src/record.
 *
 * Why: on one thread consecutive GPU allocations share most of their stack (main, the Python
 * interpreter loop, the training step...). A step of the walk is a pure function of
 * (pc, rsp, rbp) and of the stack words it loads; so when the walk reaches a frame whose
 * (pc, rsp, rbp) equal those of a step of the previous walk, and every stack word that walk loaded
 * from there on still holds the same value, the rest of the walk would repeat the previous one
 * exactly. Checking that takes independent loads (no rule lookups, no dependent chain), ~1 ns a
 * frame instead of ~7.
 *
 * One step (72 bytes): the state before it, the two stack words it loaded, and its rule.
 *   +------+------+------+--------+------+--------+------+----------+
 *   | pc   | sp   | bp   | ra_adr | ra   | bp_adr | bp'  | bp_known |
 *   +------+------+------+--------+------+--------+------+----------+
 *   pc: the address looked up (exact for the first step, return address - 1 after);
 *   bp_adr = 0: the rule did not load rbp.
 */
#ifndef MT_RECORD_UNWIND_MEMO_H
#define MT_RECORD_UNWIND_MEMO_H

#include <stdint.h>

#include "memtrace/record.h"
#include "unwind_rule.h"

/* Steps one memo holds: max frames plus a generous skip; longer walks are not memoized. */
#define MT_MEMO_STEPS (MT_MAX_FRAMES + 32)

#define MT_BP_KNOWN 1u
#define MT_BP_IRRELEVANT 2u

typedef struct mt_walk_step {
    uintptr_t pc, sp, bp;
    uintptr_t ra_addr, ra;
    uintptr_t bp_addr, bp_val;
    uintptr_t bp_known; /* MT_BP_KNOWN: rbp holds a known value; MT_BP_IRRELEVANT: no later
                           step reads it before reloading it (set after the walk, mark_rbp_use) */
    mt_unwind_rule rule; /* the rule that took this frame to its caller (see rule_at_step) */
} mt_walk_step;

typedef enum mt_walk_end {
    MT_WALK_OUTERMOST = 0, /* reached the outermost frame: not truncated */
    MT_WALK_STOPPED = 1,   /* could not go on (no rule, unknown code, bounds) */
    MT_WALK_LIMIT = 2,     /* there were callers left but the caller wanted no more */
} mt_walk_end;

/* A remembered walk. Two views of it, in one allocation:
 *   - the steps, as above: what a walk that matches part of it (walk() in unwind.c) follows;
 *   - the check: what mt_unwind reads to decide that the whole walk holds again, nothing more.
 *     It is built from the steps when the walk is stored (memo_seal, unwind.c) and packed so that
 *     a typical stack's check spans ~12 cache lines instead of the steps' ~50. Why it matters:
 *     in a training step the program evicts the memo between two allocations from the same call
 *     site, and each line is a miss (the check was ~0.6 us an allocation on the GPU machine).
 *
 * Layout (cap = steps it has room for; all offsets from the block's `data`):
 *
 *   +----------------+----------------+---------------+---------------+--------------------+
 *   | ra[cap]        | bp_val[cap]    | ra_off[cap]   | bp_off[cap]   | steps[cap]         |
 *   | uint64 each    | uint64 each    | uint32 each   | uint32 each   | mt_walk_step each  |
 *   +----------------+----------------+---------------+---------------+--------------------+
 *   ra[k]:     step k's return address, as loaded from sp0 + ra_off[k]; also the walk's output
 *   bp_val[j]: the j-th rbp word the check compares (of nbp), loaded from sp0 + bp_off[j]; a
 *              saved rbp that no later step reads is not compared (see mark_rbp_use)
 * Offsets are from the walk's starting rsp (sp0), which a match requires equal: every word was
 * within this thread's stack when the walk loaded it, so it still is, and the check needs no
 * bounds test. */
typedef struct mt_walk_memo {
    uint64_t id; /* names its current content (mt_unwind_keyed's walk_id); new at every change */
    int n;   /* steps; -1 = not usable (walk longer than MT_MEMO_STEPS); 0 = none yet */
    int cap; /* steps it has room for */
    mt_walk_end end;
    int nbp;                    /* rbp words in the check */
    uintptr_t pc0, sp0, bp0;    /* the first step's state, copied for the check */
    uintptr_t bp0_known;        /* its bp_known */
    mt_walk_step *steps;        /* into data, after the check */
    unsigned char data[] __attribute__((aligned(16)));
} mt_walk_memo;

static inline uint64_t *mt_memo_ra(const mt_walk_memo *m)
{
    return (uint64_t *)(uintptr_t)m->data;
}
static inline uint64_t *mt_memo_bp_val(const mt_walk_memo *m)
{
    return mt_memo_ra(m) + m->cap;
}
static inline uint32_t *mt_memo_ra_off(const mt_walk_memo *m)
{
    return (uint32_t *)(mt_memo_bp_val(m) + m->cap);
}
static inline uint32_t *mt_memo_bp_off(const mt_walk_memo *m)
{
    return mt_memo_ra_off(m) + m->cap;
}

/* The calling thread's memos: earlier walks, found by a tag made from the walk's starting rsp and
 * a caller-given key (mt_unwind_keyed); MT_MEMO_SETS sets of MT_MEMO_ASSOC ways, the set chosen by
 * the tag, the least recently used way of a set replaced. Eight ways: with 4, forty call sites
 * overflowed one of the 32 sets in ~1 process in 4 (birthday odds), and a set holding more sites
 * than ways, visited in a cycle, misses on every one of them under LRU.
 *
 * Why several, and why keyed: a training step allocates from a few dozen call sites, one after
 * the other, so the previous walk shares just the outermost frames with the current one, and the
 * ~30 frames below are stepped by rule, each rule fetched from a shared table that the program
 * evicts between allocations (~30 ns a frame, measured in PyTorch). The same call site one step
 * earlier left the same frames at the same addresses: its memo, found by the tag, is read
 * sequentially (prefetchable) and validates the whole walk.
 * Why associative, and why more than one walk per tag: the recorder keys walks by the innermost
 * Python frame (code object and line), and one line allocates from several native paths
 * (`relu(conv(x))`: the convolution's output and the activation's, same depth); cifar.py has ~40
 * allocating call sites per step. With 16 direct-mapped ways (the previous design) sites evicted
 * each other and ~10 frames per walk were stepped by rule. Now every way of the set whose tag
 * matches is tried as a whole (mt_unwind's fast path), and a new path goes to another way instead
 * of replacing its sibling. The check stays exact (see above): a wrong or stale way only costs
 * speed.
 *
 * The spare, where a walk is recorded, has room for MT_MEMO_STEPS steps (15 KiB) and is kept; a
 * recorded walk is copied into a way of its own size (~4 KiB for a 40-frame stack, so ~160 KiB
 * for the 40 sites of a training step, of which the checks are ~1 KiB each; up to 256 ways).
 * All are freed at thread exit. NULL from acquire: no memory, thread exiting, or already in use
 * on this thread (a signal handler unwinding inside an unwind). Release with
 * mt_walk_memo_release. */
#define MT_MEMO_SETS 32
#define MT_MEMO_ASSOC 8
#define MT_MEMO_WAYS (MT_MEMO_SETS * MT_MEMO_ASSOC)
typedef struct mt_walk_memos {
    mt_walk_memo *way[MT_MEMO_WAYS]; /* NULL until used */
    uint64_t tag[MT_MEMO_WAYS];      /* tag of the walk each way holds */
    uint32_t used[MT_MEMO_WAYS];     /* `clock` at its last use: the set's smallest is replaced */
    uint32_t clock;
    uint64_t next_id;                /* last memo id given out on this thread */
    mt_walk_memo *spare;             /* where walks are recorded; NULL = not allocated yet */
    int last;                        /* way holding the latest walk; -1 = none yet */
    int busy;
} mt_walk_memos;

/* A zeroed memo with room for cap steps (n = 0: holds no walk), or NULL when out of memory. */
mt_walk_memo *mt_walk_memo_new(int cap);
/* A copy of m's n steps (its id and end too) in a memo just large enough, or NULL. Its check is
 * not built: seal it. */
mt_walk_memo *mt_walk_memo_copy(const mt_walk_memo *m);

mt_walk_memos *mt_walk_memo_acquire(void);
static inline void mt_walk_memo_release(mt_walk_memos *m)
{
    m->busy = 0;
}

#endif
