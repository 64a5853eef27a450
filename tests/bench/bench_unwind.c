/* bench_unwind — cost of capturing one stack on the recorder's hot path.
 *
 * A chain of 40 distinct functions (odd ones without frame pointers, like libtorch) calls a leaf
 * that measures, in ns per call:
 *   - mt_unwind, cold (first call: every rule parsed from .eh_frame), warm with the outer stack
 *     unchanged since the thread's last walk (the memo validates it), warm with two leaves
 *     alternating (the memo takes over two frames up), and warm with the memo held off (every
 *     frame through the rule cache: the cost of a stack never seen on this thread);
 *   - the same stack unchanged, but with the caches flushed between calls by a pass over 4 MiB
 *     (past L2) or 96 MiB (past L3): what the recorder meets in a training step, where the
 *     program evicts the memo and the outer stack between two allocations; each call timed alone;
 *   - glibc backtrace() on the same stack, for comparison;
 *   - mt_trie_intern of the result with the per-thread cache (same stack as last time: the
 *     common case) and without it (every frame hashed under the mutex);
 *   - unwind + intern together, the per-event cost the recorder pays (budget: 300 ns).
 * Usage: bench_unwind [iterations]
 */
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "memtrace/record.h"
#include "record/unwind_memo.h"

static long iterations = 200000;
static volatile int sink;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static __attribute__((noinline)) int leaf_a(uint64_t *ips, int *truncated)
{
    int n = mt_unwind(ips, MT_MAX_FRAMES, 0, truncated);
    sink++;
    return n;
}

static __attribute__((noinline)) int leaf_b(uint64_t *ips, int *truncated)
{
    int n = mt_unwind(ips, MT_MAX_FRAMES, 0, truncated);
    sink += 2;
    return n;
}

/* Mean ns of one mt_unwind right after a write pass over `bytes` of other memory. */
static double flushed_unwind(uint64_t *ips, int *n, int *truncated, size_t bytes, long iters)
{
    volatile unsigned char *flush = malloc(bytes);
    if (!flush) return 0;
    double sum = 0;
    for (long i = 0; i < iters; i++) {
        for (size_t b = 0; b < bytes; b += 64)
            flush[b]++;
        double t0 = now_ns();
        *n = mt_unwind(ips, MT_MAX_FRAMES, 0, truncated);
        sum += now_ns() - t0;
    }
    free((void *)flush);
    return sum / iters;
}

