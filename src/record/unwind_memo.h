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

#include <stddef.h>
#include <stdint.h>

#include "hash.h"
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
    MT_WALK_BOUNDARY = 3,  /* reached a frame in the stop range (mt_unwind_stop_at): the rest of
                              the stack is the caller's to describe (the Python frames) */
} mt_walk_end;

/* A remembered walk. Two views of it, in one allocation:
 *   - the steps, as above: what a walk that matches part of it (walk() in unwind.c) follows;
 *   - the check: what mt_unwind reads to decide that the whole walk holds again, nothing more:
 *     where each word the walk loaded lies (2 bytes a word) and one sum over their values, next
 *     to the header. It is built from the steps when the walk is stored (memo_seal, unwind.c).
 *
 * Why it is laid out for latency: in a training step the program evicts the memo and most of the
 * stack between two allocations from the same call site, so each cache line is a miss, and what
 * costs is the number of misses that wait on each other: the set's tags, then the memo's header,
 * then where its words are, then the words: the chain of dependent misses is what this layout
 * shortens (docs/performance.md: fewer lines alone saved nothing). The header, the caller's slot and the word offsets are one run of lines
 * from the 64-byte-aligned start, fetched together (mt_walk_memo_prefetch) as soon as the memo's
 * address is known; the return addresses, read only when the frames are wanted, come after.
 *
 *   +--------+----------+--------------------------+--------------+----------------------+
 *   | header | slot     | word[2 * cap], padded    | ra[cap]      | steps[cap]           |
 *   |        | 64 bytes | uint16 each, to 8 bytes  | uint64 each  | mt_walk_step each    |
 *   +--------+----------+--------------------------+--------------+----------------------+
 *   slot:    MT_UNWIND_SLOT_BYTES for the caller (mt_unwind_slot), zeroed whenever the memo's
 *            content (and id) changes
 *   word[i]: where the check's i-th word lies, in 8-byte words above the walk's starting rsp
 *            (sp0), in the order the walk loaded them: each step's return address, and its saved
 *            rbp when a later step reads it (see mark_rbp_use); nwords of them
 *   check:   the sum over i of value(i) * (MT_CHECK_C0 + i * MT_CHECK_DC), mod 2^64, with the
 *            values the recorded walk loaded
 *   ra[k]:   step k's return address: the walk's output
 * Every factor is odd, so a change of any one word always changes the sum; several changes that
 * cancel out need a 64-bit coincidence (the same bar as the Python signature the recorder keys
 * by). Offsets are from sp0, which a match requires equal: every word was within this thread's
 * stack when the walk loaded it, so it still is, and the check needs no bounds test. A word more
 * than 512 KiB above sp0 leaves the memo without a whole check (its steps still serve walk()). */
#define MT_CHECK_C0 MT_GOLDEN64
#define MT_CHECK_DC 0xd6e8feb86659fd92ull /* even: every factor stays odd */
#define MT_CHECK_MAX_WORD 0xffffu

typedef struct mt_walk_memo {
    uint64_t id;                /* names its content (walk_id): a hash of its output, set by the
                                   seal (unwind.c), so a walk done again the same keeps it */
    uint64_t check;             /* the sum the check's words must give */
    uintptr_t pc0, sp0, bp0;    /* the first step's state, copied for the check */
    uintptr_t bp0_known;        /* its bp_known */
    int n;                      /* steps; -1: unusable (over MT_MEMO_STEPS); 0: none yet */
    int cap;                    /* steps it has room for */
    int nwords;                 /* words in the check; -1: no whole check (see above) */
    mt_walk_end end;
    mt_walk_step *steps;        /* into data, after the return addresses */
    unsigned char slot[MT_UNWIND_SLOT_BYTES] __attribute__((aligned(8)));
    unsigned char data[] __attribute__((aligned(16)));
} mt_walk_memo;

/* Bytes of word offsets for cap steps, rounded up so that what follows stays 8-byte aligned. */
static inline size_t mt_memo_words_bytes(int cap)
{
    return ((size_t)cap * 2 * sizeof(uint16_t) + 7) & ~(size_t)7;
}
static inline uint16_t *mt_memo_word(const mt_walk_memo *m)
{
    return (uint16_t *)(uintptr_t)m->data;
}
static inline uint64_t *mt_memo_ra(const mt_walk_memo *m)
{
    return (uint64_t *)(uintptr_t)(m->data + mt_memo_words_bytes(m->cap));
}

/* Starts fetching what a check of m reads from the memo: the header, slot and word offsets of a
 * walk up to ~110 words (nothing is read from m, so the lines come in parallel). */
