/* pyframes.c — the calling thread's Python stack, read straight from interpreter memory, no GIL.
 *
 * Why no GIL: we run inside a CUPTI callback on a thread that is inside a CUDA call made by
 * PyTorch, which released the GIL around op dispatch. Taking it there deadlocks against the caching
 * allocator's mutex. So: PyGILState_GetThisThreadState() (a TSS read, no GIL) gives this thread's
 * PyThreadState, and its frame chain is walked with the per-version offsets of pyframes_layout.h.
 * That is safe for the calling thread only: while it sits in our callback it is blocked in the
 * CUDA call, so its frames cannot change or be freed. Other threads' frames are never read.
 *
 * Nothing here links libpython: every symbol is found with dlsym(RTLD_DEFAULT) and the process may
 * have no Python at all. The only Python functions called are Py_IsInitialized (reads a flag),
 * PyGILState_GetThisThreadState (reads a TSS key) and, once, Py_GetVersion on 3.10.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memtrace/record.h"
#include "hash.h"
#include "pyframes_layout.h"
#include "pyframes_linetable.h"
#include "hot_path.h"

#define MT_PY_MAX_DEPTH 256          /* frames walked per read (also bounds any cycle) */
#define MT_PY_LINE_CACHE_SLOTS 4096  /* power of two; 8 bytes each */
#define MT_PY_MAX_TABLE (1l << 26)   /* a line table bigger than this is not believed */
#define MT_PY_MAX_STR (1l << 20)     /* nor a file name / qualname longer than this */

/* Line cache: (code, line table, firstlineno, lasti) -> line, one 64-bit word per slot so readers
 * and writers on any thread need no lock (a relaxed atomic load/store never tears):
 *
 *   63                                    24 23                   0
 *   +---------------------------------------+---------------------+
 *   | tag: bits 24..63 of the key's hash    | line + 1 (0 = none) |
 *   +---------------------------------------+---------------------+
 *
 * The slot index is the hash's low 12 bits, so a hit needs 52 hash bits to match. A wrong line
 * needs a hash collision, or a code object and its line table both freed and re-made at the same
 * addresses with the same first line — the same aliasing that mt_pyframe.code already accepts. */
struct mt_pyframes {
    const mt_py_layout *L;
    int (*is_initialized)(void);
    void *(*this_thread_state)(void);
    uintptr_t code_type, bytes_type, unicode_type; /* &PyCode_Type... for type checks */
    _Atomic uint64_t line_cache[MT_PY_LINE_CACHE_SLOTS];
};

/* ---- Reading memory ------------------------------------------------------------------------- */

/* A plausible user-space object address: not NULL page, 8-aligned, below the 57-bit VA limit. */
static inline int ptr_ok(uintptr_t p)
{
    return p >= 4096 && (p & 7) == 0 && p < (1ull << 57);
}

/* memcpy so the loads are aliasing-safe; each compiles to one mov. */
static inline uintptr_t rd_ptr(uintptr_t base, unsigned off)
{
    uintptr_t v;
    memcpy(&v, (const void *)(base + off), sizeof v);
    return v;
}
static inline int32_t rd_i32(uintptr_t base, unsigned off)
{
    int32_t v;
    memcpy(&v, (const void *)(base + off), sizeof v);
    return v;
}
static inline long rd_long(uintptr_t base, unsigned off)
{
    long v;
    memcpy(&v, (const void *)(base + off), sizeof v);
    return v;
}

static inline int is_type(uintptr_t obj, uintptr_t type)
{
    return ptr_ok(obj) && rd_ptr(obj, MT_PY_OB_TYPE) == type;
}

/* ---- Discovery ------------------------------------------------------------------------------ */

static const mt_py_layout *layout_for(int major, int minor)
{
    if (major != 3)
        return NULL;
    for (size_t i = 0; i < sizeof mt_py_layouts / sizeof mt_py_layouts[0]; i++)
        if (mt_py_layouts[i].minor == minor)
            return &mt_py_layouts[i];
    return NULL;
}

