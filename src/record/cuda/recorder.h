/* The injected recorder: the one piece of memtrace that runs inside the traced program.
 *
 *   InitializeInjection (inject.c)  the driver calls it at cuInit; sets everything up or steps aside
 *   cupti_loader.c                  libcupti found with dlopen, its functions in one table
 *   api_callbacks.c                 CUPTI driver-API callbacks -> memory events (the core record)
 *   activity.c                      CUPTI MEMORY2 / MEMORY_POOL records -> driver-internal
 *                                   allocations and pool sizes (enrichment)
 *   async_hooks.c                   cudaMallocAsync/cudaFreeAsync (backend:cudaMallocAsync) called
 *                                   directly through the callers' GOT slots instead of CUPTI
 *   tensor_hooks.c                  record --tensors: every block PyTorch's caching allocator hands
 *                                   to a tensor, from its reports to the profiler (GOT slots)
 *   capture.c                       which threads are capturing a CUDA graph (and the recorder
 *                                   then makes no CUDA call that could break the capture)
 *   cupti_mux.c                     one CUPTI subscription shared with the program's own CUPTI
 *                                   client (torch.profiler): both get their callbacks
 *   stacks.c                        the caller's stack -> a trie leaf id
 *   inflight.c                      who is inside the recorder now (at_exit waits for them)
 *
 * All state lives in one struct, `mt_rec` (defined in inject.c): a reader looking for global state
 * finds it there (the sink, unwinder and trie keep theirs behind their handles), with these
 * exceptions, each kept beside the only code that touches it:
 *   cupti_mux.c     mux_lock: it may be needed before InitializeInjection runs
 *   stacks.c        the table of Python code ids (code_ids, code_lock, next_code_id) and each
 *                   thread's leaf memos (tls_stack, freed by stack_key's destructor; tls_site_key,
 *                   tls_had_no_python)
 *   api_census.c    census: the per-id call counts of MEMTRACE_CALLBACKS=count (written from every
 *                   thread, read once at exit)
 *   notes.c         mt_warn_once's list of warnings already said, and its lock
 *   api_callbacks.c per-thread caches (__thread): the last context's device, the thread's name
 *                   and whether it is an autograd thread, the current call's entry stamp
 *   async_hooks.c   per-thread cache (__thread): the last context's id
 *   inflight.c      mt_inflight_tls: this thread's count of calls in progress (its slot in
 *                   mt_rec.inflight_slots, or the shared counter)
 *   inject.c        mt_tid_tls: this thread's id, asked of the kernel once (mt_gettid)
 * The recorder core (src/record/, outside cuda/) has its own per-thread state: sink.c's tls_ring (this
 * thread's ring) and next_generation, unwind.c's tls_stack (stack bounds), unwind_stats and
 * stop_range (mt_unwind_stop_at, set once by mt_stacks_init_python),
 * unwind_memo.c's per-thread memos (memo_key), pyframes.c's unknown_version_msg, clock.c's clock
 * (the TSC-to-CLOCK_MONOTONIC function the writer re-anchors) and mt_clock_tls (a thread's copy).
 */
#ifndef MT_RECORDER_H
#define MT_RECORDER_H

#include <cuda.h>
#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "memtrace/record.h"
#include "../clock.h"       /* mt_clock_now */
#include "../cost_spread.h" /* mt_cost_spread */
#include "../rare_work.h"   /* mt_cost_clock, mt_rare_begin/end */
#include "atomic_max.h"       /* mt_atomic_max_u64 */

/* The CUPTI functions we call, resolved from whichever libcupti.so.13 we loaded. */
typedef struct mt_cupti {
    void *handle;
    CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*Subscribe_v2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                                CUpti_SubscriberParams *); /* may be NULL (older CUPTI) */
    CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                  CUpti_CallbackId);
    CUptiResult (*EnableDomain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
    CUptiResult (*GetResultString)(CUptiResult, const char **);
    CUptiResult (*GetDeviceId)(CUcontext, uint32_t *);
    CUptiResult (*GetCallbackName)(CUpti_CallbackDomain, uint32_t, const char **); /* may be NULL */
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
    CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                             CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*ActivityFlushAll)(uint32_t);
    CUptiResult (*ActivityFlushPeriod)(uint32_t);                            /* may be NULL */
    CUptiResult (*ActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc); /* may be NULL */
} mt_cupti;

