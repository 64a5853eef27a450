/* `memtrace diff`'s output (text, JSON, Markdown) from compare.c's mt_diff.
 *
 * Per GPU a table of the numbers of both runs and their change:
 *   cuda:0 — NVIDIA H100 80GB HBM3
 *                               base          new        change
 *     peak                291.50 MiB   341.71 MiB   +50.21 MiB  +17.2%
 *     allocated peak      ...                                           (tensors)
 * then the stacks live at the peak that grew most, shrank most, are new or gone (one line each:
 * change, base -> new, the stack), the Python lines at the peak likewise, and what the program
 * held at exit where it changed. A stack or line matched only once line numbers were ignored is
 * marked "(moved)". With --fail-on-increase, the verdict last.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json_writer.h"
#include "util.h"

#define DEFAULT_TOP 10

typedef enum status { ST_GREW, ST_SHRANK, ST_SAME, ST_NEW, ST_GONE, ST_N_ } status;
static const char *const status_names[ST_N_] = {"grew", "shrank", "same", "new", "gone"};

static status stack_status(const mt_stack_delta *s)
{
    if (!s->base_count) return ST_NEW;
    if (!s->new_count) return ST_GONE;
    return s->new_bytes > s->base_bytes ? ST_GREW : s->new_bytes < s->base_bytes ? ST_SHRANK : ST_SAME;
}

static status line_status(const mt_line_delta *l)
{
    /* a line is "in" a run when something of it was live at that run's peak */
    int in_b = l->base_bytes > 0, in_n = l->new_bytes > 0;
    if (!in_b && in_n) return ST_NEW;
    if (in_b && !in_n) return ST_GONE;
    return l->new_bytes > l->base_bytes ? ST_GREW : l->new_bytes < l->base_bytes ? ST_SHRANK : ST_SAME;
}

/* "+50.21 MiB", "-3.00 KiB", "0 B" */
static const char *signed_bytes(int64_t d, char *buf, size_t len)
{
    uint64_t mag = d < 0 ? (uint64_t)0 - (uint64_t)d : (uint64_t)d;
    if (len < 2) return buf;
    buf[0] = d > 0 ? '+' : '-';
    mt_format_bytes(mag, buf + (d != 0), len - 1);
    return buf;
}

/* "+17.2%", "new", "" (0 -> 0) */
static const char *pct(uint64_t base, uint64_t new_, char *buf, size_t len)
{
    if (!base) snprintf(buf, len, "%s", new_ ? "new" : "");
    else snprintf(buf, len, "%+.1f%%", ((double)new_ - (double)base) * 100.0 / (double)base);
    return buf;
}

static size_t top_of(const mt_diff_options *o) { return o->top ? o->top : DEFAULT_TOP; }

/* "train.1234.mtrace (rank 0 (host): python3 train.py)" */
static void run_line(const mt_analysis *a, char *buf, size_t len)
{
    char label[512];
    const char *slash = strrchr(a->path, '/');
    snprintf(buf, len, "%s (%s%s%s)", slash ? slash + 1 : a->path,
             mt_trace_label(a, label, sizeof label), a->cmdline[0] || a->comm[0] ? ": " : "",
             a->cmdline[0] ? a->cmdline : a->comm);
}

/* How the outputs name a run beside the other: "rank 0" when both are ranks and not the same one,
 * else "base" and "new". */
static const char *run_name(const mt_diff *d, int is_new, char *buf, size_t len)
{
    const mt_analysis *b = d->base, *n = d->new_, *a = is_new ? n : b;
    int ranks = (b->header.flags & MT_HDR_RANK) && (n->header.flags & MT_HDR_RANK) &&
                b->header.rank >= 0 && n->header.rank >= 0 && b->header.rank != n->header.rank;
    if (ranks) snprintf(buf, len, "rank %d", (int)a->header.rank);
    else snprintf(buf, len, "%s", is_new ? "new" : "base");
    return buf;
}

/* GPUs of the two runs paired across ordinals (own GPUs, --devices) */
static int crossed(const mt_device_delta *dd)
{
    return dd->base && dd->new_ && dd->base->u.device != dd->new_->u.device;
}

/* A delta's title: "cuda:0", or "rank 0 cuda:0 vs rank 1 cuda:1" for GPUs paired across
 * ordinals. */
static const char *pair_title(const mt_diff *d, const mt_device_delta *dd, char *buf, size_t len)
{
    char r1[32], r2[32], n1[32], n2[32];
    if (d->paired_by != MT_PAIR_ORDINAL && (!dd->base || !dd->new_)) {
        /* "rank 1 cuda:0": whose, when ordinals do not say it */
        snprintf(buf, len, "%s %s", run_name(d, dd->new_ != NULL, n1, sizeof n1),
                 mt_device_root_name(dd->new_ ? dd->new_ : dd->base, r1, sizeof r1));
        return buf;
    }
    if (!crossed(dd)) return mt_device_root_name(dd->new_ ? dd->new_ : dd->base, buf, len);
    snprintf(buf, len, "%s %s vs %s %s", run_name(d, 0, n1, sizeof n1),
             mt_device_root_name(dd->base, r1, sizeof r1), run_name(d, 1, n2, sizeof n2),
             mt_device_root_name(dd->new_, r2, sizeof r2));
    return buf;
}

