/* Two runs compared (`memtrace diff`): per GPU, the stacks and Python lines live at each run's
 * peak, what the program held at each end, matched by name.
 *
 * Matching. A stack id, an address or a pid means nothing in another run, so a stack is known by
 * its frames' names as every output shows them (the user view for Python programs, short names),
 * with CUDA's own frames at the leaf end and frames without a symbol ("libfoo.so+0x1a2b", an
 * offset that moves with every build) left out of the key, and a location "(dir/file.py:LINE)"
 * reduced to its file name "(file.py:LINE)": the same program sits in another directory on
 * another machine. Stacks of one run with the same key are one stack. Two passes:
 *   1. equal keys;
 *   2. of what is left, keys equal once line numbers are taken out ("Net.forward (net.py:45)"
 *      and "(net.py:47)"): an edit above a line moves it, the stack is still the same one. Only
 *      a key that is unique on both sides is paired this way (marked `moved`), never a guess
 *      between several.
 * Python lines are matched the same way by (file name, function, line), then without the line.
 *
 * Sorting and joins are by key (qsort + merge), so the work is O(n log n) in the stacks at the two
 * peaks; names stay owned by the analyses' frames, the arrays by the diff's arena.
 *
 * GPUs are paired by ordinal, except where ordinals mean different GPUs (mt_pairing in
 * memtrace/compact.h): two ranks of one job, each on its own GPU, compare that GPU with the
 * other's; their other GPUs (a stray context) pair by ordinal among themselves.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "internal.h"

struct mt_diff_arena {
    void **v;
    size_t n, cap;
};

static void *arena_keep(struct mt_diff_arena *a, void *p)
{
    if (!p) return NULL;
    if (MT_GROW(a->v, a->cap, a->n + 1) < 0) {
        free(p);
        return NULL;
    }
    a->v[a->n++] = p;
    return p;
}

static void arena_free(struct mt_diff_arena *a)
{
    if (!a) return;
    for (size_t i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    free(a);
}

int64_t mt_delta(uint64_t base, uint64_t new_)
{
    if (new_ >= base) return new_ - base > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(new_ - base);
    return base - new_ > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)(base - new_);
}

/* ---- keys ---------------------------------------------------------------------------------- */

/* "libfoo.so+0x1a2b" or "0x7f12...": a frame without a symbol, named by an address. */
static int unsymbolized(const char *name)
{
    const char *p = strstr(name, "+0x");
    if (!p && strncmp(name, "0x", 2) == 0) p = name;
    else if (p) p += 1;
    if (!p) return 0;
    p += 2;
    if (!*p) return 0;
    for (; *p; p++)
        if (!strchr("0123456789abcdefABCDEF", *p)) return 0;
    return 1;
}

/* A growable string. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > ncap) ncap *= 2;
        char *ns = realloc(b->s, ncap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = ncap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_name(sbuf *b, const char *name, int loose)
{
    size_t n = strlen(name);
    const char *open = n && name[n - 1] == ')' ? strrchr(name, '(') : NULL;
    if (!open) {
        sb_put(b, name, n);
        return;
    }
    /* "qual (dir/file.py:LINE)": the file without its directories (a checkout sits in another
     * directory on every machine), and without ":LINE" when loose */
    const char *inner = open + 1, *close = name + n - 1, *file = inner;
    for (const char *p = inner; p < close; p++)
        if (*p == '/') file = p + 1;
    const char *end = close, *d = close;
    while (d > file && d[-1] >= '0' && d[-1] <= '9') d--;
    if (loose && d < close && d > file && d[-1] == ':') end = d - 1;
    sb_put(b, name, (size_t)(inner - name));
    sb_put(b, file, (size_t)(end - file));
    sb_put(b, ")", 1);
}

/* ---- one run's side ---------------------------------------------------------------------------- */

typedef struct item {
    char *key, *loose;
    const char **frames; /* stack items */
    uint8_t *flags;
    size_t n_frames;
    const char *file, *function; /* line items */
    uint32_t line;
    uint64_t bytes, count, alloc;
    int taken;
} item;

typedef struct side {
    item *v;
    size_t n, cap;
} side;

static item *side_push(side *s)
{
    if (MT_GROW(s->v, s->cap, s->n + 1) < 0) return NULL;
    item *it = &s->v[s->n++];
    memset(it, 0, sizeof *it);
    return it;
}

