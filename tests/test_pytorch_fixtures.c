/* What a PyTorch user sees, on real traces of GPT-2 and ResNet-18 training runs (tests/data,
 * recorded on an H100 with torch 2.11; see tests/data/README.md). Every check is a property that a
 * re-recording keeps (lengths, sums, counts, which frames may name an allocation), never an exact
 * frame string.
 *
 * label_visibility measures what flamegraph.pl shows at its default width: a frame of width w px
 * prints int(w / (12 * 0.59)) characters (fontsize 12, fontwidth 0.59), its whole label when that
 * is at least the label's length, on a 1200 px image with 10 px padding each side. */
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_compact_fixture.h"

#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"

static const char *const traces[] = {"gpt2_default", "gpt2_tensors", "resnet18_default",
                                     "resnet18_tensors"};

/* The analysis of tests/data/NAME.mtrace, or NULL (test skipped) when it is not there. */
static mt_analysis *open_trace(const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/%s.mtrace", MT_TEST_DATA_DIR, name);
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    return fx_analyze(path);
}

static int run_status(const char *cmd)
{
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
    return WEXITSTATUS(st);
}

/* ---- flamegraph.pl's labels --------------------------------------------------------------------- */

typedef struct fnode {
    char *name;
    uint64_t bytes;
    struct fnode *kids;
    size_t n, cap;
} fnode;

static fnode *kid(fnode *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->n; i++)
        if (strlen(t->kids[i].name) == len && strncmp(t->kids[i].name, name, len) == 0)
            return &t->kids[i];
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 4;
        t->kids = realloc(t->kids, t->cap * sizeof *t->kids);
        cr_assert(t->kids);
    }
    t->kids[t->n] = (fnode){.name = strndup(name, len)};
    return &t->kids[t->n++];
}

static void fnode_free(fnode *t)
{
    for (size_t i = 0; i < t->n; i++) fnode_free(&t->kids[i]);
    free(t->kids);
    free(t->name);
}

typedef struct vis {
    size_t frames, wide, whole; /* all frames, wider than 1%, of those showing their whole label */
} vis;

static void visit(const fnode *t, uint64_t total, vis *v)
{
    for (size_t i = 0; i < t->n; i++) {
        const fnode *k = &t->kids[i];
        v->frames++;
        if (k->bytes * 100 > total) {
            double px = (double)k->bytes * (1200.0 - 2 * 10.0) / (double)total;
            size_t chars = (size_t)floor(px / (12.0 * 0.59));
            v->wide++;
            v->whole += chars >= 3 && strlen(k->name) <= chars;
        }
        visit(k, total, v);
    }
}

/* flamegraph.pl merges lines into a tree (identical prefixes are one frame) and draws it. */
static vis label_visibility(const char *folded)
{
    fnode root = {0};
    uint64_t total = 0;
    for (const char *line = folded; *line;) {
        const char *nl = strchr(line, '\n'), *sp = nl;
        while (sp[-1] != ' ') sp--;
        uint64_t bytes = strtoull(sp, NULL, 10);
        total += bytes;
        fnode *t = &root;
        for (const char *f = line; f < sp - 1;) {
            const char *semi = memchr(f, ';', (size_t)(sp - 1 - f));
            const char *end = semi ? semi : sp - 1;
            t = kid(t, f, (size_t)(end - f));
            t->bytes += bytes;
            f = end + 1;
        }
        line = nl + 1;
    }
    vis v = {0};
    visit(&root, total, &v);
    fnode_free(&root);
    return v;
}

static char *folded_of(mt_analysis *a, mt_frame_filter frames, mt_name_style names)
{
    mt_folded_options fo = {.metric = MT_METRIC_PEAK, .device = MT_DEVICE_AUTO, .frames = frames,
                            .names = names};
    return fx_capture(a, fx_folded_fn, &fo, "peak.folded");
}

/* The GPT-2 peak graphs: how many frames show their whole label, today's names and view against
 * every frame with whole signatures (what memtrace printed before). The numbers are printed for
 * the README. */
