/* Arguments shared by the subcommands that take sizes, percentages and devices (check, diff). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "memtrace/export.h"

/* SIZE: a number, whole or with a fraction, and an optional unit (any case):
 *   B or none      bytes (then the number must be whole)
 *   KiB MiB GiB TiB, and K M G T (with or without a trailing B when binary: "1.5G", "2GiB")
 *                  powers of 1024, as memtrace prints sizes
 *   KB MB GB TB    powers of 1000 ("1500MB" = 1.5e9 bytes)
 * The value is computed exactly in integers (1.5G = 1610612736) and rounded to the nearest byte.
 * -1 on anything else: empty, negative, no digits, junk, more than 18 digits, 2^64 or more. */
int mt_cli_parse_size(const char *s, uint64_t *out)
{
    if (!s) return -1;
    const char *p = s;
    unsigned __int128 mant = 0, scale = 1; /* value = mant / scale */
    int digits = 0, frac = 0;
    for (; *p; p++) {
        if (*p >= '0' && *p <= '9') {
            if (++digits > 18) return -1;
            mant = mant * 10 + (unsigned)(*p - '0');
            if (frac) scale *= 10;
        } else if (*p == '.' && !frac) {
            frac = 1;
        } else {
            break;
        }
    }
    if (!digits) return -1;
    static const struct {
        const char *name;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"b", 1},
        {"k", 1ull << 10}, {"kib", 1ull << 10}, {"ki", 1ull << 10}, {"kb", 1000ull},
        {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mi", 1ull << 20}, {"mb", 1000000ull},
        {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gi", 1ull << 30}, {"gb", 1000000000ull},
        {"t", 1ull << 40}, {"tib", 1ull << 40}, {"ti", 1ull << 40}, {"tb", 1000000000000ull},
    };
    uint64_t mult = 0;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcasecmp(p, units[i].name) == 0) mult = units[i].mult;
    if (!mult) return -1;
    unsigned __int128 bytes2 = mant * mult * 2; /* twice the value times scale, for rounding */
    if (mult == 1 && mant % scale) return -1;    /* a fraction of a byte */
    unsigned __int128 v = (bytes2 / scale + 1) / 2;
    if (v > UINT64_MAX) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* PCT: a non-negative number with an optional '%' ("10", "2.5%"). -1 otherwise. */
int mt_cli_parse_percent(const char *s, double *out)
{
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return -1;
    if (*end == '%') end++;
    if (*end) return -1;
    *out = v;
    return 0;
}

/* A whole number of at most 18 digits, nothing else. -1 otherwise. */
int mt_cli_parse_uint(const char *s, uint64_t *out)
{
    if (!s || !*s || strlen(s) > 18) return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return 0;
}

/* --device: N or cuda:N (0..255). -1 otherwise. */
int mt_cli_parse_gpu(const char *s, int *out)
{
    if (!s) return -1;
    if (strncmp(s, "cuda:", 5) == 0) s += 5;
    if (!*s || strlen(s) > 3) return -1;
    int v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    if (v > 255) return -1;
    *out = v;
    return 0;
}

/* --devices A:B (each N or cuda:N: "0:1", "cuda:0:cuda:1"): the one split at a ':' where both
 * sides are GPUs. -1 otherwise. */
int mt_cli_parse_gpu_pair(const char *s, int *a, int *b)
{
    if (!s) return -1;
    int found = 0;
    for (const char *c = strchr(s, ':'); c; c = strchr(c + 1, ':')) {
        char left[16];
        size_t n = (size_t)(c - s);
        if (n >= sizeof left) break;
        memcpy(left, s, n);
        left[n] = 0;
        int x, y;
        if (mt_cli_parse_gpu(left, &x) == 0 && mt_cli_parse_gpu(c + 1, &y) == 0) {
            *a = x;
            *b = y;
            found++;
        }
    }
    return found == 1 ? 0 : -1;
}

/* A count or byte size: digits with an optional k/m/g/t suffix (binary). -1 if malformed. */
int mt_cli_parse_count(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned shift = 0;
    if (*end) {
        const char *units = "kmgt", *u = strchr(units, *end | 0x20);
        if (!u || !*u) return -1;
        shift = 10u * (unsigned)(u - units + 1);
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end) return -1;
        if (v > (~0ull >> shift)) return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* --frames: user | all | python | native. -1 if something else. */
int mt_cli_parse_frames(const char *s, mt_frame_filter *out)
{
    if (strcmp(s, "user") == 0) *out = MT_FRAMES_USER;
    else if (strcmp(s, "all") == 0) *out = MT_FRAMES_ALL;
    else if (strcmp(s, "python") == 0) *out = MT_FRAMES_PYTHON;
    else if (strcmp(s, "native") == 0) *out = MT_FRAMES_NATIVE;
    else return -1;
    return 0;
}

void mt_cli_progress(void *ctx, int pass, double fraction)
{
    fprintf(stderr, "\rmemtrace: %s: pass %d: %3.0f%%", (const char *)ctx, pass, fraction * 100);
    fflush(stderr);
}

int mt_cli_analyze(const char *cmd, const char *path, const mt_cli_analysis_options *opt,
                   struct mt_analysis **out)
{
    static const mt_cli_analysis_options defaults = {.base_dir = 1, .warn_incomplete = 1};
    if (!opt) opt = &defaults;
    char err[512];
    int tty = isatty(2);
    mt_analyze_options o = {.progress = tty ? mt_cli_progress : NULL, .progress_ctx = (void *)path,
                            .category_rules = opt->category_rules, .strict = opt->strict,
                            .on_event = opt->on_event, .event_ctx = opt->event_ctx};
    int rc = mt_analyze(path, &o, out, err, sizeof err);
    if (tty) fputs("\r\033[K", stderr);
    if (rc < 0) return mt_cli_fail("%s: %s", cmd, err);
    /* damaged chunks stepped over, a cut trace */
    if (opt->warn_incomplete) mt_cli_warn_incomplete(cmd, *out);
    if (opt->base_dir) {
        char cwd[4096];
        if (getcwd(cwd, sizeof cwd)) mt_frames_set_base_dir((*out)->frames, cwd);
    }
    return 0;
}

int mt_cli_close_stdout(const char *cmd, mt_out *o)
{
    if (mt_out_close(o) < 0) return mt_cli_fail("%s: writing standard output failed: %s", cmd,
                                                strerror(errno));
    return 0;
}