static void side_free(side *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].key);
        free(s->v[i].loose);
    }
    free(s->v);
}

static int cmp_key(const void *pa, const void *pb)
{
    return strcmp(((const item *)pa)->key, ((const item *)pb)->key);
}

static int cmp_loose(const void *pa, const void *pb)
{
    const item *a = *(item *const *)pa, *b = *(item *const *)pb;
    return strcmp(a->loose, b->loose);
}

/* Sorts by key and sums items with equal keys into the first of them. */
static void side_coalesce(side *s)
{
    if (!s->n) return;
    qsort(s->v, s->n, sizeof *s->v, cmp_key);
    size_t w = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (strcmp(s->v[i].key, s->v[w].key) == 0) {
            s->v[w].bytes += s->v[i].bytes;
            s->v[w].count += s->v[i].count;
            s->v[w].alloc += s->v[i].alloc;
            free(s->v[i].key);
            free(s->v[i].loose);
        } else {
            s->v[++w] = s->v[i];
        }
    }
    s->n = w + 1;
}

/* The frames of one stack stat as the outputs show them (the CUDA stack's own frames at the leaf
 * end left out, as the exporters do), copied into the arena. */
static int stack_frames(mt_frames *f, const mt_stack_stat *st, mt_frame_filter filter,
                        struct mt_diff_arena *ar, const char ***names, uint8_t **flags, size_t *n)
{
    size_t cap = 64, got = 0;
    const char **v = NULL;
    uint8_t *fl = NULL;
    if (st->driver) {
        got = 1;
        v = malloc(sizeof *v);
        fl = malloc(1);
        if (v && fl) {
            v[0] = mt_pseudo_name(MT_PSEUDO_DRIVER_INTERNAL);
            fl[0] = MT_FF_PSEUDO;
        }
    } else {
        for (;;) {
            free(v);
            free(fl);
            v = malloc(cap * sizeof *v);
            fl = malloc(cap);
            if (!v || !fl) break;
            mt_path_opts opts = {.style = MT_NAME_SHORT, .filter = filter, .flags = fl};
            got = mt_frames_path(f, st->stack, opts, v, cap);
            if (got <= cap) break;
            cap = got;
        }
        if (v && fl) {
            size_t keep = got;
            while (keep > 1 && (fl[keep - 1] & MT_FF_CUDA)) keep--;
            if (keep == 1 && got > 1 && (fl[0] & MT_FF_CUDA)) keep = got;
            got = keep;
        }
    }
    if (!v || !fl) {
        free(v);
        free(fl);
        return -1;
    }
    if (!arena_keep(ar, v)) {
        free(fl);
        return -1;
    }
    if (!arena_keep(ar, fl)) return -1;
    *names = v;
    *flags = fl;
    *n = got;
    return 0;
}

static int stack_side(const mt_analysis *a, const mt_stack_list *l, struct mt_diff_arena *ar,
                      side *s)
{
    mt_frame_filter filter = mt_frames_resolve(a->frames, MT_FRAMES_AUTO);
    for (size_t i = 0; i < l->n; i++) {
        item *it = side_push(s);
        if (!it) return -1;
        if (stack_frames(a->frames, &l->v[i], filter, ar, &it->frames, &it->flags, &it->n_frames) < 0)
            return -1;
        sbuf k = {0}, lk = {0};
        for (size_t j = 0; j < it->n_frames; j++) {
            if (unsymbolized(it->frames[j])) continue;
            if (k.n) {
                sb_put(&k, ";", 1);
                sb_put(&lk, ";", 1);
            }
            sb_name(&k, it->frames[j], 0);
            sb_name(&lk, it->frames[j], 1);
        }
        if (!k.s) sb_put(&k, "", 0); /* every frame unsymbolized: one key for all of them */
        if (!lk.s) sb_put(&lk, "", 0);
        it->key = k.s;
        it->loose = lk.s;
        if (k.oom || lk.oom) return -1;
        it->bytes = l->v[i].bytes;
        it->count = l->v[i].count;
    }
    side_coalesce(s);
    return 0;
}

static char *join3(const char *a, const char *b, const char *c)
{
    sbuf s = {0};
    sb_put(&s, a, strlen(a));
    sb_put(&s, "\n", 1);
    sb_put(&s, b, strlen(b));
    if (c) {
        sb_put(&s, "\n", 1);
        sb_put(&s, c, strlen(c));
    }
    if (s.oom) {
        free(s.s);
        return NULL;
    }
    return s.s;
}

