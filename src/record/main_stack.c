/* main_stack.c — the main thread's stack bounds, found from another thread.
 *
 * Why: a walk needs its thread's stack bounds (unwind.c, stack_bounds), and a thread finds them
 * with pthread_getattr_np at its first walk. For every thread but the main one that is a few
 * loads. For the main thread glibc reads /proc/self/maps to find the mapping that holds the stack:
 * 0.5-0.8 ms in samples/cifar.py, up to ~3 ms in a PyTorch program with transformers loaded
 * (H200, 2026-11-27: the rare work's "thread starts"), on the main thread, at its first recorded
 * allocation. The recorder's writer thread does the same reading at start-up instead
 * (mt_unwind_find_main_stack), and the main thread's first walk takes the result.
 *
 * The bounds are glibc's, computed the same way (nptl's pthread_getattr_np for the initial
 * thread): the top is __libc_stack_end rounded up to a page; the size is the stack's rlimit less
 * what the mapping holds above the top, cut to a page multiple and to the end of the mapping
 * below. A thread whose stack pointer lies within them is running on the main thread's stack.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "memtrace/unwind.h"
#include "main_stack.h"

/* glibc's (ld.so's) own record of where the initial thread's stack began; weak, so that a C
 * library without it leaves the main thread to find its bounds itself */
extern void *__libc_stack_end __attribute__((weak));

mt_main_stack_bounds mt_main_stack;

int mt_unwind_find_main_stack(void)
{
    if (atomic_load_explicit(&mt_main_stack.ready, memory_order_acquire)) return 1;
    if (!&__libc_stack_end || !__libc_stack_end) return 0;
    uintptr_t end = (uintptr_t)__libc_stack_end;
    long page = sysconf(_SC_PAGESIZE);
    struct rlimit rl;
    if (page <= 0 || getrlimit(RLIMIT_STACK, &rl) != 0) return 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 0;
    uintptr_t top = (end & -(uintptr_t)page) + (uintptr_t)page, last_to = 0, size = 0;
    int found = 0;
    char *line = NULL;
    size_t cap = 0;
    while (!found && getline(&line, &cap, f) > 0) { /* whole lines, however long their paths */
        unsigned long from, to;
        if (sscanf(line, "%lx-%lx", &from, &to) != 2) break;
        if (end >= from && end < to) {
            /* wraps to a huge size when the limit is infinite (or smaller than what lies above
             * the top): cut to the mapping below, as glibc does */
            size = ((uintptr_t)rl.rlim_cur - (to - top)) & -(uintptr_t)page;
            if (size > top - last_to) size = top - last_to;
            found = size > 0;
        }
        last_to = to;
    }
    free(line);
    fclose(f);
    if (!found) return 0;
    mt_main_stack.lo = top - size;
    mt_main_stack.hi = top;
    atomic_store_explicit(&mt_main_stack.ready, 1, memory_order_release);
    return 1;
}
