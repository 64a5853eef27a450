/* The next chunk loaded by an idle thread (src/trace/ahead.h). Driven here on one thread, so that
 * every chunk the feed can be helped with is: a helper loads each offer as soon as it is made.
 * What the feed returns must then be what a feed that reads alone returns, record for record,
 * damage for damage, on whole files and on damaged ones (a damaged chunk's offer names no chunk,
 * or the wrong one); and the helpers never load more than the feed's good chunks earned them. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"
#include "trace/ahead.h"
#include "trace/bytes.h"
#include "trace/feed.h"
#include "trace/layout.h"
#include "trace/record_eq.h"
#include "trace/record_mix.h"

enum { N = 3000 };

/* Writes N mixed records in chunks of ~900 raw bytes; returns the file and its chunks' offsets. */
static uint8_t *build(const char *path, size_t *len, uint64_t *offs, size_t *noffs)
{
    mt_mix m;
    mt_mix_init(&m, 23);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 9};
    mt_writer *w = mt_writer_open_fd(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), &h, 900);
    cr_assert_not_null(w);
    for (size_t i = 0; i < N; i++) {
        mt_record rec;
        mt_mix_next(&m, &rec);
        cr_assert_eq(mt_writer_put(w, &rec), 0);
    }
    cr_assert_eq(mt_writer_close(w, 1), 0);
    uint8_t *data = mt_test_slurp(path, len);
    cr_assert_not_null(data);
    *noffs = 0;
    for (uint64_t off = MT_FILE_HEADER_SIZE; off + 16 <= *len; off += 16 + mt_get_le32(data + off + 4))
        offs[(*noffs)++] = off;
    return data;
}

typedef struct outcome {
    size_t n; /* records */
    mt_read_status end;
    uint64_t dmg_chunks, dmg_bytes, dmg_off;
    char damage[256];
    uint64_t loaded, taken; /* by helpers */
} outcome;

/* Reads path to its end through a feed; `helped`: with a helper that loads every offer at once
 * (same_alone_and_helped compares the records themselves). */
static outcome read_feed(const char *path, int helped)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    off_t size = lseek(fd, 0, SEEK_END);
    mt_feed f;
    cr_assert_eq(mt_feed_init(&f, fd, path, MT_TRACE_VERSION, (uint64_t)size, MT_FILE_HEADER_SIZE,
                              2, helped),
                 0);
    outcome o = {0};
    mt_record rec;
    for (;;) {
        if (helped && mt_ahead_wanted(f.ahead)) mt_ahead_help(f.ahead);
        o.end = mt_feed_next(&f, &rec);
        if (o.end != MT_READ_RECORD) break;
        o.n++;
    }
    o.dmg_chunks = f.damaged_chunks;
    o.dmg_bytes = f.damaged_bytes;
    o.dmg_off = f.damage_off;
    snprintf(o.damage, sizeof o.damage, "%s", f.damage);
    if (helped) {
        o.loaded = f.ahead->loaded;
        o.taken = f.ahead->taken;
    }
    mt_feed_free(&f);
    close(fd);
    return o;
}

/* Reads path alone and helped, record by record side by side (strings stay valid while both
 * feeds are on the same chunk), and asserts the same records, end and damage. */
static void same_alone_and_helped(const char *path, outcome *helped_out)
{
    int fda = open(path, O_RDONLY), fdb = open(path, O_RDONLY);
    off_t size = lseek(fda, 0, SEEK_END);
    mt_feed a, b;
    cr_assert_eq(mt_feed_init(&a, fda, path, MT_TRACE_VERSION, (uint64_t)size,
                              MT_FILE_HEADER_SIZE, 2, 0), 0);
    cr_assert_eq(mt_feed_init(&b, fdb, path, MT_TRACE_VERSION, (uint64_t)size,
                              MT_FILE_HEADER_SIZE, 2, 1), 0);
    size_t n = 0;
    for (;;) {
        if (mt_ahead_wanted(b.ahead)) mt_ahead_help(b.ahead);
        mt_record ra, rb;
        mt_read_status sa = mt_feed_next(&a, &ra), sb = mt_feed_next(&b, &rb);
        cr_assert_eq(sa, sb, "record %zu: status %d alone, %d helped", n, sa, sb);
        if (sa != MT_READ_RECORD) break;
        cr_assert(mt_record_eq(&ra, &rb), "record %zu differs", n);
        cr_assert_eq(a.chunk_off, b.chunk_off, "record %zu: chunk", n);
        n++;
    }
    cr_assert_eq(a.damaged_chunks, b.damaged_chunks);
    cr_assert_eq(a.damaged_bytes, b.damaged_bytes);
    cr_assert_eq(a.damage_off, b.damage_off);
    cr_assert_str_eq(a.damage, b.damage);
    cr_assert_str_eq(a.err, b.err);
    helped_out->n = n;
    helped_out->dmg_chunks = b.damaged_chunks;
    helped_out->loaded = b.ahead->loaded;
    helped_out->taken = b.ahead->taken;
    mt_feed_free(&a);
    mt_feed_free(&b);
    close(fda);
    close(fdb);
}

Test(trace_ahead, every_chunk_but_the_first_loaded_ahead_reads_as_alone)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "ahead.mtrace");
    size_t len, nchunks;
    static uint64_t offs[8192];
    uint8_t *data = build(path, &len, offs, &nchunks);
    cr_assert_gt(nchunks, 20);
    outcome alone = read_feed(path, 0), helped = read_feed(path, 1);
    cr_assert_eq(alone.end, MT_READ_END);
    cr_assert_eq(helped.end, MT_READ_END);
    cr_assert_eq(alone.n, N);
    cr_assert_eq(helped.n, N);
    /* the first chunk is the feed's own; every other one a helper loaded and the feed took */
    cr_assert_eq(helped.taken, nchunks - 1, "taken %llu of %zu chunks",
                 (unsigned long long)helped.taken, nchunks);
    cr_assert_eq(helped.loaded, helped.taken);
    outcome side = {0};
    same_alone_and_helped(path, &side);
    cr_assert_eq(side.n, N);
    cr_assert_eq(side.dmg_chunks, 0);
    free(data);
}

