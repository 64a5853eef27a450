/* `memtrace check`'s output (text, JSON, Markdown) from the verdicts of budget.c.
 *
 * Text, one line per budget and GPU, then for each one exceeded what makes the number:
 *   memtrace check: run.mtrace (pid 3618: python3 train.py)
 *     cuda:0  peak          341.71 MiB  budget 300.00 MiB  EXCEEDED by 41.71 MiB (+13.9%)
 *             live at the peak (+6.553120 s), top 5 stacks:
 *               22.0%   64.00 MiB  … › train (train.py:93) › Net.forward (train.py:45) › cuBLAS
 *     cuda:0  live at exit  0 B         budget 0 B         ok
 *   memtrace check: 1 of 2 budgets exceeded
 * Sizes are binary units; where the rounding would hide the difference (a value 100 bytes over
 * its limit) the exact bytes follow. Stacks are one line each (util.c mt_chain_pick: the user's
 * frames, operators and library) in the user view for Python programs.
 *
 * Traces come one at a time (the ranks of a job: the memory of the largest one). Text is written
 * as they come; JSON and Markdown open with the overall verdict, so what each trace adds waits in
 * a memory stream (the small parts: a trace's entry, a verdict's row) or a temporary file (the
 * stacks) until mt_check_end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_writer.h"
#include "util.h"

#define DEFAULT_TOP 5

static int is_bytes(mt_budget_kind k) { return k != MT_BUDGET_FAILED; }

/* "341.71 MiB", or a count; exact bytes added when `other` prints the same. */
static const char *amount(mt_budget_kind k, uint64_t v, uint64_t other, char *buf, size_t len)
{
    if (!is_bytes(k)) {
        snprintf(buf, len, "%llu", (unsigned long long)v);
        return buf;
    }
    char a[32], b[32];
    mt_format_bytes(v, a, sizeof a);
    mt_format_bytes(other, b, sizeof b);
    if (v != other && strcmp(a, b) == 0)
        snprintf(buf, len, "%s (%llu bytes)", a, (unsigned long long)v);
    else
        snprintf(buf, len, "%s", a);
    return buf;
}

/* "by 41.71 MiB (+13.9%)" / "41.71 MiB left" */
static const char *margin(const mt_verdict *v, char *buf, size_t len)
{
    char d[64];
    uint64_t diff = v->exceeded ? v->value - v->limit : v->limit - v->value;
    if (is_bytes(v->kind)) {
        mt_format_bytes(diff, d, sizeof d);
        if (diff < 1024 && diff)
            snprintf(d, sizeof d, "%llu byte%s", (unsigned long long)diff, diff == 1 ? "" : "s");
    } else {
        snprintf(d, sizeof d, "%llu", (unsigned long long)diff);
    }
    if (v->exceeded) {
        if (v->limit)
            snprintf(buf, len, "by %s (+%.1f%%)", d, 100.0 * (double)diff / (double)v->limit);
        else
            snprintf(buf, len, "by %s", d);
    } else {
        snprintf(buf, len, "(%s left)", d);
    }
    return buf;
}

static const char *where(const mt_verdict *v, char *buf, size_t len)
{
    if (v->d) return mt_device_root_name(v->d, buf, len);
    snprintf(buf, len, v->kind == MT_BUDGET_FAILED       ? "trace"
                       : v->kind == MT_BUDGET_OTHER_GPUS ? "(none)"
                                                         : "no GPU");
    return buf;
}

/* What the stacks of an exceeded verdict are, for headings. */
static const char *stacks_title(const mt_verdict *v, char *buf, size_t len)
{
    char t[48];
    switch (v->kind) {
    case MT_BUDGET_PEAK:
        snprintf(buf, len, "live at the peak (%s)", mt_format_rel(v->time_ns, t, sizeof t));
        break;
    case MT_BUDGET_ALLOCATED_PEAK:
        snprintf(buf, len, "tensors live at the allocated peak (%s)",
                 mt_format_rel(v->time_ns, t, sizeof t));
        break;
    case MT_BUDGET_LIVE_AT_EXIT:
        snprintf(buf, len, "held by the program at exit");
        break;
    case MT_BUDGET_OTHER_GPUS:
        snprintf(buf, len, "allocated there at its peak (%s)",
                 mt_format_rel(v->d ? v->d->peak_time_ns : 0, t, sizeof t));
        break;
    default:
        snprintf(buf, len, "the failed requests (bytes requested)");
    }
    return buf;
}

