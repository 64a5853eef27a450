/* The symbols a trace ends with, found from its end (mt_reader_tail_symbols, src/trace/tail.c):
 * exactly the SYMBOL records of the chunks that end the file and hold nothing else, in file order;
 * nothing when the trace ends otherwise, is damaged at its end, or ends in forged chunk headers;
 * and quickly on a file of them. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"

enum { N_EVENTS = 3000, N_SYMBOLS = 400 };

typedef struct got {
    uint64_t ip[2 * N_SYMBOLS];
    size_t n;
} got;

static int take(void *ctx, const mt_record *rec)
{
    got *g = ctx;
    cr_assert_eq(rec->type, MT_REC_SYMBOL);
    if (g->n < 2 * N_SYMBOLS) g->ip[g->n] = rec->u.symbol.ip;
    g->n++;
    return 0;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static void put_event(mt_writer *w, uint64_t i)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = 1000 + i,
                           .address = 0x1000 + 256 * i,
                           .bytes = 256,
                           .tid = 1,
                           .stack = 1,
                           .op = MT_OP_ALLOC,
                           .kind = MT_KIND_DEVICE};
    cr_assert_eq(mt_writer_put(w, &r), 0);
}

static void put_symbol(mt_writer *w, uint64_t i)
{
    mt_record r = {.type = MT_REC_SYMBOL};
    r.u.symbol = (mt_symbol){.ip = 0x400000 + i,
                             .function = "some_function_name_that_is_long",
                             .file = "file.c",
                             .line = (uint32_t)i};
    cr_assert_eq(mt_writer_put(w, &r), 0);
}

/* A recording of N_EVENTS events and its END in `path`; with `inner`, symbols among the events
 * too (an older symbolizer's order: they are not at the end). Returns the file's size. */
static uint64_t write_recording(const char *path, int inner)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 9, .start_monotonic_ns = 1};
    mt_writer *w = mt_writer_open_fd(fd, &h, 4096);
    for (uint64_t i = 0; i < N_EVENTS; i++) {
        put_event(w, i);
        if (inner && i == N_EVENTS / 2)
            for (uint64_t k = 0; k < 10; k++)
                put_symbol(w, 1000 + k);
    }
    mt_record end = {.type = MT_REC_END};
    end.u.end = (mt_end){.time_ns = 1000 + N_EVENTS, .events = N_EVENTS};
    cr_assert_eq(mt_writer_put(w, &end), 0);
    cr_assert_eq(mt_writer_close(w, 1), 0);
    return file_size(path);
}

/* Appends N_SYMBOLS symbols in small chunks (several of them), as `symbolize` does. */
static void append_symbols(const char *path)
{
    int fd = open(path, O_RDWR | O_APPEND);
    cr_assert(fd >= 0);
    mt_writer *w = mt_writer_open_fd(fd, NULL, 2048);
    for (uint64_t i = 0; i < N_SYMBOLS; i++)
        put_symbol(w, i);
    cr_assert_eq(mt_writer_close(w, 1), 0);
}

static mt_reader *open_trace(const char *path)
{
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    return r;
}

Test(trace_tail, appended_symbols_are_found_from_the_end)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "tail.mtrace");
    uint64_t recording = write_recording(path, 0);
    append_symbols(path);
    mt_reader *r = open_trace(path);
    static got g;
    memset(&g, 0, sizeof g);
    uint64_t start = 0;
    cr_assert_eq(mt_reader_tail_symbols(r, &start, take, &g), 0);
    cr_assert_eq(start, recording, "the symbols begin where the recording ended");
    cr_assert_eq(g.n, N_SYMBOLS);
    for (size_t i = 0; i < N_SYMBOLS; i++)
        cr_assert_eq(g.ip[i], 0x400000 + i, "file order");
    /* what the reader gives from there on is those symbols, and only they */
    mt_record rec;
    size_t after = 0, before_end = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (mt_reader_offset(r) < start) {
            before_end += rec.type == MT_REC_SYMBOL;
            continue;
        }
        cr_assert_eq(rec.type, MT_REC_SYMBOL);
        cr_assert_eq(rec.u.symbol.ip, g.ip[after]);
        after++;
    }
    cr_assert_eq(after, N_SYMBOLS);
    cr_assert_eq(before_end, 0);
    mt_reader_close(r);
    unlink(path);
}

