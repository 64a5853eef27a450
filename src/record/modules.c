/* modules.c — the module map: which ELF objects are loaded where, reported once each.
 *
 * The recorder stores raw return addresses; symbolization happens later, offline, from the
 * object files. For that it needs, per object: its path, its load bias (ip - bias = file
 * address), its address range (to find the object of an ip) and its GNU build id (to check that
 * the file on disk is the one that ran). mt_modules_refresh runs on the writer thread at every
 * drain, so the common case — nothing loaded since last time — must be cheap: glibc's
 * dlpi_adds/dlpi_subs counters tell us that from the first callback, and the walk stops there.
 *
 * An object is identified by (name, load bias): a library dlclose()d and loaded again at another
 * address is a new module with a new id; the same one at the same place is not reported twice.
 *
 * New objects are copied out during the dl_iterate_phdr walk (which holds the loader lock) and
 * handed to the caller's callback only after it, so the callback can take locks and allocate.
 */
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "memtrace/record.h"

#define MT_BUILD_ID_MAX 64 /* sha1 ids are 20 bytes; md5/uuid 16; nothing sane exceeds 64 */

typedef struct seen_entry {
    uint64_t hash; /* of (name, bias); 0 = empty slot */
    uint64_t bias;
    char *name; /* dlpi_name as given ("" for the main program) */
} seen_entry;

/* A module found during the walk, reported after it. */
typedef struct pending {
    struct pending *next;
    uint64_t hash, bias, start, end;
    char *name;
    const char *path_override; /* "[vdso]"; NULL: name (or /proc/self/exe when main) */
    int is_main;
    uint32_t build_id_len;
    uint8_t build_id[MT_BUILD_ID_MAX];
} pending;

struct mt_modules {
    pthread_mutex_t lock; /* one refresh at a time; guards everything below */
    seen_entry *seen;     /* open addressing, linear probing, grown x2 at 1/2 load */
    uint32_t seen_mask, seen_count;
    uint32_t next_id;
    int walked; /* a complete walk happened: adds/subs below mean something */
    unsigned long long adds, subs;
};

/* State of one dl_iterate_phdr walk. */
typedef struct walk_ctx {
    mt_modules *mods;
    pending *head, **tail;
    int index;  /* objects visited so far in this walk */
    int failed; /* out of memory: the next refresh must walk again */
    uintptr_t vdso;
} walk_ctx;

static uint64_t key_hash(const char *name, uint64_t bias)
{
    uint64_t h = 0xcbf29ce484222325ull ^ bias; /* FNV-1a over the name, seeded with the bias */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    h ^= h >> 29;
    return h ? h : 1;
}

static seen_entry *seen_find(mt_modules *m, uint64_t hash, const char *name, uint64_t bias)
{
    for (uint32_t i = (uint32_t)hash & m->seen_mask;; i = (i + 1) & m->seen_mask) {
        seen_entry *e = &m->seen[i];
        if (!e->hash) return e; /* the empty slot where it would go */
        if (e->hash == hash && e->bias == bias && strcmp(e->name, name) == 0) return e;
    }
}

static int seen_add(mt_modules *m, uint64_t hash, char *name, uint64_t bias)
{
    if ((m->seen_count + 1) * 2 > m->seen_mask + 1) {
        uint32_t cap = (m->seen_mask + 1) * 2;
        seen_entry *n = calloc(cap, sizeof *n);
        if (!n) return -1;
        for (uint32_t i = 0; i <= m->seen_mask; i++) {
            if (!m->seen[i].hash) continue;
            uint32_t j = (uint32_t)m->seen[i].hash & (cap - 1);
            while (n[j].hash)
                j = (j + 1) & (cap - 1);
            n[j] = m->seen[i];
        }
        free(m->seen);
        m->seen = n;
        m->seen_mask = cap - 1;
    }
    seen_entry *e = seen_find(m, hash, name, bias);
    *e = (seen_entry){hash, bias, name};
    m->seen_count++;
    return 0;
}

/* Copies the NT_GNU_BUILD_ID note of a loaded object, reading only notes that lie inside one of
 * its PT_LOAD file images (so a bogus header cannot make us touch unmapped memory).
 *
 * A note (Elf64_Nhdr), fields 4 bytes each, name and desc padded to the segment's alignment:
 *   +---------+---------+--------+-------------+---------------+
 *   | namesz  | descsz  | type=3 | "GNU\0"     | id bytes      |
 *   +---------+---------+--------+-------------+---------------+  */