Test(pytorch, label_visibility)
{
    for (size_t i = 0; i < 2; i++) { /* the two GPT-2 traces */
        char path[1024];
        mt_analysis *a = open_trace(traces[i], path, sizeof path);
        if (!a) {
            cr_skip_test("%s is not there", traces[i]);
            return;
        }
        mt_frames_set_base_dir(a->frames, "/work/main"); /* where the script was run */
        char *user = folded_of(a, MT_FRAMES_AUTO, MT_NAME_SHORT);
        char *before = folded_of(a, MT_FRAMES_ALL, MT_NAME_LONG);
        vis u = label_visibility(user), b = label_visibility(before);
        cr_log_info("%s: user view, short names: %zu frames, %zu wider than 1%%, %zu (%.0f%%) whole "
                    "labels; all frames, long names: %zu frames, %zu wider than 1%%, %zu (%.0f%%)",
                    traces[i], u.frames, u.wide, u.whole, 100.0 * (double)u.whole / (double)u.wide,
                    b.frames, b.wide, b.whole, 100.0 * (double)b.whole / (double)b.wide);
        fprintf(stderr, "label visibility %s: %zu/%zu (%.0f%%) vs %zu/%zu (%.0f%%) before\n", traces[i],
                u.whole, u.wide, 100.0 * (double)u.whole / (double)u.wide, b.whole, b.wide,
                100.0 * (double)b.whole / (double)b.wide);
        cr_expect(u.frames * 2 < b.frames, "the user view has far fewer frames");
        cr_expect(u.whole * b.wide >= 2 * b.whole * u.wide, "at least twice the share of whole labels");
        free(user);
        free(before);
        mt_analysis_free(a);
    }
}

/* Names: C++ frames without parameter lists or template arguments, Python frames as "qualname
 * (short/path.py:LINE)", the user view made of Python frames, operators, nodes, libraries. */
Test(pytorch, names_and_views)
{
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++) {
        char path[1024];
        mt_analysis *a = open_trace(traces[i], path, sizeof path);
        if (!a) {
            cr_skip_test("%s is not there", traces[i]);
            return;
        }
        cr_expect_eq(mt_frames_resolve(a->frames, MT_FRAMES_AUTO), MT_FRAMES_USER, "Python program");
        const mt_device_report *d = mt_select_device(a, MT_DEVICE_AUTO);
        cr_assert(d && !d->u.is_host);
        size_t lens[4096], n_lens = 0, aten = 0, nodes = 0;
        for (size_t k = 0; k < d->peak_stacks.n; k++) {
            const char *names[512];
            uint8_t flags[512];
            size_t n = mt_frames_path(
                a->frames, d->peak_stacks.v[k].stack,
                (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_ALL, .flags = flags},
                names, 512);
            for (size_t f = 0; f < n && f < 512; f++) {
                if (!(flags[f] & MT_FF_NATIVE)) continue;
                char fn[512];
                snprintf(fn, sizeof fn, "%s", names[f]);
                char *file = strstr(fn, " (");
                if (file && strchr(file, ':') && fn[strlen(fn) - 1] == ')') *file = 0;
                const char *op = strstr(fn, "operator");
                cr_expect(!strchr(fn, '<') || (op && strchr(fn, '<') > op), "template arguments: %s", fn);
                cr_expect(!strstr(fn, "const&") && !strstr(fn, ", "), "parameters: %s", fn);
            }
            n = mt_frames_path(
                a->frames, d->peak_stacks.v[k].stack,
                (mt_path_opts){.style = MT_NAME_SHORT, .filter = MT_FRAMES_AUTO, .flags = flags},
                names, 512);
            for (size_t f = 0; f < n && f < 512; f++) {
                if (n_lens < 4096) lens[n_lens++] = strlen(names[f]);
                cr_expect(flags[f] & (MT_FF_PYTHON | MT_FF_PSEUDO | MT_FF_ROLE) ||
                              (flags[f] & MT_FF_NATIVE),
                          "%s", names[f]);
                if (flags[f] & MT_FF_PYTHON) {
                    cr_expect(names[f][0] != '/', "short Python path: %s", names[f]);
                    cr_expect(strstr(names[f], ".py:") && names[f][strlen(names[f]) - 1] == ')',
                              "qualname (path.py:LINE): %s", names[f]);
                }
                aten += strncmp(names[f], "aten::", 6) == 0;
                nodes += strstr(names[f], "Backward") != NULL;
            }
            /* the first user frame: never an allocator or CUDA frame */
            const char *fu =
                mt_frames_first_user(a->frames, d->peak_stacks.v[k].stack, MT_NAME_SHORT);
            cr_expect(!strstr(fu, "CUDACachingAllocator") && !strstr(fu, "cudaMalloc") &&
                          !strstr(fu, "cuMem") && !strstr(fu, "libcuda") &&
                          strcmp(fu, MT_OWNER_CACHING_ALLOCATOR) != 0,
                      "first user frame %s", fu);
        }
        cr_expect(aten > 0, "%s: ATen operators in the user view", traces[i]);
        cr_expect(nodes > 0, "%s: autograd nodes in the user view", traces[i]);
        /* label lengths: the median user-view label is a short line, none is a paragraph */
        for (size_t x = 1; x < n_lens; x++) /* insertion sort: a few hundred */
            for (size_t y = x; y > 0 && lens[y - 1] > lens[y]; y--) {
                size_t t = lens[y];
                lens[y] = lens[y - 1];
                lens[y - 1] = t;
            }
        cr_assert(n_lens > 0);
        cr_expect_leq(lens[n_lens / 2], 60, "%s: median label length", traces[i]);
        cr_expect_leq(lens[n_lens - 1], 160, "%s: longest label", traces[i]);
        fx_check_invariants(a);
        mt_analysis_free(a);
    }
}

