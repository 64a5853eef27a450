/* reader.c — file -> chunks -> records, one chunk in memory at a time.
 *
 * Every length read from the file is checked before it is used: chunk lengths against
 * MT_CHUNK_RAW_MAX, compressBound and the bytes the file still has, the inflated size against the
 * header's raw length, every field inside against the bytes left (mt_cursor). So any input, cut
 * or corrupted or hostile, ends in a clean status, never a crash.
 *
 * Chunks are independent (each has its own CRC and starts its codec from zero), so one bad chunk
 * need not cost the rest of the file. By default the reader steps over damage: when a chunk fails
 * a check (bad magic, impossible lengths, CRC, inflate, lane directory) it looks for the next
 * "MTCK" after the bad chunk's first byte and takes the first candidate that passes every check;
 * when a record inside a chunk whose CRC passed does not decode, the rest of that chunk is dropped
 * and reading goes on at the chunk's end (its lengths are covered by the CRC). Each such region
 * counts as one damaged chunk; mt_reader_damage says how many and how many file bytes they held.
 * In strict mode (mt_reader_set_strict) the first damage is MT_READ_CORRUPT instead, sticky.
 *
 * Linear time on any input: the search for the next magic reads each byte of a damaged region
 * once, and the payloads of candidates that fail are charged to a budget of twice the file's size
 * plus 16 MiB; once it is spent, the rest of the file counts as damaged (a file built of false
 * chunk headers cannot make the reader quadratic).
 *
 * The file is read with pread(2): several readers may share one descriptor (mt_analyze's two
 * passes over a copied pipe), and the file may grow while it is read (symbols appended).
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

#define RESYNC_SLACK (16u << 20) /* budget for false chunk starts on top of 2x the file size */
#define SCAN_BLOCK 65536

struct mt_reader {
    int fd; /* our own descriptor (a dup when opened from one) */
    char *path;
    mt_file_header header;
    uint64_t file_size; /* at open, refreshed when a chunk seems to run past it */
    uint64_t pos;       /* file offset of the next chunk to load */
    uint64_t chunk_off; /* file offset of the chunk whose records we are returning */
    uint64_t chunk_end; /* ... and of the byte after it */
    uint8_t *comp;      /* compressed payload of the current chunk */
    size_t comp_cap;
    uint8_t *raw; /* its records */
    size_t raw_cap;
    mt_cursor lane[MT_LANES]; /* positions in raw's lanes */
    mt_codec codec;
    z_stream z;
    int z_ready;
    int strict, at_end;
    mt_read_status failed; /* 0 = healthy, else the sticky status */
    uint64_t err_off;
    char err[256];
    uint64_t damaged_chunks, damaged_bytes, damage_off;
    char damage[256];
    uint64_t budget; /* candidate bytes a resync may still examine */
};

/* Reads up to n bytes at off; returns how many (short only at end of file), or -1. */
static ssize_t pread_full(int fd, uint8_t *p, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, p + got, n - got, (off_t)(off + got));
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

