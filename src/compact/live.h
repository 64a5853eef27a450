/* live.h — the live set: every allocation alive right now, keyed by (device, family, address).
 * Private to the tracker (tracker.c, tracker_core.h): its lookups, insertions and removals are
 * inlined into the tracker's event handling (a call each, three or four per event, were ~6% of the analysis
 * thread's instructions).
 *
 * Two arrays. The keys (address, family, device, and where the lifetime is) are a hash table
 * with open addressing, linear probing and backward-shift deletion (no tombstones), so a table
 * that sees millions of alloc/free pairs stays as small as the live set itself; load <= 1/2. The
 * lifetimes themselves (88 bytes each) sit in a second array, cap / 2 of them, and never move
 * while they live (a freed one's place is reused). A probe reads 16-byte keys, four to a cache
 * line, and a deletion shifts keys, not lifetimes: the lookups were a tenth of `report`'s time
 * when the table held the lifetimes themselves. The table remembers where its last lookup
 * ended: the insertion after a lookup that missed, and the removal of what a lookup found, take
 * that slot instead of probing again (the tracker looks up every key before it inserts or
 * removes it).
 *
 * The slot of every key, the probe order and the resizing are those of the table of lifetimes it
 * replaces, so the live set is visited (mt_tracker_foreach_live, mt_tracker_finish) in the same
 * order as before: the order the reports and exports list things in where they tie.
 */
#ifndef MT_COMPACT_LIVE_H
#define MT_COMPACT_LIVE_H

#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct mt_live_key {
    uint64_t address;
    uint32_t ix;    /* the lifetime's place in items; MT_LIVE_NONE marks an empty slot */
    uint8_t family;
    int16_t device; /* the lifetime's (-1..MT_MAX_DEVICE_ORDINAL): a probe and a deletion's shift
                       never read the lifetimes themselves (a cache miss each) */
} mt_live_key;

typedef struct mt_live_table {
    mt_live_key *keys;  /* cap slots */
    mt_lifetime *items; /* cap / 2 places; a lifetime stays at its place while it lives */
    uint32_t *spare;    /* places freed since the last resize (n_spare of them) */
    size_t cap, len, n_items, n_spare; /* n_items: places used since the last resize */
    /* Where the last lookup ended (the key's slot, or the empty slot that ended a miss), for the
     * insertion or removal that nearly always follows it: neither probes again. memo_ver is ver
     * at that lookup; ver counts the insertions, removals and resizes. */
    size_t memo_slot;
    uint64_t memo_hash, memo_ver, ver;
} mt_live_table;

#define MT_LIVE_NONE UINT32_MAX

/* The hash of a key: the table's probe starts at its low bits; the tracker's freed-key cache uses
 * the same value (one hash per event). */
static inline uint64_t mt_live_hash(int32_t device, uint8_t family, uint64_t addr)
{
    return mt_mix64(addr ^ ((uint64_t)(uint32_t)device << 40) ^ ((uint64_t)family << 58));
}


/* The slot where the probe for a key of hash h starts (cap > 0). */
static inline size_t home_of(const mt_live_table *t, uint64_t h)
{
    return h & (t->cap - 1);
}

/* The live lifetime with that key (h = mt_live_hash of it), or NULL. The pointer is valid until
 * the next insertion or removal. */
static inline mt_lifetime *mt_live_find_h(mt_live_table *t, uint64_t h, int32_t device,
                                          uint8_t family, uint64_t addr)
{
    if (!t->cap) return NULL;
    size_t mask = t->cap - 1;
    t->memo_hash = h;
    t->memo_ver = t->ver;
    for (size_t j = home_of(t, h);; j = (j + 1) & mask) {
        const mt_live_key *k = &t->keys[j];
        if (k->ix == MT_LIVE_NONE) {
            t->memo_slot = j; /* where an insertion of this key would go */
            return NULL;
        }
        if (k->address == addr && k->family == family && k->device == device) {
            t->memo_slot = j;
            return &t->items[k->ix];
        }
    }
}

/* Puts a key for items[ix] (key fields from the lifetime, h its hash) at its first free slot. */
static inline void place(mt_live_table *t, uint64_t h, const mt_lifetime *l, uint32_t ix)
{
    size_t mask = t->cap - 1, j = home_of(t, h);
    /* the lookup that found this key missing ended at that same slot, unless the table changed */
    if (t->memo_ver == t->ver && t->memo_hash == h && t->memo_slot < t->cap &&
        t->keys[t->memo_slot].ix == MT_LIVE_NONE)
        j = t->memo_slot;
    else
        while (t->keys[j].ix != MT_LIVE_NONE) j = (j + 1) & mask;
    t->keys[j] = (mt_live_key){.address = l->address, .ix = ix, .family = l->family,
                               .device = (int16_t)l->device};
}

