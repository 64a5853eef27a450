/* The HTML report's data: everything report.js draws, as one JSON object inside the page.
 *
 *   {"generator": "memtrace VERSION",
 *    "traces": [{
 *      "label" (mt_trace_label), "file", "comm", "pid", "host", "command", "view" (the stacks'
 *      first view: "user", "all", "python", "native"), "start_unix_ms", "duration_ns",
 *      "recording_cost" ([brief, sentence]: mt_cost_describe; null without cost notes),
 *      "events", "dropped", "truncated" (reason or null), "damaged_chunks", "damaged_bytes",
 *      "damage_reason" (the first damaged chunk, or null), "ended_cleanly", "activity_records"
 *      (report --json's), "activity_stopped_ns" (0 unless "stopped"), "warnings": [...],
 *      "warning_times_ns": [...] (since trace start, same order),
 *      "anomalies": {...}, "rank": {its row of the rank table: mt_rank_summary, "peak_unix_us"},
 *      "series_by": "kind" or "category" (tensors by category, the rest by kind), "moment_spans",
 * "moment_top", "moment_thinned" (k > 1: every k-th span kept, mt_moments), "peak_stacks_max",
 *      "names": [frame name, ...],               string table of this trace
 *      "nodes": [parent, name, parent, name...], a trie of paths: node k is the pair at 2k, 2k+1,
 *                                                parent -1 = a frame just under the device
 *      "stacks": [[view node, all node, first user frame name], ...]
 *                                                one per stack the report names: its path in the
 *                                                chosen view (--frames) and with every frame
 *      "failed": [{"root", "t", "bytes", "kind", "result", "result_name", "in_use", "then",
 *                  "outcome", "refusals", "torch_async", "allocated" (a torch.OutOfMemoryError:
 *                  memory_allocated() then, else 0), "cats": [[category, bytes], ...] (the
 *                  tensors live then, largest first; [] without --tensors), "pool_free" (or
 *                  null), "s", "backward" (a stack, or null), "backward_t",
 *                  "live": STACKS, "live_rest": REST}],
 *      "devices": [{
 *        "root", "name", "capacity", "is_host", "peak", "peak_time_ns", "peak_event",
 *        "api_peak", "api_peak_time_ns", "driver_at_peak", "by_kind_at_peak": {kind: bytes},
 *        "alloc_bytes", "alloc_count", "free_count", "failed_count", "end_bytes", "end_count",
 *        "segments_peak", "tensors_peak", "torch_allocated_peak",
 *        "series": [name, ...],                  the labels with bytes on this device
 *        "timeline": {"t": [...], "e": [...], "total": [...], "v": [[...] per series],
 *                     "downsampled", "bucket_ns", "changes"},
 *        "nvml": {"t": [...], "v": [...]},
 *        "moments": [{"t", "e", "total", "from", "to", "peak", "s": STACKS, "rest": REST}],
 *        "peak_stacks": STACKS, "peak_rest": REST, "end_stacks": STACKS, "end_rest": REST,
 *        "end_holders": [{"holder", "kind", "bytes", "count"}],
 *        "breakdown": {"at_peak": B, "at_end": B} (GPUs),
 *        "categories": null or the "by category at the peak" table (GPUs; see categories()),
 *        "by_line": [{"file", "line", "function", "peak_bytes", "peak_count", "alloc_bytes",
 *                     "alloc_count", "source" (when found)}] (GPUs with Python frames)}]}],
 *    "ranks": null (one trace) or {"max", "median", "min" (indexes of traces by peak), "endings"
 *             (how the job ended: mt_rank_ending_lines), "other_gpus" (memory of ranks on GPUs
 *             other than their own: mt_rank_foreign_lines),
 *              "stacks": [{"delta", "max_bytes", "median_bytes", "frames": [...]}]}}
 *   STACKS = [stack index, bytes, count, stack index, bytes, count, ...] (largest first)
 *   REST   = [bytes, count, stacks] of what the list leaves out (so lists add up exactly)
 * Times are ns since the trace's start; bytes and counts are exact integers (below 2^53).
 * Sizes stay bounded: the timeline by mt_moments' buckets, moments by their top, the peak's
 * flame graph by MAX_PEAK_STACKS, the by-line table by MAX_LINES.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grow.h"
#include "html.h"
#include "util.h"

#define MAX_PEAK_STACKS 5000 /* the peak's flame graph; the rest is one "[N more stacks]" box */
#define MAX_END_STACKS 200
#define MAX_FAILED_STACKS 50
#define MAX_LINES 2000
#define MAX_RANK_DIFFS 20 /* stacks shown of what makes the largest rank larger than the median */

/* ---- JSON safe inside <script> ----------------------------------------------------------------- */

/* Every string goes through mt_out_json_string_html (out.c): '<', '>' and '&' are \u escapes, so
 * no "</script>" or "<!--" can appear. */
static void key(mt_out *o, const char *k)
{
    mt_out_json_string_html(o, k);
    mt_out_write(o, ":", 1);
}

