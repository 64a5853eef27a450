/* Open-addressing hash map uint64 -> uint32 with linear probing: the symbolizer's sets of
 * instruction pointers (which ips need a symbol, which already have one). Never shrinks. */
#include <stdlib.h>

#include "symbols_internal.h"

static size_t slot_of(uint64_t key, size_t cap)
{
    /* Fibonacci hashing spreads return addresses, whose low bits cluster, over the table. */
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

void mt_u64_map_init(mt_u64_map *m)
{
    m->keys = NULL;
    m->vals = NULL;
    m->used = NULL;
    m->cap = m->count = 0;
}

static int grow(mt_u64_map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    uint64_t *keys = malloc(ncap * sizeof *keys);
    uint32_t *vals = malloc(ncap * sizeof *vals);
    uint8_t *used = calloc(ncap, 1);
    if (!keys || !vals || !used) {
        free(keys);
        free(vals);
        free(used);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        size_t s = slot_of(m->keys[i], ncap);
        while (used[s]) s = (s + 1) & (ncap - 1);
        used[s] = 1;
        keys[s] = m->keys[i];
        vals[s] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    free(m->used);
    m->keys = keys;
    m->vals = vals;
    m->used = used;
    m->cap = ncap;
    return 0;
}

uint32_t *mt_u64_map_get(const mt_u64_map *m, uint64_t key)
{
    if (!m->cap) return NULL;
    for (size_t s = slot_of(key, m->cap);; s = (s + 1) & (m->cap - 1)) {
        if (!m->used[s]) return NULL;
        if (m->keys[s] == key) return &m->vals[s];
    }
}

uint32_t *mt_u64_map_put(mt_u64_map *m, uint64_t key, uint32_t init, int *inserted)
{
    uint32_t *v = mt_u64_map_get(m, key);
    if (inserted) *inserted = v == NULL;
    if (v) return v;
    if ((m->count + 1) * 4 > m->cap * 3 && grow(m) != 0) return NULL; /* keep load <= 75% */
    size_t s = slot_of(key, m->cap);
    while (m->used[s]) s = (s + 1) & (m->cap - 1);
    m->used[s] = 1;
    m->keys[s] = key;
    m->vals[s] = init;
    m->count++;
    return &m->vals[s];
}

void mt_u64_map_free(mt_u64_map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    mt_u64_map_init(m);
}
