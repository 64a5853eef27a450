/* bench_sink: how many events per second the recorder's sink keeps up with, and what one event
 * costs the thread that records it, when nothing may be dropped.
 *
 * T producer threads (default 4) each record events as fast as they can for S seconds (default 3)
 * into a sink writing a real trace file (in $TMPDIR, deleted after). The events look like a tensor
 * workload's: alloc/free pairs, 16 live addresses per thread, sizes from a small set, a stack id
 * per call site. Prints the sustained rate (events written per second of wall time, the final
 * drain included), the per-event latency the producers saw (1 call in 64 timed: median, p99,
 * p99.9, max; waits for a full ring included), how often and how long producers waited, the file
 * size per event, and that nothing was dropped or written out of order.
 *
 * With GAP_KB, each producer writes that many KiB of its own memory between two events, as a
 * program does between two allocations (a training step touches megabytes between them): the
 * ring's lines and the sink's state are then as cold as the recorder finds them in a real run, and
 * what an event costs is dominated by cache misses, not by the writer keeping up.
 *
 * Usage: bench_sink [THREADS] [SECONDS] [RING_SLOTS] [GAP_KB]. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/record.h"

#define SAMPLE_EVERY 64
#define MAX_SAMPLES (1u << 22)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct producer {
    mt_sink *sink;
    uint32_t tid;
    uint64_t until, events;
    uint32_t *lat; /* sampled latencies, ns */
    size_t n_lat, cap_lat;
    size_t gap_bytes; /* written between two events (GAP_KB) */
    int prefetch;     /* BENCH_SINK_PREFETCH=0 leaves mt_sink_prefetch out */
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    static const uint64_t sizes[] = {512, 1024, 4096, 65536, 1 << 20, 2 << 20, 3 << 20, 8 << 20};
    uint64_t base = 0x7f0000000000ull + (uint64_t)p->tid * (1ull << 32);
    volatile unsigned char *work = p->gap_bytes ? calloc(1, p->gap_bytes) : NULL;
    for (uint64_t i = 0;; i++) {
        if (work)
            for (size_t b = 0; b < p->gap_bytes; b += 64) work[b]++;
        if (p->prefetch) mt_sink_prefetch(p->sink); /* as the recorder does when a report starts */
        uint64_t t = now_ns();
        if ((i & 1023) == 0 && t >= p->until) break;
        uint64_t slot = (i >> 1) & 15;
        mt_event e = {.time_ns = t, .tid = p->tid, .device = 0, .kind = MT_KIND_TENSOR,
                      .op = (i & 1) ? MT_OP_FREE : MT_OP_ALLOC,
                      .address = base + slot * (16u << 20),
                      .bytes = (i & 1) ? 0 : sizes[(i >> 1) % 8],
                      .stack = (i & 1) ? 0 : (uint32_t)(1 + (i >> 1) % 40),
                      .aux = i * 512};
        if ((work || i % SAMPLE_EVERY == 0) && p->n_lat < p->cap_lat) {
            mt_sink_event(p->sink, &e);
            p->lat[p->n_lat++] = (uint32_t)(now_ns() - t);
        } else {
            mt_sink_event(p->sink, &e);
        }
        p->events++;
    }
    free((void *)work);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    double secs = argc > 2 ? atof(argv[2]) : 3.0;
    uint32_t slots = argc > 3 ? (uint32_t)atoi(argv[3]) : 0;
    size_t gap_kb = argc > 4 ? (size_t)atol(argv[4]) : 0;
    if (threads < 1 || threads > 64 || secs <= 0) {
        fprintf(stderr, "usage: bench_sink [THREADS 1..64] [SECONDS] [RING_SLOTS] [GAP_KB]\n");
        return 2;
    }
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/bench_sink.%d.mtrace", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    mt_sink_config cfg = {.fd = fd, .ring_slots = slots};
    cfg.header.version = MT_TRACE_VERSION;
    cfg.header.start_monotonic_ns = now_ns();
    mt_sink *s = mt_sink_start(&cfg);
    if (!s) return 1;
    producer *p = calloc((size_t)threads, sizeof *p);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    uint64_t t0 = now_ns();
    for (int i = 0; i < threads; i++) {
        p[i] = (producer){.sink = s, .tid = (uint32_t)i + 1,
                          .until = t0 + (uint64_t)(secs * 1e9), .cap_lat = MAX_SAMPLES,
                          .gap_bytes = gap_kb * 1024,
                          .prefetch = !getenv("BENCH_SINK_PREFETCH") ||
                                      atoi(getenv("BENCH_SINK_PREFETCH")) != 0};
        p[i].lat = malloc(MAX_SAMPLES * sizeof *p[i].lat);
        pthread_create(&th[i], NULL, produce, &p[i]);
    }
    uint64_t events = 0;
    size_t n_lat = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        events += p[i].events;
        n_lat += p[i].n_lat;
    }
    mt_sink_stats st;
    mt_sink_stop(s, &st);
    double wall = (double)(now_ns() - t0) / 1e9;
    uint32_t *all = malloc((n_lat ? n_lat : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < threads; i++) {
        memcpy(all + k, p[i].lat, p[i].n_lat * sizeof *all);
        k += p[i].n_lat;
        free(p[i].lat);
    }
    qsort(all, n_lat, sizeof *all, cmp_u32);
#define PCT(q) (n_lat ? all[(size_t)((double)(n_lat - 1) * (q))] : 0)
    struct stat sb;
    stat(path, &sb);
    printf("threads %d, %.1f s, ring %u slots, %zu KiB written between events\n", threads, secs,
           slots ? slots : 16384, gap_kb);
    printf("events recorded  %llu (%.2f M/s over %.2f s, final drain included)\n",
           (unsigned long long)events, (double)events / wall / 1e6, wall);
    printf("events written   %llu, dropped %llu, written out of time order %llu\n",
           (unsigned long long)st.events, (unsigned long long)st.dropped,
           (unsigned long long)st.late);
    printf("latency per event (%s timed): median %u ns, p99 %u ns, p99.9 %u ns, max %u ns\n",
           gap_kb ? "every one" : "1 in 64", PCT(0.5), PCT(0.99), PCT(0.999),
           n_lat ? all[n_lat - 1] : 0);
    printf("waits for a full ring: %llu, %.3f ms in all, longest %.3f ms\n",
           (unsigned long long)st.waits, (double)st.wait_ns / 1e6, (double)st.max_wait_ns / 1e6);
    printf("file %.1f MiB, %.2f bytes/event\n", (double)sb.st_size / 1048576.0,
           events ? (double)sb.st_size / (double)events : 0.0);
    unlink(path);
    free(all);
    free(p);
    free(th);
    return st.dropped || st.events != events ? 1 : 0;
}
