/* failed_ties.c — what came of a failed request of PyTorch's caching allocator.
 *
 * Why: one torch.OutOfMemoryError is several failed requests in a trace. When a tensor does not
 * fit, the allocator asks the driver for a new segment; refused, it frees its cached blocks that
 * hold nothing and asks again, then frees every cached block and asks a last time; only then does
 * it raise, calling reportOutOfMemoryToProfiler on the way (the recorder takes that call in every
 * mode: a failed TENSOR request, aux = its memory_allocated()). A refusal followed by a request
 * that succeeded is one the program went on after. And an OutOfMemoryError with no refusal before
 * it was the allocator's own decision: the request would have taken it past a limit of its own
 * (torch.cuda.set_per_process_memory_fraction), and the driver was never asked. A report that
 * lists them apart leaves the reader to work out which failure ended the run; this ties them
 * together on their thread as pass 1 reads them (segments are MT_EF_SEGMENT: made from libc10).
 *
 * And a failed driver call is not always a failure the program saw. The CUDA runtime's
 * cudaMallocAsync, called from a thread with no current context (autograd's worker, at its first
 * allocation under backend:cudaMallocAsync), calls cuMemAllocAsync, gets
 * CUDA_ERROR_INVALID_CONTEXT, makes the device's context current and calls it again: the program
 * gets the memory and no error (seen on an H200, tests/data/async_backward.mtrace). CUPTI gives
 * the driver calls one runtime call makes its correlation id, so a failure followed on its thread
 * by a success with the same id was one call that succeeded: it is taken back out of the failed
 * requests and counted apart (failed_retried).
 *
 * Nor is a request refused for the kind of handle it asked for. PyTorch's expandable segments
 * (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) make their first page with cuMemCreate asking
 * for a fabric handle, and on a machine that cannot give one (no IMEX channel: the lent H200s)
 * the driver says CUDA_ERROR_NOT_PERMITTED; PyTorch then asks for a POSIX file descriptor and
 * never asks for a fabric handle again (CUDACachingAllocator.cpp, ExpandableSegment::map). NCCL
 * does the same (cuMemCreateTryFabric). Seen on an H200: every run with expandable segments had
 * one such refusal of 20 MiB, which `memtrace check --max-failed 0` failed on. So a VMM_PHYSICAL
 * request refused with NOT_PERMITTED or NOT_SUPPORTED, followed on its thread by a request of
 * the same size that succeeded with other handle types (aux, from 2026-11-27: older traces have
 * 0 on both, and then the size and the thread decide), is taken back too (failed_probes). A
 * refusal of memory is CUDA_ERROR_OUT_OF_MEMORY and is never taken back this way.
 *
 * PyTorch's other backend, backend:cudaMallocAsync, reports nothing when it runs out: its
 * mallocAsync raises torch.OutOfMemoryError at once when the driver refuses its cudaMallocAsync
 * (no cache of its own to free, no second try; CUDAMallocAsyncAllocator.cpp), so that refusal,
 * made from its code, is the error (torch_async). Its memory fraction it checks itself and asks
 * the driver nothing beyond it: such an error leaves no trace at all.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis_parts.h"

#define RETRY_WINDOW_NS 1000000000ull /* a failed call not made again within a second was not */

/* cuda.h's CUDA_ERROR_NOT_PERMITTED and CUDA_ERROR_NOT_SUPPORTED: what cuMemCreate says to a
 * handle type the machine cannot give */
#define CU_NOT_PERMITTED 800
#define CU_NOT_SUPPORTED 801
#define CU_OUT_OF_MEMORY 2

static int refused_handle_type(const mt_event *e)
{
    return e->kind == MT_KIND_VMM_PHYSICAL &&
           (e->result == CU_NOT_PERMITTED || e->result == CU_NOT_SUPPORTED);
}

static int same_thread(const mt_failed_ties *t, size_t i, const mt_event *e)
{
    return t->open[i].tid == e->tid && t->open[i].device == e->device;
}

/* Closes the open refusals of e's thread with `outcome`; returns how many there were. */
static uint32_t close_open(mt_analysis *a, mt_failed_ties *t, const mt_event *e, uint8_t outcome,
                           int32_t raised_as)
{
    uint32_t n = 0;
    size_t keep = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (!same_thread(t, i, e)) {
            t->open[keep++] = t->open[i];
            continue;
        }
        n++;
        if (t->open[i].kept >= 0) {
            a->failed[t->open[i].kept].outcome = outcome;
            a->failed[t->open[i].kept].raised_as = raised_as;
        }
    }
    t->n = keep;
    return n;
}

/* Remembers a failed call with a correlation id, in case the same call succeeds after all, or one
 * refused for its handle type, in case the same request with another succeeds. */
