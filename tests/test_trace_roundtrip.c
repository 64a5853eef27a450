/* Round trip: every record type, edge values, many chunks, oversized records, write errors. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"
#include "trace/record_eq.h"
#include "trace/record_mix.h"

static const mt_file_header header = {
    .version = MT_TRACE_VERSION,
    .pid = 4242,
    .start_monotonic_ns = 123456789012345ull,
    .start_realtime_ns = UINT64_MAX,
};

static int open_new(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    return fd;
}

/* Writes recs in format `version`, reads them back and checks each one and the clean end.
 * Returns the file size. */
static uint64_t round_trip_v(const mt_record *recs, size_t n, size_t chunk, uint16_t version)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "rt.mtrace");
    mt_file_header hv = header;
    hv.version = version;
    mt_writer *w = mt_writer_open_fd(open_new(path), &hv, chunk);
    cr_assert_not_null(w);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(mt_writer_put(w, &recs[i]), 0, "put %zu", i);
    cr_assert_eq(mt_writer_flush(w), 0);
    uint64_t size = mt_writer_bytes_written(w);
    cr_assert_eq(mt_writer_close(w, 1), 0);

    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    const mt_file_header *h = mt_reader_header(r);
    cr_assert_eq(h->version, version);
    cr_assert_eq(h->pid, header.pid);
    cr_assert_eq(h->start_monotonic_ns, header.start_monotonic_ns);
    cr_assert_eq(h->start_realtime_ns, header.start_realtime_ns);
    mt_record got;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(mt_reader_next(r, &got), MT_READ_RECORD, "record %zu: %s", i,
                     mt_reader_error(r));
        cr_assert(mt_record_eq(&got, &recs[i]), "record %zu (type %d) differs", i, recs[i].type);
    }
    cr_assert_eq(mt_reader_next(r, &got), MT_READ_END, "%s", mt_reader_error(r));
    cr_assert_eq(mt_reader_next(r, &got), MT_READ_END);
    cr_assert_eq(mt_reader_file_size(r), size);
    mt_reader_close(r);
    unlink(path);
    return size;
}

/* Every test below round-trips in each version a writer can write: the current one, and 1 (which
 * `symbolize` still appends to). */
static uint64_t round_trip(const mt_record *recs, size_t n, size_t chunk)
{
    round_trip_v(recs, n, chunk, 1);
    return round_trip_v(recs, n, chunk, MT_TRACE_VERSION);
}

