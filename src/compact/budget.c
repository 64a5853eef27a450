/* Budgets: `memtrace check`'s verdicts. Each budget is one number of the analysis compared with a
 * limit (exceeded means strictly above it); a verdict that fails carries what makes the number,
 * so the message can say who to look at:
 *
 *   peak            peak_bytes of each GPU                 the stacks live at that peak
 *   allocated peak  max_memory_allocated (allocator_peaks.c; the larger of the tensor peak and
 *                   PyTorch's own counter, which differ only when a report was missed)
 *                                                          the tensors live at the tensor peak
 *                                                          (kind_peak.c: one more read)
 *   live at exit    what the program holds at the end      its stacks (the leak list)
 *                   (leak_bytes: never an allocator's cache, a library's workspace or the driver's,
 *                   which every PyTorch run keeps until exit by design)
 *   failed          failed requests, of the trace or of the chosen device
 *                                                          the stacks that asked (first 64 kept)
 *   on another GPU  each GPU other than the trace's own (mt_own_gpu: LOCAL_RANK's, else the
 *                   largest peak): NVML's largest sample of the process there, its CUDA context
 *                   included (a rank's context on GPU 0 is most of it, and no CUDA call reports
 *                   it), or the trace's peak there when that is larger or NVML saw nothing
 *                                                          the stacks live at that GPU's peak
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "internal.h"

const char *mt_budget_name(mt_budget_kind k)
{
    static const char *const names[MT_BUDGETS_] = {"peak", "allocated peak", "live at exit",
                                                   "failed requests", "on another GPU"};
    return (unsigned)k < MT_BUDGETS_ ? names[k] : "?";
}

static int copy_list(const mt_stack_list *in, mt_stack_list *out)
{
    *out = (mt_stack_list){0};
    if (!in->n) return 0;
    if (!(out->v = malloc(in->n * sizeof *out->v))) return -1;
    memcpy(out->v, in->v, in->n * sizeof *out->v);
    out->n = in->n;
    return 0;
}

/* The kept failed requests of device (or of every device and the host: all), by stack. */
static int failed_stacks(const mt_analysis *a, int all, int32_t device, mt_stack_list *out,
                         uint64_t *whole)
{
    mt_u64map m = {0};
    int rc = 0;
    *whole = 0;
    for (size_t i = 0; i < a->n_failed && rc == 0; i++) {
        const mt_failed_request *f = &a->failed[i];
        if (!all && f->device != device) continue;
        mt_u64map_slot *s = mt_u64map_upsert(&m, mt_stack_key(f->stack, f->kind == MT_KIND_DRIVER));
        if (!s) {
            rc = -1;
            break;
        }
        s->a += f->bytes;
        s->b++;
        *whole += f->bytes;
    }
    if (rc == 0) rc = mt_stack_list_from_map(&m, ~0ull, out);
    mt_u64map_destroy(&m);
    return rc;
}

typedef struct vlist {
    mt_verdict *v;
    size_t n, cap;
} vlist;

static mt_verdict *push(vlist *l, mt_budget_kind k, const mt_device_report *d, uint64_t value,
                        uint64_t limit)
{
    if (MT_GROW(l->v, l->cap, l->n + 1) < 0) return NULL;
    mt_verdict *v = &l->v[l->n++];
    *v = (mt_verdict){.kind = k, .d = d, .value = value, .limit = limit, .exceeded = value > limit};
    return v;
}

static int device_verdicts(const mt_analysis *a, const mt_device_report *d, const mt_budgets *b,
                           vlist *l, char *err, size_t errlen)
{
    mt_verdict *v;
    if (b->set[MT_BUDGET_PEAK]) {
        if (!(v = push(l, MT_BUDGET_PEAK, d, d->u.peak, b->limit[MT_BUDGET_PEAK]))) return -1;
        v->time_ns = d->peak_time_ns;
        v->stacks_whole = d->u.peak;
        if (v->exceeded && copy_list(&d->peak_stacks, &v->stacks) < 0) return -1;
    }
    if (b->set[MT_BUDGET_ALLOCATED_PEAK]) {
        mt_allocator_peaks p;
        mt_allocator_peaks_of(a, d, &p);
        uint64_t value = p.allocated_peak > p.counter_peak ? p.allocated_peak : p.counter_peak;
        if (!(v = push(l, MT_BUDGET_ALLOCATED_PEAK, d, value, b->limit[MT_BUDGET_ALLOCATED_PEAK])))
            return -1;
        v->counter = p.counter_peak;
        /* the moment is wanted either way; the stacks only when the budget fails */
        if (mt_kind_peak_stacks(a, d, p.allocated_kind, &v->stacks, &v->time_ns, err, errlen) < 0)
            return -1;
        for (size_t k = 0; k < v->stacks.n; k++) v->stacks_whole += v->stacks.v[k].bytes;
        if (!v->exceeded) {
            free(v->stacks.v);
            v->stacks = (mt_stack_list){0};
        }
    }
    if (b->set[MT_BUDGET_LIVE_AT_EXIT]) {
        if (!(v = push(l, MT_BUDGET_LIVE_AT_EXIT, d, d->leak_bytes, b->limit[MT_BUDGET_LIVE_AT_EXIT])))
            return -1;
        v->time_ns = a->duration_ns;
        v->stacks_whole = d->leak_bytes;
        if (v->exceeded && copy_list(&d->leaks, &v->stacks) < 0) return -1;
    }
    if (b->set[MT_BUDGET_FAILED] && b->device != MT_BUDGET_ALL_DEVICES) {
        if (!(v = push(l, MT_BUDGET_FAILED, d, d->u.failed_count, b->limit[MT_BUDGET_FAILED])))
            return -1;
        if (v->exceeded && failed_stacks(a, 0, d->u.device, &v->stacks, &v->stacks_whole) < 0)
            return -1;
    }
    return 0;
}

