/* mt_symbolize_trace: read a trace, resolve the native ips that have no symbol yet, append the
 * MT_REC_SYMBOL records as new chunks of the same file.
 *
 * Steps:
 *   1. one pass over the records: the module map (MT_REC_MODULE, by id, later records of an id
 *      replace earlier ones), each distinct native ip of MT_REC_STACK_NODE with the module that
 *      was mapped there at that point of the trace, and the ips that already have symbols;
 *   2. a trace ending in a partial chunk (recorder killed) is cut back to its last whole chunk,
 *      else chunks appended after the garbage would never be reached by a reader;
 *   3. ips grouped by module, sorted; each module opened once (ELF + lazily its DWARF);
 *   4. records appended with mt_writer_open_fd(fd opened O_RDWR | O_APPEND, NULL header), in
 *      the file's own format version (the writer reads it from the header).
 *
 * The trace may still be open in a process that outlived the command `record` waited for, and
 * appending behind a writer's back corrupts both. So: the file must be a regular file; it is
 * locked (flock LOCK_EX, not waiting: a recorder or another symbolize holding it means "not now");
 * it is read in strict mode (damage may be a writer's chunk in progress); and its size is checked
 * again after the scan: a file that grew meanwhile is being written, and is left untouched.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "grow.h"
#include "symbols_internal.h"

typedef struct module_rec {
    uint32_t id;
    uint64_t bias, start, end;
    char *path;
    uint8_t build_id[64];
    uint32_t build_id_len;
} module_rec;

typedef struct pending_ip {
    uint64_t ip;
    uint32_t module; /* index into modules + 1; 0 = not found when the node was read */
} pending_ip;

typedef struct scan {
    module_rec *mods;
    size_t nmods, cap_mods;
    mt_u64map ip_index; /* ip -> a: index into ips + 1, b: 1 = seen */
    pending_ip *ips;
    size_t nips, cap_ips;
    mt_u64map done; /* ips that already have MT_REC_SYMBOL */
} scan;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Module mapped at ip: the most recently recorded one wins when ranges overlap (a library
 * dlclose()d and another loaded in its place). Returns index + 1, 0 = none. */
static uint32_t module_at(const scan *s, uint64_t ip)
{
    for (size_t i = s->nmods; i > 0; i--)
        if (ip >= s->mods[i - 1].start && ip < s->mods[i - 1].end) return (uint32_t)i;
    return 0;
}

static int add_module(scan *s, const mt_module *m)
{
    module_rec *dst = NULL;
    for (size_t i = 0; i < s->nmods; i++)
        if (s->mods[i].id == m->id) dst = &s->mods[i];
    if (dst) {
        free(dst->path);
    } else {
        if (MT_GROW(s->mods, s->cap_mods, s->nmods + 1) < 0) return -1;
        dst = &s->mods[s->nmods++];
    }
    dst->id = m->id;
    dst->bias = m->bias;
    dst->start = m->start;
    dst->end = m->end;
    dst->path = strdup(m->path ? m->path : "");
    dst->build_id_len = m->build_id && m->build_id_len <= sizeof dst->build_id ? m->build_id_len : 0;
    if (dst->build_id_len) memcpy(dst->build_id, m->build_id, dst->build_id_len);
    return dst->path ? 0 : -1;
}

static int add_ip(scan *s, uint64_t ip)
{
    mt_u64map_slot *slot = mt_u64map_upsert(&s->ip_index, ip);
    if (!slot) return -1;
    if (slot->b) return 0;
    slot->b = 1; /* seen, even if the list below cannot grow */
    if (MT_GROW(s->ips, s->cap_ips, s->nips + 1) < 0) return -1;
    s->ips[s->nips] = (pending_ip){ip, module_at(s, ip)};
    slot->a = ++s->nips;
    return 0;
}

static void scan_free(scan *s)
{
    for (size_t i = 0; i < s->nmods; i++) free(s->mods[i].path);
    free(s->mods);
    free(s->ips);
    mt_u64map_destroy(&s->ip_index);
    mt_u64map_destroy(&s->done);
}

/* Pass 1. Returns 0, or -1 with err set. *cut_at = offset of a partial last chunk, else 0. */
static int scan_trace(int fd, const char *path, scan *s, uint64_t *cut_at, char *err,
                      size_t errlen)
{
    mt_reader *r = mt_reader_open_fd(fd, path, err, errlen);
    if (!r) return -1;
    /* Symbols are appended to this file: one that looks damaged (perhaps because another process
     * is still writing it) is left alone. report and export read it, stepping over the damage. */
    mt_reader_set_strict(r, 1);
    mt_record rec;
    mt_read_status st;
    int rc = 0;
    *cut_at = 0;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        if (rec.type == MT_REC_MODULE) rc = add_module(s, &rec.u.module);
        else if (rec.type == MT_REC_STACK_NODE && rec.u.node.frame_kind == MT_FRAME_NATIVE)
            rc = add_ip(s, rec.u.node.ip);
        else if (rec.type == MT_REC_SYMBOL)
            rc = mt_u64map_upsert(&s->done, rec.u.symbol.ip) ? 0 : -1;
        if (rc != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            break;
        }
    }
    if (rc == 0 && st == MT_READ_TRUNCATED) {
        *cut_at = mt_reader_error_offset(r);
    } else if (rc == 0 && st != MT_READ_END) {
        snprintf(err, errlen, "%s: %s at offset %llu", path, mt_reader_error(r),
                 (unsigned long long)mt_reader_error_offset(r));
        rc = -1;
    }
    mt_reader_close(r);
    return rc;
}