/* Correlation ids of memory API calls whose MEMORY2 record has not arrived yet: a MEMORY2 record
 * that matches one describes an allocation the callbacks already recorded; one that matches none
 * is driver-internal. Direct-mapped on the id: CUPTI hands out correlation ids in increasing order,
 * so the last MT_CORR_SLOTS API calls never collide, and a stale id is simply overwritten — no
 * locks, no expiry, 4 MiB. 0 marks an empty slot (CUPTI never uses 0). */
#define MT_CORR_SLOTS (1u << 20)
#define MT_ARRAY_SLOTS 4096u /* CUDA arrays' stacks waiting for their activity records */
typedef struct mt_corr_set {
    _Atomic uint32_t ids[MT_CORR_SLOTS];
} mt_corr_set;

enum { MT_STACKS_NONE = 0, MT_STACKS_NATIVE = 1, MT_STACKS_PYTHON = 2, MT_STACKS_BOTH = 3 };

/* The few driver functions the recorder itself calls, resolved from the libcuda the process
 * already has loaded. Why not link libcuda: `memtrace record` also preloads this library into
 * every process of the command (see interpose.c), most of which never load CUDA; a DT_NEEDED on
 * libcuda.so.1 would make the loader complain in each of them on a machine without a driver. */
typedef struct mt_cuda {
    __typeof__(&cuDeviceGet) DeviceGet;
    __typeof__(&cuDeviceGetName) DeviceGetName;
    __typeof__(&cuDeviceTotalMem) DeviceTotalMem;
    __typeof__(&cuDeviceGetCount) DeviceGetCount;
    __typeof__(&cuDeviceGetPCIBusId) DeviceGetPCIBusId;
    __typeof__(&cuCtxGetId) CtxGetId;
    __typeof__(&cuCtxGetCurrent) CtxGetCurrent;
    __typeof__(&cuDeviceGetMemPool) DeviceGetMemPool;
    __typeof__(&cuMemPoolGetAttribute) MemPoolGetAttribute;
    __typeof__(&cuPointerGetAttribute) PointerGetAttribute;
    __typeof__(&cuDeviceGetGraphMemAttribute) DeviceGetGraphMemAttribute;
    __typeof__(&cuDeviceGetUuid) DeviceGetUuid; /* cuDeviceGetUuid_v2; NULL on an older driver */
} mt_cuda;

typedef struct mt_recorder_config {
    char output[4096]; /* the path actually opened */
    int stacks;        /* MT_STACKS_*: bit 0 native, bit 1 Python (default both) */
    int native_full;   /* MEMTRACE_STACKS=full: with Python frames, unwind past the innermost one
                          too (C frames between Python frames kept; stacks.c says what it costs) */
    int activity;      /* enable CUPTI activity enrichment (default 1) */
    int census;        /* MEMTRACE_CALLBACKS=count: count every API call, record nothing */
    int async_hooks;   /* MEMTRACE_ASYNC_HOOKS=1: see async_hooks.c */
    int tensors;       /* MEMTRACE_TENSORS=1 (record --tensors): see tensor_hooks.c */
    int torch_oom;     /* PyTorch's out-of-memory reports, in every mode: see tensor_hooks.c */
    uint32_t flush_ms;
    uint32_t nvml_ms;    /* how often the NVML sampler asks (MEMTRACE_NVML_MS; MT_NVML_SAMPLE_MS) */
    char manifest[4096]; /* file the CLI reads to learn which traces were written; "" = none */
} mt_recorder_config;

typedef struct mt_gpu_sampler mt_gpu_sampler;

/* The stream-ordered allocation functions async_hooks.c can stand in for. */
enum {
    MT_HOOK_MALLOC_ASYNC,
    MT_HOOK_MALLOC_ASYNC_PTSZ,
    MT_HOOK_FREE_ASYNC,
    MT_HOOK_FREE_ASYNC_PTSZ,
    MT_HOOK_MALLOC_FROM_POOL_ASYNC,
    MT_HOOK_MALLOC_FROM_POOL_ASYNC_PTSZ,
    MT_HOOK_COUNT
};