/* DDP's ranks: NCCL's proxy thread allocates its buffers (hundreds of MiB at the peak) on a
 * stack with no Python, no operator and no frame of the program's, rooted in libc. Its user view
 * and first user frame are NCCL's entry into that thread, never a C-runtime frame (MT_FF_SYSTEM;
 * before: "libc.so.6+0x9cb84", libc's start_thread unsymbolized). */
Test(pytorch, library_threads_are_named_by_the_library)
{
    static const char *const ddp[] = {"ddp_rank0", "ddp_rank1"};
    for (size_t i = 0; i < 2; i++) {
        char path[1024];
        mt_analysis *a = open_trace(ddp[i], path, sizeof path);
        if (!a) {
            cr_skip_test("%s is not there", ddp[i]);
            return;
        }
        size_t nccl_threads = 0;
        for (size_t dv = 0; dv < a->n_devices; dv++) {
            const mt_device_report *d = &a->devices[dv];
            for (size_t k = 0; k < d->peak_stacks.n; k++) {
                uint32_t leaf = d->peak_stacks.v[k].stack;
                const char *names[512];
                uint8_t flags[512];
                size_t n = mt_frames_path(a->frames, leaf,
                                          (mt_path_opts){.style = MT_NAME_SHORT,
                                                         .filter = MT_FRAMES_USER, .flags = flags},
                                          names, 512);
                int python = 0;
                for (size_t f = 0; f < n && f < 512; f++) {
                    cr_expect(!(flags[f] & MT_FF_SYSTEM), "%s: a C-runtime frame in the user view: %s",
                              ddp[i], names[f]);
                    python |= (flags[f] & (MT_FF_PYTHON | MT_FF_PSEUDO)) != 0;
                }
                const char *fu = mt_frames_first_user(a->frames, leaf, MT_NAME_SHORT);
                cr_expect(strncmp(fu, "libc", 4) != 0 && strncmp(fu, "libstdc++", 9) != 0,
                          "%s: first user frame %s", ddp[i], fu);
                if (!python && strcmp(mt_frames_owner(a->frames, leaf, NULL), "NCCL") == 0) {
                    nccl_threads++;
                    cr_expect(strncmp(fu, "nccl", 4) == 0, "%s: NCCL's thread named %s", ddp[i], fu);
                    cr_expect(n == 2 && strcmp(names[0], fu) == 0, "%s: its user view %s ...",
                              ddp[i], n ? names[0] : "(none)");
                }
            }
        }
        cr_expect_gt(nccl_threads, 0, "%s: NCCL's proxy thread among the peak's stacks", ddp[i]);
        mt_analysis_free(a);
    }
}

/* PyTorch's caching allocator keeps its segments until exit: never a leak; nor are cuBLAS's
 * workspaces (in tensor mode served by PyTorch's allocator) or driver-internal buffers. */
Test(pytorch, live_at_the_end_is_not_a_leak)
{
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++) {
        char path[1024];
        mt_analysis *a = open_trace(traces[i], path, sizeof path);
        if (!a) {
            cr_skip_test("%s is not there", traces[i]);
            return;
        }
        const mt_device_report *d = mt_select_device(a, MT_DEVICE_AUTO);
        uint64_t cache = 0, library = 0;
        for (size_t k = 0; k < d->n_end_holders; k++) {
            if (d->end_holders[k].kind == MT_HOLD_CACHE) cache += d->end_holders[k].bytes;
            if (d->end_holders[k].kind == MT_HOLD_LIBRARY) library += d->end_holders[k].bytes;
        }
        if (strstr(traces[i], "default")) cr_expect(cache > 0, "%s: cached segments", traces[i]);
        cr_expect(library > 0, "%s: cuBLAS workspaces", traces[i]);
        cr_expect(d->leak_bytes * 10 <= d->u.in_use, "%s: %llu of %llu bytes called leaks", traces[i],
                  (unsigned long long)d->leak_bytes, (unsigned long long)d->u.in_use);
        mt_analysis_free(a);
    }
}

