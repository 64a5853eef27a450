/* Folded stacks ("frame;frame;... bytes" per line) for flamegraph.pl, speedscope, inferno.
 *
 * One device per trace: a flame graph's root adds up its lines, and a device's peak and the
 * host's (or another device's) happen at different moments, so adding them would draw a moment
 * that never was. The first frame is the device ("cuda:0", "host"); with several traces a
 * "rank R" frame (a job's ranks; "comm[pid]" for a process without a rank) comes before it so
 * processes do not merge; with by_category the tensor's category comes next (record --tensors).
 *
 * flamegraph.pl reads a line as /^(.*)\s+?(\d+(?:\.\d*)?)$/ and splits the first part at ';'.
 * So every frame here is non-empty, holds no ';' and no newline, and the last one never ends in
 * blanks and digits (flamegraph.pl would take those for a second, differential count). Frame
 * names come from mt_frames (one naming for every output); `put_frame` only enforces the above.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void put_frame(mt_out *o, const char *s)
{
    size_t n = strlen(s);
    if (!n) {
        mt_out_puts(o, "?");
        return;
    }
    /* "... 12" at the end of a frame: keep the digits, join them to the name */
    size_t d = n;
    while (d > 0 && isdigit((unsigned char)s[d - 1])) d--;
    size_t blank = d < n && d > 0 && isspace((unsigned char)s[d - 1]) ? d - 1 : n;
    for (size_t i = 0; i < n;) { /* runs written as they are, one call each */
        size_t run = strcspn(s + i, ";\n\r");
        if (i < blank && i + run > blank) run = blank - i;
        mt_out_write(o, s + i, run);
        i += run;
        if (i >= n) break;
        mt_out_write(o, i == blank ? "_" : s[i] == ';' ? "," : " ", 1);
        i++;
    }
}

const char *mt_metric_name(mt_folded_metric m)
{
    static const char *const names[MT_METRICS_] = {"peak", "alloc", "leak", "end"};
    return (unsigned)m < MT_METRICS_ ? names[m] : "?";
}

const char *mt_metric_title(mt_folded_metric m)
{
    static const char *const titles[MT_METRICS_] = {
        "live at the peak", "allocated over the run", "not freed at the end (possible leaks)",
        "live at the end"};
    return (unsigned)m < MT_METRICS_ ? titles[m] : "?";
}

const mt_device_report *mt_select_device(const mt_analysis *a, int device)
{
    if (device == MT_DEVICE_HOST) return a->host;
    if (device != MT_DEVICE_AUTO) {
        for (size_t i = 0; i < a->n_devices; i++)
            if (a->devices[i].u.device == device) return &a->devices[i];
        return NULL;
    }
    const mt_device_report *best = NULL;
    for (size_t i = 0; i < a->n_devices; i++) /* ordinal order: ties keep the lowest */
        if (!best || a->devices[i].u.peak > best->u.peak) best = &a->devices[i];
    return best ? best : a->host;
}

const mt_stack_list *mt_metric_list(const mt_device_report *d, mt_folded_metric m)
{
    switch (m) {
    case MT_METRIC_PEAK: return &d->peak_stacks;
    case MT_METRIC_ALLOC: return &d->allocs;
    case MT_METRIC_LEAK: return &d->leaks;
    default: return &d->live_end;
    }
}

/* Filtering only drops frames from a line, never a line: a device's lines keep their sum (lines
 * that become equal are merged by the flame graph tools). */
int mt_export_folded(mt_out *o, mt_analysis *const *a, size_t n, const mt_folded_options *opt)
{
    mt_namebuf nb = {0};
    char root[32], prefix[300];
    for (size_t t = 0; t < n; t++) {
        const mt_device_report *d = mt_select_device(a[t], opt->device);
        if (!d) continue;
        if (a[t]->header.flags & MT_HDR_RANK && a[t]->header.rank >= 0)
            snprintf(prefix, sizeof prefix, "rank %d", (int)a[t]->header.rank);
        else
            snprintf(prefix, sizeof prefix, "%s[%u]", a[t]->comm[0] ? a[t]->comm : "pid",
                     a[t]->pid);
        mt_frame_filter filter = mt_frames_resolve(a[t]->frames, opt->frames);
        const mt_stack_list *l = mt_metric_list(d, opt->metric);
        int by_cat = opt->by_category && opt->metric == MT_METRIC_PEAK && a[t]->categories;
        mt_device_root_name(d, root, sizeof root);
        for (size_t k = 0; k < l->n; k++) {
            if (!l->v[k].bytes) continue;
            if (mt_stat_frames(a[t]->frames, &l->v[k], opt->names, filter, 0, &nb) < 0) {
                mt_namebuf_free(&nb);
                return -1;
            }
            if (n > 1 || opt->trace_frame) {
                /* ours, never at the line's end: "rank 3" as it reads (put_frame would join a
                 * trailing number to the name, for frames that end a line) */
                mt_out_puts(o, prefix);
                mt_out_write(o, ";", 1);
            }
            if (by_cat) { /* a fixed name, never the line's last frame */
                mt_out_puts(o, l->v[k].category ? mt_category_name(a[t]->categories,
                                                                   l->v[k].category)
                                                : "not a tensor");
                mt_out_write(o, ";", 1);
            }
            mt_out_puts(o, root);
            for (size_t f = 0; f < nb.n; f++) {
                mt_out_write(o, ";", 1);
                put_frame(o, nb.v[f]);
            }
            mt_out_printf(o, " %llu\n", (unsigned long long)l->v[k].bytes);
        }
    }
    mt_namebuf_free(&nb);
    return 0;
}