static uint32_t find_build_id(const struct dl_phdr_info *info, uint8_t *out)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *note = &info->dlpi_phdr[i];
        if (note->p_type != PT_NOTE) continue;
        uintptr_t lo = info->dlpi_addr + note->p_vaddr, hi = lo + note->p_filesz;
        int mapped = 0;
        for (int j = 0; j < info->dlpi_phnum && !mapped; j++) {
            const ElfW(Phdr) *load = &info->dlpi_phdr[j];
            uintptr_t s = info->dlpi_addr + load->p_vaddr;
            mapped = load->p_type == PT_LOAD && lo >= s && hi <= s + load->p_filesz;
        }
        if (!mapped) continue;
        size_t align = note->p_align == 8 ? 8 : 4;
        uintptr_t p = lo;
        while (hi - p >= sizeof(ElfW(Nhdr))) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t name_pad = (nh->n_namesz + align - 1) & ~(align - 1);
            size_t desc_pad = (nh->n_descsz + align - 1) & ~(align - 1);
            uintptr_t name = p + sizeof *nh, desc = name + name_pad;
            if (name_pad > hi - name || desc_pad > hi - desc) break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
                memcmp((const void *)name, "GNU", 4) == 0 && nh->n_descsz > 0 &&
                nh->n_descsz <= MT_BUILD_ID_MAX) {
                memcpy(out, (const void *)desc, nh->n_descsz);
                return nh->n_descsz;
            }
            p = desc + desc_pad;
        }
    }
    return 0;
}

static int on_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    walk_ctx *w = arg;
    mt_modules *m = w->mods;
    int first = w->index++ == 0;
    if (first && size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        if (m->walked && info->dlpi_adds == m->adds && info->dlpi_subs == m->subs)
            return 1; /* nothing loaded or unloaded since the last walk: stop here */
        m->adds = info->dlpi_adds;
        m->subs = info->dlpi_subs;
    }
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    uint64_t hash = key_hash(name, info->dlpi_addr);
    if (seen_find(m, hash, name, info->dlpi_addr)->hash) return 0;
    /* A module of the same key already queued in this walk cannot happen: names are unique. */

    uint64_t start = UINT64_MAX, end = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uint64_t s = info->dlpi_addr + ph->p_vaddr;
        if (s < start) start = s;
        if (s + ph->p_memsz > end) end = s + ph->p_memsz;
    }
    if (end == 0) return 0; /* nothing mapped: nothing an ip can point into */

    pending *p = calloc(1, sizeof *p);
    char *copy = p ? strdup(name) : NULL;
    if (!copy) {
        free(p);
        w->failed = 1;
        return 0;
    }
    p->hash = hash;
    p->bias = info->dlpi_addr;
    p->start = start;
    p->end = end;
    p->name = copy;
    p->is_main = first && name[0] == '\0';
    if (w->vdso && start == w->vdso) p->path_override = "[vdso]";
    p->build_id_len = find_build_id(info, p->build_id);
    *w->tail = p;
    w->tail = &p->next;
    return 0;
}

mt_modules *mt_modules_new(void)
{
    mt_modules *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->seen = calloc(64, sizeof *m->seen);
    if (!m->seen) {
        free(m);
        return NULL;
    }
    m->seen_mask = 63;
    m->next_id = 1;
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

int mt_modules_refresh(mt_modules *mods, mt_module_fn fn, void *ctx)
{
    if (!mods) return 0;
    pthread_mutex_lock(&mods->lock);
    walk_ctx w = {.mods = mods, .vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR)};
    w.tail = &w.head;
    dl_iterate_phdr(on_object, &w);
    mods->walked = !w.failed;

    int reported = 0;
    char exe[4096];
    for (pending *p = w.head, *next; p; p = next) {
        next = p->next;
        const char *path = p->path_override ? p->path_override : p->name;
        if (p->is_main) {
            ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[len > 0 ? len : 0] = '\0';
            path = exe;
        } else if (!path[0]) {
            path = "[unknown]";
        }
        if (seen_add(mods, p->hash, p->name, p->bias) == 0) {
            mt_module mod = {.id = mods->next_id++,
                             .bias = p->bias,
                             .start = p->start,
                             .end = p->end,
                             .path = path,
                             .build_id = p->build_id_len ? p->build_id : NULL,
                             .build_id_len = p->build_id_len};
            if (fn) fn(ctx, &mod);
            reported++;
        } else {
            free(p->name); /* out of memory: retried by the next refresh's full walk */
            mods->walked = 0;
        }
        free(p);
    }
    pthread_mutex_unlock(&mods->lock);
    return reported;
}

void mt_modules_free(mt_modules *mods)
{
    if (!mods) return;
    for (uint32_t i = 0; i <= mods->seen_mask; i++)
        free(mods->seen[i].name);
    free(mods->seen);
    pthread_mutex_destroy(&mods->lock);
    free(mods);
}
