/* Helpers shared by the exporters: stack-stat frame lists, one-line stacks and time formatting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

static int namebuf_grow(mt_namebuf *b, size_t need)
{
    if (need <= b->cap) return 0;
    const char **nv = realloc(b->v, need * sizeof *nv);
    if (!nv) return -1;
    b->v = nv;
    uint8_t *nf = realloc(b->flags, need);
    if (!nf) return -1;
    b->flags = nf;
    b->cap = need;
    return 0;
}

long mt_stat_frames(mt_frames *f, const mt_stack_stat *s, mt_name_style style,
                    mt_frame_filter filter, int cuda_leaf, mt_namebuf *b)
{
    if (s->driver) {
        if (namebuf_grow(b, 64) < 0) return -1;
        b->v[0] = mt_pseudo_name(MT_PSEUDO_DRIVER_INTERNAL);
        b->flags[0] = MT_FF_PSEUDO;
        b->n = 1;
        return 1;
    }
    for (;;) {
        mt_path_opts opts = {.style = style, .filter = filter, .flags = b->flags};
        size_t n = mt_frames_path(f, s->stack, opts, b->v, b->cap);
        if (n <= b->cap) {
            /* The CUDA stack's own frames at the leaf end say nothing about who allocated; a
             * stack made only of them is kept whole. */
            size_t keep = n;
            while (!cuda_leaf && keep > 1 && (b->flags[keep - 1] & MT_FF_CUDA)) keep--;
            if (keep == 1 && n > 1 && (b->flags[0] & MT_FF_CUDA)) keep = n;
            b->n = keep;
            return (long)keep;
        }
        if (namebuf_grow(b, n + 64) < 0) return -1;
    }
}

void mt_namebuf_free(mt_namebuf *b)
{
    free(b->v);
    free(b->flags);
    b->v = NULL;
    b->flags = NULL;
    b->n = b->cap = 0;
}

const char *mt_format_signed(int64_t v, char *buf, size_t len)
{
    char b[32];
    if (v == 0) snprintf(buf, len, "0");
    else snprintf(buf, len, "%c%s", v < 0 ? '-' : '+',
                  mt_format_bytes(v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, b, sizeof b));
    return buf;
}

const char *mt_format_rel(uint64_t ns, char *buf, size_t len)
{
    snprintf(buf, len, "+%llu.%06llu s", (unsigned long long)(ns / 1000000000ull),
             (unsigned long long)(ns % 1000000000ull / 1000ull));
    return buf;
}

/* "884 ns", "4.05 ms", "1.234 s" */
static void put_span(char *buf, size_t len, double ns)
{
    if (ns < 1e3) snprintf(buf, len, "%.0f ns", ns);
    else if (ns < 1e6) snprintf(buf, len, "%.1f µs", ns / 1e3);
    else if (ns < 1e9) snprintf(buf, len, "%.2f ms", ns / 1e6);
    else snprintf(buf, len, "%.3f s", ns / 1e9);
}

/* A part whose average stands on fewer timed calls than this is rough: one slow call weighs as
 * much as the sampling's factor. A part timed at every call (the rare work) is exact. */
#define ROUGH_BELOW_TIMED 100
static int rough_part(const mt_cost_part *p)
{
    return p->timed && p->timed < ROUGH_BELOW_TIMED && p->timed != p->calls;
}

/* ", " and "N WHAT × NS ns (ASIDE; rough: from N timed calls)" at parts + *n: the aside when
 * given, the roughness when rough_part */
static void put_part(char *parts, size_t len, size_t *n, const mt_cost_part *p, const char *what,
                     const char *aside)
{
    if (!p->calls || *n >= len) return;
    char rough[64] = "", note[160] = "";
    if (rough_part(p))
        snprintf(rough, sizeof rough, "rough: from %llu timed call%s", (unsigned long long)p->timed,
                 p->timed == 1 ? "" : "s");
    if (aside[0] || rough[0])
        snprintf(note, sizeof note, " (%s%s%s)", aside, aside[0] && rough[0] ? "; " : "", rough);
    int k = snprintf(parts + *n, len - *n, "%s%llu %s × %.0f ns%s", *n ? ", " : "",
                     (unsigned long long)p->calls, what, p->ns, note);
    if (k > 0) *n += (size_t)k;
}