static int by_module_then_ip(const void *a, const void *b)
{
    const pending_ip *x = a, *y = b;
    if (x->module != y->module) return x->module < y->module ? -1 : 1;
    return x->ip < y->ip ? -1 : x->ip > y->ip;
}

/* Pass 3: resolve s->ips[0..n) (sorted by module) and put the symbols. */
static int resolve_all(scan *s, size_t n, mt_writer *w, mt_symbolize_stats *st)
{
    mt_sym_frame frames[MT_SYM_MAX_INLINE];
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s->ips[j].module == s->ips[i].module) j++;
        const module_rec *m = &s->mods[s->ips[i].module - 1];
        st->modules++;
        char err[512];
        mt_module_syms *ms = mt_module_syms_open(m->path, m->build_id, m->build_id_len, err,
                                                 sizeof err);
        if (!ms) {
            st->modules_missing++;
            i = j;
            continue;
        }
        if (mt_module_syms_has_dwarf(ms)) st->modules_dwarf++;
        for (; i < j; i++) {
            uint64_t ip = s->ips[i].ip;
            /* A return address names the instruction after the call: look up the call itself. */
            int nf = mt_module_syms_resolve(ms, ip - 1 - m->bias, frames, MT_SYM_MAX_INLINE);
            if (nf <= 0) continue;
            if (frames[0].function[0]) st->ips_resolved++;
            if (frames[nf - 1].line) st->ips_with_line++;
            for (int k = 0; k < nf; k++) {
                mt_record rec = {.type = MT_REC_SYMBOL};
                rec.u.symbol = (mt_symbol){ip, m->id, frames[k].line, (uint32_t)k,
                                           frames[k].function, frames[k].file};
                if (mt_writer_put(w, &rec) != 0) {
                    mt_module_syms_close(ms);
                    return -1;
                }
                st->symbols_written++;
                if (k > 0) st->inline_frames++;
            }
        }
        st->cus_decoded += mt_module_syms_cus_decoded(ms);
        mt_module_syms_close(ms);
    }
    return 0;
}

int mt_symbolize_trace(const char *path, mt_symbolize_stats *stats, char *err, size_t errlen)
{
    double t0 = now_s();
    mt_symbolize_stats st;
    memset(&st, 0, sizeof st);
    scan s;
    memset(&s, 0, sizeof s);
    s.ip_index = (mt_u64map){0};
    s.done = (mt_u64map){0};
    uint64_t cut_at = 0;
    int rc = -1, readonly = 0;
    mt_writer *w = NULL;
    struct stat before, after;
    int fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
        readonly = 1; /* enough when there is nothing to add */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    }
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (fstat(fd, &before) != 0 || !S_ISREG(before.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (symbolize adds to the trace file in place)",
                 path);
        goto out;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "%s: %s", path,
                 errno == EWOULDBLOCK ? "locked by another process (still being recorded, or "
                                        "being symbolized): not touched"
                                      : strerror(errno));
        goto out;
    }
    if (scan_trace(fd, path, &s, &cut_at, err, errlen) != 0) goto out;
    if (fstat(fd, &after) != 0 || after.st_size != before.st_size) {
        snprintf(err, errlen, "%s: grew from %lld to %lld bytes while it was read: another "
                 "process is still writing it; not touched", path, (long long)before.st_size,
                 (long long)after.st_size);
        goto out;
    }

    /* Keep the ips still to do, each with its module (nodes read before their module record
     * get it now, from the full map). */
    size_t n = 0;
    for (size_t i = 0; i < s.nips; i++) {
        pending_ip p = s.ips[i];
        if (mt_u64map_find(&s.done, p.ip)) {
            st.ips_already++;
            continue;
        }
        if (!p.module) p.module = module_at(&s, p.ip);
        if (!p.module) {
            st.ips_no_module++;
            continue;
        }
        s.ips[n++] = p;
    }
    st.ips_total = n;
    if (n) qsort(s.ips, n, sizeof *s.ips, by_module_then_ip);

    if (n > 0 || cut_at) {
        if (readonly) {
            snprintf(err, errlen, "%s: cannot add symbols: the file is not writable", path);
            goto out;
        }
        if (cut_at) {
            off_t size = lseek(fd, 0, SEEK_END);
            if (ftruncate(fd, (off_t)cut_at) != 0) {
                snprintf(err, errlen, "%s: cannot cut the partial last chunk: %s", path,
                         strerror(errno));
                goto out;
            }
            st.truncated_bytes = size > (off_t)cut_at ? (uint64_t)(size - (off_t)cut_at) : 0;
        }
    }
    if (n > 0) {
        w = mt_writer_open_fd(fd, NULL, 0);
        if (!w) {
            snprintf(err, errlen, "%s: cannot start appending", path);
            goto out;
        }
        int put_rc = resolve_all(&s, n, w, &st);
        int close_rc = mt_writer_close(w, 0);
        w = NULL;
        if (put_rc != 0 || close_rc != 0) {
            snprintf(err, errlen, "%s: writing symbols failed: %s", path, strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    if (fd >= 0) close(fd);
    scan_free(&s);
    st.seconds = now_s() - t0;
    if (stats) *stats = st;
    return rc;
}