Test(trace_roundtrip, every_type_edge_values)
{
    static const uint8_t id[3] = {0, 0xff, 7};
    char long_str[70000];
    memset(long_str, 'L', sizeof long_str - 1);
    long_str[sizeof long_str - 1] = 0;
    mt_record recs[] = {
        {.type = MT_REC_PROCESS, .u.process = {1, 0, "comm", long_str, ""}},
        {.type = MT_REC_PROCESS, .u.process = {UINT32_MAX, UINT32_MAX, NULL, NULL, NULL}},
        {.type = MT_REC_EVENT},
        {.type = MT_REC_EVENT,
         .u.event = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT32_MAX,
                     UINT32_MAX, UINT32_MAX, UINT32_MAX, INT32_MIN, UINT16_MAX, UINT16_MAX,
                     UINT16_MAX, UINT8_MAX, UINT8_MAX}},
        {.type = MT_REC_EVENT, .u.event = {.device = -1, .op = 7, .kind = 15}},
        {.type = MT_REC_EVENT, .u.event = {.device = INT32_MAX, .op = MT_OP_FREE, .time_ns = 1}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_ALLOC, .address = 1ull << 63, .bytes = 512}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_FREE, .address = 1ull << 63, .bytes = 0}},
        {.type = MT_REC_STACK_NODE, .u.node = {1, 0, 0x401000, MT_FRAME_NATIVE}},
        {.type = MT_REC_STACK_NODE, .u.node = {UINT32_MAX, UINT32_MAX, UINT64_MAX, 255}},
        {.type = MT_REC_STACK_NODE, .u.node = {0, UINT32_MAX, 0, MT_FRAME_PSEUDO}},
        {.type = MT_REC_MODULE, .u.module = {7, 0x7f00, 0x7f00, 0x7e00, "/lib/x.so", id, 3}},
        {.type = MT_REC_MODULE, .u.module = {0, UINT64_MAX, UINT64_MAX, 0, "", NULL, 0}},
        {.type = MT_REC_THREAD, .u.thread = {UINT32_MAX, "pt_autograd_0"}},
        {.type = MT_REC_NOTE, .u.note = {UINT64_MAX, MT_NOTE_WARNING, "disk \xe2\x80\x94 full"}},
        {.type = MT_REC_DROPPED, .u.dropped = UINT64_MAX},
        {.type = MT_REC_DROPPED, .u.dropped = 0},
        {.type = MT_REC_SYMBOL, .u.symbol = {UINT64_MAX, UINT32_MAX, UINT32_MAX, 3, "f", ""}},
        {.type = MT_REC_PYCODE, .u.pycode = {UINT32_MAX, 0, "train.py", "Model.forward"}},
        {.type = MT_REC_SAMPLE, .u.sample = {UINT64_MAX, -1, UINT16_MAX, UINT64_MAX}},
        {.type = MT_REC_DEVICE, .u.device = {INT32_MIN, UINT64_MAX, "NVIDIA H100", "GPU-1"}},
        {.type = MT_REC_END, .u.end = {UINT64_MAX, 0, UINT64_MAX}},
        /* tensor events, whose aux version 2 predicts from the previous one on the device (& 7):
         * exact, wrapping, on another device, aliasing device 0's slot, then wrong */
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .bytes = 512,
                                           .aux = 512, .time_ns = 10}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .bytes = 1024,
                                           .aux = 1536, .time_ns = 5}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_FREE, .kind = MT_KIND_TENSOR, .bytes = 2048,
                                           .aux = UINT64_MAX - 511, .time_ns = UINT64_MAX}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .bytes = 7,
                                           .aux = 7, .device = 1}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_FAILED, .kind = MT_KIND_TENSOR, .bytes = 9,
                                           .aux = UINT64_MAX - 511, .device = 8}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_FREE, .kind = MT_KIND_TENSOR, .bytes = 1,
                                           .aux = 3, .device = -1}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_ALLOC, .kind = MT_KIND_DEVICE, .bytes = 1,
                                           .aux = 3}},
        {.type = MT_REC_EVENT, .u.event = {.op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .bytes = 1,
                                           .aux = 5, .device = 1}},
    };
    size_t n = sizeof recs / sizeof recs[0];
    round_trip(recs, n, 0);
    /* the same with a tiny chunk: the 70 kB string gets a chunk of its own */
    round_trip(recs, n, 64);
}

Test(trace_roundtrip, many_records_many_chunks)
{
    enum { N = 50000 };
    mt_record *recs = malloc(N * sizeof *recs);
    cr_assert_not_null(recs);
    mt_mix m;
    mt_mix_init(&m, 1);
    for (size_t i = 0; i < N; i++)
        mt_mix_next(&m, &recs[i]);
    uint64_t small = round_trip(recs, N, 1024);
    uint64_t big = round_trip(recs, N, 0);
    /* more chunks cost more (headers, reset state): proves the small run really was chunked */
    cr_assert_gt(small, big + (N / 100) * 16);
    free(recs);
}

Test(trace_roundtrip, header_only_file_is_empty_trace)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "empty.mtrace");
    mt_writer *w = mt_writer_open_fd(open_new(path), &header, 0);
    cr_assert_not_null(w);
    cr_assert_eq(mt_writer_flush(w), 0); /* nothing buffered: writes nothing */
    cr_assert_eq(mt_writer_bytes_written(w), MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_writer_close(w, 1), 0);
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_END);
    mt_reader_close(r);
    unlink(path);
}

Test(trace_roundtrip, flush_makes_whole_chunks)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "flush.mtrace");
    mt_writer *w = mt_writer_open_fd(open_new(path), &header, 0);
    mt_record rec = {.type = MT_REC_DROPPED, .u.dropped = 5};
    cr_assert_eq(mt_writer_put(w, &rec), 0);
    cr_assert_eq(mt_writer_bytes_written(w), MT_FILE_HEADER_SIZE); /* still buffered */
    cr_assert_eq(mt_writer_flush(w), 0);
    uint64_t after = mt_writer_bytes_written(w);
    cr_assert_gt(after, MT_FILE_HEADER_SIZE);
    size_t len;
    uint8_t *data = mt_test_slurp(path, &len);
    cr_assert_eq(len, after, "the flushed chunk is on disk, not in a stdio buffer");
    cr_assert_eq(memcmp(data + MT_FILE_HEADER_SIZE, "MTCK", 4), 0);
    free(data);
    cr_assert_eq(mt_writer_close(w, 1), 0);
    unlink(path);
}

