/* alloc_patterns: a fixed sequence of every allocation kind memtrace records, with known sizes,
 * one deliberate out-of-memory request and one deliberate leak. scripts/gpu-check.sh runs it under
 * `memtrace record` and asserts exact counts and bytes on the dump; tests/data holds a trace of it
 * recorded on an H100. Each step is its own function so reports can name them with file:line.
 *
 * Uses the driver API only, so every call below is exactly one traced call.
 *
 *   step                      calls                                       bytes
 *   alloc_device_buffers      cuMemAlloc x2, cuMemFree x1                 1 MiB (freed), 3 MiB
 *   alloc_pitched             cuMemAllocPitch, cuMemFree                  pitch * 100 rows
 *   alloc_managed             cuMemAllocManaged, cuMemFree                2 MiB
 *   alloc_pinned_host         cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost x2   64 KiB, 128 KiB
 *   register_host             cuMemHostRegister, cuMemHostUnregister      256 KiB
 *   alloc_async               cuMemAllocAsync, cuMemFreeAsync             4 MiB
 *   alloc_from_pool           cuMemAllocFromPoolAsync, cuMemFreeAsync, cuMemPoolTrimTo  8 MiB
 *   map_virtual_memory        cuMemAddressReserve (4 granules), cuMemCreate x2 (1 granule
 *                             each), cuMemMap x2, one cuMemUnmap over both, cuMemRelease x2,
 *                             cuMemAddressFree
 *   request_too_much          cuMemAlloc of 1 PiB -> CUDA_ERROR_OUT_OF_MEMORY
 *   destroy_context_with_live cuCtxCreate, cuMemAlloc 6 MiB, cuCtxDestroy (never freed)
 *   leak_on_purpose           cuMemAlloc 5 MiB, never freed
 * The 3 MiB buffer of the first step is freed last, after the leak, so the peak holds it.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB (1024ull * 1024ull)

static int failures;

#define CHECK(call)                                                                              \
    do {                                                                                         \
        CUresult rc_ = (call);                                                                   \
        if (rc_ != CUDA_SUCCESS) {                                                               \
            const char *s_ = "?";                                                                \
            cuGetErrorName(rc_, &s_);                                                            \
            fprintf(stderr, "alloc_patterns: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
                    s_);                                                                         \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

static __attribute__((noinline)) CUdeviceptr alloc_device_buffers(void)
{
    CUdeviceptr one = 0, three = 0;
    CHECK(cuMemAlloc(&one, 1 * MiB));
    CHECK(cuMemAlloc(&three, 3 * MiB));
    CHECK(cuMemFree(one));
    return three;
}

static __attribute__((noinline)) void alloc_pitched(void)
{
    CUdeviceptr p = 0;
    size_t pitch = 0;
    CHECK(cuMemAllocPitch(&p, &pitch, 1000, 100, 4));
    printf("pitch=%zu pitched_bytes=%zu\n", pitch, pitch * 100);
    CHECK(cuMemFree(p));
}

static __attribute__((noinline)) void alloc_managed(void)
{
    CUdeviceptr p = 0;
    CHECK(cuMemAllocManaged(&p, 2 * MiB, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemFree(p));
}

static __attribute__((noinline)) void alloc_pinned_host(void)
{
    void *a = NULL, *b = NULL;
    CHECK(cuMemAllocHost(&a, 64 * 1024));
    CHECK(cuMemHostAlloc(&b, 128 * 1024, CU_MEMHOSTALLOC_PORTABLE));
    CHECK(cuMemFreeHost(a));
    CHECK(cuMemFreeHost(b));
}

static __attribute__((noinline)) void register_host(void)
{
    void *buf = aligned_alloc(4096, 256 * 1024);
    if (!buf) return;
    CHECK(cuMemHostRegister(buf, 256 * 1024, 0));
    CHECK(cuMemHostUnregister(buf));
    free(buf);
}

static __attribute__((noinline)) void alloc_async(CUstream stream)
{
    CUdeviceptr p = 0;
    CHECK(cuMemAllocAsync(&p, 4 * MiB, stream));
    CHECK(cuMemFreeAsync(p, stream));
    CHECK(cuStreamSynchronize(stream));
}

static __attribute__((noinline)) void alloc_from_pool(CUstream stream, CUdevice dev)
{
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr p = 0;
    CHECK(cuMemAllocFromPoolAsync(&p, 8 * MiB, pool, stream));
    CHECK(cuMemFreeAsync(p, stream));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemPoolTrimTo(pool, 0));
    CHECK(cuMemPoolDestroy(pool));
}

static __attribute__((noinline)) void map_virtual_memory(CUdevice dev)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("granularity=%zu\n", g);
    CUdeviceptr va = 0;
    CHECK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
    CUmemGenericAllocationHandle h1, h2;
    CHECK(cuMemCreate(&h1, g, &prop, 0));
    CHECK(cuMemCreate(&h2, g, &prop, 0));
    CHECK(cuMemMap(va, g, 0, h1, 0));
    CHECK(cuMemMap(va + g, g, 0, h2, 0));
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, 2 * g, &access, 1));
    CHECK(cuMemUnmap(va, 2 * g)); /* one unmap over two mapped ranges */
    CHECK(cuMemRelease(h1));
    CHECK(cuMemRelease(h2));
    CHECK(cuMemAddressFree(va, 4 * g));
}

static __attribute__((noinline)) void request_too_much(void)
{
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc(&p, 1ull << 50); /* 1 PiB: no GPU has it */
    printf("oom_result=%d\n", (int)rc);
    if (rc != CUDA_ERROR_OUT_OF_MEMORY) failures++;
}

static __attribute__((noinline)) void destroy_context_with_live(CUdevice dev, CUcontext primary)
{
    CUcontext ctx;
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CUdeviceptr p = 0;
    CHECK(cuMemAlloc(&p, 6 * MiB)); /* never freed: the context's death releases it */
    CHECK(cuCtxDestroy(ctx));
    CHECK(cuCtxSetCurrent(primary));
}

static __attribute__((noinline)) void leak_on_purpose(void)
{
    CUdeviceptr p = 0;
    CHECK(cuMemAlloc(&p, 5 * MiB));
    printf("leaked=0x%llx\n", (unsigned long long)p);
}

int main(void)
{
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext primary;
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxSetCurrent(primary));
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    CUdeviceptr three = alloc_device_buffers();
    alloc_pitched();
    alloc_managed();
    alloc_pinned_host();
    register_host();
    alloc_async(stream);
    alloc_from_pool(stream, dev);
    map_virtual_memory(dev);
    request_too_much();
    destroy_context_with_live(dev, primary);
    leak_on_purpose();
    CHECK(cuMemFree(three));
    CHECK(cuStreamDestroy(stream));
    printf("alloc_patterns: %s\n", failures ? "FAILED" : "done");
    return failures ? 1 : 0;
}
