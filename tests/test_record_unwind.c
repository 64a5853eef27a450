/* mt_unwind against glibc's backtrace() (libgcc's full DWARF unwinder) as the reference: same
 * frames in the same order, from call chains that mix frame-pointer functions, rsp-based frames
 * (omit-frame-pointer), a function that uses rbp as a scratch register (so the caller's rbp must
 * be recovered from the stack), and a dynamically sized frame; from the main thread, another
 * thread, several threads at once, a signal handler and a recursion deeper than MT_MAX_FRAMES. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "memtrace/record.h"
#include "record/unwind_memo.h"

#define NOINLINE __attribute__((noinline))
#define NO_FP __attribute__((noinline, optimize("omit-frame-pointer")))

typedef struct capture {
    uint64_t ips[MT_MAX_FRAMES];
    void *bt[MT_MAX_FRAMES + 16];
    int n, nbt, truncated;
    int lazy; /* answered lazily (MT_UNWIND_LATER, then mt_unwind_recall) */
    uint64_t walk_id;
} capture;

/* Frames of c that differ from backtrace()'s (frame 0 is where each was taken, so it differs by
 * design); a different count is one difference. */
static int differs_from_backtrace(const capture *c)
{
    if (c->n != c->nbt) return 1;
    int wrong = 0;
    for (int i = 1; i < c->n; i++)
        wrong += c->ips[i] != (uint64_t)(uintptr_t)c->bt[i];
    return wrong;
}

/* Work after each call keeps the compiler from turning calls into jumps (tail calls). */
static volatile int sink;
/* Loop bounds read from a volatile cannot be unrolled: a loop body stays ONE call site, so
 * every iteration's return addresses must be identical. */
static volatile int two = 2, many = 5000, sites = 300;

/* Under AddressSanitizer backtrace() is intercepted, and the interceptor's own frame (in the
 * sanitizer's library) comes first: drop the frames before the first one in this program, so both
 * lists start in the function that called backtrace(). */
static void skip_interceptor_frames(capture *c)
{
    Dl_info self, frame;
    if (!dladdr((void *)skip_interceptor_frames, &self)) return;
    int k = 0;
    while (k < c->nbt && dladdr(c->bt[k], &frame) && frame.dli_fbase != self.dli_fbase) k++;
    if (k == 0 || k == c->nbt) return;
    memmove(c->bt, c->bt + k, (size_t)(c->nbt - k) * sizeof *c->bt);
    c->nbt -= k;
}

static NOINLINE void leaf(capture *c)
{
    c->n = mt_unwind(c->ips, MT_MAX_FRAMES, 0, &c->truncated);
    c->nbt = backtrace(c->bt, MT_MAX_FRAMES + 16);
    skip_interceptor_frames(c);
    sink++;
}

/* Dynamically sized frame: even without frame pointers, GCC must address it from rbp, so the
 * CFA is rbp-based here. */
static NO_FP void vla_d(capture *c, int len)
{
    volatile char buf[len];
    buf[0] = 1;
    leaf(c);
    sink += buf[0];
}

/* A large rsp-based frame: CFA = rsp + a big offset. */
static NO_FP void big_c(capture *c)
{
    volatile char buf[5000];
    buf[0] = 2;
    vla_d(c, 64 + sink % 2);
    sink += buf[0];
}

/* Uses rbp as an ordinary register (zeroes it!): the unwinder must reload the caller's rbp from
 * the slot the CFI names, or fp_a's rbp-based CFA below comes out as garbage. */
static NO_FP void clobber_b(capture *c)
{
    __asm__ volatile("xorl %%ebp, %%ebp" ::: "rbp");
    big_c(c);
    sink++;
}

static NOINLINE void fp_a(capture *c)
{
    clobber_b(c);
    sink++;
}

/* The return address into fn lies within fn's first bytes (these functions are small). */
static int returns_into(uint64_t ip, void (*fn)(void))
{
    uintptr_t f = (uintptr_t)fn;
    return ip > f && ip < f + 512;
}

