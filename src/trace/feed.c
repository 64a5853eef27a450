/* feed.c — file -> chunks -> records, one chunk in memory at a time (feed.h).
 *
 * Every length read from the file is checked before it is used: chunk lengths against
 * MT_CHUNK_RAW_MAX, the deflate bound and the bytes the file still has, the inflated size against
 * the header's raw length, every field inside against the bytes left (mt_cursor). So any input,
 * cut or corrupted or hostile, ends in a clean status, never a crash.
 *
 * Chunks are independent (each has its own CRC and starts its codec from zero), so one bad chunk
 * need not cost the rest of the file. By default the feed steps over damage: when a chunk fails
 * a check (bad magic, impossible lengths, CRC, inflate, lane directory) it looks for the next
 * "MTCK" after the bad chunk's first byte and takes the first candidate that passes every check;
 * when a record inside a chunk whose CRC passed does not decode, the rest of that chunk is dropped
 * and reading goes on at the chunk's end (its lengths are covered by the CRC). Each such region
 * counts as one damaged chunk. In strict mode the first damage is MT_READ_CORRUPT instead, sticky.
 *
 * Linear time on any input: the search for the next magic reads each byte of a damaged region
 * once, and the payloads of candidates that fail are charged to a budget of twice the file's size
 * plus 16 MiB; once it is spent, the rest of the file counts as damaged (a file built of false
 * chunk headers cannot make the feed quadratic).
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
#include <unistd.h>
#include <zlib.h>

#include "feed.h"
#include "layout.h"

#define RESYNC_SLACK (16u << 20) /* budget for false chunk starts on top of 2x the file size */
#define SCAN_BLOCK 65536

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

/* Reads up to n bytes at off; returns how many (short only at end of file), or -1. */
ssize_t mt_pread_full(int fd, uint8_t *p, size_t n, uint64_t off)
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

mt_read_status mt_feed_fail(mt_feed *f, mt_read_status st, uint64_t off, const char *what)
{
    f->failed = st;
    f->err_off = off;
    snprintf(f->err, sizeof f->err, "%s: offset %llu: %s", f->path, (unsigned long long)off, what);
    return st;
}

/* Counts [off, end) as one damaged region; the first one's reason is kept. */
static void note_damage(mt_feed *f, uint64_t off, uint64_t end, const char *what)
{
    if (!f->damaged_chunks) {
        f->damage_off = off;
        snprintf(f->damage, sizeof f->damage, "%s: offset %llu: %s", f->path,
                 (unsigned long long)off, what);
    }
    f->damaged_chunks++;
    f->damaged_bytes += end > off ? end - off : 0;
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
    CH_IO,    /* read(2) failed or out of memory (f->failed is set) */
} chunk_status;

