/* memtrace in CI: `check` (budgets, exit codes, the stacks named on a breach), `diff` (runs
 * matched by frame names, both directions, identical runs, the gate) and their bad input, on the
 * synthetic traces of support/ci_traces.h (numbers known by construction) and on the GPU-recorded
 * fixtures (numbers from what PyTorch printed, tests/data/<name>.out). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ci_traces.h"
#include "memtrace/compact.h"
#include "memtrace/export.h"
#include "testutil.h"

#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define DATA MT_TEST_DATA_DIR

static char dir[512];

static void make_traces(void)
{
    mt_test_tmpname(dir, sizeof dir, "ci"); /* removed with what it holds at exit */
    cr_assert_eq(mkdir(dir, 0700), 0, "mkdir %s", dir);
    cr_assert_eq(ci_traces_write(dir), 0);
}

/* Runs a shell command; returns its exit status and its output (stdout and stderr) in *out. */
static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4200];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    cr_assert(p, "popen %s", cmd);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 1024 > cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, p);
        if (!got) break;
        n += got;
    }
    buf[n] = 0;
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "%s: did not exit", cmd);
    if (out) *out = buf;
    else free(buf);
    return WEXITSTATUS(st);
}

static mt_analysis *analyze(const char *path)
{
    char err[512];
    mt_analysis *a = NULL;
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    return a;
}

static const mt_device_report *dev(const mt_analysis *a, int ordinal)
{
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == ordinal) return &a->devices[i];
    cr_assert_fail("no cuda:%d", ordinal);
    return NULL;
}

/* A number PyTorch printed in a fixture's .out ("max_memory_allocated=170676224"). */
static uint64_t torch_number(const char *fixture, const char *key)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.out", DATA, fixture);
    size_t n;
    char *text = (char *)mt_test_slurp(path, &n);
    cr_assert(text, "%s", path);
    text = realloc(text, n + 1);
    text[n] = 0;
    char pat[64];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *p = strstr(text, pat);
    cr_assert(p, "%s: no %s", path, key);
    uint64_t v = strtoull(p + strlen(pat), NULL, 10);
    free(text);
    return v;
}

/* A number of the JSON PyTorch wrote beside a fixture ("max_allocated": 2286522376). */
static uint64_t torch_json_number(const char *fixture, const char *key)
{
    char path[512], pat[64];
    snprintf(path, sizeof path, "%s/%s.json", DATA, fixture);
    size_t n;
    char *text = (char *)mt_test_slurp(path, &n);
    cr_assert(text, "%s", path);
    text = realloc(text, n + 1);
    text[n] = 0;
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(text, pat);
    cr_assert(p, "%s: no %s", path, key);
    uint64_t v = strtoull(p + strlen(pat), NULL, 10);
    free(text);
    return v;
}

static int has(const char *text, const char *s) { return strstr(text, s) != NULL; }

/* ---- check: sizes --------------------------------------------------------------------------- */

Test(ci_check, sizes_are_read_exactly)
{
    make_traces();
    static const struct {
        const char *arg;
        uint64_t want;
    } ok[] = {{"2GiB", 2147483648ull},   {"1500MB", 1500000000ull}, {"1.5G", 1610612736ull},
              {"300M", 314572800ull},    {"123", 123},              {"0.5KiB", 512},
              {"1.5gib", 1610612736ull}, {"1TB", 1000000000000ull}, {"3145733B", 3145733},
              {"0", 0},                  {"2.25k", 2304},           {"1.0000001K", 1024}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char *out, want[64];
        run(&out, "%s check --json --max-peak %s %s/budget.mtrace", MEMTRACE, ok[i].arg, dir);
        snprintf(want, sizeof want, "\"peak_bytes\":%" PRIu64 ",", ok[i].want);
        cr_expect(has(out, want), "%s: want %s in %s", ok[i].arg, want, out);
        free(out);
    }
    static const char *const bad[] = {"1.5", "-1", "''", "x", "GiB", "1.5x", "1e3", "1..5G",
                                      "99999999999999999999", "18446744073709551616", "'5 MiB'",
                                      "0x10", "1.5KiBB"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *out;
        int rc = run(&out, "%s check --max-peak %s %s/budget.mtrace", MEMTRACE, bad[i], dir);
        cr_expect_eq(rc, 2, "%s: exit %d", bad[i], rc);
        cr_expect(has(out, "needs a size"), "%s: %s", bad[i], out);
        free(out);
    }
}

