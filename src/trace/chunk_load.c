/* chunk_load.c — one chunk off the file (chunk_load.h).
 *
 * Inflating: libdeflate reads the chunks' zlib streams (the writer's zlib makes them) whole,
 * about twice as fast as zlib's streaming inflate; its CRC32 is also faster than zlib's.
 */
#include <errno.h>
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "bytes.h"
#include "chunk_load.h"
#include "feed.h"
#include "layout.h"

int mt_chunk_io_init(mt_chunk_io *io, int fd, uint64_t file_size)
{
    memset(io, 0, sizeof *io);
    io->fd = fd;
    io->file_size = file_size;
    io->inflater = libdeflate_alloc_decompressor();
    return io->inflater ? 0 : -1;
}

void mt_chunk_io_free(mt_chunk_io *io)
{
    if (io->inflater) libdeflate_free_decompressor(io->inflater);
    free(io->comp);
    memset(io, 0, sizeof *io);
}

/* The chunk's zlib stream (RFC 1950, Adler-32 checked) must inflate to exactly rlen bytes and
 * end exactly where the payload does. 0, or -1 when it does not. */
static int inflate_zlib(struct libdeflate_decompressor *d, const uint8_t *in, size_t n,
                        uint8_t *out, size_t rlen)
{
    size_t used = 0, got = 0;
    if (libdeflate_zlib_decompress_ex(d, in, n, out, rlen, &used, &got) != LIBDEFLATE_SUCCESS)
        return -1;
    return used == n && got == rlen ? 0 : -1;
}

static int reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    uint8_t *n = realloc(*buf, need);
    if (!n) return -1;
    *buf = n;
    *cap = need;
    return 0;
}

static mt_chunk_status io_error(char *why, size_t wlen, const char *what)
{
    snprintf(why, wlen, "%s", what);
    return MT_CH_IO;
}

mt_chunk_status mt_chunk_head(mt_chunk_io *io, uint64_t off, mt_chunk *ch, char *why, size_t wlen)
{
    uint8_t h[MT_CHUNK_HEADER_SIZE];
    ssize_t got = mt_pread_full(io->fd, h, sizeof h, off);
    if (got < 0) return io_error(why, wlen, strerror(errno));
    if (got == 0) return MT_CH_END;
    size_t cmp = (size_t)got < 4 ? (size_t)got : 4;
    if (memcmp(h, MT_CHUNK_MAGIC, cmp) != 0) {
        snprintf(why, wlen, "bad chunk magic");
        return MT_CH_BAD;
    }
    if ((size_t)got < sizeof h) {
        snprintf(why, wlen, "truncated chunk header");
        return MT_CH_SHORT;
    }
    uint32_t clen = mt_get_le32(h + 4), rlen = mt_get_le32(h + 8);
    if (rlen == 0 || rlen > MT_CHUNK_RAW_MAX || clen == 0 || clen > compressBound(rlen)) {
        snprintf(why, wlen, "impossible chunk lengths");
        return MT_CH_BAD;
    }
    uint64_t payload = off + MT_CHUNK_HEADER_SIZE;
    if (payload + clen > io->file_size) { /* the file may have grown since we looked */
        struct stat st;
        if (fstat(io->fd, &st) == 0 && (uint64_t)st.st_size > io->file_size)
            io->file_size = (uint64_t)st.st_size;
    }
    if (payload + clen > io->file_size) {
        uint64_t have = io->file_size > payload ? io->file_size - payload : 0;
        snprintf(why, wlen, "truncated chunk (%llu of %u payload bytes)", (unsigned long long)have,
                 clen);
        return MT_CH_SHORT;
    }
    ch->off = off;
    ch->end = payload + clen;
    ch->clen = clen;
    ch->rlen = rlen;
    ch->crc = mt_get_le32(h + 12);
    return MT_CH_OK;
}

mt_chunk_status mt_chunk_body(mt_chunk_io *io, const mt_chunk *ch, uint64_t *budget, uint8_t **raw,
                              size_t *cap, char *why, size_t wlen)
{
    if (budget) {
        uint64_t charge = (uint64_t)ch->clen + ch->rlen;
        if (charge > *budget) {
            *budget = 0;
            snprintf(why, wlen, "too many false chunk starts to look further");
            return MT_CH_BAD;
        }
        *budget -= charge;
    }
    if (reserve(&io->comp, &io->comp_cap, ch->clen)) return io_error(why, wlen, "out of memory");
    ssize_t got = mt_pread_full(io->fd, io->comp, ch->clen, ch->off + MT_CHUNK_HEADER_SIZE);
    if (got < 0) return io_error(why, wlen, strerror(errno));
    if ((size_t)got < ch->clen) {
        snprintf(why, wlen, "truncated chunk (%zd of %u payload bytes)", got, ch->clen);
        return MT_CH_SHORT;
    }
    uint8_t lens[8]; /* the CRC covers the header's two lengths, then the payload */
    mt_put_le32(lens, ch->clen);
    mt_put_le32(lens + 4, ch->rlen);
    uint32_t sum = libdeflate_crc32(0, lens, sizeof lens);
    sum = libdeflate_crc32(sum, io->comp, ch->clen);
    if (sum != ch->crc) {
        snprintf(why, wlen, "chunk CRC mismatch");
        return MT_CH_BAD;
    }
    if (reserve(raw, cap, ch->rlen)) return io_error(why, wlen, "out of memory");
    if (inflate_zlib(io->inflater, io->comp, ch->clen, *raw, ch->rlen) != 0) {
        snprintf(why, wlen, "chunk payload does not inflate to its size");
        return MT_CH_BAD;
    }
    return MT_CH_OK;
}
