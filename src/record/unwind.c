/* unwind.c — mt_unwind: the calling thread's native return addresses, via cached DWARF CFI.
 *
 * Why not backtrace(): glibc's goes through libgcc's _Unwind_Backtrace, ~10 µs for a deep stack;
 * the recorder unwinds on every GPU allocation. Why not frame pointers: libtorch, libpython and
 * most distribution libraries are built without them. So: a minimal CFI walker for x86-64 that
 * follows just rsp, rbp and rip, with every pc's rule memoized (unwind_cache.c), and the CFI
 * parser (unwind_cfi.c) only on a miss.
 *
 * One step, from a frame (pc, rsp, rbp) to its caller:
 *     CFA   = (rule.cfa_reg == rbp ? rbp : rsp) + rule.cfa_off
 *     ra    = *(CFA + 8 * rule.ra_off8)              (CFA - 8 in every compiled frame)
 *     rbp'  = *(CFA + rule.rbp_off) if saved, else rbp unchanged
 *     rsp'  = CFA,   pc' = ra   (looked up at ra - 1: ra may be past the end of a noreturn call)
 *
 * Cheaper still when the stack did not change since an earlier walk of this thread from the same
 * place (one remembered under the same tag, or the previous walk): see unwind_memo.h. The memo is
 * a check, not a guess: it is used only when the frame state and every stack word that earlier
 * walk read from there on are unchanged (word by word for a partial match; for a whole one, by a
 * 64-bit weighted sum that any single changed word alters).
 *
 * Safety: every load is from this thread's own stack, checked against [rsp at entry, stack top)
 * (pthread_getattr_np, once per thread), and the CFA must strictly grow, so the walk can neither
 * fault nor loop. Any rule the walker cannot follow stops it with *truncated = 1.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memtrace/record.h"
#include "hash.h"
#include "unwind_cache.h"
#include "unwind_cfi.h"
#include "unwind_memo.h"
#include "hot_path.h"
#include "main_stack.h"
#include "rare_work.h"

/* This thread's stack, [lo, hi). Fetched on the thread's first mt_unwind; state 0 = not yet,
 * 1 = known, -1 = pthread_getattr_np failed (then every unwind on this thread is empty). */
typedef struct thread_stack {
    uintptr_t lo, hi;
    int state;
} thread_stack;

static __thread thread_stack tls_stack;

/* mt_unwind_stop_at's range: where every walk of the process ends (relaxed: set once, before the
 * first walk). */
static struct {
    _Atomic uintptr_t lo, hi;
} stop_range;

void mt_unwind_stop_at(uintptr_t lo, uintptr_t hi)
{
    if (hi < lo) hi = lo;
    atomic_store_explicit(&stop_range.lo, lo, memory_order_relaxed);
    atomic_store_explicit(&stop_range.hi, hi, memory_order_relaxed);
}

MT_HOT_PATH static int stack_bounds(uintptr_t *lo, uintptr_t *hi)
{
    thread_stack *ts = &tls_stack;
    if (ts->state == 0 && mt_main_stack_holds((uintptr_t)__builtin_frame_address(0), &ts->lo,
                                              &ts->hi)) {
        ts->state = 1; /* the main thread: its bounds found by another thread (main_stack.c) */
    } else if (ts->state == 0) {
        /* once a thread: rare work (rare_work.h). On the main thread glibc reads /proc/self/maps
         * to find the stack: 0.5-3.7 ms in a PyTorch process, uncounted until 2026-11-27 (the
         * first allocation's callback, timed, then read ~0.9 ms) */
        uint64_t rare = mt_rare_begin();
        pthread_attr_t attr;
        void *addr;
        size_t size;
        ts->state = -1;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size > 0) {
                ts->lo = (uintptr_t)addr;
                ts->hi = (uintptr_t)addr + size;
                ts->state = 1;
            }
            pthread_attr_destroy(&attr);
        }
        mt_rare_end(rare, MT_RARE_THREAD);
    }
    *lo = ts->lo;
    *hi = ts->hi;
    return ts->state == 1;
}

