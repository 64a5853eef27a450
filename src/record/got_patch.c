/* got_patch.c — send one shared object's calls of an imported function to a stand-in.
 *
 * Why: in tensor mode every tensor is a cudaMallocAsync / cudaFreeAsync pair, ~80 per training
 * step, and through CUPTI each pair costs four callbacks (driver API entry and exit, twice), most
 * of it CUPTI's own dispatch (scripts/api-cost.sh). Calling our code directly from the program's
 * call instead costs one ordinary function call.
 *
 * How: a call from one shared object to a function defined in another goes through a slot of the
 * caller's global offset table (GOT). `call foo@plt` jumps through foo's PLT slot (relocation
 * R_X86_64_JUMP_SLOT); code built with -fno-plt, and `&foo`, read foo's GLOB_DAT slot. The
 * object's relocation tables (DT_JMPREL, DT_RELA) say which slot holds which symbol. Writing the
 * stand-in's address into those slots redirects that object's calls, and only its calls: the
 * function itself, and every other object, stay as they were. The stand-in calls the definition
 * the slots held.
 *
 * Details that bite:
 *   - Lazy binding: a JUMP_SLOT not called yet still points back into the caller's own PLT. The
 *     definition is then looked up the way the loader would: the global scope first
 *     (dlsym(RTLD_DEFAULT)), then the object's own dependencies (dlsym on its handle).
 *   - Full RELRO (-z now -z relro): the GOT is read-only once loaded. The page is made writable
 *     for the one store and read-only again; glibc protected [page_down(start), page_down(end))
 *     of PT_GNU_RELRO, so a slot outside that is writable as it is.
 *   - One definition per name: the stand-in calls one original. An object whose slot bound
 *     another definition (a private copy of the library) is left wholly alone and named to the
 *     caller, who decides what to do about calls it cannot see.
 *   - dl_iterate_phdr holds the loader's lock: objects are copied out during the walk and patched
 *     after it (dlopen/dlsym inside the walk could deadlock).
 *   - Only undefined (imported) symbols count: an object's calls to its own exported functions
 *     are its business.
 *
 * x86-64 only (RELA relocations, R_X86_64_* types); elsewhere mt_got_patch_new patches nothing.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memtrace/record.h"

/* One loaded object, as copied out of the dl_iterate_phdr walk. */
typedef struct object {
    char *name;            /* dlpi_name ("" for the main program) */
    uintptr_t base;        /* load bias */
    uintptr_t lo, hi;      /* lowest and highest address of its PT_LOAD segments */
    const ElfW(Dyn) *dyn;  /* its dynamic section, NULL when it has none */
    uintptr_t relro_lo, relro_hi; /* what glibc made read-only after relocation; 0, 0 = nothing */
} object;

/* A slot we wrote, so that it can be put back. */
typedef struct patched_slot {
    void **slot;
    void *old;       /* the definition it held (bound), put back by mt_got_unpatch */
    uintptr_t base;  /* of its object, to forget slots of objects that are gone */
    uintptr_t relro_lo, relro_hi;
} patched_slot;

struct mt_got_patcher {
    pthread_mutex_t lock; /* one patch / unpatch at a time; guards everything below */
    mt_got_hook *hooks;
    int nhooks;
    uintptr_t *seen; /* load biases of the objects already examined */
    size_t nseen;
    patched_slot *slots;
    size_t nslots, slots_cap;
    unsigned long long adds, subs; /* dl_iterate_phdr counters at the last walk */
    int walked;
};

typedef struct walk_state {
    object *objs;
    size_t n, cap;
    unsigned long long adds, subs;
    int failed;
} walk_state;

/* 1 when an object loaded at `base` was seen in walk w. */
static int still_loaded(const walk_state *w, uintptr_t base)
{
    for (size_t j = 0; j < w->n; j++)
        if (w->objs[j].base == base) return 1;
    return 0;
}

static int collect(struct dl_phdr_info *info, size_t size, void *data)
{
    walk_state *w = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        w->adds = info->dlpi_adds;
        w->subs = info->dlpi_subs;
    }
    object o = {.base = info->dlpi_addr, .lo = UINTPTR_MAX};
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD) {
            if (start < o.lo) o.lo = start;
            if (start + ph->p_memsz > o.hi) o.hi = start + ph->p_memsz;
        } else if (ph->p_type == PT_DYNAMIC) {
            o.dyn = (const ElfW(Dyn) *)start;
        } else if (ph->p_type == PT_GNU_RELRO) {
            o.relro_lo = start;
            o.relro_hi = start + ph->p_memsz;
        }
    }
    if (!o.dyn) return 0;
    if (w->n == w->cap) {
        size_t ncap = w->cap ? w->cap * 2 : 64;
        object *no = realloc(w->objs, ncap * sizeof *no);
        if (!no) {
            w->failed = 1;
            return 1;
        }
        w->objs = no, w->cap = ncap;
    }
    o.name = strdup(info->dlpi_name ? info->dlpi_name : "");
    if (!o.name) {
        w->failed = 1;
        return 1;
    }
    w->objs[w->n++] = o;
    return 0;
}

