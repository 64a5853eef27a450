/* The JSON report (`memtrace report --json`): the same facts as the text report, for programs.
 * Field meanings are in docs/analysis.md. Byte counts and times are integers (ns since the
 * trace start unless the name ends in _unix_ns); shares are fractions 0..1. */
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void key(mt_out *o, const char *k) /* "k": */
{
    mt_out_json_string(o, k);
    mt_out_write(o, ":", 1);
}

static void u64f(mt_out *o, const char *k, uint64_t v, int comma)
{
    key(o, k);
    mt_out_printf(o, "%llu%s", (unsigned long long)v, comma ? "," : "");
}

/* "recording_cost": memtrace's own time on the program's threads, from the recorder's notes at
 * exit (docs/json.md); null when the trace has none. */
static void recording_cost(mt_out *o, const mt_analysis *a)
{
    const mt_recording_cost *c = &a->cost;
    double total = mt_recording_cost_ns(c);
    key(o, "recording_cost");
    if (!(total > 0)) {
        mt_out_puts(o, "null,");
        return;
    }
    uint64_t span = c->until_ns ? c->until_ns : a->duration_ns; /* what the figure covers */
    mt_out_printf(o, "{\"ns\":%.0f,\"share_of_duration\":%.6g,\"tensor_report_whole\":%s,", total,
                  span ? total / (double)span : 0.0, c->tensor_whole ? "true" : "false");
    key(o, "until_ns"); /* null: the notes at exit; else the running totals' time */
    if (c->until_ns) mt_out_printf(o, "%llu,", (unsigned long long)c->until_ns);
    else mt_out_puts(o, "null,");
    const mt_cost_part *parts[4] = {&c->tensors, &c->callbacks, &c->hooked, &c->rare};
    const char *names[4] = {"tensor_reports", "callbacks", "hooked_calls", "rare_work"};
    for (int i = 0; i < 4; i++)
        mt_out_printf(o, "\"%s\":{\"calls\":%llu,\"ns_each\":%.0f,\"timed\":%llu},", names[i],
                      (unsigned long long)parts[i]->calls, parts[i]->ns,
                      (unsigned long long)parts[i]->timed);
    key(o, "writer_thread"); /* null: the recorder did not say (before 2026-11-28) */
    if (mt_cost_writer_known(c))
        mt_out_printf(o, "{\"cpu_ns\":%.0f,\"wall_ns\":%.0f}},", c->writer_cpu_ns,
                      c->writer_wall_ns);
    else
        mt_out_puts(o, "null},");
}

/* "frames":[names of nb, root first] */
static void frames_array(mt_out *o, const mt_namebuf *nb)
{
    key(o, "frames");
    mt_out_write(o, "[", 1);
    for (size_t k = 0; k < nb->n; k++) {
        if (k) mt_out_write(o, ",", 1);
        mt_out_json_string(o, nb->v[k]);
    }
    mt_out_write(o, "]", 1);
}

static int stack_array(mt_out *o, mt_analysis *a, const mt_stack_list *l, uint64_t whole,
                       size_t top, const mt_report_options *ro, mt_namebuf *nb)
{
    mt_frame_filter filter = mt_frames_resolve(a->frames, ro->frames);
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < l->n && i < top; i++) {
        const mt_stack_stat *s = &l->v[i];
        if (mt_stat_frames(a->frames, s, ro->names, filter, ro->full_stacks, nb) < 0) return -1;
        mt_out_puts(o, i ? ",{" : "{");
        u64f(o, "bytes", s->bytes, 1);
        u64f(o, "count", s->count, 1);
        if (s->category && a->categories) { /* record --tensors: what these bytes are for */
            key(o, "category");
            mt_out_json_string(o, mt_category_name(a->categories, s->category));
            mt_out_write(o, ",", 1);
        }
        key(o, "share");
        mt_out_printf(o, "%.6f,", whole ? (double)s->bytes / (double)whole : 0.0);
        key(o, "first_user_frame");
        mt_out_json_string(o, s->driver ? nb->v[0]
                                        : mt_frames_first_user(a->frames, s->stack, ro->names));
        mt_out_write(o, ",", 1);
        frames_array(o, nb);
        mt_out_write(o, "}", 1);
    }
    mt_out_write(o, "]", 1);
    return 0;
}

