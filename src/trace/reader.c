/* reader.c — a trace file: its header, then its records through the feed (feed.c: chunks, their
 * checks, resync past damage, one chunk in memory at a time).
 *
 * Every length read from the file is checked before it is used, so any input, cut or corrupted
 * or hostile, ends in a clean status, never a crash; reading is linear in time on any input
 * (feed.c says how).
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

#include "feed.h"
#include "layout.h"
#include "memtrace/trace.h"

struct mt_reader {
    int fd; /* our own descriptor (a dup when opened from one) */
    char *path;
    mt_file_header header;
    mt_feed feed;
    int feed_ready;
};

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
    if (mt_feed_init(&r->feed, r->fd, r->path, (uint64_t)st.st_size, hsize) != 0) {
        open_error(err, errlen, "%s: offset 0: out of memory", path);
        mt_feed_free(&r->feed);
        mt_reader_close(r);
        return NULL;
    }
    r->feed_ready = 1;
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

mt_read_status mt_reader_next(mt_reader *r, mt_record *out)
{
    return mt_feed_next(&r->feed, out);
}

const mt_file_header *mt_reader_header(const mt_reader *r)
{
    return &r->header;
}
const char *mt_reader_error(const mt_reader *r)
{
    return r->feed.failed ? r->feed.err : "";
}
uint64_t mt_reader_error_offset(const mt_reader *r)
{
    return r->feed.err_off;
}
uint64_t mt_reader_offset(const mt_reader *r)
{
    return r->feed.chunk_off;
}
uint64_t mt_reader_file_size(const mt_reader *r)
{
    return r->feed.file_size;
}
void mt_reader_damage(const mt_reader *r, mt_read_damage *out)
{
    out->chunks = r->feed.damaged_chunks;
    out->bytes = r->feed.damaged_bytes;
    out->first_offset = r->feed.damage_off;
    out->first = r->feed.damaged_chunks ? r->feed.damage : "";
}