static int line_side(const mt_analysis *a, const mt_device_report *d, side *s)
{
    mt_line_stat *v;
    size_t n;
    if (mt_by_line(a->frames, d, NULL, &v, &n) < 0) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        item *it = side_push(s);
        if (!it) {
            rc = -1;
            break;
        }
        it->file = strcmp(v[i].file, "?") ? mt_frames_short_path(a->frames, v[i].file) : "?";
        it->function = v[i].qualname;
        it->line = v[i].line;
        it->bytes = v[i].peak_bytes;
        it->count = v[i].peak_count;
        it->alloc = v[i].alloc_bytes;
        char num[16];
        snprintf(num, sizeof num, "%u", v[i].line);
        const char *base = strrchr(it->file, '/'); /* the checkout's directory differs */
        base = base ? base + 1 : it->file;
        it->key = join3(base, it->function, num);
        it->loose = join3(base, it->function, NULL);
        if (!it->key || !it->loose) rc = -1;
    }
    free(v);
    if (rc == 0) side_coalesce(s);
    return rc;
}

/* ---- matching ---------------------------------------------------------------------------------- */

typedef struct pairs {
    const item **b, **n; /* parallel: base item (or NULL), new item (or NULL) */
    int *moved;
    size_t len, cap;
} pairs;

static int pair_add(pairs *p, const item *b, const item *n, int moved)
{
    if (p->len == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 64;
        const item **nb = realloc(p->b, ncap * sizeof *nb);
        if (!nb) return -1;
        p->b = nb;
        const item **nn = realloc(p->n, ncap * sizeof *nn);
        if (!nn) return -1;
        p->n = nn;
        int *nm = realloc(p->moved, ncap * sizeof *nm);
        if (!nm) return -1;
        p->moved = nm;
        p->cap = ncap;
    }
    p->b[p->len] = b;
    p->n[p->len] = n;
    p->moved[p->len++] = moved;
    return 0;
}

static void pairs_free(pairs *p)
{
    free(p->b);
    free(p->n);
    free(p->moved);
}

/* Untaken items of s, sorted by loose key (malloc'd array of pointers). */
static item **untaken(side *s, size_t *n)
{
    item **v = malloc((s->n ? s->n : 1) * sizeof *v);
    if (!v) return NULL;
    *n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (!s->v[i].taken) v[(*n)++] = &s->v[i];
    if (*n) qsort(v, *n, sizeof *v, cmp_loose);
    return v;
}

static int match(side *base, side *new_, pairs *p)
{
    /* 1: equal keys (both sides sorted by key) */
    size_t i = 0, j = 0;
    while (i < base->n && j < new_->n) {
        int c = strcmp(base->v[i].key, new_->v[j].key);
        if (c < 0) i++;
        else if (c > 0) j++;
        else {
            base->v[i].taken = new_->v[j].taken = 1;
            if (pair_add(p, &base->v[i++], &new_->v[j++], 0) < 0) return -1;
        }
    }
    /* 2: equal loose keys, unique on both sides */
    size_t nb, nn;
    item **ub = untaken(base, &nb), **un = untaken(new_, &nn);
    int rc = ub && un ? 0 : -1;
    i = j = 0;
    while (rc == 0 && i < nb && j < nn) {
        int c = strcmp(ub[i]->loose, un[j]->loose);
        if (c < 0) {
            i++;
            continue;
        }
        if (c > 0) {
            j++;
            continue;
        }
        size_t ri = i, rj = j;
        while (ri < nb && strcmp(ub[ri]->loose, ub[i]->loose) == 0) ri++;
        while (rj < nn && strcmp(un[rj]->loose, un[j]->loose) == 0) rj++;
        if (ri - i == 1 && rj - j == 1) {
            ub[i]->taken = un[j]->taken = 1;
            rc = pair_add(p, ub[i], un[j], 1);
        }
        i = ri;
        j = rj;
    }
    free(ub);
    free(un);
    /* the rest: in one run only */
    for (size_t k = 0; k < base->n && rc == 0; k++)
        if (!base->v[k].taken) rc = pair_add(p, &base->v[k], NULL, 0);
    for (size_t k = 0; k < new_->n && rc == 0; k++)
        if (!new_->v[k].taken) rc = pair_add(p, NULL, &new_->v[k], 0);
    return rc;
}