/* What the walks cost, for the recorder's self-report (mt_unwind_stats). Each thread counts in its
 * own counters and adds them to the shared ones every STATS_BATCH walks: four locked adds on a line
 * shared by every allocating thread, at every walk, were a measurable part of a walk's cost. */
#define STATS_BATCH 64
#define STATS_FIELDS (sizeof(mt_unwind_totals) / sizeof(uint64_t))
typedef union walk_stats {
    mt_unwind_totals t;
    uint64_t v[STATS_FIELDS];
} walk_stats;

static _Atomic uint64_t unwind_stats[STATS_FIELDS];
static __thread walk_stats tls_stats; /* not yet added to unwind_stats */

static void stats_flush(walk_stats *t)
{
    for (size_t i = 0; i < STATS_FIELDS; i++)
        atomic_fetch_add_explicit(&unwind_stats[i], t->v[i], memory_order_relaxed);
    *t = (walk_stats){0};
}

void mt_unwind_stats(mt_unwind_totals *t)
{
    stats_flush(&tls_stats); /* the calling thread's own are exact; others' lag <= STATS_BATCH */
    walk_stats out;
    for (size_t i = 0; i < STATS_FIELDS; i++)
        out.v[i] = atomic_load_explicit(&unwind_stats[i], memory_order_relaxed);
    *t = out.t;
}

/* The rule at pc: cache, else CFI (and remember it). 0 when pc is in no object. */
static inline int rule_for(uintptr_t pc, mt_unwind_rule *rule, uint32_t *misses)
{
    if (mt_rule_cache_get(pc, rule)) return 1;
    (*misses)++;
    if (mt_cfi_rule_at(pc, rule) != MT_CFI_FOUND) return 0;
    mt_rule_cache_put(pc, *rule);
    return 1;
}

/* Reads the word at addr when [addr, addr+8) lies within [lo, hi). */
static inline int load_word(uintptr_t addr, uintptr_t lo, uintptr_t hi, uintptr_t *out)
{
    if (addr < lo || addr > hi - 8 || (addr & 7)) return 0;
    *out = *(const uintptr_t *)addr;
    return 1;
}

/* 1 when something after m's last step may read rbp: always, except after a walk that ended at
 * the stop range, which a later walk would end at too (the rbp that the interpreter's eval loop
 * keeps there differs with every Python caller; taken as read, it failed the check of walks that
 * hold otherwise). The one rule for mark_rbp_use and bp_word_matters. */
static inline int rbp_read_after_last(const mt_walk_memo *m)
{
    return m->end != MT_WALK_BOUNDARY;
}

/* 1 when step k's reloaded rbp is one a match must find unchanged: the step loaded it and the
 * next step does not have rbp marked irrelevant (mark_rbp_use). The one rule for first_changed
 * and for the packed check (memo_seal). */
static inline int bp_word_matters(const mt_walk_memo *m, int k)
{
    if (!m->steps[k].bp_addr) return 0;
    if (k + 1 < m->n) return !(m->steps[k + 1].bp_known & MT_BP_IRRELEVANT);
    return rbp_read_after_last(m);
}

/* -1 when every stack word the previous walk loaded from step k on still holds what it held,
 * else the first step whose words changed. A reloaded rbp that no later step reads (the next
 * step's rbp is marked irrelevant, see mark_rbp_use) need not hold the same value. All loads are
 * independent: this is the cheap path. */
static int first_changed(const mt_walk_memo *old, int k, uintptr_t lo, uintptr_t hi)
{
    for (; k < old->n; k++) {
        const mt_walk_step *s = &old->steps[k];
        uintptr_t v;
        if (!load_word(s->ra_addr, lo, hi, &v) || v != s->ra) return k;
        if (bp_word_matters(old, k) && (!load_word(s->bp_addr, lo, hi, &v) || v != s->bp_val))
            return k;
    }
    return -1;
}

