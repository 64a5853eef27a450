/* `memtrace report [--json|--markdown] [--top N] [--frames user|all|python|native] [--long-names]
 *  [--full-stacks] [--by-line [--file PATH]] [--rank R] [-o OUT [--force]] [--strict] TRACE|DIR...`:
 * per device the peak, what was live then and who allocated it, leaks, failed requests with
 * forensics. With several traces (a job's ranks) a rank table comes first. Exit 0, or 2 on bad
 * arguments, unreadable traces, a refused output or a failed write (a truncated or damaged trace
 * is analysed and flagged, not an error, unless --strict). OUT follows mt_out_create's rules: no
 * file is replaced without --force, never an input, and a failed report leaves no file.
 *
 * Traces are analysed one at a time and freed: what the rank table needs of each is kept small
 * (mt_rank_summary), and the per-trace sections are written to a temporary file meanwhile, so 64
 * ranks take the memory of the largest one. --markdown works the same way: the rank table and its
 * table of GPUs come first, each GPU's stacks and lines after them (mt_md_report_*). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "memtrace/export.h"

static void usage(FILE *f)
{
    fputs("usage: memtrace report [options] TRACE|DIR...\n"
          "  a directory stands for every *.mtrace in it; several traces (a job's ranks) are\n"
          "  ordered by rank and open with a rank table: each rank's peak, when, its top\n"
          "  stack, and what makes the largest rank larger than the median one.\n"
          "  what recording cost the run (memtrace's own time, from its sampled notes);\n"
          "  per GPU: peak bytes and when, where the memory is (nvidia-smi total = context &\n"
          "  driver + allocator reserved + other libraries), what was live at the peak by\n"
          "  stack, what is live at the end and who holds it (an allocator's cache or a\n"
          "  library's workspace is not a leak), failed requests with what was live then.\n"
          "  --json              machine-readable (several traces: {\"rank_table\", \"traces\"};\n"
          "                      \"schema\" and every field: docs/json.md)\n"
          "  --markdown          a short summary for $GITHUB_STEP_SUMMARY or a pull-request\n"
          "                      comment: the rank table (several traces, as above), a\n"
          "                      table of every GPU of every trace (peak, allocated\n"
          "                      and reserved peak, live at exit, failed requests), the top\n"
          "                      stacks and Python lines at each peak (--top, default 5 here)\n"
          "  --top N             stacks (or lines) shown per list (default 10); in a tree,\n"
          "                      the other stacks are summed as \"[K more stacks]\" under\n"
          "                      the frame where they leave the top N's paths\n"
          "  --frames W          user (default for Python programs: Python frames, ATen\n"
          "                      operators, autograd nodes, the allocating library), all\n"
          "                      (default otherwise), python or native\n"
          "  --long-names        whole C++ signatures and Python paths\n"
          "  --full-stacks       every frame, CUDA's own included (default: long chains elided)\n"
          "  --by-line           bytes per Python source line (allocated, live at the peak)\n"
          "                      with its source text as on this machine; \"|?\" marks lines of\n"
          "                      files modified after the recording began (maybe not what ran)\n"
          "  --file PATH         with --by-line: attribute to the innermost frame in PATH\n"
          "  --categories FILE   your own rules for the tensors' categories, tried first, one\n"
          "                      per line: CATEGORY <- PATTERN (a substring of a frame name;\n"
          "                      docs/analysis.md). Categories need record --tensors.\n"
          "  --rank R            several traces: the details of rank R only (the rank table\n"
          "                      shows every trace)\n"
          "  -o OUT              write to OUT instead of stdout (OUT.gz: gzip); written under a\n"
          "                      temporary name and renamed when complete\n"
          "  -f, --force         replace OUT if it exists (never a trace being read, never\n"
          "                      through a symbolic link)\n"
          "  --strict            exit 2 if a trace is damaged or truncated (default: damaged\n"
          "                      chunks are skipped and the report says what was lost)\n",
          f);
}


/* Copies what was written to tmp after out's current contents. */
static int append_file(mt_out *out, FILE *tmp)
{
    char buf[65536];
    size_t n;
    rewind(tmp);
    while ((n = fread(buf, 1, sizeof buf, tmp)) > 0) mt_out_write(out, buf, n);
    return ferror(tmp) ? -1 : 0;
}

