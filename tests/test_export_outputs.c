/* Exporters and the report/export commands: golden text report, JSON report, Chrome trace format
 * (validated by a Python checker), folded sums, gzip output, exit statuses. The helpers take any
 * trace path, so tests/data fixtures recorded on a GPU are checked the same way (last test). */
#include <sys/wait.h>

#include "test_compact_fixture.h"

#define A ((uint64_t)0x7f0000000000)
#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"

/* The golden trace: app -> main -> {load_weights, alloc_scratch} on cuda:0, one OOM. */
static void golden_trace(fx *f)
{
    fx_open(f, "golden.mtrace");
    fx_process(f, "app", "app --train");
    fx_module(f, 1, "/usr/bin/app", 0x400000, 0x410000);
    fx_node(f, 1, 0, 0x401000, MT_FRAME_NATIVE);
    fx_node(f, 2, 1, 0x402000, MT_FRAME_NATIVE);
    fx_node(f, 3, 1, 0x403000, MT_FRAME_NATIVE);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 1048576, 1, 2);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x100000, 524288, 2, 3);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x200000, 262144, 3, 2);
    fx_ev(f, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x100000, 0, 4, 0);
    fx_ev(f, MT_OP_FAILED, MT_KIND_DEVICE, 0, 0, 4ull << 30, 5, 3);
    fx_symbol(f, 0x401000, 0, "main", "/src/app.c", 10);
    fx_symbol(f, 0x402000, 0, "load_weights", "/src/model.c", 20);
    fx_symbol(f, 0x403000, 0, "alloc_scratch", "/src/model.c", 30);
    fx_end(f, 10, 5, 0);
    fx_close(f);
}