/* Output of a walk: every step's return address, the first `skip` ones dropped. */
typedef struct walk_out {
    uint64_t *ips;
    int skip, limit; /* limit = skip + max: steps wanted */
    int steps;       /* steps taken so far */
    int n;           /* ips written */
    int may_reuse;   /* the memo compared with is this walk's own way: it may be updated in place */
    int reused_prev; /* the previous memo, its prefix updated, stays the current one */
    int memo_hit;    /* the walk ended by reusing the previous walk's outer frames */
    uint32_t rule_steps, rule_misses; /* for mt_unwind_stats */
} walk_out;

/* Field by field: a struct assignment here became `rep movs`, ~10x slower for 64 bytes. */
static inline void copy_step(mt_walk_step *d, const mt_walk_step *s)
{
    d->pc = s->pc;
    d->sp = s->sp;
    d->bp = s->bp;
    d->ra_addr = s->ra_addr;
    d->ra = s->ra;
    d->bp_addr = s->bp_addr;
    d->bp_val = s->bp_val;
    d->bp_known = s->bp_known;
    d->rule = s->rule;
}

static inline void emit(walk_out *o, mt_walk_memo *rec, const mt_walk_step *st)
{
    if (rec) {
        if (o->steps < MT_MEMO_STEPS)
            copy_step(&rec->steps[o->steps], st);
        else
            rec->n = -1; /* too long to remember */
    }
    if (o->steps++ >= o->skip) o->ips[o->n++] = st->ra;
}

/* For walks whose end depends on something the memo does not record (a word outside the
 * bounds, which move with this walk's rsp; a final zero return address): not memoized, so that
 * a later walk never inherits an ending that might not hold for it. */
static inline mt_walk_end forget(mt_walk_memo *rec)
{
    if (rec) rec->n = -1;
    return MT_WALK_STOPPED;
}

/* Walks from the frame (pc, sp, bp), whose pc is exact (not a return address), a frame of a caller
 * (it stays live meanwhile). */
