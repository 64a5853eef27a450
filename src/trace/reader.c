/* reader.c — file -> chunks -> records, one chunk in memory at a time.
 *
 * Every length read from the file is checked before it is used: chunk lengths against
 * MT_CHUNK_RAW_MAX and compressBound, the inflated size against the header's raw length, every
 * field inside against the bytes left (mt_cursor). So any input, cut or corrupted or hostile,
 * ends in MT_READ_TRUNCATED or MT_READ_CORRUPT with the offset of the chunk, never a crash.
 * Once the reader has reported a failure it keeps reporting it: a later chunk cannot be trusted
 * to start where a damaged one says it ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "encode.h"
#include "layout.h"
#include "memtrace/trace.h"

struct mt_reader {
    int fd;
    char *path;
    mt_file_header header;
    uint64_t file_size; /* at open; the file may grow while we read (chunks appended) */
    uint64_t pos;       /* file offset of the next unread byte */
    uint64_t chunk_off; /* file offset of the chunk whose records we are returning */
    uint8_t *comp;      /* compressed payload of the current chunk */
    size_t comp_cap;
    uint8_t *raw; /* its records */
    size_t raw_cap;
    mt_cursor lane[MT_LANES]; /* positions in raw's lanes */
    mt_codec codec;
    z_stream z;
    int z_ready;
    mt_read_status failed; /* 0 = healthy, else the sticky status */
    uint64_t err_off;
    char err[256];
};

/* Reads up to n bytes; returns how many (short only at end of file), or -1. */
static ssize_t read_full(int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

static void open_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void open_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static mt_read_status set_failed(mt_reader *r, mt_read_status st, uint64_t off, const char *what)
{
    r->failed = st;
    r->err_off = off;
    snprintf(r->err, sizeof r->err, "%s: offset %llu: %s", r->path, (unsigned long long)off, what);
    return st;
}

void mt_reader_close(mt_reader *r)
{
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    if (r->z_ready) inflateEnd(&r->z);
    free(r->comp);
    free(r->raw);
    free(r->path);
    free(r);
}

mt_reader *mt_reader_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        open_error(err, errlen, "%s: offset 0: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t h[MT_FILE_HEADER_SIZE];
    ssize_t got = read_full(fd, h, sizeof h);
    if (got < 0) {
        open_error(err, errlen, "%s: offset 0: cannot read: %s", path, strerror(errno));
        goto fail;
    }
    /* check the magic on what we have first: a short non-trace file is "not a trace" */
    size_t cmp = (size_t)got < 8 ? (size_t)got : 8;
    if (memcmp(h, MT_TRACE_MAGIC, cmp) != 0) {
        open_error(err, errlen, "%s: offset 0: not a memtrace file (bad magic)", path);
        goto fail;
    }
    if ((size_t)got < sizeof h) {
        open_error(err, errlen, "%s: offset %zd: file too short for the %d-byte header", path, got,
                   MT_FILE_HEADER_SIZE);
        goto fail;
    }
    uint16_t version = mt_get_le16(h + MT_HDR_OFF_VERSION);
    uint16_t hsize = mt_get_le16(h + MT_HDR_OFF_SIZE);
    if (version == 0 || version > MT_TRACE_VERSION) {
        open_error(err, errlen,
                   "%s: offset %d: trace format version %u is not supported (this reader "
                   "reads 1..%d)",
                   path, MT_HDR_OFF_VERSION, version, MT_TRACE_VERSION);
        goto fail;
    }
    if (hsize < MT_FILE_HEADER_SIZE || hsize > MT_HDR_MAX_SIZE) {
        open_error(err, errlen, "%s: offset %d: bad header size %u", path, MT_HDR_OFF_SIZE, hsize);
        goto fail;
    }
    /* a larger header (a later minor revision) has fields we do not know: skip them */
    for (size_t left = hsize - MT_FILE_HEADER_SIZE; left > 0;) {
        uint8_t skip[256];
        size_t n = left < sizeof skip ? left : sizeof skip;
        ssize_t k = read_full(fd, skip, n);
        if (k != (ssize_t)n) {
            open_error(err, errlen, "%s: offset %d: file too short for the %u-byte header", path,
                       MT_FILE_HEADER_SIZE, hsize);
            goto fail;
        }
        left -= n;
    }

    mt_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path)) || inflateInit(&r->z) != Z_OK) {
        open_error(err, errlen, "%s: offset 0: out of memory", path);
        if (r) free(r->path);
        free(r);
        goto fail;
    }
    r->z_ready = 1;
    r->fd = fd;
    r->header.version = version;
    r->header.pid = mt_get_le32(h + MT_HDR_OFF_PID);
    r->header.start_monotonic_ns = mt_get_le64(h + MT_HDR_OFF_MONO);
    r->header.start_realtime_ns = mt_get_le64(h + MT_HDR_OFF_REAL);
    r->header.flags = mt_get_le32(h + MT_HDR_OFF_FLAGS);
    r->header.rank = r->header.local_rank = r->header.world_size = r->header.node_rank = -1;
    if (r->header.flags & MT_HDR_RANK) {
        r->header.rank = (int32_t)mt_get_le32(h + MT_HDR_OFF_RANK);
        r->header.local_rank = (int32_t)mt_get_le32(h + MT_HDR_OFF_LOCAL_RANK);
        r->header.world_size = (int32_t)mt_get_le32(h + MT_HDR_OFF_WORLD_SIZE);
        r->header.node_rank = (int32_t)mt_get_le32(h + MT_HDR_OFF_NODE_RANK);
    }
    struct stat st;
    if (fstat(fd, &st) == 0) r->file_size = (uint64_t)st.st_size;
    r->pos = r->chunk_off = hsize;
    return r;