Test(trace_tail, a_trace_that_ends_otherwise_has_none)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "tail.mtrace");
    uint64_t size = write_recording(path, 1); /* symbols inside, none after the END */
    mt_reader *r = open_trace(path);
    static got g;
    memset(&g, 0, sizeof g);
    uint64_t start = 0;
    cr_assert_eq(mt_reader_tail_symbols(r, &start, take, &g), 0);
    cr_assert_eq(start, size);
    cr_assert_eq(g.n, 0);
    mt_reader_close(r);
    unlink(path);
}

/* Flips a byte at off. */
static void flip(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x5a;
    cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

Test(trace_tail, damage_ends_the_walk_there)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "tail.mtrace");
    uint64_t recording = write_recording(path, 0);
    append_symbols(path);
    uint64_t size = file_size(path);
    static got g;
    uint64_t start;

    /* the first symbol chunk damaged: only the chunks after it are the trace's end */
    flip(path, recording + 40);
    mt_reader *r = open_trace(path);
    memset(&g, 0, sizeof g);
    cr_assert_eq(mt_reader_tail_symbols(r, &start, take, &g), 0);
    cr_assert_gt(start, recording);
    cr_assert_lt(start, size);
    cr_assert_gt(g.n, 0);
    cr_assert_lt(g.n, N_SYMBOLS);
    cr_assert_eq(g.ip[g.n - 1], 0x400000 + N_SYMBOLS - 1, "the last ones, in order");
    mt_reader_close(r);
    flip(path, recording + 40);

    /* the last chunk damaged: nothing */
    flip(path, size - 3);
    r = open_trace(path);
    memset(&g, 0, sizeof g);
    cr_assert_eq(mt_reader_tail_symbols(r, &start, take, &g), 0);
    cr_assert_eq(start, size);
    cr_assert_eq(g.n, 0);
    mt_reader_close(r);

    /* cut inside the last chunk: nothing either */
    cr_assert_eq(truncate(path, (off_t)(size - 7)), 0);
    r = open_trace(path);
    memset(&g, 0, sizeof g);
    cr_assert_eq(mt_reader_tail_symbols(r, &start, take, &g), 0);
    cr_assert_eq(start, size - 7);
    cr_assert_eq(g.n, 0);
    mt_reader_close(r);
    unlink(path);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 8 MiB of chunk headers after a recording: every one a candidate the search must look at, the
 * last one's lengths fitting the end of the file (its CRC does not match). The search reads each
 * byte once and checks one CRC: well under a second. */
Test(trace_tail, forged_headers_cost_one_look_each)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "tail.mtrace");
    uint64_t recording = write_recording(path, 0);
    enum { FORGED = 8 << 20 };
    uint8_t *junk = malloc(FORGED);
    cr_assert_not_null(junk);
    for (size_t i = 0; i < FORGED; i += 16) {
        memcpy(junk + i, "MTCK", 4);
        uint32_t clen = 0x1000, rlen = 0x2000, crc = 0;
        memcpy(junk + i + 4, &clen, 4);
        memcpy(junk + i + 8, &rlen, 4);
        memcpy(junk + i + 12, &crc, 4);
    }
    uint32_t fits = 0x1000 - 16; /* the header 0x1000 bytes before the end claims the rest */
    memcpy(junk + FORGED - 0x1000 + 4, &fits, 4);
    int fd = open(path, O_WRONLY | O_APPEND);
    cr_assert_eq(write(fd, junk, FORGED), FORGED);
    close(fd);
    free(junk);
    mt_reader *r = open_trace(path);
    static got g;
    memset(&g, 0, sizeof g);
    uint64_t start;
    double t0 = now_s();
    cr_assert_eq(mt_reader_tail_symbols(r, &start, take, &g), 0);
    double s = now_s() - t0;
    cr_assert_eq(start, recording + FORGED);
    cr_assert_eq(g.n, 0);
    cr_expect_lt(s, 1.0, "%.2f s", s);
    mt_reader_close(r);
    unlink(path);
}