/* {"time_ns", "process_bytes" (or "unknown"), "context_driver_bytes" (signed, or "unknown"),
 *  "driver_internal_bytes", "allocator_reserved_bytes", "tensors_allocated_bytes" (or "unknown"),
 *  "cached_free_bytes" (or "unknown"), "other_libraries_bytes", "owners": [{owner, bytes, count}]} */
static void breakdown_object(mt_out *o, const mt_breakdown *b)
{
    if (!b->valid) {
        mt_out_puts(o, "null");
        return;
    }
    mt_out_write(o, "{", 1);
    u64f(o, "time_ns", b->time_ns, 1);
    key(o, "process_bytes");
    if (b->process_known) {
        mt_out_printf(o, "%llu,", (unsigned long long)b->process_bytes);
        u64f(o, "process_sample_time_ns", b->process_sample_ns, 1);
        key(o, "process_sample_after");
        mt_out_puts(o, b->process_sample_after ? "true," : "false,");
        key(o, "process_sample_same_bytes"); /* the trace had the moment's bytes live then: exact */
        mt_out_puts(o, b->process_sample_same ? "true," : "false,");
        key(o, "context_driver_bytes");
        mt_out_printf(o, "%lld,", (long long)b->context_bytes);
    } else {
        mt_out_puts(o, "\"unknown\",");
        key(o, "process_unknown_reason");
        mt_out_puts(o, b->process_unknown == MT_PROCESS_LAGGED
                           ? "\"the NVML samples around it read less than the trace had live\","
                           : "\"no NVML samples in the trace\",");
        key(o, "context_driver_bytes");
        mt_out_puts(o, "\"unknown\",");
    }
    u64f(o, "visible_bytes", b->visible_bytes, 1);
    u64f(o, "driver_internal_bytes", b->driver_bytes, 1);
    u64f(o, "allocator_reserved_bytes", b->reserved_bytes, 1);
    u64f(o, "caching_allocator_bytes", b->caching_bytes, 1);
    u64f(o, "pytorch_segments_bytes", b->torch_bytes, 1);
    key(o, "other_cache_owner"); /* the allocator of the rest of caching_allocator_bytes */
    if (b->cache_owner) {
        mt_out_json_string(o, b->cache_owner);
        mt_out_write(o, ",", 1);
    } else {
        mt_out_puts(o, "null,");
    }
    if (b->has_pool) u64f(o, "pool_reserved_bytes", b->pool_bytes, 1);
    key(o, "tensors_allocated_bytes");
    if (b->allocated_known) mt_out_printf(o, "%llu,", (unsigned long long)b->allocated_bytes);
    else mt_out_puts(o, "\"unknown\",");
    key(o, "cached_free_bytes");
    if (b->allocated_known) mt_out_printf(o, "%llu,", (unsigned long long)b->cached_free_bytes);
    else mt_out_puts(o, "\"unknown\",");
    u64f(o, "other_libraries_bytes", b->other_bytes, 1);
    key(o, "owners");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < b->n_owners; i++) {
        mt_out_puts(o, i ? ",{" : "{");
        key(o, "owner");
        mt_out_json_string(o, b->owners[i].owner);
        mt_out_write(o, ",", 1);
        u64f(o, "bytes", b->owners[i].bytes, 1);
        u64f(o, "count", b->owners[i].count, 0);
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "]}");
}

/* [{"file" (full path), "line", "function", "alloc_bytes", "alloc_count", "peak_bytes",
 *   "peak_count", "source" (when readable here)}], sorted as mt_by_line sorts. */
