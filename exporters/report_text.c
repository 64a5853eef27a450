/* The human report (`memtrace report`): per device the peak, what was live then as a tree of
 * stacks, leaks, then failed requests with their forensics, anomalies and warnings.
 *
 * Trees are built from the top N stacks of a list (the rest summed into one "[N more stacks]"
 * line). Indentation grows only where the tree branches: a chain of single-child frames prints
 * as a flat run, so a 40-frame stack does not walk off the right edge; inside a chain only the
 * frames that say something are printed (see tree_print), and the CUDA libraries' own frames at
 * the leaf end are left out, unless --full-stacks. Each line:
 *   "  <share>%  <bytes>  <count>  <indent><frame>"
 */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "util.h"

typedef struct tnode {
    const char *name; /* NULL for the "[N more stacks]" line of a node (more = N) */
    uint64_t bytes, count;
    size_t more;
    int keep; /* never elided: the first user frame of a stack, or user Python code */
    struct tnode *kids;
    size_t n_kids, cap_kids;
} tnode;

/* What the trees show, from the report options. */
typedef struct view {
    size_t top;
    mt_frame_filter frames;
    mt_name_style names;
    int full;
} view;

#define MIN_ELIDED 2 /* a run of fewer frames is printed, not replaced by a marker line */

/* t's child named name (NULL: its "[N more stacks]" line), or NULL when it has none. */
static tnode *find_child(tnode *t, const char *name)
{
    for (size_t i = 0; i < t->n_kids; i++) {
        const char *k = t->kids[i].name;
        if (k == name || (k && name && strcmp(k, name) == 0)) return &t->kids[i];
    }
    return NULL;
}

/* The same, made when missing (NULL when out of memory). */
static tnode *child(tnode *t, const char *name)
{
    tnode *c = find_child(t, name);
    if (c) return c;
    if (MT_GROW(t->kids, t->cap_kids, t->n_kids + 1) < 0) return NULL;
    t->kids[t->n_kids] = (tnode){.name = name};
    return &t->kids[t->n_kids++];
}

static void tree_free(tnode *t)
{
    for (size_t i = 0; i < t->n_kids; i++) tree_free(&t->kids[i]);
    free(t->kids);
}

static int cmp_tnode(const void *pa, const void *pb)
{
    const tnode *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (!a->name || !b->name) return !a->name - !b->name; /* "[N more stacks]" after its equals */
    return strcmp(a->name, b->name);
}

static void line_out(mt_out *o, const tnode *t, uint64_t whole, int indent)
{
    char b[32], more[64];
    double share = whole ? 100.0 * (double)t->bytes / (double)whole : 0.0;
    if (!t->name)
        snprintf(more, sizeof more, "[%zu more stack%s]", t->more, t->more == 1 ? "" : "s");
    mt_out_printf(o, "    %5.1f%%  %10s  %6llu  %*s%s\n", share, mt_format_bytes(t->bytes, b, sizeof b),
                  (unsigned long long)t->count, indent, "", t->name ? t->name : more);
}

/* Prints t and its subtree. Indentation grows only where the tree branches. Unless full, a chain
 * of single-child frames keeps its first and last frame, the frames marked keep, and any frame
 * whose bytes differ from the chain's (a stack ends there); runs of MIN_ELIDED or more other
 * frames become one "... N frames ..." line. */
static void tree_print(mt_out *o, tnode *t, uint64_t whole, int indent, int full)
{
    if (t->n_kids) qsort(t->kids, t->n_kids, sizeof *t->kids, cmp_tnode);
    if (full || t->n_kids != 1) {
        line_out(o, t, whole, indent);
    } else {
        /* t starts a chain: t, its only kid, that one's only kid, ... up to a leaf or a branch */
        tnode *last = t;
        size_t run = 0;
        line_out(o, t, whole, indent);
        for (tnode *c = t->kids; ; c = c->kids) {
            if (c->n_kids) qsort(c->kids, c->n_kids, sizeof *c->kids, cmp_tnode);
            int end = c->n_kids != 1;
            if (!end && !c->keep && c->bytes == t->bytes && c->count == t->count) {
                if (run++ == 0) last = c; /* first elidable frame of the run */
                continue;
            }
            if (run >= MIN_ELIDED) {
                mt_out_printf(o, "    %5s   %10s  %6s  %*s... %zu frames ...\n", "", "", "", indent,
                              "", run);
            } else if (run) {
                for (tnode *r = last; r != c; r = r->kids) line_out(o, r, whole, indent);
            }
            run = 0;
            line_out(o, c, whole, indent);
            if (end) {
                t = c;
                break;
            }
        }
    }
    for (size_t i = 0; i < t->n_kids; i++)
        tree_print(o, &t->kids[i], whole, t->n_kids > 1 ? indent + 2 : indent, full);
}

/* The index of the first user frame of a stack as the tree shows it (innermost Python frame,
 * else innermost native frame outside CUDA and NVIDIA's libraries, else the innermost frame).
 * Returns the count of frames. */
static size_t shown_frames(const mt_namebuf *nb, size_t *first_user)
{
    size_t n = nb->n;
    *first_user = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;)
        if (nb->flags[k] & MT_FF_PYTHON) {
            *first_user = k;
            return n;
        }
    for (size_t k = n; k-- > 0;)
        if ((nb->flags[k] & MT_FF_NATIVE) && !(nb->flags[k] & (MT_FF_CUDA | MT_FF_LIB))) {
            *first_user = k;
            break;
        }
    return n;
}

