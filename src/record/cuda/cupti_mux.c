/* One CUPTI subscription, two clients: memtrace and the program's own CUPTI tool.
 *
 * CUPTI allows one subscriber per process. A program that starts its own profiler while memtrace
 * records (torch.profiler's Kineto subscribes when profiling begins) would either fail to get
 * CUPTI (its CUDA activity silently missing: memtrace changed the program) or, if memtrace stepped
 * aside, leave a hole in the trace exactly where the user looks. Neither is acceptable, so the
 * subscription is shared:
 *
 *   - `memtrace record` preloads this library (LD_PRELOAD), and these definitions of
 *     cuptiSubscribe(_v2), cuptiUnsubscribe, cuptiEnableCallback, cuptiEnableDomain,
 *     cuptiEnableAllDomains, cuptiGetCallbackState, cuptiFinalize and
 *     cuptiActivityRegisterCallbacks stand in front of libcupti's for everyone in the process.
 *   - The one real subscription is memtrace's, made with mt_mux_dispatch as CUPTI's callback (made
 *     early, on the guest's behalf, if the program subscribes before CUDA starts).
 *   - A program that subscribes becomes the guest: it gets memtrace's handle back, its
 *     enable/disable calls set bits in its own set of callback ids and switch CUPTI's on (never off
 *     where memtrace needs them), and mt_mux_dispatch calls the guest's function for exactly the
 *     ids it asked for, then memtrace's. Both see every callback they enabled, from the start.
 *   - The guest's cuptiUnsubscribe / cuptiFinalize end only its registration (finalizing CUPTI
 *     would end memtrace's subscription too); what only it had switched on is switched off.
 *   - A third client is refused as CUPTI itself would refuse a second
 *     (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED).
 * The activity API (buffers of records) is process-global and not shared: when the guest registers
 * its own buffers, memtrace's driver-internal enrichment stops (after handing over cleanly, see
 * activity.c) and the trace says when. Without the preload (`record --no-preload`) nothing
 * here is reached: a program that subscribes after memtrace gets CUPTI's error.
 * The interposed functions resolve libcupti's definitions with dlsym(RTLD_NEXT) (the copy the
 * program would have called); memtrace's own calls go to mt_rec.cupti, never through here.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "recorder.h"

#define EXPORT __attribute__((visibility("default")))

/* Guards mt_rec.mux's registration changes. Static: a guest may subscribe before
 * InitializeInjection has set anything up. */
static pthread_mutex_t mux_lock = PTHREAD_MUTEX_INITIALIZER;

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

#define REAL(fn) ((__typeof__(&fn))real(#fn))

static void set_bit(mt_cbid_set *s, unsigned domain, unsigned cbid, int on)
{
    if (domain >= MT_MUX_DOMAINS || cbid >= 64 * MT_MUX_WORDS) return;
    uint64_t m = 1ull << (cbid % 64);
    if (on) atomic_fetch_or_explicit(&s->w[domain][cbid / 64], m, memory_order_relaxed);
    else atomic_fetch_and_explicit(&s->w[domain][cbid / 64], ~m, memory_order_relaxed);
}

static void set_domain(mt_cbid_set *s, unsigned domain, int on)
{
    if (domain >= MT_MUX_DOMAINS) return;
    for (int i = 0; i < MT_MUX_WORDS; i++)
        atomic_store_explicit(&s->w[domain][i], on ? ~0ull : 0, memory_order_relaxed);
}

void CUPTIAPI mt_mux_dispatch(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                              const void *cbdata)
{
    mt_recorder *r = &mt_rec;
    if (atomic_load_explicit(&r->mux.guest, memory_order_acquire) &&
        mt_cbid_has(&r->mux.theirs, domain, cbid))
        r->mux.guest_fn(r->mux.guest_userdata, domain, cbid, cbdata);
    if (mt_cbid_has(&r->mux.ours, domain, cbid)) mt_recorder_callback(userdata, domain, cbid, cbdata);
}