/* Self-measurement is sampled: one call in MT_TIME_SAMPLE per thread (at random) reads the clock
 * around our own work, and counts for MT_TIME_SAMPLE calls. Two clock reads on every call would be
 * a tenth of what they measure. A power of two. Rare, slow work is timed every time instead and
 * left out of the sampled times (rare_work.h). */
#define MT_TIME_SAMPLE 16



#define MT_MAX_POOLS 64
#define MT_POOL_DEAD 1ull

/* The allocator reports that tensor_hooks.c stands in for (c10::reportMemoryUsageToProfiler and
 * c10::reportOutOfMemoryToProfiler, imported by libc10_cuda). */
enum { MT_TENSOR_HOOK_USAGE, MT_TENSOR_HOOK_OOM, MT_TENSOR_HOOK_COUNT }; /* OOM last: alone */

#define MT_CAPTURE_SLOTS 16 /* graph captures in progress whose thread is remembered */

/* CUPTI callback ids, one bit each, per domain (cupti_mux.c) */
#define MT_MUX_DOMAINS 8
#define MT_MUX_WORDS 16 /* 1024 ids per domain; the driver API has 807 */
typedef struct mt_cbid_set {
    _Atomic uint64_t w[MT_MUX_DOMAINS][MT_MUX_WORDS];
} mt_cbid_set;

static inline int mt_cbid_has(mt_cbid_set *s, unsigned domain, unsigned cbid)
{
    return domain < MT_MUX_DOMAINS && cbid < 64 * MT_MUX_WORDS &&
           (atomic_load_explicit(&s->w[domain][cbid / 64], memory_order_relaxed) >> (cbid % 64)) & 1;
}

/* A thread's count of its calls in progress (inflight.c). One cache line each. */
#define MT_INFLIGHT_SLOTS 256
typedef struct mt_inflight_slot {
    _Atomic uint32_t n;
    _Atomic int taken;
    char pad[56];
} __attribute__((aligned(64))) mt_inflight_slot;

