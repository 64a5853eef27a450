/* `memtrace record` waits for every traced process, not only the command it started.
 *
 * A process of the command may outlive it (a daemonized worker, a server started in the
 * background): its recorder still appends chunks to its trace, and symbolizing that file under it
 * would interleave two writers (the reader then finds "bad chunk magic" and, before chunk resync,
 * lost the whole trace). So after the command exits, `record` waits until no process listed in the
 * manifest still holds its trace open, looking at /proc/PID/fd (the recorder keeps its trace open
 * until it has written its END record, and a reused pid does not hold our file). Ctrl-C stops the
 * waiting; the traces still open are then left unsymbolized, with the command to run later.
 * symbolize itself also refuses a file that is locked or that grows while it reads it.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "record_summary.h"

int mt_trace_held_open(int pid, const char *path)
{
    struct stat trace;
    if (pid <= 0 || stat(path, &trace) != 0) return 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;     /* gone */
        return kill(pid, 0) == 0 ? -1 : 0; /* alive and ours, but its descriptors are hidden */
    }
    int held = 0;
    struct dirent *e;
    while (!held && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char link[320];
        struct stat st;
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        held = stat(link, &st) == 0 && st.st_dev == trace.st_dev && st.st_ino == trace.st_ino;
    }
    closedir(d);
    return held;
}

/* Traces of the manifest still held open: their count, their pids listed into pids. */
static int count_writers(const char *manifest, char *pids, size_t len)
{
    FILE *f = fopen(manifest, "re");
    if (!f) return 0;
    char line[4200];
    int held = 0;
    size_t o = 0;
    pids[0] = 0;
    while (fgets(line, sizeof line, f)) { /* "<pid> trace <path>" (and "<pid> skipped <comm>") */
        line[strcspn(line, "\n")] = 0;
        char *what = strchr(line, ' ');
        if (!what || strncmp(what + 1, "trace ", 6) != 0 || !what[7]) continue;
        int pid = atoi(line);
        if (mt_trace_held_open(pid, what + 7) == 0) continue;
        held++;
        if (o + 16 < len)
            o += (size_t)snprintf(pids + o, len - o, "%s%d", held > 1 ? ", " : "", pid);
    }
    fclose(f);
    return held;
}

int mt_record_wait_writers(const char *manifest, int quiet, volatile sig_atomic_t *stop)
{
    char pids[256];
    for (int round = 0;; round++) {
        int held = count_writers(manifest, pids, sizeof pids);
        if (!held) return 0;
        if (round == 0 && !quiet)
            fprintf(stderr,
                    "memtrace: waiting for %d traced process%s still writing (pid %s) "
                    "before symbolizing; Ctrl-C stops waiting\n",
                    held, held == 1 ? "" : "es", pids);
        if (*stop) {
            if (!quiet)
                fprintf(stderr, "memtrace: not waiting: %d trace%s still being written (pid %s)\n",
                        held, held == 1 ? " is" : "s are", pids);
            return held;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL); /* a signal ends it early: *stop is looked at next */
    }
}