Test(export, golden_text_report)
{
    fx f;
    golden_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    char *text = fx_capture(a, fx_report_text_fn, NULL, "report.txt");
    char expected[4096];
    snprintf(
        expected, sizeof expected,
        "memtrace report: %s\n"
        "process: app (pid 4242) app --train\n"
        "recorded: 2023-11-14 22:13:20.000000 UTC, duration 0.010000 s, 5 events\n"
        "\n"
        "cuda:0\n"
        "  peak             1.75 MiB (1835008 bytes) at +0.003000 s (2023-11-14 22:13:20.003000 "
        "UTC)\n"
        "  API peak         1.75 MiB (1835008 bytes) at +0.003000 s\n"
        "  driver-internal  0 B at the peak\n"
        "  at the peak      device 1.75 MiB\n"
        "  allocations      3 (1.75 MiB), 1 frees, 1 failed, 0 zero-byte\n"
        "  live at the end  1.25 MiB in 2 allocations\n"
        "        1.25 MiB       2  held by the program: leaks, or memory still in use at exit\n"
        "  live at the peak, by stack (share of the peak):\n"
        "    100.0%%    1.75 MiB       3  cuda:0\n"
        "    100.0%%    1.75 MiB       3  main (app.c:10)\n"
        "     71.4%%    1.25 MiB       2    load_weights (model.c:20)\n"
        "     28.6%%  512.00 KiB       1    alloc_scratch (model.c:30)\n"
        "  not freed at the end, held by the program (leaks, or memory still in use at exit), by "
        "stack:\n"
        "    100.0%%    1.25 MiB       2  cuda:0\n"
        "    100.0%%    1.25 MiB       2  main (app.c:10)\n"
        "    100.0%%    1.25 MiB       2  load_weights (model.c:20)\n"
        "\n"
        "failed requests: 1\n"
        "  #1 at +0.005000 s on cuda:0: 4.00 GiB device request failed "
        "(CUDA_ERROR_OUT_OF_MEMORY, CUresult 2); "
        "1.25 MiB in use; reserved but free in pools: unknown\n"
        "     requested by (innermost first):\n"
        "       alloc_scratch (model.c:30)\n"
        "       main (app.c:10)\n"
        "     live on the device at that moment, by stack:\n"
        "    100.0%%    1.25 MiB       2  cuda:0\n"
        "    100.0%%    1.25 MiB       2  main (app.c:10)\n"
        "    100.0%%    1.25 MiB       2  load_weights (model.c:20)\n",
        f.path);
    cr_expect_str_eq(text, expected);
    free(text);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* What the top N stacks leave out is summed where it leaves their tree, not at the root: main ->
 * layer -> {conv 4 MiB, norm 2 MiB, relu, pool, add 1 MiB each}, main -> head 3 MiB, and one
 * stack of its own (init) at the root. With --top 2 (conv, head) the three 1 MiB stacks and norm
 * are "[4 more stacks]" under layer, init is "[1 more stack]" at the root, and every frame's bytes
 * are all that went through it (main: 13 MiB, not the 7 MiB of the two shown stacks). */
Test(export, stacks_beyond_the_top_sit_where_they_leave_the_tree)
{
    fx f;
    fx_open(&f, "more.mtrace");
    fx_process(&f, "app", "app");
    fx_module(&f, 1, "/usr/bin/app", 0x400000, 0x410000);
    const char *names[] = {"main", "layer", "conv", "norm", "relu", "pool", "add", "head", "init"};
    /* node n + 1 is names[n]; parents: layer and head under main, the layer's five under it */
    const uint32_t parent[] = {0, 1, 2, 2, 2, 2, 2, 1, 0};
    for (uint32_t n = 0; n < 9; n++) {
        fx_node(&f, n + 1, parent[n], 0x401000 + 0x100 * n, MT_FRAME_NATIVE);
        fx_symbol(&f, 0x401000 + 0x100 * n, 0, names[n], "/src/app.c", 10 + (int)n);
    }
    const struct { uint32_t leaf; uint64_t mib; } ev[] = {{3, 4}, {4, 2}, {5, 1}, {6, 1},
                                                          {7, 1}, {8, 3}, {9, 1}};
    for (int i = 0; i < 7; i++)
        fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + ((uint64_t)i << 24), ev[i].mib << 20,
              (uint64_t)i + 1, ev[i].leaf);
    fx_end(&f, 10, 7, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_report_options ro = {.top = 2};
    char *text = fx_capture(a, fx_report_text_fn, &ro, "more.txt");
    const char *tree = strstr(text, "  live at the peak, by stack");
    cr_assert(tree, "%s", text);
    const char *expected =
        "  live at the peak, by stack (share of the peak):\n"
        "    100.0%   13.00 MiB       7  cuda:0\n"
        "     92.3%   12.00 MiB       6    main (app.c:10)\n"
        "     69.2%    9.00 MiB       5      layer (app.c:11)\n"
        "     38.5%    5.00 MiB       4        [4 more stacks]\n"
        "     30.8%    4.00 MiB       1        conv (app.c:12)\n"
        "     23.1%    3.00 MiB       1      head (app.c:17)\n"
        "      7.7%    1.00 MiB       1    [1 more stack]\n";
    cr_expect(strncmp(tree, expected, strlen(expected)) == 0, "got:\n%s", tree);
    free(text);
    mt_analysis_free(a);
}

/* ---- helpers that run the real program ---------------------------------------------------------- */

static int run_status(const char *cmd)
{
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
    return WEXITSTATUS(st);
}

/* Runs `python3 -c CODE FILE` (CODE reads sys.argv[1] and asserts); its exit status. */
static int python_check(const char *file, const char *code)
{
    char cmd[3000];
    int n = snprintf(cmd, sizeof cmd, "python3 -c '%s' %s", code, file);
    cr_assert(n > 0 && (size_t)n < sizeof cmd, "python check too long");
    return run_status(cmd);
}

typedef struct chrome_summary {
    unsigned long long slices, counters, instants, min_bytes, max_bytes, kept, tracks;
    char path[512]; /* the file export_chrome wrote */
} chrome_summary;

/* Validates a Chrome trace file with tests/py/check_chrome.py (the rules of Perfetto's JSON
 * importer and of catapult's); fills the summary. */
static void check_chrome(const char *path, chrome_summary *s)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/py/check_chrome.py %s", MT_SOURCE_DIR, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    int got = fscanf(p, "%llu %llu %llu %llu %llu %llu %llu", &s->slices, &s->counters,
                     &s->instants, &s->min_bytes, &s->max_bytes, &s->kept, &s->tracks);
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "chrome checker failed on %s", path);
    cr_assert_eq(got, 7);
}

