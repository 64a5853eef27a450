/* bench_compact: how fast memtrace reads, analyses and exports a trace, and how much memory it
 * takes, end to end (README, "Speed of the analysis"). Not a test: it prints numbers.
 *
 *   bench_compact [--events N] [--seed S] [--repeat R] [--memtrace BIN] [--trace FILE] [--stages]
 *                 [--tensors]
 *   bench_compact --write FILE [--events N] [--seed S] [--tensors]
 *
 * The trace is tests/support/synth_file.h's (N events, default 10 M: cudaMalloc/cudaFree from
 * four threads with 12-frame Python and native stacks, NVML samples), written to a temporary file,
 * or FILE with --trace (any trace: its events are counted by reading it). --write only writes it,
 * so every command can be timed by hand on the same file. --tensors makes it the same stream as a
 * `record --tensors` trace (mt_synth_file_write_tensors: tensors with categories and phases, so
 * the analysis runs its pass 2).
 *
 * Each command runs as its own process, `BIN COMMAND TRACE > /dev/null` (BIN: --memtrace, default
 * the memtrace built next to this program), R times (default 1, the fastest is shown); its wall
 * time and peak RSS (wait4) give events/s and memory. --stages adds, in forked children of this
 * program, the reader alone (records decoded, nothing done with them), the tracker alone (events
 * generated in memory blocks, generation not timed) and mt_analyze. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/compact.h"
#include "synth_file.h"
#include "trace/synthetic.h"

#define BLOCK (1u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void row(const char *what, uint64_t events, double secs, double rss_mib)
{
    printf("%-34s %9.2f %9.3f %9.1f\n", what, (double)events / secs / 1e6, secs, rss_mib);
    fflush(stdout);
}

/* ---- stages, in a forked child each (its own peak RSS) ------------------------------------------ */

static double self_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static void stage_read(const char *path, uint64_t n)
{
    char err[256];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    if (!r) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    mt_record rec;
    uint64_t got = 0;
    double t0 = now_s();
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) got += rec.type == MT_REC_EVENT;
    double t = now_s() - t0;
    mt_reader_close(r);
    if (got != n) fprintf(stderr, "read %llu events, expected %llu\n", (unsigned long long)got,
                          (unsigned long long)n);
    row("stage: read (decode floor)", got, t, self_rss_mib());
}

static void stage_tracker(const char *path, uint64_t n)
{
    (void)path;
    mt_event *buf = malloc(BLOCK * sizeof *buf);
    mt_tracker *t = mt_tracker_new(NULL);
    if (!buf || !t) exit(1);
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
    row("stage: tracker (events in memory)", n, busy, self_rss_mib());
    mt_tracker_free(t);
    free(buf);
}

