/* encode.c — the byte layout of every record inside a chunk's raw (decompressed) payload.
 *
 * Every record is one type byte (mt_record_type) followed by its fields. Notation below:
 *   u8       one byte
 *   v        LEB128 varint (bytes.h)
 *   z        zig-zag varint of a signed value or of a delta "x - previous x" (modulo the width)
 *   str      v length, then the bytes, then one NUL (so the reader can hand out pointers in place)
 *   [..]     present only when the flag named beside it is set
 * "previous" always means "earlier in the same chunk"; mt_codec_reset zeroes it at chunk start.
 */
#include "hash.h"
#include "encode.h"

#include <stdatomic.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

/* ---- MT_REC_EVENT ------------------------------------------------------------------------------
 *
 *  An event is spread over the lanes (encode.h); each lane gets its fields in record order.
 *
 *  main lane:   +------+------+--------+------------+-------------------------------+
 *               | 0x02 | head | [op]   | [rare]     | rare fields, in mask-bit order |
 *               |  u8  |  u8  | u8     | v (mask)   |                               |
 *               +------+------+--------+------------+-------------------------------+
 *  time lane:   version 1: z(time_ns - previous event's time_ns)                always
 *               version 2: v(z >> 8), z = that same zig-zag delta               always
 *  time-lo:     version 2 only: u8 (z & 0xff)                                   always
 *  addr lane:   u8 s, z(d >> s), d = address - base (aligned delta, bytes.h)   if head.ADDR
 *  bytes lane:  v(bytes)                                                       if head.BYTES
 *  stack lane:  z(stack - stack of the previous event with the same op)        if head.STACK
 *  corr lane:   z(correlation - previous correlation)                          if head.CORR
 *
 *  head:  bit 0-2  op if 0..6; 7 = escape, the op byte follows
 *         bit 3    ADDR   address != previous event's address
 *         bit 4    BYTES  bytes != predicted bytes
 *         bit 5    STACK  stack != previous event's stack
 *         bit 6    CORR   correlation != previous correlation
 *         bit 7    RARE   a v mask of rarely changing fields follows
 *  A field whose bit is clear equals the previous event's (the predicted value for bytes, and in
 *  version 2 for aux).
 *  time:  signed, because the per-thread rings are drained in turn: time steps back at a switch.
 *         Version 2 splits the delta: its low byte is clock noise (uniform over 256 values on a
 *         nanosecond clock), the rest is the program's rhythm; in lanes of their own deflate gives
 *         each its own statistics (real training traces: 2.18 -> 1.94 bytes per time delta).
 *  base:  for an ALLOC the previous event's address; otherwise the latest ALLOC's address
 *         (frees are often last-in first-out).
 *  predicted bytes: for a non-ALLOC event whose address hits the live table (an ALLOC at that
 *         address earlier in the chunk), that ALLOC's bytes; otherwise the bytes of the previous
 *         event with the same op.
 *  predicted aux (version 2): for a TENSOR event, the aux of the previous TENSOR event on the same
 *         device (device & 7) plus bytes for an ALLOC, minus bytes for a FREE, unchanged for other
 *         ops: aux is PyTorch's allocated counter right after the event, so this is exact and a
 *         tensor event no longer writes a 4-5 byte aux. Any other event: the previous event's aux.
 *  rare mask, each bit a field that differs from the previous event's (or its prediction):
 *         bit 0 tid v | 1 kind u8 | 2 device z | 3 context v | 4 stream v | 5 api v (compared
 *         with the previous event of the same op) | 6 result v | 7 flags v | 8 aux v
 */
enum {
    EV_OP_MASK = 0x07,
    EV_OP_ESCAPE = 0x07,
    EV_ADDR = 1u << 3,
    EV_BYTES = 1u << 4,
    EV_STACK = 1u << 5,
    EV_CORR = 1u << 6,
    EV_RARE = 1u << 7,
};
enum {
    RARE_TID = 1u << 0,
    RARE_KIND = 1u << 1,
    RARE_DEVICE = 1u << 2,
    RARE_CONTEXT = 1u << 3,
    RARE_STREAM = 1u << 4,
    RARE_API = 1u << 5,
    RARE_RESULT = 1u << 6,
    RARE_FLAGS = 1u << 7,
    RARE_AUX = 1u << 8,
    RARE_ALL_ = (1u << 9) - 1,
};

/* type, head, op, 2-byte mask, the time's low byte, then at most 13 varints */
#define EVENT_BOUND (1 + 1 + 1 + 2 + 1 + 13 * MT_VARINT_MAX)

static inline unsigned live_slot(uint64_t address)
{
    /* Fibonacci hashing: allocations are aligned (512 B and up), so the low bits carry nothing */
    return (unsigned)((address * MT_GOLDEN64) >> 53) & (MT_CODEC_LIVE_SLOTS - 1);
}

/* What an address delta is taken from: a FREE most often releases the latest allocation. */
static inline uint64_t address_base(const mt_codec *c, uint8_t op)
{
    return op == MT_OP_ALLOC ? c->address : c->last_alloc;
}