/* Device i's peak grew by more than the gate allows (--fail-on-increase): 1, with its title in
 * title and the growth as text in growth ("12.5%", or "all of it" when base had none): the line
 * the text and Markdown outputs give each such device. */
static int over_gate(const mt_diff *d, size_t i, const mt_diff_options *opt, char *title,
                     size_t tlen, char *growth, size_t glen)
{
    const mt_device_delta *dd = &d->devices[i];
    if (!opt->gate || !mt_diff_device_exceeds(dd, opt->fail_pct)) return 0;
    double x = mt_peak_change_pct(dd);
    pair_title(d, dd, title, tlen);
    if (isinf(x))
        snprintf(growth, glen, "all of it (none in base)");
    else
        snprintf(growth, glen, "%.1f%%", x);
    return 1;
}

/* "GPUs paired: rank 0 cuda:0 vs rank 1 cuda:1 (each run's own GPU, as the runs are different
 * ranks: rank 0's by LOCAL_RANK, rank 1's by LOCAL_RANK); other GPUs by ordinal", or NULL when
 * every GPU paired by ordinal. */
static const char *pairing_line(const mt_diff *d, char *buf, size_t len)
{
    if (d->paired_by == MT_PAIR_ORDINAL || !d->n_devices) return NULL;
    char title[160], n1[32], n2[32];
    pair_title(d, &d->devices[0], title, sizeof title);
    if (d->paired_by == MT_PAIR_CHOSEN)
        snprintf(buf, len, "GPUs paired: %s (--devices); other GPUs by ordinal", title);
    else
        snprintf(buf, len, "GPUs paired: %s (each run's own GPU, as %s: %s's by %s, %s's by %s); "
                           "other GPUs by ordinal", title, d->pairing_reason,
                 run_name(d, 0, n1, sizeof n1), d->base_own_why, run_name(d, 1, n2, sizeof n2),
                 d->new_own_why);
    return buf;
}

/* When one run saw driver-internal allocations and CUDA arrays (CUPTI's activity records) all
 * along and the other did not (mt_analysis.activity), their peaks count different things: the
 * sentence that says so into buf, or NULL when both runs saw the same. */
static const char *activity_differs(const mt_diff *d, char *buf, size_t len)
{
    if ((d->base->activity == MT_ACTIVITY_ON) == (d->new_->activity == MT_ACTIVITY_ON)) return NULL;
    int base_lacks = d->base->activity != MT_ACTIVITY_ON;
    mt_activity_state s = base_lacks ? d->base->activity : d->new_->activity;
    snprintf(buf, len,
             "the %s run saw no driver-internal allocations or CUDA arrays (CUPTI's activity "
             "records %s) and the %s run did: their peaks differ by those too",
             base_lacks ? "base" : "new",
             s == MT_ACTIVITY_OFF           ? "off"
             : s == MT_ACTIVITY_UNAVAILABLE ? "unavailable"
                                            : "stopped mid-run",
             base_lacks ? "new" : "base");
    return buf;
}

/* " (only in new)", with what a GPU holding nothing but the driver's memory is. */
static const char *presence(const mt_device_delta *dd, char *buf, size_t len)
{
    const mt_device_report *any = dd->new_ ? dd->new_ : dd->base;
    int stray = !mt_diff_is_gated(dd);
    const char *only = !dd->base ? "only in new" : !dd->new_ ? "only in base" : NULL;
    const char *ctx = !stray ? NULL
                      : any->u.peak ? "driver-internal memory only: a CUDA context, no "
                                      "allocation; not gated"
                      : any->n_nvml ? "NVML lists the process here, nothing allocated: a CUDA "
                                      "context alone; not gated"
                                    : NULL;
    if (!only && !ctx) buf[0] = 0;
    else snprintf(buf, len, " (%s%s%s)", only ? only : "", only && ctx ? "; " : "", ctx ? ctx : "");
    return buf;
}

static const char *alloc_what(const mt_allocator_peaks *p)
{
    return p->allocated_kind == MT_KIND_ASYNC ? "cudaMallocAsync: max_memory_allocated"
                                              : "tensors: max_memory_allocated";
}

/* The rows of a device's table: label, both values (known?), a note. */
typedef struct row {
    const char *name;
    int known_b, known_n, bytes;
    uint64_t b, n;
    const char *note;
} row;

