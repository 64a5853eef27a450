/* The Chrome export's counter tracks of each device (the layout is in chrome.c): points bucketed
 * in time, each bucket keeping its highest "in use" point and its last one, so the peak is exact
 * and a track has at most the cap's points. */
#include <stdlib.h>
#include <string.h>

#include "chrome_parts.h"

/* A counter point unless the track already shows v (force: the trace's last point). */
static void counter_if(chrome *c, slot_info *si, int track, const char *root, const char *what,
                       uint64_t when, uint64_t v, int force)
{
    if (si && !force && si->written[track] && si->last[track] == v) return;
    if (si) {
        si->last[track] = v;
        si->written[track] = 1;
    }
    mt_chrome_counter(c, root, what, when, v);
}

void mt_chrome_counter(chrome *c, const char *root, const char *what, uint64_t when, uint64_t v)
{
    mt_out *o = c->o;
    begin_event(c);
    mt_out_puts(o, "\"ph\":\"C\",\"pid\":");
    mt_out_u64(o, c->pid);
    mt_out_puts(o, ",\"tid\":0,\"name\":\"");
    mt_out_puts(o, root);
    WRITE_LIT(o, " ");
    mt_out_puts(o, what);
    WRITE_LIT(o, "\",");
    ts(o, rel_of(c, when));
    mt_out_puts(o, ",\"args\":{\"bytes\":");
    mt_out_u64(o, v);
    WRITE_LIT(o, "}}");
}

/* The kinds whose bytes are in use (mt_usage.in_use): the keys of "by kind". catapult draws a
 * counter's keys stacked, the track's height their sum, so "by kind" must add up to "in use";
 * VMM_RESERVE is address space (NCCL reserves more than it maps: a DDP rank's stack read 2.3 times
 * its bytes in use) and VMM_MAP ranges are counted by their VMM_PHYSICAL handle, as in the text
 * and HTML reports. Address space has a track of its own. */
static int in_use_kind(unsigned k)
{
    return k != MT_KIND_VMM_RESERVE && k != MT_KIND_VMM_MAP;
}

/* The device report of a usage slot: its kinds over the whole trace decide the counter keys. */
static const mt_device_report *report_of(const chrome *c, int32_t device, int is_host)
{
    const mt_analysis *a = c->a;
    if (is_host) return a->host;
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == device) return &a->devices[i];
    return NULL;
}

/* The points of every counter track of a device that changed (all of them: force). The keys of
 * "by kind" and which tracks exist follow the device's usage over the whole trace (its report; a
 * usage slot without one: the tracker's so far). */