static void u64k(mt_out *o, const char *k, uint64_t v)
{
    key(o, k);
    mt_out_printf(o, "%llu,", (unsigned long long)v);
}

static void strk(mt_out *o, const char *k, const char *v)
{
    key(o, k);
    mt_out_json_string_html(o, v);
    mt_out_write(o, ",", 1);
}

static void boolk(mt_out *o, const char *k, int v)
{
    key(o, k);
    mt_out_puts(o, v ? "true," : "false,");
}

/* ---- interning: frame names, path nodes and stacks of one trace -------------------------------- */

/* uint64 -> uint32, open addressing. */
typedef struct imap {
    uint64_t *keys;
    uint32_t *vals; /* value + 1, 0 = empty */
    size_t cap, len;
} imap;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int imap_grow(imap *m)
{
    size_t nc = m->cap ? m->cap * 2 : 1024;
    uint64_t *nk = malloc(nc * sizeof *nk);
    uint32_t *nv = calloc(nc, sizeof *nv);
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->vals[i]) continue;
        size_t j = mix(m->keys[i]) & (nc - 1);
        while (nv[j]) j = (j + 1) & (nc - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = nc;
    return 0;
}

/* The slot of k: *found says whether it holds k (same key, and eq(ctx, its value) when eq is
 * given: keys that are hashes); else it is where k goes. NULL on OOM. */
static uint32_t *imap_slot(imap *m, uint64_t k, int *found, int (*eq)(void *ctx, uint32_t value),
                           void *ctx)
{
    if ((m->len + 1) * 2 > m->cap && imap_grow(m) < 0) return NULL;
    size_t j = mix(k) & (m->cap - 1);
    for (; m->vals[j]; j = (j + 1) & (m->cap - 1))
        if (m->keys[j] == k && (!eq || eq(ctx, m->vals[j] - 1))) {
            *found = 1;
            return &m->vals[j];
        }
    *found = 0;
    m->keys[j] = k;
    return &m->vals[j];
}

static void imap_free(imap *m)
{
    free(m->keys);
    free(m->vals);
    *m = (imap){0};
}

typedef struct stack_ref {
    int32_t view, all; /* nodes, -1 = no frame */
    uint32_t first;    /* name of the first user frame */
} stack_ref;

typedef struct tables {
    mt_frames *f;
    mt_frame_filter view;
    mt_name_style names;
    const char **name;  /* index -> string (owned by f) */
    size_t n_names, cap_names;
    imap name_ix;       /* hash of the string -> index (strings compared on a hash match) */
    const char *probe;  /* the name being looked up (name_eq compares with it) */
    int32_t *node;      /* pairs: parent, name */
    size_t n_nodes, cap_nodes;
    imap node_ix;       /* (parent + 1) << 32 | name -> node */
    stack_ref *stack;
    size_t n_stacks, cap_stacks;
    imap stack_ix;      /* driver << 32 | stack -> index */
    mt_namebuf nb;
} tables;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int name_eq(void *ctx, uint32_t index)
{
    tables *t = ctx;
    return strcmp(t->name[index], t->probe) == 0;
}

static long name_index(tables *t, const char *s)
{
    int found;
    t->probe = s;
    uint32_t *slot = imap_slot(&t->name_ix, hash_str(s), &found, name_eq, t);
    if (!slot) return -1;
    if (found) return (long)*slot - 1;
    if (MT_GROW(t->name, t->cap_names, t->n_names + 1) < 0) return -1;
    t->name[t->n_names] = s;
    *slot = (uint32_t)++t->n_names;
    t->name_ix.len++;
    return (long)t->n_names - 1;
}

static long node_index(tables *t, long parent, long name)
{
    uint64_t k = (uint64_t)(parent + 1) << 32 | (uint64_t)name;
    int found;
    uint32_t *slot = imap_slot(&t->node_ix, k, &found, NULL, NULL);
    if (!slot) return -1;
    if (found) return (long)*slot - 1;
    if (MT_GROW(t->node, t->cap_nodes, 2 * (t->n_nodes + 1)) < 0)
        return -1;
    t->node[2 * t->n_nodes] = (int32_t)parent;
    t->node[2 * t->n_nodes + 1] = (int32_t)name;
    *slot = (uint32_t)++t->n_nodes;
    t->node_ix.len++;
    return (long)t->n_nodes - 1;
}

/* The node of a path (mt_stat_frames' names in t->nb), -1 for no frame, -2 on OOM. */
static long path_node(tables *t)
{
    long node = -1;
    for (size_t k = 0; k < t->nb.n; k++) {
        long name = name_index(t, t->nb.v[k]);
        if (name < 0) return -2;
        node = node_index(t, node, name);
        if (node < 0) return -2;
    }
    return node;
}

