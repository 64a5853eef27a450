/* Locating a module's separate debug file (Debian's -dbgsym packages, `objcopy --only-keep-debug`
 * + `--add-gnu-debuglink`): the same places gdb looks, in the same order. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "symbols_internal.h"

/* CRC32 of a whole file, as .gnu_debuglink stores it (the zlib polynomial and conditioning). */
static int file_crc32(const char *path, uint32_t *out)
{
    int fd = mt_open_regular(path);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return -1;
        }
        const unsigned char *b = p;
        for (off_t done = 0; done < st.st_size;) { /* zlib takes uInt lengths: feed 1 GB pieces */
            uInt n = (uInt)(st.st_size - done > (1 << 30) ? (1 << 30) : st.st_size - done);
            crc = crc32(crc, b + done, n);
            done += n;
        }
        munmap(p, (size_t)st.st_size);
    }
    close(fd);
    *out = (uint32_t)crc;
    return 0;
}

/* A candidate is the debug file of f when it is ELF, not f itself, has DWARF, and its build id
 * matches f's (or, when either lacks one, its CRC matches the debuglink's). */
static int candidate_ok(const char *obj_path, const mt_elf_file *f, const char *cand,
                        int check_crc)
{
    char a[4096], b[4096];
    if (!realpath(cand, b)) return 0;
    if (realpath(obj_path, a) && strcmp(a, b) == 0) return 0;
    mt_elf_file d;
    char err[256];
    if (mt_elf_open(&d, cand, err, sizeof err) != 0) return 0;
    int ok = d.has_debug_info;
    if (ok && f->build_id_len && d.build_id_len)
        ok = f->build_id_len == d.build_id_len &&
             memcmp(f->build_id, d.build_id, f->build_id_len) == 0;
    else if (ok && check_crc) {
        uint32_t crc;
        ok = file_crc32(cand, &crc) == 0 && crc == f->debuglink_crc;
    }
    mt_elf_close(&d);
    return ok;
}

int mt_find_debug_file(const char *path, const mt_elf_file *f, const char *debug_root, char *out,
                       size_t outlen)
{
    if (!debug_root) debug_root = "/usr/lib/debug";
    char cand[4096];
    if (f->build_id_len >= 2) {
        /* <root>/.build-id/ab/cdef....debug : first byte names the directory */
        int n = snprintf(cand, sizeof cand, "%s/.build-id/%02x/", debug_root, f->build_id[0]);
        for (uint32_t i = 1; i < f->build_id_len && n > 0 && (size_t)n + 3 < sizeof cand; i++)
            n += snprintf(cand + n, sizeof cand - (size_t)n, "%02x", f->build_id[i]);
        snprintf(cand + n, sizeof cand - (size_t)n, ".debug");
        if (candidate_ok(path, f, cand, 0)) goto found;
    }
    if (f->debuglink) {
        /* dir = the object's directory, as an absolute path when we can get one, so that
         * <root><dir>/<link> names /usr/lib/debug/usr/lib/x86_64-linux-gnu/libfoo.so.debug. */
        char dir[4096];
        if (!realpath(path, dir)) snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
        for (int i = 0; i < 3; i++) {
            int len;
            if (i == 0) len = snprintf(cand, sizeof cand, "%s/%s", dir, f->debuglink);
            else if (i == 1) len = snprintf(cand, sizeof cand, "%s/.debug/%s", dir, f->debuglink);
            else len = snprintf(cand, sizeof cand, "%s%s/%s", debug_root, dir, f->debuglink);
            if (len > 0 && (size_t)len < sizeof cand && candidate_ok(path, f, cand, 1))
                goto found;
        }
    }
    return 0;
found:
    snprintf(out, outlen, "%s", cand);
    return 1;
}
