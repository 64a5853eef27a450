// The C++ part of libmt_symfix: a namespaced static member, so its symbol is mangled
// (_ZN3c1012FixAllocator6mallocEPvmPi) and must come back demangled.
#include <cstddef>

#include "fixture.h"

namespace c10 {
struct FixAllocator {
    static uint64_t malloc(void *p, std::size_t n, int *line);
};

__attribute__((noinline)) uint64_t FixAllocator::malloc(void *p, std::size_t n, int *line)
{
    uint64_t ra = mt_fix_capture();
    *line = __LINE__ - 1;
    __asm__ volatile("" : "+r"(ra) : "r"(p), "r"(n));
    return ra;
}
} // namespace c10

extern "C" int mt_fix_have_cxx(void)
{
    return 1;
}

extern "C" uint64_t mt_fix_cxx(int *line)
{
    uint64_t ra = c10::FixAllocator::malloc(nullptr, 64, line);
    __asm__ volatile("" : "+r"(ra));
    return ra;
}
