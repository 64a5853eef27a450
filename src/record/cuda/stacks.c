/* The caller's stack at an allocating call, as a leaf id of the stack trie.
 *
 * Native frames come innermost first from the unwinder. When the process runs Python, the calling
 * thread's Python frames (read without the GIL, see pyframes.c) take the place of the interpreter's
 * own frames (see merge_python.c), so a stack reads
 *     cifar.py:<module> -> cifar.py:main -> ... -> linear.py:forward -> at::linear -> ... -> cuMemAlloc
 *
 * Modes (MEMTRACE_STACKS): none, native, python (no unwinding at all: cheapest), both (default:
 * in a Python program the walk ends at the innermost Python frame, mt_stacks_init_python), full
 * (both, walked to the outermost frame: C frames between Python frames kept).
 * A thread with no Python frames in a Python process gets the pseudo frame "[autograd backward]" if
 * it is one of PyTorch's autograd workers (thread name pt_autograd_*), so backward-pass tensors are
 * never attributed to nothing.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "recorder.h"
#include "../hot_path.h"

/* ---- Python code objects -> small ids ------------------------------------------------------ */

/* Open addressing, insert under code_lock, lookups without it (entries are published with release
 * stores and never removed). Code objects live as long as their functions: a few thousand. */
#define CODE_SLOTS 16384

static struct {
    _Atomic uintptr_t code;
    _Atomic uint32_t id;
} code_ids[CODE_SLOTS];
static pthread_mutex_t code_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_code_id = 1;

static uint32_t code_id(mt_recorder *r, uintptr_t code)
{
    size_t h = (size_t)((code >> 4) * MT_GOLDEN64) & (CODE_SLOTS - 1);
    for (size_t i = 0; i < CODE_SLOTS; i++) {
        size_t s = (h + i) & (CODE_SLOTS - 1);
        uintptr_t c = atomic_load_explicit(&code_ids[s].code, memory_order_acquire);
        if (c == code) return atomic_load_explicit(&code_ids[s].id, memory_order_relaxed);
        if (c == 0) break;
    }
    /* Miss: describe it now, while the calling thread is inside it (so it is alive). */
    char file[512] = "", qual[256] = ""; /* describe leaves them alone for a non-code object */
    uint32_t first = 0;
    if (mt_pyframes_describe(r->py, code, file, sizeof file, qual, sizeof qual, &first) != 0 &&
        !file[0])
        return 0;
    pthread_mutex_lock(&code_lock);
    uint32_t id = 0;
    for (size_t i = 0; i < CODE_SLOTS; i++) {
        size_t s = (h + i) & (CODE_SLOTS - 1);
        uintptr_t c = atomic_load_explicit(&code_ids[s].code, memory_order_relaxed);
        if (c == code) { /* another thread won */
            id = atomic_load_explicit(&code_ids[s].id, memory_order_relaxed);
            break;
        }
        if (c == 0) {
            id = next_code_id++;
            atomic_store_explicit(&code_ids[s].id, id, memory_order_relaxed);
            atomic_store_explicit(&code_ids[s].code, code, memory_order_release);
            mt_record rec = {.type = MT_REC_PYCODE};
            rec.u.pycode = (mt_pycode){.id = id, .firstlineno = first, .filename = file,
                                       .qualname = qual};
            mt_sink_put_copy(r->sink, &rec);
            break;
        }
    }
    pthread_mutex_unlock(&code_lock);
    return id; /* 0 when the table is full: the frame is then left out */
}

/* ---- where our own code is ----------------------------------------------------------------- */

static void object_range(const void *addr, uintptr_t *lo, uintptr_t *hi)
{
    struct dl_find_object obj;
    if (addr && _dl_find_object((void *)addr, &obj) == 0) {
        *lo = (uintptr_t)obj.dlfo_map_start;
        *hi = (uintptr_t)obj.dlfo_map_end;
    }
}

