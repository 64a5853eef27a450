/* record_mix.h — a deterministic mix of every record type with edge values, for the trace tests
 * (round trip, truncation, corruption, append). Header-only, no global state: the caller owns the
 * generator. Strings come from a fixed table, so the records stay valid as long as the program.
 */
#ifndef MT_TRACE_RECORD_MIX_H
#define MT_TRACE_RECORD_MIX_H

#include <stdint.h>
#include <string.h>

#include "contextless.h" /* mt_ctxless_wants */
#include "hash.h"
#include "memtrace/trace.h"

typedef struct mt_mix {
    uint64_t rng;
    uint64_t n;
} mt_mix;

static inline uint64_t mt_mix_rand(mt_mix *m)
{
    m->rng ^= m->rng >> 12;
    m->rng ^= m->rng << 25;
    m->rng ^= m->rng >> 27;
    return m->rng * 2685821657736338717ull;
}

/* A value that is often an edge case: 0, 1, the maximum of `bits`, a power of two, or random. */
static inline uint64_t mt_mix_value(mt_mix *m, unsigned bits)
{
    uint64_t mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
    switch (mt_mix_rand(m) % 6) {
    case 0:
        return 0;
    case 1:
        return 1;
    case 2:
        return mask;
    case 3:
        return (1ull << (mt_mix_rand(m) % bits)) & mask;
    default:
        return mt_mix_rand(m) & mask;
    }
}

static inline const char *mt_mix_string(mt_mix *m)
{
    static const char *const strings[] = {
        "",
        "x",
        "python3",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "torch::autograd::Engine::evaluate_function(...)",
        "caf\xc3\xa9 \xe2\x98\x95 unicode",
        "a string with\ttabs and \"quotes\" and a newline\n",
    };
    return strings[mt_mix_rand(m) % (sizeof strings / sizeof strings[0])];
}

static inline void mt_mix_init(mt_mix *m, uint64_t seed)
{
    m->rng = seed * MT_GOLDEN64 + 7;
    m->n = 0;
}

/* The next record: mostly events (runs of alike events, as a recorder writes them, to exercise the
 * "same as previous" paths), then stack nodes, then one of each other type. */