Test(trace_roundtrip, write_error_is_sticky)
{
    int fd = open("/dev/full", O_WRONLY);
    if (fd < 0) cr_skip_test("no /dev/full");
    /* hdr != NULL: the header write fails, so open fails */
    cr_assert_null(mt_writer_open_fd(fd, &header, 0));
    /* appending reads the file's header first: a trace, then its descriptor becomes /dev/full */
    char path[256];
    mt_test_tmpname(path, sizeof path, "sticky.mtrace");
    mt_writer *w0 = mt_writer_open_fd(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), &header, 0);
    cr_assert_not_null(w0);
    cr_assert_eq(mt_writer_close(w0, 1), 0);
    int app = open(path, O_RDWR | O_APPEND);
    cr_assert_geq(app, 0);
    mt_writer *w = mt_writer_open_fd(app, NULL, 256);
    cr_assert_not_null(w);
    cr_assert_eq(dup2(fd, app), app);
    unlink(path);
    mt_mix m;
    mt_mix_init(&m, 2);
    mt_record rec;
    int failed_at = -1;
    for (int i = 0; i < 1000 && failed_at < 0; i++) {
        mt_mix_next(&m, &rec);
        if (mt_writer_put(w, &rec) != 0) failed_at = i;
    }
    cr_assert_geq(failed_at, 0, "a 256-byte chunk must have been written (and failed)");
    cr_assert_eq(errno, ENOSPC);
    rec.type = MT_REC_DROPPED;
    errno = 0;
    cr_assert_eq(mt_writer_put(w, &rec), -1, "sticky");
    cr_assert_eq(errno, ENOSPC);
    cr_assert_eq(mt_writer_flush(w), -1);
    cr_assert_eq(mt_writer_close(w, 1), -1);
    close(fd);
}

Test(trace_roundtrip, unknown_record_type_refused)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "unknown.mtrace");
    mt_writer *w = mt_writer_open_fd(open_new(path), &header, 0);
    mt_record rec = {.type = MT_REC_MAX_};
    cr_assert_eq(mt_writer_put(w, &rec), -1);
    cr_assert_eq(errno, EINVAL);
    rec = (mt_record){.type = MT_REC_DROPPED, .u.dropped = 9};
    cr_assert_eq(mt_writer_put(w, &rec), 0, "a refused record does not break the writer");
    cr_assert_eq(mt_writer_close(w, 1), 0);
    round_trip(&rec, 1, 0);
    unlink(path);
}

/* The rank fields of the header: written and read back with MT_HDR_RANK, -1 without it (files of
 * earlier releases have zeros there). */
Test(trace_roundtrip, header_rank_fields)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "rank.mtrace");
    for (int with = 0; with < 2; with++) {
        mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 7, .rank = 3, .local_rank = 1,
                            .world_size = 64, .node_rank = 1, .flags = with ? MT_HDR_RANK : 0};
        int fd = open_new(path);
        mt_writer *w = mt_writer_open_fd(fd, &h, 0);
        cr_assert_not_null(w);
        cr_assert_eq(mt_writer_close(w, 1), 0);
        char err[256];
        mt_reader *r = mt_reader_open(path, err, sizeof err);
        cr_assert_not_null(r, "%s", err);
        const mt_file_header *g = mt_reader_header(r);
        cr_expect_eq(g->flags & MT_HDR_RANK, with ? MT_HDR_RANK : 0u);
        cr_expect_eq(g->rank, with ? 3 : -1);
        cr_expect_eq(g->local_rank, with ? 1 : -1);
        cr_expect_eq(g->world_size, with ? 64 : -1);
        cr_expect_eq(g->node_rank, with ? 1 : -1);
        mt_reader_close(r);
        unlink(path);
    }
}
