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
 */
#include <string.h>

#include "analysis_parts.h"

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

void mt_failed_ties_failed(mt_analysis *a, mt_failed_ties *t, const mt_event *e, int32_t kept)
{
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

void mt_failed_ties_allocated(mt_analysis *a, mt_failed_ties *t, const mt_event *e)
{
    if (e->flags & MT_EF_SEGMENT) close_open(a, t, e, MT_FAILED_RECOVERED, -1);
}