static void check_against_backtrace(const capture *c)
{
    cr_assert_gt(c->n, 5);
    cr_expect_eq(c->truncated, 0, "the walk should reach the outermost frame");
    cr_assert_eq(c->n, c->nbt, "mt_unwind found %d frames, backtrace %d", c->n, c->nbt);
    /* Entry 0 is in leaf for both, after two different calls. */
    cr_expect(returns_into(c->ips[0], (void (*)(void))leaf));
    cr_expect(returns_into((uint64_t)(uintptr_t)c->bt[0], (void (*)(void))leaf));
    for (int i = 1; i < c->n; i++)
        cr_expect_eq(c->ips[i], (uint64_t)(uintptr_t)c->bt[i], "frame %d: %#lx vs %p", i,
                     (unsigned long)c->ips[i], c->bt[i]);
    /* And the frames are really ours, in order. */
    cr_expect(returns_into(c->ips[1], (void (*)(void))vla_d));
    cr_expect(returns_into(c->ips[2], (void (*)(void))big_c));
    cr_expect(returns_into(c->ips[3], (void (*)(void))clobber_b));
    cr_expect(returns_into(c->ips[4], (void (*)(void))fp_a));
}

static void warm_backtrace(void)
{
    void *b[4];
    backtrace(b, 4); /* the first call dlopens libgcc_s; keep that out of the comparisons */
}

Test(record_unwind, matches_backtrace_on_main_thread)
{
    warm_backtrace();
    capture c[2];
    /* One call site, twice: the second time every rule comes from the cache. */
    for (int k = 0; k < two; k++)
        fp_a(&c[k]);
    check_against_backtrace(&c[0]);
    check_against_backtrace(&c[1]);
    cr_assert_eq(c[1].n, c[0].n);
    for (int i = 1; i < c[0].n; i++)
        cr_expect_eq(c[1].ips[i], c[0].ips[i]);
}

static void *thread_main(void *arg)
{
    fp_a(arg);
    return NULL;
}

Test(record_unwind, matches_backtrace_on_another_thread)
{
    warm_backtrace();
    capture c;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, thread_main, &c), 0);
    pthread_join(th, NULL);
    check_against_backtrace(&c);
}

Test(record_unwind, skip_and_max)
{
    capture full;
    fp_a(&full);
    cr_assert_gt(full.n, 6);

    uint64_t ips[MT_MAX_FRAMES];
    int truncated = -1;
    int n = mt_unwind(ips, 3, 0, &truncated);
    cr_expect_eq(n, 3);
    cr_expect_eq(truncated, 1, "stopping at max with callers left is a truncation");

    /* skip = 2 from this frame gives the tail of what skip = 0 gives (entries 0 differ only
     * because the two call sites differ, and they are skipped). */
    uint64_t all[MT_MAX_FRAMES], skipped[MT_MAX_FRAMES];
    int t1, t2;
    int na = mt_unwind(all, MT_MAX_FRAMES, 0, &t1);
    int ns = mt_unwind(skipped, MT_MAX_FRAMES, 2, &t2);
    cr_assert_eq(ns, na - 2);
    cr_expect_eq(t1, 0);
    cr_expect_eq(t2, 0);
    for (int i = 0; i < ns; i++)
        cr_expect_eq(skipped[i], all[i + 2]);
    cr_expect_eq(mt_unwind(ips, 0, 0, &truncated), 0);
    cr_expect_eq(truncated, 1);
}

static NOINLINE int recurse(int depth, uint64_t *ips, int *n, int *truncated)
{
    if (depth == 0) {
        *n = mt_unwind(ips, MT_MAX_FRAMES, 0, truncated);
        return 1;
    }
    int r = recurse(depth - 1, ips, n, truncated);
    sink++;
    return r + 1;
}

Test(record_unwind, deep_recursion_truncates_at_max)
{
    uint64_t ips[MT_MAX_FRAMES + 1];
    ips[MT_MAX_FRAMES] = 0xdeadbeef; /* guard: nothing written past max */
    int n = 0, truncated = 0;
    recurse(300, ips, &n, &truncated);
    cr_expect_eq(n, MT_MAX_FRAMES);
    cr_expect_eq(truncated, 1);
    cr_expect_eq(ips[MT_MAX_FRAMES], 0xdeadbeef);
    for (int i = 1; i < n; i++)
        cr_expect(returns_into(ips[i], (void (*)(void))recurse), "frame %d", i);
}

