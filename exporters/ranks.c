/* The rank table: several traces of one job side by side (report's first section when given more
 * than one trace), and what makes the largest rank larger than the median one. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* Wall-clock time of day in UTC with microseconds: ranks of one job compare on it. */
static const char *clock_of(uint64_t unix_ns, char *buf, size_t len)
{
    time_t s = (time_t)(unix_ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(buf, len, "%02d:%02d:%02d.%06llu", tm.tm_hour, tm.tm_min, tm.tm_sec,
             (unsigned long long)(unix_ns % 1000000000ull / 1000));
    return buf;
}

static const char *rank_name(const mt_rank_summary *r, char *buf, size_t len)
{
    if (r->has_rank) snprintf(buf, len, "rank %d", (int)r->rank);
    else snprintf(buf, len, "%s", r->label);
    return buf;
}

/* The stack's names joined by " > " (root first), the innermost kept when it is too long. len is
 * the caller's line (200 bytes): it must leave room for "... > " and a character or more. */
static const char *tail_of(const char *joined, char *buf, size_t len)
{
    char wide[4096];
    size_t o = 0;
    for (const char *p = joined; *p && o + 4 < sizeof wide; p++) {
        if (*p == ';') {
            memcpy(wide + o, " > ", 3);
            o += 3;
        } else {
            wide[o++] = *p;
        }
    }
    wide[o] = 0;
    static const char more[] = "... > ";
    const size_t more_n = sizeof more - 1;
    const char *p = wide;
    if (o + 1 > len) {
        /* room for "... > ", the tail and the NUL (len - 6 chars of tail cut the tail's last
         * character when no " > " followed the cut) */
        p = wide + o - (len - 1 - more_n);
        const char *cut = strstr(p, " > ");
        if (cut) p = cut + 3;
    }
    /* copied by length: the bound is the one above, which a compiler inlining this into a caller
     * with a larger buffer could not see (-Wformat-truncation on snprintf("%s%s")) */
    size_t head = p == wide ? 0 : more_n, n = strlen(p);
    if (head + n + 1 > len) n = len - 1 - head;
    memcpy(buf, more, head);
    memcpy(buf + head, p, n);
    buf[head + n] = 0;
    return buf;
}

/* The imbalance of n > 1 ranks as one line after `lead` ("max B (rank), median ..., min ...;
 * max/median X"), and the stack diff of the largest rank against the median (*d, *nd; NULL when
 * the two peaks are equal or the ranks are the same). 0 when there is nothing to say (fewer than
 * two ranks), 1 when the line was written, -1 on error. Shared by the text and Markdown tables. */
static int imbalance(mt_out *o, const mt_rank_summary *s, size_t n, const char *lead,
                     const char *end, const mt_rank_summary **hi_out,
                     const mt_rank_summary **med_out, mt_named_diff **d, size_t *nd)
{
    *d = NULL;
    *nd = 0;
    mt_imbalance im;
    if (n < 2 || mt_rank_imbalance(s, n, &im) < 0) return 0;
    const mt_rank_summary *hi = &s[im.max], *med = &s[im.median], *lo = &s[im.min];
    char b1[32], b2[32], b3[32], w1[64], w2[64], w3[64];
    mt_out_printf(o, "%smax %s (%s), median %s (%s), min %s (%s)", lead,
                  mt_format_bytes(hi->peak, b1, sizeof b1), rank_name(hi, w1, sizeof w1),
                  mt_format_bytes(med->peak, b2, sizeof b2), rank_name(med, w2, sizeof w2),
                  mt_format_bytes(lo->peak, b3, sizeof b3), rank_name(lo, w3, sizeof w3));
    if (med->peak) mt_out_printf(o, "; max/median %.3f", (double)hi->peak / (double)med->peak);
    mt_out_puts(o, end);
    *hi_out = hi;
    *med_out = med;
    if (im.max == im.median || hi->peak == med->peak) return 1;
    return mt_rank_stack_diff(hi, med, d, nd) < 0 ? -1 : 1;
}

/* Index of the rank whose torch.OutOfMemoryError came first on the wall clock, or -1. */
static long first_oom(const mt_rank_summary *s, size_t n)
{
    long first = -1;
    for (size_t i = 0; i < n; i++)
        if (s[i].has_oom && (first < 0 || s[i].oom_unix_ns < s[first].oom_unix_ns)) first = (long)i;
    return first;
}

#define ENDING_OOMS 8 /* then "... and N more" */

/* The ranks that raised torch.OutOfMemoryError in the order they did (the first is what ended the
 * job: torchrun kills the other ranks when one fails), at most ENDING_OOMS, then those whose trace
 * has no END (util.h). */
size_t mt_rank_ending_lines(const mt_rank_summary *s, size_t n, char line[][MT_RANK_ENDING_LEN])
{
    size_t k = 0, n_oom = 0;
    char who[64], t[48], b1[32], b2[32];
    long first = first_oom(s, n);
    /* the first ENDING_OOMS ranks to raise it, in time order (insertion into a short list) */
    size_t order[ENDING_OOMS];
    for (size_t i = 0; i < n; i++) {
        if (!s[i].has_oom) continue;
        size_t j = n_oom < ENDING_OOMS ? n_oom : ENDING_OOMS;
        while (j > 0 && s[order[j - 1]].oom_unix_ns > s[i].oom_unix_ns) {
            if (j < ENDING_OOMS) order[j] = order[j - 1];
            j--;
        }
        if (j < ENDING_OOMS) order[j] = i;
        n_oom++;
    }
    size_t shown = n_oom < ENDING_OOMS ? n_oom : ENDING_OOMS, more = n_oom - shown;
    for (size_t x = 0; x < shown; x++) {
        const mt_rank_summary *r = &s[order[x]];
        snprintf(line[k++], MT_RANK_ENDING_LEN,
                 "%s %s at %s%s, %s on cuda:%d with %s allocated, in %s%s%s",
                 x ? "then" : "torch.OutOfMemoryError:", rank_name(r, who, sizeof who),
                 clock_of(r->oom_unix_ns, t, sizeof t), x ? "" : " (the first)",
                 mt_format_bytes(r->oom_bytes, b1, sizeof b1), (int)r->oom_device,
                 mt_format_bytes(r->oom_allocated, b2, sizeof b2), r->oom_frame,
                 r->oom_backward_call ? " in the backward pass of " : "",
                 r->oom_backward_call ? r->oom_backward_call : "");
    }
    if (more) snprintf(line[k++], MT_RANK_ENDING_LEN, "... and %zu more ranks raised it", more);
    size_t cut = 0, o = 0;
    char names[400] = "";
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].ended_cleanly) continue;
        if (o + 80 < sizeof names)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "",
                                  rank_name(&s[i], who, sizeof who));
        else
            cut++;
        if (first >= 0) {
            uint64_t e = s[i].end_unix_ns, f = s[first].oom_unix_ns;
            uint64_t d = e > f ? e - f : 0;
            if (d < lo) lo = d;
            if (d > hi) hi = d;
        }
    }
    if (!o) return k;
    if (cut) snprintf(names + o, sizeof names - o, " and %zu more", cut);
    if (first >= 0 && lo == hi)
        snprintf(line[k++], MT_RANK_ENDING_LEN,
                 "no END record (killed, or still recording): %s; its last event "
                 "comes %.3f s after the first torch.OutOfMemoryError",
                 names, (double)lo / 1e9);
    else if (first >= 0)
        snprintf(line[k++], MT_RANK_ENDING_LEN,
                 "no END record (killed, or still recording): %s; their last "
                 "events come %.3f-%.3f s after the first torch.OutOfMemoryError",
                 names, (double)lo / 1e9, (double)hi / 1e9);
    else
        snprintf(line[k++], MT_RANK_ENDING_LEN, "no END record (killed, or still recording): %s",
                 names);
    return k;
}