/* Adds stack s (nb: its frames as shown) under r. A top stack makes its whole path; any other
 * one follows the path the top stacks made as far as its frames match it, and is summed into the
 * "[N more stacks]" line of the node where it leaves it. So every node's bytes are everything
 * that went through it, and what the top N stacks leave out is shown where it sits, not in one
 * line at the root (41% of ResNet-18's peak was there). The tree keeps at most N leaves plus their
 * "more" lines, so a smaller stack costs a walk of its frames past at most N + 1 children each:
 * linear in the list. Returns -1 when out of memory. */
static int tree_add(tnode *r, const mt_stack_stat *s, const mt_namebuf *nb, int top)
{
    size_t fu, n = shown_frames(nb, &fu);
    tnode *t = r;
    for (size_t k = 0; k < n; k++) {
        tnode *c = top ? child(t, nb->v[k]) : find_child(t, nb->v[k]);
        if (!c) {
            if (top) return -1;
            if (!(c = child(t, NULL))) return -1;
            c->bytes += s->bytes;
            c->count += s->count;
            c->more++;
            return 0;
        }
        t = c;
        t->bytes += s->bytes;
        t->count += s->count;
        /* kept: the outermost frame, the first user frame, the user's own Python code, and what
         * the user view names (operators, autograd nodes, the library) */
        if (top)
            t->keep |= k == 0 || k == fu || (nb->flags[k] & MT_FF_ROLE) ||
                       mt_ff_own_python(nb->flags[k]);
    }
    return 0;
}

/* A stack's frames as shown, as one hash (FNV-1a over the names, each ended by its NUL). */
static uint64_t path_hash(const mt_namebuf *nb)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < nb->n; k++)
        for (const unsigned char *c = (const unsigned char *)nb->v[k];; c++) {
            h = (h ^ *c) * 0x100000001b3ull;
            if (!*c) break;
        }
    return h;
}

typedef struct shown_path {
    uint64_t hash, bytes; /* the path's hash; the bytes of every stack shown as it */
    size_t first;         /* its first stack in the list (the list is largest first) */
} shown_path;

static int cmp_path_hash(const void *pa, const void *pb)
{
    const shown_path *a = pa, *b = pb;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    return a->first < b->first ? -1 : a->first > b->first;
}

static int cmp_path_bytes(const void *pa, const void *pb)
{
    const shown_path *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return a->first < b->first ? -1 : a->first > b->first;
}

/* Which stacks make the tree's paths: those shown as one of the top `top` paths. Several stacks
 * can print as one path (the user view leaves out the frames they differ by), so the top N paths
 * are chosen by the sum of their stacks, and N paths are shown, not N stacks of which some print
 * alike. Sets is_top[i]; returns -1 when out of memory. */
static int choose_top_paths(mt_analysis *a, const mt_stack_list *list, const view *v,
                            mt_namebuf *nb, uint8_t *is_top)
{
    shown_path *p = malloc(list->n * sizeof *p);
    uint64_t *hash = malloc(list->n * sizeof *hash);
    int rc = p && hash ? 0 : -1;
    for (size_t i = 0; i < list->n && rc == 0; i++) {
        if (mt_stat_frames(a->frames, &list->v[i], v->names, v->frames, v->full, nb) < 0) rc = -1;
        else p[i] = (shown_path){.hash = hash[i] = path_hash(nb), .bytes = list->v[i].bytes, .first = i};
    }
    size_t n = 0;
    if (rc == 0 && list->n) {
        /* one entry per path: sorted by hash, each run summed into its first */
        qsort(p, list->n, sizeof *p, cmp_path_hash);
        for (size_t i = 0; i < list->n; i++) {
            if (n && p[n - 1].hash == p[i].hash) p[n - 1].bytes += p[i].bytes;
            else p[n++] = p[i];
        }
        qsort(p, n, sizeof *p, cmp_path_bytes);
        if (n > v->top) n = v->top;
        /* the chosen hashes (each once), sorted, looked up for every stack */
        qsort(p, n, sizeof *p, cmp_path_hash);
        for (size_t i = 0; i < list->n; i++) {
            size_t lo = 0, hi = n;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (p[mid].hash < hash[i]) lo = mid + 1;
                else hi = mid;
            }
            is_top[i] = lo < n && p[lo].hash == hash[i];
        }
    }
    free(p);
    free(hash);
    return rc;
}

/* Prints list (its top v->top paths: choose_top_paths; and where the other stacks go: tree_add)
 * under a root frame; `whole` is what shares are taken of. */
static int print_stack_tree(mt_out *o, mt_analysis *a, const mt_stack_list *list, const char *root,
                            uint64_t whole, const view *v)
{
    tnode r = {.name = root};
    mt_namebuf nb = {0};
    uint8_t *is_top = calloc(list->n ? list->n : 1, 1);
    int rc = is_top ? choose_top_paths(a, list, v, &nb, is_top) : -1;
    /* the top paths first, so that the others find the whole tree they may follow */
    for (int pass = 1; pass >= 0 && rc == 0; pass--)
        for (size_t i = 0; i < list->n && rc == 0; i++) {
            const mt_stack_stat *s = &list->v[i];
            if (is_top[i] != pass) continue;
            r.bytes += s->bytes;
            r.count += s->count;
            if (mt_stat_frames(a->frames, s, v->names, v->frames, v->full, &nb) < 0) rc = -1;
            else rc = tree_add(&r, s, &nb, pass);
        }
    if (rc == 0) tree_print(o, &r, whole, 0, v->full);
    tree_free(&r);
    mt_namebuf_free(&nb);
    free(is_top);
    return rc;
}