/* ---- check: each budget, just under and just over ------------------------------------------ */

Test(ci_check, peak_budget_holds_at_the_peak_and_fails_one_byte_below)
{
    make_traces();
    char *out;
    /* every GPU: cuda:1 has the larger peak */
    cr_expect_eq(run(&out, "%s check --max-peak %llu %s/budget.mtrace", MEMTRACE,
                     (unsigned long long)CI_BUDGET_PEAK1, dir), 0, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-peak %llu %s/budget.mtrace", MEMTRACE,
                     (unsigned long long)CI_BUDGET_PEAK1 - 1, dir), 1, "%s", out);
    cr_expect(has(out, "cuda:1  peak"), "%s", out);
    cr_expect(has(out, "EXCEEDED by 1 byte "), "the margin in bytes where units hide it: %s", out);
    cr_expect(has(out, "shard"), "the stack of cuda:1's peak: %s", out);
    free(out);
    /* --device 0 */
    cr_expect_eq(run(&out, "%s check --device 0 --max-peak %llu %s/budget.mtrace", MEMTRACE,
                     (unsigned long long)CI_BUDGET_PEAK0, dir), 0, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --device cuda:0 --max-peak %llu %s/budget.mtrace", MEMTRACE,
                     (unsigned long long)CI_BUDGET_PEAK0 - 1, dir), 1, "%s", out);
    cr_expect(has(out, "train_step") && has(out, "load_model"), "what was live at the peak: %s", out);
    cr_expect(!has(out, "leak_cache"), "allocated after the peak: %s", out);
    cr_expect(!has(out, "cuda:1"), "--device 0 only: %s", out);
    free(out);
}

Test(ci_check, allocated_peak_shows_the_tensors_of_its_own_moment)
{
    make_traces();
    char *out;
    cr_expect_eq(run(&out, "%s check --max-allocated-peak %llu %s/tensors.mtrace", MEMTRACE,
                     (unsigned long long)CI_TENSOR_PEAK, dir), 0, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-allocated-peak %llu %s/tensors.mtrace", MEMTRACE,
                     (unsigned long long)CI_TENSOR_PEAK - 1, dir), 1, "%s", out);
    cr_expect(has(out, CI_TENSOR_FN_B) && has(out, CI_TENSOR_FN_C), "%s", out);
    cr_expect(!has(out, CI_TENSOR_FN_WS), "the workspace came after the tensor peak: %s", out);
    free(out);
    /* the device peak is another moment, with other stacks */
    cr_expect_eq(run(&out, "%s check --max-peak %llu %s/tensors.mtrace", MEMTRACE,
                     (unsigned long long)CI_TENSOR_DEVICE_PEAK - 1, dir), 1, "%s", out);
    cr_expect(has(out, CI_TENSOR_FN_WS) && has(out, CI_TENSOR_FN_C), "%s", out);
    cr_expect(!has(out, CI_TENSOR_FN_B), "freed before the device peak: %s", out);
    free(out);
    /* the API: the moment and the stacks */
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/tensors.mtrace", dir);
    mt_analysis *a = analyze(path);
    mt_budgets b = {.device = MT_BUDGET_ALL_DEVICES, .set = {[MT_BUDGET_ALLOCATED_PEAK] = 1},
                    .limit = {[MT_BUDGET_ALLOCATED_PEAK] = CI_TENSOR_PEAK - 1}};
    mt_verdict *v;
    size_t n;
    cr_assert_eq(mt_check_budgets(a, &b, &v, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1);
    cr_expect(v[0].exceeded);
    cr_expect_eq(v[0].value, CI_TENSOR_PEAK);
    cr_expect_eq(v[0].counter, CI_TENSOR_PEAK, "PyTorch's own counter, from the events");
    cr_expect_eq(v[0].time_ns, 6 * 1000000ull, "the tensor peak's moment");
    cr_expect_eq(v[0].stacks.n, 2);
    cr_expect_eq(v[0].stacks_whole, CI_TENSOR_PEAK, "the stacks make the value");
    mt_verdicts_free(v, n);
    mt_analysis_free(a);
}