static inline __attribute__((always_inline)) mt_walk_end
walk(uintptr_t pc, uintptr_t sp, uintptr_t bp, walk_out *o, mt_walk_memo *old, mt_walk_memo *rec)
{
    uintptr_t lo, hi;
    if (!stack_bounds(&lo, &hi) || sp < lo || sp >= hi) return MT_WALK_STOPPED;
    lo = sp; /* nothing below the current frame belongs to a live caller */
    uintptr_t stop_lo = atomic_load_explicit(&stop_range.lo, memory_order_relaxed);
    uintptr_t stop_len = atomic_load_explicit(&stop_range.hi, memory_order_relaxed) - stop_lo;
    uintptr_t bp_known = 1;
    int ok = old && old->n > 0, k = 0; /* k: cursor in the previous walk, by increasing sp */
    int changed = -1; /* steps of the previous walk up to this one are known to have changed */
    mt_walk_step st;
    st.pc = pc; /* first frame: the exact pc; later ones: return address - 1 */
    for (;;) {
        st.sp = sp;
        st.bp = bp;
        st.bp_known = bp_known;
        if (ok) {
            while (k < old->n && old->steps[k].sp < sp)
                k++;
            const mt_walk_step *o_st = &old->steps[k];
            if (k == old->n) {
                ok = 0;
            } else if (k > changed && o_st->sp == sp && o_st->pc == st.pc &&
                       ((o_st->bp_known & MT_BP_IRRELEVANT) ||
                        (o_st->bp == bp && (o_st->bp_known & MT_BP_KNOWN) == bp_known))) {
                /* Same frame state as the previous walk: reuse its suffix if still true, and
                 * if it went far enough (a walk cut at its limit may have stopped early). A
                 * changed word at step c rules out every match up to c: no quadratic retries. */
                changed = first_changed(old, k, lo, hi);
                if (changed < 0 &&
                    (old->end != MT_WALK_LIMIT || old->n - k >= o->limit - o->steps)) {
                    if (k == o->steps && rec && o->may_reuse) {
                        /* Same depth (the usual case): rather than copying the long common
                         * suffix into rec, copy the short new prefix into old and keep it. */
                        for (int i = 0; i < k; i++)
                            copy_step(&old->steps[i], &rec->steps[i]);
                        o->reused_prev = 1;
                        rec = NULL;
                    }
                    o->memo_hit = 1;
                    for (; k < old->n; k++) {
                        if (o->steps == o->limit) return MT_WALK_LIMIT;
                        emit(o, rec, &old->steps[k]);
                    }
                    return old->end;
                }
                if (changed < 0) ok = 0; /* too short a walk to finish ours: unwind for real */
            }
        }
        mt_unwind_rule r;
        o->rule_steps++;
        /* The previous walk's frame at the same depth often has the same pc even where the
         * stacks differ (the CUDA stack above every allocation is the same few functions): its
         * rule then comes from the memo, which this thread just touched, instead of the shared
         * table, whose lines a busy process has usually evicted (~30 ns a frame on a PyTorch
         * process, against ~5 ns here). */
        const mt_walk_step *same = (old && o->steps < old->n) ? &old->steps[o->steps] : NULL;
        if (same && same->pc == st.pc && same->rule.cfa_off != 0) {
            r = same->rule;
        } else if (!rule_for(st.pc, &r, &o->rule_misses)) {
            return MT_WALK_STOPPED; /* not code we know: JIT, garbage */
        }
        st.rule = r;
        mt_rule_kind kind = mt_rule_kind_of(r);
        if (kind == MT_RULE_OUTERMOST) return MT_WALK_OUTERMOST;
        if (kind != MT_RULE_STEP) return MT_WALK_STOPPED;
        uintptr_t cfa;
        if (mt_rule_cfa_reg(r) == MT_CFA_RBP) {
            if (!bp_known) return MT_WALK_STOPPED;
            cfa = bp + (intptr_t)r.cfa_off;
        } else {
            cfa = sp + (intptr_t)r.cfa_off;
        }
        if (cfa <= sp || cfa > hi) return MT_WALK_STOPPED;
        st.ra_addr = cfa + 8 * (intptr_t)r.ra_off8;
        if (!load_word(st.ra_addr, lo, hi, &st.ra)) return forget(rec);
        st.bp_addr = 0;
        st.bp_val = 0;
        switch (mt_rule_rbp_of(r)) {
        case MT_RBP_SAME:
            break;
        case MT_RBP_SAVED:
            st.bp_addr = cfa + (intptr_t)r.rbp_off;
            if (!load_word(st.bp_addr, lo, hi, &st.bp_val)) return forget(rec);
            bp = st.bp_val;
            bp_known = 1;
            break;
        default:
            bp_known = 0;
            break;
        }
        sp = cfa;
        if (st.ra == 0) { /* some entry points end the chain with 0 */
            forget(rec);
            return MT_WALK_OUTERMOST;
        }
        if (o->steps == o->limit) return MT_WALK_LIMIT; /* a caller, but no room for it */
        emit(o, rec, &st);
        if (st.ra < 4096) return MT_WALK_STOPPED;
        st.pc = st.ra - 1; /* inside the call instruction, not after it */
        if (st.pc - stop_lo < stop_len) return MT_WALK_BOUNDARY; /* its frame is written */
    }
}

/* Marks the steps of memo m from whose state on rbp plays no part: from there the walk reads
 * rbp nowhere before reloading it from the stack (or losing it), so a later walk may match such a
 * step whatever its own rbp holds. Why it matters: PyTorch's code uses rbp as an ordinary register,
 * so at most steps rbp holds a pointer that changes from one training step to the next; requiring
 * it equal made walks from the same call site step ~20 frames by rule before they could match.
 * Backwards, since each step depends on the next: the state after the last step (where the walk
 * ended, for whatever reason but the stop range) is taken to depend on rbp. */