/* Several threads unwinding at once, filling the shared rule cache concurrently: every result
 * must equal what the same thread got alone. */
typedef struct stress_arg {
    capture first;
    int mismatches;
} stress_arg;

/* One call site for fp_a whatever the compiler does to the loop below (peeling, unrolling):
 * frames 1..5 (vla_d .. one_walk) must then be identical on every walk. */
static NOINLINE void one_walk(capture *c)
{
    fp_a(c);
    sink++;
}

static void *stress_main(void *p)
{
    stress_arg *a = p;
    capture c;
    one_walk(&a->first);
    for (int k = 0; k < many; k++) {
        one_walk(&c);
        if (c.n != a->first.n || memcmp(c.ips + 1, a->first.ips + 1, 5 * 8) != 0) a->mismatches++;
    }
    return NULL;
}

Test(record_unwind, concurrent_threads_agree)
{
    warm_backtrace();
    stress_arg args[4];
    pthread_t th[4];
    memset(args, 0, sizeof args);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, stress_main, &args[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        check_against_backtrace(&args[i].first);
        cr_expect_eq(args[i].mismatches, 0, "thread %d", i);
    }
}

/* In a signal handler the caller is the kernel's signal frame (__restore_rt), whose CFI is an
 * expression: the walk must stop there, flagged, without faulting. */
static uint64_t sig_ips[MT_MAX_FRAMES];
static volatile int sig_n = -1, sig_truncated = -1;

static void on_signal(int sig)
{
    (void)sig;
    int t;
    sig_n = mt_unwind(sig_ips, MT_MAX_FRAMES, 0, &t);
    sig_truncated = t;
}

Test(record_unwind, signal_handler_stops_cleanly)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    raise(SIGUSR1);
    cr_expect_geq(sig_n, 1, "at least the signal frame's return address");
    cr_expect_eq(sig_truncated, 1);
}

Test(record_unwind, null_truncated_pointer_is_allowed)
{
    uint64_t ips[8];
    cr_expect_gt(mt_unwind(ips, 8, 0, NULL), 0);
}

/* mt_unwind_stop_at: the walk writes the first frame whose pc is in the range and stops there,
 * truncated, the same from a remembered walk as from a fresh one. The range here starts at
 * clobber_b and covers its body (these functions are small): the walk from leaf passes vla_d and
 * big_c (placed before it), then stops at clobber_b's frame, the fourth. */
Test(record_unwind, stops_after_the_first_frame_in_the_stop_range)
{
    warm_backtrace();
    uintptr_t lo = (uintptr_t)clobber_b;
    mt_unwind_stop_at(lo, lo + 512);
    capture c[3];
    for (int k = 0; k < 3; k++) /* one call site: the second and third walks are remembered */
        fp_a(&c[k]);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(c[k].n, 4, "walk %d: %d frames", k, c[k].n);
        cr_expect_eq(c[k].truncated, 1);
        cr_expect(returns_into(c[k].ips[1], (void (*)(void))vla_d));
        cr_expect(returns_into(c[k].ips[2], (void (*)(void))big_c));
        cr_expect(returns_into(c[k].ips[3], (void (*)(void))clobber_b));
    }
    mt_unwind_totals t;
    mt_unwind_stats(&t);
    cr_expect_geq(t.whole_hits, 1, "the walk that ended at the range is remembered whole");
    mt_unwind_stop_at(0, 0);
}

/* The per-thread memo (unwind_memo.h) reuses the previous walk's outer frames when their stack
 * words are unchanged. Here inner() runs at the same rsp with the same pc below two different
 * callers, so only the return address in between differs: the memo must notice. */
static NOINLINE void inner(capture *c)
{
    leaf(c);
    sink++;
}

static NOINLINE void mid_a(capture *c)
{
    inner(c);
    sink++;
}

static NOINLINE void mid_b(capture *c)
{
    inner(c);
    sink += 2;
}

