/* C++ demangling through the C++ runtime (libstdc++'s __cxa_demangle): never by hand, so the
 * output matches what gdb, perf and c++filt print. */
#include <stdlib.h>

#include "memtrace/symbols.h"

/* From the Itanium C++ ABI; declared here because this is a C file (CMake links libstdc++). */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

char *mt_demangle(const char *name)
{
    /* Only "_Z..." names are mangled; asking the runtime about "main" would treat it as a type
     * name and "demangle" builtin-type abbreviations. */
    if (!name || name[0] != '_' || name[1] != 'Z') return NULL;
    int status = 0;
    char *out = __cxa_demangle(name, NULL, NULL, &status);
    if (status != 0) {
        free(out);
        return NULL;
    }
    return out;
}
