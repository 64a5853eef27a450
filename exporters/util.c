/* Helpers shared by the exporters: stack-stat frame lists and time formatting. */
#include <stdio.h>
#include <stdlib.h>
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
        size_t n = mt_frames_path_ex(f, s->stack, style, filter, b->v, b->flags, b->cap);
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

const char *mt_format_rel(uint64_t ns, char *buf, size_t len)
{
    snprintf(buf, len, "+%llu.%06llu s", (unsigned long long)(ns / 1000000000ull),
             (unsigned long long)(ns % 1000000000ull / 1000ull));
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
