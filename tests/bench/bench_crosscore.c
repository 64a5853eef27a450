/* bench_crosscore: how long one cache line takes to go from one CPU to another and back.
 *
 * The analysis reads a trace on two threads (src/trace/reader.c), and every decoded record (80
 * bytes) goes from the reader's core to the analysis' core. On a VM the two vCPUs may be near
 * (sharing a cache) or far apart, and that changes `report`'s speed by more than most changes to
 * the code: on this project's 2-core AMD EPYC VM a round trip measured 104-108 ns at some moments
 * of 2026-11-29 and 428-508 ns at most others (docs/performance.md, "Twelfth round"). Run this
 * beside a timing to know which machine the timing was taken on.
 *
 * Two threads, pinned to CPUs A and B (default 0 and 1), hand a counter back and forth N times
 * (default 2 000 000) through one cache line; prints the mean round trip.
 *
 * Usage: bench_crosscore [A B [N]] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setaffinity_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) atomic_long line;
static long rounds = 2000000;
static int cpu_a = 0, cpu_b = 1;

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *answer(void *arg)
{
    (void)arg;
    if (pin(cpu_b) != 0) fprintf(stderr, "bench_crosscore: cannot run on CPU %d\n", cpu_b);
    for (long i = 0; i < rounds; i++) {
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&line, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc >= 3) cpu_a = atoi(argv[1]), cpu_b = atoi(argv[2]);
    if (argc >= 4) rounds = atol(argv[3]);
    if (rounds <= 0 || cpu_a == cpu_b) {
        fprintf(stderr, "usage: bench_crosscore [A B [N]] (two different CPUs, N > 0)\n");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, answer, NULL) != 0) return 1;
    if (pin(cpu_a) != 0) fprintf(stderr, "bench_crosscore: cannot run on CPU %d\n", cpu_a);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < rounds; i++) {
        atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("CPU %d <-> CPU %d: a cache line's round trip %.1f ns (mean of %ld)\n", cpu_a, cpu_b,
           ns / (double)rounds, rounds);
    return 0;
}