/* Runs `memtrace export --format chrome ARGS -o OUT TRACE` and validates OUT (kept in s->path,
 * for checks of its own). */
static void export_chrome(const char *trace, const char *args, const char *suffix, chrome_summary *s)
{
    char cmd[1600];
    mt_test_tmpname(s->path, sizeof s->path, suffix);
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format chrome %s -o %s %s", args, s->path, trace);
    cr_assert_eq(run_status(cmd), 0, "%s", cmd);
    check_chrome(s->path, s);
}

Test(export, chrome_format_and_filters)
{
    fx f;
    golden_trace(&f);
    chrome_summary s;
    export_chrome(f.path, "", "golden.json", &s);
    cr_expect_eq(s.slices, 3);
    cr_expect_eq(s.kept, 3);
    cr_expect_eq(s.instants, 2, "one peak, one failed request");
    cr_expect_eq(s.tracks, 1, "one track: cuda:0 device");
    /* five counter tracks (in use, by kind, allocator reserved, other libraries, driver-internal)
     * written where they change: all five at the first event, in use, by kind and other libraries
     * at the 3 later ones, all five again at the trace end */
    cr_expect_eq(s.counters, 5 + 3 * 3 + 5);
    export_chrome(f.path, "--top-allocs 1", "top.json.gz", &s);
    cr_expect_eq(s.slices, 1);
    cr_expect_eq(s.max_bytes, 1048576);
    export_chrome(f.path, "--min-bytes 300k", "min.json", &s);
    cr_expect_eq(s.slices, 2);
    cr_expect_eq(s.min_bytes, 524288);
}

/* Tracks are device x kind (x stream when a kind used several), never per size or name; driver
 * slices only on request; the viewers' rules hold (check_chrome.py). */
Test(export, chrome_tracks_by_kind_and_stream)
{
    fx f;
    fx_open(&f, "tracks.mtrace");
    fx_process(&f, "app", "app");
    mt_record r = {.type = MT_REC_EVENT};
    for (int i = 0; i < 6; i++) { /* async on streams 0x10 and 0x20, device, driver */
        r.u.event = (mt_event){.time_ns = FX_T0 + (uint64_t)(i + 1) * MS, .address = A + (uint64_t)i * 0x100000,
                               .bytes = 4096u << i, .stream = i % 2 ? 0x20 : 0x10, .tid = 7,
                               .context = 1, .device = 0, .op = MT_OP_ALLOC, .kind = MT_KIND_ASYNC};
        fx_put(&f, &r);
    }
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x1000000, 1 << 20, 8, 0);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DRIVER, 0, A + 0x2000000, 4, 9, 0, 1, MT_EF_ACTIVITY);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DRIVER, 0, A + 0x2000100, 8, 9, 0, 1, MT_EF_ACTIVITY);
    fx_end(&f, 12, 9, 0);
    fx_close(&f);
    chrome_summary s;
    export_chrome(f.path, "", "tracks.json", &s);
    cr_expect_eq(s.slices, 7, "no driver slices by default");
    cr_expect_eq(s.tracks, 3, "cuda:0 async stream 1, cuda:0 async stream 2, cuda:0 device");
    export_chrome(f.path, "--driver-slices", "tracks-drv.json", &s);
    cr_expect_eq(s.slices, 9);
    cr_expect_eq(s.tracks, 4, "and cuda:0 driver");
    char out[512], cmd[4096];
    mt_test_tmpname(out, sizeof out, "tracks2.json");
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format chrome -o %s %s && grep -q '\"name\":\"cuda:0 async "
                              "stream 2\"' %s && grep -q '\"driver_internal_slices_left_out\":2' %s",
             out, f.path, out, out);
    cr_expect_eq(run_status(cmd), 0, "%s", cmd);
}

