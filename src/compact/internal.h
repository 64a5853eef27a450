/* Internals of the compactor shared by its .c files (not part of the public API). */
#ifndef MT_COMPACT_INTERNAL_H
#define MT_COMPACT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "memtrace/compact.h"

#include "hash.h"   /* src/util: mt_mix64, MT_GOLDEN64 */
#include "u64map.h" /* src/util: mt_u64map */

/* ---- mapped VMM ranges, ordered by start (ranges.c) --------------------------------------- */
typedef struct mt_range {
    uint64_t start, end, handle;
    uint64_t serial; /* set by mt_ranges_insert: unique among the ranges a set ever held */
    uint32_t context;
    int32_t device; /* -1 with host: a mapping of memory located on the host */
    int host;
} mt_range;

typedef struct mt_range_set mt_range_set;

mt_range_set *mt_ranges_new(void);
void mt_ranges_free(mt_range_set *s);
size_t mt_ranges_count(const mt_range_set *s);
/* Adds a copy of r; returns its id (valid until it is removed), or -1 when out of memory. */
long mt_ranges_insert(mt_range_set *s, const mt_range *r);
void mt_ranges_remove(mt_range_set *s, uint32_t id);
mt_range *mt_ranges_get(mt_range_set *s, uint32_t id); /* NULL when id is not in the set */
/* The ids of the ranges overlapping [a, b) (start < b, end > a), in start order, into *ids (grown
 * as needed, capacity *cap). Returns the count, -1 when out of memory. */
long mt_ranges_overlapping(mt_range_set *s, uint64_t a, uint64_t b, uint32_t **ids, size_t *cap);

/* ---- members of CUDA contexts (ctx_members.c) ---------------------------------------------- */
typedef struct mt_ctx_member {
    uint64_t a, b, c; /* what the owner needs to find the member again, with a serial number */
} mt_ctx_member;

typedef struct mt_ctx_list {
    mt_ctx_member *v;
    size_t n, cap;
    uint64_t live; /* members that joined and did not leave */
} mt_ctx_list;

typedef struct mt_ctx_registry {
    mt_u64map index; /* context -> a: index in lists, b: 1 */
    mt_ctx_list *lists;
    size_t n_lists, cap_lists;
    int have_last; /* the last context looked up, and its list */
    uint32_t last_ctx;
    size_t last_ix;
} mt_ctx_registry;

/* Does member m still belong to context ctx? (compaction asks) */
typedef int (*mt_ctx_still_fn)(void *arg, uint32_t ctx, mt_ctx_member m);
int mt_ctx_join(mt_ctx_registry *r, uint32_t ctx, mt_ctx_member m, mt_ctx_still_fn still,
                void *arg); /* -1 when out of memory */
void mt_ctx_leave(mt_ctx_registry *r, uint32_t ctx);
/* Hands over the context's list (malloc'd, caller frees): every member that may still belong,
 * some perhaps gone or repeated. The context starts empty again. */
mt_ctx_member *mt_ctx_take(mt_ctx_registry *r, uint32_t ctx, size_t *n);
void mt_ctx_registry_destroy(mt_ctx_registry *r);
/* The same on one list (the registry's per context; the tracker keeps a few of its own). */
int mt_ctx_list_join(mt_ctx_list *l, uint32_t ctx, mt_ctx_member m, mt_ctx_still_fn still,
                     void *arg); /* -1 when out of memory */
static inline void mt_ctx_list_leave(mt_ctx_list *l)
{
    if (l->live) l->live--;
}
mt_ctx_member *mt_ctx_list_take(mt_ctx_list *l, size_t *n);

/* Kinds whose bytes are "in use" on their slot (device bytes, or host bytes for host kinds). */
static inline int mt_kind_counts(unsigned kind)
{
    const uint32_t counting =
        1u << MT_KIND_DEVICE | 1u << MT_KIND_PITCH | 1u << MT_KIND_ASYNC | 1u << MT_KIND_MANAGED |
        1u << MT_KIND_VMM_PHYSICAL | 1u << MT_KIND_DRIVER | 1u << MT_KIND_HOST_PINNED |
        1u << MT_KIND_HOST_REGISTERED | 1u << MT_KIND_TENSOR | 1u << MT_KIND_ARRAY;
    return kind < 32 && (counting >> kind & 1);
}

/* How an allocation's bytes count on its device, from its kind and flags:
 *   IN_USE    device (or host) bytes in use: what the peak is the maximum of;
 *   RESERVED  a PyTorch segment whose tensors are in the trace (record --tensors): the tensors
 *             are what is in use, the segment is the allocator's reservation around them;
 *   NONE      address space, mappings, pool bookkeeping, graph memory nodes: tracked, never
 *             counted. */
enum { MT_COUNT_NONE = 0, MT_COUNT_IN_USE = 1, MT_COUNT_RESERVED = 2 };