/* The index of stack s in the stacks table, added with its two paths when new; -1 on OOM. */
static long stack_index(tables *t, const mt_stack_stat *s)
{
    uint64_t k = (uint64_t)(s->driver != 0) << 32 | s->stack;
    int found;
    uint32_t *slot = imap_slot(&t->stack_ix, k, &found, NULL, NULL);
    if (!slot) return -1;
    if (found) return (long)*slot - 1;
    /* the view's path (as folded output: without the CUDA stack's own frames at the leaf), then
     * every frame; the names and nodes maps grow, the stacks map (slot) does not */
    long view, all, first;
    if (mt_stat_frames(t->f, s, t->names, t->view, 0, &t->nb) < 0 || (view = path_node(t)) < -1 ||
        mt_stat_frames(t->f, s, t->names, MT_FRAMES_ALL, 1, &t->nb) < 0 ||
        (all = path_node(t)) < -1)
        return -1;
    first = name_index(t, s->driver ? mt_pseudo_name(MT_PSEUDO_DRIVER_INTERNAL)
                                    : mt_frames_first_user(t->f, s->stack, t->names));
    if (first < 0 || MT_GROW(t->stack, t->cap_stacks, t->n_stacks + 1) < 0)
        return -1;
    t->stack[t->n_stacks] = (stack_ref){(int32_t)view, (int32_t)all, (uint32_t)first};
    *slot = (uint32_t)++t->n_stacks;
    t->stack_ix.len++;
    return (long)t->n_stacks - 1;
}

static void tables_free(tables *t)
{
    free(t->name);
    free(t->node);
    free(t->stack);
    imap_free(&t->name_ix);
    imap_free(&t->node_ix);
    imap_free(&t->stack_ix);
    mt_namebuf_free(&t->nb);
}

/* ---- stack lists -------------------------------------------------------------------------------- */

/* STACKS of the first `max` of l, then REST under key rest_key. */
static int stack_list(mt_out *o, tables *t, const char *k, const mt_stack_stat *v, size_t n,
                      size_t max, const char *rest_key, uint64_t rest_bytes, uint64_t rest_count,
                      uint64_t rest_stacks)
{
    key(o, k);
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i >= max) {
            rest_bytes += v[i].bytes;
            rest_count += v[i].count;
            rest_stacks++;
            continue;
        }
        long ix = stack_index(t, &v[i]);
        if (ix < 0) return -1;
        mt_out_printf(o, "%s%ld,%llu,%llu", i ? "," : "", ix, (unsigned long long)v[i].bytes,
                      (unsigned long long)v[i].count);
    }
    mt_out_puts(o, "],");
    key(o, rest_key);
    mt_out_printf(o, "[%llu,%llu,%llu],", (unsigned long long)rest_bytes,
                  (unsigned long long)rest_count, (unsigned long long)rest_stacks);
    return 0;
}

/* ---- a device ----------------------------------------------------------------------------------- */

/* record --tensors: the text report's "by category at the peak" table (category_table.c), the
 * numbers of report --json's categories_at_peak without its fits: "categories": null or
 * {"optimizer" (or null), "w", "w_trained", "rows": [[name, outside, bytes, textbook (or null),
 * difference, why], ...], "tensors", "total", "textbook", "process_known"} */
static void categories(mt_out *o, const mt_analysis *a, const mt_device_report *d)
{
    mt_cat_table t;
    mt_category_table(a, d, &t);
    key(o, "categories");
    if (!t.known) {
        mt_out_puts(o, "null,");
        return;
    }
    mt_out_write(o, "{", 1);
    key(o, "optimizer");
    if (t.optimizer) mt_out_json_string_html(o, t.optimizer);
    else mt_out_puts(o, "null");
    mt_out_write(o, ",", 1);
    u64k(o, "w", t.w);
    u64k(o, "w_trained", t.w_trained);
    key(o, "rows");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < t.n; i++) {
        const mt_cat_row *r = &t.rows[i];
        mt_out_puts(o, i ? ",[" : "[");
        mt_out_json_string_html(o, r->name);
        mt_out_printf(o, ",%s,%llu,", r->outside ? "true" : "false", (unsigned long long)r->bytes);
        if (r->has_textbook) mt_out_printf(o, "%llu,", (unsigned long long)r->textbook);
        else mt_out_puts(o, "null,");
        mt_out_printf(o, "%lld,", (long long)r->difference);
        mt_out_json_string_html(o, r->why);
        mt_out_write(o, "]", 1);
    }
    mt_out_puts(o, "],");
    u64k(o, "tensors", t.tensors);
    u64k(o, "total", t.measured);
    u64k(o, "textbook", t.textbook);
    key(o, "process_known");
    mt_out_puts(o, t.process_known ? "true}," : "false},");
}

static void kinds_object(mt_out *o, const char *k, const uint64_t *by_kind)
{
    key(o, k);
    mt_out_write(o, "{", 1);
    int first = 1;
    for (unsigned i = 0; i < MT_KIND_MAX_; i++) {
        /* as the text report: address space and its mappings are not bytes in use */
        if (!by_kind[i] || i == MT_KIND_VMM_RESERVE || i == MT_KIND_VMM_MAP) continue;
        mt_out_puts(o, first ? "" : ",");
        key(o, mt_kind_name(i));
        mt_out_printf(o, "%llu", (unsigned long long)by_kind[i]);
        first = 0;
    }
    mt_out_puts(o, "},");
}

