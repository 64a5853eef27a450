/* The end of `memtrace record`: symbolize, summarize, suggest. */
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memtrace/compact.h"
#include "memtrace/export.h"
#include "memtrace/symbols.h"
#include "record_summary.h"

/* One trace: symbolized, then what it holds; its row of the rank table into *row when row (NULL
 * row->path when it could not be read). */
static void summarize_one(const char *path, int symbolize, int quiet, mt_rank_summary *row)
{
    char err[512];
    if (symbolize) {
        mt_symbolize_stats st;
        if (mt_symbolize_trace(path, &st, err, sizeof err) != 0)
            fprintf(stderr, "memtrace: symbolizing %s: %s\n", path, err);
        else if (!quiet)
            fprintf(stderr,
                    "memtrace: symbolized %" PRIu64 " of %" PRIu64 " frames (%" PRIu64
                    " with file:line) in %u modules, %.2f s\n",
                    st.ips_resolved, st.ips_total, st.ips_with_line, st.modules, st.seconds);
    }
    if (quiet) return;
    mt_analysis *a = NULL;
    if (mt_analyze(path, NULL, &a, err, sizeof err) != 0) {
        fprintf(stderr, "memtrace: %s\n", err);
        return;
    }
    struct stat sb;
    stat(path, &sb);
    char h1[32], h2[32];
    char who[300] = "";
    if (a->header.flags & MT_HDR_RANK && a->header.rank >= 0) { /* one line per rank */
        mt_trace_label(a, who, sizeof who - 2);
        strcat(who, ": ");
    }
    fprintf(stderr, "memtrace: %s%s: %" PRIu64 " events, %s on disk\n", who, path, a->events,
            mt_format_bytes((uint64_t)sb.st_size, h1, sizeof h1));
    for (size_t i = 0; i < a->n_devices; i++) {
        const mt_device_report *d = &a->devices[i];
        char root[32];
        if (mt_gpu_from_nvml_alone(d)) {
            fprintf(stderr, "  %-8s nothing allocated; NVML lists the process there, %s at most "
                            "(a CUDA context)\n",
                    mt_device_root_name(d, root, sizeof root),
                    mt_format_bytes(d->n_nvml ? d->nvml_max : 0, h1, sizeof h1));
            continue;
        }
        fprintf(stderr, "  %-8s peak %s (%" PRIu64 " bytes) at %.3f s; API-requested peak %s\n",
                mt_device_root_name(d, root, sizeof root),
                mt_format_bytes(d->u.peak, h1, sizeof h1), d->u.peak, (double)d->peak_time_ns / 1e9,
                mt_format_bytes(d->u.api_peak, h2, sizeof h2));
    }
    if (a->host)
        fprintf(stderr, "  %-8s peak %s pinned/registered\n", "host",
                mt_format_bytes(a->host->u.peak, h1, sizeof h1));
    fprintf(stderr, "  failed requests: %" PRIu64 ", dropped events: %" PRIu64 "%s\n",
            a->failed_total, a->dropped, a->truncated ? " (file truncated)" : "");
    /* the error that most likely ended the run, where the user looks first (report: the rest) */
    for (size_t i = 0, shown = 0; i < a->n_failed && shown < 3; i++) {
        const mt_failed_request *f = &a->failed[i];
        if (!mt_failed_is_torch_oom(f)) continue;
        char root[32], h3[32];
        fprintf(stderr, "  torch.OutOfMemoryError at %.3f s on %s: %s from %s",
                (double)f->time_ns / 1e9, mt_failed_root_name(f, root, sizeof root),
                mt_format_bytes(f->bytes, h1, sizeof h1), mt_frames_own_code(a->frames, f->stack));
        if (f->backward_stack) /* a worker of autograd's: the backward() call */
            fprintf(stderr, " in the backward pass of %s",
                    mt_frames_own_code(a->frames, f->backward_stack));
        fprintf(stderr, "; PyTorch had %s allocated",
                mt_format_bytes(f->torch_allocated, h2, sizeof h2));
        if (f->torch_async) /* its pool's reservation is the driver's (the report's "pool") */
            fprintf(stderr, " (backend:cudaMallocAsync)\n");
        else
            fprintf(stderr, ", %s reserved\n", mt_format_bytes(f->torch_reserved, h3, sizeof h3));
        shown++;
    }
    /* What the recording itself cost, so that a slow run is not blamed on memtrace in the dark
     * (nor the other way round): the recorder's own estimate, its parts in `report`. */
    char brief[64], cost[1536];
    if (mt_cost_describe(a, brief, sizeof brief, cost, sizeof cost))
        fprintf(stderr, "  recording cost: %s, memtrace's own work on the program's threads "
                        "(sampled; per call: memtrace report)\n", brief);
    /* the flame graph of the GPU with the largest peak (what `export --format folded` picks) */
    const mt_device_report *big = NULL;
    for (size_t i = 0; i < a->n_devices; i++)
        if (!big || a->devices[i].u.peak > big->u.peak) big = &a->devices[i];
    char root[32] = "host";
    if (big) mt_device_root_name(big, root, sizeof root);
    if (row && mt_rank_summarize(a, row) < 0) mt_rank_summary_free(row); /* out of memory */
    mt_analysis_free(a);
    /* the suggested output is named after the trace: a fixed name would exist the second time */
    size_t stem = strlen(path);
    if (stem > 7 && strcmp(path + stem - 7, ".mtrace") == 0) stem -= 7;
    fprintf(stderr, "  next: memtrace report %s\n", path);
    fprintf(stderr, "        memtrace export --format chrome -o %.*s.json.gz %s   (ui.perfetto.dev)\n",
            (int)stem, path,
            path);
    fprintf(stderr, "        memtrace export --format speedscope -o %.*s.speedscope.json %s   "
                    "(speedscope.app)\n", (int)stem, path, path);
    fprintf(stderr, "        memtrace export --format folded %s | flamegraph.pl --title '%s live at "
                    "the peak' --countname bytes --colors mem > peak.svg\n", path, root);
}

