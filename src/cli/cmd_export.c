/* `memtrace export --format chrome|folded|speedscope|html ...`: Perfetto/Chrome trace JSON (gzip
 * when OUT ends in .gz), folded stacks for flame graphs (one device), a speedscope file (every
 * device and metric), or a self-contained HTML report. Exit 0, or 2 on bad arguments, unreadable
 * traces, damaged ones with --strict, an output refused by the rules of mt_out_create, or a
 * failed write. `-f` is refused here: it meant --format once, and means --force in record and
 * report. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "memtrace/export.h"

static void usage(FILE *f)
{
    fputs("usage: memtrace export --format chrome|folded|speedscope|html [options] [-o OUT|-]\n"
          "                      TRACE|DIR...\n"
          "  a directory stands for every *.mtrace in it (a job's ranks, in rank order); with\n"
          "  several traces chrome has a process per trace (\"rank R (host)\"), timelines on one\n"
          "  wall clock, folded lines start with a \"rank R\" frame, html has the rank table\n"
          "  chrome      Trace Event JSON for ui.perfetto.dev / chrome://tracing: bytes-in-use\n"
          "              counters per device and kind, one track of allocations per device and\n"
          "              kind, peaks and failed requests as instants. OUT.gz: gzip-compressed.\n"
          "  folded      'frame;frame;... bytes' lines of ONE device for flamegraph.pl, e.g.\n"
          "              | flamegraph.pl --title 'cuda:0 live at the peak' --countname bytes\n"
          "                --colors mem > peak.svg\n"
          "  speedscope  one file for speedscope.app: a profile per device and metric, in bytes\n"
          "  html        one self-contained page to open in a browser (nothing fetched): per\n"
          "              device the usage timeline by kind with nvidia-smi's line, the peak and\n"
          "              failed requests; what was live at a moment you click; a flame graph;\n"
          "              the by-line table with source; where nvidia-smi's memory is. Several\n"
          "              traces: the rank table and a switch\n"
          "options:\n"
          "  --device N|host           folded: which device (default: the GPU with the largest\n"
          "                            peak); speedscope: only that one (default: all)\n"
          "  --metric peak|alloc|end|leak  bytes live at the device's peak (folded default),\n"
          "                            bytes ever allocated, bytes live at the end, or those of\n"
          "                            them held by the program (possible leaks); speedscope: one\n"
          "                            metric instead of all\n"
          "  --frames user|all|python|native  frames kept in stacks: user (default for Python\n"
          "                            programs: Python frames, ATen operators, autograd nodes,\n"
          "                            the allocating library), all (default otherwise), python,\n"
          "                            native; sums are unchanged\n"
          "  --long-names              whole C++ signatures and Python paths\n"
          "  --source-root DIR         html: Python files not found where the trace says are\n"
          "                            looked up under DIR (the longest tail of their path)\n"
          "  --min-bytes B             chrome: slices only for allocations >= B (k/m/g suffix)\n"
          "  --top-allocs N            chrome: slices only for the N largest allocations\n"
          "                            (default: the largest 500000, about 200 MB)\n"
          "  --driver-slices           chrome: slices for driver-internal allocations too\n"
          "                            (their bytes are in the counters either way)\n"
          "  --by category             folded, speedscope: start each stack with what its bytes\n"
          "                            are for (parameters, gradients, optimizer state,\n"
          "                            activations, ...; record --tensors; peak metric)\n"
          "  --categories FILE         your own category rules (docs/analysis.md)\n"
          "  --rank R                  only the traces of rank R\n"
          "  -o OUT                    output file, '-' = stdout (default); written under a\n"
          "                            temporary name and renamed when complete, so a failure\n"
          "                            leaves no partial file\n"
          "  --force                   replace OUT if it exists (never a trace being read, never\n"
          "                            through a symbolic link)\n"
          "  --strict                  exit 2 if a trace is damaged or truncated (default: skip\n"
          "                            damaged chunks, warn on stderr and in the output)\n"
          "(-f is not an option here: write --format, or --force)\n",
          f);
}

static void progress(void *ctx, double fraction)
{
    fprintf(stderr, "\rmemtrace: %s: %3.0f%%", (const char *)ctx, fraction * 100);
    fflush(stderr);
}

/* --device: N, cuda:N or host. -1 if something else. */
static int parse_device(const char *s, int *out)
{
    if (strcmp(s, "host") == 0) {
        *out = MT_DEVICE_HOST;
        return 0;
    }
    if (strncmp(s, "cuda:", 5) == 0) s += 5;
    if (strcmp(s, "?") == 0) {
        *out = -1;
        return 0;
    }
    uint64_t v;
    if (mt_cli_parse_count(s, &v) < 0 || v > 255 || strpbrk(s, "kmgtKMGT")) return -1;
    *out = (int)v;
    return 0;
}