void mt_stacks_init(mt_recorder *r)
{
    /* The innermost frames of every stack are this library's callback and CUPTI's dispatch:
     * the same for every event, naming nothing about the caller. They are left out. */
    object_range((const void *)mt_capture_stack, &r->self_lo, &r->self_hi);
    object_range(dlsym(r->cupti.handle, "cuptiSubscribe"), &r->cupti_lo, &r->cupti_hi);
}

/* ---- where the interpreter is ------------------------------------------------------------- */

int mt_stacks_init_python(mt_recorder *r)
{
    const char *why = NULL;
    r->py = mt_pyframes_new(&why);
    if (!r->py) {
        if (why && !strstr(why, "no Python"))
            mt_warn_once("python", "%s", why);
        return -1;
    }
    void *eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (eval && dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size) {
        r->py_ranges.eval_lo = (uintptr_t)eval;
        r->py_ranges.eval_hi = (uintptr_t)eval + sym->st_size;
    }
    struct dl_find_object obj;
    if (eval && _dl_find_object(eval, &obj) == 0) {
        r->py_ranges.interp_lo = (uintptr_t)obj.dlfo_map_start;
        r->py_ranges.interp_hi = (uintptr_t)obj.dlfo_map_end;
    }
    if (!r->py_ranges.eval_lo) {
        mt_warn_once("python-eval", "cannot locate _PyEval_EvalFrameDefault: Python frames are "
                     "placed above the native ones");
    } else if ((r->cfg.stacks & MT_STACKS_NATIVE) && !r->cfg.native_full) {
        /* Above the innermost eval-loop frame the native stack is the interpreter running the
         * Python frames we read anyway, plus glue that merging drops: walking and checking it is
         * work for nothing (docs/performance.md). What is lost: C frames between two Python
         * frames (an extension calling back into Python): --stacks full. */
        mt_unwind_stop_at(r->py_ranges.eval_lo, r->py_ranges.eval_hi);
        mt_trace_note(MT_NOTE_INFO, "native frames: up to the innermost Python frame "
                      "(record --stacks full: all)");
    }
    return 0;
}

/* ---- merging: see mt_merge_python (src/record/merge_python.c) ---------------------------------- */

static uint32_t code_id_cb(void *ctx, uintptr_t code) { return code_id(ctx, code); }

/* The leaf a call site produced last time: when neither its native frames (the same walk_id: the
 * unwinder names a walk by its frames, so a walk done again the same keeps it) nor its Python frames (the same signature) nor the API frame changed, the stack
 * is the same, and merging, code ids and the trie are skipped. Those touch a cache line or two per
 * frame that the program has usually evicted since (~0.3 us an allocation in PyTorch).
 * Entries are found by one 64-bit digest of all three (a wrong leaf needs a 2^-64 coincidence,
 * the bar the Python signature already sets), in two places, looked up in this order:
 *   - the unwinder's slot of the walk (mt_unwind_slot): in the lines the walk's check has just
 *     read, so finding the leaf costs no miss of its own; four entries (one walk: several Python
 *     callers of one line, two API entry points);
 *   - this thread's table: 256 sets of 4 ways, because a training step's call sites collide in
 *     a direct-mapped table (docs/performance.md). Every leaf goes here too: one line of
 *     Python can be reached from more callers through one native walk than a slot holds, and
 *     visited in a cycle they evict each other. On ResNet-18 (a block's lines, called from every
 *     block) 11.7% of stacks come from here; on a GPT-2-like model none do (H100, 2026-11-23).
 *     A stack built again costs ~2.5 us, a lookup here one miss. It is also the only place for
 *     stacks without native frames.
 * A new entry goes in front, the oldest drops out. */
#define LEAF_MEMO_SETS 256
#define LEAF_MEMO_WAYS 4
typedef struct leaf_memo {
    uint64_t key; /* leaf_key(); 0 = empty */
    uint32_t leaf;
    uint16_t flags;
} leaf_memo;
#define SLOT_WAYS (MT_UNWIND_SLOT_BYTES / (int)sizeof(leaf_memo))
_Static_assert(SLOT_WAYS >= 4, "four leaves per remembered walk");

