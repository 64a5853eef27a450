/* `memtrace report --markdown`: a short summary for GitHub ($GITHUB_STEP_SUMMARY, pull-request
 * comments). One table of every GPU of every trace:
 *
 *   | trace | GPU | peak | allocated peak | reserved peak | live at exit | held by the program at exit | failed |
 *
 * (allocated = max_memory_allocated, known with `record --tensors`; reserved = max_memory_reserved;
 * allocator_peaks.c says where each comes from), then per GPU the top stacks live at the peak, one
 * line each, the top Python lines at the peak and (record --tensors) the "by category" table, then
 * failed requests. With several traces, or
 * more than two GPUs in one, each GPU's tables fold into a <details> block so a pull-request
 * comment stays short. Strings from the trace are code spans (markdown.c).
 *
 * Traces come one at a time (a job's ranks: the memory of the largest one): the table's rows and
 * warnings are kept in memory (a few hundred bytes a GPU), the sections are written at once. With
 * several traces the rank table (ranks.c: each rank's peak, when, its top stack, the imbalance and
 * the stacks behind it) comes between the heading and the table of GPUs, as in the text report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define FOLD_ABOVE 2 /* GPU sections shown open; more than this many are folded */

static void cell_bytes(mt_out *o, int known, uint64_t v)
{
    char b[32], n[48];
    if (known) mt_out_printf(o, " %s |", mt_md_nbsp(mt_format_bytes(v, b, sizeof b), n, sizeof n));
    else mt_out_puts(o, " — |");
}

struct mt_md_report {
    size_t n_traces, added, top;
    FILE *rows_f, *warn_f; /* open_memstream: the table's rows, the warnings */
    char *rows, *warn;
    size_t rows_len, warn_len;
    mt_out *rows_o, *warn_o;
    char *title;           /* one trace: its command line */
    char *first_label;     /* one trace: its label ("rank 3 (host)", "python3[1234] on host") */
    char *first_file;      /* and its file name */
    int any_gpu, any_unknown_alloc;
    mt_namebuf nb;
};

static void warnings(mt_out *o, const mt_analysis *a, int several)
{
    char label[512], dropped[96], activity[256];
    const char *what[3] = {NULL, NULL, NULL};
    if (a->truncated) what[0] = "the trace is truncated: numbers cover what was read";
    else if (!a->ended_cleanly)
        what[0] = "no END record: the recorder's exit handler did not run (killed, crashed or "
                  "_exit) or it is still recording; its last moments may be missing";
    if (a->dropped) {
        snprintf(dropped, sizeof dropped, "the recorder dropped %llu events: numbers may be off by "
                                          "that many", (unsigned long long)a->dropped);
        what[1] = dropped;
    }
    what[2] = mt_activity_missing(a, activity, sizeof activity);
    for (int i = 0; i < 3; i++) {
        if (!what[i]) continue;
        mt_out_puts(o, "> ⚠️ ");
        if (several) {
            mt_md_code_span(o, mt_trace_label(a, label, sizeof label));
            mt_out_puts(o, ": ");
        }
        mt_md_text(o, what[i]);
        mt_out_puts(o, "\n\n");
    }
}