/* A note on how the value was measured, or NULL. */
static const char *value_note(const mt_analysis *a, const mt_verdict *v, char *buf, size_t len)
{
    char b1[32], b2[32];
    if (v->kind == MT_BUDGET_ALLOCATED_PEAK && v->d) {
        mt_allocator_peaks p;
        mt_allocator_peaks_of(a, v->d, &p);
        if (p.allocated_kind == MT_KIND_ASYNC)
            snprintf(buf, len, "live cudaMallocAsync bytes under backend:cudaMallocAsync "
                               "(max_memory_allocated)");
        else if (p.counter_peak != p.allocated_peak)
            snprintf(buf, len, "PyTorch's own counter read %s, the tensors memtrace saw peaked at "
                               "%s: a report was missed, the larger is checked",
                     mt_format_bytes(p.counter_peak, b1, sizeof b1),
                     mt_format_bytes(p.allocated_peak, b2, sizeof b2));
        else
            snprintf(buf, len, "live tensors, equal to PyTorch's max_memory_allocated");
        return buf;
    }
    if (v->kind == MT_BUDGET_LIVE_AT_EXIT && v->d && v->d->u.in_use > v->value) {
        snprintf(buf, len, "of %s live at exit; the rest is an allocator's cache, libraries' "
                           "workspaces or the driver's, kept until exit by design",
                 mt_format_bytes(v->d->u.in_use, b1, sizeof b1));
        return buf;
    }
    if (v->kind == MT_BUDGET_OTHER_GPUS) {
        const mt_device_report *own = mt_own_gpu(a, NULL);
        char o[40] = "";
        if (own) snprintf(o, sizeof o, "; its own GPU is cuda:%d", (int)own->u.device);
        if (!v->d)
            snprintf(buf, len, "no GPU but its own holds its memory, of those checked%s", o);
        else if (v->counter && v->counter == v->value)
            snprintf(buf, len, "NVML's largest sample of the process there, its CUDA context "
                               "included; %s allocated%s",
                     mt_format_bytes(v->d->u.peak, b1, sizeof b1), o);
        else
            snprintf(buf, len, "allocated there at its peak%s%s", v->counter ? "" : " (no NVML "
                                                                               "sample: its CUDA "
                                                                               "context not "
                                                                               "counted)", o);
        return buf;
    }
    if (v->kind != MT_BUDGET_FAILED && !v->d) {
        snprintf(buf, len, "the trace has no GPU memory events");
        return buf;
    }
    return NULL;
}

static size_t top_of(const mt_check_options *opt) { return opt->top ? opt->top : DEFAULT_TOP; }

static int text_stacks(mt_out *o, mt_analysis *a, const mt_verdict *v, size_t top, mt_namebuf *nb)
{
    char title[96], b1[32], line[2048];
    mt_frame_filter filter = mt_frames_resolve(a->frames, MT_FRAMES_AUTO);
    mt_out_printf(o, "          %s, top %zu stack%s%s:\n", stacks_title(v, title, sizeof title),
                  top < v->stacks.n ? top : v->stacks.n, v->stacks.n == 1 ? "" : "s",
                  filter == MT_FRAMES_USER ? " (user view)" : "");
    for (size_t i = 0; i < v->stacks.n && i < top; i++) {
        const mt_stack_stat *s = &v->stacks.v[i];
        if (mt_stat_frames(a->frames, s, MT_NAME_SHORT, filter, 0, nb) < 0) return -1;
        double share = v->stacks_whole ? 100.0 * (double)s->bytes / (double)v->stacks_whole : 0;
        mt_out_printf(o, "            %5.1f%%  %10s  %s\n", share,
                      mt_format_bytes(s->bytes, b1, sizeof b1),
                      mt_chain_text(nb->v, nb->flags, nb->n, line, sizeof line));
    }
    if (v->stacks.n > top)
        mt_out_printf(o, "            [%zu more stack%s]\n", v->stacks.n - top,
                      v->stacks.n - top == 1 ? "" : "s");
    return 0;
}