static uint64_t predict_bytes(const mt_codec *c, uint8_t op, uint64_t address)
{
    if (op != MT_OP_ALLOC) {
        unsigned s = live_slot(address);
        if (c->live[s].address == address) return c->live[s].bytes;
    }
    return c->bytes_by_op[op & 7];
}

/* What a clear RARE_AUX bit means (see above). */
static inline uint64_t predict_aux(const mt_codec *c, unsigned op, unsigned kind, int32_t device,
                                   uint64_t bytes)
{
    if (c->version < 2 || kind != MT_KIND_TENSOR) return c->aux;
    uint64_t a = c->tensor_aux[(unsigned)device & 7];
    return op == MT_OP_ALLOC ? a + bytes : op == MT_OP_FREE ? a - bytes : a;
}

/* Both sides advance the state the same way once the event is known. */
static void remember_event(mt_codec *c, const mt_event *e)
{
    if (e->kind == MT_KIND_TENSOR) c->tensor_aux[(unsigned)e->device & 7] = e->aux;
    if (e->op == MT_OP_ALLOC) {
        unsigned s = live_slot(e->address);
        c->live[s].address = e->address;
        c->live[s].bytes = e->bytes;
        c->last_alloc = e->address;
    }
    c->stack_by_op[e->op & 7] = e->stack;
    c->time = e->time_ns;
    c->address = e->address;
    c->bytes_by_op[e->op & 7] = e->bytes;
    c->stack = e->stack;
    c->correlation = e->correlation;
    c->tid = e->tid;
    c->kind = e->kind;
    c->device = e->device;
    c->context = e->context;
    c->stream = e->stream;
    c->api_by_op[e->op & 7] = e->api;
    c->result = e->result;
    c->flags = e->flags;
    c->aux = e->aux;
}

static void encode_event(mt_codec *c, uint8_t **lane, const mt_event *e)
{
    unsigned head = e->op < EV_OP_ESCAPE ? e->op : EV_OP_ESCAPE;
    if (e->address != c->address) head |= EV_ADDR;
    if (e->bytes != predict_bytes(c, e->op, e->address)) head |= EV_BYTES;
    if (e->stack != c->stack) head |= EV_STACK;
    if (e->correlation != c->correlation) head |= EV_CORR;

    unsigned rare = 0;
    if (e->tid != c->tid) rare |= RARE_TID;
    if (e->kind != c->kind) rare |= RARE_KIND;
    if (e->device != c->device) rare |= RARE_DEVICE;
    if (e->context != c->context) rare |= RARE_CONTEXT;
    if (e->stream != c->stream) rare |= RARE_STREAM;
    if (e->api != c->api_by_op[e->op & 7]) rare |= RARE_API;
    if (e->result != c->result) rare |= RARE_RESULT;
    if (e->flags != c->flags) rare |= RARE_FLAGS;
    if (e->aux != predict_aux(c, e->op, e->kind, e->device, e->bytes)) rare |= RARE_AUX;
    if (rare) head |= EV_RARE;

    uint8_t *p = lane[MT_LANE_MAIN];
    *p++ = MT_REC_EVENT;
    *p++ = (uint8_t)head;
    if ((head & EV_OP_MASK) == EV_OP_ESCAPE) *p++ = e->op;
    if (rare) p = mt_put_varint(p, rare);
    uint8_t **l = lane;
    uint64_t dt = mt_delta64(e->time_ns, c->time);
    if (c->version >= 2) {
        *l[MT_LANE_TIME_LO]++ = (uint8_t)dt;
        dt >>= 8;
    }
    l[MT_LANE_TIME] = mt_put_varint(l[MT_LANE_TIME], dt);
    if (head & EV_ADDR)
        l[MT_LANE_ADDR] = mt_put_aligned_delta(l[MT_LANE_ADDR], e->address, address_base(c, e->op));
    if (head & EV_BYTES) l[MT_LANE_BYTES] = mt_put_varint(l[MT_LANE_BYTES], e->bytes);
    if (head & EV_STACK)
        l[MT_LANE_STACK] =
            mt_put_varint(l[MT_LANE_STACK], mt_delta32(e->stack, c->stack_by_op[e->op & 7]));
    if (head & EV_CORR)
        l[MT_LANE_CORR] =
            mt_put_varint(l[MT_LANE_CORR], mt_delta32(e->correlation, c->correlation));
    if (rare & RARE_TID) p = mt_put_varint(p, e->tid);
    if (rare & RARE_KIND) *p++ = e->kind;
    if (rare & RARE_DEVICE) p = mt_put_varint(p, mt_zigzag64(e->device));
    if (rare & RARE_CONTEXT) p = mt_put_varint(p, e->context);
    if (rare & RARE_STREAM) p = mt_put_varint(p, e->stream);
    if (rare & RARE_API) p = mt_put_varint(p, e->api);
    if (rare & RARE_RESULT) p = mt_put_varint(p, e->result);
    if (rare & RARE_FLAGS) p = mt_put_varint(p, e->flags);
    if (rare & RARE_AUX) p = mt_put_varint(p, e->aux);
    lane[MT_LANE_MAIN] = p;
    remember_event(c, e);
}

