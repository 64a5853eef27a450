/* Damaged traces. Strict mode: a flipped payload byte is CORRUPT at its chunk's offset, hand-made
 * chunks with a valid CRC but bad records are CORRUPT. Default mode: the reader steps over the
 * damaged chunk, returns every record of every other chunk and says what it skipped. Bad magic and
 * newer versions are refused at open, and random damage never crashes the reader. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    mt_reader_set_strict(r, 1);
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

Test(trace_corrupt, strict_flipped_payload_byte_is_corrupt_at_its_chunk)
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

Test(trace_corrupt, bad_magic_and_newer_version_refused)
{
    char path[256], err[512];
    mt_test_tmpname(path, sizeof path, "hdr.mtrace");
    uint8_t h[MT_FILE_HEADER_SIZE + 8];

    mt_test_file_header(h, MT_TRACE_VERSION, MT_FILE_HEADER_SIZE);
    h[1] = 'X';
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));
    cr_assert(strstr(err, path) && strstr(err, "offset 0") && strstr(err, "magic"), "%s", err);
    cr_assert_null(strchr(err, '\n'), "one line");

    mt_test_file_header(h, MT_TRACE_VERSION + 1, MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));
    char want[32];
    snprintf(want, sizeof want, "version %d", MT_TRACE_VERSION + 1);
    cr_assert(strstr(err, path) && strstr(err, want), "%s", err);

    mt_test_file_header(h, 0, MT_FILE_HEADER_SIZE);
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));

    mt_test_file_header(h, MT_TRACE_VERSION, 32); /* header size below 64 */
    cr_assert_eq(mt_test_spit(path, h, MT_FILE_HEADER_SIZE), 0);
    cr_assert_null(mt_reader_open(path, err, sizeof err));

    /* a larger header (a future minor addition) is skipped */
    mt_test_file_header(h, MT_TRACE_VERSION, MT_FILE_HEADER_SIZE + 8);
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
    size_t n = mt_test_chunk(out, raw, rawlen);
    cr_assert_gt(n, 0);
    return n;
}

/* raw is a chunk payload in the layout of format `version` (its lane directory has 6 lengths in
 * version 1, 7 from version 2) */
static void write_crafted(const char *path, uint16_t version, const uint8_t *raw, size_t rawlen)
{
    cr_assert_gt(mt_test_chunk_file(path, version, raw, rawlen), 0);
}

static mt_read_status read_crafted_v(const char *path, uint16_t version, const uint8_t *raw,
                                     size_t rawlen, size_t *records)
{
    write_crafted(path, version, raw, rawlen);
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_reader_set_strict(r, 1);
    mt_record rec;
    mt_read_status st;
    *records = 0;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD)
        ++*records;
    if (st == MT_READ_CORRUPT) cr_assert_eq(mt_reader_error_offset(r), MT_FILE_HEADER_SIZE);
    mt_reader_close(r);
    return st;
}

#define read_crafted(path, raw, rawlen, records) read_crafted_v(path, 1, raw, rawlen, records)

/* The payloads below are drawn in version 1's layout (6 lanes), which readers keep reading; the
 * lanes version 2 changed are crafted in version2_time_lanes. */
Test(trace_corrupt, strict_valid_crc_bad_records)
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

/* Version 2: seven lanes, and an event's time delta is split into a varint of z >> 8 (time lane)
 * and z's low byte (time-lo lane, the 7th). */