const char *mt_cost_describe(const mt_analysis *a, char *brief, size_t brief_len, char *buf,
                             size_t len)
{
    const mt_recording_cost *c = &a->cost;
    double total = mt_recording_cost_ns(c);
    if (!(total > 0)) return NULL;
    char t[32], d[32], u[32], share[256] = "", parts[640] = "";
    put_span(t, sizeof t, total);
    /* The running totals (a killed process) cover the recording up to their time, not all of it */
    uint64_t span = c->until_ns ? c->until_ns : a->duration_ns;
    double pct = span ? 100.0 * total / (double)span : 0.0;
    if (c->until_ns)
        snprintf(share, sizeof share, " until %s, %.2f%% of that time (the process left no notes "
                 "at exit: these are its last running totals; %s recorded in all)",
                 mt_format_rel(c->until_ns, u, sizeof u) + 1, pct,
                 mt_format_rel(a->duration_ns, d, sizeof d) + 1);
    else if (a->duration_ns)
        snprintf(share, sizeof share, ", %.2f%% of the %s recorded", pct,
                 mt_format_rel(a->duration_ns, d, sizeof d) + 1);
    const struct {
        const mt_cost_part *p;
        const char *what, *aside;
    } all[] = {
        {&c->tensors, "tensor reports", c->tensor_whole ? "" : "time stamp not included"},
        {&c->callbacks, "CUDA API callbacks", ""},
        {&c->hooked, "cudaMallocAsync/cudaFreeAsync calls", ""},
        {&c->rare, "pieces of rare work", "stacks built, thread starts, waits...; each timed"},
    };
    size_t n = 0;
    double rough = 0; /* the total is rough too when rough parts make more than a tenth of it */
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        put_part(parts, sizeof parts, &n, all[i].p, all[i].what, all[i].aside);
        if (rough_part(all[i].p)) rough += (double)all[i].p->calls * all[i].p->ns;
    }
    int rough_total = rough > 0.1 * total;
    char caveat[96] = "";
    if (rough_total)
        snprintf(caveat, sizeof caveat, " (rough: %.0f%% of it from parts with few timed calls)",
                 100.0 * rough / total);
    /* The writer thread's CPU time is said beside it, not added: it ran on none of the program's
     * threads, and what it cost a step depends on the cores left free (docs/performance.md) */
    char writer[200] = "";
    if (mt_cost_writer_known(c)) {
        char w[32], ww[32];
        put_span(w, sizeof w, c->writer_cpu_ns);
        put_span(ww, sizeof ww, c->writer_wall_ns);
        snprintf(writer, sizeof writer, "; beside it, %s of CPU on memtrace's writer thread, "
                 "%.2f%% of one core over its %s (ordering, compressing and writing the trace)",
                 w, 100.0 * c->writer_cpu_ns / c->writer_wall_ns, ww);
    }
    snprintf(buf, len, "about %s%s of memtrace's own work on the program's threads%s (%s; from the "
             "recorder's sampled self-timing)%s", t, caveat, share, parts, writer);
    if (brief && brief_len) {
        const char *tilde = rough_total ? "~" : "";
        if (c->until_ns) {
            put_span(u, sizeof u, (double)c->until_ns);
            snprintf(brief, brief_len, "%s%s (%.2f%% of the first %s)", tilde, t, pct, u);
        } else if (a->duration_ns) {
            snprintf(brief, brief_len, "%s%s (%.2f%% of the run)", tilde, t, pct);
        } else {
            snprintf(brief, brief_len, "%s%s", tilde, t);
        }
    }
    return buf;
}

const char *mt_format_abs(const mt_analysis *a, uint64_t rel_ns, char *buf, size_t len)
{
    uint64_t t = a->header.start_realtime_ns + rel_ns;
    time_t secs = (time_t)(t / 1000000000ull);
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) {
        snprintf(buf, len, "?");
        return buf;
    }
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, len, "%s.%06llu UTC", day, (unsigned long long)(t % 1000000000ull / 1000ull));
    return buf;
}

