/* Forced-inline helpers of the fixture: their code lands inside mt_fix_inlined (fixture.c), so
 * DWARF describes them with DW_TAG_inlined_subroutine whose call sites are in two files. */
#ifndef MT_SYMFIX_INLINE_H
#define MT_SYMFIX_INLINE_H
#include "fixture.h"

/* The empty asm makes the value live after the call: no tail call, the return address stays
 * inside the caller. */
static inline __attribute__((always_inline)) uint64_t fix_inline_leaf(mt_fix_inline_lines *l)
{
    uint64_t ra = mt_fix_capture();
    l->leaf = __LINE__ - 1;
    __asm__ volatile("" : "+r"(ra));
    return ra;
}

static inline __attribute__((always_inline)) uint64_t fix_inline_mid(mt_fix_inline_lines *l)
{
    uint64_t ra = fix_inline_leaf(l);
    l->mid = __LINE__ - 1;
    __asm__ volatile("" : "+r"(ra));
    return ra + 0;
}
#endif
