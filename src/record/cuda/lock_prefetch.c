/* lock_prefetch.c — EXPERIMENT (MEMTRACE_EXP_LOCKPF): fetch what the next tensor report reads
 * while PyTorch's allocator works, from a stand-in for libc10_cuda's pthread_mutex_lock.
 *
 * A report runs after the allocator has done its work, 10 µs of the program's own work after the
 * last report, so the recorder's lines are cold and its first misses wait on each other. The
 * allocator takes its lock before that work: a stand-in there can ask for the lines the report
 * will read (the thread's ring slot, clock copy, in-flight slot, Python thread state and innermost
 * frame as the last report found them; the recorder's hot fields; with mode 2 also the first line
 * of the hot functions and of CPython's) so that they arrive while the allocator runs.
 *
 * Measured in one process: reports alternate, in blocks of 256 per thread, between a block whose
 * locks prefetch and one whose locks do not; the whole-report samples and the cycles from the
 * last lock to the report are added up per block kind and noted at exit.
 *
 * The stand-in issues prefetches only (they never fault) and one load of its thread's plan
 * line, then calls the original. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

#include "recorder.h"
#include "../clock.h"
#include "../hot_path.h"
#include "../unwind_memo.h"

#define PLAN_ADDRS 22
#define BLOCK 256

typedef struct plan {
    uint32_t on;       /* this block's locks prefetch */
    uint32_t n;        /* addresses in addr */
    const void *addr[PLAN_ADDRS];
    uint64_t lock_tsc; /* the last lock's TSC, at the stand-in's entry */
    /* mode 5: the allocation that followed the last one's memo last time, predicted */
    struct succ *entry;  /* the table's entry for the last allocation's memo id */
    uint64_t prev_id;    /* that memo id */
    struct succ *table;  /* SUCC_ENTRIES, this thread's */
    uint32_t reports;  /* this thread's reports so far */
    uint64_t locks;
} __attribute__((aligned(64))) plan;

#define SUCC_ENTRIES 1024
/* What followed a walk memo (by id) last time on this thread: prefetched through, never written
 * through (a memo is freed when its way is replaced). */
struct succ {
    uint64_t id;
    uintptr_t memo, frame;
    uint64_t pad;
};

static __thread plan tls_plan;
extern __thread uint64_t mt_stacks_last_walk_id;
extern __thread uintptr_t mt_pyframes_last_seen[2];
const void *mt_sink_next_slot(void);

static struct {
    int mode; /* 0 off, 1 data, 2 data and code */
    mt_got_hook table[1];
    mt_got_patcher *patcher;
    const void *fixed[14]; /* lines every report reads, the same for every thread */
    int nfixed;
    _Atomic uint64_t cycles[3][2], calls[3][2]; /* [on][free] whole report */
    _Atomic uint64_t gap[3], gaps[3];            /* [on] lock -> report cycles */
    _Atomic uint64_t span[3];                    /* [on] lock -> report's end cycles */
    _Atomic uint64_t locks, reports;
    int active;
    /* mode 4: the report's first instruction -> its end, [on] */
    _Atomic uint64_t first_cycles[2][2], first_calls[2][2];
    /* mode 3: lock -> the usage stand-in's entry, by [paused][free], 50 ns buckets to 10 µs */
    _Atomic uint64_t hist[2][2][200], over[2][2];
} lpf;

int mt_lockpf_diag; /* mode 3 */

MT_HOT_PATH void mt_lockpf_gap(uint64_t now, int paused, int is_free)
{
    plan *p = &tls_plan;
    uint64_t t = p->lock_tsc;
    p->lock_tsc = 0;
    p->reports = p->reports * 1103515245u + 12345u;
    if (!t || now <= t || ((p->reports >> 16) & 7)) return; /* 1 in 8 */
    double nspc = mt_clock_tsc_khz() ? 1e6 / (double)mt_clock_tsc_khz() : 0.0;
    uint64_t b = (uint64_t)((double)(now - t) * nspc / 50.0);
    if (b < 200) atomic_fetch_add_explicit(&lpf.hist[paused != 0][is_free][b], 1, memory_order_relaxed);
    else atomic_fetch_add_explicit(&lpf.over[paused != 0][is_free], 1, memory_order_relaxed);
}