/* Subscribes (the one real subscription) if nobody has yet. Under mux_lock. */
static CUptiResult subscribe_locked(mt_recorder *r, char *holder, size_t holder_len)
{
    if (r->mux.handle) return CUPTI_SUCCESS;
    CUptiResult (*sub_v2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                          CUpti_SubscriberParams *) = r->cupti.Subscribe_v2;
    CUptiResult (*sub)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) = r->cupti.Subscribe;
    if (!sub) { /* before InitializeInjection: the guest came first */
        sub_v2 = REAL(cuptiSubscribe_v2);
        sub = REAL(cuptiSubscribe);
    }
    if (!sub) return CUPTI_ERROR_NOT_INITIALIZED;
    CUpti_SubscriberHandle h = NULL;
    CUptiResult rc;
    if (sub_v2) {
        CUpti_SubscriberParams p;
        memset(&p, 0, sizeof p);
        p.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
        p.subscriberName = "memtrace";
        p.oldSubscriberName = holder;
        p.oldSubscriberSize = holder_len;
        rc = sub_v2(&h, mt_mux_dispatch, r, &p);
    } else {
        rc = sub(&h, mt_mux_dispatch, r);
    }
    if (rc == CUPTI_SUCCESS) {
        r->mux.handle = h;
        atomic_store(&r->mux.subscribed, 1);
    }
    return rc;
}

int mt_mux_subscribe(mt_recorder *r)
{
    char holder[256] = "";
    pthread_mutex_lock(&mux_lock);
    CUptiResult rc = subscribe_locked(r, holder, sizeof holder);
    pthread_mutex_unlock(&mux_lock);
    if (rc == CUPTI_SUCCESS) return 0;
    const char *msg = "?";
    r->cupti.GetResultString(rc, &msg);
    mt_warn_once("subscribe", "CUPTI refused a subscriber (%s%s%s): another profiler holds it "
                 "(Nsight? or a CUPTI client loaded without memtrace's preload); the program runs "
                 "untraced", msg, holder[0] ? ", held by " : "", holder);
    return -1;
}

CUptiResult mt_mux_enable(mt_recorder *r, uint32_t enable, CUpti_CallbackDomain domain,
                          CUpti_CallbackId cbid)
{
    set_bit(&r->mux.ours, domain, cbid, enable != 0);
    if (!enable && mt_cbid_has(&r->mux.theirs, domain, cbid)) return CUPTI_SUCCESS;
    return r->cupti.EnableCallback(enable, r->mux.handle, domain, cbid);
}

CUptiResult mt_mux_enable_domain(mt_recorder *r, CUpti_CallbackDomain domain)
{
    set_domain(&r->mux.ours, domain, 1);
    return r->cupti.EnableDomain(1, r->mux.handle, domain);
}

/* Switches off, for real, what the guest had on and memtrace does not need. Under mux_lock. */
static void drop_guest_locked(mt_recorder *r, const char *how)
{
    if (!atomic_exchange(&r->mux.guest, 0)) return;
    CUptiResult (*enable)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                          CUpti_CallbackId) = r->cupti.EnableCallback ? r->cupti.EnableCallback
                                                                      : REAL(cuptiEnableCallback);
    for (unsigned d = 0; d < MT_MUX_DOMAINS; d++)
        for (unsigned w = 0; w < MT_MUX_WORDS; w++) {
            uint64_t only_theirs = atomic_exchange(&r->mux.theirs.w[d][w], 0) &
                                   ~atomic_load(&r->mux.ours.w[d][w]);
            for (unsigned b = 0; only_theirs && b < 64; b++)
                if ((only_theirs >> b) & 1 && enable && d != CUPTI_CB_DOMAIN_INVALID)
                    enable(0, r->mux.handle, (CUpti_CallbackDomain)d, w * 64 + b);
        }
    mt_trace_note(MT_NOTE_INFO, "CUPTI no longer shared: %s %s", r->mux.guest_name, how);
}

