/* host_memory.c — device-kind calls that give host memory (CUDA 12.2+), beside device memory.
 *
 * cuMemCreate can place its physical pages on the host or a host NUMA node, and a memory pool can
 * live there too (cuMemPoolCreate, cuMemAllocFromPoolAsync): pinned host RAM that the GPU
 * reaches through the virtual memory calls or stream-ordered allocation. A tracer that takes the
 * context's device for every cuMemCreate counts it as GPU memory (memtrace did, until
 * 2026-11-27). This sample makes, in this order, with the bytes live on each side printed at the
 * end for scripts/gpu-check.sh to compare with the report:
 *   - device: 32 MiB by cuMemCreate on the device, mapped; 16 MiB by cuMemAllocAsync;
 *   - host: 64 MiB by cuMemCreate on a host NUMA node (mapped, written by the GPU), then
 *     32 MiB from a pool on the host while the 64 MiB are held; all freed before exit.
 * It prints "expect NAME=VALUE" lines, and "skip: why" when the device or driver lacks a part
 * (then that part is not made, and the expected bytes leave it out).
 *
 *   cc -I/usr/local/cuda/include host_memory.c -lcuda -o host_memory
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define MIB (1ull << 20)

static void check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return;
    const char *name = "?";
    cuGetErrorName(r, &name);
    fprintf(stderr, "host_memory: %s: %s\n", what, name);
    exit(1);
}

static size_t round_up(size_t n, size_t g)
{
    return g ? (n + g - 1) / g * g : n;
}

/* A physical allocation at `where`, mapped and given to device 0 to read and write. */
typedef struct vmm {
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    size_t size;
} vmm;

static vmm vmm_make(CUmemLocation where, size_t want)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = where};
    size_t g = 0;
    check(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
    vmm m = {.size = round_up(want, g)};
    check(cuMemCreate(&m.h, m.size, &p, 0), "cuMemCreate");
    check(cuMemAddressReserve(&m.va, m.size, 0, 0, 0), "cuMemAddressReserve");
    check(cuMemMap(m.va, m.size, 0, m.h, 0), "cuMemMap");
    CUmemAccessDesc a = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    check(cuMemSetAccess(m.va, m.size, &a, 1), "cuMemSetAccess");
    check(cuMemsetD8(m.va, 7, m.size), "cuMemsetD8");
    return m;
}

static void vmm_free(vmm *m)
{
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    check(cuMemUnmap(m->va, m->size), "cuMemUnmap");
    check(cuMemAddressFree(m->va, m->size), "cuMemAddressFree");
    check(cuMemRelease(m->h), "cuMemRelease");
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    int numa_vmm = 0, host_pools = 0, numa = -1;
    cuDeviceGetAttribute(&numa_vmm,
                         CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    cuDeviceGetAttribute(&host_pools, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, dev);
    cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev);
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

    /* device memory: a physical allocation and a stream-ordered one, held to the end */
    vmm on_dev = vmm_make((CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 0}, 32 * MIB);
    CUdeviceptr async_dev = 0;
    check(cuMemAllocAsync(&async_dev, 16 * MIB, s), "cuMemAllocAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    unsigned long long device_bytes = on_dev.size + 16 * MIB, host_peak = 0;

    /* host memory: 64 MiB of pages on the device's host NUMA node, then 32 MiB from a host pool
     * while they are held */
    vmm on_host = {0};
    if (numa_vmm) {
        on_host = vmm_make((CUmemLocation){CU_MEM_LOCATION_TYPE_HOST_NUMA, numa < 0 ? 0 : numa},
                           64 * MIB);
        host_peak += on_host.size;
    } else {
        printf("skip: no host NUMA virtual memory on this device\n");
    }
    if (host_pools) {
        CUmemPoolProps pp = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {CU_MEM_LOCATION_TYPE_HOST, 0}};
        CUmemoryPool pool;
        check(cuMemPoolCreate(&pool, &pp), "cuMemPoolCreate");
        CUdeviceptr p = 0;
        check(cuMemAllocFromPoolAsync(&p, 32 * MIB, pool, s), "cuMemAllocFromPoolAsync");
        check(cuStreamSynchronize(s), "cuStreamSynchronize");
        host_peak += 32 * MIB;
        check(cuMemFreeAsync(p, s), "cuMemFreeAsync");
        check(cuStreamSynchronize(s), "cuStreamSynchronize");
        check(cuMemPoolDestroy(pool), "cuMemPoolDestroy");
    } else {
        printf("skip: no memory pools on the host on this device\n");
    }
    if (numa_vmm) vmm_free(&on_host);

    /* cuda:0's VMM and stream-ordered bytes at its peak; the host's peak (0 at exit) */
    printf("expect device_bytes=%llu\n", device_bytes);
    printf("expect host_peak=%llu\n", host_peak);
    check(cuMemFreeAsync(async_dev, s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    vmm_free(&on_dev);
    printf("done\n");
    return 0;
}
