/* Damaged traces: a flipped payload byte is CORRUPT at its chunk's offset, bad magic and newer
 * versions are refused at open, hand-made chunks with a valid CRC but bad records are CORRUPT,
 * and random damage never crashes the reader. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "memtrace/trace.h"
#include "testutil.h"
#include "trace/bytes.h"
#include "trace/record_eq.h"
#include "trace/record_mix.h"

enum { N = 2000 };
static mt_record recs[N];

/* Writes the mix with small chunks; returns the file bytes, and the chunk offsets in offs. */
static uint8_t *build(const char *path, size_t *len, uint64_t *offs, size_t *noffs)
{
    mt_mix m;
    mt_mix_init(&m, 11);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 9};
    mt_writer *w = mt_writer_open_fd(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), &h, 900);
    cr_assert_not_null(w);
    for (size_t i = 0; i < N; i++) {
        mt_mix_next(&m, &recs[i]);
        cr_assert_eq(mt_writer_put(w, &recs[i]), 0);
    }
    cr_assert_eq(mt_writer_close(w, 1), 0);
    uint8_t *data = mt_test_slurp(path, len);
    cr_assert_not_null(data);
    *noffs = 0;
    for (uint64_t off = MT_FILE_HEADER_SIZE; off < *len; off += 16 + mt_get_le32(data + off + 4))
        offs[(*noffs)++] = off;
    return data;
}

/* Reads path to its end; returns the final status and the number of records before it, each of
 * which must equal recs[]. */
static mt_read_status read_all(const char *path, mt_reader **out, size_t *count)
{
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    mt_read_status st;
    size_t i = 0;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        cr_assert_lt(i, N);
        cr_assert(mt_record_eq(&rec, &recs[i]), "record %zu differs", i);
        i++;
    }
    *out = r;
    *count = i;
    return st;
}

Test(trace_corrupt, flipped_payload_byte_is_corrupt_at_its_chunk)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "flip.mtrace");
    size_t len, n;
    static uint64_t offs[4096];
    uint8_t *data = build(path, &len, offs, &n);
    cr_assert_gt(n, 10);
    size_t bad[] = {0, n / 2, n - 1};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        size_t k = bad[b];
        uint8_t *copy = malloc(len);
        memcpy(copy, data, len);
        copy[offs[k] + 16 + 3] ^= 0x20; /* a byte inside chunk k's compressed payload */
        cr_assert_eq(mt_test_spit(path, copy, len), 0);
        mt_reader *r;
        size_t count;
        cr_assert_eq(read_all(path, &r, &count), MT_READ_CORRUPT, "chunk %zu", k);
        cr_assert_eq(mt_reader_error_offset(r), offs[k]);
        cr_assert(strstr(mt_reader_error(r), path), "%s", mt_reader_error(r));
        cr_assert(strstr(mt_reader_error(r), "CRC"), "%s", mt_reader_error(r));
        mt_record rec;
        cr_assert_eq(mt_reader_next(r, &rec), MT_READ_CORRUPT, "sticky");
        mt_reader_close(r);
        /* every record of the chunks before k came back: count them with a cut copy */
        cr_assert_eq(mt_test_spit(path, data, offs[k]), 0);
        size_t before;
        cr_assert_eq(read_all(path, &r, &before), MT_READ_END);
        mt_reader_close(r);
        cr_assert_eq(count, before);
        free(copy);
    }
    /* a damaged chunk magic is corrupt too */
    data[offs[1]] = 'X';
    cr_assert_eq(mt_test_spit(path, data, len), 0);
    mt_reader *r;
    size_t count;
    cr_assert_eq(read_all(path, &r, &count), MT_READ_CORRUPT);
    cr_assert_eq(mt_reader_error_offset(r), offs[1]);
    mt_reader_close(r);
    free(data);
    unlink(path);
}

static void write_header(uint8_t *h, uint16_t version, uint16_t size)
{
    memset(h, 0, MT_FILE_HEADER_SIZE);
    memcpy(h, MT_TRACE_MAGIC, 8);
    mt_put_le16(h + 8, version);
    mt_put_le16(h + 10, size);
}