static size_t device_rows(const mt_device_delta *dd, row *r)
{
    const mt_device_report *b = dd->base, *n = dd->new_;
    size_t k = 0;
    r[k++] = (row){"peak", b != NULL, n != NULL, 1, b ? b->u.peak : 0, n ? n->u.peak : 0, NULL};
    if (dd->base_alloc.allocated_known || dd->new_alloc.allocated_known)
        r[k++] = (row){"allocated peak", dd->base_alloc.allocated_known, dd->new_alloc.allocated_known, 1,
                       dd->base_alloc.allocated_peak, dd->new_alloc.allocated_peak,
                       alloc_what(dd->new_alloc.allocated_known ? &dd->new_alloc : &dd->base_alloc)};
    if (dd->base_alloc.reserved_known || dd->new_alloc.reserved_known)
        r[k++] = (row){"reserved peak", dd->base_alloc.reserved_known, dd->new_alloc.reserved_known, 1,
                       dd->base_alloc.reserved_peak, dd->new_alloc.reserved_peak,
                       "max_memory_reserved"};
    r[k++] = (row){"live at exit", b != NULL, n != NULL, 1, b ? b->u.in_use : 0, n ? n->u.in_use : 0,
                   NULL};
    r[k++] = (row){"held by the program at exit", b != NULL, n != NULL, 1, b ? b->leak_bytes : 0,
                   n ? n->leak_bytes : 0, "live at exit less caches, workspaces, driver"};
    r[k++] = (row){"failed requests", b != NULL, n != NULL, 0, b ? b->u.failed_count : 0,
                   n ? n->u.failed_count : 0, NULL};
    r[k++] = (row){"allocated in all", b != NULL, n != NULL, 1, b ? b->u.alloc_bytes : 0,
                   n ? n->u.alloc_bytes : 0, NULL};
    return k;
}

static const char *value(const row *r, int known, uint64_t v, char *buf, size_t len)
{
    if (!known) snprintf(buf, len, "—");
    else if (r->bytes) mt_format_bytes(v, buf, len);
    else snprintf(buf, len, "%llu", (unsigned long long)v);
    return buf;
}

static const char *change(const row *r, char *buf, size_t len)
{
    if (!r->known_b || !r->known_n) {
        snprintf(buf, len, "—");
    } else if (r->bytes) {
        signed_bytes(mt_delta(r->b, r->n), buf, len);
    } else {
        int64_t d = mt_delta(r->b, r->n);
        snprintf(buf, len, "%+lld", (long long)d);
        if (!d) snprintf(buf, len, "0");
    }
    return buf;
}

/* The deltas of one status, largest change first: the lists are sorted by change, descending, so
 * growth (grew, new) is read from the front and drops (shrank, gone) from the back. Returns how
 * many, fills idx (up to cap). */
/* Indices of the entries of `want` status, at most cap: largest first (the deltas are sorted by
 * growth, so shrinking and gone entries are taken from the end). One walk for both lists: the
 * entries differ, the selection does not. */
static size_t select_status(const void *v, size_t elem, size_t n, status (*status_of)(const void *),
                            status want, size_t *idx, size_t cap)
{
    size_t k = 0;
    int back = want == ST_SHRANK || want == ST_GONE;
    for (size_t j = 0; j < n && k < cap; j++) {
        size_t i = back ? n - 1 - j : j;
        if (status_of((const char *)v + i * elem) == want) idx[k++] = i;
    }
    return k;
}

static status stack_status_of(const void *p) { return stack_status(p); }
static status line_status_of(const void *p) { return line_status(p); }

static size_t select_stacks(const mt_stack_delta *v, size_t n, status want, size_t *idx, size_t cap)
{
    return select_status(v, sizeof *v, n, stack_status_of, want, idx, cap);
}

static size_t select_lines(const mt_line_delta *v, size_t n, status want, size_t *idx, size_t cap)
{
    return select_status(v, sizeof *v, n, line_status_of, want, idx, cap);
}

static const char *list_title(status s, int leaks)
{
    if (leaks)
        return s == ST_GREW ? "held by the program at exit, grew"
             : s == ST_SHRANK ? "held by the program at exit, shrank"
             : s == ST_NEW ? "held by the program at exit, new"
                           : "held by the program at exit, gone";
    return s == ST_GREW ? "stacks at the peak that grew most"
         : s == ST_SHRANK ? "stacks at the peak that shrank most"
         : s == ST_NEW ? "new at the peak (not in base's)"
                       : "gone at the peak (not in new's)";
}

static const char *line_title(status s)
{
    return s == ST_GREW ? "Python lines at the peak that grew most"
         : s == ST_SHRANK ? "Python lines at the peak that shrank most"
         : s == ST_NEW ? "Python lines new at the peak"
                       : "Python lines gone from the peak";
}

static const status shown_statuses[4] = {ST_GREW, ST_SHRANK, ST_NEW, ST_GONE};

