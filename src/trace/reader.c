/* reader.c — a trace file: its header, then its records through the feed (feed.c: chunks, their
 * checks, resync past damage, one chunk in memory at a time).
 *
 * Every length read from the file is checked before it is used, so any input, cut or corrupted
 * or hostile, ends in a clean status, never a crash; reading is linear in time on any input
 * (feed.c says how).
 *
 * The file is read with pread(2): several readers may share one descriptor (mt_analyze's two
 * passes over a copied pipe), and the file may grow while it is read (symbols appended).
 *
 * Two threads, on a machine with more than one CPU: a second thread runs the feed (read, CRC,
 * inflate, decode: about half of `report`'s time) and hands its records over in batches of at
 * most BATCH_RECORDS, each from one chunk, through a ring of N_BATCHES; the caller's thread reads
 * them there (mt_reader_next_ref, mt_reader_next_group) or copies them out (mt_reader_next). The
 * feed puts each chunk into the next of N_BATCHES + 1 buffers, so the chunks of the batches not
 * yet read back (at most N_BATCHES) are never overwritten. The records, statuses and damage are
 * the feed's, in its order: the same as one thread gives. A thread that would wait on the ring
 * loads the next chunk instead (ahead.h: help_instead_of_waiting). The feed decodes into a block of
 * its own and copies each block into the batch whole (STAGE_RECORDS says why). Memory: N_BATCHES +
 * 1 chunk buffers (each at most MT_CHUNK_RAW_MAX) instead of one, and the helpers' one.
 *
 * Either way the plain events of a chunk are decoded in runs (mt_feed_events: no bound check per
 * field); on one thread a run of up to RUN_RECORDS is kept here and handed out before the feed is
 * asked for the next record (position and damage stay the chunk's meanwhile).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ahead.h"
#include "feed.h"
#include "layout.h"
#include "memtrace/trace.h"

/* 640 KiB a batch, 2.5 MiB for the ring. While the feed inflates a chunk (~0.5 ms for 256 KiB) it
 * hands nothing over, and the ring must hold enough to keep the analysis busy meanwhile: with
 * 4096-record batches, `report` on 10 M synthetic events took 0.54-0.56 s, with 8192 0.51-0.52 s
 * (the reader's thread slightly faster than the analysis on average). */
#define BATCH_RECORDS 8192
#define N_BATCHES 4

typedef struct batch {
    _Alignas(64) mt_record rec[BATCH_RECORDS]; /* on whole lines (STAGE_RECORDS) */
    size_t n;
    uint64_t chunk_off, file_size; /* the feed's at the batch's first record */
    uint64_t dmg_chunks, dmg_bytes, dmg_off; /* and its damage so far */
    mt_read_status end; /* MT_READ_RECORD: more follow; else what comes after these records */
} batch;

struct mt_reader {
    int fd; /* our own descriptor (a dup when opened from one) */
    char *path;
    mt_file_header header;
    uint64_t first_chunk; /* the header's size: where the chunks begin */
    mt_feed feed; /* the second thread's while it runs */
    int feed_ready;
    /* the second thread: started at the first mt_reader_next, stopped by mt_reader_close */
    int threaded, started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t filled, emptied;
    batch *ring;       /* N_BATCHES */
    size_t head, count; /* the oldest batch not yet read back; batches handed over */
    atomic_int stop;
    batch *cur;  /* the batch being read back (ring[head]), or NULL */
    size_t next; /* its next record */
    int done;               /* the feed's last status was read back: */
    mt_read_status last;    /* it, sticky */
    uint64_t chunk_off, file_size; /* of the record last returned */
    mt_record one; /* on one thread: the record last returned (mt_reader_next_ref points here) */
    /* on one thread: runs of plain events of the current chunk (mt_feed_events), read back in
     * order before the feed is asked for more; position and damage are the chunk's meanwhile */
    mt_record *run;
    size_t run_n, run_next;
};

#define RUN_RECORDS 256

/* ---- the second thread ---------------------------------------------------------------------- */

/* Whether this thread, about to wait on the ring (r->mu held), went to load the next chunk
 * instead (ahead.h). Then r->mu was let go meanwhile, whether it loaded the chunk or found it
 * taken, and what the wait is for must be looked at again before waiting: the other thread may
 * have signalled while nobody waited (a test's reader hung here when only a load counted). */