/* {"paired_bytes", ...}: mt_category_fit */
static void fit_object(mt_out *o, const mt_category_fit *f)
{
    mt_out_write(o, "{", 1);
    u64f(o, "paired_bytes", f->paired, 1);
    u64f(o, "paired_count", f->n_paired, 1);
    u64f(o, "larger_bytes", f->larger, 1);
    u64f(o, "larger_count", f->n_larger, 1);
    u64f(o, "smaller_bytes", f->smaller, 1);
    u64f(o, "smaller_count", f->n_smaller, 1);
    u64f(o, "unpaired_bytes", f->unpaired, 1);
    u64f(o, "unpaired_count", f->n_unpaired, 1);
    u64f(o, "parameters_left_bytes", f->params_left, 1);
    u64f(o, "parameters_left_count", f->n_params_left, 0);
    mt_out_write(o, "}", 1);
}

/* null without tensors, else {"optimizer", "optimizer_state_in_w", "w_bytes", "w_trained_bytes", "rows": [{"name",
 * "outside", "bytes", "textbook_bytes" (or null), "difference_bytes", "why", "fit" (gradients and
 * optimizer state: fit_object)}], "tensors_bytes", "total_bytes", "textbook_bytes", "process_known", "after_backward": null or {"time_ns",
 * "by_category": [{"name", "bytes"}], "gradients_fit"}} */
static void categories_object(mt_out *o, const mt_analysis *a, const mt_device_report *d)
{
    mt_cat_table t;
    mt_category_table(a, d, &t);
    if (!t.known) {
        mt_out_puts(o, "null");
        return;
    }
    mt_out_write(o, "{", 1);
    key(o, "optimizer");
    if (t.optimizer) mt_out_json_string(o, t.optimizer);
    else mt_out_puts(o, "null");
    mt_out_write(o, ",", 1);
    u64f(o, "optimizer_state_in_w", t.state_in_w, 1);
    u64f(o, "w_bytes", t.w, 1);
    u64f(o, "w_trained_bytes", t.w_trained, 1);
    key(o, "rows");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < t.n; i++) {
        const mt_cat_row *r = &t.rows[i];
        mt_out_puts(o, i ? ",{" : "{");
        key(o, "name");
        mt_out_json_string(o, r->name);
        mt_out_printf(o, ",\"outside\":%s,", r->outside ? "true" : "false");
        u64f(o, "bytes", r->bytes, 1);
        key(o, "textbook_bytes");
        if (r->has_textbook) mt_out_printf(o, "%llu,", (unsigned long long)r->textbook);
        else mt_out_puts(o, "null,");
        key(o, "difference_bytes");
        mt_out_printf(o, "%lld,", (long long)r->difference);
        key(o, "why");
        mt_out_json_string(o, r->why);
        if (!r->outside && (r->category == MT_CAT_GRADIENTS || r->category == MT_CAT_OPTIMIZER_STATE)) {
            mt_out_write(o, ",", 1);
            key(o, "fit");
            fit_object(o, &d->fit_at_peak[r->category == MT_CAT_OPTIMIZER_STATE]);
        }
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "],");
    u64f(o, "tensors_bytes", t.tensors, 1);
    u64f(o, "total_bytes", t.measured, 1);
    u64f(o, "textbook_bytes", t.textbook, 1);
    mt_out_printf(o, "\"process_known\":%s,", t.process_known ? "true" : "false");
    key(o, "after_backward");
    if (!d->after_backward_known) {
        mt_out_puts(o, "null}");
        return;
    }
    mt_out_write(o, "{", 1);
    u64f(o, "time_ns", d->after_backward_time_ns, 1);
    key(o, "by_category");
    mt_out_write(o, "[", 1);
    int first = 1;
    for (unsigned c = MT_CAT_PARAMETERS; c < mt_category_count(a->categories) && c < MT_CAT_MAX; c++) {
        if (!d->by_category_after_backward[c]) continue;
        mt_out_puts(o, first ? "{" : ",{");
        first = 0;
        key(o, "name");
        mt_out_json_string(o, mt_category_name(a->categories, c));
        mt_out_write(o, ",", 1);
        u64f(o, "bytes", d->by_category_after_backward[c], 0);
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "],");
    key(o, "gradients_fit");
    fit_object(o, &d->fit_after_backward[0]);
    mt_out_puts(o, "}}");
}

