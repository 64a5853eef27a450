/* Helpers shared by the Criterion tests. */
#ifndef MT_TESTUTIL_H
#define MT_TESTUTIL_H
#include <stddef.h>
#include <stdint.h>

/* A fresh path under $TMPDIR (or /tmp), removed with whatever it holds when the process that asked
 * for it exits (not a child of fork()); MEMTRACE_TEST_KEEP=1 keeps them. */
void mt_test_tmpname(char *buf, size_t len, const char *stem);
/* Reads a whole file into malloc'd memory; returns NULL on failure. */
uint8_t *mt_test_slurp(const char *path, size_t *len);
/* Writes len bytes to path (truncating). Returns 0 on success. */
int mt_test_spit(const char *path, const void *data, size_t len);
/* rawlen bytes of chunk payload framed as a trace chunk at out: header, CRC32 and zlib stream, as
 * the writer frames them (out has room for 16 + compressBound(rawlen) bytes). Returns the chunk's
 * length, or 0 when zlib fails. */
size_t mt_test_chunk(uint8_t *out, const uint8_t *raw, size_t rawlen);
/* A trace file's header at h (MT_FILE_HEADER_SIZE bytes): the magic, `version` and the header's
 * `size`, the rest zero. */
void mt_test_file_header(uint8_t *h, uint16_t version, uint16_t size);
/* Writes path: a header of format `version`, then rawlen bytes of chunk payload as its one chunk
 * (mt_test_chunk). Returns the file's size, or 0 when it cannot be made. */
size_t mt_test_chunk_file(const char *path, uint16_t version, const uint8_t *raw, size_t rawlen);
/* Calls fn with the path of every trace recorded on a GPU for the tests (the .mtrace files in
 * tests/data). Returns how many, or -1 when the directory cannot be opened. */
int mt_test_each_gpu_fixture(void (*fn)(const char *path, void *ctx), void *ctx);
#endif
