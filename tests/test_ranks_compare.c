/* Two ranks of one job compared, on the DDP fixture pair recorded on 2 x H200 under torchrun
 * (tests/data/ddp_rank{0,1}.mtrace: rank 0 on cuda:0, rank 1 on cuda:1), to which the copy of
 * rank 1 adds a stray CUDA context on cuda:0 (a context of its own, holding the driver's memory
 * only, as a rank may make with a CUDA call before torch.cuda.set_device): `diff` pairs each rank's
 * own GPU with the other's, never rank 0's whole GPU with rank 1's stray context; `report
 * --markdown` over both carries the rank table, the imbalance and the stacks behind it, as the text
 * and JSON reports do. The fixtures are copied to a temporary directory (tests/data is never
 * written). Also synthetic single-GPU runs on different GPUs, and a two-GPU program whose
 * ordinals keep their pairing. */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_compact_fixture.h"
#include "../exporters/util.h" /* mt_md_nbsp: how every Markdown output writes a number */

#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define A ((uint64_t)0x7f0000000000)

/* stdout (and stderr) of a shell command, malloc'd; *status its exit status */
static char *run(int *status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run(int *status, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
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
    cr_assert(WIFEXITED(st), "%s died", cmd);
    *status = WEXITSTATUS(st);
    return buf;
}

#define STRAY_ALLOCS 2028 /* 649.54 KiB: a context's static memory, as CUPTI lists it */

/* src written again to dst with a stray context on cuda:0 before its END: the context (its DEVICE
 * record and context id 99) and the driver's allocations in it, which CUPTI's activity records
 * give with that context's id. */
static void copy_with_stray_context(const char *src, const char *dst)
{
    char err[512];
    mt_reader *r = mt_reader_open(src, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    mt_writer *w = mt_writer_open_fd(fd, mt_reader_header(r), 0);
    cr_assert_not_null(w);
    mt_record rec;
    uint64_t last = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type == MT_REC_EVENT && rec.u.event.time_ns > last) last = rec.u.event.time_ns;
        if (rec.type == MT_REC_END) {
            mt_record dev = {.type = MT_REC_DEVICE};
            dev.u.device = (mt_device){
                .ordinal = 0, .total_bytes = 150109880320ull, .name = "NVIDIA H200", .uuid = ""};
            cr_assert_eq(mt_writer_put(w, &dev), 0);
            for (unsigned i = 0; i < STRAY_ALLOCS; i++) {
                mt_record e = {.type = MT_REC_EVENT};
                e.u.event = (mt_event){.time_ns = last + i,
                                       .address = A + 0x10000000 + i * 1024,
                                       .bytes = 328,
                                       .aux = 6,
                                       .context = 99,
                                       .device = 0,
                                       .flags = MT_EF_ACTIVITY,
                                       .op = MT_OP_ALLOC,
                                       .kind = MT_KIND_DRIVER};
                cr_assert_eq(mt_writer_put(w, &e), 0);
            }
        }
        cr_assert_eq(mt_writer_put(w, &rec), 0);
    }
    cr_assert_eq(mt_writer_close(w, 1), 0);
    mt_reader_close(r);
}

/* A fresh directory holding copies of both fixtures, rank 1's with a stray context if asked. */
static void copy_fixtures_as(char *dir, size_t len, int stray)
{
    mt_test_tmpname(dir, len, "ddp");
    cr_assert_eq(mkdir(dir, 0755), 0);
    for (int r = 0; r < 2; r++) {
        char src[512], dst[600];
        snprintf(src, sizeof src, "%s/ddp_rank%d.mtrace", MT_TEST_DATA_DIR, r);
        snprintf(dst, sizeof dst, "%s/ddp_rank%d.mtrace", dir, r);
        if (r == 1 && stray) {
            copy_with_stray_context(src, dst);
            continue;
        }
        size_t n;
        uint8_t *data = mt_test_slurp(src, &n);
        cr_assert_not_null(data, "%s", src);
        cr_assert_eq(mt_test_spit(dst, data, n), 0);
        free(data);
    }
}

static void copy_fixtures(char *dir, size_t len)
{
    copy_fixtures_as(dir, len, 1);
}

static mt_analysis *analyze_rank(const char *dir, int r)
{
    char path[600];
    snprintf(path, sizeof path, "%s/ddp_rank%d.mtrace", dir, r);
    return fx_analyze(path);
}

static const char *bytes(uint64_t v, char *buf, size_t len) { return mt_format_bytes(v, buf, len); }

/* ---- diff -------------------------------------------------------------------------------------- */

