/* Which backward() call a failed request of autograd's worker threads belongs to.
 *
 * Why: PyTorch runs a CUDA backward pass on a worker thread of autograd's engine, which runs no
 * Python for the built-in nodes (the recorder roots those stacks at "[autograd backward]"). So a
 * torch.OutOfMemoryError of the backward pass, the most common kind, names the node that asked
 * (PowBackward0), never the program's line that called backward(). That line is on another
 * thread: Tensor.backward and torch.autograd.backward/grad make the initial gradient (a
 * torch.ones_like of a scalar loss) on the calling thread and then wait for the engine. Under
 * record --tensors that block is an event whose stack has the program's frames, so the latest
 * such event before the failure names the call. So it is under PyTorch's other allocator backend
 * (backend:cudaMallocAsync, --tensors=async), in any mode: every tensor is then a cudaMallocAsync
 * of its own, recorded with its stack (an `async` event). It is exact when every backward() call
 * makes its initial gradient, as loss.backward() does; a call given its gradients makes none, and
 * then an earlier call is named (docs/analysis.md says so). Without either, the gradient comes
 * from the caching allocator's cache unseen, and nothing is named: the segments it grows now and
 * then would name a call that may be long past, so they are not read.
 *
 * What it costs: a map lookup per such allocation up to the last failure that wants it, in pass 2
 * or, without tensors, in a read of its own (failure_replay.c). Memory: a map of the stacks of
 * those allocations seen, bounded by the trace's stack nodes.
 */
#include <string.h>

#include "analysis_parts.h"

/* A failed request made by one of autograd's workers: a stack rooted at "[autograd backward]", or
 * a worker running a Python backward (autograd.Function): its thread is named pt_autograd_N. */
static int by_autograd_worker(mt_analysis *a, const mt_failed_request *f)
{
    if (mt_frames_autograd_worker(a->frames, f->stack)) return 1;
    for (size_t i = 0; i < a->n_threads; i++)
        if (a->threads[i].tid == f->tid)
            return a->threads[i].name && strncmp(a->threads[i].name, "pt_autograd_", 12) == 0;
    return 0;
}

/* The caller of backward() on stack s, 0 for none: memo maps stack -> a: caller, b: 1 (known). */
static int caller_of(mt_analysis *a, mt_u64map *memo, uint32_t s, uint32_t *caller)
{
    mt_u64map_slot *m = mt_u64map_find(memo, s);
    if (!m) {
        if (!(m = mt_u64map_upsert(memo, s))) return -1;
        m->a = mt_frames_backward_caller(a->frames, s);
        m->b = 1;
    }
    *caller = (uint32_t)m->a;
    return 0;
}

/* An allocation that every tensor makes: a TENSOR event, or the async backend's cudaMallocAsync. */
static int per_tensor(const mt_event *e)
{
    return e->op == MT_OP_ALLOC && (e->kind == MT_KIND_TENSOR || e->kind == MT_KIND_ASYNC);
}

int mt_backward_calls_recorded(const mt_analysis *a)
{
    if (a->categories) return 1; /* tensor events */
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.by_kind_peak[MT_KIND_ASYNC]) return 1;
    return 0;
}

int mt_backward_wanted(mt_analysis *a, const mt_failed_request *f)
{
    return mt_backward_calls_recorded(a) && by_autograd_worker(a, f);
}

int mt_backward_see(mt_analysis *a, mt_backward_seen *s, const mt_event *e)
{
    if (!per_tensor(e) || !e->stack) return 0;
    uint32_t c = 0;
    if (caller_of(a, &s->memo, e->stack, &c) < 0) return -1;
    if (c) {
        s->call = c;
        s->call_time = mt_rel_time(e->time_ns, a->header.start_monotonic_ns);
    }
    return 0;
}

void mt_backward_name(mt_analysis *a, const mt_backward_seen *s, mt_failed_request *f)
{
    if (!s->call || !mt_backward_wanted(a, f)) return;
    f->backward_stack = s->call;
    f->backward_time_ns = s->call_time;
}

void mt_backward_seen_free(mt_backward_seen *s)
{
    mt_u64map_destroy(&s->memo);
}