static inline void mt_mix_next(mt_mix *m, mt_record *r)
{
    static const uint8_t build_id[20] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3,    4,    5,    6,
                                         7,    8,    9,    10,   0, 0, 0xff, 0x80, 0x7f, 0};
    memset(r, 0, sizeof *r);
    uint64_t pick = mt_mix_rand(m) % 100;
    m->n++;
    if (pick < 60) {
        mt_event *e = &r->u.event;
        r->type = MT_REC_EVENT;
        int plain = mt_mix_rand(m) % 3 != 0; /* a realistic event, or one of edge values */
        e->time_ns = plain ? 1000000 + m->n * 1500 : mt_mix_value(m, 64);
        e->address = plain ? 0x7f0000000000ull + (mt_mix_rand(m) % 64) * 4096 : mt_mix_value(m, 64);
        e->bytes = plain ? 512 * (1 + mt_mix_rand(m) % 16) : mt_mix_value(m, 64);
        e->stream = plain ? 0 : mt_mix_value(m, 64);
        e->aux = plain ? 0 : mt_mix_value(m, 64);
        e->tid = plain ? 100 + (uint32_t)(mt_mix_rand(m) % 2) : (uint32_t)mt_mix_value(m, 32);
        e->context = plain ? 1 : (uint32_t)mt_mix_value(m, 32);
        e->stack = plain ? 1 + (uint32_t)(mt_mix_rand(m) % 10) : (uint32_t)mt_mix_value(m, 32);
        e->correlation = plain ? (uint32_t)m->n : (uint32_t)mt_mix_value(m, 32);
        e->device = plain ? 0 : (int32_t)(uint32_t)mt_mix_value(m, 32);
        if (!plain && mt_mix_rand(m) % 4 == 0) e->device = -1;
        e->api = plain ? 243 : (uint16_t)mt_mix_value(m, 16);
        e->result = plain ? 0 : (uint16_t)mt_mix_value(m, 16);
        e->flags = plain ? 0 : (uint16_t)mt_mix_value(m, 16);
        e->op = plain ? (uint8_t)(MT_OP_ALLOC + mt_mix_rand(m) % 2) : (uint8_t)mt_mix_value(m, 8);
        e->kind = plain ? MT_KIND_DEVICE : (uint8_t)mt_mix_value(m, 8);
        /* an activity record that names no context is given a device by the reader
         * (contextless.h), which tests of their own check: here every record reads back as written
         */
        if (mt_ctxless_wants(e)) e->context = 1;
        return;
    }
    if (pick < 80) {
        r->type = MT_REC_STACK_NODE;
        r->u.node.id = (uint32_t)(mt_mix_rand(m) % 3 ? m->n : mt_mix_value(m, 32));
        r->u.node.parent = (uint32_t)(mt_mix_rand(m) % 2 ? r->u.node.id - 1 : mt_mix_value(m, 32));
        r->u.node.ip = mt_mix_value(m, 64);
        r->u.node.frame_kind = (uint8_t)mt_mix_value(m, 8);
        return;
    }
    switch (pick % 11) {
    case 0:
        r->type = MT_REC_PROCESS;
        r->u.process.pid = (uint32_t)mt_mix_value(m, 32);
        r->u.process.ppid = (uint32_t)mt_mix_value(m, 32);
        r->u.process.comm = mt_mix_string(m);
        r->u.process.cmdline = mt_mix_string(m);
        r->u.process.hostname = mt_mix_string(m);
        break;
    case 1:
        r->type = MT_REC_MODULE;
        r->u.module.id = (uint32_t)mt_mix_value(m, 32);
        r->u.module.bias = mt_mix_value(m, 64);
        r->u.module.start = mt_mix_value(m, 64);
        r->u.module.end = mt_mix_value(m, 64);
        r->u.module.path = mt_mix_string(m);
        r->u.module.build_id_len = (uint32_t)(mt_mix_rand(m) % (sizeof build_id + 1));
        r->u.module.build_id = r->u.module.build_id_len ? build_id : NULL;
        break;
    case 2:
        r->type = MT_REC_THREAD;
        r->u.thread.tid = (uint32_t)mt_mix_value(m, 32);
        r->u.thread.name = mt_mix_string(m);
        break;
    case 3:
        r->type = MT_REC_NOTE;
        r->u.note.time_ns = mt_mix_value(m, 64);
        r->u.note.level = (uint8_t)mt_mix_value(m, 8);
        r->u.note.text = mt_mix_string(m);
        break;
    case 4:
        r->type = MT_REC_DROPPED;
        r->u.dropped = mt_mix_value(m, 64);
        break;
    case 5:
        r->type = MT_REC_END;
        r->u.end.time_ns = mt_mix_value(m, 64);
        r->u.end.events = mt_mix_value(m, 64);
        r->u.end.dropped = mt_mix_value(m, 64);
        break;
    case 6:
        r->type = MT_REC_SYMBOL;
        r->u.symbol.ip = mt_mix_value(m, 64);
        r->u.symbol.module = (uint32_t)mt_mix_value(m, 32);
        r->u.symbol.line = (uint32_t)mt_mix_value(m, 32);
        r->u.symbol.depth = (uint32_t)mt_mix_value(m, 32);
        r->u.symbol.function = mt_mix_string(m);
        r->u.symbol.file = mt_mix_string(m);
        break;
    case 7:
        r->type = MT_REC_PYCODE;
        r->u.pycode.id = (uint32_t)mt_mix_value(m, 32);
        r->u.pycode.firstlineno = (uint32_t)mt_mix_value(m, 32);
        r->u.pycode.filename = mt_mix_string(m);
        r->u.pycode.qualname = mt_mix_string(m);
        break;
    case 8:
        r->type = MT_REC_SAMPLE;
        r->u.sample.time_ns = mt_mix_value(m, 64);
        r->u.sample.device = (int32_t)(uint32_t)mt_mix_value(m, 32);
        r->u.sample.counter = (uint16_t)mt_mix_value(m, 16);
        r->u.sample.value = mt_mix_value(m, 64);
        break;
    default:
        r->type = MT_REC_DEVICE;
        r->u.device.ordinal = (int32_t)(uint32_t)mt_mix_value(m, 32);
        r->u.device.total_bytes = mt_mix_value(m, 64);
        r->u.device.name = mt_mix_string(m);
        r->u.device.uuid = mt_mix_string(m);
        break;
    }
}

#endif