Test(ranks_diff, each_ranks_own_gpu_is_compared_with_the_others)
{
    char dir[400];
    copy_fixtures(dir, sizeof dir);
    mt_analysis *r0 = analyze_rank(dir, 0), *r1 = analyze_rank(dir, 1);
    /* what the trace says: rank 1's LOCAL_RANK is 1, and it holds a stray context on cuda:0 */
    const char *why = NULL;
    const mt_device_report *own0 = mt_own_gpu(r0, &why);
    cr_assert(own0 && own0->u.device == 0);
    cr_expect_str_eq(why, "LOCAL_RANK");
    const mt_device_report *own1 = mt_own_gpu(r1, &why);
    cr_assert(own1 && own1->u.device == 1);
    cr_expect_str_eq(why, "LOCAL_RANK");
    cr_assert(mt_gpu_is_stray(fx_dev(r1, 0)), "rank 1's cuda:0: the driver's own memory only");
    cr_expect(!mt_gpu_is_stray(own0) && !mt_gpu_is_stray(own1));

    mt_diff *d;
    cr_assert_eq(mt_diff_analyses(r0, r1, &d), 0);
    cr_expect_eq(d->paired_by, MT_PAIR_OWN);
    cr_assert_eq(d->n_devices, 2);
    cr_expect(d->devices[0].base == own0 && d->devices[0].new_ == own1,
              "first: rank 0's cuda:0 against rank 1's cuda:1");
    cr_expect(!d->devices[1].base && d->devices[1].new_ == fx_dev(r1, 0),
              "then rank 1's stray cuda:0, against nothing");
    double pct = mt_peak_change_pct(&d->devices[0]);
    cr_expect(pct > -1.0 && pct < 1.0, "the two ranks' peaks are within 1%%: %g", pct);
    mt_diff_free(d);

    /* the command says which pairing it used, and its numbers are the two GPUs' */
    int st;
    char *out = run(&st, MEMTRACE " diff %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace", dir, dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "GPUs paired: rank 0 cuda:0 vs rank 1 cuda:1 (each run's own GPU, as the "
                          "runs are different ranks: rank 0's by LOCAL_RANK, rank 1's by "
                          "LOCAL_RANK)"), "%s", out);
    char b0[32], b1[32];
    const char *sec = strstr(out, "\nrank 0 cuda:0 vs rank 1 cuda:1 — NVIDIA H200\n");
    cr_assert(sec, "%s", out);
    const char *peak = strstr(sec, "\n  peak ");
    cr_assert(peak);
    cr_expect(strstr(peak, bytes(own0->u.peak, b0, sizeof b0)) &&
                  strstr(peak, bytes(own1->u.peak, b1, sizeof b1)) &&
                  strstr(peak, bytes(own0->u.peak, b0, sizeof b0)) < strchr(peak + 1, '\n'),
              "the peak row sets %s against %s:\n%s", b0, b1, out);
    cr_expect(!strstr(out, "-100.0%"), "no GPU compared with a stray context:\n%s", out);
    cr_expect(
        strstr(out, "\nrank 1 cuda:0 — NVIDIA H200 (only in new; driver-internal memory only"),
        "the stray context is still shown:\n%s", out);
    cr_expect(!strstr(out, "cuda:1 — NVIDIA H200 (only in new)"), "%s", out);
    free(out);

    /* the other way round: rank 1 as BASE */
    out = run(&st, MEMTRACE " diff %s/ddp_rank1.mtrace %s/ddp_rank0.mtrace", dir, dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "\nrank 1 cuda:1 vs rank 0 cuda:0 — NVIDIA H200\n") &&
                  strstr(out, "\nrank 1 cuda:0 — NVIDIA H200 (only in base;"),
              "%s", out);
    free(out);

    /* JSON: the pairing, and per GPU which of each run's */
    char json[600];
    mt_test_tmpname(json, sizeof json, "diff.json");
    out = run(&st,
              MEMTRACE " diff --json %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace > %s && python3 -c '"
              "import json,sys\n"
              "d=json.load(open(sys.argv[1]))\n"
              "p=d[\"pairing\"]\n"
              "assert (p[\"by\"],p[\"base_device\"],p[\"new_device\"])==(\"own_gpu\",0,1), p\n"
              "assert p[\"base_device_why\"]==p[\"new_device_why\"]==\"LOCAL_RANK\", p\n"
              "assert p[\"reason\"]==\"the runs are different ranks\", p\n"
              "g=d[\"devices\"]\n"
              "assert len(g)==2, g\n"
              "assert (g[0][\"base_device\"],g[0][\"new_device\"],g[0][\"driver_only\"])==(0,1,False), g[0]\n"
              "assert g[0][\"title\"]==\"rank 0 cuda:0 vs rank 1 cuda:1\", g[0][\"title\"]\n"
              "assert g[0][\"peak\"][\"base\"]==%llu and g[0][\"peak\"][\"new\"]==%llu, g[0][\"peak\"]\n"
              "assert (g[1][\"in_base\"],g[1][\"new_device\"],g[1][\"driver_only\"])==(False,0,True), g[1]\n"
              "' %s",
              dir, dir, json, (unsigned long long)own0->u.peak, (unsigned long long)own1->u.peak,
              json);
    cr_expect_eq(st, 0, "%s", out);
    free(out);

    /* Markdown: the heading is about the ranks' GPUs, not the stray context */
    out = run(&st, MEMTRACE " diff --markdown %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace", dir, dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strncmp(out, "### memtrace diff: peak ", 24) == 0 &&
                  strstr(out, " on rank 0 cuda:0 vs rank 1 cuda:1\n"), "%s", out);
    cr_expect(strstr(out, "| rank 0 cuda:0 vs rank 1 cuda:1 | peak |") &&
                  strstr(out, "| rank 1 cuda:0 (only in new; driver-internal"), "%s", out);
    free(out);
    mt_analysis_free(r0);
    mt_analysis_free(r1);
}