typedef struct mt_recorder {
    _Atomic int enabled; /* callbacks do nothing unless 1: cleared on fork, on shutdown, on errors */
    pid_t pid;           /* the process that owns the trace; a fork()ed child differs */
    mt_recorder_config cfg;
    mt_cupti cupti;
    mt_cuda cuda;
    _Atomic int inflight; /* callbacks, hooked calls, activity deliveries in progress without a
                             slot of their own (inflight.c): at_exit waits for them */
    struct {
        int on;              /* membarrier registered: threads count themselves in a slot */
        pthread_key_t key;   /* gives a thread's slot back when it exits */
        mt_inflight_slot slot[MT_INFLIGHT_SLOTS];
    } inflight_slots;
    _Atomic int paused;   /* the program asked for a pause (memtrace_set_paused) */
    dev_t output_dev; /* the trace file as created (mt_output_check_still_there) */
    ino_t output_ino;
    mt_sink *_Atomic sink; /* its file is created with the first CUDA context (or event); atomic:
                              at_exit takes it away while other threads read it */
    pthread_mutex_t open_lock; /* one thread creates the file */
    char comm[64];
    int32_t rank;                    /* from the launcher's environment; -1 none */
    mt_trie *trie;
    mt_modules *modules;
    mt_gpu_sampler *sampler;         /* NVML sampling thread; NULL when NVML is unavailable */
    mt_pyframes *py;                 /* NULL: no Python in the process (or unknown version) */
    mt_py_ranges py_ranges;          /* where the interpreter's code is, for merging */
    uintptr_t self_lo, self_hi;      /* this library's code: its frames are not the caller's */
    uintptr_t cupti_lo, cupti_hi;    /* libcupti's, likewise */
    uint32_t driver_internal_stack; /* trie leaf of the "[driver internal]" pseudo frame */

    /* cupti_mux.c: CUPTI's one subscription, ours, shared with a guest client */
    struct {
        CUpti_SubscriberHandle handle;  /* NULL until subscribed (under mux_lock, cupti_mux.c:
                                           a static mutex, as a guest may come before
                                           InitializeInjection) */
        _Atomic int subscribed;
        _Atomic int guest;              /* a guest is registered (fn, userdata valid) */
        CUpti_CallbackFunc guest_fn;
        void *guest_userdata;
        char guest_name[128];
        mt_cbid_set ours, theirs;       /* callback ids each client enabled */
        _Atomic int activity_taken;     /* the guest registered its own activity buffers */
    } mux;

    /* activity.c: enrichment by CUPTI's activity records */
    struct {
        int on;                   /* MEMORY2 enabled by us */
        _Atomic int stopped;      /* somebody else (torch.profiler) took the activity API */
        _Atomic uint64_t records, memory_api_calls; /* since the start */
        _Atomic uint64_t unaddressed, unaddressed_bytes; /* allocation records at address 0 */
        uint64_t last_records, last_memory_api_calls; /* writer tick's view */
        uint64_t quiet_since_ns;  /* memory API calls but no activity records since then; 0 = not */
        _Atomic uint64_t failure_flush_ns; /* the latest flush before a failed request */
        mt_corr_set corr;         /* correlation ids of our memory API calls (duplicates) */
        /* CUDA arrays: the driver's size comes in the activity record, the stack from the call's
         * callback, which runs first; the record finds it by its correlation id. The slot is
         * published by its id (release); a slot taken by a later call before the record came
         * (more than MT_ARRAY_SLOTS arrays made within a flush period) leaves that array with
         * no stack, counted in `unnamed` and said in a note at the end */
        struct {
            _Atomic uint32_t corr[MT_ARRAY_SLOTS]; /* 0 while the slot is written */
            _Atomic uint64_t who[MT_ARRAY_SLOTS];  /* stack | tid << 32 */
            _Atomic uint16_t flags[MT_ARRAY_SLOTS];
            _Atomic uint64_t unnamed, unnamed_bytes; /* records that found no stack */
        } arrays;
    } activity;

    /* memory pools (pool_poll.c): which served allocations, and what was last reported */
    _Atomic uint64_t async_devices; /* bit d: device d's current pool served cuMemAllocAsync */
    _Atomic uint64_t graph_devices; /* bit d: a graph memory node was made on device d */
    struct {
        _Atomic uint64_t pool; /* 0 = free slot, MT_POOL_DEAD = destroyed */
        int32_t device;
    } named_pools[MT_MAX_POOLS]; /* pools named by cuMemAllocFromPoolAsync */
    /* pools located on the host or a host NUMA node (made, or named as a default or current
     * pool): what is allocated from them is host memory. Written under pool_lock, read without
     * it: n_host_pools first, so that a process without any pays one load per allocation */
    _Atomic uint64_t host_pools[MT_MAX_POOLS]; /* 0 = free slot, MT_POOL_DEAD = destroyed */
    _Atomic int n_host_pools;
    pthread_mutex_t pool_lock;   /* guards pools[] and npools */
    _Atomic uint64_t pool_polled_ns;
    struct {
        uint64_t pool, size, high;
        int32_t device;
    } pools[MT_MAX_POOLS];
    int npools;

    /* capture.c: CUDA graph captures in progress */
    struct {
        _Atomic int active; /* begun and not ended, on any thread */
        struct {
            _Atomic uint64_t stream; /* 0 = free slot */
            _Atomic uint32_t tid;
        } who[MT_CAPTURE_SLOTS];
        _Atomic uint64_t skipped_polls; /* pool polls left out while capturing */
    } capture;

    /* async_hooks.c: the stand-ins, the originals they call, and whether they record */
    struct {
        mt_got_hook table[MT_HOOK_COUNT];
        mt_got_patcher *patcher;
        _Atomic int active; /* 1: the stand-ins record, CUPTI's stream-ordered callbacks are off */
        _Atomic uint64_t calls, ns; /* cost of the stand-ins' own work, for a note (sampled) */
        mt_cost_spread spread;
    } hooks;

    /* tensor_hooks.c: PyTorch's tensors (record --tensors) and its out-of-memory reports */
    struct {
        mt_got_hook table[MT_TENSOR_HOOK_COUNT];
        mt_got_patcher *patcher;
        _Atomic int active;               /* the usage stand-in is in libc10_cuda's slots */
        _Atomic int oom_active;           /* the out-of-memory one is (every mode) */
        _Atomic uintptr_t c10_lo, c10_hi; /* libc10_cuda's code: segments are made from there */
        _Atomic uint64_t calls, ns;   /* cost, for a note (sampled) */
        _Atomic uint64_t whole_calls[3], whole_cycles[3]; /* another sample, timed whole
                                                             (TSC): [0] allocations on a thread
                                                             with Python frames, [1] frees,
                                                             [2] allocations on one without
                                                             (autograd's workers) */
        mt_cost_spread spread;
    } tensors;

    /* what our own work costs, sampled (MT_TIME_SAMPLE), for the notes at exit (notes.c) */
    struct {
        _Atomic uint64_t stack_calls, stack_frames, stack_ns; /* stack capture */
        _Atomic uint64_t stack_built; /* ... of which not found in the per-thread leaf memo */
        _Atomic uint64_t stack_built_walked; /* ... ... after a walk the unwinder did not hold */
        _Atomic uint64_t stack_from_table;   /* ... found in the leaf memo's table, not the slot */
        _Atomic uint64_t unwind_ns;   /* ... of which native unwinding */
        _Atomic uint64_t python_ns;   /* ... of which Python frames */
        _Atomic uint64_t python_top_ns; /* ... ... up to the innermost one found, in the stacks
                                           that have one (the rest is their chain's signature) */
        _Atomic uint64_t nopy_calls, nopy_ns, nopy_python_ns, nopy_unwind_ns; /* the same for
                                         the stacks with no Python frame in a Python process
                                         (autograd's workers) */
        _Atomic uint64_t callbacks, callback_ns; /* our CUPTI callback */
        _Atomic uint64_t callback_longest;       /* ... the longest timed one (mt_cost_longest) */
        _Atomic uint64_t sink_calls, sink_ns;    /* copying an event into the thread's ring */
        _Atomic uint64_t nvml_samples, nvml_ns, nvml_max_ns; /* the NVML sampler's rounds (each
                                                              timed: 20 a second) */
        mt_cost_spread stack_spread, callback_spread, sink_spread;
    } costs;
    int started; /* writer thread only: its first tick's start-up work is done (inject.c) */
    struct { /* writer thread only: the running totals' note (notes.c, mt_cost_running_tick) */
        uint64_t next_ns, every_ns; /* every_ns 0: not scheduled yet */
    } running;
} mt_recorder;

