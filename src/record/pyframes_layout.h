/* pyframes_layout.h — where CPython keeps a thread's frames, per minor version (x86-64 / aarch64
 * LP64, default GIL build, no Py_TRACE_REFS). The ONE place that knows CPython struct layouts.
 *
 * Why hard-coded offsets: the reader runs inside a CUDA callback while the thread has released the
 * GIL, so no C-API call that touches interpreter state is allowed, and memtrace does not link (or
 * build against) any libpython. The numbers were produced by compiling offsetof() against the real
 * headers (Include/cpython/ and Include/internal/pycore_ headers with Py_BUILD_CORE) of 3.10.13,
 * 3.11.7 (and Debian's 3.11.2), 3.12.1, 3.13.0, and Debian's 3.14.10 and 3.15.2. Struct layouts
 * only change between minor versions, never within one (CPython's ABI promise for these structs in
 * practice).
 *
 * Self-checks, done once in mt_pyframes_new, so a build that differs (Py_TRACE_REFS adds 16 bytes to
 * every object header; a free-threaded 3.13t changes the header too) is refused instead of misread:
 *   - PyCode_Type.tp_basicsize    == code_basicsize  (sizeof / offsetof(co_code_adaptive))
 *   - PyUnicode_Type.tp_basicsize == unicode_basicsize
 *   - PyBytes_Type.tp_basicsize   == 33 (offsetof(PyBytesObject, ob_sval) + 1)
 *   - 3.13+: _PyRuntime.debug_offsets (_Py_DebugOffsets, the offsets CPython publishes for
 *     debuggers and profilers) names this minor version, a build with the GIL, and every offset of
 *     the table below that it publishes.
 */
#ifndef MEMTRACE_PYFRAMES_LAYOUT_H
#define MEMTRACE_PYFRAMES_LAYOUT_H

#include <stdint.h>

/* How the frame chain is shaped, which changed twice. */
typedef enum mt_py_chain {
    /* 3.10: PyThreadState.frame -> PyFrameObject, linked by f_back; position = f_lasti (int, in
     * code units, -1 before the first instruction). */
    MT_PY_CHAIN_FRAMEOBJECT,
    /* 3.11, 3.12: PyThreadState.cframe -> _PyCFrame.current_frame -> _PyInterpreterFrame, linked
     * by previous; position = prev_instr (a _Py_CODEUNIT* into the code object's co_code_adaptive). */
    MT_PY_CHAIN_CFRAME,
    /* 3.13+: PyThreadState.current_frame -> _PyInterpreterFrame, linked by previous; position =
     * instr_ptr; the code is f_executable, which may be None (not a code object) on shim frames,
     * and from 3.14 on is a _PyStackRef: the object's address with tag bits (code_tag_bits). */
    MT_PY_CHAIN_DIRECT,
} mt_py_chain;

/* _PyInterpreterFrame.owner values (Include/internal/pycore_frame.h, 3.14+:
 * pycore_interpframe_structs.h, enum _frameowner). From 3.12 on, the owners from 3 up mark frames
 * that run no code of their own: 3.12 and 3.13 FRAME_OWNED_BY_CSTACK (3), the entry "shim" frame of
 * a C->Python call; 3.14 FRAME_OWNED_BY_INTERPRETER (3, the same entry frame) and
 * FRAME_OWNED_BY_CSTACK (4); 3.15 FRAME_OWNED_BY_INTERPRETER (3). CPython's own test is the same
 * (_PyFrame_IsIncomplete: owner >= FRAME_OWNED_BY_CSTACK, then >= FRAME_OWNED_BY_INTERPRETER). */
#define MT_PY_OWNED_BY_GENERATOR 1
#define MT_PY_OWNED_BY_SHIM 3 /* and above */

/* The words of _Py_DebugOffsets (3.13+) that the self-check compares with a layout; a layout keeps
 * their indexes (every field of that struct is a uint64_t, so it is read as an array of words). */
enum {
    MT_PY_DBG_TS_CURRENT_FRAME, /* thread_state.current_frame */
    MT_PY_DBG_FR_PREVIOUS,      /* interpreter_frame.previous */
    MT_PY_DBG_FR_EXECUTABLE,    /* interpreter_frame.executable */
    MT_PY_DBG_FR_INSTR_PTR,     /* interpreter_frame.instr_ptr */
    MT_PY_DBG_FR_OWNER,         /* interpreter_frame.owner */
    MT_PY_DBG_CO_FILENAME,      /* code_object.filename */
    MT_PY_DBG_CO_QUALNAME,      /* code_object.qualname */
    MT_PY_DBG_CO_LINETABLE,     /* code_object.linetable */
    MT_PY_DBG_CO_FIRSTLINENO,   /* code_object.firstlineno */
    MT_PY_DBG_CO_CODE_ADAPTIVE, /* code_object.co_code_adaptive */
    MT_PY_DBG_COUNT
};
#define MT_PY_DBG_COOKIE "xdebugpy" /* word 0 */
#define MT_PY_DBG_VERSION 1         /* PY_VERSION_HEX */
#define MT_PY_DBG_FREE_THREADED 2

