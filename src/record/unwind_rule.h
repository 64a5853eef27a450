/* unwind_rule.h — the compact rule that takes the x86-64 unwinder from one frame to its caller.
 *
 * The DWARF CFI parser (unwind_cfi.c) produces it, the rule cache (unwind_cache.c) stores it as
 * one 64-bit word, the walker (unwind.c) applies it. It only describes what the walker can do
 * without guessing: CFA = rsp|rbp + offset, return address and caller's rbp loaded from the CFA.
 * Anything else (CFA expressions, registers other than rsp/rbp, signal frames) is UNSUPPORTED and
 * the walk stops there with "truncated".
 *
 * In-memory layout (8 bytes, stored as one uint64_t by the cache; little endian):
 *
 *   byte  0        4        6        7        8
 *         +--------+--------+--------+--------+
 *         |cfa_off |rbp_off |ra_off8 | bits   |
 *         | int32  | int16  | int8   | uint8  |
 *         +--------+--------+--------+--------+
 *   bits: [0..1] kind (mt_rule_kind, never 0 for a real rule: an all-zero word means "empty")
 *         [2]    cfa_reg (0 = rsp, 1 = rbp)
 *         [3..4] rbp_how (mt_rule_rbp)
 */
#ifndef MT_RECORD_UNWIND_RULE_H
#define MT_RECORD_UNWIND_RULE_H

#include <stdint.h>
#include <string.h>

typedef enum mt_rule_kind {
    MT_RULE_STEP = 1,        /* apply the rule to get the caller */
    MT_RULE_OUTERMOST = 2,   /* the return address is undefined: this is _start / clone's child */
    MT_RULE_UNSUPPORTED = 3, /* CFI the walker cannot follow: stop, truncated */
} mt_rule_kind;

typedef enum mt_rule_rbp {
    MT_RBP_SAME = 0,    /* the caller's rbp is the current rbp */
    MT_RBP_SAVED = 1,   /* the caller's rbp is at CFA + rbp_off */
    MT_RBP_UNKNOWN = 2, /* kept in another register or an expression: not tracked */
} mt_rule_rbp;

enum { MT_CFA_RSP = 0, MT_CFA_RBP = 1 };

typedef struct mt_unwind_rule {
    int32_t cfa_off;
    int16_t rbp_off; /* bytes from the CFA; MT_RBP_SAVED only */
    int8_t ra_off8;  /* return address at CFA + 8 * ra_off8 (-1 in every compiler-made frame) */
    uint8_t bits;
} mt_unwind_rule;

_Static_assert(sizeof(mt_unwind_rule) == 8, "mt_unwind_rule must fit one cache word");

static inline mt_rule_kind mt_rule_kind_of(mt_unwind_rule r)
{
    return (mt_rule_kind)(r.bits & 3u);
}
static inline unsigned mt_rule_cfa_reg(mt_unwind_rule r)
{
    return (r.bits >> 2) & 1u;
}
static inline mt_rule_rbp mt_rule_rbp_of(mt_unwind_rule r)
{
    return (mt_rule_rbp)((r.bits >> 3) & 3u);
}

static inline mt_unwind_rule mt_rule_make(mt_rule_kind kind, unsigned cfa_reg, int32_t cfa_off,
                                          mt_rule_rbp rbp, int16_t rbp_off, int8_t ra_off8)
{
    mt_unwind_rule r = {cfa_off, rbp_off, ra_off8,
                        (uint8_t)((unsigned)kind | (cfa_reg << 2) | ((unsigned)rbp << 3))};
    return r;
}

static inline uint64_t mt_rule_to_word(mt_unwind_rule r)
{
    uint64_t w;
    memcpy(&w, &r, sizeof w);
    return w;
}

static inline mt_unwind_rule mt_rule_from_word(uint64_t w)
{
    mt_unwind_rule r;
    memcpy(&r, &w, sizeof r);
    return r;
}

#endif
