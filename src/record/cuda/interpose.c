/* Sharing CUPTI with another tool.
 *
 * CUPTI allows one subscriber per process. When a program starts its own profiler while memtrace
 * records (torch.profiler / Kineto subscribes when profiling begins), that profiler's
 * cuptiSubscribe would fail and it would silently lose its CUDA activities — memtrace would have
 * changed the program's behaviour. So `memtrace record` also preloads this library (LD_PRELOAD),
 * and these definitions of cuptiSubscribe / cuptiSubscribe_v2 / cuptiUnsubscribe stand in front
 * of libcupti's for everyone else in the process:
 *   - another client subscribes: memtrace unsubscribes first (after a last flush), says so once on
 *     stderr and in the trace, then passes the call on: the other tool gets CUPTI as if alone;
 *   - that client unsubscribes later: memtrace subscribes again and says when it resumed.
 * Between the two the trace has a gap, and the notes say exactly where. Our own calls go to
 * libcupti directly (mt_rec.cupti), never through these.
 * Without the preload (CUDA_INJECTION64_PATH alone) nothing here is reached: a profiler that
 * subscribes after us then gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED.
 */
#include <dlfcn.h>
#include <stddef.h>

#include "recorder.h"

#define EXPORT __attribute__((visibility("default")))

/* libcupti's own definition of `name`: next in the global scope, else from the copy the recorder
 * loaded, else from whichever copy is loaded at all. */
static void *real(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f && mt_rec.cupti.handle) f = dlsym(mt_rec.cupti.handle, name);
    if (!f) {
        void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
        if (h) f = dlsym(h, name);
    }
    return f;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                  void *userdata)
{
    CUptiResult (*f)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) = real("cuptiSubscribe");
    if (!f) return CUPTI_ERROR_NOT_INITIALIZED;
    mt_recorder_yield("cuptiSubscribe");
    return f(subscriber, callback, userdata);
}

EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber,
                                     CUpti_CallbackFunc callback, void *userdata,
                                     CUpti_SubscriberParams *params)
{
    CUptiResult (*f)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                     CUpti_SubscriberParams *) = real("cuptiSubscribe_v2");
    if (!f) return CUPTI_ERROR_NOT_INITIALIZED;
    mt_recorder_yield(params && params->subscriberName ? params->subscriberName
                                                       : "cuptiSubscribe_v2");
    return f(subscriber, callback, userdata, params);
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
    CUptiResult (*f)(CUpti_SubscriberHandle) = real("cuptiUnsubscribe");
    if (!f) return CUPTI_ERROR_NOT_INITIALIZED;
    CUptiResult rc = f(subscriber);
    if (rc == CUPTI_SUCCESS) mt_recorder_resume();
    return rc;
}
