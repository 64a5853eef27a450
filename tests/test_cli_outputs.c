/* Outputs never destroy data, inputs need not be plain files, damage is said (issue 13), through
 * the memtrace program: an existing OUT is replaced only with --force, never through a symbolic
 * link, never when it is an input; a failed write leaves no file and names its reason; a FIFO or a
 * pipe can be read; damaged and truncated traces warn (exit 0) or fail with --strict (exit 2). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"
#include "testutil.h"

#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define FIXTURE MT_TEST_DATA_DIR "/alloc_patterns.mtrace"

static int status_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int status_of(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s", cmd);
    return WEXITSTATUS(st);
}

/* stdout+stderr of a shell command, malloc'd (callers free) */
static char *output_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *output_of(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap);
    while ((k = fread(buf + n, 1, cap - 1 - n, p)) > 0) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    pclose(p);
    return buf;
}

static int same_file_content(const char *a, const char *b)
{
    size_t la, lb;
    uint8_t *x = mt_test_slurp(a, &la), *y = mt_test_slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

/* A copy of the fixture under a fresh name. */
static void copy_fixture(char *path, size_t len, const char *stem)
{
    mt_test_tmpname(path, len, stem);
    size_t n;
    uint8_t *b = mt_test_slurp(FIXTURE, &n);
    cr_assert_not_null(b);
    cr_assert_eq(mt_test_spit(path, b, n), 0);
    free(b);
}

Test(cli_outputs, an_existing_output_is_replaced_only_with_force)
{
    char out[256];
    mt_test_tmpname(out, sizeof out, "existing.json");
    cr_assert_eq(mt_test_spit(out, "keep me\n", 8), 0);
    cr_expect_eq(status_of(MEMTRACE " export --format chrome -o %s " FIXTURE " 2>/dev/null", out),
                 2);
    size_t n;
    uint8_t *b = mt_test_slurp(out, &n);
    cr_expect(n == 8 && memcmp(b, "keep me\n", 8) == 0, "untouched without --force");
    free(b);
    char *msg = output_of(MEMTRACE " report -o %s " FIXTURE " 2>&1", out);
    cr_expect(strstr(msg, "exists") && strstr(msg, "--force"), "%s", msg);
    free(msg);
    cr_expect_eq(status_of(MEMTRACE " export --format chrome --force -o %s " FIXTURE, out), 0);
    b = mt_test_slurp(out, &n);
    cr_expect(n > 100 && b[0] == '{', "replaced with --force");
    free(b);
    cr_expect_eq(status_of(MEMTRACE " report -f -o %s " FIXTURE, out), 0,
                 "-f is --force in report");
    /* a new file is simply created, with the usual permissions */
    char fresh[256];
    mt_test_tmpname(fresh, sizeof fresh, "fresh.txt");
    cr_expect_eq(status_of("umask 022; " MEMTRACE " report -o %s " FIXTURE, fresh), 0);
    struct stat st;
    cr_assert_eq(stat(fresh, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0644);
    unlink(out);
    unlink(fresh);
}

Test(cli_outputs, never_through_a_symbolic_link)
{
    char victim[256], link[256];
    mt_test_tmpname(victim, sizeof victim, "victim");
    mt_test_tmpname(link, sizeof link, "link.json");
    cr_assert_eq(mt_test_spit(victim, "precious\n", 9), 0);
    cr_assert_eq(symlink(victim, link), 0);
    cr_expect_eq(status_of(MEMTRACE " export --format chrome -o %s " FIXTURE " 2>/dev/null", link),
                 2);
    cr_expect_eq(
        status_of(MEMTRACE " export --format folded --force -o %s " FIXTURE " 2>/dev/null", link),
        2, "not even with --force");
    size_t n;
    uint8_t *b = mt_test_slurp(victim, &n);
    cr_expect(n == 9 && memcmp(b, "precious\n", 9) == 0);
    free(b);
    /* a dangling link is refused too (it would create the file it names) */
    unlink(victim);
    cr_expect_eq(status_of(MEMTRACE " report -o %s " FIXTURE " 2>/dev/null", link), 2);
    cr_expect_neq(access(victim, F_OK), 0);
    /* a link to a device is written to: /dev/stdout is one */
    cr_expect_eq(
        status_of(MEMTRACE " report -o /dev/stdout " FIXTURE " | grep -q 'memtrace report'"), 0);
    unlink(link);
}

Test(cli_outputs, an_input_is_never_the_output)
{
    char t[256];
    copy_fixture(t, sizeof t, "input.mtrace");
    cr_expect_eq(status_of(MEMTRACE " export --format folded -o %s %s 2>/dev/null", t, t), 2);
    cr_expect_eq(status_of(MEMTRACE " export --format chrome --force -o %s %s 2>/dev/null", t, t),
                 2);
    cr_expect_eq(status_of(MEMTRACE " report --force -o %s %s 2>/dev/null", t, t), 2);
    cr_expect_eq(status_of(MEMTRACE " report %s >> %s 2>/dev/null", t, t), 2,
                 "stdout appending to it");
    /* the same file under another name (a hard link) is still the input */
    char other[256];
    mt_test_tmpname(other, sizeof other, "hardlink.mtrace");
    cr_assert_eq(link(t, other), 0);
    cr_expect_eq(status_of(MEMTRACE " report --force -o %s %s 2>/dev/null", other, t), 2);
    cr_expect(same_file_content(t, FIXTURE), "the trace is intact");
    unlink(other);
    unlink(t);
}

Test(cli_outputs, a_full_disk_says_so_and_leaves_no_partial_file)
{
    char *msg = output_of(MEMTRACE " dump " FIXTURE " 2>&1 > /dev/full; echo rc=$?");
    cr_expect(strstr(msg, "No space left on device") && strstr(msg, "rc=2"), "dump: %s", msg);
    free(msg);
    msg = output_of(MEMTRACE " report " FIXTURE " 2>&1 > /dev/full; echo rc=$?");
    cr_expect(strstr(msg, "No space left on device") && strstr(msg, "rc=2"), "report: %s", msg);
    free(msg);
    msg = output_of(MEMTRACE " export --format chrome -o /dev/full " FIXTURE " 2>&1; echo rc=$?");
    cr_expect(strstr(msg, "No space left on device") && strstr(msg, "rc=2"), "export: %s", msg);
    free(msg);
    /* a file that cannot grow (ulimit -f 8: 8 KiB) */
    char dir[256], out[300], old[300];
    mt_test_tmpname(dir, sizeof dir, "fsz");
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(out, sizeof out, "%s/new.json", dir);
    snprintf(old, sizeof old, "%s/old.json", dir);
    const char *big = MT_TEST_DATA_DIR "/cifar_tensors.mtrace";
    msg = output_of("ulimit -f 8; trap '' XFSZ; " MEMTRACE " export --format chrome -o %s %s 2>&1; "
                    "echo rc=$?",
                    out, big);
    cr_expect(strstr(msg, "File too large") && strstr(msg, "rc=2"), "%s", msg);
    free(msg);
    cr_expect_neq(access(out, F_OK), 0, "no partial file");
    cr_assert_eq(mt_test_spit(old, "old\n", 4), 0);
    cr_expect_eq(status_of("ulimit -f 8; trap '' XFSZ; " MEMTRACE " export --format chrome --force "
                           "-o %s %s 2>/dev/null",
                           old, big),
                 2);
    size_t n;
    uint8_t *b = mt_test_slurp(old, &n);
    cr_expect(n == 4 && memcmp(b, "old\n", 4) == 0, "the old file is left as it was");
    free(b);
    msg = output_of("ls -A %s", dir);
    cr_expect_str_eq(msg, "old.json\n", "no temporary file left behind");
    free(msg);
    unlink(old);
    rmdir(dir);
}

Test(cli_outputs, export_f_is_refused_as_ambiguous)
{
    char *msg = output_of(MEMTRACE " export -f chrome " FIXTURE " 2>&1; echo rc=$?");
    cr_expect(strstr(msg, "--format") && strstr(msg, "--force") && strstr(msg, "rc=2"), "%s", msg);
    free(msg);
}

Test(cli_outputs, pipes_and_fifos_are_read, .timeout = 60)
{
    /* the same report, but for its first line (the trace's name) */
    char *want = output_of(MEMTRACE " report " FIXTURE " | tail -n +2");
    cr_assert_gt(strlen(want), 500, "%s", want);
    char *piped = output_of("cat " FIXTURE " | " MEMTRACE " report /dev/stdin | tail -n +2");
    cr_expect_str_eq(piped, want);
    free(piped);
    char fifo[256];
    mt_test_tmpname(fifo, sizeof fifo, "fifo.mtrace");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    /* (timeout: a reader that opens the FIFO twice waits forever for a second writer) */
    char *fromfifo = output_of("(cat " FIXTURE " > %s &); timeout 20 " MEMTRACE " report %s | "
                               "tail -n +2",
                               fifo, fifo);
    cr_expect_str_eq(fromfifo, want);
    free(fromfifo);
    char *chrome = output_of("(cat " FIXTURE " > %s &); timeout 20 " MEMTRACE " export --format "
                             "chrome %s | grep -c '\"ph\":\"b\"'",
                             fifo, fifo);
    cr_expect_neq(atoi(chrome), 0, "chrome reads the FIFO's copy several times: %s", chrome);
    free(chrome);
    free(want);
    unlink(fifo);
    /* not a trace: refused at once, nothing copied */
    cr_expect_eq(status_of("head -c 100000 /dev/zero | " MEMTRACE " report /dev/stdin 2>/dev/null"),
                 2);
}

/* The fixture with one byte of its second chunk flipped. */
static void damaged_fixture(char *path, size_t len)
{
    mt_test_tmpname(path, len, "damaged.mtrace");
    size_t n;
    uint8_t *b = mt_test_slurp(FIXTURE, &n);
    cr_assert_not_null(b);
    uint32_t clen =
        (uint32_t)b[68] | (uint32_t)b[69] << 8 | (uint32_t)b[70] << 16 | (uint32_t)b[71] << 24;
    size_t second = 64 + 16 + clen;
    cr_assert_lt(second + 40, n, "the fixture has a second chunk");
    b[second + 30] ^= 0x01;
    cr_assert_eq(mt_test_spit(path, b, n), 0);
    free(b);
}

Test(cli_outputs, damage_is_said_everywhere_and_strict_refuses_it)
{
    char t[256];
    damaged_fixture(t, sizeof t);
    char *msg = output_of(MEMTRACE " report %s 2>/dev/null; echo rc=$?", t);
    cr_expect(strstr(msg, "WARNING: 1 damaged chunk skipped") && strstr(msg, "rc=0"), "%s", msg);
    free(msg);
    msg = output_of(MEMTRACE " report --json %s 2>&1 >/dev/null", t);
    cr_expect(strstr(msg, "warning") && strstr(msg, "damaged chunk"), "stderr: %s", msg);
    free(msg);
    cr_expect_eq(
        status_of(MEMTRACE
                  " report --json %s 2>/dev/null | python3 -c 'import json,sys; "
                  "d=json.load(sys.stdin); assert d[\"damaged_chunks\"] == 1, d; "
                  "assert d[\"damaged_bytes\"] > 0; assert \"CRC\" in d[\"damage_reason\"]'",
                  t),
        0);
    cr_expect_eq(status_of(MEMTRACE
                           " export --format chrome %s 2>/dev/null | python3 -c 'import "
                           "json,sys; d=json.load(sys.stdin)[\"otherData\"]; "
                           "assert d[\"damaged_chunks\"] == 1, d; assert len(d[\"damage\"]) == 1'",
                           t),
                 0);
    msg = output_of(MEMTRACE " export --format folded %s 2>&1 >/dev/null; echo rc=$?", t);
    cr_expect(strstr(msg, "damaged chunk") && strstr(msg, "rc=0"), "folded: %s", msg);
    free(msg);
    msg = output_of(MEMTRACE " dump %s 2>/dev/null | grep -c '^# skipped'", t);
    cr_expect_eq(atoi(msg), 1, "dump marks where records are missing");
    free(msg);
    cr_expect_eq(status_of(MEMTRACE " report --strict %s > /dev/null 2>&1", t), 2);
    cr_expect_eq(status_of(MEMTRACE " export --strict --format folded %s > /dev/null 2>&1", t), 2);
    cr_expect_eq(status_of(MEMTRACE " dump --strict %s > /dev/null 2>&1", t), 2);
    unlink(t);
}

Test(cli_outputs, a_truncated_trace_warns_in_folded_output_too)
{
    char t[256];
    mt_test_tmpname(t, sizeof t, "cut.mtrace");
    size_t n;
    uint8_t *b = mt_test_slurp(FIXTURE, &n);
    cr_assert_eq(mt_test_spit(t, b, n - 10), 0);
    free(b);
    char *msg = output_of(MEMTRACE " export --format folded %s 2>&1 >/dev/null; echo rc=$?", t);
    cr_expect(strstr(msg, "truncated") && strstr(msg, "rc=0"), "%s", msg);
    free(msg);
    cr_expect_eq(status_of(MEMTRACE " export --format folded --strict %s > /dev/null 2>&1", t), 2);
    unlink(t);
}

/* A source file modified after the recording began is still quoted, marked: its text today may
 * not be the line that ran (the README's example once quoted cifar.py's line 45 as it is today,
 * another statement than the one recorded). The JSON and HTML data say it in a field; a file
 * older than the recording, or a trace with no wall-clock start, is quoted unmarked. */
Test(cli_outputs, source_modified_after_the_recording_is_marked, .timeout = 60)
{
    char src[256], t[256], js[256], html[256];
    mt_test_tmpname(src, sizeof src, "later.py");
    static const char text[] = "import torch\nx = torch.empty(1 << 20)\n";
    cr_assert_eq(mt_test_spit(src, (const uint8_t *)text, sizeof text - 1), 0);
    mt_test_tmpname(t, sizeof t, "later.mtrace");
    mt_test_tmpname(js, sizeof js, "later.json");
    mt_test_tmpname(html, sizeof html, "later.html");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t start = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    cr_assert_eq(mt_hostile_python_source_at(t, src, 2, start), 0);
    for (int after = 0; after <= 1; after++) {
        /* the file's mtime a day before the recording's start, then an hour after it */
        struct timespec when[2] = {{.tv_sec = now.tv_sec + (after ? 3600 : -86400)}, {0}};
        when[1] = when[0];
        cr_assert_eq(utimensat(AT_FDCWD, src, when, 0), 0);
        char *msg = output_of(MEMTRACE " report --by-line %s 2>&1", t);
        cr_expect(strstr(msg, after ? "|? x = torch.empty(1 << 20)" : "| x = torch.empty(1 << 20)"),
                  "after=%d: %s", after, msg);
        cr_expect_eq(strstr(msg, "1 line from files modified after the recording began") != NULL,
                     after, "after=%d: %s", after, msg);
        free(msg);
        msg = output_of(MEMTRACE " report --markdown %s 2>&1", t);
        cr_expect_eq(strstr(msg, ": (?) `x = torch.empty(1 << 20)`") != NULL, after, "after=%d: %s",
                     after, msg);
        cr_expect(strstr(msg, "`x = torch.empty(1 << 20)`"), "%s", msg);
        free(msg);
        cr_assert_eq(status_of(MEMTRACE " report --by-line --json %s > %s", t, js), 0);
        msg = output_of("cat %s", js);
        cr_expect(strstr(msg, "\"source\":\"x = torch.empty(1 << 20)\""), "%s", msg);
        cr_expect_eq(strstr(msg, "\"source_modified_after_recording\":true") != NULL, after,
                     "after=%d: %s", after, msg);
        free(msg);
        cr_assert_eq(status_of(MEMTRACE " export --format html --force -o %s %s", html, t), 0);
        msg = output_of("cat %s", html);
        cr_expect_eq(strstr(msg, "\"source_modified_after_recording\":true") != NULL, after,
                     "after=%d: the report's data", after);
        free(msg);
    }
    /* no wall-clock start in the trace: nothing to compare with, unmarked */
    cr_assert_eq(mt_hostile_python_source(t, src, 2), 0);
    char *msg = output_of(MEMTRACE " report --by-line %s 2>&1", t);
    cr_expect(strstr(msg, "| x = torch.empty(1 << 20)") && !strstr(msg, "|?"), "%s", msg);
    free(msg);
    unlink(src);
    unlink(t);
    unlink(js);
    unlink(html);
}

/* Source text for the by-line table and the HTML report comes from paths the trace names: a FIFO
 * there must not block (it did: fopen waited for a writer forever), a device is not read, and a
 * NUL inside a line does not end the file (the lines after it were left unset). */
Test(cli_outputs, source_paths_from_the_trace_are_read_only_when_regular, .timeout = 60)
{
    char dir[256], fifo[300], src[300], t1[256], t2[256], out[256];
    mt_test_tmpname(dir, sizeof dir, "srcdir");
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(fifo, sizeof fifo, "%s/train.py", dir);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    mt_test_tmpname(t1, sizeof t1, "fifo-source.mtrace");
    cr_assert_eq(mt_hostile_python_source(t1, fifo, 3), 0);
    char *msg = output_of("timeout 20 " MEMTRACE " report --by-line %s 2>&1; echo rc=$?", t1);
    cr_expect(strstr(msg, "rc=0") && strstr(msg, "step"), "%s", msg);
    free(msg);
    mt_test_tmpname(out, sizeof out, "fifo-source.html");
    cr_expect_eq(status_of("timeout 20 " MEMTRACE " export --format html -o %s %s", out, t1), 0);
    mt_test_tmpname(t2, sizeof t2, "zero-source.mtrace");
    cr_assert_eq(mt_hostile_python_source(t2, "/dev/zero", 1), 0);
    cr_expect_eq(status_of("timeout 20 " MEMTRACE " report --by-line %s > /dev/null", t2), 0);
    snprintf(src, sizeof src, "%s/nul.py", dir);
    static const char text[] = "a = 1  # \0 inside\nb = torch.empty(1 << 20)\n";
    cr_assert_eq(mt_test_spit(src, (const uint8_t *)text, sizeof text - 1), 0);
    cr_assert_eq(mt_hostile_python_source(t2, src, 2), 0);
    msg = output_of(MEMTRACE " report --by-line %s 2>&1", t2);
    cr_expect(strstr(msg, "b = torch.empty(1 << 20)"), "the line after a NUL: %s", msg);
    free(msg);
    unlink(out);
    unlink(t1);
    unlink(t2);
    unlink(src);
    unlink(fifo);
    rmdir(dir);
}
