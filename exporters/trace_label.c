/* How a trace is named in messages and tables (check, diff, Markdown summaries). */
#include <stdio.h>
#include <string.h>

#include "memtrace/export.h"

const char *mt_trace_label(const mt_analysis *a, char *buf, size_t len)
{
    /* The file name, which record makes unique per process (memtrace.<comm>.<pid>.mtrace). This
     * is the one place a trace gets its label: a rank read from the trace would be added here. */
    const char *slash = strrchr(a->path, '/');
    snprintf(buf, len, "%s", slash && slash[1] ? slash + 1 : a->path);
    return buf;
}