Test(trace_corrupt, version2_time_lanes)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "crafted2.mtrace");
    size_t n;
    /* one event: time lane v(1), time-lo 0x2a: z = 0x12a, time 149 */
    const uint8_t ok[] = {2, 1, 0, 0, 0, 0, 1, MT_REC_EVENT, MT_OP_ALLOC, 1, 0x2a};
    cr_assert_eq(read_crafted_v(path, 2, ok, sizeof ok, &n), MT_READ_END, "the crafting is right");
    cr_assert_eq(n, 1);
    write_crafted(path, 2, ok, sizeof ok);
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_RECORD);
    cr_assert_eq(rec.type, MT_REC_EVENT);
    cr_assert_eq(rec.u.event.time_ns, 149, "z 0x12a is +149");
    mt_reader_close(r);
    /* the same bytes under a version 1 header: the 7th length is a stray main-lane byte */
    cr_assert_eq(read_crafted_v(path, 1, ok, sizeof ok, &n), MT_READ_CORRUPT);
    /* no low byte for the event */
    const uint8_t no_lo[] = {2, 1, 0, 0, 0, 0, 0, MT_REC_EVENT, MT_OP_ALLOC, 1};
    cr_assert_eq(read_crafted_v(path, 2, no_lo, sizeof no_lo, &n), MT_READ_CORRUPT);
    /* a low byte left over */
    const uint8_t stray_lo[] = {2, 1, 0, 0, 0, 0, 2, MT_REC_EVENT, MT_OP_ALLOC, 1, 0x2a, 7};
    cr_assert_eq(read_crafted_v(path, 2, stray_lo, sizeof stray_lo, &n), MT_READ_CORRUPT);
    cr_assert_eq(n, 1);
    /* a high part of 57 bits: with the low byte that is more than 64 */
    const uint8_t wide[] = {2, 9, 0, 0, 0, 0, 1, MT_REC_EVENT, MT_OP_ALLOC,
                            0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0};
    cr_assert_eq(read_crafted_v(path, 2, wide, sizeof wide, &n), MT_READ_CORRUPT);
    const uint8_t widest_ok[] = {2, 8, 0, 0, 0, 0, 1, MT_REC_EVENT, MT_OP_ALLOC,
                                 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff};
    cr_assert_eq(read_crafted_v(path, 2, widest_ok, sizeof widest_ok, &n), MT_READ_END,
                 "56 bits and a low byte are the whole 64-bit delta");
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
        for (int strict = 0; strict < 2; strict++) {
            mt_reader *r = mt_reader_open(path, err, sizeof err);
            cr_assert_not_null(r, "%s", err);
            mt_reader_set_strict(r, strict);
            mt_record rec;
            mt_read_status st;
            size_t got = 0;
            while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD)
                cr_assert_leq(++got, N);
            cr_assert(st == MT_READ_END || st == MT_READ_TRUNCATED ||
                      (strict && st == MT_READ_CORRUPT));
            mt_read_damage d;
            mt_reader_damage(r, &d);
            if (strict) outcomes[-st]++;
            else if (d.chunks) outcomes[3]++;
            mt_reader_close(r);
        }
    }
    cr_assert_gt(outcomes[-MT_READ_CORRUPT], 300, "damage is detected");
    cr_assert_gt(outcomes[3], 300, "and counted when stepped over");
    free(copy);
    free(data);
    unlink(path);
}

/* ---- default mode: damage is stepped over ---------------------------------------------------- */

/* Reads path in default mode; checks that the records returned are recs[] with [lost_from,
 * lost_to) missing, in order. Returns the final status, the damage in *d. */
static mt_read_status read_lenient(const char *path, size_t lost_from, size_t lost_to,
                                   mt_read_damage *d, char *first, size_t flen)
{
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    mt_read_status st;
    size_t i = 0;
    while ((st = mt_reader_next(r, &rec)) == MT_READ_RECORD) {
        if (i == lost_from) i = lost_to;
        cr_assert_lt(i, N, "more records than written (lost %zu..%zu)", lost_from, lost_to);
        cr_assert(mt_record_eq(&rec, &recs[i]), "record %zu differs (lost %zu..%zu)", i,
                  lost_from, lost_to);
        i++;
    }
    if (i == lost_from) i = lost_to;
    cr_assert_eq(i, N, "records up to %zu came back, lost %zu..%zu", i, lost_from, lost_to);
    mt_reader_damage(r, d);
    snprintf(first, flen, "%s", d->first);
    mt_reader_close(r);
    return st;
}

/* Records in chunks [0, k): read a copy cut at chunk k. */
static size_t records_before(const char *path, const uint8_t *data, uint64_t cut)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.cut", path);
    cr_assert_eq(mt_test_spit(tmp, data, cut), 0);
    mt_reader *r;
    size_t n;
    cr_assert_eq(read_all(tmp, &r, &n), MT_READ_END);
    mt_reader_close(r);
    unlink(tmp);
    return n;
}

