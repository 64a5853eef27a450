/* writer.c — records -> chunks -> write(2). Framing: layout.h; records: encode.c.
 *
 * Records are encoded into the lanes (encode.h), chunk_raw bytes over all lanes. When the next
 * record might not fit, or on flush/close, the lane directory and the lanes are gathered into
 * `raw` and deflated into `out` right after a 16-byte chunk header, and header and
 * payload go to the fd in one write_all, so a chunk on disk is whole unless the process died in
 * that very write — then it is the last thing in the file and the reader reports TRUNCATED.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "encode.h"
#include "layout.h"
#include "memtrace/trace.h"

/* Speed vs size: the writer runs inside the traced program, and under a burst of allocations its
 * deflate is what every producer ends up waiting for (72% of the writer thread's time at level 6,
 * bench_sink). Level 1 compresses an event stream 2.3-3x faster than level 6 for 4% more bytes
 * (bench_trace_size: 6.91 vs 6.65 B/event; bench_sink: 1.87 vs 1.67) on this project's 2-core
 * machine. A trace is read far more often than it is written, so size is won in the encoding
 * (docs/trace-format.md), not by making the program wait on deflate. */
#ifndef MT_DEFLATE_LEVEL
#define MT_DEFLATE_LEVEL 1
#endif

struct mt_writer {
    int fd;
    int error;        /* errno of the first failed write; sticky: every later call fails too */
    uint64_t written; /* file bytes, header included */
    uint8_t *lane[MT_LANES]; /* the current chunk's records, split in lanes */
    size_t lane_len[MT_LANES];
    size_t lane_alloc; /* bytes allocated per lane (grows past raw_cap for one oversized record) */
    size_t raw_cap;    /* nominal chunk size: bytes over all lanes */
    size_t raw_len;    /* bytes over all lanes so far */
    uint8_t *raw;      /* lane directory + lanes, gathered for deflate */
    size_t raw_alloc;
    uint8_t *out; /* chunk header + compressed payload */
    size_t out_cap;
    z_stream z;
    int z_ready;
    mt_codec codec;
    unsigned version; /* the format version written: the file's own when appending */
    int guard;       /* mt_writer_guard_fd: the fd must still be this file before each write */
    dev_t dev;
    ino_t ino;
};

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) { /* write(2) made no progress: report it rather than spin */
            errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Still the file the guard saw (always, without a guard). */
static int fd_is_ours(const mt_writer *w)
{
    struct stat st;
    return !w->guard || (fstat(w->fd, &st) == 0 && st.st_dev == w->dev && st.st_ino == w->ino);
}

static int fail(mt_writer *w)
{
    if (!w->error) w->error = errno ? errno : EIO;
    errno = w->error;
    return -1;
}

static void put_file_header(uint8_t h[MT_FILE_HEADER_SIZE], const mt_file_header *hdr,
                            unsigned version)
{
    memset(h, 0, MT_FILE_HEADER_SIZE);
    memcpy(h, MT_TRACE_MAGIC, 8);
    mt_put_le16(h + MT_HDR_OFF_VERSION, (uint16_t)version);
    mt_put_le16(h + MT_HDR_OFF_SIZE, MT_FILE_HEADER_SIZE);
    mt_put_le32(h + MT_HDR_OFF_PID, hdr->pid);
    mt_put_le64(h + MT_HDR_OFF_MONO, hdr->start_monotonic_ns);
    mt_put_le64(h + MT_HDR_OFF_REAL, hdr->start_realtime_ns);
    mt_put_le32(h + MT_HDR_OFF_FLAGS, hdr->flags);
    int has_rank = (hdr->flags & MT_HDR_RANK) != 0;
    mt_put_le32(h + MT_HDR_OFF_RANK, (uint32_t)(has_rank ? hdr->rank : 0));
    mt_put_le32(h + MT_HDR_OFF_LOCAL_RANK, (uint32_t)(has_rank ? hdr->local_rank : 0));
    mt_put_le32(h + MT_HDR_OFF_WORLD_SIZE, (uint32_t)(has_rank ? hdr->world_size : 0));
    mt_put_le32(h + MT_HDR_OFF_NODE_RANK, (uint32_t)(has_rank ? hdr->node_rank : 0));
}

/* The version of the file an appending writer continues: chunks must be in the header's format.
 * 0 when the header cannot be read (a write-only descriptor) or is not a trace we can write. */
static unsigned file_version(int fd)
{
    uint8_t h[MT_HDR_OFF_VERSION + 2];
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h, MT_TRACE_MAGIC, 8) != 0)
        return 0;
    unsigned v = mt_get_le16(h + MT_HDR_OFF_VERSION);
    return v >= 1 && v <= MT_TRACE_VERSION ? v : 0;
}

