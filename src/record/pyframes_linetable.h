/* pyframes_linetable.h — instruction offset -> line number, decoded from a code object's line
 * table bytes without any Python API. Pure functions on a byte array (bounds-checked: a corrupt
 * table gives -1, never a read past its end), shared by src/record/pyframes.c and the test probe.
 *
 * Both decoders follow CPython's own PyCode_Addr2Line (Objects/codeobject.c): walk the ranges from
 * co_firstlineno, the range [start, end) that holds the instruction gives the line. `lasti` is the
 * instruction index in code units (2 bytes each); a negative lasti means "not started yet" and maps
 * to co_firstlineno, as in CPython. -1 = no line for that instruction (or a corrupt table).
 */
#ifndef MEMTRACE_PYFRAMES_LINETABLE_H
#define MEMTRACE_PYFRAMES_LINETABLE_H

#include <stddef.h>
#include <stdint.h>

/* Python 3.10, PEP 626 co_linetable: a sequence of 2-byte entries.
 *
 *   byte 0            byte 1
 *   +-----------------+------------------+
 *   | sdelta (uint8)  | ldelta (int8)    |   range [end, end + sdelta) bytes of bytecode;
 *   +-----------------+------------------+   line += ldelta, except ldelta == -128: "no line"
 *
 * An entry with sdelta == 0 only moves the line (long jumps are split into several entries). */
static inline int mt_py_line_pep626(const uint8_t *tab, size_t n, int firstlineno, int lasti)
{
    if (lasti < 0)
        return firstlineno;
    long addr = (long)lasti * 2, end = 0;
    int line = firstlineno;
    for (size_t i = 0; i + 1 < n; i += 2) {
        long start = end;
        end += tab[i];
        int ldelta = (int8_t)tab[i + 1];
        int cur;
        if (ldelta == -128) {
            cur = -1;
        } else {
            line += ldelta;
            cur = line;
        }
        if (start <= addr && addr < end)
            return cur;
    }
    return -1;
}

/* Python 3.11+ location table (Objects/locations.md). Each entry starts with a byte whose top bit
 * is set; the bytes after it (up to the next such byte) are its varints.
 *
 *   first byte:  1 | code (4 bits) | length-1 (3 bits)      covers `length` code units
 *   code 15      no location: line is "none" for these instructions
 *   code 14      long form:  svarint line delta, varint end-line delta, varint col+1, varint endcol+1
 *   code 13      no columns: svarint line delta
 *   code 10..12  one line:   line delta = code - 10; then 1 byte column, 1 byte end column
 *   code 0..9    short form: line delta 0; 1 byte of column bits
 *
 *   varint: 6-bit groups, least significant first, bit 6 (0x40) = more groups follow:
 *     0 | more | d5 d4 d3 d2 d1 d0
 *   svarint: varint v, value = (v & 1) ? -(v >> 1) : (v >> 1)
 */
static inline int mt_py__svarint(const uint8_t *p, const uint8_t *lim, int *out)
{
    unsigned v = 0, shift = 0;
    for (;;) {
        if (p >= lim || shift > 24)
            return -1;
        uint8_t b = *p++;
        v |= (unsigned)(b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    *out = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
    return 0;
}

static inline int mt_py_line_locations(const uint8_t *tab, size_t n, int firstlineno, int lasti)
{
    if (lasti < 0)
        return firstlineno;
    const uint8_t *p = tab, *lim = tab + n;
    long end = 0;
    int line = firstlineno;
    while (p < lim) {
        uint8_t b = *p;
        if (!(b & 128))
            return -1; /* not at an entry start: corrupt */
        int code = (b >> 3) & 15;
        int delta = 0;
        if (code == 14 || code == 13) {
            if (mt_py__svarint(p + 1, lim, &delta) != 0)
                return -1;
        } else if (code >= 10 && code <= 12) {
            delta = code - 10;
        }
        line += delta;
        long start = end;
        end += (b & 7) + 1;
        if (start <= lasti && lasti < end)
            return code == 15 ? -1 : line;
        do
            p++;
        while (p < lim && !(*p & 128));
    }
    return -1;
}

#endif