Test(ci_check, allocated_peak_is_refused_on_a_trace_without_tensors)
{
    make_traces();
    char *out;
    cr_expect_eq(run(&out, "%s check --max-allocated-peak 1G %s/budget.mtrace", MEMTRACE, dir), 2,
                 "%s", out);
    cr_expect(has(out, "no allocated peak") && has(out, "--tensors"), "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-allocated-peak 1G %s/cifar_default.mtrace", MEMTRACE,
                     DATA), 2, "%s", out);
    free(out);
}

Test(ci_check, live_at_exit_counts_what_the_program_holds)
{
    make_traces();
    char *out;
    cr_expect_eq(run(&out, "%s check --max-live-at-exit 512KiB %s/budget.mtrace", MEMTRACE, dir), 0,
                 "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-live-at-exit %llu %s/budget.mtrace", MEMTRACE,
                     (unsigned long long)CI_BUDGET_LEAK0 - 1, dir), 1, "%s", out);
    cr_expect(has(out, "leak_cache"), "%s", out);
    cr_expect(!has(out, "load_model"), "freed before the end: %s", out);
    free(out);
    /* a PyTorch run keeps its cache, cuBLAS workspaces and the driver's allocations until exit:
     * none of it is the program's */
    mt_analysis *a = analyze(DATA "/cifar_default.mtrace");
    cr_assert_gt(dev(a, 0)->u.in_use, 100 * CI_MiB, "cache, workspaces and the driver's at exit");
    mt_analysis_free(a);
    cr_expect_eq(run(&out, "%s check --max-live-at-exit 0 %s/cifar_default.mtrace", MEMTRACE, DATA),
                 0, "%s", out);
    free(out);
}

Test(ci_check, failed_requests)
{
    make_traces();
    char *out;
    cr_expect_eq(run(&out, "%s check --max-failed %d %s/budget.mtrace", MEMTRACE, CI_BUDGET_FAILED,
                     dir), 0, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-failed %d %s/budget.mtrace", MEMTRACE,
                     CI_BUDGET_FAILED - 1, dir), 1, "%s", out);
    cr_expect(has(out, "too_big"), "the stack that asked: %s", out);
    free(out);
    /* alloc_patterns makes one 1 PiB request that fails (its .out: oom_result=2) */
    cr_assert_eq(torch_number("alloc_patterns", "oom_result"), 2);
    cr_expect_eq(run(&out, "%s check --max-failed 0 %s/alloc_patterns.mtrace", MEMTRACE, DATA), 1,
                 "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-failed 1 %s/alloc_patterns.mtrace", MEMTRACE, DATA), 0,
                 "%s", out);
    free(out);
}

Test(ci_check, every_rank_is_checked_and_named)
{
    make_traces();
    char *out;
    cr_expect_eq(run(&out, "%s check --max-peak %llu %s/rank0.mtrace %s/rank1.mtrace", MEMTRACE,
                     (unsigned long long)CI_RANK1_PEAK - 1, dir, dir), 1, "%s", out);
    char *r0 = strstr(out, "rank0.mtrace"), *r1 = strstr(out, "rank1.mtrace");
    cr_assert(r0 && r1 && r0 < r1, "each trace named, in order: %s", out);
    *r1 = 0; /* rank 0's lines */
    cr_expect(!has(r0, "EXCEEDED") && has(r0, "ok"), "rank 0 holds: %s", r0);
    *r1 = 'r';
    cr_expect(has(r1, "EXCEEDED"), "rank 1 is over: %s", out);
    cr_expect(has(r1, CI_RANK_LABEL(1)), "named by its rank: %s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --markdown --max-peak %llu %s/rank0.mtrace %s/rank1.mtrace",
                     MEMTRACE, (unsigned long long)CI_RANK1_PEAK, dir, dir), 0, "%s", out);
    cr_expect(has(out, "`" CI_RANK_LABEL(0) "`") && has(out, "`" CI_RANK_LABEL(1) "`"), "%s", out);
    free(out);
    /* a directory of a job's traces: every one checked, in rank order */
    char job[600];
    snprintf(job, sizeof job, "%s/job", dir);
    cr_assert_eq(mkdir(job, 0755), 0);
    cr_assert_eq(run(NULL, "cp %s/rank1.mtrace %s/rank0.mtrace %s/", dir, dir, job), 0);
    cr_expect_eq(run(&out, "%s check --json --max-peak %llu %s", MEMTRACE,
                     (unsigned long long)CI_RANK1_PEAK - 1, job), 1, "%s", out);
    const char *l0 = strstr(out, "\"label\":\"" CI_RANK_LABEL(0)),
               *l1 = strstr(out, "\"label\":\"" CI_RANK_LABEL(1));
    cr_expect(l0 && l1 && l0 < l1, "both ranks, rank 0 first: %s", out);
    cr_expect(has(out, "\"budgets_checked\":2,"), "%s", out);
    free(out);
}