mt_writer *mt_writer_open_fd(int fd, const mt_file_header *hdr, size_t chunk_raw_bytes)
{
    unsigned version = hdr ? (hdr->version ? hdr->version : MT_TRACE_VERSION) : file_version(fd);
    if (version < 1 || version > MT_TRACE_VERSION) {
        errno = EINVAL;
        return NULL;
    }
    if (chunk_raw_bytes == 0) chunk_raw_bytes = MT_CHUNK_RAW_DEFAULT;
    if (chunk_raw_bytes > MT_CHUNK_RAW_MAX - MT_LANES_DIR_MAX)
        chunk_raw_bytes = MT_CHUNK_RAW_MAX - MT_LANES_DIR_MAX;
    mt_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->fd = fd;
    w->raw_cap = w->lane_alloc = chunk_raw_bytes;
    int lanes_ok = 1;
    for (int i = 0; i < MT_LANES; i++)
        lanes_ok &= (w->lane[i] = malloc(w->lane_alloc)) != NULL;
    w->raw_alloc = MT_LANES_DIR_MAX + w->lane_alloc;
    w->raw = malloc(w->raw_alloc);
    w->out_cap = MT_CHUNK_HEADER_SIZE + compressBound((uLong)w->raw_alloc);
    w->out = malloc(w->out_cap);
    if (!lanes_ok || !w->raw || !w->out || deflateInit(&w->z, MT_DEFLATE_LEVEL) != Z_OK) goto fail;
    w->z_ready = 1;
    w->version = version;
    mt_codec_reset(&w->codec, version);

    if (hdr) {
        uint8_t h[MT_FILE_HEADER_SIZE];
        put_file_header(h, hdr, version);
        if (write_all(fd, h, sizeof h) != 0) goto fail;
        w->written = MT_FILE_HEADER_SIZE;
    } else {
        /* appending: count what the file already holds so bytes_written stays "file size" */
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) w->written = (uint64_t)st.st_size;
    }
    return w;
fail:;
    int saved = errno;
    if (w->z_ready) deflateEnd(&w->z);
    for (int i = 0; i < MT_LANES; i++)
        free(w->lane[i]);
    free(w->raw);
    free(w->out);
    free(w);
    errno = saved;
    return NULL;
}

