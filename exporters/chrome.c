/* Chrome Trace Event Format JSON for ui.perfetto.dev and the catapult trace viewer
 * (chrome://tracing).
 *
 *   {"traceEvents": [ ... ], "otherData": {...}}
 *
 * Layout, per traced process (pid = the traced pid, named by its command):
 *   counters  "<root> in use" {bytes}; "<root> by kind" {one key per kind of bytes in use the
 *             device ever had: they add up to "in use", since catapult draws a counter's keys
 *             stacked}; "<root> address space" {bytes} (reserved by cuMemAddressReserve, when the
 *             device reserved any: address space, not bytes in use);
 *             "<root> pool reserved" {bytes} (with pool information); the reconciliation
 *             (docs/analysis.md) "<root> allocator reserved", "<root> tensors allocated" (with pool
 *             information), "<root> other libraries", "<root> driver-internal", and
 *             "<root> nvidia-smi (process)" at each NVML sample; with tensors (record --tensors)
 *             "<root> by category" {one key per category: parameters, gradients, ...}, each
 *             tensor in its category at that moment (a backward tensor is a backward temporary
 *             until its pass has ended, then a gradient); one last point of each at the end
 *             of the trace, where the slices end. Perfetto names a counter track "<name> <key>";
 *             catapult fixes a counter's series at its first event, so a name always carries the
 *             same keys. Points are bounded: the trace's duration is cut into
 *             (cap - 1) / 2 time buckets per device (cap: mt_chrome_options.max_counter_points,
 *             default MT_CHROME_MAX_COUNTER_POINTS), each keeping its highest "in use" point
 *             (every track's values at that moment) and its last one, so every track of a device
 *             has at most `cap` points with the closing one, and the peak is exact. A short
 *             trace has buckets narrower than the time between its events: every change.
 *             A point's time is the latest event time read so far on its device (nvidia-smi's:
 *             the latest sample time): the recorder's threads reach the file in turns, so the
 *             time of file order steps back at each switch, and a counter must not (catapult
 *             draws a track in the order of its points; the old every-change flush also wrote a
 *             point each time the time went back into a different bucket).
 *   slices    one track per device and allocation kind, "cuda:0 async" (split by stream, "cuda:0
 *             async stream 2", when the kind used several streams): both viewers make a track
 *             per top-level slice name (Perfetto: per process and name, for ids scoped to the
 *             process with id2.local; catapult: per thread and title), so each allocation is a
 *             top-level slice named after its track with one child named after its first user
 *             frame (mt_frames_first_user), sharing its id. Sizes and the rest are the child's
 *             args: bytes, size, kind, stream, address, ended (free, replaced, context destroyed,
 *             trace end), tid and thread of the allocating thread, stack (the user view for
 *             Python programs, root first, innermost MAX_SLICE_FRAMES). The slices of a device
 *             sit on one made-up thread per device, "cuda:0 allocations" (VIRTUAL_TID), so that
 *             catapult groups them process -> device -> kind as Perfetto does.
 *             Driver-internal allocations (thousands of few-byte buffers alive to the end) get no
 *             slices unless asked for: their bytes are in the counters.
 *   instants  each device's peak and each failed request (process scope).
 *   A trace without memory events gets one slice "no GPU memory events" over the recording (on a
 *   made-up thread "memtrace"): with nothing else that has a time, catapult builds an empty model
 *   and shows a blank page.
 * Timestamps are µs with 3 decimals (exact ns) since the earliest trace start (wall clock), so
 * several traces of one job line up. Ids: trace index << 48 | lifetime serial.
 *
 * Slices are limited by --min-bytes and --top-allocs; by default at most
 * MT_CHROME_DEFAULT_MAX_SLICES per trace (the largest kept), said in otherData. A survey of the
 * trace finds the streams of each device and kind and, when a cap applies, the size of the N-th
 * largest allocation (sizes counted by value; past SURVEY_SIZES different ones, a size-N
 * min-heap): made while mt_analyze reads the trace (the CLI), or by a read of its own
 * (mt_chrome_add). The export itself is one more read.
 *
 * This file writes one trace (metadata, instants, the read that drives a tracker) and the stream
 * of traces; the counters are chrome_counters.c's, the slices chrome_slices.c's and the survey
 * chrome_survey.c's, sharing chrome_parts.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chrome_parts.h"

static void metadata(chrome *c)
{
    mt_out *o = c->o;
    begin_event(c);
    mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":0,\"name\":\"process_name\","
                     "\"args\":{\"name\":", (unsigned long long)c->pid);
    /* the viewers add the pid themselves: "rank 3 (host)" for a job's rank, else the command */
    char label[256];
    if (c->a->header.flags & MT_HDR_RANK && c->a->header.rank >= 0)
        mt_out_json_string(o, mt_trace_label(c->a, label, sizeof label));
    else
        mt_out_json_string(o, c->a->comm[0] ? c->a->comm : "process");
    mt_out_puts(o, "}}");
    if (c->a->header.flags & MT_HDR_RANK && c->a->header.rank >= 0) { /* ranks in rank order */
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":0,\"name\":\"process_sort_index\","
                         "\"args\":{\"sort_index\":%d}}",
                      (unsigned long long)c->pid, (int)c->a->header.rank);
    }
    char root[32], name[64];
    for (size_t i = 0; i < c->a->n_devices + (c->a->host != NULL); i++) {
        const mt_device_report *d = i < c->a->n_devices ? &c->a->devices[i] : c->a->host;
        begin_event(c);
        snprintf(name, sizeof name, "%s allocations", mt_device_root_name(d, root, sizeof root));
        mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":%u,\"name\":\"thread_name\","
                         "\"args\":{\"name\":\"%s\"}}",
                      (unsigned long long)c->pid, virtual_tid(d->u.device, d->u.is_host), name);
    }
}

