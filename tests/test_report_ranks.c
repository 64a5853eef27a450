/* Several ranks of one job: the rank table, its imbalance, and the stacks that make the largest
 * rank larger, on synthetic traces whose headers carry ranks. */
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_compact_fixture.h"

#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define A ((uint64_t)0x7f0000000000)
#define LIB 0x10000000ull

/* One rank's trace in dir: a common stack (main > step > common) with `common` bytes, and rank 2
 * alone has an extra 64 MiB from main > step > extra (the function extra_fn, "extra" when NULL).
 * With a note (INFO) from its recorder when note is not NULL. */
static void rank_trace_named(const char *dir, int rank, uint64_t common, int extra,
                             uint64_t start_ms, const char *note, const char *extra_fn)
{
    char path[500];
    snprintf(path, sizeof path, "%.400s/memtrace.python.r%d.mtrace", dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 100 + (uint32_t)rank,
                        .start_monotonic_ns = FX_T0, .start_realtime_ns = FX_REAL0 + start_ms * MS,
                        .flags = MT_HDR_RANK, .rank = rank, .local_rank = rank,
                        .world_size = 3, .node_rank = 0};
    fx f = {.fd = fd, .w = mt_writer_open_fd(fd, &h, 0)};
    snprintf(f.path, sizeof f.path, "%s", path);
    cr_assert(f.w);
    mt_record pr = {.type = MT_REC_PROCESS};
    pr.u.process = (mt_process){.pid = h.pid, .comm = "python", .cmdline = "python train.py",
                                .hostname = "node0"};
    fx_put(&f, &pr);
    if (note) {
        mt_record r = {.type = MT_REC_NOTE};
        r.u.note = (mt_note){.time_ns = FX_T0, .level = MT_NOTE_INFO, .text = note};
        fx_put(&f, &r);
    }
    fx_module(&f, 1, "/usr/lib/libtrain.so", LIB, LIB + 0x10000);
    fx_node(&f, 1, 0, LIB + 0x100, MT_FRAME_NATIVE); /* main */
    fx_node(&f, 2, 1, LIB + 0x200, MT_FRAME_NATIVE); /* step */
    fx_node(&f, 3, 2, LIB + 0x300, MT_FRAME_NATIVE); /* common */
    fx_node(&f, 4, 2, LIB + 0x400, MT_FRAME_NATIVE); /* extra */
    fx_symbol(&f, LIB + 0x100, 0, "main", "train.c", 1);
    fx_symbol(&f, LIB + 0x200, 0, "step", "train.c", 2);
    fx_symbol(&f, LIB + 0x300, 0, "common", "train.c", 3);
    fx_symbol(&f, LIB + 0x400, 0, extra_fn ? extra_fn : "extra", "train.c", 4);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, rank, A, common, 1, 3);
    if (extra) fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, rank, A + (1ull << 32), 64ull << 20, 2, 4);
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, rank, A, 0, 3, 0);
    fx_end(&f, 10, extra ? 3 : 2, 0);
    fx_close(&f);
}

static void rank_trace_noted(const char *dir, int rank, uint64_t common, int extra,
                             uint64_t start_ms, const char *note)
{
    rank_trace_named(dir, rank, common, extra, start_ms, note, NULL);
}

static void rank_trace(const char *dir, int rank, uint64_t common, int extra, uint64_t start_ms)
{
    rank_trace_noted(dir, rank, common, extra, start_ms, NULL);
}

static char *capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t k; (k = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d", cmd, st);
    return buf;
}

/* Three ranks, rank 2 the largest by its extra stack (its function extra_fn: NULL for "extra"). */
static void make_job_named(char *dir, size_t len, const char *extra_fn)
{
    mt_test_tmpname(dir, len, "job");
    cr_assert_eq(mkdir(dir, 0755), 0);
    /* written out of order: the report orders by rank */
    rank_trace_named(dir, 2, 100ull << 20, 1, 5, NULL, extra_fn);
    rank_trace(dir, 0, 100ull << 20, 0, 0);
    rank_trace(dir, 1, 90ull << 20, 0, 3);
}

static void make_job(char *dir, size_t len)
{
    make_job_named(dir, len, NULL);
}