static int by_line_array(mt_out *o, mt_analysis *a, const mt_device_report *d, const char *file)
{
    mt_line_stat *v;
    size_t n;
    if (mt_by_line(a->frames, d, file, &v, &n) < 0) return -1;
    mt_src_cache sc;
    mt_src_cache_init(&sc, a);
    char src[512];
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < n; i++) {
        mt_out_puts(o, i ? ",{" : "{");
        key(o, "file");
        mt_out_json_string(o, v[i].file);
        mt_out_write(o, ",", 1);
        u64f(o, "line", v[i].line, 1);
        key(o, "function");
        mt_out_json_string(o, v[i].qualname);
        mt_out_write(o, ",", 1);
        u64f(o, "alloc_bytes", v[i].alloc_bytes, 1);
        u64f(o, "alloc_count", v[i].alloc_count, 1);
        u64f(o, "peak_bytes", v[i].peak_bytes, 1);
        u64f(o, "peak_count", v[i].peak_count, 0);
        if (mt_source_line(&sc, v[i].file, v[i].line, src, sizeof src)) {
            mt_out_write(o, ",", 1);
            key(o, "source");
            mt_out_json_string(o, src);
            if (mt_source_changed(&sc)) mt_out_puts(o, ",\"source_modified_after_recording\":true");
        }
        mt_out_write(o, "}", 1);
    }
    mt_out_write(o, "]", 1);
    mt_src_cache_free(&sc);
    free(v);
    return 0;
}

static void kinds_object(mt_out *o, const uint64_t *by_kind)
{
    mt_out_write(o, "{", 1);
    int first = 1;
    for (unsigned k = 0; k < MT_KIND_MAX_; k++) {
        if (!by_kind[k]) continue;
        if (!first) mt_out_write(o, ",", 1);
        u64f(o, mt_kind_name(k), by_kind[k], 0);
        first = 0;
    }
    mt_out_write(o, "}", 1);
}