static void instants(chrome *c)
{
    mt_out *o = c->o;
    char root[32], b[32], name[128];
    mt_analysis *a = c->a;
    if (!a->n_devices && !a->host) {
        /* Nothing else of this trace has a time: catapult would build an empty model and show a
         * blank page (an instant of the process does not count in its bounds), Perfetto an empty
         * process. One slice over the recording says why, on a made-up thread of its own. */
        uint32_t tid = VIRTUAL_TID + 0xffffu;
        uint64_t id = c->t_index << 48; /* no lifetime has serial 0 here: there are none */
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"M\",\"pid\":%llu,\"tid\":%u,\"name\":\"thread_name\","
                         "\"args\":{\"name\":\"memtrace\"}}",
                      (unsigned long long)c->pid, tid);
        char head[96], t[40];
        size_t head_n = mt_chrome_slice_head(c, head, id, tid);
        for (int end = 0; end < 2; end++) {
            begin_event(c);
            mt_out_puts(o, end ? "\"ph\":\"e\",\"cat\":\"memtrace"
                               : "\"ph\":\"b\",\"cat\":\"memtrace");
            mt_out_write(o, head, head_n);
            mt_out_puts(o, "\"no GPU memory events\",");
            mt_out_write(o, t, mt_chrome_ts_text(t, c->offset_ns + (end ? a->duration_ns : 0)));
            mt_out_puts(o, "}");
        }
    }
    for (size_t i = 0; i < a->n_devices + (a->host != NULL); i++) {
        const mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        if (!d->u.peak) continue;
        snprintf(name, sizeof name, "peak %s %s", mt_device_root_name(d, root, sizeof root),
                 mt_format_bytes(d->u.peak, b, sizeof b));
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"i\",\"s\":\"p\",\"pid\":%llu,\"tid\":0,\"name\":\"%s\",",
                      (unsigned long long)c->pid, name);
        ts(o, d->peak_time_ns + c->offset_ns);
        mt_out_printf(o, ",\"args\":{\"bytes\":%llu,\"api_peak_bytes\":%llu,"
                         "\"driver_bytes_at_peak\":%llu}}",
                      (unsigned long long)d->u.peak, (unsigned long long)d->u.api_peak,
                      (unsigned long long)d->driver_at_peak);
    }
}