static void gap_note(void)
{
    char text[600];
    size_t n = 0;
    for (int ps = 0; ps < 2; ps++)
        for (int f = 0; f < 2; f++) {
            uint64_t tot = atomic_load(&lpf.over[ps][f]), sum = 0;
            for (int b = 0; b < 200; b++) tot += atomic_load(&lpf.hist[ps][f][b]);
            double q[3] = {0.25, 0.5, 0.75}, v[3] = {0, 0, 0};
            int k = 0;
            for (int b = 0; b < 200 && k < 3; b++) {
                sum += atomic_load(&lpf.hist[ps][f][b]);
                while (k < 3 && tot && (double)sum >= q[k] * (double)tot) v[k++] = 50.0 * b + 25;
            }
            int w = snprintf(text + n, sizeof text - n, "%s %s: n %llu, quartiles %.0f/%.0f/%.0f ns, over 10us %llu; ",
                             ps ? "paused" : "recording", f ? "frees" : "allocations",
                             (unsigned long long)tot, v[0], v[1], v[2],
                             (unsigned long long)atomic_load(&lpf.over[ps][f]));
            if (w > 0 && (size_t)w < sizeof text - n) n += (size_t)w;
        }
    mt_trace_note(MT_NOTE_INFO, "EXPERIMENT lockgap: lock -> usage stand-in: %s", text);
}

typedef int (*lock_fn)(pthread_mutex_t *);

MT_HOT_PATH static int hook_lock(pthread_mutex_t *m)
{
    plan *p = &tls_plan;
    uint64_t t = __rdtsc();
    if (p->on)
        for (unsigned i = 0; i < p->n && i < PLAN_ADDRS; i++)
            _mm_prefetch((const char *)p->addr[i], _MM_HINT_T0);
    if (p->on == 2 && p->entry) {
        /* no branch on what the entry holds: an entry of another id prefetches the plan */
        const struct succ *e = p->entry;
        uintptr_t mine = -(uintptr_t)(e->id == p->prev_id);
        uintptr_t memo = (e->memo & mine) | ((uintptr_t)p & ~mine);
        uintptr_t frame = (e->frame & mine) | ((uintptr_t)p & ~mine);
        mt_walk_memo_prefetch((const mt_walk_memo *)memo);
        _mm_prefetch((const char *)frame, _MM_HINT_T0);
        _mm_prefetch((const char *)frame + 64, _MM_HINT_T0);
        __builtin_prefetch(e, 1);
    }
    p->lock_tsc = t;
    p->locks++;
    return ((lock_fn)lpf.table[0].original)(m);
}

