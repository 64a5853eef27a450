/* `memtrace record` as a wrapper: it must hand the command's exit status, output and environment
 * through unchanged (no GPU here: the recorder library is preloaded but never initialized). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

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
    cr_expect(strstr(strchr(env, '\n') + 1, "libmemtrace_inject.so"), "LD_PRELOAD: %s", env);
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
