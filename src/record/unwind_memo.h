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
 * One step (64 bytes): the state before it and the two stack words it loaded.
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

typedef struct mt_walk_step {
    uintptr_t pc, sp, bp;
    uintptr_t ra_addr, ra;
    uintptr_t bp_addr, bp_val;
    uintptr_t bp_known;
    mt_unwind_rule rule; /* the rule that took this frame to its caller (see rule_at_step) */
} mt_walk_step;

typedef enum mt_walk_end {
    MT_WALK_OUTERMOST = 0, /* reached the outermost frame: not truncated */
    MT_WALK_STOPPED = 1,   /* could not go on (no rule, unknown code, bounds) */
    MT_WALK_LIMIT = 2,     /* there were callers left but the caller wanted no more */
} mt_walk_end;

typedef struct mt_walk_memo {
    int n; /* steps; -1 = not usable (walk longer than MT_MEMO_STEPS) */
    mt_walk_end end;
    mt_walk_step steps[MT_MEMO_STEPS];
} mt_walk_memo;

/* The calling thread's pair of memos (previous walk, walk being recorded), allocated on first
 * use and freed at thread exit. NULL when unavailable: no memory, thread exiting, or already in
 * use on this thread (a signal handler unwinding inside an unwind). Release with
 * mt_walk_memo_release after the walk, after swapping if the new one should be kept. */
typedef struct mt_walk_memos {
    mt_walk_memo *prev, *next;
    int busy;
} mt_walk_memos;

mt_walk_memos *mt_walk_memo_acquire(void);
static inline void mt_walk_memo_release(mt_walk_memos *m)
{
    m->busy = 0;
}

#endif