/* Says on stderr which GPU a folded export shows when none was asked for and the trace has
 * several (the output itself must stay pure folded lines; host memory is never the default when
 * there is a GPU, so it needs no note). */
static void say_device(mt_analysis *const *as, int n)
{
    for (int i = 0; i < n; i++) {
        const mt_device_report *d = mt_select_device(as[i], MT_DEVICE_AUTO);
        if (!d || as[i]->n_devices < 2) continue;
        char root[32];
        fprintf(stderr, "memtrace: export: %s: %s (the largest peak); the trace has %zu other "
                        "GPU%s: choose with --device N\n",
                as[i]->path, mt_device_root_name(d, root, sizeof root), as[i]->n_devices - 1,
                as[i]->n_devices == 2 ? "" : "s");
    }
}

static int analyze_surveyed(const char *path, const char *rules, mt_analysis **a, int strict,
                            mt_chrome_survey *sv)
{
    /* folded and speedscope have no place to say a trace is incomplete: stderr does */
    mt_cli_analysis_options o = {.category_rules = rules, .strict = strict, .base_dir = 1,
                                 .warn_incomplete = 1, .on_event = sv ? mt_chrome_survey_event : NULL,
                                 .event_ctx = sv};
    return mt_cli_analyze("export", path, &o, a);
}

static int analyze_one(const char *path, const char *rules, mt_analysis **a, int strict)
{
    return analyze_surveyed(path, rules, a, strict, NULL);
}

/* The earliest start on the wall clock among the traces (headers only): the chrome timelines of a
 * job's ranks are put on it. Only regular files are looked at (a pipe is read once, by its
 * analysis); ~0 when none is, and each trace then starts at 0. */
static uint64_t earliest_start(char **paths, int n)
{
    uint64_t base = ~0ull;
    char err[256];
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
        mt_reader *r = mt_reader_open(paths[i], err, sizeof err);
        if (!r) continue;
        if (mt_reader_header(r)->start_realtime_ns < base)
            base = mt_reader_header(r)->start_realtime_ns;
        mt_reader_close(r);
    }
    return base;
}

/* Chrome, folded and html stream: one analysis in memory at a time (a job's ranks). speedscope
 * shares one frame table among its profiles, so its traces are analysed together. */
