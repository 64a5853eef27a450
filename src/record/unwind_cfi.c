/* unwind_cfi.c — DWARF call frame information (.eh_frame) -> mt_unwind_rule, for x86-64.
 *
 * Runs on a rule-cache miss only (once per distinct pc in practice), so it favours clarity and
 * bounds checks over speed. Steps:
 *   1. _dl_find_object(pc): the object and its PT_GNU_EH_FRAME (.eh_frame_hdr), lock-free
 *      (glibc >= 2.35), unlike dl_iterate_phdr which takes the loader lock.
 *   2. binary search the sorted table in .eh_frame_hdr for the FDE whose range holds pc;
 *   3. parse its CIE and the FDE, run the CIE's initial instructions then the FDE's up to pc;
 *   4. reduce the row to the three registers the walker follows: CFA (rsp/rbp + offset),
 *      return address (r16) and rbp (r6).
 *
 * .eh_frame_hdr (all produced by GNU ld / gold / lld with table_enc = datarel|sdata4):
 *
 *   offset 0    1            2             3          4
 *          +----+------------+-------------+----------+---------------------+---------------+
 *          | v=1| eh_frame   | fde_count   | table    | eh_frame_ptr        | fde_count     |
 *          |    | _ptr_enc   | _enc        | _enc     | (eh_frame_ptr_enc)  | (fde_count_enc)|
 *          +----+------------+-------------+----------+---------------------+---------------+
 *          then fde_count x { int32 initial_loc - hdr, int32 fde_address - hdr }, sorted by pc
 *
 * CIE / FDE records in .eh_frame:
 *
 *   CIE: u32 length | u32 id = 0 | u8 version | "augmentation\0" | uleb code_align |
 *        sleb data_align | ra register (u8 if version 1, else uleb) |
 *        ['z': uleb aug_len, then per letter L: u8 lsda_enc, P: u8 enc + pointer,
 *         R: u8 fde_enc, S: signal frame] | initial instructions...
 *   FDE: u32 length | u32 (this field's offset - CIE's offset) | pc_begin (fde_enc) |
 *        pc_range (fde_enc format, absolute) | ['z': uleb aug_len + data] | instructions...
 *   (length 0xffffffff announces a 64-bit length after it.)
 */
#include "unwind_cfi.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>

#include "unwind_dwarf_read.h"

/* DWARF register numbers on x86-64 (System V psABI, figure 3.36). */
enum { DW_RBP = 6, DW_RSP = 7, DW_RA = 16 };

enum {
    DW_CFA_nop = 0x00,
    DW_CFA_set_loc = 0x01,
    DW_CFA_advance_loc1 = 0x02,
    DW_CFA_advance_loc2 = 0x03,
    DW_CFA_advance_loc4 = 0x04,
    DW_CFA_offset_extended = 0x05,
    DW_CFA_restore_extended = 0x06,
    DW_CFA_undefined = 0x07,
    DW_CFA_same_value = 0x08,
    DW_CFA_register = 0x09,
    DW_CFA_remember_state = 0x0a,
    DW_CFA_restore_state = 0x0b,
    DW_CFA_def_cfa = 0x0c,
    DW_CFA_def_cfa_register = 0x0d,
    DW_CFA_def_cfa_offset = 0x0e,
    DW_CFA_def_cfa_expression = 0x0f,
    DW_CFA_expression = 0x10,
    DW_CFA_offset_extended_sf = 0x11,
    DW_CFA_def_cfa_sf = 0x12,
    DW_CFA_def_cfa_offset_sf = 0x13,
    DW_CFA_val_offset = 0x14,
    DW_CFA_val_offset_sf = 0x15,
    DW_CFA_val_expression = 0x16,
    DW_CFA_GNU_args_size = 0x2e,
    DW_CFA_GNU_negative_offset_extended = 0x2f,
    DW_CFA_advance_loc = 0x40, /* high two bits; low six = delta */
    DW_CFA_offset = 0x80,      /* low six = register */
    DW_CFA_restore = 0xc0,     /* low six = register */
};

