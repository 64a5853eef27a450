/* MEMTRACE_CALLBACKS=count — a diagnostic: how many CUDA calls the program makes, by name.
 *
 * Why: what a CUPTI subscription costs a program is (extra ns per CUDA call) x (calls), and the
 * second factor is program-specific (a PyTorch step makes dozens of launches and bookkeeping calls
 * per allocation). scripts/overhead.sh uses this to turn api_cost's per-call numbers into a
 * per-step prediction. In this mode no memory event is recorded: every driver and runtime API
 * callback is enabled and only counted, and the counts are written as notes at exit.
 */
#include <inttypes.h>
#include <stdio.h>

#include "recorder.h"

#define CENSUS_IDS 2048
#define CENSUS_TOP 12 /* calls named in each note, most frequent first */

static struct {
    _Atomic uint64_t driver[CENSUS_IDS], runtime[CENSUS_IDS];
} census;

int mt_census_enable(mt_recorder *r)
{
    if (mt_mux_enable_domain(r, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS ||
        mt_mux_enable_domain(r, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS)
        return -1;
    return 0;
}

void mt_census_count(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *cbdata)
{
    const CUpti_CallbackData *cb = cbdata;
    if (cb->callbackSite != CUPTI_API_ENTER || cbid >= CENSUS_IDS) return;
    _Atomic uint64_t *slot = domain == CUPTI_CB_DOMAIN_DRIVER_API    ? &census.driver[cbid]
                             : domain == CUPTI_CB_DOMAIN_RUNTIME_API ? &census.runtime[cbid]
                                                                     : NULL;
    if (slot) atomic_fetch_add_explicit(slot, 1, memory_order_relaxed);
}

/* One note per domain: the total, then the most frequent calls. */
static void note_domain(mt_recorder *r, const char *what, CUpti_CallbackDomain domain,
                        _Atomic uint64_t *counts)
{
    uint64_t total = 0, c[CENSUS_IDS];
    for (int i = 0; i < CENSUS_IDS; i++) total += c[i] = atomic_load(&counts[i]);
    char text[900];
    int len = snprintf(text, sizeof text, "census: %" PRIu64 " %s API calls; most frequent:", total,
                       what);
    for (int k = 0; k < CENSUS_TOP && len < (int)sizeof text - 100; k++) {
        int best = -1;
        for (int i = 0; i < CENSUS_IDS; i++)
            if (c[i] && (best < 0 || c[i] > c[best])) best = i;
        if (best < 0) break;
        const char *name = "?";
        if (r->cupti.GetCallbackName) r->cupti.GetCallbackName(domain, (uint32_t)best, &name);
        len += snprintf(text + len, sizeof text - (size_t)len, " %s %" PRIu64, name, c[best]);
        c[best] = 0;
    }
    mt_trace_note(MT_NOTE_INFO, "%s", text);
}

void mt_census_note(mt_recorder *r)
{
    note_domain(r, "driver", CUPTI_CB_DOMAIN_DRIVER_API, census.driver);
    note_domain(r, "runtime", CUPTI_CB_DOMAIN_RUNTIME_API, census.runtime);
}
