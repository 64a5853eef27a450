/* See fixture_module.h. */
#include "fixture_module.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct find_ctx {
    const char *needle;
    mt_fix_module *m;
    int found;
} find_ctx;

static void note_build_id(mt_fix_module *m, const uint8_t *p, size_t len)
{
    size_t off = 0;
    while (off + sizeof(ElfW(Nhdr)) <= len) {
        const ElfW(Nhdr) *nh = (const void *)(p + off);
        size_t name_off = off + sizeof *nh;
        size_t desc_off = name_off + ((nh->n_namesz + 3) & ~3u);
        size_t next = desc_off + ((nh->n_descsz + 3) & ~3u);
        if (next > len) return;
        if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
            memcmp(p + name_off, "GNU", 4) == 0 && nh->n_descsz <= sizeof m->build_id) {
            memcpy(m->build_id, p + desc_off, nh->n_descsz);
            m->build_id_len = nh->n_descsz;
            return;
        }
        off = next;
    }
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    find_ctx *c = arg;
    if (!info->dlpi_name || !strstr(info->dlpi_name, c->needle)) return 0;
    mt_fix_module *m = c->m;
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", info->dlpi_name);
    m->bias = info->dlpi_addr;
    m->start = UINT64_MAX;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            uint64_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
            if (lo < m->start) m->start = lo;
            if (hi > m->end) m->end = hi;
        } else if (ph->p_type == PT_NOTE && !m->build_id_len) {
            note_build_id(m, (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz);
        }
    }
    c->found = 1;
    return 1;
}

int mt_fix_find_module(const char *needle, mt_fix_module *m)
{
    find_ctx c = {needle, m, 0};
    dl_iterate_phdr(find_cb, &c);
    return c.found ? 0 : -1;
}

mt_record mt_fix_module_record(const mt_fix_module *m, uint32_t id)
{
    mt_record r = {.type = MT_REC_MODULE};
    r.u.module = (mt_module){id, m->bias, m->start, m->end, m->path, m->build_id, m->build_id_len};
    return r;
}

int mt_fix_write_trace(const char *path, const mt_record *recs, size_t nrecs, const uint64_t *ips,
                       size_t nips, size_t chunk_bytes)
{
    return mt_fix_write_trace_version(path, MT_TRACE_VERSION, recs, nrecs, ips, nips, chunk_bytes);
}

int mt_fix_write_trace_version(const char *path, uint16_t version, const mt_record *recs,
                               size_t nrecs, const uint64_t *ips, size_t nips, size_t chunk_bytes)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    mt_file_header hdr = {.version = version, .pid = (uint32_t)getpid(),
                          .start_monotonic_ns = 1000, .start_realtime_ns = 2000};
    mt_writer *w = mt_writer_open_fd(fd, &hdr, chunk_bytes);
    if (!w) {
        close(fd);
        return -1;
    }
    int rc = 0;
    mt_record p = {.type = MT_REC_PROCESS};
    p.u.process = (mt_process){(uint32_t)getpid(), 1, "test", "test --symbols", "host"};
    rc |= mt_writer_put(w, &p);
    for (size_t i = 0; i < nrecs; i++) rc |= mt_writer_put(w, &recs[i]);
    for (size_t i = 0; i < nips; i++) {
        mt_record n = {.type = MT_REC_STACK_NODE};
        n.u.node = (mt_stack_node){(uint32_t)i + 1, (uint32_t)i, ips[i], MT_FRAME_NATIVE};
        rc |= mt_writer_put(w, &n);
    }
    rc |= mt_writer_close(w, 1);
    return rc ? -1 : 0;
}

long mt_fix_read_symbols(const char *path, mt_fix_sym **out)
{
    char err[256];
    *out = NULL;
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    if (!r) return -1;
    long n = 0, cap = 0;
    mt_record rec;
    mt_read_status st;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        if (rec.type != MT_REC_SYMBOL) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            *out = realloc(*out, (size_t)cap * sizeof **out);
        }
        mt_fix_sym *s = &(*out)[n++];
        s->ip = rec.u.symbol.ip;
        s->module = rec.u.symbol.module;
        s->line = rec.u.symbol.line;
        s->depth = rec.u.symbol.depth;
        snprintf(s->function, sizeof s->function, "%s", rec.u.symbol.function);
        snprintf(s->file, sizeof s->file, "%s", rec.u.symbol.file);
    }
    mt_reader_close(r);
    return st == MT_READ_END ? n : -1;
}

int mt_fix_frames_of(mt_fix_sym *syms, long nsyms, uint64_t ip, mt_fix_sym **frames, int max)
{
    int n = 0;
    for (int depth = 0; depth < max; depth++) {
        mt_fix_sym *hit = NULL;
        for (long i = 0; i < nsyms; i++)
            if (syms[i].ip == ip && syms[i].depth == (uint32_t)depth) hit = &syms[i];
        if (!hit) break;
        frames[n++] = hit;
    }
    return n;
}

const char *mt_fix_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}
