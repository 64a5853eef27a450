/* contextless.c — the device of a CUPTI activity record that names no context (contextless.h). */
#include <stdlib.h>
#include <string.h>

#include "contextless.h"

void mt_ctxless_init(mt_ctxless *s)
{
    memset(s, 0, sizeof *s);
    s->latest = -1;
}

void mt_ctxless_free(mt_ctxless *s)
{
    mt_u64map_destroy(&s->placed);
    mt_ctxless_init(s);
}

void mt_ctxless_device(mt_ctxless *s, int32_t ordinal)
{
    if (ordinal < 0) return; /* the recorder could not tell the context's device */
    if (ordinal < 64)
        s->devices |= 1ull << ordinal;
    else
        s->many = 1;
    s->latest = ordinal;
    if (s->n_made < MT_CTXLESS_CONTEXTS) {
        s->made[s->n_made].ordinal = ordinal;
        s->made[s->n_made].after_ns = s->seen_ns;
    }
    s->n_made++;
}

/* The device of a record stamped at t when the trace has named several: that of the newest
 * context that may have been made before t; *exact when every such context is on that device. */
static int32_t by_time(const mt_ctxless *s, uint64_t t, int *exact)
{
    *exact = 0;
    if (s->n_made > MT_CTXLESS_CONTEXTS) return s->latest; /* not all remembered: by file order */
    int32_t dev = -1;
    int several = 0;
    for (uint32_t k = 0; k < s->n_made; k++) {
        if (s->made[k].after_ns >= t) continue; /* made after t: not where t's module was loaded */
        if (dev >= 0 && s->made[k].ordinal != dev) several = 1;
        dev = s->made[k].ordinal;
    }
    if (dev < 0) return s->latest; /* stamped before every context (a clock gone wrong) */
    *exact = !several;
    return dev;
}

void mt_ctxless_place(mt_ctxless *s, mt_event *e)
{
    if (e->op == MT_OP_FREE) {
        mt_u64map_slot *p = mt_u64map_find(&s->placed, e->address);
        if (p && p->a) {
            e->device = (int32_t)(p->a - 1);
            e->flags |= (uint16_t)p->b;
            p->a = 0; /* released: a later allocation at this address is placed anew */
            return;
        }
    }
    if (!s->devices && !s->many) return; /* no device named yet: the record's own */
    uint16_t how = MT_EF_DEVICE_INFERRED;
    int exact;
    if (!s->many && !(s->devices & (s->devices - 1))) {
        e->device = __builtin_ctzll(s->devices);
    } else {
        e->device = by_time(s, e->time_ns, &exact);
        if (!exact) how |= MT_EF_DEVICE_GUESSED;
    }
    e->flags |= how;
    if (e->op != MT_OP_ALLOC) return;
    /* bounded: the map never deletes, so a file of ever new addresses stops being remembered */
    mt_u64map_slot *p = mt_u64map_find(&s->placed, e->address);
    if (!p && s->placed.len >= MT_CTXLESS_REMEMBERED) return;
    if (!p && !(p = mt_u64map_upsert(&s->placed, e->address))) return; /* out of memory */
    p->a = (uint64_t)e->device + 1;
    p->b = how;
}