void mt_mux_unsubscribe(mt_recorder *r)
{
    pthread_mutex_lock(&mux_lock);
    if (atomic_load(&r->mux.subscribed)) {
        if (atomic_load(&r->mux.guest)) {
            /* The guest keeps its callbacks: switch off only what it does not use. */
            for (unsigned d = 0; d < MT_MUX_DOMAINS; d++)
                for (unsigned w = 0; w < MT_MUX_WORDS; w++) {
                    uint64_t only_ours = atomic_exchange(&r->mux.ours.w[d][w], 0) &
                                         ~atomic_load(&r->mux.theirs.w[d][w]);
                    for (unsigned b = 0; only_ours && b < 64; b++)
                        if ((only_ours >> b) & 1 && d != CUPTI_CB_DOMAIN_INVALID)
                            r->cupti.EnableCallback(0, r->mux.handle, (CUpti_CallbackDomain)d,
                                                    w * 64 + b);
                }
        } else {
            atomic_store(&r->mux.subscribed, 0);
            r->cupti.Unsubscribe(r->mux.handle);
            r->mux.handle = NULL;
        }
    }
    pthread_mutex_unlock(&mux_lock);
}

/* The guest's name for the notes: what it called itself, else the object that called us. */
static void name_guest(mt_recorder *r, const char *given, const void *caller)
{
    Dl_info info;
    const char *obj = caller && dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "";
    const char *base = strrchr(obj, '/') ? strrchr(obj, '/') + 1 : obj;
    if (given && *given)
        snprintf(r->mux.guest_name, sizeof r->mux.guest_name, "%s%s%s%s", given,
                 *base ? " (" : "", base, *base ? ")" : "");
    else
        snprintf(r->mux.guest_name, sizeof r->mux.guest_name, "%s", *base ? base : "a CUPTI client");
}

static CUptiResult subscribe_guest(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                   void *userdata, CUpti_SubscriberParams *params,
                                   const void *caller)
{
    mt_recorder *r = &mt_rec;
    if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mux_lock);
    char holder[256] = "";
    CUptiResult rc = subscribe_locked(r, holder, sizeof holder);
    if (rc == CUPTI_SUCCESS && atomic_load(&r->mux.guest)) {
        rc = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED; /* what CUPTI says to a second one */
        if (params && params->oldSubscriberName && params->oldSubscriberSize)
            snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s",
                     r->mux.guest_name);
    }
    if (rc == CUPTI_SUCCESS) {
        r->mux.guest_fn = callback;
        r->mux.guest_userdata = userdata;
        name_guest(r, params ? params->subscriberName : NULL, caller);
        atomic_store_explicit(&r->mux.guest, 1, memory_order_release);
        *subscriber = r->mux.handle;
    }
    pthread_mutex_unlock(&mux_lock);
    if (rc == CUPTI_SUCCESS)
        mt_trace_note(MT_NOTE_INFO, "CUPTI shared with %s: it gets the callbacks it enables, "
                      "memtrace keeps recording", r->mux.guest_name);
    return rc;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                  void *userdata)
{
    return subscribe_guest(subscriber, callback, userdata, NULL, __builtin_return_address(0));
}

EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber,
                                     CUpti_CallbackFunc callback, void *userdata,
                                     CUpti_SubscriberParams *params)
{
    return subscribe_guest(subscriber, callback, userdata, params, __builtin_return_address(0));
}

static int is_ours(CUpti_SubscriberHandle h)
{
    return h && atomic_load(&mt_rec.mux.subscribed) && h == mt_rec.mux.handle;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
    if (!is_ours(subscriber)) {
        CUptiResult (*f)(CUpti_SubscriberHandle) = REAL(cuptiUnsubscribe);
        return f ? f(subscriber) : CUPTI_ERROR_NOT_INITIALIZED;
    }
    pthread_mutex_lock(&mux_lock);
    CUptiResult rc = atomic_load(&mt_rec.mux.guest) ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
    drop_guest_locked(&mt_rec, "unsubscribed");
    pthread_mutex_unlock(&mux_lock);
    return rc;
}

