/* unwind_dwarf_read.h — bounded readers for the encodings used in .eh_frame and .eh_frame_hdr:
 * fixed-size little-endian integers, LEB128 and DW_EH_PE_* encoded pointers.
 *
 * Every read checks the cursor against `end` and sets `bad` instead of reading past it, so a
 * malformed table makes the parser give up rather than walk off into unmapped memory. */
#ifndef MT_RECORD_UNWIND_DWARF_READ_H
#define MT_RECORD_UNWIND_DWARF_READ_H

#include <stdint.h>
#include <string.h>

typedef struct mt_dw_cursor {
    const uint8_t *p;
    const uint8_t *end;
    int bad; /* a read ran past end or met an encoding we do not handle */
} mt_dw_cursor;

/* DW_EH_PE_* pointer encodings: low nibble = format, bits 4..6 = what it is relative to. */
enum {
    MT_PE_ABSPTR = 0x00,
    MT_PE_ULEB128 = 0x01,
    MT_PE_UDATA2 = 0x02,
    MT_PE_UDATA4 = 0x03,
    MT_PE_UDATA8 = 0x04,
    MT_PE_SLEB128 = 0x09,
    MT_PE_SDATA2 = 0x0a,
    MT_PE_SDATA4 = 0x0b,
    MT_PE_SDATA8 = 0x0c,
    MT_PE_PCREL = 0x10,
    MT_PE_DATAREL = 0x30,
    MT_PE_INDIRECT = 0x80,
    MT_PE_OMIT = 0xff,
};

static inline int mt_dw_need(mt_dw_cursor *c, size_t n)
{
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = 1;
        return 0;
    }
    return 1;
}

static inline uint8_t mt_dw_u8(mt_dw_cursor *c)
{
    if (!mt_dw_need(c, 1)) return 0;
    return *c->p++;
}

#define MT_DW_FIXED(name, type)                                                                    \
    static inline type name(mt_dw_cursor *c)                                                       \
    {                                                                                              \
        type v = 0;                                                                                \
        if (!mt_dw_need(c, sizeof v)) return 0;                                                    \
        memcpy(&v, c->p, sizeof v); /* x86-64 is little endian, like the tables */                 \
        c->p += sizeof v;                                                                          \
        return v;                                                                                  \
    }
MT_DW_FIXED(mt_dw_u16, uint16_t)
MT_DW_FIXED(mt_dw_u32, uint32_t)
MT_DW_FIXED(mt_dw_u64, uint64_t)
MT_DW_FIXED(mt_dw_s16, int16_t)
MT_DW_FIXED(mt_dw_s32, int32_t)
#undef MT_DW_FIXED

static inline uint64_t mt_dw_uleb(mt_dw_cursor *c)
{
    uint64_t v = 0;
    unsigned shift = 0;
    for (;;) {
        uint8_t b = mt_dw_u8(c);
        if (c->bad) return 0;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) return v;
    }
}

static inline int64_t mt_dw_sleb(mt_dw_cursor *c)
{
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        b = mt_dw_u8(c);
        if (c->bad) return 0;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40)) v |= ~0ull << shift;
    return (int64_t)v;
}

/* Reads one encoded pointer. pcrel is relative to the field's own address, datarel to `datarel`
 * (the .eh_frame_hdr start for the search table). The indirect bit is not followed: the callers
 * only need direct code addresses (pc_begin), and skip the personality pointer. */
static inline uint64_t mt_dw_encoded(mt_dw_cursor *c, uint8_t enc, uintptr_t datarel)
{
    if (enc == MT_PE_OMIT) return 0;
    uintptr_t field = (uintptr_t)c->p;
    uint64_t v;
    switch (enc & 0x0f) {
    case MT_PE_ABSPTR:
        v = mt_dw_u64(c);
        break;
    case MT_PE_ULEB128:
        v = mt_dw_uleb(c);
        break;
    case MT_PE_UDATA2:
        v = mt_dw_u16(c);
        break;
    case MT_PE_UDATA4:
        v = mt_dw_u32(c);
        break;
    case MT_PE_UDATA8:
        v = mt_dw_u64(c);
        break;
    case MT_PE_SLEB128:
        v = (uint64_t)mt_dw_sleb(c);
        break;
    case MT_PE_SDATA2:
        v = (uint64_t)(int64_t)mt_dw_s16(c);
        break;
    case MT_PE_SDATA4:
        v = (uint64_t)(int64_t)mt_dw_s32(c);
        break;
    case MT_PE_SDATA8:
        v = mt_dw_u64(c);
        break;
    default:
        c->bad = 1;
        return 0;
    }
    switch (enc & 0x70) {
    case 0:
        break;
    case MT_PE_PCREL:
        v += field;
        break;
    case MT_PE_DATAREL:
        v += datarel;
        break;
    default:
        c->bad = 1;
        return 0; /* textrel, funcrel, aligned: not produced on x86-64 Linux */
    }
    return v;
}

#endif
