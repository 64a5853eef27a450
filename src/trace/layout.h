/* layout.h — the fixed-size framing of a .mtrace file: file header and chunk header
 * (private to src/trace; records inside chunks are in encode.c).
 *
 * File header, 64 bytes, little-endian:
 *
 *   0        8        10       12       16                 24                 32            64
 *   +--------+--------+--------+--------+------------------+------------------+-------------+
 *   | magic  | version| hdr    | pid    | start_monotonic  | start_realtime   | reserved    |
 *   | 8 B    | u16    | size   | u32    | _ns u64          | _ns u64          | zeros, 32 B |
 *   |        |        | u16    |        |                  |                  |             |
 *   +--------+--------+--------+--------+------------------+------------------+-------------+
 *   magic = MT_TRACE_MAGIC "\x89MTRACE\n". version = major format version: a reader refuses a
 *   larger one. hdr size = 64 today; a reader skips the bytes of a larger header (a future minor
 *   addition) and refuses a smaller one. Readers ignore the reserved bytes.
 *
 * Then chunks, back to back, until end of file. Chunk header, 16 bytes, little-endian:
 *
 *   0        4              8              12             16
 *   +--------+--------------+--------------+--------------+---------------------------------+
 *   | "MTCK" | compressed   | raw length   | CRC32        | zlib stream, `compressed` bytes |
 *   |        | length u32   | u32          | u32          | inflating to `raw` bytes        |
 *   +--------+--------------+--------------+--------------+---------------------------------+
 *   CRC32 (zlib crc32) covers bytes 4..11 of the chunk header, then the compressed payload.
 *   The raw payload (lane directory + lanes of records, encode.h/encode.c) decodes on its own.
 */
#ifndef MT_TRACE_LAYOUT_H
#define MT_TRACE_LAYOUT_H

#include <stdint.h>

#include "memtrace/trace.h"

#define MT_HDR_OFF_VERSION 8
#define MT_HDR_OFF_SIZE 10
#define MT_HDR_OFF_PID 12
#define MT_HDR_OFF_MONO 16
#define MT_HDR_OFF_REAL 24
#define MT_HDR_MAX_SIZE 4096 /* a header claiming more is not ours */

#define MT_CHUNK_MAGIC "MTCK"
#define MT_CHUNK_HEADER_SIZE 16
/* Largest raw payload a reader accepts: bounds the memory a hostile file can make it allocate.
 * The writer never produces a larger chunk (it refuses a record that would need one). */
#define MT_CHUNK_RAW_MAX (64u * 1024u * 1024u)

#endif
