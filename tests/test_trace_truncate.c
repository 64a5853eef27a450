/* A trace cut anywhere reads back exactly the records of its whole chunks, then TRUNCATED; a
 * trace cut inside its header is refused by mt_reader_open with a message naming file and offset.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"
#include "trace/bytes.h"
#include "trace/record_eq.h"
#include "trace/record_mix.h"

enum { N = 3000 };

typedef struct corpus {
    mt_record recs[N];
    uint64_t chunk_end[N];  /* file offset just past the chunk that holds record i */
    uint64_t chunk_ends[N]; /* every chunk end, in order */
    size_t nchunks;
    uint8_t *file;
    size_t len;
} corpus;

/* Writes the mix with small chunks, then walks the chunk headers and the reader's offsets to learn
 * which chunk each record landed in. */
static void build(corpus *c, const char *path)
{
    mt_mix m;
    mt_mix_init(&m, 3);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 1};
    mt_writer *w = mt_writer_open_fd(fd, &h, 700);
    cr_assert_not_null(w);
    for (size_t i = 0; i < N; i++) {
        mt_mix_next(&m, &c->recs[i]);
        cr_assert_eq(mt_writer_put(w, &c->recs[i]), 0);
    }
    cr_assert_eq(mt_writer_close(w, 1), 0);
    c->file = mt_test_slurp(path, &c->len);
    cr_assert_not_null(c->file);

    c->nchunks = 0;
    for (uint64_t off = MT_FILE_HEADER_SIZE; off < c->len;) {
        cr_assert_eq(memcmp(c->file + off, "MTCK", 4), 0);
        off += 16 + mt_get_le32(c->file + off + 4);
        c->chunk_ends[c->nchunks++] = off;
    }
    cr_assert_eq(c->chunk_ends[c->nchunks - 1], c->len);
    cr_assert_gt(c->nchunks, 20, "the test needs many chunks");

    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    size_t k = 0, i = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        while (c->chunk_ends[k] <= mt_reader_offset(r))
            k++;
        c->chunk_end[i++] = c->chunk_ends[k];
    }
    cr_assert_eq(i, N);
    mt_reader_close(r);
}

/* Reads the first `cut` bytes of the corpus back and checks the promise. */
static void check_cut(const corpus *c, const char *path, size_t cut)
{
    cr_assert_eq(mt_test_spit(path, c->file, cut), 0);
    char err[512] = "";
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    if (cut < MT_FILE_HEADER_SIZE) {
        cr_assert_null(r, "cut at %zu: header is incomplete", cut);
        cr_assert(strstr(err, path) && strstr(err, "offset"), "message: %s", err);
        return;
    }
    cr_assert_not_null(r, "cut at %zu: %s", cut, err);
    mt_record rec;
    size_t i = 0;
    mt_read_status st;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        cr_assert_lt(i, N);
        cr_assert(mt_record_eq(&rec, &c->recs[i]), "cut at %zu: record %zu differs", cut, i);
        i++;
    }
    size_t want = 0;
    while (want < N && c->chunk_end[want] <= cut)
        want++;
    cr_assert_eq(i, want, "cut at %zu: got %zu records, want %zu", cut, i, want);
    /* where the last whole chunk ends */
    uint64_t whole = MT_FILE_HEADER_SIZE;
    for (size_t k = 0; k < c->nchunks && c->chunk_ends[k] <= cut; k++)
        whole = c->chunk_ends[k];
    if (whole == cut) {
        cr_assert_eq(st, MT_READ_END, "cut at chunk boundary %zu: %s", cut, mt_reader_error(r));
    } else {
        cr_assert_eq(st, MT_READ_TRUNCATED, "cut at %zu: status %d (%s)", cut, st,
                     mt_reader_error(r));
        cr_assert_eq(mt_reader_error_offset(r), whole);
        cr_assert(strstr(mt_reader_error(r), path), "%s", mt_reader_error(r));
        cr_assert_eq(mt_reader_next(r, &rec), MT_READ_TRUNCATED, "the status is sticky");
    }
    mt_reader_close(r);
}

Test(trace_truncate, every_chunk_boundary_and_random_offsets)
{
    static corpus c;
    char path[256], cutpath[256];
    mt_test_tmpname(path, sizeof path, "full.mtrace");
    mt_test_tmpname(cutpath, sizeof cutpath, "cut.mtrace");
    build(&c, path);

    for (size_t cut = 0; cut <= MT_FILE_HEADER_SIZE + 20; cut++)
        check_cut(&c, cutpath, cut);
    for (size_t k = 0; k < c.nchunks; k++) {
        check_cut(&c, cutpath, c.chunk_ends[k]);
        check_cut(&c, cutpath, c.chunk_ends[k] - 1);
        if (c.chunk_ends[k] + 1 <= c.len) check_cut(&c, cutpath, c.chunk_ends[k] + 1);
        if (c.chunk_ends[k] + 16 <= c.len) check_cut(&c, cutpath, c.chunk_ends[k] + 15);
    }
    mt_mix m;
    mt_mix_init(&m, 99);
    for (int i = 0; i < 400; i++)
        check_cut(&c, cutpath, (size_t)(mt_mix_rand(&m) % (c.len + 1)));
    free(c.file);
    unlink(path);
    unlink(cutpath);
}
