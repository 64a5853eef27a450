/* memtrace/record.h — the recorder's machinery that does not need a GPU.
 *
 * The injected library (src/record/cuda/) is thin glue between CUPTI and these pieces:
 *   mt_sink     per-thread lock-free rings, drained by one background thread into an mt_writer
 *   mt_unwind   the caller's native stack, fast (cached CFI), innermost frame first
 *   mt_trie     stack deduplication: each frame written once, events carry a leaf id
 *   mt_modules  the loaded ELF objects (path, load address, build id) for later symbolization
 *   mt_pyframes the calling thread's Python frames, read without the GIL
 *   mt_got      redirect one object's calls of an imported function to a stand-in (GOT slots)
 * Everything here runs inside the traced program: no function may crash, block for long, or print
 * more than one warning per problem.
 */
#ifndef MEMTRACE_RECORD_H
#define MEMTRACE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "memtrace/trace.h"
#include "memtrace/unwind.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Sink ------------------------------------------------------------------------------------- */

typedef struct mt_sink mt_sink;

typedef struct mt_sink_config {
    int fd;                 /* trace file, already opened (O_EXCL|O_NOFOLLOW); the sink owns it.
                               -1: no file yet; records wait in memory until mt_sink_open */
    mt_file_header header;  /* written first */
    uint32_t ring_slots;    /* per-thread ring capacity in records; 0 = default (16384) */
    uint32_t flush_ms;      /* writer wakes at least this often and flushes; 0 = default (200) */
    uint32_t chunk_bytes;   /* raw bytes per chunk; 0 = MT_CHUNK_RAW_DEFAULT */
    uint32_t max_wait_ms;   /* longest a thread waits for room in its full ring before the event
                               is dropped (and counted); 0 = default (MT_SINK_MAX_WAIT_MS) */
} mt_sink_config;

#define MT_SINK_MAX_WAIT_MS 2000

typedef struct mt_sink_stats {
    uint64_t events;        /* MT_REC_EVENT records written */
    uint64_t dropped;       /* events lost because a ring stayed full for max_wait_ms */
    uint64_t records;       /* all records written */
    uint64_t bytes;         /* file size */
    int write_failed;       /* a write(2) failed (disk full...): the trace ends early */
    int write_errno;        /* ... with this errno */
    int opened;             /* the file was written (mt_sink_open was called, or fd >= 0) */
    uint64_t rings_freed;   /* per-thread rings freed after their thread exited */
    uint64_t rings_reused;  /* ... or taken over by a new thread */
    uint64_t rings_populated; /* rings whose pages the writer mapped ahead of their thread */
    uint64_t waits;         /* times a thread found its ring full and waited for the writer */
    uint64_t wait_ns;       /* ... for this long in all */
    uint64_t max_wait_ns;   /* ... the longest single wait */
    uint64_t late;          /* events written after a later-stamped one (out of time order) */
    /* The writer thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), read at the end of each of its
     * cycles: recording's cost that no note on the program's threads sees */
    uint64_t writer_cycles;      /* times it woke and worked (timer, flush, a ring half full) */
    uint64_t writer_cpu_ns;      /* CPU time in all, up to its last cycle */
    uint64_t writer_tick_cpu_ns; /* ... of which in the tick (mt_sink_set_tick) */
    uint64_t writer_wall_ns;     /* from the sink's start to the end of its last cycle */
} mt_sink_stats;

/* Rare records (mt_sink_put_copy) wait on a side queue until the writer's next drain, or until
 * the file is opened: at most this many bytes of them; more are counted and said at stop. */
#define MT_SINK_SIDE_MAX_BYTES (64 << 20)

/* Starts the writer thread. NULL on failure (then nothing was started). */
mt_sink *mt_sink_start(const mt_sink_config *cfg);

/* A sink started with fd -1 gets its file now: the header is written and everything recorded so
 * far follows at the next drain. 0 ok; -1 when the header cannot be written (the sink then drops
 * what it holds and stays without a file). Any thread; once. */
int mt_sink_open(mt_sink *s, int fd);
int mt_sink_is_open(const mt_sink *s);
/* The counters so far (exact right after mt_sink_flush), for the recorder's own notes. */
void mt_sink_stats_now(mt_sink *s, mt_sink_stats *st);

/* Hot path, any thread: copies an event or a stack node into the calling thread's ring. An event
 * never gets lost silently: when the ring is full the calling thread wakes the writer and waits
 * for room, at most max_wait_ms (then the event is dropped and counted, and the trace says how
 * many). A stack node never waits and is never dropped: a full ring sends it the slow way below.
 * A NULL sink is accepted and ignored (here and in mt_sink_put_copy): emitters racing with
 * shutdown lose their record, never the program. */
void mt_sink_event(mt_sink *s, const mt_event *ev);
void mt_sink_node(mt_sink *s, const mt_stack_node *node);
/* Hot path: asks for the lines of the calling thread's next ring slot, for writing, so that an
 * event recorded a little later (after the stack capture) finds them in this core's cache
 * instead of waiting for the writer thread's core to give them up. Does nothing on a thread that
 * has no ring yet. Never blocks, never faults. */
