/* Folded stacks ("frame;frame;... bytes" per line) for flamegraph.pl, speedscope, inferno.
 * Root first: the device ("cuda:N", "host"), then the stack outermost to innermost; with several
 * traces a "comm[pid]" frame comes first so processes do not merge. Frame names never hold ';'
 * or newlines (mt_frames replaces them), so every line parses. */
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void put_frame(mt_out *o, const char *s)
{
    while (*s) {
        size_t run = strcspn(s, ";\n\r"); /* written as it is */
        mt_out_write(o, s, run);
        s += run;
        if (!*s) break;
        mt_out_write(o, *s == ';' ? "," : " ", 1);
        s++;
    }
}

static const mt_stack_list *pick(const mt_device_report *d, mt_folded_metric m)
{
    return m == MT_METRIC_PEAK ? &d->peak_stacks : m == MT_METRIC_LEAK ? &d->leaks : &d->allocs;
}

int mt_export_folded(mt_out *o, mt_analysis *const *a, size_t n, mt_folded_metric metric)
{
    return mt_export_folded_ex(o, a, n, metric, MT_FRAMES_ALL);
}

/* Filtering only drops frames from a line, never a line: a device's lines keep their sum (lines
 * that become equal are merged by the flame graph tools). */
int mt_export_folded_ex(mt_out *o, mt_analysis *const *a, size_t n, mt_folded_metric metric,
                        mt_frame_filter filter)
{
    mt_namebuf nb = {0};
    char root[32], prefix[300];
    for (size_t t = 0; t < n; t++) {
        snprintf(prefix, sizeof prefix, "%s[%u]", a[t]->comm[0] ? a[t]->comm : "pid", a[t]->pid);
        for (size_t i = 0; i < a[t]->n_devices + (a[t]->host != NULL); i++) {
            const mt_device_report *d = i < a[t]->n_devices ? &a[t]->devices[i] : a[t]->host;
            const mt_stack_list *l = pick(d, metric);
            mt_device_root_name(d, root, sizeof root);
            for (size_t k = 0; k < l->n; k++) {
                if (!l->v[k].bytes) continue;
                if (mt_stat_frames(a[t]->frames, &l->v[k], MT_NAME_FOLDED, filter, &nb) < 0) {
                    mt_namebuf_free(&nb);
                    return -1;
                }
                if (n > 1) {
                    put_frame(o, prefix);
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
    }
    mt_namebuf_free(&nb);
    return 0;
}