/* ---- reconciliation ------------------------------------------------------------------------------ */

/* What the trace saw of driver-internal memory live at t (since trace start): its bytes, or why
 * they are not known (mt_activity_saw), into buf. */
static const char *driver_seen(const mt_analysis *a, uint64_t bytes, uint64_t t, char *buf,
                               size_t len)
{
    char b1[32], t1[48];
    if (mt_activity_saw(a, t)) return mt_format_bytes(bytes, buf, len);
    if (a->activity == MT_ACTIVITY_STOPPED)
        snprintf(buf, len, "%s made before %s (activity records stopped then)",
                 mt_format_bytes(bytes, b1, sizeof b1),
                 mt_format_rel(a->activity_stopped_ns, t1, sizeof t1));
    else
        snprintf(buf, len, "not recorded (activity records %s)", mt_activity_name(a->activity));
    return buf;
}

static void print_breakdown(mt_out *o, const mt_analysis *a, const mt_breakdown *b,
                            const char *when)
{
    char b1[32], b2[128], t1[48];
    if (!b->valid) return;
    mt_out_printf(o, "  where the memory is, %s (%s):\n", when, mt_format_rel(b->time_ns, t1, sizeof t1));
    if (b->process_known) {
        mt_out_printf(o, "      process total (nvidia-smi)  %10s   NVML sample at %s%s\n",
                      mt_format_bytes(b->process_bytes, b1, sizeof b1),
                      mt_format_rel(b->process_sample_ns, t1, sizeof t1),
                      b->process_sample_same    ? " (same bytes live in the trace)"
                      : b->process_sample_after ? ", the next one (not exact: the trace's bytes changed)"
                                                : ", the one in effect (not exact: the trace's bytes "
                                                  "changed)");
        mt_out_printf(o,
                      "    = CUDA context & driver       %10s   remainder; driver-internal seen "
                      "by the trace: %s\n",
                      mt_format_bytes((uint64_t)b->context_bytes, b1, sizeof b1),
                      driver_seen(a, b->driver_bytes, b->time_ns, b2, sizeof b2));
    } else {
        if (b->process_unknown == MT_PROCESS_LAGGED) {
            char b3[32], b4[32];
            mt_out_printf(o, "      process total (nvidia-smi)     unknown   the NVML samples around it "
                             "read less than the %s the trace had live (%s at %s",
                          mt_format_bytes(b->visible_bytes, b1, sizeof b1),
                          mt_format_bytes(b->before_bytes, b3, sizeof b3),
                          mt_format_rel(b->before_ns, t1, sizeof t1));
            if (b->after_ns)
                mt_out_printf(o, ", %s at %s", mt_format_bytes(b->after_bytes, b4, sizeof b4),
                              mt_format_rel(b->after_ns, t1, sizeof t1));
            mt_out_puts(o, "): they missed this burst\n");
        } else {
            mt_out_puts(o, "      process total (nvidia-smi)     unknown   no NVML samples in the trace\n");
        }
        mt_out_printf(o,
                      "    = CUDA context & driver         unknown   driver-internal seen by the "
                      "trace: %s\n",
                      driver_seen(a, b->driver_bytes, b->time_ns, b2, sizeof b2));
    }
    mt_out_printf(o, "    + allocator reserved         %10s",
                  mt_format_bytes(b->reserved_bytes, b1, sizeof b1));
    if (b->cache_owner && b->torch_bytes)
        mt_out_printf(o, "   PyTorch's segments %s, %s %s",
                      mt_format_bytes(b->torch_bytes, b1, sizeof b1), b->cache_owner,
                      mt_format_bytes(b->caching_bytes - b->torch_bytes, b2, sizeof b2));
    else if (b->cache_owner)
        mt_out_printf(o, "   %s", b->cache_owner);
    mt_out_puts(o, "\n");
    if (b->allocated_known) {
        mt_out_printf(o, "        tensors allocated        %10s\n",
                      mt_format_bytes(b->allocated_bytes, b1, sizeof b1));
        mt_out_printf(o, "        cached but free          %10s\n",
                      mt_format_bytes(b->cached_free_bytes, b1, sizeof b1));
    } else if (b->torch_bytes) {
        mt_out_puts(o, "        tensors allocated           unknown   the caching allocator's use of its "
                       "segments is invisible to CUDA; record with --tensors to see it\n");
    } else if (b->cache_owner) {
        /* XLA's and CuPy's allocators hand out arrays from their reservation where no CUDA call
         * sees it; only the library can say how much of it is in use. XLA can be told to allocate
         * every array from the driver instead, without a change to the program: then the trace
         * has each array with its stack (samples/jax_train.py on an H200: an MLP's weights under
         * the line that made them, and XLA's autotuning buffers, the peak of that run) */
        int xla = strcmp(b->cache_owner, MT_OWNER_XLA_ALLOCATOR) == 0;
        mt_out_printf(o, "        in use by arrays            unknown   invisible to CUDA: ask the "
                         "library (%s)%s\n",
                      xla ? "jax.devices()[i].memory_stats()"
                      : strcmp(b->cache_owner, MT_OWNER_CUPY_POOL) == 0
                          ? "cupy.get_default_memory_pool().used_bytes()"
                          : "its own memory statistics",
                      xla ? ", or record again with XLA_PYTHON_CLIENT_ALLOCATOR=platform: every "
                            "array its own allocation, with its stack (slower)"
                          : "");
    }
    mt_out_printf(o, "    + other libraries            %10s\n",
                  mt_format_bytes(b->other_bytes, b1, sizeof b1));
    for (size_t i = 0; i < b->n_owners; i++)
        mt_out_printf(o, "        %10s  %6llu  %s\n",
                      mt_format_bytes(b->owners[i].bytes, b1, sizeof b1),
                      (unsigned long long)b->owners[i].count, b->owners[i].owner);
}