typedef struct stack_tls {
    mt_trie_cache trie;
    leaf_memo leaves[LEAF_MEMO_SETS][LEAF_MEMO_WAYS];
} stack_tls;

/* This thread's stack_tls: 26 KB, freed by a key destructor when the thread exits (a program
 * that makes 20 000 short-lived threads must not keep 350 MB of them). A capture during this
 * thread's exit after the destructor ran (another destructor freeing CUDA memory) gets no stack. */
static __thread stack_tls *tls_stack;
#define STACK_TLS_GONE ((stack_tls *)1)
static pthread_key_t stack_key;
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;
static int stack_key_ok;

static void free_stack_tls(void *p)
{
    free(p);
    tls_stack = STACK_TLS_GONE;
}

static void make_stack_key(void) { stack_key_ok = pthread_key_create(&stack_key, free_stack_tls) == 0; }

static stack_tls *this_thread_stack_tls(void)
{
    if (tls_stack) return tls_stack == STACK_TLS_GONE ? NULL : tls_stack;
    pthread_once(&stack_key_once, make_stack_key);
    if (!stack_key_ok) return NULL; /* nowhere to free it from: no stacks rather than a leak */
    uint64_t rare = mt_rare_begin(); /* a thread's first stack: its tables */
    stack_tls *t = calloc(1, sizeof *t);
    if (t && pthread_setspecific(stack_key, t) != 0) {
        free(t);
        t = NULL;
    }
    mt_rare_end(rare, MT_RARE_THREAD);
    return tls_stack = t;
}

static inline uint64_t leaf_key(uint64_t py_sig, uint64_t walk_id, uint64_t api_ip)
{
    return mt_mix64(mt_mix64(py_sig ^ (walk_id * MT_GOLDEN64)) ^ api_ip) | 1;
}

/* The walk's slot, where the leaves of the stack under its walk id are looked for first; NULL
 * without native frames, or for a walk id the unwinder no longer holds (a signal handler's
 * allocation walked on this thread meanwhile). */
static inline leaf_memo *slot_ways(int native, uint64_t walk_id)
{
    return native ? mt_unwind_slot(walk_id) : NULL;
}

/* The table's set for `key`. */
static inline leaf_memo *table_ways(stack_tls *t, uint64_t key)
{
    return t->leaves[(key >> 56) & (LEAF_MEMO_SETS - 1)];
}

static inline uint32_t find_leaf(const leaf_memo *set, int ways, uint64_t key, uint16_t *flags)
{
    for (int w = 0; w < ways; w++)
        if (set[w].key == key && set[w].leaf) {
            *flags |= set[w].flags;
            return set[w].leaf;
        }
    return 0;
}

/* Puts (key, leaf) first in set, unless it is there already (then moves it first). */
static inline void put_leaf(leaf_memo *set, int ways, uint64_t key, uint32_t leaf, uint16_t flags)
{
    int w = 0;
    while (w < ways - 1 && set[w].key != key) w++;
    memmove(&set[1], &set[0], (size_t)w * sizeof set[0]);
    set[0] = (leaf_memo){.key = key, .leaf = leaf, .flags = flags};
}

/* A thread without Python frames has no call-site key to remember its walks under, and nothing
 * to overlap the fetching of its memo with (the Python frames, on other threads). The stand-in's
 * own frame address serves as the key instead: it tells apart the depths the allocator is called
 * from (the autograd engine reaches it through each backward function's own chain), and it is
 * known before the allocator runs, so the walk's memo arrives meanwhile. On cifar.py ~60% of
 * the walks are on autograd's thread. Any key is correct (mt_unwind_keyed); a CUPTI callback
 * sets none and walks unkeyed. */
static __thread uint64_t tls_site_key;  /* from the stand-in, for the capture that follows */
static __thread int tls_had_no_python; /* this thread's last capture found no Python frames */

MT_HOT_PATH int mt_stacks_last_without_python(void) { return tls_had_no_python; }