extern mt_recorder mt_rec; /* the recorder's single instance, defined in inject.c */

/* inject.c */
/* 1 for the calls that measure their own cost (see MT_TIME_SAMPLE) */
static inline int mt_time_this_call(void)
{
    /* Random, not every 16th: a training step repeats the same calls in the same order, and a
     * fixed stride would time the same few call sites forever. xorshift32, per thread. */
    static __thread uint32_t x;
    if (!x) x = (uint32_t)(uintptr_t)&x | 1;
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    return (x & (MT_TIME_SAMPLE - 1)) == 0;
}
/* The trace file is created when the process makes its first CUDA context (or records its first
 * event): a process that initializes CUDA and never uses it (a launcher such as torchrun) leaves
 * no trace. 0 when the file is open; -1 when it cannot be (recording then stops, said once). */
/* Inline, with its first call out of line (so mt_gettid and mt_capture_this_thread below): every
 * report runs these checks, and as calls (mt_trace_open's prologue saved five registers for a path
 * taken once a process) a tensor free ran 522 instructions on 47 lines of code; inline, 479 on 45
 * (single-stepped on the GPU machine, ~85 instructions of the clock's slow path that stepping
 * causes included: docs/performance.md, "The lines of code a report runs through"). */
int mt_trace_open_first(mt_recorder *r) __attribute__((cold, noinline));
static inline int mt_trace_open(mt_recorder *r)
{
    if (__builtin_expect(mt_sink_is_open(r->sink), 1)) return 0;
    return mt_trace_open_first(r);
}
/* The recorder's time stamps: CLOCK_MONOTONIC ns, through the TSC where it may be (clock.h). */
static inline uint64_t mt_now_ns(void) { return mt_clock_now(); }
/* A sampled measurement: ns of our own work since t0 (an mt_cost_clock reading) into *ns, one call
 * into *calls (either NULL to skip), each counted MT_TIME_SAMPLE times; with ns, the time once
 * into *spread (NULL: none). Returns that time (0 without ns). */