static int cmp_stack_delta(const void *pa, const void *pb)
{
    const mt_stack_delta *a = pa, *b = pb;
    int64_t x = mt_delta(a->base_bytes, a->new_bytes), y = mt_delta(b->base_bytes, b->new_bytes);
    if (x != y) return x > y ? -1 : 1;
    if (a->new_bytes != b->new_bytes) return a->new_bytes > b->new_bytes ? -1 : 1;
    if (a->base_bytes != b->base_bytes) return a->base_bytes > b->base_bytes ? -1 : 1;
    size_t n = a->n_frames < b->n_frames ? a->n_frames : b->n_frames;
    for (size_t k = 0; k < n; k++) {
        int c = strcmp(a->frames[k], b->frames[k]);
        if (c) return c;
    }
    return a->n_frames < b->n_frames ? -1 : a->n_frames > b->n_frames;
}

static int cmp_line_delta(const void *pa, const void *pb)
{
    const mt_line_delta *a = pa, *b = pb;
    int64_t x = mt_delta(a->base_bytes, a->new_bytes), y = mt_delta(b->base_bytes, b->new_bytes);
    if (x != y) return x > y ? -1 : 1;
    x = mt_delta(a->base_alloc, a->new_alloc);
    y = mt_delta(b->base_alloc, b->new_alloc);
    if (x != y) return x > y ? -1 : 1;
    int c = strcmp(a->file, b->file);
    if (c) return c;
    c = strcmp(a->function, b->function);
    if (c) return c;
    return a->new_line < b->new_line ? -1 : a->new_line > b->new_line;
}

static int stack_deltas(const mt_analysis *ba, const mt_stack_list *bl, const mt_analysis *na,
                        const mt_stack_list *nl, struct mt_diff_arena *ar, mt_stack_delta **out,
                        size_t *n)
{
    side b = {0}, s = {0};
    pairs p = {0};
    int rc = 0;
    if ((bl && stack_side(ba, bl, ar, &b) < 0) || (nl && stack_side(na, nl, ar, &s) < 0) ||
        match(&b, &s, &p) < 0)
        rc = -1;
    mt_stack_delta *v = NULL;
    if (rc == 0 && p.len && !(v = arena_keep(ar, calloc(p.len, sizeof *v)))) rc = -1;
    for (size_t i = 0; i < p.len && rc == 0; i++) {
        const item *x = p.b[i], *y = p.n[i], *shown = y ? y : x;
        v[i] = (mt_stack_delta){.frames = shown->frames, .flags = shown->flags,
                                .n_frames = shown->n_frames, .moved = p.moved[i]};
        if (x) {
            v[i].base_bytes = x->bytes;
            v[i].base_count = x->count;
        }
        if (y) {
            v[i].new_bytes = y->bytes;
            v[i].new_count = y->count;
        }
    }
    if (rc == 0 && p.len) qsort(v, p.len, sizeof *v, cmp_stack_delta);
    *out = rc == 0 ? v : NULL;
    *n = rc == 0 ? p.len : 0;
    side_free(&b);
    side_free(&s);
    pairs_free(&p);
    return rc;
}

static int line_deltas(const mt_analysis *ba, const mt_device_report *bd, const mt_analysis *na,
                       const mt_device_report *nd, struct mt_diff_arena *ar, mt_line_delta **out,
                       size_t *n)
{
    side b = {0}, s = {0};
    pairs p = {0};
    int rc = 0;
    if ((bd && line_side(ba, bd, &b) < 0) || (nd && line_side(na, nd, &s) < 0) ||
        match(&b, &s, &p) < 0)
        rc = -1;
    mt_line_delta *v = NULL;
    if (rc == 0 && p.len && !(v = arena_keep(ar, calloc(p.len, sizeof *v)))) rc = -1;
    for (size_t i = 0; i < p.len && rc == 0; i++) {
        const item *x = p.b[i], *y = p.n[i], *shown = y ? y : x;
        v[i] = (mt_line_delta){.file = shown->file, .function = shown->function,
                               .moved = p.moved[i]};
        if (x) {
            v[i].base_line = x->line;
            v[i].base_bytes = x->bytes;
            v[i].base_alloc = x->alloc;
        }
        if (y) {
            v[i].new_line = y->line;
            v[i].new_bytes = y->bytes;
            v[i].new_alloc = y->alloc;
        }
    }
    if (rc == 0 && p.len) qsort(v, p.len, sizeof *v, cmp_line_delta);
    *out = rc == 0 ? v : NULL;
    *n = rc == 0 ? p.len : 0;
    side_free(&b);
    side_free(&s);
    pairs_free(&p);
    return rc;
}