typedef struct mt_py_layout {
    int minor;       /* 3.<minor> */
    mt_py_chain chain;
    /* PyThreadState */
    uint16_t ts_frame;        /* 3.10 frame / 3.11-12 cframe / 3.13 current_frame */
    uint16_t cframe_current;  /* _PyCFrame.current_frame (3.11-12 only) */
    /* frame (PyFrameObject in 3.10, _PyInterpreterFrame after) */
    uint16_t fr_code;         /* f_code / f_executable */
    uint16_t fr_back;         /* f_back / previous */
    uint16_t fr_pos;          /* f_lasti (int) / prev_instr / instr_ptr (pointers) */
    int16_t fr_owner;         /* owner (char); -1 when there is none (3.10) */
    int16_t fr_is_entry;      /* is_entry (bool, 3.11 only); -1 elsewhere: 3.10 has one C call per
                                 frame, 3.12+ mark entries with a C-stack-owned shim frame */
    /* PyCodeObject */
    uint16_t co_firstlineno;  /* int */
    uint16_t co_filename;     /* PyUnicodeObject* */
    uint16_t co_qualname;     /* PyUnicodeObject*: co_qualname, or co_name on 3.10 */
    uint16_t co_linetable;    /* PyBytesObject*: PEP 626 table (3.10) / location table (3.11+) */
    uint16_t co_code;         /* 3.10: co_code (PyBytesObject*); 3.11+: co_code_adaptive (inline) */
    int16_t co_firsttraceable;/* int _co_firsttraceable (3.11+), -1 on 3.10 */
    uint16_t code_basicsize;  /* PyCode_Type.tp_basicsize, for the self-check */
    /* PyUnicodeObject */
    uint16_t unicode_basicsize;  /* PyUnicode_Type.tp_basicsize (sizeof(PyUnicodeObject)) */
    uint16_t ascii_size;         /* sizeof(PyASCIIObject): compact ASCII data follows */
    uint16_t compact_size;       /* sizeof(PyCompactUnicodeObject): compact non-ASCII data follows */
    /* The low bits of f_executable that tag the reference, not the address (3.14: Py_TAG_BITS 1,
     * 3.15: 3); 0 before 3.14, where it is a plain pointer. */
    uint8_t code_tag_bits;
    /* Where _Py_DebugOffsets keeps each offset it is compared with (MT_PY_DBG_*); all 0 before
     * 3.13, which publishes none. */
    uint8_t dbg[MT_PY_DBG_COUNT];
} mt_py_layout;

/* Offsets common to every supported version (Include/object.h, cpython/bytesobject.h,
 * cpython/unicodeobject.h). */
#define MT_PY_OB_TYPE 8       /* PyObject.ob_type */
#define MT_PY_OB_SIZE 16      /* PyVarObject.ob_size (bytes: length; 3.11+ code: code units) */
#define MT_PY_BYTES_SVAL 32   /* PyBytesObject.ob_sval (after ob_shash) */
#define MT_PY_BYTES_BASICSIZE 33
#define MT_PY_STR_LENGTH 16   /* PyASCIIObject.length (code points) */
#define MT_PY_STR_STATE 32    /* PyASCIIObject.state bit field (unsigned int): */
#define MT_PY_STR_KIND(s) (((s) >> 2) & 7)   /*   bits 2-4 kind: 1 latin-1, 2 UCS-2, 4 UCS-4 */
#define MT_PY_STR_COMPACT(s) (((s) >> 5) & 1)/*   bit 5 compact: data inline after the struct */
#define MT_PY_STR_ASCII(s) (((s) >> 6) & 1)  /*   bit 6 ascii: compact ASCII, data after PyASCIIObject */
#define MT_PY_TP_BASICSIZE 32 /* PyTypeObject.tp_basicsize (after ob_size, tp_name) */