static __attribute__((noinline)) void measure(void)
{
    uint64_t ips[MT_MAX_FRAMES];
    void *bt[MT_MAX_FRAMES];
    int truncated = 0, n = 0;

    double t0 = now_ns();
    n = mt_unwind(ips, MT_MAX_FRAMES, 0, &truncated);
    double cold = now_ns() - t0;

    t0 = now_ns();
    for (long i = 0; i < iterations; i++)
        n = mt_unwind(ips, MT_MAX_FRAMES, 0, &truncated);
    double warm = (now_ns() - t0) / iterations;

    t0 = now_ns();
    for (long i = 0; i < iterations; i++)
        n = (i & 1) ? leaf_a(ips, &truncated) : leaf_b(ips, &truncated);
    double alternating = (now_ns() - t0) / iterations;

    /* Holding this thread's memos makes mt_unwind run as if it had none (see unwind_memo.h). */
    mt_walk_memos *held = mt_walk_memo_acquire();
    t0 = now_ns();
    for (long i = 0; i < iterations; i++)
        n = mt_unwind(ips, MT_MAX_FRAMES, 0, &truncated);
    double no_memo = (now_ns() - t0) / iterations;
    if (held) mt_walk_memo_release(held);

    double evicted_l2 = flushed_unwind(ips, &n, &truncated, 4 << 20, iterations / 100 + 1);
    double evicted_l3 = flushed_unwind(ips, &n, &truncated, 96 << 20, iterations / 4000 + 1);

    backtrace(bt, MT_MAX_FRAMES); /* first call loads libgcc_s */
    long bt_iters = iterations / 20 + 1;
    int nbt = 0;
    t0 = now_ns();
    for (long i = 0; i < bt_iters; i++)
        nbt = backtrace(bt, MT_MAX_FRAMES);
    double glibc = (now_ns() - t0) / bt_iters;

    mt_trie *trie = mt_trie_new(NULL, NULL);
    static mt_trie_cache cache; /* 1.5 KiB: per thread in the recorder */
    uint32_t leaf = mt_trie_intern(trie, &cache, ips, n);
    t0 = now_ns();
    for (long i = 0; i < iterations; i++)
        leaf ^= mt_trie_intern(trie, &cache, ips, n);
    double cached = (now_ns() - t0) / iterations;
    t0 = now_ns();
    for (long i = 0; i < iterations; i++)
        leaf ^= mt_trie_intern(trie, NULL, ips, n);
    double uncached = (now_ns() - t0) / iterations;

    t0 = now_ns();
    for (long i = 0; i < iterations; i++) {
        n = mt_unwind(ips, MT_MAX_FRAMES, 0, &truncated);
        leaf ^= mt_trie_intern(trie, &cache, ips, n);
    }
    double both = (now_ns() - t0) / iterations;
    sink += (int)leaf;

    printf("frames: mt_unwind %d (truncated %d), backtrace %d; trie nodes %u\n", n, truncated, nbt,
           mt_trie_size(trie));
    printf("mt_unwind cold (first call)   %10.0f ns\n", cold);
    printf("mt_unwind warm, same stack    %10.1f ns/call  %6.2f ns/frame\n", warm, warm / n);
    printf("mt_unwind warm, 2 leaves alt. %10.1f ns/call  %6.2f ns/frame\n", alternating,
           alternating / n);
    printf("mt_unwind warm, memo off      %10.1f ns/call  %6.2f ns/frame\n", no_memo, no_memo / n);
    printf("mt_unwind, L2 flushed         %10.1f ns/call  %6.2f ns/frame\n", evicted_l2,
           evicted_l2 / n);
    printf("mt_unwind, L3 flushed         %10.1f ns/call  %6.2f ns/frame\n", evicted_l3,
           evicted_l3 / n);
    printf("glibc backtrace               %10.1f ns/call  (%.0fx memo off)\n", glibc,
           glibc / no_memo);
    printf("mt_trie_intern, cache         %10.1f ns/call\n", cached);
    printf("mt_trie_intern, no cache      %10.1f ns/call\n", uncached);
    printf("unwind + intern (per event)   %10.1f ns/call\n", both);
    mt_trie_free(trie);
}

/* 40 distinct frames: f40 -> f39 -> ... -> f1 -> measure. */
#define FP __attribute__((noinline))
#define NOFP __attribute__((noinline, optimize("omit-frame-pointer")))
#define LINK(attr, name, next)                                                                     \
    static attr void name(void)                                                                    \
    {                                                                                              \
        next();                                                                                    \
        sink++;                                                                                    \
    }
LINK(FP, f1, measure)
LINK(NOFP, f2, f1)
LINK(FP, f3, f2) LINK(NOFP, f4, f3) LINK(FP, f5, f4) LINK(NOFP, f6, f5) LINK(FP, f7, f6)
    LINK(NOFP, f8, f7) LINK(FP, f9, f8) LINK(NOFP, f10, f9) LINK(FP, f11, f10) LINK(NOFP, f12, f11)
        LINK(FP, f13, f12) LINK(NOFP, f14, f13) LINK(FP, f15, f14) LINK(NOFP, f16, f15)
            LINK(FP, f17, f16) LINK(NOFP, f18, f17) LINK(FP, f19, f18) LINK(NOFP, f20, f19)
                LINK(FP, f21, f20) LINK(NOFP, f22, f21) LINK(FP, f23, f22) LINK(NOFP, f24, f23)
                    LINK(FP, f25, f24) LINK(NOFP, f26, f25) LINK(FP, f27, f26) LINK(NOFP, f28, f27)
                        LINK(FP, f29, f28) LINK(NOFP, f30, f29) LINK(FP, f31, f30)
                            LINK(NOFP, f32, f31) LINK(FP, f33, f32) LINK(NOFP, f34, f33)
                                LINK(FP, f35, f34) LINK(NOFP, f36, f35) LINK(FP, f37, f36)
                                    LINK(NOFP, f38, f37) LINK(FP, f39, f38) LINK(NOFP, f40, f39)

                                        int main(int argc, char **argv)
{
    if (argc > 1) iterations = atol(argv[1]);
    if (iterations < 1) iterations = 1;
    f40();
    return 0;
}
