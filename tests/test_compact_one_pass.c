/* A --tensors trace is categorized as it is read, in one pass, when its names are at hand (the
 * symbols at its end read first, analyze.c), and gives exactly what the second pass gave: on
 * every trace recorded on the GPU, and on traces whose names come late (then it takes the second
 * pass, and says so in mt_analysis.passes). */
#include <time.h>

#include "test_compact_fixture.h"

#define PY(code, line) ((uint64_t)(code) << 32 | (line))
#define MiB (1ull << 20)

static mt_analysis *analyze(const char *path, int two_passes)
{
    char err[512] = "";
    mt_analysis *a = NULL;
    mt_analyze_options o = {.two_passes = two_passes};
    cr_assert_eq(mt_analyze(path, &o, &a, err, sizeof err), 0, "%s: %s", path, err);
    return a;
}

/* Everything `report --json` and the folded peak say of a, as one string. */
static char *outputs(mt_analysis *a)
{
    mt_report_options ro = {.top = 50};
    char *json = fx_capture(a, fx_report_json_fn, &ro, "one-pass.json");
    mt_folded_options fo = {.metric = MT_METRIC_PEAK, .device = MT_DEVICE_AUTO};
    char *folded = fx_capture(a, fx_folded_fn, &fo, "one-pass.folded");
    size_t n = strlen(json) + strlen(folded) + 2;
    char *s = malloc(n);
    snprintf(s, n, "%s\n%s", json, folded);
    free(json);
    free(folded);
    return s;
}

/* The analysis of path in one pass and in two: the same outputs and by-category figures. Returns
 * the passes the first took. */
static int same_both_ways(const char *path)
{
    mt_analysis *one = analyze(path, 0), *two = analyze(path, 1);
    cr_assert_eq(two->passes, two->categories ? 2 : 1, "%s", path);
    char *a = outputs(one), *b = outputs(two);
    cr_assert_str_eq(a, b, "%s: the outputs differ", path);
    cr_assert_eq(one->n_devices, two->n_devices);
    for (size_t i = 0; i < one->n_devices; i++) {
        const mt_device_report *x = &one->devices[i], *y = &two->devices[i];
        cr_assert_eq(x->categories_known, y->categories_known, "%s", path);
        cr_assert_eq(
            memcmp(x->by_category_at_peak, y->by_category_at_peak, sizeof x->by_category_at_peak),
            0, "%s", path);
        cr_assert_eq(x->after_backward_known, y->after_backward_known, "%s", path);
        cr_assert_eq(x->after_backward_time_ns, y->after_backward_time_ns, "%s", path);
        cr_assert_eq(memcmp(x->by_category_after_backward, y->by_category_after_backward,
                            sizeof x->by_category_after_backward),
                     0, "%s", path);
        cr_assert_eq(memcmp(x->fit_at_peak, y->fit_at_peak, sizeof x->fit_at_peak), 0, "%s", path);
    }
    cr_assert_eq(one->n_failed, two->n_failed);
    for (size_t i = 0; i < one->n_failed; i++) {
        cr_assert_eq(one->failed[i].categories_known, two->failed[i].categories_known, "%s", path);
        cr_assert_eq(memcmp(one->failed[i].by_category, two->failed[i].by_category,
                            sizeof one->failed[i].by_category),
                     0, "%s: failure %zu", path, i);
    }
    int passes = one->passes;
    free(a);
    free(b);
    mt_analysis_free(one);
    mt_analysis_free(two);
    return passes;
}

typedef struct tally {
    int tensors, once;
} tally;

static void check_fixture(const char *path, void *ctx)
{
    tally *t = ctx;
    mt_analysis *a = analyze(path, 0);
    int tensors = a->categories != NULL;
    mt_analysis_free(a);
    int passes = same_both_ways(path);
    t->tensors += tensors;
    t->once += tensors && passes == 1;
}

Test(one_pass, every_gpu_trace_gives_what_two_passes_gave, .timeout = 300)
{
    tally t = {0};
    cr_assert_gt(mt_test_each_gpu_fixture(check_fixture, &t), 0);
    cr_assert_geq(t.tensors, 10, "the fixtures have --tensors traces");
    cr_assert_eq(t.once, t.tensors, "every one read once (the symbols come first from the end)");
}

/* A forward, a backward on autograd's thread and an optimizer step, twice; the Python frames'
 * code objects are written `late` (after the events) or first. */