/* Counts [off, end) as one damaged region; the first one's reason is kept. */
static void note_damage(mt_reader *r, uint64_t off, uint64_t end, const char *what)
{
    if (!r->damaged_chunks) {
        r->damage_off = off;
        snprintf(r->damage, sizeof r->damage, "%s: offset %llu: %s", r->path,
                 (unsigned long long)off, what);
    }
    r->damaged_chunks++;
    r->damaged_bytes += end > off ? end - off : 0;
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

mt_reader *mt_reader_open_fd(int fd, const char *name, char *err, size_t errlen)
{
    const char *path = name ? name : "trace";
    struct stat st;
    if (fstat(fd, &st) != 0) {
        open_error(err, errlen, "%s: offset 0: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        open_error(err, errlen, "%s: offset 0: not a regular file", path);
        return NULL;
    }
    uint8_t h[MT_FILE_HEADER_SIZE];
    ssize_t got = pread_full(fd, h, sizeof h, 0);
    if (got < 0) {
        open_error(err, errlen, "%s: offset 0: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    /* check the magic on what we have first: a short non-trace file is "not a trace" */
    size_t cmp = (size_t)got < 8 ? (size_t)got : 8;
    if (memcmp(h, MT_TRACE_MAGIC, cmp) != 0) {
        open_error(err, errlen, "%s: offset 0: not a memtrace file (bad magic)", path);
        return NULL;
    }
    if ((size_t)got < sizeof h) {
        open_error(err, errlen, "%s: offset %zd: file too short for the %d-byte header", path, got,
                   MT_FILE_HEADER_SIZE);
        return NULL;
    }
    uint16_t version = mt_get_le16(h + MT_HDR_OFF_VERSION);
    uint16_t hsize = mt_get_le16(h + MT_HDR_OFF_SIZE);
    if (version == 0 || version > MT_TRACE_VERSION) {
        open_error(err, errlen,
                   "%s: offset %d: trace format version %u is not supported (this reader "
                   "reads 1..%d)",
                   path, MT_HDR_OFF_VERSION, version, MT_TRACE_VERSION);
        return NULL;
    }
    if (hsize < MT_FILE_HEADER_SIZE || hsize > MT_HDR_MAX_SIZE) {
        open_error(err, errlen, "%s: offset %d: bad header size %u", path, MT_HDR_OFF_SIZE, hsize);
        return NULL;
    }
    /* a larger header (a later minor revision) has fields we do not know: they are skipped */
    if ((uint64_t)st.st_size < hsize && S_ISREG(st.st_mode)) {
        open_error(err, errlen, "%s: offset %d: file too short for the %u-byte header", path,
                   MT_FILE_HEADER_SIZE, hsize);
        return NULL;
    }

    mt_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path)) || inflateInit(&r->z) != Z_OK) {
        open_error(err, errlen, "%s: offset 0: out of memory", path);
        if (r) free(r->path);
        free(r);
        return NULL;
    }
    r->z_ready = 1;
    r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        open_error(err, errlen, "%s: offset 0: %s", path, strerror(errno));
        mt_reader_close(r);
        return NULL;
    }
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
    r->file_size = (uint64_t)st.st_size;
    r->pos = r->chunk_off = r->chunk_end = hsize;
    r->budget = 2 * r->file_size + RESYNC_SLACK;
    return r;
}

mt_reader *mt_reader_open(const char *path, char *err, size_t errlen)
{
    int fd = mt_input_open(path, err, errlen);
    if (fd < 0) return NULL;
    mt_reader *r = mt_reader_open_fd(fd, path, err, errlen);
    close(fd);
    return r;
}