Test(record_unwind, memo_notices_a_changed_caller)
{
    warm_backtrace();
    capture c;
    int wrong = 0;
    for (int k = 0; k < 200; k++) {
        (k % 3 ? mid_a : mid_b)(&c);
        wrong += differs_from_backtrace(&c);
        if (c.n != c.nbt) continue;
        wrong += !returns_into(c.ips[2], (k % 3 ? (void (*)(void))mid_a : (void (*)(void))mid_b));
    }
    cr_expect_eq(wrong, 0);
}

/* A walk cut short by max must not make a later, longer one short. */
Test(record_unwind, memo_after_a_short_walk)
{
    uint64_t small[3], all[MT_MAX_FRAMES], again[MT_MAX_FRAMES];
    int t0, t1, t2, n0 = 0, n1 = 0, n2 = 0;
    for (int k = 0; k < two; k++) { /* one call site for each of the three */
        if (k == 0) n0 = mt_unwind(all, MT_MAX_FRAMES, 0, &t0);
        if (k == 1) n1 = mt_unwind(small, 3, 0, &t1);
        if (k == 1) n2 = mt_unwind(again, MT_MAX_FRAMES, 0, &t2);
    }
    cr_expect_eq(n1, 3);
    cr_expect_eq(t1, 1);
    cr_expect_eq(n2, n0);
    cr_expect_eq(t2, 0);
    for (int i = 1; i < n0 && i < n2; i++)
        cr_expect_eq(again[i], all[i], "frame %d", i);
}

/* Keyed memos (mt_unwind_keyed): two call sites whose stacks differ only near the root, far from
 * the leaf, at the same depth. Alternating, each walk's previous walk is the other site's, which
 * validates nothing below the root: a memo of the previous walk alone would step ~DEEP frames by
 * rule per walk (the first design did). Each walk must find its own site's earlier walk instead,
 * under its own key, under a key both share, or under no key at all, and stay exact. */
#define DEEP 30
static NOINLINE void keyed_leaf(capture *c, uint64_t key)
{
    c->n = mt_unwind_keyed(c->ips, MT_MAX_FRAMES, 0, &c->truncated, key, &c->walk_id);
    c->nbt = backtrace(c->bt, MT_MAX_FRAMES + 16);
    skip_interceptor_frames(c);
    sink++;
}

static NOINLINE void keyed_deep(capture *c, uint64_t key, int depth)
{
    if (depth > 0)
        keyed_deep(c, key, depth - 1);
    else
        keyed_leaf(c, key);
    sink++;
}

static NOINLINE void root_a(capture *c, uint64_t key)
{
    keyed_deep(c, key, DEEP);
    sink++;
}

static NOINLINE void root_b(capture *c, uint64_t key)
{
    keyed_deep(c, key, DEEP);
    sink += 2;
}

/* Alternates the two sites `rounds` times, keyed 0: unkeyed, 1: one key per site, 2: one key
 * for both (one Python line reaching the allocator through two native paths); returns the frames
 * stepped by rule, counts errors. */
static uint64_t alternate(int keyed, int rounds, int *wrong)
{
    mt_unwind_totals t0, t1;
    mt_unwind_stats(&t0);
    capture c;
    for (int k = 0; k < 2 * rounds; k++) {
        int a = k % 2 == 0;
        (a ? root_a : root_b)(&c, keyed == 2 ? 44 : keyed ? (a ? 11 : 22) : 0);
        *wrong += differs_from_backtrace(&c);
    }
    mt_unwind_stats(&t1);
    return t1.rule_steps - t0.rule_steps;
}

Test(record_unwind, keyed_memo_finds_its_own_call_site_and_stays_exact)
{
    warm_backtrace();
    int wrong = 0;
    for (int keyed = 0; keyed <= 2; keyed++) {
        uint64_t first = alternate(keyed, 1, &wrong); /* the two walks of a fresh key: stepped */
        uint64_t later = alternate(keyed, 50, &wrong);
        if (keyed == 1) /* fresh keys: both walks stepped all their DEEP frames */
            cr_expect_geq(first, 2 * DEEP, "first walks stepped %lu frames", (unsigned long)first);
        cr_expect_lt(later, 100 * 2, "keying %d: %lu frames stepped in 100 walks", keyed,
                     (unsigned long)later);
    }
    cr_expect_eq(wrong, 0, "%d frames differ from backtrace()", wrong);
}