static void breakdown(mt_out *o, const char *k, const mt_breakdown *b)
{
    key(o, k);
    if (!b->valid) {
        mt_out_puts(o, "null,");
        return;
    }
    mt_out_write(o, "{", 1);
    u64k(o, "time_ns", b->time_ns);
    boolk(o, "process_known", b->process_known);
    if (b->process_known) {
        u64k(o, "process_bytes", b->process_bytes);
        u64k(o, "process_sample_ns", b->process_sample_ns);
        boolk(o, "sample_same", b->process_sample_same);
        boolk(o, "sample_after", b->process_sample_after);
        key(o, "context_bytes");
        mt_out_printf(o, "%lld,", (long long)b->context_bytes);
    } else {
        strk(o, "process_unknown",
             b->process_unknown == MT_PROCESS_LAGGED
                 ? "the NVML samples around it read less than the trace had live"
                 : "no NVML samples in the trace");
        if (b->process_unknown == MT_PROCESS_LAGGED) {
            u64k(o, "before_ns", b->before_ns);
            u64k(o, "before_bytes", b->before_bytes);
            u64k(o, "after_ns", b->after_ns);
            u64k(o, "after_bytes", b->after_bytes);
        }
    }
    u64k(o, "visible_bytes", b->visible_bytes);
    u64k(o, "driver_bytes", b->driver_bytes);
    u64k(o, "reserved_bytes", b->reserved_bytes);
    u64k(o, "caching_bytes", b->caching_bytes);
    boolk(o, "has_pool", b->has_pool);
    u64k(o, "pool_bytes", b->pool_bytes);
    boolk(o, "allocated_known", b->allocated_known);
    u64k(o, "allocated_bytes", b->allocated_bytes);
    u64k(o, "cached_free_bytes", b->cached_free_bytes);
    u64k(o, "other_bytes", b->other_bytes);
    key(o, "owners");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < b->n_owners; i++) {
        mt_out_puts(o, i ? ",{" : "{");
        strk(o, "owner", b->owners[i].owner);
        u64k(o, "bytes", b->owners[i].bytes);
        key(o, "count");
        mt_out_printf(o, "%llu}", (unsigned long long)b->owners[i].count);
    }
    mt_out_puts(o, "]},");
}

/* The file a recorded Python path names on this machine: the path itself, else the longest tail
 * of it found under root ("/gpu-box/repo/samples/x.py" -> ROOT/repo/samples/x.py, ROOT/samples/
 * x.py, ROOT/x.py). NULL when neither exists. */
static const char *source_path(const char *recorded, const char *root, char *buf, size_t len)
{
    if (!recorded || !recorded[0] || recorded[0] == '<') return NULL; /* "<frozen ...>", "<string>" */
    if (access(recorded, R_OK) == 0) return recorded;
    if (!root) return NULL;
    for (const char *p = recorded; p; p = strchr(p + 1, '/')) {
        const char *tail = *p == '/' ? p + 1 : p;
        if (!*tail) break;
        snprintf(buf, len, "%s/%s", root, tail);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

static int by_line(mt_out *o, mt_analysis *a, const mt_device_report *d, const mt_html_options *opt)
{
    mt_line_stat *v;
    size_t n;
    if (mt_by_line(a->frames, d, NULL, &v, &n) < 0) return -1;
    mt_src_cache sc;
    mt_src_cache_init(&sc, a);
    char src[512], path[4096];
    key(o, "by_line");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < n && i < MAX_LINES; i++) {
        mt_out_puts(o, i ? ",{" : "{");
        strk(o, "file", v[i].file);
        u64k(o, "line", v[i].line);
        strk(o, "function", v[i].qualname);
        u64k(o, "peak_bytes", v[i].peak_bytes);
        u64k(o, "peak_count", v[i].peak_count);
        u64k(o, "alloc_bytes", v[i].alloc_bytes);
        key(o, "alloc_count");
        mt_out_printf(o, "%llu", (unsigned long long)v[i].alloc_count);
        const char *p = source_path(v[i].file, opt->source_root, path, sizeof path);
        if (p && mt_source_line(&sc, p, v[i].line, src, sizeof src)) {
            mt_out_write(o, ",", 1);
            if (mt_source_changed(&sc)) boolk(o, "source_modified_after_recording", 1);
            key(o, "source");
            mt_out_json_string_html(o, src);
        }
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "],");
    key(o, "by_line_total");
    mt_out_printf(o, "%zu,", n);
    mt_src_cache_free(&sc);
    free(v);
    return 0;
}

static void timeline(mt_out *o, const mt_moments *m, const mt_device_moments *dm,
                     const int *keep)
{
    key(o, "series");
    mt_out_write(o, "[", 1);
    int first = 1;
    for (size_t s = 0; s < m->n_series; s++)
        if (keep[s]) {
            mt_out_puts(o, first ? "" : ",");
            mt_out_json_string_html(o, m->series_names[s]);
            first = 0;
        }
    mt_out_puts(o, "],");
    key(o, "timeline");
    mt_out_write(o, "{", 1);
    static const char *const cols[] = {"t", "e", "total"};
    for (int c = 0; c < 3; c++) {
        key(o, cols[c]);
        mt_out_write(o, "[", 1);
        for (size_t i = 0; i < dm->n_points; i++) {
            const mt_usage_point *p = &dm->points[i];
            uint64_t v = c == 0 ? p->time_ns : c == 1 ? p->seq : p->in_use;
            mt_out_printf(o, "%s%llu", i ? "," : "", (unsigned long long)v);
        }
        mt_out_puts(o, "],");
    }
    key(o, "v");
    mt_out_write(o, "[", 1);
    first = 1;
    for (size_t s = 0; s < m->n_series; s++) {
        if (!keep[s]) continue;
        mt_out_puts(o, first ? "[" : ",[");
        for (size_t i = 0; i < dm->n_points; i++)
            mt_out_printf(o, "%s%llu", i ? "," : "",
                          (unsigned long long)dm->series[i * m->n_series + s]);
        mt_out_write(o, "]", 1);
        first = 0;
    }
    mt_out_puts(o, "],");
    boolk(o, "downsampled", dm->downsampled);
    u64k(o, "bucket_ns", dm->bucket_ns);
    key(o, "changes");
    mt_out_printf(o, "%llu},", (unsigned long long)dm->changes);
}

static int moments(mt_out *o, tables *t, const mt_device_moments *dm)
{
    key(o, "moments");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < dm->n_moments; i++) {
        const mt_moment *m = &dm->moments[i];
        mt_out_puts(o, i ? ",{" : "{");
        u64k(o, "t", m->time_ns);
        u64k(o, "e", m->seq);
        u64k(o, "total", m->in_use);
        u64k(o, "from", m->from_ns);
        u64k(o, "to", m->to_ns);
        boolk(o, "peak", m->is_peak);
        if (stack_list(o, t, "s", m->top.v, m->top.n, m->top.n, "rest", m->rest_bytes,
                       m->rest_count, m->rest_stacks) < 0)
            return -1;
        key(o, "n");
        mt_out_printf(o, "%zu}", m->top.n);
    }
    mt_out_puts(o, "],");
    return 0;
}