static const char *line_where(const mt_line_delta *l, char *buf, size_t len)
{
    uint32_t line = l->new_line ? l->new_line : l->base_line;
    if (l->moved && l->base_line != l->new_line)
        snprintf(buf, len, "%s:%u (was :%u) in %s", l->file, line, l->base_line, l->function);
    else
        snprintf(buf, len, "%s:%u in %s", l->file, line, l->function);
    return buf;
}

/* ---- text ---------------------------------------------------------------------------------------- */

static void text_stack_list(mt_out *o, const mt_stack_delta *v, size_t n, int leaks, size_t top)
{
    size_t idx[256];
    char c[32], b1[32], b2[32], chain[2048];
    if (top > 256) top = 256;
    for (int si = 0; si < 4; si++) {
        size_t k = select_stacks(v, n, shown_statuses[si], idx, top);
        if (!k) continue;
        mt_out_printf(o, "  %s:\n", list_title(shown_statuses[si], leaks));
        for (size_t i = 0; i < k; i++) {
            const mt_stack_delta *s = &v[idx[i]];
            mt_out_printf(o, "    %11s  %10s -> %-10s  %s%s\n",
                          signed_bytes(mt_delta(s->base_bytes, s->new_bytes), c, sizeof c),
                          mt_format_bytes(s->base_bytes, b1, sizeof b1),
                          mt_format_bytes(s->new_bytes, b2, sizeof b2),
                          mt_chain_text(s->frames, s->flags, s->n_frames, chain, sizeof chain),
                          s->moved ? "  (moved)" : "");
        }
    }
}

static void text_lines(mt_out *o, const mt_line_delta *v, size_t n, size_t top)
{
    size_t idx[256];
    char c[32], b1[32], b2[32], where[512];
    if (top > 256) top = 256;
    for (int si = 0; si < 4; si++) {
        size_t k = select_lines(v, n, shown_statuses[si], idx, top);
        if (!k) continue;
        mt_out_printf(o, "  %s:\n", line_title(shown_statuses[si]));
        for (size_t i = 0; i < k; i++) {
            const mt_line_delta *l = &v[idx[i]];
            mt_out_printf(o, "    %11s  %10s -> %-10s  %s\n",
                          signed_bytes(mt_delta(l->base_bytes, l->new_bytes), c, sizeof c),
                          mt_format_bytes(l->base_bytes, b1, sizeof b1),
                          mt_format_bytes(l->new_bytes, b2, sizeof b2),
                          line_where(l, where, sizeof where));
        }
    }
}

static int diff_text(mt_out *o, const mt_diff *d, const mt_diff_options *opt)
{
    char line[1024], root[160], v1[32], v2[32], c[32], p[32], where[128];
    run_line(d->base, line, sizeof line);
    mt_out_printf(o, "memtrace diff\n  base  %s\n", line);
    run_line(d->new_, line, sizeof line);
    mt_out_printf(o, "  new   %s\n", line);
    if (pairing_line(d, line, sizeof line)) mt_out_printf(o, "%s\n", line);
    if (d->modes_differ)
        mt_out_puts(o, "NOTE: one run was recorded with tensors (record --tensors) and the other not: "
                       "their peaks count different things (tensors, or the allocator's whole "
                       "segments)\n");
    char why[256];
    if (activity_differs(d, why, sizeof why)) mt_out_printf(o, "NOTE: %s\n", why);
    for (int r = 0; r < 2; r++) {
        const mt_analysis *a = r ? d->new_ : d->base;
        if (a->truncated) mt_out_printf(o, "WARNING: the %s trace is truncated: numbers cover what was read\n",
                                        r ? "new" : "base");
        if (a->dropped) mt_out_printf(o, "WARNING: the %s trace lost %llu events (dropped by the recorder)\n",
                                      r ? "new" : "base", (unsigned long long)a->dropped);
    }
    if (!d->n_devices) mt_out_puts(o, "\nno GPU memory events in either run\n");
    for (size_t i = 0; i < d->n_devices; i++) {
        const mt_device_delta *dd = &d->devices[i];
        const mt_device_report *any = dd->new_ ? dd->new_ : dd->base;
        mt_out_printf(o, "\n%s", pair_title(d, dd, root, sizeof root));
        if (any->name) mt_out_printf(o, " — %s", any->name);
        mt_out_puts(o, presence(dd, where, sizeof where));
        mt_out_printf(o, "\n  %-28s %12s %12s %12s\n", "", "base", "new", "change");
        row rows[8];
        size_t nr = device_rows(dd, rows);
        for (size_t k = 0; k < nr; k++) {
            const row *rw = &rows[k];
            mt_out_printf(o, "  %-28s %12s %12s %12s", rw->name, value(rw, rw->known_b, rw->b, v1, sizeof v1),
                          value(rw, rw->known_n, rw->n, v2, sizeof v2), change(rw, c, sizeof c));
            int has_pct = rw->known_b && rw->known_n && rw->b && rw->b != rw->n;
            mt_out_printf(o, " %7s", has_pct ? pct(rw->b, rw->n, p, sizeof p) : "");
            if (rw->note) mt_out_printf(o, "  (%s)", rw->note);
            mt_out_puts(o, "\n");
        }
        text_stack_list(o, dd->stacks, dd->n_stacks, 0, top_of(opt));
        text_lines(o, dd->lines, dd->n_lines, top_of(opt));
        text_stack_list(o, dd->leaks, dd->n_leaks, 1, top_of(opt));
    }
    mt_out_printf(o, "\nfailed requests (all devices): %llu -> %llu\n",
                  (unsigned long long)d->base->failed_total, (unsigned long long)d->new_->failed_total);
    if (opt->gate) {
        int any = 0;
        for (size_t i = 0; i < d->n_devices; i++) {
            if (!over_gate(d, i, opt, root, sizeof root, p, sizeof p)) continue;
            any = 1;
            mt_out_printf(o, "memtrace diff: FAILED: %s peak grew by %s, more than %g%%\n", root, p,
                          opt->fail_pct);
        }
        if (!any) mt_out_printf(o, "memtrace diff: ok: no peak grew by more than %g%%\n", opt->fail_pct);
    }
    return 0;
}

