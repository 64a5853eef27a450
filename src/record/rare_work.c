/* The counters of rare_work.h (which says why they exist), and its two functions. */
#include "atomic_max.h"
#include "rare_work.h"

mt_rare_totals mt_rare_all;

const char *const mt_rare_kind_names[MT_RARE_KINDS] = {
    [MT_RARE_STACK] = "stacks built",
    [MT_RARE_WALK] = "walks not remembered",
    [MT_RARE_THREAD] = "thread starts",
    [MT_RARE_CONTEXT] = "CUDA resource events",
    [MT_RARE_POOL] = "pool reads",
    [MT_RARE_WAIT] = "waits for the writer",
    [MT_RARE_OPEN] = "trace file created",
};

uint64_t mt_rare_begin(void)
{
    return mt_clock_tls.rare_depth++ ? 0 : mt_clock_now();
}

void mt_rare_end(uint64_t t0, mt_rare_kind kind)
{
    if (--mt_clock_tls.rare_depth) return;
    uint64_t ns = mt_clock_now() - t0;
    mt_clock_tls.rare_ns += ns;
    atomic_fetch_add_explicit(&mt_rare_all.ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&mt_rare_all.sections, 1, memory_order_relaxed);
    if ((unsigned)kind >= MT_RARE_KINDS) return;
    atomic_fetch_add_explicit(&mt_rare_all.kind_ns[kind], ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&mt_rare_all.kind_sections[kind], 1, memory_order_relaxed);
    mt_atomic_max_u64(&mt_rare_all.kind_max_ns[kind], ns);
}