void mt_sink_prefetch(mt_sink *s);

/* The calling thread is about to make an event stamped `time_ns` but will commit it only later
 * (a free is stamped when the call starts and recorded when it returns): until this thread's next
 * mt_sink_event, the writer holds back events stamped after time_ns, so the trace stays in time
 * order. time_ns = 0 withdraws it (the event will not come). */
void mt_sink_hold(mt_sink *s, uint64_t time_ns);

/* Slow path for rare records with strings (process, module, thread, note, device, pycode, symbol,
 * sample): deep-copied under a mutex into a side queue. */
void mt_sink_put_copy(mt_sink *s, const mt_record *r);

/* Asks the writer to drain everything now and waits until it has been written. */
void mt_sink_flush(mt_sink *s);

/* Writer-thread hook, called once per timed drain (at most every flush_ms) before the batch is
 * written (module map refresh, CUPTI activity flush...), and first right after it is set. Runs on
 * the writer thread; may call mt_sink_put_copy. Drains that a full ring asked for run without it
 * (a thread may be waiting).
 * To take it away for good: mt_sink_set_tick(s, NULL, NULL) then mt_sink_flush(s); when the flush
 * returns, no tick is running and none will run again. */
typedef void (*mt_sink_tick_fn)(void *ctx, mt_sink *s);
void mt_sink_set_tick(mt_sink *s, mt_sink_tick_fn fn, void *ctx);

/* Drains, writes MT_REC_END, closes the file, joins the thread, frees. Stats may be NULL. A sink
 * that never got its file discards what it held. After it, every producer call returns at once. */
void mt_sink_stop(mt_sink *s, mt_sink_stats *stats);
/* The same without freeing anything: for a caller that cannot rule out a producer still inside a
 * call (it then writes into memory nobody reads, instead of freed memory). */
void mt_sink_stop_keeping_memory(mt_sink *s, mt_sink_stats *stats);

/* In a fork()ed child (no writer thread there): forget the sink without touching it further. */
void mt_sink_abandon_in_child(mt_sink *s);

/* ---- Unwinder: memtrace/unwind.h ---------------------------------------------------------------- */

/* ---- Stack trie ------------------------------------------------------------------------------- */

/* A frame word: the frame kind (mt_frame_kind) in bits 62-63, the ip below. */
#define MT_FRAME_WORD(kind, ip) (((uint64_t)(kind) << 62) | ((uint64_t)(ip) & ((1ull << 62) - 1)))
#define MT_FRAME_WORD_KIND(w) ((unsigned)((w) >> 62))
#define MT_FRAME_WORD_IP(w) ((w) & ((1ull << 62) - 1))

typedef struct mt_trie mt_trie;

#define MT_TRIE_RECENT 512 /* whole stacks remembered per thread (direct-mapped by hash) */

/* Per-thread memo, so that a stack seen recently costs one hash of its frames and one lookup, and
 * a new stack that shares its outer frames with the last one looks up only the rest. Owned by the
 * caller (one per thread), zeroed before first use. */
typedef struct mt_trie_cache {
    int n;
    uint64_t words[MT_MAX_FRAMES]; /* the last stack interned, outermost first */
    uint32_t ids[MT_MAX_FRAMES];
    struct {
        uint64_t hash; /* of the whole frame-word array; 0 = empty */
        uint32_t n, leaf;
    } recent[MT_TRIE_RECENT];
} mt_trie_cache;

/* Called for every node created (exactly once per node, under the trie's lock). */
typedef void (*mt_trie_new_node_fn)(void *ctx, const mt_stack_node *node);

mt_trie *mt_trie_new(mt_trie_new_node_fn on_new, void *ctx);
/* frames: n frame words, innermost first. Returns the leaf id (0 when n == 0). Thread-safe. */
uint32_t mt_trie_intern(mt_trie *t, mt_trie_cache *cache, const uint64_t *frames, int n);
uint32_t mt_trie_size(const mt_trie *t); /* nodes created */
/* The trie holds at most this many nodes (its table: 16 bytes a slot, at most half full, so at
 * most 2 x 16 x MT_TRIE_MAX_NODES = 128 MiB); past it a new stack ends at the deepest frame the
 * trie knows (mt_trie_full says it happened). */
#define MT_TRIE_MAX_NODES (1u << 22)
int mt_trie_full(const mt_trie *t);
void mt_trie_free(mt_trie *t);

/* ---- Module map ------------------------------------------------------------------------------- */

typedef struct mt_modules mt_modules;

typedef void (*mt_module_fn)(void *ctx, const mt_module *m);

mt_modules *mt_modules_new(void);
/* Walks dl_iterate_phdr and calls fn once for every module not reported before (cheap when
 * nothing was loaded since the last call). Returns the number of new modules. */
int mt_modules_refresh(mt_modules *mods, mt_module_fn fn, void *ctx);
void mt_modules_free(mt_modules *mods);

/* ---- Rank ---------------------------------------------------------------------------------------- */

/* Fills h's rank fields and MT_HDR_RANK from the launcher's environment (rank_env.c lists the
 * variables). Returns 1 when the process has a rank; source (may be NULL) receives the name of the
 * variable it came from, "" when none. */
