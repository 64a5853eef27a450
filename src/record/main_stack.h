/* main_stack.h — the main thread's stack bounds as another thread found them (main_stack.c).
 * Private to src/record. */
#ifndef MT_RECORD_MAIN_STACK_H
#define MT_RECORD_MAIN_STACK_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct mt_main_stack_bounds {
    _Atomic int ready; /* lo and hi are set (release; read with acquire) */
    uintptr_t lo, hi;  /* [lo, hi), as pthread_getattr_np gives them for the main thread */
} mt_main_stack_bounds;

extern mt_main_stack_bounds mt_main_stack;

/* 1, with the bounds, when sp lies on the main thread's stack and its bounds are known. */
static inline int mt_main_stack_holds(uintptr_t sp, uintptr_t *lo, uintptr_t *hi)
{
    if (!atomic_load_explicit(&mt_main_stack.ready, memory_order_acquire)) return 0;
    if (sp < mt_main_stack.lo || sp >= mt_main_stack.hi) return 0;
    *lo = mt_main_stack.lo;
    *hi = mt_main_stack.hi;
    return 1;
}

#endif