/* 3.11+ exports Py_Version (PY_VERSION_HEX); 3.10 only has Py_GetVersion(), "3.10.13 (main, ...". */
static int python_version(int *major, int *minor)
{
    const unsigned long *hex = dlsym(RTLD_DEFAULT, "Py_Version");
    if (hex) {
        *major = (int)((*hex >> 24) & 0xff);
        *minor = (int)((*hex >> 16) & 0xff);
        return 0;
    }
    const char *(*get_version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
    if (get_version && sscanf(get_version(), "%d.%d", major, minor) == 2)
        return 0;
    return -1;
}

/* 3.13+ publish their own offsets (_Py_DebugOffsets at the start of _PyRuntime): refuse a build
 * whose offsets are not ours (a free-threaded 3.13t or 3.14t, a patched interpreter). Before 3.13
 * there are none to compare (dbg all 0); then the tp_basicsize checks stand alone. */
static int check_debug_offsets(const mt_py_layout *L)
{
    if (!L->dbg[MT_PY_DBG_TS_CURRENT_FRAME])
        return 0;
    const uint64_t *d = dlsym(RTLD_DEFAULT, "_PyRuntime");
    if (!d)
        return 0; /* not exported: rely on the tp_basicsize checks */
    if (memcmp(d, MT_PY_DBG_COOKIE, 8) != 0 ||
        ((d[MT_PY_DBG_VERSION] >> 16) & 0xffff) != (0x300u | (unsigned)L->minor) ||
        d[MT_PY_DBG_FREE_THREADED] != 0)
        return -1;
    const uint64_t ours[MT_PY_DBG_COUNT] = {
        [MT_PY_DBG_TS_CURRENT_FRAME] = L->ts_frame,     [MT_PY_DBG_FR_PREVIOUS] = L->fr_back,
        [MT_PY_DBG_FR_EXECUTABLE] = L->fr_code,         [MT_PY_DBG_FR_INSTR_PTR] = L->fr_pos,
        [MT_PY_DBG_FR_OWNER] = (uint64_t)L->fr_owner,   [MT_PY_DBG_CO_FILENAME] = L->co_filename,
        [MT_PY_DBG_CO_QUALNAME] = L->co_qualname,       [MT_PY_DBG_CO_LINETABLE] = L->co_linetable,
        [MT_PY_DBG_CO_FIRSTLINENO] = L->co_firstlineno, [MT_PY_DBG_CO_CODE_ADAPTIVE] = L->co_code,
    };
    for (int i = 0; i < MT_PY_DBG_COUNT; i++)
        if (d[L->dbg[i]] != ours[i])
            return -1;
    return 0;
}

/* The message for an unknown version names it, so it needs a buffer; mt_pyframes_new runs once at
 * recorder start-up, and the text is only read for the one warning that follows. */
static char unknown_version_msg[96];

mt_pyframes *mt_pyframes_new(const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    *why = NULL;

    void *is_init = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    void *this_ts = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    uintptr_t code_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyCode_Type");
    uintptr_t bytes_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyBytes_Type");
    uintptr_t unicode_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    int major = 0, minor = 0;
    if (!is_init || !this_ts || !code_type || !bytes_type || !unicode_type ||
        python_version(&major, &minor) != 0) {
        *why = "no Python interpreter in this process";
        return NULL;
    }
    const mt_py_layout *L = layout_for(major, minor);
    if (!L) {
        snprintf(unknown_version_msg, sizeof unknown_version_msg,
                 "Python %d.%d layout unknown: native stacks only", major, minor);
        *why = unknown_version_msg;
        return NULL;
    }
    if (!((int (*)(void))is_init)()) {
        *why = "Python is not initialized: native stacks only";
        return NULL;
    }
    if (rd_long(code_type, MT_PY_TP_BASICSIZE) != L->code_basicsize ||
        rd_long(unicode_type, MT_PY_TP_BASICSIZE) != L->unicode_basicsize ||
        rd_long(bytes_type, MT_PY_TP_BASICSIZE) != MT_PY_BYTES_BASICSIZE ||
        check_debug_offsets(L) != 0) {
        *why = "Python object layout differs from the known one (debug or free-threaded build?): "
               "native stacks only";
        return NULL;
    }

    mt_pyframes *py = calloc(1, sizeof *py);
    if (!py) {
        *why = "out of memory";
        return NULL;
    }
    py->L = L;
    py->is_initialized = (int (*)(void))is_init;
    py->this_thread_state = (void *(*)(void))this_ts;
    py->code_type = code_type;
    py->bytes_type = bytes_type;
    py->unicode_type = unicode_type;
    return py;
}

void mt_pyframes_free(mt_pyframes *py)
{
    free(py);
}

/* ---- Lines ---------------------------------------------------------------------------------- */

/* Decodes the line table (uncached). */
static int decode_line(const mt_pyframes *py, uintptr_t table, int firstlineno, int lasti)
{
    if (!is_type(table, py->bytes_type))
        return -1;
    long n = rd_long(table, MT_PY_OB_SIZE);
    if (n < 0 || n > MT_PY_MAX_TABLE)
        return -1;
    const uint8_t *bytes = (const uint8_t *)(table + MT_PY_BYTES_SVAL);
    return py->L->chain == MT_PY_CHAIN_FRAMEOBJECT
               ? mt_py_line_pep626(bytes, (size_t)n, firstlineno, lasti)
               : mt_py_line_locations(bytes, (size_t)n, firstlineno, lasti);
}

static int line_of(mt_pyframes *py, uintptr_t code, int lasti)
{
    const mt_py_layout *L = py->L;
    uintptr_t table = rd_ptr(code, L->co_linetable);
    int firstlineno = rd_i32(code, L->co_firstlineno);
    uint64_t h = mt_mix64(code ^ mt_mix64(table ^ ((uint64_t)(uint32_t)firstlineno << 32)) ^
                       ((uint64_t)(uint32_t)lasti * MT_GOLDEN64));
    _Atomic uint64_t *slot = &py->line_cache[h & (MT_PY_LINE_CACHE_SLOTS - 1)];
    const uint64_t tag_mask = ~0xffffffull;
    uint64_t e = atomic_load_explicit(slot, memory_order_relaxed);
    if ((e & 0xffffff) != 0 && ((e ^ h) & tag_mask) == 0)
        return (int)(e & 0xffffff) - 1;

    int line = decode_line(py, table, firstlineno, lasti);
    if (line >= -1 && line < 0xfffffe)
        atomic_store_explicit(slot, (h & tag_mask) | (uint64_t)(line + 1), memory_order_relaxed);
    return line;
}

/* ---- Walking -------------------------------------------------------------------------------- */

/* The instruction index the frame is at, or 0 when the frame must be skipped: 3.12+ C-stack shim
 * frames, and frames still in their prologue ("incomplete": not yet at _co_firsttraceable, which
 * CPython itself hides from tracebacks). */
static int frame_lasti(const mt_pyframes *py, uintptr_t frame, uintptr_t code, int *lasti)
{
    const mt_py_layout *L = py->L;
    if (L->chain == MT_PY_CHAIN_FRAMEOBJECT) {
        *lasti = rd_i32(frame, L->fr_pos);
        return 1;
    }
    uint8_t owner = *(const uint8_t *)(frame + (unsigned)L->fr_owner);
    if (L->minor >= 12 && owner >= MT_PY_OWNED_BY_SHIM)
        return 0;
    intptr_t diff = (intptr_t)(rd_ptr(frame, L->fr_pos) - (code + L->co_code));
    long ncode = rd_long(code, MT_PY_OB_SIZE); /* code units */
    if ((diff & 1) || diff < -2 || diff / 2 >= ncode) {
        *lasti = -2; /* not pointing into this code: keep the frame, line unknown */
        return 1;
    }
    *lasti = (int)(diff / 2);
    if (owner != MT_PY_OWNED_BY_GENERATOR && *lasti < rd_i32(code, (unsigned)L->co_firsttraceable))
        return 0;
    return 1;
}

/* The frame's code object (or None, on 3.13+ shim frames): from 3.14 on, f_executable is a
 * _PyStackRef, whose low bits tag the reference. */
static inline uintptr_t frame_code(const mt_py_layout *L, uintptr_t frame)
{
    return rd_ptr(frame, L->fr_code) & ~(uintptr_t)L->code_tag_bits;
}

/* Where the frame is in its code: the instruction pointer (3.11+) or f_lasti (3.10), as a word. */
static inline uint64_t frame_pos(const mt_py_layout *L, uintptr_t frame)
{
    return L->chain == MT_PY_CHAIN_FRAMEOBJECT ? (uint32_t)rd_i32(frame, L->fr_pos)
                                               : rd_ptr(frame, L->fr_pos);
}

/* The calling thread's innermost frame, 0 when it has none (or Python is not running). */
MT_HOT_PATH static uintptr_t innermost_frame(mt_pyframes *py)
{
    if (!py->is_initialized())
        return 0;
    const mt_py_layout *L = py->L;
    uintptr_t ts = (uintptr_t)py->this_thread_state();
    if (!ptr_ok(ts))
        return 0; /* a thread Python never saw */
    uintptr_t frame = rd_ptr(ts, L->ts_frame);
    if (L->chain == MT_PY_CHAIN_CFRAME)
        frame = ptr_ok(frame) ? rd_ptr(frame, L->cframe_current) : 0;
    return frame;
}

int mt_pyframes_read(mt_pyframes *py, mt_pyframe *out, int max)
{
    if (!py || !out || max <= 0)
        return 0;
    const mt_py_layout *L = py->L;
    uintptr_t frame = innermost_frame(py);

    int n = 0;
    for (int steps = 0; ptr_ok(frame) && n < max && steps < MT_PY_MAX_DEPTH; steps++) {
        uintptr_t code = frame_code(L, frame);
        uintptr_t next = rd_ptr(frame, L->fr_back);
        int lasti;
        /* 3.13+ shim frames hold None, not a code object: the type check skips them. */
        int is_code = is_type(code, py->code_type);
        if (is_code && frame_lasti(py, frame, code, &lasti)) {
            out[n].code = code;
            out[n].line = lasti == -2 ? -1 : line_of(py, code, lasti);
            out[n].entry = L->chain == MT_PY_CHAIN_FRAMEOBJECT ||
                           (L->fr_is_entry >= 0 &&
                            *(const uint8_t *)(frame + (unsigned)L->fr_is_entry) != 0);
            n++;
        } else if (n > 0 && L->minor >= 12 &&
                   (!is_code ||
                    *(const uint8_t *)(frame + (unsigned)L->fr_owner) >= MT_PY_OWNED_BY_SHIM)) {
            out[n - 1].entry = 1; /* the shim below it: the frame above was called from C */
        }
        if (next == frame)
            break; /* a self-loop would otherwise be walked MT_PY_MAX_DEPTH times */
        frame = next;
    }
    if (n > 0) out[n - 1].entry = 1; /* the oldest frame was started from C (the interpreter) */
    return n;
}

MT_HOT_PATH uintptr_t mt_pyframes_top(mt_pyframes *py, uint64_t *key)
{
    *key = 0;
    if (!py)
        return 0;
    const mt_py_layout *L = py->L;
    uintptr_t frame = innermost_frame(py);
    if (!ptr_ok(frame))
        return 0;
    uintptr_t code = frame_code(L, frame);
    *key = mt_mix64(code ^ (frame_pos(L, frame) * MT_GOLDEN64)) | 1;
    return frame;
}

/* One step of a lane of the signature: a bijection of h for every word (odd multiplier, then a
 * rotation that carries the high bits back down), 5 cycles of latency. The frames' words go to
 * two lanes (code objects; positions and marks) that run side by side, so a frame costs the walk's
 * own load and not the 15-cycle chain of a full mt_mix64 per frame, which was most of a cached
 * walk. One word changed in one frame changes its lane's result (each step is a bijection); any
 * other difference collides with probability ~2^-64, as before. */
static inline uint64_t lane_step(uint64_t h, uint64_t w, uint64_t mul)
{
    h = (h ^ w) * mul;
    return (h << 29) | (h >> 35);
}

MT_HOT_PATH uint64_t mt_pyframes_signature(mt_pyframes *py, uintptr_t frame)
{
    if (!py)
        return 0;
    const mt_py_layout *L = py->L;
    /* Exactly the words mt_pyframes_read decides by, from the frames alone (no code object, line
     * table or type is touched: those are the cold lines this exists to skip). */
    uint64_t hc = 0x243f6a8885a308d3ull, hp = 0x13198a2e03707344ull;
    int steps = 0;
    for (; ptr_ok(frame) && steps < MT_PY_MAX_DEPTH; steps++) {
        uintptr_t code = frame_code(L, frame);
        uint64_t marks = 0;
        if (L->fr_owner >= 0) marks |= *(const uint8_t *)(frame + (unsigned)L->fr_owner);
        if (L->fr_is_entry >= 0)
            marks |= (uint64_t)*(const uint8_t *)(frame + (unsigned)L->fr_is_entry) << 8;
        /* the 16 bits of marks above a user-space pointer's 47 */
        hc = lane_step(hc, code ^ (marks << 48), MT_GOLDEN64);
        hp = lane_step(hp, frame_pos(L, frame), 0xbf58476d1ce4e5b9ull);
        uintptr_t next = rd_ptr(frame, L->fr_back);
        if (next == frame)
            break;
        frame = next;
    }
    if (steps == 0)
        return 0;
    uint64_t h = mt_mix64(hc ^ mt_mix64(hp ^ (uint64_t)steps));
    return h ? h : 1;
}

/* ---- Describing ----------------------------------------------------------------------------- */

/* Appends code point c as UTF-8 if it fits in buf[0..cap-1) (one byte is kept for the NUL). */
static int put_utf8(char *buf, int pos, int cap, uint32_t c)
{
    char tmp[4];
    int k;
    if (c < 0x80) {
        tmp[0] = (char)(c ? c : '?');
        k = 1;
    } else if (c < 0x800) {
        tmp[0] = (char)(0xc0 | (c >> 6));
        tmp[1] = (char)(0x80 | (c & 0x3f));
        k = 2;
    } else if (c < 0x10000) {
        tmp[0] = (char)(0xe0 | (c >> 12));
        tmp[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        tmp[2] = (char)(0x80 | (c & 0x3f));
        k = 3;
    } else if (c < 0x110000) {
        tmp[0] = (char)(0xf0 | (c >> 18));
        tmp[1] = (char)(0x80 | ((c >> 12) & 0x3f));
        tmp[2] = (char)(0x80 | ((c >> 6) & 0x3f));
        tmp[3] = (char)(0x80 | (c & 0x3f));
        k = 4;
    } else {
        tmp[0] = '?';
        k = 1;
    }
    if (pos + k > cap - 1)
        return -1;
    memcpy(buf + pos, tmp, (size_t)k);
    return pos + k;
}

/* Copies a str object as NUL-terminated UTF-8 (truncated on a character boundary). Only compact
 * strings are read (the data follows the header: every identifier and file name the compiler
 * makes); anything else gives "?" and -1.
 *
 *   compact ASCII:     [PyASCIIObject: refcnt type length hash state (wstr)] [ASCII bytes] NUL
 *   compact non-ASCII: [PyCompactUnicodeObject: PyASCIIObject utf8_length utf8 (wstr_length)]
 *                      [length code points of `kind` bytes each: latin-1, UCS-2 or UCS-4] */
static int copy_str(const mt_pyframes *py, uintptr_t s, char *buf, int cap)
{
    if (!buf || cap <= 0)
        return 0;
    buf[0] = 0;
    if (!is_type(s, py->unicode_type))
        goto unreadable;
    uint32_t state = (uint32_t)rd_i32(s, MT_PY_STR_STATE);
    long len = rd_long(s, MT_PY_STR_LENGTH);
    if (!MT_PY_STR_COMPACT(state) || len < 0 || len > MT_PY_MAX_STR)
        goto unreadable;
    int pos = 0;
    if (MT_PY_STR_ASCII(state)) {
        const uint8_t *d = (const uint8_t *)(s + py->L->ascii_size);
        for (long i = 0; i < len; i++) {
            int next = put_utf8(buf, pos, cap, d[i] & 0x7f);
            if (next < 0)
                break;
            pos = next;
        }
    } else {
        int kind = (int)MT_PY_STR_KIND(state);
        const uint8_t *d = (const uint8_t *)(s + py->L->compact_size);
        if (kind != 1 && kind != 2 && kind != 4)
            goto unreadable;
        for (long i = 0; i < len; i++) {
            uint32_t c;
            if (kind == 1) {
                c = d[i];
            } else if (kind == 2) {
                uint16_t u;
                memcpy(&u, d + 2 * i, 2);
                c = u;
            } else {
                memcpy(&c, d + 4 * i, 4);
            }
            int next = put_utf8(buf, pos, cap, c);
            if (next < 0)
                break; /* truncated after the last whole character */
            pos = next;
        }
    }
    buf[pos] = 0;
    return 0;
unreadable:
    snprintf(buf, (size_t)cap, "?");
    return -1;
}

int mt_pyframes_describe(mt_pyframes *py, uintptr_t code, char *filename, int flen, char *qualname,
                         int qlen, uint32_t *firstlineno)
{
    if (!py || !is_type(code, py->code_type))
        return -1;
    const mt_py_layout *L = py->L;
    int rc = copy_str(py, rd_ptr(code, L->co_filename), filename, flen);
    rc |= copy_str(py, rd_ptr(code, L->co_qualname), qualname, qlen);
    if (firstlineno) {
        int32_t first = rd_i32(code, L->co_firstlineno);
        *firstlineno = first > 0 ? (uint32_t)first : 0;
    }
    return rc;
}
