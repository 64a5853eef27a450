/* encode.h — records <-> bytes inside one chunk (private to src/trace).
 *
 * Encoding is stateful so that an event costs only what changed since the previous one, but the
 * state lives for one chunk only: writer and reader both call mt_codec_reset at every chunk start,
 * which is what lets any whole chunk decode on its own (and a cut file read up to its last whole
 * chunk). The layouts are drawn beside each encoder in encode.c and in docs/trace-format.md.
 */
#ifndef MT_TRACE_ENCODE_H
#define MT_TRACE_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "memtrace/trace.h"

/* Lanes. A chunk's records are not stored one after the other: the high-entropy fields of events
 * (time, address, size, stack, correlation deltas) each go to their own lane, everything else
 * (record types, event heads, the rarer records) to the main lane. zlib then sees runs of similar
 * bytes: on the synthetic stream this saves ~20% over one interleaved stream, because deflate's
 * Huffman tables no longer have to cover random time bytes and near-constant heads at once.
 * Decoding walks the main lane and pulls each field from its lane, so records still come out in
 * order. Raw chunk payload = lane directory (mt_lanes_put_dir) + the lanes back to back. */
enum {
    MT_LANE_MAIN = 0,
    MT_LANE_TIME = 1,
    MT_LANE_ADDR = 2,
    MT_LANE_BYTES = 3,
    MT_LANE_STACK = 4,
    MT_LANE_CORR = 5,
    MT_LANE_TIME_LO = 6, /* version 2: the low byte of each time delta (near-uniform noise) */
    MT_LANES = 7
};
#define MT_LANES_DIR_MAX (MT_LANES * MT_VARINT_MAX)

/* How many lanes a chunk of this format version has: 6 in version 1, 7 from version 2. */
static inline int mt_lanes_of(unsigned version)
{
    return version >= 2 ? 7 : 6;
}

/* Writes the directory: one v length per lane of `version`, in lane order. Returns its size. */
size_t mt_lanes_put_dir(uint8_t *out, const size_t len[MT_LANES], unsigned version);
/* Splits a raw chunk payload into lane cursors (lanes the version lacks are empty). -1 unless
 * the lengths cover it exactly. */
int mt_lanes_split(const uint8_t *raw, size_t rawlen, mt_cursor lane[MT_LANES], unsigned version);

/* Live-allocation table: a direct-mapped cache address -> bytes of the ALLOCs seen in this chunk,
 * so a FREE whose size the recorder knew costs no size bytes. Power of two. */
#define MT_CODEC_LIVE_SLOTS 2048u

/* Predictions for "same as before" fields. Indexed by op & 7 where the value depends on the op
 * (alloc and free of one kind alternate, but each keeps its own API id and typical size). */
typedef struct mt_codec {
    unsigned version; /* the file's format version (1 or 2): what the event layout is */
    /* events */
    uint64_t time, address, stream, aux;
    uint64_t tensor_aux[8]; /* version 2: aux of the latest TENSOR event per device & 7 */
    uint64_t bytes_by_op[8];
    uint64_t last_alloc;     /* address of the latest ALLOC: LIFO frees are common */
    uint32_t stack_by_op[8]; /* alloc and free sites differ; each op's stacks cluster */
    uint32_t tid, context, stack, correlation;
    int32_t device;
    uint16_t api_by_op[8];
    uint16_t result, flags;
    uint8_t kind;
    /* stack nodes */
    uint32_t node_id;
    uint64_t node_ip;
    struct {
        uint64_t address, bytes;
    } live[MT_CODEC_LIVE_SLOTS];
} mt_codec;

/* Empties the state for a new chunk of a file of format `version` (1 or MT_TRACE_VERSION). */
void mt_codec_reset(mt_codec *c, unsigned version);

/* Upper bound of mt_encode_record's output for r (strings included); 0 for an unknown type. */
size_t mt_encode_bound(const mt_record *r);

/* Appends r to the lanes, advancing each lane[i] write position past what it wrote, and advances
 * the codec state. Every lane needs room for mt_encode_bound(r) bytes. Returns the bytes written
 * over all lanes; 0 for an unknown record type (nothing written, state unchanged).
 * NULL strings are written as "" (the reader returns ""). */
size_t mt_encode_record(mt_codec *c, uint8_t *lane[MT_LANES], const mt_record *r);

/* Decodes the next record: its type and the rest from lane[MT_LANE_MAIN], event fields from their
 * lanes. Strings and byte arrays in *out point into the lanes' buffer (strings are NUL-terminated
 * there). Returns 0, or -1 on malformed input (unknown type, out-of-range value, length past the
 * end of a lane); then the codec state is unspecified. */
int mt_decode_record(mt_codec *c, mt_cursor lane[MT_LANES], mt_record *out);
/* The same for the plain events that follow (no rare field, an op below 7), up to max of them, as
 * long as every lane has room for an event's longest fields: each is read without a bound check
 * per field and the codec's predictions stay in registers. Stops before anything else (another
 * record, a rare or long field, a lane near its end), which mt_decode_record then reads from the
 * same place and state: the records, lanes and codec are what mt_decode_record gives. Returns how
 * many were decoded into out. */
size_t mt_decode_events(mt_codec *c, mt_cursor lane[MT_LANES], mt_record *out, size_t max);
/* The same, with the varint decoder named: MT_DECODE_PLAIN (any CPU) or MT_DECODE_PEXT (BMI2's
 * BZHI and PEXT; asked for on a CPU where mt_decode_variant does not give it, the plain one runs).
 * Both give the same results on every input; mt_decode_events takes mt_decode_variant()'s. */
enum { MT_DECODE_PLAIN = 0, MT_DECODE_PEXT = 1 };
int mt_decode_variant(void);
size_t mt_decode_events_as(mt_codec *c, mt_cursor lane[MT_LANES], mt_record *out, size_t max,
                           int variant);

#endif