static int device(mt_out *o, mt_analysis *a, const mt_device_report *d, const mt_moments *m,
                  const mt_device_moments *dm, tables *t, const mt_html_options *opt)
{
    const mt_usage *u = &d->u;
    char root[32];
    mt_out_write(o, "{", 1);
    strk(o, "root", mt_device_root_name(d, root, sizeof root));
    if (d->name) strk(o, "name", d->name);
    u64k(o, "capacity", d->capacity);
    boolk(o, "is_host", u->is_host);
    u64k(o, "peak", u->peak);
    u64k(o, "peak_time_ns", d->peak_time_ns);
    u64k(o, "peak_event", u->peak_seq);
    u64k(o, "api_peak", u->api_peak);
    u64k(o, "api_peak_time_ns", d->api_peak_time_ns);
    u64k(o, "driver_at_peak", d->driver_at_peak);
    u64k(o, "imported_peak", u->imported_peak);
    kinds_object(o, "by_kind_at_peak", d->by_kind_at_peak);
    u64k(o, "alloc_bytes", u->alloc_bytes);
    u64k(o, "alloc_count", u->alloc_count);
    u64k(o, "free_count", u->free_count);
    u64k(o, "failed_count", u->failed_count);
    u64k(o, "end_bytes", u->in_use);
    uint64_t end_count = 0;
    for (size_t i = 0; i < d->live_end.n; i++) end_count += d->live_end.v[i].count;
    u64k(o, "end_count", end_count);
    u64k(o, "leak_bytes", d->leak_bytes);
    u64k(o, "segments_peak", u->segment_peak);
    u64k(o, "tensors_peak", u->by_kind_peak[MT_KIND_TENSOR]);
    u64k(o, "torch_allocated_peak", u->tensor_counter_peak);
    if (u->has_pool_info) u64k(o, "pool_reserved_peak", u->pool_reserved_peak);
    /* series: the labels that ever had bytes at a kept point */
    int *keep = calloc(m->n_series ? m->n_series : 1, sizeof *keep);
    if (!keep) return -1;
    for (size_t i = 0; i < dm->n_points; i++)
        for (size_t s = 0; s < m->n_series; s++) keep[s] |= dm->series[i * m->n_series + s] != 0;
    timeline(o, m, dm, keep);
    free(keep);
    key(o, "nvml");
    mt_out_puts(o, "{\"t\":[");
    for (size_t i = 0; i < d->n_nvml; i++)
        mt_out_printf(o, "%s%llu", i ? "," : "", (unsigned long long)d->nvml[i].time_ns);
    mt_out_puts(o, "],\"v\":[");
    for (size_t i = 0; i < d->n_nvml; i++)
        mt_out_printf(o, "%s%llu", i ? "," : "", (unsigned long long)d->nvml[i].value);
    mt_out_puts(o, "]},");
    if (moments(o, t, dm) < 0 ||
        stack_list(o, t, "peak_stacks", d->peak_stacks.v, d->peak_stacks.n, MAX_PEAK_STACKS,
                   "peak_rest", 0, 0, 0) < 0 ||
        stack_list(o, t, "end_stacks", d->live_end.v, d->live_end.n, MAX_END_STACKS, "end_rest", 0,
                   0, 0) < 0)
        return -1;
    key(o, "end_holders");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < d->n_end_holders; i++) {
        static const char *const kinds[] = {"allocator cache", "library", "driver", "program"};
        const mt_end_holder *h = &d->end_holders[i];
        mt_out_puts(o, i ? ",{" : "{");
        strk(o, "holder", h->holder);
        strk(o, "kind", kinds[h->kind & 3]);
        u64k(o, "bytes", h->bytes);
        key(o, "count");
        mt_out_printf(o, "%llu}", (unsigned long long)h->count);
    }
    mt_out_puts(o, "],");
    if (!u->is_host) {
        key(o, "breakdown");
        mt_out_write(o, "{", 1);
        breakdown(o, "at_peak", &d->at_peak);
        breakdown(o, "at_end", &d->at_end);
        mt_out_puts(o, "\"_\":0},");
        categories(o, a, d);
        if (mt_frames_has_python(a->frames) && by_line(o, a, d, opt) < 0) return -1;
    }
    mt_out_puts(o, "\"_\":0}");
    return 0;
}