/* Loads, checks and inflates the chunk at off. A candidate (resync) is charged to the budget. */
static chunk_status try_chunk(mt_feed *f, uint64_t off, int candidate, char *why, size_t wlen)
{
    uint8_t h[MT_CHUNK_HEADER_SIZE];
    ssize_t got = mt_pread_full(f->fd, h, sizeof h, off);
    if (got < 0) {
        mt_feed_fail(f, MT_READ_IO, off, strerror(errno));
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
    if (payload + clen > f->file_size) { /* the file may have grown since we looked */
        struct stat st;
        if (fstat(f->fd, &st) == 0 && (uint64_t)st.st_size > f->file_size)
            f->file_size = (uint64_t)st.st_size;
    }
    if (payload + clen > f->file_size) {
        uint64_t have = f->file_size > payload ? f->file_size - payload : 0;
        snprintf(why, wlen, "truncated chunk (%llu of %u payload bytes)", (unsigned long long)have,
                 clen);
        return CH_SHORT;
    }
    if (candidate) {
        uint64_t cost = (uint64_t)clen + rlen;
        if (cost > f->budget) {
            f->budget = 0;
            snprintf(why, wlen, "too many false chunk starts to look further");
            return CH_BAD;
        }
        f->budget -= cost;
    }
    if (reserve(&f->comp, &f->comp_cap, clen)) {
        mt_feed_fail(f, MT_READ_IO, off, "out of memory");
        return CH_IO;
    }
    got = mt_pread_full(f->fd, f->comp, clen, payload);
    if (got < 0) {
        mt_feed_fail(f, MT_READ_IO, off, strerror(errno));
        return CH_IO;
    }
    if ((size_t)got < clen) {
        snprintf(why, wlen, "truncated chunk (%zd of %u payload bytes)", got, clen);
        return CH_SHORT;
    }
    uint32_t sum = libdeflate_crc32(0, h + 4, 8);
    sum = libdeflate_crc32(sum, f->comp, clen);
    if (sum != crc) {
        snprintf(why, wlen, "chunk CRC mismatch");
        return CH_BAD;
    }
    if (reserve(&f->raws[f->cur_raw], &f->raw_caps[f->cur_raw], rlen)) {
        mt_feed_fail(f, MT_READ_IO, off, "out of memory");
        return CH_IO;
    }
    f->raw = f->raws[f->cur_raw];
    if (inflate_zlib(f->inflater, f->comp, clen, f->raw, rlen) != 0) {
        snprintf(why, wlen, "chunk payload does not inflate to its size");
        return CH_BAD;
    }
    if (mt_lanes_split(f->raw, rlen, f->lane, f->version) != 0) {
        snprintf(why, wlen, "bad lane directory");
        return CH_BAD;
    }
    if (candidate) f->budget += (uint64_t)clen + rlen; /* a real chunk costs nothing */
    f->chunks_loaded++;
    f->chunk_off = off;
    f->chunk_end = f->pos = payload + clen;
    mt_codec_reset(&f->codec, f->version);
    return CH_OK;
}

/* The next offset >= from where "MTCK" starts, or UINT64_MAX when the file has none. Reads each
 * byte once. -1 on a read error (f->failed set). */
static int find_magic(mt_feed *f, uint64_t from, uint64_t *out)
{
    uint8_t buf[SCAN_BLOCK];
    for (uint64_t at = from;;) {
        ssize_t got = mt_pread_full(f->fd, buf, sizeof buf, at);
        if (got < 0) {
            mt_feed_fail(f, MT_READ_IO, at, strerror(errno));
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
static mt_read_status resync(mt_feed *f, uint64_t off, chunk_status first, const char *why)
{
    char first_why[200], cand_why[128], trunc_why[128] = "";
    snprintf(first_why, sizeof first_why, "%s", why);
    uint64_t trunc_at = UINT64_MAX;
    if (first == CH_SHORT) {
        trunc_at = off;
        snprintf(trunc_why, sizeof trunc_why, "%s", why);
    }
    for (uint64_t q = off + 1; f->budget > 0;) {
        if (f->stop && atomic_load_explicit(f->stop, memory_order_relaxed))
            return mt_feed_fail(f, MT_READ_IO, q, "reading stopped"); /* the reader is closing */
        if (find_magic(f, q, &q) != 0) return f->failed;
        if (q == UINT64_MAX) break;
        chunk_status st = try_chunk(f, q, 1, cand_why, sizeof cand_why);
        if (st == CH_IO) return f->failed;
        if (st == CH_OK) {
            note_damage(f, off, q, first_why);
            return MT_READ_RECORD;
        }
        if (st == CH_SHORT && trunc_at == UINT64_MAX) {
            trunc_at = q;
            snprintf(trunc_why, sizeof trunc_why, "%s", cand_why);
        }
        q++;
    }
    if (!f->budget)
        snprintf(first_why, sizeof first_why, "%.100s (and too many false chunk starts after it "
                 "to look further)", why);
    if (trunc_at != UINT64_MAX && f->budget) {
        if (trunc_at > off) note_damage(f, off, trunc_at, first_why);
        return mt_feed_fail(f, MT_READ_TRUNCATED, trunc_at, trunc_why);
    }
    struct stat st;
    if (fstat(f->fd, &st) == 0 && (uint64_t)st.st_size > f->file_size)
        f->file_size = (uint64_t)st.st_size;
    note_damage(f, off, f->file_size, first_why);
    f->at_end = 1;
    return MT_READ_END;
}

/* Loads the chunk at f->pos. Returns MT_READ_RECORD when the lanes hold a fresh chunk,
 * MT_READ_END at the end of the file, or a failure status. */
static mt_read_status load_chunk(mt_feed *f)
{
    uint64_t off = f->pos;
    char why[128];
    f->cur_raw = (f->cur_raw + 1) % f->n_raws; /* the last n_raws - 1 chunks stay readable */
    chunk_status st = try_chunk(f, off, 0, why, sizeof why);
    switch (st) {
    case CH_OK: return MT_READ_RECORD;
    case CH_END: f->at_end = 1; return MT_READ_END;
    case CH_IO: return f->failed;
    default: break;
    }
    if (f->strict)
        return mt_feed_fail(f, st == CH_SHORT ? MT_READ_TRUNCATED : MT_READ_CORRUPT, off, why);
    return resync(f, off, st, why);
}

/* The chunk being read turned out damaged at a record (`what`): strict mode fails; otherwise the
 * rest of it is dropped and counted, and reading goes on at its end. */
static mt_read_status drop_chunk(mt_feed *f, const char *what)
{
    if (f->strict) return mt_feed_fail(f, MT_READ_CORRUPT, f->chunk_off, what);
    note_damage(f, f->chunk_off, f->chunk_end, what);
    for (int i = 0; i < MT_LANES; i++) f->lane[i].p = f->lane[i].end;
    return MT_READ_RECORD;
}

mt_read_status mt_feed_next(mt_feed *f, mt_record *out)
{
    for (;;) {
        if (f->failed) return f->failed;
        if (f->at_end) return MT_READ_END;
        mt_cursor *main_lane = &f->lane[MT_LANE_MAIN];
        if (main_lane->p >= main_lane->end) {
            /* the main lane is done: so must be the others, or the chunk lied about its records */
            for (int i = 0; i < MT_LANES; i++)
                if (f->lane[i].p != f->lane[i].end) {
                    if (drop_chunk(f, "lane not used up") != MT_READ_RECORD) return f->failed;
                    break;
                }
            mt_read_status st = load_chunk(f);
            if (st != MT_READ_RECORD) return st;
            continue;
        }
        if (mt_decode_record(&f->codec, f->lane, out) == 0) {
            if (out->type == MT_REC_EVENT) {
                if (mt_ctxless_wants(&out->u.event)) mt_ctxless_place(&f->ctxless, &out->u.event);
                mt_ctxless_seen(&f->ctxless, out->u.event.time_ns);
            } else if (out->type == MT_REC_SAMPLE) {
                mt_ctxless_seen(&f->ctxless, out->u.sample.time_ns);
            } else if (out->type == MT_REC_DEVICE) {
                mt_ctxless_device(&f->ctxless, out->u.device.ordinal);
            }
            return MT_READ_RECORD;
        }
        char what[96];
        snprintf(what, sizeof what, "undecodable record at byte %zu of the chunk's payload",
                 (size_t)(main_lane->p - f->raw));
        memset(out, 0, sizeof *out);
        if (drop_chunk(f, what) != MT_READ_RECORD) return f->failed;
    }
}

size_t mt_feed_events(mt_feed *f, mt_record *out, size_t max)
{
    if (f->failed || f->at_end) return 0;
    size_t n = mt_decode_events(&f->codec, f->lane, out, max); /* 0: the chunk's lanes are done */
    /* a run's events share their flags, context and device (a change is a rare field, which
     * ends the run), so the first tells whether any wants a device of the reader's choosing */
    if (n && mt_ctxless_wants(&out[0].u.event))
        for (size_t i = 0; i < n; i++)
            mt_ctxless_place(&f->ctxless, &out[i].u.event);
    /* the run's last stamp only: any stamp read before a DEVICE record bounds when its context
     * was made, so one per run is enough (and costs nothing per event) */
    if (n) mt_ctxless_seen(&f->ctxless, out[n - 1].u.event.time_ns);
    return n;
}

int mt_feed_init(mt_feed *f, int fd, const char *path, unsigned version, uint64_t file_size,
                 uint64_t start, unsigned n_raws)
{
    memset(f, 0, sizeof *f);
    f->version = version;
    f->n_raws = n_raws < 1 ? 1 : n_raws > MT_FEED_MAX_RAWS ? MT_FEED_MAX_RAWS : n_raws;
    f->fd = fd;
    f->path = path;
    f->file_size = file_size;
    f->pos = f->chunk_off = f->chunk_end = start;
    f->budget = 2 * file_size + RESYNC_SLACK;
    mt_ctxless_init(&f->ctxless);
    f->inflater = libdeflate_alloc_decompressor();
    return f->inflater ? 0 : -1;
}

void mt_feed_free(mt_feed *f)
{
    if (f->inflater) libdeflate_free_decompressor(f->inflater);
    mt_ctxless_free(&f->ctxless);
    free(f->comp);
    for (unsigned i = 0; i < MT_FEED_MAX_RAWS; i++) free(f->raws[i]);
    memset(f, 0, sizeof *f);
}