/* The reader's hot loop (a third of `report` once was in here): every field whose head or rare
 * bit is clear is the codec's prediction, and only what the event changed is written back, so the
 * common event (no rare fields) costs its head byte, its lanes' varints and a few stores. What it
 * leaves in the codec is what remember_event would. It is built once per format version (v2 is a
 * constant in each copy), so neither copy tests the version per field. */
static inline __attribute__((always_inline)) int decode_event_v(mt_codec *c, mt_cursor *lane,
                                                                mt_event *e, const int v2)
{
    mt_cursor *cur = &lane[MT_LANE_MAIN];
    unsigned head = mt_get_u8(cur);
    unsigned op = head & EV_OP_MASK;
    if (op == EV_OP_ESCAPE) op = mt_get_u8(cur);
    unsigned o7 = op & 7;
    e->op = (uint8_t)op;

    uint64_t dt = mt_get_varint(&lane[MT_LANE_TIME]);
    if (v2) {
        if (dt >> 56) lane[MT_LANE_TIME].bad = 1; /* more than 64 bits once the low byte is in */
        dt = dt << 8 | mt_get_u8(&lane[MT_LANE_TIME_LO]);
    }
    e->time_ns = c->time = c->time + (uint64_t)(int64_t)mt_unzigzag64(dt);
    uint64_t address = c->address;
    if (head & EV_ADDR)
        address = c->address =
            mt_get_aligned_delta(&lane[MT_LANE_ADDR], op == MT_OP_ALLOC ? address : c->last_alloc);
    e->address = address;
    uint64_t bytes;
    if (head & EV_BYTES) bytes = mt_get_varint(&lane[MT_LANE_BYTES]);
    else bytes = predict_bytes(c, (uint8_t)op, address);
    e->bytes = c->bytes_by_op[o7] = bytes;
    uint32_t stack = c->stack;
    if (head & EV_STACK) stack = c->stack = mt_get_delta32(&lane[MT_LANE_STACK], c->stack_by_op[o7]);
    e->stack = c->stack_by_op[o7] = stack;
    if (head & EV_CORR) c->correlation = mt_get_delta32(&lane[MT_LANE_CORR], c->correlation);
    e->correlation = c->correlation;
    if (op == MT_OP_ALLOC) {
        unsigned s = live_slot(address);
        c->live[s].address = address;
        c->live[s].bytes = bytes;
        c->last_alloc = address;
    }

    uint64_t rare = 0;
    if (head & EV_RARE) {
        rare = mt_get_varint(cur);
        /* a set RARE bit with an empty mask is never written: treat it, and unknown bits, as
         * corrupt */
        if (rare == 0 || (rare & ~(uint64_t)RARE_ALL_)) return -1;
        if (rare & RARE_TID) c->tid = mt_get_varint32(cur);
        if (rare & RARE_KIND) c->kind = mt_get_u8(cur);
        if (rare & RARE_DEVICE) {
            uint64_t z = mt_get_varint(cur);
            if (z > UINT32_MAX) return -1;
            c->device = (int32_t)mt_unzigzag64(z);
        }
        if (rare & RARE_CONTEXT) c->context = mt_get_varint32(cur);
        if (rare & RARE_STREAM) c->stream = mt_get_varint(cur);
        if (rare & RARE_API) c->api_by_op[o7] = mt_get_varint16(cur);
        if (rare & RARE_RESULT) c->result = mt_get_varint16(cur);
        if (rare & RARE_FLAGS) c->flags = mt_get_varint16(cur);
        if (rare & RARE_AUX) c->aux = mt_get_varint(cur);
    }
    if (v2 && c->kind == MT_KIND_TENSOR) {
        unsigned d = (unsigned)c->device & 7;
        if (!(rare & RARE_AUX)) c->aux = predict_aux(c, op, MT_KIND_TENSOR, c->device, bytes);
        c->tensor_aux[d] = c->aux;
    }
    e->tid = c->tid;
    e->kind = c->kind;
    e->device = c->device;
    e->context = c->context;
    e->stream = c->stream;
    e->api = c->api_by_op[o7];
    e->result = c->result;
    e->flags = c->flags;
    e->aux = c->aux;
    if (lane[0].bad | lane[1].bad | lane[2].bad | lane[3].bad | lane[4].bad | lane[5].bad |
        lane[6].bad)
        return -1;
    return 0;
}

static int decode_event_v1(mt_codec *c, mt_cursor *lane, mt_event *e)
{
    return decode_event_v(c, lane, e, 0);
}

static int decode_event_v2(mt_codec *c, mt_cursor *lane, mt_event *e)
{
    return decode_event_v(c, lane, e, 1);
}

