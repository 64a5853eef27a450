/* Python-aware analysis: Python frame naming and --frames filtering (folded sums stay exact),
 * readable report trees, by-line attribution (with --file), the reconciliation breakdown in
 * default mode (caching allocator found by symbol) and tensor mode (pools), NVML samples and
 * "unknown" without them, Chrome counter tracks, and the GPU-recorded cifar fixture if present. */
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_compact_fixture.h"

#define A ((uint64_t)0x7f0000000000)
#define MiB (1024ull * 1024ull)
#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define PY(code, line) MT_PY_IP(code, line)
#define CIFAR "/home/u/proj/cifar.py"
#define LINEAR "/usr/lib/python3/site-packages/torch/nn/modules/linear.py"

static void fx_pycode(fx *f, uint32_t id, const char *file, const char *qual)
{
    mt_record r = {.type = MT_REC_PYCODE};
    r.u.pycode = (mt_pycode){.id = id, .firstlineno = 1, .filename = file, .qualname = qual};
    fx_put(f, &r);
}

static void fx_sample(fx *f, int device, uint64_t t_ms, uint64_t value)
{
    mt_record r = {.type = MT_REC_SAMPLE};
    r.u.sample = (mt_sample){.time_ns = FX_T0 + t_ms * MS, .device = device,
                             .counter = MT_COUNTER_NVML_PROCESS_BYTES, .value = value};
    fx_put(f, &r);
}

/* cuda:0 default allocator mode, cuda:1 tensor mode, cuda:2 one 60-frame native stack.
 *   node 1  cifar.py:<module>:30
 *   node 2    cifar.py:Net.forward:23
 *   node 3      linear.py:Linear.forward:116 -> 4 at::linear -> 5 CUDACachingAllocator::malloc
 *                                            -> 6 cuMemAlloc_v2 (libcuda)
 *   node 11     cublasCreate_v2 -> 12 cuMemAlloc_v2
 *   node 13   cifar.py:Net.forward:25 -> 14 cuMemAlloc_v2 */
static void python_trace(fx *f)
{
    fx_open(f, "python.mtrace");
    fx_process(f, "python3", "python3 cifar.py");
    fx_module(f, 1, "/opt/torch/lib/libtorch_cuda.so", 0x500000, 0x510000);
    fx_module(f, 2, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x600000, 0x610000);
    fx_pycode(f, 1, CIFAR, "<module>");
    fx_pycode(f, 2, CIFAR, "Net.forward");
    fx_pycode(f, 3, LINEAR, "Linear.forward");
    fx_node(f, 1, 0, PY(1, 30), MT_FRAME_PYTHON);
    fx_node(f, 2, 1, PY(2, 23), MT_FRAME_PYTHON);
    fx_node(f, 3, 2, PY(3, 116), MT_FRAME_PYTHON);
    fx_node(f, 4, 3, 0x500100, MT_FRAME_NATIVE);
    fx_node(f, 5, 4, 0x500200, MT_FRAME_NATIVE);
    fx_node(f, 6, 5, 0x600010, MT_FRAME_NATIVE);
    fx_node(f, 11, 2, 0x500300, MT_FRAME_NATIVE);
    fx_node(f, 12, 11, 0x600010, MT_FRAME_NATIVE);
    fx_node(f, 13, 1, PY(2, 25), MT_FRAME_PYTHON);
    fx_node(f, 14, 13, 0x600010, MT_FRAME_NATIVE);
    uint32_t parent = 0; /* a 60-frame native chain for cuda:2 (nodes 100..159) */
    for (uint32_t i = 0; i < 60; i++) {
        fx_node(f, 100 + i, parent, 0x500400 + 16 * i, MT_FRAME_NATIVE);
        parent = 100 + i;
    }
    fx_node(f, 160, 159, 0x600010, MT_FRAME_NATIVE);
    fx_sample(f, 0, 0, 100 * MiB);
    /* cuda:0 */
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 4 * MiB, 1, 6);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x1000000, 1 * MiB, 2, 12);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x2000000, 2 * MiB, 3, 14);
    fx_sample(f, 0, 3, 200 * MiB);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DRIVER, 0, A + 0x3000000, 512 * 1024, 4, 0); /* peak 7.5 MiB */
    fx_ev(f, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x2000000, 0, 5, 0);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x4000000, 2 * MiB, 6, 6);
    fx_sample(f, 0, 10, 300 * MiB);
    /* cuda:1: a pool reserving 8 MiB, async tensors (stack 6 names CUDACachingAllocator too:
     * async memory must still count as tensors, not as segments) */
    fx_ev(f, MT_OP_POOL_RESERVED, MT_KIND_POOL, 1, 0x900d, 8 * MiB, 1, 0);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_ASYNC, 1, A + 0x10000000, 3 * MiB, 2, 6);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_ASYNC, 1, A + 0x11000000, 1 * MiB, 3, 14); /* peak 4 MiB */
    fx_ev(f, MT_OP_FREE, MT_KIND_ASYNC, 1, A + 0x11000000, 0, 4, 0);
    /* cuda:2 */
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 2, A + 0x20000000, 1 * MiB, 2, 160);
    fx_symbol(f, 0x500100, 0, "at::linear(at::Tensor const&)", "", 0);
    fx_symbol(f, 0x500200, 0, "c10::cuda::CUDACachingAllocator::malloc(void**, int, unsigned long)", "", 0);
    fx_symbol(f, 0x500300, 0, "cublasCreate_v2", "", 0);
    fx_symbol(f, 0x600010, 0, "cuMemAlloc_v2", "", 0);
    for (uint32_t i = 0; i < 60; i++) {
        char fn[32];
        snprintf(fn, sizeof fn, "deep_fn_%u", i);
        fx_symbol(f, 0x500400 + 16 * i, 0, fn, "/src/deep.c", 100 + i);
    }
    fx_end(f, 20, 10, 0);
    fx_close(f);
}