static void mark_rbp_use(mt_walk_memo *m)
{
    int next_uses = rbp_read_after_last(m);
    for (int i = m->n - 1; i >= 0; i--) {
        mt_walk_step *st = &m->steps[i];
        mt_unwind_rule r = st->rule;
        int uses = mt_rule_cfa_reg(r) == MT_CFA_RBP ||
                   (mt_rule_rbp_of(r) == MT_RBP_SAME && next_uses);
        st->bp_known = (st->bp_known & MT_BP_KNOWN) | (uses ? 0 : MT_BP_IRRELEVANT);
        next_uses = uses;
    }
}

/* Appends the word at addr (holding v) to m's check: its place above sp0 and its share of the
 * sum. 0 when it lies too far up for a 16-bit offset. */
static inline int check_add(mt_walk_memo *m, uintptr_t sp0, uintptr_t addr, uint64_t v)
{
    uintptr_t w = (addr - sp0) / 8;
    if (w > MT_CHECK_MAX_WORD) return 0;
    int i = m->nwords++;
    mt_memo_word(m)[i] = (uint16_t)w;
    m->check += v * (MT_CHECK_C0 + (uint64_t)i * MT_CHECK_DC);
    return 1;
}

/* Builds m's output and check (see unwind_memo.h) from its steps, after marking which saved rbp
 * words matter. Called whenever a walk is stored or brought up to date, so that the check always
 * describes the steps. */
static void memo_seal(mt_walk_memo *m)
{
    memset(m->slot, 0, sizeof m->slot); /* what the caller kept there named the old content */
    if (m->n <= 0) return;
    mark_rbp_use(m);
    const mt_walk_step *s = m->steps;
    uintptr_t sp0 = s[0].sp;
    uint64_t *ra = mt_memo_ra(m);
    m->nwords = 0;
    m->check = 0;
    /* The id names the walk's output (its return addresses, how many, how it ended), not the
     * memo: a call site walked again because a word of its check changed (a saved rbp that is a
     * scratch value, a way another site took) mostly finds the same frames, and then keeps its id,
     * so what the caller remembers under the id (the recorder's leaf memo) still applies. Two
     * walks with one id and different frames need a 64-bit coincidence, the bar of the check. */
    uint64_t id = ((uint64_t)m->n << 8 | (uint64_t)m->end) * MT_GOLDEN64;
    int whole = 1;
    for (int k = 0; k < m->n; k++) {
        ra[k] = s[k].ra;
        id = (id ^ s[k].ra) * MT_CHECK_DC + MT_GOLDEN64;
        id ^= id >> 31;
        whole = whole && check_add(m, sp0, s[k].ra_addr, s[k].ra);
        if (whole && bp_word_matters(m, k)) whole = check_add(m, sp0, s[k].bp_addr, s[k].bp_val);
    }
    if (!whole) m->nwords = -1;
    id = mt_mix64(id);
    m->id = id > 1 ? id : id + 2; /* 0 names no walk, 1 "no native frames" (the recorder's) */
    m->pc0 = s[0].pc;
    m->sp0 = sp0;
    m->bp0 = s[0].bp;
    m->bp0_known = s[0].bp_known;
}

/* 1 when memo m would be the result of a walk from the frame (pc, sp, bp): its first frame state
 * is this one (as walk() requires of a match) and the words its check names give the same sum
 * (see unwind_memo.h). A walk cut at its limit must have gone as far as this one wants. No bounds
 * test: with sp equal to the memo's sp0, every word lies where the recorded walk found it inside
 * this thread's stack. The loads are independent, and only the offsets are read from the memo:
 * 2 bytes a word, where comparing values would read 8 more. */
