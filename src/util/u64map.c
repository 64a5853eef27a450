/* u64map.c — see u64map.h. */
#include "u64map.h"

#include <stdlib.h>
#include <string.h>

#include "hash.h"

static int grow(mt_u64map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    mt_u64map_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used) continue;
        size_t j = mt_mix64(m->slots[i].key) & (ncap - 1);
        while (ns[j].used) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

mt_u64map_slot *mt_u64map_find(const mt_u64map *m, uint64_t key)
{
    if (!m->cap) return NULL;
    size_t j = mt_mix64(key) & (m->cap - 1);
    while (m->slots[j].used) {
        if (m->slots[j].key == key) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

mt_u64map_slot *mt_u64map_upsert(mt_u64map *m, uint64_t key)
{
    if ((m->len + 1) * 2 > m->cap && grow(m) < 0) return NULL;
    size_t j = mt_mix64(key) & (m->cap - 1);
    while (m->slots[j].used) {
        if (m->slots[j].key == key) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (mt_u64map_slot){.key = key, .used = 1};
    m->len++;
    return &m->slots[j];
}

void mt_u64map_clear(mt_u64map *m)
{
    if (m->slots) memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->len = 0;
}

void mt_u64map_destroy(mt_u64map *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}