MT_HOT_PATH void mt_stacks_before_call(mt_recorder *r, uintptr_t frame)
{
    if (!tls_had_no_python || !(r->cfg.stacks & MT_STACKS_NATIVE)) return;
    tls_site_key = mt_mix64(frame) | 1;
    mt_unwind_prefetch(tls_site_key);
}

/* One capture, as it goes. */
typedef struct capture {
    mt_recorder *r;
    stack_tls *tls;
    int want_py, want_native;
    int no_py;        /* Python frames wanted, none found (an autograd worker's allocation): the
                         cost notes count these apart */
    uint64_t api_ip;
    uint64_t inner;   /* the call site's key: the innermost Python frame, or the stand-in's */
    uint64_t py_sig;  /* the Python frames' signature */
    uint64_t walk_id; /* the unwinder's memo of the native walk (1: no native frames) */
    int nn, truncated;
    int from_table;   /* the leaf came from the leaf memo's table (for the cost note) */
    uint64_t *native; /* MT_MAX_FRAMES words, the caller's: outside the struct, which is zeroed
                         at every capture (1 KB of stores, ~40 cycles, for frames that ~99% of
                         captures never fetch) */
} capture;

/* A timed part of a capture, added to the total over all stacks and, for a stack without Python
 * frames, to that share too (the cost notes split them: docs/performance.md, "Which thread
 * pays"). */
static inline void add_part(_Atomic uint64_t *all, _Atomic uint64_t *no_python, int no_py,
                            uint64_t dt)
{
    atomic_fetch_add_explicit(all, dt * MT_TIME_SAMPLE, memory_order_relaxed);
    if (no_py) atomic_fetch_add_explicit(no_python, dt * MT_TIME_SAMPLE, memory_order_relaxed);
}

/* Step 1, where the call comes from: the Python frames' signature first (its innermost frame
 * names the call site, the key under which the unwinder remembers this walk); then the native
 * walk, lazily: when the unwinder remembers it whole, its frames are fetched only if the leaf memo
 * does not know the stack (~1.6% of allocations in cifar.py).
 *
 * No prefetch of the walk's memo between the two (mt_unwind_prefetch, as the stand-in's path
 * does for a thread without Python frames): with 16 ways a set it issues ~100 prefetches, which
 * delayed the Python walk's own loads by more than they saved the check. Without it, in three H200
 * leases (2026-11-26, eighth session, 15 runs each): a whole report 3-10% less on ResNet-18 in
 * every lease, 7-14% less on GPT-2-like batch 2 in two, 6% more in the busiest, where the check
 * lost more than the walk gained (docs/performance.md, "The memo's prefetch").
 *
 * Nor the other way round on a thread without Python frames (autograd's workers): the walk
 * first, and the Python lookup skipped when the walk reached the outermost frame without passing
 * through the interpreter's code. Exact, and the timed lookup there is ~100-125 ns, but a whole
 * report cost the same with and without it (H200, 2026-11-26, ninth session, 7 runs each:
 * docs/performance.md, "Which thread pays"): the lookup's misses were not what a report waits
 * for. */