/* The table's rows of one trace: a row per GPU. */
static void table_rows(mt_md_report *r, const mt_analysis *a)
{
    char label[512], root[32];
    int several = r->n_traces > 1;
    mt_out *o = r->rows_o;
    for (size_t k = 0; k < a->n_devices; k++) {
        const mt_device_report *d = &a->devices[k];
        mt_allocator_peaks p;
        mt_allocator_peaks_of(a, d, &p);
        r->any_unknown_alloc |= !p.allocated_known;
        r->any_gpu = 1;
        if (several) {
            mt_out_puts(o, "| ");
            mt_md_code(o, mt_trace_label(a, label, sizeof label));
            mt_out_puts(o, " ");
        }
        mt_out_printf(o, "| %s |", mt_device_root_name(d, root, sizeof root));
        cell_bytes(o, 1, d->u.peak);
        cell_bytes(o, p.allocated_known, p.allocated_peak);
        cell_bytes(o, p.reserved_known, p.reserved_peak);
        cell_bytes(o, 1, d->u.in_use);
        cell_bytes(o, 1, d->leak_bytes);
        mt_out_printf(o, " %llu |\n", (unsigned long long)d->u.failed_count);
    }
    if (!a->n_devices) {
        if (several) {
            mt_out_puts(o, "| ");
            mt_md_code(o, mt_trace_label(a, label, sizeof label));
            mt_out_puts(o, " ");
        }
        mt_out_puts(o, "| no GPU memory events | | | | | | |\n");
    }
}

static int stacks_table(mt_out *o, mt_analysis *a, const mt_device_report *d, size_t top,
                        mt_namebuf *nb)
{
    char b1[32], t1[48], n1[48];
    mt_frame_filter filter = mt_frames_resolve(a->frames, MT_FRAMES_AUTO);
    mt_out_printf(o, "Live at the peak (%s), top %zu stack%s%s:\n\n",
                  mt_format_rel(d->peak_time_ns, t1, sizeof t1),
                  top < d->peak_stacks.n ? top : d->peak_stacks.n, d->peak_stacks.n == 1 ? "" : "s",
                  filter == MT_FRAMES_USER ? " (user view)" : "");
    mt_out_puts(o, "| share | bytes | stack |\n|--:|--:|---|\n");
    for (size_t i = 0; i < d->peak_stacks.n && i < top; i++) {
        const mt_stack_stat *s = &d->peak_stacks.v[i];
        if (mt_stat_frames(a->frames, s, MT_NAME_SHORT, filter, 0, nb) < 0) return -1;
        mt_out_printf(o, "| %.1f%% | %s | ",
                      d->u.peak ? 100.0 * (double)s->bytes / (double)d->u.peak : 0.0,
                      mt_md_nbsp(mt_format_bytes(s->bytes, b1, sizeof b1), n1, sizeof n1));
        mt_md_chain(o, nb->v, nb->flags, nb->n);
        mt_out_puts(o, " |\n");
    }
    if (d->peak_stacks.n > top) {
        uint64_t rest = 0;
        for (size_t i = top; i < d->peak_stacks.n; i++) rest += d->peak_stacks.v[i].bytes;
        mt_out_printf(o, "| %.1f%% | %s | %zu more stack%s |\n",
                      d->u.peak ? 100.0 * (double)rest / (double)d->u.peak : 0.0,
                      mt_md_nbsp(mt_format_bytes(rest, b1, sizeof b1), n1, sizeof n1),
                      d->peak_stacks.n - top,
                      d->peak_stacks.n - top == 1 ? "" : "s");
    }
    mt_out_puts(o, "\n");
    return 0;
}