Test(ranks_diff, devices_chooses_the_pairing)
{
    char dir[400];
    copy_fixtures(dir, sizeof dir);
    int st;
    /* by ordinal, as before: rank 0's cuda:0 against rank 1's stray context */
    char *out = run(&st, MEMTRACE " diff --devices ordinal %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace",
                    dir, dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(!strstr(out, "GPUs paired:") && strstr(out, "\ncuda:0 — NVIDIA H200\n") &&
                  strstr(out, "\ncuda:1 — NVIDIA H200 (only in new)"),
              "%s", out);
    free(out);
    /* chosen: the same pair the automatic one finds, said as chosen */
    out = run(&st, MEMTRACE " diff --devices cuda:0:cuda:1 %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace",
              dir, dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "GPUs paired: rank 0 cuda:0 vs rank 1 cuda:1 (--devices)"), "%s", out);
    free(out);
    /* rank 1's stray context against rank 0's GPU, when asked */
    out = run(&st, MEMTRACE " diff --json --devices 0:0 %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace",
              dir, dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "\"pairing\":{\"by\":\"chosen\""), "%s", out);
    free(out);
    static const char *const bad[] = {"--devices 0:7", "--devices 5:1", "--devices 1",
                                      "--devices cuda:1", "--devices 0:1:2", "--devices"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        out = run(&st, MEMTRACE " diff %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace %s", dir, dir, bad[i]);
        cr_expect_eq(st, 2, "%s: exit %d: %s", bad[i], st, out);
        cr_expect(strstr(out, "memtrace: diff:"), "%s: %s", bad[i], out);
        free(out);
    }
}

/* The gate weighs the ranks' own GPUs; rank 1's stray context (0 -> 649 KiB, "all of it") is
 * listed but not gated, or every rank-to-rank diff would fail. */
Test(ranks_diff, a_stray_context_is_listed_but_never_fails_the_gate)
{
    char dir[400];
    copy_fixtures(dir, sizeof dir);
    int st;
    char *out = run(&st, MEMTRACE " diff --fail-on-increase 10 %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace",
                    dir, dir);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(
        strstr(out, "rank 1 cuda:0 — NVIDIA H200 (only in new; driver-internal memory only") &&
            strstr(out, "not gated)") && strstr(out, "memtrace diff: ok:"),
        "%s", out);
    free(out);
    /* the own GPUs grew by 0.1%: a gate below that fails, and names that pair only */
    out = run(&st, MEMTRACE " diff --fail-on-increase 0.05 %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace",
              dir, dir);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "FAILED: rank 0 cuda:0 vs rank 1 cuda:1 peak grew by 0.1%") &&
                  !strstr(out, "FAILED: rank 1 cuda:0"), "%s", out);
    free(out);
    out = run(&st, MEMTRACE " diff --json --fail-on-increase 10 %s/ddp_rank0.mtrace %s/ddp_rank1.mtrace",
              dir, dir);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(!strstr(out, "\"exceeded\":true"), "%s", out);
    free(out);
}

/* Synthetic: one program on `gpus` GPUs (a bitmask), `bytes` on each; no rank in the header. */
static void gpu_trace(char *path, size_t len, const char *stem, unsigned gpus, uint64_t bytes0,
                      uint64_t bytes_rest)
{
    fx f;
    fx_open(&f, stem);
    snprintf(path, len, "%s", f.path);
    fx_process(&f, "python3", "python3 train.py");
    uint64_t n = 0;
    for (int g = 0; g < 8; g++)
        if (gpus & (1u << g)) {
            fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, g, A + ((uint64_t)g << 32),
                  n ? bytes_rest : bytes0, 1 + n, 0);
            n++;
        }
    fx_end(&f, 10, n, 0);
    fx_close(&f);
}

