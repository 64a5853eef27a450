/* cupti_conflict: other CUPTI clients in the traced process.
 *
 *   cupti_conflict subscribe   the program is its own CUPTI subscriber, from before cuInit (as
 *                              under Nsight): memtrace must say so once and let it run unchanged
 *   cupti_conflict activity    after CUDA is up, the program registers its own activity buffer
 *                              callbacks (as torch.profiler's Kineto does) and allocates for 4 s:
 *                              memtrace's API callbacks must still record all 400 allocations, and
 *                              the trace must say that activity enrichment stopped
 * Prints "conflict_ok" and exits 0 when the program's own CUPTI use and CUDA work succeeded. */
#include <cuda.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int seen, records;

static void CUPTIAPI on_api(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data)
{
    (void)ud, (void)d, (void)id;
    if (((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_EXIT) seen++;
}

static void CUPTIAPI want_buffer(uint8_t **buf, size_t *size, size_t *max)
{
    *size = 1 << 20;
    *buf = aligned_alloc(8, *size);
    *max = 0;
}

static void CUPTIAPI got_buffer(CUcontext c, uint32_t s, uint8_t *buf, size_t size, size_t valid)
{
    (void)c, (void)s, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) records++;
    free(buf);
}

static int cuda_up(void)
{
    CUdevice dev;
    CUcontext ctx;
    return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
           cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "subscribe";
    CUdeviceptr p;
    if (strcmp(mode, "subscribe") == 0) {
        CUpti_SubscriberHandle sub;
        CUptiResult rc = cuptiSubscribe(&sub, on_api, NULL);
        if (rc == CUPTI_SUCCESS)
            cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                                CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
        int ok = cuda_up() && cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS && cuMemFree(p) == CUDA_SUCCESS;
        printf("own_subscriber=%s own_callbacks=%d\n", rc == CUPTI_SUCCESS ? "yes" : "no", seen);
        printf("%s\n", ok && rc == CUPTI_SUCCESS && seen == 1 ? "conflict_ok" : "conflict_FAILED");
        return ok ? 0 : 1;
    }
    /* activity */
    int ok = cuda_up() && cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS && cuMemFree(p) == CUDA_SUCCESS;
    ok = ok && cuptiActivityRegisterCallbacks(want_buffer, got_buffer) == CUPTI_SUCCESS &&
         cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2) == CUPTI_SUCCESS;
    int allocs = 0;
    for (int i = 0; i < 400 && ok; i++) {
        ok = cuMemAlloc(&p, 2 << 20) == CUDA_SUCCESS && cuMemFree(p) == CUDA_SUCCESS;
        allocs += ok;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    printf("allocs=%d own_activity_records=%d\n", allocs, records);
    printf("%s\n", ok && allocs == 400 && records > 0 ? "conflict_ok" : "conflict_FAILED");
    return ok ? 0 : 1;
}
