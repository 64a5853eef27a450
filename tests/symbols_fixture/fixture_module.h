/* Test helpers around libmt_symfix: where it is loaded (as a trace's MT_REC_MODULE would say)
 * and writing small synthetic traces that reference it. */
#ifndef MT_SYMFIX_MODULE_H
#define MT_SYMFIX_MODULE_H
#include <stddef.h>
#include <stdint.h>

#include "memtrace/trace.h"

typedef struct mt_fix_module {
    char path[4096];
    uint64_t bias, start, end;
    uint8_t build_id[64];
    uint32_t build_id_len;
} mt_fix_module;

/* Fills m from dl_iterate_phdr for the loaded object whose path contains `needle`. 0 = found. */
int mt_fix_find_module(const char *needle, mt_fix_module *m);

/* Module record for m with the given id (points into m). */
mt_record mt_fix_module_record(const mt_fix_module *m, uint32_t id);

/* Writes a new trace at path: a process record, the given records, then one native stack node
 * per ip (ids 1..n, a chain: each the parent of the next). chunk_bytes = 0: default. 0 = ok. */
int mt_fix_write_trace(const char *path, const mt_record *recs, size_t nrecs, const uint64_t *ips,
                       size_t nips, size_t chunk_bytes);
/* The same in an older format version (a trace of an earlier release). */
int mt_fix_write_trace_version(const char *path, uint16_t version, const mt_record *recs,
                               size_t nrecs, const uint64_t *ips, size_t nips, size_t chunk_bytes);

/* Reads every MT_REC_SYMBOL of the trace (strings copied, caller frees with mt_fix_free_syms).
 * Returns the count, or -1 when the trace does not read to a clean end. */
typedef struct mt_fix_sym {
    uint64_t ip;
    uint32_t module, line, depth;
    char function[512], file[512];
} mt_fix_sym;
long mt_fix_read_symbols(const char *path, mt_fix_sym **out);

/* Symbols of one ip, ordered by depth (count written to *n, pointers into syms). */
int mt_fix_frames_of(mt_fix_sym *syms, long nsyms, uint64_t ip, mt_fix_sym **frames, int max);

const char *mt_fix_basename(const char *path);
#endif
