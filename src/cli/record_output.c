/* Where `memtrace record` tells the recorders to write (MEMTRACE_OUTPUT), checked before the
 * command starts.
 *
 * Every process of the command that makes a CUDA context writes its own trace from the same
 * pattern, and the recorder never overwrites an existing trace without --force: a pattern that
 * cannot tell processes apart would leave every process after the first untraced (or, forced,
 * overwriting each other's file). So the pattern the recorders get always tells them apart: a
 * -o PATTERN with neither %p (the pid) nor %r (the rank, else the pid) gets ".%p" before its
 * extension ("run.mtrace" -> "run.%p.mtrace"). The recorder creates no directory, so the
 * directory must exist and be writable, else `record` stops before starting the command (exit 2)
 * instead of every process discovering it alone.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "record_summary.h"

/* 1 when the pattern has an unescaped %<c>. */
static int has_code(const char *pattern, char c)
{
    for (const char *p = pattern; *p; p++)
        if (*p == '%' && p[1]) {
            if (p[1] == c) return 1;
            p++; /* "%%" and other pairs */
        }
    return 0;
}

int mt_record_pattern_per_process(const char *pattern, char *out, size_t len)
{
    if (has_code(pattern, 'p') || has_code(pattern, 'r')) {
        snprintf(out, len, "%s", pattern);
        return 0;
    }
    const char *slash = strrchr(pattern, '/');
    const char *base = slash ? slash + 1 : pattern;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) dot = base + strlen(base); /* no extension (or a dot file) */
    snprintf(out, len, "%.*s.%%p%s", (int)(dot - pattern), pattern, dot);
    return 1;
}

int mt_record_check_dir(const char *abs_pattern, char *err, size_t errlen)
{
    /* the directory part, with what is known here expanded: %h (this host) and %%; a directory
     * named after the command or the rank (%c, %r) may exist already: the part before it must */
    char host[256] = "", dir[8192];
    gethostname(host, sizeof host - 1);
    const char *slash = strrchr(abs_pattern, '/');
    size_t n = slash ? (size_t)(slash - abs_pattern) : 0, o = 0;
    size_t variable_at = (size_t)-1; /* where the first %c/%p of the directory was written */
    for (size_t i = 0; i < n && o + 256 < sizeof dir; i++) {
        char c = abs_pattern[i];
        if (c == '%' && i + 1 < n) {
            char code = abs_pattern[++i];
            if (code == 'h') {
                o += (size_t)snprintf(dir + o, sizeof dir - o, "%s", host);
                continue;
            }
            if (code == '%') {
                dir[o++] = '%';
                continue;
            }
            if (code == 'p') {
                snprintf(err, errlen,
                         "%%p in a directory name cannot work: the recorder creates "
                         "no directory, and no directory can exist for pids not yet given");
                return -1;
            }
            if ((code == 'c' || code == 'r') && variable_at == (size_t)-1) variable_at = o;
            dir[o++] = '%';
            dir[o++] = code;
            continue;
        }
        dir[o++] = c;
    }
    dir[o] = 0;
    if (!n) snprintf(dir, sizeof dir, "/");
    if (variable_at != (size_t)-1) { /* only the part before that component can be checked */
        dir[variable_at] = 0;
        char *cut = strrchr(dir, '/');
        if (cut) cut[cut == dir ? 1 : 0] = 0;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, errlen, "%s: %s (the recorder creates no directory)", dir,
                 errno == ENOENT ? "no such directory" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is not a directory", dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "cannot create files in %s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}