/* glibc stores most d_ptr values of a loaded object already relocated; the vDSO's and those of a
 * few odd objects are not. An address below the load bias cannot be relocated yet. */
static uintptr_t dyn_addr(const object *o, ElfW(Addr) v)
{
    return v < o->base ? o->base + v : v;
}

/* Its relocation tables: the PLT's (DT_JMPREL) and the rest (DT_RELA). */
typedef struct dyn_info {
    const ElfW(Sym) *symtab;
    const char *strtab;
    const ElfW(Rela) *rel[2];
    size_t nrel[2];
} dyn_info;

static int read_dynamic(const object *o, dyn_info *d)
{
    memset(d, 0, sizeof *d);
    size_t plt_bytes = 0, rela_bytes = 0, rela_ent = sizeof(ElfW(Rela));
    int plt_is_rela = 1;
    for (const ElfW(Dyn) *e = o->dyn; e->d_tag != DT_NULL; e++) {
        switch (e->d_tag) {
        case DT_SYMTAB: d->symtab = (const ElfW(Sym) *)dyn_addr(o, e->d_un.d_ptr); break;
        case DT_STRTAB: d->strtab = (const char *)dyn_addr(o, e->d_un.d_ptr); break;
        case DT_JMPREL: d->rel[0] = (const ElfW(Rela) *)dyn_addr(o, e->d_un.d_ptr); break;
        case DT_PLTRELSZ: plt_bytes = e->d_un.d_val; break;
        case DT_PLTREL: plt_is_rela = e->d_un.d_val == DT_RELA; break;
        case DT_RELA: d->rel[1] = (const ElfW(Rela) *)dyn_addr(o, e->d_un.d_ptr); break;
        case DT_RELASZ: rela_bytes = e->d_un.d_val; break;
        case DT_RELAENT: rela_ent = e->d_un.d_val; break;
        default: break;
        }
    }
    if (!d->symtab || !d->strtab || !plt_is_rela || rela_ent != sizeof(ElfW(Rela))) return -1;
    d->nrel[0] = d->rel[0] ? plt_bytes / sizeof(ElfW(Rela)) : 0;
    d->nrel[1] = d->rel[1] ? rela_bytes / sizeof(ElfW(Rela)) : 0;
    return 0;
}

/* The hook index named by relocation r of an import slot, or -1. */
static int hook_of(const mt_got_patcher *p, const dyn_info *d, const ElfW(Rela) *r)
{
#if defined(__x86_64__)
    unsigned type = ELF64_R_TYPE(r->r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) return -1;
    const ElfW(Sym) *sym = &d->symtab[ELF64_R_SYM(r->r_info)];
    if (sym->st_shndx != SHN_UNDEF || sym->st_name == 0) return -1;
    const char *name = d->strtab + sym->st_name;
    for (int h = 0; h < p->nhooks; h++)
        if (name[0] == p->hooks[h].name[0] && strcmp(name, p->hooks[h].name) == 0) return h;
#else
    (void)p, (void)d, (void)r;
#endif
    return -1;
}

/* What the slot leads to: its value once bound; else the definition the loader would bind. */
static void *bound_target(const object *o, void *const *slot, const char *name)
{
    uintptr_t v = (uintptr_t)*slot;
    if (v && !(v >= o->lo && v < o->hi)) return (void *)v; /* bound, to another object */
    void *f = dlsym(RTLD_DEFAULT, name);
    if (f) return f;
    void *h = dlopen(o->name[0] ? o->name : NULL, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return NULL;
    f = dlsym(h, name);
    dlclose(h);
    return f;
}

static int store_slot(void **slot, void *value, uintptr_t relro_lo, uintptr_t relro_hi)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)slot, pg = a & ~(page - 1);
    int ro = relro_hi > relro_lo && a >= (relro_lo & ~(page - 1)) && a < (relro_hi & ~(page - 1));
    if (ro && mprotect((void *)pg, page, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE); /* callers on other threads see old or new */
    if (ro) mprotect((void *)pg, page, PROT_READ);
    return 0;
}

static int add_slot(mt_got_patcher *p, patched_slot s)
{
    if (p->nslots == p->slots_cap) {
        size_t ncap = p->slots_cap ? p->slots_cap * 2 : 16;
        patched_slot *ns = realloc(p->slots, ncap * sizeof *ns);
        if (!ns) return -1;
        p->slots = ns, p->slots_cap = ncap;
    }
    p->slots[p->nslots++] = s;
    return 0;
}

static int seen_before(const mt_got_patcher *p, uintptr_t base)
{
    for (size_t i = 0; i < p->nseen; i++)
        if (p->seen[i] == base) return 1;
    return 0;
}

/* The next of o's relocations, from *pos on (both tables in turn), that imports a hooked name
 * into a slot not already ours (a reloaded object's): its hook, with *slot set and *pos past it;
 * -1 when none is left. */