/* A run of events without a bound check per field (mt_decode_events). An event here reads at most
 * RUN_MAIN..RUN_CORR bytes of each lane, all within that many of where its field starts (a varint
 * is read as 8 bytes and may be up to 8 long), so `room` events fit in lanes that have room * that
 * many bytes left.
 *
 * The lanes of fields an event may leave out (address, bytes, stack, correlation: each only with
 * its head bit) can be empty for a whole chunk: a `record --tensors` trace's tensor events carry
 * no correlation id, so its correlation lane holds a few bytes or none. Such a lane, with room for
 * no event, does not bound the run: it is marked short, and an event that needs it ends the run
 * (mt_decode_record reads that one, checked). Bounding by it instead had every tensor event of a
 * trace decoded one by one: the reader took 1.45x as long (docs/performance.md, "Ninth round"). */
enum { RUN_MAIN = 2, RUN_TIME = 8, RUN_LO = 1, RUN_ADDR = 9, RUN_BYTES = 8, RUN_STACK = 8, RUN_CORR = 8 };

static inline size_t run_room(const mt_cursor *c, const uint8_t *p, size_t per_event)
{
    return (size_t)(c->end - p) / per_event;
}

/* A lane an event reads only with its head bit `bit`: it bounds the run, or is short. */
static inline void optional_lane(const mt_cursor *c, const uint8_t *p, size_t per_event,
                                 unsigned bit, size_t *room, unsigned *short_lanes)
{
    size_t r = run_room(c, p, per_event);
    if (!r)
        *short_lanes |= bit;
    else if (r < *room)
        *room = r;
}

static inline __attribute__((always_inline)) size_t decode_events_v(mt_codec *c, mt_cursor *lane,
                                                                    mt_record *out, size_t max,
                                                                    const int v2, const int pext)
{
    const uint8_t *pm = lane[MT_LANE_MAIN].p, *pt = lane[MT_LANE_TIME].p,
                  *pl = lane[MT_LANE_TIME_LO].p, *pa = lane[MT_LANE_ADDR].p,
                  *pb = lane[MT_LANE_BYTES].p, *ps = lane[MT_LANE_STACK].p,
                  *pc = lane[MT_LANE_CORR].p;
    uint64_t time = c->time, address = c->address, last_alloc = c->last_alloc;
    uint32_t stack = c->stack, corr = c->correlation;
    /* what an event without a rare field keeps from the one before (and, for a tensor event of
     * version 2, the allocator's counter: predicted from the device's last one) */
    const int tensor = v2 && c->kind == MT_KIND_TENSOR;
    uint64_t *tensor_aux = &c->tensor_aux[(unsigned)c->device & 7];
    uint64_t aux = c->aux;
    const mt_event keep = {.stream = c->stream, .tid = c->tid, .context = c->context,
                           .device = c->device, .result = c->result, .flags = c->flags,
                           .kind = c->kind};
    size_t n = 0;
    for (;;) {
        size_t room = max - n, r;
        if ((r = run_room(&lane[MT_LANE_MAIN], pm, RUN_MAIN)) < room) room = r;
        if ((r = run_room(&lane[MT_LANE_TIME], pt, RUN_TIME)) < room) room = r;
        if (v2 && (r = run_room(&lane[MT_LANE_TIME_LO], pl, RUN_LO)) < room) room = r;
        if (!room) break;
        /* the optional lanes: bound the run, or, with room for no event, are short (above) */
        unsigned short_lanes = 0;
        optional_lane(&lane[MT_LANE_ADDR], pa, RUN_ADDR, EV_ADDR, &room, &short_lanes);
        optional_lane(&lane[MT_LANE_BYTES], pb, RUN_BYTES, EV_BYTES, &room, &short_lanes);
        optional_lane(&lane[MT_LANE_STACK], ps, RUN_STACK, EV_STACK, &room, &short_lanes);
        optional_lane(&lane[MT_LANE_CORR], pc, RUN_CORR, EV_CORR, &room, &short_lanes);
        for (size_t end = n + room; n < end; n++) {
            /* Everything is read and checked before anything is kept: an event this loop does not
             * take (another record, a rare field, an escaped op, a long or bad value) is left to
             * mt_decode_record, which reads it from the same place and state. */
            if (pm[0] != MT_REC_EVENT) goto done;
            unsigned head = pm[1];
            if (head & (EV_RARE | short_lanes) || (head & EV_OP_MASK) == EV_OP_ESCAPE) goto done;
            unsigned op = head & EV_OP_MASK, len;
            uint64_t dt = mt_varint8_as(pt, &len, pext);
            if (!len) goto done;
            const uint8_t *npt = pt + len, *npa = pa, *npb = pb, *nps = ps, *npc = pc;
            if (v2) dt = dt << 8 | *pl; /* below 2^64: the varint held at most 56 bits */
            uint64_t addr = address;
            if (head & EV_ADDR) {
                unsigned sh = pa[0];
                uint64_t m = mt_varint8_as(pa + 1, &len, pext);
                if (!len || sh > 63) goto done;
                npa = pa + 1 + len;
                addr = (op == MT_OP_ALLOC ? address : last_alloc) + (mt_unzigzag64(m) << sh);
            }
            uint64_t bytes;
            if (head & EV_BYTES) {
                bytes = mt_varint8_as(pb, &len, pext);
                if (!len) goto done;
                npb = pb + len;
            } else {
                bytes = predict_bytes(c, (uint8_t)op, addr);
            }
            uint32_t st = stack;
            if (head & EV_STACK) {
                uint64_t z = mt_varint8_as(ps, &len, pext);
                if (!len || z > UINT32_MAX) goto done;
                nps = ps + len;
                st = c->stack_by_op[op] + (uint32_t)mt_unzigzag64(z);
            }
            uint32_t co = corr;
            if (head & EV_CORR) {
                uint64_t z = mt_varint8_as(pc, &len, pext);
                if (!len || z > UINT32_MAX) goto done;
                npc = pc + len;
                co += (uint32_t)mt_unzigzag64(z);
            }
            /* the event is whole: keep it */
            pm += 2;
            pt = npt;
            pl += v2;
            pa = npa;
            pb = npb;
            ps = nps;
            pc = npc;
            time += (uint64_t)(int64_t)mt_unzigzag64(dt);
            address = addr;
            stack = st;
            corr = co;
            c->bytes_by_op[op] = bytes;
            c->stack_by_op[op] = st;
            if (op == MT_OP_ALLOC) {
                unsigned s = live_slot(addr);
                c->live[s].address = addr;
                c->live[s].bytes = bytes;
                last_alloc = addr;
            }
            if (tensor) {
                aux = op == MT_OP_ALLOC ? *tensor_aux + bytes
                    : op == MT_OP_FREE  ? *tensor_aux - bytes
                                        : *tensor_aux;
                *tensor_aux = aux;
            }
            mt_record *rec = &out[n];
            rec->type = MT_REC_EVENT;
            mt_event *e = &rec->u.event;
            *e = keep;
            e->time_ns = time;
            e->address = addr;
            e->bytes = bytes;
            e->aux = aux;
            e->stack = st;
            e->correlation = co;
            e->api = c->api_by_op[op];
            e->op = (uint8_t)op;
        }
    }
done:
    lane[MT_LANE_MAIN].p = pm;
    lane[MT_LANE_TIME].p = pt;
    lane[MT_LANE_TIME_LO].p = pl;
    lane[MT_LANE_ADDR].p = pa;
    lane[MT_LANE_BYTES].p = pb;
    lane[MT_LANE_STACK].p = ps;
    lane[MT_LANE_CORR].p = pc;
    c->time = time;
    c->address = address;
    c->last_alloc = last_alloc;
    c->stack = stack;
    c->correlation = corr;
    c->aux = aux;
    return n;
}

