/* Which live things belong to which CUDA context, so that MT_OP_CTX_DESTROY visits only its own
 * (it used to scan every live allocation and mapping: a trace alternating small contexts'
 * destruction with a large live set took a minute for 80 KB).
 *
 * Members are recorded when they join (an allocation or a mapping is made) and never removed one
 * by one: a member that left (freed) stays in its context's list until the list is compacted or
 * taken, and whoever takes the list checks each member. A member names one thing for good (the
 * owner puts a serial number in it), so a list holds no member twice. When a full list holds more
 * than SLACK times its live count plus FREE, it is compacted to the members that still belong, so
 * its length stays proportional to what is live and every join costs O(1) amortized: a
 * compaction looks each member up, and leaves about the live ones, so it comes once per
 * (SLACK - 1) x live + FREE joins and costs about SLACK / (SLACK - 1) lookups a join (at twice
 * plus 64 it cost two, and in a --tensors trace, whose tensors name no context beside the
 * segments' one, those lookups were a twentieth of the analysis). The last context used is
 * remembered: a trace has one or two contexts, and most joins and leaves skip the hash.
 */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "internal.h"

#define SLACK 4
#define FREE 256

static mt_ctx_list *list_of(mt_ctx_registry *r, uint32_t ctx, int create)
{
    if (r->have_last && r->last_ctx == ctx) return &r->lists[r->last_ix];
    mt_u64map_slot *s = create ? mt_u64map_upsert(&r->index, ctx) : mt_u64map_find(&r->index, ctx);
    if (!s) return NULL;
    if (!s->b) { /* new context: b marks it, a is its list */
        if (MT_GROW(r->lists, r->cap_lists, r->n_lists + 1) < 0) return NULL;
        r->lists[r->n_lists] = (mt_ctx_list){0};
        s->a = r->n_lists++;
        s->b = 1;
    }
    r->have_last = 1;
    r->last_ctx = ctx;
    r->last_ix = s->a;
    return &r->lists[s->a];
}

/* Keeps the members that still belong. */
static void compact(mt_ctx_list *l, uint32_t ctx, mt_ctx_still_fn still, void *arg)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        if (still(arg, ctx, l->v[i])) l->v[n++] = l->v[i];
    l->n = n;
}

int mt_ctx_list_join(mt_ctx_list *l, uint32_t ctx, mt_ctx_member m, mt_ctx_still_fn still,
                     void *arg)
{
    if (l->n == l->cap) {
        if (l->n > SLACK * l->live + FREE) compact(l, ctx, still, arg);
        if (MT_GROW(l->v, l->cap, l->n + 1) < 0) return -1;
    }
    l->v[l->n++] = m;
    l->live++;
    return 0;
}

mt_ctx_member *mt_ctx_list_take(mt_ctx_list *l, size_t *n)
{
    mt_ctx_member *v = l->v;
    *n = l->n;
    *l = (mt_ctx_list){0};
    return v;
}

int mt_ctx_join(mt_ctx_registry *r, uint32_t ctx, mt_ctx_member m, mt_ctx_still_fn still, void *arg)
{
    mt_ctx_list *l = list_of(r, ctx, 1);
    return l ? mt_ctx_list_join(l, ctx, m, still, arg) : -1;
}

void mt_ctx_leave(mt_ctx_registry *r, uint32_t ctx)
{
    mt_ctx_list *l = list_of(r, ctx, 0);
    if (l) mt_ctx_list_leave(l);
}

mt_ctx_member *mt_ctx_take(mt_ctx_registry *r, uint32_t ctx, size_t *n)
{
    mt_ctx_list *l = list_of(r, ctx, 0);
    *n = 0;
    return l ? mt_ctx_list_take(l, n) : NULL;
}

void mt_ctx_registry_destroy(mt_ctx_registry *r)
{
    for (size_t i = 0; i < r->n_lists; i++) free(r->lists[i].v);
    free(r->lists);
    mt_u64map_destroy(&r->index);
    memset(r, 0, sizeof *r);
}