typedef struct text_opts {
    mt_report_options ro;
} text_opts;

static int text_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    return mt_report_text(o, a, &((text_opts *)ctx)->ro);
}

static int json_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    return mt_report_json(o, &a, 1, &((text_opts *)ctx)->ro);
}


static int chrome_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    char err[256];
    return mt_export_chrome(o, &a, 1, ctx, err, sizeof err);
}

static int run_status(const char *cmd)
{
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
    return WEXITSTATUS(st);
}

/* Writes json to a fresh temporary file named after stem and runs `python3 -c SCRIPT FILE` on it
 * (SCRIPT holds no single quote); returns its exit status. */
static int python_on_json(const char *json, const char *stem, const char *script)
{
    char path[512], cmd[2048];
    mt_test_tmpname(path, sizeof path, stem);
    cr_assert_eq(mt_test_spit(path, json, strlen(json)), 0);
    cr_assert_lt((size_t)snprintf(cmd, sizeof cmd, "python3 -c '%s' %s", script, path), sizeof cmd);
    return run_status(cmd);
}

Test(analysis, python_frames_and_filters)
{
    fx f;
    python_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    const char *names[16];
    uint8_t flags[16];
    size_t n = mt_frames_path(
        a->frames, 6,
        (mt_path_opts){.style = MT_NAME_LONG, .filter = MT_FRAMES_ALL, .flags = flags}, names, 16);
    cr_assert_eq(n, 6);
    cr_expect_str_eq(names[1], "Net.forward (" CIFAR ":23)", "long names keep the full path");
    cr_expect_eq(flags[2], MT_FF_PYTHON | MT_FF_PYLIB);
    cr_expect_eq(flags[5], MT_FF_NATIVE | MT_FF_CUDA);
    n = mt_frames_path(a->frames, 6,
                       (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_PYTHON}, names,
                       16);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(names[0], "<module> (proj/cifar.py:30)");
    cr_expect_str_eq(names[2], "Linear.forward (torch/nn/modules/linear.py:116)");
    mt_frames_set_base_dir(a->frames, "/home/u");
    n = mt_frames_path(a->frames, 6,
                       (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_PYTHON}, names,
                       16);
    cr_expect_str_eq(names[0], "<module> (proj/cifar.py:30)");
    mt_frames_set_base_dir(a->frames, "/home/u/proj");
    n = mt_frames_path(a->frames, 6,
                       (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_PYTHON}, names,
                       16);
    cr_expect_str_eq(names[0], "<module> (cifar.py:30)", "relative to the base dir");
    mt_frames_set_base_dir(a->frames, NULL);
    n = mt_frames_path(
        a->frames, 6, (mt_path_opts){.style = MT_NAME_LONG, .filter = MT_FRAMES_NATIVE}, names, 16);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(names[0], "at::linear(at::Tensor const&)");
    cr_expect_str_eq(names[2], "cuMemAlloc_v2");
    n = mt_frames_path(a->frames, 6,
                       (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_NATIVE}, names,
                       16);
    cr_expect_str_eq(names[0], "at::linear");
    /* the user view (the default: the trace has Python frames) */
    n = mt_frames_path(a->frames, 6,
                       (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_AUTO}, names, 16);
    cr_assert_eq(n, 4);
    cr_expect_str_eq(names[2], "Linear.forward (torch/nn/modules/linear.py:116)");
    cr_expect_str_eq(names[3], MT_OWNER_CACHING_ALLOCATOR, "the allocating library");
    /* folded with every filter: lines of each device still sum to its peak */
    mt_frame_filter filters[3] = {MT_FRAMES_ALL, MT_FRAMES_PYTHON, MT_FRAMES_NATIVE};
    for (int i = 0; i < 3; i++) {
        char *text = fx_folded_of(a, fx_dev(a, 0), MT_METRIC_PEAK, filters[i]);
        cr_expect_eq(fx_folded_sum(text, "cuda:0"), fx_dev(a, 0)->u.peak, "filter %d", i);
        if (filters[i] == MT_FRAMES_PYTHON) {
            cr_expect(strstr(text, "cuda:0;<module> (proj/cifar.py:30);Net.forward (proj/cifar.py:23);"
                                   "Linear.forward (torch/nn/modules/linear.py:116) 4194304\n"),
                      "%s", text);
            cr_expect(!strstr(text, "cuMemAlloc"), "no native frames with --frames python");
            cr_expect(strstr(text, "cuda:0;[driver internal] 524288\n"), "pseudo frames kept");
        }
        if (filters[i] == MT_FRAMES_NATIVE) cr_expect(!strstr(text, ".py"), "%s", text);
        if (filters[i] == MT_FRAMES_ALL)
            cr_expect(!strstr(text, "cuMemAlloc"), "the CUDA stack's own leaf frames are left out");
        free(text);
    }
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* --by-line's order: by bytes live at the peak, then (lines with none there, freed before it) by
 * bytes allocated, then by file and line. */
Test(analysis, by_line_order_after_the_peak_by_allocated_bytes)
{
    fx f;
    fx_open(&f, "byline-order.mtrace");
    fx_process(&f, "python3", "python3 cifar.py");
    fx_module(&f, 2, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x600000, 0x610000);
    fx_pycode(&f, 1, CIFAR, "train");
    const uint32_t lines[] = {10, 20, 30, 5};
    for (uint32_t i = 0; i < 4; i++) {
        fx_node(&f, 1 + 2 * i, 0, PY(1, lines[i]), MT_FRAME_PYTHON);
        fx_node(&f, 2 + 2 * i, 1 + 2 * i, 0x600010, MT_FRAME_NATIVE);
    }
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 1 * MiB, 1, 2);               /* line 10 */
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A, 0, 2, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x1000000, 3 * MiB, 3, 4); /* line 20 */
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x1000000, 0, 4, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x3000000, 1 * MiB, 5, 8); /* line 5 */
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x3000000, 0, 6, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x2000000, 8 * MiB, 7, 6); /* line 30: the peak */
    fx_symbol(&f, 0x600010, 0, "cuMemAlloc_v2", "", 0);
    fx_end(&f, 10, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_line_stat *v;
    size_t n;
    cr_assert_eq(mt_by_line(a->frames, fx_dev(a, 0), NULL, &v, &n), 0);
    cr_assert_eq(n, 4);
    const uint32_t order[] = {30, 20, 5, 10};
    for (size_t i = 0; i < n; i++) cr_expect_eq(v[i].line, order[i], "row %zu: line %u", i, v[i].line);
    cr_expect_eq(v[0].peak_bytes, 8 * MiB);
    cr_expect_eq(v[1].peak_bytes, 0);
    cr_expect_eq(v[1].alloc_bytes, 3 * MiB);
    free(v);
    mt_analysis_free(a);
}