/* ---- by category ---------------------------------------------------------------------------------- */

static int is_unit(const char *s)
{
    return (s[0] == 'B' && (s[1] == ' ' || !s[1] || s[1] == ':' || s[1] == ',' || s[1] == ')')) ||
           ((s[0] == 'K' || s[0] == 'M' || s[0] == 'G' || s[0] == 'T') && s[1] == 'i' && s[2] == 'B');
}

/* text, cut at blanks into lines of at most width characters, the later ones indented */
static void wrapped(mt_out *o, const char *text, size_t width, size_t indent)
{
    size_t n = strlen(text), at = 0;
    while (at < n) {
        size_t len = n - at;
        if (len > width) {
            len = width;
            /* at a blank, not between a number and its unit ("2.00 MiB") */
            while (len > width / 2 && (text[at + len] != ' ' || is_unit(text + at + len + 1))) len--;
            if (text[at + len] != ' ') len = width; /* one long word: cut it */
        }
        if (at) mt_out_printf(o, "\n%*s", (int)indent, "");
        mt_out_write(o, text + at, len);
        at += len;
        while (at < n && text[at] == ' ') at++;
    }
    mt_out_puts(o, "\n");
}

static void print_categories(mt_out *o, const mt_analysis *a, const mt_device_report *d)
{
    mt_cat_table t;
    mt_category_table(a, d, &t);
    if (!t.known) {
        if (d->at_peak.torch_bytes || (d->at_peak.reserved_bytes && !d->at_peak.cache_owner))
            mt_out_puts(o, "  by category      needs `memtrace record --tensors`: this trace sees the "
                           "allocator's segments, not the tensors in them (the allocator's share and "
                           "the libraries' workspaces are above)\n");
        return;
    }
    char b1[32], b2[32], b3[32];
    mt_out_printf(o, "  by category at the peak, beside the textbook estimate (W = parameters%s; "
                     "optimizer: %s):\n", t.w_trained != t.w ? ", W_t = the trained ones" : "",
                  t.optimizer ? t.optimizer : "none seen");
    mt_out_printf(o, "    %-24s %11s %11s %11s  %s\n", "", "at the peak", "textbook", "difference",
                  "why");
    for (size_t i = 0; i < t.n; i++) {
        const mt_cat_row *r = &t.rows[i];
        if (i && r->outside && !t.rows[i - 1].outside)
            mt_out_printf(o, "    %-24s %11s\n", "= tensors", mt_format_bytes(t.tensors, b1, sizeof b1));
        mt_format_signed(r->difference, b3, sizeof b3);
        mt_out_printf(o, "    %s %-22s %11s %11s %11s  ", i == 0 ? " " : "+", r->name,
                      mt_format_bytes(r->bytes, b1, sizeof b1),
                      r->has_textbook ? mt_format_bytes(r->textbook, b2, sizeof b2) : "-", b3);
        wrapped(o, r->why, 80, 66);
    }
    mt_format_signed((int64_t)t.measured - (int64_t)t.textbook, b3, sizeof b3);
    mt_out_printf(o, "    = %-22s %11s %11s %11s  %s\n",
                  t.process_known ? "process total" : "total seen", mt_format_bytes(t.measured, b1, sizeof b1),
                  mt_format_bytes(t.textbook, b2, sizeof b2), b3,
                  t.process_known ? "nvidia-smi's number (the NVML sample above)"
                                  : "without the context: no NVML sample fits the peak");
}

/* ---- by line ------------------------------------------------------------------------------------- */

static int print_by_line(mt_out *o, mt_analysis *a, const mt_device_report *d, const char *file,
                         size_t top)
{
    mt_line_stat *v;
    size_t n;
    if (mt_by_line(a->frames, d, file, &v, &n) < 0) return -1;
    char b1[32], b2[32], src[160], where[256];
    mt_src_cache sc;
    mt_src_cache_init(&sc, a);
    size_t marked = 0;
    mt_out_printf(o, "  by Python line%s%s (innermost Python frame%s; source as on this machine):\n",
                  file ? " in " : "", file ? file : "", file ? " in that file" : "");
    if (!n) mt_out_puts(o, "    no allocation has a Python frame here\n");
    else mt_out_printf(o, "    %10s  %10s  %7s  %s\n", "at peak", "allocated", "allocs", "line");
    for (size_t i = 0; i < n && i < top; i++) {
        const char *slash = strrchr(v[i].file, '/');
        snprintf(where, sizeof where, "%s:%u in %s", slash ? slash + 1 : v[i].file, v[i].line,
                 v[i].qualname);
        const char *text = mt_source_line(&sc, v[i].file, v[i].line, src, sizeof src);
        int changed = text && mt_source_changed(&sc);
        marked += (size_t)changed;
        mt_out_printf(o, "    %10s  %10s  %7llu  %s%s%s\n", mt_format_bytes(v[i].peak_bytes, b1, sizeof b1),
                      mt_format_bytes(v[i].alloc_bytes, b2, sizeof b2),
                      (unsigned long long)v[i].alloc_count, where,
                      !text ? "" : changed ? "  |? " : "  | ", text ? text : "");
    }
    if (n > top) mt_out_printf(o, "    [%zu more lines]\n", n - top);
    if (marked)
        mt_out_printf(o, "    |? %zu line%s " MT_SOURCE_CHANGED_WHY "\n", marked,
                      marked == 1 ? "" : "s");
    mt_src_cache_free(&sc);
    free(v);
    return 0;
}

