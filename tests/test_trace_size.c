/* Size regression guard: the realistic synthetic alloc/free stream (trace/synthetic.h, the same
 * one bench_trace_size reports on) must stay well under a bytes/event bound, and round-trip. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"
#include "trace/record_eq.h"
#include "trace/synthetic.h"

/* Measured 6.6 bytes/event at 1 M events (see docs/trace-format.md); the bound leaves room for
 * noise, not for a layout regression (one interleaved stream instead of lanes measured 8.3). */
#define MAX_BYTES_PER_EVENT 7.5

Test(trace_size, synthetic_stream_bytes_per_event, .timeout = 60)
{
    enum { N = 200000 };
    char path[256];
    mt_test_tmpname(path, sizeof path, "size.mtrace");
    mt_file_header h = {.version = MT_TRACE_VERSION};
    mt_writer *w = mt_writer_open_fd(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), &h, 0);
    cr_assert_not_null(w);
    mt_synth s;
    mt_synth_init(&s, 42);
    mt_record rec = {.type = MT_REC_EVENT};
    for (int i = 0; i < N; i++) {
        mt_synth_next(&s, &rec.u.event);
        cr_assert_eq(mt_writer_put(w, &rec), 0);
    }
    cr_assert_eq(mt_writer_flush(w), 0);
    double per_event = (double)(mt_writer_bytes_written(w) - MT_FILE_HEADER_SIZE) / N;
    cr_assert_eq(mt_writer_close(w, 1), 0);
    cr_log_info("%.3f bytes/event", per_event);
    cr_assert_lt(per_event, MAX_BYTES_PER_EVENT, "%.3f bytes/event", per_event);

    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_synth_init(&s, 42);
    mt_event want;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(mt_reader_next(r, &rec), MT_READ_RECORD);
        mt_synth_next(&s, &want);
        cr_assert(mt_event_eq(&rec.u.event, &want), "event %d", i);
    }
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_END);
    mt_reader_close(r);
    unlink(path);
}
