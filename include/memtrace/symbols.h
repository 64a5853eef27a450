/* memtrace/symbols.h — naming the native frames of a trace after the fact.
 *
 * The recorder writes only return addresses (MT_REC_STACK_NODE, frame_kind MT_FRAME_NATIVE) and
 * the module map (MT_REC_MODULE). Symbolization turns each distinct address into function,
 * file and line — one MT_REC_SYMBOL per frame, several when DWARF says code was inlined — and
 * appends them to the trace as new chunks, so every later stage sees them like any other record.
 *
 * Sources, best first: DWARF (line table, DW_TAG_subprogram / DW_TAG_inlined_subroutine) of the
 * module or of its separate debug file (found by build id or .gnu_debuglink), then the ELF
 * symbol tables (.symtab, then .dynsym). C++ names are demangled by the C++ runtime.
 *
 * Cost model: a module is opened only when the trace holds an address inside it; its DWARF is
 * indexed by CU address ranges (.debug_aranges, else the CU DIEs), and only the CUs that contain
 * a traced address get their line table and DIE tree decoded. Everything is cached per module
 * for the duration of one mt_symbolize_trace call.
 */
#ifndef MEMTRACE_SYMBOLS_H
#define MEMTRACE_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Whole trace ------------------------------------------------------------------------------ */

typedef struct mt_symbolize_stats {
    uint64_t ips_total;        /* distinct native ips that had no symbol yet */
    uint64_t ips_resolved;     /* ... of which got at least a function name */
    uint64_t ips_with_line;    /* ... of which got file:line (DWARF) */
    uint64_t ips_already;      /* distinct native ips skipped: symbolized by an earlier run */
    uint64_t ips_no_module;    /* ips outside every recorded module (JIT code, vdso...) */
    uint64_t inline_frames;    /* MT_REC_SYMBOL records with depth > 0 */
    uint64_t symbols_written;  /* MT_REC_SYMBOL records appended */
    uint32_t modules;          /* modules holding at least one ip to resolve */
    uint32_t modules_missing;  /* ... whose file is gone or changed (build id mismatch) */
    uint32_t modules_dwarf;    /* ... that had DWARF (own or separate debug file) */
    uint64_t cus_decoded;      /* compile units whose line table was decoded */
    uint64_t truncated_bytes;  /* bytes of a partial last chunk cut off before appending */
    double seconds;            /* wall time of the whole call */
} mt_symbolize_stats;

/* Reads the trace at `path`, resolves every native ip that has no MT_REC_SYMBOL yet and appends
 * the symbols as new chunks (running it twice appends nothing the second time). A trace that
 * ends inside a chunk (recorder killed) is first cut back to its last whole chunk. stats may be
 * NULL. Returns 0, or -1 with a one-line reason in err (bad/corrupt file, write error). */
int mt_symbolize_trace(const char *path, mt_symbolize_stats *stats, char *err, size_t errlen);

/* ---- One module --------------------------------------------------------------------------------- */

/* One frame of a resolved address. Strings are owned by the mt_module_syms and live until it is
 * closed; "" = unknown, line 0 = unknown. */
typedef struct mt_sym_frame {
    const char *function; /* demangled */
    const char *file;     /* as DWARF names it (directory joined when DWARF gives one) */
    uint32_t line;
} mt_sym_frame;

#define MT_SYM_MAX_INLINE 16 /* deepest inline chain reported; deeper levels are dropped */

typedef struct mt_module_syms mt_module_syms;

/* Opens the ELF file at path. build_id (may be NULL / len 0 = do not check) must match the file's
 * NT_GNU_BUILD_ID note, else the module is refused as changed. Returns NULL with a reason in err
 * when the file is missing, not ELF, or changed. Opening is cheap: symbol tables and DWARF are
 * loaded on the first lookup that needs them. */
mt_module_syms *mt_module_syms_open(const char *path, const uint8_t *build_id,
                                    uint32_t build_id_len, char *err, size_t errlen);

/* Resolves a file address (runtime address - load bias; for a return address pass ip - 1 so the
 * call instruction is named). Fills frames[0..n-1], outermost (the real function) first, the
 * innermost inlined callee last; each frame's file:line is where it is executing / calling the
 * next one. Returns n (0 = nothing known, <= max). */
int mt_module_syms_resolve(mt_module_syms *m, uint64_t file_addr, mt_sym_frame *frames, int max);

/* 1 when the module (or its separate debug file) has DWARF; loads the index on first call. */
int mt_module_syms_has_dwarf(mt_module_syms *m);
/* Path actually used for DWARF (the module itself or its debug file); "" when none. */
const char *mt_module_syms_dwarf_path(mt_module_syms *m);
/* Compile units whose line table was decoded so far. */
uint64_t mt_module_syms_cus_decoded(const mt_module_syms *m);
void mt_module_syms_close(mt_module_syms *m);

/* ---- Names ---------------------------------------------------------------------------------------- */

/* Demangles an Itanium C++ ABI name with the C++ runtime's __cxa_demangle. Returns a malloc'd
 * string, or NULL when name is not a mangled name (the caller then keeps name as it is). */
char *mt_demangle(const char *name);

#ifdef __cplusplus
}
#endif
#endif