Test(trace_corrupt, bad_magic_and_newer_version_refused)
{
    char path[256], err[512];
    mt_test_tmpname(path, sizeof path, "hdr.mtrace");
    uint8_t h[MT_FILE_HEADER_SIZE + 8];

    write_header(h, MT_TRACE_VERSION, MT_FILE_HEADER_SIZE);
    h[1] = 'X';
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));
    cr_assert(strstr(err, path) && strstr(err, "offset 0") && strstr(err, "magic"), "%s", err);
    cr_assert_null(strchr(err, '\n'), "one line");

    write_header(h, MT_TRACE_VERSION + 1, MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));
    cr_assert(strstr(err, path) && strstr(err, "version 2"), "%s", err);

    write_header(h, 0, MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));

    write_header(h, MT_TRACE_VERSION, 32); /* header size below 64 */
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));

    /* a larger header (a future minor addition) is skipped */
    write_header(h, MT_TRACE_VERSION, MT_FILE_HEADER_SIZE + 8);
    memset(h + MT_FILE_HEADER_SIZE, 0xAB, 8);
    cr_assert_eq(mt_test_spit(path, h, sizeof h), 0);
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_END);
    mt_reader_close(r);

    cr_assert_null(mt_reader_open("/nonexistent/x.mtrace", err, sizeof err));
    cr_assert(strstr(err, "/nonexistent/x.mtrace"), "%s", err);
    unlink(path);
}

/* A chunk with a correct CRC around a raw payload of our choosing. */
static size_t make_chunk(uint8_t *out, const uint8_t *raw, size_t rawlen)
{
    uLongf clen = compressBound(rawlen);
    cr_assert_eq(compress(out + 16, &clen, raw, rawlen), Z_OK);
    memcpy(out, "MTCK", 4);
    mt_put_le32(out + 4, (uint32_t)clen);
    mt_put_le32(out + 8, (uint32_t)rawlen);
    uLong crc = crc32(crc32(0, out + 4, 8), out + 16, (uInt)clen);
    mt_put_le32(out + 12, (uint32_t)crc);
    return 16 + clen;
}

static mt_read_status read_crafted(const char *path, const uint8_t *raw, size_t rawlen,
                                   size_t *records)
{
    uint8_t file[4096];
    write_header(file, MT_TRACE_VERSION, MT_FILE_HEADER_SIZE);
    size_t len = MT_FILE_HEADER_SIZE + make_chunk(file + MT_FILE_HEADER_SIZE, raw, rawlen);
    cr_assert_eq(mt_test_spit(path, file, len), 0);
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    mt_read_status st;
    *records = 0;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD)
        ++*records;
    if (st == MT_READ_CORRUPT) cr_assert_eq(mt_reader_error_offset(r), MT_FILE_HEADER_SIZE);
    mt_reader_close(r);
    return st;
}

