/* The C part of libmt_symfix (see fixture.h). Each call is followed, on the next line, by
 * "*line = __LINE__ - 1": the call's own line. The store being on another line is on purpose:
 * the instruction at the return address belongs to that next line, so a symbolizer that forgets
 * to look up ip - 1 reports the wrong line and the tests catch it. */
#include "fixture.h"
#include "fixture_inline.h"

__attribute__((noinline)) uint64_t mt_fix_capture(void)
{
    return (uint64_t)(uintptr_t)__builtin_return_address(0);
}

__attribute__((noinline)) uint64_t mt_fix_call(int *line)
{
    uint64_t ra = mt_fix_capture();
    *line = __LINE__ - 1;
    __asm__ volatile("" : "+r"(ra));
    return ra;
}

__attribute__((noinline)) uint64_t mt_fix_inlined(mt_fix_inline_lines *lines)
{
    uint64_t ra = fix_inline_mid(lines);
    lines->outer = __LINE__ - 1;
    __asm__ volatile("" : "+r"(ra));
    return ra;
}

#ifndef MT_SYMFIX_HAVE_CXX
int mt_fix_have_cxx(void)
{
    return 0;
}

uint64_t mt_fix_cxx(int *line)
{
    *line = 0;
    return 0;
}
#endif
