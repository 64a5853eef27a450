/* synthetic.h — a deterministic, realistic-looking stream of alloc/free events, shared by the
 * size test (tests/test_trace_size.c) and the size benchmark (tests/bench/bench_trace_size.c), so
 * that the bound the test enforces is measured on the very stream the benchmark reports.
 *
 * What "realistic" means here (a program calling cudaMalloc/cudaFree directly, no caching):
 *   - 4 threads; events reach the writer in per-thread runs of 1..64 (the sink drains per-thread
 *     rings), so time jumps back a little at each thread switch;
 *   - time: each thread's clock advances 1..60 us per event, with nanosecond noise;
 *   - 300 distinct sizes (512 B .. ~64 MiB, multiples of 512), a few of them very common;
 *   - 1024 address slots on a 2 MiB grid; an ALLOC takes a free slot (low ones first, like an
 *     allocator), a FREE releases a live one, the most recent half the time; 100..900 live;
 *   - FREE carries the size of its ALLOC (the recorder tracks it), api cuMemAlloc_v2 (243) /
 *     cuMemFree_v2 (245), device 0, context 1, stream 0;
 *   - stacks: 48 leaf ids per thread for ALLOCs and 16 for FREEs, skewed;
 *   - correlation ids grow by 1..16 per event (other API calls happen in between).
 * Header-only, no global state: the whole generator lives in an mt_synth the caller owns.
 */
#ifndef MT_TRACE_SYNTHETIC_H
#define MT_TRACE_SYNTHETIC_H

#include <stdint.h>
#include <string.h>

#include "hash.h"
#include "memtrace/trace.h"

#define MT_SYNTH_THREADS 4
#define MT_SYNTH_SLOTS 1024
#define MT_SYNTH_SIZES 300

typedef struct mt_synth {
    uint64_t rng;
    uint64_t clock[MT_SYNTH_THREADS];
    uint64_t sizes[MT_SYNTH_SIZES];
    uint64_t slot_bytes[MT_SYNTH_SLOTS]; /* 0 = free */
    uint32_t live[MT_SYNTH_SLOTS];       /* live slot numbers, most recent last */
    uint32_t nlive;
    uint32_t correlation;
    unsigned thread, run_left;
} mt_synth;

static inline uint64_t mt_synth_rand(mt_synth *s)
{
    s->rng ^= s->rng >> 12; /* xorshift64* */
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 2685821657736338717ull;
}

/* 0..n-1, skewed toward 0 (the min of two uniform draws). */
static inline uint64_t mt_synth_skewed(mt_synth *s, uint64_t n)
{
    uint64_t a = mt_synth_rand(s) % n, b = mt_synth_rand(s) % n;
    return a < b ? a : b;
}

static inline void mt_synth_init(mt_synth *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->rng = seed * MT_GOLDEN64 + 1;
    for (unsigned i = 0; i < MT_SYNTH_SIZES; i++) {
        unsigned shift = 9 + (unsigned)(mt_synth_rand(s) % 17); /* 512 B .. 32 MiB scale */
        s->sizes[i] = ((uint64_t)1 << shift) + (mt_synth_rand(s) % 64) * 512;
    }
    for (unsigned t = 0; t < MT_SYNTH_THREADS; t++)
        s->clock[t] = 1000000000ull * 3600;
    s->correlation = 1000;
}

static inline uint64_t mt_synth_slot_address(unsigned slot)
{
    return 0x7f3a40000000ull + (uint64_t)slot * (2u << 20);
}

/* Fills *e with the next event. */
static inline void mt_synth_next(mt_synth *s, mt_event *e)
{
    if (s->run_left == 0) {
        s->thread = (unsigned)(mt_synth_rand(s) % MT_SYNTH_THREADS);
        s->run_left = 1 + (unsigned)(mt_synth_rand(s) % 64);
    }
    s->run_left--;
    unsigned t = s->thread;
    s->clock[t] += 1000 + mt_synth_rand(s) % 59000;
    s->correlation += 1 + (uint32_t)(mt_synth_rand(s) % 16);

    memset(e, 0, sizeof *e);
    e->time_ns = s->clock[t];
    e->tid = 4242 + t;
    e->device = 0;
    e->context = 1;
    e->kind = MT_KIND_DEVICE;
    e->correlation = s->correlation;

    int do_alloc = s->nlive < 100 || (s->nlive < 900 && (mt_synth_rand(s) & 1));
    if (do_alloc) {
        unsigned slot = 0, tries = 0;
        do { /* low slots first, like a first-fit allocator */
            slot = (unsigned)mt_synth_skewed(s, MT_SYNTH_SLOTS);
        } while (s->slot_bytes[slot] != 0 && ++tries < 32);
        while (s->slot_bytes[slot] != 0)
            slot = (slot + 1) % MT_SYNTH_SLOTS; /* < 900 live */
        uint64_t size = s->sizes[mt_synth_skewed(s, MT_SYNTH_SIZES)];
        s->slot_bytes[slot] = size;
        s->live[s->nlive++] = slot;
        e->op = MT_OP_ALLOC;
        e->api = 243; /* cuMemAlloc_v2 */
        e->address = mt_synth_slot_address(slot);
        e->bytes = size;
        e->stack = 1 + t * 64 + (uint32_t)mt_synth_skewed(s, 48);
    } else {
        uint32_t i =
            (mt_synth_rand(s) & 1) ? s->nlive - 1 : (uint32_t)(mt_synth_rand(s) % s->nlive);
        unsigned slot = s->live[i];
        memmove(&s->live[i], &s->live[i + 1], (s->nlive - i - 1) * sizeof s->live[0]);
        s->nlive--;
        e->op = MT_OP_FREE;
        e->api = 245; /* cuMemFree_v2 */
        e->address = mt_synth_slot_address(slot);
        e->bytes = s->slot_bytes[slot];
        s->slot_bytes[slot] = 0;
        e->stack = 1 + t * 64 + 48 + (uint32_t)mt_synth_skewed(s, 16);
    }
}

#endif