static int run(int argc, char **argv, char **args)
{
    int json = 0, markdown = 0, full = 0, by_line = 0, want_rank = -1, force = 0, strict = 0;
    uint64_t top = 0, rank_arg = 0;
    mt_frame_filter frames = MT_FRAMES_AUTO;
    int long_names = 0;
    const char *file = NULL, *rules = NULL;
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
        } else if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--strict") == 0) {
            strict = 1;
        } else if (strcmp(argv[i], "--by-line") == 0) {
            by_line = 1;
        } else if (strcmp(argv[i], "--file") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) return mt_cli_fail("report: --file needs a path");
            file = argv[++i];
        } else if (strcmp(argv[i], "--categories") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return mt_cli_fail("report: --categories needs a rules file");
            rules = argv[++i];
        } else if (strcmp(argv[i], "--rank") == 0) {
            if (i + 1 >= argc || mt_cli_parse_count(argv[++i], &rank_arg) < 0 ||
                rank_arg > INT32_MAX)
                return mt_cli_fail("report: --rank needs a rank number");
            want_rank = (int)rank_arg;
        } else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
            if (i + 1 >= argc) return mt_cli_fail("report: -o needs a file name");
            out_path = argv[++i];
        } else if (strcmp(argv[i], "--") == 0) {
            while (++i < argc) args[n++] = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return mt_cli_fail("report: unknown option '%s' (see memtrace report --help)", argv[i]);
        } else {
            args[n++] = argv[i];
        }
    }
    if (n <= 0) return mt_cli_fail("report: no trace given (see memtrace report --help)");
    if (file && !by_line) return mt_cli_fail("report: --file applies to --by-line");
    if (json && markdown) return mt_cli_fail("report: --json and --markdown exclude each other");
    if (markdown && (by_line || full))
        return mt_cli_fail("report: --markdown has its own layout (the top stacks and Python lines; "
                           "no --by-line or --full-stacks)");
    if (!top) top = markdown ? 5 : 10;
    char **traces;
    int nt;
    if (mt_cli_collect_traces(args, n, &traces, &nt) != 0) return 2;
    if (nt == 0) {
        mt_cli_free_traces(traces, nt);
        return mt_cli_fail("report: no trace found in what was given");
    }
    int multi = nt > 1, found_rank = 0;
    mt_rank_summary *sums = multi ? calloc((size_t)nt, sizeof *sums) : NULL;
    /* sections go to a temporary file while what comes before them (the rank table, the Markdown
     * table) is gathered */
    FILE *tmp = multi || markdown ? tmpfile() : NULL;
    char err[512];
    mt_out *out = NULL, *details = NULL;
    int status = 0;
    mt_report_options ro = {.top = (size_t)top, .frames = frames,
                            .names = long_names ? MT_NAME_LONG : MT_NAME_SHORT,
                            .full_stacks = full, .by_line = by_line, .by_line_file = file,
                            .json_schema = !multi};
    mt_md_report *md = markdown ? mt_md_report_begin((size_t)nt, &ro) : NULL;
    if ((multi && !sums) || ((multi || markdown) && !tmp) || (markdown && !md))
        status = mt_cli_fail("report: out of memory or no temporary file");
    mt_out_options oo = {.force = force, .inputs = (const char *const *)traces,
                         .n_inputs = (size_t)nt};
    if (!status && !(out = mt_out_create(out_path, &oo, err, sizeof err)))
        status = mt_cli_fail("report: %s", err);
    if (!status) details = tmp ? mt_out_from_file(tmp) : out;
    int shown = 0, rc = 0;
    /* a text report on the terminal says it in its WARNING lines; elsewhere, stderr too */
    mt_cli_analysis_options ao = {.category_rules = rules, .strict = strict, .base_dir = 1,
                                  .warn_incomplete = json || markdown || multi ||
                                                     strcmp(out_path, "-") != 0};
    for (int i = 0; i < nt && !status && rc == 0; i++) {
        mt_analysis *a = NULL;
        if ((status = mt_cli_analyze("report", traces[i], &ao, &a)) != 0) break;
        if (multi && mt_rank_summarize(a, &sums[i]) < 0) rc = -1;
        int is_wanted = want_rank < 0 || ((a->header.flags & MT_HDR_RANK) &&
                                          a->header.rank == want_rank);
        found_rank |= is_wanted;
        if (markdown && rc == 0) {
            /* every trace has its rows in the table; --rank limits the sections */
            rc = mt_md_report_add(md, is_wanted ? details : NULL, a);
        } else if (is_wanted && rc == 0) {
            if (shown++) mt_out_puts(details, json ? "," : "\n");
            rc = json ? mt_report_json_trace(details, a, &ro) : mt_report_text(details, a, &ro);
        }
        mt_analysis_free(a);
    }
    if (!status && want_rank >= 0 && !found_rank)
        status = mt_cli_fail("report: no trace of rank %d among the %d given", want_rank, nt);
    if (!status && rc == 0 && markdown) {
        if (mt_out_close(details) < 0) rc = -1;
        details = NULL;
        if (mt_md_report_end_ranks(md, out, sums, multi ? (size_t)nt : 0) < 0) rc = -1;
        md = NULL;
        if (rc == 0 && append_file(out, tmp) < 0) rc = -1;
    } else if (!status && rc == 0 && multi) {
        if (mt_out_close(details) < 0) rc = -1;
        details = NULL;
        if (json) {
            /* "schema" opens the document (docs/json.md) */
            mt_out_printf(out, "{\"schema\":%d,\"rank_table\":", MT_JSON_SCHEMA);
            if (mt_rank_table_json(out, sums, (size_t)nt, &ro) < 0) rc = -1;
            mt_out_puts(out, ",\"traces\":[");
        } else {
            if (mt_rank_table_text(out, sums, (size_t)nt, &ro) < 0) rc = -1;
            mt_out_puts(out, "\n");
        }
        if (rc == 0 && append_file(out, tmp) < 0) rc = -1;
        if (json) mt_out_puts(out, "]}");
    }
    if (!status && json) mt_out_puts(out, "\n");
    if (details && details != out) mt_out_close(details);
    if (md) mt_md_report_end(md, NULL); /* frees it */
    if (out && (status || rc < 0)) { /* nothing half written is left under OUT's name */
        mt_out_discard(out);
        if (!status)
            status = mt_cli_fail("report: out of memory or no temporary space (%s not written)",
                                 mt_cli_out_name(out_path));
    } else if (out && mt_out_close(out) < 0) {
        status = mt_cli_fail("report: writing %s failed: %s", mt_cli_out_name(out_path),
                             strerror(errno));
    }
    for (int i = 0; sums && i < nt; i++) mt_rank_summary_free(&sums[i]);
    free(sums);
    if (tmp) fclose(tmp);
    mt_cli_free_traces(traces, nt);
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