static void emit_counters(chrome *c, const point *u, uint64_t caching, uint64_t when, int force)
{
    char root[32];
    root_of(u->device, u->is_host, root, sizeof root);
    mt_out *o = c->o;
    slot_info *si = slot_of(c, u->device, u->is_host);
    counter_if(c, si, COUNTER_IN_USE, root, "in use", when, u->in_use, force);
    const mt_device_report *d = report_of(c, u->device, u->is_host);
    const mt_usage *whole = d ? &d->u : mt_tracker_usage(c->t, u->device, u->is_host);
    int first = 1, changed = force || !si;
    for (unsigned k = 0; k < MT_KIND_MAX_ && !changed; k++)
        changed = in_use_kind(k) &&
                  (!si->written[COUNTERS_ + k] || si->last[COUNTERS_ + k] != u->by_kind[k]);
    for (unsigned k = 0; k < MT_KIND_MAX_ && changed; k++) {
        /* every kind of bytes in use the device ever had, at every point (catapult keeps the keys
         * of a counter's first event); none is named here, so new kinds show up by themselves */
        if (!in_use_kind(k)) continue;
        if (si) {
            si->last[COUNTERS_ + k] = u->by_kind[k];
            si->written[COUNTERS_ + k] = 1;
        }
        if (!whole || !whole->by_kind_peak[k]) continue;
        if (first) {
            begin_event(c);
            mt_out_puts(o, "\"ph\":\"C\",\"pid\":");
            mt_out_u64(o, c->pid);
            mt_out_puts(o, ",\"tid\":0,\"name\":\"");
            mt_out_puts(o, root);
            mt_out_puts(o, " by kind\",");
            ts(o, rel_of(c, when));
            mt_out_puts(o, ",\"args\":{");
        }
        mt_out_puts(o, first ? "\"" : ",\"");
        mt_out_puts(o, mt_kind_name(k));
        WRITE_LIT(o, "\":");
        mt_out_u64(o, u->by_kind[k]);
        first = 0;
    }
    if (!first) mt_out_puts(o, "}}");
    const mt_categorizer *cz = c->a->categories;
    if (cz && !u->is_host &&
        (!si || force || memcmp(si->last_cat, u->by_category, sizeof si->last_cat) != 0)) {
        /* record --tensors: a stacked track of what the tensors are for, every category at every
         * point (catapult keeps the keys of the first) */
        if (si) memcpy(si->last_cat, u->by_category, sizeof si->last_cat);
        begin_event(c);
        mt_out_printf(o, "\"ph\":\"C\",\"pid\":%llu,\"tid\":0,\"name\":\"%s by category\",",
                      (unsigned long long)c->pid, root);
        ts(o, rel_of(c, when));
        mt_out_puts(o, ",\"args\":{");
        for (unsigned k = MT_CAT_PARAMETERS; k < mt_category_count(cz) && k < MT_CAT_MAX; k++) {
            if (k > MT_CAT_PARAMETERS) WRITE_LIT(o, ",");
            mt_out_json_string(o, mt_category_name(cz, k));
            mt_out_printf(o, ":%llu", (unsigned long long)u->by_category[k]);
        }
        mt_out_puts(o, "}}");
    }
    if (u->has_pool_info)
        counter_if(c, si, COUNTER_POOL, root, "pool reserved", when, u->pool_reserved, force);
    if (u->is_host) return;
    if (whole && whole->vmm_reserved_peak) /* cuMemAddressReserve: not bytes */
        counter_if(c, si, COUNTER_ADDRESS_SPACE, root, "address space", when,
                   u->vmm_reserved, force);
    uint64_t async = u->by_kind[MT_KIND_ASYNC], pool = 0;
    if (u->has_pool_info) pool = u->pool_reserved > async ? u->pool_reserved : async;
    uint64_t in_pool = u->has_pool_info ? async : 0, api = u->api_in_use;
    /* PyTorch's segments: flagged by the recorder (its live bytes are the tracker's
     * segment_bytes); older traces: classified by stack */
    if (whole && whole->segment_peak) caching = u->segment_bytes;
    int tensors = whole && whole->by_kind_peak[MT_KIND_TENSOR] > 0;
    /* in tensor mode the segments are not in api_in_use (their tensors are) */
    uint64_t mine = tensors ? u->by_kind[MT_KIND_TENSOR] + in_pool : caching + in_pool;
    counter_if(c, si, COUNTER_RESERVED, root, "allocator reserved", when, caching + pool, force);
    if (tensors)
        counter_if(c, si, COUNTER_TENSORS, root, "tensors allocated", when,
                   u->by_kind[MT_KIND_TENSOR], force);
    else if (u->has_pool_info)
        counter_if(c, si, COUNTER_TENSORS, root, "tensors allocated", when, async, force);
    counter_if(c, si, COUNTER_OTHER, root, "other libraries", when, api > mine ? api - mine : 0,
               force);
    counter_if(c, si, COUNTER_DRIVER, root, "driver-internal", when, u->by_kind[MT_KIND_DRIVER],
               force);
}

/* The time bucket of an absolute time: 0 .. (cap - 1) / 2 - 1 for the times of the trace. */
static uint64_t bucket_of(const chrome *c, uint64_t abs)
{
    return (rel_of(c, abs) - c->offset_ns) / c->quantum;
}

/* Copies the last point of usage slot i out of the tracker, if it is still only there. */
void mt_chrome_take_last(chrome *c, size_t i)
{
    counter_state *s = &c->cs[i];
    if (!s->last_live) return;
    const mt_usage *u;
    size_t n = mt_tracker_usages(c->t, &u);
    if (i < n) point_of(&s->last, &u[i], c->a->categories != NULL);
    s->last_live = 0;
}

static void set_bucket(chrome *c, counter_state *s, uint64_t b)
{
    uint64_t start = c->a->header.start_monotonic_ns, span, end;
    s->bucket = b;
    if (__builtin_mul_overflow(b + 1, c->quantum, &span) || b + 1 == 0 ||
        __builtin_add_overflow(start, span, &end))
        end = UINT64_MAX;
    s->bucket_end = end;
}

static void flush_bucket(chrome *c, counter_state *s)
{
    mt_chrome_take_last(c, (size_t)(s - c->cs));
    if (s->have_max) emit_counters(c, &s->max, s->max_caching, s->max_t, 0);
    if (s->have_last && (!s->have_max || s->last_t != s->max_t || s->last.in_use != s->max.in_use))
        emit_counters(c, &s->last, s->last_caching, s->last_t, 0);
    s->have_max = s->have_last = 0;
}