Test(ci_check, bad_input_exits_2)
{
    make_traces();
    char garbage[600];
    snprintf(garbage, sizeof garbage, "%s/garbage.mtrace", dir);
    cr_assert_eq(mt_test_spit(garbage, "not a trace at all", 18), 0);
    struct {
        const char *args;
        const char *msg;
    } cases[] = {
        {"--max-peak 1G /nonexistent.mtrace", "cannot open"},
        {"--max-peak 1G GARBAGE", ""},
        {"BUDGET", "no budget"},
        {"--max-peak 1G", "no trace"},
        {"--max-peak 1G --device 7 BUDGET", "cuda:7"},
        {"--max-peak 1G --device gpu0 BUDGET", "--device"},
        {"--max-peak 1G --json --markdown BUDGET", "exclude"},
        {"--max-peak 1G --bogus BUDGET", "unknown option"},
        {"--max-failed 1k BUDGET", "needs a count"},
        {"--max-peak BUDGET", "needs a size"},
        /* bad input wins over a breach: a gate must not pass or fail on what it could not read */
        {"--max-peak 1 BUDGET /nonexistent.mtrace", "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1024] = "", *w = args;
        for (const char *p = cases[i].args; *p;) {
            if (strncmp(p, "BUDGET", 6) == 0) {
                w += sprintf(w, "%s/budget.mtrace", dir);
                p += 6;
            } else if (strncmp(p, "GARBAGE", 7) == 0) {
                w += sprintf(w, "%s", garbage);
                p += 7;
            } else {
                *w++ = *p++;
                *w = 0;
            }
        }
        char *out;
        int rc = run(&out, "%s check %s", MEMTRACE, args);
        cr_expect_eq(rc, 2, "check %s: exit %d: %s", args, rc, out);
        cr_expect(has(out, cases[i].msg), "check %s: %s", args, out);
        free(out);
    }
}

/* ---- check on the GPU-recorded fixtures ------------------------------------------------------ */

static void allocated_budget(const char *fixture)
{
    uint64_t want = torch_number(fixture, "max_memory_allocated");
    char *out;
    cr_expect_eq(run(&out, "%s check --max-allocated-peak %" PRIu64 " %s/%s.mtrace", MEMTRACE, want,
                     DATA, fixture), 0, "%s: %s", fixture, out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-allocated-peak %" PRIu64 " %s/%s.mtrace", MEMTRACE,
                     want - 1, DATA, fixture), 1, "%s: %s", fixture, out);
    cr_expect(has(out, "EXCEEDED by 1 byte "), "%s: %s", fixture, out);
    free(out);
}

Test(ci_check, allocated_budget_is_pytorchs_max_memory_allocated)
{
    allocated_budget("cifar_tensors");
    allocated_budget("cifar_tensors_b512");
    allocated_budget("cifar_tensors_async"); /* backend:cudaMallocAsync */
    allocated_budget("cifar_tensors_h200");  /* format version 2, the 2026-11-28 recorder */
}

/* The allocated and reserved peaks that check, diff and the Markdown table use are what PyTorch
 * itself printed, in tensor mode and under backend:cudaMallocAsync alike. */