/* catapult draws a counter's keys stacked: "by kind" must add up to "in use" at every point
 * (check_chrome.py checks it), so address space (cuMemAddressReserve; NCCL reserves more than it
 * maps) has a track of its own instead of a "vmm_reserve" key. Found by loading the DDP fixture in
 * the real viewer (scripts/check-catapult.sh): its stack read 2.3 times the bytes in use. */
Test(export, chrome_by_kind_adds_up_to_in_use)
{
    const uint64_t M = 1 << 20, V = 0x7e0000000000ull, H = 0x55;
    fx f;
    fx_open(&f, "vmm-chrome.mtrace");
    fx_process(&f, "app", "app");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, M, 1, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_VMM_RESERVE, 0, V, 8 * M, 2, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, 0, H, 4 * M, 3, 0);
    fx_map(&f, 0, V, 4 * M, H, 4);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_MAP, 0, V, 4 * M, 5, 0);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_PHYSICAL, 0, H, 0, 6, 0);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_RESERVE, 0, V, 0, 7, 0);
    fx_end(&f, 8, 1, 0);
    fx_close(&f);
    chrome_summary s;
    export_chrome(f.path, "", "vmm.json", &s); /* check_chrome.py: every stack adds up */
    cr_expect_eq(s.slices, 3, "device, vmm_reserve, vmm_physical allocations");
    cr_expect_eq(python_check(s.path,
                              "import json,sys\n"
                              "ev = json.load(open(sys.argv[1]))[\"traceEvents\"]\n"
                              "def pts(n): return [(e[\"ts\"], e[\"args\"]) for e in ev if e.get(\"name\") == n]\n"
                              "kinds = pts(\"cuda:0 by kind\")\n"
                              "assert kinds and all(sorted(a) == [\"device\", \"vmm_physical\"] for _, a in kinds), kinds\n"
                              "space = [a[\"bytes\"] for _, a in pts(\"cuda:0 address space\")]\n"
                              "assert space == [0, 8388608, 0, 0], space\n"
                              "assert max(a[\"bytes\"] for _, a in pts(\"cuda:0 in use\")) == 5242880"),
                 0, "counters by kind and the address space of a VMM mapping");
}

/* A trace without memory events (a launcher that never made a context): without anything that
 * has a time, catapult builds an empty model and shows a blank page. One slice over the recording
 * says why. */
Test(export, chrome_trace_without_memory_events)
{
    fx f;
    fx_open(&f, "nothing.mtrace");
    fx_process(&f, "torchrun", "torchrun --nproc-per-node 2 train.py");
    fx_end(&f, 12, 0, 0);
    fx_close(&f);
    chrome_summary s;
    export_chrome(f.path, "", "nothing.json", &s);
    cr_expect_eq(s.tracks, 1);
    cr_expect_eq(s.counters, 0);
    cr_expect_eq(python_check(s.path,
                              "import json,sys\n"
                              "ev = [e for e in json.load(open(sys.argv[1]))[\"traceEvents\"] if e[\"ph\"] != \"M\"]\n"
                              "assert [(e[\"ph\"], e[\"name\"], e[\"ts\"]) for e in ev] == "
                              "[(\"b\", \"no GPU memory events\", 0), (\"e\", \"no GPU memory events\", 12000)], ev"),
                 0, "the one slice of a trace without memory events");
}

/* Frame names flamegraph.pl would misread: a ';' splits a frame, a stack ending in " 42" reads as
 * a second (differential) count. */