Test(trace_corrupt, every_single_flipped_byte_loses_one_chunk_only)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "everyflip.mtrace");
    size_t len, n;
    static uint64_t offs[4096];
    uint8_t *data = build(path, &len, offs, &n);
    static size_t before[4097];
    for (size_t k = 0; k < n; k++) before[k] = records_before(path, data, offs[k]);
    before[n] = N;
    uint8_t *copy = malloc(len);
    size_t k = 0, flips = 0;
    for (size_t at = MT_FILE_HEADER_SIZE; at < len; at++) {
        while (k + 1 < n && offs[k + 1] <= at) k++;
        /* every byte of the first, a middle and the last chunk; every 23rd elsewhere */
        if (!(k == 0 || k == n / 2 || k + 1 == n || at % 23 == 0)) continue;
        flips++;
        memcpy(copy, data, len);
        copy[at] ^= 0x10;
        cr_assert_eq(mt_test_spit(path, copy, len), 0);
        mt_read_damage d;
        char first[300];
        mt_read_status st = read_lenient(path, before[k], before[k + 1], &d, first, sizeof first);
        if (st == MT_READ_TRUNCATED) {
            /* only a last chunk whose length now runs past the end of the file reads as cut */
            cr_assert_eq(k, n - 1, "byte %zu (chunk %zu of %zu)", at, k, n);
            cr_assert_eq(d.chunks, 0);
            continue;
        }
        cr_assert_eq(st, MT_READ_END, "byte %zu", at);
        cr_assert_eq(d.chunks, 1, "byte %zu: one damaged chunk", at);
        cr_assert_eq(d.first_offset, offs[k], "byte %zu", at);
        uint64_t end = k + 1 < n ? offs[k + 1] : len;
        cr_assert_eq(d.bytes, end - offs[k], "byte %zu: the chunk's bytes", at);
        cr_assert(strstr(first, path), "%s", first);
    }
    cr_assert_gt(flips, 1000, "%zu", flips);
    cr_log_info("%zu flips over %zu bytes, %zu chunks", flips, len, n);
    free(copy);
    free(data);
    unlink(path);
}

Test(trace_corrupt, garbage_between_chunks_is_skipped_and_counted)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "garbage.mtrace");
    size_t len, n;
    static uint64_t offs[4096];
    uint8_t *data = build(path, &len, offs, &n);
    size_t k = n / 2, junk = 1000;
    uint8_t *copy = malloc(len + junk);
    memcpy(copy, data, offs[k]);
    for (size_t i = 0; i < junk; i++) copy[offs[k] + i] = (uint8_t)(i * 7 + 1);
    memcpy(copy + offs[k] + junk, data + offs[k], len - offs[k]);
    cr_assert_eq(mt_test_spit(path, copy, len + junk), 0);
    mt_read_damage d;
    char first[300];
    cr_assert_eq(read_lenient(path, 0, 0, &d, first, sizeof first), MT_READ_END);
    cr_assert_eq(d.chunks, 1);
    cr_assert_eq(d.bytes, junk);
    cr_assert_eq(d.first_offset, offs[k]);
    cr_assert(strstr(first, "bad chunk magic"), "%s", first);
    /* and strict mode still refuses it */
    mt_reader *r;
    size_t count;
    cr_assert_eq(read_all(path, &r, &count), MT_READ_CORRUPT);
    mt_reader_close(r);
    free(copy);
    free(data);
    unlink(path);
}

Test(trace_corrupt, a_bad_record_drops_the_rest_of_its_chunk_only)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "badrec.mtrace");
    uint8_t file[4096];
    mt_test_file_header(file, 1, MT_FILE_HEADER_SIZE); /* payloads in version 1's layout: 6 lanes */
    size_t len = MT_FILE_HEADER_SIZE;
    const uint8_t bad[] = {3, 0, 0, 0, 0, 0, MT_REC_DROPPED, 5, 0xEE}; /* then an unknown type */
    const uint8_t good[] = {2, 0, 0, 0, 0, 0, MT_REC_DROPPED, 7};
    size_t first_chunk = make_chunk(file + len, bad, sizeof bad);
    len += first_chunk;
    len += make_chunk(file + len, good, sizeof good);
    cr_assert_eq(mt_test_spit(path, file, len), 0);
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_RECORD);
    cr_assert_eq(rec.u.dropped, 5);
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_RECORD);
    cr_assert_eq(rec.u.dropped, 7, "the next chunk is read");
    cr_assert_eq(mt_reader_next(r, &rec), MT_READ_END);
    mt_read_damage d;
    mt_reader_damage(r, &d);
    cr_assert_eq(d.chunks, 1);
    cr_assert_eq(d.bytes, first_chunk);
    cr_assert(strstr(d.first, "undecodable record"), "%s", d.first);
    mt_reader_close(r);
    unlink(path);
}