#define FOREIGN_SHOWN 8 /* then "... and N more" */

static const mt_rank_gpu *own_gpu(const mt_rank_summary *r)
{
    for (size_t g = 0; g < r->n_gpus; g++)
        if (r->gpus[g].own) return &r->gpus[g];
    return NULL;
}

/* "rank 1 holds memory on cuda:0, rank 0's GPU (its own is cuda:1): 1.14 GiB by NVML, its CUDA
 * context included; 256.00 MiB allocated at its peak there, the most by load_checkpoint
 * (samples/ddp.py:39)": NVML's number is what nvidia-smi shows of that process on that GPU, the
 * context the trace cannot see included. */
static void foreign_line(const mt_rank_summary *s, const mt_rank_foreign *f, char *line)
{
    const mt_rank_summary *r = &s[f->rank];
    const mt_rank_gpu *g = &r->gpus[f->gpu], *own = own_gpu(r);
    char who[64], whose[80], mine[40], b1[32], b2[32], seen[200];
    if (f->owner >= 0)
        snprintf(whose, sizeof whose, "%s's GPU", rank_name(&s[f->owner], who, sizeof who));
    else
        snprintf(whose, sizeof whose, "no rank's own GPU");
    if (own)
        snprintf(mine, sizeof mine, " (its own is cuda:%d)", (int)own->device);
    else
        mine[0] = 0;
    if (g->driver_only && !g->peak) /* NVML's samples alone: a context made there */
        snprintf(seen, sizeof seen, "a CUDA context alone, nothing allocated");
    else if (g->driver_only)
        snprintf(seen, sizeof seen,
                 "a CUDA context, no allocation (%s of the driver's static memory)",
                 mt_format_bytes(g->peak, b2, sizeof b2));
    else
        snprintf(seen, sizeof seen, "%s allocated at its peak there, the most by %s",
                 mt_format_bytes(g->peak, b2, sizeof b2), g->top_frame ? g->top_frame : "?");
    if (g->nvml_max)
        snprintf(line, MT_RANK_ENDING_LEN,
                 "%s holds memory on cuda:%d, %s%s: %s by NVML, its "
                 "CUDA context included; %s",
                 rank_name(r, who, sizeof who), (int)g->device, whose, mine,
                 mt_format_bytes(g->nvml_max, b1, sizeof b1), seen);
    else
        snprintf(line, MT_RANK_ENDING_LEN,
                 "%s holds memory on cuda:%d, %s%s: %s (no NVML "
                 "sample: its CUDA context is not counted)",
                 rank_name(r, who, sizeof who), (int)g->device, whose, mine, seen);
}

