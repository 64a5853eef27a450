/* feed.h — a trace file -> records, one chunk in memory at a time (private to src/trace).
 *
 * The feed loads and checks each chunk, inflates it, decodes its records in order, and steps over
 * damage (docs/trace-format.md, "Reading, truncation and corruption"). The reader (reader.c) owns
 * the file's header and descriptor and hands mt_reader_next to the feed; everything the feed
 * decides about chunks is in here.
 */
#ifndef MT_TRACE_FEED_H
#define MT_TRACE_FEED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chunk_load.h"
#include "contextless.h"
#include "encode.h"
#include "memtrace/trace.h"

struct mt_ahead;

#define MT_FEED_MAX_RAWS 8

typedef struct mt_feed {
    int fd;             /* the reader's descriptor, read with pread */
    unsigned version;   /* the file header's format version: lanes and event layout */
    const char *path;   /* the reader's, for messages */
    uint64_t pos;       /* file offset of the next chunk to load */
    uint64_t chunk_off; /* file offset of the chunk whose records we are returning */
    uint64_t chunk_end; /* ... and of the byte after it */
    mt_chunk_io io;     /* the file (its size: at open, refreshed when a chunk seems to run past
                         * it), the inflater, the compressed payload of the current chunk */
    struct mt_ahead *ahead; /* the next chunk loaded by an idle thread (ahead.h), or NULL */
    /* Its records: raws[cur_raw]. Each chunk goes into the next of n_raws buffers, so the records
     * (and strings) of the n_raws - 1 chunks before stay valid while it is read (reader.c's
     * second thread hands whole batches of them over). */
    uint8_t *raws[MT_FEED_MAX_RAWS];
    size_t raw_caps[MT_FEED_MAX_RAWS];
    unsigned n_raws, cur_raw;
    uint8_t *raw;             /* raws[cur_raw] */
    uint64_t chunks_loaded;   /* good chunks so far: a record of a new chunk follows a change */
    mt_cursor lane[MT_LANES]; /* positions in raw's lanes */
    mt_codec codec;
    int strict, at_end;
    mt_read_status failed; /* 0 = healthy, else the sticky status */
    uint64_t err_off;
    char err[256];
    uint64_t damaged_chunks, damaged_bytes, damage_off;
    char damage[256]; /* the first damaged region, written once */
    uint64_t budget;  /* candidate bytes a resync may still examine */
    atomic_int *stop; /* set when the reader closes: a long resync gives up (may be NULL) */
    mt_ctxless ctxless; /* the devices named so far, for events that name no context */
} mt_feed;

/* Starts reading chunks of format `version` at offset `start` of fd (whose size is file_size),
 * into n_raws (1..MT_FEED_MAX_RAWS) chunk buffers in turn; with `ahead`, offers each next chunk to
 * idle threads (f->ahead, mt_ahead_help). -1 when out of memory (mt_feed_free cleans up). */
int mt_feed_init(mt_feed *f, int fd, const char *path, unsigned version, uint64_t file_size,
                 uint64_t start, unsigned n_raws, int ahead);
void mt_feed_free(mt_feed *f);
/* The next record (strings point into the feed's chunk buffer until the next call), or the end
 * of the file, or a failure; failures are sticky. */
mt_read_status mt_feed_next(mt_feed *f, mt_record *out);
/* The plain events that follow in the current chunk (mt_decode_events), up to max, decoded into out
 * without a bound check per field; 0 at anything else (another record, the chunk's end, a
 * failure), which mt_feed_next then reads. Position and damage stay those of the chunk. */
size_t mt_feed_events(mt_feed *f, mt_record *out, size_t max);
/* Reads up to n bytes at off; returns how many (short only at end of file), or -1 (errno). */
ssize_t mt_pread_full(int fd, uint8_t *p, size_t n, uint64_t off);
/* Ends reading with st (sticky) and a reason at offset off. Returns st. */
mt_read_status mt_feed_fail(mt_feed *f, mt_read_status st, uint64_t off, const char *what);

/* tail.c: the SYMBOL records in the chunks that end the file (of format `version`, its first chunk
 * at `first`) and hold nothing else, through fn in file order; *start is where they begin
 * (file_size when there are none). 0, or -1 when a read fails or fn does. */
int mt_tail_symbols(int fd, const char *path, unsigned version, uint64_t first, uint64_t file_size,
                    uint64_t *start, int (*fn)(void *, const mt_record *), void *ctx);

#endif
