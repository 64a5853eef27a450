/* libFuzzer harness, payload level: the input is the raw content of chunks (lane directory and
 * lanes, docs/trace-format.md), which the harness compresses and frames with correct lengths and
 * CRCs behind a valid file header, so every input reaches the record decoder and the compactor.
 *
 *   input: [u8 n] payload ...     n % 4 + 1 chunks; the payload is cut into that many pieces at
 *                                 the first bytes "\xffCHUNK" (then evenly). Bit 2 of n set: the
 *                                 file header says format version 1 (6 lanes), else the current
 *                                 version, so both decoders are fuzzed.
 *
 * Each piece is also decoded directly, record by record and with runs of plain events
 * (tests/support/decode_runs.h): any difference between the two aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "decode_runs.h"
#include "fuzz_common.h"
#include "memtrace/trace.h"

static void le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Appends one chunk holding raw[0..n) to out; returns the bytes written. */
static size_t chunk(uint8_t *out, const uint8_t *raw, size_t n)
{
    uLongf clen = compressBound((uLong)n);
    if (compress2(out + 16, &clen, raw, (uLong)n, 1) != Z_OK) return 0;
    memcpy(out, "MTCK", 4);
    le32(out + 4, (uint32_t)clen);
    le32(out + 8, (uint32_t)n);
    uLong crc = crc32(crc32(0, out + 4, 8), out + 16, (uInt)clen);
    le32(out + 12, (uint32_t)crc);
    return 16 + clen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > (1u << 20)) return 0;
    unsigned pieces = data[0] % 4 + 1;
    unsigned version = data[0] & 4 ? 1 : MT_TRACE_VERSION;
    data++;
    size--;
    uint8_t *file = malloc(64 + pieces * 16 + compressBound((uLong)size) + pieces * 64);
    if (!file) return 0;
    memset(file, 0, 64);
    memcpy(file, MT_TRACE_MAGIC, 8);
    file[8] = (uint8_t)version;
    file[10] = MT_FILE_HEADER_SIZE;
    size_t len = 64, at = 0;
    for (unsigned k = 0; k < pieces; k++) {
        size_t end = size, skip = 0;
        if (k + 1 < pieces) {
            const uint8_t *cut = memmem(data + at, size - at,
                                        "\xff"
                                        "CHUNK",
                                        6);
            end = cut ? (size_t)(cut - data) : at + (size - at) / (pieces - k);
            skip = cut ? 6 : 0;
        }
        if (end > at) {
            char why[200];
            if (mt_check_decode_runs(data + at, end - at, version, 1 + (end - at) % 97, NULL, why,
                                     sizeof why) != 0) {
                fprintf(stderr, "runs of events decode differently: %s\n", why);
                abort();
            }
            len += chunk(file + len, data + at, end - at); /* empty chunks are invalid */
        }
        at = end + skip;
    }
    char path[64];
    int fd = mt_fuzz_memfile(file, len, path, sizeof path);
    free(file);
    if (fd < 0) return 0;
    mt_fuzz_use_trace(path);
    close(fd);
    return 0;
}