struct mt_check_stream {
    mt_out *o;
    mt_check_options opt;
    size_t total, exceeded;
    mt_namebuf nb;
    /* JSON: A = "traces" elements, B = "checks" elements; Markdown: A = the table's rows,
     * B = the sections of the budgets exceeded, C = warnings */
    FILE *fa, *fc, *fb;
    char *a, *c;
    size_t a_len, c_len;
    mt_out *oa, *ob, *oc;
    mt_json ja, jb;
};

static void trace_line(char *buf, size_t len, const mt_analysis *a)
{
    char label[512];
    const char *slash = strrchr(a->path, '/');
    snprintf(buf, len, "%s (%s%s%s)", slash ? slash + 1 : a->path,
             mt_trace_label(a, label, sizeof label), a->cmdline[0] || a->comm[0] ? ": " : "",
             a->cmdline[0] ? a->cmdline : a->comm);
}

/* ---- text ---------------------------------------------------------------------------------------- */

static int text_trace(mt_check_stream *s, mt_analysis *a, const mt_verdict *vs, size_t n)
{
    mt_out *o = s->o;
    char line[1024], root[32], v1[64], v2[64], m[96], note[256];
    int rc = 0;
    trace_line(line, sizeof line, a);
    mt_out_printf(o, "memtrace check: %s\n", line);
    if (a->truncated)
        mt_out_printf(o, "  WARNING: the trace is truncated (%s): numbers cover what was read\n",
                      a->truncated_msg ? a->truncated_msg : "?");
    if (a->dropped)
        mt_out_printf(o, "  WARNING: the recorder dropped %llu events: numbers may be off by that "
                         "many events\n", (unsigned long long)a->dropped);
    if (mt_activity_missing(a, note, sizeof note)) mt_out_printf(o, "  NOTE: %s\n", note);
    for (size_t k = 0; k < n && rc == 0; k++) {
        const mt_verdict *v = &vs[k];
        mt_out_printf(o, "  %-7s %-15s %-12s budget %-12s %s %s\n", where(v, root, sizeof root),
                      mt_budget_name(v->kind), amount(v->kind, v->value, v->limit, v1, sizeof v1),
                      amount(v->kind, v->limit, v->value, v2, sizeof v2),
                      v->exceeded ? "EXCEEDED" : "ok", margin(v, m, sizeof m));
        if (value_note(a, v, note, sizeof note)) mt_out_printf(o, "          (%s)\n", note);
        if (v->exceeded && v->stacks.n) rc = text_stacks(o, a, v, top_of(&s->opt), &s->nb);
    }
    return rc;
}

static void text_end(mt_check_stream *s)
{
    if (s->exceeded)
        mt_out_printf(s->o, "memtrace check: %zu of %zu budget%s exceeded\n", s->exceeded, s->total,
                      s->total == 1 ? "" : "s");
    else
        mt_out_printf(s->o, s->total == 1 ? "memtrace check: the budget holds\n"
                                          : "memtrace check: all %zu budgets hold\n", s->total);
}

/* ---- JSON ---------------------------------------------------------------------------------------- */

static void json_limit(mt_json *j, const char *key, const mt_budgets *b, mt_budget_kind k)
{
    if (b && b->set[k]) mt_json_u64(j, key, b->limit[k]);
    else mt_json_null(j, key);
}