Test(report_ranks, a_directory_gives_the_rank_table_in_rank_order)
{
    char dir[400], cmd[1024];
    make_job(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, MEMTRACE " report --frames all %s", dir);
    char *text = capture(cmd);
    const char *r0 = strstr(text, "\n  rank 0 "), *r1 = strstr(text, "\n  rank 1 "),
               *r2 = strstr(text, "\n  rank 2 ");
    cr_assert(r0 && r1 && r2, "%s", text);
    cr_expect(r0 < r1 && r1 < r2, "rows in rank order:\n%s", text);
    cr_expect(strstr(text, "ranks: 3 traces (world size 3)"), "%s", text);
    cr_expect(strstr(text, "max 164.00 MiB (rank 2), median 100.00 MiB (rank 0), min 90.00 MiB "
                           "(rank 1)"), "%s", text);
    cr_expect(strstr(text, "rank 2 against rank 0 (the median)"), "%s", text);
    cr_expect(strstr(text, "+64.00 MiB") &&
                  strstr(text, "main (train.c:1) > step (train.c:2) > extra (train.c:4)"),
              "the extra stack makes the difference:\n%s", text);
    /* the details of every rank follow, each naming its rank */
    cr_expect(strstr(text, "rank 1 of 3 on node0"), "%s", text);
    free(text);

    snprintf(cmd, sizeof cmd, MEMTRACE " report --rank 1 %s", dir);
    text = capture(cmd);
    cr_expect(strstr(text, "rank 1 of 3 on node0"), "%s", text);
    cr_expect(!strstr(text, "rank 2 of 3 on node0"), "--rank 1: only rank 1's details");
    cr_expect(strstr(text, "\n  rank 2 "), "... but the whole table");
    free(text);
    snprintf(cmd, sizeof cmd, MEMTRACE " report --rank 7 %s > /dev/null 2>&1", dir);
    int st = system(cmd);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "no such rank: status 2");
}

/* A stack too long for the imbalance line keeps its innermost frames whole: here one frame longer
 * than the line, whose end must still be there (the line kept one character too many, and lost
 * the last one, when no " > " followed the cut). */
Test(report_ranks, a_long_stack_keeps_its_innermost_end)
{
    char dir[400], cmd[1024], fn[320];
    memset(fn, 'x', 300);
    memcpy(fn + 300, "_END", 5);
    make_job_named(dir, sizeof dir, fn);
    snprintf(cmd, sizeof cmd, MEMTRACE " report --frames all %s", dir);
    char *text = capture(cmd);
    const char *line = strstr(text, "+64.00 MiB");
    cr_assert(line, "%s", text);
    const char *eol = strchr(line, '\n');
    cr_assert(eol);
    const char *more = strstr(line, "... > xxx");
    cr_expect(more && more < eol, "the root frames give way:\n%.*s", (int)(eol - line), line);
    cr_expect(eol - line > 16 && memcmp(eol - 16, "_END (train.c:4)", 16) == 0,
              "the innermost frame's end, whole:\n%.*s", (int)(eol - line), line);
    free(text);
}

Test(report_ranks, json_carries_the_same)
{
    char dir[400], cmd[2048], out[400];
    make_job(dir, sizeof dir);
    mt_test_tmpname(out, sizeof out, "ranks.json");
    snprintf(cmd, sizeof cmd,
             MEMTRACE " report --json %s > %s && python3 -c 'import json,sys\n"
             "d=json.load(open(sys.argv[1]))\n"
             "rows=d[\"rank_table\"][\"rows\"]\n"
             "assert [r[\"rank\"] for r in rows]==[0,1,2], rows\n"
             "assert [r[\"peak_bytes\"] for r in rows]==[100<<20,90<<20,164<<20], rows\n"
             "assert all(r[\"host\"]==\"node0\" and r[\"world_size\"]==3 for r in rows)\n"
             "assert rows[2][\"peak_time_unix_ns\"]-rows[0][\"peak_time_unix_ns\"]==6000000, rows\n"
             "im=d[\"rank_table\"][\"imbalance\"]\n"
             "assert (im[\"max\"],im[\"median\"],im[\"min\"])==(2,0,1), im\n"
             "assert im[\"stacks\"][0][\"delta_bytes\"]==64<<20, im\n"
             "assert im[\"stacks\"][0][\"frames\"][-1].startswith(\"extra\"), im\n"
             "assert [t[\"rank\"] for t in d[\"traces\"]]==[0,1,2]\n"
             "' %s",
             dir, out, out);
    int st = system(cmd);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", cmd);
}