EXPORT CUptiResult cuptiFinalize(void)
{
    if (!atomic_load(&mt_rec.mux.subscribed)) {
        CUptiResult (*f)(void) = REAL(cuptiFinalize);
        return f ? f() : CUPTI_ERROR_NOT_INITIALIZED;
    }
    /* CUPTI stays: memtrace still records through it. The guest is done with it. */
    pthread_mutex_lock(&mux_lock);
    drop_guest_locked(&mt_rec, "finalized CUPTI (kept attached for memtrace)");
    pthread_mutex_unlock(&mux_lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    CUptiResult (*f)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) =
        REAL(cuptiEnableCallback);
    if (!f) return CUPTI_ERROR_NOT_INITIALIZED;
    if (!is_ours(subscriber)) return f(enable, subscriber, domain, cbid);
    set_bit(&mt_rec.mux.theirs, domain, cbid, enable != 0);
    if (!enable && mt_cbid_has(&mt_rec.mux.ours, domain, cbid)) return CUPTI_SUCCESS;
    return f(enable, subscriber, domain, cbid);
}

/* After switching a domain off for the guest: memtrace's own ids in it back on. */
static void restore_ours(CUpti_SubscriberHandle h, unsigned domain)
{
    CUptiResult (*f)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) =
        REAL(cuptiEnableCallback);
    for (unsigned w = 0; f && domain < MT_MUX_DOMAINS && w < MT_MUX_WORDS; w++) {
        uint64_t bits = atomic_load(&mt_rec.mux.ours.w[domain][w]);
        for (unsigned b = 0; bits && b < 64; b++)
            if ((bits >> b) & 1) f(1, h, (CUpti_CallbackDomain)domain, w * 64 + b);
    }
}

EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                     CUpti_CallbackDomain domain)
{
    CUptiResult (*f)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain) =
        REAL(cuptiEnableDomain);
    if (!f) return CUPTI_ERROR_NOT_INITIALIZED;
    if (!is_ours(subscriber)) return f(enable, subscriber, domain);
    set_domain(&mt_rec.mux.theirs, domain, enable != 0);
    CUptiResult rc = f(enable, subscriber, domain);
    if (!enable) restore_ours(subscriber, domain);
    return rc;
}

EXPORT CUptiResult cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber)
{
    CUptiResult (*f)(uint32_t, CUpti_SubscriberHandle) = REAL(cuptiEnableAllDomains);
    if (!f) return CUPTI_ERROR_NOT_INITIALIZED;
    if (!is_ours(subscriber)) return f(enable, subscriber);
    for (unsigned d = 1; d < MT_MUX_DOMAINS; d++) set_domain(&mt_rec.mux.theirs, d, enable != 0);
    CUptiResult rc = f(enable, subscriber);
    if (!enable)
        for (unsigned d = 1; d < MT_MUX_DOMAINS; d++) restore_ours(subscriber, d);
    return rc;
}

EXPORT CUptiResult cuptiGetCallbackState(uint32_t *enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    if (!is_ours(subscriber)) {
        CUptiResult (*f)(uint32_t *, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                         CUpti_CallbackId) = REAL(cuptiGetCallbackState);
        return f ? f(enable, subscriber, domain, cbid) : CUPTI_ERROR_NOT_INITIALIZED;
    }
    if (!enable) return CUPTI_ERROR_INVALID_PARAMETER;
    *enable = (uint32_t)mt_cbid_has(&mt_rec.mux.theirs, domain, cbid);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                  CUpti_BuffersCallbackCompleteFunc complete)
{
    CUptiResult (*f)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) =
        REAL(cuptiActivityRegisterCallbacks);
    if (!f) return CUPTI_ERROR_NOT_INITIALIZED;
    int ours = atomic_load(&mt_rec.enabled) && mt_activity_ours(&mt_rec);
    if (ours) mt_activity_yield(&mt_rec);
    CUptiResult rc = f(request, complete);
    if (ours) {
        mt_activity_taken(&mt_rec);
        atomic_store(&mt_rec.mux.activity_taken, 1);
    }
    return rc;
}
