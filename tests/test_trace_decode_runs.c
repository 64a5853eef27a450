/* Runs of plain events (mt_decode_events: no bound check per field, the codec's predictions in
 * registers) decode exactly as the checked decoder does, record by record: on well-formed chunks
 * of every kind of stream, and on chunks with bytes changed (where both must fail at the same
 * record, or both read the same values). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "decode_runs.h"
#include "trace/bytes.h"
#include "trace/record_mix.h"
#include "trace/synthetic.h"

#define LANE_CAP (1u << 20)

typedef struct payload {
    uint8_t *raw;
    size_t n, dir; /* bytes, and the directory's */
    size_t events;
} payload;

typedef enum stream { SYNTHETIC, MIX, TENSORS } stream;

/* The next record of a stream: the synthetic program's events (tid switches make rare fields), the
 * mix of every record type and edge values, or tensor events on three devices (version 2 predicts
 * their aux) with an escaped op now and then. Tensor events are as the recorder writes them: no
 * correlation id, API or context, a free without a stack; so their chunk's correlation lane is
 * empty, which must not keep them out of runs. */
static void next_record(stream s, mt_synth *sy, mt_mix *mx, uint64_t i, mt_record *r)
{
    memset(r, 0, sizeof *r);
    if (s == MIX) {
        mt_mix_next(mx, r);
        return;
    }
    r->type = MT_REC_EVENT;
    mt_synth_next(sy, &r->u.event);
    if (s == TENSORS) {
        static uint64_t counter[3];
        mt_event *e = &r->u.event;
        e->kind = MT_KIND_TENSOR;
        e->device = (int32_t)(i / 100 % 3);
        counter[e->device] += e->op == MT_OP_ALLOC ? e->bytes : -e->bytes;
        e->aux = counter[e->device];
        e->correlation = 0;
        e->api = 0;
        e->context = 0;
        if (e->op == MT_OP_FREE) e->stack = 0;
        if (i % 997 == 0) e->op = 9; /* an op the head cannot hold */
        if (i % 1499 == 0) e->time_ns += 1ull << 60; /* a time delta longer than 8 bytes */
    }
}

/* n records of stream s encoded as one chunk's raw payload of format `version`. */
static payload encode(stream s, unsigned version, size_t n, uint64_t seed)
{
    static mt_codec c;
    uint8_t *lane[MT_LANES], *at[MT_LANES];
    for (int i = 0; i < MT_LANES; i++) cr_assert_not_null(at[i] = lane[i] = malloc(LANE_CAP));
    mt_codec_reset(&c, version);
    mt_synth sy;
    mt_synth_init(&sy, seed);
    mt_mix mx;
    mt_mix_init(&mx, seed);
    payload p = {0};
    for (size_t i = 0; i < n; i++) {
        mt_record r;
        next_record(s, &sy, &mx, i, &r);
        cr_assert_lt(at[MT_LANE_MAIN] - lane[MT_LANE_MAIN] + mt_encode_bound(&r), LANE_CAP);
        cr_assert_gt(mt_encode_record(&c, at, &r), 0);
        p.events += r.type == MT_REC_EVENT;
    }
    size_t len[MT_LANES] = {0}, total = 0;
    for (int i = 0; i < mt_lanes_of(version); i++) total += len[i] = (size_t)(at[i] - lane[i]);
    cr_assert_not_null(p.raw = malloc(MT_LANES_DIR_MAX + total));
    p.dir = mt_lanes_put_dir(p.raw, len, version);
    p.n = p.dir;
    for (int i = 0; i < mt_lanes_of(version); i++) {
        memcpy(p.raw + p.n, lane[i], len[i]);
        p.n += len[i];
    }
    for (int i = 0; i < MT_LANES; i++) free(lane[i]);
    return p;
}

static void agree(const payload *p, unsigned version, size_t max_run, size_t *events)
{
    char why[200];
    cr_assert_eq(mt_check_decode_runs(p->raw, p->n, version, max_run, events, why, sizeof why), 0,
                 "version %u, runs of %zu: %s", version, max_run, why);
}

Test(trace_decode_runs, well_formed_chunks_decode_the_same)
{
    static const size_t runs[] = {1, 3, 64, 256};
    for (unsigned version = 1; version <= MT_TRACE_VERSION; version++)
        for (stream s = SYNTHETIC; s <= TENSORS; s++) {
            payload p = encode(s, version, 20000, 7 + s);
            for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
                size_t events;
                agree(&p, version, runs[k], &events);
                /* long runs took most events (else this compared nothing): every plain event
                 * but those near the lanes' ends (a run of k is followed by one record read
                 * checked; version 1 writes every tensor event's aux, a rare field) */
                if (runs[k] >= 64 && (s == SYNTHETIC || (s == TENSORS && version >= 2)))
                    cr_assert_gt(events, p.events * 9 / 10, "stream %d: %zu of %zu events in runs",
                                 s, events, p.events);
            }
            free(p.raw);
        }
}

