/* EXPERIMENT (to be reverted): MEMTRACE_EXP_GAP=1 — what recording does to the program's own work
 * between two tensor reports on one thread, recording phases against paused ones (samples/train.py
 * --ab). Every usage stand-in stamps its entry and its exit (after the original); the gap from a
 * thread's last exit to its next entry, and the stand-in's own span, are added per [paused][free]
 * into the thread's own histograms (no shared line written on the hot path), and summed at exit.
 *
 * Why: the in-process A/B reads ~1-1.5 points above what the cost notes time inside the reports
 * (docs/performance.md, "The writer's share"); if what a report evicts slows the program's next
 * microseconds, the gap grows in recording phases by about that much per report. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recorder.h"
#include "../hot_path.h"

#define GAP_BUCKET_CYC 32 /* ~15 ns at 2.1 GHz */
#define GAP_BUCKETS 4096  /* to ~60 µs */
#define SPAN_BUCKETS 512  /* to ~7.8 µs */
#define MAX_THREADS 64

typedef struct gap_tls_block {
    uint32_t gap[2][2][GAP_BUCKETS]; /* [paused][free] */
    uint64_t gap_over[2][2], gap_sum[2][2], gap_n[2][2];
    uint32_t span[2][2][SPAN_BUCKETS];
    uint64_t span_over[2][2], span_sum[2][2], span_n[2][2];
} gap_tls_block;

typedef struct gap_tls {
    gap_tls_block *b;
    uint64_t last_exit;
    int last_paused;
    int failed;
} gap_tls;

int mt_exp_gap;
static __thread gap_tls tls_gap;
static gap_tls_block *blocks[MAX_THREADS];
static _Atomic int nblocks;

static gap_tls_block *block(void)
{
    gap_tls *t = &tls_gap;
    if (t->b || t->failed) return t->b;
    int i = atomic_fetch_add(&nblocks, 1);
    if (i >= MAX_THREADS || !(t->b = calloc(1, sizeof *t->b))) {
        t->failed = 1;
        return NULL;
    }
    blocks[i] = t->b;
    return t->b;
}

void mt_exp_gap_init(void)
{
    const char *v = getenv("MEMTRACE_EXP_GAP");
    mt_exp_gap = v && v[0] == '1';
}

MT_HOT_PATH void mt_exp_gap_enter(uint64_t entry, int paused, int is_free)
{
    gap_tls *t = &tls_gap;
    gap_tls_block *b = block();
    if (!b) return;
    paused = paused != 0;
    if (t->last_exit && t->last_paused == paused && entry > t->last_exit) {
        uint64_t g = entry - t->last_exit, k = g / GAP_BUCKET_CYC;
        if (k < GAP_BUCKETS) {
            b->gap[paused][is_free][k]++;
            b->gap_sum[paused][is_free] += g;
            b->gap_n[paused][is_free]++;
        } else {
            b->gap_over[paused][is_free]++;
        }
    }
}

MT_HOT_PATH void mt_exp_gap_exit(uint64_t entry, int paused, int is_free)
{
    gap_tls *t = &tls_gap;
    uint64_t now = mt_clock_cycles();
    gap_tls_block *b = t->b;
    paused = paused != 0;
    if (b && now > entry) {
        uint64_t s = now - entry, k = s / GAP_BUCKET_CYC;
        if (k < SPAN_BUCKETS) {
            b->span[paused][is_free][k]++;
            b->span_sum[paused][is_free] += s;
            b->span_n[paused][is_free]++;
        } else {
            b->span_over[paused][is_free]++;
        }
    }
    t->last_paused = paused;
    t->last_exit = mt_clock_cycles(); /* after this bookkeeping: the gap is the program's alone */
}

static void quartiles(const uint64_t *h, size_t nb, uint64_t total, double cyc_ns, double q[3])
{
    const double at[3] = {0.25, 0.5, 0.75};
    uint64_t sum = 0;
    int k = 0;
    q[0] = q[1] = q[2] = 0;
    for (size_t i = 0; i < nb && k < 3; i++) {
        sum += h[i];
        while (k < 3 && total && (double)sum >= at[k] * (double)total)
            q[k++] = ((double)i + 0.5) * GAP_BUCKET_CYC * cyc_ns;
    }
}

void mt_exp_gap_note(void)
{
    if (!mt_exp_gap) return;
    uint64_t khz = mt_clock_tsc_khz();
    double cyc_ns = khz ? 1e6 / (double)khz : 0;
    static uint64_t gh[GAP_BUCKETS], sh[SPAN_BUCKETS];
    int n = atomic_load(&nblocks);
    if (n > MAX_THREADS) n = MAX_THREADS;
    for (int p = 0; p < 2; p++)
        for (int f = 0; f < 2; f++) {
            memset(gh, 0, sizeof gh);
            memset(sh, 0, sizeof sh);
            uint64_t gn = 0, gs = 0, go = 0, sn = 0, ss = 0, so = 0;
            for (int i = 0; i < n; i++) {
                gap_tls_block *b = blocks[i];
                if (!b) continue;
                for (int k = 0; k < GAP_BUCKETS; k++) gh[k] += b->gap[p][f][k];
                for (int k = 0; k < SPAN_BUCKETS; k++) sh[k] += b->span[p][f][k];
                gn += b->gap_n[p][f], gs += b->gap_sum[p][f], go += b->gap_over[p][f];
                sn += b->span_n[p][f], ss += b->span_sum[p][f], so += b->span_over[p][f];
            }
            double gq[3], sq[3];
            quartiles(gh, GAP_BUCKETS, gn, cyc_ns, gq);
            quartiles(sh, SPAN_BUCKETS, sn, cyc_ns, sq);
            mt_trace_note(MT_NOTE_INFO,
                          "EXPERIMENT gap %s %s: gaps n %llu mean %.1f ns quartiles %.0f/%.0f/%.0f "
                          "over %llu; stand-in n %llu mean %.1f ns quartiles %.0f/%.0f/%.0f over %llu",
                          p ? "paused" : "recording", f ? "frees" : "allocations",
                          (unsigned long long)gn, gn ? (double)gs / (double)gn * cyc_ns : 0, gq[0],
                          gq[1], gq[2], (unsigned long long)go, (unsigned long long)sn,
                          sn ? (double)ss / (double)sn * cyc_ns : 0, sq[0], sq[1], sq[2],
                          (unsigned long long)so);
        }
}
