/* Who is inside the recorder right now: at exit, the sink is freed only once no callback, hook
 * or activity delivery can still hold it (inject.c, at_exit).
 *
 * Why not one shared counter: every tensor report entered and left it with a locked add, two per
 * report, and a locked instruction waits for every store before it to leave the core (the caching
 * allocator has just written its own bookkeeping): ~100 cycles of a ~1000-cycle report on the GPU
 * machine. So each thread counts itself in a slot of its own, with plain stores, and the one
 * reader that needs them ordered (at_exit) pays instead: after switching recording off it calls
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every running thread of the process
 * execute a full barrier. Then either a thread's load of `enabled` came after that barrier and
 * saw the switch (it touches nothing), or its count, stored before that load, was made visible by
 * the barrier and at_exit waits for it (the asymmetric Dekker of liburcu's membarrier flavour).
 *
 *   slot: | n: calls of its thread in progress (its thread writes it, load + store) | taken | pad |
 *         one cache line each, so threads do not share lines
 *
 * A signal handler that records on a thread already inside a hook nests: it runs to its end before
 * the interrupted call goes on, so the load-and-store counts stay exact. Where membarrier is not
 * available (kernel before 4.14, a seccomp filter), or all MT_INFLIGHT_SLOTS are taken, a thread
 * uses the shared counter with locked adds, as before. A slot is given back when its thread exits
 * (a key destructor); a hook run by a later destructor of that thread uses the shared counter.
 */
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "recorder.h"

__thread _Atomic uint32_t *mt_inflight_tls;

static void give_back(void *p)
{
    mt_inflight_slot *s = p;
    atomic_store_explicit(&s->taken, 0, memory_order_release);
    mt_inflight_tls = MT_INFLIGHT_SHARED;
}

void mt_inflight_init(mt_recorder *r)
{
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0)
        return;
    if (pthread_key_create(&r->inflight_slots.key, give_back) != 0) return;
    r->inflight_slots.on = 1;
}

_Atomic uint32_t *mt_inflight_assign(mt_recorder *r)
{
    _Atomic uint32_t *mine = MT_INFLIGHT_SHARED;
    for (int i = 0; r->inflight_slots.on && i < MT_INFLIGHT_SLOTS; i++) {
        mt_inflight_slot *s = &r->inflight_slots.slot[i];
        int free_ = 0;
        if (atomic_load_explicit(&s->taken, memory_order_relaxed) ||
            !atomic_compare_exchange_strong(&s->taken, &free_, 1))
            continue;
        if (pthread_setspecific(r->inflight_slots.key, s) != 0) { /* could not be given back */
            atomic_store(&s->taken, 0);
            break;
        }
        mine = &s->n;
        break;
    }
    return mt_inflight_tls = mine;
}

int mt_inflight_quiet(mt_recorder *r)
{
    if (r->inflight_slots.on) /* every thread's count, stored before its last look at `enabled` */
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    if (atomic_load(&r->inflight) > 0) return 0;
    for (int i = 0; i < MT_INFLIGHT_SLOTS; i++)
        if (atomic_load_explicit(&r->inflight_slots.slot[i].n, memory_order_acquire)) return 0;
    return 1;
}