Test(analysis, by_line_attribution)
{
    fx f;
    python_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    mt_line_stat *v;
    size_t n;
    cr_assert_eq(mt_by_line(a->frames, d, NULL, &v, &n), 0);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(v[0].file, LINEAR);
    cr_expect_eq(v[0].line, 116);
    cr_expect_eq(v[0].alloc_bytes, 6 * MiB);
    cr_expect_eq(v[0].alloc_count, 2);
    cr_expect_eq(v[0].peak_bytes, 4 * MiB);
    cr_expect_eq(v[1].line, 25);
    cr_expect_eq(v[1].alloc_bytes, 2 * MiB);
    cr_expect_eq(v[1].peak_bytes, 2 * MiB, "freed after the peak: live at it");
    cr_expect_eq(v[2].line, 23);
    cr_expect_str_eq(v[2].qualname, "Net.forward");
    cr_expect_eq(v[2].peak_bytes, 1 * MiB);
    free(v);
    /* --file: the innermost frame in cifar.py; suffix and basename both match */
    const char *wanted[] = {"cifar.py", "proj/cifar.py", CIFAR, "./cifar.py"};
    for (size_t w = 0; w < 4; w++) {
        cr_assert_eq(mt_by_line(a->frames, d, wanted[w], &v, &n), 0);
        cr_assert_eq(n, 2, "%s", wanted[w]);
        cr_expect_eq(v[0].line, 23);
        cr_expect_eq(v[0].alloc_bytes, 7 * MiB);
        cr_expect_eq(v[0].alloc_count, 3);
        cr_expect_eq(v[0].peak_bytes, 5 * MiB);
        cr_expect_eq(v[0].peak_count, 2);
        cr_expect_eq(v[1].line, 25);
        free(v);
    }
    cr_assert_eq(mt_by_line(a->frames, d, "other.py", &v, &n), 0);
    cr_expect_eq(n, 0, "no frame in that file: skipped");
    cr_expect_not(mt_python_file_matches(CIFAR, "ifar.py"), "suffix only at a '/'");
    /* text: one table, sorted, with the source line when the file is readable here */
    char src[512];
    mt_test_tmpname(src, sizeof src, "cifar.py");
    cr_assert_eq(mt_test_spit(src, "import torch\n", 13), 0);
    text_opts to = {.ro = {.by_line = 1}};
    char *text = fx_capture(a, text_fn, &to, "byline.txt");
    const char *table = strstr(text, "by Python line");
    cr_assert(table, "%s", text);
    const char *l116 = strstr(table, "linear.py:116 in Linear.forward");
    const char *l25 = strstr(table, "cifar.py:25 in Net.forward");
    const char *l23 = strstr(table, "cifar.py:23 in Net.forward");
    cr_expect(l116 && l25 && l23 && l116 < l25 && l25 < l23, "%s", text);
    cr_expect(strstr(text, "      4.00 MiB    6.00 MiB        2  linear.py:116"), "%s", text);
    cr_expect(!strstr(text, "live at the peak, by stack"), "by-line replaces the trees");
    free(text);
    mt_analysis_free(a);
}