/* How one register of the caller is recovered. Only rbp and the return address are tracked; the
 * rules of every other register are parsed and dropped. */
typedef enum { REG_SAME, REG_UNDEFINED, REG_AT_CFA, REG_OTHER } reg_how;

typedef struct reg_rule {
    reg_how how;
    int64_t off; /* REG_AT_CFA: saved at CFA + off */
} reg_rule;

typedef struct cfa_row {
    uint64_t cfa_reg;
    int64_t cfa_off;
    int cfa_is_expr;
    reg_rule rbp, ra;
} cfa_row;

/* Deep enough for every compiler; deeper nesting is reported as unsupported, not guessed. */
#define MT_CFA_STATE_STACK 8

typedef struct cie_info {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    int has_aug_data; /* 'z': FDEs carry an augmentation length */
    int signal_frame; /* 'S' */
    const uint8_t *insns, *insns_end;
} cie_info;

typedef struct cfa_program {
    const cie_info *cie;
    uintptr_t target;    /* run rows while loc <= target */
    const cfa_row *init; /* the row after the CIE's instructions, for DW_CFA_restore; NULL in CIE */
    cfa_row stack[MT_CFA_STATE_STACK];
    int depth;
} cfa_program;

static reg_rule *tracked(cfa_row *row, uint64_t reg)
{
    if (reg == DW_RBP) return &row->rbp;
    if (reg == DW_RA) return &row->ra;
    return NULL;
}

static void set_rule(cfa_row *row, uint64_t reg, reg_how how, int64_t off)
{
    reg_rule *r = tracked(row, reg);
    if (r) {
        r->how = how;
        r->off = off;
    }
}

static void restore_rule(cfa_program *pg, cfa_row *row, uint64_t reg)
{
    reg_rule *r = tracked(row, reg);
    if (!r) return;
    if (!pg->init) {
        r->how = REG_SAME;
        return;
    }
    *r = reg == DW_RBP ? pg->init->rbp : pg->init->ra;
}

/* Runs instructions from c until its end or until the location passes pg->target.
 * Returns 0, or -1 on a malformed/unknown opcode. */