long mt_rank_foreign_lines(const mt_rank_summary *s, size_t n, char line[][MT_RANK_ENDING_LEN])
{
    mt_rank_foreign *f;
    size_t nf;
    if (mt_rank_foreign_gpus(s, n, &f, &nf) < 0) return -1;
    size_t k = 0;
    for (size_t i = 0; i < nf && i < FOREIGN_SHOWN; i++)
        foreign_line(s, &f[i], line[k++]);
    if (nf > FOREIGN_SHOWN)
        snprintf(line[k++], MT_RANK_ENDING_LEN, "... and %zu more ranks' GPUs", nf - FOREIGN_SHOWN);
    /* the GPU that the most ranks hold memory on, when several do (the ranks' usual GPU 0): what
     * they hold there together, as NVML's largest samples summed (taken at different times: at
     * most that much at once). A GPU with an owner is that rank's own GPU, one GPU whatever
     * ordinal each rank sees it by, so the entries are grouped by owner. */
    size_t best = nf, best_count = 1;
    for (size_t i = 0; i < nf; i++) {
        if (f[i].owner < 0) continue;
        size_t count = 0;
        for (size_t j = 0; j < nf; j++) count += f[j].owner == f[i].owner;
        if (count > best_count) best = i, best_count = count;
    }
    if (best < nf) {
        const mt_rank_foreign *b = &f[best];
        const mt_rank_gpu *owners = own_gpu(&s[b->owner]); /* not NULL: it owns this GPU */
        int32_t dev = owners->device;
        uint64_t nvml = 0, seen = 0;
        size_t without = 0;
        for (size_t j = 0; j < nf; j++) {
            const mt_rank_gpu *g = &s[f[j].rank].gpus[f[j].gpu];
            if (f[j].owner != b->owner) continue;
            nvml += g->nvml_max;
            seen += g->peak;
            without += !g->nvml_max;
        }
        char who[64], b1[32], b2[32];
        snprintf(line[k++], MT_RANK_ENDING_LEN,
                 "on cuda:%d, %s's GPU, %zu other ranks hold up to "
                 "%s by NVML (%s allocated)%s: each rank's largest, summed",
                 (int)dev, rank_name(&s[b->owner], who, sizeof who), best_count,
                 mt_format_bytes(nvml, b1, sizeof b1), mt_format_bytes(seen, b2, sizeof b2),
                 without ? ", some without NVML samples" : "");
    }
    free(f);
    return (long)k;
}

