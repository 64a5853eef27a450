/* `memtrace diff BASE NEW [--json|--markdown] [--fail-on-increase PCT] [--top N]`: what changed
 * between two runs, per GPU: the peak (bytes and %), allocated and reserved peaks, live at exit,
 * failed requests; the stacks and Python lines whose bytes at the peak grew or shrank most, new
 * and gone; what the program held at exit. Stacks are matched by frame names, never by address
 * (compare.c), so runs on other machines, pids and builds compare. Exit 0; 1 when a peak grew by
 * more than --fail-on-increase; 2 for bad input. Output goes to standard output only. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "memtrace/export.h"

static void usage(FILE *f)
{
    fputs("usage: memtrace diff [options] BASE NEW\n"
          "  What changed from trace BASE (e.g. the main branch's run) to trace NEW, per GPU:\n"
          "  peak, allocated and reserved peak, live at exit, held by the program at exit,\n"
          "  failed requests; the stacks and Python lines at the peak that grew or shrank most,\n"
          "  new and gone. Stacks match by frame names (user view, short names; line numbers\n"
          "  ignored when that is the only difference), never by address.\n"
          "  Exit 0; 1 when --fail-on-increase is exceeded; 2 for bad input.\n"
          "options:\n"
          "  --fail-on-increase PCT  exit 1 when a GPU's peak grew by more than PCT percent\n"
          "                         (\"10\" or \"10%\"; a GPU with no memory in BASE counts as\n"
          "                         grown without bound)\n"
          "  --json                 machine-readable (\"schema\": docs/json.md)\n"
          "  --markdown             a summary for $GITHUB_STEP_SUMMARY or a pull-request comment\n"
          "  --top N                entries per list (default 10; Markdown 5)\n",
          f);
}

int mt_cmd_diff(int argc, char **argv)
{
    mt_diff_options o = {.format = MT_FORMAT_TEXT};
    const char *paths[2];
    int n = 0, formats = 0;
    uint64_t top = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (mt_cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            o.format = MT_FORMAT_JSON;
            formats++;
        } else if (strcmp(a, "--markdown") == 0) {
            o.format = MT_FORMAT_MARKDOWN;
            formats++;
        } else if (strcmp(a, "--fail-on-increase") == 0) {
            if (i + 1 >= argc || mt_cli_parse_percent(argv[++i], &o.fail_pct) < 0)
                return mt_cli_fail("diff: --fail-on-increase needs a percentage (10, 2.5%%)");
            o.gate = 1;
        } else if (strcmp(a, "--top") == 0) {
            if (i + 1 >= argc || mt_cli_parse_uint(argv[++i], &top) < 0 || top == 0 || top > 256)
                return mt_cli_fail("diff: --top needs a number from 1 to 256");
        } else if (strcmp(a, "--") == 0) {
            while (++i < argc) {
                if (n == 2) return mt_cli_fail("diff: two traces, BASE and NEW (see memtrace diff --help)");
                paths[n++] = argv[i];
            }
        } else if (a[0] == '-' && a[1]) {
            return mt_cli_fail("diff: unknown option '%s' (see memtrace diff --help)", a);
        } else {
            if (n == 2) return mt_cli_fail("diff: two traces, BASE and NEW (see memtrace diff --help)");
            paths[n++] = a;
        }
    }
    if (formats > 1) return mt_cli_fail("diff: --json and --markdown exclude each other");
    if (n != 2) return mt_cli_fail("diff: two traces, BASE and NEW (see memtrace diff --help)");
    o.top = (size_t)top;
    mt_analysis *a[2] = {NULL, NULL};
    int status = mt_cli_analyze("diff", paths[0], NULL, &a[0]);
    if (!status) status = mt_cli_analyze("diff", paths[1], NULL, &a[1]);
    mt_diff *d = NULL;
    if (!status && mt_diff_analyses(a[0], a[1], &d) < 0) status = mt_cli_fail("diff: out of memory");
    if (!status) {
        mt_out *out = mt_out_from_file(stdout);
        if (!out || mt_export_diff(out, d, &o) < 0) {
            if (out) mt_out_close(out);
            status = mt_cli_fail("diff: out of memory");
        } else {
            status = mt_cli_close_stdout("diff", out);
        }
    }
    int exceeded = !status && o.gate && mt_diff_exceeds(d, o.fail_pct);
    mt_diff_free(d);
    mt_analysis_free(a[0]);
    mt_analysis_free(a[1]);
    return status ? status : exceeded ? 1 : 0;
}
