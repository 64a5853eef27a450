/* The Chrome export's slices (the layout is in chrome.c): one per allocation, written when its
 * lifetime ends, on a track per device and kind; what the four events of a slice share is
 * formatted once, and names, stacks and sizes once per trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chrome_parts.h"

static const char *const end_names[] = {"free", "replaced", "context destroyed", "trace end"};

/* "cuda:0 async", "cuda:0 async stream 2", "host pinned". */
static void track_name(chrome *c, const mt_lifetime *l, int is_host, char *buf, size_t len)
{
    char root[32];
    root_of(l->device, is_host, root, sizeof root);
    const char *kind = mt_kind_name(l->kind);
    if (is_host && strncmp(kind, "host_", 5) == 0) kind += 5;
    slot_info *si = slot_of(c, l->device, is_host);
    size_t k = l->kind < MT_KIND_MAX_ ? l->kind : 0;
    if (!si || si->n_streams[k] <= 1) {
        snprintf(buf, len, "%s %s", root, kind);
        return;
    }
    size_t ix = 0;
    while (ix < si->n_streams[k] && ix < MAX_STREAMS && si->streams[k][ix] != l->stream) ix++;
    if (ix < MAX_STREAMS)
        snprintf(buf, len, "%s %s stream %zu", root, kind, ix + 1);
    else
        snprintf(buf, len, "%s %s, streams %u and more", root, kind, MAX_STREAMS + 1);
}

static const char *thread_name(const mt_analysis *a, uint32_t tid)
{
    for (size_t i = 0; i < a->n_threads; i++)
        if (a->threads[i].tid == tid) return a->threads[i].name;
    return NULL;
}

/* Keeps what was written to o since mark under key in map, to be written again (write_kept).
 * Nothing is kept once STACK_CACHE_BYTES are, or when it has already left the buffer. */
static void keep_written(chrome *c, mt_u64map *map, uint64_t key, uint64_t mark)
{
    size_t len;
    const char *p = mt_out_recent(c->o, mark, &len);
    if (!p || c->stack_blob_n + len > STACK_CACHE_BYTES) return; /* written, not kept */
    if (c->stack_blob_n + len > c->stack_blob_cap) {
        size_t cap = c->stack_blob_cap ? 2 * c->stack_blob_cap : 65536;
        while (cap < c->stack_blob_n + len) cap *= 2;
        char *nb = realloc(c->stack_blob, cap);
        if (!nb) return;
        c->stack_blob = nb;
        c->stack_blob_cap = cap;
    }
    mt_u64map_slot *slot = mt_u64map_upsert(map, key);
    if (!slot) return;
    memcpy(c->stack_blob + c->stack_blob_n, p, len);
    slot->a = c->stack_blob_n;
    slot->b = len;
    c->stack_blob_n += len;
}

/* Writes what keep_written kept under key; 0 when nothing is. */
static int write_kept(chrome *c, const mt_u64map *map, uint64_t key)
{
    const mt_u64map_slot *hit = mt_u64map_find(map, key);
    if (!hit) return 0;
    mt_out_write(c->o, c->stack_blob + hit->a, (size_t)hit->b);
    return 1;
}

/* ,"stack":[...] of a slice's args. Each stack is formatted once and its JSON kept (up to
 * STACK_CACHE_BYTES a trace): slices repeat a few thousand stacks, and naming and escaping their
 * frames again for each of 500 000 slices was most of the export's formatting. */
static void slice_stack(chrome *c, const mt_stack_stat *st)
{
    mt_out *o = c->o;
    uint64_t key = (uint64_t)st->stack << 1 | (st->driver != 0);
    if (write_kept(c, &c->stack_json, key)) return;
    uint64_t mark = mt_out_tell(o);
    if (mt_stat_frames(c->a->frames, st, c->opt->names, c->frames, 0, &c->nb) < 0) {
        c->oom = 1;
        c->nb.n = 0;
    }
    mt_out_puts(o, ",\"stack\":[");
    size_t from = c->nb.n > MAX_SLICE_FRAMES ? c->nb.n - MAX_SLICE_FRAMES : 0;
    for (size_t k = from; k < c->nb.n; k++) {
        if (k > from) WRITE_LIT(o, ",");
        mt_out_json_string(o, c->nb.v[k]);
    }
    mt_out_puts(o, from ? "],\"stack_truncated\":true" : "]");
    keep_written(c, &c->stack_json, key, mark);
}

