/* `memtrace record` as a wrapper: it must hand the command's exit status, output and environment
 * through unchanged (no GPU here: the recorder library is preloaded but never initialized); its
 * output pattern always names the pid and its directory is checked before the command starts; it
 * waits for traced processes that outlive the command (simulated: the command writes the
 * manifest line a recorder would write, and leaves a process holding the trace open). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define INJECT MT_TEST_BIN_DIR "/src/record/libmemtrace_inject.so"

static void need_recorder(void)
{
    struct stat st;
    if (stat(INJECT, &st) != 0) cr_skip_test("the recorder was not built (no CUPTI headers)");
}

static int status_of(const char *cmd)
{
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s", cmd);
    return WEXITSTATUS(st);
}

/* stdout of a shell command, malloc'd */
static char *output_of(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    pclose(p);
    return strdup(buf);
}

Test(cli_record, returns_the_commands_exit_status_and_128_plus_signal)
{
    need_recorder();
    cr_expect_eq(status_of(MEMTRACE " record -q -- sh -c 'exit 7'"), 7);
    cr_expect_eq(status_of(MEMTRACE " record -q -- sh -c 'exit 0'"), 0);
    cr_expect_eq(status_of(MEMTRACE " record -q -- sh -c 'kill -TERM $$'"), 128 + 15);
    cr_expect_eq(status_of(MEMTRACE " record -q -- /nonexistent/program 2>/dev/null"), 127);
}

Test(cli_record, leaves_the_commands_output_alone)
{
    need_recorder();
    char *plain = output_of("sh -c 'echo out; echo err >&2' 2>&1");
    char *traced = output_of(MEMTRACE " record -q -- sh -c 'echo out; echo err >&2' 2>&1");
    cr_expect_str_eq(traced, plain, "with -q, nothing but the command's own output");
    free(plain);
    free(traced);
}

Test(cli_record, preloads_the_recorder_and_names_it_for_the_driver)
{
    need_recorder();
    char *env = output_of(MEMTRACE " record -q -- sh -c 'echo $CUDA_INJECTION64_PATH; "
                                   "echo $LD_PRELOAD'");
    cr_expect(strstr(env, "libmemtrace_inject.so\n"), "%s", env);
    const char *second = strchr(env, '\n'); /* NULL when the command printed nothing */
    cr_expect(second && strstr(second + 1, "libmemtrace_inject.so"), "LD_PRELOAD: %s", env);
    free(env);
    env = output_of("LD_PRELOAD=libm.so.6 " MEMTRACE " record -q --no-preload -- sh -c 'echo $LD_PRELOAD'");
    cr_expect_str_eq(env, "libm.so.6\n", "--no-preload leaves LD_PRELOAD alone");
    free(env);
}

Test(cli_record, tensor_mode_leaves_the_allocator_alone)
{
    need_recorder();
    char *env = output_of("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True " MEMTRACE
                          " record -q --tensors -- sh -c 'echo $PYTORCH_CUDA_ALLOC_CONF "
                          "$MEMTRACE_TENSORS'");
    cr_expect_str_eq(env, "expandable_segments:True 1\n");
    free(env);
}

Test(cli_record, async_tensor_mode_merges_into_the_users_allocator_settings)
{
    need_recorder();
    char *conf = output_of("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,backend:native " MEMTRACE
                           " record -q --tensors=async -- sh -c 'echo $PYTORCH_CUDA_ALLOC_CONF'");
    cr_expect_str_eq(conf, "max_split_size_mb:128,backend:cudaMallocAsync\n");
    free(conf);
    conf = output_of("env -u PYTORCH_CUDA_ALLOC_CONF " MEMTRACE
                     " record -q --tensors=async -- sh -c 'echo $PYTORCH_CUDA_ALLOC_CONF "
                     "${MEMTRACE_TENSORS:-none}'");
    cr_expect_str_eq(conf, "backend:cudaMallocAsync none\n");
    free(conf);
}

Test(cli_record, bad_arguments_are_one_line_and_status_2)
{
    cr_expect_eq(status_of(MEMTRACE " record --help > /dev/null"), 0);
    cr_expect_eq(status_of(MEMTRACE " record --bogus -- true 2>/dev/null"), 2);
    cr_expect_eq(status_of(MEMTRACE " record 2>/dev/null"), 2);
    cr_expect_eq(status_of(MEMTRACE " record --stacks sideways -- true 2>/dev/null"), 2);
    cr_expect_eq(status_of("test $(" MEMTRACE " record --bogus -- true 2>&1 | wc -l) = 1"), 0);
    cr_expect_eq(status_of(MEMTRACE " --help > /dev/null"), 0);
    cr_expect_eq(status_of(MEMTRACE " nosuchcommand 2>/dev/null"), 2);
}

