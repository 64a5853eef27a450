/* InitializeInjection: where the recorder starts, and everything about its life in the process.
 *
 * The CUDA driver calls InitializeInjection() (the library is named by CUDA_INJECTION64_PATH) from
 * cuInit, on the first thread that touches CUDA. From there:
 *   load libcupti -> start the sink (no file yet) -> subscribe -> enable callbacks, hooks and
 *   activity -> register atexit/atfork.
 * The trace file is created when the process makes its first CUDA context (mt_trace_open): a
 * process that initializes CUDA without using it (torchrun's launcher, a tool asking how many GPUs
 * there are) leaves no trace, only a "skipped" line for `memtrace record`.
 * Every step that fails prints one warning (prefix "memtrace: ") and leaves the program running
 * untraced. The program's own output, exit status and behaviour are never changed.
 *
 * Environment (set by `memtrace record`; all optional):
 *   MEMTRACE_OUTPUT    path pattern: %p pid, %c command name, %h host name, %r the rank (the pid
 *                      when the process has none), %% a percent sign
 *                      (default memtrace.%c.%p.mtrace in the working directory)
 *   MEMTRACE_FORCE     1: replace an existing file (default: never overwrite, O_EXCL)
 *   MEMTRACE_CUPTI     libcupti to load when the process has none loaded yet
 *   MEMTRACE_STACKS    none | native | python | both | full (default both: the native frames
 *                      below the innermost Python frame, then the Python frames, when the process
 *                      runs Python; full: also the native frames between Python frames)
 *   MEMTRACE_ACTIVITY  0: no CUPTI activity records (no driver-internal allocations, CUDA
 *                      arrays or pool sizes)
 *   MEMTRACE_FLUSH_MS  how often the writer flushes (default 200)
 *   MEMTRACE_CALLBACKS 0: subscribe to CUPTI but enable no callback (diagnostic: CUPTI's own cost);
 *                      count: count every driver/runtime API call by name, record no event
 *                      (diagnostic, api_census.c)
 *   MEMTRACE_TENSORS   1: record every block PyTorch's caching allocator hands to a tensor
 *                      (record --tensors; tensor_hooks.c; without it, only the allocator's
 *                      out-of-memory reports are taken)
 *   MEMTRACE_ASYNC_HOOKS 1: take cudaMallocAsync/cudaFreeAsync calls from the callers' import
 *                      slots instead of CUPTI (async_hooks.c says what it costs)
 *   MEMTRACE_NVML      0: do not sample the process's GPU memory through NVML every 50 ms
 *   MEMTRACE_NVML_MS   how often to sample it instead, in ms (10-60000; a diagnostic of its cost)
 *   MEMTRACE_MANIFEST  file to which one line per process is appended (output.c)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "recorder.h"
#include "memtrace/pause.h"
#include "../hot_path.h"

mt_recorder mt_rec; /* zero until InitializeInjection (cupti_mux.c may run before it) */

/* CUPTI stamps activity records with this when registered, so they share our clock. */
static uint64_t CUPTIAPI monotonic_timestamp(void) { return mt_now_ns(); }

__thread uint32_t mt_tid_tls;

uint32_t mt_gettid_first(void)
{
    mt_tid_tls = (uint32_t)syscall(SYS_gettid);
    return mt_tid_tls;
}

static void read_file_line(const char *path, char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen(path, "re");
    if (!f) return;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = 0;
    /* /proc/self/cmdline separates arguments with NULs */
    for (size_t i = 0; i + 1 < n; i++)
        if (buf[i] == 0) buf[i] = ' ';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == 0)) buf[--n] = 0;
}

static void on_new_node(void *ctx, const mt_stack_node *node)
{
    mt_recorder *r = ctx;
    mt_sink_node(r->sink, node);
}

static void on_new_module(void *ctx, const mt_module *m)
{
    mt_recorder *r = ctx;
    mt_record rec = {.type = MT_REC_MODULE, .u.module = *m};
    mt_sink_put_copy(r->sink, &rec);
}

