/* `memtrace report [--json|--markdown] [--top N] [--frames user|all|python|native] [--long-names] [--full-stacks]
 *  [--by-line [--file PATH]] [-o OUT] TRACE...`: per device the peak, what was live then
 * and who allocated it, leaks, failed requests with forensics. Exit 0, or 2 on bad arguments and
 * unreadable or corrupt traces (a truncated trace is analysed and flagged, not an error). */
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
          "  stack, what is live at the end and who holds it (an allocator's cache or a\n"
          "  library's workspace is not a leak), failed requests with what was live then.\n"
          "  --json              machine-readable (several traces: {\"traces\": [...]};\n"
          "                      \"schema\" and every field: docs/json.md)\n"
          "  --markdown          a short summary for $GITHUB_STEP_SUMMARY or a pull-request\n"
          "                      comment: a table of every GPU (peak, allocated and reserved\n"
          "                      peak, live at exit, failed requests), the top stacks and\n"
          "                      Python lines at each peak (--top, default 5 here)\n"
          "  --top N             stacks (or lines) shown per list (default 10)\n"
          "  --frames W          user (default for Python programs: Python frames, ATen\n"
          "                      operators, autograd nodes, the allocating library), all\n"
          "                      (default otherwise), python or native\n"
          "  --long-names        whole C++ signatures and Python paths\n"
          "  --full-stacks       every frame, CUDA's own included (default: long chains elided)\n"
          "  --by-line           bytes per Python source line (allocated, live at the peak)\n"
          "  --file PATH         with --by-line: attribute to the innermost frame in PATH\n"
          "  -o OUT              write to OUT instead of stdout (OUT.gz: gzip)\n",
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
    int json = 0, markdown = 0, full = 0, by_line = 0;
    uint64_t top = 0;
    mt_frame_filter frames = MT_FRAMES_AUTO;
    int long_names = 0;
    const char *file = NULL;
    const char *out_path = "-";
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (mt_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--markdown") == 0) {
            markdown = 1;
        } else if (strcmp(argv[i], "--top") == 0) {
            if (i + 1 >= argc || mt_cli_parse_count(argv[++i], &top) < 0 || top == 0)
                return mt_cli_fail("report: --top needs a positive number");
        } else if (strcmp(argv[i], "--frames") == 0) {
            if (i + 1 >= argc || mt_cli_parse_frames(argv[++i], &frames) < 0)
                return mt_cli_fail("report: --frames needs user, all, python or native");
        } else if (strcmp(argv[i], "--long-names") == 0) {
            long_names = 1;
        } else if (strcmp(argv[i], "--full-stacks") == 0) {
            full = 1;
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
    if (json && markdown) return mt_cli_fail("report: --json and --markdown exclude each other");
    if (markdown && (by_line || full))
        return mt_cli_fail("report: --markdown has its own layout (the top stacks and Python lines; "
                           "no --by-line or --full-stacks)");
    if (!top) top = markdown ? 5 : 10;
    mt_analysis **as = calloc((size_t)n, sizeof *as);
    if (!as) return mt_cli_fail("report: out of memory");
    int status = 0;
    char err[512];
    int tty = isatty(2);
    char cwd_buf[4096];
    const char *cwd = getcwd(cwd_buf, sizeof cwd_buf);
    for (int i = 0; i < n && !status; i++) {
        mt_analyze_options o = {.progress = tty ? progress : NULL, .progress_ctx = traces[i]};
        int rc = mt_analyze(traces[i], &o, &as[i], err, sizeof err);
        if (tty) fputs("\r\033[K", stderr);
        if (rc < 0) status = mt_cli_fail("report: %s", err);
        else if (cwd) mt_frames_set_base_dir(as[i]->frames, cwd); /* short Python paths */
    }
    if (!status) {
        mt_out *out = mt_out_open(out_path, err, sizeof err);
        if (!out) {
            status = mt_cli_fail("report: %s", err);
        } else {
            mt_report_options ro = {.top = (size_t)top, .frames = frames,
                                    .names = long_names ? MT_NAME_LONG : MT_NAME_SHORT,
                                    .full_stacks = full,
                                    .by_line = by_line, .by_line_file = file};
            int rc = 0;
            if (json) {
                rc = mt_report_json(out, as, (size_t)n, &ro);
            } else if (markdown) {
                rc = mt_report_markdown(out, as, (size_t)n, &ro);
            } else {
                for (int i = 0; i < n && rc == 0; i++) {
                    if (i) mt_out_puts(out, "\n");
                    rc = mt_report_text(out, as[i], &ro);
                }
            }
            if (mt_out_close(out) < 0 || rc < 0)
                status = mt_cli_fail("report: writing %s failed: %s", out_path,
                                     rc < 0 ? "out of memory" : strerror(errno));
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
