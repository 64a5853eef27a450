/* Ranks: what one trace of a distributed job contributes to the view of all of them.
 *
 * A job of N ranks writes N traces; the rank table compares them. Each trace is analysed on its
 * own and boiled down to an mt_rank_summary (the rank's identity, its peak, the stacks that made
 * it, by name), then freed: comparing 64 ranks needs the memory of the largest one trace, not of
 * all. Stacks are compared by their names in the user view (frame_names.c), never by addresses,
 * which differ between processes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "grow.h"
#include "internal.h"

const char *mt_trace_label(const mt_analysis *a, char *buf, size_t len)
{
    const char *host = a->hostname && a->hostname[0] ? a->hostname : NULL;
    if (a->header.flags & MT_HDR_RANK && a->header.rank >= 0)
        snprintf(buf, len, "rank %d%s%s%s", (int)a->header.rank, host ? " (" : "", host ? host : "",
                 host ? ")" : "");
    else
        snprintf(buf, len, "%s[%u]%s%s", a->comm && a->comm[0] ? a->comm : "process",
                 (unsigned)a->pid, host ? " on " : "", host ? host : "");
    return buf;
}

/* "name;name;...": a stack's user-view names joined, the key stacks are matched by. */
static char *stack_key(mt_frames *f, uint32_t stack, int driver)
{
    if (driver) return strdup("[driver internal]");
    const char *names[512]; /* the longest stack the recorder writes, inlined frames expanded */
    mt_frame_filter filter = mt_frames_resolve(f, MT_FRAMES_AUTO);
    size_t n = mt_frames_path(f, stack, (mt_path_opts){.style = MT_NAME_SHORT, .filter = filter},
                              names, sizeof names / sizeof *names);
    if (n > sizeof names / sizeof *names) n = sizeof names / sizeof *names;
    size_t len = 1;
    for (size_t i = 0; i < n; i++) len += strlen(names[i]) + 1;
    char *key = malloc(len), *p = key;
    if (!key) return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(names[i]);
        memcpy(p, names[i], k);
        p += k;
        if (i + 1 < n) *p++ = ';';
    }
    *p = 0;
    return key;
}