/* [{bytes, count, share, first_user_frame, frames}] as in `report --json`. */
static int json_stacks(mt_json *j, mt_analysis *a, const mt_verdict *v, size_t top, mt_namebuf *nb)
{
    mt_frame_filter filter = mt_frames_resolve(a->frames, MT_FRAMES_AUTO);
    mt_json_array(j, "stacks");
    for (size_t i = 0; i < v->stacks.n && i < top; i++) {
        const mt_stack_stat *s = &v->stacks.v[i];
        if (mt_stat_frames(a->frames, s, MT_NAME_SHORT, filter, 0, nb) < 0) return -1;
        mt_json_object(j, NULL);
        mt_json_u64(j, "bytes", s->bytes);
        mt_json_u64(j, "count", s->count);
        mt_json_double(j, "share", v->stacks_whole ? (double)s->bytes / (double)v->stacks_whole : 0);
        mt_json_str(j, "first_user_frame",
                    s->driver ? nb->v[0] : mt_frames_first_user(a->frames, s->stack, MT_NAME_SHORT));
        mt_json_array(j, "frames");
        for (size_t k = 0; k < nb->n; k++) mt_json_str(j, NULL, nb->v[k]);
        mt_json_end(j, ']');
        mt_json_end(j, '}');
    }
    mt_json_end(j, ']');
    return 0;
}

static int json_trace(mt_check_stream *s, mt_analysis *a, const mt_verdict *vs, size_t n)
{
    char label[512], root[32];
    int any = 0, rc = 0;
    for (size_t k = 0; k < n; k++) any |= vs[k].exceeded;
    mt_json *j = &s->ja;
    mt_json_object(j, NULL);
    mt_json_str(j, "trace", a->path);
    mt_json_str(j, "label", mt_trace_label(a, label, sizeof label));
    mt_json_u64(j, "pid", a->pid);
    mt_json_str(j, "command", a->comm);
    mt_json_str(j, "cmdline", a->cmdline);
    mt_json_bool(j, "truncated", a->truncated);
    mt_json_u64(j, "dropped", a->dropped);
    mt_json_str(j, "activity_records", mt_activity_name(a->activity)); /* report --json's */
    mt_json_bool(j, "exceeded", any);
    mt_json_end(j, '}');
    j = &s->jb;
    for (size_t k = 0; k < n && rc == 0; k++) {
        const mt_verdict *v = &vs[k];
        mt_json_object(j, NULL);
        mt_json_str(j, "trace", a->path);
        mt_json_str(j, "label", label);
        mt_json_str(j, "budget", mt_budget_name(v->kind));
        if (v->d) {
            mt_json_i64(j, "device", v->d->u.device);
            mt_json_str(j, "root", mt_device_root_name(v->d, root, sizeof root));
        } else {
            mt_json_null(j, "device");
            mt_json_null(j, "root");
        }
        mt_json_u64(j, "value", v->value);
        mt_json_u64(j, "limit", v->limit);
        mt_json_bool(j, "exceeded", v->exceeded);
        mt_json_u64(j, "over_by", v->exceeded ? v->value - v->limit : 0);
        if (v->kind != MT_BUDGET_FAILED && v->d) mt_json_u64(j, "time_ns", v->time_ns);
        else mt_json_null(j, "time_ns");
        if (v->kind == MT_BUDGET_ALLOCATED_PEAK) mt_json_u64(j, "torch_allocated_peak_bytes", v->counter);
        rc = json_stacks(j, a, v, top_of(&s->opt), &s->nb);
        mt_json_end(j, '}');
    }
    return rc;
}