/* --help names every code the recorder expands in -o (src/record/cuda/output.c): a job's ranks
 * need %r to be found */
Test(cli_record, help_names_every_output_pattern_code)
{
    static const char *const codes[] = {"%p = pid", "%r = rank", "%c = command name",
                                        "%h = host name"};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, MEMTRACE " record --help | grep -qF '%s'", codes[i]);
        cr_expect_eq(status_of(cmd), 0, "record --help does not say '%s'", codes[i]);
    }
}

Test(cli_record, output_directory_is_checked_before_the_command_starts)
{
    need_recorder();
    char marker[256];
    mt_test_tmpname(marker, sizeof marker, "ran");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, MEMTRACE " record -o /nonexistent_dir/x.mtrace -- touch %s 2>&1",
             marker);
    char *out = output_of(cmd);
    cr_expect(strstr(out, "/nonexistent_dir") && strstr(out, "no such directory"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, MEMTRACE " record -o /nonexistent_dir/x.mtrace -- touch %s 2>/dev/null",
             marker);
    cr_expect_eq(status_of(cmd), 2);
    cr_expect_neq(access(marker, F_OK), 0, "the command did not run");
    cr_expect_eq(status_of(MEMTRACE " record -q -o '/tmp/%p/x' -- true 2>/dev/null"), 2,
                 "%%p in a directory can never exist");
}