Test(ci_check, allocator_peaks_are_pytorchs_own_numbers)
{
    static const struct {
        const char *fixture;
        int json;
        int kind;
    } f[] = {{"cifar_tensors", 0, MT_KIND_TENSOR},      {"cifar_tensors_b512", 0, MT_KIND_TENSOR},
             {"cifar_tensors_async", 0, MT_KIND_ASYNC}, {"gpt2_tensors", 1, MT_KIND_TENSOR},
             {"resnet18_tensors", 1, MT_KIND_TENSOR}, {"gpt2_amp_tensors", 1, MT_KIND_TENSOR},
             {"resnet18_compile_tensors", 1, MT_KIND_TENSOR},
             {"cifar_tensors_h200", 0, MT_KIND_TENSOR}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.mtrace", DATA, f[i].fixture);
        mt_analysis *a = analyze(path);
        mt_allocator_peaks p;
        mt_allocator_peaks_of(a, dev(a, 0), &p);
        uint64_t alloc = f[i].json ? torch_json_number(f[i].fixture, "max_allocated")
                                   : torch_number(f[i].fixture, "max_memory_allocated");
        uint64_t res = f[i].json ? torch_json_number(f[i].fixture, "max_reserved")
                                 : torch_number(f[i].fixture, "max_memory_reserved");
        cr_expect(p.allocated_known && p.reserved_known, "%s", f[i].fixture);
        cr_expect_eq(p.allocated_kind, f[i].kind, "%s", f[i].fixture);
        cr_expect_eq(p.allocated_peak, alloc, "%s: max_memory_allocated", f[i].fixture);
        cr_expect_eq(p.reserved_peak, res, "%s: max_memory_reserved", f[i].fixture);
        mt_analysis_free(a);
    }
    /* default mode: reserved (the segments) is known, allocated is not */
    mt_analysis *a = analyze(DATA "/cifar_default.mtrace");
    mt_allocator_peaks p;
    mt_allocator_peaks_of(a, dev(a, 0), &p);
    cr_expect(!p.allocated_known);
    cr_expect_eq(p.reserved_peak, torch_number("cifar_default", "max_memory_reserved"));
    mt_analysis_free(a);
}

Test(ci_check, peak_budget_on_fixtures_names_the_user_frames)
{
    mt_analysis *a = analyze(DATA "/cifar_tensors_b512.mtrace");
    uint64_t peak = dev(a, 0)->u.peak;
    mt_analysis_free(a);
    char *out;
    cr_expect_eq(run(&out, "%s check --max-peak %" PRIu64 " %s/cifar_tensors_b512.mtrace", MEMTRACE,
                     peak, DATA), 0, "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --max-peak %" PRIu64 " %s/cifar_tensors_b512.mtrace", MEMTRACE,
                     peak - 1, DATA), 1, "%s", out);
    cr_expect(has(out, "(user view)"), "%s", out);
    cr_expect(has(out, "cifar.py:"), "the program's own lines: %s", out);
    cr_expect(!has(out, "0x"), "never an address: %s", out);
    free(out);
}

/* ---- diff ------------------------------------------------------------------------------------ */

static const mt_stack_delta *find_stack(const mt_device_delta *dd, const char *frame)
{
    const mt_stack_delta *found = NULL;
    for (size_t i = 0; i < dd->n_stacks; i++)
        for (size_t k = 0; k < dd->stacks[i].n_frames; k++)
            if (strstr(dd->stacks[i].frames[k], frame)) {
                cr_expect(!found || found == &dd->stacks[i], "%s in two stacks", frame);
                found = &dd->stacks[i];
            }
    cr_assert(found, "no stack with %s", frame);
    return found;
}

Test(ci_diff, stacks_match_by_name_across_machines_and_moved_lines)
{
    make_traces();
    char pb[600], pn[600];
    snprintf(pb, sizeof pb, "%s/moved_base.mtrace", dir);
    snprintf(pn, sizeof pn, "%s/moved_new.mtrace", dir);
    mt_analysis *b = analyze(pb), *n = analyze(pn);
    mt_diff *d;
    cr_assert_eq(mt_diff_analyses(b, n, &d), 0);
    cr_assert_eq(d->n_devices, 1);
    const mt_device_delta *dd = &d->devices[0];
    const mt_stack_delta *s = find_stack(dd, "grow");
    cr_expect_eq(s->base_bytes, CI_MOVED_GROW_BASE);
    cr_expect_eq(s->new_bytes, CI_MOVED_GROW_NEW);
    cr_expect(!s->moved);
    s = find_stack(dd, "step");
    cr_expect_eq(s->base_bytes, CI_MOVED_STEP);
    cr_expect_eq(s->new_bytes, CI_MOVED_STEP_NEW);
    cr_expect(s->moved, "line 20 -> 22: matched once lines are ignored");
    s = find_stack(dd, "keep");
    cr_expect(s->base_bytes == CI_MOVED_KEEP && s->new_bytes == CI_MOVED_KEEP && !s->moved,
              "another directory on another machine, another code id: the same stack");
    s = find_stack(dd, "only_base");
    cr_expect(s->base_bytes == CI_MOVED_ONLY_BASE && s->new_count == 0, "gone");
    s = find_stack(dd, "only_new");
    cr_expect(s->new_bytes == CI_MOVED_ONLY_NEW && s->base_count == 0, "new");
    s = find_stack(dd, "libfoo.so+0x");
    cr_expect(s->base_count == 1 && s->new_count == 1,
              "a frame without a symbol is not matched by its offset, which moves with the build");
    cr_expect_eq(dd->n_stacks, 6);
    /* the stacks are sorted by change: the largest growth first, the largest drop last */
    cr_expect_eq(dd->stacks[0].new_bytes, CI_MOVED_ONLY_NEW);
    cr_expect_eq(dd->stacks[dd->n_stacks - 1].base_bytes, CI_MOVED_ONLY_BASE);
    int moved_line = 0;
    for (size_t i = 0; i < dd->n_lines; i++)
        if (strcmp(dd->lines[i].function, "step") == 0)
            moved_line = dd->lines[i].moved && dd->lines[i].base_line == 20 && dd->lines[i].new_line == 22;
    cr_expect(moved_line, "the Python line moved from 20 to 22");
    mt_diff_free(d);
    mt_analysis_free(b);
    mt_analysis_free(n);
    char *out;
    cr_expect_eq(run(&out, "%s diff %s %s", MEMTRACE, pb, pn), 0, "%s", out);
    cr_expect(has(out, "(moved)") && has(out, "new at the peak") && has(out, "gone at the peak"),
              "%s", out);
    cr_expect(has(out, "train.py:22 (was :20) in step"), "%s", out);
    free(out);
}

