/* out_file.c — where an exporter's output goes, under rules that never destroy data:
 *
 *   - an existing regular file is replaced only with force (`--force`), and never when it is one
 *     of the inputs (same device and inode as a trace being read), force or not;
 *   - a symbolic link is never written through: `-o link` is refused when the link leads to a
 *     regular file or nowhere (a link planted in /tmp cannot redirect the output onto a victim);
 *     a link to a device, pipe or terminal (/dev/stdout -> /proc/self/fd/1) is written to, like
 *     the device itself;
 *   - a device, pipe or terminal is written to in place (nothing to replace); a block device or a
 *     directory is refused;
 *   - a file is written under no name (O_TMPFILE) or a hidden temporary name in the same directory
 *     (`.NAME.memtrace-XXXXXX`), flushed to disk, and only then given its name: linkat(2), which
 *     fails if the name appeared meanwhile, or rename(2) over the old file with force. A write
 *     error (a full disk) or a failed export leaves no file behind and the old one untouched.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err_text.h" /* src/util: mt_err_text */
#include "out_file.h"

/* Which input (index) st is, or -1. */
static int is_input(const struct stat *st, const mt_out_options *opt)
{
    for (size_t i = 0; opt && i < opt->n_inputs; i++) {
        struct stat in;
        if (opt->inputs[i] && stat(opt->inputs[i], &in) == 0 && in.st_dev == st->st_dev &&
            in.st_ino == st->st_ino)
            return (int)i;
    }
    return -1;
}

static int is_stream(mode_t m)
{
    return S_ISCHR(m) || S_ISFIFO(m) || S_ISSOCK(m);
}

static mode_t creation_mode(void)
{
    mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

/* The temporary file in dir: unnamed when the file system can, else a hidden name. */
static int open_temp(mt_out_file *of, const char *dir, const char *base)
{
    int fd;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, creation_mode());
    if (fd >= 0) {
        of->unnamed = 1;
        return fd;
    }
#endif
    snprintf(of->tmp, sizeof of->tmp, "%s/.%s.memtrace-XXXXXX", dir, base);
    fd = mkostemp(of->tmp, O_CLOEXEC);
    if (fd < 0) return -1;
    fchmod(fd, creation_mode());
    return fd;
}

int mt_out_file_open(mt_out_file *of, const char *path, const mt_out_options *opt, char *err,
                     size_t errlen)
{
    memset(of, 0, sizeof *of);
    of->fd = -1;
    if (strlen(path) >= sizeof of->path) return mt_err_text(err, errlen, "%s: name too long", path);
    snprintf(of->path, sizeof of->path, "%s", path);
    struct stat st;
    if (strcmp(path, "-") == 0) { /* stdout: only refused when it is an input (`>> t.mtrace`) */
        of->fd = STDOUT_FILENO;
        of->is_stdout = 1;
        if (fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode) && is_input(&st, opt) >= 0)
            return mt_err_text(err, errlen,
                               "standard output is %s, one of the input traces: not "
                               "written",
                               opt->inputs[is_input(&st, opt)]);
        return 0;
    }
    int force = opt && opt->force;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode)) {
            struct stat target;
            if (stat(path, &target) != 0 || !is_stream(target.st_mode))
                return mt_err_text(err, errlen,
                                   "%s is a symbolic link: memtrace does not write "
                                   "through one (remove it, or name the file it points to)",
                                   path);
            st = target;
        }
        if (S_ISDIR(st.st_mode)) return mt_err_text(err, errlen, "%s is a directory", path);
        if (is_input(&st, opt) >= 0)
            return mt_err_text(err, errlen, "%s is one of the input traces: not overwritten", path);
        if (is_stream(st.st_mode)) { /* a device, pipe or terminal: written to, not replaced */
            of->fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
            if (of->fd < 0)
                return mt_err_text(err, errlen, "cannot write %s: %s", path, strerror(errno));
            of->in_place = 1;
            return 0;
        }
        if (!S_ISREG(st.st_mode))
            return mt_err_text(err, errlen, "%s exists and is not a regular file: not written",
                               path);
        if (!force)
            return mt_err_text(err, errlen, "%s exists: not replaced (use --force to replace it)",
                               path);
        of->replace = 1;
    } else if (errno != ENOENT) {
        return mt_err_text(err, errlen, "cannot write %s: %s", path, strerror(errno));
    }
    char d[sizeof of->path], b[sizeof of->path];
    snprintf(d, sizeof d, "%s", path);
    snprintf(b, sizeof b, "%s", path);
    const char *dir = dirname(d), *base = basename(b);
    of->fd = open_temp(of, dir, base);
    if (of->fd < 0) return mt_err_text(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* Gives the unnamed file a name in dir: `name` itself (fails if it exists), or with a random
 * hidden name into of->tmp when to_tmp. */
static int link_unnamed(mt_out_file *of, int to_tmp)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", of->fd);
    if (!to_tmp) return linkat(AT_FDCWD, proc, AT_FDCWD, of->path, AT_SYMLINK_FOLLOW);
    char d[sizeof of->path], b[sizeof of->path];
    snprintf(d, sizeof d, "%s", of->path);
    snprintf(b, sizeof b, "%s", of->path);
    for (unsigned try = 0; try < 100; try++) {
        snprintf(of->tmp, sizeof of->tmp, "%s/.%s.memtrace-%u-%u", dirname(d), basename(b),
                 (unsigned)getpid(), (unsigned)rand());
        if (linkat(AT_FDCWD, proc, AT_FDCWD, of->tmp, AT_SYMLINK_FOLLOW) == 0) return 0;
        if (errno != EEXIST) return -1;
    }
    return -1;
}

int mt_out_file_commit(mt_out_file *of)
{
    if (of->is_stdout || of->in_place || of->fd < 0) return 0;
    if (fsync(of->fd) != 0 && errno != EINVAL) return -1; /* a full disk shows here at the latest */
    int rc;
    if (of->unnamed && !of->replace) {
        rc = link_unnamed(of, 0); /* EEXIST: someone created the name meanwhile; not replaced */
    } else {
        if (of->unnamed && link_unnamed(of, 1) != 0) return -1;
        if (of->replace) {
            rc = rename(of->tmp, of->path);
        } else { /* link(2) fails on an existing name where rename(2) would replace it */
            rc = link(of->tmp, of->path);
            if (rc != 0 && (errno == EPERM || errno == ENOSYS || errno == EOPNOTSUPP)) {
                struct stat st; /* a file system without hard links: check, then rename */
                rc = lstat(of->path, &st) == 0 ? (errno = EEXIST, -1) : rename(of->tmp, of->path);
            }
            int e = errno;
            unlink(of->tmp);
            errno = e;
        }
        if (rc != 0) {
            int e = errno;
            unlink(of->tmp);
            errno = e;
        }
        of->tmp[0] = 0;
    }
    return rc;
}

void mt_out_file_close(mt_out_file *of)
{
    if (of->tmp[0]) unlink(of->tmp); /* not committed: no file is left behind */
    of->tmp[0] = 0;
    if (of->fd >= 0 && !of->is_stdout) close(of->fd);
    of->fd = -1;
}
