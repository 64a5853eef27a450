/* Helpers shared by the exporters (not part of the public API). */
#ifndef MT_EXPORT_UTIL_H
#define MT_EXPORT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "memtrace/compact.h"
#include "memtrace/export.h"

/* A growable array of frame names. */
typedef struct mt_namebuf {
    const char **v;
    size_t n, cap;
} mt_namebuf;

/* Frames of one stack stat, root first (without the device root): the stack's frames, or the
 * single "[driver internal]" pseudo frame for driver allocations. Returns the count, -1 on OOM. */
long mt_stat_frames(mt_frames *f, const mt_stack_stat *s, mt_name_style style, mt_namebuf *b);
void mt_namebuf_free(mt_namebuf *b);

/* "+1.234567 s" (time since trace start). */
const char *mt_format_rel(uint64_t ns, char *buf, size_t len);
/* "2024-05-01 12:34:56.789012 UTC" for trace-relative ns. */
const char *mt_format_abs(const mt_analysis *a, uint64_t rel_ns, char *buf, size_t len);
#endif