Test(ranks_diff, single_gpu_runs_on_other_gpus_pair_and_multi_gpu_programs_keep_ordinals)
{
    char p0[512], p3[512], m1[512], m2[512];
    gpu_trace(p0, sizeof p0, "on0.mtrace", 1u << 0, 100 << 20, 0);
    gpu_trace(p3, sizeof p3, "on3.mtrace", 1u << 3, 120 << 20, 0);
    mt_analysis *a = fx_analyze(p0), *b = fx_analyze(p3);
    mt_diff *d;
    cr_assert_eq(mt_diff_analyses(a, b, &d), 0);
    cr_expect_eq(d->paired_by, MT_PAIR_OWN, "each run used one GPU, not the same one");
    cr_assert_eq(d->n_devices, 1);
    cr_expect(d->devices[0].base->u.device == 0 && d->devices[0].new_->u.device == 3);
    cr_expect_str_eq(d->base_own_why, "largest peak");
    mt_diff_free(d);
    mt_analysis_free(a);
    mt_analysis_free(b);
    /* two GPUs each: cuda:N is still cuda:N, even when the largest moved from 0 to 1 */
    gpu_trace(m1, sizeof m1, "two1.mtrace", 3u, 100 << 20, 50 << 20);
    gpu_trace(m2, sizeof m2, "two2.mtrace", 3u, 40 << 20, 90 << 20);
    a = fx_analyze(m1);
    b = fx_analyze(m2);
    cr_assert_eq(mt_diff_analyses(a, b, &d), 0);
    cr_expect_eq(d->paired_by, MT_PAIR_ORDINAL);
    cr_assert_eq(d->n_devices, 2);
    for (size_t i = 0; i < 2; i++)
        cr_expect(d->devices[i].base->u.device == d->devices[i].new_->u.device);
    mt_diff_free(d);
    /* and a chosen pair on them: the rest still by ordinal */
    char err[256];
    mt_diff_pairing p = {.how = MT_PAIR_CHOSEN, .base_device = 0, .new_device = 1};
    cr_assert_eq(mt_diff_analyses_paired(a, b, &p, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d->n_devices, 3);
    cr_expect(d->devices[0].base->u.device == 0 && d->devices[0].new_->u.device == 1);
    cr_expect(!d->devices[1].base && d->devices[1].new_->u.device == 0, "in ordinal order");
    cr_expect(d->devices[2].base && d->devices[2].base->u.device == 1 && !d->devices[2].new_);
    mt_diff_free(d);
    p.new_device = 5;
    cr_expect_eq(mt_diff_analyses_paired(a, b, &p, &d, err, sizeof err), -1);
    cr_expect(strstr(err, "cuda:5"), "%s", err);
    mt_analysis_free(a);
    mt_analysis_free(b);
}

/* ---- report --markdown over ranks ---------------------------------------------------------------- */

Test(ranks_report, markdown_carries_the_rank_table_the_imbalance_and_the_stacks_behind_it)
{
    char dir[400];
    copy_fixtures(dir, sizeof dir);
    /* what the table must say, from the analyses */
    mt_rank_summary s[2];
    for (int r = 0; r < 2; r++) {
        mt_analysis *a = analyze_rank(dir, r);
        cr_assert_eq(mt_rank_summarize(a, &s[r]), 0);
        mt_analysis_free(a);
    }
    mt_imbalance im;
    cr_assert_eq(mt_rank_imbalance(s, 2, &im), 0);
    mt_named_diff *nd;
    size_t n_nd;
    cr_assert_eq(mt_rank_stack_diff(&s[im.max], &s[im.median], &nd, &n_nd), 0);
    cr_assert(n_nd > 0 && nd[0].delta > 0, "rank 1's larger batch makes a stack larger");

    int st;
    char *out = run(&st, MEMTRACE " report --markdown %s", dir);
    cr_assert_eq(st, 0, "%s", out);
    const char *table = strstr(out, "#### Ranks: 2 traces (world size 2)");
    const char *gpus = strstr(out, "#### GPUs");
    cr_assert(table && gpus && table < gpus, "the rank table opens the summary:\n%s", out);
    char want[512], b1[32], b2[32], b3[32], nb[3][48];
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof want, "| rank %d | `%s` | %u | %s | %s | %s | ", r, s[r].host,
                 (unsigned)s[r].pid, s[r].devices,
                 mt_md_nbsp(bytes(s[r].peak, b1, sizeof b1), nb[0], sizeof nb[0]),
                 mt_md_nbsp(bytes(s[r].tensor_peak, b2, sizeof b2), nb[1], sizeof nb[1]));
        const char *row = strstr(table, want);
        cr_expect(row && row < gpus, "rank %d's row: %s\n%s", r, want, out);
        if (!row) continue;
        const char *eol = strchr(row, '\n');
        snprintf(want, sizeof want, "| %s | %llu | `%s` (", /* at exit, failed, top stack */
                 mt_md_nbsp(bytes(s[r].live_at_exit, b3, sizeof b3), nb[2], sizeof nb[2]),
                 (unsigned long long)s[r].failed, s[r].top_frame);
        const char *rest = strstr(row, want);
        cr_expect(rest && rest < eol, "rank %d's row ends with %s\n%s", r, want, out);
    }
    snprintf(want, sizeof want, "**Imbalance**: max %s (rank %d), median %s (rank %d)",
             bytes(s[im.max].peak, b1, sizeof b1), (int)s[im.max].rank,
             bytes(s[im.median].peak, b2, sizeof b2), (int)s[im.median].rank);
    const char *imb = strstr(table, want);
    cr_expect(imb && imb < gpus, "%s\n%s", want, out);
    snprintf(want, sizeof want, "rank %d against rank %d (the median)", (int)s[im.max].rank,
             (int)s[im.median].rank);
    const char *behind = strstr(table, want);
    cr_assert(behind && behind < gpus, "%s\n%s", want, out);
    cr_expect(strstr(behind, "| difference | largest rank | median rank | stack |"), "%s", out);
    snprintf(b3, sizeof b3, "+%s", bytes((uint64_t)nd[0].delta, b1, sizeof b1));
    snprintf(want, sizeof want, "| %s | %s | %s | ", mt_md_nbsp(b3, nb[0], sizeof nb[0]),
             mt_md_nbsp(bytes(nd[0].a, b1, sizeof b1), nb[1], sizeof nb[1]),
             mt_md_nbsp(bytes(nd[0].b, b2, sizeof b2), nb[2], sizeof nb[2]));
    const char *first = strstr(behind, want);
    cr_expect(first && first < gpus, "the largest difference first: %s\n%s", want, out);
    const char *leaf = strrchr(nd[0].name, ';');
    snprintf(want, sizeof want, "`%s` |\n", leaf ? leaf + 1 : nd[0].name);
    cr_expect(first && strstr(first, want) && strstr(first, want) < strchr(first, '\n') + 1,
              "its stack ends with %s\n%s", want, out);
    free(out);

    /* --rank narrows the sections, never the table */
    out = run(&st, MEMTRACE " report --markdown --rank 0 %s", dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "| rank 1 | ") && strstr(out, "**Imbalance**"), "%s", out);
    cr_expect(!strstr(out, "of rank 1 (vm): what was live"), "%s", out);
    free(out);

    /* one trace: no rank table */
    out = run(&st, MEMTRACE " report --markdown %s/ddp_rank0.mtrace", dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(!strstr(out, "#### Ranks") && !strstr(out, "**Imbalance**"), "%s", out);
    free(out);
    free(nd);
    for (int r = 0; r < 2; r++) mt_rank_summary_free(&s[r]);
}