/* Chrome: a few tracks (device x kind), no driver-internal slices unless asked, stacks in the
 * user view a third of whole stacks or less. */
Test(pytorch, chrome_tracks_and_size)
{
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++) {
        char path[1024], out[512], cmd[4096];
        mt_analysis *a = open_trace(traces[i], path, sizeof path);
        if (!a) {
            cr_skip_test("%s is not there", traces[i]);
            return;
        }
        mt_analysis_free(a);
        const char *variants[] = {"", "--driver-slices", "--frames all --long-names"};
        unsigned long long tracks[3], slices[3], stack_bytes[3];
        for (int v = 0; v < 3; v++) {
            char sum[600];
            mt_test_tmpname(out, sizeof out, "pt.json");
            mt_test_tmpname(sum, sizeof sum, "pt.json.sum");
            snprintf(cmd, sizeof cmd, MEMTRACE " export --format chrome %s -o %s %s", variants[v], out,
                     path);
            cr_assert_eq(run_status(cmd), 0, "%s", cmd);
            snprintf(cmd, sizeof cmd,
                     "python3 %s/tests/py/check_chrome.py %s > %s && python3 -c 'import json,sys\n"
                     "d=json.load(open(sys.argv[1]))\n"
                     "print(sum(len(json.dumps(e[\"args\"][\"stack\"])) for e in d[\"traceEvents\"] "
                     "if \"stack\" in e.get(\"args\",{})))' %s >> %s",
                     MT_SOURCE_DIR, out, sum, out, sum);
            cr_assert_eq(run_status(cmd), 0, "%s", cmd);
            FILE *f = fopen(sum, "r");
            cr_assert(f);
            unsigned long long x;
            cr_assert_eq(fscanf(f, "%llu %llu %llu %llu %llu %llu %llu %llu", &slices[v], &x, &x, &x,
                                &x, &x, &tracks[v], &stack_bytes[v]),
                         8);
            fclose(f);
        }
        cr_expect_leq(tracks[0], 6, "%s: tracks are device x kind", traces[i]);
        cr_expect_leq(tracks[1], 8, "%s: with driver slices too", traces[i]);
        cr_expect_geq(slices[1], slices[0]);
        cr_expect_leq(stack_bytes[0] * 3, stack_bytes[2], "%s: user-view stacks %llu bytes, whole "
                      "stacks %llu", traces[i], stack_bytes[0], stack_bytes[2]);
    }
}

/* speedscope: one profile per device and metric whose weights add up to what the report says. */
Test(pytorch, speedscope_profiles)
{
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++) {
        char path[1024], out[512], cmd[4096];
        mt_analysis *a = open_trace(traces[i], path, sizeof path);
        if (!a) {
            cr_skip_test("%s is not there", traces[i]);
            return;
        }
        const mt_device_report *d = mt_select_device(a, MT_DEVICE_AUTO);
        mt_test_tmpname(out, sizeof out, "pt.speedscope.json");
        snprintf(cmd, sizeof cmd, MEMTRACE " export --format speedscope -o %s %s", out, path);
        cr_assert_eq(run_status(cmd), 0, "%s", cmd);
        uint64_t end = 0;
        for (size_t k = 0; k < d->live_end.n; k++) end += d->live_end.v[k].bytes;
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys\n"
                 "d=json.load(open(sys.argv[1]))\n"
                 "assert d[\"$schema\"]==\"https://www.speedscope.app/file-format-schema.json\"\n"
                 "fr=d[\"shared\"][\"frames\"]\n"
                 "p={x[\"name\"].split(\": \")[1].rsplit(\", \",1)[0]:x for x in d[\"profiles\"] if \"%s:\" in x[\"name\"]}\n"
                 "for x in d[\"profiles\"]:\n"
                 "  assert x[\"type\"]==\"sampled\" and x[\"unit\"]==\"bytes\" and len(x[\"samples\"])==len(x[\"weights\"])\n"
                 "  assert sum(x[\"weights\"])==x[\"endValue\"] and all(0<=i<len(fr) for s in x[\"samples\"] for i in s)\n"
                 "assert p[\"live at the peak\"][\"endValue\"]==%llu, p.keys()\n"
                 "assert p[\"allocated over the run\"][\"endValue\"]==%llu\n"
                 "assert p[\"live at the end\"][\"endValue\"]==%llu\n"
                 "' %s",
                 mt_device_root_name(d, (char[32]){0}, 32), (unsigned long long)d->u.peak,
                 (unsigned long long)d->u.alloc_bytes, (unsigned long long)end, out);
        cr_expect_eq(run_status(cmd), 0, "%s", traces[i]);
        mt_analysis_free(a);
    }
}