/* Whether this CPU reads varints with PEXT: it has BMI2, and is not an AMD (or Hygon) processor
 * before Zen 3 (CPUID family 0x19), whose PEXT is microcode taking tens to hundreds of cycles by
 * the mask's bits. Asked once, then kept (any thread may be first: all find the same). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static int detect_variant(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || a < 7) return MT_DECODE_PLAIN; /* no leaf 7 */
    int amd_like = (b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u) || /* AuthenticAMD */
                   (b == 0x6f677948u && d == 0x6e65476eu && c == 0x656e6975u);   /* HygonGenuine */
    __cpuid_count(7, 0, a, b, c, d);
    if (!(b & (1u << 8))) return MT_DECODE_PLAIN; /* BMI2 */
    if (amd_like) {
        __cpuid(1, a, b, c, d);
        unsigned family = (a >> 8) & 0xf;
        if (family == 0xf) family += (a >> 20) & 0xff;
        if (family < 0x19) return MT_DECODE_PLAIN;
    }
    return MT_DECODE_PEXT;
}
#else
static int detect_variant(void) { return MT_DECODE_PLAIN; }
#endif

int mt_decode_variant(void)
{
    static _Atomic int variant = -1; /* not asked yet */
    int v = atomic_load_explicit(&variant, memory_order_relaxed);
    if (v < 0) atomic_store_explicit(&variant, v = detect_variant(), memory_order_relaxed);
    return v;
}

size_t mt_decode_events_as(mt_codec *c, mt_cursor lane[MT_LANES], mt_record *out, size_t max,
                           int variant)
{
    if (variant == MT_DECODE_PEXT && mt_decode_variant() == MT_DECODE_PEXT) /* never elsewhere */
        return c->version >= 2 ? decode_events_v(c, lane, out, max, 1, 1)
                               : decode_events_v(c, lane, out, max, 0, 1);
    return c->version >= 2 ? decode_events_v(c, lane, out, max, 1, 0)
                           : decode_events_v(c, lane, out, max, 0, 0);
}