/* ---- devices ----------------------------------------------------------------------------------- */

static int device_delta(mt_diff *d, mt_device_delta *dd)
{
    const mt_device_report *b = dd->base, *n = dd->new_;
    if (b) mt_allocator_peaks_of(d->base, b, &dd->base_alloc);
    if (n) mt_allocator_peaks_of(d->new_, n, &dd->new_alloc);
    if (stack_deltas(d->base, b ? &b->peak_stacks : NULL, d->new_, n ? &n->peak_stacks : NULL,
                     d->arena, &dd->stacks, &dd->n_stacks) < 0 ||
        stack_deltas(d->base, b ? &b->leaks : NULL, d->new_, n ? &n->leaks : NULL, d->arena,
                     &dd->leaks, &dd->n_leaks) < 0 ||
        line_deltas(d->base, b, d->new_, n, d->arena, &dd->lines, &dd->n_lines) < 0)
        return -1;
    return 0;
}

/* Ordinals ascending, the unknown device (-1) last: the analyses' order. */
static int before(int32_t x, int32_t y) { return (uint32_t)x < (uint32_t)y; }

int mt_gpu_is_stray(const mt_device_report *d) { return d->u.api_peak == 0; }

int mt_gpu_from_nvml_alone(const mt_device_report *d)
{
    return !d->u.is_host && !d->u.alloc_count && !d->u.failed_count && !d->u.peak;
}

static const mt_device_report *gpu_of(const mt_analysis *a, int32_t device)
{
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == device) return &a->devices[i];
    return NULL;
}

const mt_device_report *mt_own_gpu(const mt_analysis *a, const char **why)
{
    if ((a->header.flags & MT_HDR_RANK) && a->header.local_rank >= 0) {
        const mt_device_report *d = gpu_of(a, a->header.local_rank);
        if (d && !mt_gpu_is_stray(d)) {
            if (why) *why = "LOCAL_RANK";
            return d;
        }
    }
    const mt_device_report *best = NULL;
    for (size_t i = 0; i < a->n_devices; i++) /* ordinal order: the first of equal peaks stays */
        if (a->devices[i].u.device >= 0 && (!best || a->devices[i].u.peak > best->u.peak))
            best = &a->devices[i];
    if (why) *why = best ? "largest peak" : NULL;
    return best;
}

/* GPUs of a with more than the driver's own memory. */
static size_t working_gpus(const mt_analysis *a)
{
    size_t n = 0;
    for (size_t i = 0; i < a->n_devices; i++)
        n += a->devices[i].u.device >= 0 && !mt_gpu_is_stray(&a->devices[i]);
    return n;
}

static int is_ranked(const mt_analysis *a)
{
    return (a->header.flags & MT_HDR_RANK) && a->header.rank >= 0;
}

/* MT_PAIR_AUTO decided: the own GPUs across ordinals (*b, *n set, reason returned), or NULL: by
 * ordinal. Two runs of one program on one machine use the same ordinals; only ranks of a job, or
 * single-GPU runs placed on different GPUs, do not. A program that spreads over several GPUs
 * keeps the ordinal pairing even when its largest GPU moved: there cuda:N is still cuda:N. */
static const char *auto_pairing(const mt_diff *d, const mt_device_report **b,
                                const mt_device_report **n)
{
    *b = mt_own_gpu(d->base, NULL);
    *n = mt_own_gpu(d->new_, NULL);
    if (!*b || !*n || (*b)->u.device == (*n)->u.device) return NULL;
    if (is_ranked(d->base) && is_ranked(d->new_) && d->base->header.rank != d->new_->header.rank)
        return "the runs are different ranks";
    if (working_gpus(d->base) == 1 && working_gpus(d->new_) == 1)
        return "each run used one GPU, not the same one";
    return NULL;
}

int mt_diff_analyses(const mt_analysis *base, const mt_analysis *new_, mt_diff **out)
{
    return mt_diff_analyses_paired(base, new_, NULL, out, NULL, 0);
}