static inline int mt_counting(unsigned kind, unsigned flags)
{
    /* the common case first: no flag that changes how a kind counts (a few instructions, a few
     * times per event) */
    if (!(flags & (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED | MT_EF_CAPTURED | MT_EF_IMPORTED |
                   MT_EF_RETAIN)))
        return mt_kind_counts(kind) ? MT_COUNT_IN_USE : MT_COUNT_NONE;
    if ((flags & (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED)) ==
        (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED))
        return MT_COUNT_RESERVED;
    /* a graph memory node: an address fixed at capture, backed from the graph memory pool only
     * while the graph runs (the pool's reservation is what is counted, as POOL_RESERVED) */
    if (kind == MT_KIND_ASYNC && (flags & MT_EF_CAPTURED)) return MT_COUNT_NONE;
    /* a handle to a peer process's memory (IPC) or an extra reference: not new bytes here */
    if (flags & (MT_EF_IMPORTED | MT_EF_RETAIN)) return MT_COUNT_NONE;
    return mt_kind_counts(kind) ? MT_COUNT_IN_USE : MT_COUNT_NONE;
}

/* A time since the trace's start (0 for a time before it). */
static inline uint64_t mt_rel_time(uint64_t t, uint64_t start) { return t > start ? t - start : 0; }

static inline int mt_kind_is_host(unsigned kind)
{
    return kind == MT_KIND_HOST_PINNED || kind == MT_KIND_HOST_REGISTERED;
}

/* Host memory: a host kind, or device-kind memory located on the host (MT_EF_HOST_MEMORY). */
static inline int mt_is_host(unsigned kind, unsigned flags)
{
    return mt_kind_is_host(kind) || (flags & MT_EF_HOST_MEMORY);
}

/* ---- stack-stat lists ----------------------------------------------------------------------- */
/* Key used for per-stack aggregates: the driver flag sits above the 32-bit stack id; a category
 * (peak lists of tensor traces) in bits 33..38; the slot from bit 40. */
static inline uint64_t mt_stack_key(uint32_t stack, int driver)
{
    return (uint64_t)stack | ((uint64_t)(driver != 0) << 32);
}
/* Turns the entries of m whose key has `prefix` in bits 40.. (prefix = ~0 for all) into a
 * sorted list. -1 when out of memory. */
int mt_stack_list_from_map(const mt_u64map *m, uint64_t prefix, mt_stack_list *out);
/* The `top` largest entries of m (mt_stack_list_from_map's order, all prefixes; entries whose
 * count b is 0 are skipped) into out, in O(n log top); what is left out added to *rest_bytes,
 * *rest_count, *rest_stacks. -1 on OOM. */
int mt_stack_list_top_from_map(const mt_u64map *m, size_t top, mt_stack_list *out,
                               uint64_t *rest_bytes, uint64_t *rest_count, uint64_t *rest_stacks);
/* The same for every prefix at once, in one walk: lists[k] gets the entries with prefix k
 * (k < n; entries with a larger prefix are left out). -1 when out of memory. */
int mt_stack_lists_by_prefix(const mt_u64map *m, mt_stack_list *lists, size_t n);

/* ---- frame names (frame_names.c) ------------------------------------------------------------ */
/* The short name of a demangled C++ function (see frame_names.c) into out (always terminated;
 * cut at cap). Returns its length. */
size_t mt_cxx_short_name(const char *in, char *out, size_t cap);

typedef enum mt_frame_role {
    MT_ROLE_PLAIN = 0,
    MT_ROLE_ATEN = 1,          /* at::_ops::<op>::call -> "aten::<op>" */
    MT_ROLE_AUTOGRAD_NODE = 2, /* torch::autograd::generated::<Node>::apply -> "<Node>" */
    MT_ROLE_LIBRARY = 3,       /* cuBLAS, cuDNN, NCCL */
    MT_ROLE_ALLOCATOR = 4,     /* an allocator that caches: PyTorch's, XLA's, CuPy's pool */
} mt_frame_role;

/* What native frame name fn (a demangled function, or "libfoo.so+0x12") is to a user; the user's
 * name for it in user (empty for MT_ROLE_PLAIN). */
mt_frame_role mt_frame_role_of(const char *fn, char *user, size_t cap);
/* The owner named by a native frame name (a static string), or NULL; *is_allocator set. */
const char *mt_owner_of_name(const char *fn, int *is_allocator);

/* Per-mt_frames caches of frame_names.c: roles of names, first user frames and owners per leaf. */
typedef struct mt_view_cache mt_view_cache;
void mt_view_cache_free(mt_view_cache *v);
void mt_view_cache_forget(mt_view_cache *v); /* names were rebuilt: per-leaf answers are stale */
/* f's view cache (NULL until frame_names.c makes it), after bringing f's indexes up to date. */
mt_view_cache **mt_frames_view_cache(mt_frames *f);
/* Who holds lifetime l if it is still live at the end (see mt_holder_kind); *holder is a static
 * string or owned by f. */
mt_holder_kind mt_frames_holder(mt_frames *f, const mt_lifetime *l, const char **holder);
/* A hash of the names (and kinds) of every frame of stack `leaf` in `style`, root first: two
 * calls give the same value when the names are the same (0: out of memory). */
