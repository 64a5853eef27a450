/* mt_symbolize_trace end to end: synthetic traces whose stack nodes hold real return addresses
 * of libmt_symfix, symbolized, read back with mt_reader; running twice, missing and changed
 * modules, a trace cut inside its last chunk, separate debug files, bad input. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "fixture_module.h"
#include "memtrace/symbols.h"
#include "testutil.h"

static mt_fix_module fix;

static void setup(void)
{
    cr_assert_eq(mt_fix_find_module("libmt_symfix.so", &fix), 0, "fixture library not loaded");
}

TestSuite(symbols_trace, .init = setup);

static uint64_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static void expect_sym(mt_fix_sym *s, uint32_t module, const char *func, const char *file,
                       int line)
{
    cr_expect_eq(s->module, module);
    cr_expect_str_eq(s->function, func);
    cr_expect_str_eq(mt_fix_basename(s->file), file, "file %s", s->file);
    cr_expect_eq(s->line, (uint32_t)line, "%s: line %u, want %d", func, s->line, line);
}

static long count_ip(mt_fix_sym *syms, long n, uint64_t ip)
{
    long c = 0;
    for (long i = 0; i < n; i++) c += syms[i].ip == ip;
    return c;
}

Test(symbols_trace, resolves_appends_and_second_run_adds_nothing)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "sym_full.mtrace");
    int call_line = 0;
    mt_fix_inline_lines il = {0};
    uint64_t ra_call = mt_fix_call(&call_line);
    uint64_t ra_inl = mt_fix_inlined(&il);
    mt_fix_module gone = {"/nonexistent/libgone.so", 0x100000, 0x100000, 0x200000, {0}, 0};
    mt_record mods[2] = {mt_fix_module_record(&fix, 7), mt_fix_module_record(&gone, 8)};
    /* ra_call twice (two nodes, one ip), one ip in the missing module, one in no module */
    uint64_t ips[] = {ra_call, ra_inl, ra_call, 0x180010, 0x40};
    cr_assert_eq(mt_fix_write_trace(path, mods, 2, ips, 5, 0), 0);

    mt_symbolize_stats st;
    char err[512] = "";
    cr_assert_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "%s", err);
    cr_expect_eq(st.ips_total, 3);
    cr_expect_eq(st.ips_resolved, 2);
    cr_expect_eq(st.ips_with_line, 2);
    cr_expect_eq(st.ips_no_module, 1);
    cr_expect_eq(st.ips_already, 0);
    cr_expect_eq(st.modules, 2);
    cr_expect_eq(st.modules_missing, 1);
    cr_expect_eq(st.modules_dwarf, 1);
    cr_expect_eq(st.inline_frames, 2);
    cr_expect_eq(st.symbols_written, 4);
    cr_expect_eq(st.truncated_bytes, 0);
    cr_expect(st.seconds >= 0 && st.seconds < 10);

    mt_fix_sym *syms;
    long n = mt_fix_read_symbols(path, &syms);
    cr_assert_eq(n, 4);
    mt_fix_sym *f[8];
    cr_assert_eq(mt_fix_frames_of(syms, n, ra_call, f, 8), 1);
    expect_sym(f[0], 7, "mt_fix_call", "fixture.c", call_line);
    cr_assert_eq(mt_fix_frames_of(syms, n, ra_inl, f, 8), 3);
    expect_sym(f[0], 7, "mt_fix_inlined", "fixture.c", il.outer);
    expect_sym(f[1], 7, "fix_inline_mid", "fixture_inline.h", il.mid);
    expect_sym(f[2], 7, "fix_inline_leaf", "fixture_inline.h", il.leaf);
    cr_expect_eq(count_ip(syms, n, 0x180010), 0);
    free(syms);

    uint64_t size = file_size(path);
    cr_assert_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "%s", err);
    cr_expect_eq(st.ips_already, 2);
    cr_expect_eq(st.symbols_written, 0);
    cr_expect_eq(st.ips_resolved, 0);
    cr_expect_eq(file_size(path), size, "a second run must not change the file");
    n = mt_fix_read_symbols(path, &syms);
    cr_expect_eq(n, 4);
    free(syms);
}

/* A trace of an earlier release (format version 1): the symbols are appended in version 1 too,
 * so the file still reads to a clean end (a version 2 chunk behind a version 1 header would not). */
