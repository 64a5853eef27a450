/* `memtrace check TRACE|DIR... [--device N] [--max-peak SIZE] [--max-allocated-peak SIZE]
 *  [--max-live-at-exit SIZE] [--max-failed N] [--max-other-gpus SIZE] [--json|--markdown]
 *  [--top N]`: memory budgets for
 * CI. Every budget given is checked on every trace (the ranks of a run; a directory stands for
 * the traces in it, ordered by rank) and every GPU of it (or GPU N), one analysis at a time. Exit 0 when every budget holds, 1 when one is exceeded, 2 for bad input: bad arguments,
 * an unreadable trace, a budget that cannot be checked on a trace (no tensors for
 * --max-allocated-peak, no such GPU), a failed write. Bad input wins over a breach: a gate must
 * not pass or fail on what it could not read. Output goes to standard output only (append it to
 * $GITHUB_STEP_SUMMARY with >>). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "memtrace/export.h"

static void usage(FILE *f)
{
    fputs("usage: memtrace check [options] TRACE|DIR...\n"
          "  Checks memory budgets on traces for CI: every trace (the ranks of a job; a\n"
          "  directory stands for the traces in it) and every GPU of each.\n"
          "  Exit 0: every budget holds; 1: one is exceeded; 2: bad input (unreadable trace,\n"
          "  bad size, a budget the trace cannot answer).\n"
          "budgets (at least one; SIZE: 2GiB, 1500MB, 1.5G, 300M, or bytes; K/M/G/T and\n"
          "KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of 1000):\n"
          "  --max-peak SIZE          each GPU's peak of device memory in use (report's `peak`)\n"
          "  --max-allocated-peak SIZE  PyTorch's max_memory_allocated: the tensor peak of a\n"
          "                           trace recorded with `memtrace record --tensors` (or the\n"
          "                           cudaMallocAsync peak of --tensors=async); refused on a\n"
          "                           trace without tensors\n"
          "  --max-live-at-exit SIZE  what the program still holds at exit (leaks, or tensors\n"
          "                           still referenced); an allocator's cache, libraries'\n"
          "                           workspaces and the driver's own allocations are not counted\n"
          "  --max-failed N           failed allocation requests (out of memory), in the trace\n"
          "                           (with --device: on that GPU)\n"
          "  --max-other-gpus SIZE    what a trace holds on each GPU other than its own\n"
          "                           (LOCAL_RANK's, else its largest peak): NVML's number, its\n"
          "                           CUDA context included, as when a rank makes a CUDA call\n"
          "                           or loads a checkpoint before torch.cuda.set_device\n"
          "                           (--max-other-gpus 0: none at all)\n"
          "options:\n"
          "  --device N               only GPU N (N or cuda:N; default: every GPU)\n"
          "  --json                   machine-readable (\"schema\": docs/json.md)\n"
          "  --markdown               a summary for $GITHUB_STEP_SUMMARY or a pull-request comment\n"
          "  --top N                  stacks shown for a budget exceeded (default 5)\n"
          "  On a breach: which budget, on which trace and GPU, by how much, and the stacks\n"
          "  that make the number (user view for Python programs).\n",
          f);
}

static int run(int argc, char **argv, char **traces)
{
    mt_budgets b = {.device = MT_BUDGET_ALL_DEVICES};
    mt_doc_format format = MT_FORMAT_TEXT;
    uint64_t top = 5;
    int n = 0, formats = 0;
    static const struct {
        const char *opt;
        mt_budget_kind kind;
    } budget_opts[] = {{"--max-peak", MT_BUDGET_PEAK},
                       {"--max-allocated-peak", MT_BUDGET_ALLOCATED_PEAK},
                       {"--max-live-at-exit", MT_BUDGET_LIVE_AT_EXIT},
                       {"--max-failed", MT_BUDGET_FAILED},
                       {"--max-other-gpus", MT_BUDGET_OTHER_GPUS}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        size_t k = 0;
        while (k < sizeof budget_opts / sizeof *budget_opts && strcmp(a, budget_opts[k].opt)) k++;
        if (mt_cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (k < sizeof budget_opts / sizeof *budget_opts) {
            mt_budget_kind kind = budget_opts[k].kind;
            if (i + 1 >= argc) return mt_cli_fail("check: %s needs a value", a);
            const char *v = argv[++i];
            int bad = kind == MT_BUDGET_FAILED ? mt_cli_parse_uint(v, &b.limit[kind]) < 0
                                               : mt_cli_parse_size(v, &b.limit[kind]) < 0;
            if (bad)
                return mt_cli_fail(kind == MT_BUDGET_FAILED
                                       ? "check: %s needs a count, not '%s'"
                                       : "check: %s needs a size (2GiB, 1500MB, 1.5G, bytes), not '%s'",
                                   a, v);
            b.set[kind] = 1;
        } else if (strcmp(a, "--device") == 0) {
            if (i + 1 >= argc || mt_cli_parse_gpu(argv[++i], &b.device) < 0)
                return mt_cli_fail("check: --device needs a GPU ordinal (N or cuda:N)");
        } else if (strcmp(a, "--json") == 0) {
            format = MT_FORMAT_JSON;
            formats++;
        } else if (strcmp(a, "--markdown") == 0) {
            format = MT_FORMAT_MARKDOWN;
            formats++;
        } else if (strcmp(a, "--top") == 0) {
            if (i + 1 >= argc || mt_cli_parse_uint(argv[++i], &top) < 0 || top == 0 || top > 1000)
                return mt_cli_fail("check: --top needs a number from 1 to 1000");
        } else if (strcmp(a, "--") == 0) {
            while (++i < argc) traces[n++] = argv[i];
        } else if (a[0] == '-' && a[1]) {
            return mt_cli_fail("check: unknown option '%s' (see memtrace check --help)", a);
        } else {
            traces[n++] = argv[i];
        }
    }
    if (formats > 1) return mt_cli_fail("check: --json and --markdown exclude each other");
    int any = 0;
    for (int k = 0; k < MT_BUDGETS_; k++) any |= b.set[k];
    if (!any)
        return mt_cli_fail("check: no budget given (--max-peak, --max-allocated-peak, "
                           "--max-live-at-exit, --max-failed or --max-other-gpus; see memtrace "
                           "check --help)");
    if (n <= 0) return mt_cli_fail("check: no trace given (see memtrace check --help)");
    char **paths;
    int np;
    if (mt_cli_collect_traces(traces, n, &paths, &np) != 0) return 2;
    if (np == 0) {
        mt_cli_free_traces(paths, np);
        return mt_cli_fail("check: no trace found in what was given");
    }
    /* one analysis at a time: the verdicts of each go out before the next trace is read */
    mt_out *out = mt_out_from_file(stdout);
    mt_check_options co = {.format = format, .budgets = &b, .top = (size_t)top};
    mt_check_stream *cs = out ? mt_check_begin(out, &co) : NULL;
    int status = cs ? 0 : mt_cli_fail("check: out of memory or no temporary file");
    int exceeded = 0;
    char err[512];
    for (int i = 0; i < np && !status; i++) {
        mt_analysis *a = NULL;
        mt_verdict *v = NULL;
        size_t nv = 0;
        status = mt_cli_analyze("check", paths[i], NULL, &a);
        if (!status && mt_check_budgets(a, &b, &v, &nv, err, sizeof err) < 0)
            status = mt_cli_fail("check: %s", err);
        if (!status && mt_check_add(cs, a, v, nv) < 0)
            status = mt_cli_fail("check: out of memory or a temporary file failed");
        for (size_t k = 0; k < nv; k++) exceeded |= v[k].exceeded;
        mt_verdicts_free(v, nv);
        mt_analysis_free(a);
    }
    /* with bad input no overall verdict is written: a gate must not read one */
    if (cs && mt_check_end(cs, !status) < 0 && !status)
        status = mt_cli_fail("check: out of memory or a temporary file failed");
    if (out) {
        int rc = mt_cli_close_stdout("check", out);
        if (!status) status = rc;
    }
    mt_cli_free_traces(paths, np);
    return status ? status : exceeded ? 1 : 0;
}

int mt_cmd_check(int argc, char **argv)
{
    char **traces = calloc((size_t)argc + 1, sizeof *traces);
    if (!traces) return mt_cli_fail("check: out of memory");
    int status = run(argc, argv, traces);
    free(traces);
    return status;
}