void mt_lockpf_install(mt_recorder *r)
{
    const char *e = getenv("MEMTRACE_EXP_LOCKPF");
    lpf.mode = e ? atoi(e) : 0;
    if (lpf.mode <= 0 || !r->cfg.tensors) return;
    mt_lockpf_diag = lpf.mode == 3 || lpf.mode == 4 ? lpf.mode : 0;
    if (lpf.mode == 4) {
        lpf.active = 1;
        return; /* no lock stand-in: the TLS lines at the report's entry */
    }
    lpf.active = 1;
    int n = 0;
    lpf.fixed[n++] = (const void *)&r->enabled;
    lpf.fixed[n++] = (const void *)&r->paused;
    lpf.fixed[n++] = (const void *)&r->tensors.active;
    lpf.fixed[n++] = (const void *)&r->cfg.stacks;
    lpf.fixed[n++] = (const void *)&r->sink;
    if (lpf.mode >= 2) {
        const char *names[] = {"Py_IsInitialized", "PyGILState_GetThisThreadState",
                               "pthread_getspecific"};
        for (int i = 0; i < 3; i++) {
            void *f = dlsym(RTLD_DEFAULT, names[i]);
            if (f) lpf.fixed[n++] = f;
        }
        lpf.fixed[n++] = (const void *)mt_capture_stack;
        lpf.fixed[n++] = (const void *)mt_record_call;
        lpf.fixed[n++] = (const void *)mt_pyframes_signature;
        lpf.fixed[n++] = (const void *)mt_lockpf_report;
        lpf.fixed[n++] = (const void *)&r->tensors.table[0];
    }
    lpf.nfixed = n;
    lpf.table[0] = (mt_got_hook){.name = "pthread_mutex_lock", .hook = (void *)hook_lock};
    lpf.patcher = mt_got_patcher_new(lpf.table, 1);
    mt_got_patcher_only(lpf.patcher, "libc10_cuda.so");
    mt_lockpf_tick(r);
}

extern void *mt_lockpf_usage_hook; /* tensor_hooks.c's stand-in */

void mt_lockpf_tick(mt_recorder *r)
{
    (void)r;
    if (lpf.patcher) mt_got_patch_new(lpf.patcher, NULL, 0);
}

/* At a report's end: the sample (cycles, 0 when not sampled), then the next block's plan. */
/* Mode 4: the report's first instruction. In an on-block, every line of this module's TLS
 * block (the range the recorder's thread-local variables span) is asked for at once. */