static inline int memo_holds(const mt_walk_memo *m, uintptr_t pc, uintptr_t sp, uintptr_t bp,
                             int limit)
{
    if (m->n <= 0 || m->nwords < 0 || m->sp0 != sp || m->pc0 != pc) return 0;
    if (!(m->bp0_known & MT_BP_IRRELEVANT) && !((m->bp0_known & MT_BP_KNOWN) && m->bp0 == bp))
        return 0;
    if (m->end == MT_WALK_LIMIT && m->n < limit) return 0;
    const uint16_t *word = mt_memo_word(m);
    const uint64_t *stack = (const uint64_t *)sp;
    uint64_t sum = 0, f = MT_CHECK_C0;
    for (int i = 0; i < m->nwords; i++, f += MT_CHECK_DC)
        sum += stack[word[i]] * f;
    return sum == m->check;
}

/* The tag of a walk starting at rsp `sp` under `key`, never 0. */
static inline uint64_t memo_tag(uint64_t key, uintptr_t sp)
{
    return mt_mix64(key ^ ((uint64_t)sp * MT_GOLDEN64)) | 1;
}

/* Its set: by the key alone, so that mt_unwind_prefetch (which knows no rsp) finds it; unkeyed
 * walks by the tag, or they would all share one set. */
static inline int memo_set(uint64_t key, uint64_t tag)
{
    /* The top MT_MEMO_SET_BITS bits. (Until 2026-11-23 a shift by 59 used 32 of the 64 sets.) */
    return (int)((key ? mt_mix64(key) : tag) >> (64 - MT_MEMO_SET_BITS));
}

/* A walk that no remembered walk holds for as a whole: unwound (from the remembered walk that
 * shares most of it, when there is one) and remembered in way w of memos (NULL: no memo).
 * Out of line and marked cold: in a steady state ~99.8% of walks match as a whole (cifar.py on the
 * GPU machine), and the code they run stays short. Its own frame is below sp, which it does not
 * read: the walk starts from the caller's frame state as before. */
static __attribute__((noinline, cold)) mt_walk_end
walk_and_remember(uintptr_t pc, uintptr_t sp, uintptr_t bp, walk_out *o, mt_walk_memos *memos,
                  uint64_t key, uint64_t tag, int w, int same, uint64_t *walk_id)
{
    uint64_t rare = mt_rare_begin(); /* rare work (rare_work.h): unwinding tables may be read */
    mt_walk_memo *old = NULL, *rec = NULL;
    if (memos) {
        /* Compared with: this tag's most recent walk (another path from the same place shares
         * most frames), else the latest walk of any. Updated in place only when it is also the
         * way this walk replaces. */
        if (same >= 0) {
            old = memos->way[same];
            o->may_reuse = same == w;
        } else if (memos->last >= 0) {
            old = memos->way[memos->last];
        }
        if (!memos->spare) memos->spare = mt_walk_memo_new(MT_MEMO_STEPS);
        rec = memos->spare;
        if (rec) rec->n = 0;
    }
    mt_walk_end end = walk(pc, sp, bp, o, old, rec);
    if (!memos) {
        mt_rare_end(rare, MT_RARE_WALK);
        return end;
    }
    if (o->reused_prev) {
        tls_stats.t.stored++;
        memos->last = w; /* `old`, this way's own walk, was brought up to date in place */
        memos->used[w] = ++memos->clock;
        memo_seal(old);
        *walk_id = old->n > 0 ? old->id : 0;
    } else if (rec) {
        if (rec->n == 0) rec->n = o->steps; /* emit() set -1 if it outgrew the memo */
        rec->end = end;
        /* Stored as a copy of its own size; the spare stays for the next walk. Out of memory:
         * the way keeps what it held. */
        mt_walk_memo *kept = mt_walk_memo_copy(rec);
        if (kept) {
            tls_stats.t.stored++;
            tls_stats.t.evicted += memos->way[w] && memos->tag[w] != tag;
            memo_seal(kept);
            *walk_id = kept->n > 0 ? kept->id : 0;
            free(memos->way[w]);
            memos->way[w] = kept;
            memos->tag[w] = tag;
            memos->key[w] = key;
            memos->used[w] = ++memos->clock;
            memos->last = w;
        }
    }
    mt_rare_end(rare, MT_RARE_WALK);
    return end;
}