Test(analysis, reconciliation_numbers)
{
    fx f;
    python_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d0 = fx_dev(a, 0), *d1 = fx_dev(a, 1), *d2 = fx_dev(a, 2);
    cr_expect_eq(d0->u.peak, 7 * MiB + 512 * 1024);
    const mt_breakdown *b = &d0->at_peak;
    cr_assert(b->valid);
    cr_expect_eq(b->time_ns, 4 * MS);
    cr_expect(b->process_known);
    cr_expect_eq(b->process_bytes, 200 * MiB, "read while the trace had the peak's API bytes live");
    cr_expect_eq(b->process_sample_ns, 3 * MS);
    cr_expect(b->process_sample_same);
    cr_expect_eq(b->caching_bytes, 4 * MiB);
    cr_expect_eq(b->reserved_bytes, 4 * MiB);
    cr_expect_not(b->allocated_known, "default mode: tensors unknown");
    cr_expect_eq(b->other_bytes, 3 * MiB);
    cr_expect_eq(b->driver_bytes, 512 * 1024);
    cr_expect_eq(b->context_bytes, (int64_t)(193 * MiB));
    cr_expect_eq((uint64_t)b->context_bytes + b->reserved_bytes + b->other_bytes, b->process_bytes);
    cr_assert_eq(b->n_owners, 2);
    cr_expect_str_eq(b->owners[0].owner, "Net.forward (proj/cifar.py:25)");
    cr_expect_eq(b->owners[0].bytes, 2 * MiB);
    cr_expect_str_eq(b->owners[1].owner, "cuBLAS");
    cr_expect_eq(b->owners[1].bytes, 1 * MiB);
    b = &d0->at_end;
    cr_expect_eq(b->process_bytes, 300 * MiB);
    cr_expect_eq(b->reserved_bytes, 6 * MiB);
    cr_expect_eq(b->other_bytes, 1 * MiB);
    cr_expect_eq(b->context_bytes, (int64_t)(293 * MiB));
    cr_expect_eq(d0->nvml_max, 300 * MiB);
    cr_expect_eq(d0->nvml_max_time_ns, 10 * MS);
    /* tensor mode */
    b = &d1->at_peak;
    cr_expect_eq(d1->u.peak, 4 * MiB);
    cr_expect(b->has_pool && b->allocated_known);
    cr_expect_eq(b->reserved_bytes, 8 * MiB);
    cr_expect_eq(b->caching_bytes, 0, "async memory is never a caching segment");
    cr_expect_eq(b->allocated_bytes, 4 * MiB);
    cr_expect_eq(b->cached_free_bytes, 4 * MiB);
    cr_expect_eq(b->other_bytes, 0);
    cr_expect_not(b->process_known, "no samples for cuda:1");
    cr_expect_eq(d1->at_end.allocated_bytes, 3 * MiB);
    cr_expect_eq(d1->at_end.cached_free_bytes, 5 * MiB);
    cr_expect_eq(d2->at_peak.other_bytes, 1 * MiB);
    cr_expect_str_eq(d2->at_peak.owners[0].owner, "deep_fn_59 (deep.c:159)");
    /* text and JSON say the same */
    text_opts to = {0};
    char *text = fx_capture(a, text_fn, &to, "recon.txt");
    cr_expect(strstr(text, "      process total (nvidia-smi)  200.00 MiB   NVML sample at +0.003000 s (same bytes live in the trace)\n"), "%s", text);
    cr_expect(strstr(text, "    = CUDA context & driver       193.00 MiB"), "%s", text);
    cr_expect(strstr(text, "        tensors allocated           unknown"), "%s", text);
    cr_expect(strstr(text, "      process total (nvidia-smi)     unknown   no NVML samples"), "%s", text);
    cr_expect(strstr(text, "        cached but free            4.00 MiB\n"), "%s", text);
    cr_expect(strstr(text, "  nvidia-smi max   300.00 MiB at +0.010000 s\n"), "%s", text);
    free(text);
    char *json = fx_capture(a, json_fn, &to, "recon.json");
    int st = python_on_json(json, "recon.json",
             "import json,sys; d=json.load(open(sys.argv[1]))[\"devices\"]; "
             "p=d[0][\"breakdown\"][\"at_peak\"]; t=d[1][\"breakdown\"][\"at_peak\"]; "
             "assert p[\"process_bytes\"]==200*2**20 and p[\"context_driver_bytes\"]==193*2**20, p; "
             "assert p[\"tensors_allocated_bytes\"]==\"unknown\", p; "
             "assert p[\"process_bytes\"]==p[\"context_driver_bytes\"]+p[\"allocator_reserved_bytes\"]+p[\"other_libraries_bytes\"]; "
             "assert t[\"process_bytes\"]==\"unknown\" and t[\"tensors_allocated_bytes\"]==4*2**20, t; "
             "assert d[0][\"nvml_max_bytes\"]==300*2**20");
    cr_expect_eq(st, 0, "%s", json);
    free(json);
    mt_analysis_free(a);
}