/* ---- how a job ended ----------------------------------------------------------------------------
 */

/* A number of a .stats.json beside a fixture: "key": N. */
static uint64_t stat_number(const char *name, const char *key)
{
    char path[512], pat[64];
    snprintf(path, sizeof path, "%s/%s", MT_TEST_DATA_DIR, name);
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    size_t n;
    char *text = (char *)mt_test_slurp(path, &n);
    cr_assert_not_null(text, "%s", path);
    char *at = memmem(text, n, pat, strlen(pat));
    cr_assert_not_null(at, "%s: no %s", name, key);
    uint64_t v = strtoull(at + strlen(pat), NULL, 10);
    free(text);
    return v;
}

/* samples/oom.py under torchrun on 2 x H200: rank 1 (twice the batch) raised torch.OutOfMemoryError
 * and died; torchrun killed rank 0, which waited for it in an all-reduce. The rank table says who
 * raised it first, with what PyTorch's own observer read then, and whose trace has no END. */
Test(ranks_report, a_job_ended_by_one_ranks_out_of_memory_says_who_when_and_where)
{
    const char *st = "ddp_oom_rank1.stats.json";
    char b1[32], b2[32], want[256];
    snprintf(want, sizeof want,
             " (the first), %s on cuda:1 with %s allocated, in step (samples/oom.py:%llu)\n",
             bytes(stat_number(st, "oom_alloc"), b1, sizeof b1),
             bytes(stat_number(st, "oom_allocated"), b2, sizeof b2),
             (unsigned long long)stat_number(st, "oom_line"));
    int status;
    char *out = run(&status, MEMTRACE " report %s/ddp_oom_rank0.mtrace %s/ddp_oom_rank1.mtrace",
                    MT_TEST_DATA_DIR, MT_TEST_DATA_DIR);
    cr_assert_eq(status, 0, "%s", out);
    const char *oom = strstr(out, "\n  torch.OutOfMemoryError: rank 1 at ");
    cr_expect(oom && strstr(oom, want) && strstr(oom, want) < strstr(oom + 1, "\n  no END"),
              "wanted ...%s in:\n%s", want, out);
    cr_expect(strstr(out, "\n  no END record (killed, or still recording): rank 0; its last event "
                          "comes "),
              "%s", out);
    free(out);
    out = run(&status,
              MEMTRACE
              " report --json %s/ddp_oom_rank0.mtrace %s/ddp_oom_rank1.mtrace | python3 -c '"
              "import json,sys\n"
              "t=json.load(sys.stdin)[\"rank_table\"]\n"
              "r=t[\"rows\"]\n"
              "assert t[\"first_out_of_memory\"]==1, t[\"first_out_of_memory\"]\n"
              "assert (r[0][\"ended_cleanly\"],r[1][\"ended_cleanly\"])==(False,True), r\n"
              "assert r[0][\"out_of_memory\"] is None\n"
              "o=r[1][\"out_of_memory\"]\n"
              "assert (o[\"device\"],o[\"bytes\"],o[\"torch_allocated_bytes\"])==(1,%llu,%llu), o\n"
              "assert o[\"own_code_frame\"]==\"step (samples/oom.py:%llu)\", o\n"
              "assert r[0][\"end_time_unix_ns\"]>o[\"time_unix_ns\"], r\n"
              "'",
              MT_TEST_DATA_DIR, MT_TEST_DATA_DIR, (unsigned long long)stat_number(st, "oom_alloc"),
              (unsigned long long)stat_number(st, "oom_allocated"),
              (unsigned long long)stat_number(st, "oom_line"));
    cr_expect_eq(status, 0, "%s", out);
    free(out);
    /* Markdown carries the same sentences */
    out =
        run(&status, MEMTRACE " report --markdown %s/ddp_oom_rank0.mtrace %s/ddp_oom_rank1.mtrace",
            MT_TEST_DATA_DIR, MT_TEST_DATA_DIR);
    cr_expect(strstr(out, "\ntorch\\.OutOfMemoryError: rank 1 at ") &&
                  strstr(out, "no END record \\(killed, or still recording\\): rank 0"),
              "%s", out);
    free(out);
}

/* Many ranks: the errors in the order they came (not rank order), at most 8 then a count; the
 * ranks without END in one line; nothing at all for a job that ended cleanly. */
