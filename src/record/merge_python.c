/* One stack out of two: native frames and Python frames, merged.
 *
 * A native stack of a Python program is mostly the interpreter: _PyEval_EvalFrameDefault, call
 * glue (_PyObject_MakeTpCall, slot_tp_call, ...), and at the bottom Py_RunMain, main, _start. The
 * thread's Python frames say what that interpreter was running. Each C-level call of the eval loop
 * runs a run of Python frames ending at an "entry" frame (mt_pyframe.entry), so
 *
 *   native (innermost first):  cuMemAlloc ... at::linear  THPVariable_linear  [eval]  glue  [eval]  main
 *   Python (innermost first):  linear.py:forward  module.py:_call_impl | cifar.py:main  <module> |
 *   merged:                    cuMemAlloc ... at::linear  THPVariable_linear  linear.py:forward
 *                              module.py:_call_impl  cifar.py:main  cifar.py:<module>
 *
 * the k-th eval-loop frame becomes the k-th run; interpreter frames in between and everything
 * outside the outermost eval-loop frame are dropped (they name nothing the user wrote; native
 * frames of other libraries between two runs, e.g. a C extension calling back into Python, stay).
 * By default the recorder's walk ends at the innermost eval-loop frame (mt_unwind_stop_at, see
 * stacks.c), so there is one eval frame and every run goes there; `--stacks full` walks on.
 * When the counts disagree (a truncated unwind, an embedding we do not understand) all Python
 * frames go where the innermost eval-loop frame was: the innermost part, which matters most, is
 * still right.
 */
#include "memtrace/record.h"

static int in(uint64_t ip, uintptr_t lo, uintptr_t hi) { return ip >= lo && ip < hi; }

/* Python frames [from, to) as frame words at out[n..]. */
static int put_python(const mt_pyframe *py, int from, int to, mt_code_id_fn code_id, void *ctx,
                      uint64_t *out, int n, int cap)
{
    for (int i = from; i < to && n < cap; i++) {
        uint32_t id = code_id(ctx, py[i].code);
        if (!id) continue;
        uint64_t line = py[i].line > 0 ? (uint64_t)py[i].line : 0;
        out[n++] = MT_FRAME_WORD(MT_FRAME_PYTHON, MT_PY_IP(id, line));
    }
    return n;
}

int mt_merge_python(const mt_py_ranges *rg, const uint64_t *native, int nn, const mt_pyframe *py,
                    int np, mt_code_id_fn code_id, void *ctx, uint64_t *out, int cap)
{
    if (!rg || nn <= 0) return put_python(py, 0, np, code_id, ctx, out, 0, cap);
    int evals[MT_MAX_FRAMES], ne = 0;
    for (int i = 0; i < nn && ne < MT_MAX_FRAMES; i++)
        if (in(native[i], rg->eval_lo, rg->eval_hi)) evals[ne++] = i;
    int runs = 0;
    for (int i = 0; i < np; i++) runs += py[i].entry != 0;

    int n = 0;
    if (ne == 0) { /* no eval-loop frame seen (the unwinder stopped early): Python outermost */
        for (int i = 0; i < nn && n < cap; i++) out[n++] = MT_FRAME_WORD(MT_FRAME_NATIVE, native[i]);
        return put_python(py, 0, np, code_id, ctx, out, n, cap);
    }
    int exact = ne == runs;
    int p = 0; /* next Python frame to place */
    for (int i = 0, e = 0; i <= evals[ne - 1] && n < cap; i++) {
        if (e < ne && i == evals[e]) {
            if (exact) { /* this eval frame ran Python frames p .. the next entry frame */
                int q = p;
                while (q < np && !py[q].entry) q++;
                int end = q < np ? q + 1 : np;
                n = put_python(py, p, end, code_id, ctx, out, n, cap);
                p = end;
            } else if (e == 0) {
                n = put_python(py, 0, np, code_id, ctx, out, n, cap);
            }
            e++;
        } else if (!in(native[i], rg->interp_lo, rg->interp_hi)) {
            out[n++] = MT_FRAME_WORD(MT_FRAME_NATIVE, native[i]);
        }
    }
    return n;
}