/* The negative line: an NVML sample read before a burst is below what the trace has live
 * at the peak. The next sample is used when it saw the burst; when neither did, the total is
 * unknown and the report says why; never a negative remainder. */
Test(analysis, nvml_sample_paired_with_the_moment)
{
    fx f;
    fx_open(&f, "lag.mtrace");
    fx_sample(&f, 0, 0, 50 * MiB);                                 /* before both bursts */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 200 * MiB, 1, 0); /* burst 1: peak of cuda:0 */
    fx_sample(&f, 0, 3, 300 * MiB);                                /* saw it */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 1, A, 400 * MiB, 4, 0); /* burst 2 on cuda:1 ... */
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 1, A, 0, 5, 0);          /* ... gone before a sample */
    fx_sample(&f, 1, 0, 60 * MiB);
    fx_sample(&f, 1, 9, 70 * MiB);
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A, 0, 10, 0);
    fx_end(&f, 12, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_breakdown *b = &fx_dev(a, 0)->at_peak;
    cr_assert(b->process_known);
    cr_expect_eq(b->process_bytes, 300 * MiB);
    cr_expect(b->process_sample_after);
    cr_expect(b->process_sample_same, "nothing changed between the peak and the sample");
    cr_expect_eq(b->context_bytes, (int64_t)(100 * MiB));
    b = &fx_dev(a, 1)->at_peak;
    cr_expect_not(b->process_known, "both samples read less than the 400 MiB live");
    cr_expect_eq(b->process_unknown, MT_PROCESS_LAGGED);
    cr_expect_eq(b->before_bytes, 60 * MiB);
    cr_expect_eq(b->after_bytes, 70 * MiB);
    text_opts to = {0};
    char *text = fx_capture(a, text_fn, &to, "lag.txt");
    cr_expect(strstr(text, "process total (nvidia-smi)     unknown   the NVML samples around it read "
                           "less than the 400.00 MiB the trace had live (60.00 MiB at +0.000000 s, "
                           "70.00 MiB at +0.009000 s): they missed this burst\n"), "%s", text);
    cr_expect(!strstr(text, " -"), "no negative number: %s", text);
    free(text);
    char *json = fx_capture(a, json_fn, &to, "lag.json");
    int st = python_on_json(json, "lag.json",
             "import json,sys; d=json.load(open(sys.argv[1]))[\"devices\"]; "
             "p=d[1][\"breakdown\"][\"at_peak\"]; "
             "assert p[\"process_bytes\"]==\"unknown\" and \"missed\" not in p[\"process_unknown_reason\"] "
             "and \"less than\" in p[\"process_unknown_reason\"], p; "
             "assert all(x[\"breakdown\"][k][\"context_driver_bytes\"]==\"unknown\" or "
             "x[\"breakdown\"][k][\"context_driver_bytes\"]>=0 for x in d for k in (\"at_peak\",\"at_end\"))");
    cr_expect_eq(st, 0, "%s", json);
    free(json);
    mt_analysis_free(a);
}