static int next_hooked_slot(const mt_got_patcher *p, const object *o, const dyn_info *d,
                            size_t *pos, void ***slot)
{
    for (; *pos < d->nrel[0] + d->nrel[1]; ++*pos) {
        int t = *pos >= d->nrel[0];
        const ElfW(Rela) *r = &d->rel[t][*pos - (t ? d->nrel[0] : 0)];
        int h = hook_of(p, d, r);
        if (h < 0) continue;
        *slot = (void **)(o->base + r->r_offset);
        if (**slot == p->hooks[h].hook) continue;
        ++*pos;
        return h;
    }
    return -1;
}

/* Examines one object: all its hooked imports must lead to the hooks' originals (or set them,
 * the first time); then every such slot is redirected. Returns slots patched, or -1 on conflict. */
static int patch_object(mt_got_patcher *p, const object *o)
{
    dyn_info d;
    if (read_dynamic(o, &d) != 0) return 0;
    void *first[64] = {0}; /* definitions this object binds, per hook (nhooks <= 64) */
    int found = 0, h;
    void **slot;
    for (size_t pos = 0; (h = next_hooked_slot(p, o, &d, &pos, &slot)) >= 0;) {
        void *f = bound_target(o, slot, p->hooks[h].name);
        void *want = p->hooks[h].original ? p->hooks[h].original : first[h];
        if (!f || (want && f != want)) return -1;
        first[h] = f;
        found = 1;
    }
    if (!found) return 0;
    for (int k = 0; k < p->nhooks; k++)
        if (first[k] && !p->hooks[k].original)
            __atomic_store_n(&p->hooks[k].original, first[k], __ATOMIC_RELEASE);
    int n = 0;
    for (size_t pos = 0; (h = next_hooked_slot(p, o, &d, &pos, &slot)) >= 0;) {
        patched_slot s = {slot, p->hooks[h].original, o->base, o->relro_lo, o->relro_hi};
        if (add_slot(p, s) != 0) break; /* out of memory: the rest stay as they are */
        if (store_slot(slot, p->hooks[h].hook, o->relro_lo, o->relro_hi) != 0) {
            p->nslots--;
            continue;
        }
        n++;
    }
    return n;
}

mt_got_patcher *mt_got_patcher_new(mt_got_hook *hooks, int n)
{
    if (n <= 0 || n > 64) return NULL;
    mt_got_patcher *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->hooks = hooks;
    p->nhooks = n;
    return p;
}

int mt_got_patch_new(mt_got_patcher *p, char *conflict, size_t len)
{
    if (conflict && len) conflict[0] = 0;
    if (!p) return 0;
    pthread_mutex_lock(&p->lock);
    walk_state w = {0};
    dl_iterate_phdr(collect, &w);
    int total = 0;
    if (!w.failed && !(p->walked && w.adds == p->adds && w.subs == p->subs)) {
        /* Forget what belongs to objects that are gone: their memory may hold something else. */
        size_t keep = 0;
        for (size_t i = 0; i < p->nslots; i++)
            if (still_loaded(&w, p->slots[i].base)) p->slots[keep++] = p->slots[i];
        p->nslots = keep;
        uintptr_t *seen = malloc((w.n ? w.n : 1) * sizeof *seen);
        if (seen) {
            for (size_t j = 0; j < w.n; j++) {
                const object *o = &w.objs[j];
                seen[j] = o->base;
                if (seen_before(p, o->base)) continue;
                int k = patch_object(p, o);
                if (k < 0 && conflict && len && !conflict[0]) {
                    strncpy(conflict, o->name[0] ? o->name : "the main program", len - 1);
                    conflict[len - 1] = 0;
                }
                if (k > 0) total += k;
            }
            free(p->seen);
            p->seen = seen, p->nseen = w.n;
            p->adds = w.adds, p->subs = w.subs, p->walked = 1;
        }
    }
    for (size_t j = 0; j < w.n; j++) free(w.objs[j].name);
    free(w.objs);
    pthread_mutex_unlock(&p->lock);
    return total;
}

int mt_got_patched_slots(mt_got_patcher *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&p->lock);
    int n = (int)p->nslots;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void mt_got_unpatch(mt_got_patcher *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    walk_state w = {0};
    dl_iterate_phdr(collect, &w);
    for (size_t i = 0; i < p->nslots; i++) {
        const patched_slot *s = &p->slots[i];
        if (still_loaded(&w, s->base)) store_slot(s->slot, s->old, s->relro_lo, s->relro_hi);
    }
    p->nslots = 0;
    p->nseen = 0; /* a later mt_got_patch_new examines everything again */
    p->walked = 0;
    for (size_t j = 0; j < w.n; j++) free(w.objs[j].name);
    free(w.objs);
    pthread_mutex_unlock(&p->lock);
}

void mt_got_patcher_free(mt_got_patcher *p)
{
    if (!p) return;
    pthread_mutex_destroy(&p->lock);
    free(p->seen);
    free(p->slots);
    free(p);
}
