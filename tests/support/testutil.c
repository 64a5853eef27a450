#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
