/* Where the trace goes: the output pattern, the file, and the manifest `memtrace record` reads. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "recorder.h"

/* Expands the output pattern (%p pid, %c command, %h host, %r rank or else pid, %%). Returns 0, or
 * -1 if the result would not fit. */
static int expand_pattern(const char *pattern, const char *comm, int32_t rank, char *out,
                          size_t len)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    size_t o = 0;
    for (const char *p = pattern; *p; p++) {
        char tmp[64];
        const char *add = tmp;
        if (*p == '%' && p[1]) {
            switch (*++p) {
            case 'p': snprintf(tmp, sizeof tmp, "%d", (int)getpid()); break;
            case 'r': snprintf(tmp, sizeof tmp, "%d", rank >= 0 ? (int)rank : (int)getpid()); break;
            case 'c': add = comm; break;
            case 'h': add = host; break;
            case '%': add = "%"; break;
            default: snprintf(tmp, sizeof tmp, "%%%c", *p);
            }
        } else {
            tmp[0] = *p;
            tmp[1] = 0;
        }
        size_t n = strlen(add);
        if (o + n + 1 > len) return -1;
        memcpy(out + o, add, n);
        o += n;
    }
    out[o] = 0;
    return 0;
}

/* Whether the trace file is still where it was created; says once when it is not (its directory
 * was removed, or the file renamed or deleted while the program ran). */
void mt_output_check_still_there(mt_recorder *r)
{
    struct stat st;
    if (stat(r->cfg.output, &st) == 0 && st.st_dev == r->output_dev && st.st_ino == r->output_ino)
        return;
    mt_warn_once("gone", "%s was deleted or moved while the program ran (its directory too?): "
                 "what was recorded is lost with it", r->cfg.output);
}

int mt_output_open(mt_recorder *r)
{
    const char *pattern = getenv("MEMTRACE_OUTPUT");
    if (!pattern || !*pattern) pattern = "memtrace.%c.%p.mtrace";
    const char *comm = r->comm[0] ? r->comm : "process";
    if (expand_pattern(pattern, comm, r->rank, r->cfg.output, sizeof r->cfg.output) != 0) {
        mt_warn_once("path", "output path too long: not tracing this process");
        return -1;
    }
    int force = getenv("MEMTRACE_FORCE") && atoi(getenv("MEMTRACE_FORCE")) > 0;
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
    int fd = open(r->cfg.output, flags, 0644);
    if (fd < 0) {
        mt_warn_once("open", "cannot create %s: %s%s; not tracing this process", r->cfg.output,
                     strerror(errno), errno == EEXIST ? " (use -f to replace it)" : "");
        return fd;
    }
    /* Out of the program's way: the lowest free number from MT_HIGH_FD up (programs count their
     * own descriptors from 0, and select() wants them under 1024), close-on-exec. */
    int high = fcntl(fd, F_DUPFD_CLOEXEC, MT_HIGH_FD);
    if (high >= 0) {
        close(fd);
        fd = high;
    }
    struct stat st;
    if (fstat(fd, &st) == 0) {
        r->output_dev = st.st_dev;
        r->output_ino = st.st_ino;
    }
    return fd;
}

/* Grows the descriptor table to hold MT_HIGH_FD, on the writer thread, before the trace file is
 * made. Why: the table grows when a descriptor beyond its size is first taken, and in a process
 * with more than one thread Linux then waits for an RCU grace period (fs/file.c, expand_fdtable:
 * synchronize_rcu) in the thread that took it. With 4 idle threads that was 11-16 ms on the
 * development machine, against 0.02 ms with none; on the GPU machine the trace's creation took
 * 4.5-16 ms of the thread that made the first CUDA context in every PyTorch program, 0.25 ms in a
 * C program (2026-11-27, the rare work's "trace file created"). Grown here, the wait is the
 * writer's; the program's thread later takes a descriptor in a table that is big enough already
 * (tables never shrink). A program thread that takes a descriptor while this one grows the table
 * waits for it, as it would have for the program's own. */
void mt_output_make_room(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return; /* no /dev/null: the program's thread grows the table, as before */
    int high = fcntl(fd, F_DUPFD_CLOEXEC, MT_HIGH_FD);
    if (high >= 0) close(high);
    close(fd);
}

void mt_manifest_add(mt_recorder *r, const char *what)
{
    const char *manifest = getenv("MEMTRACE_MANIFEST");
    if (!manifest || !*manifest) return;
    int fd = open(manifest, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return;
    char line[4200];
    int n = snprintf(line, sizeof line, "%d %s %s\n", (int)getpid(), what,
                     strcmp(what, "trace") == 0 ? r->cfg.output : r->comm);
    if (n > 0 && write(fd, line, (size_t)n) < 0) { /* the CLI then reports no file: harmless */
    }
    close(fd);
}
