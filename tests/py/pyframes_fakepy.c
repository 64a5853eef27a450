/* pyframes_fakepy.c — mt_pyframes_new/read/describe in a process with no real Python.
 *
 * Built twice (tests/pyframes.cmake):
 *   pyframes_nopython: plain; mt_pyframes_new must say there is no interpreter.
 *   pyframes_fakepy (-DFAKE_PYTHON, symbols exported): this file defines the few symbols the
 *     reader looks up, with a hand-built 3.12 thread state, frames and code object, so version
 *     refusal, the layout self-check, the walk, the cycle guard and describe are tested without
 *     any libpython; then a 3.14 one, for the offsets CPython publishes (_PyRuntime's
 *     _Py_DebugOffsets, which must agree) and the tagged f_executable. Offsets below are
 *     CPython's (see src/record/pyframes_layout.h).
 * Exit status 0 = all good; each failed expectation prints one line.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "memtrace/record.h"

static int failures;
#define EXPECT(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            printf("FAIL line %d: %s\n", __LINE__, #cond);                            \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

#ifndef FAKE_PYTHON
int main(void)
{
    const char *why = NULL;
    mt_pyframes *py = mt_pyframes_new(&why);
    EXPECT(py == NULL);
    EXPECT(why && strcmp(why, "no Python interpreter in this process") == 0);
    EXPECT(mt_pyframes_new(NULL) == NULL);
    printf("%s\n", failures ? "FAILED" : "no Python: refused as expected");
    return failures != 0;
}
#else
/* ---- The fake interpreter: just the symbols mt_pyframes_new looks up ----------------------- */
unsigned long Py_Version;
uint64_t PyCode_Type[32], PyBytes_Type[32], PyUnicode_Type[32]; /* tp_basicsize at word 4 */
uint64_t _PyRuntime[64]; /* 3.13+: starts with _Py_DebugOffsets, a run of 64-bit words */
static int fake_initialized;
static uint64_t *fake_tstate;
int Py_IsInitialized(void) { return fake_initialized; }
void *PyGILState_GetThisThreadState(void) { return fake_tstate; }

static _Alignas(8) unsigned char code[256], table[48], fname[64], qname[64];
static uint64_t tstate[16], cframe[4], frame_a[10], frame_b[10];

static void put64(unsigned char *o, int off, uint64_t v) { memcpy(o + off, &v, 8); }
static void put32(unsigned char *o, int off, uint32_t v) { memcpy(o + off, &v, 4); }

static void make_str(unsigned char *s, const char *text)
{
    put64(s, 8, (uintptr_t)PyUnicode_Type);
    put64(s, 16, strlen(text));
    put32(s, 32, 0x64); /* kind 1, compact, ascii */
    strcpy((char *)s + 40, text);
}

static void build_stack(void)
{
    /* code object: 8 code units, first line 100, file/qualname, line table below */
    put64(code, 8, (uintptr_t)PyCode_Type);
    put64(code, 16, 8);                       /* ob_size: code units */
    put32(code, 68, 100);                     /* co_firstlineno */
    put64(code, 112, (uintptr_t)fname);       /* co_filename */
    put64(code, 128, (uintptr_t)qname);       /* co_qualname */
    put64(code, 136, (uintptr_t)table);       /* co_linetable */
    put32(code, 176, 1);                      /* _co_firsttraceable */
    make_str(fname, "fake.py");
    make_str(qname, "Fake.method");
    /* location table: [0,4) "no columns" +5 -> 105; [4,8) one-line form +2 -> 107 */
    put64(table, 8, (uintptr_t)PyBytes_Type);
    put64(table, 16, 5);
    const unsigned char entries[] = {0x80 | 13 << 3 | 3, 10, 0x80 | 12 << 3 | 3, 0, 0};
    memcpy(table + 32, entries, sizeof entries);
    /* frames: tstate->cframe(56)->current_frame(0) = A; A.previous = B */
    tstate[56 / 8] = (uintptr_t)cframe;
    cframe[0] = (uintptr_t)frame_a;
    frame_a[0] = (uintptr_t)code;             /* f_code */
    frame_a[1] = (uintptr_t)frame_b;          /* previous */
    frame_a[7] = (uintptr_t)(code + 192 + 2 * 5); /* prev_instr: unit 5 -> line 107 */
    frame_b[0] = (uintptr_t)code;
    frame_b[1] = 0;
    frame_b[7] = (uintptr_t)(code + 192 + 2 * 2); /* unit 2 -> line 105 */
    fake_tstate = tstate;
}