Test(trace_corrupt, valid_crc_bad_records)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "crafted.mtrace");
    size_t n;
    /* lane directory: main lane 2 bytes, others empty; then the main lane */
    const uint8_t ok[] = {2, 0, 0, 0, 0, 0, MT_REC_DROPPED, 5};
    cr_assert_eq(read_crafted(path, ok, sizeof ok, &n), MT_READ_END, "the crafting is right");
    cr_assert_eq(n, 1);
    const uint8_t unknown[] = {3, 0, 0, 0, 0, 0, MT_REC_DROPPED, 5, 0xEE};
    cr_assert_eq(read_crafted(path, unknown, sizeof unknown, &n), MT_READ_CORRUPT);
    cr_assert_eq(n, 1, "the record before the unknown type is still returned");
    const uint8_t type0[] = {1, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(read_crafted(path, type0, sizeof type0, &n), MT_READ_CORRUPT);
    const uint8_t cut_varint[] = {2, 0, 0, 0, 0, 0, MT_REC_DROPPED, 0x85};
    cr_assert_eq(read_crafted(path, cut_varint, sizeof cut_varint, &n), MT_READ_CORRUPT);
    const uint8_t long_varint[] = {12,   0,    0,    0,    0,    0,    MT_REC_DROPPED, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,           0x7f, 0};
    cr_assert_eq(read_crafted(path, long_varint, sizeof long_varint, &n), MT_READ_CORRUPT);
    const uint8_t str_past_end[] = {4, 0, 0, 0, 0, 0, MT_REC_THREAD, 1, 100, 'a'};
    cr_assert_eq(read_crafted(path, str_past_end, sizeof str_past_end, &n), MT_READ_CORRUPT);
    const uint8_t str_no_nul[] = {5, 0, 0, 0, 0, 0, MT_REC_THREAD, 1, 1, 'a', 'b'};
    cr_assert_eq(read_crafted(path, str_no_nul, sizeof str_no_nul, &n), MT_READ_CORRUPT);
    const uint8_t u32_overflow[] = {8,    0,    0,    0,    0,    0, MT_REC_THREAD,
                                    0x80, 0x80, 0x80, 0x80, 0x10, 0, 0};
    cr_assert_eq(read_crafted(path, u32_overflow, sizeof u32_overflow, &n), MT_READ_CORRUPT);
    /* an event whose time lane is empty */
    const uint8_t no_time[] = {2, 0, 0, 0, 0, 0, MT_REC_EVENT, MT_OP_ALLOC};
    cr_assert_eq(read_crafted(path, no_time, sizeof no_time, &n), MT_READ_CORRUPT);
    /* an event with its time, plus a stray byte left in the address lane */
    const uint8_t stray[] = {2, 1, 1, 0, 0, 0, MT_REC_EVENT, MT_OP_ALLOC, 4, 9};
    cr_assert_eq(read_crafted(path, stray, sizeof stray, &n), MT_READ_CORRUPT);
    cr_assert_eq(n, 1);
    /* lane lengths that do not add up */
    const uint8_t dir_short[] = {9, 0, 0, 0, 0, 0, MT_REC_DROPPED, 5};
    cr_assert_eq(read_crafted(path, dir_short, sizeof dir_short, &n), MT_READ_CORRUPT);
    const uint8_t dir_long[] = {1, 0, 0, 0, 0, 0, MT_REC_DROPPED, 5};
    cr_assert_eq(read_crafted(path, dir_long, sizeof dir_long, &n), MT_READ_CORRUPT);
    unlink(path);
}

Test(trace_corrupt, random_damage_never_crashes)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "fuzz.mtrace");
    size_t len, n;
    static uint64_t offs[4096];
    uint8_t *data = build(path, &len, offs, &n);
    uint8_t *copy = malloc(len);
    mt_mix m;
    mt_mix_init(&m, 1234);
    int outcomes[4] = {0};
    for (int iter = 0; iter < 600; iter++) {
        memcpy(copy, data, len);
        size_t flips = 1 + mt_mix_rand(&m) % 8;
        for (size_t f = 0; f < flips; f++) {
            /* mostly past the header, where a reader must survive anything */
            size_t at = MT_FILE_HEADER_SIZE + mt_mix_rand(&m) % (len - MT_FILE_HEADER_SIZE);
            copy[at] = (uint8_t)mt_mix_rand(&m);
        }
        size_t cut = iter % 3 == 0 ? MT_FILE_HEADER_SIZE + mt_mix_rand(&m) % (len - 63) : len;
        cr_assert_eq(mt_test_spit(path, copy, cut), 0);
        char err[512];
        mt_reader *r = mt_reader_open(path, err, sizeof err);
        cr_assert_not_null(r, "%s", err);
        mt_record rec;
        mt_read_status st;
        size_t got = 0;
        while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD)
            cr_assert_leq(++got, N);
        cr_assert(st == MT_READ_END || st == MT_READ_TRUNCATED || st == MT_READ_CORRUPT);
        outcomes[-st]++;
        mt_reader_close(r);
    }
    cr_assert_gt(outcomes[-MT_READ_CORRUPT], 300, "damage is detected");
    free(copy);
    free(data);
    unlink(path);
}