/* walk_id (mt_unwind_keyed): the same nonzero id must mean the same frames, whatever happened in
 * between; a site walked again unchanged keeps its id. */
Test(record_unwind, equal_walk_ids_mean_equal_frames)
{
    warm_backtrace();
    enum { WALKS = 120 };
    static capture c[WALKS];
    for (int k = 0; k < WALKS; k++) {
        int which = k % 3;
        if (which == 0) root_a(&c[k], 7);
        if (which == 1) root_b(&c[k], 7); /* same key, another path */
        if (which == 2) root_a(&c[k], 8); /* same path, another key */
    }
    int compared = 0;
    for (int i = 0; i < WALKS; i++)
        for (int j = i + 1; j < WALKS; j++) {
            if (!c[i].walk_id || c[i].walk_id != c[j].walk_id) continue;
            compared++;
            cr_assert_eq(c[i].n, c[j].n);
            cr_assert_eq(c[i].truncated, c[j].truncated);
            for (int f = 1; f < c[i].n; f++) /* frame 0: inside keyed_leaf, the same anyway */
                cr_assert_eq(c[i].ips[f], c[j].ips[f], "walks %d and %d, frame %d", i, j, f);
        }
    /* after the first round every site keeps its id: 3 sites, ~40 walks each */
    cr_expect_gt(compared, 3 * 38 * 37 / 2, "only %d pairs shared an id", compared);
    cr_expect_neq(c[WALKS - 3].walk_id, c[WALKS - 2].walk_id, "two paths, two ids");
    cr_expect_neq(c[WALKS - 3].walk_id, c[WALKS - 1].walk_id, "two keys, two call sites");
}

/* One key reached from depths 0..depths-1 (keyed_deep), visited in that cycle `rounds` times:
 * each walk compared with backtrace() (mismatches into *wrong), its id into ids[round * depths +
 * d] (ids may be NULL). Returns the walks found whole after the first round. */
static uint64_t cycle_depths(uint64_t key, int depths, int rounds, uint64_t *ids, int *wrong)
{
    capture c;
    mt_unwind_totals t0, t1;
    *wrong = 0;
    for (int round = 0; round < rounds; round++) {
        if (round == 1) mt_unwind_stats(&t0);
        for (int d = 0; d < depths; d++) {
            keyed_deep(&c, key, d);
            *wrong += differs_from_backtrace(&c);
            if (ids) ids[round * depths + d] = c.walk_id;
        }
    }
    mt_unwind_stats(&t1);
    return t1.whole_hits - t0.whole_hits;
}

/* An id names the frames a walk gave, not the memo that held them: more call sites under one key
 * than a set has ways, visited in a cycle, evict each other (every walk is done again, not found
 * whole), yet each site's walk keeps its id from round to round, so that what a caller keeps
 * under the id (the recorder's leaf memo) still applies. Before 2026-11-23 each new walk got a
 * new id, and the recorder built the stack again. */
Test(record_unwind, a_walk_done_again_with_the_same_frames_keeps_its_id)
{
    warm_backtrace();
    enum { SITES = MT_MEMO_ASSOC + 2, ROUNDS = 3 };
    uint64_t ids[ROUNDS][SITES];
    int wrong;
    uint64_t whole = cycle_depths(4711, SITES, ROUNDS, &ids[0][0], &wrong);
    cr_expect_eq(wrong, 0, "%d walks differ from backtrace()", wrong);
    cr_expect_lt(whole, SITES, "the sites must have evicted each other (%lu found whole)",
                 (unsigned long)whole);
    for (int d = 0; d < SITES; d++) {
        cr_expect_neq(ids[0][d], 0);
        for (int round = 1; round < ROUNDS; round++)
            cr_expect_eq(ids[round][d], ids[0][d], "site %d, round %d: a new id", d, round);
        if (d) cr_expect_neq(ids[0][d], ids[0][d - 1], "sites %d and %d share an id", d - 1, d);
    }
}

/* One key, twelve walks from twelve depths, visited in a cycle: all of them stay in the key's set
 * and are found whole a round later. ResNet-18's batch-norm and convolution lines reach the
 * allocator along 2-3 native paths from 3 depths of nested modules; with eight ways a set could
 * not hold them and the cycle missed every time (unwind_memo.h). */
