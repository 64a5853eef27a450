/* input.c — a trace given on the command line, as a regular file the reader can read more than
 * once (mt_analyze reads a trace twice, the Chrome exporter three times).
 *
 * A regular file (or block device) is used as it is. A pipe, FIFO, socket or terminal
 * (`<(zcat t.mtrace.gz)`, `/dev/stdin`) can only be read once: its bytes are copied into an
 * unlinked temporary file in $TMPDIR (else /tmp) first. The copy starts only after the first 8
 * bytes were seen to be a trace's magic, so `/dev/zero` or a text stream is refused at once instead
 * of being copied forever. A directory is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err_text.h" /* src/util: mt_err_text */
#include "memtrace/trace.h"

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* An unlinked temporary file, read-write. -1 with errno. */
static int temp_file(void)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
#endif
    char path[4096];
    if (snprintf(path, sizeof path, "%s/memtrace-input-XXXXXX", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int tfd = mkostemp(path, O_CLOEXEC);
    if (tfd >= 0) unlink(path);
    return tfd;
}

int mt_input_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mt_err_text(err, errlen, "%s: offset 0: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mt_err_text(err, errlen, "%s: offset 0: cannot read: %s", path, strerror(e));
    }
    if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return fd;
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return mt_err_text(err, errlen, "%s: offset 0: is a directory, not a trace", path);
    }
    /* A stream: look at the magic before copying anything. */
    uint8_t buf[65536];
    size_t have = 0;
    while (have < 8) {
        ssize_t k = read(fd, buf + have, sizeof buf - have);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            close(fd);
            return mt_err_text(err, errlen, "%s: offset %zu: cannot read: %s", path, have,
                               strerror(e));
        }
        if (k == 0) break;
        have += (size_t)k;
    }
    size_t cmp = have < 8 ? have : 8;
    if (memcmp(buf, MT_TRACE_MAGIC, cmp) != 0 || have < 8) {
        close(fd);
        if (memcmp(buf, MT_TRACE_MAGIC, cmp) != 0)
            return mt_err_text(err, errlen, "%s: offset 0: not a memtrace file (bad magic)", path);
        return mt_err_text(err, errlen, "%s: offset %zu: file too short for the %d-byte header",
                           path, have, MT_FILE_HEADER_SIZE);
    }
    int tmp = temp_file();
    if (tmp < 0) {
        int e = errno;
        close(fd);
        return mt_err_text(
            err, errlen,
            "%s: is not a regular file and no temporary copy can be made in $TMPDIR: %s", path,
            strerror(e));
    }
    for (;;) {
        if (write_all(tmp, buf, have) != 0) {
            int e = errno;
            close(fd);
            close(tmp);
            return mt_err_text(
                err, errlen, "%s: is not a regular file; copying it to a temporary file failed: %s",
                path, strerror(e));
        }
        ssize_t k;
        do
            k = read(fd, buf, sizeof buf);
        while (k < 0 && errno == EINTR);
        if (k < 0) {
            int e = errno;
            close(fd);
            close(tmp);
            return mt_err_text(err, errlen, "%s: cannot read: %s", path, strerror(e));
        }
        if (k == 0) break;
        have = (size_t)k;
    }
    close(fd);
    return tmp;
}