/* A sample is written by the sampler thread before the events of the same moments that other
 * threads' rings hold: what the trace had live when it was read is counted by event time. */
Test(analysis, nvml_sample_before_its_events_in_the_file)
{
    fx f;
    fx_open(&f, "order.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 100 * MiB, 1, 0);
    fx_sample(&f, 0, 5, 400 * MiB);                                /* read at 5 ms ... */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x10000000, 50 * MiB, 3, 0); /* ... written late */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x20000000, 1 * MiB, 7, 0);  /* after it: peak */
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x20000000, 0, 8, 0);
    fx_end(&f, 12, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert_eq(d->n_nvml, 1);
    cr_expect_eq(d->nvml[0].api_visible, 150 * MiB, "both allocations before 5 ms, in event time");
    const mt_breakdown *b = &d->at_end;
    cr_assert(b->process_known);
    cr_expect(b->process_sample_same, "150 MiB live at the end, as when the sample was read");
    cr_expect_eq(b->context_bytes, (int64_t)(250 * MiB));
    b = &d->at_peak;
    cr_assert(b->process_known);
    cr_expect_not(b->process_sample_same, "the peak's 1 MiB came after the sample");
    mt_analysis_free(a);
}

/* A change at the very nanosecond of a sample counts as seen by it, whether it comes before the
 * sample in the file (the look back over recent changes) or after it (the samples still open to
 * later changes): only what happened after the sample's time is left out. */
Test(analysis, nvml_sample_sees_the_changes_of_its_own_moment)
{
    fx f;
    fx_open(&f, "same_ns.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 100 * MiB, 1, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x10000000, 50 * MiB, 5, 0); /* at 5 ms, before */
    fx_sample(&f, 0, 5, 400 * MiB);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x20000000, 25 * MiB, 5, 0); /* at 5 ms, after */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x30000000, 1 * MiB, 7, 0);  /* later: unseen */
    fx_end(&f, 12, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert_eq(d->n_nvml, 1);
    cr_expect_eq(d->nvml[0].api_visible, 175 * MiB, "%llu MiB",
                 (unsigned long long)(d->nvml[0].api_visible / MiB));
    mt_analysis_free(a);
}

/* Changes written after three samples, with earlier times than some of them (threads whose rings
 * drained late): each goes to the samples at or after its own time, found where the search for the
 * change before it ended when that is still the place (mt_pairing_change's hint), else searched
 * for. The second change, from further back, must reach the two earlier samples too: a hint taken
 * without checking the sample before it would give it to the last one alone. */
Test(analysis, nvml_late_changes_reach_every_sample_after_their_time)
{
    fx f;
    fx_open(&f, "late_changes.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 100 * MiB, 1, 0);
    fx_sample(&f, 0, 2, 500 * MiB);
    fx_sample(&f, 0, 4, 500 * MiB);
    fx_sample(&f, 0, 6, 500 * MiB);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x10000000, 10 * MiB, 5, 0); /* the last sample's */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x20000000, 20 * MiB, 1, 0); /* all three's */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x30000000, 40 * MiB, 3, 0); /* the two later */
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A, 0, 8, 0);                       /* after all */
    fx_end(&f, 12, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert_eq(d->n_nvml, 3);
    cr_expect_eq(d->nvml[0].api_visible, 120 * MiB, "at 2 ms: %llu MiB",
                 (unsigned long long)(d->nvml[0].api_visible / MiB));
    cr_expect_eq(d->nvml[1].api_visible, 160 * MiB, "at 4 ms: %llu MiB",
                 (unsigned long long)(d->nvml[1].api_visible / MiB));
    cr_expect_eq(d->nvml[2].api_visible, 170 * MiB, "at 6 ms: %llu MiB",
                 (unsigned long long)(d->nvml[2].api_visible / MiB));
    mt_analysis_free(a);
}