static int help_instead_of_waiting(mt_reader *r)
{
    mt_ahead *a = r->feed.ahead;
    if (!a || !mt_ahead_wanted(a)) return 0;
    pthread_mutex_unlock(&r->mu);
    mt_ahead_help(a);
    pthread_mutex_lock(&r->mu);
    return 1;
}

/* Hands b over (the next slot of the ring); waits while the ring is full. 0, or -1 on stop. */
static int hand_over(mt_reader *r)
{
    pthread_mutex_lock(&r->mu);
    r->count++;
    pthread_cond_signal(&r->filled);
    while (r->count == N_BATCHES && !atomic_load(&r->stop))
        if (!help_instead_of_waiting(r)) pthread_cond_wait(&r->emptied, &r->mu);
    int stop = atomic_load(&r->stop);
    pthread_mutex_unlock(&r->mu);
    return stop ? -1 : 0;
}

/* The feed's position and damage when a batch's first record was read (mt_reader_offset and
 * mt_reader_damage say what they said then on one thread). */
static void batch_begin(batch *b, const mt_feed *f)
{
    b->chunk_off = f->chunk_off;
    b->file_size = f->io.file_size;
    b->dmg_chunks = f->damaged_chunks;
    b->dmg_bytes = f->damaged_bytes;
    b->dmg_off = f->damage_off;
}

/* The feed decodes into a block of STAGE_RECORDS on its own thread (20 KiB: in its L1) and copies
 * each block into the batch whole. Decoded straight into the batch, every record was written into
 * lines the other thread had read last: on this project's 2-core VM, when its vCPUs sat far apart
 * (a line's round trip ~480 ns, tests/bench/bench_crosscore.c), the decoder's perf samples were
 * 1.7x those of the same run with both threads on one CPU, and the analysis' unchanged. A copy of
 * whole lines need not fetch the lines it overwrites (the likely reason it costs less: streaming
 * stores, which never fetch them, did the same); 256 records are 320 lines, so each block fills
 * whole lines of the batch (docs/performance.md, "Thirteenth round"). */
#define STAGE_RECORDS 256
_Static_assert(BATCH_RECORDS % STAGE_RECORDS == 0, "a batch is whole blocks");
_Static_assert(STAGE_RECORDS * sizeof(mt_record) % 64 == 0, "a block is whole lines");

/* Copies the block into b once it is full; returns where the next block's records begin in b. */
static size_t copy_if_full(batch *b, const mt_record *stage, size_t out)
{
    if (b->n - out < STAGE_RECORDS) return out;
    memcpy(&b->rec[out], stage, STAGE_RECORDS * sizeof *stage);
    return b->n;
}

static void *feed_thread(void *arg)
{
    mt_reader *r = arg;
    mt_feed *f = &r->feed;
    size_t slot = 0; /* the ring's slot being filled: never one handed over and not read back */
    mt_record carry;
    int carried = 0; /* carry: the first record of a chunk, read while a batch of the last was open */
    _Alignas(64) mt_record stage[STAGE_RECORDS];
    for (;;) {
        batch *b = &r->ring[slot];
        b->n = 0;
        b->end = MT_READ_RECORD;
        size_t out = 0; /* b->rec[0, out) are copied; stage holds b->rec[out, b->n) */
        uint64_t chunk = f->chunks_loaded;
        if (carried) {
            batch_begin(b, f);
            stage[b->n++] = carry;
        }
        carried = 0;
        while (b->n < BATCH_RECORDS) {
            if (b->n) { /* the plain events that follow in this chunk, in one run */
                size_t want = STAGE_RECORDS - (b->n - out);
                size_t k = mt_feed_events(f, &stage[b->n - out], want);
                b->n += k;
                out = copy_if_full(b, stage, out);
                if (b->n == BATCH_RECORDS) break;
                if (k == want) continue; /* the block filled up: the run may go on */
            }
            mt_record *rec = &stage[b->n - out];
            mt_read_status st = mt_feed_next(f, rec);
            if (st != MT_READ_RECORD) {
                b->end = st;
                break;
            }
            if (!b->n) {
                batch_begin(b, f);
                chunk = f->chunks_loaded;
            } else if (f->chunks_loaded != chunk) { /* a batch holds one chunk's records */
                carry = *rec;
                carried = 1;
                break;
            }
            b->n++;
            out = copy_if_full(b, stage, out);
        }
        memcpy(&b->rec[out], stage, (b->n - out) * sizeof *stage);
        if (!b->n) { /* the end, with nothing before it: position and damage as they are now */
            b->chunk_off = f->chunk_off;
            b->file_size = f->io.file_size;
            b->dmg_chunks = f->damaged_chunks;
            b->dmg_bytes = f->damaged_bytes;
            b->dmg_off = f->damage_off;
        }
        if (hand_over(r) < 0 || b->end != MT_READ_RECORD) return NULL;
        slot = (slot + 1) % N_BATCHES;
    }
}