/* How a walk that memo m holds for as a whole ends, for the walk o (which may want fewer steps:
 * memo_holds checked that m goes at least as far). */
static inline mt_walk_end whole_end(const mt_walk_memo *m, const walk_out *o)
{
    return m->n > o->limit ? MT_WALK_LIMIT : m->end;
}

/* Writes memo m's return addresses as the walk o's output, as far as o wants them. */
static void copy_out(const mt_walk_memo *m, walk_out *o)
{
    const uint64_t *ra = mt_memo_ra(m);
    int steps = m->n > o->limit ? o->limit : m->n;
    for (int k = o->skip; k < steps; k++)
        o->ips[o->n++] = ra[k];
    o->steps = steps;
}

/* A walk's output as asked for: at most MT_MAX_FRAMES frames after at most MT_MAX_FRAMES skipped
 * (which keeps limit far from overflow). max must be > 0. */
static inline walk_out request(uint64_t *ips, int max, int skip)
{
    if (skip < 0) skip = 0;
    if (skip > MT_MAX_FRAMES) skip = MT_MAX_FRAMES;
    if (max > MT_MAX_FRAMES) max = MT_MAX_FRAMES;
    return (walk_out){.ips = ips, .skip = skip, .limit = skip + max};
}

/* The body of both entry points, inlined into each so that the frame it starts from (pc, rsp, rbp
 * of one asm) is the entry point's own: skip counts from its caller either way. */
static inline __attribute__((always_inline)) int unwind_here(uint64_t *ips, int max, int skip,
                                                             int *truncated, uint64_t key,
                                                             uint64_t *walk_id, int lazy)
{
    uint64_t id_dummy;
    if (!walk_id) walk_id = &id_dummy;
    *walk_id = 0;
    uintptr_t pc, sp, bp;
    /* One asm so that pc (the next instruction's address), rsp and rbp belong to the same
     * instant; the CFI at that pc describes exactly this frame. */
    __asm__ volatile("leaq 0(%%rip), %0\n\t"
                     "movq %%rsp, %1\n\t"
                     "movq %%rbp, %2"
                     : "=r"(pc), "=r"(sp), "=r"(bp));
    int dummy;
    if (!truncated) truncated = &dummy;
    *truncated = 1;
    if (max <= 0 || !ips) return 0;
    walk_out o = request(ips, max, skip);
    mt_walk_memos *memos = mt_walk_memo_acquire();
    uint64_t tag = memo_tag(key, sp);
    int w = 0, same = -1, hit = -1;
    mt_walk_end end = MT_WALK_STOPPED;
    uintptr_t lo, hi;
    int usable = memos && stack_bounds(&lo, &hi);
    if (usable) {
        /* The set's ways under this tag, most recent first in effect: the first that holds as a
         * whole is the result, no walk at all. Otherwise the new walk goes to an empty way or the
         * least recently used, never over a sibling path that is still in use. */
        int set = memo_set(key, tag);
        w = set * MT_MEMO_ASSOC;
        for (int i = set * MT_MEMO_ASSOC; i < (set + 1) * MT_MEMO_ASSOC; i++) {
            mt_walk_memo *m = memos->way[i];
            if (!m) {
                if (memos->way[w]) w = i;
                continue;
            }
            if (memos->way[w] && memos->used[i] < memos->used[w]) w = i;
            if (memos->tag[i] != tag) continue;
            mt_walk_memo_prefetch(m); /* header and word offsets in parallel, not one by one */
            tls_stats.t.ways_checked++;
            if (memo_holds(m, pc, sp, bp, o.limit)) {
                hit = i;
                break;
            }
            if (same < 0 || memos->used[i] > memos->used[same]) same = i;
        }
        if (hit >= 0) {
            /* The output is the memo's return addresses; a lazy caller may not want them. */
            const mt_walk_memo *m = memos->way[hit];
            end = whole_end(m, &o);
            if (lazy)
                o.n = MT_UNWIND_LATER; /* mt_unwind_recall copies them if they are wanted */
            else
                copy_out(m, &o);
            o.memo_hit = 1;
            memos->used[hit] = ++memos->clock;
            memos->last = hit;
            *walk_id = m->id;
        }
    }
    if (hit < 0)
        end = walk_and_remember(pc, sp, bp, &o, usable ? memos : NULL, key, tag, w, same, walk_id);
    if (memos) mt_walk_memo_release(memos);
    *truncated = end != MT_WALK_OUTERMOST;
    walk_stats *ts = &tls_stats;
    ts->t.memo_hits += (uint64_t)o.memo_hit;
    ts->t.whole_hits += hit >= 0;
    ts->t.keyless += key == 0;
    ts->t.keyless_whole_hits += key == 0 && hit >= 0;
    ts->t.rule_steps += o.rule_steps;
    ts->t.rule_misses += o.rule_misses;
    if (++ts->t.walks == STATS_BATCH) stats_flush(ts);
    return o.n;
}