size_t mt_decode_events(mt_codec *c, mt_cursor lane[MT_LANES], mt_record *out, size_t max)
{
    return mt_decode_events_as(c, lane, out, max, mt_decode_variant());
}

/* ---- MT_REC_STACK_NODE
 * ---------------------------------------------------------------------------
 *
 *  +------+------------+------------------+---------------------+-------------------+
 *  | 0x03 | frame_kind | z(id - prev id)  | z(id - parent)      | z(ip - prev ip)   |
 *  |  u8  |    u8      | v                | v                   | v                 |
 *  +------+------------+------------------+---------------------+-------------------+
 *  The trie hands out ids in order and a new path is mostly a chain (parent = id - 1), so both
 *  id deltas are usually 1; consecutive native ips lie in the same few modules. "prev" = previous
 *  stack node in the chunk (0 at chunk start). Deltas are taken modulo 2^32 / 2^64.
 */
#define NODE_BOUND (1 + 1 + 3 * MT_VARINT_MAX)

static uint8_t *encode_node(mt_codec *c, uint8_t *p, const mt_stack_node *n)
{
    *p++ = MT_REC_STACK_NODE;
    *p++ = n->frame_kind;
    p = mt_put_varint(p, mt_delta32(n->id, c->node_id));
    p = mt_put_varint(p, mt_delta32(n->id, n->parent));
    p = mt_put_varint(p, mt_delta64(n->ip, c->node_ip));
    c->node_id = n->id;
    c->node_ip = n->ip;
    return p;
}

static int decode_node(mt_codec *c, mt_cursor *cur, mt_stack_node *n)
{
    memset(n, 0, sizeof *n);
    n->frame_kind = mt_get_u8(cur);
    n->id = mt_get_delta32(cur, c->node_id);
    /* id - parent = d  =>  parent = id - d */
    uint32_t back = mt_get_delta32(cur, 0);
    n->parent = n->id - back;
    n->ip = mt_get_delta64(cur, c->node_ip);
    if (cur->bad) return -1;
    c->node_id = n->id;
    c->node_ip = n->ip;
    return 0;
}

/* ---- strings ----------------------------------------------------------------------------------
 */

static size_t str_bound(const char *s)
{
    return MT_VARINT_MAX + (s ? strlen(s) : 0) + 1;
}

static uint8_t *put_str(uint8_t *p, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    p = mt_put_varint(p, n);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p + n + 1;
}

static const char *get_str(mt_cursor *c)
{
    uint64_t n = mt_get_varint(c);
    if (c->bad || n >= (uint64_t)(c->end - c->p)) { /* n bytes + the NUL */
        c->bad = 1;
        return "";
    }
    const char *s = (const char *)c->p;
    if (c->p[n] != 0) {
        c->bad = 1;
        return "";
    }
    c->p += n + 1;
    return s;
}

/* ---- the rarer records
 * ---------------------------------------------------------------------------
 *
 *  PROCESS   0x01 | v pid | v ppid | str comm | str cmdline | str hostname
 *  MODULE    0x04 | v id | v bias | v start | v (end - start, mod 2^64) | str path
 *                 | v build_id_len | build_id bytes
 *  THREAD    0x05 | v tid | str name
 *  NOTE      0x06 | v time_ns | u8 level | str text
 *  DROPPED   0x07 | v count
 *  END       0x08 | v time_ns | v events | v dropped
 *  SYMBOL    0x09 | v ip | v module | v line | v depth | str function | str file
 *  PYCODE    0x0a | v id | v firstlineno | str filename | str qualname
 *  SAMPLE    0x0b | v time_ns | z device | v counter | v value
 *  DEVICE    0x0c | z ordinal | v total_bytes | str name | str uuid
 *
 * They are rare (a few per thread, module or code object), so they carry no delta state.
 */

size_t mt_encode_bound(const mt_record *r)
{
    const size_t v = MT_VARINT_MAX;
    switch (r->type) {
    case MT_REC_EVENT:
        return EVENT_BOUND;
    case MT_REC_STACK_NODE:
        return NODE_BOUND;
    case MT_REC_PROCESS:
        return 1 + 2 * v + str_bound(r->u.process.comm) + str_bound(r->u.process.cmdline) +
               str_bound(r->u.process.hostname);
    case MT_REC_MODULE:
        return 1 + 5 * v + str_bound(r->u.module.path) +
               (r->u.module.build_id ? r->u.module.build_id_len : 0);
    case MT_REC_THREAD:
        return 1 + v + str_bound(r->u.thread.name);
    case MT_REC_NOTE:
        return 1 + v + 1 + str_bound(r->u.note.text);
    case MT_REC_DROPPED:
        return 1 + v;
    case MT_REC_END:
        return 1 + 3 * v;
    case MT_REC_SYMBOL:
        return 1 + 4 * v + str_bound(r->u.symbol.function) + str_bound(r->u.symbol.file);
    case MT_REC_PYCODE:
        return 1 + 2 * v + str_bound(r->u.pycode.filename) + str_bound(r->u.pycode.qualname);
    case MT_REC_SAMPLE:
        return 1 + 4 * v;
    case MT_REC_DEVICE:
        return 1 + 2 * v + str_bound(r->u.device.name) + str_bound(r->u.device.uuid);
    default:
        return 0;
    }
}