static int json_end(mt_check_stream *s, FILE *fb)
{
    mt_json j = {.o = s->o};
    const mt_budgets *b = s->opt.budgets;
    mt_json_object(&j, NULL);
    mt_json_u64(&j, "schema", MT_JSON_SCHEMA);
    mt_json_bool(&j, "exceeded", s->exceeded != 0);
    mt_json_u64(&j, "budgets_checked", s->total);
    mt_json_u64(&j, "budgets_exceeded", s->exceeded);
    mt_json_object(&j, "budgets");
    json_limit(&j, "peak_bytes", b, MT_BUDGET_PEAK);
    json_limit(&j, "allocated_peak_bytes", b, MT_BUDGET_ALLOCATED_PEAK);
    json_limit(&j, "live_at_exit_bytes", b, MT_BUDGET_LIVE_AT_EXIT);
    json_limit(&j, "failed_requests", b, MT_BUDGET_FAILED);
    json_limit(&j, "other_gpu_bytes", b, MT_BUDGET_OTHER_GPUS);
    if (b && b->device != MT_BUDGET_ALL_DEVICES) mt_json_i64(&j, "device", b->device);
    else mt_json_null(&j, "device");
    mt_json_end(&j, '}');
    mt_json_array(&j, "traces");
    mt_out_write(s->o, s->a, s->a_len);
    mt_json_end(&j, ']');
    mt_json_array(&j, "checks");
    int rc = mt_copy_file(s->o, fb);
    mt_json_end(&j, ']');
    mt_json_end(&j, '}');
    return rc;
}

/* ---- Markdown ------------------------------------------------------------------------------------ */

static int md_trace(mt_check_stream *s, mt_analysis *a, const mt_verdict *vs, size_t n)
{
    char label[512], root[32], v1[64], v2[64], m[96], title[96], b1[32], note[256], n1[96], n2[96];
    int rc = 0;
    mt_trace_label(a, label, sizeof label);
    for (size_t k = 0; k < n; k++) {
        const mt_verdict *v = &vs[k];
        mt_out_puts(s->oa, "| ");
        mt_md_code(s->oa, label);
        mt_out_printf(s->oa, " | %s | %s | %s | %s | %s %s |\n", where(v, root, sizeof root),
                      mt_budget_name(v->kind),
                      mt_md_nbsp(amount(v->kind, v->limit, v->value, v2, sizeof v2), n2, sizeof n2),
                      mt_md_nbsp(amount(v->kind, v->value, v->limit, v1, sizeof v1), n1, sizeof n1),
                      v->exceeded ? "❌ exceeded" : "✅", margin(v, m, sizeof m));
    }
    char why[256];
    if (mt_activity_missing(a, why, sizeof why)) {
        mt_out_puts(s->oc, "> ⚠️ ");
        mt_md_code_span(s->oc, label);
        mt_out_puts(s->oc, ": ");
        mt_md_text(s->oc, why);
        mt_out_puts(s->oc, ".\n\n");
    }
    if (a->truncated || a->dropped) {
        mt_out_puts(s->oc, "> ⚠️ ");
        mt_md_code_span(s->oc, label);
        mt_out_puts(s->oc, a->truncated ? " is truncated: numbers cover what was read.\n\n"
                                        : " lost events (the recorder dropped some): numbers may be "
                                          "off by that many events.\n\n");
    }
    mt_frame_filter filter = mt_frames_resolve(a->frames, MT_FRAMES_AUTO);
    mt_out *o = s->ob;
    size_t top = top_of(&s->opt);
    for (size_t k = 0; k < n && rc == 0; k++) {
        const mt_verdict *v = &vs[k];
        if (!v->exceeded) continue;
        mt_out_puts(o, "\n**");
        mt_md_code_span(o, label);
        mt_out_printf(o, " %s, %s: %s**", where(v, root, sizeof root), mt_budget_name(v->kind),
                      stacks_title(v, title, sizeof title));
        if (value_note(a, v, note, sizeof note)) {
            mt_out_puts(o, " (");
            mt_md_text(o, note);
            mt_out_puts(o, ")");
        }
        mt_out_puts(o, "\n\n");
        if (!v->stacks.n) continue;
        mt_out_puts(o, "| share | bytes | stack |\n|--:|--:|---|\n");
        for (size_t i = 0; i < v->stacks.n && i < top; i++) {
            const mt_stack_stat *st = &v->stacks.v[i];
            if (mt_stat_frames(a->frames, st, MT_NAME_SHORT, filter, 0, &s->nb) < 0) {
                rc = -1;
                break;
            }
            mt_out_printf(o, "| %.1f%% | %s | ",
                          v->stacks_whole ? 100.0 * (double)st->bytes / (double)v->stacks_whole : 0,
                          mt_md_nbsp(mt_format_bytes(st->bytes, b1, sizeof b1), n1, sizeof n1));
            mt_md_chain(o, s->nb.v, s->nb.flags, s->nb.n);
            mt_out_puts(o, " |\n");
        }
        if (v->stacks.n > top)
            mt_out_printf(o, "| | | %zu more stack%s |\n", v->stacks.n - top,
                          v->stacks.n - top == 1 ? "" : "s");
    }
    return rc;
}