Test(record_unwind, one_key_reached_from_twelve_depths_keeps_all_its_walks)
{
    warm_backtrace();
    enum { DEPTHS = 12, ROUNDS = 3 };
    int wrong;
    uint64_t whole = cycle_depths(4721, DEPTHS, ROUNDS, NULL, &wrong);
    cr_expect_eq(wrong, 0, "%d walks differ from backtrace()", wrong);
    cr_expect_eq(whole, (ROUNDS - 1) * DEPTHS, "%lu of %d walks found whole",
                 (unsigned long)whole, (ROUNDS - 1) * DEPTHS);
}

/* A training step allocates from ~40 places: every one must find its own earlier walk a step
 * later (the memos must hold them all), while the previous walk, from the other root, helps
 * nothing. */
Test(record_unwind, forty_call_sites_each_find_their_walk_a_round_later)
{
    warm_backtrace();
    int wrong = 0;
    capture c;
    mt_unwind_totals t0, t1;
    for (int round = 0; round < 12; round++) {
        if (round == 2) mt_unwind_stats(&t0);
        for (int site = 0; site < 40; site++) {
            (site % 2 ? root_a : root_b)(&c, 1000 + (uint64_t)site);
            wrong += differs_from_backtrace(&c);
        }
    }
    mt_unwind_stats(&t1);
    uint64_t s1 = t1.rule_steps, s0 = t0.rule_steps;
    cr_expect_eq(wrong, 0, "%d frames differ from backtrace()", wrong);
    /* 400 walks after warm-up; each would step ~DEEP frames if its own walk had been evicted. A
     * few sets may overflow (40 keys over the sets): allow a tenth of that. */
    cr_expect_lt(s1 - s0, 400 * DEEP / 10, "%lu frames stepped by rule in 400 walks",
                 (unsigned long)(s1 - s0));
}

/* rbp as a scratch register holding a different value at every call (as PyTorch's code does with
 * pointers): the keyed memo must still match (rbp plays no part in those frames' rules) and the
 * frames above must still come out right, through a frame-pointer caller whose CFA needs the
 * caller's rbp reloaded from the stack. */
static volatile long noise;
static NO_FP void rbp_noise(capture *c)
{
    long v = ++noise * 0x1000 + 8;
    __asm__ volatile("movq %0, %%rbp" ::"r"(v) : "rbp");
    keyed_deep(c, 33, 5);
    sink++;
}

static NOINLINE void fp_noise(capture *c)
{
    rbp_noise(c);
    sink++;
}

Test(record_unwind, keyed_memo_matches_whatever_scratch_rbp_holds)
{
    warm_backtrace();
    capture c;
    int wrong = 0;
    fp_noise(&c);
    mt_unwind_totals t0, t1;
    mt_unwind_stats(&t0);
    for (int k = 0; k < 100; k++) {
        fp_noise(&c);
        wrong += differs_from_backtrace(&c);
    }
    mt_unwind_stats(&t1);
    uint64_t s1 = t1.rule_steps, s0 = t0.rule_steps;
    cr_expect_eq(wrong, 0, "%d frames differ from backtrace()", wrong);
    cr_expect_lt(s1 - s0, 100 * 3, "%lu frames stepped by rule in 100 walks",
                 (unsigned long)(s1 - s0));
}

/* The memo holds 1 024 walks in 64 sets of 16, the set chosen by the key: 300 call sites, one walk
 * each, mostly fit (with 8 ways ~7% of them landed in a set holding more than 8); a round later
 * those that fit are found whole. (A shift that used only 32 of the 64 sets left ~70% of them
 * out.) */
static void *three_hundred_sites(void *out)
{
    capture c;
    mt_unwind_totals t0, t1;
    for (int round = 0; round < two; round++) { /* one call site: the same stack both rounds */
        if (round == 1) mt_unwind_stats(&t0);
        for (int k = 1; k <= sites; k++) keyed_deep(&c, (uint64_t)k * 7919, 3);
    }
    mt_unwind_stats(&t1);
    *(uint64_t *)out = t1.whole_hits - t0.whole_hits;
    return NULL;
}