static int run_cfa(cfa_program *pg, mt_dw_cursor *c, uintptr_t *loc, cfa_row *row)
{
    const cie_info *cie = pg->cie;
    while (c->p < c->end && !c->bad) {
        uint8_t op = mt_dw_u8(c);
        uint64_t delta = 0, reg, off;
        int advance = 0;
        switch (op & 0xc0) {
        case DW_CFA_advance_loc:
            delta = op & 0x3f;
            advance = 1;
            break;
        case DW_CFA_offset:
            off = mt_dw_uleb(c);
            set_rule(row, op & 0x3f, REG_AT_CFA, (int64_t)off * cie->data_align);
            continue;
        case DW_CFA_restore:
            restore_rule(pg, row, op & 0x3f);
            continue;
        default:
            break;
        }
        if (!advance) {
            switch (op) {
            case DW_CFA_nop:
                break;
            case DW_CFA_set_loc: {
                uint64_t to = mt_dw_encoded(c, cie->fde_enc, 0);
                if (to > pg->target) return 0;
                *loc = to;
                break;
            }
            case DW_CFA_advance_loc1:
                delta = mt_dw_u8(c), advance = 1;
                break;
            case DW_CFA_advance_loc2:
                delta = mt_dw_u16(c), advance = 1;
                break;
            case DW_CFA_advance_loc4:
                delta = mt_dw_u32(c), advance = 1;
                break;
            case DW_CFA_offset_extended:
                reg = mt_dw_uleb(c);
                off = mt_dw_uleb(c);
                set_rule(row, reg, REG_AT_CFA, (int64_t)off * cie->data_align);
                break;
            case DW_CFA_offset_extended_sf:
                reg = mt_dw_uleb(c);
                set_rule(row, reg, REG_AT_CFA, mt_dw_sleb(c) * cie->data_align);
                break;
            case DW_CFA_GNU_negative_offset_extended:
                reg = mt_dw_uleb(c);
                off = mt_dw_uleb(c);
                set_rule(row, reg, REG_AT_CFA, -(int64_t)off * cie->data_align);
                break;
            case DW_CFA_restore_extended:
                restore_rule(pg, row, mt_dw_uleb(c));
                break;
            case DW_CFA_undefined:
                set_rule(row, mt_dw_uleb(c), REG_UNDEFINED, 0);
                break;
            case DW_CFA_same_value:
                set_rule(row, mt_dw_uleb(c), REG_SAME, 0);
                break;
            case DW_CFA_register:
                reg = mt_dw_uleb(c);
                (void)mt_dw_uleb(c);
                set_rule(row, reg, REG_OTHER, 0);
                break;
            case DW_CFA_val_offset:
                reg = mt_dw_uleb(c);
                (void)mt_dw_uleb(c);
                set_rule(row, reg, REG_OTHER, 0);
                break;
            case DW_CFA_val_offset_sf:
                reg = mt_dw_uleb(c);
                (void)mt_dw_sleb(c);
                set_rule(row, reg, REG_OTHER, 0);
                break;
            case DW_CFA_expression:
            case DW_CFA_val_expression:
                reg = mt_dw_uleb(c);
                off = mt_dw_uleb(c); /* block length */
                if (mt_dw_need(c, off)) c->p += off;
                set_rule(row, reg, REG_OTHER, 0);
                break;
            case DW_CFA_remember_state:
                if (pg->depth == MT_CFA_STATE_STACK) return -1;
                pg->stack[pg->depth++] = *row;
                break;
            case DW_CFA_restore_state:
                if (pg->depth == 0) return -1;
                /* DWARF 5 6.4.2.4: the CFA is part of the state too. */
                *row = pg->stack[--pg->depth];
                break;
            case DW_CFA_def_cfa:
                row->cfa_reg = mt_dw_uleb(c);
                row->cfa_off = (int64_t)mt_dw_uleb(c);
                row->cfa_is_expr = 0;
                break;
            case DW_CFA_def_cfa_sf:
                row->cfa_reg = mt_dw_uleb(c);
                row->cfa_off = mt_dw_sleb(c) * cie->data_align;
                row->cfa_is_expr = 0;
                break;
            case DW_CFA_def_cfa_register:
                row->cfa_reg = mt_dw_uleb(c);
                row->cfa_is_expr = 0;
                break;
            case DW_CFA_def_cfa_offset:
                row->cfa_off = (int64_t)mt_dw_uleb(c);
                break;
            case DW_CFA_def_cfa_offset_sf:
                row->cfa_off = mt_dw_sleb(c) * cie->data_align;
                break;
            case DW_CFA_def_cfa_expression:
                off = mt_dw_uleb(c);
                if (mt_dw_need(c, off)) c->p += off;
                row->cfa_is_expr = 1;
                break;
            case DW_CFA_GNU_args_size:
                (void)mt_dw_uleb(c);
                break;
            default:
                return -1; /* vendor opcode we do not know: its operands are unknown too */
            }
        }
        if (advance) {
            uint64_t to = *loc + delta * cie->code_align;
            if (to > pg->target) return 0; /* the row for target is complete */
            *loc = to;
        }
    }
    return c->bad ? -1 : 0;
}

/* Record length and body bounds; 0 on success. */
static int record_bounds(const uint8_t *rec, const uint8_t *lim, const uint8_t **body,
                         const uint8_t **end)
{
    mt_dw_cursor c = {rec, lim, 0};
    uint64_t len = mt_dw_u32(&c);
    if (len == 0xffffffffu) len = mt_dw_u64(&c);
    if (c.bad || len == 0 || len > (uint64_t)(lim - c.p)) return -1;
    *body = c.p;
    *end = c.p + len;
    return 0;
}