static int lines_table(mt_out *o, mt_analysis *a, const mt_device_report *d, size_t top)
{
    mt_line_stat *v;
    size_t n;
    if (mt_by_line(a->frames, d, NULL, &v, &n) < 0) return -1;
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < top; i++) shown += v[i].peak_bytes > 0;
    if (shown) {
        char b1[32], b2[32], n1[48], n2[48], where[512], src[160];
        mt_src_cache sc;
        mt_src_cache_init(&sc, a);
        size_t marked = 0;
        mt_out_printf(o, "Python lines at the peak (innermost Python frame), top %zu:\n\n", shown);
        mt_out_puts(o, "| at the peak | allocated in all | line |\n|--:|--:|---|\n");
        for (size_t i = 0, k = 0; i < n && k < shown; i++) {
            if (!v[i].peak_bytes) continue;
            k++;
            snprintf(where, sizeof where, "%s:%u",
                     strcmp(v[i].file, "?") ? mt_frames_short_path(a->frames, v[i].file) : "?",
                     v[i].line);
            mt_out_printf(o, "| %s | %s | ",
                          mt_md_nbsp(mt_format_bytes(v[i].peak_bytes, b1, sizeof b1), n1, sizeof n1),
                          mt_md_nbsp(mt_format_bytes(v[i].alloc_bytes, b2, sizeof b2), n2, sizeof n2));
            mt_md_code(o, where);
            mt_out_puts(o, " in ");
            mt_md_code(o, v[i].qualname);
            const char *text = mt_source_line(&sc, v[i].file, v[i].line, src, sizeof src);
            if (text) {
                int changed = mt_source_changed(&sc);
                marked += (size_t)changed;
                mt_out_puts(o, changed ? ": (?) " : ": ");
                mt_md_code(o, text);
            }
            mt_out_puts(o, " |\n");
        }
        mt_out_puts(o, "\n");
        if (marked)
            mt_out_printf(o, "(?) %zu line%s " MT_SOURCE_CHANGED_WHY ".\n\n", marked,
                          marked == 1 ? "" : "s");
        mt_src_cache_free(&sc);
    }
    free(v);
    return 0;
}

