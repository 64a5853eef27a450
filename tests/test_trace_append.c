/* Chunks appended later (writer opened with hdr == NULL on an O_APPEND fd) read back as one
 * stream with the original header. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"
#include "trace/record_eq.h"
#include "trace/record_mix.h"

enum { FIRST = 500, SECOND = 700, THIRD = 3 };

/* Appended chunks are written in the file's own format version, whatever the writer's default:
 * `symbolize` appends to traces of earlier releases. */
static void append_in_version(uint16_t version)
{
    static mt_record recs[FIRST + SECOND + THIRD];
    mt_mix m;
    mt_mix_init(&m, 5);
    for (size_t i = 0; i < FIRST + SECOND + THIRD; i++)
        mt_mix_next(&m, &recs[i]);
    char path[256];
    mt_test_tmpname(path, sizeof path, "append.mtrace");

    mt_file_header h = {.version = version, .pid = 77, .start_monotonic_ns = 5};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    mt_writer *w = mt_writer_open_fd(fd, &h, 2048);
    for (size_t i = 0; i < FIRST; i++)
        cr_assert_eq(mt_writer_put(w, &recs[i]), 0);
    cr_assert_eq(mt_writer_close(w, 1), 0);

    /* two later sessions, each appending (the second with default chunk size) */
    size_t at = FIRST;
    size_t counts[2] = {SECOND, THIRD};
    size_t chunks[2] = {512, 0};
    for (int s = 0; s < 2; s++) {
        fd = open(path, O_RDWR | O_APPEND);
        cr_assert(fd >= 0);
        w = mt_writer_open_fd(fd, NULL, chunks[s]);
        cr_assert_not_null(w);
        for (size_t i = 0; i < counts[s]; i++)
            cr_assert_eq(mt_writer_put(w, &recs[at++]), 0);
        cr_assert_eq(mt_writer_flush(w), 0);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(mt_writer_bytes_written(w), (uint64_t)st.st_size,
                     "bytes_written counts the file the writer appended to");
        cr_assert_eq(mt_writer_close(w, 1), 0);
    }

    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    cr_assert_eq(mt_reader_header(r)->pid, 77);
    cr_assert_eq(mt_reader_header(r)->version, version);
    mt_record rec;
    for (size_t i = 0; i < FIRST + SECOND + THIRD; i++) {
        cr_assert_eq(mt_reader_next(r, &rec), MT_READ_RECORD, "%zu: %s", i, mt_reader_error(r));
        cr_assert(mt_record_eq(&rec, &recs[i]), "record %zu differs", i);
    }
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_END);
    mt_reader_close(r);
    unlink(path);
}

Test(trace_append, appended_chunks_read_as_one_stream)
{
    append_in_version(MT_TRACE_VERSION);
    append_in_version(1);
}

Test(trace_append, a_file_whose_header_cannot_be_read_is_not_appended_to)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "append_wo.mtrace");
    mt_file_header h = {.pid = 1};
    mt_writer *w = mt_writer_open_fd(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), &h, 0);
    cr_assert_not_null(w);
    cr_assert_eq(mt_writer_close(w, 1), 0);
    int fd = open(path, O_WRONLY | O_APPEND); /* write-only: the version cannot be read */
    errno = 0;
    cr_assert_null(mt_writer_open_fd(fd, NULL, 0));
    cr_assert_eq(errno, EINVAL);
    close(fd);
    /* nor is a file that is not a trace, nor a version this writer cannot write */
    uint8_t junk[MT_FILE_HEADER_SIZE] = "not a trace";
    cr_assert_eq(mt_test_spit(path, junk, sizeof junk), 0);
    fd = open(path, O_RDWR | O_APPEND);
    cr_assert_null(mt_writer_open_fd(fd, NULL, 0));
    close(fd);
    h.version = MT_TRACE_VERSION + 1;
    cr_assert_null(mt_writer_open_fd(open(path, O_WRONLY | O_TRUNC), &h, 0));
    unlink(path);
}
