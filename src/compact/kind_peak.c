/* What was live of one allocation kind at that kind's own peak: the tensors that make
 * max_memory_allocated. The analysis snapshots the live set only at each device's peak of device
 * bytes, which in tensor mode also holds other libraries' memory and may come at another moment
 * than the tensor peak; a budget on the tensor peak must show the tensors of its own moment.
 *
 * One more pass over the trace through a fresh tracker: the peak's value is known from the
 * analysis, so the first moment the kind's bytes on the device equal it is the moment (the same
 * "first time" rule as every peak), and reading stops there. Memory: the live set.
 */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

typedef struct replay {
    const mt_tracker *t;
    int32_t device;
    unsigned kind;
    uint64_t target, start;
    mt_u64map map; /* stack key -> bytes, count */
    int done, oom;
    uint64_t time_ns;
} replay;

static void snap_one(void *ctx, const mt_lifetime *l)
{
    replay *r = ctx;
    if (l->kind != r->kind || l->device != r->device ||
        mt_counting(l->kind, l->flags) != MT_COUNT_IN_USE)
        return;
    mt_u64map_slot *s = mt_u64map_upsert(&r->map, mt_stack_key(l->stack, l->kind == MT_KIND_DRIVER));
    if (!s) {
        r->oom = 1;
        return;
    }
    s->a += l->bytes;
    s->b++;
}

static void on_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    replay *r = ctx;
    if (r->done || u->is_host || u->device != r->device || u->by_kind[r->kind] != r->target) return;
    r->done = 1;
    r->time_ns = time_ns > r->start ? time_ns - r->start : 0;
    mt_tracker_foreach_live(r->t, snap_one, r);
}

int mt_kind_peak_stacks(const mt_analysis *a, const mt_device_report *d, unsigned kind,
                        mt_stack_list *out, uint64_t *time_ns, char *err, size_t errlen)
{
    *out = (mt_stack_list){0};
    if (time_ns) *time_ns = 0;
    if (kind >= MT_KIND_MAX_ || d->u.is_host || d->u.by_kind_peak[kind] == 0) return 0;
    replay r = {.device = d->u.device, .kind = kind, .target = d->u.by_kind_peak[kind],
                .start = a->header.start_monotonic_ns};
    mt_reader *rd = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!rd) return -1;
    mt_tracker_hooks hooks = {.ctx = &r, .on_usage = on_usage};
    mt_tracker *t = mt_tracker_new(&hooks);
    r.t = t;
    int rc = t ? 0 : -1;
    const mt_record *rec; /* in the reader's batch, not copied: valid until the next read */
    while (rc == 0 && !r.done && mt_reader_next_ref(rd, &rec) == MT_READ_RECORD)
        if (rec->type == MT_REC_EVENT && mt_tracker_event(t, &rec->u.event) < 0) rc = -1;
    if (rc == 0 && !r.oom && r.done) rc = mt_stack_list_from_map(&r.map, ~0ull, out);
    if (rc < 0 || r.oom) {
        rc = -1;
        snprintf(err, errlen, "%s: out of memory", a->path);
    } else if (!r.done) {
        /* the file changed since it was analysed */
        rc = -1;
        snprintf(err, errlen, "%s: the %s peak of the analysis was not found on a second read "
                              "(did the file change?)", a->path, mt_kind_name(kind));
    }
    if (time_ns) *time_ns = r.time_ns;
    mt_u64map_destroy(&r.map);
    mt_tracker_free(t);
    mt_reader_close(rd);
    return rc;
}