/* What the trace had live when a trace's one NVML sample (of cuda:0) was read. */
static uint64_t lone_sample_seen(const char *path)
{
    mt_analysis *a = fx_analyze(path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_assert_eq(d->n_nvml, 1);
    uint64_t seen = d->nvml[0].api_visible;
    mt_analysis_free(a);
    return seen;
}

/* A hostile time in the look-back: a change stamped within MT_PAIRING_WINDOW_NS of 2^64, whose
 * window's end wraps around. While one is in the history, a sample's look-back is the plain walk
 * (hist_walk: the index's order of times does not hold across the wrap), in exact u64 arithmetic:
 * every change newer in the file is stepped over, and each on the sample's device with a later
 * time than the sample's is taken off what the trace had live, the wrapping one too (its time is
 * the largest there is); a change on another device is not. And the wrapping change, the latest
 * change there is, has closed the sample's window: a change of an earlier time that comes later in
 * the file no longer goes to it. */
Test(analysis, nvml_look_back_across_a_wrapping_time)
{
    fx f;
    fx_open(&f, "wrap_look_back.mtrace");
    fx_ev_ns(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x40000000, 10 * MiB, 0, UINT64_MAX - 1000000,
             0, 1, 0); /* wraps */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 100 * MiB, 1, 0);                  /* seen */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 1, A + 0x50000000, 7 * MiB, 8, 0); /* other device */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x10000000, 50 * MiB, 9, 0); /* after it */
    fx_sample(&f, 0, 5, 400 * MiB);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x20000000, 1 * MiB, 3, 0); /* window closed */
    fx_end(&f, 12, 5, 0);
    fx_close(&f);
    uint64_t seen = lone_sample_seen(f.path);
    cr_expect_eq(seen, 100 * MiB, "160 MiB live, less 50 and 10: %.3f MiB", (double)seen / MiB);
}

/* The same walk stops at the wrapping change when its window's end, wrapped, is before the sample
 * (c->t + MT_PAIRING_WINDOW_NS < t in u64 arithmetic): the changes older in the file are not
 * stepped over, though one of them is later than the sample. The index (hist_look_back) would step
 * over all three; with a wrapping change in the history it must not be used. */
Test(analysis, nvml_look_back_stops_at_a_wrapping_time)
{
    fx f;
    fx_open(&f, "wrap_stop.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x30000000, 30 * MiB, 2800, 0); /* not reached */
    fx_ev_ns(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x40000000, 10 * MiB, 0, UINT64_MAX - 1000000,
             0, 1, 0); /* stop */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x10000000, 50 * MiB, 2900, 0); /* after it */
    fx_sample(&f, 0, 2500, 400 * MiB);
    fx_end(&f, 3000, 3, 0);
    fx_close(&f);
    uint64_t seen = lone_sample_seen(f.path);
    cr_expect_eq(seen, 40 * MiB, "90 MiB live, less 50: %.3f MiB", (double)seen / MiB);
}

Test(analysis, readable_trees)
{
    fx f;
    python_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    text_opts to = {.ro = {.frames = MT_FRAMES_ALL}};
    char *text = fx_capture(a, text_fn, &to, "tree.txt");
    cr_expect(strstr(text, "... 58 frames ...\n"), "60 deep frames: first, marker, last\n%s", text);
    cr_expect(strstr(text, "deep_fn_0 (deep.c:100)\n") && strstr(text, "deep_fn_59 (deep.c:159)\n"));
    cr_expect(!strstr(text, "deep_fn_30 "), "middle of the chain elided");
    cr_expect(!strstr(text, "cuMemAlloc_v2"), "the CUDA stack's own frames are hidden");
    cr_expect(strstr(text, "Linear.forward (torch/nn/modules/linear.py:116)\n"), "first user frame kept\n%s", text);
    cr_expect(strstr(text, "Net.forward (proj/cifar.py:23)\n"), "user Python code kept");
    free(text);
    to.ro.full_stacks = 1;
    text = fx_capture(a, text_fn, &to, "full.txt");
    cr_expect(strstr(text, "deep_fn_30 (deep.c:130)\n") && strstr(text, "cuMemAlloc_v2\n"));
    cr_expect(!strstr(text, "frames ...\n"));
    free(text);
    to.ro.full_stacks = 0;
    to.ro.frames = MT_FRAMES_PYTHON;
    text = fx_capture(a, text_fn, &to, "py.txt");
    cr_expect(!strstr(text, "at::linear") && !strstr(text, "deep_fn_"), "%s", text);
    free(text);
    /* the default for a Python program: the user view; a stack without Python or operator is
     * named by its first user frame */
    to.ro.frames = MT_FRAMES_AUTO;
    text = fx_capture(a, text_fn, &to, "user.txt");
    cr_expect(!strstr(text, "at::linear") && !strstr(text, "deep_fn_30"), "%s", text);
    cr_expect(strstr(text, "deep_fn_59 (deep.c:159)\n"), "%s", text);
    cr_expect(strstr(text, MT_OWNER_CACHING_ALLOCATOR "\n"), "%s", text);
    free(text);
    mt_analysis_free(a);
}