/* What a one-line stack shows, innermost last: for stacks with Python frames or user-view roles,
 * the program's own Python frames (not an installed package's), the innermost Python frame, the
 * ATen operators, autograd nodes and allocating library, and pseudo frames; for native stacks the
 * innermost 4 frames outside CUDA, NVIDIA's libraries and the C runtime's start-up that have a
 * symbol. At most MT_CHAIN_MAX, the innermost. */
/* Native frames a one-line stack leaves out: the C runtime's start-up, and frames without a symbol
 * ("libc.so.6+0x2a1ca", "0x7f..."), which say nothing to a reader. */
static int boilerplate(const char *name)
{
    static const char *const startup[] = {"_start", "__libc_start_main", "__libc_start_call_main"};
    for (size_t i = 0; i < sizeof startup / sizeof *startup; i++)
        if (strcmp(name, startup[i]) == 0) return 1;
    const char *p = strstr(name, "+0x");
    p = p ? p + 3 : strncmp(name, "0x", 2) == 0 ? name + 2 : NULL;
    if (!p || !*p) return 0;
    return strspn(p, "0123456789abcdefABCDEF") == strlen(p);
}

size_t mt_chain_pick(const char *const *names, const uint8_t *flags, size_t n, size_t *idx, int *cut)
{
    size_t inner_py = n, picked = 0, total = 0;
    int user = 0;
    for (size_t k = 0; k < n; k++) {
        if (flags[k] & MT_FF_PYTHON) inner_py = k;
        if (flags[k] & (MT_FF_PYTHON | MT_FF_ROLE)) user = 1;
    }
    /* walk from the leaf, keep the innermost MT_CHAIN_MAX picks, then reverse */
    size_t rev[MT_CHAIN_MAX];
    for (size_t k = n; k-- > 0;) {
        uint8_t f = flags[k];
        int keep;
        if (user)
            keep = (f & (MT_FF_ROLE | MT_FF_PSEUDO)) || k == inner_py || mt_ff_own_python(f);
        else
            keep = (f & MT_FF_PSEUDO) || n == 1 ||
                   (!(f & (MT_FF_CUDA | MT_FF_LIB)) && !boilerplate(names[k]));
        if (!keep) continue;
        total++;
        if (picked < MT_CHAIN_MAX && (user || picked < 4 || (f & MT_FF_PSEUDO))) rev[picked++] = k;
    }
    if (!picked && n) rev[picked++] = n - 1;
    for (size_t i = 0; i < picked; i++) idx[i] = rev[picked - 1 - i];
    /* cut: frames outside the first one shown were left out for room, not by the rule */
    *cut = total > picked;
    return picked;
}

const char *mt_chain_text(const char *const *names, const uint8_t *flags, size_t n, char *buf,
                          size_t len)
{
    size_t idx[MT_CHAIN_MAX], used = 0;
    int cut;
    size_t k = mt_chain_pick(names, flags, n, idx, &cut);
    buf[0] = 0;
    if (cut) used += (size_t)snprintf(buf, len, "… › ");
    for (size_t i = 0; i < k && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " › " : "", names[idx[i]]);
    return buf;
}

int mt_copy_file(mt_out *o, FILE *f)
{
    char buf[65536];
    size_t n;
    if (fflush(f) != 0) return -1;
    rewind(f);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) mt_out_write(o, buf, n);
    return ferror(f) ? -1 : 0;
}

const char *mt_failed_outcome_name(const mt_failed_request *f)
{
    if (mt_failed_is_torch_oom(f)) return "raised";
    return f->outcome == MT_FAILED_RECOVERED ? "recovered"
           : f->outcome == MT_FAILED_RAISED  ? "raised"
                                             : "";
}

