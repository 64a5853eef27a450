/* `memtrace report --markdown`: a short summary for GitHub ($GITHUB_STEP_SUMMARY, pull-request
 * comments). One table of every GPU of every trace:
 *
 *   | trace | GPU | peak | allocated peak | reserved peak | live at exit | held by the program at exit | failed |
 *
 * (allocated = max_memory_allocated, known with `record --tensors`; reserved = max_memory_reserved;
 * allocator_peaks.c says where each comes from), then per GPU the top stacks live at the peak, one
 * line each, and the top Python lines at the peak, then failed requests. With more than two GPUs
 * in all, each GPU's tables fold into a <details> block so a pull-request comment stays short.
 * Strings from the trace are code spans (markdown.c).
 */
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

static void heading(mt_out *o, mt_analysis *const *a, size_t n)
{
    char label[512];
    if (n == 1) {
        mt_out_puts(o, "### memtrace: GPU memory of ");
        mt_md_code_span(o, a[0]->cmdline[0] ? a[0]->cmdline : a[0]->comm[0] ? a[0]->comm : "?");
        mt_out_puts(o, "\n\n");
        mt_out_puts(o, "Trace ");
        mt_md_code_span(o, mt_trace_label(a[0], label, sizeof label));
        mt_out_printf(o, ", pid %u", a[0]->pid);
        if (a[0]->hostname[0]) {
            mt_out_puts(o, " on ");
            mt_md_code_span(o, a[0]->hostname);
        }
        mt_out_puts(o, ".\n\n");
    } else {
        mt_out_printf(o, "### memtrace: GPU memory of %zu processes\n\n", n);
    }
}

static void warnings(mt_out *o, const mt_analysis *a, int several)
{
    char label[512], dropped[96];
    const char *what[2] = {NULL, NULL};
    if (a->truncated) what[0] = "the trace is truncated: numbers cover what was read";
    else if (!a->ended_cleanly) what[0] = "the recorder did not shut down cleanly (no END record)";
    if (a->dropped) {
        snprintf(dropped, sizeof dropped, "the recorder dropped %llu events: numbers may be off by "
                                          "that many", (unsigned long long)a->dropped);
        what[1] = dropped;
    }
    for (int i = 0; i < 2; i++) {
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

static void summary_table(mt_out *o, mt_analysis *const *a, size_t n)
{
    char label[512], root[32];
    int any_unknown_alloc = 0, any = 0;
    if (n > 1) mt_out_puts(o, "| trace ");
    mt_out_puts(o, "| GPU | peak | allocated peak | reserved peak | live at exit | held by the program "
                   "at exit | failed requests |\n");
    mt_out_puts(o, n > 1 ? "|---|---|--:|--:|--:|--:|--:|--:|\n" : "|---|--:|--:|--:|--:|--:|--:|\n");
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < a[i]->n_devices; k++) {
            const mt_device_report *d = &a[i]->devices[k];
            mt_allocator_peaks p;
            mt_allocator_peaks_of(a[i], d, &p);
            any_unknown_alloc |= !p.allocated_known;
            any = 1;
            if (n > 1) {
                mt_out_puts(o, "| ");
                mt_md_code(o, mt_trace_label(a[i], label, sizeof label));
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
        if (!a[i]->n_devices) {
            if (n > 1) {
                mt_out_puts(o, "| ");
                mt_md_code(o, mt_trace_label(a[i], label, sizeof label));
                mt_out_puts(o, " ");
            }
            mt_out_puts(o, "| no GPU memory events | | | | | | |\n");
        }
    }
    mt_out_puts(o, "\n<sub>peak: device memory in use (memtrace's count, driver-internal included); "
                   "allocated / reserved peak: PyTorch's `max_memory_allocated()` / "
                   "`max_memory_reserved()` (for cudaMallocAsync pools: their live / reserved "
                   "bytes)");
    if (any && any_unknown_alloc)
        mt_out_puts(o, "; —: not in the trace (allocated is known when recorded with "
                       "`memtrace record --tensors`)");
    mt_out_puts(o, "; held by the program at exit: live at exit, less allocator caches, library "
                   "workspaces and the driver's own.</sub>\n");
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
        mt_src_cache sc = {0};
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
                mt_out_puts(o, ": ");
                mt_md_code(o, text);
            }
            mt_out_puts(o, " |\n");
        }
        mt_out_puts(o, "\n");
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
    mt_out_puts(o, "\n\n| when | where | requested | in use then | requested by |\n"
                   "|--:|---|--:|--:|---|\n");
    for (size_t i = 0; i < a->n_failed && i < top; i++) {
        const mt_failed_request *f = &a->failed[i];
        mt_device_report probe = {.u = {.device = f->device,
                                        .is_host = f->device < 0 &&
                                                   (f->kind == MT_KIND_HOST_PINNED ||
                                                    f->kind == MT_KIND_HOST_REGISTERED)}};
        mt_stack_stat self = {.stack = f->stack, .driver = f->kind == MT_KIND_DRIVER};
        if (mt_stat_frames(a->frames, &self, MT_NAME_SHORT, filter, 0, nb) < 0) return -1;
        mt_out_printf(o, "| %s | %s | %s | %s | ",
                      mt_md_nbsp(mt_format_rel(f->time_ns, t1, sizeof t1), n3, sizeof n3),
                      mt_device_root_name(&probe, root, sizeof root),
                      mt_md_nbsp(mt_format_bytes(f->bytes, b1, sizeof b1), n1, sizeof n1),
                      mt_md_nbsp(mt_format_bytes(f->in_use, b2, sizeof b2), n2, sizeof n2));
        mt_md_chain(o, nb->v, nb->flags, nb->n);
        mt_out_puts(o, " |\n");
    }
    mt_out_puts(o, "\n");
    return 0;
}

int mt_report_markdown(mt_out *o, mt_analysis *const *a, size_t n, const mt_report_options *opt)
{
    size_t top = opt && opt->top ? opt->top : 5;
    mt_namebuf nb = {0};
    char label[512], root[32], t1[48];
    int rc = 0;
    heading(o, a, n);
    for (size_t i = 0; i < n; i++) warnings(o, a[i], n > 1);
    summary_table(o, a, n);
    size_t sections = 0;
    for (size_t i = 0; i < n; i++) sections += a[i]->n_devices;
    int fold = sections > FOLD_ABOVE;
    for (size_t i = 0; i < n && rc == 0; i++) {
        for (size_t k = 0; k < a[i]->n_devices && rc == 0; k++) {
            const mt_device_report *d = &a[i]->devices[k];
            mt_device_root_name(d, root, sizeof root);
            if (fold) {
                mt_out_printf(o, "\n<details><summary>%s", root);
                if (n > 1) {
                    mt_out_puts(o, " of ");
                    mt_md_html(o, mt_trace_label(a[i], label, sizeof label));
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
                if (n > 1) {
                    mt_out_puts(o, " of ");
                    mt_md_code_span(o, mt_trace_label(a[i], label, sizeof label));
                }
                mt_out_puts(o, "\n\n");
            }
            if (d->peak_stacks.n) rc = stacks_table(o, a[i], d, top, &nb);
            if (rc == 0) rc = lines_table(o, a[i], d, top);
            if (fold) mt_out_puts(o, "</details>\n");
        }
        if (rc == 0 && a[i]->failed_total) {
            mt_out_puts(o, "\n");
            if (n > 1) {
                mt_md_code_span(o, mt_trace_label(a[i], label, sizeof label));
                mt_out_puts(o, ": ");
            }
            rc = failed_table(o, a[i], top, &nb);
        }
    }
    mt_namebuf_free(&nb);
    return rc;
}
