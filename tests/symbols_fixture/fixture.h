/* libmt_symfix: a tiny shared library, built -g -O1, whose functions hand back real return
 * addresses together with the source line of the call, so the symbolizer tests can check exact
 * function / file / line / inline answers against what the compiler itself saw. */
#ifndef MT_SYMFIX_H
#define MT_SYMFIX_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Returns its own return address: the address right after the call in its caller. */
uint64_t mt_fix_capture(void);

/* A plain call: returns the return address of its call to mt_fix_capture; *line = that line. */
uint64_t mt_fix_call(int *line);

/* Lines of the two-level inline chain mt_fix_inlined -> fix_inline_mid -> fix_inline_leaf. */
typedef struct mt_fix_inline_lines {
    int outer; /* in fixture.c: where mt_fix_inlined calls fix_inline_mid */
    int mid;   /* in fixture_inline.h: where fix_inline_mid calls fix_inline_leaf */
    int leaf;  /* in fixture_inline.h: where fix_inline_leaf calls mt_fix_capture */
} mt_fix_inline_lines;
uint64_t mt_fix_inlined(mt_fix_inline_lines *lines);

/* 1 when the C++ part was built (g++ present). */
int mt_fix_have_cxx(void);
/* Return address inside c10::FixAllocator::malloc(void*, unsigned long, int*); *line = the call.
 * 0 when the C++ part was not built. */
uint64_t mt_fix_cxx(int *line);

#ifdef __cplusplus
}
#endif
#endif
