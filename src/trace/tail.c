/* tail.c — the symbols a trace ends with, found from its end (mt_reader_tail_symbols).
 *
 * Why: `memtrace record` and `memtrace symbolize` name the native frames once the program has
 * ended, and append the names as SYMBOL records, in chunks of their own, after the recording's
 * END. The analysis of a --tensors trace needs those names while it reads the events (a tensor's
 * category comes from its stack's names), so it reads these chunks before the rest instead of
 * reading the whole trace a second time.
 *
 * How: a chunk carries no pointer back. The last one is found by looking backwards from the end
 * of the file for a chunk header ("MTCK") whose compressed length makes the chunk end exactly at
 * the end of the file; it must then load like any chunk (CRC, inflate, lanes: the feed, strict)
 * and hold only SYMBOL records. Then the chunk that ends where it starts, and so on. The first
 * chunk that holds anything else (the recording's last, with its END), or that is not found, or
 * fails a check, ends the walk: the symbols begin after it. They are then read forwards, in file
 * order, as any reader would give them.
 *
 * Linear on any input: the backward search reads each byte between the end of the file and the
 * start of the last chunk it finds (or the first chunk of the file, or one chunk's largest size
 * back) once, and the first candidate whose lengths fit is taken or the walk ends, so a forged
 * header costs at most one chunk's check.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "feed.h"
#include "layout.h"

#define BACK_BLOCK 65536

/* The start of the chunk that ends at `end`: the highest p in [first, end) where a chunk header
 * starts whose compressed length ends the chunk at `end`. 0 (found), 1 (none), -1 (read error). */
static int chunk_ending_at(int fd, uint64_t first, uint64_t end, uint64_t *start)
{
    if (end < first || end - first < MT_CHUNK_HEADER_SIZE + 1) return 1;
    uint64_t reach = compressBound(MT_CHUNK_RAW_MAX) + MT_CHUNK_HEADER_SIZE;
    uint64_t lowest = end - first > reach ? end - reach : first;
    uint8_t *buf = malloc(BACK_BLOCK + MT_CHUNK_HEADER_SIZE);
    if (!buf) return -1;
    int rc = 1;
    /* candidates [bot, top) per block, read with the 15 bytes after them (a whole header) */
    for (uint64_t top = end - MT_CHUNK_HEADER_SIZE; top > lowest && rc == 1;) {
        uint64_t bot = top - lowest > BACK_BLOCK ? top - BACK_BLOCK : lowest;
        size_t n = (size_t)(top - bot) + MT_CHUNK_HEADER_SIZE - 1;
        if (mt_pread_full(fd, buf, n, bot) != (ssize_t)n) {
            rc = -1;
            break;
        }
        for (size_t i = (size_t)(top - bot); i-- > 0;) {
            if (buf[i] != 'M' || memcmp(buf + i, MT_CHUNK_MAGIC, 4) != 0) continue;
            uint64_t p = bot + i;
            uint32_t clen = mt_get_le32(buf + i + 4), rlen = mt_get_le32(buf + i + 8);
            if ((uint64_t)clen != end - p - MT_CHUNK_HEADER_SIZE) continue;
            if (rlen == 0 || rlen > MT_CHUNK_RAW_MAX || clen > compressBound(rlen)) {
                rc = 1; /* it fits but cannot be a chunk: the walk ends */
                top = lowest;
                break;
            }
            *start = p;
            rc = 0;
            break;
        }
        if (rc == 1 && top != lowest) top = bot;
    }
    free(buf);
    return rc;
}

/* 1 when the chunk at off loads (strict: every check) and holds only SYMBOL records, 0 when not,
 * -1 on a read error. */
static int symbols_only(int fd, const char *path, unsigned version, uint64_t off,
                        uint64_t file_size)
{
    mt_feed f;
    if (mt_feed_init(&f, fd, path, version, file_size, off, 1, 0) != 0) {
        mt_feed_free(&f);
        return -1;
    }
    f.strict = 1;
    mt_record rec;
    int n = 0, others = 0;
    mt_read_status st;
    while ((st = mt_feed_next(&f, &rec)) == MT_READ_RECORD && f.chunk_off == off && !others) {
        n++;
        others = rec.type != MT_REC_SYMBOL;
    }
    mt_feed_free(&f);
    if (st == MT_READ_IO) return -1;
    return n > 0 && !others;
}

int mt_tail_symbols(int fd, const char *path, unsigned version, uint64_t first, uint64_t file_size,
                    uint64_t *start, int (*fn)(void *, const mt_record *), void *ctx)
{
    uint64_t from = file_size, p;
    *start = file_size;
    for (;;) {
        int rc = chunk_ending_at(fd, first, from, &p);
        if (rc == 0) {
            int only = symbols_only(fd, path, version, p, file_size);
            rc = only < 0 ? -1 : only ? 0 : 1;
        }
        if (rc < 0) return -1;
        if (rc) break;
        from = p;
    }
    *start = from;
    if (from == file_size) return 0;
    /* forwards, in file order (each chunk was checked above) */
    mt_feed f;
    int rc = mt_feed_init(&f, fd, path, version, file_size, from, 1, 0);
    f.strict = 1;
    mt_record rec;
    mt_read_status st = MT_READ_IO;
    while (rc == 0 && (st = mt_feed_next(&f, &rec)) == MT_READ_RECORD)
        if (rec.type == MT_REC_SYMBOL && fn(ctx, &rec) < 0) rc = -1;
    if (rc == 0 && st != MT_READ_END) rc = -1;
    mt_feed_free(&f);
    return rc;
}
