/* grow.h — room in a growable array, the one way every stage makes it:
 *
 *     if (MT_GROW(l->v, l->cap, l->n + 1) < 0) return -1;
 *     l->v[l->n++] = x;
 *
 * The capacity doubles (from 16), so n appends cost O(n) in all; a size whose bytes would not fit
 * in size_t fails like an allocation (the analysis reads untrusted traces). On failure the array
 * and its capacity are unchanged: what it held is still there, and still the caller's to free.
 *
 * Header-only; no stage's data lives here. */
#ifndef MT_UTIL_GROW_H
#define MT_UTIL_GROW_H

#include <stdint.h>
#include <stdlib.h>

#define MT_GROW_FIRST 16

/* Makes *p (elements of elem bytes, *cap of them allocated) hold at least need. 0, or -1 when out
 * of memory. */
static inline int mt_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : MT_GROW_FIRST;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return -1;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem) return -1;
    void *np = realloc(*p, ncap * elem);
    if (!np) return -1;
    *p = np;
    *cap = ncap;
    return 0;
}

/* mt_grow for an array `v` (any pointer type) and its size_t capacity `cap`, both lvalues. */
#define MT_GROW(v, cap, need) mt_grow((void **)&(v), &(cap), (need), sizeof *(v))

#endif