static void stop_thread(mt_reader *r)
{
    if (!r->started) return;
    pthread_mutex_lock(&r->mu);
    atomic_store(&r->stop, 1);
    pthread_cond_broadcast(&r->emptied);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    r->started = 0;
}

/* The next record from the second thread's batches, in place: valid until the next call (the
 * batch's slot is handed back only when a record after its last one is asked for). */
static mt_read_status next_threaded(mt_reader *r, const mt_record **out)
{
    for (;;) {
        if (r->done) return r->last;
        if (r->cur && r->next < r->cur->n) {
            *out = &r->cur->rec[r->next++];
            return MT_READ_RECORD;
        }
        pthread_mutex_lock(&r->mu);
        if (r->cur) { /* read back: its slot is free again */
            mt_read_status end = r->cur->end;
            r->cur = NULL;
            r->head = (r->head + 1) % N_BATCHES;
            r->count--;
            pthread_cond_signal(&r->emptied);
            if (end != MT_READ_RECORD) {
                pthread_mutex_unlock(&r->mu);
                r->done = 1; /* the thread has ended: the feed's state is ours to read */
                r->last = end;
                pthread_join(r->thread, NULL);
                r->started = 0;
                return end;
            }
        }
        while (!r->count)
            if (!help_instead_of_waiting(r)) pthread_cond_wait(&r->filled, &r->mu);
        r->cur = &r->ring[r->head];
        r->next = 0;
        r->chunk_off = r->cur->chunk_off;
        r->file_size = r->cur->file_size;
        pthread_mutex_unlock(&r->mu);
    }
}

/* A second thread is worth it for a file of more than a few chunks, with a second CPU.
 * MEMTRACE_READ_THREAD=0 never starts one, =1 always does (the tests read every small damaged
 * file both ways: tests/CMakeLists.txt). */
static int want_thread(uint64_t file_size)
{
    const char *env = getenv("MEMTRACE_READ_THREAD");
    if (env && (env[0] == '0' || env[0] == '1') && !env[1]) return env[0] == '1';
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 1 && file_size > 4u * MT_CHUNK_RAW_DEFAULT;
}

/* With the second thread, idle time on either thread loads the next chunk ahead (ahead.h);
 * MEMTRACE_READ_AHEAD=0 turns that off (to time it, and to read as before it). */
static int want_ahead(void)
{
    const char *env = getenv("MEMTRACE_READ_AHEAD");
    return !(env && env[0] == '0' && !env[1]);
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

void mt_reader_close(mt_reader *r)
{
    if (!r) return;
    stop_thread(r);
    if (r->threaded) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->filled);
        pthread_cond_destroy(&r->emptied);
    }
    free(r->ring);
    free(r->run);
    if (r->feed_ready) mt_feed_free(&r->feed);
    if (r->fd >= 0) close(r->fd);
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
    ssize_t got = mt_pread_full(fd, h, sizeof h, 0);
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
    if (!r || !(r->path = strdup(path))) {
        open_error(err, errlen, "%s: offset 0: out of memory", path);
        if (r) free(r->path);
        free(r);
        return NULL;
    }
    r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        open_error(err, errlen, "%s: offset 0: %s", path, strerror(errno));
        mt_reader_close(r);
        return NULL;
    }
    r->header.version = version;
    r->first_chunk = hsize;
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
    int threaded = want_thread((uint64_t)st.st_size);
    if (mt_feed_init(&r->feed, r->fd, r->path, version, (uint64_t)st.st_size, hsize,
                     threaded ? N_BATCHES + 1 : 1, threaded && want_ahead()) != 0) {
        open_error(err, errlen, "%s: offset 0: out of memory", path);
        mt_feed_free(&r->feed);
        mt_reader_close(r);
        return NULL;
    }
    r->feed_ready = 1;
    if (threaded && (r->ring = aligned_alloc(64, N_BATCHES * sizeof *r->ring))) {
        pthread_mutex_init(&r->mu, NULL);
        pthread_cond_init(&r->filled, NULL);
        pthread_cond_init(&r->emptied, NULL);
        r->feed.stop = &r->stop;
        r->threaded = 1;
    }
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
    r->feed.strict = strict;
}