int mt_rank_from_env(mt_file_header *h, char *source, size_t len);

/* ---- Control from inside the traced program: memtrace/pause.h --------------------------------- */

/* ---- Import-slot patching (got_patch.c) ------------------------------------------------------ */

/* Redirects the calls that loaded objects make to an imported function (through their GOT slots)
 * to a stand-in, object by object, leaving the function and every other caller alone. */
typedef struct mt_got_hook {
    const char *name; /* the imported symbol, e.g. "cudaMallocAsync" */
    void *hook;       /* its stand-in */
    void *original;   /* set (release store) before the first slot is redirected: the definition
                         every redirected slot had bound to, which the stand-in calls */
} mt_got_hook;

typedef struct mt_got_patcher mt_got_patcher;

/* hooks: n (<= 64) entries, owned by the caller and kept for the patcher's life. */
mt_got_patcher *mt_got_patcher_new(mt_got_hook *hooks, int n);
/* Redirects the import slots of every object loaded since the last call (cheap when none was).
 * Returns the slots newly redirected. An object that bound a hooked name to another definition
 * than the others (its own copy of the library) is left alone and named in `conflict` ("" when
 * none; may be NULL). Thread-safe. */
int mt_got_patch_new(mt_got_patcher *p, char *conflict, size_t len);
int mt_got_patched_slots(mt_got_patcher *p); /* slots redirected now */
/* Puts back what every redirected slot of a still-loaded object held. */
void mt_got_unpatch(mt_got_patcher *p);
void mt_got_patcher_free(mt_got_patcher *p);

/* ---- Python frames (no GIL) ------------------------------------------------------------------- */

typedef struct mt_pyframes mt_pyframes;

/* A Python frame as read from the interpreter: the code object and the line being executed. */
typedef struct mt_pyframe {
    uintptr_t code; /* PyCodeObject address (identity for dedup; resolved off the hot path) */
    int line;       /* current line, -1 if unknown */
    int entry;      /* 1: the outermost frame run by one C-level call of the interpreter loop
                       (_PyEval_EvalFrameDefault); the next older frame, if any, was called from C.
                       This is what lets the recorder put each run of Python frames in the place
                       of the one native eval-loop frame that ran it. */
} mt_pyframe;

/* Finds the interpreter in this process (dlsym on RTLD_DEFAULT). NULL when there is no Python or
 * its version's layout is unknown; *why (may be NULL) then says which, for one warning. */
mt_pyframes *mt_pyframes_new(const char **why);
/* The calling thread's Python frames, innermost first. 0 when the thread has none. */
int mt_pyframes_read(mt_pyframes *py, mt_pyframe *out, int max);
/* The calling thread's innermost Python frame (an address, for mt_pyframes_signature), 0 when it
 * has none. *key: a nonzero word naming that frame's position (code object and instruction), a
 * call-site key for mt_unwind_keyed; 0 with no frame. Reads that one frame. */
uintptr_t mt_pyframes_top(mt_pyframes *py, uint64_t *key);
/* A 64-bit digest of what mt_pyframes_read would decide by (each frame's code object, position
 * and ownership), from `top` (mt_pyframes_top's, on this thread, while it is still in the same
 * call) outward, read from the frames alone: no code object, line table or type is touched.
 * Equal digests mean an equal mt_pyframes_read result (barring a 2^-64 collision, and a code
 * object freed and another allocated at its address, which code ids do not survive either).
 * 0 when there are no frames. */
uint64_t mt_pyframes_signature(mt_pyframes *py, uintptr_t top);
/* Copies out filename, qualname and first line of a code object met by mt_pyframes_read on this
 * thread during the same call (so it is alive). Returns 0 on success. */
int mt_pyframes_describe(mt_pyframes *py, uintptr_t code, char *filename, int flen, char *qualname,
                         int qlen, uint32_t *firstlineno);
void mt_pyframes_free(mt_pyframes *py);

/* ---- Python + native = one stack ------------------------------------------------------------- */

/* Where the interpreter's code is in this process. */
typedef struct mt_py_ranges {
    uintptr_t eval_lo, eval_hi;     /* _PyEval_EvalFrameDefault */
    uintptr_t interp_lo, interp_hi; /* the whole object holding it (python binary or libpython) */
} mt_py_ranges;

/* Names a code object with a small id (0 = leave the frame out). */
typedef uint32_t (*mt_code_id_fn)(void *ctx, uintptr_t code);

/* Merges a native stack (return addresses, innermost first) and the same thread's Python frames
 * (innermost first) into frame words (innermost first): each run of Python frames takes the place
 * of the eval-loop frame that ran it, the interpreter's other frames are dropped. ranges == NULL
 * or nn == 0: Python frames only. Returns the number of words written (<= cap). */
int mt_merge_python(const mt_py_ranges *ranges, const uint64_t *native, int nn,
                    const mt_pyframe *py, int np, mt_code_id_fn code_id, void *ctx, uint64_t *out,
                    int cap);

#ifdef __cplusplus
}
#endif
#endif