Test(ranks_report, endings_list_errors_in_time_order_and_cut_long_lists)
{
    mt_rank_summary s[12];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 12; i++) {
        s[i].has_rank = 1;
        s[i].rank = i;
        s[i].ended_cleanly = 1;
        s[i].end_unix_ns = 5000000000ull;
    }
    char line[MT_RANK_ENDING_LINES][MT_RANK_ENDING_LEN];
    cr_expect_eq(mt_rank_ending_lines(s, 12, line), 0, "a clean job: nothing to say");
    static char frame[] = "step (train.py:7)";
    for (int i = 2; i < 12; i++) { /* ranks 2..11 raise it, the later ranks first */
        s[i].has_oom = 1;
        s[i].oom_unix_ns = 1000000000ull + (uint64_t)(20 - i) * 1000000;
        s[i].oom_device = 0;
        s[i].oom_bytes = 1 << 20;
        s[i].oom_frame = frame;
        s[i].ended_cleanly = 0;
        s[i].end_unix_ns = s[i].oom_unix_ns + 1000;
    }
    s[0].ended_cleanly = 0; /* killed: its last event 0.5 s after the first error */
    s[0].end_unix_ns = 1000000000ull + 9 * 1000000 + 500000000;
    size_t n = mt_rank_ending_lines(s, 12, line);
    cr_assert_eq(n, 10, "8 errors, the rest counted, the ranks without END");
    static const char first[] = "torch.OutOfMemoryError: rank 11 at ";
    cr_expect(strncmp(line[0], first, strlen(first)) == 0 && strstr(line[0], "(the first)"), "%s",
              line[0]);
    cr_expect(strncmp(line[1], "then rank 10 at ", 16) == 0, "%s", line[1]);
    cr_expect(strncmp(line[7], "then rank 4 at ", 15) == 0, "%s", line[7]);
    cr_expect_str_eq(line[8], "... and 2 more ranks raised it");
    cr_expect(
        strstr(line[9], "no END record (killed, or still recording): rank 0, rank 2, rank 3,") &&
            strstr(line[9], "; their last events come 0.000-0.500 s after the first "
                            "torch.OutOfMemoryError"),
        "%s", line[9]);
}

/* ---- memory on another rank's GPU ------------------------------------------------------------ */

/* samples/ddp.py --stray 256 under torchrun on 2 x H200 (tests/data/ddp_stray_rank{0,1}.mtrace):
 * every rank loaded a checkpoint saved from cuda:0 before torch.cuda.set_device, so rank 1 also
 * holds a context and 256 MiB on cuda:0. The rank table says so under its rows, with NVML's
 * number (the context, which the trace cannot see, included) and the program's own line; the
 * JSON names the GPUs by UUID, the same for both ranks' cuda:0. */
Test(ranks_report, a_rank_on_another_ranks_gpu_is_named_with_its_line)
{
    char dir[512], b1[32], b2[32], want[512];
    snprintf(dir, sizeof dir, "%s", MT_TEST_DATA_DIR);
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/ddp_stray_rank1.mtrace", dir);
    mt_analysis *a;
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    const mt_device_report *gpu0 = NULL;
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == 0) gpu0 = &a->devices[i];
    cr_assert_not_null(gpu0);
    cr_assert(gpu0->n_nvml && gpu0->nvml_max > gpu0->u.peak, "NVML saw the context too");
    /* PyTorch's own max_memory_allocated(0) in rank 1 */
    cr_expect_eq(gpu0->u.by_kind_peak[MT_KIND_TENSOR], 268435456);
    snprintf(want, sizeof want,
             "\n  rank 1 holds memory on cuda:0, rank 0's GPU (its own is cuda:1): %s by NVML, its "
             "CUDA context included; %s allocated at its peak there, the most by load_checkpoint "
             "(samples/ddp.py:39)\n",
             bytes(gpu0->nvml_max, b1, sizeof b1), bytes(gpu0->u.peak, b2, sizeof b2));
    mt_analysis_free(a);
    int status;
    char *out = run(&status, MEMTRACE " report %s/ddp_stray_rank0.mtrace %s/ddp_stray_rank1.mtrace",
                    dir, dir);
    cr_assert_eq(status, 0, "%s", out);
    cr_expect(strstr(out, want), "wanted%sin:\n%s", want, out);
    cr_expect(!strstr(out, "rank 0 holds memory"), "rank 0 is on its own GPU only");
    free(out);
    out = run(
        &status,
        MEMTRACE
        " report --json %s/ddp_stray_rank0.mtrace %s/ddp_stray_rank1.mtrace | "
        "python3 -c '"
        "import json,sys\n"
        "t=json.load(sys.stdin)[\"rank_table\"]\n"
        "r0,r1=(r[\"gpus\"] for r in t[\"rows\"])\n"
        "assert [(g[\"device\"],g[\"own\"]) for g in r0]==[(0,True)], r0\n"
        "assert [(g[\"device\"],g[\"own\"]) for g in r1]==[(0,False),(1,True)], r1\n"
        "assert r0[0][\"uuid\"]==r1[0][\"uuid\"]!=r1[1][\"uuid\"], (r0,r1)\n"
        "assert r1[0][\"uuid\"].startswith(\"GPU-\") and len(r1[0][\"uuid\"])==40\n"
        "assert r1[0][\"top_stack_first_user_frame\"]==\"load_checkpoint (samples/ddp.py:39)\"\n"
        "assert t[\"other_gpus\"]==[{\"row\":1,\"device\":0,\"owner_row\":0}], t[\"other_gpus\"]\n"
        "'",
        dir, dir);
    cr_expect_eq(status, 0, "%s", out);
    free(out);
    out = run(&status,
              MEMTRACE " report --markdown %s/ddp_stray_rank0.mtrace %s/ddp_stray_rank1.mtrace",
              dir, dir);
    cr_expect(strstr(out, "\nrank 1 holds memory on cuda:0, rank 0's GPU \\(its own is cuda:1\\)"),
              "%s", out);
    free(out);
}

