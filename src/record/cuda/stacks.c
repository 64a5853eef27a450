/* The caller's stack at an allocating call, as a leaf id of the stack trie.
 *
 * Native frames come innermost first from the unwinder. When the process runs Python, the calling
 * thread's Python frames (read without the GIL, see pyframes.c) take the place of the interpreter's
 * own frames, so a stack reads
 *     cifar.py:<module> -> cifar.py:main -> ... -> linear.py:forward -> at::linear -> ... -> cuMemAlloc
 * Each C-level run of the interpreter loop (_PyEval_EvalFrameDefault) executes a run of Python
 * frames that ends at an "entry" frame; the k-th eval-loop frame of the native stack is replaced by
 * the k-th run. Native frames of the interpreter itself (call glue such as _PyObject_MakeTpCall,
 * and Py_RunMain, main, _start outside the outermost run) are dropped: they name nothing a user
 * wrote. When the counts disagree (a truncated unwind, an unusual embedding), all Python frames go
 * where the innermost eval-loop frame was — the innermost part, which matters most, stays right.
 *
 * Modes (MEMTRACE_STACKS): none, native, python (no unwinding at all: cheapest), both (default).
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

#include "recorder.h"

/* ---- Python code objects -> small ids ------------------------------------------------------ */

/* Open addressing, insert under py_lock, lookups without it (entries are published with release
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
    size_t h = (size_t)((code >> 4) * 0x9E3779B97F4A7C15ull) & (CODE_SLOTS - 1);
    for (size_t i = 0; i < CODE_SLOTS; i++) {
        size_t s = (h + i) & (CODE_SLOTS - 1);
        uintptr_t c = atomic_load_explicit(&code_ids[s].code, memory_order_acquire);
        if (c == code) return atomic_load_explicit(&code_ids[s].id, memory_order_relaxed);
        if (c == 0) break;
    }
    /* Miss: describe it now, while the calling thread is inside it (so it is alive). */
    char file[512], qual[256];
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
        r->eval_lo = (uintptr_t)eval;
        r->eval_hi = (uintptr_t)eval + sym->st_size;
    }
    struct dl_find_object obj;
    if (eval && _dl_find_object(eval, &obj) == 0) {
        r->interp_lo = (uintptr_t)obj.dlfo_map_start;
        r->interp_hi = (uintptr_t)obj.dlfo_map_end;
    }
    if (!r->eval_lo)
        mt_warn_once("python-eval", "cannot locate _PyEval_EvalFrameDefault: Python frames are "
                     "placed above the native ones");
    return 0;
}

/* ---- merging -------------------------------------------------------------------------------- */

static int in(uint64_t ip, uintptr_t lo, uintptr_t hi) { return ip >= lo && ip < hi; }

/* Python frames [from, to) as frame words, appended at out[n]. */
static int put_python(mt_recorder *r, const mt_pyframe *py, int from, int to, uint64_t *out, int n,
                      int cap)
{
    for (int i = from; i < to && n < cap; i++) {
        uint32_t id = code_id(r, py[i].code);
        if (!id) continue;
        uint64_t line = py[i].line > 0 ? (uint64_t)py[i].line : 0;
        out[n++] = MT_FRAME_WORD(MT_FRAME_PYTHON, ((uint64_t)id << 32) | line);
    }
    return n;
}

/* native: innermost first (raw ips); py: innermost first. Returns frame words in out. */
static int merge(mt_recorder *r, const uint64_t *native, int nn, const mt_pyframe *py, int np,
                 uint64_t *out, int cap)
{
    int evals[MT_MAX_FRAMES], ne = 0;
    for (int i = 0; i < nn; i++)
        if (in(native[i], r->eval_lo, r->eval_hi)) evals[ne++] = i;
    int runs = 0;
    for (int i = 0; i < np; i++) runs += py[i].entry;

    int n = 0;
    if (ne == 0) { /* no eval frame seen (unwinder stopped early): Python above everything */
        for (int i = 0; i < nn && n < cap; i++) out[n++] = MT_FRAME_WORD(MT_FRAME_NATIVE, native[i]);
        return put_python(r, py, 0, np, out, n, cap);
    }
    int exact = ne == runs;
    int p = 0; /* next Python frame to place */
    for (int i = 0, e = 0; i <= evals[ne - 1] && n < cap; i++) {
        if (e < ne && i == evals[e]) {
            if (exact) { /* this eval frame ran Python frames p .. the next entry */
                int q = p;
                while (q < np && !py[q].entry) q++;
                n = put_python(r, py, p, q < np ? q + 1 : np, out, n, cap);
                p = q + 1;
            } else if (e == 0) {
                n = put_python(r, py, 0, np, out, n, cap);
            }
            e++;
        } else if (!in(native[i], r->interp_lo, r->interp_hi)) {
            out[n++] = MT_FRAME_WORD(MT_FRAME_NATIVE, native[i]);
        }
    }
    return n;
}

uint32_t mt_capture_stack(mt_recorder *r, uint16_t *flags)
{
    static __thread mt_trie_cache *cache;
    if (r->cfg.stacks == MT_STACKS_NONE) return 0;
    if (!cache && !(cache = calloc(1, sizeof *cache))) return 0;

    uint64_t t0 = mt_now_ns();
    uint64_t native[MT_MAX_FRAMES], words[MT_MAX_FRAMES];
    int nn = 0, truncated = 0, n;
    if (r->cfg.stacks & MT_STACKS_NATIVE) nn = mt_unwind(native, MT_MAX_FRAMES - 1, 1, &truncated);

    mt_pyframe py[MT_MAX_FRAMES];
    int np = (r->py && (r->cfg.stacks & MT_STACKS_PYTHON)) ? mt_pyframes_read(r->py, py, 96) : 0;
    if (np > 0 && (r->cfg.stacks & MT_STACKS_NATIVE)) {
        n = merge(r, native, nn, py, np, words, MT_MAX_FRAMES - 1);
        truncated = 0; /* the Python part reaches the outermost frame */
    } else if (np > 0) {
        n = put_python(r, py, 0, np, words, 0, MT_MAX_FRAMES - 1);
    } else {
        for (int i = 0; i < nn; i++) words[i] = MT_FRAME_WORD(MT_FRAME_NATIVE, native[i]);
        n = nn;
    }
    if (truncated) {
        words[n++] = MT_FRAME_WORD(MT_FRAME_PSEUDO, MT_PSEUDO_TRUNCATED);
        *flags |= MT_EF_STACK_TRUNCATED;
    } else if (np == 0 && r->py && mt_thread_is_autograd()) {
        words[n++] = MT_FRAME_WORD(MT_FRAME_PSEUDO, MT_PSEUDO_AUTOGRAD);
    }
    uint32_t leaf = mt_trie_intern(r->trie, cache, words, n);
    /* Self-measurement, written as a note at exit: the cost budget is part of the product. */
    atomic_fetch_add_explicit(&r->stack_ns, mt_now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->stack_frames, (uint64_t)n, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->stack_calls, 1, memory_order_relaxed);
    return leaf;
}