/* How many files of dir end in .mtrace; -1 when it cannot be read. */
static long traces_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        n += len > 7 && strcmp(e->d_name + len - 7, ".mtrace") == 0;
    }
    closedir(d);
    return n;
}

/* Rank order; rows of traces that could not be read (no path) last. */
static int by_rank(const void *pa, const void *pb)
{
    const mt_rank_summary *a = pa, *b = pb;
    if (!a->path || !b->path) return !a->path - !b->path;
    if (a->has_rank != b->has_rank) return a->has_rank ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return strcmp(a->path, b->path);
}

/* Several traces (a job's ranks, a program's processes): how to read them together, and how the
 * job ended when a rank ran out of memory or was killed (the rank table's lines). */
static void summarize_job(mt_rank_summary *rows, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += rows[i].path != NULL;
    if (k < 2) return;
    qsort(rows, n, sizeof *rows, by_rank); /* the manifest is in the order the ranks finished */
    /* their directory when it holds these traces and no others, else the paths; a path's
     * directory is what comes before its last '/' ("/" for "/t.mtrace", "." with no '/') */
    const char *slash = strrchr(rows[0].path, '/');
    size_t dlen = slash ? (size_t)(slash - rows[0].path) + 1 : 0; /* with the '/' */
    int one_dir = 1;
    for (size_t i = 1; i < k && one_dir; i++) {
        const char *s2 = strrchr(rows[i].path, '/');
        one_dir = (s2 ? (size_t)(s2 - rows[i].path) + 1 : 0) == dlen &&
                  strncmp(rows[i].path, rows[0].path, dlen) == 0;
    }
    char dir[4096];
    if (!dlen)
        snprintf(dir, sizeof dir, ".");
    else /* without the trailing '/', but for the root itself */
        snprintf(dir, sizeof dir, "%.*s", (int)(dlen > 1 ? dlen - 1 : 1), rows[0].path);
    fprintf(stderr, "memtrace: %zu traces; side by side (the rank table): memtrace report", k);
    if (one_dir && traces_in(dir) == (long)k)
        fprintf(stderr, " %s\n", dir);
    else
        for (size_t i = 0; i < k; i++)
            fprintf(stderr, " %s%s", rows[i].path, i + 1 < k ? "" : "\n");
    mt_out *o = mt_out_from_file(stderr);
    if (o) {
        mt_rank_notes_text(o, rows, k, "  ");
        mt_out_close(o);
    }
}

/* Reads the manifest the recorders appended to: "<pid> trace <path>" per trace written,
 * "<pid> skipped <comm>" per process that initialized CUDA but made no context. */
void mt_record_summarize(const char *manifest, int symbolize, int quiet)
{
    /* The program is done. Symbolizing appends to traces that may have stopped at a file-size
     * limit (ulimit -f): that write must fail with EFBIG and be reported, not kill memtrace with
     * SIGXFSZ, which made `record` exit 153 for a program that exited 0 (seen on the GPU check). */
    signal(SIGXFSZ, SIG_IGN);
    FILE *f = fopen(manifest, "re");
    if (!f) return;
    char line[4200], skipped[1024] = "";
    int files = 0, n_skipped = 0;
    mt_rank_summary *rows = NULL; /* a row per trace summarized, for summarize_job */
    size_t n_rows = 0, cap_rows = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *what = strchr(line, ' ');
        char *arg = what ? strchr(what + 1, ' ') : NULL;
        if (!arg || !arg[1]) continue;
        *what++ = 0;
        *arg++ = 0;
        if (strcmp(what, "trace") == 0) {
            files++;
            if (mt_trace_held_open(atoi(line), arg) == 1) {
                fprintf(stderr, "memtrace: %s is still being written by pid %s: not symbolized "
                                "(run `memtrace symbolize %s` once that process is done)\n",
                        arg, line, arg);
                continue;
            }
            mt_rank_summary *row = NULL;
            if (!quiet && n_rows == cap_rows) {
                size_t nc = cap_rows ? 2 * cap_rows : 16;
                mt_rank_summary *nr = realloc(rows, nc * sizeof *nr);
                if (nr) rows = nr, cap_rows = nc;
            }
            if (!quiet && n_rows < cap_rows) {
                row = &rows[n_rows++];
                memset(row, 0, sizeof *row);
            }
            summarize_one(arg, symbolize, quiet, row);
        } else if (strcmp(what, "skipped") == 0) {
            size_t o = strlen(skipped);
            if (n_skipped++ < 8 && o < sizeof skipped - 96)
                snprintf(skipped + o, sizeof skipped - o, "%s%.40s (pid %.12s)", o ? ", " : "",
                         arg, line);
        }
    }
    fclose(f);
    if (!quiet) summarize_job(rows, n_rows);
    for (size_t i = 0; i < n_rows; i++)
        mt_rank_summary_free(&rows[i]);
    free(rows);
    if (n_skipped && !quiet)
        fprintf(stderr, "memtrace: no trace for %d process%s that initialized CUDA but made no "
                "context: %s%s\n", n_skipped, n_skipped == 1 ? "" : "es", skipped,
                n_skipped > 8 ? ", ..." : "");
    if (!files && !n_skipped && !quiet)
        fprintf(stderr, "memtrace: no process of the command initialized CUDA: no trace written\n");
}