size_t mt_rank_activity_line(const mt_rank_summary *s, size_t n, char *line)
{
    char who[64], names[400] = "";
    size_t o = 0, cut = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].activity == MT_ACTIVITY_ON) continue;
        k++;
        if (o + 80 < sizeof names)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "",
                                  rank_name(&s[i], who, sizeof who));
        else
            cut++;
    }
    if (!k) return 0;
    if (cut) snprintf(names + o, sizeof names - o, " and %zu more", cut);
    snprintf(line, MT_RANK_ENDING_LEN,
             "driver-internal allocations and CUDA arrays not recorded: %s; %s peaks leave them "
             "out (CUPTI's activity records were off, refused, or taken mid-run by another "
             "client: each trace's report says which)",
             names, k > 1 ? "their" : "its");
    return 1;
}

#define NOTE_LINES (MT_RANK_ENDING_LINES + 1 + MT_RANK_FOREIGN_LINES)

/* The sentences under the rank table: how the job ended, what some traces lack, then memory on
 * other ranks' GPUs. How many; -1 out of memory. */
static long note_lines(const mt_rank_summary *s, size_t n, char line[][MT_RANK_ENDING_LEN])
{
    size_t ne = mt_rank_ending_lines(s, n, line);
    ne += mt_rank_activity_line(s, n, line[ne]);
    long nf = mt_rank_foreign_lines(s, n, line + ne);
    return nf < 0 ? -1 : (long)ne + nf;
}

size_t mt_rank_notes_text(mt_out *o, const mt_rank_summary *s, size_t n, const char *indent)
{
    char lines[NOTE_LINES][MT_RANK_ENDING_LEN];
    long nl = note_lines(s, n, lines);
    if (nl < 0) return 0; /* out of memory: the table goes on without them */
    for (long i = 0; i < nl; i++)
        mt_out_printf(o, "%s%s\n", indent, lines[i]);
    return nl;
}

int mt_rank_table_text(mt_out *o, const mt_rank_summary *s, size_t n, const mt_report_options *opt)
{
    size_t top = opt && opt->top ? opt->top : 10;
    char b1[32], b2[32], b3[32], t[48], who[64];
    int32_t world = -1;
    for (size_t i = 0; i < n; i++)
        if (s[i].world_size > world) world = s[i].world_size;
    mt_out_printf(o, "ranks: %zu traces", n);
    if (world > 0) mt_out_printf(o, " (world size %d)", (int)world);
    mt_out_puts(o, "; peaks per rank on its GPU with the largest, times on one wall clock (UTC)\n");
    mt_out_printf(o, "  %-10s %-16s %8s %-7s %11s %11s %-15s %11s %6s  %s\n", "rank", "host", "pid",
                  "GPUs", "peak", "tensors", "peak at", "at exit", "failed",
                  "top stack at the peak");
    for (size_t i = 0; i < n; i++) {
        const mt_rank_summary *r = &s[i];
        char frame[96];
        snprintf(frame, sizeof frame, "%s", r->top_frame ? r->top_frame : "-");
        mt_out_printf(o, "  %-10s %-16.16s %8u %-7.7s %11s %11s %-15s %11s %6llu  %s",
                      rank_name(r, who, sizeof who), r->host[0] ? r->host : "?", (unsigned)r->pid,
                      r->devices[0] ? r->devices : "-", mt_format_bytes(r->peak, b1, sizeof b1),
                      r->tensor_peak ? mt_format_bytes(r->tensor_peak, b2, sizeof b2) : "-",
                      r->peak ? clock_of(r->peak_unix_ns, t, sizeof t) : "-",
                      mt_format_bytes(r->live_at_exit, b3, sizeof b3),
                      (unsigned long long)r->failed, frame);
        if (r->top_bytes && r->peak)
            mt_out_printf(o, " (%.0f%%)", 100.0 * (double)r->top_bytes / (double)r->peak);
        mt_out_puts(o, "\n");
    }
    mt_rank_notes_text(o, s, n, "  ");
    const mt_rank_summary *hi, *med;
    mt_named_diff *d;
    size_t nd;
    int said = imbalance(o, s, n, "  imbalance: ", "\n", &hi, &med, &d, &nd);
    if (said <= 0 || !d) return said < 0 ? -1 : 0;
    char w1[64], w2[64];
    mt_out_printf(o, "  %s against %s (the median), stacks at their peaks that differ most:\n",
                  rank_name(hi, w1, sizeof w1), rank_name(med, w2, sizeof w2));
    char line[200];
    size_t shown = 0;
    for (size_t i = 0; i < nd && shown < top; i++) {
        if (d[i].delta <= 0) break;
        char sign[40];
        snprintf(sign, sizeof sign, "+%s", mt_format_bytes((uint64_t)d[i].delta, b1, sizeof b1));
        mt_out_printf(o, "    %11s  %11s vs %-11s %s\n", sign, mt_format_bytes(d[i].a, b2, sizeof b2),
                      mt_format_bytes(d[i].b, b3, sizeof b3), tail_of(d[i].name, line, sizeof line));
        shown++;
    }
    if (!shown) mt_out_puts(o, "    (no stack is larger: the difference is spread thinly)\n");
    free(d);
    return 0;
}