/* The fixtures b256 -> b512: PyTorch's own numbers change by what its .out files say. */
static void fixture_pair(const char *base, const char *new_, int64_t want_alloc, int64_t want_res)
{
    char pb[512], pn[512];
    snprintf(pb, sizeof pb, "%s/%s.mtrace", DATA, base);
    snprintf(pn, sizeof pn, "%s/%s.mtrace", DATA, new_);
    mt_analysis *b = analyze(pb), *n = analyze(pn);
    mt_diff *d;
    cr_assert_eq(mt_diff_analyses(b, n, &d), 0);
    cr_assert_eq(d->n_devices, 1);
    const mt_device_delta *dd = &d->devices[0];
    cr_assert(dd->base_alloc.allocated_known && dd->new_alloc.allocated_known);
    cr_expect_eq(mt_delta(dd->base_alloc.allocated_peak, dd->new_alloc.allocated_peak), want_alloc);
    cr_expect_eq(mt_delta(dd->base_alloc.reserved_peak, dd->new_alloc.reserved_peak), want_res);
    cr_expect(!d->modes_differ);
    uint64_t sb = 0, sn = 0;
    int changed = 0;
    for (size_t i = 0; i < dd->n_stacks; i++) {
        sb += dd->stacks[i].base_bytes;
        sn += dd->stacks[i].new_bytes;
        changed += dd->stacks[i].base_bytes != dd->stacks[i].new_bytes;
    }
    cr_expect_eq(sb, dd->base->u.peak, "every byte at the base's peak is in one stack");
    cr_expect_eq(sn, dd->new_->u.peak, "every byte at the new peak is in one stack");
    cr_expect_gt(changed, 0, "a larger batch changes stacks at the peak");
    /* the gate: just below and just above the change */
    double pct = mt_peak_change_pct(dd);
    char *out;
    double below = pct > 0.001 ? pct - 0.001 : 0;
    int rc = run(&out, "%s diff --fail-on-increase %.4f %s %s", MEMTRACE, below, pb, pn);
    cr_expect_eq(rc, pct > 0 ? 1 : 0, "%s -> %s at %.4f%%: %s", base, new_, below, out);
    free(out);
    cr_expect_eq(run(&out, "%s diff --fail-on-increase %.4f%% %s %s", MEMTRACE, fabs(pct) + 0.001,
                     pb, pn), 0, "%s", out);
    free(out);
    mt_diff_free(d);
    mt_analysis_free(b);
    mt_analysis_free(n);
}