const char *mt_failed_outcome_text(const mt_analysis *a, size_t i, char *buf, size_t len)
{
    const mt_failed_request *f = &a->failed[i];
    char b1[32], b2[32], which[128] = "";
    buf[0] = 0;
    if (f->kind == MT_KIND_TENSOR) {
        /* the refusals it follows, by number, where they were kept */
        size_t n = 0, at = 0;
        for (size_t k = 0; k < i && at + 16 < sizeof which; k++)
            if (a->failed[k].outcome == MT_FAILED_RAISED && a->failed[k].raised_as == (int32_t)i)
                at += (size_t)snprintf(which + at, sizeof which - at, "%s#%zu", n++ ? ", " : " (",
                                       k + 1);
        if (n) snprintf(which + at, sizeof which - at, ")");
        mt_format_bytes(f->torch_allocated, b1, sizeof b1);
        mt_format_bytes(f->torch_reserved, b2, sizeof b2);
        if (f->driver_refusals) {
            char last[32] = "request";
            if (f->driver_refusals > 1)
                snprintf(last, sizeof last, "%u requests", f->driver_refusals);
            snprintf(buf, len,
                     "it raised torch.OutOfMemoryError: the driver had refused its last %s%s; "
                     "PyTorch had %s allocated, %s reserved",
                     last, which, b1, b2);
        } else
            snprintf(buf, len,
                     "it raised torch.OutOfMemoryError without asking the driver: the "
                     "request would have taken it past a limit of its own (such as "
                     "torch.cuda.set_per_process_memory_fraction); PyTorch had %s allocated, %s "
                     "reserved",
                     b1, b2);
    } else if (f->torch_async) {
        snprintf(buf, len,
                 "PyTorch's backend:cudaMallocAsync raised torch.OutOfMemoryError at once (it "
                 "has no cache of its own to free, nor asks again); PyTorch had %s allocated",
                 mt_format_bytes(f->torch_allocated, b1, sizeof b1));
    } else if (f->outcome == MT_FAILED_RECOVERED) {
        snprintf(buf, len,
                 "PyTorch's caching allocator, with %s reserved, went on: its next "
                 "request for a segment succeeded",
                 mt_format_bytes(f->torch_reserved, b1, sizeof b1));
    } else if (f->outcome == MT_FAILED_RAISED) {
        if (f->raised_as >= 0) snprintf(which, sizeof which, " (#%d)", f->raised_as + 1);
        snprintf(buf, len,
                 "PyTorch's caching allocator, with %s reserved, raised "
                 "torch.OutOfMemoryError%s",
                 mt_format_bytes(f->torch_reserved, b1, sizeof b1), which);
    }
    return buf;
}

/* util.h; the sentence names the recorder's option that turns them off */
const char *mt_activity_missing(const mt_analysis *a, char *buf, size_t len)
{
    char t[48];
    if (a->activity == MT_ACTIVITY_ON) return NULL;
    if (a->activity == MT_ACTIVITY_STOPPED)
        snprintf(
            buf, len,
            "driver-internal allocations and CUDA arrays made after %s are not in "
            "the trace (CUPTI's activity records stopped then): a peak after it leaves them out",
            mt_format_rel(a->activity_stopped_ns, t, sizeof t));
    else
        snprintf(buf, len,
                 "the peaks leave out driver-internal allocations and CUDA arrays: "
                 "CUPTI's activity records were %s",
                 a->activity == MT_ACTIVITY_OFF ? "off (record --activity off, the default with "
                                                  "--tensors=async)"
                                                : "unavailable");
    return buf;
}

size_t mt_failed_categories(const mt_analysis *a, const mt_failed_request *f, unsigned *cats,
                            uint64_t *total)
{
    size_t n = 0;
    *total = 0;
    if (!f->categories_known || !a->categories) return 0;
    size_t count = mt_category_count(a->categories);
    for (unsigned c = MT_CAT_PARAMETERS; c < count && c < MT_CAT_MAX; c++) {
        if (!f->by_category[c]) continue;
        *total += f->by_category[c];
        size_t k = n++;
        for (; k > 0 && f->by_category[cats[k - 1]] < f->by_category[c]; k--)
            cats[k] = cats[k - 1];
        cats[k] = c;
    }
    return n;
}