/* ---- a trace ------------------------------------------------------------------------------------ */

static int failed(mt_out *o, mt_analysis *a, tables *t)
{
    key(o, "failed");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < a->n_failed; i++) {
        const mt_failed_request *f = &a->failed[i];
        char root[32];
        mt_out_puts(o, i ? ",{" : "{");
        strk(o, "root", mt_failed_root_name(f, root, sizeof root));
        u64k(o, "t", f->time_ns);
        u64k(o, "bytes", f->bytes);
        strk(o, "kind", mt_kind_name(f->kind));
        u64k(o, "result", f->result);
        strk(o, "result_name", mt_result_name(f->result));
        u64k(o, "in_use", f->in_use);
        char then[512];
        strk(o, "then", mt_failed_outcome_text(a, i, then, sizeof then));
        strk(o, "outcome", mt_failed_outcome_name(f));
        u64k(o, "torch_async", f->torch_async); /* backend:cudaMallocAsync raised on it */
        /* a torch.OutOfMemoryError: PyTorch's memory_allocated() then; 0 for any other */
        u64k(o, "allocated", mt_failed_is_torch_oom(f) ? f->torch_allocated : 0);
        /* record --tensors: the tensors live then by category, [[name, bytes], ...] */
        unsigned cats[MT_CAT_MAX];
        uint64_t tensors;
        size_t n_cats = mt_failed_categories(a, f, cats, &tensors);
        key(o, "cats");
        mt_out_write(o, "[", 1);
        for (size_t k = 0; k < n_cats; k++) {
            mt_out_puts(o, k ? ",[" : "[");
            mt_out_json_string(o, mt_category_name(a->categories, cats[k]));
            mt_out_printf(o, ",%llu]", (unsigned long long)f->by_category[cats[k]]);
        }
        mt_out_puts(o, "],");
        u64k(o, "refusals", f->driver_refusals);
        key(o, "pool_free");
        if (f->pool_free_known) mt_out_printf(o, "%llu,", (unsigned long long)f->pool_free);
        else mt_out_puts(o, "null,");
        mt_stack_stat self = {.stack = f->stack, .bytes = f->bytes, .count = 1};
        long ix = stack_index(t, &self);
        if (ix < 0) return -1;
        key(o, "s");
        mt_out_printf(o, "%ld,", ix);
        key(o, "backward"); /* a worker of autograd's: the backward() call (backward_calls.c) */
        if (f->backward_stack) {
            mt_stack_stat call = {.stack = f->backward_stack};
            if ((ix = stack_index(t, &call)) < 0) return -1;
            mt_out_printf(o, "%ld,", ix);
            u64k(o, "backward_t", f->backward_time_ns);
        } else {
            mt_out_puts(o, "null,");
        }
        if (stack_list(o, t, "live", f->live.v, f->live.n, MAX_FAILED_STACKS, "live_rest", 0, 0,
                       0) < 0)
            return -1;
        mt_out_puts(o, "\"_\":0}");
    }
    mt_out_puts(o, "],");
    u64k(o, "failed_total", a->failed_total);
    u64k(o, "failed_retried", a->failed_retried);
    u64k(o, "failed_probes", a->failed_probes);
    return 0;
}

static void tables_out(mt_out *o, const tables *t)
{
    key(o, "names");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < t->n_names; i++) {
        if (i) mt_out_write(o, ",", 1);
        mt_out_json_string_html(o, t->name[i]);
    }
    mt_out_puts(o, "],");
    key(o, "nodes");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < 2 * t->n_nodes; i++) mt_out_printf(o, "%s%d", i ? "," : "", t->node[i]);
    mt_out_puts(o, "],");
    key(o, "stacks");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < t->n_stacks; i++)
        mt_out_printf(o, "%s[%d,%d,%u]", i ? "," : "", t->stack[i].view, t->stack[i].all,
                      t->stack[i].first);
    mt_out_write(o, "]", 1);
}