/* ---- JSON ---------------------------------------------------------------------------------------- */

static void json_run(mt_json *j, const char *key, const mt_analysis *a)
{
    char label[512];
    int kind = mt_allocated_kind(a);
    mt_json_object(j, key);
    mt_json_str(j, "trace", a->path);
    mt_json_str(j, "label", mt_trace_label(a, label, sizeof label));
    mt_json_u64(j, "pid", a->pid);
    mt_json_str(j, "command", a->comm);
    mt_json_str(j, "cmdline", a->cmdline);
    mt_json_str(j, "hostname", a->hostname);
    mt_json_u64(j, "start_unix_ns", a->header.start_realtime_ns);
    if (kind == MT_KIND_TENSOR) mt_json_str(j, "tensors", "tensor");
    else if (kind == MT_KIND_ASYNC) mt_json_str(j, "tensors", "async");
    else mt_json_null(j, "tensors");
    mt_json_bool(j, "truncated", a->truncated);
    mt_json_u64(j, "dropped", a->dropped);
    mt_json_u64(j, "failed_requests", a->failed_total);
    mt_json_str(j, "activity_records", mt_activity_name(a->activity)); /* report --json's */
    mt_json_end(j, '}');
}

static void json_pair(mt_json *j, const char *key, int known_b, uint64_t b, int known_n, uint64_t n)
{
    if (!known_b && !known_n) {
        mt_json_null(j, key);
        return;
    }
    mt_json_object(j, key);
    if (known_b) mt_json_u64(j, "base", b);
    else mt_json_null(j, "base");
    if (known_n) mt_json_u64(j, "new", n);
    else mt_json_null(j, "new");
    if (known_b && known_n) {
        mt_json_i64(j, "change", mt_delta(b, n));
        if (b) mt_json_double(j, "change_pct", ((double)n - (double)b) * 100.0 / (double)b);
        else mt_json_null(j, "change_pct");
    } else {
        mt_json_null(j, "change");
        mt_json_null(j, "change_pct");
    }
    mt_json_end(j, '}');
}

static void json_stacks(mt_json *j, const char *key, const mt_stack_delta *v, size_t n, size_t top)
{
    size_t idx[256];
    if (top > 256) top = 256;
    mt_json_array(j, key);
    for (int si = 0; si < 4; si++) {
        size_t k = select_stacks(v, n, shown_statuses[si], idx, top);
        for (size_t i = 0; i < k; i++) {
            const mt_stack_delta *s = &v[idx[i]];
            mt_json_object(j, NULL);
            mt_json_str(j, "status", status_names[stack_status(s)]);
            mt_json_i64(j, "change", mt_delta(s->base_bytes, s->new_bytes));
            mt_json_u64(j, "base_bytes", s->base_bytes);
            mt_json_u64(j, "new_bytes", s->new_bytes);
            mt_json_u64(j, "base_count", s->base_count);
            mt_json_u64(j, "new_count", s->new_count);
            mt_json_bool(j, "moved", s->moved);
            mt_json_array(j, "frames");
            for (size_t f = 0; f < s->n_frames; f++) mt_json_str(j, NULL, s->frames[f]);
            mt_json_end(j, ']');
            mt_json_end(j, '}');
        }
    }
    mt_json_end(j, ']');
}

