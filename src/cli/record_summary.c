/* The end of `memtrace record`: symbolize, summarize, suggest. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memtrace/compact.h"
#include "memtrace/symbols.h"
#include "record_summary.h"

static const char *human(uint64_t b, char *buf, size_t len)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", v, units[u]);
    return buf;
}

static void summarize_one(const char *path, int symbolize, int quiet)
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
    fprintf(stderr, "memtrace: %s: %" PRIu64 " events, %s on disk\n", path, a->events,
            human((uint64_t)sb.st_size, h1, sizeof h1));
    for (size_t i = 0; i < a->n_devices; i++) {
        const mt_device_report *d = &a->devices[i];
        char root[32];
        fprintf(stderr, "  %-8s peak %s (%" PRIu64 " bytes) at %.3f s; API-requested peak %s\n",
                mt_device_root_name(d, root, sizeof root), human(d->u.peak, h1, sizeof h1),
                d->u.peak, (double)d->peak_time_ns / 1e9,
                human(d->u.api_peak, h2, sizeof h2));
    }
    if (a->host)
        fprintf(stderr, "  %-8s peak %s pinned/registered\n", "host",
                human(a->host->u.peak, h1, sizeof h1));
    fprintf(stderr, "  failed requests: %" PRIu64 ", dropped events: %" PRIu64 "%s\n",
            a->failed_total, a->dropped, a->truncated ? " (file truncated)" : "");
    mt_analysis_free(a);
    /* the suggested output is named after the trace: a fixed name would exist the second time */
    size_t stem = strlen(path);
    if (stem > 7 && strcmp(path + stem - 7, ".mtrace") == 0) stem -= 7;
    fprintf(stderr, "  next: memtrace report %s\n", path);
    fprintf(stderr, "        memtrace export --format chrome -o %.*s.json.gz %s   (Perfetto UI)\n",
            (int)stem, path, path);
    fprintf(stderr, "        memtrace export --format folded %s | flamegraph.pl > peak.svg\n",
            path);
}

void mt_record_summarize(const char *manifest, int symbolize, int quiet)
{
    FILE *f = fopen(manifest, "re");
    if (!f) return;
    char line[4200];
    int files = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *path = strchr(line, ' ');
        if (!path || !path[1]) continue;
        files++;
        if (mt_trace_held_open(atoi(line), path + 1) == 1) {
            fprintf(stderr, "memtrace: %s is still being written by pid %d: not symbolized (run "
                            "`memtrace symbolize %s` once that process is done)\n",
                    path + 1, atoi(line), path + 1);
            continue;
        }
        summarize_one(path + 1, symbolize, quiet);
    }
    fclose(f);
    if (!files && !quiet)
        fprintf(stderr, "memtrace: no process of the command initialized CUDA: no trace written\n");
}
