/* Pieces of the symbolizer shared between the files of src/symbols; not a public API. */
#ifndef MT_SYMBOLS_INTERNAL_H
#define MT_SYMBOLS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "memtrace/symbols.h"

/* ---- elf_file.c: one ELF object read with libelf ------------------------------------------------ */

typedef struct mt_elf_sym {
    uint64_t addr, size;
    const char *name;   /* points into libelf's string table data (lives while the file is open) */
    char *demangled;    /* filled on first use; NULL = not demangled yet / not mangled */
    uint8_t demangle_tried;
} mt_elf_sym;

typedef struct mt_elf_file {
    int fd;
    void *elf; /* Elf*, kept opaque so that users of this header need not include libelf.h */
    uint8_t build_id[64];
    uint32_t build_id_len;
    char *debuglink;        /* .gnu_debuglink file name; NULL when absent */
    uint32_t debuglink_crc; /* its CRC32 of the debug file */
    int has_debug_info;     /* .debug_info present with contents (not SHT_NOBITS) */
    int symbols_loaded;
    mt_elf_sym *syms;       /* function symbols sorted by addr, one per address */
    size_t nsyms;
} mt_elf_file;

/* 0 ok; -1 with errno-ish reason in err (missing, not ELF). Reads headers and notes only. */
int mt_elf_open(mt_elf_file *f, const char *path, char *err, size_t errlen);
/* Opens path read-only only if it is a regular file: every file symbolization opens is named by
 * the trace (module paths, debug links), which is untrusted, and a FIFO there would block the
 * open or the read forever, a device would be read without end. -1 with errno (EINVAL for
 * "not a regular file"). */
int mt_open_regular(const char *path);
/* Loads .symtab and .dynsym function symbols (once). */
void mt_elf_load_symbols(mt_elf_file *f);
/* Symbol covering addr (or the nearest one below it when its size is 0), NULL if none. */
mt_elf_sym *mt_elf_find_symbol(mt_elf_file *f, uint64_t addr);
/* Demangled (or raw) name of s; never NULL. */
const char *mt_elf_sym_name(mt_elf_sym *s);
void mt_elf_close(mt_elf_file *f);

/* ---- debug_file.c: separate debug files ------------------------------------------------------ */

/* Finds the separate debug file of the object at `path` (already opened as f): by build id under
 * debug_root/.build-id/, then by .gnu_debuglink in the object's directory, its .debug/ subdir and
 * debug_root/<dir>/. A candidate is accepted only if its build id (or, lacking one, the debuglink
 * CRC) matches. Returns 1 and writes the path into out, 0 when none. */
int mt_find_debug_file(const char *path, const mt_elf_file *f, const char *debug_root, char *out,
                       size_t outlen);

/* ---- dwarf_index.c: DWARF lookups with libdwarf ----------------------------------------------- */

typedef struct mt_dwarf mt_dwarf;

/* NULL when the file has no DWARF (or libdwarf refuses it). */
mt_dwarf *mt_dwarf_open(const char *path);
/* Inline chain for addr, outermost first (like mt_module_syms_resolve). Functions "" when only the
 * line table knows the address. Strings live until mt_dwarf_close. Returns the frame count. */
int mt_dwarf_lookup(mt_dwarf *d, uint64_t addr, mt_sym_frame *frames, int max);
uint64_t mt_dwarf_cus_decoded(const mt_dwarf *d);
void mt_dwarf_close(mt_dwarf *d);

/* Sets of instruction pointers and CU offsets: mt_u64map (src/util/u64map.h). */
#include "u64map.h"

#endif
