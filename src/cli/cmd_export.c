/* `memtrace export --format chrome|folded ...`: Perfetto/Chrome trace JSON (gzip when OUT ends in
 * .gz) or folded stacks for flame graphs. Exit 0, or 2 on bad arguments, unreadable traces, damaged
 * ones with --strict, an output refused by the rules of mt_out_create, or a failed write.
 * `-f` is refused here: it meant --format once, and means --force in record and report. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "memtrace/export.h"

static void usage(FILE *f)
{
    fputs("usage: memtrace export --format chrome|folded [options] [-o OUT|-] TRACE...\n"
          "  chrome  Trace Event JSON for ui.perfetto.dev / chrome://tracing: bytes-in-use\n"
          "          counters per device and kind, one slice per allocation, peaks and failed\n"
          "          requests as instants. OUT ending in .gz is gzip-compressed.\n"
          "  folded  'frame;frame;... bytes' lines for flamegraph.pl / speedscope; the root\n"
          "          frame is the device (cuda:N, host).\n"
          "options:\n"
          "  --metric peak|alloc|leak  folded: bytes live at each device's peak (default),\n"
          "                            bytes ever allocated, or bytes live at the end\n"
          "  --min-bytes B             chrome: slices only for allocations >= B (k/m/g suffix)\n"
          "  --top-allocs N            chrome: slices only for the N largest allocations\n"
          "                            (default: the largest 500000, about 200 MB)\n"
          "  --frames all|python|native  frames kept in stacks (default all); python keeps\n"
          "                            only Python frames (folded sums are unchanged)\n"
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

/* A count or byte size: digits with an optional k/m/g/t suffix (binary). -1 if malformed. */
int mt_cli_parse_count(const char *s, uint64_t *out);
int mt_cli_parse_count(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned shift = 0;
    if (*end) {
        const char *units = "kmgt", *u = strchr(units, *end | 0x20);
        if (!u || !*u) return -1;
        shift = 10u * (unsigned)(u - units + 1);
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end) return -1;
        if (v > (~0ull >> shift)) return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* --frames: all | python | native. -1 if something else. */
int mt_cli_parse_frames(const char *s, mt_frame_filter *out);
int mt_cli_parse_frames(const char *s, mt_frame_filter *out)
{
    if (strcmp(s, "all") == 0) *out = MT_FRAMES_ALL;
    else if (strcmp(s, "python") == 0) *out = MT_FRAMES_PYTHON;
    else if (strcmp(s, "native") == 0) *out = MT_FRAMES_NATIVE;
    else return -1;
    return 0;
}

static void progress(void *ctx, double fraction)
{
    fprintf(stderr, "\rmemtrace: %s: %3.0f%%", (const char *)ctx, fraction * 100);
    fflush(stderr);
}

static void progress2(void *ctx, int pass, double fraction)
{
    fprintf(stderr, "\rmemtrace: %s: pass %d: %3.0f%%", (const char *)ctx, pass, fraction * 100);
    fflush(stderr);
}

static int run(int argc, char **argv, char **traces)
{
    const char *format = NULL, *metric = NULL, *out_path = "-";
    uint64_t min_bytes = 0, top_allocs = 0;
    int have_min = 0, have_top = 0, n = 0, force = 0, strict = 0;
    mt_frame_filter frames = MT_FRAMES_ALL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (mt_cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--format") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("export: --format needs chrome or folded");
            format = argv[++i];
        } else if (strcmp(a, "-f") == 0) {
            return mt_cli_fail("export: -f is ambiguous: write --format chrome|folded, or --force "
                               "to replace an existing output");
        } else if (strcmp(a, "--force") == 0) {
            force = 1;
        } else if (strcmp(a, "--strict") == 0) {
            strict = 1;
        } else if (strncmp(a, "--format=", 9) == 0) {
            format = a + 9;
        } else if (strcmp(a, "--metric") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("export: --metric needs peak, alloc or leak");
            metric = argv[++i];
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
                return mt_cli_fail("export: --frames needs all, python or native");
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
    if (!format) return mt_cli_fail("export: --format chrome|folded is required");
    int chrome = strcmp(format, "chrome") == 0;
    if (!chrome && strcmp(format, "folded") != 0)
        return mt_cli_fail("export: unknown format '%s' (chrome or folded)", format);
    mt_folded_metric m = MT_METRIC_PEAK;
    if (metric) {
        if (chrome) return mt_cli_fail("export: --metric applies to --format folded");
        if (strcmp(metric, "peak") == 0) m = MT_METRIC_PEAK;
        else if (strcmp(metric, "alloc") == 0) m = MT_METRIC_ALLOC;
        else if (strcmp(metric, "leak") == 0) m = MT_METRIC_LEAK;
        else return mt_cli_fail("export: unknown metric '%s' (peak, alloc or leak)", metric);
    }
    if (!chrome && (have_min || have_top))
        return mt_cli_fail("export: --min-bytes and --top-allocs apply to --format chrome");
    if (n <= 0) return mt_cli_fail("export: no trace given (see memtrace export --help)");

    mt_analysis **as = calloc((size_t)n, sizeof *as);
    if (!as) return mt_cli_fail("export: out of memory");
    int status = 0, tty = isatty(2);
    char err[512];
    for (int i = 0; i < n && !status; i++) {
        mt_analyze_options o = {.progress = tty ? progress2 : NULL,
                                .progress_ctx = traces[i], .strict = strict};
        int rc = mt_analyze(traces[i], &o, &as[i], err, sizeof err);
        if (tty) fputs("\r\033[K", stderr);
        if (rc < 0) status = mt_cli_fail("export: %s", err);
        else mt_cli_warn_incomplete("export", as[i]);
    }
    mt_out_options oo = {.force = force, .inputs = (const char *const *)traces,
                         .n_inputs = (size_t)n};
    mt_out *out = status ? NULL : mt_out_create(out_path, &oo, err, sizeof err);
    if (!status && !out) status = mt_cli_fail("export: %s", err);
    if (out) {
        int rc;
        err[0] = 0;
        if (chrome) {
            mt_chrome_options co = {.min_bytes = min_bytes, .top_allocs = top_allocs,
                                    .progress = tty ? progress : NULL,
                                    .progress_ctx = (void *)"chrome export", .frames = frames};
            rc = mt_export_chrome(out, as, (size_t)n, &co, err, sizeof err);
            if (tty) fputs("\r\033[K", stderr);
        } else {
            rc = mt_export_folded_ex(out, as, (size_t)n, m, frames);
            if (rc < 0) snprintf(err, sizeof err, "out of memory");
        }
        if (rc < 0) {
            mt_out_discard(out);
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

int mt_cmd_export(int argc, char **argv)
{
    /* Traces may come before, between or after options; "--" ends the options. */
    char **traces = calloc((size_t)argc + 1, sizeof *traces);
    if (!traces) return mt_cli_fail("export: out of memory");
    int status = run(argc, argv, traces);
    free(traces);
    return status;
}