static inline uint64_t mt_cost_add(_Atomic uint64_t *ns, _Atomic uint64_t *calls, uint64_t t0,
                                   mt_cost_spread *spread)
{
    uint64_t dt = 0;
    if (ns) {
        dt = mt_cost_clock() - t0;
        atomic_fetch_add_explicit(ns, dt * MT_TIME_SAMPLE, memory_order_relaxed);
        if (spread) atomic_fetch_add_explicit(&spread->n[mt_cost_bucket(dt)], 1, memory_order_relaxed);
    }
    if (calls) atomic_fetch_add_explicit(calls, MT_TIME_SAMPLE, memory_order_relaxed);
    return dt;
}

/* The longest timed call of a part, and which it was, in one word so that both change together:
 *   | ns (48 bits, saturated) | what (16 bits: the callback id << 1 | 1 at the call's exit) |
 * Compared as a whole: a longer call wins whatever it was. Timed calls only (1 in 16), and only
 * those longer than the longest so far reach the compare-and-swap. */
#define MT_LONGEST_NS(v) ((v) >> 16)
#define MT_LONGEST_WHAT(v) ((uint32_t)((v) & 0xffff))
static inline void mt_cost_longest(_Atomic uint64_t *longest, uint64_t dt, uint32_t what)
{
    if (dt >= 1ull << 48) dt = (1ull << 48) - 1;
    mt_atomic_max_u64(longest, dt << 16 | (what & 0xffff));
}