/* On this thread: the next record of the run, or of a new run, or NULL (then the feed's next
 * record is the next one). */
static const mt_record *next_in_run(mt_reader *r)
{
    if (r->run_next < r->run_n) return &r->run[r->run_next++];
    r->run_n = r->run_next = 0;
    if (!r->run && !(r->run = malloc(RUN_RECORDS * sizeof *r->run))) return NULL; /* one by one */
    r->run_n = mt_feed_events(&r->feed, r->run, RUN_RECORDS);
    return r->run_n ? &r->run[r->run_next++] : NULL;
}

mt_read_status mt_reader_next_ref(mt_reader *r, const mt_record **out)
{
    if (r->threaded && !r->started && !r->done) {
        if (pthread_create(&r->thread, NULL, feed_thread, r) == 0) r->started = 1;
        else r->threaded = 0; /* read on this thread */
    }
    if (r->threaded) return next_threaded(r, out);
    if ((*out = next_in_run(r))) return MT_READ_RECORD;
    *out = &r->one;
    return mt_feed_next(&r->feed, &r->one);
}

size_t mt_reader_next_group(mt_reader *r, const mt_record **recs, mt_read_status *st)
{
    if (r->threaded && r->started && !r->done && r->cur && r->next < r->cur->n) {
        size_t n = r->cur->n - r->next; /* the rest of the batch */
        *recs = &r->cur->rec[r->next];
        r->next = r->cur->n;
        return n;
    }
    if (!r->threaded && r->run_next < r->run_n) {
        size_t n = r->run_n - r->run_next; /* the rest of the run */
        *recs = &r->run[r->run_next];
        r->run_next = r->run_n;
        return n;
    }
    /* the next record the usual way: it may start a batch or a run, whose rest comes next */
    mt_read_status s = mt_reader_next_ref(r, recs);
    *st = s;
    return s == MT_READ_RECORD;
}

mt_read_status mt_reader_next(mt_reader *r, mt_record *out)
{
    if (!r->threaded) {
        const mt_record *rec = next_in_run(r);
        if (!rec) return mt_feed_next(&r->feed, out); /* straight into out */
        *out = *rec;
        return MT_READ_RECORD;
    }
    const mt_record *rec;
    mt_read_status st = mt_reader_next_ref(r, &rec);
    if (st == MT_READ_RECORD) *out = *rec;
    return st;
}

const mt_file_header *mt_reader_header(const mt_reader *r)
{
    return &r->header;
}
const char *mt_reader_error(const mt_reader *r)
{
    return r->feed.failed ? r->feed.err : "";
}
int mt_reader_tail_symbols(const mt_reader *r, uint64_t *start,
                           int (*fn)(void *ctx, const mt_record *rec), void *ctx)
{
    struct stat st;
    *start = UINT64_MAX;
    if (fstat(r->fd, &st) != 0) return -1;
    int rc = mt_tail_symbols(r->fd, r->path, r->header.version, r->first_chunk,
                             (uint64_t)st.st_size, start, fn, ctx);
    if (rc < 0) *start = UINT64_MAX;
    return rc;
}

uint64_t mt_reader_error_offset(const mt_reader *r)
{
    return r->feed.err_off;
}
uint64_t mt_reader_offset(const mt_reader *r)
{
    return r->started ? r->chunk_off : r->feed.chunk_off;
}
uint64_t mt_reader_file_size(const mt_reader *r)
{
    return r->started ? r->file_size : r->feed.io.file_size;
}
void mt_reader_damage(const mt_reader *r, mt_read_damage *out)
{
    if (r->started) { /* the feed is the second thread's: what it said at the current batch */
        const batch *b = r->cur;
        out->chunks = b ? b->dmg_chunks : 0;
        out->bytes = b ? b->dmg_bytes : 0;
        out->first_offset = b ? b->dmg_off : 0;
        /* the feed writes its first damage's reason once, before any batch that counts it */
        out->first = out->chunks ? r->feed.damage : "";
        return;
    }
    out->chunks = r->feed.damaged_chunks;
    out->bytes = r->feed.damaged_bytes;
    out->first_offset = r->feed.damage_off;
    out->first = r->feed.damaged_chunks ? r->feed.damage : "";
}
