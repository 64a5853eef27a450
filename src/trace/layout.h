/* layout.h — the fixed-size framing of a .mtrace file: file header and chunk header
 * (private to src/trace; records inside chunks are in encode.c).
 *
 * File header, 64 bytes, little-endian:
 *
 *   0        8        10       12       16                 24                 32
 *   +--------+--------+--------+--------+------------------+------------------+
 *   | magic  | version| hdr    | pid    | start_monotonic  | start_realtime   |
 *   | 8 B    | u16    | size   | u32    | _ns u64          | _ns u64          |
 *   |        |        | u16    |        |                  |                  |
 *   +--------+--------+--------+--------+------------------+------------------+
 *   32       36       40       44       48       52                          64
 *   +--------+--------+--------+--------+--------+----------------------------+
 *   | flags  | rank   | local  | world  | node   | reserved, zeros, 12 B      |
 *   | u32    | i32    | _rank  | _size  | _rank  |                            |
 *   |        |        | i32    | i32    | i32    |                            |
 *   +--------+--------+--------+--------+--------+----------------------------+
 *   magic = MT_TRACE_MAGIC "\x89MTRACE\n". version = major format version: a reader refuses a
 *   larger one. hdr size = 64 today; a reader skips the bytes of a larger header (a future minor
 *   addition) and refuses a smaller one. Readers ignore the reserved bytes. flags bit 0
 *   (MT_HDR_RANK): the four rank fields are valid (each may still be -1: not given); without it
 *   (files of earlier releases: zeros) the process had no rank.
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
#define MT_HDR_OFF_FLAGS 32
#define MT_HDR_OFF_RANK 36
#define MT_HDR_OFF_LOCAL_RANK 40
#define MT_HDR_OFF_WORLD_SIZE 44
#define MT_HDR_OFF_NODE_RANK 48
#define MT_HDR_MAX_SIZE 4096 /* a header claiming more is not ours */

#define MT_CHUNK_MAGIC "MTCK"
#define MT_CHUNK_HEADER_SIZE 16
/* Largest raw payload a reader accepts: bounds the memory a hostile file can make it allocate.
 * The writer never produces a larger chunk (it refuses a record that would need one). */
#define MT_CHUNK_RAW_MAX (64u * 1024u * 1024u)

#endif