Test(export, folded_lines_flamegraph_reads)
{
    fx f;
    fx_open(&f, "weird.mtrace");
    fx_module(&f, 1, "/usr/bin/app", 0x400000, 0x410000);
    fx_node(&f, 1, 0, 0x401000, MT_FRAME_NATIVE);
    fx_node(&f, 2, 1, 0x402000, MT_FRAME_NATIVE);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 4096, 1, 2);
    fx_symbol(&f, 0x401000, 0, "a;b", "", 0);
    fx_symbol(&f, 0x402000, 0, "step 42", "", 0);
    fx_end(&f, 2, 1, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    char *text = fx_folded_of(a, fx_dev(a, 0), MT_METRIC_PEAK, MT_FRAMES_ALL);
    cr_expect_str_eq(text, "cuda:0;a,b;step_42 4096\n");
    cr_expect_eq(fx_folded_sum(text, "cuda:0"), 4096);
    free(text);
    mt_analysis_free(a);
}

Test(export, json_report_via_cli)
{
    fx f;
    golden_trace(&f);
    char out[512], cmd[1600];
    mt_test_tmpname(out, sizeof out, "report.json");
    snprintf(cmd, sizeof cmd, MEMTRACE " report --json -o %s %s", out, f.path);
    cr_assert_eq(run_status(cmd), 0);
    cr_expect_eq(python_check(out,
                              "import json,sys; d=json.load(open(sys.argv[1])); dev=d[\"devices\"][0]; "
                              "assert (dev[\"device\"], dev[\"peak_bytes\"], dev[\"peak_time_ns\"], dev[\"api_peak_bytes\"]) "
                              "== (0, 1835008, 3000000, 1835008), dev; "
                              "assert d[\"failed_requests\"][0][\"pool_free_bytes\"] == \"unknown\"; "
                              "assert d[\"leaks\"][0][\"bytes\"] == 1310720; assert d[\"dropped\"] == 0; "
                              "assert d[\"truncated\"] is False; "
                              "assert dev[\"peak_stacks\"][0][\"frames\"] == [\"main (app.c:10)\", \"load_weights (model.c:20)\"]"),
                 0, "JSON report content");
}

Test(export, cli_errors_exit_2)
{
    fx f;
    golden_trace(&f);
    char garbage[512], cmd[1200];
    mt_test_tmpname(garbage, sizeof garbage, "garbage.mtrace");
    cr_assert_eq(mt_test_spit(garbage, "not a trace", 11), 0);
    const char *bad[] = {"report", "report --bogus %s", "report --top x %s", "report /nonexistent.mtrace",
                         "report " "%s" "x", "export %s", "export --format xml %s",
                         "export --format folded --metric nope %s", "export --format folded --min-bytes 5 %s",
                         "export --format chrome --top-allocs 0 %s", "export --format folded",
                         "export --format folded --device 7 %s", "export --format folded --device x %s",
                         "export --format chrome --device 0 %s", "export --format folded --frames some %s",
                         "export --format speedscope --driver-slices %s"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char args[600];
        snprintf(args, sizeof args, bad[i], f.path);
        snprintf(cmd, sizeof cmd, MEMTRACE " %s >/dev/null 2>&1", args);
        cr_expect_eq(run_status(cmd), 2, "%s", cmd);
    }
    snprintf(cmd, sizeof cmd, MEMTRACE " report %s >/dev/null 2>&1", garbage);
    cr_expect_eq(run_status(cmd), 2, "corrupt file");
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format chrome %s >/dev/null 2>&1", garbage);
    cr_expect_eq(run_status(cmd), 2, "corrupt file");
    /* the error is one line */
    snprintf(cmd, sizeof cmd, "test $(" MEMTRACE " report %s 2>&1 >/dev/null | wc -l) = 1", garbage);
    cr_expect_eq(run_status(cmd), 0);
    cr_expect_eq(run_status(MEMTRACE " report --help >/dev/null"), 0);
    cr_expect_eq(run_status(MEMTRACE " export --help >/dev/null"), 0);
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format folded --metric leak -o - %s | grep -qx "
                              "'cuda:0;main (app.c:10);load_weights (model.c:20) 1310720'", f.path);
    cr_expect_eq(run_status(cmd), 0, "folded leak line");
}