Test(trace_decode_runs, changed_bytes_fail_or_read_alike)
{
    mt_mix rng;
    mt_mix_init(&rng, 99);
    for (unsigned version = 1; version <= MT_TRACE_VERSION; version++)
        for (stream s = SYNTHETIC; s <= TENSORS; s++) {
            for (int round = 0; round < 1200; round++) {
                /* long chunks, and short ones: every event of those is near its lanes' ends */
                payload p = encode(s, version, round % 3 ? 1 + round % 40 : 3000, 11 + s + round);
                uint8_t *copy = malloc(p.n);
                cr_assert_not_null(copy);
                memcpy(copy, p.raw, p.n);
                /* a few bytes of the lanes, now and then of the directory (other lane lengths) */
                int changes = 1 + (int)(mt_mix_rand(&rng) % 4);
                for (int k = 0; k < changes; k++) {
                    size_t from = mt_mix_rand(&rng) % 8 ? p.dir : 0;
                    size_t at = from + mt_mix_rand(&rng) % (p.n - from);
                    copy[at] = mt_mix_rand(&rng) % 2 ? (uint8_t)mt_mix_rand(&rng)
                                                     : (uint8_t)(copy[at] ^ 0x80);
                }
                /* and a long varint in some lane, often running into its end (where a run must
                 * stop before it reads past the lane) */
                mt_cursor lane[MT_LANES];
                cr_assert_eq(mt_lanes_split(p.raw, p.n, lane, version), 0);
                const mt_cursor *l = &lane[mt_mix_rand(&rng) % (unsigned)mt_lanes_of(version)];
                size_t llen = (size_t)(l->end - l->p);
                if (llen) {
                    size_t off = (size_t)(l->p - p.raw), at = mt_mix_rand(&rng) % 2
                        ? off + llen - 1 - mt_mix_rand(&rng) % (llen < 16 ? llen : 16)
                        : off + mt_mix_rand(&rng) % llen;
                    for (size_t k = 1 + mt_mix_rand(&rng) % 10; k-- > 0 && at < off + llen; at++)
                        copy[at] = (uint8_t)(k ? 0x80 | mt_mix_rand(&rng) : mt_mix_rand(&rng));
                }
                payload q = p;
                q.raw = copy;
                agree(&q, version, 1 + mt_mix_rand(&rng) % 200, NULL);
                q.n = p.n - mt_mix_rand(&rng) % (p.n < 64 ? p.n : 64); /* cut: lanes end early */
                agree(&q, version, 1 + mt_mix_rand(&rng) % 200, NULL);
                free(copy);
                free(p.raw);
            }
        }
}

/* The PEXT varint against the plain one, byte for byte: every length from 1 to 8 (and no stop in
 * 8 bytes: length 0), each byte's payload bits random, the bytes after the varint random too. */
Test(trace_decode_runs, pext_varints_read_as_the_plain_ones)
{
    if (mt_decode_variant() != MT_DECODE_PEXT) cr_skip_test("this CPU reads varints without PEXT");
    mt_mix rng;
    mt_mix_init(&rng, 5);
    for (int round = 0; round < 200000; round++) {
        uint8_t buf[16];
        for (int i = 0; i < 16; i++) buf[i] = (uint8_t)mt_mix_rand(&rng);
        unsigned want = (unsigned)(round % 9); /* 0: every byte says more follows */
        for (unsigned i = 0; i < 8; i++) {
            if (want == 0 || i + 1 < want) buf[i] |= 0x80; /* more bytes follow */
            else if (i + 1 == want) buf[i] &= 0x7f;        /* the last byte */
        }
        unsigned la = 99, lb = 99;
        uint64_t a = mt_varint8(buf, &la), b = mt_varint8_as(buf, &lb, 1);
        cr_assert_eq(la, want, "round %d: plain length %u, not %u", round, la, want);
        cr_assert_eq(lb, la, "round %d: length %u against %u", round, lb, la);
        cr_assert_eq(b, a, "round %d: %llx against %llx", round, (unsigned long long)b,
                     (unsigned long long)a);
    }
}