Test(symbols_trace, a_version_1_trace_gets_version_1_chunks)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "sym_v1.mtrace");
    int call_line = 0;
    uint64_t ra_call = mt_fix_call(&call_line);
    mt_record mods[1] = {mt_fix_module_record(&fix, 7)};
    uint64_t ips[] = {ra_call};
    cr_assert_eq(mt_fix_write_trace_version(path, 1, mods, 1, ips, 1, 0), 0);
    mt_symbolize_stats st;
    char err[512] = "";
    cr_assert_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "%s", err);
    cr_expect_eq(st.symbols_written, 1);
    mt_fix_sym *syms;
    long n = mt_fix_read_symbols(path, &syms);
    cr_assert_eq(n, 1, "the file reads to a clean end with its symbol");
    expect_sym(&syms[0], 7, "mt_fix_call", "fixture.c", call_line);
    free(syms);
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    cr_expect_eq(mt_reader_header(r)->version, 1);
    mt_reader_close(r);
}

Test(symbols_trace, changed_module_is_left_unresolved)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "sym_changed.mtrace");
    mt_fix_module changed = fix;
    changed.build_id_len = 20;
    memset(changed.build_id, 0xab, 20);
    mt_record mod = mt_fix_module_record(&changed, 1);
    int line;
    uint64_t ip = mt_fix_call(&line);
    cr_assert_eq(mt_fix_write_trace(path, &mod, 1, &ip, 1, 0), 0);
    mt_symbolize_stats st;
    char err[512] = "";
    cr_assert_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "%s", err);
    cr_expect_eq(st.modules, 1);
    cr_expect_eq(st.modules_missing, 1);
    cr_expect_eq(st.symbols_written, 0);
    mt_fix_sym *syms;
    cr_expect_eq(mt_fix_read_symbols(path, &syms), 0);
    free(syms);
}

Test(symbols_trace, truncated_trace_is_cut_back_then_symbolized)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "sym_cut.mtrace");
    int line;
    uint64_t ip = mt_fix_call(&line);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    mt_file_header hdr = {.version = MT_TRACE_VERSION, .pid = 1};
    mt_writer *w = mt_writer_open_fd(fd, &hdr, 0);
    cr_assert_not_null(w);
    mt_record mod = mt_fix_module_record(&fix, 3);
    mt_record node = {.type = MT_REC_STACK_NODE};
    node.u.node = (mt_stack_node){1, 0, ip, MT_FRAME_NATIVE};
    cr_assert_eq(mt_writer_put(w, &mod), 0);
    cr_assert_eq(mt_writer_put(w, &node), 0);
    cr_assert_eq(mt_writer_flush(w), 0);
    uint64_t whole = mt_writer_bytes_written(w);
    /* a second chunk, the one the "killed recorder" leaves half written */
    char text[2000];
    for (size_t i = 0; i < sizeof text - 1; i++) text[i] = (char)('a' + (i * 7919) % 26);
    text[sizeof text - 1] = '\0';
    mt_record note = {.type = MT_REC_NOTE};
    note.u.note = (mt_note){5, MT_NOTE_INFO, text};
    cr_assert_eq(mt_writer_put(w, &note), 0);
    cr_assert_eq(mt_writer_close(w, 1), 0);
    uint64_t full = file_size(path);
    cr_assert(full > whole + 20);
    cr_assert_eq(truncate(path, (off_t)(full - 7)), 0);

    mt_fix_sym *syms;
    cr_assert_eq(mt_fix_read_symbols(path, &syms), -1, "the cut trace must read as truncated");
    free(syms);

    mt_symbolize_stats st;
    char err[512] = "";
    cr_assert_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "%s", err);
    cr_expect_eq(st.truncated_bytes, full - 7 - whole);
    cr_expect_eq(st.symbols_written, 1);
    long n = mt_fix_read_symbols(path, &syms);
    cr_assert_eq(n, 1, "the repaired trace reads to a clean end with its symbol");
    expect_sym(&syms[0], 3, "mt_fix_call", "fixture.c", line);
    free(syms);
}