static void jstr(mt_out *o, const char *k, const char *v, int comma)
{
    mt_out_printf(o, "\"%s\":", k);
    mt_out_json_string(o, v ? v : "");
    if (comma) mt_out_write(o, ",", 1);
}

static void jint(mt_out *o, const char *k, long long v, int comma)
{
    mt_out_printf(o, "\"%s\":%lld%s", k, v, comma ? "," : "");
}

static void jnames(mt_out *o, const char *joined) /* "a;b;c" -> ["a","b","c"] */
{
    mt_out_write(o, "[", 1);
    const char *p = joined;
    for (int first = 1; *p; first = 0) {
        const char *semi = strchr(p, ';');
        size_t n = semi ? (size_t)(semi - p) : strlen(p);
        char *name = strndup(p, n);
        if (!first) mt_out_write(o, ",", 1);
        mt_out_json_string(o, name ? name : "");
        free(name);
        p += n + (semi != NULL);
    }
    mt_out_write(o, "]", 1);
}

int mt_rank_table_json(mt_out *o, const mt_rank_summary *s, size_t n, const mt_report_options *opt)
{
    size_t top = opt && opt->top ? opt->top : 10;
    mt_out_puts(o, "{\"rows\":[");
    for (size_t i = 0; i < n; i++) {
        const mt_rank_summary *r = &s[i];
        if (i) mt_out_write(o, ",", 1);
        mt_out_write(o, "{", 1);
        jstr(o, "trace", r->path, 1);
        jstr(o, "label", r->label, 1);
        jint(o, "rank", r->has_rank ? r->rank : -1, 1);
        jint(o, "local_rank", r->local_rank, 1);
        jint(o, "world_size", r->world_size, 1);
        jstr(o, "host", r->host, 1);
        jint(o, "pid", r->pid, 1);
        jstr(o, "devices", r->devices, 1);
        jint(o, "peak_device", r->peak ? r->peak_device : -1, 1);
        jint(o, "peak_bytes", (long long)r->peak, 1);
        jint(o, "peak_time_unix_ns", (long long)r->peak_unix_ns, 1);
        jint(o, "tensors_peak_bytes", (long long)r->tensor_peak, 1);
        jint(o, "segments_peak_bytes", (long long)r->segment_peak, 1);
        jint(o, "live_at_exit_bytes", (long long)r->live_at_exit, 1);
        jint(o, "leak_bytes", (long long)r->leak_bytes, 1);
        jint(o, "failed_requests", (long long)r->failed, 1);
        jstr(o, "top_stack_first_user_frame", r->top_frame, 1);
        jint(o, "top_stack_bytes", (long long)r->top_bytes, 1);
        mt_out_printf(o, "\"ended_cleanly\":%s,", r->ended_cleanly ? "true" : "false");
        jint(o, "end_time_unix_ns", (long long)r->end_unix_ns, 1);
        jstr(o, "activity_records", mt_activity_name(r->activity), 1);
        mt_out_puts(o, "\"out_of_memory\":");
        if (r->has_oom) {
            mt_out_write(o, "{", 1);
            jint(o, "time_unix_ns", (long long)r->oom_unix_ns, 1);
            jint(o, "device", r->oom_device, 1);
            jint(o, "bytes", (long long)r->oom_bytes, 1);
            jint(o, "torch_allocated_bytes", (long long)r->oom_allocated, 1);
            jstr(o, "own_code_frame", r->oom_frame, 1);
            mt_out_puts(o, "\"backward_call\":");
            if (r->oom_backward_call)
                mt_out_json_string(o, r->oom_backward_call);
            else
                mt_out_puts(o, "null");
            mt_out_write(o, "}", 1);
        } else {
            mt_out_puts(o, "null");
        }
        mt_out_puts(o, ",\"gpus\":[");
        for (size_t g = 0; g < r->n_gpus; g++) {
            const mt_rank_gpu *x = &r->gpus[g];
            mt_out_puts(o, g ? ",{" : "{");
            jint(o, "device", x->device, 1);
            jstr(o, "uuid", x->uuid, 1);
            jint(o, "peak_bytes", (long long)x->peak, 1);
            jint(o, "nvml_max_bytes", (long long)x->nvml_max, 1);
            mt_out_printf(o, "\"own\":%s,\"driver_only\":%s,", x->own ? "true" : "false",
                          x->driver_only ? "true" : "false");
            jstr(o, "top_stack_first_user_frame", x->top_frame, 0);
            mt_out_write(o, "}", 1);
        }
        mt_out_puts(o, "]}");
    }
    mt_out_write(o, "]", 1);
    mt_out_printf(o, ",\"first_out_of_memory\":%ld", first_oom(s, n));
    mt_rank_foreign *f;
    size_t nf;
    if (mt_rank_foreign_gpus(s, n, &f, &nf) < 0) return -1;
    mt_out_puts(o, ",\"other_gpus\":[");
    for (size_t i = 0; i < nf; i++)
        mt_out_printf(o, "%s{\"row\":%zu,\"device\":%d,\"owner_row\":%ld}", i ? "," : "", f[i].rank,
                      (int)s[f[i].rank].gpus[f[i].gpu].device, f[i].owner);
    mt_out_write(o, "]", 1);
    free(f);
    mt_imbalance im;
    if (n && mt_rank_imbalance(s, n, &im) == 0) {
        mt_out_printf(o, ",\"imbalance\":{\"max\":%zu,\"median\":%zu,\"min\":%zu", im.max,
                      im.median, im.min);
        if (s[im.median].peak)
            mt_out_printf(o, ",\"max_over_median\":%.6f",
                          (double)s[im.max].peak / (double)s[im.median].peak);
        mt_out_puts(o, ",\"stacks\":[");
        mt_named_diff *d = NULL;
        size_t nd = 0;
        if (im.max != im.median && mt_rank_stack_diff(&s[im.max], &s[im.median], &d, &nd) < 0)
            return -1;
        for (size_t i = 0, k = 0; i < nd && k < top && d[i].delta > 0; i++, k++) {
            if (k) mt_out_write(o, ",", 1);
            mt_out_printf(o, "{\"delta_bytes\":%lld,\"max_rank_bytes\":%llu,\"median_rank_bytes\":"
                             "%llu,\"frames\":", (long long)d[i].delta,
                          (unsigned long long)d[i].a, (unsigned long long)d[i].b);
            jnames(o, d[i].name);
            mt_out_write(o, "}", 1);
        }
        free(d);
        mt_out_puts(o, "]}");
    }
    mt_out_write(o, "}", 1);
    return 0;
}

