/* chunk_load.h — one chunk off the file: its header, lengths, payload, CRC, inflated (private to
 * src/trace).
 *
 * The feed (feed.c) loads every chunk this way, in order, and decides what a bad one means
 * (resync, damage); a thread that would otherwise wait loads the next one the same way ahead of
 * the feed (ahead.c). Every length is checked before it is used (docs/trace-format.md, "Reading,
 * truncation and corruption").
 */
#ifndef MT_TRACE_CHUNK_LOAD_H
#define MT_TRACE_CHUNK_LOAD_H

#include <stddef.h>
#include <stdint.h>

struct libdeflate_decompressor;

typedef enum mt_chunk_status {
    MT_CH_OK,    /* loaded: *raw holds its payload, inflated */
    MT_CH_END,   /* off is the end of the file */
    MT_CH_SHORT, /* a plausible chunk that the file ends inside */
    MT_CH_BAD,   /* fails a check */
    MT_CH_IO,    /* read(2) failed or out of memory */
} mt_chunk_status;

/* What a loader keeps from one chunk to the next: the file, an inflater (one per thread: not
 * shared) and the compressed payload's buffer. */
typedef struct mt_chunk_io {
    int fd;
    uint64_t file_size; /* grows when a chunk seems to run past it and the file has grown */
    struct libdeflate_decompressor *inflater;
    uint8_t *comp;
    size_t comp_cap;
} mt_chunk_io;

/* The chunk at off, by its header: its lengths and CRC, and the offset after it. */
typedef struct mt_chunk {
    uint64_t off, end;
    uint32_t clen, rlen, crc;
} mt_chunk;

/* Opens io on fd (of file_size bytes). -1 when out of memory. */
int mt_chunk_io_init(mt_chunk_io *io, int fd, uint64_t file_size);
void mt_chunk_io_free(mt_chunk_io *io);

/* The chunk's header at off: its magic, lengths that a chunk may have, a payload inside the file.
 * MT_CH_OK with *ch set; else why says what failed (for MT_CH_IO: strerror). */
mt_chunk_status mt_chunk_head(mt_chunk_io *io, uint64_t off, mt_chunk *ch, char *why, size_t wlen);
/* Its payload: read, CRC-checked and inflated into *raw (grown as needed; *cap its size).
 * budget: NULL, or (a candidate of a resync) the bytes still allowed, charged clen + rlen before
 * the payload is read; MT_CH_BAD once it is spent. Else as mt_chunk_head ("out of memory" too). */
mt_chunk_status mt_chunk_body(mt_chunk_io *io, const mt_chunk *ch, uint64_t *budget, uint8_t **raw,
                              size_t *cap, char *why, size_t wlen);

#endif
