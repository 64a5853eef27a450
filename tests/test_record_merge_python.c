/* Merging native and Python frames into one stack (src/record/merge_python.c). */
#include <criterion/criterion.h>

#include "memtrace/record.h"

/* Fake address space: eval loop at [0x1000, 0x2000), the interpreter object [0x1000, 0x9000),
 * libtorch at 0x100000+, libcuda at 0x200000+. Code object "addresses" are 1, 2, 3... and their
 * ids are the same numbers (0 would drop the frame). */
static const mt_py_ranges R = {.eval_lo = 0x1000, .eval_hi = 0x2000, .interp_lo = 0x1000,
                               .interp_hi = 0x9000};

static uint32_t same_id(void *ctx, uintptr_t code)
{
    (void)ctx;
    return (uint32_t)code;
}

static uint64_t py(uint32_t code, uint32_t line)
{
    return MT_FRAME_WORD(MT_FRAME_PYTHON, MT_PY_IP(code, line));
}

static uint64_t nat(uint64_t ip) { return MT_FRAME_WORD(MT_FRAME_NATIVE, ip); }

Test(record_merge_python, runs_replace_their_eval_frames_and_glue_is_dropped)
{
    /* innermost first: cuda, torch, [eval #1], glue, torch-ext, [eval #2], glue, main, _start */
    const uint64_t native[] = {0x200010, 0x100020, 0x1100, 0x3000, 0x100030, 0x1200, 0x4000,
                               0x5000, 0x6000};
    /* run 1 (innermost): forward, _call_impl (entry); run 2: main, <module> (entry) */
    const mt_pyframe pyf[] = {{1, 10, 0}, {2, 20, 1}, {3, 30, 0}, {4, 40, 1}};
    uint64_t out[32];
    int n = mt_merge_python(&R, native, 9, pyf, 4, same_id, NULL, out, 32);
    const uint64_t want[] = {nat(0x200010), nat(0x100020), py(1, 10), py(2, 20), nat(0x100030),
                             py(3, 30), py(4, 40)};
    cr_assert_eq(n, 7);
    for (int i = 0; i < n; i++) cr_expect_eq(out[i], want[i], "frame %d", i);
}

Test(record_merge_python, count_mismatch_puts_all_python_at_the_innermost_eval_frame)
{
    const uint64_t native[] = {0x200010, 0x1100, 0x3000, 0x1200, 0x5000};
    const mt_pyframe pyf[] = {{1, 10, 0}, {2, 20, 0}, {3, 30, 1}}; /* one run, two eval frames */
    uint64_t out[32];
    int n = mt_merge_python(&R, native, 5, pyf, 3, same_id, NULL, out, 32);
    const uint64_t want[] = {nat(0x200010), py(1, 10), py(2, 20), py(3, 30)};
    cr_assert_eq(n, 4);
    for (int i = 0; i < n; i++) cr_expect_eq(out[i], want[i], "frame %d", i);
}

/* The recorder's default walk stops at the innermost eval-loop frame (mt_unwind_stop_at): the
 * runs then all go there, in order, and the C frame between them (torch-ext in the first test)
 * is what --stacks full keeps and this leaves out. */
Test(record_merge_python, walk_cut_at_the_innermost_eval_frame_takes_every_run)
{
    const uint64_t native[] = {0x200010, 0x100020, 0x1100};
    const mt_pyframe pyf[] = {{1, 10, 0}, {2, 20, 1}, {3, 30, 0}, {4, 40, 1}};
    uint64_t out[32];
    int n = mt_merge_python(&R, native, 3, pyf, 4, same_id, NULL, out, 32);
    const uint64_t want[] = {nat(0x200010), nat(0x100020), py(1, 10), py(2, 20), py(3, 30),
                             py(4, 40)};
    cr_assert_eq(n, 6);
    for (int i = 0; i < n; i++) cr_expect_eq(out[i], want[i], "frame %d", i);
}

Test(record_merge_python, no_eval_frame_puts_python_outermost_and_no_ranges_gives_python_only)
{
    const uint64_t native[] = {0x200010, 0x100020};
    const mt_pyframe pyf[] = {{1, 10, 1}};
    uint64_t out[8];
    int n = mt_merge_python(&R, native, 2, pyf, 1, same_id, NULL, out, 8);
    cr_assert_eq(n, 3);
    cr_expect_eq(out[0], nat(0x200010));
    cr_expect_eq(out[2], py(1, 10));
    n = mt_merge_python(NULL, NULL, 0, pyf, 1, same_id, NULL, out, 8);
    cr_assert_eq(n, 1);
    cr_expect_eq(out[0], py(1, 10));
}

static uint32_t drop_two(void *ctx, uintptr_t code)
{
    (void)ctx;
    return code == 2 ? 0 : (uint32_t)code;
}

Test(record_merge_python, unnamed_code_is_left_out_and_cap_is_respected)
{
    const uint64_t native[] = {0x200010, 0x1100};
    const mt_pyframe pyf[] = {{1, 10, 0}, {2, 20, 0}, {3, 30, 1}};
    uint64_t out[8];
    int n = mt_merge_python(&R, native, 2, pyf, 3, drop_two, NULL, out, 8);
    cr_assert_eq(n, 3);
    cr_expect_eq(out[1], py(1, 10));
    cr_expect_eq(out[2], py(3, 30));
    n = mt_merge_python(&R, native, 2, pyf, 3, same_id, NULL, out, 2);
    cr_assert_eq(n, 2, "never more than cap");
}