static int cmp_named(const void *pa, const void *pb)
{
    const mt_named_bytes *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* ---- the peak's stacks by name, in time and memory linear in the number of stacks -------------
 * Stacks equal in the user view are one. Their names could be long (a trace's strings run to
 * megabytes) and a peak can hold 10^5 stacks, so the joined names are not made for every stack:
 * each stack gets a 64-bit hash of its names (each distinct name string hashed once: the frame
 * table keeps one string per frame for the analysis' life), stacks are grouped by it, and only the
 * MT_RANK_STACKS groups kept (largest first, then by name as before) get their joined names. */

typedef struct group {
    uint64_t hash, bytes, count;
    size_t first; /* index of its first stack in the list */
} group;

static uint64_t fnv(const char *p)
{
    uint64_t h = 1469598103934665603ull;
    for (; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The hash of a stack's key (what stack_key joins), or 0 out of memory. */
static uint64_t key_hash(mt_frames *f, mt_u64map *memo, uint32_t stack, int driver)
{
    if (driver) return mix64(fnv("[driver internal]")) | 1;
    const char *names[512];
    mt_frame_filter filter = mt_frames_resolve(f, MT_FRAMES_AUTO);
    size_t n = mt_frames_path(f, stack, (mt_path_opts){.style = MT_NAME_SHORT, .filter = filter},
                              names, sizeof names / sizeof *names);
    if (n > sizeof names / sizeof *names) n = sizeof names / sizeof *names;
    uint64_t h = MT_GOLDEN64 ^ n;
    for (size_t i = 0; i < n; i++) {
        mt_u64map_slot *m = mt_u64map_upsert(memo, (uint64_t)(uintptr_t)names[i]);
        if (!m) return 0;
        if (!m->b) {
            m->a = fnv(names[i]);
            m->b = 1;
        }
        h = mix64(h ^ m->a) + i;
    }
    return h | 1; /* never 0 */
}

static int by_bytes_desc(const void *pa, const void *pb)
{
    const group *x = pa, *y = pb;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static int top_named(mt_frames *f, const mt_stack_list *l, mt_named_bytes **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t n = l->n, ng = 0;
    if (!n) return 0;
    group *g = malloc(n * sizeof *g);
    mt_u64map memo = {0}, index = {0};
    int rc = g ? 0 : -1;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const mt_stack_stat *st = &l->v[i];
        uint64_t h = key_hash(f, &memo, st->stack, st->driver);
        mt_u64map_slot *m = h ? mt_u64map_upsert(&index, h) : NULL;
        if (!m) {
            rc = -1;
            break;
        }
        if (!m->a) {
            g[ng] = (group){.hash = h, .first = i};
            m->a = ++ng;
        }
        g[m->a - 1].bytes += st->bytes;
        g[m->a - 1].count += st->count;
    }
    mt_u64map_destroy(&memo);
    mt_u64map_destroy(&index);
    if (rc < 0) {
        free(g);
        return -1;
    }
    qsort(g, ng, sizeof *g, by_bytes_desc);
    /* every group above the MT_RANK_STACKS-th's bytes is kept; of those tied with it, the first by
     * name (at most MT_RANK_STACKS names are held at once) */
    size_t keep = ng < MT_RANK_STACKS ? ng : MT_RANK_STACKS;
    mt_named_bytes *v = calloc(keep ? keep : 1, sizeof *v);
    size_t k = 0, i = 0;
    if (!v) rc = -1;
    uint64_t edge = keep ? g[keep - 1].bytes : 0;
    for (; rc == 0 && i < ng && g[i].bytes > edge; i++) {
        const mt_stack_stat *st = &l->v[g[i].first];
        char *name = stack_key(f, st->stack, st->driver);
        if (!name) rc = -1;
        else v[k++] = (mt_named_bytes){name, g[i].bytes, g[i].count};
    }
    size_t fixed = k;
    for (; rc == 0 && i < ng && g[i].bytes == edge; i++) {
        const mt_stack_stat *st = &l->v[g[i].first];
        char *name = stack_key(f, st->stack, st->driver);
        if (!name) {
            rc = -1;
            break;
        }
        /* insert among the tied ones kept so far (name order), dropping the last when full */
        size_t at = k;
        while (at > fixed && strcmp(v[at - 1].name, name) > 0) at--;
        if (at == keep) {
            free(name);
            continue;
        }
        if (k == keep) free(v[--k].name);
        memmove(&v[at + 1], &v[at], (k - at) * sizeof *v);
        v[at] = (mt_named_bytes){name, g[i].bytes, g[i].count};
        k++;
    }
    free(g);
    if (rc < 0) {
        for (size_t j = 0; j < k; j++) free(v[j].name);
        free(v);
        return -1;
    }
    if (k) qsort(v, k, sizeof *v, cmp_named);
    else {
        free(v);
        v = NULL;
    }
    *out = v;
    *n_out = k;
    return 0;
}

/* The device whose peak is the rank's: the largest GPU peak (the host only without GPUs). */
static const mt_device_report *peak_device(const mt_analysis *a)
{
    const mt_device_report *best = NULL;
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device >= 0 && (!best || a->devices[i].u.peak > best->u.peak))
            best = &a->devices[i];
    return best;
}

/* Who holds the largest stack at d's peak, in a word: the first user frame, or the library that
 * allocated (a stack of NCCL's own threads has no user frame to show: "NCCL" says more than a libc
 * address). malloc'd; NULL out of memory. */
static char *who_at_peak(const mt_analysis *a, const mt_device_report *d)
{
    if (!d->peak_stacks.n) return strdup("");
    const mt_stack_stat *top = &d->peak_stacks.v[0];
    int is_allocator = 0;
    const char *owner =
        top->driver ? "[driver internal]" : mt_frames_owner(a->frames, top->stack, &is_allocator);
    return strdup(is_allocator ? mt_frames_first_user(a->frames, top->stack, MT_NAME_SHORT)
                               : owner);
}

static int summarize_gpus(const mt_analysis *a, mt_rank_summary *s)
{
    const mt_device_report *own = mt_own_gpu(a, NULL);
    for (size_t i = 0; i < a->n_devices && s->n_gpus < MT_RANK_GPUS; i++) {
        const mt_device_report *d = &a->devices[i];
        if (d->u.device < 0) continue;
        mt_rank_gpu *g = &s->gpus[s->n_gpus++];
        g->device = d->u.device;
        snprintf(g->uuid, sizeof g->uuid, "%s", d->uuid ? d->uuid : "");
        g->peak = d->u.peak;
        g->nvml_max = d->n_nvml ? d->nvml_max : 0;
        g->own = d == own;
        g->driver_only = mt_gpu_is_stray(d);
        /* the program's own line (load_checkpoint in train.py, not torch's _to), where it has one
         */
        const mt_stack_stat *top = d->peak_stacks.n ? &d->peak_stacks.v[0] : NULL;
        if (!(g->top_frame = top && !top->driver ? strdup(mt_frames_own_code(a->frames, top->stack))
                                                 : who_at_peak(a, d)))
            return -1;
    }
    return 0;
}

int mt_rank_summarize(mt_analysis *a, mt_rank_summary *s)
{
    memset(s, 0, sizeof *s);
    s->path = strdup(a->path ? a->path : "");
    s->host = strdup(a->hostname ? a->hostname : "");
    s->comm = strdup(a->comm ? a->comm : "");
    char label[256];
    s->label = strdup(mt_trace_label(a, label, sizeof label));
    if (!s->path || !s->host || !s->comm || !s->label) return -1;
    s->has_rank = (a->header.flags & MT_HDR_RANK) && a->header.rank >= 0;
    s->rank = s->has_rank ? a->header.rank : -1;
    s->world_size = a->header.world_size;
    s->local_rank = a->header.local_rank;
    s->pid = a->pid;
    s->start_unix_ns = a->header.start_realtime_ns;
    size_t o = 0;
    for (size_t i = 0; i < a->n_devices && o + 16 < sizeof s->devices; i++) {
        if (a->devices[i].u.device < 0) continue;
        o += (size_t)snprintf(s->devices + o, sizeof s->devices - o, "%s%d", o ? "," : "",
                              (int)a->devices[i].u.device);
        s->n_devices++;
    }
    for (size_t i = 0; i < a->n_devices; i++) {
        s->live_at_exit += a->devices[i].u.in_use;
        s->leak_bytes += a->devices[i].leak_bytes;
    }
    s->failed = a->failed_total;
    s->ended_cleanly = a->ended_cleanly;
    s->activity = a->activity;
    s->end_unix_ns = a->header.start_realtime_ns + a->last_ns;
    for (size_t i = 0; i < a->n_failed && !s->has_oom; i++) {
        const mt_failed_request *f = &a->failed[i];
        if (!mt_failed_is_torch_oom(f)) continue;
        s->has_oom = 1;
        s->oom_unix_ns = a->header.start_realtime_ns + f->time_ns;
        s->oom_bytes = f->bytes;
        s->oom_allocated = f->torch_allocated;
        s->oom_device = f->device;
        const char *who = f->stack ? mt_frames_own_code(a->frames, f->stack) : NULL;
        if (!(s->oom_frame = strdup(who ? who : "[no stack]"))) return -1;
        if (f->backward_stack &&
            !(s->oom_backward_call = strdup(mt_frames_own_code(a->frames, f->backward_stack))))
            return -1;
    }
    if (summarize_gpus(a, s) < 0) return -1;
    const mt_device_report *d = peak_device(a);
    if (!d) return 0;
    s->peak_device = d->u.device;
    s->peak = d->u.peak;
    s->peak_unix_ns = a->header.start_realtime_ns + d->peak_time_ns;
    /* the tensors: PyTorch's blocks (--tensors), or the live bytes of cudaMallocAsync's pools
     * (--tensors=async, or that backend's own allocations): max_memory_allocated either way */
    mt_allocator_peaks ap;
    mt_allocator_peaks_of(a, d, &ap);
    s->tensor_peak = ap.allocated_known ? ap.allocated_peak : 0;
    s->segment_peak = d->u.segment_peak;
    /* the peak's stacks, by name (the top MT_RANK_STACKS; the rest summed) */
    mt_named_bytes *v = NULL;
    size_t k = 0;
    if (top_named(a->frames, &d->peak_stacks, &v, &k) < 0) return -1;
    s->stacks = v;
    s->n_stacks = k;
    if (k) {
        if (!(s->top_frame = who_at_peak(a, d))) return -1;
        s->top_bytes = d->peak_stacks.v[0].bytes;
    }
    return 0;
}

void mt_rank_summary_free(mt_rank_summary *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_stacks; i++) free(s->stacks[i].name);
    free(s->stacks);
    free(s->path);
    free(s->host);
    free(s->comm);
    free(s->label);
    free(s->top_frame);
    free(s->oom_frame);
    free(s->oom_backward_call);
    for (size_t i = 0; i < s->n_gpus; i++)
        free(s->gpus[i].top_frame);
    memset(s, 0, sizeof *s);
}

static int same_gpu(const mt_rank_summary *x, const mt_rank_gpu *a, const mt_rank_summary *y,
                    const mt_rank_gpu *b)
{
    if (strcmp(x->host, y->host) != 0) return 0;
    if (a->uuid[0] && b->uuid[0]) return strcmp(a->uuid, b->uuid) == 0;
    return a->device == b->device; /* a trace without UUIDs: ranks of one host share ordinals */
}

int mt_rank_foreign_gpus(const mt_rank_summary *s, size_t n, mt_rank_foreign **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t k = 0, cap = 0;
    mt_rank_foreign *v = NULL;
    for (size_t r = 0; r < n; r++) {
        if (!s[r].has_rank) continue;
        for (size_t g = 0; g < s[r].n_gpus; g++) {
            const mt_rank_gpu *x = &s[r].gpus[g];
            if (x->own || (!x->peak && !x->nvml_max)) continue;
            long owner = -1;
            for (size_t o = 0; o < n && owner < 0; o++)
                for (size_t h = 0; h < s[o].n_gpus; h++)
                    if (o != r && s[o].has_rank && s[o].gpus[h].own &&
                        same_gpu(&s[r], x, &s[o], &s[o].gpus[h])) {
                        owner = (long)o;
                        break;
                    }
            if (MT_GROW(v, cap, k + 1) < 0) {
                free(v);
                return -1;
            }
            v[k++] = (mt_rank_foreign){r, g, owner};
        }
    }
    *out = v;
    *n_out = k;
    return 0;
}

static const mt_rank_summary *sorting_base;
static int by_peak(const void *pa, const void *pb)
{
    const mt_rank_summary *x = &sorting_base[*(const size_t *)pa];
    const mt_rank_summary *y = &sorting_base[*(const size_t *)pb];
    if (x->peak != y->peak) return x->peak < y->peak ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int mt_rank_imbalance(const mt_rank_summary *s, size_t n, mt_imbalance *out)
{
    memset(out, 0, sizeof *out);
    if (!n) return -1;
    size_t *idx = malloc(n * sizeof *idx);
    if (!idx) return -1;
    for (size_t i = 0; i < n; i++) idx[i] = i;
    sorting_base = s;
    qsort(idx, n, sizeof *idx, by_peak);
    sorting_base = NULL;
    out->min = idx[0];
    out->max = idx[n - 1];
    out->median = idx[(n - 1) / 2]; /* the lower median: a rank that exists */
    free(idx);
    return 0;
}

static int cmp_diff(const void *pa, const void *pb)
{
    const mt_named_diff *a = pa, *b = pb;
    if (a->delta != b->delta) return a->delta > b->delta ? -1 : 1;
    return strcmp(a->name, b->name);
}

int mt_rank_stack_diff(const mt_rank_summary *hi, const mt_rank_summary *lo, mt_named_diff **out,
                       size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t cap = hi->n_stacks + lo->n_stacks;
    if (!cap) return 0;
    mt_named_diff *v = calloc(cap, sizeof *v);
    if (!v) return -1;
    size_t n = 0;
    for (size_t i = 0; i < hi->n_stacks; i++)
        v[n++] = (mt_named_diff){.name = hi->stacks[i].name, .a = hi->stacks[i].bytes};
    for (size_t i = 0; i < lo->n_stacks; i++) {
        size_t j = 0;
        while (j < hi->n_stacks && strcmp(v[j].name, lo->stacks[i].name) != 0) j++;
        if (j < hi->n_stacks) v[j].b = lo->stacks[i].bytes;
        else v[n++] = (mt_named_diff){.name = lo->stacks[i].name, .b = lo->stacks[i].bytes};
    }
    for (size_t i = 0; i < n; i++) v[i].delta = (int64_t)v[i].a - (int64_t)v[i].b;
    qsort(v, n, sizeof *v, cmp_diff);
    *out = v;
    *n_out = n;
    return 0;
}