Test(report_ranks, exports_put_ranks_side_by_side)
{
    char dir[300], cmd[4096], out[300];
    make_job(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format folded %s", dir);
    char *folded = capture(cmd);
    cr_expect(strstr(folded, "rank 0;cuda:0;") && strstr(folded, "rank 2;cuda:2;"), "%s", folded);
    cr_expect_eq(fx_folded_sum(folded, "rank 2;cuda:2"), 164ull << 20, "rank 2's lines: its peak");
    free(folded);
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format folded --rank 1 %s", dir);
    folded = capture(cmd);
    cr_expect(strncmp(folded, "cuda:1;", 7) == 0, "one rank: no rank frame\n%s", folded);
    free(folded);
    mt_test_tmpname(out, sizeof out, "job.json");
    snprintf(cmd, sizeof cmd,
             MEMTRACE " export --format chrome -o %s %s && python3 %s/tests/py/check_chrome.py %s "
             "> /dev/null && python3 -c 'import json,sys\n"
             "ev=json.load(open(sys.argv[1]))[\"traceEvents\"]\n"
             "names={e[\"pid\"]:e[\"args\"][\"name\"] for e in ev if e.get(\"name\")==\"process_name\"}\n"
             "assert sorted(names.values())==[\"rank 0 (node0)\",\"rank 1 (node0)\",\"rank 2 (node0)\"], names\n"
             "first={}\n"
             "for e in ev:\n"
             "  if e.get(\"ph\")==\"C\": first.setdefault(e[\"pid\"], float(e[\"ts\"]))\n"
             "assert first[102]-first[100]>=5000, first  # rank 2 started 5 ms later, one clock\n"
             "' %s",
             out, dir, MT_SOURCE_DIR, out, out);
    int st = system(cmd);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", cmd);
}

/* ---- memory: N ranks take the memory of the largest one ------------------------------------------
 * A rank's trace here: `n` distinct stacks (each its own symbolized frame under main), one device
 * allocation on each, all live at the peak. What an analysis keeps grows with n (the frames, the
 * peak's and the end's stacks): kept for every trace, 64 of them would take 64 times one. */
static void big_rank_trace(const char *dir, int rank, uint32_t n)
{
    char path[500];
    snprintf(path, sizeof path, "%.400s/memtrace.python.r%d.mtrace", dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 1000 + (uint32_t)rank,
                        .start_monotonic_ns = FX_T0, .start_realtime_ns = FX_REAL0,
                        .flags = MT_HDR_RANK, .rank = rank, .local_rank = rank % 8,
                        .world_size = 64, .node_rank = rank / 8};
    fx f = {.fd = fd, .w = mt_writer_open_fd(fd, &h, 0)};
    snprintf(f.path, sizeof f.path, "%s", path);
    cr_assert(f.w);
    mt_record pr = {.type = MT_REC_PROCESS};
    pr.u.process = (mt_process){.pid = h.pid, .comm = "python", .cmdline = "python train.py",
                                .hostname = "node0"};
    fx_put(&f, &pr);
    fx_module(&f, 1, "/usr/lib/libtrain.so", LIB, LIB + 0x1000000);
    fx_node(&f, 1, 0, LIB + 0x100, MT_FRAME_NATIVE);
    fx_symbol(&f, LIB + 0x100, 0, "main", "train.c", 1);
    char fn[128];
    for (uint32_t i = 0; i < n; i++) {
        uint64_t ip = LIB + 0x1000 + 16ull * i;
        fx_node(&f, 2 + i, 1, ip, MT_FRAME_NATIVE);
        snprintf(fn, sizeof fn, "layer_%u_of_rank_%d::forward_with_a_rather_long_name", i, rank);
        fx_symbol(&f, ip, 0, fn, "model.c", 10 + i);
    }
    int dev = rank % 8;
    for (uint32_t i = 0; i < n; i++)
        fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, dev, A + 4096ull * i, 4096 + (uint64_t)rank, 1 + i / 1000,
              2 + i);
    fx_end(&f, 100, n, 0);
    fx_close(&f);
}

/* Peak resident set of `memtrace ARGS > /dev/null`, in KiB (wait4's rusage of that child). */
static long peak_rss_kib(const char *args)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "exec " MEMTRACE " %s > /dev/null", args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &st, 0, &ru), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memtrace %s: status %d", args, st);
    return ru.ru_maxrss;
}