static void remember_call(mt_failed_ties *t, const mt_event *e, int32_t kept)
{
    int handle_refused = refused_handle_type(e);
    if (!e->correlation && !handle_refused) return;
    if (t->n_calls == MT_FAILED_OPEN_MAX) { /* the oldest cannot be a call still in progress */
        memmove(&t->calls[0], &t->calls[1], (MT_FAILED_OPEN_MAX - 1) * sizeof t->calls[0]);
        t->n_calls--;
    }
    t->calls[t->n_calls].time_ns = e->time_ns;
    t->calls[t->n_calls].tid = e->tid;
    t->calls[t->n_calls].correlation = e->correlation;
    t->calls[t->n_calls].device = e->device;
    t->calls[t->n_calls].is_host = mt_is_host(e->kind, e->flags);
    t->calls[t->n_calls].bytes = e->bytes;
    t->calls[t->n_calls].handle_types = e->aux;
    t->calls[t->n_calls].handle_refused = handle_refused;
    t->calls[t->n_calls++].kept = kept;
}

/* Takes a->failed[k] out of the kept failures; every index that pointed past it moves down. */
static void drop_kept(mt_analysis *a, mt_failed_ties *t, int32_t k)
{
    free(a->failed[k].live.v);
    memmove(&a->failed[k], &a->failed[k + 1], (a->n_failed - (size_t)k - 1) * sizeof *a->failed);
    a->n_failed--;
    for (size_t i = 0; i < a->n_failed; i++)
        if (a->failed[i].raised_as > k) a->failed[i].raised_as--;
    size_t keep = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->open[i].kept == k) continue; /* it is no refusal of the allocator's after all */
        if (t->open[i].kept > k) t->open[i].kept--;
        t->open[keep++] = t->open[i];
    }
    t->n = keep;
    for (size_t i = 0; i < t->n_calls; i++)
        if (t->calls[i].kept > k) t->calls[i].kept--;
}

void mt_failed_ties_failed(mt_analysis *a, mt_failed_ties *t, const mt_event *e, int32_t kept)
{
    remember_call(t, e, kept);
    if (e->kind == MT_KIND_TENSOR) { /* the allocator raised OutOfMemoryError */
        uint32_t n = close_open(a, t, e, MT_FAILED_RAISED, kept);
        if (kept >= 0) a->failed[kept].driver_refusals = n;
        return;
    }
    if (!(e->flags & MT_EF_SEGMENT)) return; /* not the caching allocator's */
    /* never in a real trace (a thread has at most three open): the oldest stays untold */
    if (t->n == MT_FAILED_OPEN_MAX) {
        memmove(&t->open[0], &t->open[1], (MT_FAILED_OPEN_MAX - 1) * sizeof t->open[0]);
        t->n--;
    }
    t->open[t->n].tid = e->tid;
    t->open[t->n].device = e->device;
    t->open[t->n++].kept = kept;
}

void mt_failed_ties_allocated(mt_analysis *a, mt_failed_ties *t, mt_tracker *tr, const mt_event *e)
{
    /* A call made again is made again at once, before its thread allocates anything else: what
     * this allocation does not close is over (and the list stays short whatever the trace). */
    for (size_t i = 0; i < t->n_calls;) {
        int same = t->calls[i].tid == e->tid;
        int retried = same && e->correlation && t->calls[i].correlation == e->correlation;
        /* the same request with other handle types (a retain or an import is no request) */
        int probed = same && !retried && t->calls[i].handle_refused &&
                     e->kind == MT_KIND_VMM_PHYSICAL && e->bytes == t->calls[i].bytes &&
                     !(e->flags & (MT_EF_RETAIN | MT_EF_IMPORTED)) &&
                     (t->calls[i].handle_types == 0 || e->aux != t->calls[i].handle_types);
        /* (times may step back between threads: no subtraction) */
        int over = same || e->time_ns > t->calls[i].time_ns + RETRY_WINDOW_NS;
        if (!retried && !probed && !over) {
            i++;
            continue;
        }
        int32_t k = t->calls[i].kept;
        if (retried || probed) {
            a->failed_total--;
            ++*(retried ? &a->failed_retried : &a->failed_probes);
            mt_tracker_uncount_failed(tr, t->calls[i].device, t->calls[i].is_host);
        }
        memmove(&t->calls[i], &t->calls[i + 1], (t->n_calls - i - 1) * sizeof t->calls[0]);
        t->n_calls--;
        if ((retried || probed) && k >= 0) drop_kept(a, t, k);
    }
    if (t->n && (e->flags & MT_EF_SEGMENT)) close_open(a, t, e, MT_FAILED_RECOVERED, -1);
}

void mt_failed_async_raised(mt_analysis *a)
{
    for (size_t i = 0; i < a->n_failed; i++) {
        mt_failed_request *f = &a->failed[i];
        if (f->kind != MT_KIND_ASYNC) continue;
        const char *owner = f->stack ? mt_frames_owner(a->frames, f->stack, NULL) : NULL;
        f->torch_async =
            f->result == CU_OUT_OF_MEMORY && owner && strcmp(owner, MT_OWNER_ASYNC_ALLOCATOR) == 0;
        if (!f->torch_async) f->torch_allocated = 0; /* no counter of PyTorch's */
    }
}
