/* bytes.h — the primitive encodings every trace structure is built from (private to src/trace).
 *
 *   LEB128 varint   7 value bits per byte, low group first, bit 7 set = "more bytes follow".
 *                   A u64 takes 1..10 bytes; the 10th byte may only hold the value's top bit.
 *   zig-zag         signed -> unsigned so that small negative deltas stay short:
 *                   0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...
 *   little-endian   fixed-width integers in the file header and the chunk header.
 *
 * Decoding goes through mt_cursor, which never reads past `end`: every getter checks the bytes
 * left first and on failure sets `bad` and returns 0, so a decoder can read a whole record and
 * test `bad` once at the end. That is what keeps the reader safe on arbitrary (fuzzed) input.
 */
#ifndef MT_TRACE_BYTES_H
#define MT_TRACE_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MT_VARINT_MAX 10 /* bytes of the longest u64 varint */

/* ---- writing: the caller guarantees room (encoders size their output with mt_encode_bound) -- */

static inline uint8_t *mt_put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint64_t mt_zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static inline uint64_t mt_unzigzag64(uint64_t v)
{
    return (v >> 1) ^ (0 - (v & 1));
}

/* Signed difference a - b of two u64s, computed modulo 2^64 so that b + diff == a always holds:
 * exact round trip even for deltas that overflow int64. */
static inline uint64_t mt_delta64(uint64_t a, uint64_t b)
{
    return mt_zigzag64((int64_t)(a - b));
}
/* Same for u32 fields: the delta is taken modulo 2^32, so it fits 33 zig-zag bits at most. */
static inline uint64_t mt_delta32(uint32_t a, uint32_t b)
{
    return mt_zigzag64((int64_t)(int32_t)(a - b));
}

/* Aligned deltas: d = a - b (mod 2^64) with s trailing zero bits is written as u8 s, then
 * z(d >> s) (arithmetic shift, so the sign survives and the zig-zag value stays small). Allocation
 * addresses are 512 B .. 2 MiB aligned, so an address delta that would be a 4-5 byte varint with
 * all-zero low groups becomes a near-constant byte and 1-2 bytes. d = 0 is s = 0, z 0. */
static inline uint8_t *mt_put_aligned_delta(uint8_t *p, uint64_t a, uint64_t b)
{
    uint64_t d = a - b;
    unsigned s = d ? (unsigned)__builtin_ctzll(d) : 0;
    *p++ = (uint8_t)s;
    return mt_put_varint(p, mt_zigzag64((int64_t)d >> s));
}

static inline void mt_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void mt_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void mt_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t mt_get_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t mt_get_le32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t mt_get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- reading: bounded cursor ------------------------------------------------------------------
 */

typedef struct mt_cursor {
    const uint8_t *p, *end;
    int bad; /* set on the first out-of-bounds or malformed read; sticky */
} mt_cursor;

static inline uint8_t mt_get_u8(mt_cursor *c)
{
    if (c->p >= c->end) {
        c->bad = 1;
        return 0;
    }
    return *c->p++;
}

/* A varint of two or more bytes. With a whole varint's worth of bytes left (nearly always) the
 * bounds are not checked byte by byte; the result, and what counts as bad, are the same. */
static inline uint64_t mt_get_varint_long(mt_cursor *c)
{
    const uint8_t *p = c->p;
    uint64_t v = 0;
    if (c->end - p >= MT_VARINT_MAX) {
        for (int shift = 0; shift < 63; shift += 7) {
            uint8_t b = *p++;
            v |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) {
                c->p = p;
                return v;
            }
        }
        /* the 10th byte carries bit 63 only: anything more would overflow a u64 */
        uint8_t b = *p++;
        c->p = p;
        if (b <= 1) return v | (uint64_t)b << 63;
        c->bad = 1;
        return 0;
    }
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= c->end) break;
        uint8_t b = *p++;
        if (shift == 63 && b > 1) break;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            c->p = p;
            return v;
        }
    }
    c->p = p;
    c->bad = 1;
    return 0;
}

/* The 7-bit groups of the varint in x's low `bits` bits (bits = 8 * its length, 8..64), packed:
 * with BMI2's BZHI (the bytes past the varint cleared) and PEXT (the groups gathered in one
 * instruction) when `pext`, else by masks and three gathering steps. PEXT replaces ~14
 * instructions of each multi-byte varint; there are ~4 an event (time, address and bytes
 * deltas): 55 of the decoder's 232 instructions an event, by callgrind (docs/performance.md,
 * "Fifteenth round"). It is inline assembly, so that no target attribute or -mbmi2 reaches this
 * header's callers: `pext` must only be set where the CPU has BMI2 and a fast PEXT, which
 * mt_decode_variant (encode.c) decides. Both give the same value on every input
 * (tests/test_trace_decode_runs.c; the payload fuzzer). */