size_t mt_encode_record(mt_codec *c, uint8_t *lane[MT_LANES], const mt_record *r)
{
    uint8_t *before[MT_LANES];
    memcpy(before, lane, sizeof before);
    uint8_t *p = lane[MT_LANE_MAIN];
    switch (r->type) {
    case MT_REC_EVENT:
        encode_event(c, lane, &r->u.event);
        p = lane[MT_LANE_MAIN];
        break;
    case MT_REC_STACK_NODE:
        p = encode_node(c, p, &r->u.node);
        break;
    case MT_REC_PROCESS:
        *p++ = MT_REC_PROCESS;
        p = mt_put_varint(p, r->u.process.pid);
        p = mt_put_varint(p, r->u.process.ppid);
        p = put_str(p, r->u.process.comm);
        p = put_str(p, r->u.process.cmdline);
        p = put_str(p, r->u.process.hostname);
        break;
    case MT_REC_MODULE: {
        const mt_module *m = &r->u.module;
        uint32_t idlen = m->build_id ? m->build_id_len : 0;
        *p++ = MT_REC_MODULE;
        p = mt_put_varint(p, m->id);
        p = mt_put_varint(p, m->bias);
        p = mt_put_varint(p, m->start);
        p = mt_put_varint(p, m->end - m->start);
        p = put_str(p, m->path);
        p = mt_put_varint(p, idlen);
        if (idlen) memcpy(p, m->build_id, idlen);
        p += idlen;
        break;
    }
    case MT_REC_THREAD:
        *p++ = MT_REC_THREAD;
        p = mt_put_varint(p, r->u.thread.tid);
        p = put_str(p, r->u.thread.name);
        break;
    case MT_REC_NOTE:
        *p++ = MT_REC_NOTE;
        p = mt_put_varint(p, r->u.note.time_ns);
        *p++ = r->u.note.level;
        p = put_str(p, r->u.note.text);
        break;
    case MT_REC_DROPPED:
        *p++ = MT_REC_DROPPED;
        p = mt_put_varint(p, r->u.dropped);
        break;
    case MT_REC_END:
        *p++ = MT_REC_END;
        p = mt_put_varint(p, r->u.end.time_ns);
        p = mt_put_varint(p, r->u.end.events);
        p = mt_put_varint(p, r->u.end.dropped);
        break;
    case MT_REC_SYMBOL:
        *p++ = MT_REC_SYMBOL;
        p = mt_put_varint(p, r->u.symbol.ip);
        p = mt_put_varint(p, r->u.symbol.module);
        p = mt_put_varint(p, r->u.symbol.line);
        p = mt_put_varint(p, r->u.symbol.depth);
        p = put_str(p, r->u.symbol.function);
        p = put_str(p, r->u.symbol.file);
        break;
    case MT_REC_PYCODE:
        *p++ = MT_REC_PYCODE;
        p = mt_put_varint(p, r->u.pycode.id);
        p = mt_put_varint(p, r->u.pycode.firstlineno);
        p = put_str(p, r->u.pycode.filename);
        p = put_str(p, r->u.pycode.qualname);
        break;
    case MT_REC_SAMPLE:
        *p++ = MT_REC_SAMPLE;
        p = mt_put_varint(p, r->u.sample.time_ns);
        p = mt_put_varint(p, mt_zigzag64(r->u.sample.device));
        p = mt_put_varint(p, r->u.sample.counter);
        p = mt_put_varint(p, r->u.sample.value);
        break;
    case MT_REC_DEVICE:
        *p++ = MT_REC_DEVICE;
        p = mt_put_varint(p, mt_zigzag64(r->u.device.ordinal));
        p = mt_put_varint(p, r->u.device.total_bytes);
        p = put_str(p, r->u.device.name);
        p = put_str(p, r->u.device.uuid);
        break;
    default:
        return 0;
    }
    lane[MT_LANE_MAIN] = p;
    size_t n = 0;
    for (int i = 0; i < MT_LANES; i++)
        n += (size_t)(lane[i] - before[i]);
    return n;
}

static int32_t get_int32(mt_cursor *c)
{
    uint64_t z = mt_get_varint(c);
    if (z > UINT32_MAX) c->bad = 1;
    return (int32_t)mt_unzigzag64(z);
}