static inline void mt_walk_memo_prefetch(const mt_walk_memo *m)
{
    const char *p = (const char *)m;
    /* Unrolled: the prefetch of a set (mt_unwind_prefetch) runs this for each of its 16 ways, and
     * a loop's own counting was half its instructions (~30 ns a capture on the H200). */
#pragma GCC unroll 6
    for (int line = 0; line < 6; line++)
        __builtin_prefetch(p + 64 * line);
}

/* The calling thread's memos: earlier walks, found by a tag made from the walk's starting rsp and
 * a caller-given key (mt_unwind_keyed); MT_MEMO_SETS sets of MT_MEMO_ASSOC ways, the set chosen by
 * the key (by the tag for key 0, so that unkeyed walks from different depths spread), the least
 * recently used way of a set replaced. 64 sets since the set follows the key alone (all native
 * paths of one Python line share a set).
 *
 * Sixteen ways (2026-11-26; eight before, four before that): a set holding more walks than ways,
 * visited in a cycle, misses on every one of them under LRU, and both ways that happens were seen
 * on the GPU. One key's walks all share its set, and a PyTorch line can reach the allocator along
 * several native paths from several depths: ResNet-18's batch-norm and convolution lines, called
 * from the stem, the blocks and the blocks' downsample modules (three depths of the C stack), need
 * 6-9 ways each, so every ResNet-18 process did ~2% of its walks again (98.0% whole, ~1 435 walks
 * stored in a run). And which keys share a set is drawn anew in every process (the keys hash code
 * objects' addresses): two lines with 4-7 paths each in one set made a process do 3-4% of its
 * walks again, 12% once (2 300-8 700 walks stored; 5 of 40 processes in five H200 leases), its
 * allocations then costing 15-45% more. (This comment noted before, unexplained, about one
 * cifar.py process in 20 matching 97-99% whole; the simulation below finds no set that cifar.py's
 * call sites overflow, so that one may have another cause: not re-measured.) Now the recorder
 * folds the capture's depth on the C stack into the Python key (stacks.c), which spreads a line's
 * depths over sets and keeps the ways a prefetch fetches per key few, and a set has 16 ways: 38
 * processes since, in four leases, all 99.8% whole with 116-136 walks stored and none replaced.
 * scripts/memo-sim.py replays the committed GPU traces' allocations against a layout for 1 000
 * draws of the hash: with 8 ways every ResNet-18 process and 10-22% of the GPT-2-like ones (plain,
 * autocast) overflow a set; with 16 ways and the depth, none. A lookup reads the set's 16 tags and
 * ways (four lines, in parallel). Those lines are touched by every capture and stay cached: a
 * per-key copy of the check in front of the sets, one line fewer to wait for on paper, found
 * 99.7% of ResNet-18's walks and saved nothing measurable (docs/performance.md, "The front").
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
 * allocating call sites per step. With 16 direct-mapped ways (the first design) sites evicted
 * each other and ~10 frames per walk were stepped by rule. Now every way of the set whose tag
 * matches is tried as a whole (mt_unwind's fast path), and a new path goes to another way instead
 * of replacing its sibling. The check stays exact (see above): a wrong or stale way only costs
 * speed.
 *
 * The spare, where a walk is recorded, has room for MT_MEMO_STEPS steps (15 KiB) and is kept; a
 * recorded walk is copied into a way of its own size (~4 KiB for a 40-frame stack, so ~160 KiB
 * for the 40 sites of a training step, of which the checks are ~100 bytes each; up to 1 024
 * ways, only those used are allocated). All are freed at thread exit. NULL from acquire: no
 * memory, thread exiting, or already in use on this thread (a signal handler unwinding inside an
 * unwind). Release with mt_walk_memo_release. */
#define MT_MEMO_SET_BITS 6
#define MT_MEMO_SETS (1 << MT_MEMO_SET_BITS)
#define MT_MEMO_ASSOC 16
#define MT_MEMO_WAYS (MT_MEMO_SETS * MT_MEMO_ASSOC)
typedef struct mt_walk_memos {
    mt_walk_memo *way[MT_MEMO_WAYS]; /* NULL until used */
    uint64_t tag[MT_MEMO_WAYS];      /* tag of the walk each way holds */
    uint64_t key[MT_MEMO_WAYS];      /* and its key, for mt_unwind_prefetch (which has no rsp) */
    uint32_t used[MT_MEMO_WAYS];     /* `clock` at its last use: the set's smallest is replaced */
    uint32_t clock;
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
/* The calling thread's memos to look at without using them (a prefetch), or NULL. */
mt_walk_memos *mt_walk_memo_peek(void);
static inline void mt_walk_memo_release(mt_walk_memos *m)
{
    m->busy = 0;
}

#endif
