/* Synthetic traces for the compactor/exporter tests: a tiny builder over mt_writer, and helpers
 * that run the analysis/exporters on any trace path (also used on tests/data/ fixtures). */
#ifndef MT_TEST_COMPACT_FIXTURE_H
#define MT_TEST_COMPACT_FIXTURE_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/compact.h"
#include "memtrace/export.h"
#include "testutil.h"

#define FX_T0 1000000000ull                    /* start_monotonic_ns of every fixture */
#define FX_REAL0 1700000000000000000ull        /* 2023-11-14 22:13:20 UTC */
#define MS 1000000ull                          /* ns per ms */

typedef struct fx {
    mt_writer *w;
    int fd;
    char path[512];
} fx;

static inline void fx_open(fx *f, const char *stem)
{
    mt_test_tmpname(f->path, sizeof f->path, stem);
    f->fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(f->fd >= 0);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 4242, .start_monotonic_ns = FX_T0,
                        .start_realtime_ns = FX_REAL0};
    f->w = mt_writer_open_fd(f->fd, &h, 0);
    cr_assert(f->w);
}

static inline void fx_put(fx *f, const mt_record *r) { cr_assert_eq(mt_writer_put(f->w, r), 0); }

/* An event at time_ns (CLOCK_MONOTONIC, as recorded: FX_T0 is the trace's start). */
static inline void fx_ev_ns(fx *f, unsigned op, unsigned kind, int device, uint64_t addr,
                            uint64_t bytes, uint64_t aux, uint64_t time_ns, uint32_t stack,
                            uint32_t context, uint16_t flags)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = time_ns, .address = addr, .bytes = bytes,
                           .aux = aux, .tid = 7, .context = context, .stack = stack,
                           .device = device, .flags = flags, .op = (uint8_t)op,
                           .kind = (uint8_t)kind};
    if (op == MT_OP_FAILED) r.u.event.result = 2;
    fx_put(f, &r);
}

/* An event at FX_T0 + t_ms milliseconds. */
static inline void fx_ev_aux(fx *f, unsigned op, unsigned kind, int device, uint64_t addr,
                             uint64_t bytes, uint64_t aux, uint64_t t_ms, uint32_t stack,
                             uint32_t context, uint16_t flags)
{
    fx_ev_ns(f, op, kind, device, addr, bytes, aux, FX_T0 + t_ms * MS, stack, context, flags);
}

static inline void fx_ev_full(fx *f, unsigned op, unsigned kind, int device, uint64_t addr,
                              uint64_t bytes, uint64_t t_ms, uint32_t stack, uint32_t context,
                              uint16_t flags)
{
    fx_ev_aux(f, op, kind, device, addr, bytes, 0, t_ms, stack, context, flags);
}

/* A virtual-memory map of `bytes` at addr, backed by the physical allocation `handle`. */
static inline void fx_map(fx *f, int device, uint64_t addr, uint64_t bytes, uint64_t handle,
                          uint64_t t_ms)
{
    fx_ev_aux(f, MT_OP_ALLOC, MT_KIND_VMM_MAP, device, addr, bytes, handle, t_ms, 0, 1, 0);
}

static inline void fx_ev(fx *f, unsigned op, unsigned kind, int device, uint64_t addr,
                         uint64_t bytes, uint64_t t_ms, uint32_t stack)
{
    fx_ev_full(f, op, kind, device, addr, bytes, t_ms, stack, 1, 0);
}

static inline void fx_node(fx *f, uint32_t id, uint32_t parent, uint64_t ip, unsigned kind)
{
    mt_record r = {.type = MT_REC_STACK_NODE};
    r.u.node = (mt_stack_node){.id = id, .parent = parent, .ip = ip, .frame_kind = (uint8_t)kind};
    fx_put(f, &r);
}

static inline void fx_module(fx *f, uint32_t id, const char *path, uint64_t start, uint64_t end)
{
    mt_record r = {.type = MT_REC_MODULE};
    r.u.module = (mt_module){.id = id, .bias = start, .start = start, .end = end, .path = path};
    fx_put(f, &r);
}

static inline void fx_symbol(fx *f, uint64_t ip, uint32_t depth, const char *fn, const char *file,
                             uint32_t line)
{
    mt_record r = {.type = MT_REC_SYMBOL};
    r.u.symbol = (mt_symbol){.ip = ip, .depth = depth, .function = fn, .file = file, .line = line};
    fx_put(f, &r);
}