/* A table of ncap slots holding the same lifetimes, keys placed in the old slot order (as the
 * table of lifetimes did), lifetimes packed in that order. */
static int resize(mt_live_table *t, size_t ncap)
{
    mt_live_key *nk = malloc(ncap * sizeof *nk);
    mt_lifetime *ni = malloc(ncap / 2 * sizeof *ni);
    uint32_t *ns = malloc(ncap / 2 * sizeof *ns);
    if (!nk || !ni || !ns) {
        free(nk);
        free(ni);
        free(ns);
        return -1;
    }
    for (size_t i = 0; i < ncap; i++) nk[i].ix = MT_LIVE_NONE;
    mt_live_key *ok = t->keys;
    mt_lifetime *oi = t->items;
    size_t ocap = t->cap;
    t->keys = nk;
    t->items = ni;
    t->cap = ncap;
    t->ver++; /* no memo of the old table holds */
    uint32_t n = 0;
    for (size_t i = 0; i < ocap; i++)
        if (ok[i].ix != MT_LIVE_NONE) {
            ni[n] = oi[ok[i].ix];
            place(t, mt_live_hash(ok[i].device, ok[i].family, ok[i].address), &ni[n], n);
            n++;
        }
    free(ok);
    free(oi);
    free(t->spare);
    t->spare = ns;
    t->n_spare = 0;
    t->n_items = n;
    return 0;
}

/* Inserts a copy of l (h: its key's hash; the key must not be present; l->device in
 * -1..MT_MAX_DEVICE_ORDINAL). -1 when out of memory. */
static inline int mt_live_insert_h(mt_live_table *t, uint64_t h, const mt_lifetime *l)
{
    if ((t->len + 1) * 2 > t->cap && resize(t, t->cap ? t->cap * 2 : 1024) < 0) return -1;
    /* len < cap / 2 here, so a place is free: a spare one, or one never used since the resize */
    uint32_t ix = t->n_spare ? t->spare[--t->n_spare] : (uint32_t)t->n_items++;
    t->items[ix] = *l;
    place(t, h, l, ix);
    t->len++;
    t->ver++;
    return 0;
}

/* Removes the lifetime p points to (from mt_live_find). */
static inline __attribute__((always_inline)) void mt_live_remove(mt_live_table *t,
                                                                 mt_lifetime *p)
{
    size_t mask = t->cap - 1;
    uint32_t ix = (uint32_t)(p - t->items);
    size_t hole = t->memo_slot; /* p was nearly always found by the last lookup */
    if (hole >= t->cap || t->keys[hole].ix != ix) {
        hole = home_of(t, mt_live_hash(p->device, p->family, p->address));
        while (t->keys[hole].ix != ix) hole = (hole + 1) & mask;
    }
    /* Backward shift: move later keys of the probe run into the hole when their home slot does
     * not lie (cyclically) between the hole and their current position. */
    for (size_t j = hole;;) {
        j = (j + 1) & mask;
        const mt_live_key *k = &t->keys[j];
        if (k->ix == MT_LIVE_NONE) break;
        size_t home = home_of(t, mt_live_hash(k->device, k->family, k->address));
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->keys[hole] = *k;
            hole = j;
        }
    }
    t->keys[hole].ix = MT_LIVE_NONE;
    t->spare[t->n_spare++] = ix;
    t->len--;
    t->ver++;
    /* Shrink after a big burst so memory follows the live set back down. */
    if (t->cap > 1024 && t->len * 8 < t->cap) resize(t, t->cap / 2);
}

/* Calls fn on every live lifetime, in slot order (fn must not insert or remove). */
static inline void mt_live_foreach(const mt_live_table *t,
                                   void (*fn)(void *ctx, mt_lifetime *l), void *ctx)
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i].ix != MT_LIVE_NONE) fn(ctx, &t->items[t->keys[i].ix]);
}

static inline void mt_live_destroy(mt_live_table *t)
{
    free(t->keys);
    free(t->items);
    free(t->spare);
    memset(t, 0, sizeof *t);
}

/* The live lifetime with that key, or NULL (valid until the next insertion or removal). */
static inline mt_lifetime *mt_live_find(mt_live_table *t, int32_t device, uint8_t family,
                                        uint64_t addr)
{
    return mt_live_find_h(t, mt_live_hash(device, family, addr), device, family, addr);
}

#endif