Test(cli_record, every_process_gets_its_own_file)
{
    need_recorder();
    char *pat = output_of(MEMTRACE " record -q -o run.mtrace -- sh -c 'echo $MEMTRACE_OUTPUT'");
    cr_expect(strlen(pat) > 14 && strcmp(pat + strlen(pat) - 15, "/run.%p.mtrace\n") == 0,
              "the pid is added before the extension: %s", pat);
    free(pat);
    pat = output_of(MEMTRACE " record -q -o /tmp/t.%p.x -- sh -c 'echo $MEMTRACE_OUTPUT'");
    cr_expect_str_eq(pat, "/tmp/t.%p.x\n", "a pattern with %%p is kept");
    free(pat);
    pat = output_of(MEMTRACE " record -q -- sh -c 'echo $MEMTRACE_OUTPUT'");
    cr_expect(strstr(pat, "/memtrace.%c.%h.%p.mtrace\n"), "default names host and pid: %s", pat);
    free(pat);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A command that leaves behind a process holding TRACE open for SECONDS, listed in the manifest
 * as a recorder lists itself ("PID trace PATH", once its trace is open); the process' pid goes to
 * PIDFILE.
 * Its output goes nowhere, so that nothing but `record` is waited for. */
static void outliving_command(char *cmd, size_t len, const char *trace, int seconds,
                              const char *pidfile)
{
    snprintf(cmd, len,
             "sh -c 'sh -c \"exec 3>>%s; echo \\$\\$ trace %s >> \\$MEMTRACE_MANIFEST; "
             "echo \\$\\$ > %s; exec sleep %d\" < /dev/null > /dev/null 2>&1 & "
             "while [ ! -s %s ]; do sleep 0.05; done'",
             trace, trace, pidfile, seconds, pidfile);
}

Test(cli_record, waits_for_traced_processes_that_outlive_the_command, .timeout = 60)
{
    need_recorder();
    char trace[256], pidfile[256], inner[2048], cmd[2600];
    mt_test_tmpname(trace, sizeof trace, "outlived.mtrace");
    mt_test_tmpname(pidfile, sizeof pidfile, "pid");
    size_t n;
    uint8_t *b = mt_test_slurp(MT_TEST_DATA_DIR "/alloc_patterns.mtrace", &n);
    cr_assert_eq(mt_test_spit(trace, b, n), 0);
    free(b);
    outliving_command(inner, sizeof inner, trace, 2, pidfile);
    snprintf(cmd, sizeof cmd, MEMTRACE " record -- %s 2>&1", inner);
    double t0 = now_s();
    char *out = output_of(cmd);
    double s = now_s() - t0;
    cr_expect_geq(s, 1.5, "record returned after %.2f s, before the writer was done", s);
    cr_expect(strstr(out, "waiting for 1 traced process still writing"), "%s", out);
    cr_expect(strstr(out, "events"), "summarized once the writer was done: %s", out);
    free(out);
    unlink(trace);
    unlink(pidfile);
}

Test(cli_record, ctrl_c_stops_waiting_and_leaves_the_trace_alone, .timeout = 60)
{
    need_recorder();
    char trace[256], pidfile[256], inner[2048], cmd[3200];
    mt_test_tmpname(trace, sizeof trace, "busy.mtrace");
    mt_test_tmpname(pidfile, sizeof pidfile, "pid");
    size_t n;
    uint8_t *b = mt_test_slurp(MT_TEST_DATA_DIR "/alloc_patterns.mtrace", &n);
    cr_assert_eq(mt_test_spit(trace, b, n), 0);
    outliving_command(inner, sizeof inner, trace, 30, pidfile);
    /* record in the background; SIGINT to it alone once it waits */
    snprintf(cmd, sizeof cmd,
             MEMTRACE " record -- %s > %s.out 2>&1 & r=$!; sleep 1; kill -INT $r; wait $r; "
             "echo rc=$?; cat %s.out; kill $(cat %s)",
             inner, trace, trace, pidfile);
    double t0 = now_s();
    char *out = output_of(cmd);
    cr_expect_lt(now_s() - t0, 10, "Ctrl-C ended the wait");
    cr_expect(strstr(out, "rc=0"), "the command's status: %s", out);
    cr_expect(strstr(out, "still being written") && strstr(out, "not symbolized"), "%s", out);
    free(out);
    size_t m;
    uint8_t *after = mt_test_slurp(trace, &m);
    cr_expect(m == n && memcmp(after, b, n) == 0, "the busy trace was not touched");
    free(after);
    free(b);
    char outfile[300];
    snprintf(outfile, sizeof outfile, "%s.out", trace);
    unlink(outfile);
    unlink(trace);
    unlink(pidfile);
}

/* A copy of the fixture NAME at a temporary path (buf), listed in the manifest as a recorder lists
 * its trace by the command `record` runs. */
static void listed_copy(char *buf, size_t len, const char *name)
{
    char from[512];
    snprintf(from, sizeof from, MT_TEST_DATA_DIR "/%s", name);
    mt_test_tmpname(buf, len, name);
    size_t n;
    uint8_t *b = mt_test_slurp(from, &n);
    cr_assert_eq(mt_test_spit(buf, b, n), 0);
    free(b);
}

/* What `record` prints for the fixtures FIRST then SECOND, both listed in its manifest as
 * recorders list their traces; *second_at: where the second's summary starts. */
static char *summary_of_two(const char *first, const char *second, const char **second_at)
{
    char a[256], b[256], cmd[1200];
    listed_copy(a, sizeof a, first);
    listed_copy(b, sizeof b, second);
    snprintf(cmd, sizeof cmd,
             MEMTRACE " record -- sh -c 'echo $$ trace %s >> $MEMTRACE_MANIFEST; "
                      "echo $$ trace %s >> $MEMTRACE_MANIFEST' 2>&1",
             a, b);
    char *out = output_of(cmd);
    unlink(a);
    unlink(b);
    *second_at = strstr(out, second);
    return out;
}

/* What `record` prints for the fixture NAME, then for the CuPy fixture (no cost notes, no error);
 * *other_at: where the second starts. */
static char *summary_of(const char *name, const char **other_at)
{
    return summary_of_two(name, "cupy_pool.mtrace", other_at);
}

Test(cli_record, the_summary_says_what_recording_cost)
{
    need_recorder();
    /* the GPT-2-like fixture's recorder noted its cost at exit; the CuPy fixture has none */
    const char *cupy_at;
    char *out = summary_of("gpt2_tensors.mtrace", &cupy_at);
    /* 4576 tensor reports x 884 ns + 16 callbacks x 113 ns = 4.05 ms, of the 1.447 s recorded */
    const char *line = strstr(out, "  recording cost: 4.05 ms (0.28% of the run), memtrace's own "
                                   "work on the program's threads");
    cr_expect(line && cupy_at && line < cupy_at, "under the GPT-2-like trace's summary: %s", out);
    cr_expect(cupy_at && !strstr(cupy_at, "recording cost"), "none without cost notes: %s", out);
    free(out);
}

/* A run that died of torch.OutOfMemoryError: the summary names it where the user looks first,
 * with its line and PyTorch's counters then (tests/data/oom_frac.stats.json: oom_line 67,
 * oom_allocated 6611369984 = 6.16 GiB, oom_reserved 6654263296 = 6.20 GiB; the time is the
 * report's +5.950999 s); a run without one has no such line. */
Test(cli_record, the_summary_names_the_out_of_memory_error)
{
    need_recorder();
    const char *cupy_at;
    char *out = summary_of("oom_frac.mtrace", &cupy_at);
    const char *line = strstr(out, "  torch.OutOfMemoryError at 5.951 s on cuda:0: 1.00 GiB from "
                                   "step (samples/oom.py:67); PyTorch had 6.16 GiB "
                                   "allocated, 6.20 GiB reserved\n");
    cr_expect(line && cupy_at && line < cupy_at, "under the OOM trace's summary: %s", out);
    /* then the two traces together: how to read them side by side, and which raised it first */
    const char *job = strstr(out, "\nmemtrace: 2 traces; side by side (the rank table): memtrace "
                                  "report ");
    cr_assert(job && cupy_at && job > cupy_at, "%s", out);
    cr_expect(!memmem(cupy_at, (size_t)(job - cupy_at), "OutOfMemoryError", 16),
              "none without one: %s", out);
    cr_expect(strstr(job, "\n  torch.OutOfMemoryError: python3[704] on vm at ") &&
                  strstr(job, " (the first), 1.00 GiB on cuda:0 with 6.16 GiB allocated, in step "
                              "(samples/oom.py:67)\n"),
              "%s", job);
    free(out);
}

/* An error raised in the backward pass (tests/data/oom_graph_t.mtrace, --tensors: PyTorch's
 * traceback puts it at line 85, the backward() call): the summary names the node that asked and
 * the program's line that started the pass, and so does the job's line of how it ended. */
Test(cli_record, the_summary_names_the_backward_call_of_an_error_in_backward)
{
    need_recorder();
    const char *cupy_at;
    char *out = summary_of("oom_graph_t.mtrace", &cupy_at);
    cr_expect(strstr(out, " 512.00 MiB from PowBackward0 in the backward pass of graph_step "
                          "(samples/oom.py:85); PyTorch had 6.47 GiB allocated"),
              "%s", out);
    cr_expect(strstr(out, " with 6.47 GiB allocated, in PowBackward0 in the backward pass of "
                          "graph_step (samples/oom.py:85)\n"),
              "%s", out);
    free(out);
}

/* Under backend:cudaMallocAsync PyTorch makes no report: the driver's refusal of its
 * cudaMallocAsync is the error (tests/data/oom_bwd_ta.mtrace, --tensors=async, on an H200: its
 * message said "Currently allocated : 1.32 GiB", oom_bwd_ta.stats.json), in the backward pass
 * of line 100 of that day's samples/oom.py, and the job's line says so too. */
Test(cli_record, the_summary_names_an_error_of_the_async_backend)
{
    need_recorder();
    const char *cupy_at;
    char *out = summary_of("oom_bwd_ta.mtrace", &cupy_at);
    cr_expect(strstr(out, " 256.00 MiB from PowBackward0 in the backward pass of step "
                          "(samples/oom.py:100); PyTorch had 1.32 GiB allocated "
                          "(backend:cudaMallocAsync)\n"),
              "%s", out);
    cr_expect(strstr(out, " with 1.32 GiB allocated, in PowBackward0 in the backward pass of "
                          "step (samples/oom.py:100)\n"),
              "%s", out);
    free(out);
}

/* Several traces and none ran out of memory or was killed: the way to read them together, and
 * nothing about how they ended. One trace: neither. */
Test(cli_record, several_traces_are_suggested_side_by_side)
{
    need_recorder();
    const char *cupy_at;
    char *out = summary_of("gpt2_tensors.mtrace", &cupy_at);
    const char *job = strstr(out, "\nmemtrace: 2 traces; side by side (the rank table): memtrace "
                                  "report ");
    cr_assert(job, "%s", out);
    const char *next = strchr(job + 1, '\n');
    cr_expect(next && next[1] == 0, "nothing after it: %s", job);
    free(out);
}

/* The end of `record` over a job whose rank 1 made a context on cuda:0 before set_device
 * (tests/data/ddp_strayctx_rank{0,1}.mtrace, listed in the manifest as the ranks' recorders list
 * their traces): that GPU is said to hold nothing allocated, with NVML's number, and the job's
 * summary names rank 1 on rank 0's GPU. */
Test(cli_record, the_job_summary_names_a_rank_on_another_ranks_gpu, .timeout = 60)
{
    need_recorder();
    const char *rank1_at;
    char *out = summary_of_two("ddp_strayctx_rank0.mtrace", "ddp_strayctx_rank1.mtrace", &rank1_at);
    cr_assert_not_null(rank1_at, "%s", out);
    cr_expect(strstr(rank1_at, "\n  cuda:0   nothing allocated; NVML lists the process there, 820.00 "
                          "MiB at most (a CUDA context)\n  cuda:1   peak "),
              "%s", out);
    cr_expect(strstr(out, "\n  rank 1 holds memory on cuda:0, rank 0's GPU (its own is cuda:1): "
                          "820.00 MiB by NVML, its CUDA context included; a CUDA context alone, "
                          "nothing allocated\n"),
              "%s", out);
    free(out);
}
