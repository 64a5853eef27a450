/* mt_out: the buffered sink every exporter writes through. A 256 KiB buffer in front of either a
 * FILE (stdout, plain files) or a zlib gzFile (paths ending in ".gz"), so exporters can emit
 * millions of small pieces without a libc call each. Where the bytes land, and the rules that
 * keep an export from overwriting or corrupting anything, are out_file.c's. The first write error
 * is kept (errno) and stops further writes; mt_out_close reports it. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "memtrace/export.h"
#include "out_file.h"

#define OUT_BUF (256u * 1024u)

struct mt_out {
    FILE *f;
    gzFile gz;
    int own_file, failed, err;
    int has_file; /* file is set up (mt_out_create) */
    mt_out_file file;
    size_t n;
    uint64_t drained; /* bytes that left buf so far (mt_out_tell, mt_out_recent) */
    char buf[OUT_BUF];
};

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void set_failed(mt_out *o, int e)
{
    if (!o->failed) o->err = e ? e : EIO;
    o->failed = 1;
}

mt_out *mt_out_create(const char *path, const mt_out_options *opt, char *err, size_t errlen)
{
    mt_out *o = calloc(1, sizeof *o);
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (mt_out_file_open(&o->file, path, opt, err, errlen) != 0) {
        free(o);
        return NULL;
    }
    o->has_file = 1;
    if (o->file.is_stdout) {
        o->f = stdout;
        return o;
    }
    /* The library streams get their own descriptor: ours stays open for fsync and the name. */
    int fd = fcntl(o->file.fd, F_DUPFD_CLOEXEC, 0);
    if (fd >= 0 && ends_with(path, ".gz")) {
        if (!(o->gz = gzdopen(fd, "wb6"))) close(fd);
    } else if (fd >= 0) {
        if (!(o->f = fdopen(fd, "wb"))) close(fd);
        o->own_file = 1;
    }
    if (!o->gz && !o->f) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno ? errno : ENOMEM));
        mt_out_file_close(&o->file);
        free(o);
        return NULL;
    }
    return o;
}

mt_out *mt_out_open(const char *path, char *err, size_t errlen)
{
    return mt_out_create(path, NULL, err, errlen);
}

mt_out *mt_out_from_file(FILE *f)
{
    mt_out *o = calloc(1, sizeof *o);
    if (o) o->f = f;
    return o;
}

static void put(mt_out *o, const void *p, size_t n)
{
    if (o->failed || !n) return; /* after the first error nothing more is written */
    errno = 0;
    if (o->gz) {
        if (gzwrite(o->gz, p, (unsigned)n) != (int)n) {
            int zerr;
            gzerror(o->gz, &zerr);
            set_failed(o, zerr == Z_ERRNO ? errno : ENOMEM);
        }
    } else if (fwrite(p, 1, n, o->f) != n) {
        set_failed(o, errno);
    }
}

static void drain(mt_out *o)
{
    put(o, o->buf, o->n);
    o->drained += o->n;
    o->n = 0;
}

void mt_out_write(mt_out *o, const void *p, size_t n)
{
    if (o->n + n > OUT_BUF) drain(o);
    if (n > OUT_BUF) {
        put(o, p, n);
        o->drained += n;
        return;
    }
    memcpy(o->buf + o->n, p, n);
    o->n += n;
}

void mt_out_puts(mt_out *o, const char *s) { mt_out_write(o, s, strlen(s)); }

uint64_t mt_out_tell(const mt_out *o) { return o->drained + o->n; }

const char *mt_out_recent(const mt_out *o, uint64_t since, size_t *len)
{
    if (since < o->drained || since > o->drained + o->n) return NULL;
    *len = (size_t)(o->drained + o->n - since);
    return o->buf + (since - o->drained);
}

/* Numbers by hand: the Chrome export writes millions of them, and printf's parsing of its format
 * was a tenth of that export's time. */
void mt_out_u64(mt_out *o, uint64_t v)
{
    char b[20];
    size_t i = sizeof b;
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    mt_out_write(o, b + i, sizeof b - i);
}

void mt_out_hex(mt_out *o, uint64_t v)
{
    char b[18];
    size_t i = sizeof b;
    do {
        b[--i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    b[--i] = 'x';
    b[--i] = '0';
    mt_out_write(o, b + i, sizeof b - i);
}

void mt_out_printf(mt_out *o, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if ((size_t)len < sizeof small) {
        mt_out_write(o, small, (size_t)len);
        return;
    }
    char *big = malloc((size_t)len + 1);
    if (!big) {
        set_failed(o, ENOMEM);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)len + 1, fmt, ap);
    va_end(ap);
    mt_out_write(o, big, (size_t)len);
    free(big);
}

/* Length of the valid UTF-8 sequence at s, 0 if it is not one. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80) return 1;
    size_t n = (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 2 && s[0] < 0xc2) return 0; /* overlong */
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return n;
}

/* html: '<', '>' and '&' as \u escapes too (mt_out_json_string_html). */
static void json_string(mt_out *o, const char *s, int html)
{
    mt_out_write(o, "\"", 1);
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        const unsigned char *run = p;
        while (*p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\' &&
               !(html && (*p == '<' || *p == '>' || *p == '&')))
            p++;
        if (p > run) mt_out_write(o, run, (size_t)(p - run));
        if (!*p) break;
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p++};
            mt_out_write(o, esc, 2);
        } else if (*p < 0x80) { /* a control character, or one that html asks to escape */
            mt_out_printf(o, "\\u%04x", *p++);
        } else {
            size_t n = utf8_len(p);
            if (n) {
                mt_out_write(o, p, n);
                p += n;
            } else {
                mt_out_puts(o, "\\ufffd"); /* JSON must be valid UTF-8 */
                p++;
            }
        }
    }
    mt_out_write(o, "\"", 1);
}

void mt_out_json_string(mt_out *o, const char *s)
{
    json_string(o, s, 0);
}
void mt_out_json_string_html(mt_out *o, const char *s)
{
    json_string(o, s, 1);
}

/* Flushes and closes the library stream, then commits the file. */
static int finish(mt_out *o, int commit)
{
    drain(o);
    errno = 0;
    if (o->gz) {
        int zr = gzclose(o->gz);
        if (zr != Z_OK) set_failed(o, zr == Z_ERRNO ? errno : EIO);
    } else if (o->own_file) {
        if (fclose(o->f) != 0) set_failed(o, errno);
    } else if (fflush(o->f) != 0 || ferror(o->f)) {
        set_failed(o, errno);
    }
    if (commit && !o->failed && o->has_file && mt_out_file_commit(&o->file) != 0)
        set_failed(o, errno);
    if (o->has_file) mt_out_file_close(&o->file);
    int failed = o->failed, e = o->err;
    free(o);
    if (failed) errno = e;
    return failed ? -1 : 0;
}

int mt_out_close(mt_out *o)
{
    return o ? finish(o, 1) : 0;
}

void mt_out_discard(mt_out *o)
{
    if (!o) return;
    int e = errno;
    finish(o, 0);
    errno = e;
}

const char *mt_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof *units) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}
