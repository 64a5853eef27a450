/* Finding libcupti at run time.
 *
 * Why dlopen and not a link-time dependency: a process must hold ONE copy of libcupti. PyTorch's
 * profiler loads the copy in its venv (nvidia/cu13/lib/libcupti.so.13); a second copy from the
 * toolkit would fight it over the one subscriber slot. The loader reuses a copy already in the
 * process (RTLD_NOLOAD), else loads the one `memtrace record` found (MEMTRACE_CUPTI), else asks the
 * dynamic linker for "libcupti.so.13". Whatever we load first, later dlopen()s by the same soname
 * get the same copy.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "recorder.h"

#define RESOLVE(field, name, required)                                                           \
    do {                                                                                         \
        *(void **)&c->field = dlsym(c->handle, name);                                            \
        if (!c->field && (required)) {                                                           \
            *why = "libcupti lacks " name;                                                       \
            return -1;                                                                           \
        }                                                                                        \
    } while (0)

int mt_cupti_load(mt_cupti *c, const char *explicit_path, const char **why, char *where, size_t len)
{
    static const char *const sonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    memset(c, 0, sizeof *c);
    for (size_t i = 0; !c->handle && i < sizeof sonames / sizeof *sonames; i++)
        c->handle = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);
    if (!c->handle && explicit_path && *explicit_path)
        c->handle = dlopen(explicit_path, RTLD_NOW | RTLD_GLOBAL);
    for (size_t i = 0; !c->handle && i < sizeof sonames / sizeof *sonames; i++)
        c->handle = dlopen(sonames[i], RTLD_NOW | RTLD_GLOBAL);
    if (!c->handle) {
        *why = "libcupti not found (set MEMTRACE_CUPTI=/path/to/libcupti.so.13)";
        return -1;
    }
    /* Where it came from, for the trace's notes. */
    void *sym = dlsym(c->handle, "cuptiSubscribe");
    Dl_info info;
    if (sym && dladdr(sym, &info) && info.dli_fname)
        snprintf(where, len, "%s", info.dli_fname);
    RESOLVE(Subscribe, "cuptiSubscribe", 1);
    RESOLVE(Subscribe_v2, "cuptiSubscribe_v2", 0);
    RESOLVE(Unsubscribe, "cuptiUnsubscribe", 1);
    RESOLVE(EnableCallback, "cuptiEnableCallback", 1);
    RESOLVE(EnableDomain, "cuptiEnableDomain", 1);
    RESOLVE(GetResultString, "cuptiGetResultString", 1);
    RESOLVE(GetDeviceId, "cuptiGetDeviceId", 1);
    RESOLVE(GetCallbackName, "cuptiGetCallbackName", 0);
    RESOLVE(ActivityEnable, "cuptiActivityEnable", 1);
    RESOLVE(ActivityDisable, "cuptiActivityDisable", 1);
    RESOLVE(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks", 1);
    RESOLVE(ActivityGetNextRecord, "cuptiActivityGetNextRecord", 1);
    RESOLVE(ActivityFlushAll, "cuptiActivityFlushAll", 1);
    RESOLVE(ActivityFlushPeriod, "cuptiActivityFlushPeriod", 0);
    RESOLVE(ActivityRegisterTimestampCallback, "cuptiActivityRegisterTimestampCallback", 0);
    return 0;
}

int mt_cuda_load(mt_cuda *d, const char **why)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        *why = "libcuda.so.1 is not loaded";
        return -1;
    }
    struct {
        void **slot;
        const char *name;
    } fns[] = {
        {(void **)&d->DeviceGet, "cuDeviceGet"},
        {(void **)&d->DeviceGetName, "cuDeviceGetName"},
        {(void **)&d->DeviceTotalMem, "cuDeviceTotalMem_v2"},
        {(void **)&d->DeviceGetCount, "cuDeviceGetCount"},
        {(void **)&d->DeviceGetPCIBusId, "cuDeviceGetPCIBusId"},
        {(void **)&d->CtxGetId, "cuCtxGetId"},
        {(void **)&d->CtxGetCurrent, "cuCtxGetCurrent"},
        {(void **)&d->DeviceGetMemPool, "cuDeviceGetMemPool"},
        {(void **)&d->MemPoolGetAttribute, "cuMemPoolGetAttribute"},
        {(void **)&d->PointerGetAttribute, "cuPointerGetAttribute"},
        {(void **)&d->DeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute"},
    };
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
        *fns[i].slot = dlsym(h, fns[i].name);
        if (!*fns[i].slot) {
            *why = "libcuda lacks a function the recorder needs";
            dlclose(h);
            return -1;
        }
    }
    /* optional: the DEVICE records then carry no UUID (the analysis pairs GPUs by ordinal) */
    d->DeviceGetUuid = (__typeof__(d->DeviceGetUuid))dlsym(h, "cuDeviceGetUuid_v2");
    dlclose(h); /* NOLOAD took a reference; the process keeps its own */
    return 0;
}
