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
 * Loading a chunk (read, CRC, inflate) is chunk_load.c's; on two threads the next chunk may have
 * been loaded already by a thread that had nothing else to do (ahead.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ahead.h"
#include "feed.h"
#include "layout.h"

#define RESYNC_SLACK (16u << 20) /* budget for false chunk starts on top of 2x the file size */
#define SCAN_BLOCK 65536

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

/* Loads the chunk at off into the next chunk buffer (a candidate of a resync is charged to the
 * budget). On MT_CH_IO the feed has failed.
 *
 * With a helper (ahead.h), the chunk may be loaded already; if not, the chunk after it is offered
 * as soon as this one's header is read, so that a helper inflates that one while the feed inflates
 * this. A resync's candidates offer nothing: most are not chunks. */
static mt_chunk_status try_chunk(mt_feed *f, uint64_t off, int candidate, char *why, size_t wlen)
{
    mt_chunk ch;
    mt_chunk_status st;
    uint8_t **raw = &f->raws[f->cur_raw];
    size_t *cap = &f->raw_caps[f->cur_raw];
    mt_ahead *ahead = candidate ? NULL : f->ahead;
    if (ahead && mt_ahead_take(ahead, off, raw, cap, &ch, &f->io.file_size)) {
        mt_ahead_offer(ahead, ch.end);
        st = MT_CH_OK; /* every check passed, on the helper's thread */
    } else {
        st = mt_chunk_head(&f->io, off, &ch, why, wlen);
        if (st == MT_CH_OK) {
            if (ahead) mt_ahead_offer(ahead, ch.end);
            st = mt_chunk_body(&f->io, &ch, candidate ? &f->budget : NULL, raw, cap, why, wlen);
        }
    }
    if (st == MT_CH_IO) mt_feed_fail(f, MT_READ_IO, off, why);
    if (st != MT_CH_OK) return st;
    f->raw = *raw;
    if (mt_lanes_split(f->raw, ch.rlen, f->lane, f->version) != 0) {
        snprintf(why, wlen, "bad lane directory");
        return MT_CH_BAD;
    }
    if (candidate) f->budget += (uint64_t)ch.clen + ch.rlen; /* a real chunk costs nothing */
    if (f->ahead) mt_ahead_earn(f->ahead, ch.clen, ch.rlen);
    f->chunks_loaded++;
    f->chunk_off = off;
    f->chunk_end = f->pos = ch.end;
    mt_codec_reset(&f->codec, f->version);
    return MT_CH_OK;
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

/* The chunk at off failed with `first` (MT_CH_SHORT or MT_CH_BAD, reason why): find the next good one.
 * Returns MT_READ_RECORD with it loaded, MT_READ_END, TRUNCATED or IO. */
static mt_read_status resync(mt_feed *f, uint64_t off, mt_chunk_status first, const char *why)
{
    char first_why[200], cand_why[128], trunc_why[128] = "";
    snprintf(first_why, sizeof first_why, "%s", why);
    uint64_t trunc_at = UINT64_MAX;
    if (first == MT_CH_SHORT) {
        trunc_at = off;
        snprintf(trunc_why, sizeof trunc_why, "%s", why);
    }
    for (uint64_t q = off + 1; f->budget > 0;) {
        if (f->stop && atomic_load_explicit(f->stop, memory_order_relaxed))
            return mt_feed_fail(f, MT_READ_IO, q, "reading stopped"); /* the reader is closing */
        if (find_magic(f, q, &q) != 0) return f->failed;
        if (q == UINT64_MAX) break;
        mt_chunk_status st = try_chunk(f, q, 1, cand_why, sizeof cand_why);
        if (st == MT_CH_IO) return f->failed;
        if (st == MT_CH_OK) {
            note_damage(f, off, q, first_why);
            return MT_READ_RECORD;
        }
        if (st == MT_CH_SHORT && trunc_at == UINT64_MAX) {
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
    if (fstat(f->fd, &st) == 0 && (uint64_t)st.st_size > f->io.file_size)
        f->io.file_size = (uint64_t)st.st_size;
    note_damage(f, off, f->io.file_size, first_why);
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
    mt_chunk_status st = try_chunk(f, off, 0, why, sizeof why);
    switch (st) {
    case MT_CH_OK: return MT_READ_RECORD;
    case MT_CH_END: f->at_end = 1; return MT_READ_END;
    case MT_CH_IO: return f->failed;
    default: break;
    }
    if (f->strict)
        return mt_feed_fail(f, st == MT_CH_SHORT ? MT_READ_TRUNCATED : MT_READ_CORRUPT, off, why);
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
                 uint64_t start, unsigned n_raws, int ahead)
{
    memset(f, 0, sizeof *f);
    f->version = version;
    f->n_raws = n_raws < 1 ? 1 : n_raws > MT_FEED_MAX_RAWS ? MT_FEED_MAX_RAWS : n_raws;
    f->fd = fd;
    f->path = path;
    f->pos = f->chunk_off = f->chunk_end = start;
    f->budget = 2 * file_size + RESYNC_SLACK;
    mt_ctxless_init(&f->ctxless);
    if (mt_chunk_io_init(&f->io, fd, file_size) != 0) return -1;
    if (ahead) {
        if (!(f->ahead = malloc(sizeof *f->ahead))) return -1;
        if (mt_ahead_init(f->ahead, fd, file_size) != 0) {
            free(f->ahead);
            f->ahead = NULL;
            return -1;
        }
    }
    return 0;
}

void mt_feed_free(mt_feed *f)
{
    if (f->ahead) {
        mt_ahead_free(f->ahead);
        free(f->ahead);
    }
    mt_chunk_io_free(&f->io);
    mt_ctxless_free(&f->ctxless);
    for (unsigned i = 0; i < MT_FEED_MAX_RAWS; i++) free(f->raws[i]);
    memset(f, 0, sizeof *f);
}