static const char *filter_name(mt_frame_filter f)
{
    switch (f) {
    case MT_FRAMES_USER: return "user";
    case MT_FRAMES_PYTHON: return "python";
    case MT_FRAMES_NATIVE: return "native";
    default: return "all";
    }
}

/* The trace's row of the rank table (mt_rank_summarize). Wall-clock times in µs since the epoch
 * (ns do not fit a double). */
static void rank_row(mt_out *o, const mt_rank_summary *r)
{
    key(o, "rank");
    mt_out_write(o, "{", 1);
    boolk(o, "has_rank", r->has_rank);
    key(o, "rank");
    mt_out_printf(o, "%d,", (int)r->rank);
    key(o, "local_rank");
    mt_out_printf(o, "%d,", (int)r->local_rank);
    key(o, "world_size");
    mt_out_printf(o, "%d,", (int)r->world_size);
    strk(o, "devices", r->devices);
    key(o, "peak_device");
    mt_out_printf(o, "%d,", r->peak ? (int)r->peak_device : -1);
    u64k(o, "peak", r->peak);
    u64k(o, "peak_unix_us", r->peak_unix_ns / 1000); /* below 2^53: exact in JavaScript */
    u64k(o, "tensor_peak", r->tensor_peak);
    u64k(o, "segment_peak", r->segment_peak);
    u64k(o, "live_at_exit", r->live_at_exit);
    u64k(o, "leak_bytes", r->leak_bytes);
    u64k(o, "failed", r->failed);
    strk(o, "top_frame", r->top_frame ? r->top_frame : "");
    key(o, "top_bytes");
    mt_out_printf(o, "%llu},", (unsigned long long)r->top_bytes);
}

int mt_html_data_trace(mt_out *o, mt_analysis *a, const mt_rank_summary *rank,
                       const mt_html_options *opt, char *err, size_t errlen)
{
    mt_moments_options mo = {.progress = opt->progress, .progress_ctx = opt->progress_ctx};
    /* the timeline stacks tensors by category where the trace has them (--tensors), else kinds */
    mt_series_key by_category;
    if (mt_series_by_category(a, &by_category) == 0) mo.series = &by_category;
    mt_moments *m;
    if (mt_moments_compute(a, &mo, &m, err, errlen) < 0) return -1;
    tables t = {.f = a->frames, .view = mt_frames_resolve(a->frames, opt->frames),
                .names = opt->names};
    char label[512];
    mt_out_write(o, "{", 1);
    strk(o, "label", mt_trace_label(a, label, sizeof label)); /* as every output names it */
    strk(o, "file", a->path);
    strk(o, "comm", a->comm);
    u64k(o, "pid", a->pid);
    strk(o, "host", a->hostname);
    strk(o, "command", a->cmdline);
    strk(o, "view", filter_name(t.view));
    key(o, "start_unix_ms");
    mt_out_printf(o, "%llu.%06llu,", (unsigned long long)(a->header.start_realtime_ns / 1000000),
                  (unsigned long long)(a->header.start_realtime_ns % 1000000));
    u64k(o, "duration_ns", a->duration_ns);
    char cost_brief[64], cost[1536];
    key(o, "recording_cost"); /* [brief, sentence], or null without cost notes */
    if (mt_cost_describe(a, cost_brief, sizeof cost_brief, cost, sizeof cost)) {
        mt_out_write(o, "[", 1);
        mt_out_json_string_html(o, cost_brief);
        mt_out_write(o, ",", 1);
        mt_out_json_string_html(o, cost);
        mt_out_puts(o, "],");
    } else mt_out_puts(o, "null,");
    u64k(o, "events", a->events);
    u64k(o, "dropped", a->dropped);
    boolk(o, "ended_cleanly", a->ended_cleanly);
    key(o, "activity_records"); /* report --json's: where not "on", driver-internal bytes are */
    mt_out_json_string_html(o, mt_activity_name(a->activity)); /* not known */
    mt_out_write(o, ",", 1);
    u64k(o, "activity_stopped_ns", a->activity_stopped_ns);
    key(o, "truncated");
    if (a->truncated)
        mt_out_json_string_html(o, a->truncated_msg ? a->truncated_msg
                                                    : "the file ends inside a chunk");
    else mt_out_puts(o, "null");
    mt_out_write(o, ",", 1);
    u64k(o, "damaged_chunks", a->damaged_chunks); /* stepped over: their records are missing */
    u64k(o, "damaged_bytes", a->damaged_bytes);
    key(o, "damage_reason");
    if (a->damage_msg)
        mt_out_json_string_html(o, a->damage_msg);
    else mt_out_puts(o, "null");
    mt_out_write(o, ",", 1);
    key(o, "warnings");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < a->n_warnings; i++) {
        if (i) mt_out_write(o, ",", 1);
        mt_out_json_string_html(o, a->warnings[i]);
    }
    mt_out_puts(o, "],");
    key(o, "warning_times_ns");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < a->n_warnings; i++)
        mt_out_printf(o, "%s%llu", i ? "," : "", (unsigned long long)a->warning_times_ns[i]);
    mt_out_puts(o, "],");
    const mt_anomalies *an = &a->anomalies;
    key(o, "anomalies");
    mt_out_printf(o, "{\"unmatched_frees\":%llu,\"double_frees\":%llu,\"replaced\":%llu,"
                     "\"partial_unmaps\":%llu,\"unknown_device\":%llu,\"unknown_events\":%llu,"
                     "\"bad_device_events\":%llu,\"bad_stack_nodes\":%llu},",
                  (unsigned long long)an->unmatched_frees, (unsigned long long)an->double_frees,
                  (unsigned long long)an->replaced, (unsigned long long)an->partial_unmaps,
                  (unsigned long long)an->unknown_device, (unsigned long long)an->unknown_events,
                  (unsigned long long)an->bad_devices, (unsigned long long)an->bad_stack_nodes);
    rank_row(o, rank);
    strk(o, "series_by", m->series_by);
    u64k(o, "moment_spans", m->spans);
    u64k(o, "moment_top", m->top);
    u64k(o, "moment_thinned", m->thinned);
    u64k(o, "peak_stacks_max", MAX_PEAK_STACKS);
    int rc = 0;
    key(o, "devices");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < m->n_devices && rc == 0; i++) {
        const mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        if (i) mt_out_write(o, ",", 1);
        rc = device(o, a, d, m, &m->devices[i], &t, opt);
    }
    mt_out_puts(o, "],");
    if (rc == 0) rc = failed(o, a, &t);
    if (rc == 0) tables_out(o, &t);
    mt_out_write(o, "}", 1);
    tables_free(&t);
    mt_moments_free(m);
    if (rc < 0) snprintf(err, errlen, "%s: out of memory", a->path);
    return rc;
}