/* On a thread of its own: Criterion's main thread has frames more than 512 KiB up its stack,
 * too far for a whole check (unwind_memo.h), so its walks are only ever matched in part. */
Test(record_unwind, three_hundred_call_sites_mostly_fit_in_the_memo)
{
    uint64_t whole = 0;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, three_hundred_sites, &whole), 0);
    pthread_join(t, NULL);
    cr_expect_geq(whole, 250, "%lu of 300 walks found whole a round later", (unsigned long)whole);
}

/* A walk that ends at the stop range never reads the rbp the boundary frame holds: the recorder's
 * boundary is the interpreter's eval loop, whose rbp is a scratch register that differs with every
 * Python caller. A remembered walk must hold whatever it holds. below_boundary saves rbp (its
 * frame is rbp-based: a VLA), so the last step loads boundary_noise's changing rbp. */
static NOINLINE void below_boundary(capture *c, int len)
{
    volatile char buf[len];
    buf[0] = 1;
    c->n = mt_unwind_keyed(c->ips, MT_MAX_FRAMES, 0, &c->truncated, 77, &c->walk_id);
    sink += buf[0];
}

static NO_FP void boundary_noise(capture *c)
{
    long v = ++noise * 0x1000 + 8;
    __asm__ volatile("movq %0, %%rbp" ::"r"(v) : "rbp");
    below_boundary(c, 16 + sink % 2);
    sink++;
}

Test(record_unwind, walk_ended_at_the_stop_range_holds_whatever_rbp_the_boundary_holds)
{
    uintptr_t lo = (uintptr_t)boundary_noise;
    mt_unwind_stop_at(lo, lo + 256);
    capture c;
    boundary_noise(&c);
    uint64_t first = c.walk_id;
    mt_unwind_totals t0, t1;
    mt_unwind_stats(&t0);
    int wrong = 0;
    for (int k = 0; k < 100; k++) {
        boundary_noise(&c);
        wrong += c.n != 2 || !c.truncated || !returns_into(c.ips[1], (void (*)(void))boundary_noise) ||
                 c.walk_id != first;
    }
    mt_unwind_stats(&t1);
    cr_expect_eq(wrong, 0, "%d walks were not the remembered one (2 frames, ending in "
                 "boundary_noise)", wrong);
    cr_expect_eq(t1.whole_hits - t0.whole_hits, 100);
    mt_unwind_stop_at(0, 0);
}

/* mt_unwind_keyed_lazy: a call site walked before is answered with MT_UNWIND_LATER and its walk
 * id, no frames; mt_unwind_recall then gives the frames backtrace() gives, and refuses (-1) once
 * another walk ran on the thread. The first walk of a site is a real one. */
static NOINLINE void lazy_leaf(capture *c, uint64_t key, int recall_after_other)
{
    c->n = mt_unwind_keyed_lazy(c->ips, MT_MAX_FRAMES, 0, &c->truncated, key, &c->walk_id);
    c->nbt = backtrace(c->bt, MT_MAX_FRAMES + 16);
    skip_interceptor_frames(c);
    c->lazy = c->n == MT_UNWIND_LATER;
    if (c->n == MT_UNWIND_LATER) {
        if (recall_after_other) {
            uint64_t other[MT_MAX_FRAMES];
            mt_unwind(other, MT_MAX_FRAMES, 0, NULL);
        }
        int t = -1;
        c->n = mt_unwind_recall(c->walk_id, c->ips, MT_MAX_FRAMES, 0, &t);
        if (c->n >= 0) cr_expect_eq(t, c->truncated, "recall and check agree on truncation");
        c->truncated = t;
    }
    sink++;
}

static NOINLINE void lazy_mid(capture *c, uint64_t key, int other)
{
    lazy_leaf(c, key, other);
    sink++;
}