/* "live at the end" and who holds it: an allocator's cache is kept until exit by design and is
 * not called a leak, nor are libraries' workspaces or the driver's own allocations. */
static void print_end_holders(mt_out *o, const mt_device_report *d)
{
    char b1[32];
    uint64_t bytes = 0, count = 0;
    for (size_t k = 0; k < d->live_end.n; k++) {
        bytes += d->live_end.v[k].bytes;
        count += d->live_end.v[k].count;
    }
    mt_out_printf(o, "  live at the end  %s in %llu allocations\n", mt_format_bytes(bytes, b1, sizeof b1),
                  (unsigned long long)count);
    if (!count) return;
    for (size_t i = 0; i < d->n_end_holders; i++) {
        const mt_end_holder *h = &d->end_holders[i];
        char what[160];
        switch (h->kind) {
        case MT_HOLD_CACHE:
            snprintf(what, sizeof what, "cached by the %s (kept until exit by design; not a leak)",
                     h->holder);
            break;
        case MT_HOLD_LIBRARY:
            snprintf(what, sizeof what, "%s workspaces and handles (not a leak)", h->holder);
            break;
        case MT_HOLD_DRIVER:
            snprintf(what, sizeof what, "driver-internal (released with the context)");
            break;
        default:
            snprintf(what, sizeof what, "held by the program: leaks, or memory still in use at exit");
        }
        mt_out_printf(o, "      %10s  %6llu  %s\n", mt_format_bytes(h->bytes, b1, sizeof b1),
                      (unsigned long long)h->count, what);
    }
}

static void print_kinds(mt_out *o, const uint64_t *by_kind)
{
    char b[32];
    int first = 1;
    for (unsigned k = 0; k < MT_KIND_MAX_; k++) {
        if (!by_kind[k] || k == MT_KIND_VMM_RESERVE || k == MT_KIND_VMM_MAP) continue;
        mt_out_printf(o, "%s%s %s", first ? "" : ", ", mt_kind_name(k),
                      mt_format_bytes(by_kind[k], b, sizeof b));
        first = 0;
    }
    if (first) mt_out_puts(o, "nothing");
}

