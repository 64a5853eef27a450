/* device_reset.c — cudaDeviceReset with memory still live, then a second context, for
 * scripts/gpu-check.sh.
 *
 * The way many CUDA C programs end (and some begin again): the runtime's primary context is
 * destroyed by cudaDeviceReset while a cudaMalloc and a CUDA array are live, which ends both. A
 * CUDA array, and the driver's own allocations, reach the trace only in CUPTI's activity records,
 * up to a flush period late; the recorder must write them before the context's destruction.
 * Then, in the context the next call makes, 32 MiB are allocated and freed. Prints
 * "expect NAME=VALUE" lines and "device_reset ok" last.
 *
 *   cc -I/usr/local/cuda/include device_reset.c -lcudart -o device_reset
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define MIB (1ull << 20)

static void check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "device_reset: %s: %s\n", what, cudaGetErrorName(e));
    exit(1);
}

static __attribute__((noinline)) void first_context(void)
{
    void *p;
    cudaArray_t a;
    struct cudaChannelFormatDesc ch =
        cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    check(cudaMalloc(&p, 64 * MIB), "cudaMalloc");
    check(cudaMallocArray(&a, &ch, 2048, 2048, 0), "cudaMallocArray"); /* 16 MiB */
    check(cudaMemset(p, 1, 64 * MIB), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaDeviceReset(), "cudaDeviceReset"); /* both still live: the reset ends them */
    printf("expect ended_by_reset=%llu\n", 64 * MIB + 16 * MIB);
}

static __attribute__((noinline)) void second_context(void)
{
    void *p;
    check(cudaMalloc(&p, 32 * MIB), "cudaMalloc (after the reset)");
    check(cudaMemset(p, 2, 32 * MIB), "cudaMemset");
    check(cudaFree(p), "cudaFree");
    printf("expect second=%llu\n", 32 * MIB);
}

int main(void)
{
    first_context();
    second_context();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    printf("device_reset ok\n");
    return 0;
}