static void failed_instant(chrome *c, const mt_event *e)
{
    mt_out *o = c->o;
    char root[32], b[32], name[128];
    int host = is_host_kind(e->kind);
    /* a tensor request is PyTorch's caching allocator giving up (failed_ties.c) */
    snprintf(name, sizeof name, "%s %s %s %s",
             e->kind == MT_KIND_TENSOR ? "torch.OutOfMemoryError" : "failed",
             root_of(host ? -1 : e->device, host, root, sizeof root),
             mt_format_bytes(e->bytes, b, sizeof b), mt_kind_name(e->kind));
    const mt_usage *u = mt_tracker_usage(c->t, host ? -1 : e->device, host);
    uint64_t in_use = u ? u->in_use : 0;
    begin_event(c);
    mt_out_printf(o, "\"ph\":\"i\",\"s\":\"p\",\"pid\":%llu,\"tid\":%u,\"name\":\"%s\",",
                  (unsigned long long)c->pid, e->tid, name);
    ts(o, rel_of(c, e->time_ns));
    mt_out_printf(o,
                  ",\"args\":{\"bytes\":%llu,\"kind\":\"%s\",\"result\":%u,"
                  "\"result_name\":\"%s\",\"in_use\":%llu,\"first_user_frame\":",
                  (unsigned long long)e->bytes, mt_kind_name(e->kind), e->result,
                  mt_result_name(e->result), (unsigned long long)in_use);
    mt_out_json_string(o, mt_frames_first_user(c->a->frames, e->stack, c->opt->names));
    if (e->kind == MT_KIND_TENSOR) /* its memory_allocated() then */
        mt_out_printf(o, ",\"torch_allocated\":%llu", (unsigned long long)e->aux);
    mt_out_puts(o, "}}");
}

