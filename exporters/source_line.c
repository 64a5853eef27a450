/* Source text of Python lines for `report --by-line`: the file as it is on this machine now (it
 * may have changed since recording; the report says the text is "as on this machine", and marks
 * the lines of a file whose mtime is after the recording's start).
 * The last file read is kept, split in lines, so a table of many lines of one file reads it once. */
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define MAX_SOURCE_BYTES (16u << 20) /* larger "source" files are not Python we want to print */
#define MAX_LOADED_BYTES (256ull << 20) /* all files of one table: a bound on the time it takes */

static void drop_file(mt_src_cache *c)
{
    free(c->path);
    if (c->lines) free(c->lines[0] ? c->lines[0] : NULL); /* one buffer, lines point into it */
    free(c->lines);
    c->path = NULL;
    c->lines = NULL;
    c->n_lines = 0;
    c->missing = 0;
    c->changed = 0;
}

void mt_src_cache_init(mt_src_cache *c, const mt_analysis *a)
{
    *c = (mt_src_cache){.since_ns = a ? a->header.start_realtime_ns : 0};
}

void mt_src_cache_free(mt_src_cache *c)
{
    drop_file(c);
    *c = (mt_src_cache){.since_ns = c->since_ns};
}

/* The whole of a regular file of at most MAX_SOURCE_BYTES, NUL-terminated, or NULL. The path is
 * the trace's word: opened without blocking (a FIFO), without becoming a controlling terminal,
 * and refused unless regular. */
static char *read_source(mt_src_cache *c, const char *path, size_t *len, uint64_t *mtime_ns)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 &&
        (uint64_t)st.st_size <= MAX_SOURCE_BYTES &&
        c->loaded + (uint64_t)st.st_size <= MAX_LOADED_BYTES &&
        (buf = malloc((size_t)st.st_size + 1))) {
        size_t n = 0, want = (size_t)st.st_size;
        while (n < want) {
            ssize_t k = read(fd, buf + n, want - n);
            if (k <= 0) break; /* shrunk meanwhile: what was read */
            n += (size_t)k;
        }
        c->loaded += n;
        buf[n] = 0;
        *len = n;
        *mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    }
    close(fd);
    return buf;
}

static void load(mt_src_cache *c, const char *path)
{
    drop_file(c);
    c->path = strdup(path);
    c->missing = 1;
    size_t n = 0;
    uint64_t mtime_ns = 0;
    char *buf = read_source(c, path, &n, &mtime_ns);
    if (!buf) return;
    c->changed = c->since_ns && mtime_ns > c->since_ns;
    size_t count = 1;
    for (size_t i = 0; i < n; i++) count += buf[i] == '\n';
    c->lines = malloc(count * sizeof *c->lines);
    if (!c->lines) {
        free(buf);
        return;
    }
    char *p = buf, *end = buf + n;
    for (size_t i = 0; i < count; i++) { /* memchr: a NUL inside a line does not end the file */
        c->lines[i] = p;
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    c->n_lines = count;
    c->missing = 0;
}

const char *mt_source_line(mt_src_cache *c, const char *path, uint32_t line, char *buf,
                           size_t len)
{
    if (!path || !path[0] || line == 0) return NULL;
    if (!c->path || strcmp(c->path, path) != 0) load(c, path);
    if (c->missing || line > c->n_lines) return NULL;
    const char *s = c->lines[line - 1];
    while (*s == ' ' || *s == '\t') s++;
    size_t k = 0;
    for (; s[k] && k + 1 < len; k++) buf[k] = (s[k] == '\r' || s[k] == '\t') ? ' ' : s[k];
    while (k && isspace((unsigned char)buf[k - 1])) k--;
    buf[k] = 0;
    return buf;
}
