/* Symbolization opens files the trace names, and appends to the trace: a trace is untrusted, and
 * may still be in use. A module path that is a FIFO or a device is not opened for reading (it
 * would block or never end); a trace that is not a regular file, is locked, or is damaged is left
 * alone. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/symbols.h"
#include "memtrace/trace.h"
#include "testutil.h"

/* A trace with one module at `module_path` and one native frame inside it. */
static void trace_naming(const char *path, const char *module_path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 1};
    mt_writer *w = mt_writer_open_fd(fd, &h, 0);
    cr_assert_not_null(w);
    mt_record m = {
        .type = MT_REC_MODULE,
        .u.module = {
            .id = 1, .bias = 0x400000, .start = 0x400000, .end = 0x500000, .path = module_path}};
    mt_record n = {.type = MT_REC_STACK_NODE,
                   .u.node = {.id = 1, .parent = 0, .ip = 0x401234, .frame_kind = MT_FRAME_NATIVE}};
    cr_assert_eq(mt_writer_put(w, &m), 0);
    cr_assert_eq(mt_writer_put(w, &n), 0);
    cr_assert_eq(mt_writer_close(w, 1), 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

Test(symbols_hostile, module_paths_that_are_not_regular_files_are_not_read, .timeout = 30)
{
    char fifo[256], path[256];
    mt_test_tmpname(fifo, sizeof fifo, "module.fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    const char *modules[] = {fifo, "/dev/zero", "/dev/stdin", "/"};
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++) {
        mt_test_tmpname(path, sizeof path, "fifomod.mtrace");
        trace_naming(path, modules[i]);
        mt_symbolize_stats st;
        char err[512];
        double t0 = now_s();
        cr_assert_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "%s", err);
        cr_expect_lt(now_s() - t0, 2.0, "%s: no blocking, no endless read", modules[i]);
        cr_expect_eq(st.modules_missing, 1, "%s", modules[i]);
        cr_expect_eq(st.ips_resolved, 0);
        unlink(path);
    }
    unlink(fifo);
}

Test(symbols_hostile, a_trace_that_is_not_a_regular_file_is_refused, .timeout = 30)
{
    char fifo[256], err[512] = "";
    mt_test_tmpname(fifo, sizeof fifo, "trace.fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    mt_symbolize_stats st;
    cr_expect_eq(mt_symbolize_trace(fifo, &st, err, sizeof err), -1);
    cr_expect(strstr(err, "not a regular file"), "%s", err);
    unlink(fifo);
}

Test(symbols_hostile, a_locked_trace_is_left_alone)
{
    char path[256], err[512] = "";
    mt_test_tmpname(path, sizeof path, "locked.mtrace");
    trace_naming(path, "/nonexistent/lib.so");
    struct stat before, after;
    cr_assert_eq(stat(path, &before), 0);
    int holder = open(path, O_RDONLY);
    cr_assert_eq(flock(holder, LOCK_SH), 0, "a recorder (or another symbolize) holds it");
    mt_symbolize_stats st;
    cr_expect_eq(mt_symbolize_trace(path, &st, err, sizeof err), -1);
    cr_expect(strstr(err, "locked"), "%s", err);
    close(holder);
    cr_assert_eq(stat(path, &after), 0);
    cr_expect_eq(after.st_size, before.st_size);
    cr_expect_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "once released: %s", err);
    unlink(path);
}
