/* Seed corpus for the fuzzers: `make_seeds FILE_DIR PAYLOAD_DIR TRACE...` writes each trace and a
 * few generated ones (the hostile cases of tests/support/hostile.c, small) into FILE_DIR, and the
 * inflated payload of each of their chunks, in the payload fuzzer's input format, into
 * PAYLOAD_DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "hostile.h"

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *len = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static void spit(const char *dir, const char *stem, unsigned k, const uint8_t *p, size_t n,
                 int pieces_byte)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%u", dir, stem, k);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (pieces_byte >= 0) fputc(pieces_byte, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One file seed, and one payload seed per chunk. */
static void seed(const char *fdir, const char *pdir, const char *path, const char *stem)
{
    size_t len;
    uint8_t *b = slurp(path, &len);
    if (!b || len < 64) {
        free(b);
        return;
    }
    spit(fdir, stem, 0, b, len, -1);
    /* the payload harness's first byte: one chunk, and bit 2 for a version 1 file's payloads */
    int first = b[8] == 1 && b[9] == 0 ? 4 : 0;
    unsigned k = 0;
    for (size_t off = 64; off + 16 <= len && memcmp(b + off, "MTCK", 4) == 0 && k < 64; k++) {
        uint32_t clen = le32(b + off + 4), rlen = le32(b + off + 8);
        if (off + 16 + clen > len || rlen > (64u << 20)) break;
        uint8_t *raw = malloc(rlen ? rlen : 1);
        uLongf got = rlen;
        if (raw && uncompress(raw, &got, b + off + 16, clen) == Z_OK)
            spit(pdir, stem, k, raw, got, first);
        free(raw);
        off += 16 + clen;
    }
    free(b);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: make_seeds FILE_DIR PAYLOAD_DIR TRACE...\n");
        return 2;
    }
    const char *fdir = argv[1], *pdir = argv[2];
    for (int i = 3; i < argc; i++) {
        const char *base = strrchr(argv[i], '/');
        seed(fdir, pdir, argv[i], base ? base + 1 : argv[i]);
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.gen.mtrace", fdir);
    struct {
        const char *stem;
        int rc;
    } gen[] = {
        {"id_bomb", mt_hostile_id_bomb(tmp, (1u << 26) - 1)},
    };
    seed(fdir, pdir, tmp, gen[0].stem);
    if (mt_hostile_devices(tmp, 40) == 0) seed(fdir, pdir, tmp, "devices");
    if (mt_hostile_unknown_device_frees(tmp, 8, 40) == 0) seed(fdir, pdir, tmp, "frees");
    if (mt_hostile_parent_cycle(tmp, 4, 20) == 0) seed(fdir, pdir, tmp, "cycle");
    if (mt_hostile_deep_chain(tmp, 40, 10) == 0) seed(fdir, pdir, tmp, "chain");
    remove(tmp);
    return 0;
}