/* ---- Markdown (report --markdown over several traces) ------------------------------------------ */

/* A stack's names ("a;b;c", root first) as code spans joined by " › ": the innermost MT_CHAIN_MAX
 * of them, "… › " first when some were left out (the summaries keep names only, not the flags
 * mt_md_chain picks frames by; they are already the user view). */
static void md_names(mt_out *o, const char *joined)
{
    size_t n = 1;
    for (const char *p = joined; *p; p++) n += *p == ';';
    size_t skip = n > MT_CHAIN_MAX ? n - MT_CHAIN_MAX : 0, k = 0;
    if (skip) mt_out_puts(o, "… › ");
    for (const char *p = joined;; k++) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        if (k >= skip) {
            char *name = strndup(p, len);
            if (k > skip) mt_out_puts(o, " › ");
            mt_md_code(o, name ? name : "?");
            free(name);
        }
        if (!semi) break;
        p = semi + 1;
    }
}

static void md_bytes(mt_out *o, uint64_t v)
{
    char b[32], n[48];
    mt_out_printf(o, " %s |", mt_md_nbsp(mt_format_bytes(v, b, sizeof b), n, sizeof n));
}

int mt_rank_table_markdown(mt_out *o, const mt_rank_summary *s, size_t n,
                           const mt_report_options *opt)
{
    size_t top = opt && opt->top ? opt->top : 5;
    char b1[32], t[48], who[64], w1[64], w2[64];
    int32_t world = -1;
    int any_tensors = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].world_size > world) world = s[i].world_size;
        any_tensors |= s[i].tensor_peak != 0;
    }
    mt_out_printf(o, "#### Ranks: %zu traces", n);
    if (world > 0) mt_out_printf(o, " (world size %d)", (int)world);
    mt_out_puts(o, "\n\nEach rank's peak on its GPU with the largest; times on one wall clock "
                   "(UTC).\n\n| rank | host | pid | GPUs | peak |");
    if (any_tensors) mt_out_puts(o, " tensors |");
    mt_out_puts(o, " peak at | at exit | failed | top stack at the peak |\n|---|---|--:|---|--:|");
    if (any_tensors) mt_out_puts(o, "--:|");
    mt_out_puts(o, "---|--:|--:|---|\n");
    for (size_t i = 0; i < n; i++) {
        const mt_rank_summary *r = &s[i];
        mt_out_puts(o, "| ");
        mt_md_text(o, rank_name(r, who, sizeof who));
        mt_out_puts(o, " | ");
        if (r->host[0]) mt_md_code(o, r->host);
        else mt_out_puts(o, "?");
        mt_out_printf(o, " | %u | %s |", (unsigned)r->pid, r->devices[0] ? r->devices : "—");
        md_bytes(o, r->peak);
        if (any_tensors) {
            if (r->tensor_peak) md_bytes(o, r->tensor_peak);
            else mt_out_puts(o, " — |");
        }
        mt_out_printf(o, " %s |", r->peak ? clock_of(r->peak_unix_ns, t, sizeof t) : "—");
        md_bytes(o, r->live_at_exit);
        mt_out_printf(o, " %llu | ", (unsigned long long)r->failed);
        if (r->top_frame) {
            mt_md_code(o, r->top_frame);
            if (r->top_bytes && r->peak)
                mt_out_printf(o, " (%.0f%%)", 100.0 * (double)r->top_bytes / (double)r->peak);
        } else {
            mt_out_puts(o, "—");
        }
        mt_out_puts(o, " |\n");
    }
    mt_out_puts(o, "\n");
    char ends[NOTE_LINES][MT_RANK_ENDING_LEN];
    long nl = note_lines(s, n, ends);
    if (nl < 0) return -1;
    for (long i = 0; i < nl; i++) {
        mt_md_text(o, ends[i]);
        mt_out_puts(o, i + 1 < nl ? "  \n" : "\n\n");
    }
    const mt_rank_summary *hi, *med;
    mt_named_diff *d;
    size_t nd;
    int said = imbalance(o, s, n, "**Imbalance**: ", "\n\n", &hi, &med, &d, &nd);
    if (said <= 0 || !d) return said < 0 ? -1 : 0;
    mt_out_printf(o, "%s against %s (the median), the stacks at their peaks that differ most:\n\n",
                  rank_name(hi, w1, sizeof w1), rank_name(med, w2, sizeof w2));
    size_t shown = 0;
    for (size_t i = 0; i < nd && shown < top && d[i].delta > 0; i++) {
        if (!shown++)
            mt_out_puts(o, "| difference | largest rank | median rank | stack |\n"
                           "|--:|--:|--:|---|\n");
        char sign[40], n1[48];
        snprintf(sign, sizeof sign, "+%s", mt_format_bytes((uint64_t)d[i].delta, b1, sizeof b1));
        mt_out_printf(o, "| %s |", mt_md_nbsp(sign, n1, sizeof n1));
        md_bytes(o, d[i].a);
        md_bytes(o, d[i].b);
        mt_out_puts(o, " ");
        md_names(o, d[i].name);
        mt_out_puts(o, " |\n");
    }
    mt_out_puts(o, shown ? "\n" : "No stack is larger: the difference is spread thinly.\n\n");
    free(d);
    return 0;
}