fail:
    close(fd);
    return NULL;
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

/* Loads, checks and inflates the chunk at r->pos. Returns MT_READ_RECORD when r->cur holds a
 * fresh chunk, MT_READ_END at a clean end of file, or a failure status. */
static mt_read_status load_chunk(mt_reader *r)
{
    uint64_t off = r->pos;
    uint8_t h[MT_CHUNK_HEADER_SIZE];
    ssize_t got = read_full(r->fd, h, sizeof h);
    if (got < 0) return set_failed(r, MT_READ_IO, off, strerror(errno));
    if (got == 0) return MT_READ_END;
    if ((size_t)got < sizeof h)
        return set_failed(r, MT_READ_TRUNCATED, off, "truncated chunk header");
    if (memcmp(h, MT_CHUNK_MAGIC, 4) != 0)
        return set_failed(r, MT_READ_CORRUPT, off, "bad chunk magic");
    uint32_t clen = mt_get_le32(h + 4), rlen = mt_get_le32(h + 8), crc = mt_get_le32(h + 12);
    if (rlen == 0 || rlen > MT_CHUNK_RAW_MAX || clen == 0 || clen > compressBound(rlen))
        return set_failed(r, MT_READ_CORRUPT, off, "impossible chunk lengths");
    if (reserve(&r->comp, &r->comp_cap, clen) || reserve(&r->raw, &r->raw_cap, rlen))
        return set_failed(r, MT_READ_IO, off, "out of memory");
    got = read_full(r->fd, r->comp, clen);
    if (got < 0) return set_failed(r, MT_READ_IO, off, strerror(errno));
    if ((size_t)got < clen) {
        char what[96];
        snprintf(what, sizeof what, "truncated chunk (%zd of %u payload bytes)", got, clen);
        return set_failed(r, MT_READ_TRUNCATED, off, what);
    }
    uLong sum = crc32(0L, h + 4, 8);
    sum = crc32(sum, r->comp, clen);
    if ((uint32_t)sum != crc) return set_failed(r, MT_READ_CORRUPT, off, "chunk CRC mismatch");

    if (inflateReset(&r->z) != Z_OK) return set_failed(r, MT_READ_IO, off, "zlib reset failed");
    r->z.next_in = r->comp;
    r->z.avail_in = clen;
    r->z.next_out = r->raw;
    r->z.avail_out = rlen;
    int zr = inflate(&r->z, Z_FINISH);
    if (zr != Z_STREAM_END || r->z.total_out != rlen || r->z.avail_in != 0)
        return set_failed(r, MT_READ_CORRUPT, off, "chunk payload does not inflate to its size");

    r->chunk_off = off;
    r->pos = off + MT_CHUNK_HEADER_SIZE + clen;
    if (mt_lanes_split(r->raw, rlen, r->lane) != 0)
        return set_failed(r, MT_READ_CORRUPT, off, "bad lane directory");
    mt_codec_reset(&r->codec);
    return MT_READ_RECORD;
}

mt_read_status mt_reader_next(mt_reader *r, mt_record *out)
{
    if (r->failed) return r->failed;
    mt_cursor *main_lane = &r->lane[MT_LANE_MAIN];
    while (main_lane->p >= main_lane->end) {
        /* the main lane is done: so must be the others, or the chunk lied about its records */
        for (int i = 0; i < MT_LANES; i++)
            if (r->lane[i].p != r->lane[i].end)
                return set_failed(r, MT_READ_CORRUPT, r->chunk_off, "lane not used up");
        mt_read_status st = load_chunk(r);
        if (st != MT_READ_RECORD) return st;
    }
    if (mt_decode_record(&r->codec, r->lane, out) != 0) {
        char what[96];
        snprintf(what, sizeof what, "undecodable record at byte %zu of the chunk's payload",
                 (size_t)(main_lane->p - r->raw));
        memset(out, 0, sizeof *out);
        return set_failed(r, MT_READ_CORRUPT, r->chunk_off, what);
    }
    return MT_READ_RECORD;
}

const mt_file_header *mt_reader_header(const mt_reader *r)
{
    return &r->header;
}
const char *mt_reader_error(const mt_reader *r)
{
    return r->failed ? r->err : "";
}
uint64_t mt_reader_error_offset(const mt_reader *r)
{
    return r->err_off;
}
uint64_t mt_reader_offset(const mt_reader *r)
{
    return r->chunk_off;
}
uint64_t mt_reader_file_size(const mt_reader *r)
{
    return r->file_size;
}