static int device_object(mt_out *o, mt_analysis *a, mt_device_report *d,
                         const mt_report_options *ro, mt_namebuf *nb)
{
    size_t top = ro->top;
    const mt_usage *u = &d->u;
    char root[32];
    mt_out_write(o, "{", 1);
    key(o, "device");
    mt_out_printf(o, "%d,", u->is_host ? -1 : u->device);
    key(o, "root");
    mt_out_json_string(o, mt_device_root_name(d, root, sizeof root));
    mt_out_write(o, ",", 1);
    if (d->name) {
        key(o, "name");
        mt_out_json_string(o, d->name);
        mt_out_write(o, ",", 1);
    }
    if (d->uuid) {
        key(o, "uuid");
        mt_out_json_string(o, d->uuid);
        mt_out_write(o, ",", 1);
    }
    u64f(o, "capacity_bytes", d->capacity, 1);
    u64f(o, "peak_bytes", u->peak, 1);
    u64f(o, "peak_time_ns", d->peak_time_ns, 1);
    u64f(o, "peak_time_unix_ns", a->header.start_realtime_ns + d->peak_time_ns, 1);
    u64f(o, "peak_event", u->peak_seq, 1);
    u64f(o, "api_peak_bytes", u->api_peak, 1);
    u64f(o, "api_peak_time_ns", d->api_peak_time_ns, 1);
    u64f(o, "driver_bytes_at_peak", d->driver_at_peak, 1);
    if (d->driver_guessed) u64f(o, "driver_bytes_guessed", d->driver_guessed, 1);
    key(o, "by_kind_at_peak");
    kinds_object(o, d->by_kind_at_peak);
    mt_out_write(o, ",", 1);
    key(o, "peak_by_kind"); /* each kind's own high-water; tensor = max_memory_allocated */
    kinds_object(o, u->by_kind_peak);
    mt_out_write(o, ",", 1);
    /* PyTorch's caching allocator: its segments (max_memory_reserved) and, with --tensors, its
     * own counter of allocated bytes as it reported it (max_memory_allocated) */
    u64f(o, "segments_peak_bytes", u->segment_peak, 1);
    u64f(o, "segments_bytes_at_end", u->segment_bytes, 1);
    u64f(o, "tensors_peak_bytes", u->by_kind_peak[MT_KIND_TENSOR], 1);
    u64f(o, "torch_allocated_peak_bytes", u->tensor_counter_peak, 1);
    u64f(o, "captured_allocations", u->captured_count, 1);
    u64f(o, "captured_bytes", u->captured_bytes, 1);
    u64f(o, "total_alloc_bytes", u->alloc_bytes, 1);
    u64f(o, "total_alloc_count", u->alloc_count, 1);
    u64f(o, "free_count", u->free_count, 1);
    u64f(o, "failed_count", u->failed_count, 1);
    u64f(o, "zero_byte_allocs", u->zero_byte_allocs, 1);
    u64f(o, "end_bytes", u->in_use, 1);
    u64f(o, "vmm_reserved_peak_bytes", u->vmm_reserved_peak, 1);
    u64f(o, "vmm_mapped_peak_bytes", u->vmm_mapped_peak, 1);
    if (u->imported_peak) {
        u64f(o, "imported_peak_bytes", u->imported_peak, 1);
        u64f(o, "imported_end_bytes", u->imported, 1);
    }
    if (u->has_pool_info) {
        u64f(o, "pool_reserved_peak_bytes", u->pool_reserved_peak, 1);
        u64f(o, "pool_reserved_end_bytes", u->pool_reserved, 1);
    }
    u64f(o, "leak_bytes", d->leak_bytes, 1);
    u64f(o, "leak_count", d->leak_count, 1);
    key(o, "end_holders");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < d->n_end_holders; i++) {
        static const char *const kinds[] = {"allocator cache", "library", "driver", "program"};
        mt_out_puts(o, i ? ",{" : "{");
        key(o, "holder");
        mt_out_json_string(o, d->end_holders[i].holder);
        mt_out_write(o, ",", 1);
        key(o, "kind");
        mt_out_json_string(o, kinds[d->end_holders[i].kind & 3]);
        mt_out_write(o, ",", 1);
        u64f(o, "bytes", d->end_holders[i].bytes, 1);
        u64f(o, "count", d->end_holders[i].count, 0);
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "],");
    if (!u->is_host) {
        if (d->n_nvml) {
            u64f(o, "nvml_max_bytes", d->nvml_max, 1);
            u64f(o, "nvml_max_time_ns", d->nvml_max_time_ns, 1);
        }
        key(o, "breakdown");
        mt_out_write(o, "{", 1);
        key(o, "at_peak");
        breakdown_object(o, &d->at_peak);
        mt_out_write(o, ",", 1);
        key(o, "at_end");
        breakdown_object(o, &d->at_end);
        mt_out_puts(o, "},");
        key(o, "categories_at_peak");
        categories_object(o, a, d);
        mt_out_write(o, ",", 1);
        if (ro->by_line) {
            key(o, "by_line");
            if (by_line_array(o, a, d, ro->by_line_file) < 0) return -1;
            mt_out_write(o, ",", 1);
        }
    }
    key(o, "peak_stacks");
    if (stack_array(o, a, &d->peak_stacks, u->peak, top, ro, nb) < 0) return -1;
    mt_out_write(o, ",", 1);
    key(o, "leaks");
    if (stack_array(o, a, &d->leaks, d->leak_bytes, top, ro, nb) < 0) return -1;
    mt_out_write(o, ",", 1);
    key(o, "timeline");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < d->n_timeline; i++) {
        mt_out_puts(o, i ? ",{" : "{");
        u64f(o, "time_ns", d->timeline[i].time_ns, 1);
        u64f(o, "bytes", d->timeline[i].in_use, 1);
        key(o, "by_kind");
        kinds_object(o, d->timeline[i].by_kind);
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "]}");
    return 0;
}