Test(ci_diff, fixtures_both_directions)
{
    int64_t alloc = (int64_t)torch_number("cifar_tensors_b512", "max_memory_allocated") -
                    (int64_t)torch_number("cifar_tensors", "max_memory_allocated");
    int64_t res = (int64_t)torch_number("cifar_tensors_b512", "max_memory_reserved") -
                  (int64_t)torch_number("cifar_tensors", "max_memory_reserved");
    cr_assert_gt(alloc, 0);
    fixture_pair("cifar_tensors", "cifar_tensors_b512", alloc, res);
    fixture_pair("cifar_tensors_b512", "cifar_tensors", -alloc, -res);
    /* mirrored: the same stacks grew one way and shrank the other */
    mt_analysis *a = analyze(DATA "/cifar_tensors.mtrace"), *b = analyze(DATA "/cifar_tensors_b512.mtrace");
    mt_diff *ab, *ba;
    cr_assert_eq(mt_diff_analyses(a, b, &ab), 0);
    cr_assert_eq(mt_diff_analyses(b, a, &ba), 0);
    cr_assert_eq(ab->devices[0].n_stacks, ba->devices[0].n_stacks);
    size_t n = ab->devices[0].n_stacks;
    for (size_t i = 0; i < n; i++) {
        const mt_stack_delta *x = &ab->devices[0].stacks[i], *y = &ba->devices[0].stacks[n - 1 - i];
        cr_expect_eq(mt_delta(x->base_bytes, x->new_bytes), -mt_delta(y->base_bytes, y->new_bytes));
    }
    mt_diff_free(ab);
    mt_diff_free(ba);
    mt_analysis_free(a);
    mt_analysis_free(b);
}

Test(ci_diff, identical_traces_diff_to_zero)
{
    static const char *const fixtures[] = {"cifar_tensors", "cifar_default", "alloc_patterns",
                                           "gpt2_tensors"};
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s.mtrace", DATA, fixtures[f]);
        mt_analysis *a = analyze(p), *b = analyze(p);
        mt_diff *d;
        cr_assert_eq(mt_diff_analyses(a, b, &d), 0);
        for (size_t i = 0; i < d->n_devices; i++) {
            const mt_device_delta *dd = &d->devices[i];
            cr_expect_eq(mt_peak_change_pct(dd), 0.0);
            for (size_t k = 0; k < dd->n_stacks; k++)
                cr_expect(dd->stacks[k].base_bytes == dd->stacks[k].new_bytes &&
                              dd->stacks[k].base_count == dd->stacks[k].new_count &&
                              dd->stacks[k].new_count > 0 && !dd->stacks[k].moved,
                          "%s: a stack changed", fixtures[f]);
            for (size_t k = 0; k < dd->n_lines; k++)
                cr_expect(dd->lines[k].base_bytes == dd->lines[k].new_bytes &&
                          dd->lines[k].base_line == dd->lines[k].new_line);
            for (size_t k = 0; k < dd->n_leaks; k++)
                cr_expect_eq(dd->leaks[k].base_bytes, dd->leaks[k].new_bytes);
        }
        mt_diff_free(d);
        mt_analysis_free(a);
        mt_analysis_free(b);
        char *out;
        cr_expect_eq(run(&out, "%s diff --fail-on-increase 0 %s %s", MEMTRACE, p, p), 0, "%s", out);
        cr_expect(!has(out, "grew most") && !has(out, "shrank most") && !has(out, "new at the") &&
                      !has(out, "gone at the"),
                  "%s: nothing listed: %s", fixtures[f], out);
        free(out);
        cr_expect_eq(run(&out, "%s diff --json %s %s", MEMTRACE, p, p), 0);
        cr_expect(has(out, "\"stacks\":[]") && has(out, "\"lines\":[]"), "%s", out);
        free(out);
    }
}

Test(ci_diff, a_gpu_only_in_new_grows_without_bound)
{
    make_traces();
    char *out;
    /* two ranks paired by ordinal (asked: on their own, ranks pair their own GPUs) */
    cr_expect_eq(run(&out, "%s diff --devices ordinal --fail-on-increase 1000 %s/rank0.mtrace "
                           "%s/rank1.mtrace", MEMTRACE, dir, dir), 1, "%s", out);
    cr_expect(has(out, "only in new") && has(out, "only in base"), "%s", out);
    free(out);
    /* rank 0's cuda:0 against rank 1's cuda:1: a change in percent, gated as any */
    double pct = ((double)CI_RANK1_PEAK - (double)CI_RANK0_PEAK) * 100.0 / (double)CI_RANK0_PEAK;
    cr_assert(pct > 0);
    cr_expect_eq(run(&out, "%s diff --fail-on-increase %g %s/rank0.mtrace %s/rank1.mtrace",
                     MEMTRACE, pct / 2, dir, dir), 1, "%s", out);
    cr_expect(has(out, "rank 0 cuda:0 vs rank 1 cuda:1") && !has(out, "only in"), "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s diff --fail-on-increase %g %s/rank0.mtrace %s/rank1.mtrace",
                     MEMTRACE, pct * 2, dir, dir), 0, "%s", out);
    free(out);
}