static inline __attribute__((always_inline)) uint64_t mt_varint_gather(uint64_t x, unsigned bits,
                                                                      const int pext)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (pext) {
        uint64_t kept, v, index = bits;
        /* bzhi index, src, dst: src's bits from `index` up cleared (none when index is 64) */
        __asm__("bzhi %2, %1, %0" : "=r"(kept) : "rm"(x), "r"(index) : "cc");
        /* pext mask, src, dst: the bits of src under the mask, packed from bit 0 */
        __asm__("pext %2, %1, %0" : "=r"(v) : "r"(kept), "r"(0x7f7f7f7f7f7f7f7full));
        return v;
    }
#else
    (void)pext;
#endif
    uint64_t v = x & 0x7f7f7f7f7f7f7f7full;
    if (bits < 64) v &= (1ull << bits) - 1;
    /* gather the 7-bit groups: 8 x 7 -> 4 x 14 -> 2 x 28 -> 56 bits */
    v = ((v & 0x7f007f007f007f00ull) >> 1) | (v & 0x007f007f007f007full);
    v = ((v & 0x3fff00003fff0000ull) >> 2) | (v & 0x00003fff00003fffull);
    v = ((v & 0x0fffffff00000000ull) >> 4) | (v & 0x000000000fffffffull);
    return v;
}

/* A varint of at most 8 bytes at p, which has 8 bytes after it (the caller knows): its value and,
 * in *len, its length; *len = 0 when it runs longer (for the checked decoder to read). Decoded
 * without a branch on its length: the lengths of time and address deltas vary from one event to
 * the next, and a mispredicted branch per byte was most of the decoder's time. `pext`: gathered
 * with PEXT (mt_varint_gather). */
static inline __attribute__((always_inline)) uint64_t mt_varint8_as(const uint8_t *p, unsigned *len,
                                                                   const int pext)
{
    if (__builtin_expect(*p < 0x80, 1)) {
        *len = 1;
        return *p;
    }
    uint64_t x;
    memcpy(&x, p, 8); /* the first byte lowest */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    uint64_t stops = ~x & 0x8080808080808080ull; /* bit 7 clear: the last byte */
    if (!stops) {
        *len = 0;
        return 0;
    }
    unsigned bits = (unsigned)__builtin_ctzll(stops) + 1; /* 8 * length */
    *len = bits / 8;
    return mt_varint_gather(x, bits, pext);
}

static inline __attribute__((always_inline)) uint64_t mt_varint8(const uint8_t *p, unsigned *len)
{
    return mt_varint8_as(p, len, 0);
}

/* A one-byte varint (most fields) is one compare. With 8 bytes left in the lane, a varint of up
 * to 8 bytes (any value below 2^56) is mt_varint8's; longer ones, and lanes near their end, take
 * the byte loop. Same result, and the same bad inputs, as the byte loop. */
static inline __attribute__((always_inline)) uint64_t mt_get_varint(mt_cursor *c)
{
    const uint8_t *p = c->p;
    if (__builtin_expect(p < c->end && *p < 0x80, 1)) { /* one byte: most fields */
        c->p = p + 1;
        return *p;
    }
    if (__builtin_expect(c->end - p >= 8, 1)) {
        unsigned len;
        uint64_t v = mt_varint8(p, &len);
        if (len) {
            c->p = p + len;
            return v;
        }
    }
    return mt_get_varint_long(c);
}

/* A varint that must fit a u32 field: larger values are corruption, not silently truncated. */
static inline uint32_t mt_get_varint32(mt_cursor *c)
{
    uint64_t v = mt_get_varint(c);
    if (v > UINT32_MAX) {
        c->bad = 1;
        return 0;
    }
    return (uint32_t)v;
}

static inline uint16_t mt_get_varint16(mt_cursor *c)
{
    uint64_t v = mt_get_varint(c);
    if (v > UINT16_MAX) {
        c->bad = 1;
        return 0;
    }
    return (uint16_t)v;
}

/* Inverse of mt_delta64 / mt_delta32: prev + delta, modulo the field width. */
static inline uint64_t mt_get_delta64(mt_cursor *c, uint64_t prev)
{
    return prev + (uint64_t)mt_unzigzag64(mt_get_varint(c));
}
static inline uint32_t mt_get_delta32(mt_cursor *c, uint32_t prev)
{
    uint64_t z = mt_get_varint(c);
    if (z > UINT32_MAX) { /* a 32-bit zig-zag delta never needs more than 32 bits */
        c->bad = 1;
        return 0;
    }
    return prev + (uint32_t)mt_unzigzag64(z);
}

/* Inverse of mt_put_aligned_delta. Any input decodes to some u64 (modulo 2^64), so only the
 * shift needs checking. */
static inline uint64_t mt_get_aligned_delta(mt_cursor *c, uint64_t prev)
{
    unsigned s = mt_get_u8(c);
    uint64_t m = mt_unzigzag64(mt_get_varint(c));
    if (s > 63) {
        c->bad = 1;
        return 0;
    }
    return prev + (m << s);
}

/* Borrows `len` bytes in place; NULL (and bad) if fewer remain. */
static inline const uint8_t *mt_get_bytes(mt_cursor *c, uint64_t len)
{
    if (c->bad || len > (uint64_t)(c->end - c->p)) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *s = c->p;
    c->p += len;
    return s;
}

#endif
