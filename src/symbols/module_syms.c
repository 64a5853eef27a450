/* One module's symbols: ELF symbol tables and DWARF (the module's own or its separate debug
 * file's), combined into mt_module_syms_resolve. Everything is loaded on first need. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symbols_internal.h"

struct mt_module_syms {
    char *path;
    mt_elf_file elf;       /* the module itself */
    mt_elf_file debug_elf; /* its separate debug file (for .symtab), when one was found */
    int have_debug_elf;
    int dwarf_tried;
    mt_dwarf *dwarf;
    char dwarf_path[4096];
};

mt_module_syms *mt_module_syms_open(const char *path, const uint8_t *build_id,
                                    uint32_t build_id_len, char *err, size_t errlen)
{
    if (!path || !*path) {
        snprintf(err, errlen, "module has no file name");
        return NULL;
    }
    mt_module_syms *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (mt_elf_open(&m->elf, path, err, errlen) != 0) {
        free(m);
        return NULL;
    }
    if (build_id_len &&
        (m->elf.build_id_len != build_id_len || memcmp(m->elf.build_id, build_id, build_id_len))) {
        snprintf(err, errlen, "%s: build id differs from the recorded one (file changed)", path);
        mt_elf_close(&m->elf);
        free(m);
        return NULL;
    }
    m->path = strdup(path);
    return m;
}

static void load_dwarf(mt_module_syms *m)
{
    if (m->dwarf_tried) return;
    m->dwarf_tried = 1;
    char dbg[4096];
    /* A separate debug file, when present, has the full .symtab too (the module may keep only
     * .dynsym); its DWARF is used when the module itself has none. */
    if (mt_find_debug_file(m->path, &m->elf, NULL, dbg, sizeof dbg)) {
        char err[256];
        if (mt_elf_open(&m->debug_elf, dbg, err, sizeof err) == 0) m->have_debug_elf = 1;
        if (!m->elf.has_debug_info && (m->dwarf = mt_dwarf_open(dbg)) != NULL)
            snprintf(m->dwarf_path, sizeof m->dwarf_path, "%s", dbg);
    }
    if (!m->dwarf && m->elf.has_debug_info && (m->dwarf = mt_dwarf_open(m->path)) != NULL)
        snprintf(m->dwarf_path, sizeof m->dwarf_path, "%s", m->path);
}

int mt_module_syms_has_dwarf(mt_module_syms *m)
{
    load_dwarf(m);
    return m->dwarf != NULL;
}

const char *mt_module_syms_dwarf_path(mt_module_syms *m)
{
    load_dwarf(m);
    return m->dwarf_path;
}

uint64_t mt_module_syms_cus_decoded(const mt_module_syms *m)
{
    return m->dwarf ? mt_dwarf_cus_decoded(m->dwarf) : 0;
}

int mt_module_syms_resolve(mt_module_syms *m, uint64_t file_addr, mt_sym_frame *frames, int max)
{
    if (max <= 0) return 0;
    load_dwarf(m);
    int n = m->dwarf ? mt_dwarf_lookup(m->dwarf, file_addr, frames, max) : 0;
    if (n > 0 && frames[0].function[0]) return n;
    /* DWARF named no function (no DIE, or no DWARF at all): the symbol tables name the real
     * function; DWARF may still have given its file:line, which is kept. */
    mt_elf_sym *s = NULL;
    if (m->have_debug_elf) s = mt_elf_find_symbol(&m->debug_elf, file_addr);
    if (!s) s = mt_elf_find_symbol(&m->elf, file_addr);
    if (!s) return n;
    if (n == 0) {
        frames[0] = (mt_sym_frame){mt_elf_sym_name(s), "", 0};
        return 1;
    }
    frames[0].function = mt_elf_sym_name(s);
    return n;
}

void mt_module_syms_close(mt_module_syms *m)
{
    if (!m) return;
    mt_dwarf_close(m->dwarf);
    if (m->have_debug_elf) mt_elf_close(&m->debug_elf);
    mt_elf_close(&m->elf);
    free(m->path);
    free(m);
}