__attribute__((noinline)) int mt_unwind(uint64_t *ips, int max, int skip, int *truncated)
{
    return unwind_here(ips, max, skip, truncated, 0, NULL, 0);
}

__attribute__((noinline)) int mt_unwind_keyed(uint64_t *ips, int max, int skip, int *truncated,
                                              uint64_t key, uint64_t *walk_id)
{
    return unwind_here(ips, max, skip, truncated, key, walk_id, 0);
}

MT_HOT_PATH __attribute__((noinline)) int mt_unwind_keyed_lazy(uint64_t *ips, int max, int skip,
                                                               int *truncated, uint64_t key,
                                                               uint64_t *walk_id)
{
    return unwind_here(ips, max, skip, truncated, key, walk_id, 1);
}

MT_HOT_PATH void mt_unwind_prefetch(uint64_t key)
{
    const mt_walk_memos *memos = mt_walk_memo_peek();
    if (!key || !memos) return;
    /* No branch on what the loads find: a mispredicted one, resolved only when the miss returns,
     * would throw away the caller's work done meanwhile. A way of another key prefetches the
     * memos' own first line, which is at hand. */
    int set = memo_set(key, 0);
    for (int i = set * MT_MEMO_ASSOC; i < (set + 1) * MT_MEMO_ASSOC; i++) {
        uintptr_t mine = -(uintptr_t)(memos->key[i] == key); /* a way with a key has a memo */
        uintptr_t p = ((uintptr_t)memos->way[i] & mine) | ((uintptr_t)memos & ~mine);
        mt_walk_memo_prefetch((const mt_walk_memo *)p);
    }
}

/* The thread's latest walk, when walk_id still names it. */
static mt_walk_memo *latest(const mt_walk_memos *memos, uint64_t walk_id)
{
    mt_walk_memo *m = memos->last >= 0 ? memos->way[memos->last] : NULL;
    return walk_id && m && m->id == walk_id && m->n > 0 ? m : NULL;
}

MT_HOT_PATH void *mt_unwind_slot(uint64_t walk_id)
{
    mt_walk_memos *memos = mt_walk_memo_peek();
    mt_walk_memo *m = memos ? latest(memos, walk_id) : NULL;
    return m ? m->slot : NULL;
}

int mt_unwind_recall(uint64_t walk_id, uint64_t *ips, int max, int skip, int *truncated)
{
    int dummy;
    if (!truncated) truncated = &dummy;
    *truncated = 1;
    if (!walk_id || !ips || max <= 0) return -1;
    mt_walk_memos *memos = mt_walk_memo_acquire();
    if (!memos) return -1;
    const mt_walk_memo *m = latest(memos, walk_id);
    int n = -1;
    if (m) {
        walk_out o = request(ips, max, skip);
        copy_out(m, &o);
        *truncated = whole_end(m, &o) != MT_WALK_OUTERMOST;
        n = o.n;
    }
    mt_walk_memo_release(memos);
    return n;
}
