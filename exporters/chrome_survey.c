/* The Chrome export's first read of a trace (the survey): the streams of each device and kind (a
 * track each), and the size of the N-th largest allocation when a cap on slices applies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chrome_parts.h"

slot_info *mt_chrome_new_slot(slot_table *t, int32_t device, int is_host, uint16_t *ix)
{
    slot_info *n = realloc(t->v, (t->n + 1) * sizeof *n);
    if (!n) {
        t->oom = 1;
        return NULL;
    }
    t->v = n;
    t->v[t->n] = (slot_info){.device = device, .is_host = is_host};
    root_of(device, is_host, t->v[t->n].root, sizeof t->v[t->n].root);
    *ix = (uint16_t)++t->n;
    return &t->v[t->n - 1];
}

static void heap_down(uint64_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] < h[m]) m = l;
        if (r < n && h[r] < h[m]) m = r;
        if (m == i) return;
        uint64_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_up(uint64_t *h, size_t i)
{
    while (i && h[(i - 1) / 2] > h[i]) {
        uint64_t t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static void note_stream(slot_table *t, const mt_event *e)
{
    int is_host = is_host_kind(e->kind);
    slot_info *si = table_slot(t, e->device, is_host);
    if (!si || e->kind >= MT_KIND_MAX_) return;
    uint8_t *n = &si->n_streams[e->kind];
    for (size_t i = 0; i < *n && i < MAX_STREAMS; i++)
        if (si->streams[e->kind][i] == e->stream) return;
    if (*n < MAX_STREAMS) si->streams[e->kind][*n] = e->stream;
    if (*n <= MAX_STREAMS) (*n)++;
}

static void top_add(top_sizes *t, uint64_t bytes)
{
    if (t->n < t->keep) {
        t->heap[t->n] = bytes;
        heap_up(t->heap, t->n++);
    } else if (bytes > t->heap[0]) {
        t->heap[0] = bytes;
        heap_down(t->heap, t->n, 0);
    }
}

typedef struct size_count {
    uint64_t bytes, count;
} size_count;

static int by_size_desc(const void *pa, const void *pb)
{
    const size_count *a = pa, *b = pb;
    return a->bytes > b->bytes ? -1 : a->bytes < b->bytes;
}

mt_chrome_survey *mt_chrome_survey_new(const mt_chrome_options *opt)
{
    mt_chrome_survey *sv = calloc(1, sizeof *sv);
    if (!sv) return NULL;
    sv->opt = opt;
    sv->top.keep = opt->top_allocs ? opt->top_allocs : MT_CHROME_DEFAULT_MAX_SLICES;
    return sv;
}

void mt_chrome_survey_free(mt_chrome_survey *sv)
{
    if (!sv) return;
    free(sv->slots.v);
    free(sv->top.heap);
    mt_u64map_destroy(&sv->counts);
    free(sv);
}

void mt_chrome_survey_event(void *survey, const mt_event *e)
{
    mt_chrome_survey *sv = survey;
    if (sv->oom || e->op != MT_OP_ALLOC || e->kind == MT_KIND_VMM_MAP) return;
    if (e->kind == MT_KIND_DRIVER && !sv->opt->driver_slices) return;
    if (!sv->have_last || e->device != sv->last.device || e->kind != sv->last.kind ||
        e->stream != sv->last.stream) {
        note_stream(&sv->slots, e);
        sv->last = *e;
        sv->have_last = 1;
    }
    if (e->bytes < sv->opt->min_bytes) return;
    sv->total++;
    top_sizes *top = &sv->top;
    if (top->heap) {
        top_add(top, e->bytes);
        return;
    }
    mt_u64map_slot *sl = mt_u64map_upsert(&sv->counts, e->bytes);
    if (!sl) {
        sv->oom = 1;
        return;
    }
    if (!sl->a++) sv->n_sizes++;
    if (sv->n_sizes <= SURVEY_SIZES) return;
    /* too many different sizes: those counted so far go into the heap */
    if (!(top->heap = malloc(top->keep * sizeof *top->heap))) {
        sv->oom = 1;
        return;
    }
    for (size_t i = 0; i < sv->counts.cap; i++)
        for (uint64_t k = 0; sv->counts.slots[i].used && k < sv->counts.slots[i].a; k++)
            top_add(top, sv->counts.slots[i].key);
    mt_u64map_destroy(&sv->counts);
}

/* The survey's own read, for a caller that did not make it alongside the analysis. */
int mt_chrome_survey_read(mt_chrome_survey *sv, const mt_analysis *a, char *err, size_t errlen)
{
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    const mt_record *rec; /* in the reader's batch, not copied: valid until the next read */
    while (!sv->oom && mt_reader_next_ref(r, &rec) == MT_READ_RECORD)
        if (rec->type == MT_REC_EVENT) mt_chrome_survey_event(sv, &rec->u.event);
    mt_reader_close(r);
    return 0;
}

/* The threshold from the survey, when more than `keep` lifetimes could have slices; the export
 * takes over the survey's slots. */
int mt_chrome_survey_finish(chrome *c, mt_chrome_survey *sv, uint64_t keep, char *err,
                            size_t errlen)
{
    int oom = sv->oom || sv->slots.oom;
    c->slots = sv->slots;
    sv->slots = (slot_table){0};
    if (!oom && keep && sv->total > keep) {
        c->select = 1;
        uint64_t above = 0;
        if (sv->top.heap) {
            c->threshold = sv->top.heap[0];
            for (size_t i = 0; i < sv->top.n; i++) above += sv->top.heap[i] > c->threshold;
        } else { /* the largest sizes first, until keep lifetimes are covered */
            size_count *v = malloc((sv->n_sizes ? sv->n_sizes : 1) * sizeof *v);
            size_t m = 0;
            if (!v) oom = 1;
            for (size_t i = 0; v && i < sv->counts.cap; i++)
                if (sv->counts.slots[i].used)
                    v[m++] = (size_count){sv->counts.slots[i].key, sv->counts.slots[i].a};
            if (v) qsort(v, m, sizeof *v, by_size_desc);
            for (size_t i = 0; v && i < m; i++) {
                if (above + v[i].count >= keep) {
                    c->threshold = v[i].bytes;
                    break;
                }
                above += v[i].count;
            }
            free(v);
        }
        c->ties_left = keep - above;
    }
    if (oom) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}