void mt_reader_set_strict(mt_reader *r, int strict)
{
    r->strict = strict;
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

typedef enum chunk_status {
    CH_OK,    /* loaded: the lanes hold its records */
    CH_END,   /* off is the end of the file */
    CH_SHORT, /* a plausible chunk that the file ends inside */
    CH_BAD,   /* fails a check */
    CH_IO,    /* read(2) failed or out of memory (r->failed is set) */
} chunk_status;

/* Loads, checks and inflates the chunk at off. A candidate (resync) is charged to the budget. */
static chunk_status try_chunk(mt_reader *r, uint64_t off, int candidate, char *why, size_t wlen)
{
    uint8_t h[MT_CHUNK_HEADER_SIZE];
    ssize_t got = pread_full(r->fd, h, sizeof h, off);
    if (got < 0) {
        set_failed(r, MT_READ_IO, off, strerror(errno));
        return CH_IO;
    }
    if (got == 0) return CH_END;
    size_t cmp = (size_t)got < 4 ? (size_t)got : 4;
    if (memcmp(h, MT_CHUNK_MAGIC, cmp) != 0) {
        snprintf(why, wlen, "bad chunk magic");
        return CH_BAD;
    }
    if ((size_t)got < sizeof h) {
        snprintf(why, wlen, "truncated chunk header");
        return CH_SHORT;
    }
    uint32_t clen = mt_get_le32(h + 4), rlen = mt_get_le32(h + 8), crc = mt_get_le32(h + 12);
    if (rlen == 0 || rlen > MT_CHUNK_RAW_MAX || clen == 0 || clen > compressBound(rlen)) {
        snprintf(why, wlen, "impossible chunk lengths");
        return CH_BAD;
    }
    uint64_t payload = off + MT_CHUNK_HEADER_SIZE;
    if (payload + clen > r->file_size) { /* the file may have grown since we looked */
        struct stat st;
        if (fstat(r->fd, &st) == 0 && (uint64_t)st.st_size > r->file_size)
            r->file_size = (uint64_t)st.st_size;
    }
    if (payload + clen > r->file_size) {
        uint64_t have = r->file_size > payload ? r->file_size - payload : 0;
        snprintf(why, wlen, "truncated chunk (%llu of %u payload bytes)", (unsigned long long)have,
                 clen);
        return CH_SHORT;
    }
    if (candidate) {
        uint64_t cost = (uint64_t)clen + rlen;
        if (cost > r->budget) {
            r->budget = 0;
            snprintf(why, wlen, "too many false chunk starts to look further");
            return CH_BAD;
        }
        r->budget -= cost;
    }
    if (reserve(&r->comp, &r->comp_cap, clen)) {
        set_failed(r, MT_READ_IO, off, "out of memory");
        return CH_IO;
    }
    got = pread_full(r->fd, r->comp, clen, payload);
    if (got < 0) {
        set_failed(r, MT_READ_IO, off, strerror(errno));
        return CH_IO;
    }
    if ((size_t)got < clen) {
        snprintf(why, wlen, "truncated chunk (%zd of %u payload bytes)", got, clen);
        return CH_SHORT;
    }
    uLong sum = crc32(0L, h + 4, 8);
    sum = crc32(sum, r->comp, clen);
    if ((uint32_t)sum != crc) {
        snprintf(why, wlen, "chunk CRC mismatch");
        return CH_BAD;
    }
    if (reserve(&r->raw, &r->raw_cap, rlen)) {
        set_failed(r, MT_READ_IO, off, "out of memory");
        return CH_IO;
    }
    if (inflateReset(&r->z) != Z_OK) {
        set_failed(r, MT_READ_IO, off, "zlib reset failed");
        return CH_IO;
    }
    r->z.next_in = r->comp;
    r->z.avail_in = clen;
    r->z.next_out = r->raw;
    r->z.avail_out = rlen;
    int zr = inflate(&r->z, Z_FINISH);
    if (zr != Z_STREAM_END || r->z.total_out != rlen || r->z.avail_in != 0) {
        snprintf(why, wlen, "chunk payload does not inflate to its size");
        return CH_BAD;
    }
    if (mt_lanes_split(r->raw, rlen, r->lane) != 0) {
        snprintf(why, wlen, "bad lane directory");
        return CH_BAD;
    }
    if (candidate) r->budget += (uint64_t)clen + rlen; /* a real chunk costs nothing */
    r->chunk_off = off;
    r->chunk_end = r->pos = payload + clen;
    mt_codec_reset(&r->codec);
    return CH_OK;
}

/* The next offset >= from where "MTCK" starts, or UINT64_MAX when the file has none. Reads each
 * byte once. -1 on a read error (r->failed set). */
static int find_magic(mt_reader *r, uint64_t from, uint64_t *out)
{
    uint8_t buf[SCAN_BLOCK];
    for (uint64_t at = from;;) {
        ssize_t got = pread_full(r->fd, buf, sizeof buf, at);
        if (got < 0) {
            set_failed(r, MT_READ_IO, at, strerror(errno));
            return -1;
        }
        if ((size_t)got < 4) break;
        uint8_t *hit = memmem(buf, (size_t)got, MT_CHUNK_MAGIC, 4);
        if (hit) {
            *out = at + (uint64_t)(hit - buf);
            return 0;
        }
        if ((size_t)got < sizeof buf) break;
        at += (uint64_t)got - 3; /* a magic may straddle two blocks */
    }
    *out = UINT64_MAX;
    return 0;
}

/* The chunk at off failed with `first` (CH_SHORT or CH_BAD, reason why): find the next good one.
 * Returns MT_READ_RECORD with it loaded, MT_READ_END, TRUNCATED or IO. */
static mt_read_status resync(mt_reader *r, uint64_t off, chunk_status first, const char *why)
{
    char first_why[200], cand_why[128], trunc_why[128] = "";
    snprintf(first_why, sizeof first_why, "%s", why);
    uint64_t trunc_at = UINT64_MAX;
    if (first == CH_SHORT) {
        trunc_at = off;
        snprintf(trunc_why, sizeof trunc_why, "%s", why);
    }
    for (uint64_t q = off + 1; r->budget > 0;) {
        if (find_magic(r, q, &q) != 0) return r->failed;
        if (q == UINT64_MAX) break;
        chunk_status st = try_chunk(r, q, 1, cand_why, sizeof cand_why);
        if (st == CH_IO) return r->failed;
        if (st == CH_OK) {
            note_damage(r, off, q, first_why);
            return MT_READ_RECORD;
        }
        if (st == CH_SHORT && trunc_at == UINT64_MAX) {
            trunc_at = q;
            snprintf(trunc_why, sizeof trunc_why, "%s", cand_why);
        }
        q++;
    }
    if (!r->budget)
        snprintf(first_why, sizeof first_why, "%.100s (and too many false chunk starts after it "
                 "to look further)", why);
    if (trunc_at != UINT64_MAX && r->budget) {
        if (trunc_at > off) note_damage(r, off, trunc_at, first_why);
        return set_failed(r, MT_READ_TRUNCATED, trunc_at, trunc_why);
    }
    struct stat st;
    if (fstat(r->fd, &st) == 0 && (uint64_t)st.st_size > r->file_size)
        r->file_size = (uint64_t)st.st_size;
    note_damage(r, off, r->file_size, first_why);
    r->at_end = 1;
    return MT_READ_END;
}

/* Loads the chunk at r->pos. Returns MT_READ_RECORD when the lanes hold a fresh chunk,
 * MT_READ_END at the end of the file, or a failure status. */
static mt_read_status load_chunk(mt_reader *r)
{
    uint64_t off = r->pos;
    char why[128];
    chunk_status st = try_chunk(r, off, 0, why, sizeof why);
    switch (st) {
    case CH_OK: return MT_READ_RECORD;
    case CH_END: r->at_end = 1; return MT_READ_END;
    case CH_IO: return r->failed;
    default: break;
    }
    if (r->strict)
        return set_failed(r, st == CH_SHORT ? MT_READ_TRUNCATED : MT_READ_CORRUPT, off, why);
    return resync(r, off, st, why);
}

/* The chunk being read turned out damaged at a record (`what`): strict mode fails; otherwise the
 * rest of it is dropped and counted, and reading goes on at its end. */
static mt_read_status drop_chunk(mt_reader *r, const char *what)
{
    if (r->strict) return set_failed(r, MT_READ_CORRUPT, r->chunk_off, what);
    note_damage(r, r->chunk_off, r->chunk_end, what);
    for (int i = 0; i < MT_LANES; i++) r->lane[i].p = r->lane[i].end;
    return MT_READ_RECORD;
}

mt_read_status mt_reader_next(mt_reader *r, mt_record *out)
{
    for (;;) {
        if (r->failed) return r->failed;
        if (r->at_end) return MT_READ_END;
        mt_cursor *main_lane = &r->lane[MT_LANE_MAIN];
        if (main_lane->p >= main_lane->end) {
            /* the main lane is done: so must be the others, or the chunk lied about its records */
            for (int i = 0; i < MT_LANES; i++)
                if (r->lane[i].p != r->lane[i].end) {
                    if (drop_chunk(r, "lane not used up") != MT_READ_RECORD) return r->failed;
                    break;
                }
            mt_read_status st = load_chunk(r);
            if (st != MT_READ_RECORD) return st;
            continue;
        }
        if (mt_decode_record(&r->codec, r->lane, out) == 0) return MT_READ_RECORD;
        char what[96];
        snprintf(what, sizeof what, "undecodable record at byte %zu of the chunk's payload",
                 (size_t)(main_lane->p - r->raw));
        memset(out, 0, sizeof *out);
        if (drop_chunk(r, what) != MT_READ_RECORD) return r->failed;
    }
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
void mt_reader_damage(const mt_reader *r, mt_read_damage *out)
{
    out->chunks = r->damaged_chunks;
    out->bytes = r->damaged_bytes;
    out->first_offset = r->damage_off;
    out->first = r->damaged_chunks ? r->damage : "";
}