static int one_trace(chrome *c, mt_chrome_survey *sv, char *err, size_t errlen)
{
    mt_analysis *a = c->a;
    uint64_t keep = sv->top.keep;
    if (!c->opt->top_allocs && a->events <= keep) keep = 0; /* no cap can apply */
    if (mt_chrome_survey_finish(c, sv, keep, err, errlen) < 0) return -1;
    uint64_t cap = c->opt->max_counter_points ? c->opt->max_counter_points
                                              : MT_CHROME_MAX_COUNTER_POINTS;
    if (cap < 3) cap = 3;
    c->quantum = a->duration_ns / ((cap - 1) / 2) + 1; /* so bucket_of < (cap - 1) / 2 */
    metadata(c);
    instants(c);
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    mt_tracker_hooks hooks = {.ctx = c, .on_usage = mt_chrome_on_usage,
                              .on_release = mt_chrome_on_release};
    c->t = mt_tracker_new(&hooks);
    if (!c->t) {
        mt_reader_close(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (a->categories) mt_tracker_set_categorizer(c->t, a->categories);
    const mt_record *rec; /* in the reader's batch, not copied: valid until the next read */
    uint64_t n = 0, last = a->header.start_monotonic_ns;
    while (!c->oom && mt_reader_next_ref(r, &rec) == MT_READ_RECORD) {
        if (rec->type == MT_REC_SAMPLE && rec->u.sample.counter == MT_COUNTER_NVML_PROCESS_BYTES) {
            mt_chrome_on_nvml(c, rec->u.sample.device, rec->u.sample.time_ns, rec->u.sample.value);
            continue;
        }
        if (rec->type != MT_REC_EVENT) continue;
        const mt_event *e = &rec->u.event;
        /* counted before the tracker applies it: its usage hook must see the new segment */
        if (e->op == MT_OP_ALLOC && !is_host_kind(e->kind) &&
            is_caching_segment(c, e->kind, e->stack)) {
            slot_info *si = slot_of(c, e->device, 0);
            if (si) si->caching += e->bytes;
        }
        if (e->time_ns > last) last = e->time_ns;
        if (e->op == MT_OP_FAILED) failed_instant(c, e);
        mt_chrome_settle_last(c, e->time_ns);
        if (mt_tracker_event(c->t, e) < 0) c->oom = 1;
        if (c->opt->progress && ++n % 65536 == 0)
            c->opt->progress(c->opt->progress_ctx,
                             (double)mt_reader_offset(r) / (double)(mt_reader_file_size(r) + 1));
    }
    /* Lifetimes still open end where the trace ends (END record or last event); so do the
     * counters. */
    uint64_t end = a->header.start_monotonic_ns + a->duration_ns;
    if (last > end) end = last;
    mt_chrome_final_counters(c, end);
    mt_tracker_finish(c->t, end);
    mt_tracker_free(c->t);
    c->t = NULL;
    mt_reader_close(r);
    if (c->oom) snprintf(err, errlen, "%s: out of memory", a->path);
    return c->oom ? -1 : 0;
}

/* Several traces, one at a time (the CLI frees each analysis before the next): what the closing
 * otherData needs is kept here. */
typedef struct damage_note {
    char *path, *first, *truncated; /* first: the first damaged chunk; truncated: why, or NULL */
    uint64_t chunks, bytes;
} damage_note;

struct mt_chrome_stream {
    mt_out *o;
    mt_chrome_options opt;
    uint64_t base;
    uint64_t kept, skipped, driver, dropped, damaged, damaged_bytes;
    int capped, first, truncated;
    size_t n;
    char **paths;
    damage_note *damage; /* the traces that were damaged or truncated */
    size_t n_damage;
};

mt_chrome_stream *mt_chrome_begin(mt_out *o, const mt_chrome_options *opt,
                                  uint64_t base_realtime_ns)
{
    mt_chrome_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = o;
    if (opt) s->opt = *opt;
    s->base = base_realtime_ns;
    s->first = 1;
    mt_out_puts(o, "{\"traceEvents\":[");
    return s;
}

mt_chrome_survey *mt_chrome_survey_begin(const mt_chrome_stream *s)
{
    return mt_chrome_survey_new(&s->opt);
}

int mt_chrome_add(mt_chrome_stream *s, mt_analysis *a, char *err, size_t errlen)
{
    mt_chrome_survey *sv = mt_chrome_survey_begin(s);
    if (!sv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (mt_chrome_survey_read(sv, a, err, errlen) < 0) {
        mt_chrome_survey_free(sv);
        return -1;
    }
    return mt_chrome_add_surveyed(s, a, sv, err, errlen);
}

int mt_chrome_add_surveyed(mt_chrome_stream *s, mt_analysis *a, mt_chrome_survey *sv, char *err,
                           size_t errlen)
{
    char **np = realloc(s->paths, (s->n + 1) * sizeof *np);
    if (!np || !(np[s->n] = strdup(a->path ? a->path : ""))) {
        if (np) s->paths = np;
        mt_chrome_survey_free(sv);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->paths = np;
    uint64_t start = a->header.start_realtime_ns;
    chrome c = {.o = s->o, .a = a, .opt = &s->opt, .pid = a->pid, .t_index = s->n++,
                .offset_ns = start > s->base ? start - s->base : 0, .first = &s->first,
                .frames = mt_frames_resolve(a->frames, s->opt.frames)};
    int rc = one_trace(&c, sv, err, errlen);
    mt_chrome_survey_free(sv);
    free(c.cs);
    free(c.slots.v);
    mt_namebuf_free(&c.nb);
    mt_u64map_destroy(&c.stack_json);
    mt_u64map_destroy(&c.who_json);
    mt_u64map_destroy(&c.track_json);
    free(c.stack_blob);
    s->kept += c.kept;
    s->skipped += c.skipped;
    s->driver += c.driver_skipped;
    s->capped |= c.select && !s->opt.top_allocs;
    s->truncated |= a->truncated;
    s->dropped += a->dropped;
    s->damaged += a->damaged_chunks;
    s->damaged_bytes += a->damaged_bytes;
    if (a->damaged_chunks || a->truncated) {
        damage_note *nd = realloc(s->damage, (s->n_damage + 1) * sizeof *nd);
        if (!nd) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        s->damage = nd;
        nd[s->n_damage++] = (damage_note){
            strdup(a->path ? a->path : ""), a->damage_msg ? strdup(a->damage_msg) : NULL,
            a->truncated && a->truncated_msg ? strdup(a->truncated_msg) : NULL, a->damaged_chunks,
            a->damaged_bytes};
    }
    return rc;
}

void mt_chrome_abandon(mt_chrome_stream *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->paths[i]);
    for (size_t i = 0; i < s->n_damage; i++) {
        free(s->damage[i].path);
        free(s->damage[i].first);
        free(s->damage[i].truncated);
    }
    free(s->damage);
    free(s->paths);
    free(s);
}

int mt_chrome_end(mt_chrome_stream *s)
{
    mt_out *o = s->o;
    mt_out_puts(o, "\n],\"otherData\":{\"generator\":\"memtrace " MEMTRACE_VERSION
                   "\",\"traces\":[");
    for (size_t i = 0; i < s->n; i++) {
        if (i) WRITE_LIT(o, ",");
        mt_out_json_string(o, s->paths[i]);
        free(s->paths[i]);
    }
    mt_out_printf(o, "],\"slices_kept\":%llu,\"slices_left_out\":%llu,"
                     "\"driver_internal_slices_left_out\":%llu,\"min_bytes\":%llu,"
                     "\"top_allocs\":%llu,\"default_cap_applied\":%s",
                  (unsigned long long)s->kept, (unsigned long long)s->skipped,
                  (unsigned long long)s->driver, (unsigned long long)s->opt.min_bytes,
                  (unsigned long long)s->opt.top_allocs, s->capped ? "true" : "false");
    if (s->capped)
        mt_out_printf(o, ",\"note\":\"only the %u largest allocations per trace have slices "
                         "(default cap, about 200 MB); use --top-allocs or --min-bytes\"",
                      MT_CHROME_DEFAULT_MAX_SLICES);
    mt_out_printf(o, ",\"truncated\":%s,\"dropped_events\":%llu,\"damaged_chunks\":%llu,"
                     "\"damaged_bytes\":%llu,\"damage\":[",
                  s->truncated ? "true" : "false", (unsigned long long)s->dropped,
                  (unsigned long long)s->damaged, (unsigned long long)s->damaged_bytes);
    for (size_t i = 0; i < s->n_damage; i++) { /* per damaged or truncated trace: what was lost */
        damage_note *d = &s->damage[i];
        mt_out_puts(o, i ? ",{\"trace\":" : "{\"trace\":");
        mt_out_json_string(o, d->path);
        mt_out_printf(o, ",\"damaged_chunks\":%llu,\"damaged_bytes\":%llu,\"first\":",
                      (unsigned long long)d->chunks, (unsigned long long)d->bytes);
        mt_out_json_string(o, d->first ? d->first : "");
        mt_out_puts(o, ",\"truncated\":");
        mt_out_json_string(o, d->truncated ? d->truncated : "");
        WRITE_LIT(o, "}");
        free(d->path);
        free(d->first);
        free(d->truncated);
    }
    mt_out_puts(o, "]}}\n");
    free(s->damage);
    free(s->paths);
    free(s);
    return 0;
}

int mt_export_chrome(mt_out *o, mt_analysis *const *a, size_t n, const mt_chrome_options *opt,
                     char *err, size_t errlen)
{
    uint64_t base = ~0ull;
    for (size_t i = 0; i < n; i++)
        if (a[i]->header.start_realtime_ns < base) base = a[i]->header.start_realtime_ns;
    mt_chrome_stream *s = mt_chrome_begin(o, opt, n ? base : 0);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (mt_chrome_add(s, a[i], err, errlen) < 0) {
            mt_chrome_abandon(s);
            return -1;
        }
    return mt_chrome_end(s);
}
