/* The live set: every allocation alive right now, keyed by (device, family, address).
 * Open addressing with linear probing and backward-shift deletion (no tombstones), so a table
 * that sees millions of alloc/free pairs stays as small as the live set itself. Load <= 1/2. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static inline size_t slot_of(const mt_live_table *t, int32_t device, uint8_t family,
                             uint64_t addr)
{
    uint64_t h = mt_mix64(addr ^ ((uint64_t)(uint32_t)device << 40) ^ ((uint64_t)family << 58));
    return h & (t->cap - 1);
}

static inline int same(const mt_lifetime *s, int32_t device, uint8_t family, uint64_t addr)
{
    return s->address == addr && s->family == family && s->device == device;
}

mt_lifetime *mt_live_find(const mt_live_table *t, int32_t device, uint8_t family, uint64_t addr)
{
    if (!t->cap) return NULL;
    size_t j = slot_of(t, device, family, addr);
    while (t->slots[j].family != MT_LIVE_EMPTY) {
        if (same(&t->slots[j], device, family, addr)) return &t->slots[j];
        j = (j + 1) & (t->cap - 1);
    }
    return NULL;
}

static void place(mt_live_table *t, const mt_lifetime *l)
{
    size_t j = slot_of(t, l->device, l->family, l->address);
    while (t->slots[j].family != MT_LIVE_EMPTY) j = (j + 1) & (t->cap - 1);
    t->slots[j] = *l;
}

static int resize(mt_live_table *t, size_t ncap)
{
    mt_lifetime *old = t->slots;
    size_t ocap = t->cap;
    mt_lifetime *ns = malloc(ncap * sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < ncap; i++) ns[i].family = MT_LIVE_EMPTY;
    t->slots = ns;
    t->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].family != MT_LIVE_EMPTY) place(t, &old[i]);
    free(old);
    return 0;
}

int mt_live_insert(mt_live_table *t, const mt_lifetime *l)
{
    if ((t->len + 1) * 2 > t->cap && resize(t, t->cap ? t->cap * 2 : 1024) < 0) return -1;
    place(t, l);
    t->len++;
    return 0;
}

void mt_live_remove(mt_live_table *t, mt_lifetime *p)
{
    size_t mask = t->cap - 1, hole = (size_t)(p - t->slots), j = hole;
    /* Backward shift: move later members of the probe run into the hole when their home slot
     * does not lie (cyclically) between the hole and their current position. */
    for (;;) {
        j = (j + 1) & mask;
        mt_lifetime *s = &t->slots[j];
        if (s->family == MT_LIVE_EMPTY) break;
        size_t home = slot_of(t, s->device, s->family, s->address);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->slots[hole] = *s;
            hole = j;
        }
    }
    t->slots[hole].family = MT_LIVE_EMPTY;
    t->len--;
    /* Shrink after a big burst so memory follows the live set back down. */
    if (t->cap > 1024 && t->len * 8 < t->cap) resize(t, t->cap / 2);
}

void mt_live_destroy(mt_live_table *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}