int mt_decode_record(mt_codec *c, mt_cursor lane[MT_LANES], mt_record *out)
{
    mt_cursor *cur = &lane[MT_LANE_MAIN];
    unsigned type = mt_get_u8(cur);
    if (cur->bad) return -1;
    out->type = (mt_record_type)type;
    if (type == MT_REC_EVENT) /* sets every field */
        return c->version >= 2 ? decode_event_v2(c, lane, &out->u.event)
                               : decode_event_v1(c, lane, &out->u.event);
    memset(&out->u, 0, sizeof out->u);
    switch (type) {
    case MT_REC_STACK_NODE:
        return decode_node(c, cur, &out->u.node);
    case MT_REC_PROCESS:
        out->u.process.pid = mt_get_varint32(cur);
        out->u.process.ppid = mt_get_varint32(cur);
        out->u.process.comm = get_str(cur);
        out->u.process.cmdline = get_str(cur);
        out->u.process.hostname = get_str(cur);
        break;
    case MT_REC_MODULE: {
        mt_module *m = &out->u.module;
        m->id = mt_get_varint32(cur);
        m->bias = mt_get_varint(cur);
        m->start = mt_get_varint(cur);
        m->end = m->start + mt_get_varint(cur);
        m->path = get_str(cur);
        m->build_id_len = mt_get_varint32(cur);
        m->build_id = mt_get_bytes(cur, m->build_id_len);
        if (m->build_id_len == 0) m->build_id = NULL;
        break;
    }
    case MT_REC_THREAD:
        out->u.thread.tid = mt_get_varint32(cur);
        out->u.thread.name = get_str(cur);
        break;
    case MT_REC_NOTE:
        out->u.note.time_ns = mt_get_varint(cur);
        out->u.note.level = mt_get_u8(cur);
        out->u.note.text = get_str(cur);
        break;
    case MT_REC_DROPPED:
        out->u.dropped = mt_get_varint(cur);
        break;
    case MT_REC_END:
        out->u.end.time_ns = mt_get_varint(cur);
        out->u.end.events = mt_get_varint(cur);
        out->u.end.dropped = mt_get_varint(cur);
        break;
    case MT_REC_SYMBOL:
        out->u.symbol.ip = mt_get_varint(cur);
        out->u.symbol.module = mt_get_varint32(cur);
        out->u.symbol.line = mt_get_varint32(cur);
        out->u.symbol.depth = mt_get_varint32(cur);
        out->u.symbol.function = get_str(cur);
        out->u.symbol.file = get_str(cur);
        break;
    case MT_REC_PYCODE:
        out->u.pycode.id = mt_get_varint32(cur);
        out->u.pycode.firstlineno = mt_get_varint32(cur);
        out->u.pycode.filename = get_str(cur);
        out->u.pycode.qualname = get_str(cur);
        break;
    case MT_REC_SAMPLE:
        out->u.sample.time_ns = mt_get_varint(cur);
        out->u.sample.device = get_int32(cur);
        out->u.sample.counter = mt_get_varint16(cur);
        out->u.sample.value = mt_get_varint(cur);
        break;
    case MT_REC_DEVICE:
        out->u.device.ordinal = get_int32(cur);
        out->u.device.total_bytes = mt_get_varint(cur);
        out->u.device.name = get_str(cur);
        out->u.device.uuid = get_str(cur);
        break;
    default:
        return -1; /* unknown record type: we cannot know its length, so the chunk is lost */
    }
    return cur->bad ? -1 : 0;
}

void mt_codec_reset(mt_codec *c, unsigned version)
{
    memset(c, 0, sizeof *c);
    c->version = version;
}

/* ---- lane directory
 * ------------------------------------------------------------------------------
 *
 *  raw chunk payload:
 *  +--------+--------+-----+--------+-----------+-----------+-----+-----------+
 *  | v len0 | v len1 | ... | v lenN | lane 0    | lane 1    | ... | lane N    |
 *  +--------+--------+-----+--------+-----------+-----------+-----+-----------+
 *  lanes: 0 main, 1 time, 2 address, 3 bytes, 4 stack, 5 correlation, and from version 2
 *  6 time-lo (N = 5 in version 1, 6 in version 2). The lengths must add up to exactly the rest of
 *  the payload, and every lane must be used up when the main lane ends.
 */
size_t mt_lanes_put_dir(uint8_t *out, const size_t len[MT_LANES], unsigned version)
{
    uint8_t *p = out;
    for (int i = 0; i < mt_lanes_of(version); i++)
        p = mt_put_varint(p, len[i]);
    return (size_t)(p - out);
}

int mt_lanes_split(const uint8_t *raw, size_t rawlen, mt_cursor lane[MT_LANES], unsigned version)
{
    int n = mt_lanes_of(version);
    mt_cursor dir = {raw, raw + rawlen, 0};
    uint64_t len[MT_LANES];
    for (int i = 0; i < n; i++)
        len[i] = mt_get_varint(&dir);
    if (dir.bad) return -1;
    const uint8_t *p = dir.p;
    for (int i = 0; i < n; i++) {
        if (len[i] > (uint64_t)(dir.end - p)) return -1;
        lane[i] = (mt_cursor){p, p + len[i], 0};
        p += len[i];
    }
    for (int i = n; i < MT_LANES; i++)
        lane[i] = (mt_cursor){p, p, 0}; /* a lane this version does not have: empty */
    return p == dir.end ? 0 : -1;
}