uint64_t mt_frames_path_hash(mt_frames *f, uint32_t leaf, mt_name_style style);
/* Nodes, modules and symbols visited again because records came after names were built: what
 * naming while reading costs on top of naming once at the end (bounded by the analysis). */
uint64_t mt_frames_work(const mt_frames *f);
/* mt_frames_path for MT_FRAMES_USER. */
size_t mt_frames_user_path(mt_frames *f, uint32_t leaf, mt_name_style style, const char **out,
                           uint8_t *flags, size_t cap);

/* ---- categories (categories.c) ---------------------------------------------------------------- */
/* The category of a new lifetime l (MT_CAT_NONE unless a tensor), from its stack (cached). */
unsigned mt_categorize(mt_categorizer *c, const mt_lifetime *l);
/* Called for each tensor event before it is applied (an allocation: its lifetime, categorized; a
 * free: NULL): when it ends the backward pass or an optimizer step, returns the phase ended
 * (MT_PHASE_*), else MT_PHASE_NONE. The caller then promotes the live tensors of that phase's
 * temporary category (mt_categorizer_promote). */
int mt_categorizer_phase(mt_categorizer *c, const mt_lifetime *alloc, uint32_t tid);
/* The category live tensor l takes when `phase` ends (its own when it stays). */
unsigned mt_categorizer_promote(mt_categorizer *c, int phase, const mt_lifetime *l);
/* Forgets the phase a replay was in (a new replay starts). */
void mt_categorizer_restart(mt_categorizer *c);
/* Categorizing while the trace is still being read (pass 1, analyze.c), when a stack's names may
 * still change (a record that names one of its frames comes later): from now on each stack's
 * names are remembered (a hash of the names the category was made from, mt_frames_path_hash) until
 * mt_categorizer_check. */
void mt_categorizer_watch(mt_categorizer *c);
/* Stops naming: every stack not yet categorized is MT_CAT_OTHER and the check fails (naming while
 * reading has cost too much; the categories come from a replay instead). */
void mt_categorizer_blind(mt_categorizer *c);
/* 1 when every stack categorized since mt_categorizer_watch has the names now that its category
 * was made from, so each category and the optimizer
 * found are what a categorizer made now would give; 0 when not (or blind, or memory ran out).
 * Stops watching. */
int mt_categorizer_check(mt_categorizer *c);
/* Forgets every stack's category, the optimizer found and the phase: as new, rules kept. */
void mt_categorizer_forget(mt_categorizer *c);
/* Phase ends (backward passes and optimizer steps) the tracker has applied so far. */
uint32_t mt_tracker_phase_ends(const mt_tracker *t);
/* The category lifetime l had right after the phase end numbered phase_ends (it may have been
 * promoted at a later one). */
unsigned mt_category_at(const mt_lifetime *l, uint32_t phase_ends);

/* ---- reconciliation (breakdown.c) --------------------------------------------------------------- */
/* b is filled from usage slot u (a GPU device) at time_rel (since start) and from the live
 * lifetimes given to mt_breakdown_add (those of other devices are passed over); mt_breakdown_end
 * finishes it. -1 when out of memory (the owner list is then short). */
typedef struct mt_breakdown_acc {
    mt_breakdown *b; /* NULL: not begun, or ended */
    mt_frames *f;
    int32_t device;
    int tensors;                  /* the device has TENSOR blocks (record --tensors) */
    uint64_t pool_reserved, tensor_bytes; /* of u at the moment */
    mt_u64map owners; /* owner name pointer -> a: bytes, b: count */
} mt_breakdown_acc;
void mt_breakdown_begin(mt_breakdown_acc *acc, mt_breakdown *b, mt_frames *f, const mt_usage *u,
                        uint64_t time_rel);
void mt_breakdown_add(mt_breakdown_acc *acc, const mt_lifetime *l);
int mt_breakdown_end(mt_breakdown_acc *acc);
/* The bytes of usage slot u that NVML can see: every live device allocation counted in in_use
 * (driver-internal included), with the async allocations of a pool replaced by the pool's
 * reservation when it is larger. Equal to a breakdown's reserved + other + driver bytes. */
static inline uint64_t mt_breakdown_visible(const mt_usage *u)
{
    uint64_t async = u->by_kind[MT_KIND_ASYNC];
    if (!u->has_pool_info || u->pool_reserved <= async) return u->in_use;
    return u->in_use + (u->pool_reserved - async);
}
/* Pairs b's moment with an NVML sample consistent with it (see breakdown.c); then the remainder.
 * visible: mt_breakdown_visible at the moment, driver: its driver-internal bytes. None: the total
 * is unknown, and b says why. */
void mt_breakdown_set_process(mt_breakdown *b, const mt_sample_point *s, size_t n, uint64_t visible,
                              uint64_t driver);
/* Reads one INFO note of the recorder into c if it is one of its cost notes (recording_cost.c). */
void mt_cost_read_note(mt_recording_cost *c, const char *text);
/* 1 when text is the recorder's running totals (MT_COST_NOTE_RUNNING, trace.h), read whole into
 * c's parts (until_ns left alone); 0, and c untouched, for any other text. */
int mt_cost_read_running(mt_recording_cost *c, const char *text);
#endif