static void write_steps(fx *f, int late)
{
    fx_open(f, "one-pass.mtrace");
    fx_process(f, "python3", "python3 train.py");
    fx_node(f, 1, 0, PY(1, 10), MT_FRAME_PYTHON);
    fx_node(f, 2, 1, PY(2, 1790), MT_FRAME_PYTHON);        /* Module._call_impl: activations */
    fx_node(f, 3, 0, MT_PSEUDO_AUTOGRAD, MT_FRAME_PSEUDO); /* backward */
    fx_node(f, 4, 1, PY(3, 240), MT_FRAME_PYTHON);         /* Adam.step: optimizer */
    const char *files[3] = {"/home/u/train.py",
                            "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
                            "/venv/lib/python3.12/site-packages/torch/optim/adam.py"};
    const char *quals[3] = {"<module>", "Module._call_impl", "Adam.step"};
    mt_record pc = {.type = MT_REC_PYCODE};
    for (int i = 0; !late && i < 3; i++) {
        pc.u.pycode =
            (mt_pycode){.id = (uint32_t)i + 1, .filename = files[i], .qualname = quals[i]};
        fx_put(f, &pc);
    }
    uint64_t t = 1, a = 0x10000000;
    for (int step = 0; step < 2; step++) {
        mt_record r = {.type = MT_REC_EVENT};
        uint64_t act = a + 0x1000000 * (uint64_t)step;
        struct {
            unsigned op;
            uint64_t addr, bytes;
            uint32_t stack, tid;
        } ev[] = {{MT_OP_ALLOC, act, 8 * MiB, 2, 1},
                  {MT_OP_ALLOC, act + 0x800000, 4 * MiB, 2, 1},
                  {MT_OP_ALLOC, act + 0xc00000, 2 * MiB, 3, 2},
                  {MT_OP_FREE, act, 8 * MiB, 0, 2},
                  {MT_OP_ALLOC, act + 0xe00000, 1 * MiB, 3, 2},
                  {MT_OP_FREE, act + 0x800000, 4 * MiB, 0, 2},
                  {MT_OP_ALLOC, act + 0x100000, 6 * MiB, 4, 1},
                  {MT_OP_FREE, act + 0x100000, 6 * MiB, 0, 1},
                  {MT_OP_FREE, act + 0xc00000, 2 * MiB, 0, 1},
                  {MT_OP_FREE, act + 0xe00000, 1 * MiB, 0, 1}};
        for (size_t i = 0; i < sizeof ev / sizeof *ev; i++) {
            r.u.event = (mt_event){.time_ns = FX_T0 + t++ * MS,
                                   .address = ev[i].addr,
                                   .bytes = ev[i].bytes,
                                   .tid = ev[i].tid,
                                   .context = 1,
                                   .stack = ev[i].stack,
                                   .device = 0,
                                   .op = (uint8_t)ev[i].op,
                                   .kind = MT_KIND_TENSOR};
            fx_put(f, &r);
        }
    }
    for (int i = 0; late && i < 3; i++) {
        pc.u.pycode =
            (mt_pycode){.id = (uint32_t)i + 1, .filename = files[i], .qualname = quals[i]};
        fx_put(f, &pc);
    }
    fx_end(f, t, 0, 0);
    fx_close(f);
}

Test(one_pass, names_at_hand_take_one_pass)
{
    fx f;
    write_steps(&f, 0);
    cr_assert_eq(same_both_ways(f.path), 1);
    mt_analysis *a = analyze(f.path, 0);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert(d->categories_known);
    uint64_t sum = 0;
    for (size_t k = 0; k < MT_CAT_MAX; k++)
        sum += d->by_category_at_peak[k];
    cr_assert_eq(sum, 14 * MiB, "the peak: 12 MiB of activations and 2 of backward");
    cr_assert_eq(d->by_category_at_peak[MT_CAT_ACTIVATIONS], 12 * MiB);
    /* live when the backward pass ended (the optimizer's first tensor): a gradient */
    cr_assert_eq(d->by_category_at_peak[MT_CAT_GRADIENTS], 2 * MiB);
    mt_analysis_free(a);
    unlink(f.path);
}

/* The code objects after the events: while reading, the stacks' Python frames had no names (so
 * no categories); the analysis notices, reads again, and gives what it gives with them first. */