static const mt_py_layout mt_py_layouts[] = {
    {
        .minor = 10, .chain = MT_PY_CHAIN_FRAMEOBJECT,
        .ts_frame = 24,            /* PyThreadState.frame */
        .cframe_current = 0,
        .fr_code = 32,             /* PyFrameObject.f_code */
        .fr_back = 24,             /* PyFrameObject.f_back */
        .fr_pos = 96,              /* PyFrameObject.f_lasti (int) */
        .fr_owner = -1,
        .fr_is_entry = -1,
        .co_firstlineno = 40,      /* PyCodeObject.co_firstlineno */
        .co_filename = 104,        /* PyCodeObject.co_filename */
        .co_qualname = 112,        /* PyCodeObject.co_name (3.10 has no co_qualname) */
        .co_linetable = 120,       /* PyCodeObject.co_linetable */
        .co_code = 48,             /* PyCodeObject.co_code (bytes) */
        .co_firsttraceable = -1,
        .code_basicsize = 176,     /* sizeof(PyCodeObject) */
        .unicode_basicsize = 80, .ascii_size = 48, .compact_size = 72,
    },
    {
        .minor = 11, .chain = MT_PY_CHAIN_CFRAME,
        .ts_frame = 56,            /* PyThreadState.cframe */
        .cframe_current = 8,       /* _PyCFrame.current_frame (after use_tracing) */
        .fr_code = 32,             /* _PyInterpreterFrame.f_code */
        .fr_back = 48,             /* _PyInterpreterFrame.previous */
        .fr_pos = 56,              /* _PyInterpreterFrame.prev_instr */
        .fr_owner = 69,            /* _PyInterpreterFrame.owner (after is_entry) */
        .fr_is_entry = 68,         /* _PyInterpreterFrame.is_entry */
        .co_firstlineno = 72,
        .co_filename = 112,
        .co_qualname = 128,        /* PyCodeObject.co_qualname */
        .co_linetable = 136,
        .co_code = 184,            /* PyCodeObject.co_code_adaptive */
        .co_firsttraceable = 168,  /* PyCodeObject._co_firsttraceable */
        .code_basicsize = 184,     /* offsetof(PyCodeObject, co_code_adaptive) */
        .unicode_basicsize = 80, .ascii_size = 48, .compact_size = 72,
    },
    {
        .minor = 12, .chain = MT_PY_CHAIN_CFRAME,
        .ts_frame = 56,            /* PyThreadState.cframe */
        .cframe_current = 0,       /* _PyCFrame.current_frame (use_tracing is gone) */
        .fr_code = 0,              /* _PyInterpreterFrame.f_code */
        .fr_back = 8,              /* _PyInterpreterFrame.previous */
        .fr_pos = 56,              /* _PyInterpreterFrame.prev_instr */
        .fr_owner = 70,            /* _PyInterpreterFrame.owner (after stacktop, return_offset) */
        .fr_is_entry = -1,
        .co_firstlineno = 68,
        .co_filename = 112,
        .co_qualname = 128,
        .co_linetable = 136,
        .co_code = 192,            /* PyCodeObject.co_code_adaptive */
        .co_firsttraceable = 176,  /* PyCodeObject._co_firsttraceable */
        .code_basicsize = 192,
        .unicode_basicsize = 64, .ascii_size = 40, .compact_size = 56, /* wstr fields removed */
    },
    {
        .minor = 13, .chain = MT_PY_CHAIN_DIRECT,
        .ts_frame = 72,            /* PyThreadState.current_frame */
        .cframe_current = 0,
        .fr_code = 0,              /* _PyInterpreterFrame.f_executable */
        .fr_back = 8,              /* _PyInterpreterFrame.previous */
        .fr_pos = 56,              /* _PyInterpreterFrame.instr_ptr */
        .fr_owner = 70,            /* _PyInterpreterFrame.owner */
        .fr_is_entry = -1,
        .co_firstlineno = 68,
        .co_filename = 112,
        .co_qualname = 128,
        .co_linetable = 136,
        .co_code = 200,            /* PyCodeObject.co_code_adaptive */
        .co_firsttraceable = 184,  /* PyCodeObject._co_firsttraceable */
        .code_basicsize = 200,
        .unicode_basicsize = 64, .ascii_size = 40, .compact_size = 56,
        .dbg = {23, 29, 30, 31, 33, 35, 37, 38, 39, 43},
    },
    {
        .minor = 14, .chain = MT_PY_CHAIN_DIRECT,
        .ts_frame = 72,            /* PyThreadState.current_frame */
        .cframe_current = 0,
        .fr_code = 0,              /* _PyInterpreterFrame.f_executable (a _PyStackRef) */
        .fr_back = 8,              /* _PyInterpreterFrame.previous */
        .fr_pos = 56,              /* _PyInterpreterFrame.instr_ptr */
        .fr_owner = 74,            /* _PyInterpreterFrame.owner (after return_offset) */
        .fr_is_entry = -1,
        .co_firstlineno = 68,
        .co_filename = 112,
        .co_qualname = 128,
        .co_linetable = 136,
        .co_code = 208,            /* PyCodeObject.co_code_adaptive */
        .co_firsttraceable = 192,  /* PyCodeObject._co_firsttraceable */
        .code_basicsize = 208,
        .unicode_basicsize = 64, .ascii_size = 40, .compact_size = 56,
        .code_tag_bits = 1,
        .dbg = {26, 32, 33, 34, 36, 40, 42, 43, 44, 48},
    },
    {
        .minor = 15, .chain = MT_PY_CHAIN_DIRECT, /* the frame and code layouts of 3.14 */
        .ts_frame = 72,
        .cframe_current = 0,
        .fr_code = 0,
        .fr_back = 8,
        .fr_pos = 56,
        .fr_owner = 74,
        .fr_is_entry = -1,
        .co_firstlineno = 68,
        .co_filename = 112,
        .co_qualname = 128,
        .co_linetable = 136,
        .co_code = 208,
        .co_firsttraceable = 192,
        .code_basicsize = 208,
        .unicode_basicsize = 64, .ascii_size = 40, .compact_size = 56,
        .code_tag_bits = 3,
        .dbg = {26, 40, 41, 42, 44, 48, 50, 51, 52, 56},
    },
};

#endif