static int print_device(mt_out *o, mt_analysis *a, mt_device_report *d,
                        const mt_report_options *ro, const view *v)
{
    char root[32], b1[32], b2[32], t1[48], t2[64];
    const mt_usage *u = &d->u;
    mt_device_root_name(d, root, sizeof root);
    mt_out_printf(o, "\n%s", d->u.is_host ? "host memory (pinned + registered)" : root);
    if (d->name) mt_out_printf(o, " — %s", d->name);
    if (d->capacity) mt_out_printf(o, ", %s", mt_format_bytes(d->capacity, b1, sizeof b1));
    mt_out_puts(o, "\n");
    /* a GPU the trace knows only from NVML's samples (analyze.c): a context made there, nothing
     * allocated; its peak would be a 0 at an arbitrary time */
    int context_only = mt_gpu_from_nvml_alone(d);
    if (context_only) {
        mt_out_puts(o, "  nothing allocated here");
        if (d->n_nvml)
            mt_out_printf(o,
                          "; NVML lists the process on this GPU, %s at most (at %s): a CUDA "
                          "context, which no CUDA call reports",
                          mt_format_bytes(d->nvml_max, b1, sizeof b1),
                          mt_format_rel(d->nvml_max_time_ns, t1, sizeof t1));
        mt_out_puts(o, "\n");
    } else {
        mt_out_printf(o, "  peak             %s (%llu bytes) at %s (%s)\n",
                      mt_format_bytes(u->peak, b1, sizeof b1), (unsigned long long)u->peak,
                      mt_format_rel(d->peak_time_ns, t1, sizeof t1),
                      mt_format_abs(a, d->peak_time_ns, t2, sizeof t2));
    }
    if (!u->is_host && !context_only) {
        mt_out_printf(o, "  API peak         %s (%llu bytes) at %s\n",
                      mt_format_bytes(u->api_peak, b1, sizeof b1), (unsigned long long)u->api_peak,
                      mt_format_rel(d->api_peak_time_ns, t1, sizeof t1));
        if (mt_activity_saw(a, d->peak_time_ns))
            mt_out_printf(o, "  driver-internal  %s at the peak",
                          mt_format_bytes(d->driver_at_peak, b1, sizeof b1));
        else if (a->activity == MT_ACTIVITY_STOPPED)
            mt_out_printf(o,
                          "  driver-internal  %s at the peak, of those made before %s: CUPTI's "
                          "activity records, which report them, stopped then (see the warning)",
                          mt_format_bytes(d->driver_at_peak, b1, sizeof b1),
                          mt_format_rel(a->activity_stopped_ns, t1, sizeof t1));
        else
            mt_out_printf(o,
                          "  driver-internal  not recorded, nor CUDA arrays: CUPTI's activity "
                          "records, which report them, were %s",
                          a->activity == MT_ACTIVITY_OFF
                              ? "off (record --activity off; the default with --tensors=async)"
                              : "unavailable (see the warning)");
        /* CUPTI names no device for a context's static memory (src/trace/contextless.h) */
        if (d->driver_guessed)
            mt_out_printf(o,
                          "; %s of the contexts' static memory is placed on this GPU by when "
                          "it came (CUPTI names no device for it)",
                          mt_format_bytes(d->driver_guessed, b1, sizeof b1));
        mt_out_puts(o, "\n");
    }
    if (!context_only) {
        mt_out_puts(o, "  at the peak      ");
        print_kinds(o, d->by_kind_at_peak);
        /* its pages move between host and GPU as they are touched, which no event tells */
        if (!u->is_host && d->by_kind_at_peak[MT_KIND_MANAGED])
            mt_out_puts(o, " (managed memory counts in full here, wherever its pages are: an "
                           "upper bound)");
        mt_out_puts(o, "\n");
    }
    mt_out_printf(o, "  allocations      %llu (%s), %llu frees, %llu failed, %llu zero-byte\n",
                  (unsigned long long)u->alloc_count,
                  mt_format_bytes(u->alloc_bytes, b1, sizeof b1), (unsigned long long)u->free_count,
                  (unsigned long long)u->failed_count, (unsigned long long)u->zero_byte_allocs);
    for (size_t i = 0; i < a->n_failed; i++) { /* what most likely ended the run, up front */
        const mt_failed_request *f = &a->failed[i];
        if (!mt_failed_is_torch_oom(f) || f->device != u->device || u->is_host) continue;
        mt_out_printf(o, "  out of memory    torch.OutOfMemoryError at %s: %s, with %s allocated",
                      mt_format_rel(f->time_ns, t1, sizeof t1),
                      mt_format_bytes(f->bytes, b1, sizeof b1),
                      mt_format_bytes(f->torch_allocated, b2, sizeof b2));
        if (f->backward_stack) /* backward_calls.c */
            mt_out_printf(o, ", in the backward pass of %s",
                          mt_frames_first_user(a->frames, f->backward_stack, v->names));
        mt_out_printf(o, " (failed request #%zu below)\n", i + 1);
    }
    if (u->by_kind_peak[MT_KIND_ASYNC])
        mt_out_printf(o, "  stream-ordered   peak %s live (%llu bytes; under backend:cudaMallocAsync "
                         "(`record --tensors=async`): the peak of live tensors, torch's "
                         "max_memory_allocated)\n",
                      mt_format_bytes(u->by_kind_peak[MT_KIND_ASYNC], b1, sizeof b1),
                      (unsigned long long)u->by_kind_peak[MT_KIND_ASYNC]);
    if (u->by_kind_peak[MT_KIND_TENSOR] || u->tensor_counter_peak) {
        /* the allocator's own running total came with every report: the check is exact */
        int same = u->by_kind_peak[MT_KIND_TENSOR] == u->tensor_counter_peak;
        mt_out_printf(o, "  tensors          peak %s (%llu bytes), %s PyTorch's own counter "
                         "(max_memory_allocated %llu)\n",
                      mt_format_bytes(u->by_kind_peak[MT_KIND_TENSOR], b1, sizeof b1),
                      (unsigned long long)u->by_kind_peak[MT_KIND_TENSOR],
                      same ? "equal to" : "DIFFERENT from", (unsigned long long)u->tensor_counter_peak);
    }
    if (u->segment_peak)
        mt_out_printf(o, "  PyTorch segments peak %s (%llu bytes: max_memory_reserved), at end %s%s\n",
                      mt_format_bytes(u->segment_peak, b1, sizeof b1),
                      (unsigned long long)u->segment_peak,
                      mt_format_bytes(u->segment_bytes, b2, sizeof b2),
                      u->by_kind_peak[MT_KIND_TENSOR] ? "; the tensors in them are counted instead"
                                                      : "");
    if (u->captured_count)
        mt_out_printf(o, "  graph capture    %llu allocations (%s) made while capturing CUDA "
                         "graphs (replays allocate nothing)\n",
                      (unsigned long long)u->captured_count,
                      mt_format_bytes(u->captured_bytes, b1, sizeof b1));
    if (u->has_pool_info)
        mt_out_printf(o, "  pool reserved    peak %s, at end %s\n",
                      mt_format_bytes(u->pool_reserved_peak, b1, sizeof b1),
                      mt_format_bytes(u->pool_reserved, b2, sizeof b2));
    if (u->vmm_reserved_peak || u->vmm_mapped_peak)
        mt_out_printf(o, "  VMM              address space reserved peak %s, mapped peak %s\n",
                      mt_format_bytes(u->vmm_reserved_peak, b1, sizeof b1),
                      mt_format_bytes(u->vmm_mapped_peak, b2, sizeof b2));
    if (u->imported_peak)
        mt_out_printf(o,
                      "  imported         peak %s mapped from other processes "
                      "(cudaIpcOpenMemHandle), at end %s: their memory, counted there\n",
                      mt_format_bytes(u->imported_peak, b1, sizeof b1),
                      mt_format_bytes(u->imported, b2, sizeof b2));
    print_end_holders(o, d);
    int reconcile = !u->is_host && (d->n_nvml || d->at_peak.reserved_bytes || d->at_end.reserved_bytes);
    if (!u->is_host && !reconcile && d->categories_known) print_categories(o, a, d);
    if (reconcile) {
        /* only when there is something to reconcile: a plain CUDA program reads as before */
        print_breakdown(o, a, &d->at_peak, "at the peak");
        print_categories(o, a, d);
        print_breakdown(o, a, &d->at_end, "at the end");
        if (d->n_nvml)
            mt_out_printf(o, "  nvidia-smi max   %s at %s\n",
                          mt_format_bytes(d->nvml_max, b1, sizeof b1),
                          mt_format_rel(d->nvml_max_time_ns, t1, sizeof t1));
    }
    if (ro->by_line) return print_by_line(o, a, d, ro->by_line_file, v->top);
    if (d->peak_stacks.n) {
        mt_out_puts(o, "  live at the peak, by stack (share of the peak):\n");
        if (print_stack_tree(o, a, &d->peak_stacks, root, u->peak, v) < 0) return -1;
    }
    if (d->leaks.n) {
        mt_out_puts(o, "  not freed at the end, held by the program (leaks, or memory still in use at "
                       "exit), by stack:\n");
        if (print_stack_tree(o, a, &d->leaks, root, d->leak_bytes, v) < 0) return -1;
    }
    return 0;
}