static inline void find_site(capture *c, int timed, uint64_t t0)
{
    mt_recorder *r = c->r;
    if (c->want_py) {
        uintptr_t top = mt_pyframes_top(r->py, &c->inner);
        /* The key names the line and this capture's depth on the C stack: one line reached from
         * modules nested at several depths (ResNet-18's batch norms) has a walk per depth, and
         * under the line alone they all crowd one set of the unwinder's memo (unwind_memo.h). */
        uint64_t depth = (uint64_t)(uintptr_t)__builtin_frame_address(0);
        if (c->inner) c->inner = (c->inner ^ depth * MT_GOLDEN64) | 1;
        /* A stack with Python frames: the clock between finding the innermost one and walking
         * their chain splits the two in the cost note (one more clock read in a timed call). */
        if (timed && c->inner) add_part(&r->costs.python_top_ns, NULL, 0, mt_cost_clock() - t0);
        c->py_sig = mt_pyframes_signature(r->py, top);
    }
    tls_had_no_python = !c->inner;
    c->no_py = c->want_py && !c->inner;
    if (!c->inner) c->inner = tls_site_key;
    tls_site_key = 0;
    uint64_t t1 = timed ? mt_cost_clock() : 0;
    if (timed) /* one clock read ends the Python part and starts the native one */
        add_part(&r->costs.python_ns, &r->costs.nopy_python_ns, c->no_py, t1 - t0);
    c->walk_id = 1; /* no native frames: nothing that could change */
    /* One call instruction for the walk, timed or not: its return address is a frame of every
     * walk, so a second copy of the call (GCC made one for the timed path, threading the two
     * `if (timed)` through it) is a second walk per call site. The timed variant then missed
     * ~10x as often as the others, crowded their ways, and made the timed cost, the one the note
     * reports, look 2-3x what the average call pays. The empty asm hides `timed` from the
     * compiler across the call, so no path is worth duplicating. */
    __asm__ volatile("" : "+r"(timed));
    if (c->want_native)
        c->nn = mt_unwind_keyed_lazy(c->native, MT_MAX_FRAMES - 1, 1, &c->truncated, c->inner,
                                     &c->walk_id);
    __asm__ volatile("" : "+r"(timed));
    if (timed)
        add_part(&r->costs.unwind_ns, &r->costs.nopy_unwind_ns, c->no_py, mt_cost_clock() - t1);
}

/* Step 2: the leaf this site produced last time, if nothing changed since (0 if unknown). Found
 * in the table only, it goes into the slot for next time. */
static inline uint32_t remembered_leaf(capture *c, uint16_t *flags)
{
    if (!c->walk_id) return 0;
    uint64_t key = leaf_key(c->py_sig, c->walk_id, c->api_ip);
    leaf_memo *slot = slot_ways(c->want_native, c->walk_id);
    uint32_t leaf = slot ? find_leaf(slot, SLOT_WAYS, key, flags) : 0;
    if (leaf) return leaf;
    uint16_t found = 0;
    leaf = find_leaf(table_ways(c->tls, key), LEAF_MEMO_WAYS, key, &found);
    if (leaf && slot) put_leaf(slot, SLOT_WAYS, key, leaf, found);
    *flags |= found;
    c->from_table = leaf != 0;
    return leaf;
}

/* Step 3: the frame words, outermost last: the native frames (fetched now if the walk was lazy)
 * without ours and CUPTI's, with the Python frames in the place of the interpreter's; a
 * "[truncated]" or "[autograd backward]" pseudo frame where one applies. Returns the count. */
static int build_words(capture *c, uint64_t *words, uint16_t *added)
{
    mt_recorder *r = c->r;
    uint64_t *native = c->native;
    int nn = c->nn;
    if (nn == MT_UNWIND_LATER) {
        nn = mt_unwind_recall(c->walk_id, native, MT_MAX_FRAMES - 1, 1, &c->truncated);
        if (nn < 0) /* another walk ran on this thread meanwhile (a signal handler's): again */
            nn = mt_unwind_keyed(native, MT_MAX_FRAMES - 1, 1, &c->truncated, c->inner,
                                 &c->walk_id);
    }
    mt_pyframe py[MT_MAX_FRAMES];
    int np = c->want_py ? mt_pyframes_read(r->py, py, 96) : 0;
    int skip = 0;
    while (skip < nn && ((native[skip] >= r->self_lo && native[skip] < r->self_hi) ||
                         (native[skip] >= r->cupti_lo && native[skip] < r->cupti_hi)))
        skip++;
    /* Unwound from a stand-in (async_hooks.c): the API function's own frame is not on the stack;
     * put it where it would be, as a return address into it (frames are looked up at ip - 1). */
    if (c->api_ip && skip > 0) native[--skip] = c->api_ip + 1;
    const uint64_t *nat = native + skip;
    nn -= skip;
    int n;
    if (np > 0 && c->want_native) {
        n = mt_merge_python(&r->py_ranges, nat, nn, py, np, code_id_cb, r, words,
                            MT_MAX_FRAMES - 1);
        c->truncated = 0; /* the Python part reaches the outermost frame */
    } else if (np > 0) {
        n = mt_merge_python(NULL, NULL, 0, py, np, code_id_cb, r, words, MT_MAX_FRAMES - 1);
    } else {
        for (int i = 0; i < nn; i++) words[i] = MT_FRAME_WORD(MT_FRAME_NATIVE, nat[i]);
        n = nn;
    }
    *added = 0;
    if (c->truncated) {
        words[n++] = MT_FRAME_WORD(MT_FRAME_PSEUDO, MT_PSEUDO_TRUNCATED);
        *added = MT_EF_STACK_TRUNCATED;
    } else if (np == 0 && r->py && mt_thread_is_autograd()) {
        words[n++] = MT_FRAME_WORD(MT_FRAME_PSEUDO, MT_PSEUDO_AUTOGRAD);
    }
    return n;
}

