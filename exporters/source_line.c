/* Source text of Python lines for `report --by-line`: the file as it is on this machine now (it
 * may have changed since recording; the report says the text is "as on this machine").
 * The last file read is kept, split in lines, so a table of many lines of one file reads it once. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAX_SOURCE_BYTES (16u << 20) /* larger "source" files are not Python we want to print */

void mt_src_cache_free(mt_src_cache *c)
{
    free(c->path);
    if (c->lines) free(c->lines[0] ? c->lines[0] : NULL); /* one buffer, lines point into it */
    free(c->lines);
    *c = (mt_src_cache){0};
}

static void load(mt_src_cache *c, const char *path)
{
    mt_src_cache_free(c);
    c->path = strdup(path);
    c->missing = 1;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char *buf = malloc(MAX_SOURCE_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_SOURCE_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf || n > MAX_SOURCE_BYTES) {
        free(buf);
        return;
    }
    buf[n] = 0;
    size_t count = 1;
    for (size_t i = 0; i < n; i++) count += buf[i] == '\n';
    c->lines = malloc(count * sizeof *c->lines);
    if (!c->lines) {
        free(buf);
        return;
    }
    char *p = buf;
    for (size_t i = 0; i < count; i++) {
        c->lines[i] = p;
        char *nl = strchr(p, '\n');
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