/* The frames of stack, one a line under a heading, innermost first. */
static int print_frames(mt_out *o, mt_analysis *a, uint32_t stack, int driver, const view *v,
                        mt_namebuf *nb)
{
    mt_stack_stat self = {.stack = stack, .driver = driver};
    if (mt_stat_frames(a->frames, &self, v->names, v->frames, v->full, nb) < 0) return -1;
    for (size_t k = nb->n; k-- > 0;)
        mt_out_printf(o, "       %s\n", nb->v[k]);
    return 0;
}

static int print_failed(mt_out *o, mt_analysis *a, const view *v)
{
    char b1[32], b2[32], t1[48], root[32], then[512];
    mt_namebuf nb = {0};
    mt_out_printf(o, "\nfailed requests: %llu", (unsigned long long)a->failed_total);
    if (a->failed_total > a->n_failed) mt_out_printf(o, " (the first %zu shown)", a->n_failed);
    if (a->failed_retried) /* failed_ties.c */
        mt_out_printf(o,
                      "; and %llu failed driver call%s that the same API call made again at "
                      "once, with success (the CUDA runtime does, on a thread with no current "
                      "context): no failure the program saw",
                      (unsigned long long)a->failed_retried, a->failed_retried > 1 ? "s" : "");
    if (a->failed_probes)
        mt_out_printf(o,
                      "; and %llu cuMemCreate%s refused for the handle type asked for and made "
                      "again at once with another, with success (PyTorch's expandable segments "
                      "and NCCL ask for a fabric handle first): no failure",
                      (unsigned long long)a->failed_probes, a->failed_probes > 1 ? "s" : "");
    mt_out_puts(o, "\n");
    for (size_t i = 0; i < a->n_failed; i++) {
        const mt_failed_request *f = &a->failed[i];
        mt_failed_root_name(f, root, sizeof root);
        mt_out_printf(o, "  #%zu at %s on %s: %s %s request failed ", i + 1,
                      mt_format_rel(f->time_ns, t1, sizeof t1), root,
                      mt_format_bytes(f->bytes, b1, sizeof b1), mt_kind_name(f->kind));
        if (f->kind == MT_KIND_TENSOR) { /* PyTorch's; the driver did not return this */
            mt_out_puts(o, "(PyTorch's caching allocator)");
        } else {
            const char *why = mt_result_name(f->result);
            mt_out_printf(o, "(%s%sCUresult %u)", why, *why ? ", " : "", f->result);
        }
        mt_out_printf(o, "; %s in use; ", mt_format_bytes(f->in_use, b2, sizeof b2));
        if (f->pool_free_known)
            mt_out_printf(o, "reserved but free in pools: %s\n",
                          mt_format_bytes(f->pool_free, b1, sizeof b1));
        else
            mt_out_puts(o, "reserved but free in pools: unknown\n");
        if (*mt_failed_outcome_text(a, i, then, sizeof then))
            mt_out_printf(o, "     then: %s\n", then);
        mt_out_puts(o, "     requested by (innermost first):\n");
        if (print_frames(o, a, f->stack, f->kind == MT_KIND_DRIVER, v, &nb) < 0) return -1;
        /* a request of autograd's workers: the backward() call (backward_calls.c) */
        if (f->backward_stack) {
            mt_out_printf(o, "     in the backward pass started at %s by (innermost first):\n",
                          mt_format_rel(f->backward_time_ns, t1, sizeof t1));
            if (print_frames(o, a, f->backward_stack, 0, v, &nb) < 0) return -1;
        } else if (!mt_backward_calls_recorded(a) &&
                   mt_frames_autograd_worker(a->frames, f->stack)) {
            mt_out_puts(o, "     in autograd's backward pass (record --tensors names the "
                           "backward() call that started it)\n");
        }
        unsigned cats[MT_CAT_MAX];
        uint64_t tensors;
        size_t n_cats = mt_failed_categories(a, f, cats, &tensors);
        if (n_cats) { /* record --tensors: what filled the GPU, in the words of the peak's table */
            mt_out_printf(o, "     tensors live at that moment, %s, by what they were for then:\n",
                          mt_format_bytes(tensors, b1, sizeof b1));
            for (size_t k = 0; k < n_cats; k++)
                mt_out_printf(o, "       %5.1f%%  %10s  %s\n",
                              100.0 * (double)f->by_category[cats[k]] / (double)tensors,
                              mt_format_bytes(f->by_category[cats[k]], b1, sizeof b1),
                              mt_category_name(a->categories, cats[k]));
        }
        if (f->live.n) {
            mt_out_puts(o, "     live on the device at that moment, by stack:\n");
            if (print_stack_tree(o, a, &f->live, root, f->in_use, v) < 0) return -1;
        }
    }
    mt_namebuf_free(&nb);
    return 0;
}