/* A verdict per GPU other than the trace's own (only: that GPU alone, when it is another); one
 * that holds at 0, with no GPU, when there is none. */
static int other_gpu_verdicts(const mt_analysis *a, const mt_device_report *only,
                              const mt_budgets *b, vlist *l)
{
    const mt_device_report *own = mt_own_gpu(a, NULL);
    size_t pushed = 0;
    for (size_t i = 0; i < a->n_devices; i++) {
        const mt_device_report *d = &a->devices[i];
        if (d == own || d->u.device < 0 || (only && d != only)) continue;
        uint64_t nvml = d->n_nvml ? d->nvml_max : 0;
        int by_nvml = nvml >= d->u.peak && nvml;
        mt_verdict *v = push(l, MT_BUDGET_OTHER_GPUS, d, by_nvml ? nvml : d->u.peak,
                             b->limit[MT_BUDGET_OTHER_GPUS]);
        if (!v) return -1;
        v->time_ns = by_nvml ? d->nvml_max_time_ns : d->peak_time_ns;
        v->counter = nvml; /* NVML's, for the note (0: no sample) */
        v->stacks_whole = d->u.peak;
        if (v->exceeded && copy_list(&d->peak_stacks, &v->stacks) < 0) return -1;
        pushed++;
    }
    if (!pushed && !push(l, MT_BUDGET_OTHER_GPUS, NULL, 0, b->limit[MT_BUDGET_OTHER_GPUS]))
        return -1;
    return 0;
}

int mt_check_budgets(const mt_analysis *a, const mt_budgets *b, mt_verdict **out, size_t *n,
                     char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    if (err && errlen) err[0] = 0;
    if (b->set[MT_BUDGET_ALLOCATED_PEAK] && mt_allocated_kind(a) < 0) {
        snprintf(err, errlen, "%s has no allocated peak: max_memory_allocated is known only when "
                              "the tensors are in the trace (record with `memtrace record "
                              "--tensors`); without them use --max-peak", a->path);
        return -1;
    }
    const mt_device_report *only = NULL;
    if (b->device != MT_BUDGET_ALL_DEVICES) {
        for (size_t i = 0; i < a->n_devices; i++)
            if (a->devices[i].u.device == b->device) only = &a->devices[i];
        if (!only) {
            char have[256] = "";
            size_t len = 0;
            for (size_t i = 0; i < a->n_devices && len < sizeof have - 16; i++) {
                char root[32];
                int w = snprintf(have + len, sizeof have - len, "%s%s", i ? ", " : "",
                                 mt_device_root_name(&a->devices[i], root, sizeof root));
                if (w > 0) len += (size_t)w;
            }
            snprintf(err, errlen, "%s has no memory events on cuda:%d (%s%s)", a->path, b->device,
                     a->n_devices ? "it has " : "it has no GPU", have);
            return -1;
        }
    }
    vlist l = {0};
    int rc = 0;
    for (size_t i = 0; i < a->n_devices && rc == 0; i++)
        if (!only || &a->devices[i] == only) rc = device_verdicts(a, &a->devices[i], b, &l, err, errlen);
    if (rc == 0 && !a->n_devices) {
        /* nothing on any GPU: every byte budget holds at 0, said as such (d = NULL) */
        for (int k = 0; k < MT_BUDGET_FAILED && rc == 0; k++) /* (other GPUs: below) */
            if (b->set[k] && !push(&l, (mt_budget_kind)k, NULL, 0, b->limit[k])) rc = -1;
    }
    if (rc == 0 && b->set[MT_BUDGET_OTHER_GPUS]) rc = other_gpu_verdicts(a, only, b, &l);
    if (rc == 0 && b->set[MT_BUDGET_FAILED] && b->device == MT_BUDGET_ALL_DEVICES) {
        mt_verdict *v = push(&l, MT_BUDGET_FAILED, NULL, a->failed_total, b->limit[MT_BUDGET_FAILED]);
        if (!v) rc = -1;
        else if (v->exceeded) rc = failed_stacks(a, 1, 0, &v->stacks, &v->stacks_whole);
    }
    if (rc < 0) {
        if (err && errlen && !err[0]) snprintf(err, errlen, "%s: out of memory", a->path);
        mt_verdicts_free(l.v, l.n);
        return -1;
    }
    *out = l.v;
    *n = l.n;
    return 0;
}

void mt_verdicts_free(mt_verdict *v, size_t n)
{
    for (size_t i = 0; i < n; i++) free(v[i].stacks.v);
    free(v);
}
