/* InitializeInjection: where the recorder starts, and everything about its life in the process.
 *
 * The CUDA driver calls InitializeInjection() (the library is named by CUDA_INJECTION64_PATH) from
 * cuInit, on the first thread that touches CUDA. From there:
 *   load libcupti -> open the trace file -> start the sink -> subscribe -> enable callbacks and
 *   activity -> register atexit/atfork.
 * Every step that fails prints one warning (prefix "memtrace: ") and leaves the program running
 * untraced. The program's own output, exit status and behaviour are never changed.
 *
 * Environment (set by `memtrace record`; all optional):
 *   MEMTRACE_OUTPUT    path pattern: %p pid, %c command name, %h host name, %% a percent sign
 *                      (default memtrace.%c.%p.mtrace in the working directory)
 *   MEMTRACE_FORCE     1: replace an existing file (default: never overwrite, O_EXCL)
 *   MEMTRACE_CUPTI     libcupti to load when the process has none loaded yet
 *   MEMTRACE_STACKS    none | native | python | both (default both: Python frames in place of
 *                      the interpreter's, when the process runs Python)
 *   MEMTRACE_ACTIVITY  0: no CUPTI activity records (no driver-internal allocations/pool sizes)
 *   MEMTRACE_FLUSH_MS  how often the writer flushes (default 200)
 *   MEMTRACE_CALLBACKS 0: subscribe to CUPTI but enable no callback (diagnostic: CUPTI's own cost);
 *                      count: count every driver/runtime API call by name, record no event
 *                      (diagnostic, api_census.c)
 *   MEMTRACE_ASYNC_HOOKS 1: take cudaMallocAsync/cudaFreeAsync calls from the callers' import
 *                      slots instead of CUPTI (record --tensors; async_hooks.c says what it costs)
 *   MEMTRACE_NVML      0: do not sample the process's GPU memory through NVML every 50 ms
 *   MEMTRACE_MANIFEST  file to which the path of each trace is appended (one line each)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "recorder.h"

mt_recorder mt_rec;

uint64_t mt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CUPTI stamps activity records with this when registered, so they share our clock. */
static uint64_t CUPTIAPI monotonic_timestamp(void) { return mt_now_ns(); }

uint32_t mt_gettid(void)
{
    static __thread uint32_t tid;
    if (!tid) tid = (uint32_t)syscall(SYS_gettid);
    return tid;
}

/* A note record in the trace (when there is one). */
static void put_note(int level, const char *msg)
{
    mt_sink *sink = mt_rec.sink;
    if (!sink) return;
    mt_record rec = {.type = MT_REC_NOTE};
    rec.u.note = (mt_note){.time_ns = mt_now_ns(), .level = (uint8_t)level, .text = msg};
    mt_sink_put_copy(sink, &rec);
}

/* One warning per key per process. Keys are string literals; a few dozen at most. */
int mt_warn_once(const char *key, const char *fmt, ...)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const char *said[64];
    pthread_mutex_lock(&lock);
    int seen = 0, n = 0;
    for (; n < 64 && said[n]; n++)
        if (said[n] == key) seen = 1;
    if (!seen && n < 64) said[n] = key;
    pthread_mutex_unlock(&lock);
    if (seen) return 0;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "memtrace: %s\n", msg);
    put_note(MT_NOTE_WARNING, msg);
    return 1;
}