Test(one_pass, names_that_come_late_take_a_second_pass)
{
    fx f;
    write_steps(&f, 1);
    cr_assert_eq(same_both_ways(f.path), 2);
    mt_analysis *late = analyze(f.path, 0);
    fx g;
    write_steps(&g, 0);
    mt_analysis *first = analyze(g.path, 0);
    const mt_device_report *x = fx_dev(late, 0), *y = fx_dev(first, 0);
    cr_assert_eq(
        memcmp(x->by_category_at_peak, y->by_category_at_peak, sizeof x->by_category_at_peak), 0,
        "as if the names had come first");
    mt_analysis_free(late);
    mt_analysis_free(first);
    unlink(f.path);
    unlink(g.path);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A module record before each new stack: every name built while reading would be built again at
 * the next one (a module may rename any native frame), 40 000 times over a growing set. Naming
 * while reading stops once it has cost more than a bound proportional to the records read, and
 * a second pass categorizes: the analysis stays linear (seconds, not hours). */
Test(one_pass, names_rebuilt_over_and_over_stop_in_time, .timeout = 120)
{
    enum { N = 40000 };
    fx f;
    fx_open(&f, "one-pass-modules.mtrace");
    mt_record r = {.type = MT_REC_EVENT};
    for (uint32_t i = 1; i <= N; i++) {
        char path[64];
        snprintf(path, sizeof path, "/lib/libm%u.so", i);
        fx_module(&f, i, path, 0x100000000ull + (uint64_t)i * 0x10000,
                  0x100000000ull + (uint64_t)i * 0x10000 + 0x1000);
        fx_node(&f, i, 0, 0x100000000ull + (uint64_t)i * 0x10000 + 8, MT_FRAME_NATIVE);
        r.u.event = (mt_event){.time_ns = FX_T0 + i,
                               .address = 0x1000 + 64 * (uint64_t)i,
                               .bytes = 64,
                               .tid = 1,
                               .context = 1,
                               .stack = i,
                               .device = 0,
                               .op = MT_OP_ALLOC,
                               .kind = MT_KIND_TENSOR};
        fx_put(&f, &r);
    }
    fx_end(&f, N, 0, 0);
    fx_close(&f);
    double t0 = now_s();
    mt_analysis *a = analyze(f.path, 0);
    double s = now_s() - t0;
    cr_assert_eq(a->passes, 2, "naming while reading gave up");
    cr_assert_eq(fx_dev(a, 0)->by_category_at_peak[MT_CAT_OTHER], N * 64ull);
    cr_expect_lt(s, 10.0, "%.1f s", s);
    mt_analysis_free(a);
    unlink(f.path);
}

/* A tensor made inside cuBLAS (a library workspace), with the module that says so written `late`
 * (after the event: its native frame was named by its address while reading) or first. */
static void write_workspace(fx *f, int late)
{
    fx_open(f, "one-pass-module.mtrace");
    mt_record pc = {.type = MT_REC_PYCODE};
    pc.u.pycode = (mt_pycode){.id = 1, .filename = "/home/u/train.py", .qualname = "<module>"};
    fx_put(f, &pc);
    if (!late) fx_module(f, 1, "/usr/lib/libcublas.so.13", 0x7f0000000000, 0x7f0000100000);
    fx_node(f, 1, 0, PY(1, 10), MT_FRAME_PYTHON);
    fx_node(f, 2, 1, 0x7f0000000100, MT_FRAME_NATIVE);
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = FX_T0 + MS,
                           .address = 0x10000000,
                           .bytes = 32 * MiB,
                           .tid = 1,
                           .context = 1,
                           .stack = 2,
                           .device = 0,
                           .op = MT_OP_ALLOC,
                           .kind = MT_KIND_TENSOR};
    fx_put(f, &r);
    if (late) fx_module(f, 1, "/usr/lib/libcublas.so.13", 0x7f0000000000, 0x7f0000100000);
    fx_end(f, 2, 0, 0);
    fx_close(f);
}

Test(one_pass, a_module_that_comes_late_takes_a_second_pass)
{
    fx f, g;
    write_workspace(&f, 1);
    write_workspace(&g, 0);
    cr_assert_eq(same_both_ways(f.path), 2, "the frame's name changed after its category");
    cr_assert_eq(same_both_ways(g.path), 1);
    mt_analysis *late = analyze(f.path, 0), *first = analyze(g.path, 0);
    cr_assert_eq(fx_dev(late, 0)->by_category_at_peak[MT_CAT_WORKSPACE], 32 * MiB);
    cr_assert_eq(fx_dev(first, 0)->by_category_at_peak[MT_CAT_WORKSPACE], 32 * MiB);
    mt_analysis_free(late);
    mt_analysis_free(first);
    unlink(f.path);
    unlink(g.path);
}