int mt_report_text(mt_out *o, mt_analysis *a, const mt_report_options *opt)
{
    mt_report_options ro = opt ? *opt : (mt_report_options){0};
    if (!ro.top) ro.top = 10;
    view v = {.top = ro.top, .frames = mt_frames_resolve(a->frames, ro.frames), .names = ro.names,
              .full = ro.full_stacks};
    char t1[64], t2[32];
    mt_out_printf(o, "memtrace report: %s\n", a->path);
    char rank[96] = "";
    if (a->header.flags & MT_HDR_RANK && a->header.rank >= 0)
        snprintf(rank, sizeof rank, ", rank %d of %d on %s", (int)a->header.rank,
                 (int)a->header.world_size, a->hostname[0] ? a->hostname : "?");
    if (a->comm[0])
        mt_out_printf(o, "process: %s (pid %u%s) %s\n", a->comm, a->pid, rank, a->cmdline);
    else mt_out_printf(o, "process: pid %u%s\n", a->pid, rank);
    mt_out_printf(o, "recorded: %s, duration %s, %llu events\n", mt_format_abs(a, 0, t1, sizeof t1),
                  mt_format_rel(a->duration_ns, t2, sizeof t2) + 1, (unsigned long long)a->events);
    char cost[1536];
    if (mt_cost_describe(a, NULL, 0, cost, sizeof cost))
        mt_out_printf(o, "recording cost: %s\n", cost);
    if (a->truncated)
        mt_out_printf(o, "WARNING: the trace is truncated (%s): numbers cover what was read\n",
                      a->truncated_msg ? a->truncated_msg : "?");
    else if (!a->ended_cleanly)
        mt_out_puts(o, "WARNING: no END record: the recorder's exit handler did not run (the "
                       "process was killed, as torchrun kills the other ranks when one fails, "
                       "crashed or called _exit) or it is still recording; its last moments, which "
                       "the recorder writes every 200 ms, may be missing\n");
    if (a->damaged_chunks)
        mt_out_printf(o, "WARNING: %llu damaged chunk%s skipped (%llu bytes of the file; the first: "
                         "%s): their records are missing from every number below\n",
                      (unsigned long long)a->damaged_chunks, a->damaged_chunks == 1 ? "" : "s",
                      (unsigned long long)a->damaged_bytes, a->damage_msg ? a->damage_msg : "?");
    if (a->dropped)
        mt_out_printf(o, "WARNING: %llu events were dropped by the recorder: numbers may be off by "
                         "that many events\n", (unsigned long long)a->dropped);
    for (size_t i = 0; i < a->n_warnings; i++) {
        char t[32];
        mt_out_printf(o, "WARNING (recorder, at %s): %s\n",
                      mt_format_rel(a->warning_times_ns[i], t, sizeof t), a->warnings[i]);
    }
    if (!a->n_devices && !a->host) mt_out_puts(o, "\nno GPU memory events\n");
    for (size_t i = 0; i < a->n_devices; i++)
        if (print_device(o, a, &a->devices[i], &ro, &v) < 0) return -1;
    if (a->host && print_device(o, a, a->host, &ro, &v) < 0) return -1;
    if ((a->failed_total || a->failed_retried || a->failed_probes) && !ro.by_line &&
        print_failed(o, a, &v) < 0)
        return -1;
    const mt_anomalies *an = &a->anomalies;
    if (an->unmatched_frees || an->double_frees || an->replaced || an->partial_unmaps ||
        an->ctx_destroy_released || an->unknown_events || an->unknown_device || an->bad_devices ||
        an->bad_stack_nodes)
        mt_out_printf(o, "\nanomalies: %llu unmatched frees, %llu double frees, %llu replaced "
                         "(alloc at a live address), %llu partial unmaps, %llu released by "
                         "context destroy, %llu unknown events, %llu allocations on an unknown "
                         "device (not counted on any)\n",
                      (unsigned long long)an->unmatched_frees, (unsigned long long)an->double_frees,
                      (unsigned long long)an->replaced, (unsigned long long)an->partial_unmaps,
                      (unsigned long long)an->ctx_destroy_released,
                      (unsigned long long)an->unknown_events, (unsigned long long)an->unknown_device);
    if (an->bad_devices)
        mt_out_printf(o, "  %llu events ignored: their device ordinal is outside -1..%d (corrupt "
                         "trace)\n", (unsigned long long)an->bad_devices, MT_MAX_DEVICE_ORDINAL);
    if (an->bad_stack_nodes)
        mt_out_printf(o, "  %llu stack nodes name a parent id not below their own (corrupt trace): "
                         "their stacks end there\n", (unsigned long long)an->bad_stack_nodes);
    return 0;
}
