/* Reading one ELF object with libelf: its build id, .gnu_debuglink, whether it has DWARF, and its
 * function symbols (.symtab and .dynsym). The file is mapped (ELF_C_READ_MMAP), not read: a 1 GB
 * libtorch_cuda.so costs only the pages of the sections actually touched. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grow.h"
#include "symbols_internal.h"

#ifndef NT_GNU_BUILD_ID
#define NT_GNU_BUILD_ID 3
#endif

/* Build id: the desc of the NT_GNU_BUILD_ID note named "GNU" in any SHT_NOTE section. */
static void read_build_id(mt_elf_file *f, Elf_Scn *scn)
{
    Elf_Data *data = elf_getdata(scn, NULL);
    if (!data || !data->d_buf) return;
    size_t off = 0, name_off, desc_off;
    GElf_Nhdr nh;
    while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
            memcmp((char *)data->d_buf + name_off, "GNU", 4) == 0 && nh.n_descsz > 0 &&
            nh.n_descsz <= sizeof f->build_id) {
            memcpy(f->build_id, (char *)data->d_buf + desc_off, nh.n_descsz);
            f->build_id_len = nh.n_descsz;
            return;
        }
    }
}

/* .gnu_debuglink:
 *   +---------------------------+-----------+------------------+
 *   | file name, NUL terminated | 0..3 pad  | CRC32 (u32, LE*) |
 *   +---------------------------+-----------+------------------+
 *   the CRC starts at the next multiple of 4; *byte order of the object. */
static void read_debuglink(mt_elf_file *f, Elf_Scn *scn)
{
    Elf_Data *data = elf_getdata(scn, NULL);
    if (!data || !data->d_buf || data->d_size < 5) return;
    const char *name = data->d_buf;
    size_t n = strnlen(name, data->d_size);
    size_t crc_off = (n + 1 + 3) & ~(size_t)3;
    if (n == 0 || crc_off + 4 > data->d_size) return;
    f->debuglink = strndup(name, n);
    uint32_t crc;
    memcpy(&crc, (const char *)data->d_buf + crc_off, 4);
    f->debuglink_crc = crc; /* x86-64 and aarch64 objects are little endian like the host */
}

int mt_open_regular(const char *path)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int mt_elf_open(mt_elf_file *f, const char *path, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (elf_version(EV_CURRENT) == EV_NONE) {
        snprintf(err, errlen, "libelf: %s", elf_errmsg(-1));
        return -1;
    }
    f->fd = mt_open_regular(path);
    if (f->fd < 0) {
        snprintf(err, errlen, "%s: %s", path,
                 errno == EINVAL ? "not a regular file" : strerror(errno));
        return -1;
    }
    Elf *elf = elf_begin(f->fd, ELF_C_READ_MMAP, NULL);
    if (!elf || elf_kind(elf) != ELF_K_ELF) {
        snprintf(err, errlen, "%s: not an ELF file", path);
        if (elf) elf_end(elf);
        close(f->fd);
        f->fd = -1;
        return -1;
    }
    f->elf = elf;
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0) return 0; /* no sections: nothing more to learn */
    for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn; scn = elf_nextscn(elf, scn)) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh)) continue;
        const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
        if (!name) continue;
        if (sh.sh_type == SHT_NOTE && f->build_id_len == 0)
            read_build_id(f, scn);
        else if (strcmp(name, ".gnu_debuglink") == 0)
            read_debuglink(f, scn);
        else if ((strcmp(name, ".debug_info") == 0 || strcmp(name, ".zdebug_info") == 0) &&
                 sh.sh_type != SHT_NOBITS && sh.sh_size > 0)
            f->has_debug_info = 1;
    }
    return 0;
}

static int sym_cmp(const void *a, const void *b)
{
    const mt_elf_sym *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    /* Same address (aliases): keep the sized one, then the first read (.symtab before .dynsym),
     * which the caller encoded in demangle_tried as a temporary rank. */
    if ((x->size == 0) != (y->size == 0)) return x->size == 0 ? 1 : -1;
    return (int)x->demangle_tried - (int)y->demangle_tried;
}

static int add_symbols(mt_elf_file *f, Elf_Scn *scn, const GElf_Shdr *sh, size_t *cap,
                       uint8_t rank)
{
    Elf_Data *data = elf_getdata(scn, NULL);
    if (!data || sh->sh_entsize == 0) return 0;
    size_t n = sh->sh_size / sh->sh_entsize;
    for (size_t i = 0; i < n; i++) {
        GElf_Sym s;
        if (!gelf_getsym(data, (int)i, &s)) continue;
        int type = GELF_ST_TYPE(s.st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s.st_shndx == SHN_UNDEF ||
            s.st_value == 0)
            continue;
        const char *name = elf_strptr(f->elf, sh->sh_link, s.st_name);
        if (!name || !*name) continue;
        if (MT_GROW(f->syms, *cap, f->nsyms + 1) < 0) return -1;
        f->syms[f->nsyms++] = (mt_elf_sym){s.st_value, s.st_size, name, NULL, rank};
    }
    return 0;
}

void mt_elf_load_symbols(mt_elf_file *f)
{
    if (f->symbols_loaded || !f->elf) return;
    f->symbols_loaded = 1;
    size_t cap = 0;
    /* .symtab first (complete, local functions too), then .dynsym (all a stripped library has). */
    for (int pass = 0; pass < 2; pass++) {
        Elf32_Word want = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
        for (Elf_Scn *scn = elf_nextscn(f->elf, NULL); scn; scn = elf_nextscn(f->elf, scn)) {
            GElf_Shdr sh;
            if (gelf_getshdr(scn, &sh) && sh.sh_type == want &&
                add_symbols(f, scn, &sh, &cap, (uint8_t)pass) != 0)
                goto sort;
        }
    }
sort:
    if (f->nsyms) qsort(f->syms, f->nsyms, sizeof *f->syms, sym_cmp);
    size_t out = 0; /* one symbol per address: the first after sorting wins */
    for (size_t i = 0; i < f->nsyms; i++) {
        if (out > 0 && f->syms[out - 1].addr == f->syms[i].addr) continue;
        f->syms[out] = f->syms[i];
        f->syms[out].demangle_tried = 0;
        out++;
    }
    f->nsyms = out;
}

mt_elf_sym *mt_elf_find_symbol(mt_elf_file *f, uint64_t addr)
{
    mt_elf_load_symbols(f);
    size_t lo = 0, hi = f->nsyms; /* first symbol with addr > target */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (f->syms[mid].addr <= addr) lo = mid + 1;
        else hi = mid;
    }
    /* Walk back a little: a sized symbol just below may be nested inside a bigger one. */
    for (size_t i = lo, steps = 0; i > 0 && steps < 8; i--, steps++) {
        mt_elf_sym *s = &f->syms[i - 1];
        if (s->size == 0 && steps == 0) return s; /* unsized (asm): best guess is the nearest */
        if (addr < s->addr + s->size) return s;
    }
    return NULL;
}

const char *mt_elf_sym_name(mt_elf_sym *s)
{
    if (!s->demangle_tried) {
        s->demangle_tried = 1;
        s->demangled = mt_demangle(s->name);
    }
    return s->demangled ? s->demangled : s->name;
}

void mt_elf_close(mt_elf_file *f)
{
    for (size_t i = 0; i < f->nsyms; i++) free(f->syms[i].demangled);
    free(f->syms);
    free(f->debuglink);
    if (f->elf) elf_end(f->elf);
    if (f->fd >= 0) close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}