/* Summaries made by hand: nine ranks of host a on rank 0's GPU (no UUIDs: by ordinal), listed 8
 * then counted, and summed; a rank of host b whose cuda:0 is not host a's; ranks whose
 * CUDA_VISIBLE_DEVICES gives each its own GPU as cuda:0, matched by UUID. */
Test(ranks_report, other_gpus_pair_by_host_and_uuid_and_cut_long_lists)
{
    static char load[] = "load (t.py:3)", none[] = "[driver internal]";
    mt_rank_summary s[14];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 14; i++) {
        s[i].has_rank = 1;
        s[i].rank = i;
        s[i].host = i < 10 ? "a" : i == 10 ? "b" : "c";
        s[i].ended_cleanly = 1;
        mt_rank_gpu own = {.device = i < 10 ? i : 0, .peak = 1 << 30, .own = 1, .top_frame = load};
        if (i < 10 && i > 0) { /* also on cuda:0: a context, and 1 MiB (rank 9: the context only) */
            s[i].gpus[s[i].n_gpus++] = (mt_rank_gpu){.device = 0,
                                                     .peak = i == 9 ? 4096 : 1 << 20,
                                                     .nvml_max = 500ull << 20,
                                                     .driver_only = i == 9,
                                                     .top_frame = i == 9 ? none : load};
        }
        s[i].gpus[s[i].n_gpus++] = own;
    }
    /* host b: its cuda:0 is its own, its cuda:1 nobody's (host a's rank 1 is another machine) */
    s[10].gpus[s[10].n_gpus++] = (mt_rank_gpu){.device = 1, .peak = 1 << 20, .top_frame = load};
    /* host c: each rank sees its GPU as cuda:0; rank 12 also maps rank 11's GPU as its cuda:1, and
     * rank 13 a GPU by the same ordinal as rank 11's but not its UUID */
    snprintf(s[11].gpus[0].uuid, sizeof s[11].gpus[0].uuid, "GPU-11");
    snprintf(s[12].gpus[0].uuid, sizeof s[12].gpus[0].uuid, "GPU-12");
    snprintf(s[13].gpus[0].uuid, sizeof s[13].gpus[0].uuid, "GPU-13");
    s[12].gpus[s[12].n_gpus++] =
        (mt_rank_gpu){.device = 1, .uuid = "GPU-11", .peak = 1 << 20, .top_frame = load};
    s[13].gpus[s[13].n_gpus++] =
        (mt_rank_gpu){.device = 1, .uuid = "GPU-99", .peak = 1 << 20, .top_frame = load};
    mt_rank_foreign *f;
    size_t nf;
    cr_assert_eq(mt_rank_foreign_gpus(s, 14, &f, &nf), 0);
    cr_assert_eq(nf, 12);
    for (size_t i = 0; i < 9; i++)
        cr_expect(f[i].rank == i + 1 && f[i].gpu == 0 && f[i].owner == 0, "%zu: %zu %zu %ld", i,
                  f[i].rank, f[i].gpu, f[i].owner);
    cr_expect(f[9].rank == 10 && f[9].owner == -1, "host b's cuda:1 is no rank's: %ld", f[9].owner);
    cr_expect(f[10].rank == 12 && f[10].owner == 11, "by UUID: %ld", f[10].owner);
    cr_expect(f[11].rank == 13 && f[11].owner == -1, "another UUID: %ld", f[11].owner);
    free(f);
    char line[MT_RANK_FOREIGN_LINES][MT_RANK_ENDING_LEN];
    cr_assert_eq(mt_rank_foreign_lines(s, 14, line), 10);
    cr_expect_str_eq(line[0], "rank 1 holds memory on cuda:0, rank 0's GPU (its own is cuda:1): "
                              "500.00 MiB by NVML, its CUDA context included; 1.00 MiB allocated "
                              "at its peak there, the most by load (t.py:3)");
    cr_expect(strncmp(line[7], "rank 8 holds", 12) == 0, "%s", line[7]);
    cr_expect_str_eq(line[8], "... and 4 more ranks' GPUs");
    cr_expect_str_eq(line[9], "on cuda:0, rank 0's GPU, 9 other ranks hold up to 4.39 GiB by NVML "
                              "(8.00 MiB allocated): each rank's largest, summed");
    /* the context alone, and a GPU nobody owns without NVML */
    mt_rank_summary two[2] = {s[9], s[10]};
    two[0].gpus[0].nvml_max = 0;
    cr_assert_eq(mt_rank_foreign_lines(two, 2, line), 2);
    cr_expect_str_eq(line[0], "rank 9 holds memory on cuda:0, no rank's own GPU (its own is "
                              "cuda:9): a CUDA context, no allocation (4.00 KiB of the driver's "
                              "static memory) (no NVML sample: its CUDA context is not counted)");
    cr_expect_str_eq(line[1], "rank 10 holds memory on cuda:1, no rank's own GPU (its own is "
                              "cuda:0): 1.00 MiB allocated at its peak there, the most by load "
                              "(t.py:3) (no NVML sample: its CUDA context is not counted)");
    /* one rank on its own GPU only, and traces without a rank: nothing */
    s[0].has_rank = 1;
    cr_expect_eq(mt_rank_foreign_lines(s, 1, line), 0);
    for (int i = 1; i < 10; i++)
        s[i].has_rank = 0;
    cr_expect_eq(mt_rank_foreign_lines(s, 10, line), 0);
}