static int export_traces(char **paths, int n, const char *format, const char *out_path,
                         mt_folded_options *fo, int have_device, uint64_t min_bytes,
                         uint64_t top_allocs, mt_frame_filter frames, int driver_slices,
                         const char *rules, const char *source_root, int force, int strict)
{
    int chrome = strcmp(format, "chrome") == 0, speedscope = strcmp(format, "speedscope") == 0;
    int html = strcmp(format, "html") == 0;
    int tty = isatty(2), status = 0;
    char err[512];
    mt_analysis **as = calloc((size_t)n, sizeof *as);
    if (!as) return mt_cli_fail("export: out of memory");
    if (speedscope || (!chrome && have_device)) { /* all first: a device that no trace has */
        for (int i = 0; i < n && !status; i++) status = analyze_one(paths[i], rules, &as[i], strict);
        if (!status && have_device) {
            int found = 0;
            for (int i = 0; i < n; i++) found |= mt_select_device(as[i], fo->device) != NULL;
            if (!found) status = mt_cli_fail("export: no trace has that device");
        }
    } else if (!chrome && !html) {
        status = analyze_one(paths[0], rules, &as[0], strict); /* which device each graph shows */
        if (!status) say_device(as, 1);
    }
    mt_out_options oo = {.force = force, .inputs = (const char *const *)paths, .n_inputs = (size_t)n};
    mt_out *out = status ? NULL : mt_out_create(out_path, &oo, err, sizeof err);
    if (!status && !out) status = mt_cli_fail("export: %s", err);
    if (out) {
        int rc = 0;
        err[0] = 0;
        if (chrome) {
            mt_chrome_options co = {.min_bytes = min_bytes, .top_allocs = top_allocs,
                                    .progress = tty ? progress : NULL,
                                    .progress_ctx = (void *)"chrome export", .frames = frames,
                                    .names = fo->names, .driver_slices = driver_slices};
            mt_chrome_stream *cs = mt_chrome_begin(out, &co, earliest_start(paths, n));
            if (!cs) rc = -1, snprintf(err, sizeof err, "out of memory");
            for (int i = 0; i < n && cs && rc == 0; i++) {
                mt_analysis *a = NULL;
                mt_chrome_survey *sv = mt_chrome_survey_begin(cs);
                if (!sv) {
                    rc = -1, snprintf(err, sizeof err, "out of memory");
                    break;
                }
                if ((status = analyze_surveyed(paths[i], rules, &a, strict, sv)) != 0) {
                    mt_chrome_survey_free(sv);
                    break;
                }
                rc = mt_chrome_add_surveyed(cs, a, sv, err, sizeof err); /* frees sv */
                if (tty) fputs("\r\033[K", stderr);
                mt_analysis_free(a);
            }
            if (cs && !status && rc == 0) rc = mt_chrome_end(cs);
            else mt_chrome_abandon(cs);
        } else if (html) {
            mt_html_options ho = {.frames = frames, .names = fo->names, .source_root = source_root,
                                  .progress = tty ? mt_cli_progress : NULL,
                                  .progress_ctx = (void *)"html export"};
            mt_html_stream *hs = mt_html_begin(out, &ho, err, sizeof err);
            if (!hs) rc = -1;
            for (int i = 0; i < n && hs && rc == 0; i++) {
                mt_analysis *a = NULL;
                if ((status = analyze_one(paths[i], rules, &a, strict)) != 0) break;
                rc = mt_html_add(hs, a, err, sizeof err);
                if (tty) fputs("\r\033[K", stderr);
                mt_analysis_free(a);
            }
            if (hs && mt_html_end(hs, !status && rc == 0, err, sizeof err) < 0 && rc == 0) rc = -1;
        } else if (speedscope) {
            rc = mt_export_speedscope(out, as, (size_t)n, fo);
            if (rc < 0) snprintf(err, sizeof err, "out of memory");
        } else {
            fo->trace_frame = n > 1;
            for (int i = 0; i < n && rc == 0 && !status; i++) {
                if (!as[i] && (status = analyze_one(paths[i], rules, &as[i], strict)) != 0) break;
                rc = mt_export_folded(out, &as[i], 1, fo);
                mt_analysis_free(as[i]);
                as[i] = NULL;
            }
            if (rc < 0) snprintf(err, sizeof err, "out of memory");
        }
        if (status || rc < 0) { /* nothing half written is left under OUT's name */
            mt_out_discard(out);
            if (!status)
                status = mt_cli_fail("export: %s (%s not written)", err, mt_cli_out_name(out_path));
        } else if (mt_out_close(out) < 0) {
            status = mt_cli_fail("export: writing %s failed: %s", mt_cli_out_name(out_path),
                                 strerror(errno));
        }
    }
    for (int i = 0; i < n; i++) mt_analysis_free(as[i]);
    free(as);
    return status;
}