/* Every fixture in tests/data (recorded on real GPUs by the lead) must analyse, keep the folded
 * invariants, and export valid Chrome JSON. */
static void check_fixture(const char *path, void *ctx)
{
    (void)ctx;
    mt_analysis *a = fx_analyze(path);
    fx_check_invariants(a);
    mt_analysis_free(a);
    chrome_summary s;
    export_chrome(path, "", "fixture.json.gz", &s);
}

Test(export, data_fixtures)
{
    mt_test_each_gpu_fixture(check_fixture, NULL);
}

/* A 300 000-event realistic stream (trace/synthetic.h) over 3 devices: peaks against an
 * independent running sum, folded invariants, and a Chrome export that needs downsampled
 * counters and the largest-N slice selection. */
#include "trace/synthetic.h"

Test(export, large_stream_matches_reference)
{
    fx f;
    fx_open(&f, "large.mtrace");
    mt_synth s;
    mt_synth_init(&s, 7);
    uint64_t in_use[3] = {0}, peak[3] = {0}, peak_t[3] = {0}, allocs = 0;
    mt_record r = {.type = MT_REC_EVENT};
    for (int i = 0; i < 300000; i++) {
        mt_synth_next(&s, &r.u.event);
        mt_event *e = &r.u.event;
        /* slot addresses never collide across devices when the device is a function of them */
        int d = (int)((e->address >> 21) % 3);
        e->device = d;
        if (e->op == MT_OP_ALLOC) {
            allocs++;
            in_use[d] += e->bytes;
            if (in_use[d] > peak[d]) {
                peak[d] = in_use[d];
                peak_t[d] = e->time_ns;
            }
        } else {
            in_use[d] -= e->bytes;
        }
        fx_put(&f, &r);
    }
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_devices, 3);
    for (int d = 0; d < 3; d++) {
        cr_expect_eq(a->devices[d].u.peak, peak[d], "device %d", d);
        cr_expect_eq(a->devices[d].u.peak_mono_ns, peak_t[d], "device %d", d);
        cr_expect_eq(a->devices[d].leak_bytes, in_use[d], "device %d", d);
        cr_expect(a->devices[d].n_timeline > 0 && a->devices[d].n_timeline <= MT_TIMELINE_POINTS);
        uint64_t tl_max = 0;
        for (size_t k = 0; k < a->devices[d].n_timeline; k++)
            if (a->devices[d].timeline[k].in_use > tl_max) tl_max = a->devices[d].timeline[k].in_use;
        cr_expect_eq(tl_max, peak[d], "the timeline keeps the peak");
    }
    cr_expect_eq(a->anomalies.unmatched_frees + a->anomalies.double_frees + a->anomalies.replaced, 0);
    fx_check_invariants(a);
    mt_analysis_free(a);
    chrome_summary cs;
    export_chrome(f.path, "--top-allocs 1000", "large.json", &cs);
    cr_expect_eq(cs.slices, 1000);
    cr_expect_eq(cs.kept, 1000);
    export_chrome(f.path, "", "large-default.json.gz", &cs);
    cr_expect_eq(cs.slices, allocs, "every lifetime when under the default cap");
    cr_expect(cs.counters > 0 && cs.counters < 300000 * 2, "downsampled counters");
}

/* ---- Chrome counters: bounded, exact peak, time that never steps back ---------------------------- */

#include "synth_file.h"

typedef struct counter_track {
    char name[64];
    uint64_t points, max;
    double last_ts;
    int stepped_back;
} counter_track;