static int failed_table(mt_out *o, mt_analysis *a, size_t top, mt_namebuf *nb)
{
    char b1[32], b2[32], t1[48], root[32], n1[48], n2[48], n3[48];
    mt_frame_filter filter = mt_frames_resolve(a->frames, MT_FRAMES_AUTO);
    mt_out_printf(o, "Failed requests: %llu", (unsigned long long)a->failed_total);
    if (a->failed_total > top && a->n_failed > top) mt_out_printf(o, " (the first %zu)", top);
    mt_out_puts(o, "\n\n| when | where | requested | result | in use then | requested by |\n"
                   "|--:|---|--:|---|--:|---|\n");
    for (size_t i = 0; i < a->n_failed && i < top; i++) {
        const mt_failed_request *f = &a->failed[i];
        mt_stack_stat self = {.stack = f->stack, .driver = f->kind == MT_KIND_DRIVER};
        if (mt_stat_frames(a->frames, &self, MT_NAME_SHORT, filter, 0, nb) < 0) return -1;
        const char *why =
            f->kind == MT_KIND_TENSOR ? "torch.OutOfMemoryError" : mt_result_name(f->result);
        mt_out_printf(o, "| %s | %s | %s | ",
                      mt_md_nbsp(mt_format_rel(f->time_ns, t1, sizeof t1), n3, sizeof n3),
                      mt_failed_root_name(f, root, sizeof root),
                      mt_md_nbsp(mt_format_bytes(f->bytes, b1, sizeof b1), n1, sizeof n1));
        if (*why)
            mt_out_printf(o, "`%s`", why);
        else
            mt_out_printf(o, "CUresult %u", f->result);
        if (f->outcome == MT_FAILED_RECOVERED) mt_out_puts(o, ", recovered");
        if (f->torch_async) mt_out_puts(o, ", then torch.OutOfMemoryError");
        if (f->outcome == MT_FAILED_RAISED && f->raised_as >= 0)
            mt_out_printf(o, ", then #%d", f->raised_as + 1);
        mt_out_puts(o, " | ");
        mt_out_printf(o, "%s | ",
                      mt_md_nbsp(mt_format_bytes(f->in_use, b2, sizeof b2), n2, sizeof n2));
        mt_md_chain(o, nb->v, nb->flags, nb->n);
        if (f->backward_stack) /* a worker of autograd's: the backward() call (backward_calls.c) */
            mt_out_printf(o, ", in the backward pass of `%s`",
                          mt_frames_first_user(a->frames, f->backward_stack, MT_NAME_SHORT));
        mt_out_puts(o, " |\n");
    }
    mt_out_puts(o, "\n");
    return 0;
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

mt_md_report *mt_md_report_begin(size_t n_traces, const mt_report_options *opt)
{
    mt_md_report *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->n_traces = n_traces;
    r->top = opt && opt->top ? opt->top : 5;
    r->rows_f = open_memstream(&r->rows, &r->rows_len);
    r->warn_f = open_memstream(&r->warn, &r->warn_len);
    if (r->rows_f) r->rows_o = mt_out_from_file(r->rows_f);
    if (r->warn_f) r->warn_o = mt_out_from_file(r->warn_f);
    if (!r->rows_o || !r->warn_o) {
        mt_md_report_end(r, NULL);
        return NULL;
    }
    return r;
}

/* record --tensors: the text report's "by category at the peak" table, without its "why" column
 * (a pull-request comment stays short; `memtrace report` explains each difference) */
static void categories_table(mt_out *o, const mt_analysis *a, const mt_device_report *d)
{
    mt_cat_table t;
    mt_category_table(a, d, &t);
    if (!t.known) return;
    char b[32], n[48];
    mt_out_printf(o, "By category at the peak, beside the textbook estimate (W = parameters%s; "
                     "optimizer: ", t.w_trained != t.w ? ", W_t = the trained ones" : "");
    mt_md_text(o, t.optimizer ? t.optimizer : "none seen");
    mt_out_puts(o, "; `memtrace report` says why each differs):\n\n"
                   "| category | at the peak | textbook | difference |\n|---|--:|--:|--:|\n");
    for (size_t i = 0; i < t.n; i++) {
        const mt_cat_row *r = &t.rows[i];
        if (i && r->outside && !t.rows[i - 1].outside) {
            mt_out_puts(o, "| **= tensors** |");
            cell_bytes(o, 1, t.tensors);
            mt_out_puts(o, " | |\n");
        }
        mt_out_puts(o, i ? "| + " : "| ");
        mt_md_text(o, r->name);
        mt_out_puts(o, " |");
        cell_bytes(o, 1, r->bytes);
        cell_bytes(o, r->has_textbook, r->textbook);
        mt_out_printf(o, " %s |\n", mt_md_nbsp(mt_format_signed(r->difference, b, sizeof b), n, sizeof n));
    }
    mt_out_puts(o, t.process_known ? "| **= process total** |" : "| **= total seen** |");
    cell_bytes(o, 1, t.measured);
    cell_bytes(o, 1, t.textbook);
    mt_out_printf(o, " %s |\n\n", mt_md_nbsp(mt_format_signed((int64_t)t.measured - (int64_t)t.textbook,
                                                                b, sizeof b), n, sizeof n));
}

int mt_md_report_add(mt_md_report *r, mt_out *o, mt_analysis *a)
{
    char label[512], root[32], t1[48];
    int several = r->n_traces > 1, rc = 0;
    if (r->added++ == 0) {
        r->title = dup_or_empty(a->cmdline[0] ? a->cmdline : a->comm[0] ? a->comm : "?");
        r->first_label = dup_or_empty(mt_trace_label(a, label, sizeof label));
        const char *slash = strrchr(a->path, '/');
        r->first_file = dup_or_empty(slash ? slash + 1 : a->path);
        if (!r->title || !r->first_label || !r->first_file) return -1;
    }
    warnings(r->warn_o, a, several);
    table_rows(r, a);
    if (!o) return 0;
    int fold = several || a->n_devices > FOLD_ABOVE;
    for (size_t k = 0; k < a->n_devices && rc == 0; k++) {
        const mt_device_report *d = &a->devices[k];
        mt_device_root_name(d, root, sizeof root);
        if (fold) {
            mt_out_printf(o, "\n<details><summary>%s", root);
            if (several) {
                mt_out_puts(o, " of ");
                mt_md_html(o, mt_trace_label(a, label, sizeof label));
            }
            mt_out_printf(o, ": what was live at the peak (%s)</summary>\n\n",
                          mt_format_rel(d->peak_time_ns, t1, sizeof t1));
        } else {
            mt_out_printf(o, "\n#### %s", root);
            if (d->name) {
                mt_out_puts(o, " (");
                mt_md_text(o, d->name);
                mt_out_puts(o, ")");
            }
            mt_out_puts(o, "\n\n");
        }
        if (d->peak_stacks.n) rc = stacks_table(o, a, d, r->top, &r->nb);
        if (rc == 0) rc = lines_table(o, a, d, r->top);
        if (rc == 0) categories_table(o, a, d);
        if (fold) mt_out_puts(o, "</details>\n");
    }
    if (rc == 0 && a->failed_total) {
        mt_out_puts(o, "\n");
        if (several) {
            mt_md_code_span(o, mt_trace_label(a, label, sizeof label));
            mt_out_puts(o, ": ");
        }
        rc = failed_table(o, a, r->top, &r->nb);
    }
    return rc;
}

int mt_md_report_end(mt_md_report *r, mt_out *o) { return mt_md_report_end_ranks(r, o, NULL, 0); }

int mt_md_report_end_ranks(mt_md_report *r, mt_out *o, const mt_rank_summary *s, size_t n)
{
    mt_report_options ro = {.top = r ? r->top : 0};
    int rc = 0;
    if (!r) return 0;
    /* closing the memory streams sets rows/warn to what was written (they stay malloc'd) */
    if (r->rows_o && mt_out_close(r->rows_o) < 0) rc = -1;
    if (r->warn_o && mt_out_close(r->warn_o) < 0) rc = -1;
    if (r->rows_f && fclose(r->rows_f) != 0) rc = -1;
    if (r->warn_f && fclose(r->warn_f) != 0) rc = -1;
    if (o && rc == 0) {
        if (r->n_traces == 1 && r->title) {
            mt_out_puts(o, "### memtrace: GPU memory of ");
            mt_md_code_span(o, r->title);
            mt_out_puts(o, "\n\n");
            mt_md_code_span(o, r->first_label);
            mt_out_puts(o, ", trace ");
            mt_md_code_span(o, r->first_file);
            mt_out_puts(o, ".\n\n");
        } else {
            mt_out_printf(o, "### memtrace: GPU memory of %zu processes\n\n", r->n_traces);
        }
        if (r->warn_len) mt_out_write(o, r->warn, r->warn_len);
        if (s && n > 1) {
            if (mt_rank_table_markdown(o, s, n, &ro) < 0) rc = -1;
            mt_out_puts(o, "#### GPUs\n\n");
        }
        if (r->n_traces > 1) mt_out_puts(o, "| trace ");
        mt_out_puts(o, "| GPU | peak | allocated peak | reserved peak | live at exit | held by the "
                       "program at exit | failed requests |\n");
        mt_out_puts(o, r->n_traces > 1 ? "|---|---|--:|--:|--:|--:|--:|--:|\n"
                                       : "|---|--:|--:|--:|--:|--:|--:|\n");
        if (r->rows_len) mt_out_write(o, r->rows, r->rows_len);
        mt_out_puts(o, "\n<sub>peak: device memory in use (memtrace's count, driver-internal "
                       "included); allocated / reserved peak: PyTorch's `max_memory_allocated()` / "
                       "`max_memory_reserved()` (for cudaMallocAsync pools: their live / reserved "
                       "bytes)");
        if (r->any_gpu && r->any_unknown_alloc)
            mt_out_puts(o, "; —: not in the trace (allocated is known when recorded with "
                           "`memtrace record --tensors`)");
        mt_out_puts(o, "; held by the program at exit: live at exit, less allocator caches, "
                       "library workspaces and the driver's own.</sub>\n");
    }
    free(r->rows);
    free(r->warn);
    free(r->title);
    free(r->first_label);
    free(r->first_file);
    mt_namebuf_free(&r->nb);
    free(r);
    return rc;
}