/* nvidia-smi's samples of a device: the highest and the last of each bucket, as
 * mt_chrome_on_usage. */
static void flush_nvml(chrome *c, slot_info *si)
{
    char root[32];
    root_of(si->device, 0, root, sizeof root);
    if (si->nvml_have_max)
        mt_chrome_counter(c, root, "nvidia-smi (process)", si->nvml_max_t, si->nvml_max);
    if (si->nvml_have_last &&
        (!si->nvml_have_max || si->nvml_last_t != si->nvml_max_t || si->nvml_last != si->nvml_max))
        mt_chrome_counter(c, root, "nvidia-smi (process)", si->nvml_last_t, si->nvml_last);
    si->nvml_have_max = si->nvml_have_last = 0;
}

void mt_chrome_on_nvml(chrome *c, int32_t device, uint64_t time_ns, uint64_t value)
{
    slot_info *si = slot_of(c, device, 0);
    if (!si) return; /* an ordinal no device can have: no track */
    if (time_ns > si->nvml_clock) si->nvml_clock = time_ns;
    uint64_t b = bucket_of(c, si->nvml_clock);
    if (b != si->nvml_bucket) {
        flush_nvml(c, si);
        si->nvml_bucket = b;
    }
    if (!si->nvml_have_max || value > si->nvml_max) {
        si->nvml_max = value;
        si->nvml_max_t = si->nvml_clock;
        si->nvml_have_max = 1;
    }
    si->nvml_last = value;
    si->nvml_last_t = si->nvml_clock;
    si->nvml_have_last = si->have_nvml = 1;
}

void mt_chrome_on_usage(void *ctx, const mt_usage *u, uint64_t time_ns)
{
    chrome *c = ctx;
    slot_info *si = slot_of(c, u->device, u->is_host);
    uint64_t caching = si && !u->is_host ? si->caching : 0;
    const mt_usage *base;
    size_t n = mt_tracker_usages(c->t, &base), i = (size_t)(u - base);
    if (n > c->n_cs) {
        counter_state *ns = realloc(c->cs, n * sizeof *ns);
        if (!ns) {
            c->oom = 1;
            return;
        }
        memset(ns + c->n_cs, 0, (n - c->n_cs) * sizeof *ns);
        for (size_t k = c->n_cs; k < n; k++) set_bucket(c, &ns[k], 0);
        c->cs = ns;
        c->n_cs = n;
    }
    counter_state *s = &c->cs[i];
    if (time_ns > s->clock) s->clock = time_ns;
    /* the clock never steps back, so its bucket changes only once it reaches the bucket's end (a
     * 64-bit division at every event, before); an end that saturated (set_bucket) says nothing,
     * and the bucket is worked out */
    if (s->clock >= s->bucket_end || s->bucket_end == UINT64_MAX) {
        uint64_t b = bucket_of(c, s->clock); /* never smaller than the last one */
        if (b != s->bucket) {
            flush_bucket(c, s);
            set_bucket(c, s, b);
        }
    }
    int cats = c->a->categories != NULL;
    if (!s->have_max || u->in_use > s->max.in_use) {
        point_of(&s->max, u, cats);
        s->max_t = s->clock;
        s->max_caching = caching;
        s->have_max = 1;
    }
    s->last_live = 1;
    s->last_t = s->clock;
    s->last_caching = caching;
    s->have_last = 1;
}

/* The last point of every counter, at the end of the trace (where the slices end too). */
void mt_chrome_final_counters(chrome *c, uint64_t end)
{
    const mt_usage *u;
    size_t n = mt_tracker_usages(c->t, &u);
    for (size_t i = 0; i < c->n_cs; i++) flush_bucket(c, &c->cs[i]);
    char root[32];
    for (size_t i = 0; i < n; i++) {
        if (!u[i].alloc_count && !u[i].free_count && !u[i].has_pool_info) continue;
        slot_info *si = slot_of(c, u[i].device, u[i].is_host);
        point p;
        point_of(&p, &u[i], c->a->categories != NULL);
        emit_counters(c, &p, si && !u[i].is_host ? si->caching : 0, end, 1);
    }
    for (size_t i = 0; i < c->slots.n; i++) {
        slot_info *si = &c->slots.v[i];
        if (!si->have_nvml) continue;
        flush_nvml(c, si);
        /* NVML's sampler outlives the last event of a killed process (a torchrun rank): its
         * samples may come after `end`, and then the flush wrote the last one */
        if (si->nvml_clock < end)
            mt_chrome_counter(c, root_of(si->device, 0, root, sizeof root), "nvidia-smi (process)",
                              end, si->nvml_last);
    }
}