Test(trace_corrupt, false_chunk_starts_cannot_make_the_reader_slow, .timeout = 20)
{
    /* 4 MiB of fake chunk headers, each claiming a 1 MiB payload: without a budget the resync
     * would CRC 262144 payloads of 1 MiB (256 GiB). */
    char path[256];
    mt_test_tmpname(path, sizeof path, "falsestarts.mtrace");
    size_t len = 4u << 20;
    uint8_t *file = calloc(1, len);
    mt_test_file_header(file, MT_TRACE_VERSION, MT_FILE_HEADER_SIZE);
    for (size_t at = MT_FILE_HEADER_SIZE; at + 16 <= len; at += 16) {
        memcpy(file + at, "MTCK", 4);
        mt_put_le32(file + at + 4, 1u << 20);
        mt_put_le32(file + at + 8, 8u << 20);
        mt_put_le32(file + at + 12, 0);
    }
    cr_assert_eq(mt_test_spit(path, file, len), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    mt_read_status st = mt_reader_next(r, &rec);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert(st == MT_READ_END || st == MT_READ_TRUNCATED, "status %d", st);
    mt_read_damage d;
    mt_reader_damage(r, &d);
    cr_assert_geq(d.chunks + (st == MT_READ_TRUNCATED), 1);
    cr_assert_lt(s, 2.0, "%.2f s", s);
    mt_reader_close(r);
    free(file);
    unlink(path);
}

/* The same damaged file read one record at a time and a group at a time (mt_reader_next_group),
 * side by side (strings live in the readers' buffers): the same records, each with the same chunk
 * offset and damage so far, and the same end. */
Test(trace_corrupt, groups_read_what_one_at_a_time_reads)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "groups.mtrace");
    size_t len, n;
    static uint64_t offs[4096];
    uint8_t *data = build(path, &len, offs, &n);
    uint8_t *copy = malloc(len);
    mt_mix m;
    mt_mix_init(&m, 77);
    for (int iter = 0; iter < 200; iter++) {
        memcpy(copy, data, len);
        for (size_t f = iter ? 1 + mt_mix_rand(&m) % 4 : 0; f > 0; f--)
            copy[MT_FILE_HEADER_SIZE + mt_mix_rand(&m) % (len - MT_FILE_HEADER_SIZE)] =
                (uint8_t)mt_mix_rand(&m);
        size_t cut = iter % 4 == 1 ? MT_FILE_HEADER_SIZE + mt_mix_rand(&m) % (len - 63) : len;
        cr_assert_eq(mt_test_spit(path, copy, cut), 0);
        for (int strict = 0; strict < 2; strict++) {
            char err[512];
            mt_reader *ra = mt_reader_open(path, err, sizeof err), *rb = mt_reader_open(path, err, sizeof err);
            cr_assert(ra && rb, "%s", err);
            mt_reader_set_strict(ra, strict);
            mt_reader_set_strict(rb, strict);
            mt_read_status sa, sb = MT_READ_RECORD;
            mt_record rec;
            const mt_record *g = NULL;
            size_t k = 0, i = 0, records = 0;
            while ((sa = mt_reader_next(ra, &rec)) == MT_READ_RECORD) {
                if (i == k) {
                    i = 0;
                    k = mt_reader_next_group(rb, &g, &sb);
                    cr_assert_gt(k, 0, "iteration %d: the groups end after %zu records", iter,
                                 records);
                }
                cr_assert(mt_record_eq(&rec, &g[i]), "iteration %d: record %zu", iter, records);
                cr_assert_eq(mt_reader_offset(ra), mt_reader_offset(rb), "record %zu", records);
                mt_read_damage da, db;
                mt_reader_damage(ra, &da);
                mt_reader_damage(rb, &db);
                cr_assert_eq(da.chunks, db.chunks, "iteration %d: record %zu", iter, records);
                i++;
                records++;
            }
            cr_assert_eq(i, k, "iteration %d: %zu more records in the last group", iter, k - i);
            cr_assert_eq(mt_reader_next_group(rb, &g, &sb), 0);
            cr_assert_eq(sa, sb);
            mt_read_damage da, db;
            mt_reader_damage(ra, &da);
            mt_reader_damage(rb, &db);
            cr_assert_eq(da.chunks, db.chunks);
            cr_assert_eq(da.bytes, db.bytes);
            mt_reader_close(ra);
            mt_reader_close(rb);
        }
    }
    free(copy);
    free(data);
    unlink(path);
}