/* A note in the trace only (not on stderr). */
void mt_trace_note(int level, const char *fmt, ...)
{
    if (!mt_rec.sink) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    put_note(level, msg);
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

/* Expands the output pattern. Returns 0, or -1 if the result would not fit. */
static int expand_pattern(const char *pattern, const char *comm, char *out, size_t len)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    size_t o = 0;
    for (const char *p = pattern; *p; p++) {
        char tmp[64];
        const char *add = tmp;
        if (*p == '%' && p[1]) {
            switch (*++p) {
            case 'p': snprintf(tmp, sizeof tmp, "%d", (int)getpid()); break;
            case 'c': add = comm; break;
            case 'h': add = host; break;
            case '%': add = "%"; break;
            default: snprintf(tmp, sizeof tmp, "%%%c", *p);
            }
        } else {
            tmp[0] = *p;
            tmp[1] = 0;
        }
        size_t n = strlen(add);
        if (o + n + 1 > len) return -1;
        memcpy(out + o, add, n);
        o += n;
    }
    out[o] = 0;
    return 0;
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

/* Runs on the writer thread before each drain. */
static void writer_tick(void *ctx, mt_sink *s)
{
    (void)s;
    mt_recorder *r = ctx;
    if (getpid() != r->pid) return;
    mt_modules_refresh(r->modules, on_new_module, r);
    mt_pool_poll(r);
    mt_activity_tick(r);
    mt_async_hooks_tick(r);
}

static void at_fork_child(void)
{
    /* No writer thread and no CUPTI threads exist in a fork()ed child: touching either could
     * hang. Step aside for good; a child that exec()s starts over with its own injection. */
    atomic_store(&mt_rec.enabled, 0);
    mt_sink_abandon_in_child(mt_rec.sink);
    mt_rec.sink = NULL; /* warnings in the child go to stderr only */
}

/* Waits (bounded) for callbacks that started before `enabled` went to 0. */
static void quiesce(void)
{
    for (int i = 0; i < 1000 && atomic_load(&mt_rec.inflight) > 0; i++) usleep(100);
}

static void at_exit(void)
{
    if (getpid() != mt_rec.pid || !mt_rec.sink) return;
    /* Activity records still buffered inside CUPTI are delivered now, while CUDA is alive. */
    if (mt_rec.activity_on && !atomic_load(&mt_rec.activity_stopped)) mt_activity_flush(&mt_rec);
    atomic_store(&mt_rec.enabled, 0);
    mt_gpu_sampler_stop(mt_rec.sampler);
    mt_rec.sampler = NULL;
    quiesce(); /* callbacks that started before we turned the switch off */
    mt_sink *sink = mt_rec.sink;
    /* The writer's tick reads mt_rec.sink (pool polls, notes): take it away, and wait out a tick
     * in progress, before that pointer goes; then do its last round here. */
    mt_sink_set_tick(sink, NULL, NULL);
    mt_sink_flush(sink);
    mt_pool_poll(&mt_rec);
    mt_modules_refresh(mt_rec.modules, on_new_module, &mt_rec);
    if (mt_rec.cfg.census) mt_census_note(&mt_rec);
    uint64_t cbs = atomic_load(&mt_rec.callbacks);
    if (cbs)
        mt_trace_note(MT_NOTE_INFO,
                      "callbacks: about %" PRIu64 " (API entry and exit), %.0f ns each on average "
                      "inside memtrace (CUPTI's own dispatch not included; 1 in %d timed)",
                      cbs, (double)atomic_load(&mt_rec.callback_ns) / (double)cbs, MT_TIME_SAMPLE);
    uint64_t hooked = atomic_load(&mt_rec.hooks.calls);
    if (hooked)
        mt_trace_note(MT_NOTE_INFO,
                      "hooked calls: about %" PRIu64 " cudaMallocAsync/cudaFreeAsync, %.0f ns each on "
                      "average inside memtrace after the call (1 in %d timed)",
                      hooked, (double)atomic_load(&mt_rec.hooks.ns) / (double)hooked,
                      MT_TIME_SAMPLE);
    mt_unwind_totals u;
    mt_unwind_stats(&u);
    if (u.walks) {
        double w = (double)u.walks;
        mt_trace_note(MT_NOTE_INFO,
                      "unwinder: %" PRIu64 " walks, %.1f%% ended on an earlier walk's frames "
                      "(%.1f%% were one as a whole; %.2f remembered walks compared per walk), "
                      "%.1f frames stepped by rule per walk, %" PRIu64 " rule-cache misses; "
                      "%" PRIu64 " walks without a key (neither a Python frame nor a "
                      "stand-in to name the call site), %.1f%% of them whole",
                      u.walks, 100.0 * (double)u.memo_hits / w, 100.0 * (double)u.whole_hits / w,
                      (double)u.ways_checked / w, (double)u.rule_steps / w, u.rule_misses,
                      u.keyless,
                      u.keyless ? 100.0 * (double)u.keyless_whole_hits / (double)u.keyless : 0.0);
    }
    uint64_t calls = atomic_load(&mt_rec.stack_calls);
    uint64_t built = atomic_load(&mt_rec.stack_built);
    if (calls)
        mt_trace_note(MT_NOTE_INFO,
                      "stack capture: about %" PRIu64 " stacks, %.0f ns each on average (of which "
                      "Python frames %.0f ns, native unwinding %.0f ns); %.1f%% the same as the "
                      "call site's last stack (leaf memo), the others %.1f frames long; 1 in %d "
                      "timed; %u trie nodes",
                      calls, (double)atomic_load(&mt_rec.stack_ns) / (double)calls,
                      (double)atomic_load(&mt_rec.python_ns) / (double)calls,
                      (double)atomic_load(&mt_rec.unwind_ns) / (double)calls,
                      100.0 * (1.0 - (double)built / (double)calls),
                      built ? (double)atomic_load(&mt_rec.stack_frames) / (double)built : 0.0,
                      MT_TIME_SAMPLE, mt_trie_size(mt_rec.trie));
    /* Leave CUPTI before the libraries' destructors run: libcudart tears its contexts down from
     * _dl_fini, possibly after libcupti's own destructor, and a callback dispatched then would
     * land in a finalized CUPTI. Nothing after this point would be recorded anyway. */
    if (atomic_exchange(&mt_rec.subscribed, 0)) mt_rec.cupti.Unsubscribe(mt_rec.subscriber);
    mt_sink_stats st;
    mt_rec.sink = NULL; /* first: a late activity buffer or warning must not reach a freed sink */
    mt_sink_stop(sink, &st);
    if (st.write_failed)
        fprintf(stderr, "memtrace: writing %s failed (disk full?): the trace ends early\n",
                mt_rec.cfg.output);
}

/* The callback entry point wraps the real handler with the in-flight counter. */
static void CUPTIAPI guarded_callback(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id,
                                      const void *data)
{
    atomic_fetch_add(&mt_rec.inflight, 1);
    if (atomic_load(&mt_rec.enabled) &&
        (!atomic_load_explicit(&mt_rec.paused, memory_order_relaxed) ||
         d == CUPTI_CB_DOMAIN_RESOURCE)) { /* a context's birth and death are never skipped */
        if (mt_time_this_call()) {
            uint64_t t0 = mt_now_ns();
            mt_on_callback(ud, d, id, data);
            atomic_fetch_add_explicit(&mt_rec.callback_ns, (mt_now_ns() - t0) * MT_TIME_SAMPLE,
                                      memory_order_relaxed);
            atomic_fetch_add_explicit(&mt_rec.callbacks, MT_TIME_SAMPLE, memory_order_relaxed);
        } else {
            mt_on_callback(ud, d, id, data);
        }
    }
    atomic_fetch_sub(&mt_rec.inflight, 1);
}

static int open_output(const char *comm)
{
    const char *pattern = getenv("MEMTRACE_OUTPUT");
    if (!pattern || !*pattern) pattern = "memtrace.%c.%p.mtrace";
    if (expand_pattern(pattern, comm, mt_rec.cfg.output, sizeof mt_rec.cfg.output) != 0) {
        mt_warn_once("path", "output path too long: not tracing this process");
        return -1;
    }
    int force = getenv("MEMTRACE_FORCE") && atoi(getenv("MEMTRACE_FORCE")) > 0;
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
    int fd = open(mt_rec.cfg.output, flags, 0644);
    if (fd < 0)
        mt_warn_once("open", "cannot create %s: %s%s; not tracing this process",
                     mt_rec.cfg.output, strerror(errno),
                     errno == EEXIST ? " (use -f to replace it)" : "");
    return fd;
}

static void write_manifest(void)
{
    const char *manifest = getenv("MEMTRACE_MANIFEST");
    if (!manifest || !*manifest) return;
    int fd = open(manifest, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return;
    char line[4200];
    int n = snprintf(line, sizeof line, "%d %s\n", (int)getpid(), mt_rec.cfg.output);
    if (n > 0 && write(fd, line, (size_t)n) < 0) { /* the CLI then reports no file: harmless */
    }
    close(fd);
}

static int subscribe(void)
{
    CUptiResult rc;
    char holder[256] = "";
    if (mt_rec.cupti.Subscribe_v2) {
        CUpti_SubscriberParams p;
        memset(&p, 0, sizeof p);
        p.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
        p.subscriberName = "memtrace";
        p.oldSubscriberName = holder;
        p.oldSubscriberSize = sizeof holder;
        rc = mt_rec.cupti.Subscribe_v2(&mt_rec.subscriber, guarded_callback, &mt_rec, &p);
    } else {
        rc = mt_rec.cupti.Subscribe(&mt_rec.subscriber, guarded_callback, &mt_rec);
    }
    if (rc == CUPTI_SUCCESS) {
        atomic_store(&mt_rec.subscribed, 1);
        return 0;
    }
    const char *msg = "?";
    mt_rec.cupti.GetResultString(rc, &msg);
    mt_warn_once("subscribe", "CUPTI refused a subscriber (%s%s%s): another profiler holds it; "
                 "the program runs untraced", msg, holder[0] ? ", held by " : "", holder);
    return -1;
}

void mt_recorder_yield(const char *who)
{
    if (getpid() != mt_rec.pid || !atomic_exchange(&mt_rec.subscribed, 0)) return;
    if (mt_rec.activity_on && !atomic_load(&mt_rec.activity_stopped)) mt_activity_flush(&mt_rec);
    atomic_store(&mt_rec.enabled, 0);
    quiesce();
    mt_rec.cupti.Unsubscribe(mt_rec.subscriber);
    atomic_store(&mt_rec.yielded, 1);
    /* on stderr once, in the trace every time */
    char msg[512];
    snprintf(msg, sizeof msg,
             "recording paused: another CUPTI client (%s; a profiler such as torch.profiler) "
             "subscribed, and CUPTI allows one. Allocations and frees from here until 'recording "
             "resumed' (or the end) are not in the trace.",
             who);
    if (!mt_warn_once("yield", "%s", msg)) put_note(MT_NOTE_WARNING, msg);
}

void mt_recorder_resume(void)
{
    if (getpid() != mt_rec.pid || !atomic_load(&mt_rec.yielded) || atomic_load(&mt_rec.subscribed))
        return;
    if (subscribe() != 0 || mt_callbacks_enable(&mt_rec) != 0) return;
    atomic_store(&mt_rec.yielded, 0);
    atomic_store(&mt_rec.enabled, 1);
    mt_trace_note(MT_NOTE_WARNING, "recording resumed: the other CUPTI client unsubscribed");
}

/* The program's own switch (declared in memtrace/record.h): 1 pauses, 0 resumes; returns the
 * previous state, -1 when this process is not being recorded. While paused, the callbacks and the
 * hooks return at once: what the program does then is not in the trace, and costs it nothing of
 * memtrace's but CUPTI's dispatch of the callbacks still enabled (none for the allocations of
 * tensor mode). Each switch is a note in the trace. */
__attribute__((visibility("default"))) int memtrace_set_paused(int paused)
{
    if (getpid() != mt_rec.pid || !mt_rec.sink) return -1;
    int was = atomic_exchange(&mt_rec.paused, paused ? 1 : 0);
    if (was != (paused ? 1 : 0))
        mt_trace_note(MT_NOTE_INFO, paused ? "recording paused by the program (memtrace_set_paused)"
                                           : "recording resumed by the program");
    return was;
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
    static _Atomic int once;
    if (atomic_exchange(&once, 1)) return 1;
    mt_rec.pid = getpid();
    pthread_mutex_init(&mt_rec.pool_lock, NULL);

    const char *why = NULL;
    char cupti_path[1024] = "";
    if (mt_cupti_load(&mt_rec.cupti, getenv("MEMTRACE_CUPTI"), &why, cupti_path,
                      sizeof cupti_path) != 0) {
        mt_warn_once("cupti", "%s; the program runs untraced", why);
        return 1;
    }
    if (mt_cuda_load(&mt_rec.cuda, &why) != 0) {
        mt_warn_once("cuda", "%s; the program runs untraced", why);
        return 1;
    }
    char comm[64];
    read_file_line("/proc/self/comm", comm, sizeof comm);
    for (char *p = comm; *p; p++)
        if (*p == '/' || *p == ' ') *p = '_';
    int fd = open_output(comm[0] ? comm : "process");
    if (fd < 0) return 1;

    const char *stacks = getenv("MEMTRACE_STACKS");
    mt_rec.cfg.stacks = MT_STACKS_BOTH;
    if (stacks && strcmp(stacks, "none") == 0) mt_rec.cfg.stacks = MT_STACKS_NONE;
    if (stacks && strcmp(stacks, "native") == 0) mt_rec.cfg.stacks = MT_STACKS_NATIVE;
    if (stacks && strcmp(stacks, "python") == 0) mt_rec.cfg.stacks = MT_STACKS_PYTHON;
    const char *activity = getenv("MEMTRACE_ACTIVITY");
    mt_rec.cfg.activity = !(activity && strcmp(activity, "0") == 0);
    const char *flush = getenv("MEMTRACE_FLUSH_MS");
    mt_rec.cfg.flush_ms = flush ? (uint32_t)atoi(flush) : 0;

    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    mt_sink_config sc = {.fd = fd, .flush_ms = mt_rec.cfg.flush_ms};
    sc.header.version = MT_TRACE_VERSION;
    sc.header.pid = (uint32_t)getpid();
    sc.header.start_monotonic_ns = mt_now_ns();
    sc.header.start_realtime_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    mt_rec.sink = mt_sink_start(&sc);
    if (!mt_rec.sink) {
        close(fd);
        unlink(mt_rec.cfg.output);
        mt_warn_once("sink", "cannot start the trace writer; the program runs untraced");
        return 1;
    }

    char cmdline[4096], host[256] = "";
    read_file_line("/proc/self/cmdline", cmdline, sizeof cmdline);
    gethostname(host, sizeof host - 1);
    mt_record proc = {.type = MT_REC_PROCESS};
    proc.u.process = (mt_process){.pid = (uint32_t)getpid(), .ppid = (uint32_t)getppid(),
                                  .comm = comm, .cmdline = cmdline, .hostname = host};
    mt_sink_put_copy(mt_rec.sink, &proc);
    mt_trace_note(MT_NOTE_INFO, "libcupti: %s", cupti_path);

    mt_stacks_init(&mt_rec);
    mt_rec.modules = mt_modules_new();
    mt_rec.trie = mt_trie_new(on_new_node, &mt_rec);
    if (!mt_rec.modules || !mt_rec.trie) mt_rec.cfg.stacks = MT_STACKS_NONE;
    if ((mt_rec.cfg.stacks & MT_STACKS_PYTHON) && mt_stacks_init_python(&mt_rec) == 0)
        mt_trace_note(MT_NOTE_INFO, "Python frames: on");
    else if (mt_rec.cfg.stacks == MT_STACKS_PYTHON)
        mt_rec.cfg.stacks = MT_STACKS_NATIVE; /* no Python here: native is all there is */
    if (mt_rec.trie) {
        uint64_t pseudo = MT_FRAME_WORD(MT_FRAME_PSEUDO, MT_PSEUDO_DRIVER_INTERNAL);
        mt_trie_cache cache = {0};
        mt_rec.driver_internal_stack = mt_trie_intern(mt_rec.trie, &cache, &pseudo, 1);
    }

    /* MEMTRACE_CALLBACKS=0 is a diagnostic: subscribe but enable nothing, to measure what a
     * CUPTI subscription alone costs the program (scripts/overhead.sh). */
    const char *cbs = getenv("MEMTRACE_CALLBACKS");
    int want_callbacks = !(cbs && strcmp(cbs, "0") == 0);
    mt_rec.cfg.census = cbs && strcmp(cbs, "count") == 0;
    const char *hooks = getenv("MEMTRACE_ASYNC_HOOKS");
    mt_rec.cfg.async_hooks = hooks && strcmp(hooks, "1") == 0 && want_callbacks &&
                             !mt_rec.cfg.census;
    if (mt_rec.cfg.async_hooks) mt_async_hooks_install(&mt_rec); /* before the callbacks: they
                                                                     skip what it hooked */
    if (subscribe() != 0 ||
        (want_callbacks && (mt_rec.cfg.census ? mt_census_enable(&mt_rec)
                                              : mt_callbacks_enable(&mt_rec)) != 0)) {
        mt_sink_stop(mt_rec.sink, NULL);
        mt_rec.sink = NULL;
        unlink(mt_rec.cfg.output);
        return 1;
    }
    if (mt_rec.cupti.ActivityRegisterTimestampCallback &&
        mt_rec.cupti.ActivityRegisterTimestampCallback(monotonic_timestamp) != CUPTI_SUCCESS)
        mt_trace_note(MT_NOTE_WARNING, "activity timestamps are not on CLOCK_MONOTONIC");
    if (!mt_rec.cfg.activity)
        mt_trace_note(MT_NOTE_INFO, "activity records off (MEMTRACE_ACTIVITY=0): no "
                                    "driver-internal allocations or pool sizes in this trace");
    else if (mt_activity_start(&mt_rec) != 0)
        mt_trace_note(MT_NOTE_WARNING, "activity records unavailable: driver-internal allocations and "
                                 "pool sizes are not in this trace");

    mt_sink_set_tick(mt_rec.sink, writer_tick, &mt_rec);
    if (!getenv("MEMTRACE_NVML") || strcmp(getenv("MEMTRACE_NVML"), "0") != 0)
        mt_rec.sampler = mt_gpu_sampler_start(&mt_rec);
    pthread_atfork(NULL, NULL, at_fork_child);
    atexit(at_exit);
    write_manifest();
    atomic_store(&mt_rec.enabled, 1);
    return 1;
}
