/* Synthetic traces for the compactor/exporter tests: a tiny builder over mt_writer, and helpers
 * that run the analysis/exporters on any trace path (also used on tests/data/ fixtures). */
#ifndef MT_TEST_COMPACT_FIXTURE_H
#define MT_TEST_COMPACT_FIXTURE_H

#include <criterion/criterion.h>
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

/* An event at FX_T0 + t_ms milliseconds. */
static inline void fx_ev_full(fx *f, unsigned op, unsigned kind, int device, uint64_t addr,
                              uint64_t bytes, uint64_t t_ms, uint32_t stack, uint32_t context,
                              uint16_t flags)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = FX_T0 + t_ms * MS, .address = addr, .bytes = bytes,
                           .tid = 7, .context = context, .stack = stack, .device = device,
                           .flags = flags, .op = (uint8_t)op, .kind = (uint8_t)kind};
    if (op == MT_OP_FAILED) r.u.event.result = 2;
    fx_put(f, &r);
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

static inline int fx_folded_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    return mt_export_folded(o, &a, 1, *(mt_folded_metric *)ctx);
}

/* Sum of the folded lines whose root frame is `root` ("cuda:0;..."); checks the line syntax. */
static inline uint64_t fx_folded_sum(const char *text, const char *root)
{
    uint64_t sum = 0;
    size_t rl = strlen(root);
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        cr_assert(nl, "folded output must end lines with \\n");
        const char *sp = nl;
        while (sp > line && sp[-1] != ' ') sp--;
        cr_assert(sp > line + 1, "folded line without a count: %.*s", (int)(nl - line), line);
        char *end;
        unsigned long long v = strtoull(sp, &end, 10);
        cr_assert_eq(end, nl, "bad count in: %.*s", (int)(nl - line), line);
        if (strncmp(line, root, rl) == 0 && (line[rl] == ';' || line[rl] == ' ')) sum += v;
        line = nl + 1;
    }
    return sum;
}

/* Checks every invariant that must hold for any trace: folded peak lines sum to each device's
 * peak, alloc lines to its allocated bytes, leak lines to its leaked bytes. */
static inline void fx_check_invariants(mt_analysis *a)
{
    mt_folded_metric ms[3] = {MT_METRIC_PEAK, MT_METRIC_ALLOC, MT_METRIC_LEAK};
    char *out[3];
    for (int i = 0; i < 3; i++) out[i] = fx_capture(a, fx_folded_fn, &ms[i], "folded.txt");
    for (size_t i = 0; i < a->n_devices + (a->host != NULL); i++) {
        const mt_device_report *d = i < a->n_devices ? &a->devices[i] : a->host;
        char root[32];
        mt_device_root_name(d, root, sizeof root);
        cr_expect_eq(fx_folded_sum(out[0], root), d->u.peak, "%s: folded peak lines != peak", root);
        cr_expect_eq(fx_folded_sum(out[1], root), d->u.alloc_bytes, "%s: alloc lines", root);
        cr_expect_eq(fx_folded_sum(out[2], root), d->leak_bytes, "%s: leak lines", root);
        cr_expect_eq(d->leak_bytes, d->u.in_use, "%s: leaks != in use at end", root);
        cr_expect(d->u.api_peak <= d->u.peak);
    }
    for (int i = 0; i < 3; i++) free(out[i]);
}
#endif