static void stage_analyze(const char *path, uint64_t n)
{
    char err[512];
    mt_analysis *a;
    double t0 = now_s();
    if (mt_analyze(path, NULL, &a, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    row("stage: mt_analyze", n, now_s() - t0, self_rss_mib());
    mt_analysis_free(a);
}

static void in_child(void (*fn)(const char *, uint64_t), const char *path, uint64_t n)
{
    fflush(stdout); /* or the child would print the parent's buffered lines again */
    pid_t pid = fork();
    if (pid == 0) {
        fn(path, n);
        fflush(stdout);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
}

/* ---- commands: `memtrace ARGS TRACE > /dev/null`, timed from outside --------------------------- */

/* Runs it once: wall seconds and peak RSS in MiB; -1 when it failed. */
static double run_once(const char *bin, char *const *args, size_t nargs, const char *trace,
                       double *rss_mib)
{
    char *argv[16];
    size_t k = 0;
    argv[k++] = (char *)bin;
    for (size_t i = 0; i < nargs && k < 14; i++) argv[k++] = args[i];
    argv[k++] = (char *)trace;
    argv[k] = NULL;
    fflush(stdout);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 1);
        execv(bin, argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) return -1;
    double t = now_s() - t0;
    *rss_mib = (double)ru.ru_maxrss / 1024.0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "%s: exit status %d\n", argv[1], WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    return t;
}

static void command(const char *bin, const char *label, char *const *args, size_t nargs,
                    const char *trace, uint64_t n, int repeat)
{
    double best = -1, best_rss = 0;
    for (int i = 0; i < repeat; i++) {
        double rss;
        double t = run_once(bin, args, nargs, trace, &rss);
        if (t < 0) return;
        if (best < 0 || t < best) best = t;
        if (rss > best_rss) best_rss = rss;
    }
    row(label, n, best, best_rss);
}

static uint64_t count_events(const char *path)
{
    char err[256];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    if (!r) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    mt_record rec;
    uint64_t n = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) n += rec.type == MT_REC_EVENT;
    mt_reader_close(r);
    return n;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_compact [--events N] [--seed S] [--repeat R] [--memtrace BIN] "
                    "[--trace FILE] [--stages] [--tensors]\n"
                    "       bench_compact --write FILE [--events N] [--seed S] [--tensors]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    uint64_t n = 10000000ull, seed = 1;
    int repeat = 1, stages = 0, tensors = 0;
    const char *write_to = NULL, *trace = NULL, *bin = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--stages")) stages = 1;
        else if (!strcmp(a, "--tensors"))
            tensors = 1;
        else if (!v) usage();
        else if (!strcmp(a, "--events")) n = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--repeat")) repeat = atoi(v), i++;
        else if (!strcmp(a, "--write")) write_to = v, i++;
        else if (!strcmp(a, "--trace")) trace = v, i++;
        else if (!strcmp(a, "--memtrace")) bin = v, i++;
        else usage();
    }
    if (repeat < 1) repeat = 1;
    if (write_to) {
        double t0 = now_s();
        if ((tensors ? mt_synth_file_write_tensors : mt_synth_file_write)(write_to, n, seed) < 0) {
            perror(write_to);
            return 1;
        }
        fprintf(stderr, "%s: %llu events, written in %.1f s\n", write_to, (unsigned long long)n,
                now_s() - t0);
        return 0;
    }
    char self[PATH_MAX], def_bin[PATH_MAX + 32];
    if (!bin) {
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k < 0) return 1;
        self[k] = 0;
        snprintf(def_bin, sizeof def_bin, "%s/../src/cli/memtrace", dirname(self));
        bin = def_bin;
    }
    char tmp[] = "/tmp/bench_compact_XXXXXX";
    if (!trace) {
        int fd = mkstemp(tmp);
        if (fd < 0) return 1;
        close(fd);
        double t0 = now_s();
        if ((tensors ? mt_synth_file_write_tensors : mt_synth_file_write)(tmp, n, seed) < 0) {
            perror(tmp);
            return 1;
        }
        fprintf(stderr, "wrote the synthetic trace in %.1f s\n", now_s() - t0);
        trace = tmp;
    } else {
        n = count_events(trace);
    }
    struct stat st;
    if (stat(trace, &st) != 0) return 1;
    printf("trace: %s, %llu events, %.1f MiB (%.2f bytes/event); memtrace: %s\n", trace,
           (unsigned long long)n, (double)st.st_size / 1048576.0,
           n ? (double)st.st_size / (double)n : 0.0, bin);
    printf("%-34s %9s %9s %9s\n", "", "M ev/s", "seconds", "RSS MiB");
    if (stages) {
        in_child(stage_read, trace, n);
        in_child(stage_tracker, trace, n);
        in_child(stage_analyze, trace, n);
    }
    static char *const report[] = {"report"}, *const json[] = {"report", "--json"},
                       *const by_line[] = {"report", "--by-line"},
                       *const folded[] = {"export", "--format", "folded"},
                       *const speedscope[] = {"export", "--format", "speedscope"},
                       *const chrome[] = {"export", "--format", "chrome"},
                       *const html[] = {"export", "--format", "html"};
    command(bin, "report", report, 1, trace, n, repeat);
    command(bin, "report --json", json, 2, trace, n, repeat);
    command(bin, "report --by-line", by_line, 2, trace, n, repeat);
    command(bin, "export --format folded", folded, 3, trace, n, repeat);
    command(bin, "export --format speedscope", speedscope, 3, trace, n, repeat);
    command(bin, "export --format chrome", chrome, 3, trace, n, repeat);
    command(bin, "export --format html", html, 3, trace, n, repeat);
    if (trace == tmp) unlink(tmp);
    return 0;
}
