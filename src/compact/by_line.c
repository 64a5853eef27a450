/* By line: memory per Python source line, memlab's LineProfiler without decorators.
 * Every stack of a device's "allocated" and "live at the peak" lists is attributed to one Python
 * frame (innermost, or innermost in a chosen file) and summed per (code object, line). Built from
 * the per-stack lists the analysis already has: no extra read of the trace. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct acc {
    mt_u64map index; /* MT_PY_IP(code, line) -> a: index in v */
    mt_line_stat *v;
    size_t n, cap;
} acc;

static mt_line_stat *entry(acc *a, mt_frames *f, uint32_t code, uint32_t line)
{
    mt_u64map_slot *s = mt_u64map_upsert(&a->index, MT_PY_IP(code, line));
    if (!s) return NULL;
    if (s->b) return &a->v[s->a];
    if (a->n == a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 16;
        mt_line_stat *nv = realloc(a->v, ncap * sizeof *nv);
        if (!nv) return NULL;
        a->v = nv;
        a->cap = ncap;
    }
    s->a = a->n;
    s->b = 1;
    mt_line_stat *e = &a->v[a->n++];
    *e = (mt_line_stat){.code = code, .line = line, .file = "?", .qualname = "?"};
    mt_frames_pycode(f, code, &e->file, &e->qualname);
    return e;
}

static int add_list(acc *a, mt_frames *f, const mt_stack_list *l, const char *file, int peak)
{
    for (size_t i = 0; i < l->n; i++) {
        const mt_stack_stat *s = &l->v[i];
        uint32_t code, line;
        if (s->driver || !mt_frames_python_line(f, s->stack, file, &code, &line)) continue;
        mt_line_stat *e = entry(a, f, code, line);
        if (!e) return -1;
        if (peak) {
            e->peak_bytes += s->bytes;
            e->peak_count += s->count;
        } else {
            e->alloc_bytes += s->bytes;
            e->alloc_count += s->count;
        }
    }
    return 0;
}

static int cmp_line(const void *pa, const void *pb)
{
    const mt_line_stat *a = pa, *b = pb;
    if (a->peak_bytes != b->peak_bytes) return a->peak_bytes > b->peak_bytes ? -1 : 1;
    if (a->alloc_bytes != b->alloc_bytes) return a->alloc_bytes > b->alloc_bytes ? -1 : 1;
    int c = strcmp(a->file, b->file);
    if (c) return c;
    return a->line < b->line ? -1 : a->line > b->line;
}

int mt_by_line(mt_frames *f, const mt_device_report *d, const char *file, mt_line_stat **out,
               size_t *n)
{
    acc a = {0};
    int rc = add_list(&a, f, &d->allocs, file, 0);
    if (rc == 0) rc = add_list(&a, f, &d->peak_stacks, file, 1);
    mt_u64map_destroy(&a.index);
    if (rc < 0) {
        free(a.v);
        *out = NULL;
        *n = 0;
        return -1;
    }
    if (a.n) qsort(a.v, a.n, sizeof *a.v, cmp_line);
    *out = a.v;
    *n = a.n;
    return 0;
}
