/* What both fuzzers do with a trace file: everything a user can ask of one, output discarded.
 * mt_analyze (two passes), the text, JSON and Markdown reports, the rank table, folded stacks in
 * every metric, speedscope, the Chrome trace (three more reads), check with every budget exceeded
 * (the allocated peak's re-read), diff against itself, the HTML report (two more reads), and a
 * strict read to the end.
 * Symbolization is left out: it opens the module paths the trace names, files of the machine the
 * fuzzer runs on. */
#ifndef MT_FUZZ_COMMON_H
#define MT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Runs every reader of the trace in the file at path. */
void mt_fuzz_use_trace(const char *path);
/* A memfd holding data, and its path ("/proc/self/fd/N") in path; -1 on failure. */
int mt_fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t len);
#endif