static inline void fx_process(fx *f, const char *comm, const char *cmdline)
{
    mt_record r = {.type = MT_REC_PROCESS};
    r.u.process = (mt_process){.pid = 4242, .ppid = 1, .comm = comm, .cmdline = cmdline,
                               .hostname = "testhost"};
    fx_put(f, &r);
}

static inline void fx_end(fx *f, uint64_t t_ms, uint64_t events, uint64_t dropped)
{
    mt_record r = {.type = MT_REC_END};
    r.u.end = (mt_end){.time_ns = FX_T0 + t_ms * MS, .events = events, .dropped = dropped};
    fx_put(f, &r);
}

static inline void fx_close(fx *f)
{
    cr_assert_eq(mt_writer_close(f->w, 1), 0);
    f->w = NULL;
}

static inline mt_analysis *fx_analyze(const char *path)
{
    char err[512] = "";
    mt_analysis *a = NULL;
    int rc = mt_analyze(path, NULL, &a, err, sizeof err);
    cr_assert_eq(rc, 0, "mt_analyze(%s): %s", path, err);
    return a;
}

static inline const mt_device_report *fx_dev(const mt_analysis *a, int ordinal)
{
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == ordinal) return &a->devices[i];
    cr_assert_fail("no device %d in the analysis", ordinal);
    return NULL;
}

/* Runs an exporter into a temp file and returns its contents (NUL-terminated, malloc'd). */
typedef int (*fx_export_fn)(mt_out *o, mt_analysis *a, void *ctx);

static inline char *fx_capture(mt_analysis *a, fx_export_fn fn, void *ctx, const char *suffix)
{
    char path[512], err[256];
    mt_test_tmpname(path, sizeof path, suffix);
    mt_out *o = mt_out_open(path, err, sizeof err);
    cr_assert(o, "%s", err);
    cr_assert_eq(fn(o, a, ctx), 0);
    cr_assert_eq(mt_out_close(o), 0);
    size_t n = 0;
    uint8_t *buf = mt_test_slurp(path, &n);
    cr_assert(buf);
    char *s = realloc(buf, n + 1);
    s[n] = 0;
    unlink(path);
    return s;
}

/* ctx: mt_report_options, or NULL for the defaults */
static inline int fx_report_text_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    return mt_report_text(o, a, (const mt_report_options *)ctx);
}

static inline int fx_report_json_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    mt_report_options ro = {0};
    return mt_report_json(o, &a, 1, ctx ? (const mt_report_options *)ctx : &ro);
}

/* ctx: mt_folded_options */
static inline int fx_folded_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    return mt_export_folded(o, &a, 1, (const mt_folded_options *)ctx);
}

/* 1 when a frame of stack, named in the short style with every frame, contains needle. */
static inline int fx_stack_has(mt_frames *f, uint32_t stack, const char *needle)
{
    const char *names[256];
    size_t n = mt_frames_path(f, stack, (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_ALL},
                              names, 256);
    for (size_t i = 0; i < n && i < 256; i++)
        if (strstr(names[i], needle)) return 1;
    return 0;
}

/* The device selector of device report d. */
static inline int fx_device_of(const mt_device_report *d)
{
    return d->u.is_host ? MT_DEVICE_HOST : d->u.device;
}

/* One folded line as flamegraph.pl reads it (/^(.*)\s+?(\d+(?:\.\d*)?)$/, frames split at ';'):
 * a count, a non-empty stack with no empty frame, no carriage return, and a stack that does not
 * itself end in blanks and digits (flamegraph.pl would read a second, differential count). */