static int trace_object(mt_out *o, mt_analysis *a, const mt_report_options *ro)
{
    size_t top = ro->top;
    mt_namebuf nb = {0};
    int rc = 0;
    mt_out_write(o, "{", 1);
    if (ro->json_schema) u64f(o, "schema", MT_JSON_SCHEMA, 1);
    key(o, "trace");
    mt_out_json_string(o, a->path);
    mt_out_write(o, ",", 1);
    u64f(o, "pid", a->pid, 1);
    key(o, "command");
    mt_out_json_string(o, a->comm);
    mt_out_write(o, ",", 1);
    key(o, "hostname"); /* "host" is the pinned host memory's object below */
    mt_out_json_string(o, a->hostname);
    mt_out_write(o, ",", 1);
    char label[256];
    key(o, "label");
    mt_out_json_string(o, mt_trace_label(a, label, sizeof label));
    mt_out_write(o, ",", 1);
    /* the launcher's rank, -1 when the process had none (trace header) */
    int has_rank = (a->header.flags & MT_HDR_RANK) != 0;
    mt_out_printf(o, "\"rank\":%d,\"local_rank\":%d,\"world_size\":%d,\"node_rank\":%d,",
                  has_rank ? (int)a->header.rank : -1, has_rank ? (int)a->header.local_rank : -1,
                  has_rank ? (int)a->header.world_size : -1,
                  has_rank ? (int)a->header.node_rank : -1);
    key(o, "cmdline");
    mt_out_json_string(o, a->cmdline);
    mt_out_write(o, ",", 1);
    u64f(o, "start_unix_ns", a->header.start_realtime_ns, 1);
    u64f(o, "duration_ns", a->duration_ns, 1);
    u64f(o, "records", a->records, 1);
    u64f(o, "events", a->events, 1);
    u64f(o, "dropped", a->dropped, 1);
    key(o, "truncated");
    mt_out_puts(o, a->truncated ? "true," : "false,");
    if (a->truncated) {
        key(o, "truncated_reason");
        mt_out_json_string(o, a->truncated_msg);
        mt_out_write(o, ",", 1);
    }
    u64f(o, "damaged_chunks", a->damaged_chunks, 1);
    u64f(o, "damaged_bytes", a->damaged_bytes, 1);
    key(o, "damage_reason"); /* "" when no chunk was damaged */
    mt_out_json_string(o, a->damage_msg ? a->damage_msg : "");
    mt_out_write(o, ",", 1);
    key(o, "ended_cleanly");
    mt_out_puts(o, a->ended_cleanly ? "true," : "false,");
    /* whether driver-internal allocations and CUDA arrays were seen: their bytes are 0 where
     * they were not, and not known */
    key(o, "activity_records");
    mt_out_json_string(o, mt_activity_name(a->activity));
    mt_out_write(o, ",", 1);
    if (a->activity == MT_ACTIVITY_STOPPED)
        u64f(o, "activity_stopped_ns", a->activity_stopped_ns, 1);
    recording_cost(o, a);
    key(o, "warnings");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < a->n_warnings; i++) {
        if (i) mt_out_write(o, ",", 1);
        mt_out_json_string(o, a->warnings[i]);
    }
    mt_out_puts(o, "],");
    key(o, "warning_times_ns"); /* when each warning was noted, since trace start */
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < a->n_warnings; i++)
        mt_out_printf(o, "%s%llu", i ? "," : "", (unsigned long long)a->warning_times_ns[i]);
    mt_out_puts(o, "],");
    key(o, "devices");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < a->n_devices && rc == 0; i++) {
        if (i) mt_out_write(o, ",", 1);
        rc = device_object(o, a, &a->devices[i], ro, &nb);
    }
    mt_out_puts(o, "],");
    key(o, "host");
    if (a->host && rc == 0) rc = device_object(o, a, a->host, ro, &nb);
    else mt_out_puts(o, "null");
    mt_out_write(o, ",", 1);
    /* Totals over all GPU devices (host memory is not device memory). */
    uint64_t ab = 0, ac = 0, fc = 0, lb = 0, lc = 0;
    for (size_t i = 0; i < a->n_devices; i++) {
        ab += a->devices[i].u.alloc_bytes;
        ac += a->devices[i].u.alloc_count;
        fc += a->devices[i].u.free_count;
        lb += a->devices[i].leak_bytes;
        lc += a->devices[i].leak_count;
    }
    key(o, "totals");
    mt_out_write(o, "{", 1);
    u64f(o, "devices", a->n_devices, 1);
    u64f(o, "alloc_bytes", ab, 1);
    u64f(o, "alloc_count", ac, 1);
    u64f(o, "free_count", fc, 1);
    u64f(o, "leak_bytes", lb, 1);
    u64f(o, "leak_count", lc, 1);
    u64f(o, "failed_requests", a->failed_total, 0);
    mt_out_puts(o, "},");
    key(o, "leaks");
    mt_out_write(o, "[", 1);
    int first = 1;
    for (size_t i = 0; i < a->n_devices + (a->host != NULL) && rc == 0; i++) {
        mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        if (!d->leak_count) continue;
        char root[32];
        mt_out_puts(o, first ? "{" : ",{");
        first = 0;
        key(o, "device");
        mt_out_printf(o, "%d,", d->u.is_host ? -1 : d->u.device);
        key(o, "root");
        mt_out_json_string(o, mt_device_root_name(d, root, sizeof root));
        mt_out_write(o, ",", 1);
        u64f(o, "bytes", d->leak_bytes, 1);
        u64f(o, "count", d->leak_count, 1);
        key(o, "stacks");
        rc = stack_array(o, a, &d->leaks, d->leak_bytes, top, ro, &nb);
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "],");
    key(o, "failed_requests");
    mt_out_write(o, "[", 1);
    for (size_t i = 0; i < a->n_failed && rc == 0; i++) {
        const mt_failed_request *f = &a->failed[i];
        mt_out_puts(o, i ? ",{" : "{");
        u64f(o, "time_ns", f->time_ns, 1);
        key(o, "device");
        mt_out_printf(o, "%d,", f->device);
        u64f(o, "bytes", f->bytes, 1);
        key(o, "kind");
        mt_out_json_string(o, mt_kind_name(f->kind));
        mt_out_write(o, ",", 1);
        u64f(o, "result", f->result, 1);
        key(o, "result_name");
        mt_out_json_string(o, mt_result_name(f->result));
        mt_out_write(o, ",", 1);
        u64f(o, "tid", f->tid, 1);
        u64f(o, "stream", f->stream, 1);
        u64f(o, "in_use_bytes", f->in_use, 1);
        key(o, "pool_free_bytes");
        if (f->pool_free_known) mt_out_printf(o, "%llu,", (unsigned long long)f->pool_free);
        else mt_out_puts(o, "\"unknown\",");
        if (f->kind == MT_KIND_TENSOR) { /* PyTorch's caching allocator raised OutOfMemoryError */
            u64f(o, "torch_allocated_bytes", f->torch_allocated, 1);
            u64f(o, "torch_reserved_bytes", f->torch_reserved, 1);
            u64f(o, "driver_refusals", f->driver_refusals, 1);
        } else if (f->torch_async) { /* backend:cudaMallocAsync raised it on this refusal */
            u64f(o, "torch_allocated_bytes", f->torch_allocated, 1);
        }
        key(o, "outcome");
        mt_out_json_string(o, mt_failed_outcome_name(f));
        mt_out_printf(o, ",\"raised_as\":%d,", f->raised_as);
        char then[512];
        key(o, "then");
        mt_out_json_string(o, mt_failed_outcome_text(a, i, then, sizeof then));
        mt_out_write(o, ",", 1);
        /* a request of autograd's workers: the backward() call (backward_calls.c) */
        key(o, "backward_call");
        if (f->backward_stack) {
            mt_stack_stat call = {.stack = f->backward_stack};
            if ((rc = mt_stat_frames(a->frames, &call, ro->names,
                                     mt_frames_resolve(a->frames, ro->frames), ro->full_stacks,
                                     &nb)) < 0)
                break;
            mt_out_write(o, "{", 1);
            u64f(o, "time_ns", f->backward_time_ns, 1);
            key(o, "frame");
            mt_out_json_string(o, mt_frames_first_user(a->frames, f->backward_stack, ro->names));
            mt_out_write(o, ",", 1);
            frames_array(o, &nb);
            mt_out_puts(o, "},");
        } else {
            mt_out_puts(o, "null,");
        }
        /* record --tensors: the tensors live then by category (failure_replay.c) */
        unsigned cats[MT_CAT_MAX];
        uint64_t tensors;
        size_t n_cats = mt_failed_categories(a, f, cats, &tensors);
        key(o, "by_category");
        if (f->categories_known) {
            mt_out_write(o, "[", 1);
            for (size_t k = 0; k < n_cats; k++) {
                mt_out_puts(o, k ? ",{" : "{");
                key(o, "name");
                mt_out_json_string(o, mt_category_name(a->categories, cats[k]));
                mt_out_write(o, ",", 1);
                u64f(o, "bytes", f->by_category[cats[k]], 0);
                mt_out_write(o, "}", 1);
            }
            mt_out_puts(o, "],");
        } else {
            mt_out_puts(o, "null,");
        }
        mt_stack_stat self = {.stack = f->stack, .driver = f->kind == MT_KIND_DRIVER};
        mt_stack_list one = {&self, 1};
        key(o, "stack");
        if ((rc = stack_array(o, a, &one, f->bytes, 1, ro, &nb)) < 0) break;
        mt_out_write(o, ",", 1);
        key(o, "live");
        rc = stack_array(o, a, &f->live, f->in_use, top, ro, &nb);
        mt_out_write(o, "}", 1);
    }
    mt_out_puts(o, "],");
    u64f(o, "failed_total", a->failed_total, 1);
    u64f(o, "failed_retried", a->failed_retried, 1);
    u64f(o, "failed_probes", a->failed_probes, 1);
    const mt_anomalies *an = &a->anomalies;
    key(o, "anomalies");
    mt_out_write(o, "{", 1);
    u64f(o, "unmatched_frees", an->unmatched_frees, 1);
    u64f(o, "double_frees", an->double_frees, 1);
    u64f(o, "replaced", an->replaced, 1);
    u64f(o, "partial_unmaps", an->partial_unmaps, 1);
    u64f(o, "ctx_destroy_released", an->ctx_destroy_released, 1);
    u64f(o, "unknown_events", an->unknown_events, 1);
    u64f(o, "unknown_device_allocations", an->unknown_device, 1);
    u64f(o, "bad_device_events", an->bad_devices, 1);
    u64f(o, "bad_stack_nodes", an->bad_stack_nodes, 0);
    mt_out_puts(o, "}}");
    mt_namebuf_free(&nb);
    return rc;
}

int mt_report_json_trace(mt_out *o, mt_analysis *a, const mt_report_options *opt)
{
    mt_report_options ro = opt ? *opt : (mt_report_options){0};
    if (!ro.top) ro.top = 10;
    return trace_object(o, a, &ro);
}

int mt_report_json(mt_out *o, mt_analysis *const *a, size_t n, const mt_report_options *opt)
{
    mt_report_options ro = opt ? *opt : (mt_report_options){0};
    if (!ro.top) ro.top = 10;
    /* "schema" opens the top-level object: the trace's, or the one around several */
    if (n != 1) mt_out_printf(o, "{\"schema\":%d,\"traces\":[", MT_JSON_SCHEMA);
    for (size_t i = 0; i < n; i++) {
        if (i) mt_out_write(o, ",", 1);
        ro.json_schema = n == 1;
        if (trace_object(o, a[i], &ro) < 0) return -1;
    }
    mt_out_puts(o, n != 1 ? "]}\n" : "\n");
    return 0;
}