extern __thread uint32_t mt_tid_tls;
uint32_t mt_gettid_first(void) __attribute__((cold, noinline)); /* asks the kernel */
static inline uint32_t mt_gettid(void)
{
    uint32_t tid = mt_tid_tls;
    return __builtin_expect(tid != 0, 1) ? tid : mt_gettid_first();
}
/* notes.c: 1 when it printed (and noted) the warning, 0 when `key` had been warned about already */
int mt_warn_once(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mt_trace_note(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mt_write_cost_notes(mt_recorder *r); /* at exit, after the last flush */
void mt_cost_running_tick(mt_recorder *r, uint64_t now); /* writer tick: the running totals */

/* output.c: creates r->cfg.output from MEMTRACE_OUTPUT; the fd, or -1 (warned) */
int mt_output_open(mt_recorder *r);
#define MT_HIGH_FD 512 /* the trace's descriptor is moved to the lowest free one from here up */
void mt_output_make_room(void); /* writer thread, once: a descriptor table that holds MT_HIGH_FD */
void mt_output_check_still_there(mt_recorder *r);
/* one line for `memtrace record`: what = "trace" (r->cfg.output written) or "skipped" */
void mt_manifest_add(mt_recorder *r, const char *what);

/* cupti_loader.c: 0 on success; on failure *why says what was missing */
int mt_cupti_load(mt_cupti *c, const char *explicit_path, const char **why, char *where, size_t len);
int mt_cuda_load(mt_cuda *d, const char **why); /* from the libcuda already loaded */

/* cupti_mux.c */
int mt_mux_subscribe(mt_recorder *r);          /* ours: 0 ok (or already subscribed) */
void mt_mux_unsubscribe(mt_recorder *r);       /* at exit: leaves a guest its callbacks */
/* enables (or disables, where the guest does not need it) one of our callback ids */
CUptiResult mt_mux_enable(mt_recorder *r, uint32_t enable, CUpti_CallbackDomain domain,
                          CUpti_CallbackId cbid);
CUptiResult mt_mux_enable_domain(mt_recorder *r, CUpti_CallbackDomain domain);
/* CUPTI's callback for the shared subscription: the guest's, then ours (inject.c) */
void CUPTIAPI mt_mux_dispatch(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                              const void *cbdata);
void CUPTIAPI mt_recorder_callback(void *userdata, CUpti_CallbackDomain domain,
                                   CUpti_CallbackId cbid, const void *cbdata); /* inject.c */

/* capture.c */
void mt_capture_begin(mt_recorder *r, uint64_t stream);
void mt_capture_end(mt_recorder *r, uint64_t stream);
static inline int mt_capture_any(mt_recorder *r)
{
    return atomic_load_explicit(&r->capture.active, memory_order_relaxed) > 0;
}
int mt_capture_find_thread(mt_recorder *r, uint32_t tid); /* the slots, while any capture runs */
/* 1: tid is capturing a graph */
static inline int mt_capture_this_thread(mt_recorder *r, uint32_t tid)
{
    return mt_capture_any(r) && mt_capture_find_thread(r, tid);
}

/* tensor_hooks.c */
int mt_tensor_hooks_install(mt_recorder *r); /* 1: in place (--tensors: both; else the OOM one) */
void mt_tensor_hooks_tick(mt_recorder *r);   /* writer thread: libraries loaded since */
/* 1 when the calling thread's stack passes through PyTorch's caching allocator (libc10_cuda):
 * the allocation being made is one of its segments. Unwinds: for rare calls only. */
int mt_called_from_c10(mt_recorder *r);
void mt_find_c10(mt_recorder *r); /* where libc10_cuda's code is, once it is loaded (any mode) */

/* api_callbacks.c */
int mt_callbacks_enable(mt_recorder *r); /* 0 ok */
int mt_callbacks_enable_async(mt_recorder *r); /* the stream-ordered ones (hooks' fallback) */
/* Records one memory API call whose parameters ev holds (op, kind, address, bytes, stream, aux,
 * flags, device, context, api, correlation), for CUPTI's callbacks and the hooks alike: failed
 * requests, timestamps (frees at entry_ns, the rest now), the stack, pool bookkeeping.
 * api_ip: address of the API function when the stack is taken from outside it (the hooks: the
 * stack then still ends in the API call); 0 when its frames are on the stack. */
void mt_record_call(mt_recorder *r, mt_event *ev, CUresult res, uint64_t entry_ns,
                    uint64_t api_ip);
void CUPTIAPI mt_on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *cbdata);

/* async_hooks.c */
int mt_async_hooks_install(mt_recorder *r); /* 1: active (call before mt_callbacks_enable) */
void mt_async_hooks_tick(mt_recorder *r);   /* writer thread: libraries loaded since */
/* inflight.c: counting the calls in progress, which at_exit waits for. This thread's count
 * (NULL: not chosen yet; MT_INFLIGHT_SHARED: it uses r->inflight). */
extern __thread _Atomic uint32_t *mt_inflight_tls;
#define MT_INFLIGHT_SHARED ((_Atomic uint32_t *)1)
void mt_inflight_init(mt_recorder *r);                 /* at start: membarrier available? */
_Atomic uint32_t *mt_inflight_assign(mt_recorder *r);  /* a thread's first call */
int mt_inflight_quiet(mt_recorder *r);                 /* at exit: 1 when nobody is inside */
/* Counted in flight, then (the caller) checks `enabled`: plain stores to the thread's own slot,
 * ordered for at_exit by its membarrier; the shared counter with seq_cst adds otherwise. */
static inline void mt_inflight_begin(mt_recorder *r)
{
    _Atomic uint32_t *mine = mt_inflight_tls;
    if (__builtin_expect(!mine, 0)) mine = mt_inflight_assign(r);
    if (mine == MT_INFLIGHT_SHARED) {
        atomic_fetch_add(&r->inflight, 1); /* seq_cst, then the check: see inject.c at_exit */
        return;
    }
    atomic_store_explicit(mine, atomic_load_explicit(mine, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the count before the check, for the compiler */
}
static inline void mt_inflight_end(mt_recorder *r)
{
    _Atomic uint32_t *mine = mt_inflight_tls;
    if (mine == MT_INFLIGHT_SHARED)
        atomic_fetch_sub_explicit(&r->inflight, 1, memory_order_release);
    else
        atomic_store_explicit(mine, atomic_load_explicit(mine, memory_order_relaxed) - 1,
                              memory_order_release);
}

/* Entered like a CUPTI callback: counted in flight first (at_exit waits for it), then checked.
 * 0: pass the call through untouched. Shared by the GOT stand-ins. */
static inline int mt_hook_enter(mt_recorder *r, _Atomic int *active)
{
    mt_inflight_begin(r);
    if (atomic_load(&r->enabled) &&
        atomic_load_explicit(active, memory_order_relaxed) &&
        !atomic_load_explicit(&r->paused, memory_order_relaxed))
        return 1;
    mt_inflight_end(r);
    return 0;
}
static inline void mt_hook_leave(mt_recorder *r)
{
    mt_inflight_end(r);
}

/* api_census.c: the MEMTRACE_CALLBACKS=count diagnostic */
int mt_census_enable(mt_recorder *r); /* 0 ok */
void mt_census_count(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *cbdata);
void mt_census_note(mt_recorder *r);

/* activity.c */
/* Activity records on, and still ours (no other CUPTI client took the activity API). */
static inline int mt_activity_ours(mt_recorder *r)
{
    return r->activity.on && !atomic_load_explicit(&r->activity.stopped, memory_order_relaxed);
}
int mt_activity_start(mt_recorder *r); /* 0 ok; failure is not fatal (callbacks still record) */
void mt_activity_flush(mt_recorder *r);
/* a failed request is about to be written: what CUPTI holds first (rate-limited) */
__attribute__((cold)) void mt_activity_flush_before_failure(mt_recorder *r);
/* writer thread, before each drain: a forced flush; notes a stolen activity API */
void mt_activity_tick(mt_recorder *r);
void mt_activity_yield(mt_recorder *r);  /* a guest is about to register its own buffers */
void mt_activity_taken(mt_recorder *r);  /* ... it did (cupti_mux.c) */
void mt_corr_insert(mt_corr_set *s, uint32_t id);
int mt_corr_has(mt_corr_set *s, uint32_t id); /* 1 if id is a recent memory API call's */
/* A CUDA array's creating call, for its activity record to come (activity.c) */
void mt_array_note(mt_recorder *r, uint32_t corr, uint32_t stack, uint32_t tid, uint16_t flags);

/* pool_poll.c */
void mt_pool_note_use(mt_recorder *r, int32_t device, uint64_t pool); /* hot path, lock-free */
void mt_pool_poll(mt_recorder *r);                 /* writer tick, at exit */
void mt_pool_poll_rare(mt_recorder *r); /* the same on a program's thread (after an OOM, a trim) */
void mt_pool_poll_if_due(mt_recorder *r, uint64_t now); /* after async allocs: <= 1/ms, no wait */
void mt_pool_forget(mt_recorder *r, uint64_t pool); /* cuMemPoolDestroy */
void mt_pool_note_host(mt_recorder *r, uint64_t pool); /* a pool located on the host */
int mt_pool_is_host(mt_recorder *r, uint64_t pool);    /* lock-free */
/* CU_MEM_LOCATION_TYPE_HOST, _HOST_NUMA, _HOST_NUMA_CURRENT: memory in host RAM */
static inline int mt_location_is_host(int type)
{
    return type == CU_MEM_LOCATION_TYPE_HOST || type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
           type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

/* gpu_sampler.c */
#define MT_NVML_SAMPLE_MS 50 /* how often it asks NVML (the notes say what that cost) */
mt_gpu_sampler *mt_gpu_sampler_start(mt_recorder *r);
void mt_gpu_sampler_stop(mt_gpu_sampler *g);

/* stacks.c */
void mt_stacks_init(mt_recorder *r);        /* where our and CUPTI's code are */
int mt_stacks_init_python(mt_recorder *r); /* 0: Python frames available */
/* t0: a CLOCK_MONOTONIC stamp taken just before the call (the event's own), from which the
 * capture's cost is measured for the exit note: one clock read fewer per allocation; 0: none
 * (the capture reads the clock itself when it times this call). */
uint32_t mt_capture_stack(mt_recorder *r, uint16_t *flags, uint64_t t0, uint64_t api_ip);
/* Called by a stand-in before it calls the allocator, with its own frame address: on a thread
 * without Python frames (autograd's workers), that names the call site's depth, and the walk the
 * unwinder remembers under it is fetched while the allocator runs (stacks.c). */
void mt_stacks_before_call(mt_recorder *r, uintptr_t frame);
/* 1 when the calling thread's latest capture found no Python frames (a cost note's split). */
int mt_stacks_last_without_python(void);

/* api_callbacks.c: device ordinal of a context (-1 unknown), cached per thread */
int32_t mt_device_of(mt_recorder *r, CUcontext ctx);

/* api_callbacks.c: 1 when the calling thread is one of PyTorch's autograd workers */
int mt_thread_is_autograd(void);

#endif