static inline void fx_check_folded_line(const char *line, size_t len)
{
    const char *sp = line + len;
    while (sp > line && sp[-1] >= '0' && sp[-1] <= '9') sp--;
    cr_assert(sp < line + len && sp > line && sp[-1] == ' ', "no count: %.*s", (int)len, line);
    size_t slen = (size_t)(sp - 1 - line);
    cr_assert(slen > 0, "empty stack: %.*s", (int)len, line);
    cr_assert(memchr(line, '\r', len) == NULL, "CR in: %.*s", (int)len, line);
    cr_assert(line[0] != ';' && line[slen - 1] != ';', "empty frame: %.*s", (int)len, line);
    for (size_t k = 0; k + 1 < slen; k++)
        cr_assert(!(line[k] == ';' && line[k + 1] == ';'), "empty frame: %.*s", (int)len, line);
    size_t d = slen;
    while (d > 0 && line[d - 1] >= '0' && line[d - 1] <= '9') d--;
    cr_assert(!(d < slen && d > 0 && (line[d - 1] == ' ' || line[d - 1] == '\t')),
              "stack ends in a number (read as a differential count): %.*s", (int)len, line);
}

/* Sum of the folded lines whose root frame is `root` ("cuda:0;..."); checks every line's syntax. */
static inline uint64_t fx_folded_sum(const char *text, const char *root)
{
    uint64_t sum = 0;
    size_t rl = strlen(root);
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        cr_assert(nl, "folded output must end lines with \\n");
        fx_check_folded_line(line, (size_t)(nl - line));
        const char *sp = nl;
        while (sp > line && sp[-1] != ' ') sp--;
        char *end;
        unsigned long long v = strtoull(sp, &end, 10);
        cr_assert_eq(end, nl, "bad count in: %.*s", (int)(nl - line), line);
        if (strncmp(line, root, rl) == 0 && (line[rl] == ';' || line[rl] == ' ')) sum += v;
        line = nl + 1;
    }
    return sum;
}

/* Folded lines of device d with the given metric and frame filter (malloc'd). */
static inline char *fx_folded_of(mt_analysis *a, const mt_device_report *d, mt_folded_metric m,
                                 mt_frame_filter frames)
{
    mt_folded_options fo = {.metric = m, .device = fx_device_of(d), .frames = frames};
    return fx_capture(a, fx_folded_fn, &fo, "folded.txt");
}

/* Checks every invariant that must hold for any trace, for every device and frame filter:
 * folded peak lines sum to the device's peak, alloc lines to its allocated bytes, end lines to
 * what is live at the end, leak lines to the program's share of it; no device's lines hold
 * another device's root; what is live at the end adds up by holder. */
static inline void fx_check_invariants(mt_analysis *a)
{
    mt_frame_filter filters[] = {MT_FRAMES_AUTO, MT_FRAMES_ALL, MT_FRAMES_USER, MT_FRAMES_PYTHON,
                                 MT_FRAMES_NATIVE};
    for (size_t i = 0; i < a->n_devices + (a->host != NULL); i++) {
        const mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        char root[32];
        mt_device_root_name(d, root, sizeof root);
        uint64_t end_bytes = 0, holder_bytes = 0, program = 0;
        for (size_t k = 0; k < d->live_end.n; k++) end_bytes += d->live_end.v[k].bytes;
        for (size_t k = 0; k < d->n_end_holders; k++) {
            holder_bytes += d->end_holders[k].bytes;
            if (d->end_holders[k].kind == MT_HOLD_PROGRAM) program += d->end_holders[k].bytes;
        }
        cr_expect_eq(end_bytes, d->u.in_use, "%s: live at the end != in use at the end", root);
        cr_expect_eq(holder_bytes, end_bytes, "%s: holders do not add up", root);
        cr_expect_eq(program, d->leak_bytes, "%s: leaks are the program's share", root);
        cr_expect(d->u.api_peak <= d->u.peak);
        for (size_t fi = 0; fi < sizeof filters / sizeof *filters; fi++) {
            const uint64_t want[MT_METRICS_] = {d->u.peak, d->u.alloc_bytes, d->leak_bytes, end_bytes};
            for (int m = 0; m < MT_METRICS_; m++) {
                char *text = fx_folded_of(a, d, (mt_folded_metric)m, filters[fi]);
                cr_expect_eq(fx_folded_sum(text, root), want[m], "%s: metric %d, filter %d", root, m,
                             (int)filters[fi]);
                /* one device per graph: every line starts at this root */
                size_t lines = 0, here = 0;
                for (const char *p = text; *p; p = strchr(p, '\n') + 1) {
                    lines++;
                    here += strncmp(p, root, strlen(root)) == 0;
                }
                cr_expect_eq(lines, here, "%s: lines of another device", root);
                free(text);
            }
        }
    }
}
#endif