/* Step 4: remember the leaf for the next call from this site (newest first, oldest out). */
static inline void remember_leaf(capture *c, uint32_t leaf, uint16_t flags)
{
    if (!c->walk_id || !leaf) return;
    uint64_t key = leaf_key(c->py_sig, c->walk_id, c->api_ip); /* walk_id names the frames */
    leaf_memo *slot = slot_ways(c->want_native, c->walk_id);
    if (slot) put_leaf(slot, SLOT_WAYS, key, leaf, flags);
    put_leaf(table_ways(c->tls, key), LEAF_MEMO_WAYS, key, leaf, flags);
}

MT_HOT_PATH uint32_t mt_capture_stack(mt_recorder *r, uint16_t *flags, uint64_t t0,
                                      uint64_t api_ip)
{
    if (r->cfg.stacks == MT_STACKS_NONE) return 0;
    int timed = mt_time_this_call();
    /* the caller's stamp, when it is just before this call, on the clock of the sampled timing
     * (before the thread's first tables are made: rare work, which that clock leaves out) */
    if (timed) t0 = t0 ? mt_cost_clock_at(t0) : mt_cost_clock();
    stack_tls *tls = this_thread_stack_tls();
    if (!tls) return 0;
    uint64_t native[MT_MAX_FRAMES];
    capture c = {.r = r, .tls = tls, .api_ip = api_ip, .native = native,
                 .want_py = r->py && (r->cfg.stacks & MT_STACKS_PYTHON),
                 .want_native = (r->cfg.stacks & MT_STACKS_NATIVE) != 0};
    find_site(&c, timed, t0);
    uint32_t leaf = remembered_leaf(&c, flags);
    int n = -1; /* frames built: not counted for a remembered leaf (the note averages) */
    int walked = c.nn != MT_UNWIND_LATER || !c.walk_id; /* before build_words fetches frames */
    if (!leaf) { /* rare work (rare_work.h): new frames named, Python line tables read */
        uint64_t rare = mt_rare_begin();
        uint64_t words[MT_MAX_FRAMES];
        uint16_t added;
        n = build_words(&c, words, &added);
        *flags |= added;
        leaf = mt_trie_intern(r->trie, &tls->trie, words, n);
        remember_leaf(&c, leaf, added);
        mt_rare_end(rare, MT_RARE_STACK);
    }
    /* Self-measurement, written as a note at exit: the cost budget is part of the product. */
    if (timed) {
        mt_cost_add(&r->costs.stack_ns, &r->costs.stack_calls, t0, &r->costs.stack_spread);
        if (c.no_py) mt_cost_add(&r->costs.nopy_ns, &r->costs.nopy_calls, t0, NULL);
        if (n >= 0) {
            atomic_fetch_add_explicit(&r->costs.stack_frames, (uint64_t)n * MT_TIME_SAMPLE,
                                      memory_order_relaxed);
            mt_cost_add(NULL, &r->costs.stack_built, 0, NULL);
            if (walked) mt_cost_add(NULL, &r->costs.stack_built_walked, 0, NULL);
        } else if (c.from_table) {
            mt_cost_add(NULL, &r->costs.stack_from_table, 0, NULL);
        }
    }
    return leaf;
}