/* 3.14: tstate->current_frame (72) = A; A.previous = B. f_executable is a _PyStackRef: the code
 * object's address with its low bit set (a deferred reference), which the reader must take off.
 * _PyRuntime's debug offsets name each offset the reader uses; one that differs, a
 * free-threaded build or another version there, and the interpreter is refused. */
static _Alignas(8) unsigned char code14[256];
static uint64_t tstate14[16], frame14_a[12], frame14_b[12];
static const struct {
    int word;
    uint64_t value;
} debug_offsets_314[] = {
    {26, 72}, {32, 8}, {33, 0}, {34, 56}, {36, 74}, {40, 112}, {42, 128}, {43, 136}, {44, 68},
    {48, 208},
};

static void fake_314(void)
{
    const char *why = NULL;
    memcpy(_PyRuntime, "xdebugpy", 8);
    _PyRuntime[1] = 0x030e0af0; /* 3.14.10 */
    for (size_t i = 0; i < sizeof debug_offsets_314 / sizeof debug_offsets_314[0]; i++)
        _PyRuntime[debug_offsets_314[i].word] = debug_offsets_314[i].value;
    Py_Version = 0x030e0af0;
    PyCode_Type[4] = 208;

    put64(code14, 8, (uintptr_t)PyCode_Type);
    put64(code14, 16, 8);
    put32(code14, 68, 100);
    put64(code14, 112, (uintptr_t)fname);
    put64(code14, 128, (uintptr_t)qname);
    put64(code14, 136, (uintptr_t)table);
    put32(code14, 192, 1); /* _co_firsttraceable */
    tstate14[72 / 8] = (uintptr_t)frame14_a;
    frame14_a[0] = (uintptr_t)code14 | 1;
    frame14_a[1] = (uintptr_t)frame14_b;
    frame14_a[7] = (uintptr_t)(code14 + 208 + 2 * 5); /* instr_ptr: unit 5 -> line 107 */
    frame14_b[0] = (uintptr_t)code14;                 /* a strong reference: no tag */
    frame14_b[1] = 0;
    frame14_b[7] = (uintptr_t)(code14 + 208 + 2 * 2); /* unit 2 -> line 105 */
    fake_tstate = tstate14;

    mt_pyframes *py = mt_pyframes_new(&why);
    EXPECT(py != NULL);
    if (!py)
        return;
    mt_pyframe out[8];
    EXPECT(mt_pyframes_read(py, out, 8) == 2);
    EXPECT(out[0].code == (uintptr_t)code14 && out[0].line == 107);
    EXPECT(out[1].code == (uintptr_t)code14 && out[1].line == 105);
    uint64_t key = 0;
    EXPECT(mt_pyframes_top(py, &key) == (uintptr_t)frame14_a && key != 0);
    uint64_t sig = mt_pyframes_signature(py, (uintptr_t)frame14_a);
    frame14_a[0] = (uintptr_t)code14; /* the same code, untagged: the same stack */
    EXPECT(mt_pyframes_signature(py, (uintptr_t)frame14_a) == sig);
    ((unsigned char *)frame14_b)[74] = 3; /* owner FRAME_OWNED_BY_INTERPRETER: skipped */
    EXPECT(mt_pyframes_read(py, out, 8) == 1);
    ((unsigned char *)frame14_b)[74] = 4; /* FRAME_OWNED_BY_CSTACK: skipped */
    EXPECT(mt_pyframes_read(py, out, 8) == 1);
    ((unsigned char *)frame14_b)[74] = 0;
    mt_pyframes_free(py);

    _PyRuntime[2] = 1; /* free-threaded */
    EXPECT(mt_pyframes_new(&why) == NULL && why && strstr(why, "layout differs"));
    _PyRuntime[2] = 0;
    _PyRuntime[1] = 0x030d00f0; /* the offsets of another version */
    EXPECT(mt_pyframes_new(&why) == NULL && why && strstr(why, "layout differs"));
    _PyRuntime[1] = 0x030e0af0;
    for (size_t i = 0; i < sizeof debug_offsets_314 / sizeof debug_offsets_314[0]; i++) {
        _PyRuntime[debug_offsets_314[i].word] += 8; /* each offset moved in turn */
        py = mt_pyframes_new(&why);
        EXPECT(py == NULL);
        mt_pyframes_free(py);
        _PyRuntime[debug_offsets_314[i].word] -= 8;
    }
    memcpy(_PyRuntime, "nodebug!", 8);
    EXPECT(mt_pyframes_new(&why) == NULL);
    memcpy(_PyRuntime, "xdebugpy", 8);
    py = mt_pyframes_new(&why);
    EXPECT(py != NULL);
    mt_pyframes_free(py);
}