/* Damage in chunk k, written into a copy of the file: the helper's offer after chunk k-1 is
 * chunk k itself (it fails its checks there and the feed loads it again, finding the damage);
 * chunk k's own offer, read from its header, may name no chunk at all. */
static void damaged(const uint8_t *data, size_t len, uint64_t at, uint8_t xor_with,
                    const char *path, size_t *records, uint64_t *dmg)
{
    uint8_t *copy = malloc(len);
    memcpy(copy, data, len);
    copy[at] ^= xor_with;
    cr_assert_eq(mt_test_spit(path, copy, len), 0);
    outcome o = {0};
    same_alone_and_helped(path, &o);
    *records = o.n;
    *dmg = o.dmg_chunks;
    free(copy);
}

Test(trace_ahead, a_damaged_chunk_reads_as_alone)
{
    char path[256], dpath[256];
    mt_test_tmpname(path, sizeof path, "ahead-src.mtrace");
    mt_test_tmpname(dpath, sizeof dpath, "ahead-dmg.mtrace");
    size_t len, nchunks, records;
    uint64_t dmg;
    static uint64_t offs[8192];
    uint8_t *data = build(path, &len, offs, &nchunks);
    size_t k = nchunks / 2;
    /* a payload byte (CRC mismatch), the magic, the compressed length (the offer after it points
     * into the next chunk's payload), the raw length, a byte of the next chunk's magic */
    struct { uint64_t at; uint8_t x; } cases[] = {
        {offs[k] + 16 + 5, 0x20}, {offs[k], 0x01}, {offs[k] + 4, 0x04},
        {offs[k] + 8, 0x01},      {offs[k + 1] + 2, 0x40},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        damaged(data, len, cases[c].at, cases[c].x, dpath, &records, &dmg);
        cr_assert_lt(records, N, "case %zu: the damage cost records", c);
        cr_assert_geq(dmg, 1, "case %zu: and was counted", c);
    }
    /* and a cut file: the last chunk's payload ends early */
    cr_assert_eq(mt_test_spit(dpath, data, len - 7), 0);
    outcome o = {0};
    same_alone_and_helped(dpath, &o);
    cr_assert_lt(o.n, N);
    free(data);
}

/* A file whose one chunk holds rawlen zero bytes: returns the file's size. */
static size_t zero_chunk_file(const char *path, size_t rawlen)
{
    uint8_t *raw = calloc(1, rawlen);
    size_t len = mt_test_chunk_file(path, MT_TRACE_VERSION, raw, rawlen);
    cr_assert_gt(len, 0);
    free(raw);
    return len;
}

Test(trace_ahead, helpers_load_no_more_than_the_feed_earned_them)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "ahead-big.mtrace");
    size_t rawlen = 20u << 20; /* beyond the 16 MiB a reader starts with */
    size_t len = zero_chunk_file(path, rawlen);
    int fd = open(path, O_RDONLY);
    mt_ahead a;
    cr_assert_eq(mt_ahead_init(&a, fd, len), 0);
    uint8_t *raw = NULL;
    size_t cap = 0;
    mt_chunk ch;
    uint64_t size = len;

    mt_ahead_offer(&a, MT_FILE_HEADER_SIZE);
    cr_assert(mt_ahead_wanted(&a));
    cr_assert_eq(mt_ahead_help(&a), 1, "it took the offer up");
    cr_assert_eq(a.loaded, 0, "but could not afford the chunk");
    cr_assert_eq(mt_ahead_take(&a, MT_FILE_HEADER_SIZE, &raw, &cap, &ch, &size), 0);
    cr_assert_not(mt_ahead_wanted(&a), "the offer is withdrawn");
    cr_assert_eq(mt_ahead_help(&a), 0, "nothing to help with");

    mt_ahead_earn(&a, 0, 4u << 20); /* 16 + 8 MiB: now it can */
    mt_ahead_offer(&a, MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_ahead_help(&a), 1);
    cr_assert_eq(a.loaded, 1);
    /* an offset other than the one loaded takes nothing */
    cr_assert_eq(mt_ahead_take(&a, MT_FILE_HEADER_SIZE + 1, &raw, &cap, &ch, &size), 0);
    /* what is left of the budget (24 MiB less that load) does not pay for another */
    mt_ahead_offer(&a, MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_ahead_help(&a), 1);
    cr_assert_eq(a.loaded, 1, "spent: %llu bytes left", (unsigned long long)a.budget);
    cr_assert_eq(mt_ahead_take(&a, MT_FILE_HEADER_SIZE, &raw, &cap, &ch, &size), 0);
    mt_ahead_earn(&a, 0, 10u << 20);
    mt_ahead_offer(&a, MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_ahead_help(&a), 1);
    cr_assert_eq(a.loaded, 2);
    cr_assert_eq(mt_ahead_take(&a, MT_FILE_HEADER_SIZE, &raw, &cap, &ch, &size), 1);
    cr_assert_eq(a.taken, 1);
    cr_assert_eq(ch.rlen, rawlen);
    cr_assert_eq(ch.end, len);
    cr_assert_geq(cap, rawlen);
    cr_assert_eq(raw[0], 0);
    cr_assert_eq(raw[rawlen - 1], 0);
    free(raw);
    mt_ahead_free(&a);
    close(fd);
}
