/* bench_compact: how fast the compactor turns events into an analysis, and how much memory it
 * takes. Generates a synthetic trace (trace/synthetic.h: 4 threads, 100..900 live allocations,
 * 300 sizes, 256 stacks) of N events (default 10 M) into a temporary file, then in fresh child
 * processes (so each peak RSS is its own, via getrusage):
 *   read      mt_reader only: the decode floor every pass pays
 *   tracker   mt_tracker_event on events generated in memory blocks (generation not timed)
 *   analyze   mt_analyze: both passes over the file, as `memtrace report` does
 *   chrome    mt_export_chrome to /dev/null (analysis + selection + emit passes)
 * Usage: bench_compact [N_EVENTS]. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/compact.h"
#include "memtrace/export.h"
#include "trace/synthetic.h"

#define BLOCK (1u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double max_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static void report(const char *what, uint64_t events, double secs, const char *extra)
{
    printf("%-8s %10.2f M events/s  %8.3f s  peak RSS %7.1f MiB  %s\n", what,
           (double)events / secs / 1e6, secs, max_rss_mib(), extra);
    fflush(stdout);
}

static void bench_read(const char *path, uint64_t n)
{
    char err[256];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    if (!r) exit(1);
    mt_record rec;
    uint64_t got = 0;
    double t0 = now_s();
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) got += rec.type == MT_REC_EVENT;
    double t = now_s() - t0;
    mt_reader_close(r);
    if (got != n) fprintf(stderr, "read %llu events, expected %llu\n", (unsigned long long)got,
                          (unsigned long long)n);
    report("read", got, t, "(decode floor)");
}

static void bench_tracker(uint64_t n)
{
    mt_event *buf = malloc(BLOCK * sizeof *buf);
    mt_tracker *t = mt_tracker_new(NULL);
    mt_synth s;
    mt_synth_init(&s, 1);
    double busy = 0;
    for (uint64_t done = 0; done < n;) {
        size_t k = n - done < BLOCK ? (size_t)(n - done) : BLOCK;
        for (size_t i = 0; i < k; i++) mt_synth_next(&s, &buf[i]);
        double t0 = now_s();
        for (size_t i = 0; i < k; i++) mt_tracker_event(t, &buf[i]);
        busy += now_s() - t0;
        done += k;
    }
    char extra[128];
    const mt_usage *u;
    mt_tracker_usages(t, &u);
    snprintf(extra, sizeof extra, "(live at end %zu, peak %.1f MiB; RSS includes a %zu MiB block)",
             mt_tracker_live_count(t), (double)u[0].peak / 1048576.0,
             (size_t)(BLOCK * sizeof *buf) >> 20);
    report("tracker", n, busy, extra);
    mt_tracker_free(t);
    free(buf);
}

static void bench_analyze(const char *path, uint64_t n)
{
    char err[512];
    mt_analysis *a;
    double t0 = now_s();
    if (mt_analyze(path, NULL, &a, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    double t = now_s() - t0;
    char extra[160];
    snprintf(extra, sizeof extra, "(2 passes; pass 2 stops at the peak, event %llu of %llu)",
             (unsigned long long)a->devices[0].u.peak_seq, (unsigned long long)a->events);
    report("analyze", n, t, extra);
    mt_analysis_free(a);
}

static void bench_chrome(const char *path, uint64_t n)
{
    char err[512];
    mt_analysis *a;
    double t0 = now_s();
    if (mt_analyze(path, NULL, &a, err, sizeof err) < 0) exit(1);
    mt_out *o = mt_out_open("/dev/null", err, sizeof err);
    if (!o || mt_export_chrome(o, &a, 1, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    mt_out_close(o);
    report("chrome", n, now_s() - t0, "(analysis + top-500000 selection + emit, to /dev/null)");
    mt_analysis_free(a);
}

static void in_child(void (*fn)(const char *, uint64_t), const char *path, uint64_t n)
{
    fflush(stdout); /* or the child would print the parent's buffered lines again */
    pid_t pid = fork();
    if (pid == 0) {
        fn(path, n);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
}

static void tracker_child(const char *path, uint64_t n)
{
    (void)path;
    bench_tracker(n);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000ull;
    char path[] = "/tmp/bench_compact_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 1, .start_monotonic_ns = 3600000000000ull};
    mt_writer *w = mt_writer_open_fd(fd, &h, 0);
    mt_synth s;
    mt_synth_init(&s, 1);
    mt_record r = {.type = MT_REC_EVENT};
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        mt_synth_next(&s, &r.u.event);
        mt_writer_put(w, &r);
    }
    uint64_t bytes = mt_writer_bytes_written(w);
    mt_writer_close(w, 1);
    printf("trace: %llu events, %.1f MiB, written in %.2f s (%s)\n", (unsigned long long)n,
           (double)bytes / 1048576.0, now_s() - t0, path);
    in_child(bench_read, path, n);
    in_child(tracker_child, path, n);
    in_child(bench_analyze, path, n);
    in_child(bench_chrome, path, n);
    unlink(path);
    return 0;
}