Test(record_unwind, lazy_walks_recall_the_frames_a_real_walk_gives)
{
    warm_backtrace();
    capture c;
    int wrong = 0, lazy = 0;
    for (int k = 0; k < 50; k++) {
        (k % 5 ? lazy_mid : (void (*)(capture *, uint64_t, int))lazy_leaf)(&c, 55 + k % 5, 0);
        lazy += c.lazy;
        wrong += differs_from_backtrace(&c);
    }
    cr_expect_eq(wrong, 0, "%d frames differ from backtrace()", wrong);
    cr_expect_geq(lazy, 40, "only %d of 50 walks were answered lazily", lazy);

    uint64_t how[2];
    int n[2];
    for (int k = 0; k < two; k++) { /* one call site: a fresh key walked for real, then */
        lazy_mid(&c, 99, 1);        /* remembered, but another walk runs before the recall */
        how[k] = (uint64_t)c.lazy;
        n[k] = c.n;
    }
    cr_expect_eq(how[0], 0);
    cr_expect_eq(how[1], 1);
    cr_expect_eq(n[1], -1, "recall after another walk must refuse");
    cr_expect_eq(mt_unwind_recall(0, c.ips, MT_MAX_FRAMES, 0, NULL), -1, "id 0 names no walk");
}

/* A short lazy walk (max below the stack's depth) is truncated, and recall cuts it the same way. */
Test(record_unwind, lazy_walk_cut_at_max)
{
    uint64_t ips[4], full[MT_MAX_FRAMES];
    int t = -1, n = 0;
    uint64_t id = 0;
    for (int k = 0; k < two; k++) {
        n = mt_unwind_keyed_lazy(ips, 3, 0, &t, 77, &id);
        if (n == MT_UNWIND_LATER) n = mt_unwind_recall(id, ips, 3, 0, &t);
    }
    cr_expect_eq(n, 3);
    cr_expect_eq(t, 1);
    int nf = mt_unwind(full, MT_MAX_FRAMES, 0, NULL);
    cr_assert_gt(nf, 3);
    for (int i = 1; i < 3; i++) cr_expect_eq(ips[i], full[i], "frame %d", i);
}

/* mt_unwind_slot: bytes that stay with a remembered walk (the recorder keeps the stack's leaf
 * there), NULL for an id that is not the thread's latest walk, and zero again once the walk
 * under that key changed. mt_unwind_prefetch is only a hint: it must not change any result. */
static NOINLINE void slot_leaf(capture *c, uint64_t key)
{
    mt_unwind_prefetch(key);
    c->n = mt_unwind_keyed_lazy(c->ips, MT_MAX_FRAMES, 0, &c->truncated, key, &c->walk_id);
    c->nbt = backtrace(c->bt, MT_MAX_FRAMES + 16);
    skip_interceptor_frames(c);
    if (c->n == MT_UNWIND_LATER)
        c->n = mt_unwind_recall(c->walk_id, c->ips, MT_MAX_FRAMES, 0, NULL);
    sink++;
}

static NOINLINE void slot_a(capture *c, uint64_t key)
{
    slot_leaf(c, key);
    sink++;
}

static NOINLINE void slot_b(capture *c, uint64_t key)
{
    slot_leaf(c, key);
    sink += 2;
}

Test(record_unwind, slot_stays_with_its_walk)
{
    warm_backtrace();
    capture c;
    mt_unwind_prefetch(0);      /* no key: nothing to do */
    mt_unwind_prefetch(123456); /* a key never walked */
    uint64_t ids[6];
    unsigned char *slots[6];
    int wrong = 0;
    for (int k = 0; k < 6; k++) {
        (k < 3 ? slot_a : slot_b)(&c, 4242); /* same key and depth, another path from k = 3 */
        wrong += differs_from_backtrace(&c);
        ids[k] = c.walk_id;
        slots[k] = mt_unwind_slot(c.walk_id);
        cr_assert_not_null(slots[k], "walk %d has a slot", k);
        if (k == 0 || k == 3) cr_expect_eq(slots[k][0], 0, "a new walk's slot is zero (%d)", k);
        if (k == 1 || k == 2 || k == 4 || k == 5)
            cr_expect_eq(slots[k][0], 0x5a, "the slot kept what walk %d's id wrote", k);
        slots[k][0] = 0x5a;
    }
    cr_expect_eq(wrong, 0);
    cr_expect_eq(ids[0], ids[2]);
    cr_expect_neq(ids[2], ids[3], "another path: another id");
    cr_expect_null(mt_unwind_slot(ids[0]), "not the latest walk: no slot");
    cr_expect_null(mt_unwind_slot(0));
}