static void json_lines(mt_json *j, const mt_line_delta *v, size_t n, size_t top)
{
    size_t idx[256];
    if (top > 256) top = 256;
    mt_json_array(j, "lines");
    for (int si = 0; si < 4; si++) {
        size_t k = select_lines(v, n, shown_statuses[si], idx, top);
        for (size_t i = 0; i < k; i++) {
            const mt_line_delta *l = &v[idx[i]];
            mt_json_object(j, NULL);
            mt_json_str(j, "status", status_names[line_status(l)]);
            mt_json_i64(j, "change", mt_delta(l->base_bytes, l->new_bytes));
            mt_json_u64(j, "base_bytes", l->base_bytes);
            mt_json_u64(j, "new_bytes", l->new_bytes);
            mt_json_u64(j, "base_alloc_bytes", l->base_alloc);
            mt_json_u64(j, "new_alloc_bytes", l->new_alloc);
            mt_json_str(j, "file", l->file);
            mt_json_str(j, "function", l->function);
            if (l->base_line) mt_json_u64(j, "base_line", l->base_line);
            else mt_json_null(j, "base_line");
            if (l->new_line) mt_json_u64(j, "new_line", l->new_line);
            else mt_json_null(j, "new_line");
            mt_json_bool(j, "moved", l->moved);
            mt_json_end(j, '}');
        }
    }
    mt_json_end(j, ']');
}

static int diff_json(mt_out *o, const mt_diff *d, const mt_diff_options *opt)
{
    mt_json j = {.o = o};
    char root[160];
    mt_json_object(&j, NULL);
    mt_json_u64(&j, "schema", MT_JSON_SCHEMA);
    json_run(&j, "base", d->base);
    json_run(&j, "new", d->new_);
    mt_json_bool(&j, "modes_differ", d->modes_differ);
    {
        static const char *const by[] = {[MT_PAIR_ORDINAL] = "ordinal", [MT_PAIR_OWN] = "own_gpu",
                                          [MT_PAIR_CHOSEN] = "chosen"};
        const mt_device_delta *x = d->paired_by != MT_PAIR_ORDINAL && d->n_devices ? &d->devices[0]
                                                                                   : NULL;
        mt_json_object(&j, "pairing");
        mt_json_str(&j, "by", by[d->paired_by]);
        if (x) {
            mt_json_str(&j, "reason", d->pairing_reason);
            mt_json_i64(&j, "base_device", x->base->u.device);
            mt_json_i64(&j, "new_device", x->new_->u.device);
            mt_json_str(&j, "base_device_why", d->base_own_why);
            mt_json_str(&j, "new_device_why", d->new_own_why);
        } else {
            mt_json_null(&j, "reason");
            mt_json_null(&j, "base_device");
            mt_json_null(&j, "new_device");
            mt_json_null(&j, "base_device_why");
            mt_json_null(&j, "new_device_why");
        }
        mt_json_end(&j, '}');
    }
    if (opt->gate) mt_json_double(&j, "fail_on_increase_pct", opt->fail_pct);
    else mt_json_null(&j, "fail_on_increase_pct");
    mt_json_bool(&j, "exceeded", opt->gate && mt_diff_exceeds(d, opt->fail_pct));
    json_pair(&j, "failed_requests", 1, d->base->failed_total, 1, d->new_->failed_total);
    mt_json_array(&j, "devices");
    for (size_t i = 0; i < d->n_devices; i++) {
        const mt_device_delta *dd = &d->devices[i];
        const mt_device_report *any = dd->new_ ? dd->new_ : dd->base;
        mt_json_object(&j, NULL);
        mt_json_i64(&j, "device", dd->device);
        mt_json_str(&j, "root", mt_device_root_name(any, root, sizeof root));
        mt_json_str(&j, "title", pair_title(d, dd, root, sizeof root));
        if (dd->base) mt_json_i64(&j, "base_device", dd->base->u.device);
        else mt_json_null(&j, "base_device");
        if (dd->new_) mt_json_i64(&j, "new_device", dd->new_->u.device);
        else mt_json_null(&j, "new_device");
        mt_json_bool(&j, "driver_only", !mt_diff_is_gated(dd));
        if (any->name) mt_json_str(&j, "name", any->name);
        else mt_json_null(&j, "name");
        mt_json_bool(&j, "in_base", dd->base != NULL);
        mt_json_bool(&j, "in_new", dd->new_ != NULL);
        mt_json_bool(&j, "exceeded", opt->gate && mt_diff_device_exceeds(dd, opt->fail_pct));
        row rows[8];
        size_t nr = device_rows(dd, rows);
        static const char *const keys[] = {"peak", "allocated_peak", "reserved_peak", "live_at_exit",
                                           "held_by_program_at_exit", "failed_requests",
                                           "total_alloc_bytes"};
        /* fixed keys: rows that do not apply are null */
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            const row *rw = NULL;
            static const char *const names[] = {"peak", "allocated peak", "reserved peak",
                                                "live at exit", "held by the program at exit",
                                                "failed requests", "allocated in all"};
            for (size_t r = 0; r < nr; r++)
                if (strcmp(rows[r].name, names[k]) == 0) rw = &rows[r];
            if (rw) json_pair(&j, keys[k], rw->known_b, rw->b, rw->known_n, rw->n);
            else mt_json_null(&j, keys[k]);
        }
        json_stacks(&j, "stacks", dd->stacks, dd->n_stacks, top_of(opt));
        json_lines(&j, dd->lines, dd->n_lines, top_of(opt));
        json_stacks(&j, "held_by_program_at_exit_stacks", dd->leaks, dd->n_leaks, top_of(opt));
        mt_json_end(&j, '}');
    }
    mt_json_end(&j, ']');
    mt_json_end(&j, '}');
    return 0;
}