static int run(int argc, char **argv, char **traces)
{
    const char *format = NULL, *metric = NULL, *out_path = "-", *rules = NULL;
    const char *source_root = NULL;
    uint64_t min_bytes = 0, top_allocs = 0;
    int have_min = 0, have_top = 0, have_device = 0, n = 0, long_names = 0, driver_slices = 0;
    int device = MT_DEVICE_AUTO, want_rank = -1, by_category = 0, force = 0, strict = 0;
    uint64_t rank_arg = 0;
    mt_frame_filter frames = MT_FRAMES_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (mt_cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--format") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("export: --format needs chrome, folded, speedscope or html");
            format = argv[++i];
        } else if (strcmp(a, "-f") == 0) {
            return mt_cli_fail("export: -f is ambiguous: write --format chrome|folded|speedscope|html, "
                               "or --force to replace an existing output");
        } else if (strcmp(a, "--force") == 0) {
            force = 1;
        } else if (strcmp(a, "--strict") == 0) {
            strict = 1;
        } else if (strncmp(a, "--format=", 9) == 0) {
            format = a + 9;
        } else if (strcmp(a, "--metric") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("export: --metric needs peak, alloc, end or leak");
            metric = argv[++i];
        } else if (strcmp(a, "--device") == 0) {
            if (i + 1 >= argc || parse_device(argv[++i], &device) < 0)
                return mt_cli_fail("export: --device needs a CUDA ordinal (0, cuda:1) or host");
            have_device = 1;
        } else if (strcmp(a, "--min-bytes") == 0) {
            if (i + 1 >= argc || mt_cli_parse_count(argv[++i], &min_bytes) < 0)
                return mt_cli_fail("export: --min-bytes needs a size (e.g. 1048576 or 1m)");
            have_min = 1;
        } else if (strcmp(a, "--top-allocs") == 0) {
            if (i + 1 >= argc || mt_cli_parse_count(argv[++i], &top_allocs) < 0 || !top_allocs)
                return mt_cli_fail("export: --top-allocs needs a positive number");
            have_top = 1;
        } else if (strcmp(a, "--frames") == 0) {
            if (i + 1 >= argc || mt_cli_parse_frames(argv[++i], &frames) < 0)
                return mt_cli_fail("export: --frames needs user, all, python or native");
        } else if (strcmp(a, "--long-names") == 0) {
            long_names = 1;
        } else if (strcmp(a, "--source-root") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("export: --source-root needs a directory");
            source_root = argv[++i];
        } else if (strcmp(a, "--by") == 0) {
            if (i + 1 >= argc || strcmp(argv[++i], "category") != 0)
                return mt_cli_fail("export: --by needs 'category'");
            by_category = 1;
        } else if (strcmp(a, "--categories") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("export: --categories needs a rules file");
            rules = argv[++i];
        } else if (strcmp(a, "--driver-slices") == 0) {
            driver_slices = 1;
        } else if (strcmp(a, "--rank") == 0) {
            if (i + 1 >= argc || mt_cli_parse_count(argv[++i], &rank_arg) < 0 ||
                rank_arg > 0x7fffffff)
                return mt_cli_fail("export: --rank needs a rank number");
            want_rank = (int)rank_arg;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("export: -o needs a file name or -");
            out_path = argv[++i];
        } else if (strcmp(a, "--") == 0) {
            while (++i < argc) traces[n++] = argv[i];
        } else if (a[0] == '-' && a[1]) {
            return mt_cli_fail("export: unknown option '%s' (see memtrace export --help)", a);
        } else {
            traces[n++] = argv[i];
        }
    }
    if (!format) return mt_cli_fail("export: --format chrome|folded|speedscope|html is required");
    int chrome = strcmp(format, "chrome") == 0, speedscope = strcmp(format, "speedscope") == 0;
    int html = strcmp(format, "html") == 0;
    if (!chrome && !speedscope && !html && strcmp(format, "folded") != 0)
        return mt_cli_fail("export: unknown format '%s' (chrome, folded, speedscope or html)", format);
    if (html && (metric || have_device))
        return mt_cli_fail("export: --format html shows every device and metric (no --metric, --device)");
    if (source_root && !html) return mt_cli_fail("export: --source-root applies to --format html");
    mt_folded_options fo = {.metric = MT_METRIC_PEAK, .all_metrics = speedscope && !metric,
                            .device = device, .frames = frames,
                            .names = long_names ? MT_NAME_LONG : MT_NAME_SHORT};
    if (metric) {
        if (chrome) return mt_cli_fail("export: --metric applies to --format folded and speedscope");
        int m = -1;
        for (int k = 0; k < MT_METRICS_; k++)
            if (strcmp(metric, mt_metric_name((mt_folded_metric)k)) == 0) m = k;
        if (m < 0) return mt_cli_fail("export: unknown metric '%s' (peak, alloc, end or leak)", metric);
        fo.metric = (mt_folded_metric)m;
    }
    fo.by_category = by_category;
    if (by_category && (chrome || html || fo.metric != MT_METRIC_PEAK || fo.all_metrics))
        return mt_cli_fail("export: --by category applies to folded and speedscope, metric peak "
                           "(--metric peak for speedscope)");
    if (!chrome && (have_min || have_top || driver_slices))
        return mt_cli_fail("export: --min-bytes, --top-allocs and --driver-slices apply to --format chrome");
    if (chrome && have_device)
        return mt_cli_fail("export: --device applies to --format folded and speedscope");
    if (n <= 0) return mt_cli_fail("export: no trace given (see memtrace export --help)");

    char **paths;
    int np;
    if (mt_cli_collect_traces(traces, n, &paths, &np) != 0) return 2;
    if (want_rank >= 0) { /* --rank R: the traces of that rank only */
        int k = 0;
        for (int i = 0; i < np; i++) {
            int32_t r;
            if (mt_cli_trace_rank(paths[i], &r) && r == want_rank) paths[k++] = paths[i];
            else free(paths[i]);
        }
        np = k;
    }
    if (np <= 0) {
        mt_cli_free_traces(paths, np);
        return mt_cli_fail(want_rank >= 0 ? "export: no trace of that rank"
                                          : "export: no trace found in what was given");
    }
    int status = export_traces(paths, np, format, out_path, &fo, have_device, min_bytes,
                               top_allocs, frames, driver_slices, rules, source_root, force,
                               strict);
    mt_cli_free_traces(paths, np);
    return status;
}

int mt_cmd_export(int argc, char **argv)
{
    /* Traces may come before, between or after options; "--" ends the options. */
    char **traces = calloc((size_t)argc + 1, sizeof *traces);
    if (!traces) return mt_cli_fail("export: out of memory");
    int status = run(argc, argv, traces);
    free(traces);
    return status;
}