/* Every "ph":"C" line of a Chrome export with a single "bytes" value, by track name. */
static size_t counter_tracks(const char *json, counter_track *t, size_t cap)
{
    size_t n = 0;
    for (const char *p = json; (p = strstr(p, "\"ph\":\"C\"")); p++) {
        const char *nm = strstr(p, "\"name\":\""), *tsp = strstr(p, "\"ts\":"),
                   *b = strstr(p, "\"args\":{\"bytes\":");
        const char *eol = strchr(p, '\n');
        if (!nm || !tsp || !b || (eol && b > eol)) continue; /* a multi-key track (by kind) */
        nm += 8;
        const char *q = strchr(nm, '"');
        cr_assert(q && (size_t)(q - nm) < sizeof t->name);
        size_t i = 0;
        while (i < n && (strlen(t[i].name) != (size_t)(q - nm) || strncmp(t[i].name, nm, (size_t)(q - nm))))
            i++;
        if (i == n) {
            cr_assert(n < cap);
            memset(&t[n], 0, sizeof t[n]);
            memcpy(t[n].name, nm, (size_t)(q - nm));
            t[n].last_ts = -1;
            n++;
        }
        double ts = strtod(tsp + 5, NULL);
        uint64_t v = strtoull(b + 16, NULL, 10); /* past "args":{"bytes": */
        if (ts < t[i].last_ts) t[i].stepped_back = 1;
        t[i].last_ts = ts;
        t[i].points++;
        if (v > t[i].max) t[i].max = v;
    }
    return n;
}

static int chrome_capped_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    char err[256];
    return mt_export_chrome(o, &a, 1, ctx, err, sizeof err);
}

/* The synthetic PyTorch-like trace (4 threads whose events reach the file in turns, so the time of
 * file order steps back at every switch; NVML samples every 50 ms): with a cap far below its
 * changes, every counter track stays within it, never steps back, and keeps the exact peak (in
 * use) and the highest nvidia-smi sample. */
Test(export, chrome_counters_bounded_exact_peak)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "synth.mtrace");
    cr_assert_eq(mt_synth_file_write(path, 300000, 3), 0);
    mt_analysis *a = fx_analyze(path);
    cr_assert_eq(a->n_devices, 1);
    const mt_device_report *d = &a->devices[0];
    cr_assert_gt(d->n_nvml, 40, "enough samples to need buckets: %zu", d->n_nvml);
    uint64_t caps[] = {501, 11, 0};
    for (size_t k = 0; k < sizeof caps / sizeof *caps; k++) {
        mt_chrome_options co = {.max_counter_points = caps[k], .top_allocs = 10};
        uint64_t cap = caps[k] ? caps[k] : MT_CHROME_MAX_COUNTER_POINTS;
        char *json = fx_capture(a, chrome_capped_fn, &co, "capped.json");
        counter_track t[32];
        size_t n = counter_tracks(json, t, 32);
        int saw_in_use = 0, saw_nvml = 0;
        for (size_t i = 0; i < n; i++) {
            cr_expect_leq(t[i].points, cap, "cap %llu: %s has %llu points", (unsigned long long)cap,
                          t[i].name, (unsigned long long)t[i].points);
            cr_expect(!t[i].stepped_back, "cap %llu: %s steps back in time",
                      (unsigned long long)cap, t[i].name);
            if (!strcmp(t[i].name, "cuda:0 in use")) {
                saw_in_use = 1;
                cr_expect_eq(t[i].max, d->u.peak, "cap %llu: the peak is kept exactly",
                             (unsigned long long)cap);
                if (caps[k]) cr_expect_gt(t[i].points, cap / 2, "the buckets are used");
            }
            if (!strcmp(t[i].name, "cuda:0 nvidia-smi (process)")) {
                saw_nvml = 1;
                cr_expect_eq(t[i].max, d->nvml_max, "cap %llu: the highest sample is kept",
                             (unsigned long long)cap);
            }
        }
        cr_expect(saw_in_use && saw_nvml, "cap %llu: %zu tracks", (unsigned long long)cap, n);
        free(json);
    }
    mt_analysis_free(a);
    unlink(path);
}

/* ---- the survey made alongside the analysis writes what the export's own read writes ----------- */

