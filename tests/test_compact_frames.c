/* Frame naming: symbols with inlined callees, modules without symbols, Python and pseudo frames,
 * the first user frame, and names safe for folded output. */
#include "test_compact_fixture.h"

static mt_frames *frames_of(const mt_record *recs, size_t n)
{
    mt_frames *f = mt_frames_new();
    cr_assert(f);
    for (size_t i = 0; i < n; i++) cr_assert_eq(mt_frames_add(f, &recs[i]), 1);
    return f;
}

#define NODE(i, p, ip_, k) {.type = MT_REC_STACK_NODE, .u.node = {.id = i, .parent = p, .ip = ip_, .frame_kind = k}}
#define MOD(i, path_, s, e) {.type = MT_REC_MODULE, .u.module = {.id = i, .bias = s, .start = s, .end = e, .path = path_}}
#define SYM(ip_, d, fn, file_, l) {.type = MT_REC_SYMBOL, .u.symbol = {.ip = ip_, .depth = d, .function = fn, .file = file_, .line = l}}
#define PYC(i, file_, q) {.type = MT_REC_PYCODE, .u.pycode = {.id = i, .filename = file_, .qualname = q}}

Test(frames, names_and_first_user_frame)
{
    const mt_record recs[] = {
        /* symbols and code objects arrive after the nodes that use them: order must not matter */
        NODE(1, 0, 0x401010, MT_FRAME_NATIVE),                  /* main, with an inlined callee */
        NODE(2, 1, MT_PY_IP(7, 42), MT_FRAME_PYTHON),   /* train.py:step:42 */
        NODE(3, 2, 0x500123, MT_FRAME_NATIVE),                  /* libtorch.so, no symbol */
        NODE(4, 3, 0x600010, MT_FRAME_NATIVE),                  /* libcudart: CUDA stack */
        NODE(5, 4, 0x900000, MT_FRAME_NATIVE),                  /* no module at all */
        NODE(6, 0, MT_PSEUDO_TRUNCATED, MT_FRAME_PSEUDO),
        NODE(7, 6, 0x600020, MT_FRAME_NATIVE),
        MOD(1, "/usr/bin/app", 0x400000, 0x402000),
        MOD(2, "/opt/lib/libtorch.so", 0x500000, 0x510000),
        MOD(3, "/usr/local/cuda/lib64/libcudart.so.13", 0x600000, 0x610000),
        SYM(0x401010, 1, "inlined;helper", "/src/util.h", 7),
        SYM(0x401010, 0, "main", "/src/app.c", 12),
        SYM(0x600010, 0, "cudaMalloc", "", 0),
        PYC(7, "train.py", "Model.step"),
    };
    mt_frames *f = frames_of(recs, sizeof recs / sizeof *recs);
    const char *names[16];
    size_t n = mt_frames_path(f, 5, MT_NAME_SHORT, names, 16);
    cr_assert_eq(n, 6);
    cr_expect_str_eq(names[0], "main (app.c:12)");
    cr_expect_str_eq(names[1], "inlined,helper (util.h:7)", "';' is replaced");
    cr_expect_str_eq(names[2], "Model.step (train.py:42)");
    cr_expect_str_eq(names[3], "libtorch.so+0x123");
    cr_expect_str_eq(names[4], "cudaMalloc");
    cr_expect_str_eq(names[5], "0x900000");
    n = mt_frames_path(f, 5, MT_NAME_LONG, names, 16);
    cr_assert_eq(n, 6);
    cr_expect_str_eq(names[0], "main (app.c:12)", "the same in both styles for a C function");
    cr_expect_str_eq(names[2], "Model.step (train.py:42)");
    /* A Python frame wins over native ones. */
    cr_expect_str_eq(mt_frames_first_user(f, 5), "Model.step (train.py:42)");
    /* Without Python: the innermost frame outside the CUDA libraries. */
    cr_expect_str_eq(mt_frames_first_user(f, 7), "libcudart.so.13+0x20", "all-CUDA stack: innermost");
    cr_expect_str_eq(mt_frames_first_user(f, 1), "inlined,helper (util.h:7)");
    n = mt_frames_path(f, 7, MT_NAME_SHORT, names, 16);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(names[0], "[truncated]");
    cr_expect_eq(mt_frames_path(f, 0, MT_NAME_SHORT, names, 16), 1);
    cr_expect_str_eq(names[0], "[no stack]");
    /* cap smaller than the path: count is still the full depth */
    cr_expect_eq(mt_frames_path(f, 5, MT_NAME_SHORT, names, 2), 6);
    cr_expect_str_eq(names[1], "inlined,helper (util.h:7)");
    mt_frames_free(f);
}

Test(frames, unknown_and_cyclic_nodes_do_not_hang)
{
    const mt_record recs[] = {NODE(1, 2, 0x10, MT_FRAME_NATIVE), NODE(2, 1, 0x20, MT_FRAME_NATIVE)};
    mt_frames *f = frames_of(recs, 2);
    const char *names[8];
    size_t n = mt_frames_path(f, 1, MT_NAME_SHORT, names, 8);
    cr_expect(n > 0 && n <= 4096);
    cr_expect_eq(mt_frames_path(f, 99, MT_NAME_SHORT, names, 8), 1);
    cr_expect_str_eq(names[0], "[unknown stack]");
    mt_frames_free(f);
}