static int parse_cie(const uint8_t *rec, const uint8_t *lim, cie_info *cie)
{
    const uint8_t *body, *end;
    if (record_bounds(rec, lim, &body, &end)) return -1;
    mt_dw_cursor c = {body, end, 0};
    if (mt_dw_u32(&c) != 0) return -1; /* a CIE's id is 0 in .eh_frame */
    uint8_t version = mt_dw_u8(&c);
    if (version != 1 && version != 3) return -1;
    const char *aug = (const char *)c.p;
    while (mt_dw_u8(&c) != 0 && !c.bad) {
    }
    if (c.bad) return -1;
    cie->code_align = mt_dw_uleb(&c);
    cie->data_align = mt_dw_sleb(&c);
    cie->ra_reg = version == 1 ? mt_dw_u8(&c) : mt_dw_uleb(&c);
    cie->fde_enc = MT_PE_ABSPTR;
    cie->has_aug_data = 0;
    cie->signal_frame = 0;
    if (aug[0] == 'z') {
        cie->has_aug_data = 1;
        uint64_t alen = mt_dw_uleb(&c);
        if (!mt_dw_need(&c, alen)) return -1;
        mt_dw_cursor a = {c.p, c.p + alen, 0};
        for (const char *s = aug + 1; *s && !a.bad; s++) {
            switch (*s) {
            case 'L':
                (void)mt_dw_u8(&a);
                break;
            case 'R':
                cie->fde_enc = mt_dw_u8(&a);
                break;
            case 'P': {
                uint8_t penc = mt_dw_u8(&a);
                (void)mt_dw_encoded(&a, penc & 0x7f, 0); /* size only; never dereferenced */
                break;
            }
            case 'S':
                cie->signal_frame = 1;
                break;
            default:
                return -1; /* unknown letter: its data (and so the rest) is unknown */
            }
        }
        if (a.bad) return -1;
        c.p += alen;
    } else if (aug[0] != '\0') {
        return -1; /* "eh" and other ancient augmentations */
    }
    if (c.bad) return -1;
    cie->insns = c.p;
    cie->insns_end = end;
    return 0;
}

/* Binary search of the .eh_frame_hdr table: the FDE with the greatest initial_loc <= pc. */
static const uint8_t *search_table(const uint8_t *hdr, const uint8_t *lim, uintptr_t pc)
{
    mt_dw_cursor c = {hdr, lim, 0};
    uint8_t version = mt_dw_u8(&c);
    uint8_t ptr_enc = mt_dw_u8(&c);
    uint8_t count_enc = mt_dw_u8(&c);
    uint8_t table_enc = mt_dw_u8(&c);
    if (c.bad || version != 1 || table_enc != (MT_PE_DATAREL | MT_PE_SDATA4)) return NULL;
    (void)mt_dw_encoded(&c, ptr_enc, (uintptr_t)hdr);
    uint64_t count = mt_dw_encoded(&c, count_enc, (uintptr_t)hdr);
    if (c.bad || count == 0 || count > (uint64_t)(lim - c.p) / 8) return NULL;
    const uint8_t *table = c.p;
    uint64_t lo = 0, hi = count; /* find the last entry with start <= pc */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        int32_t start;
        memcpy(&start, table + mid * 8, 4);
        if ((uintptr_t)hdr + (intptr_t)start <= pc)
            lo = mid;
        else
            hi = mid;
    }
    int32_t start, fde;
    memcpy(&start, table + lo * 8, 4);
    memcpy(&fde, table + lo * 8 + 4, 4);
    if ((uintptr_t)hdr + (intptr_t)start > pc) return NULL;
    return hdr + fde;
}