Test(report_ranks, sixty_four_ranks_take_the_memory_of_the_largest_one, .timeout = 600)
{
#ifdef __SANITIZE_ADDRESS__
    /* AddressSanitizer's allocator (quarantine, redzones, its own arenas) decides the resident
     * set there, not what memtrace keeps: this bound is measured by the ordinary build. */
    cr_skip_test("resident memory is AddressSanitizer's own in this build");
#endif
    enum { RANKS = 64, STACKS = 10000 };
    char job[400], two[400], tiny[400], args[2048];
    mt_test_tmpname(job, sizeof job, "job64");
    mt_test_tmpname(two, sizeof two, "job2");
    mt_test_tmpname(tiny, sizeof tiny, "tiny");
    cr_assert(mkdir(job, 0755) == 0 && mkdir(two, 0755) == 0 && mkdir(tiny, 0755) == 0);
    for (int r = 0; r < RANKS; r++) big_rank_trace(job, r, STACKS);
    big_rank_trace(two, 0, STACKS);
    big_rank_trace(two, 1, STACKS);
    big_rank_trace(tiny, 0, 10);
    big_rank_trace(tiny, 1, 10);
    static const char *const modes[] = {"", "--json", "--markdown"};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        snprintf(args, sizeof args, "report %s %s", modes[m], tiny);
        long base = peak_rss_kib(args);
        snprintf(args, sizeof args, "report %s %s", modes[m], two);
        long rss2 = peak_rss_kib(args);
        snprintf(args, sizeof args, "report %s %s", modes[m], job);
        long rss64 = peak_rss_kib(args);
        /* what one trace's analysis costs: the test can only tell when that is well above noise */
        long per_trace = rss2 - base;
        cr_assert_gt(per_trace, 4096, "report %s: one trace of %d stacks takes %ld KiB: too little "
                     "to tell kept traces from noise", modes[m], STACKS, per_trace);
        /* 64 kept traces would add 62 * per_trace over two; read one at a time they add what the
         * rank table keeps of each (64 stacks by name) */
        cr_expect_lt(rss64 - rss2, 4 * per_trace,
                     "report %s: 2 ranks %ld KiB, 64 ranks %ld KiB (one trace: %ld KiB)", modes[m],
                     rss2, rss64, per_trace);
        fprintf(stderr, "report %s: tiny %ld KiB, 2 ranks %ld KiB, 64 ranks %ld KiB\n", modes[m],
                base, rss2, rss64);
    }
    snprintf(args, sizeof args, "rm -rf '%s' '%s' '%s'", job, two, tiny); /* 5 MB of traces */
    cr_expect_eq(system(args), 0);
}

/* Ranks recorded without CUPTI's activity records (record --tensors=async turns them off) have no
 * driver-internal memory in their peaks: the rank table says which ranks, in every format, and
 * its JSON rows say it per rank. */
Test(ranks_report, ranks_without_activity_records_are_named)
{
    char dir[512], cmd[1200];
    mt_test_tmpname(dir, sizeof dir, "job");
    cr_assert_eq(mkdir(dir, 0755), 0);
    const char *off = MT_ACTIVITY_NOTE_OFF " (MEMTRACE_ACTIVITY=0): test";
    rank_trace_noted(dir, 0, 100ull << 20, 0, 0, NULL);
    rank_trace_noted(dir, 1, 90ull << 20, 0, 3, off);
    rank_trace_noted(dir, 2, 100ull << 20, 1, 5, off);
    const char *line = "driver-internal allocations and CUDA arrays not recorded: rank 1, "
                       "rank 2; their peaks leave them out (CUPTI's activity records were "
                       "off, refused, or taken mid-run by another client: each trace's report says "
                       "which)";
    snprintf(cmd, sizeof cmd, MEMTRACE " report %s", dir);
    char *text = capture(cmd);
    cr_expect(strstr(text, line), "%s", text);
    free(text);
    snprintf(cmd, sizeof cmd, MEMTRACE " report --markdown %s", dir);
    char *md = capture(cmd);
    cr_expect(strstr(md, "driver\\-internal allocations and CUDA arrays not recorded: rank 1"),
              "%s", md);
    free(md);
    snprintf(cmd, sizeof cmd, MEMTRACE " report --json %s", dir);
    char *json = capture(cmd);
    const char *r0 = strstr(json, "\"label\":\"rank 0"), *r1 = strstr(json, "\"label\":\"rank 1");
    cr_assert(r0 && r1, "%s", json);
    const char *on = strstr(r0, "\"activity_records\":\""),
               *off1 = strstr(r1, "\"activity_records\":\"");
    cr_assert(on && off1, "%s", json);
    cr_expect(strncmp(on, "\"activity_records\":\"on\"", 23) == 0, "%.40s", on);
    cr_expect(strncmp(off1, "\"activity_records\":\"off\"", 24) == 0, "%.40s", off1);
    free(json);
    /* every rank with them: no such line */
    char dir2[512];
    make_job(dir2, sizeof dir2);
    snprintf(cmd, sizeof cmd, MEMTRACE " report %s", dir2);
    text = capture(cmd);
    cr_expect(!strstr(text, "not recorded"), "%s", text);
    free(text);
}