void mt_html_data_begin(mt_out *o)
{
    mt_out_puts(o, "{\"generator\":\"memtrace " MEMTRACE_VERSION "\",\"traces\":[\n");
}

/* "a;b;c" (mt_named_diff's names) as ["a","b","c"] */
static void names_array(mt_out *o, const char *joined)
{
    mt_out_write(o, "[", 1);
    for (const char *p = joined; *p;) {
        const char *semi = strchr(p, ';');
        size_t n = semi ? (size_t)(semi - p) : strlen(p);
        char name[1024];
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), p);
        if (p != joined) mt_out_write(o, ",", 1);
        mt_out_json_string_html(o, name);
        p += n + (semi != NULL);
    }
    mt_out_write(o, "]", 1);
}

int mt_html_data_end(mt_out *o, const mt_rank_summary *ranks, size_t n)
{
    mt_out_puts(o, "\n],\"ranks\":");
    mt_imbalance im;
    if (n < 2 || mt_rank_imbalance(ranks, n, &im) < 0) {
        mt_out_puts(o, "null}");
        return 0;
    }
    mt_out_printf(o, "{\"max\":%zu,\"median\":%zu,\"min\":%zu,\"stacks\":[", im.max, im.median,
                  im.min);
    mt_named_diff *d = NULL;
    size_t nd = 0;
    if (im.max != im.median && mt_rank_stack_diff(&ranks[im.max], &ranks[im.median], &d, &nd) < 0)
        return -1;
    /* the stacks that make the largest rank larger than the median one */
    for (size_t i = 0; i < nd && i < MAX_RANK_DIFFS && d[i].delta > 0; i++) {
        mt_out_printf(o, "%s{\"delta\":%lld,\"max_bytes\":%llu,\"median_bytes\":%llu,\"frames\":",
                      i ? "," : "", (long long)d[i].delta, (unsigned long long)d[i].a,
                      (unsigned long long)d[i].b);
        names_array(o, d[i].name);
        mt_out_write(o, "}", 1);
    }
    free(d);
    mt_out_puts(o, "],\"endings\":[");
    char ends[MT_RANK_ENDING_LINES + 1][MT_RANK_ENDING_LEN];
    size_t ne = mt_rank_ending_lines(ranks, n, ends);
    ne += mt_rank_activity_line(ranks, n, ends[ne]); /* what some ranks' traces lack */
    for (size_t i = 0; i < ne; i++) {
        if (i) mt_out_write(o, ",", 1);
        mt_out_json_string_html(o, ends[i]);
    }
    mt_out_puts(o, "],\"other_gpus\":[");
    char other[MT_RANK_FOREIGN_LINES][MT_RANK_ENDING_LEN];
    long no = mt_rank_foreign_lines(ranks, n, other);
    if (no < 0) return -1;
    for (long i = 0; i < no; i++) {
        if (i) mt_out_write(o, ",", 1);
        mt_out_json_string_html(o, other[i]);
    }
    mt_out_puts(o, "]}}");
    return 0;
}