/* ---- Markdown ------------------------------------------------------------------------------------ */

static void md_stack_table(mt_out *o, const char *root, const mt_stack_delta *v, size_t n, int leaks,
                           size_t top)
{
    size_t idx[256];
    char c[32], b1[32], b2[32], n0[48], n1[48], n2[48];
    if (top > 256) top = 256;
    for (int si = 0; si < 4; si++) {
        size_t k = select_stacks(v, n, shown_statuses[si], idx, top);
        if (!k) continue;
        mt_out_printf(o, "**%s: %s**\n\n| change | base | new | stack |\n|--:|--:|--:|---|\n", root,
                      list_title(shown_statuses[si], leaks));
        for (size_t i = 0; i < k; i++) {
            const mt_stack_delta *s = &v[idx[i]];
            mt_out_printf(o, "| %s | %s | %s | ",
                          mt_md_nbsp(signed_bytes(mt_delta(s->base_bytes, s->new_bytes), c, sizeof c), n0, sizeof n0),
                          s->base_count ? mt_md_nbsp(mt_format_bytes(s->base_bytes, b1, sizeof b1), n1, sizeof n1) : "—",
                          s->new_count ? mt_md_nbsp(mt_format_bytes(s->new_bytes, b2, sizeof b2), n2, sizeof n2) : "—");
            mt_md_chain(o, s->frames, s->flags, s->n_frames);
            mt_out_puts(o, s->moved ? " (moved) |\n" : " |\n");
        }
        mt_out_puts(o, "\n");
    }
}

static void md_line_table(mt_out *o, const char *root, const mt_line_delta *v, size_t n, size_t top)
{
    size_t idx[256];
    char c[32], b1[32], b2[32], where[512], n0[48], n1[48], n2[48];
    if (top > 256) top = 256;
    for (int si = 0; si < 4; si++) {
        size_t k = select_lines(v, n, shown_statuses[si], idx, top);
        if (!k) continue;
        mt_out_printf(o, "**%s: %s**\n\n| change | base | new | line |\n|--:|--:|--:|---|\n", root,
                      line_title(shown_statuses[si]));
        for (size_t i = 0; i < k; i++) {
            const mt_line_delta *l = &v[idx[i]];
            mt_out_printf(o, "| %s | %s | %s | ",
                          mt_md_nbsp(signed_bytes(mt_delta(l->base_bytes, l->new_bytes), c, sizeof c), n0, sizeof n0),
                          mt_md_nbsp(mt_format_bytes(l->base_bytes, b1, sizeof b1), n1, sizeof n1),
                          mt_md_nbsp(mt_format_bytes(l->new_bytes, b2, sizeof b2), n2, sizeof n2));
            mt_md_code(o, line_where(l, where, sizeof where));
            mt_out_puts(o, " |\n");
        }
        mt_out_puts(o, "\n");
    }
}