/* Runs on the writer thread before each timed drain. */
static void writer_tick(void *ctx, mt_sink *s)
{
    (void)s;
    mt_recorder *r = ctx;
    if (getpid() != r->pid) return;
    if (!r->started) { /* the first tick, right at start-up: before the trace file is made and
                          before the first walk, two waits taken off the program's threads */
        r->started = 1;
        mt_output_make_room();
        mt_unwind_find_main_stack();
    }
    mt_clock_tick(); /* first: what follows stamps with it */
    mt_modules_refresh(r->modules, on_new_module, r);
    mt_pool_poll(r);
    mt_async_hooks_tick(r);
    mt_tensor_hooks_tick(r);
    mt_find_c10(r);
    mt_cost_running_tick(r, mt_now_ns());
    if (mt_trie_full(r->trie))
        mt_warn_once("trie", "the stack table is full (%u frames, %u MiB): new stacks end at the "
                     "deepest frame already known", MT_TRIE_MAX_NODES, (MT_TRIE_MAX_NODES * 32u) >> 20);
    mt_activity_tick(r); /* last: its flush right before the drain (activity.c) */
}

int mt_trace_open_first(mt_recorder *r)
{
    if (mt_sink_is_open(r->sink)) return 0;
    if (!r->sink || getpid() != r->pid) return -1;
    uint64_t rare = mt_rare_begin(); /* once a process (rare_work.h), or a wait for the thread
                                        that does it */
    pthread_mutex_lock(&r->open_lock);
    int rc = 0;
    if (!mt_sink_is_open(r->sink)) {
        int fd = mt_output_open(r);
        if (fd >= 0 && mt_sink_open(r->sink, fd) == 0) {
            mt_manifest_add(r, "trace");
        } else {
            if (fd >= 0) {
                close(fd);
                unlink(r->cfg.output);
                mt_warn_once("sink", "cannot write %s; the program runs untraced", r->cfg.output);
            }
            atomic_store(&r->enabled, 0);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&r->open_lock);
    mt_rare_end(rare, MT_RARE_OPEN);
    return rc;
}

static void at_fork_child(void)
{
    /* No writer thread and no CUPTI threads exist in a fork()ed child: touching either could
     * hang. Step aside for good; a child that exec()s starts over with its own injection. */
    atomic_store(&mt_rec.enabled, 0);
    mt_sink_abandon_in_child(mt_rec.sink);
    mt_rec.sink = NULL; /* warnings in the child go to stderr only */
}

/* Waits (bounded: 100 ms) for callbacks, hooks and activity deliveries that started before
 * `enabled` went to 0 (or before the sink pointer went away). 1 when none is left. */
#define QUIESCE_STEP_US 100
#define QUIESCE_STEPS 1000 /* 100 ms in all */
static int quiesce(void)
{
    for (int i = 0; i < QUIESCE_STEPS && !mt_inflight_quiet(&mt_rec); i++)
        usleep(QUIESCE_STEP_US);
    return mt_inflight_quiet(&mt_rec);
}

static void at_exit(void)
{
    if (getpid() != mt_rec.pid || !mt_rec.sink) return;
    /* Activity records still buffered inside CUPTI are delivered now, while CUDA is alive. */
    if (mt_activity_ours(&mt_rec)) mt_activity_flush(&mt_rec);
    atomic_store(&mt_rec.enabled, 0);
    mt_gpu_sampler_stop(mt_rec.sampler);
    mt_rec.sampler = NULL;
    quiesce(); /* callbacks that started before we turned the switch off */
    mt_sink *sink = mt_rec.sink;
    /* The writer's tick reads mt_rec.sink (pool polls, notes): take it away, and wait out a tick
     * in progress, before that pointer goes; then do its last round here. */
    mt_sink_set_tick(sink, NULL, NULL);
    mt_sink_flush(sink);
    int opened = mt_sink_is_open(sink);
    if (opened) {
        mt_output_check_still_there(&mt_rec);
        mt_pool_poll(&mt_rec);
        mt_modules_refresh(mt_rec.modules, on_new_module, &mt_rec);
        mt_write_cost_notes(&mt_rec);
    }
    /* Leave CUPTI before the libraries' destructors run: libcudart tears its contexts down from
     * _dl_fini, possibly after libcupti's own destructor, and a callback dispatched then would
     * land in a finalized CUPTI. Nothing after this point would be recorded anyway. A guest
     * client (cupti_mux.c) keeps the subscription and its own callbacks. */
    mt_mux_unsubscribe(&mt_rec);
    mt_sink_stats st;
    /* Why freeing the sink is safe: every path into it from another thread (API callbacks, the
     * GOT stand-ins, CUPTI's activity deliveries) counts itself in flight before it reads
     * `enabled` or the sink pointer (seq_cst on both sides, or its own slot ordered by the
     * membarrier in mt_inflight_quiet: inflight.c). Once `enabled` is 0 and the pointer NULL, a
     * newcomer touches nothing; so when nobody is in flight after both stores, nobody holds the
     * old pointer. A call still in flight after the bounded wait (a thread stuck inside the
     * real cudaMallocAsync) may still write: the sink is then stopped without being freed. */
    mt_rec.sink = NULL;
    int clean = quiesce();
    if (clean) mt_sink_stop(sink, &st);
    else mt_sink_stop_keeping_memory(sink, &st);
    if (!opened) {
        mt_manifest_add(&mt_rec, "skipped");
        return;
    }
    if (st.write_failed && st.write_errno == EBADF)
        fprintf(stderr, "memtrace: the program closed memtrace's trace descriptor (or put a file "
                "of its own on it): %s ends there\n", mt_rec.cfg.output);
    else if (st.write_failed)
        fprintf(stderr, "memtrace: writing %s failed (%s): the trace ends early\n",
                mt_rec.cfg.output, strerror(st.write_errno));
    if (st.dropped)
        fprintf(stderr, "memtrace: %llu events were dropped: the writer could not keep up for "
                "%d ms (the trace says so)\n", (unsigned long long)st.dropped, MT_SINK_MAX_WAIT_MS);
}

/* Our part of every CUPTI callback (mt_mux_dispatch calls it after the guest's), wrapped with the
 * in-flight counter. */
void CUPTIAPI mt_recorder_callback(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id,
                                   const void *data)
{
    mt_inflight_begin(&mt_rec);
    if (d == CUPTI_CB_DOMAIN_RESOURCE) {
        /* A context's birth and death are never skipped, and are rare work (rare_work.h): the
         * device named, its records written, a module loaded. The trace file is created with
         * the first context: timed first, as a kind of its own, so that the note tells it from
         * the context's other work. */
        if (atomic_load(&mt_rec.enabled) &&
            (id != CUPTI_CBID_RESOURCE_CONTEXT_CREATED || mt_trace_open(&mt_rec) == 0)) {
            uint64_t t0 = mt_rare_begin();
            mt_on_callback(ud, d, id, data);
            mt_rare_end(t0, MT_RARE_CONTEXT);
        }
    } else if (atomic_load(&mt_rec.enabled) &&
               !atomic_load_explicit(&mt_rec.paused, memory_order_relaxed)) {
        if (mt_time_this_call()) {
            uint64_t t0 = mt_cost_clock();
            mt_on_callback(ud, d, id, data);
            uint64_t dt = mt_cost_add(&mt_rec.costs.callback_ns, &mt_rec.costs.callbacks, t0,
                                      &mt_rec.costs.callback_spread);
            /* which call took longest: a rough average then says what it stands on */
            int at_exit_site = d == CUPTI_CB_DOMAIN_DRIVER_API &&
                               ((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_EXIT;
            mt_cost_longest(&mt_rec.costs.callback_longest, dt,
                            (uint32_t)id << 1 | (uint32_t)at_exit_site);
        } else {
            mt_on_callback(ud, d, id, data);
        }
    }
    mt_inflight_end(&mt_rec);
}

/* The program's own switch (declared in memtrace/record.h): 1 pauses, 0 resumes; returns the
 * previous state, -1 when this process is not being recorded. While paused, the callbacks and the
 * hooks return at once and the NVML sampler takes no samples: what the program does then is not in
 * the trace, and costs it nothing of memtrace's but CUPTI's dispatch of the callbacks still enabled
 * (none for the allocations of tensor mode) and its activity records of driver-internal
 * allocations. Each switch is a note in the trace. */
__attribute__((visibility("default"))) int memtrace_set_paused(int paused)
{
    if (getpid() != mt_rec.pid || !mt_rec.sink) return -1;
    int was = atomic_exchange(&mt_rec.paused, paused ? 1 : 0);
    if (was != (paused ? 1 : 0))
        mt_trace_note(MT_NOTE_INFO, paused ? "recording paused by the program (memtrace_set_paused)"
                                           : "recording resumed by the program");
    return was;
}

static int env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

static void read_config(mt_recorder_config *c)
{
    const char *stacks = getenv("MEMTRACE_STACKS");
    c->stacks = MT_STACKS_BOTH;
    if (stacks && strcmp(stacks, "none") == 0) c->stacks = MT_STACKS_NONE;
    if (stacks && strcmp(stacks, "native") == 0) c->stacks = MT_STACKS_NATIVE;
    if (stacks && strcmp(stacks, "python") == 0) c->stacks = MT_STACKS_PYTHON;
    c->native_full = stacks && strcmp(stacks, "full") == 0;
    c->activity = !env_is("MEMTRACE_ACTIVITY", "0");
    const char *flush = getenv("MEMTRACE_FLUSH_MS");
    c->flush_ms = flush ? (uint32_t)atoi(flush) : 0;
    const char *nvml_ms = getenv("MEMTRACE_NVML_MS");
    long ms = nvml_ms ? strtol(nvml_ms, NULL, 10) : 0;
    c->nvml_ms = ms >= 10 && ms <= 60000 ? (uint32_t)ms : MT_NVML_SAMPLE_MS;
    c->census = env_is("MEMTRACE_CALLBACKS", "count");
    int callbacks = !env_is("MEMTRACE_CALLBACKS", "0");
    c->async_hooks = env_is("MEMTRACE_ASYNC_HOOKS", "1") && callbacks && !c->census;
    c->tensors = env_is("MEMTRACE_TENSORS", "1") && callbacks && !c->census;
    c->torch_oom = callbacks && !c->census; /* so also whenever c->tensors */
}

/* Stacks: where our code is, the module map, the trie, Python. */
static void stacks_init(mt_recorder *r)
{
    mt_stacks_init(r);
    r->modules = mt_modules_new();
    r->trie = mt_trie_new(on_new_node, r);
    if (!r->modules || !r->trie) r->cfg.stacks = MT_STACKS_NONE;
    if ((r->cfg.stacks & MT_STACKS_PYTHON) && mt_stacks_init_python(r) == 0)
        mt_trace_note(MT_NOTE_INFO, "Python frames: on");
    else if (r->cfg.stacks == MT_STACKS_PYTHON)
        r->cfg.stacks = MT_STACKS_NATIVE; /* no Python here: native is all there is */
    if (r->trie) {
        uint64_t pseudo = MT_FRAME_WORD(MT_FRAME_PSEUDO, MT_PSEUDO_DRIVER_INTERNAL);
        mt_trie_cache cache = {0};
        r->driver_internal_stack = mt_trie_intern(r->trie, &cache, &pseudo, 1);
    }
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
    static _Atomic int once;
    if (atomic_exchange(&once, 1)) return 1;
    mt_recorder *r = &mt_rec;
    r->pid = getpid();
    mt_clock_start();
    mt_inflight_init(r);
    pthread_mutex_init(&r->pool_lock, NULL);
    pthread_mutex_init(&r->open_lock, NULL);

    const char *why = NULL;
    char cupti_path[1024] = "";
    if (mt_cupti_load(&r->cupti, getenv("MEMTRACE_CUPTI"), &why, cupti_path,
                      sizeof cupti_path) != 0) {
        mt_warn_once("cupti", "%s; the program runs untraced", why);
        return 1;
    }
    if (mt_cuda_load(&r->cuda, &why) != 0) {
        mt_warn_once("cuda", "%s; the program runs untraced", why);
        return 1;
    }
    read_file_line("/proc/self/comm", r->comm, sizeof r->comm);
    for (char *p = r->comm; *p; p++)
        if (*p == '/' || *p == ' ') *p = '_';
    read_config(&r->cfg);

    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    mt_sink_config sc = {.fd = -1, .flush_ms = r->cfg.flush_ms}; /* the file comes later */
    sc.header.version = MT_TRACE_VERSION;
    sc.header.pid = (uint32_t)getpid();
    sc.header.start_monotonic_ns = mt_now_ns();
    sc.header.start_realtime_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    char rank_from[64];
    int has_rank = mt_rank_from_env(&sc.header, rank_from, sizeof rank_from);
    r->rank = has_rank ? sc.header.rank : -1;
    r->sink = mt_sink_start(&sc);
    if (!r->sink) {
        mt_warn_once("sink", "cannot start the trace writer; the program runs untraced");
        return 1;
    }

    char cmdline[4096], host[256] = "";
    read_file_line("/proc/self/cmdline", cmdline, sizeof cmdline);
    gethostname(host, sizeof host - 1);
    mt_record proc = {.type = MT_REC_PROCESS};
    proc.u.process = (mt_process){.pid = (uint32_t)getpid(), .ppid = (uint32_t)getppid(),
                                  .comm = r->comm, .cmdline = cmdline, .hostname = host};
    mt_sink_put_copy(r->sink, &proc);
    mt_trace_note(MT_NOTE_INFO, "libcupti: %s", cupti_path);
    if (has_rank)
        mt_trace_note(MT_NOTE_INFO, "rank %d of %d (local rank %d, node %d), from %s",
                      (int)sc.header.rank, (int)sc.header.world_size, (int)sc.header.local_rank,
                      (int)sc.header.node_rank, rank_from);
    stacks_init(r);
    mt_find_c10(r);

    /* The hooks before the callbacks: with them active, CUPTI's stream-ordered callbacks stay off. */
    if (r->cfg.async_hooks) mt_async_hooks_install(r);
    if (r->cfg.torch_oom) mt_tensor_hooks_install(r); /* with --tensors: the usage stand-in too */
    /* MEMTRACE_CALLBACKS=0 is a diagnostic: subscribe but enable nothing, to measure what a
     * CUPTI subscription alone costs the program (scripts/overhead.sh). */
    int want_callbacks = !env_is("MEMTRACE_CALLBACKS", "0");
    if (mt_mux_subscribe(r) != 0 ||
        (want_callbacks &&
         (r->cfg.census ? mt_census_enable(r) : mt_callbacks_enable(r)) != 0)) {
        mt_sink_stop(r->sink, NULL);
        r->sink = NULL;
        return 1;
    }
    if (r->cupti.ActivityRegisterTimestampCallback &&
        r->cupti.ActivityRegisterTimestampCallback(monotonic_timestamp) != CUPTI_SUCCESS)
        mt_trace_note(MT_NOTE_WARNING, "activity timestamps are not on CLOCK_MONOTONIC");
    if (!r->cfg.activity)
        mt_trace_note(MT_NOTE_INFO,
                      "%s (MEMTRACE_ACTIVITY=0): no driver-internal allocations, "
                      "CUDA arrays or pool sizes in this trace",
                      MT_ACTIVITY_NOTE_OFF);
    else if (mt_activity_start(r) != 0)
        mt_trace_note(MT_NOTE_WARNING,
                      "%s: driver-internal allocations, CUDA arrays and pool "
                      "sizes are not in this trace",
                      MT_ACTIVITY_NOTE_UNAVAILABLE);

    mt_sink_set_tick(r->sink, writer_tick, r);
    if (!env_is("MEMTRACE_NVML", "0")) r->sampler = mt_gpu_sampler_start(r);
    pthread_atfork(NULL, NULL, at_fork_child);
    atexit(at_exit);
    atomic_store(&r->enabled, 1);
    return 1;
}