/* samples/ddp.py --stray-context (tests/data/ddp_strayctx_rank{0,1}.mtrace, 2 x H200): every rank
 * calls torch.cuda.mem_get_info() before set_device, which makes a context on cuda:0 and allocates
 * nothing there. Only NVML sees it (820 MiB of rank 1's at most): the analysis reports the GPU
 * from NVML's samples, the report says nothing was allocated there, and the rank table names it. */
Test(ranks_report, a_context_alone_on_another_ranks_gpu_is_named_from_nvml)
{
    const char *dir = MT_TEST_DATA_DIR;
    char path[600], err[512], b1[32], want[512];
    snprintf(path, sizeof path, "%s/ddp_strayctx_rank1.mtrace", dir);
    mt_analysis *a;
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a->n_devices, 2);
    const mt_device_report *gpu0 = &a->devices[0];
    cr_assert_eq(gpu0->u.device, 0);
    cr_expect_eq(gpu0->u.alloc_count, 0);
    cr_expect_eq(gpu0->u.peak, 0);
    cr_expect(gpu0->n_nvml && gpu0->nvml_max == 859832320, "NVML's largest: %llu",
              (unsigned long long)gpu0->nvml_max);
    snprintf(want, sizeof want,
             "\n  rank 1 holds memory on cuda:0, rank 0's GPU (its own is cuda:1): %s by NVML, its "
             "CUDA context included; a CUDA context alone, nothing allocated\n",
             bytes(gpu0->nvml_max, b1, sizeof b1));
    mt_analysis_free(a);
    int status;
    char *out = run(&status,
                    MEMTRACE " report %s/ddp_strayctx_rank0.mtrace "
                             "%s/ddp_strayctx_rank1.mtrace",
                    dir, dir);
    cr_assert_eq(status, 0, "%s", out);
    cr_expect(strstr(out, want), "wanted%sin:\n%s", want, out);
    free(out);
    out = run(&status, MEMTRACE " report %s", path);
    cr_expect(strstr(out, "\ncuda:0 — NVIDIA H200, 139.80 GiB\n  nothing allocated here; NVML "
                          "lists the process on this GPU, 820.00 MiB at most (at +6.323463 s): a "
                          "CUDA context, which no CUDA call reports\n  allocations      0 (0 B),"),
              "%s", out);
    free(out);
    /* diff of the two ranks lists it, ungated, as what it is */
    out = run(&status, MEMTRACE " diff %s/ddp_strayctx_rank0.mtrace %s/ddp_strayctx_rank1.mtrace",
              dir, dir);
    cr_expect(strstr(out, "\nrank 1 cuda:0 — NVIDIA H200 (only in new; NVML lists the process "
                          "here, nothing allocated: a CUDA context alone; not gated)\n"),
              "%s", out);
    free(out);
    /* a trace whose process had no context beyond its own GPU gains no GPU from NVML */
    snprintf(path, sizeof path, "%s/ddp_strayctx_rank0.mtrace", dir);
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    cr_expect_eq(a->n_devices, 1);
    mt_analysis_free(a);
}

/* check --max-other-gpus on both GPU-recorded jobs: rank 0 holds at 0 (no GPU but its own); rank 1
 * is over 100 MiB on cuda:0 by NVML's number (the context included), also with nothing allocated
 * there; a budget above NVML's largest sample holds; --device 1 (rank 1's own) has no other GPU. */
Test(ranks_report, check_max_other_gpus_gates_a_rank_on_rank_0s_gpu)
{
    const char *dir = MT_TEST_DATA_DIR;
    int status;
    char *out = run(&status, MEMTRACE " check --max-other-gpus 100MiB %s/ddp_stray_rank0.mtrace "
                                      "%s/ddp_stray_rank1.mtrace",
                    dir, dir);
    cr_expect_eq(status, 1, "%s", out);
    cr_expect(strstr(out, "\n  (none)  on another GPU  0 B          budget 100.00 MiB   ok") &&
                  strstr(out, "\n  cuda:0  on another GPU  1.14 GiB     budget 100.00 MiB   "
                              "EXCEEDED by 1.04 GiB") &&
                  strstr(out, "(NVML's largest sample of the process there, its CUDA context "
                              "included; 256.00 MiB allocated; its own GPU is cuda:1)") &&
                  strstr(out, "load_checkpoint (samples/ddp.py:39)"),
              "%s", out);
    free(out);
    out = run(&status, MEMTRACE " check --max-other-gpus 100MiB %s/ddp_strayctx_rank1.mtrace", dir);
    cr_expect_eq(status, 1, "%s", out);
    cr_expect(strstr(out, "cuda:0  on another GPU  820.00 MiB   budget 100.00 MiB   EXCEEDED"),
              "%s", out);
    free(out);
    out = run(&status, MEMTRACE " check --max-other-gpus 2GiB %s/ddp_stray_rank0.mtrace "
                                "%s/ddp_stray_rank1.mtrace",
              dir, dir);
    cr_expect_eq(status, 0, "%s", out);
    free(out);
    out = run(&status, MEMTRACE " check --device 1 --max-other-gpus 0 %s/ddp_stray_rank1.mtrace",
              dir);
    cr_expect_eq(status, 0, "%s", out);
    cr_expect(strstr(out, "no GPU but its own holds its memory, of those checked; its own GPU is cuda:1"), "%s",
              out);
    free(out);
}
