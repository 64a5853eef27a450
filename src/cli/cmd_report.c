/* `memtrace report [--json] [--top N] [--frames all|python|native] [--full-stacks]
 *  [--by-line [--file PATH]] [-o OUT [--force]] [--strict] TRACE...`: per device the peak, what
 * was live then and who allocated it, leaks, failed requests with forensics. Exit 0, or 2 on bad
 * arguments, unreadable traces, a refused output or a failed write (a truncated or damaged trace is
 * analysed and flagged, not an error, unless --strict). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "memtrace/export.h"

static void usage(FILE *f)
{
    fputs("usage: memtrace report [options] TRACE...\n"
          "  per GPU: peak bytes and when, where the memory is (nvidia-smi total = context &\n"
          "  driver + allocator reserved + other libraries), what was live at the peak by\n"
          "  stack, leaks (live at the end), failed requests with what was live then.\n"
          "  --json              machine-readable (several traces: {\"traces\": [...]})\n"
          "  --top N             stacks (or lines) shown per list (default 10)\n"
          "  --frames W          all (default), python (Python frames only) or native\n"
          "  --full-stacks       every frame, CUDA's own included (default: long chains elided)\n"
          "  --by-line           bytes per Python source line (allocated, live at the peak)\n"
          "  --file PATH         with --by-line: attribute to the innermost frame in PATH\n"
          "  -o OUT              write to OUT instead of stdout (OUT.gz: gzip); written under a\n"
          "                      temporary name and renamed when complete\n"
          "  -f, --force         replace OUT if it exists (never a trace being read, never\n"
          "                      through a symbolic link)\n"
          "  --strict            exit 2 if a trace is damaged or truncated (default: damaged\n"
          "                      chunks are skipped and the report says what was lost)\n",
          f);
}

/* Shows "pass N: P%" on stderr, only when stderr is a terminal. */
static void progress(void *ctx, int pass, double fraction)
{
    fprintf(stderr, "\rmemtrace: %s: pass %d: %3.0f%%", (const char *)ctx, pass, fraction * 100);
    fflush(stderr);
}

int mt_cli_parse_count(const char *s, uint64_t *out); /* defined in cmd_export.c */
int mt_cli_parse_frames(const char *s, mt_frame_filter *out); /* defined in cmd_export.c */

static int run(int argc, char **argv, char **traces)
{
    int json = 0, full = 0, by_line = 0, force = 0, strict = 0;
    uint64_t top = 10;
    mt_frame_filter frames = MT_FRAMES_ALL;
    const char *file = NULL;
    const char *out_path = "-";
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (mt_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--top") == 0) {
            if (i + 1 >= argc || mt_cli_parse_count(argv[++i], &top) < 0 || top == 0)
                return mt_cli_fail("report: --top needs a positive number");
        } else if (strcmp(argv[i], "--frames") == 0) {
            if (i + 1 >= argc || mt_cli_parse_frames(argv[++i], &frames) < 0)
                return mt_cli_fail("report: --frames needs all, python or native");
        } else if (strcmp(argv[i], "--full-stacks") == 0) {
            full = 1;
        } else if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--strict") == 0) {
            strict = 1;
        } else if (strcmp(argv[i], "--by-line") == 0) {
            by_line = 1;
        } else if (strcmp(argv[i], "--file") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) return mt_cli_fail("report: --file needs a path");
            file = argv[++i];
        } else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("report: -o needs a file name");
            out_path = argv[++i];
        } else if (strcmp(argv[i], "--") == 0) {
            while (++i < argc) traces[n++] = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return mt_cli_fail("report: unknown option '%s' (see memtrace report --help)", argv[i]);
        } else {
            traces[n++] = argv[i];
        }
    }
    if (n <= 0) return mt_cli_fail("report: no trace given (see memtrace report --help)");
    if (file && !by_line) return mt_cli_fail("report: --file applies to --by-line");
    mt_analysis **as = calloc((size_t)n, sizeof *as);
    if (!as) return mt_cli_fail("report: out of memory");
    int status = 0;
    char err[512];
    int tty = isatty(2);
    char cwd_buf[4096];
    const char *cwd = getcwd(cwd_buf, sizeof cwd_buf);
    for (int i = 0; i < n && !status; i++) {
        mt_analyze_options o = {.progress = tty ? progress : NULL, .progress_ctx = traces[i],
                                .strict = strict};
        int rc = mt_analyze(traces[i], &o, &as[i], err, sizeof err);
        if (tty) fputs("\r\033[K", stderr);
        if (rc < 0) {
            status = mt_cli_fail("report: %s", err);
        } else {
            if (json || strcmp(out_path, "-") != 0) mt_cli_warn_incomplete("report", as[i]);
            if (cwd) mt_frames_set_base_dir(as[i]->frames, cwd); /* short Python paths */
        }
    }
    if (!status) {
        mt_out_options oo = {.force = force, .inputs = (const char *const *)traces,
                             .n_inputs = (size_t)n};
        mt_out *out = mt_out_create(out_path, &oo, err, sizeof err);
        if (!out) {
            status = mt_cli_fail("report: %s", err);
        } else {
            mt_report_options ro = {.top = (size_t)top, .frames = frames, .full_stacks = full,
                                    .by_line = by_line, .by_line_file = file};
            int rc = 0;
            if (json) {
                rc = mt_report_json(out, as, (size_t)n, &ro);
            } else {
                for (int i = 0; i < n && rc == 0; i++) {
                    if (i) mt_out_puts(out, "\n");
                    rc = mt_report_text(out, as[i], &ro);
                }
            }
            if (rc < 0) {
                mt_out_discard(out);
                status = mt_cli_fail("report: out of memory (%s not written)",
                                     mt_cli_out_name(out_path));
            } else if (mt_out_close(out) < 0) {
                status = mt_cli_fail("report: writing %s failed: %s", mt_cli_out_name(out_path),
                                     strerror(errno));
            }
        }
    }
    for (int i = 0; i < n; i++) mt_analysis_free(as[i]);
    free(as);
    return status;
}

int mt_cmd_report(int argc, char **argv)
{
    /* Traces may come before, between or after options; "--" ends the options. */
    char **traces = calloc((size_t)argc + 1, sizeof *traces);
    if (!traces) return mt_cli_fail("report: out of memory");
    int status = run(argc, argv, traces);
    free(traces);
    return status;
}