/* Decimal digits of v at the end of b[20]; returns where they start. */
static char *digits(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

/* The parts of a slice event that its four events share, formatted once into buf (>= 96 bytes):
 * ","id2":{"local":"0x.."},"pid":P,"tid":T,"name": (slice_event). Returns the length. */
static size_t slice_head(const chrome *c, char *buf, uint64_t id, uint32_t tid)
{
    char num[20], *q;
    size_t n = 0;
#define PUT(s, len) (memcpy(buf + n, (s), (len)), n += (len))
#define PUTL(lit) PUT(lit, sizeof lit - 1)
    PUTL("\",\"id2\":{\"local\":\"0x");
    q = num + sizeof num;
    do {
        *--q = "0123456789abcdef"[id & 15];
        id >>= 4;
    } while (id);
    PUT(q, (size_t)(num + sizeof num - q));
    PUTL("\"},\"pid\":");
    q = digits(num + sizeof num, c->pid);
    PUT(q, (size_t)(num + sizeof num - q));
    PUTL(",\"tid\":");
    q = digits(num + sizeof num, tid);
    PUT(q, (size_t)(num + sizeof num - q));
    PUTL(",\"name\":");
#undef PUTL
#undef PUT
    return n;
}

/* The key of l's track name (track_name): its slot, kind and stream. */
static uint64_t track_key(chrome *c, const mt_lifetime *l, int is_host)
{
    slot_info *si = slot_of(c, l->device, is_host);
    size_t k = l->kind < MT_KIND_MAX_ ? l->kind : 0;
    uint64_t stream = 0; /* one track for the kind */
    if (si && si->n_streams[k] > 1) {
        size_t ix = 0;
        while (ix < si->n_streams[k] && ix < MAX_STREAMS && si->streams[k][ix] != l->stream) ix++;
        stream = ix + 1;
    }
    return (uint64_t)(uint32_t)l->device << 32 | (uint64_t)l->kind << 16 | stream << 2 |
           (uint64_t)(si != NULL) << 1 | (uint64_t)(is_host != 0);
}

/* One half of a slice: "b" or "e" of the track slice (child = 0) or of the named child. head is
 * from slice_head, ts_text the "ts":... part; the name's JSON is the one kept under key in names,
 * else name's, which is then kept. */
static void slice_event(chrome *c, int end, const char *cat, const char *head, size_t head_n,
                        mt_u64map *names, uint64_t key, const char *name, const char *ts,
                        size_t ts_n)
{
    mt_out *o = c->o;
    begin_event(c);
    if (end) WRITE_LIT(o, "\"ph\":\"e\",\"cat\":\"");
    else WRITE_LIT(o, "\"ph\":\"b\",\"cat\":\"");
    mt_out_puts(o, cat);
    mt_out_write(o, head, head_n);
    if (!write_kept(c, names, key)) {
        uint64_t mark = mt_out_tell(o);
        mt_out_json_string(o, name);
        keep_written(c, names, key, mark);
    }
    WRITE_LIT(o, ",");
    mt_out_write(o, ts, ts_n);
}

/* "ts":µs with ns precision (as ts()) into buf (>= 32 bytes); returns the length. */
static size_t ts_text(char *buf, uint64_t ns)
{
    char num[20], *q = digits(num + sizeof num, ns / 1000);
    size_t n = (size_t)(num + sizeof num - q);
    memcpy(buf, "\"ts\":", 5);
    memcpy(buf + 5, q, n);
    n += 5;
    buf[n++] = '.';
    buf[n++] = (char)('0' + ns % 1000 / 100);
    buf[n++] = (char)('0' + ns % 100 / 10);
    buf[n++] = (char)('0' + ns % 10);
    return n;
}

/* mt_format_bytes(bytes), kept in a small table: a trace's sizes repeat. */
static const char *slice_size(chrome *c, uint64_t bytes)
{
    unsigned i = (unsigned)((bytes * 0x9E3779B97F4A7C15ull) >> 54) & (SIZE_CACHE - 1);
    if (c->sizes[i].text[0] && c->sizes[i].bytes == bytes) return c->sizes[i].text;
    char buf[32];
    mt_format_bytes(bytes, buf, sizeof buf);
    if (strlen(buf) >= sizeof c->sizes[i].text) {
        c->sizes[i].text[0] = 0;
        snprintf(c->size_spill, sizeof c->size_spill, "%s", buf);
        return c->size_spill;
    }
    c->sizes[i].bytes = bytes;
    memcpy(c->sizes[i].text, buf, strlen(buf) + 1);
    return c->sizes[i].text;
}

void mt_chrome_on_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    chrome *c = ctx;
    int is_host = l->device < 0 && is_host_kind(l->kind);
    if (!is_host && is_caching_segment(c, l->kind, l->stack)) {
        slot_info *si = slot_of(c, l->device, 0);
        if (si) si->caching -= si->caching >= l->bytes ? l->bytes : si->caching;
    }
    if (l->kind == MT_KIND_DRIVER && !c->opt->driver_slices) {
        c->driver_skipped++;
        return;
    }
    if (l->bytes < c->opt->min_bytes || (c->select && l->bytes < c->threshold) ||
        (c->select && l->bytes == c->threshold && !c->ties_left)) {
        c->skipped++;
        return;
    }
    if (c->select && l->bytes == c->threshold) c->ties_left--;
    c->kept++;
    mt_out *o = c->o;
    /* 500 000 slices of 4 events each: what they share is formatted once per slice, names and
     * sizes once per trace (they repeat) */
    char rootbuf[32], track[96], head[96], ts_start[32], ts_end[32];
    slot_info *si = slot_of(c, l->device, is_host);
    const char *root = si ? si->root : root_of(l->device, is_host, rootbuf, sizeof rootbuf);
    uint64_t track_k = track_key(c, l, is_host);
    if (!mt_u64map_find(&c->track_json, track_k)) track_name(c, l, is_host, track, sizeof track);
    mt_stack_stat st = {.stack = l->stack, .driver = l->kind == MT_KIND_DRIVER};
    uint64_t who_k = (uint64_t)st.stack << 1 | (st.driver != 0);
    const char *who = NULL;
    if (!mt_u64map_find(&c->who_json, who_k))
        who = st.driver ? mt_pseudo_name(MT_PSEUDO_DRIVER_INTERNAL)
                        : mt_frames_first_user(c->a->frames, l->stack, c->opt->names);
    uint64_t id = c->t_index << 48 | l->serial;
    uint32_t vt = virtual_tid(l->device, is_host);
    uint64_t start = rel_of(c, l->start_ns), end = rel_of(c, end_ns);
    if (end < start) end = start; /* activity records may arrive late: never a negative slice */
    size_t head_n = slice_head(c, head, id, vt);
    size_t start_n = ts_text(ts_start, start), end_n = ts_text(ts_end, end);
    char bytes_buf[20], *bytes = digits(bytes_buf + sizeof bytes_buf, l->bytes);
    size_t bytes_n = (size_t)(bytes_buf + sizeof bytes_buf - bytes);
    slice_event(c, 0, root, head, head_n, &c->track_json, track_k, track, ts_start, start_n);
    WRITE_LIT(o, ",\"args\":{\"bytes\":");
    mt_out_write(o, bytes, bytes_n);
    WRITE_LIT(o, "}}");
    slice_event(c, 0, root, head, head_n, &c->who_json, who_k, who, ts_start, start_n);
    WRITE_LIT(o, ",\"args\":{\"bytes\":");
    mt_out_write(o, bytes, bytes_n);
    WRITE_LIT(o, ",\"size\":\"");
    mt_out_puts(o, slice_size(c, l->bytes));
    WRITE_LIT(o, "\",\"kind\":\"");
    mt_out_puts(o, mt_kind_name(l->kind));
    WRITE_LIT(o, "\",\"stream\":\"");
    mt_out_hex(o, l->stream);
    WRITE_LIT(o, "\",\"address\":\"");
    mt_out_hex(o, l->address);
    WRITE_LIT(o, "\",\"ended\":\"");
    mt_out_puts(o, end_names[why & 3]);
    WRITE_LIT(o, "\",\"tid\":");
    mt_out_u64(o, l->tid);
    if (l->category && c->a->categories) { /* final: it is ending */
        mt_out_puts(o, ",\"category\":");
        mt_out_json_string(o, mt_category_name(c->a->categories, l->category));
    }
    const char *tn = thread_name(c->a, l->tid);
    if (tn) {
        mt_out_puts(o, ",\"thread\":");
        mt_out_json_string(o, tn);
    }
    slice_stack(c, &st);
    WRITE_LIT(o, "}}");
    slice_event(c, 1, root, head, head_n, &c->who_json, who_k, who, ts_end, end_n);
    WRITE_LIT(o, "}");
    slice_event(c, 1, root, head, head_n, &c->track_json, track_k, track, ts_end, end_n);
    WRITE_LIT(o, "}");
}

/* For chrome.c; the calls above stay inline (an external function is not inlined as readily, and
 * ts_text out of line was 4% of the export's instructions). */
size_t mt_chrome_slice_head(const chrome *c, char *buf, uint64_t id, uint32_t tid)
{
    return slice_head(c, buf, id, tid);
}

size_t mt_chrome_ts_text(char *buf, uint64_t ns) { return ts_text(buf, ns); }