static char *chrome_own_read(const char *path, const mt_chrome_options *co)
{
    mt_analysis *a = fx_analyze(path);
    char *json = fx_capture(a, chrome_capped_fn, (void *)co, "own.json");
    mt_analysis_free(a);
    return json;
}

/* The CLI's way: mt_analyze calls the survey with every event it reads. */
static char *chrome_surveyed(const char *path, const mt_chrome_options *co)
{
    char out[512], err[256] = "";
    mt_analysis *a = fx_analyze(path); /* only for the start on the wall clock, as the CLI's
                                          earliest_start reads it from the header */
    uint64_t base = a->header.start_realtime_ns;
    mt_analysis_free(a);
    mt_test_tmpname(out, sizeof out, "surveyed.json");
    mt_out *o = mt_out_open(out, err, sizeof err);
    cr_assert(o, "%s", err);
    mt_chrome_stream *s = mt_chrome_begin(o, co, base);
    mt_chrome_survey *sv = mt_chrome_survey_begin(s);
    cr_assert(s && sv);
    mt_analyze_options ao = {.on_event = mt_chrome_survey_event, .event_ctx = sv};
    cr_assert_eq(mt_analyze(path, &ao, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mt_chrome_add_surveyed(s, a, sv, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mt_chrome_end(s), 0);
    mt_analysis_free(a);
    cr_assert_eq(mt_out_close(o), 0);
    size_t n = 0;
    char *buf = (char *)mt_test_slurp(out, &n), *json = realloc(buf, n + 1);
    json[n] = 0;
    unlink(out);
    return json;
}

static void expect_same_chrome(const char *path, const mt_chrome_options *co, const char *what)
{
    char *own = chrome_own_read(path, co), *sv = chrome_surveyed(path, co);
    cr_expect_str_eq(sv, own, "%s: %s", path, what);
    free(own);
    free(sv);
}

static void same_chrome_both_ways(const char *path, void *ctx)
{
    (void)ctx;
    mt_chrome_options dflt = {0}, drv = {.driver_slices = 1};
    expect_same_chrome(path, &dflt, "default options");
    expect_same_chrome(path, &drv, "driver slices");
}

/* Slice selection by counted sizes (a few hundred sizes) and by the heap (more different sizes
 * than SURVEY_SIZES), ties at the threshold, streams split into tracks, and every GPU fixture. */
Test(export, chrome_survey_alongside_analysis_same_bytes)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "synth.mtrace");
    cr_assert_eq(mt_synth_file_write(path, 200000, 5), 0);
    mt_chrome_options top = {.top_allocs = 1000}, min = {.min_bytes = 1 << 20};
    expect_same_chrome(path, &top, "top 1000 of a few hundred sizes");
    expect_same_chrome(path, &min, "min-bytes");
    unlink(path);

    fx f; /* 70 000 allocations of 70 000 sizes over 3 streams, 200 of each size class tied */
    fx_open(&f, "many_sizes.mtrace");
    for (uint64_t i = 0; i < 70000; i++) {
        uint64_t bytes = 4096 + (i < 69000 ? i : 69000 + i % 5) * 512;
        mt_record r = {.type = MT_REC_EVENT};
        r.u.event = (mt_event){.time_ns = FX_T0 + (i + 1) * MS, .address = A + i * 0x100000,
                               .bytes = bytes, .tid = 7, .stream = 0x100 + i % 3,
                               .op = MT_OP_ALLOC, .kind = MT_KIND_ASYNC};
        fx_put(&f, &r);
    }
    fx_end(&f, 100, 70000, 0);
    fx_close(&f);
    mt_chrome_options heap = {.top_allocs = 5000}, heap_ties = {.top_allocs = 998};
    expect_same_chrome(f.path, &heap, "heap of the 5000 largest");
    expect_same_chrome(f.path, &heap_ties, "heap, ties at the threshold");
    unlink(f.path);

    cr_expect_geq(mt_test_each_gpu_fixture(same_chrome_both_ways, NULL), 10, "the GPU fixtures were found");
}