static int md_end(mt_check_stream *s, FILE *fb)
{
    mt_out *o = s->o;
    if (s->exceeded)
        mt_out_printf(o, "### memtrace check: ❌ %zu of %zu budget%s exceeded\n\n", s->exceeded,
                      s->total, s->total == 1 ? "" : "s");
    else
        mt_out_printf(o, s->total == 1 ? "### memtrace check: ✅ the budget holds\n\n"
                                       : "### memtrace check: ✅ all %zu budgets hold\n\n", s->total);
    mt_out_write(o, s->c, s->c_len);
    mt_out_puts(o, "| trace | GPU | budget | limit | value | verdict |\n|---|---|---|--:|--:|---|\n");
    mt_out_write(o, s->a, s->a_len);
    return mt_copy_file(o, fb);
}

/* ---- the stream ---------------------------------------------------------------------------------- */

mt_check_stream *mt_check_begin(mt_out *o, const mt_check_options *opt)
{
    mt_check_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = o;
    if (opt) s->opt = *opt;
    if (s->opt.format == MT_FORMAT_TEXT) return s;
    s->fa = open_memstream(&s->a, &s->a_len);
    s->fc = open_memstream(&s->c, &s->c_len);
    s->fb = tmpfile();
    if (s->fa) s->oa = mt_out_from_file(s->fa);
    if (s->fc) s->oc = mt_out_from_file(s->fc);
    if (s->fb) s->ob = mt_out_from_file(s->fb);
    if (!s->oa || !s->ob || !s->oc) {
        mt_check_end(s, 0);
        return NULL;
    }
    /* the elements of two JSON arrays: depth 1, commas between them */
    s->ja = (mt_json){.o = s->oa, .depth = 1};
    s->jb = (mt_json){.o = s->ob, .depth = 1};
    return s;
}

int mt_check_add(mt_check_stream *s, mt_analysis *a, const mt_verdict *v, size_t n)
{
    for (size_t k = 0; k < n; k++) s->exceeded += v[k].exceeded != 0;
    s->total += n;
    switch (s->opt.format) {
    case MT_FORMAT_JSON: return json_trace(s, a, v, n);
    case MT_FORMAT_MARKDOWN: return md_trace(s, a, v, n);
    default: return text_trace(s, a, v, n);
    }
}

int mt_check_end(mt_check_stream *s, int finish)
{
    int rc = 0;
    if (!s) return 0;
    if (s->oa && mt_out_close(s->oa) < 0) rc = -1;
    if (s->oc && mt_out_close(s->oc) < 0) rc = -1;
    if (s->ob && mt_out_close(s->ob) < 0) rc = -1;
    if (s->fa && fclose(s->fa) != 0) rc = -1;
    if (s->fc && fclose(s->fc) != 0) rc = -1;
    if (rc == 0 && finish) {
        if (s->opt.format == MT_FORMAT_TEXT) text_end(s);
        else if (s->opt.format == MT_FORMAT_JSON) rc = json_end(s, s->fb);
        else rc = md_end(s, s->fb);
    }
    if (s->fb) fclose(s->fb);
    free(s->a);
    free(s->c);
    mt_namebuf_free(&s->nb);
    free(s);
    return rc;
}
