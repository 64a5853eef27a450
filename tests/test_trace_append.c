/* Chunks appended later (writer opened with hdr == NULL on an O_APPEND fd) read back as one
 * stream with the original header. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"
#include "trace/record_eq.h"
#include "trace/record_mix.h"

enum { FIRST = 500, SECOND = 700, THIRD = 3 };

Test(trace_append, appended_chunks_read_as_one_stream)
{
    static mt_record recs[FIRST + SECOND + THIRD];
    mt_mix m;
    mt_mix_init(&m, 5);
    for (size_t i = 0; i < FIRST + SECOND + THIRD; i++)
        mt_mix_next(&m, &recs[i]);
    char path[256];
    mt_test_tmpname(path, sizeof path, "append.mtrace");

    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 77, .start_monotonic_ns = 5};
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
        fd = open(path, O_WRONLY | O_APPEND);
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
    mt_record rec;
    for (size_t i = 0; i < FIRST + SECOND + THIRD; i++) {
        cr_assert_eq(mt_reader_next(r, &rec), MT_READ_RECORD, "%zu: %s", i, mt_reader_error(r));
        cr_assert(mt_record_eq(&rec, &recs[i]), "record %zu differs", i);
    }
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_END);
    mt_reader_close(r);
    unlink(path);
}