Test(ci_diff, bad_input_exits_2)
{
    make_traces();
    static const char *const cases[] = {
        "BUDGET", "BUDGET BUDGET BUDGET", "BUDGET /nonexistent.mtrace",
        "--fail-on-increase ten BUDGET BUDGET", "--fail-on-increase -5 BUDGET BUDGET",
        "--fail-on-increase BUDGET BUDGET", "--json --markdown BUDGET BUDGET", "--top 0 BUDGET BUDGET",
        "--bogus BUDGET BUDGET"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1024] = "", *w = args;
        for (const char *p = cases[i]; *p;) {
            if (strncmp(p, "BUDGET", 6) == 0) {
                w += sprintf(w, "%s/budget.mtrace", dir);
                p += 6;
            } else {
                *w++ = *p++;
                *w = 0;
            }
        }
        char *out;
        int rc = run(&out, "%s diff %s", MEMTRACE, args);
        cr_expect_eq(rc, 2, "diff %s: exit %d: %s", args, rc, out);
        cr_expect(has(out, "memtrace: diff:"), "diff %s: %s", args, out);
        free(out);
    }
}

/* ---- the JSON "schema" key on every JSON output ------------------------------------------------- */

Test(ci_json, every_json_output_starts_with_its_schema)
{
    make_traces();
    char want[32], *out;
    snprintf(want, sizeof want, "{\"schema\":%d,", MT_JSON_SCHEMA);
    const char *cmds[] = {"report --json BUDGET", "report --json BUDGET BUDGET",
                          "check --json --max-peak 1G BUDGET", "diff --json BUDGET BUDGET"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char args[1024] = "", *w = args;
        for (const char *p = cmds[i]; *p;) {
            if (strncmp(p, "BUDGET", 6) == 0) {
                w += sprintf(w, "%s/budget.mtrace", dir);
                p += 6;
            } else {
                *w++ = *p++;
                *w = 0;
            }
        }
        cr_expect_eq(run(&out, "%s %s", MEMTRACE, args), 0);
        cr_expect_eq(strncmp(out, want, strlen(want)), 0, "%s: %.80s", args, out);
        free(out);
    }
}

/* A trace whose CUPTI activity records stopped mid-run (moved_new.mtrace: a profiler took them)
 * says so in Markdown and in check's outputs, with when; one whose records came (moved_base) says
 * nothing. */
Test(ci, markdown_says_when_activity_records_stopped)
{
    make_traces();
    char *out;
    cr_expect_eq(run(&out, "%s report --markdown %s/moved_new.mtrace", MEMTRACE, dir), 0, "%s",
                 out);
    cr_expect(has(out, "> ⚠️ driver\\-internal allocations and CUDA arrays made after "
                       "\\+0\\.001005 s are not in the trace \\(CUPTI's activity records stopped "
                       "then\\): a peak after it leaves them out"),
              "%s", out);
    free(out);
    /* check says it too, in every format */
    cr_expect_eq(run(&out, "%s check --max-peak 1G %s/moved_new.mtrace", MEMTRACE, dir), 0, "%s",
                 out);
    cr_expect(has(out, "  NOTE: driver-internal allocations and CUDA arrays made after +0.001005 s "
                       "are not in the trace"),
              "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --json --max-peak 1G %s/moved_new.mtrace", MEMTRACE, dir), 0,
                 "%s", out);
    cr_expect(has(out, "\"activity_records\":\"stopped\""), "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s check --markdown --max-peak 1G %s/moved_new.mtrace", MEMTRACE, dir),
                 0, "%s", out);
    cr_expect(has(out,
                  "> ⚠️ `python3[2002] on ci-runner`: driver\\-internal allocations and CUDA "
                  "arrays made after \\+0\\.001005 s"),
              "%s", out);
    free(out);
    cr_expect_eq(run(&out, "%s report --markdown %s/moved_base.mtrace", MEMTRACE, dir), 0, "%s",
                 out);
    cr_expect(!has(out, "activity records"), "%s", out);
    free(out);
}