int main(void)
{
    const char *why = NULL;
    Py_Version = 0x031000f0; /* 3.16.0 final */
    EXPECT(mt_pyframes_new(&why) == NULL);
    EXPECT(why && strcmp(why, "Python 3.16 layout unknown: native stacks only") == 0);

    Py_Version = 0x030c03f0; /* 3.12.3 */
    EXPECT(mt_pyframes_new(&why) == NULL);
    EXPECT(why && strstr(why, "not initialized"));

    fake_initialized = 1;
    PyCode_Type[4] = 176; /* a 3.10-sized code object: must be refused */
    PyUnicode_Type[4] = 64;
    PyBytes_Type[4] = 33;
    EXPECT(mt_pyframes_new(&why) == NULL);
    EXPECT(why && strstr(why, "layout differs"));

    PyCode_Type[4] = 192;
    mt_pyframes *py = mt_pyframes_new(&why);
    EXPECT(py != NULL);
    if (!py)
        return 1;
    mt_pyframe out[300];
    EXPECT(mt_pyframes_read(py, out, 300) == 0); /* no thread state */

    build_stack();
    EXPECT(mt_pyframes_read(py, out, 300) == 2);
    EXPECT(out[0].code == (uintptr_t)code && out[0].line == 107);
    EXPECT(out[1].code == (uintptr_t)code && out[1].line == 105);
    EXPECT(mt_pyframes_read(py, out, 1) == 1 && out[0].line == 107); /* cached, max honoured */

    char f[32], q[8];
    uint32_t first = 0;
    EXPECT(mt_pyframes_describe(py, (uintptr_t)code, f, sizeof f, q, sizeof q, &first) == 0);
    EXPECT(strcmp(f, "fake.py") == 0 && strcmp(q, "Fake.me") == 0 && first == 100);

    frame_b[7] = (uintptr_t)(code + 192); /* unit 0 < _co_firsttraceable: incomplete, skipped */
    EXPECT(mt_pyframes_read(py, out, 300) == 1);
    frame_b[7] = (uintptr_t)(code + 192 + 4);
    ((unsigned char *)frame_b)[70] = 3;   /* owner = FRAME_OWNED_BY_CSTACK: skipped */
    EXPECT(mt_pyframes_read(py, out, 300) == 1);
    ((unsigned char *)frame_b)[70] = 0;

    frame_b[1] = (uintptr_t)frame_b;      /* self loop */
    EXPECT(mt_pyframes_read(py, out, 300) == 2);
    frame_b[1] = (uintptr_t)frame_a;      /* A <-> B cycle: bounded by the depth cap */
    int n = mt_pyframes_read(py, out, 300);
    EXPECT(n == 256);
    frame_b[1] = 0x1234567;               /* misaligned garbage link: walk stops */
    EXPECT(mt_pyframes_read(py, out, 300) == 2);
    frame_a[7] = (uintptr_t)(code + 192 + 2 * 9); /* past the code: frame kept, line unknown */
    EXPECT(mt_pyframes_read(py, out, 300) == 2 && out[0].line == -1);
    frame_a[0] = (uintptr_t)table;        /* not a code object: skipped */
    EXPECT(mt_pyframes_read(py, out, 300) == 1);
    EXPECT(mt_pyframes_describe(py, (uintptr_t)table, f, 32, q, 8, NULL) == -1);

    mt_pyframes_free(py);
    fake_314();
    printf("%s\n", failures ? "FAILED" : "fake 3.12 and 3.14 interpreters: all checks passed");
    return failures != 0;
}
#endif
