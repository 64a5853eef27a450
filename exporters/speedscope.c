/* speedscope's own file format (https://www.speedscope.app/file-format-schema.json), so that one
 * file dropped into speedscope shows every device and metric with byte units:
 *
 *   {"$schema": "https://www.speedscope.app/file-format-schema.json",
 *    "profiles": [{"type": "sampled", "name": "python3[1234] cuda:0: live at the peak, 2.25 GiB",
 *                  "unit": "bytes", "startValue": 0, "endValue": <sum of weights>,
 *                  "samples": [[frame index, ...], ...]   (root first, one per stack)
 *                  "weights": [bytes, ...]}, ...],
 *    "shared": {"frames": [{"name": "Module._call_impl (torch/nn/modules/module.py:1790)"}, ...]},
 *    "name": ..., "activeProfileIndex": 0, "exporter": "memtrace VERSION"}
 *
 * One profile per trace, device and metric (peak, alloc, end, leak; `--metric` keeps one and
 * `--device` one device). Profiles with nothing in them are left out. A profile's weights add up
 * to what the report prints for it (peak_bytes for peak). Frame names are mt_frames' names, the
 * same as in folded output; the device is the profile, not a frame.
 */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "util.h"

/* Frame name -> index in the shared list: open addressing over a hash of the string. */
typedef struct frame_table {
    const char **names; /* in index order; owned by the analyses' frames */
    size_t n, cap;
    uint32_t *slots; /* index + 1, 0 = empty */
    size_t n_slots;
} frame_table;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int table_grow(frame_table *t)
{
    size_t ns = t->n_slots ? t->n_slots * 2 : 1024;
    uint32_t *slots = calloc(ns, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = hash_str(t->names[i]) & (ns - 1);
        while (slots[j]) j = (j + 1) & (ns - 1);
        slots[j] = (uint32_t)i + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = ns;
    return 0;
}

/* Index of name, added when new; -1 when out of memory. */
static long frame_index(frame_table *t, const char *name)
{
    if ((t->n + 1) * 2 > t->n_slots && table_grow(t) < 0) return -1;
    size_t j = hash_str(name) & (t->n_slots - 1);
    for (; t->slots[j]; j = (j + 1) & (t->n_slots - 1))
        if (strcmp(t->names[t->slots[j] - 1], name) == 0) return (long)t->slots[j] - 1;
    if (MT_GROW(t->names, t->cap, t->n + 1) < 0) return -1;
    t->names[t->n] = name;
    t->slots[j] = (uint32_t)++t->n;
    return (long)t->n - 1;
}

static uint64_t list_sum(const mt_stack_list *l)
{
    uint64_t s = 0;
    for (size_t k = 0; k < l->n; k++) s += l->v[k].bytes;
    return s;
}

static int profile(mt_out *o, mt_analysis *a, const mt_device_report *d, mt_folded_metric m,
                   const mt_folded_options *opt, int first, frame_table *t, mt_namebuf *nb)
{
    const mt_stack_list *l = mt_metric_list(d, m);
    uint64_t total = list_sum(l);
    char root[32], b[32], name[512];
    mt_device_root_name(d, root, sizeof root);
    char who[256];
    if (a->header.flags & MT_HDR_RANK && a->header.rank >= 0)
        mt_trace_label(a, who, sizeof who);
    else
        snprintf(who, sizeof who, "%s[%u]", a->comm[0] ? a->comm : "pid", a->pid);
    snprintf(name, sizeof name, "%s %s: %s, %s", who, root, mt_metric_title(m),
             mt_format_bytes(total, b, sizeof b));
    mt_out_puts(o, first ? "\n{" : ",\n{");
    mt_out_puts(o, "\"type\":\"sampled\",\"name\":");
    mt_out_json_string(o, name);
    mt_out_printf(o, ",\"unit\":\"bytes\",\"startValue\":0,\"endValue\":%llu,\"samples\":[",
                  (unsigned long long)total);
    mt_frame_filter filter = mt_frames_resolve(a->frames, opt->frames);
    int by_cat = opt->by_category && m == MT_METRIC_PEAK && a->categories;
    size_t emitted = 0;
    for (size_t k = 0; k < l->n; k++) {
        if (!l->v[k].bytes) continue;
        if (mt_stat_frames(a->frames, &l->v[k], opt->names, filter, 0, nb) < 0) return -1;
        mt_out_puts(o, emitted++ ? ",[" : "[");
        if (by_cat) { /* the category first (names live as long as the analysis) */
            long ix = frame_index(t, l->v[k].category ? mt_category_name(a->categories,
                                                                         l->v[k].category)
                                                      : "not a tensor");
            if (ix < 0) return -1;
            mt_out_printf(o, "%ld%s", ix, nb->n ? "," : "");
        }
        for (size_t f = 0; f < nb->n; f++) {
            long ix = frame_index(t, nb->v[f]);
            if (ix < 0) return -1;
            mt_out_printf(o, "%s%ld", f ? "," : "", ix);
        }
        mt_out_puts(o, "]");
    }
    mt_out_puts(o, "],\"weights\":[");
    emitted = 0;
    for (size_t k = 0; k < l->n; k++) {
        if (!l->v[k].bytes) continue;
        mt_out_printf(o, "%s%llu", emitted++ ? "," : "", (unsigned long long)l->v[k].bytes);
    }
    mt_out_puts(o, "]}");
    return 0;
}

int mt_export_speedscope(mt_out *o, mt_analysis *const *a, size_t n, const mt_folded_options *opt)
{
    frame_table t = {0};
    mt_namebuf nb = {0};
    int rc = 0, profiles = 0;
    mt_out_puts(o, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
                   "\"exporter\":\"memtrace " MEMTRACE_VERSION "\",\"name\":");
    mt_out_json_string(o, n == 1 ? a[0]->path : "memtrace");
    mt_out_puts(o, ",\"activeProfileIndex\":0,\"profiles\":[");
    static const mt_folded_metric order[] = {MT_METRIC_PEAK, MT_METRIC_ALLOC, MT_METRIC_END,
                                             MT_METRIC_LEAK};
    for (size_t i = 0; i < n && rc == 0; i++) {
        for (size_t k = 0; k < a[i]->n_devices + (a[i]->host != NULL) && rc == 0; k++) {
            const mt_device_report *d = k < a[i]->n_devices ? &a[i]->devices[k] : a[i]->host;
            if (opt->device != MT_DEVICE_AUTO && d != mt_select_device(a[i], opt->device)) continue;
            for (size_t m = 0; m < sizeof order / sizeof *order && rc == 0; m++) {
                if (!opt->all_metrics && order[m] != opt->metric) continue;
                if (!list_sum(mt_metric_list(d, order[m]))) continue;
                rc = profile(o, a[i], d, order[m], opt, !profiles, &t, &nb);
                profiles++;
            }
        }
    }
    mt_out_puts(o, "\n],\"shared\":{\"frames\":[");
    for (size_t i = 0; i < t.n && rc == 0; i++) {
        mt_out_puts(o, i ? ",\n{\"name\":" : "\n{\"name\":");
        mt_out_json_string(o, t.names[i]);
        mt_out_puts(o, "}");
    }
    mt_out_puts(o, "\n]}}\n");
    free(t.names);
    free(t.slots);
    mt_namebuf_free(&nb);
    return rc;
}
