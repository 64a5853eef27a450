/* array_kinds.c — CUDA arrays made every way the driver API has, for scripts/gpu-check.sh.
 *
 * CUPTI reports a CUDA array only in an activity record, which comes later, in a buffer; the
 * recorder keeps the creating call's stack until then, found by the call's correlation id. This
 * sample makes, in this order, each from a function of its own (the stacks say which):
 *   - many_arrays: 3000 small 2D arrays (cuArrayCreate_v2, 64 x 64 floats) in a row, all live,
 *     then destroyed: more arrays than the recorder once kept stacks for (256) before their
 *     records came;
 *   - v1_arrays: one 2D and one 3D array through the first versions of the calls (cuArrayCreate
 *     and cuArray3DCreate, 32-bit descriptors), which libcuda still exports for programs built
 *     before CUDA 3.2 (on CUDA 13 both answer CUDA_ERROR_INVALID_CONTEXT, which the trace must
 *     show as failed requests of the bytes asked for);
 *   - mipmapped: a mipmapped array (cuMipmappedArrayCreate, 1024 x 1024 floats, 11 levels; CUPTI
 *     reports one record per level);
 *   - refused_v1: a 3D array of 16384 x 16384 x 2048 floats (2 TiB) through cuArray3DCreate;
 *   - beside_vmm: a 64 MiB array live beside 128 MiB made by cuMemCreate: the run's peak.
 * Everything is destroyed, then the primary context is released (destroyed) while CUPTI may still
 * hold the arrays' records. Prints "expect NAME=VALUE" lines for the checks.
 *
 *   cc -I/usr/local/cuda/include array_kinds.c -lcuda -o array_kinds
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define N_MANY 3000

/* The first versions: cuda.h maps the names to the _v2 calls and declares their descriptors only
 * for the driver's own build, so they are declared here with their fixed layout. */
#undef cuArrayCreate
#undef cuArray3DCreate
typedef struct desc_v1 {
    unsigned width, height;
    CUarray_format format;
    unsigned channels;
} desc_v1;
typedef struct desc3d_v1 {
    unsigned width, height, depth;
    CUarray_format format;
    unsigned channels, flags;
} desc3d_v1;
CUresult CUDAAPI cuArrayCreate(CUarray *array, const desc_v1 *desc);
CUresult CUDAAPI cuArray3DCreate(CUarray *array, const desc3d_v1 *desc);
/* the first cuCtxCreate and cuCtxDestroy, under names of their own (cuda.h maps the plain ones) */
CUresult CUDAAPI cuCtxCreate_v1(CUcontext *ctx, unsigned flags,
                                CUdevice dev) __asm__("cuCtxCreate");
CUresult CUDAAPI cuCtxDestroy_v1(CUcontext ctx) __asm__("cuCtxDestroy");

static void check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return;
    const char *name = "?";
    cuGetErrorName(r, &name);
    fprintf(stderr, "array_kinds: %s: %s\n", what, name);
    exit(1);
}

static __attribute__((noinline)) void many_arrays(void)
{
    CUarray *a = calloc(N_MANY, sizeof *a);
    if (!a) exit(1);
    CUDA_ARRAY_DESCRIPTOR d = {
        .Width = 64, .Height = 64, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    for (int i = 0; i < N_MANY; i++)
        check(cuArrayCreate_v2(&a[i], &d), "cuArrayCreate_v2");
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    for (int i = 0; i < N_MANY; i++)
        check(cuArrayDestroy(a[i]), "cuArrayDestroy");
    free(a);
    printf("expect many=%d\n", N_MANY);
}

/* The first versions work only in a context made by the first cuCtxCreate (a context of a later
 * version answers CUDA_ERROR_INVALID_CONTEXT), as in a program built before CUDA 3.2: one is
 * made here for them, and destroyed. Each call's result is printed; only those that succeed are
 * expected in the trace. */
static __attribute__((noinline)) void v1_arrays(CUcontext primary)
{
    CUcontext ctx = NULL;
    CUdevice dev;
    check(cuCtxGetDevice(&dev), "cuCtxGetDevice");
    CUresult rc = cuCtxCreate_v1(&ctx, 0, dev);
    CUarray a2, a3;
    desc_v1 d = {.width = 512, .height = 512, .format = CU_AD_FORMAT_FLOAT, .channels = 1};
    desc3d_v1 d3 = {
        .width = 64, .height = 64, .depth = 32, .format = CU_AD_FORMAT_FLOAT, .channels = 1};
    CUresult r2 = cuArrayCreate(&a2, &d), r3 = cuArray3DCreate(&a3, &d3);
    if (r2 == CUDA_SUCCESS) check(cuArrayDestroy(a2), "cuArrayDestroy");
    if (r3 == CUDA_SUCCESS) check(cuArrayDestroy(a3), "cuArrayDestroy");
    if (rc == CUDA_SUCCESS) check(cuCtxDestroy_v1(ctx), "cuCtxDestroy (v1)");
    check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    printf("v1: cuCtxCreate %d, cuArrayCreate %d, cuArray3DCreate %d\n", rc, r2, r3);
    printf("expect v1=%d v1_bytes=%llu v1_failed=%d\n", (r2 == 0) + (r3 == 0),
           (r2 == 0 ? 512ull * 512 * 4 : 0) + (r3 == 0 ? 64ull * 64 * 32 * 4 : 0),
           (r2 != 0) + (r3 != 0));
}

static __attribute__((noinline)) void mipmapped(void)
{
    CUmipmappedArray m;
    CUDA_ARRAY3D_DESCRIPTOR d = {
        .Width = 1024, .Height = 1024, .Depth = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    check(cuMipmappedArrayCreate(&m, &d, 11), "cuMipmappedArrayCreate");
    check(cuMipmappedArrayDestroy(m), "cuMipmappedArrayDestroy");
    printf("expect mipmapped=1\n");
}

/* A 64 MiB array live while 128 MiB of physical memory is made by cuMemCreate (a call without
 * an activity record of its own), then both released: the peak is the two together, 192 MiB,
 * only if the array's records are applied in their place among the callbacks' events. */
static __attribute__((noinline)) void beside_vmm(void)
{
    CUdevice dev;
    check(cuCtxGetDevice(&dev), "cuCtxGetDevice");
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUarray a;
    CUmemGenericAllocationHandle h;
    CUDA_ARRAY_DESCRIPTOR d = {
        .Width = 4096, .Height = 4096, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    check(cuArrayCreate_v2(&a, &d), "cuArrayCreate_v2");
    check(cuMemCreate(&h, 128ull << 20, &prop, 0), "cuMemCreate");
    check(cuArrayDestroy(a), "cuArrayDestroy");
    check(cuMemRelease(h), "cuMemRelease");
    printf("expect beside_peak=%llu\n", (64ull << 20) + (128ull << 20));
}

static __attribute__((noinline)) void refused_v1(void)
{
    CUarray a;
    desc3d_v1 d3 = {.width = 16384,
                    .height = 16384,
                    .depth = 2048,
                    .format = CU_AD_FORMAT_FLOAT,
                    .channels = 1};
    CUresult r = cuArray3DCreate(&a, &d3);
    if (r == CUDA_SUCCESS) cuArrayDestroy(a);
    const char *name = "?";
    cuGetErrorName(r, &name);
    printf("expect refused=%d refused_bytes=%llu (%s)\n", r != CUDA_SUCCESS,
           16384ull * 16384 * 2048 * 4, name);
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    many_arrays();
    v1_arrays(ctx);
    mipmapped();
    refused_v1();
    beside_vmm();
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    printf("array_kinds ok\n");
    return 0;
}
