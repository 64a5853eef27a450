/* Context destruction (src/compact/tracker.c): MT_OP_CTX_DESTROY ends exactly the live lifetimes
 * of its context, in allocation order, whether the tracker keeps one list per context or, while
 * every live lifetime is one context's, none (the live set is then the list). Context 0 is no
 * context: its lifetimes (tensors, driver records that name none) are ended by no destruction,
 * and a destruction of context 0 ends nothing. Checked against a plain model of the live set on
 * random streams of allocations, frees, replacements and destructions over one to three contexts,
 * with and without lifetimes of no context among them. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "memtrace/compact.h"
#include "memtrace/trace.h"

#define SLOTS 64
#define A ((uint64_t)0x7f0000000000)

typedef struct ended {
    uint64_t serial;
    int why;
} ended;

typedef struct log {
    ended *v;
    size_t n, cap;
} log_t;

static void on_release(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why)
{
    (void)end_ns;
    log_t *g = ctx;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->v = realloc(g->v, g->cap * sizeof *g->v);
        cr_assert(g->v);
    }
    g->v[g->n++] = (ended){l->serial, (int)why};
}

/* The model: what is live at each address slot, with its context and serial (0 = nothing). */
typedef struct model {
    uint64_t serial[SLOTS];
    uint32_t ctx[SLOTS];
    uint64_t next_serial;
} model;

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* with_none: context 0 (no context) among the contexts of allocations and destructions */
static void run(uint64_t seed, unsigned contexts, unsigned events, int with_none)
{
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    log_t g = {0};
    mt_tracker_hooks hooks = {.ctx = &g, .on_release = on_release};
    mt_tracker *t = mt_tracker_new(&hooks);
    cr_assert(t);
    model m = {.next_serial = 1};
    uint64_t destroyed = 0;
    for (unsigned i = 0; i < events; i++) {
        mt_event e = {.time_ns = 1000 + i, .device = 0, .kind = MT_KIND_DEVICE, .bytes = 512};
        unsigned s = (unsigned)(rnd() % SLOTS);
        unsigned what = (unsigned)(rnd() % 100);
        /* mostly one context at a time, now and then another: both ways of the tracker */
        unsigned choices = contexts + (with_none ? 1 : 0);
        uint32_t ctx = (with_none ? 0 : 1) +
                       (uint32_t)(rnd() % 16 == 0 ? rnd() % choices : (i / 500) % choices);
        size_t before = g.n;
        if (what < 3) { /* destroy a context: its lifetimes end, oldest first */
            e.op = MT_OP_CTX_DESTROY;
            e.kind = MT_KIND_UNKNOWN;
            e.context = ctx;
            cr_assert_eq(mt_tracker_event(t, &e), 0);
            uint64_t expect[SLOTS];
            size_t n = 0;
            for (unsigned k = 0; k < SLOTS && ctx; k++) /* context 0: nothing ends */
                if (m.serial[k] && m.ctx[k] == ctx) expect[n++] = m.serial[k];
            for (size_t a = 1; a < n; a++) /* by serial: allocation order */
                for (size_t b = a; b > 0 && expect[b - 1] > expect[b]; b--) {
                    uint64_t x = expect[b];
                    expect[b] = expect[b - 1];
                    expect[b - 1] = x;
                }
            cr_assert_eq(g.n - before, n, "seed %llu event %u: %zu ended, expected %zu",
                         (unsigned long long)seed, i, g.n - before, n);
            for (size_t k = 0; k < n; k++) {
                cr_assert_eq(g.v[before + k].serial, expect[k], "seed %llu event %u: order",
                             (unsigned long long)seed, i);
                cr_assert_eq(g.v[before + k].why, MT_END_CTX_DESTROY);
            }
            for (unsigned k = 0; k < SLOTS && ctx; k++)
                if (m.serial[k] && m.ctx[k] == ctx) m.serial[k] = 0;
            destroyed += n;
            continue;
        }
        e.address = A + (uint64_t)s * 0x100000;
        e.context = ctx;
        if (m.serial[s] && what < 55) { /* free it */
            e.op = MT_OP_FREE;
            cr_assert_eq(mt_tracker_event(t, &e), 0);
            cr_assert_eq(g.n - before, 1);
            cr_assert_eq(g.v[before].serial, m.serial[s]);
            cr_assert_eq(g.v[before].why, MT_END_FREE);
            m.serial[s] = 0;
            continue;
        }
        e.op = MT_OP_ALLOC; /* over a live one: it is replaced */
        cr_assert_eq(mt_tracker_event(t, &e), 0);
        cr_assert_eq(g.n - before, m.serial[s] ? 1u : 0u);
        if (m.serial[s]) cr_assert_eq(g.v[before].why, MT_END_REPLACED);
        m.serial[s] = m.next_serial++;
        m.ctx[s] = ctx;
    }
    cr_assert_eq(mt_tracker_anomalies(t)->ctx_destroy_released, destroyed);
    size_t live = 0;
    for (unsigned k = 0; k < SLOTS; k++) live += m.serial[k] != 0;
    cr_assert_eq(mt_tracker_live_count(t), live);
    mt_tracker_free(t);
    free(g.v);
}

Test(compact_contexts, one_context)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        run(seed, 1, 4000, 0);
}

Test(compact_contexts, two_contexts)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        run(seed, 2, 4000, 0);
}

Test(compact_contexts, three_contexts)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        run(seed, 3, 4000, 0);
}

/* A --tensors trace: tensors name no context, the segments one */
Test(compact_contexts, one_context_and_none)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        run(seed, 1, 4000, 1);
}

Test(compact_contexts, two_contexts_and_none)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        run(seed, 2, 4000, 1);
}
