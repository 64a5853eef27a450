/* pyframes_probe.c — a ctypes-loadable library that drives mt_pyframes_* from Python for
 * tests/py/test_pyframes.py. ctypes.CDLL releases the GIL around every call, as PyTorch does
 * around a CUDA op, so what the probe sees is what the recorder sees inside a CUPTI callback.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "memtrace/record.h"
#include "record/pyframes_linetable.h"

#define PROBE_MAX 256

/* The reader under test, made once by probe_init (the test is the only user of this library). */
static mt_pyframes *probe_py;

int probe_init(char *why, int len)
{
    const char *w = NULL;
    if (!probe_py)
        probe_py = mt_pyframes_new(&w);
    snprintf(why, (size_t)len, "%s", w ? w : "");
    return probe_py ? 0 : -1;
}

/* The calling thread's Python stack, innermost first, one frame a line:
 *   code-address \t filename \t qualname \t line \t firstlineno \n
 * Returns the frame count, -1 when the buffer is too small, -2 when describe failed. */
int probe_stack(char *buf, int len, int max)
{
    mt_pyframe frames[PROBE_MAX];
    if (max > PROBE_MAX)
        max = PROBE_MAX;
    int n = mt_pyframes_read(probe_py, frames, max);
    int pos = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        char file[1024], qual[512];
        uint32_t first = 0;
        if (mt_pyframes_describe(probe_py, frames[i].code, file, sizeof file, qual, sizeof qual,
                                 &first) != 0)
            return -2;
        int k = snprintf(buf + pos, (size_t)(len - pos), "%#lx\t%s\t%s\t%d\t%u\t%d\n",
                         (unsigned long)frames[i].code, file, qual, frames[i].line, first,
                         frames[i].entry);
        if (k < 0 || k >= len - pos)
            return -1;
        pos += k;
    }
    return n;
}

/* Describe into tiny buffers: checks truncation on a UTF-8 character boundary. */
int probe_describe_innermost(char *file, int flen, char *qual, int qlen)
{
    mt_pyframe f;
    if (mt_pyframes_read(probe_py, &f, 1) != 1)
        return -3;
    return mt_pyframes_describe(probe_py, f.code, file, flen, qual, qlen, NULL);
}

/* Misuse that must be refused, not crash: returns a bit per failed expectation (0 = all good). */
int probe_misuse(void)
{
    uint64_t junk[64] = {0};
    char f[16], q[16];
    mt_pyframe out[4];
    int bad = 0;
    bad |= (mt_pyframes_describe(probe_py, 0, f, sizeof f, q, sizeof q, NULL) != -1) << 0;
    bad |= (mt_pyframes_describe(probe_py, (uintptr_t)junk, f, sizeof f, q, sizeof q, NULL) != -1)
           << 1;
    bad |= (mt_pyframes_describe(probe_py, (uintptr_t)junk + 3, f, 16, q, 16, NULL) != -1) << 2;
    bad |= (mt_pyframes_read(probe_py, out, 0) != 0) << 3;
    bad |= (mt_pyframes_read(NULL, out, 4) != 0) << 4;
    bad |= (mt_pyframes_describe(NULL, 0, f, 16, q, 16, NULL) != -1) << 5;
    return bad;
}

static void *count_frames(void *arg)
{
    mt_pyframe frames[PROBE_MAX];
    *(int *)arg = mt_pyframes_read(probe_py, frames, PROBE_MAX);
    return NULL;
}

/* Frames seen by a thread Python never heard of: must be 0. */
int probe_stack_in_pthread(void)
{
    pthread_t t;
    int n = -100;
    if (pthread_create(&t, NULL, count_frames, &n) != 0)
        return -101;
    pthread_join(t, NULL);
    return n;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* ns per mt_pyframes_read at the caller's stack: warm (line cache filled) over `iters` reads, and
 * cold (a fresh reader, empty cache, one read). *depth = frames read. */
double probe_bench_ns(int iters, int *depth, double *cold_ns)
{
    mt_pyframe frames[PROBE_MAX];
    mt_pyframes *fresh = mt_pyframes_new(NULL);
    double t0 = now_ns();
    *depth = mt_pyframes_read(fresh, frames, PROBE_MAX);
    *cold_ns = now_ns() - t0;
    mt_pyframes_free(fresh);

    mt_pyframes_read(probe_py, frames, PROBE_MAX);
    t0 = now_ns();
    for (int i = 0; i < iters; i++)
        mt_pyframes_read(probe_py, frames, PROBE_MAX);
    return (now_ns() - t0) / iters;
}

/* The line table decoders on raw bytes, to compare with code.co_lines() for every instruction.
 * format: 0 = 3.10 PEP 626 table, 1 = 3.11+ location table. */
int probe_line(int format, const unsigned char *tab, long n, int firstlineno, int lasti)
{
    return format == 0 ? mt_py_line_pep626(tab, (size_t)n, firstlineno, lasti)
                       : mt_py_line_locations(tab, (size_t)n, firstlineno, lasti);
}

/* mt_pyframes_top + mt_pyframes_signature at the caller's stack: the signature, and the top
 * frame's call-site key in *key (0 when the thread has no frame). */
unsigned long long probe_signature(unsigned long long *key)
{
    uint64_t k = 0;
    uintptr_t top = mt_pyframes_top(probe_py, &k);
    *key = k;
    return mt_pyframes_signature(probe_py, top);
}
