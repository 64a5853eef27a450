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

/* ---- format version 2 on traces recorded on a GPU ------------------------------------------------
 * Most fixtures in tests/data were recorded in version 1, cifar_tensors_600 in version 2. Each is
 * written again in version 1 and in the current version (same chunking, so only the encoding
 * differs), and all three files are read side by side: every record must be the same, and on the
 * tensor traces (where version 2's aux prediction applies) version 2 must be smaller. */

typedef struct {
    int files, smaller_tensor_traces;
} reencode_totals;

/* Writes every record of `from` to a new file `out` in format `version`; returns its size. */
static uint64_t reencode(const char *from, const char *out, uint16_t version, uint64_t *events,
                         uint64_t *tensor_events)
{
    char err[512];
    mt_reader *a = mt_reader_open(from, err, sizeof err);
    cr_assert_not_null(a, "%s", err);
    mt_file_header h = *mt_reader_header(a);
    h.version = version;
    mt_writer *w = mt_writer_open_fd(open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), &h, 0);
    cr_assert_not_null(w);
    mt_record rec;
    *events = *tensor_events = 0;
    while (mt_reader_next(a, &rec) == MT_READ_RECORD) {
        cr_assert_eq(mt_writer_put(w, &rec), 0);
        *events += rec.type == MT_REC_EVENT;
        *tensor_events += rec.type == MT_REC_EVENT && rec.u.event.kind == MT_KIND_TENSOR;
    }
    mt_reader_close(a);
    cr_assert_eq(mt_writer_flush(w), 0);
    uint64_t size = mt_writer_bytes_written(w);
    cr_assert_eq(mt_writer_close(w, 1), 0);
    return size;
}

static void reencode_fixture(const char *path, void *ctx)
{
    reencode_totals *t = ctx;
    t->files++;
    char v1[256], v2[256], err[512];
    mt_test_tmpname(v1, sizeof v1, "reencoded1.mtrace");
    mt_test_tmpname(v2, sizeof v2, "reencoded2.mtrace");
    uint64_t events, tensor_events;
    uint64_t size1 = reencode(path, v1, 1, &events, &tensor_events);
    uint64_t size2 = reencode(path, v2, MT_TRACE_VERSION, &events, &tensor_events);

    const char *paths[3] = {path, v1, v2};
    mt_reader *r[3];
    for (int k = 0; k < 3; k++) {
        r[k] = mt_reader_open(paths[k], err, sizeof err);
        cr_assert_not_null(r[k], "%s", err);
    }
    cr_assert_eq(mt_reader_header(r[2])->version, MT_TRACE_VERSION);
    mt_record rec[3];
    for (uint64_t i = 0;; i++) {
        mt_read_status st = mt_reader_next(r[0], &rec[0]);
        for (int k = 1; k < 3; k++) {
            cr_assert_eq(mt_reader_next(r[k], &rec[k]), st, "%s: record %llu", paths[k],
                         (unsigned long long)i);
            if (st == MT_READ_RECORD)
                cr_assert(mt_record_eq(&rec[0], &rec[k]), "%s: record %llu (type %d) differs",
                          paths[k], (unsigned long long)i, rec[0].type);
        }
        if (st != MT_READ_RECORD) break;
    }
    for (int k = 0; k < 3; k++)
        mt_reader_close(r[k]);
    unlink(v1);
    unlink(v2);
    cr_log_info("%s: %llu events (%llu tensor): version 1 %llu bytes, version 2 %llu", path,
                (unsigned long long)events, (unsigned long long)tensor_events,
                (unsigned long long)size1, (unsigned long long)size2);
    if (tensor_events * 2 > events && events > 1000) {
        cr_expect_lt(size2, size1, "%s: version 2 is not smaller on a tensor trace", path);
        t->smaller_tensor_traces += size2 < size1;
    }
}

Test(trace_size, gpu_fixtures_read_the_same_in_both_versions, .timeout = 60)
{
    reencode_totals t = {0};
    cr_assert_geq(mt_test_each_gpu_fixture(reencode_fixture, &t), 10, "the GPU fixtures were found");
    cr_assert_geq(t.smaller_tensor_traces, 3, "tensor-mode fixtures were among them");
}

/* Issue 17's size goal, "<= 3 bytes per event on long runs", on a long run recorded on the GPU:
 * samples/cifar.py, 600 steps, --tensors, by the version 2 recorder (the file itself: 2.87 bytes
 * per event, its chunks cut every 200 ms by the recorder's drains). The current writer must keep
 * it under 3 in its default chunks (2.67 when this test was written; in version 1: 3.05). */
Test(trace_size, a_long_gpu_tensor_run_is_under_3_bytes_per_event, .timeout = 60)
{
    const char *path = MT_TEST_DATA_DIR "/cifar_tensors_600.mtrace";
    char out[256], err[512];
    mt_test_tmpname(out, sizeof out, "long.mtrace");
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    cr_assert_eq(mt_reader_header(r)->version, 2, "recorded by the version 2 recorder");
    mt_reader_close(r);
    uint64_t events, tensor_events;
    uint64_t size = reencode(path, out, MT_TRACE_VERSION, &events, &tensor_events);
    unlink(out);
    cr_assert_geq(events, 50000);
    cr_assert_geq(tensor_events * 10, events * 9, "a tensor-mode trace");
    double per_event = (double)(size - MT_FILE_HEADER_SIZE) / (double)events;
    cr_log_info("%.3f bytes/event", per_event);
    cr_assert_leq(per_event, 3.0, "%.3f bytes/event", per_event);
}