/* Gathers the lanes into raw, compresses it into out behind a chunk header, writes both at once. */
static int emit_chunk(mt_writer *w)
{
    if (w->raw_len == 0) return 0;
    size_t rlen = mt_lanes_put_dir(w->raw, w->lane_len, w->version);
    for (int i = 0; i < MT_LANES; i++) {
        memcpy(w->raw + rlen, w->lane[i], w->lane_len[i]);
        rlen += w->lane_len[i];
    }
    size_t need = MT_CHUNK_HEADER_SIZE + compressBound((uLong)rlen);
    if (need > w->out_cap) {
        uint8_t *n = realloc(w->out, need);
        if (!n) return -1;
        w->out = n;
        w->out_cap = need;
    }
    if (deflateReset(&w->z) != Z_OK) {
        errno = EIO;
        return -1;
    }
    w->z.next_in = w->raw;
    w->z.avail_in = (uInt)rlen;
    w->z.next_out = w->out + MT_CHUNK_HEADER_SIZE;
    w->z.avail_out = (uInt)(w->out_cap - MT_CHUNK_HEADER_SIZE);
    if (deflate(&w->z, Z_FINISH) != Z_STREAM_END) { /* cannot happen with compressBound room */
        errno = EIO;
        return -1;
    }
    size_t clen = w->z.total_out;

    uint8_t *h = w->out;
    memcpy(h, MT_CHUNK_MAGIC, 4);
    mt_put_le32(h + 4, (uint32_t)clen);
    mt_put_le32(h + 8, (uint32_t)rlen);
    uLong crc = crc32(0L, h + 4, 8);
    crc = crc32(crc, h + MT_CHUNK_HEADER_SIZE, (uInt)clen);
    mt_put_le32(h + 12, (uint32_t)crc);

    size_t total = MT_CHUNK_HEADER_SIZE + clen;
    if (!fd_is_ours(w)) { /* the program closed our fd and may have opened a file of its own on it */
        errno = EBADF;
        return -1;
    }
    if (write_all(w->fd, w->out, total) != 0) return -1;
    w->written += total;
    w->raw_len = 0;
    memset(w->lane_len, 0, sizeof w->lane_len);
    mt_codec_reset(&w->codec, w->version); /* every chunk decodes on its own */
    return 0;
}

/* One record larger than a chunk (long strings): the lanes grow so that it gets a chunk of its
 * own. Only possible while the chunk is empty, so nothing is lost on failure. */
static int grow_lanes(mt_writer *w, size_t bound)
{
    for (int i = 0; i < MT_LANES; i++) {
        uint8_t *n = realloc(w->lane[i], bound);
        if (!n) return -1;
        w->lane[i] = n;
    }
    w->lane_alloc = bound;
    uint8_t *n = realloc(w->raw, MT_LANES_DIR_MAX + bound);
    if (!n) return -1;
    w->raw = n;
    w->raw_alloc = MT_LANES_DIR_MAX + bound;
    return 0;
}

int mt_writer_put(mt_writer *w, const mt_record *r)
{
    if (w->error) return fail(w);
    size_t bound = mt_encode_bound(r);
    if (bound == 0 || bound > MT_CHUNK_RAW_MAX - MT_LANES_DIR_MAX) {
        /* unknown type, or a record no reader would accept: refused, but the file is fine */
        errno = bound == 0 ? EINVAL : EMSGSIZE;
        return -1;
    }
    if (w->raw_len + bound > w->raw_cap) {
        if (emit_chunk(w) != 0) return fail(w);
        if (bound > w->lane_alloc && grow_lanes(w, bound) != 0)
            return -1; /* ENOMEM: the record is lost, the writer is still usable */
    }
    uint8_t *at[MT_LANES];
    for (int i = 0; i < MT_LANES; i++)
        at[i] = w->lane[i] + w->lane_len[i];
    w->raw_len += mt_encode_record(&w->codec, at, r);
    for (int i = 0; i < MT_LANES; i++)
        w->lane_len[i] = (size_t)(at[i] - w->lane[i]);
    if (w->raw_len >= w->raw_cap && emit_chunk(w) != 0) return fail(w);
    return 0;
}

int mt_writer_flush(mt_writer *w)
{
    if (w->error) return fail(w);
    return emit_chunk(w) == 0 ? 0 : fail(w);
}

int mt_writer_guard_fd(mt_writer *w)
{
    struct stat st;
    if (fstat(w->fd, &st) != 0) return -1;
    w->dev = st.st_dev;
    w->ino = st.st_ino;
    w->guard = 1;
    return 0;
}

int mt_writer_close(mt_writer *w, int close_fd)
{
    if (!w) return 0;
    int rc = mt_writer_flush(w);
    int saved = errno;
    /* an fd the program took over is its own now: never closed by us */
    if (close_fd && fd_is_ours(w) && close(w->fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    deflateEnd(&w->z);
    for (int i = 0; i < MT_LANES; i++)
        free(w->lane[i]);
    free(w->raw);
    free(w->out);
    free(w);
    errno = saved;
    return rc;
}

uint64_t mt_writer_bytes_written(const mt_writer *w)
{
    return w->written;
}