static mt_unwind_rule reduce(const cfa_row *row, const cie_info *cie)
{
    mt_unwind_rule unsupported = mt_rule_make(MT_RULE_UNSUPPORTED, 0, 0, MT_RBP_UNKNOWN, 0, 0);
    if (cie->signal_frame || cie->ra_reg != DW_RA) return unsupported;
    if (row->ra.how == REG_UNDEFINED)
        return mt_rule_make(MT_RULE_OUTERMOST, 0, 0, MT_RBP_UNKNOWN, 0, 0);
    if (row->cfa_is_expr || (row->cfa_reg != DW_RSP && row->cfa_reg != DW_RBP)) return unsupported;
    if (row->cfa_off < INT32_MIN || row->cfa_off > INT32_MAX) return unsupported;
    if (row->ra.how != REG_AT_CFA || row->ra.off % 8 != 0 || row->ra.off / 8 < INT8_MIN ||
        row->ra.off / 8 > INT8_MAX)
        return unsupported;
    mt_rule_rbp rbp = MT_RBP_SAME;
    int16_t rbp_off = 0;
    if (row->rbp.how == REG_AT_CFA && row->rbp.off >= INT16_MIN && row->rbp.off <= INT16_MAX) {
        rbp = MT_RBP_SAVED;
        rbp_off = (int16_t)row->rbp.off;
    } else if (row->rbp.how != REG_SAME) {
        rbp = MT_RBP_UNKNOWN; /* fine until a caller's CFA needs rbp; the walker checks */
    }
    return mt_rule_make(MT_RULE_STEP, row->cfa_reg == DW_RBP ? MT_CFA_RBP : MT_CFA_RSP,
                        (int32_t)row->cfa_off, rbp, rbp_off, (int8_t)(row->ra.off / 8));
}

mt_cfi_status mt_cfi_rule_at(uintptr_t pc, mt_unwind_rule *rule)
{
    *rule = mt_rule_make(MT_RULE_UNSUPPORTED, 0, 0, MT_RBP_UNKNOWN, 0, 0);
    struct dl_find_object obj;
    if (_dl_find_object((void *)pc, &obj) != 0) return MT_CFI_NO_OBJECT;
    const uint8_t *lo = obj.dlfo_map_start, *lim = obj.dlfo_map_end;
    const uint8_t *hdr = obj.dlfo_eh_frame;
    /* Every pointer we follow must stay inside the object's mapping. */
    if (!hdr || hdr < lo || hdr >= lim) return MT_CFI_FOUND;

    const uint8_t *fde = search_table(hdr, lim, pc);
    if (!fde || fde < lo || fde >= lim) return MT_CFI_FOUND;
    const uint8_t *body, *end;
    if (record_bounds(fde, lim, &body, &end)) return MT_CFI_FOUND;
    mt_dw_cursor c = {body, end, 0};
    uint32_t cie_delta = mt_dw_u32(&c);
    const uint8_t *cie_rec = body - cie_delta;
    if (c.bad || cie_delta == 0 || cie_rec < lo || cie_rec >= lim) return MT_CFI_FOUND;
    cie_info cie;
    if (parse_cie(cie_rec, lim, &cie)) return MT_CFI_FOUND;

    uintptr_t pc_begin = mt_dw_encoded(&c, cie.fde_enc, 0);
    uintptr_t pc_range = mt_dw_encoded(&c, cie.fde_enc & 0x0f, 0);
    if (c.bad || pc < pc_begin || pc - pc_begin >= pc_range) return MT_CFI_FOUND; /* no FDE */
    if (cie.has_aug_data) {
        uint64_t alen = mt_dw_uleb(&c);
        if (!mt_dw_need(&c, alen)) return MT_CFI_FOUND;
        c.p += alen;
    }

    cfa_program pg = {.cie = &cie, .target = (uintptr_t)-1, .init = NULL, .depth = 0};
    cfa_row row = {.cfa_reg = ~0ull, .rbp = {REG_SAME, 0}, .ra = {REG_SAME, 0}};
    uintptr_t loc = pc_begin;
    mt_dw_cursor ci = {cie.insns, cie.insns_end, 0};
    if (run_cfa(&pg, &ci, &loc, &row)) return MT_CFI_FOUND;
    cfa_row init = row;
    pg.init = &init;
    pg.target = pc;
    pg.depth = 0;
    loc = pc_begin;
    if (run_cfa(&pg, &c, &loc, &row)) return MT_CFI_FOUND;
    *rule = reduce(&row, &cie);
    return MT_CFI_FOUND;
}