const void *mt_sink_tls_addr(void);
MT_HOT_PATH uint64_t mt_lockpf_entry(void)
{
    uint64_t t = __rdtsc();
    plan *p = &tls_plan;
    if (p->on) {
        uintptr_t lo = p->lock_tsc, hi = p->locks; /* the range, set at the first report */
        for (uintptr_t a = lo; a < hi; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
    }
    return t;
}

MT_HOT_PATH void mt_lockpf_report4(int is_free, uint64_t cycles, uint64_t entry_tsc,
                                   uint64_t first_tsc)
{
    plan *p = &tls_plan;
    int on = p->on != 0;
    if (cycles && first_tsc && entry_tsc >= first_tsc) {
        atomic_fetch_add_explicit(&lpf.first_cycles[on][is_free], entry_tsc + cycles - first_tsc,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&lpf.first_calls[on][is_free], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&lpf.cycles[on][is_free], cycles, memory_order_relaxed);
        atomic_fetch_add_explicit(&lpf.calls[on][is_free], 1, memory_order_relaxed);
    }
    if (!p->locks) { /* first report on this thread: the TLS range */
        uintptr_t a[6] = {(uintptr_t)&mt_clock_tls, (uintptr_t)&mt_inflight_tls,
                          (uintptr_t)mt_pyframes_last_seen, (uintptr_t)p,
                          (uintptr_t)mt_sink_tls_addr(), (uintptr_t)&mt_clock_tls + 64};
        uintptr_t lo = a[0], hi = a[0];
        for (int i = 1; i < 6; i++) {
            if (a[i] < lo) lo = a[i];
            if (a[i] > hi) hi = a[i];
        }
        lo &= ~(uintptr_t)63;
        hi = (hi | 63) + 1 + 128; /* the variables after the last one known here */
        if (hi - lo > 16 * 64) hi = lo + 16 * 64;
        p->lock_tsc = lo, p->locks = hi;
    }
    if ((++p->reports & (BLOCK - 1)) == 0) p->on = !p->on;
}

MT_HOT_PATH void mt_lockpf_report(int is_free, uint64_t cycles, uint64_t entry_tsc)
{
    if (!lpf.patcher || mt_lockpf_diag) return;
    plan *p = &tls_plan;
    int on = (int)p->on;
    if (cycles) {
        if (p->lock_tsc && entry_tsc > p->lock_tsc && entry_tsc - p->lock_tsc < 1000000)
            atomic_fetch_add_explicit(&lpf.span[on], entry_tsc + cycles - p->lock_tsc,
                                      memory_order_relaxed);
        atomic_fetch_add_explicit(&lpf.cycles[on][is_free], cycles, memory_order_relaxed);
        atomic_fetch_add_explicit(&lpf.calls[on][is_free], 1, memory_order_relaxed);
        if (p->lock_tsc && entry_tsc > p->lock_tsc && entry_tsc - p->lock_tsc < 1000000) {
            atomic_fetch_add_explicit(&lpf.gap[on], entry_tsc - p->lock_tsc, memory_order_relaxed);
            atomic_fetch_add_explicit(&lpf.gaps[on], 1, memory_order_relaxed);
        }
    }
    if (lpf.mode >= 5 && !is_free) {
        uint64_t id = mt_stacks_last_walk_id;
        if (!p->table) p->table = calloc(SUCC_ENTRIES, sizeof *p->table);
        void *slot = id > 1 ? mt_unwind_slot(id) : NULL;
        if (p->table && slot) {
            uintptr_t memo = (uintptr_t)slot - offsetof(mt_walk_memo, slot);
            if (p->entry) /* what followed the previous allocation's walk: this one */
                *p->entry = (struct succ){.id = p->prev_id, .memo = memo,
                                          .frame = mt_pyframes_last_seen[1]};
            p->entry = &p->table[(id * MT_GOLDEN64) >> 54];
            p->prev_id = id;
        } else {
            p->entry = NULL;
        }
    }
    if ((++p->reports & (BLOCK - 1)) == 0) {
        p->on = lpf.mode >= 5 ? (p->on + 1) % 3 : !p->on;
        atomic_fetch_add_explicit(&lpf.locks, p->locks, memory_order_relaxed);
        atomic_fetch_add_explicit(&lpf.reports, BLOCK, memory_order_relaxed);
        p->locks = 0;
    }
    p->addr[0] = mt_sink_next_slot();
    p->addr[1] = &mt_clock_tls;
    p->addr[2] = (const void *)mt_inflight_tls;
    p->addr[3] = (const void *)mt_pyframes_last_seen[0];
    p->addr[4] = (const void *)mt_pyframes_last_seen[1];
    p->addr[5] = (const void *)(mt_pyframes_last_seen[1] + 64);
    p->addr[6] = (const void *)mt_pyframes_last_seen;
    p->addr[7] = (const void *)((uintptr_t)mt_sink_next_slot() + 64);
    int n = 8;
    for (int i = 0; i < lpf.nfixed && n < PLAN_ADDRS; i++) p->addr[n++] = lpf.fixed[i];
    if (lpf.mode >= 2 && n < PLAN_ADDRS) p->addr[n++] = mt_lockpf_usage_hook;
    p->n = (uint32_t)n;
    p->lock_tsc = 0;
}

void mt_lockpf_note(mt_recorder *r)
{
    (void)r;
    if (!lpf.active) return;
    if (mt_lockpf_diag == 3) {
        gap_note();
        return;
    }
    if (mt_lockpf_diag == 4) {
        double k = mt_clock_tsc_khz() ? 1e6 / (double)mt_clock_tsc_khz() : 0.0;
        double v[2][2], w[2][2];
        for (int on = 0; on < 2; on++)
            for (int f = 0; f < 2; f++) {
                uint64_t n = atomic_load(&lpf.first_calls[on][f]);
                v[on][f] = n ? (double)atomic_load(&lpf.first_cycles[on][f]) / (double)n * k : 0;
                w[on][f] = n ? (double)atomic_load(&lpf.cycles[on][f]) / (double)n * k : 0;
            }
        mt_trace_note(MT_NOTE_INFO,
                      "EXPERIMENT tlspf: first instruction -> end (whole): with the TLS lines "
                      "asked for: allocations %.0f ns (%.0f), frees %.0f ns (%.0f); without: "
                      "allocations %.0f ns (%.0f), frees %.0f ns (%.0f); samples %llu %llu %llu %llu",
                      v[1][0], w[1][0], v[1][1], w[1][1], v[0][0], w[0][0], v[0][1], w[0][1],
                      (unsigned long long)atomic_load(&lpf.first_calls[1][0]),
                      (unsigned long long)atomic_load(&lpf.first_calls[1][1]),
                      (unsigned long long)atomic_load(&lpf.first_calls[0][0]),
                      (unsigned long long)atomic_load(&lpf.first_calls[0][1]));
        return;
    }
    double nspc = mt_clock_tsc_khz() ? 1e6 / (double)mt_clock_tsc_khz() : 0.0;
    if (lpf.mode >= 5) {
        char text[700];
        size_t n = 0;
        for (int on = 0; on < 3; on++) {
            uint64_t ca = atomic_load(&lpf.calls[on][0]), cf = atomic_load(&lpf.calls[on][1]);
            uint64_t gn = atomic_load(&lpf.gaps[on]);
            int w = snprintf(text + n, sizeof text - n,
                             "[%s] allocations %.0f ns (%llu), frees %.0f ns (%llu), lock->report "
                             "%.0f, lock->end %.0f; ",
                             on == 0 ? "none" : on == 1 ? "fixed" : "fixed+predicted",
                             ca ? (double)atomic_load(&lpf.cycles[on][0]) / (double)ca * nspc : 0,
                             (unsigned long long)ca,
                             cf ? (double)atomic_load(&lpf.cycles[on][1]) / (double)cf * nspc : 0,
                             (unsigned long long)cf,
                             gn ? (double)atomic_load(&lpf.gap[on]) / (double)gn * nspc : 0,
                             gn ? (double)atomic_load(&lpf.span[on]) / (double)gn * nspc : 0);
            if (w > 0 && (size_t)w < sizeof text - n) n += (size_t)w;
        }
        mt_trace_note(MT_NOTE_INFO, "EXPERIMENT lockpf5: %s", text);
        return;
    }
    double v[2][2], g[2], sp[2];
    uint64_t c[2][2];
    for (int on = 0; on < 2; on++) {
        for (int f = 0; f < 2; f++) {
            c[on][f] = atomic_load(&lpf.calls[on][f]);
            v[on][f] = c[on][f] ? (double)atomic_load(&lpf.cycles[on][f]) / (double)c[on][f] * nspc
                                : 0;
        }
        uint64_t gn = atomic_load(&lpf.gaps[on]);
        g[on] = gn ? (double)atomic_load(&lpf.gap[on]) / (double)gn * nspc : 0;
        sp[on] = gn ? (double)atomic_load(&lpf.span[on]) / (double)gn * nspc : 0;
    }
    uint64_t rep = atomic_load(&lpf.reports);
    mt_trace_note(MT_NOTE_INFO,
                  "EXPERIMENT lockpf mode %d: %d slots; with prefetch: allocations %.0f ns (%llu), "
                  "frees %.0f ns (%llu), lock->report %.0f ns, lock->end %.0f; without: allocations %.0f ns (%llu), "
                  "frees %.0f ns (%llu), lock->report %.0f ns, lock->end %.0f; %.2f locks a report",
                  lpf.mode, mt_got_patched_slots(lpf.patcher), v[1][0],
                  (unsigned long long)c[1][0], v[1][1], (unsigned long long)c[1][1], g[1], sp[1], v[0][0],
                  (unsigned long long)c[0][0], v[0][1], (unsigned long long)c[0][1], g[0], sp[0],
                  rep ? (double)atomic_load(&lpf.locks) / (double)rep : 0.0);
}