Test(analysis, chrome_counter_tracks)
{
    fx f;
    python_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_chrome_options co = {0};
    char *json = fx_capture(a, chrome_fn, &co, "tracks.json");
    int st = python_on_json(json, "tracks.json",
             "import json,sys\n"
             "ev=json.load(open(sys.argv[1]))[\"traceEvents\"]; c={}\n"
             "for e in ev:\n"
             "  if e[\"ph\"]==\"C\": assert all(type(v) is int for v in e[\"args\"].values()), e; c.setdefault(e[\"name\"],[]).append(e[\"args\"][\"bytes\"] if \"bytes\" in e[\"args\"] else 0)\n"
             "M=2**20\n"
             "assert c[\"cuda:0 nvidia-smi (process)\"]==[100*M,200*M,300*M,300*M], c\n"
             "assert c[\"cuda:0 allocator reserved\"][-1]==6*M and max(c[\"cuda:0 allocator reserved\"])==6*M, c\n"
             "assert max(c[\"cuda:0 other libraries\"])==3*M and c[\"cuda:0 other libraries\"][-1]==1*M, c\n"
             "assert max(c[\"cuda:0 driver-internal\"])==M//2, c\n"
             "assert max(c[\"cuda:1 tensors allocated\"])==4*M and c[\"cuda:1 allocator reserved\"][-1]==8*M, c\n"
             "assert \"cuda:0 tensors allocated\" not in c\n");
    free(json);
    cr_expect_eq(st, 0);
    mt_analysis_free(a);
}

/* The tensor-mode cifar run recorded on an H100/H200 by the lead (tests/data/README.md). */
Test(analysis, cifar_fixture)
{
    char trace[1024], out[512], cmd[4096];
    snprintf(trace, sizeof trace, "%s/cifar_tensors.mtrace", MT_TEST_DATA_DIR);
    struct stat st;
    if (stat(trace, &st) != 0) {
        cr_skip_test("%s is not there (recorded on a GPU machine)", trace);
        return;
    }
    mt_test_tmpname(out, sizeof out, "cifar_byline.json");
    snprintf(cmd, sizeof cmd, MEMTRACE " report --json --by-line --file cifar.py -o %s %s", out, trace);
    cr_assert_eq(run_status(cmd), 0, "%s", cmd);
    /* (a) a line of cifar.py leads; its text is the fc1 line: from the copy of cifar.py recorded
     * with the fixture (tests/data/cifar.py; the file at the recorded path may have changed since),
     * else from the report's own reading of the source when it has one */
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys,os\n"
             "d=json.load(open(sys.argv[1]))\n"
             "devs=[x for x in d[\"devices\"] if x.get(\"by_line\")]\n"
             "assert devs, \"no by_line table\"\n"
             "top=max(devs,key=lambda x:x[\"peak_bytes\"])[\"by_line\"][0]\n"
             "assert top[\"file\"].endswith(\"cifar.py\"), top\n"
             "src=top.get(\"source\")\n"
             "cp=os.path.join(sys.argv[2],\"cifar.py\")\n"
             "if os.path.exists(cp): src=open(cp).read().splitlines()[top[\"line\"]-1]\n"
             "assert src is None or \"fc1\" in src, top\n"
             "' %s %s", out, MT_TEST_DATA_DIR);
    cr_expect_eq(run_status(cmd), 0, "by-line on the fixture");
    /* (b) folded stacks hold cifar.py frames and sum to each device's peak */
    mt_analysis *a = fx_analyze(trace);
    const mt_device_report *d0 = mt_select_device(a, MT_DEVICE_AUTO);
    cr_assert(d0);
    char *text = fx_folded_of(a, d0, MT_METRIC_PEAK, MT_FRAMES_ALL);
    cr_expect(strstr(text, "cifar.py"), "folded stacks name cifar.py");
    /* tensor mode takes each block from the caching allocator's report (tensor_hooks.c): the
     * stack ends inside the allocator, memtrace's own frames left out */
    cr_expect(strstr(text, "DeviceCachingAllocator::"), "tensor stacks end in the allocator");
    cr_expect(!strstr(text, "memtrace"), "no frame of memtrace's own");
    free(text);
    fx_check_invariants(a);
    mt_analysis_free(a);
}
