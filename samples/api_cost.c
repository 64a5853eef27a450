/* api_cost — what tracing adds to single CUDA calls, in nanoseconds, without PyTorch's noise.
 *
 *   api_cost [N]        (run it untraced, then under `memtrace record` in each setting;
 *                        scripts/overhead.sh does that and prints the differences)
 *
 * Three workloads, each timed in batches of 1000 calls; the median batch is printed as ns/call:
 *   event   cudaEventRecord: a call memtrace does not trace. What it costs under memtrace is what a
 *           CUPTI subscription adds to every CUDA call of a program (kernel launches included).
 *   launch  cuLaunchKernel of an empty kernel (PTX, no nvcc needed): the same, for launches.
 *   async   cudaMallocAsync + cudaFreeAsync of 1 MiB, issued 30 frames deep (as PyTorch's are):
 *           what one traced allocation/free pair costs, stack capture included.
 * Linked to the shared libcudart on purpose: so is PyTorch's.
 *
 * Output, one line:  event_ns=<x> launch_ns=<x> async_pair_ns=<x>
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BATCH 1000
#define DEPTH 30

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry empty() { ret; }\n";

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "api_cost: %s failed (%d)\n", what, rc);
    exit(1);
}
#define CK(call)                                                                                 \
    do {                                                                                         \
        int rc_ = (int)(call);                                                                   \
        if (rc_) die(#call, rc_);                                                                \
    } while (0)

static cudaStream_t stream;
static cudaEvent_t event;
static CUfunction empty_kernel;

static void batch_event(void)
{
    for (int i = 0; i < BATCH; i++) CK(cudaEventRecord(event, stream));
}

static void batch_launch(void)
{
    for (int i = 0; i < BATCH; i++)
        CK(cuLaunchKernel(empty_kernel, 1, 1, 1, 32, 1, 1, 0, (CUstream)stream, NULL, NULL));
}

/* The allocation, DEPTH frames down: a realistic amount of stack for the unwinder. */
__attribute__((noinline)) static int deep_pair(int depth, volatile int *sink)
{
    if (depth > 0) {
        int r = deep_pair(depth - 1, sink);
        *sink += r; /* keeps the frame: no tail call */
        return r;
    }
    void *p = NULL;
    CK(cudaMallocAsync(&p, 1 << 20, stream));
    CK(cudaFreeAsync(p, stream));
    return 1;
}

static void batch_async(void)
{
    volatile int sink = 0;
    for (int i = 0; i < BATCH; i++) deep_pair(DEPTH, &sink);
}

static double median_per_call(void (*batch)(void), int batches)
{
    double *t = malloc(sizeof *t * (size_t)batches);
    if (!t) die("malloc", 1);
    batch(); /* warm-up */
    CK(cudaStreamSynchronize(stream));
    for (int b = 0; b < batches; b++) {
        double t0 = now_ns();
        batch();
        t[b] = (now_ns() - t0) / BATCH;
        CK(cudaStreamSynchronize(stream)); /* keep the queue short; not timed */
    }
    qsort(t, (size_t)batches, sizeof *t, cmp_double);
    double m = t[batches / 2];
    free(t);
    return m;
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 200;
    if (batches < 1) batches = 1;
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    CUmodule mod;
    CK(cuModuleLoadData(&mod, ptx));
    CK(cuModuleGetFunction(&empty_kernel, mod, "empty"));
    double ev = median_per_call(batch_event, batches);
    double la = median_per_call(batch_launch, batches);
    double as = median_per_call(batch_async, batches);
    printf("event_ns=%.1f launch_ns=%.1f async_pair_ns=%.1f\n", ev, la, as);
    fflush(stdout); /* the numbers are out even if teardown goes wrong */
    CK(cudaStreamDestroy(stream));
    return 0;
}
