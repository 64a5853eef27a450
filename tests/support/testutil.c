#include "testutil.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "memtrace/trace.h"
#include "trace/bytes.h"

/* What this process named, removed when it exits (a run of the suite made ~200 files and
 * directories in /tmp, and a developer's machine kept every run's). Only by the process that made
 * the names: a child of fork() that calls exit() must not take its parent's files away.
 * MEMTRACE_TEST_KEEP=1 keeps them, to look at what a failing test wrote. */
static char **made;
static size_t n_made, cap_made;
static pid_t made_by;

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_made(void)
{
    if (getpid() != made_by) return;
    for (size_t i = 0; i < n_made; i++) {
        /* depth first, not following links: a directory a test filled (records of a job) */
        nftw(made[i], remove_one, 16, FTW_DEPTH | FTW_PHYS);
        free(made[i]);
    }
    free(made);
    made = NULL;
    n_made = cap_made = 0;
}

static void remember(const char *path)
{
    const char *keep = getenv("MEMTRACE_TEST_KEEP");
    if (keep && *keep && strcmp(keep, "0") != 0) return;
    if (made_by != getpid()) { /* first name of this process (or of a forked child) */
        if (made_by == 0) atexit(remove_made);
        else n_made = cap_made = 0, made = NULL; /* the parent's list, not ours (its memory stays its own) */
        made_by = getpid();
    }
    if (n_made == cap_made) {
        size_t cap = cap_made ? cap_made * 2 : 64;
        char **m = realloc(made, cap * sizeof *m);
        if (!m) return;
        made = m;
        cap_made = cap;
    }
    char *dup = strdup(path);
    if (dup) made[n_made++] = dup;
}

/* The name also carries the moment this process first asked for one: with pid_max at 32768, a
 * machine that ran the suite many times reuses pids, and a directory left by an earlier run under
 * the same pid made a test's mkdir fail (unlink() removes files, not directories). */
void mt_test_tmpname(char *buf, size_t len, const char *stem)
{
    static unsigned counter;
    static unsigned long long stamp;
    if (!stamp) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        stamp = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
    }
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    snprintf(buf, len, "%s/mt-test-%d-%llx-%u-%s", dir, (int)getpid(), stamp, counter++, stem);
    unlink(buf);
    remember(buf);
}

uint8_t *mt_test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (len) *len = n;
    return buf;
}

int mt_test_spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

int mt_test_each_gpu_fixture(void (*fn)(const char *path, void *ctx), void *ctx)
{
    DIR *d = opendir(MT_TEST_DATA_DIR);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 7, ".mtrace") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", MT_TEST_DATA_DIR, e->d_name);
        fn(path, ctx);
        n++;
    }
    closedir(d);
    return n;
}

size_t mt_test_chunk(uint8_t *out, const uint8_t *raw, size_t rawlen)
{
    uLongf clen = compressBound(rawlen);
    if (compress(out + 16, &clen, raw, rawlen) != Z_OK) return 0;
    memcpy(out, "MTCK", 4);
    mt_put_le32(out + 4, (uint32_t)clen);
    mt_put_le32(out + 8, (uint32_t)rawlen);
    mt_put_le32(out + 12, (uint32_t)crc32(crc32(0, out + 4, 8), out + 16, (uInt)clen));
    return 16 + clen;
}

void mt_test_file_header(uint8_t *h, uint16_t version, uint16_t size)
{
    memset(h, 0, MT_FILE_HEADER_SIZE);
    memcpy(h, MT_TRACE_MAGIC, 8);
    mt_put_le16(h + 8, version);
    mt_put_le16(h + 10, size);
}

size_t mt_test_chunk_file(const char *path, uint16_t version, const uint8_t *raw, size_t rawlen)
{
    uint8_t *file = malloc(MT_FILE_HEADER_SIZE + 16 + compressBound(rawlen));
    if (!file) return 0;
    mt_test_file_header(file, version, MT_FILE_HEADER_SIZE);
    size_t chunk = mt_test_chunk(file + MT_FILE_HEADER_SIZE, raw, rawlen);
    size_t len = chunk ? MT_FILE_HEADER_SIZE + chunk : 0;
    if (len && mt_test_spit(path, file, len) != 0) len = 0;
    free(file);
    return len;
}