static int diff_markdown(mt_out *o, const mt_diff *d, const mt_diff_options *opt)
{
    char label[512], root[256], v1[32], v2[32], c[32], p[32], n1[48], n2[48], n3[48], line[512];
    char where[128];
    size_t top = opt->top ? opt->top : 5;
    /* the heading says the result: the verdict with a gate, else the largest peak change (the
     * GPUs paired across ordinals when they are: two ranks' own GPUs, not a stray context) */
    const mt_device_delta *big = d->paired_by != MT_PAIR_ORDINAL && d->n_devices ? &d->devices[0]
                                                                                 : NULL;
    for (size_t i = 0; !big && i < d->n_devices; i++) {
        const mt_device_delta *dd = &d->devices[i];
        double x = fabs(mt_peak_change_pct(dd));
        if (!big || x > fabs(mt_peak_change_pct(big))) big = dd;
    }
    mt_out_puts(o, "### memtrace diff");
    if (opt->gate) mt_out_puts(o, mt_diff_exceeds(d, opt->fail_pct) ? ": ❌" : ": ✅");
    if (big) {
        uint64_t b = big->base ? big->base->u.peak : 0, n = big->new_ ? big->new_->u.peak : 0;
        mt_out_printf(o, "%s peak %s", opt->gate ? "" : ":", signed_bytes(mt_delta(b, n), c, sizeof c));
        if (b) mt_out_printf(o, " (%s)", pct(b, n, p, sizeof p));
        mt_out_printf(o, " on %s", pair_title(d, big, root, sizeof root));
    }
    for (int r = 0; r < 2; r++) {
        /* "base `train.0.mtrace` (`rank 0 (host)`: `python3 train.py`)" */
        const mt_analysis *a = r ? d->new_ : d->base;
        const char *slash = strrchr(a->path, '/');
        mt_out_puts(o, r ? " → new " : "\n\nbase ");
        mt_md_code_span(o, slash ? slash + 1 : a->path);
        mt_out_puts(o, " (");
        mt_md_code_span(o, mt_trace_label(a, label, sizeof label));
        if (a->cmdline[0]) {
            mt_out_puts(o, ": ");
            mt_md_code_span(o, a->cmdline);
        }
        mt_out_puts(o, ")");
    }
    mt_out_puts(o, "\n\n");
    if (pairing_line(d, line, sizeof line)) {
        mt_md_text(o, line);
        mt_out_puts(o, "\n\n");
    }
    if (opt->gate) {
        int any = 0;
        for (size_t i = 0; i < d->n_devices; i++) {
            if (!over_gate(d, i, opt, root, sizeof root, p, sizeof p)) continue;
            any = 1;
            mt_out_printf(o, "> ❌ the %s peak grew by %s, more than the %g%% allowed\n\n", root, p,
                          opt->fail_pct);
        }
        if (!any) mt_out_printf(o, "> ✅ no peak grew by more than %g%%\n\n", opt->fail_pct);
    }
    if (d->modes_differ)
        mt_out_puts(o, "> ⚠️ one run was recorded with tensors (`record --tensors`) and the other not: "
                       "their peaks count different things.\n\n");
    char why[256];
    if (activity_differs(d, why, sizeof why)) mt_out_printf(o, "> ⚠️ %s.\n\n", why);
    for (int r = 0; r < 2; r++) {
        const mt_analysis *a = r ? d->new_ : d->base;
        if (a->truncated || a->dropped)
            mt_out_printf(o, "> ⚠️ the %s trace %s\n\n", r ? "new" : "base",
                          a->truncated ? "is truncated: numbers cover what was read"
                                       : "lost events the recorder dropped");
    }
    if (!d->n_devices) mt_out_puts(o, "No GPU memory events in either run.\n");
    if (d->n_devices) {
        mt_out_puts(o, "| GPU | | base | new | change |\n|---|---|--:|--:|--:|\n");
        for (size_t i = 0; i < d->n_devices; i++) {
            const mt_device_delta *dd = &d->devices[i];
            row rows[8];
            size_t nr = device_rows(dd, rows);
            pair_title(d, dd, root, sizeof root);
            presence(dd, where, sizeof where);
            if (strlen(root) + strlen(where) < sizeof root) strcat(root, where);
            for (size_t k = 0; k < nr; k++) {
                const row *rw = &rows[k];
                mt_out_printf(o, "| %s | %s | %s | %s | %s", k ? "" : root, rw->name,
                              mt_md_nbsp(value(rw, rw->known_b, rw->b, v1, sizeof v1), n1, sizeof n1),
                              mt_md_nbsp(value(rw, rw->known_n, rw->n, v2, sizeof v2), n2, sizeof n2),
                              mt_md_nbsp(change(rw, c, sizeof c), n3, sizeof n3));
                if (rw->known_b && rw->known_n && rw->b && rw->b != rw->n)
                    mt_out_printf(o, " (%s)", pct(rw->b, rw->n, p, sizeof p));
                mt_out_puts(o, " |\n");
            }
        }
        mt_out_puts(o, "\n");
    }
    for (size_t i = 0; i < d->n_devices; i++) {
        const mt_device_delta *dd = &d->devices[i];
        pair_title(d, dd, root, sizeof root);
        md_stack_table(o, root, dd->stacks, dd->n_stacks, 0, top);
        md_line_table(o, root, dd->lines, dd->n_lines, top);
        md_stack_table(o, root, dd->leaks, dd->n_leaks, 1, top);
    }
    if (d->base->failed_total || d->new_->failed_total)
        mt_out_printf(o, "Failed requests (all devices): %llu → %llu\n",
                      (unsigned long long)d->base->failed_total,
                      (unsigned long long)d->new_->failed_total);
    return 0;
}

int mt_export_diff(mt_out *o, const mt_diff *d, const mt_diff_options *opt)
{
    mt_diff_options def = {0};
    if (!opt) opt = &def;
    switch (opt->format) {
    case MT_FORMAT_JSON: return diff_json(o, d, opt);
    case MT_FORMAT_MARKDOWN: return diff_markdown(o, d, opt);
    default: return diff_text(o, d, opt);
    }
}
