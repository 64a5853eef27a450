/* bench_trace_size — bytes per event and encode speed of the trace format on a realistic stream.
 *
 *   bench_trace_size [events (default 1000000)] [chunk raw bytes (default MT_CHUNK_RAW_DEFAULT)]
 *
 * Writes the synthetic alloc/free stream of trace/synthetic.h to a temporary file, reads it back
 * (checking every event matches), and prints the file size, bytes/event and the write and
 * read rates.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "memtrace/trace.h"
#include "trace/synthetic.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 1000000ul;
    size_t chunk = argc > 2 ? strtoul(argv[2], NULL, 0) : 0;
    char path[256];
    snprintf(path, sizeof path, "%s/bench-trace-size-%d.mtrace",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    mt_file_header hdr = {.version = MT_TRACE_VERSION, .pid = 1};
    mt_writer *w = mt_writer_open_fd(fd, &hdr, chunk);
    if (!w) {
        perror("mt_writer_open_fd");
        return 1;
    }
    mt_synth s;
    mt_synth_init(&s, 42);
    mt_record rec = {.type = MT_REC_EVENT};
    double t0 = now_s();
    for (unsigned long i = 0; i < n; i++) {
        mt_synth_next(&s, &rec.u.event);
        if (mt_writer_put(w, &rec) != 0) {
            perror("mt_writer_put");
            return 1;
        }
    }
    mt_writer_flush(w);
    double t_write = now_s() - t0;
    uint64_t size = mt_writer_bytes_written(w);
    mt_writer_close(w, 1);

    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    if (!r) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    mt_synth_init(&s, 42);
    mt_event want;
    unsigned long got = 0;
    mt_read_status st;
    t0 = now_s();
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        mt_synth_next(&s, &want);
        if (rec.type != MT_REC_EVENT || memcmp(&rec.u.event, &want, sizeof want) != 0) {
            fprintf(stderr, "event %lu differs after the round trip\n", got);
            return 1;
        }
        got++;
    }
    double t_read = now_s() - t0;
    if (st != MT_READ_END || got != n) {
        fprintf(stderr, "read %lu of %lu events, status %d: %s\n", got, n, st, mt_reader_error(r));
        return 1;
    }
    mt_reader_close(r);
    unlink(path);

    printf("events            %lu\n", n);
    printf("file bytes        %llu\n", (unsigned long long)size);
    printf("bytes/event       %.3f\n", (double)(size - MT_FILE_HEADER_SIZE) / (double)n);
    printf("write             %.1f M events/s\n", n / t_write / 1e6);
    printf("read              %.1f M events/s\n", n / t_read / 1e6);
    return 0;
}