Test(symbols_trace, separate_debug_file_and_cxx)
{
    if (!MT_SYMFIX_HAVE_OBJCOPY) cr_skip_test("no objcopy");
    char path[512];
    mt_test_tmpname(path, sizeof path, "sym_debuglink.mtrace");
    mt_fix_module stripped = fix;
    snprintf(stripped.path, sizeof stripped.path, "%s", MT_SYMFIX_STRIPPED);
    mt_record mod = mt_fix_module_record(&stripped, 2);
    int line = 0, cline = 0;
    uint64_t ips[2] = {mt_fix_call(&line), mt_fix_cxx(&cline)};
    size_t nips = mt_fix_have_cxx() ? 2 : 1;
    cr_assert_eq(mt_fix_write_trace(path, &mod, 1, ips, nips, 0), 0);
    mt_symbolize_stats st;
    char err[512] = "";
    cr_assert_eq(mt_symbolize_trace(path, &st, err, sizeof err), 0, "%s", err);
    cr_expect_eq(st.modules_dwarf, 1);
    cr_expect_eq(st.ips_with_line, nips);
    mt_fix_sym *syms;
    long n = mt_fix_read_symbols(path, &syms);
    cr_assert_eq(n, (long)nips);
    mt_fix_sym *f[4];
    cr_assert_eq(mt_fix_frames_of(syms, n, ips[0], f, 4), 1);
    expect_sym(f[0], 2, "mt_fix_call", "fixture.c", line);
    if (nips == 2) {
        cr_assert_eq(mt_fix_frames_of(syms, n, ips[1], f, 4), 1);
        expect_sym(f[0], 2, "c10::FixAllocator::malloc(void*, unsigned long, int*)",
                   "fixture_cxx.cpp", cline);
    }
    free(syms);
}

Test(symbols_trace, bad_files_fail_with_a_reason)
{
    mt_symbolize_stats st;
    char err[512] = "";
    cr_expect_eq(mt_symbolize_trace("/nonexistent/x.mtrace", &st, err, sizeof err), -1);
    cr_expect(err[0] != '\0');

    char path[512];
    mt_test_tmpname(path, sizeof path, "sym_notatrace.mtrace");
    cr_assert_eq(mt_test_spit(path, "hello, not a trace at all\n", 26), 0);
    err[0] = '\0';
    cr_expect_eq(mt_symbolize_trace(path, &st, err, sizeof err), -1);
    cr_expect(err[0] != '\0');

    /* a flipped byte inside a chunk: CRC mismatch, refused rather than appended after */
    mt_test_tmpname(path, sizeof path, "sym_corrupt.mtrace");
    mt_record mod = mt_fix_module_record(&fix, 1);
    int line;
    uint64_t ip = mt_fix_call(&line);
    cr_assert_eq(mt_fix_write_trace(path, &mod, 1, &ip, 1, 0), 0);
    size_t len;
    uint8_t *b = mt_test_slurp(path, &len);
    cr_assert_not_null(b);
    b[len - 3] ^= 0x5a;
    cr_assert_eq(mt_test_spit(path, b, len), 0);
    free(b);
    err[0] = '\0';
    cr_expect_eq(mt_symbolize_trace(path, &st, err, sizeof err), -1);
    cr_expect(err[0] != '\0');
    cr_expect_eq(file_size(path), len, "a refused file is left as it was");
}

/* A trace that stopped at a file-size limit (ulimit -f): its symbols do not fit. `memtrace
 * symbolize` says so and exits 2; SIGXFSZ does not kill it (on the GPU check, `record` exited 153
 * for a program that exited 0, killed while symbolizing); the trace is as it was. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

Test(symbols_trace, a_file_size_limit_fails_the_append_not_memtrace)
{
    char path[512];
    mt_test_tmpname(path, sizeof path, "sym_fsize.mtrace");
    int call_line = 0;
    uint64_t ips[] = {mt_fix_call(&call_line)};
    mt_record mods[1] = {mt_fix_module_record(&fix, 7)};
    cr_assert_eq(mt_fix_write_trace(path, mods, 1, ips, 1, 0), 0);
    uint64_t size = file_size(path);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        struct rlimit lim = {(rlim_t)size, (rlim_t)size};
        signal(SIGXFSZ, SIG_DFL); /* as a shell leaves it */
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 1);
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(126);
        execl(MT_TEST_BIN_DIR "/src/cli/memtrace", "memtrace", "symbolize", path, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(!WIFSIGNALED(st), "memtrace killed by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    cr_expect_eq(file_size(path), size, "nothing written past the limit");
    mt_fix_sym *syms;
    cr_expect_eq(mt_fix_read_symbols(path, &syms), 0, "the trace reads, without symbols");
    free(syms);
}