int mt_diff_analyses_paired(const mt_analysis *base, const mt_analysis *new_,
                            const mt_diff_pairing *p, mt_diff **out, char *err, size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    snprintf(err, errlen, "out of memory");
    *out = NULL;
    mt_diff *d = calloc(1, sizeof *d);
    if (!d || !(d->arena = calloc(1, sizeof *d->arena))) {
        free(d);
        return -1;
    }
    d->base = base;
    d->new_ = new_;
    d->modes_differ = (mt_allocated_kind(base) >= 0) != (mt_allocated_kind(new_) >= 0);
    d->paired_by = MT_PAIR_ORDINAL;
    /* the pair across ordinals, if any */
    const mt_device_report *pb = NULL, *pn = NULL;
    mt_pairing how = p ? p->how : MT_PAIR_AUTO;
    if (how == MT_PAIR_CHOSEN) {
        pb = gpu_of(base, p->base_device);
        pn = gpu_of(new_, p->new_device);
        if (!pb || !pn) {
            snprintf(err, errlen, "%s has no memory events on cuda:%d", !pb ? base->path : new_->path,
                     (int)(!pb ? p->base_device : p->new_device));
            mt_diff_free(d);
            return -1;
        }
        d->paired_by = MT_PAIR_CHOSEN;
        d->pairing_reason = "--devices";
        d->base_own_why = d->new_own_why = "--devices";
    } else if (how == MT_PAIR_AUTO && (d->pairing_reason = auto_pairing(d, &pb, &pn)) != NULL) {
        d->paired_by = MT_PAIR_OWN;
        mt_own_gpu(base, &d->base_own_why);
        mt_own_gpu(new_, &d->new_own_why);
    } else {
        pb = pn = NULL;
    }
    size_t cap = base->n_devices + new_->n_devices;
    d->devices = cap ? arena_keep(d->arena, calloc(cap, sizeof *d->devices)) : NULL;
    int rc = cap && !d->devices ? -1 : 0;
    if (rc == 0 && pb) {
        mt_device_delta *dd = &d->devices[d->n_devices++];
        dd->device = pn->u.device;
        dd->base = pb;
        dd->new_ = pn;
        rc = device_delta(d, dd);
    }
    /* the rest by ordinal (both lists are in the analyses' order) */
    size_t i = 0, j = 0;
    while (rc == 0) {
        while (i < base->n_devices && &base->devices[i] == pb) i++;
        while (j < new_->n_devices && &new_->devices[j] == pn) j++;
        if (i >= base->n_devices && j >= new_->n_devices) break;
        const mt_device_report *b = i < base->n_devices ? &base->devices[i] : NULL;
        const mt_device_report *n = j < new_->n_devices ? &new_->devices[j] : NULL;
        if (b && n && b->u.device != n->u.device) {
            if (before(b->u.device, n->u.device)) n = NULL;
            else b = NULL;
        }
        mt_device_delta *dd = &d->devices[d->n_devices++];
        dd->device = n ? n->u.device : b->u.device;
        dd->base = b;
        dd->new_ = n;
        i += b != NULL;
        j += n != NULL;
        rc = device_delta(d, dd);
    }
    if (rc < 0) {
        mt_diff_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

void mt_diff_free(mt_diff *d)
{
    if (!d) return;
    arena_free(d->arena);
    free(d);
}

double mt_peak_change_pct(const mt_device_delta *dd)
{
    uint64_t b = dd->base ? dd->base->u.peak : 0, n = dd->new_ ? dd->new_->u.peak : 0;
    if (!b) return n ? INFINITY : 0.0;
    return ((double)n - (double)b) * 100.0 / (double)b;
}

/* A GPU where neither run allocated anything, only the driver (a stray CUDA context, such as
 * a rank that touched cuda:0 before set_device), is listed but not gated: its "growth" from
 * nothing is a context appearing, which a percentage cannot weigh, and it would fail every
 * rank-against-rank diff where one rank made such a context and the other did not. */
int mt_diff_is_gated(const mt_device_delta *dd)
{
    return !((!dd->base || mt_gpu_is_stray(dd->base)) && (!dd->new_ || mt_gpu_is_stray(dd->new_)));
}

int mt_diff_device_exceeds(const mt_device_delta *dd, double pct)
{
    return mt_diff_is_gated(dd) && mt_peak_change_pct(dd) > pct;
}

int mt_diff_exceeds(const mt_diff *d, double pct)
{
    for (size_t i = 0; i < d->n_devices; i++)
        if (mt_diff_device_exceeds(&d->devices[i], pct)) return 1;
    return 0;
}
