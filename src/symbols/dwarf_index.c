/* DWARF lookups with libdwarf (Debian 12: 20210528, the "old" API).
 *
 * Two levels, both lazy, so a huge library costs only what the trace touches:
 *   1. CU index: address ranges -> CU DIE offset, from .debug_aranges (one pass over a small
 *      section); when an address is not there (clang emits no aranges) the CU DIEs themselves are
 *      walked once for DW_AT_low_pc/high_pc/ranges.
 *   2. Per CU, on the first address that falls in it: the line table (as sorted [lo,hi) spans)
 *      and the "scopes" — every DW_TAG_subprogram / DW_TAG_inlined_subroutine with its pc ranges,
 *      its parent scope and, for inlined ones, the call site. Lexical blocks, namespaces and
 *      classes are walked through but not kept; types and variables are skipped.
 * A lookup then is a binary search in the spans plus a scan of the CU's scopes.
 */
#include <dwarf.h>
#include <fcntl.h>
#include <libdwarf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbols_internal.h"

typedef struct cu_range {
    uint64_t lo, hi; /* [lo, hi) file addresses */
    uint64_t cu_off; /* CU DIE offset in .debug_info */
} cu_range;

typedef struct line_span {
    uint64_t lo, hi;
    uint32_t line, file; /* file: raw line-table file number */
} line_span;

typedef struct pc_range {
    uint64_t lo, hi;
} pc_range;

typedef struct scope {
    int parent;            /* index into cu_info.scopes; -1 = a real (out of line) function */
    uint32_t depth;        /* 0 for a function, parent's + 1 for an inlined call */
    size_t first_range, nranges;
    char *name;            /* demangled; "" when DWARF names nothing */
    uint32_t call_file, call_line; /* inlined only: where the parent calls it */
} scope;

typedef struct cu_info {
    uint64_t off;
    int state; /* 0 = not loaded, 1 = loaded, -1 = failed */
    Dwarf_Half version;
    uint64_t base; /* CU base address (DW_AT_low_pc), for DWARF 4 .debug_ranges */
    line_span *spans;
    size_t nspans;
    char **files;
    size_t nfiles;
    scope *scopes;
    size_t nscopes, cap_scopes;
    pc_range *ranges;
    size_t nranges, cap_ranges;
} cu_info;

struct mt_dwarf {
    int fd;
    Dwarf_Debug dbg;
    Dwarf_Error err; /* last error, freed as soon as it is seen */
    cu_range *index;
    size_t nindex, cap_index;
    int have_aranges, walked;
    cu_info *cus;
    size_t ncus, cap_cus;
    mt_u64map cu_by_off; /* CU DIE offset -> a: index into cus + 1 (0: failed), b: 1 = seen */
    uint64_t cus_decoded;
};

#define MAX_WALK_DEPTH 64 /* DIE nesting guard against malformed input */

/* Every libdwarf call goes through OK(): true on DW_DLV_OK, else frees the error (if any). */
static int ok_(mt_dwarf *d, int res)
{
    if (res == DW_DLV_ERROR && d->err) {
        dwarf_dealloc(d->dbg, d->err, DW_DLA_ERROR);
    }
    d->err = NULL;
    return res == DW_DLV_OK;
}
#define OK(call) ok_(d, (call))

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return p;
    size_t ncap = *cap ? *cap * 2 : 64;
    while (ncap < need) ncap *= 2;
    void *np = realloc(p, ncap * elem);
    if (np) *cap = ncap;
    return np;
}

/* ---- attributes ---------------------------------------------------------------------------- */

static int attr_udata(mt_dwarf *d, Dwarf_Die die, Dwarf_Half at, Dwarf_Unsigned *out)
{
    Dwarf_Attribute a;
    if (!OK(dwarf_attr(die, at, &a, &d->err))) return 0;
    int r = OK(dwarf_formudata(a, out, &d->err));
    dwarf_dealloc(d->dbg, a, DW_DLA_ATTR);
    return r;
}

/* Returned string belongs to libdwarf (lives until dwarf_finish). */
static const char *attr_string(mt_dwarf *d, Dwarf_Die die, Dwarf_Half at)
{
    Dwarf_Attribute a;
    char *s = NULL;
    if (!OK(dwarf_attr(die, at, &a, &d->err))) return NULL;
    if (!OK(dwarf_formstring(a, &s, &d->err))) s = NULL;
    dwarf_dealloc(d->dbg, a, DW_DLA_ATTR);
    return s;
}

static int attr_ref(mt_dwarf *d, Dwarf_Die die, Dwarf_Half at, Dwarf_Off *out)
{
    Dwarf_Attribute a;
    if (!OK(dwarf_attr(die, at, &a, &d->err))) return 0;
    int r = OK(dwarf_global_formref(a, out, &d->err));
    dwarf_dealloc(d->dbg, a, DW_DLA_ATTR);
    return r;
}

/* Name of a function DIE: its linkage name demangled (fully qualified, with parameter types),
 * else what the DIE it was made from says (abstract_origin: a concrete or inlined instance;
 * specification: an out-of-class definition), else its plain DW_AT_name. malloc'd or NULL. */
static char *die_name(mt_dwarf *d, Dwarf_Die die, int hops)
{
    const char *link = attr_string(d, die, DW_AT_linkage_name);
    if (!link) link = attr_string(d, die, DW_AT_MIPS_linkage_name);
    if (link) {
        char *dm = mt_demangle(link);
        return dm ? dm : strdup(link);
    }
    if (hops < 4) {
        static const Dwarf_Half via[] = {DW_AT_abstract_origin, DW_AT_specification};
        for (int i = 0; i < 2; i++) {
            Dwarf_Off off;
            Dwarf_Die t;
            if (!attr_ref(d, die, via[i], &off) || !OK(dwarf_offdie_b(d->dbg, off, 1, &t, &d->err)))
                continue;
            char *n = die_name(d, t, hops + 1);
            dwarf_dealloc(d->dbg, t, DW_DLA_DIE);
            if (n) return n;
        }
    }
    const char *name = attr_string(d, die, DW_AT_name);
    return name ? strdup(name) : NULL;
}

/* ---- pc ranges of a DIE ------------------------------------------------------------------ */

typedef struct range_vec {
    pc_range *v;
    size_t n, cap;
} range_vec;

static void range_add(range_vec *rv, uint64_t lo, uint64_t hi)
{
    if (hi <= lo) return;
    pc_range *nv = grow(rv->v, &rv->cap, rv->n + 1, sizeof *nv);
    if (!nv) return;
    rv->v = nv;
    rv->v[rv->n++] = (pc_range){lo, hi};
}

/* DWARF 5 DW_AT_ranges: .debug_rnglists, libdwarf hands back final ("cooked") addresses. */
static void ranges_v5(mt_dwarf *d, Dwarf_Attribute a, range_vec *rv)
{
    Dwarf_Half form = 0;
    Dwarf_Unsigned val = 0, count = 0, global = 0;
    if (!OK(dwarf_whatform(a, &form, &d->err))) return;
    if (form == DW_FORM_rnglistx) {
        if (!OK(dwarf_formudata(a, &val, &d->err))) return;
    } else {
        Dwarf_Off off;
        if (!OK(dwarf_global_formref(a, &off, &d->err)) && !OK(dwarf_formudata(a, &off, &d->err)))
            return;
        val = off;
    }
    Dwarf_Rnglists_Head head = NULL;
    if (!OK(dwarf_rnglists_get_rle_head(a, form, val, &head, &count, &global, &d->err))) return;
    for (Dwarf_Unsigned i = 0; i < count; i++) {
        unsigned len = 0, code = 0;
        Dwarf_Unsigned r1, r2, c1, c2;
        Dwarf_Bool unavailable = 0;
        if (!OK(dwarf_get_rnglists_entry_fields_a(head, i, &len, &code, &r1, &r2, &unavailable,
                                                  &c1, &c2, &d->err)))
            break;
        if (unavailable) continue;
        if (code == DW_RLE_offset_pair || code == DW_RLE_start_end ||
            code == DW_RLE_start_length || code == DW_RLE_startx_endx ||
            code == DW_RLE_startx_length)
            range_add(rv, c1, c2);
    }
    dwarf_dealloc_rnglists_head(head);
}

/* DWARF 2-4 DW_AT_ranges: .debug_ranges entries are relative to the CU base address unless a
 * base-address selection entry changes it. */
static void ranges_v4(mt_dwarf *d, Dwarf_Attribute a, Dwarf_Die die, uint64_t base,
                      range_vec *rv)
{
    Dwarf_Off off = 0, real = 0;
    Dwarf_Unsigned uoff = 0, bytes = 0;
    if (OK(dwarf_global_formref(a, &off, &d->err))) uoff = off;
    else if (!OK(dwarf_formudata(a, &uoff, &d->err))) return;
    Dwarf_Ranges *r = NULL;
    Dwarf_Signed n = 0;
    if (!OK(dwarf_get_ranges_b(d->dbg, uoff, die, &real, &r, &n, &bytes, &d->err))) return;
    for (Dwarf_Signed i = 0; i < n; i++) {
        if (r[i].dwr_type == DW_RANGES_END) break;
        if (r[i].dwr_type == DW_RANGES_ADDRESS_SELECTION) base = r[i].dwr_addr2;
        else range_add(rv, base + r[i].dwr_addr1, base + r[i].dwr_addr2);
    }
    dwarf_ranges_dealloc(d->dbg, r, n);
}

static void die_ranges(mt_dwarf *d, Dwarf_Die die, Dwarf_Half version, uint64_t base,
                       range_vec *rv)
{
    Dwarf_Attribute a;
    if (OK(dwarf_attr(die, DW_AT_ranges, &a, &d->err))) {
        if (version >= 5) ranges_v5(d, a, rv);
        else ranges_v4(d, a, die, base, rv);
        dwarf_dealloc(d->dbg, a, DW_DLA_ATTR);
        return;
    }
    Dwarf_Addr lo, hi;
    Dwarf_Half form;
    enum Dwarf_Form_Class cls;
    if (!OK(dwarf_lowpc(die, &lo, &d->err))) return;
    if (!OK(dwarf_highpc_b(die, &hi, &form, &cls, &d->err))) return;
    if (cls == DW_FORM_CLASS_CONSTANT) hi += lo; /* DWARF 4+: high_pc is a length */
    range_add(rv, lo, hi);
}

/* ---- CU index ------------------------------------------------------------------------------ */

static void index_add(mt_dwarf *d, uint64_t lo, uint64_t hi, uint64_t off)
{
    if (hi <= lo) return;
    cu_range *ni = grow(d->index, &d->cap_index, d->nindex + 1, sizeof *ni);
    if (!ni) return;
    d->index = ni;
    d->index[d->nindex++] = (cu_range){lo, hi, off};
}

static int range_cmp(const void *a, const void *b)
{
    const cu_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void index_from_aranges(mt_dwarf *d)
{
    Dwarf_Arange *ar = NULL;
    Dwarf_Signed n = 0;
    if (!OK(dwarf_get_aranges(d->dbg, &ar, &n, &d->err))) return;
    for (Dwarf_Signed i = 0; i < n; i++) {
        Dwarf_Unsigned seg, seg_size, len;
        Dwarf_Addr start;
        Dwarf_Off cu_off;
        if (OK(dwarf_get_arange_info_b(ar[i], &seg, &seg_size, &start, &len, &cu_off, &d->err)))
            index_add(d, start, start + len, cu_off);
        dwarf_dealloc(d->dbg, ar[i], DW_DLA_ARANGE);
    }
    dwarf_dealloc(d->dbg, ar, DW_DLA_LIST);
    d->have_aranges = d->nindex > 0;
    if (d->nindex) qsort(d->index, d->nindex, sizeof *d->index, range_cmp);
}

/* Fallback: read every CU's top DIE (not its children) for its ranges. */
static void index_from_cu_dies(mt_dwarf *d)
{
    d->walked = 1;
    for (;;) {
        Dwarf_Unsigned hdr_len, type_off, next;
        Dwarf_Half version, addr_size, len_size, ext_size, cu_type;
        Dwarf_Off abbrev;
        Dwarf_Sig8 sig;
        if (!OK(dwarf_next_cu_header_d(d->dbg, 1, &hdr_len, &version, &abbrev, &addr_size,
                                       &len_size, &ext_size, &sig, &type_off, &next, &cu_type,
                                       &d->err)))
            break;
        Dwarf_Die cu = NULL;
        if (!OK(dwarf_siblingof_b(d->dbg, NULL, 1, &cu, &d->err))) continue;
        Dwarf_Off off;
        Dwarf_Addr base = 0;
        if (OK(dwarf_dieoffset(cu, &off, &d->err))) {
            if (!OK(dwarf_lowpc(cu, &base, &d->err))) base = 0;
            range_vec rv = {0};
            die_ranges(d, cu, version, base, &rv);
            for (size_t i = 0; i < rv.n; i++) index_add(d, rv.v[i].lo, rv.v[i].hi, off);
            free(rv.v);
        }
        dwarf_dealloc(d->dbg, cu, DW_DLA_DIE);
    }
    if (d->nindex) qsort(d->index, d->nindex, sizeof *d->index, range_cmp);
}

static const cu_range *index_find(const mt_dwarf *d, uint64_t addr)
{
    size_t lo = 0, hi = d->nindex;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->index[mid].lo <= addr) lo = mid + 1;
        else hi = mid;
    }
    /* Ranges rarely overlap, but a CU-level range from the DIE walk may span others: look back. */
    for (size_t i = lo, steps = 0; i > 0 && steps < 16; i--, steps++)
        if (addr < d->index[i - 1].hi) return &d->index[i - 1];
    return NULL;
}

/* ---- one CU: line table and scopes --------------------------------------------------------- */

static int span_cmp(const void *a, const void *b)
{
    const line_span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void load_lines(mt_dwarf *d, cu_info *cu, Dwarf_Die cu_die)
{
    char **sf = NULL;
    Dwarf_Signed nsf = 0;
    if (OK(dwarf_srcfiles(cu_die, &sf, &nsf, &d->err))) {
        cu->files = calloc((size_t)nsf, sizeof *cu->files);
        for (Dwarf_Signed i = 0; i < nsf; i++) {
            if (cu->files) cu->files[i] = strdup(sf[i]);
            dwarf_dealloc(d->dbg, sf[i], DW_DLA_STRING);
        }
        dwarf_dealloc(d->dbg, sf, DW_DLA_LIST);
        if (cu->files) cu->nfiles = (size_t)nsf;
    }
    Dwarf_Unsigned lversion;
    Dwarf_Small tables;
    Dwarf_Line_Context ctx;
    if (!OK(dwarf_srclines_b(cu_die, &lversion, &tables, &ctx, &d->err))) return;
    Dwarf_Line *lines = NULL;
    Dwarf_Signed n = 0;
    if (OK(dwarf_srclines_from_linecontext(ctx, &lines, &n, &d->err)) && n > 0) {
        cu->spans = malloc((size_t)n * sizeof *cu->spans);
        /* Row i covers [addr_i, addr_i+1) unless it ends its sequence. */
        for (Dwarf_Signed i = 0; cu->spans && i + 1 < n; i++) {
            Dwarf_Bool end = 0;
            Dwarf_Addr a0, a1;
            Dwarf_Unsigned line = 0, file = 0;
            if (!OK(dwarf_lineendsequence(lines[i], &end, &d->err)) || end) continue;
            if (!OK(dwarf_lineaddr(lines[i], &a0, &d->err)) ||
                !OK(dwarf_lineaddr(lines[i + 1], &a1, &d->err)) || a1 <= a0)
                continue;
            if (!OK(dwarf_lineno(lines[i], &line, &d->err))) line = 0;
            if (!OK(dwarf_line_srcfileno(lines[i], &file, &d->err))) file = 0;
            cu->spans[cu->nspans++] = (line_span){a0, a1, (uint32_t)line, (uint32_t)file};
        }
        if (cu->nspans) qsort(cu->spans, cu->nspans, sizeof *cu->spans, span_cmp);
    }
    dwarf_srclines_dealloc_b(ctx);
}

static int add_scope(cu_info *cu, int parent, Dwarf_Die die, mt_dwarf *d, range_vec *rv)
{
    scope *ns = grow(cu->scopes, &cu->cap_scopes, cu->nscopes + 1, sizeof *ns);
    if (!ns) return -1;
    cu->scopes = ns;
    pc_range *nr = grow(cu->ranges, &cu->cap_ranges, cu->nranges + rv->n, sizeof *nr);
    if (!nr) return -1;
    cu->ranges = nr;
    memcpy(cu->ranges + cu->nranges, rv->v, rv->n * sizeof *rv->v);
    scope s = {parent, parent < 0 ? 0 : cu->scopes[parent].depth + 1, cu->nranges, rv->n, NULL,
               0, 0};
    cu->nranges += rv->n;
    s.name = die_name(d, die, 0);
    if (!s.name) s.name = strdup("");
    if (parent >= 0) {
        Dwarf_Unsigned v;
        if (attr_udata(d, die, DW_AT_call_file, &v)) s.call_file = (uint32_t)v;
        if (attr_udata(d, die, DW_AT_call_line, &v)) s.call_line = (uint32_t)v;
    }
    cu->scopes[cu->nscopes] = s;
    return (int)cu->nscopes++;
}

static void walk(mt_dwarf *d, cu_info *cu, Dwarf_Die die, int parent, int level)
{
    if (level > MAX_WALK_DEPTH) return;
    Dwarf_Die child = NULL;
    if (!OK(dwarf_child(die, &child, &d->err))) return;
    while (child) {
        Dwarf_Half tag = 0;
        if (OK(dwarf_tag(child, &tag, &d->err))) {
            int is_func = tag == DW_TAG_subprogram;
            int is_inl = tag == DW_TAG_inlined_subroutine && parent >= 0;
            if (is_func || is_inl) {
                range_vec rv = {0};
                die_ranges(d, child, cu->version, cu->base, &rv);
                /* No ranges: a declaration or an abstract instance, never executing code. */
                if (rv.n > 0) {
                    int me = add_scope(cu, is_func ? -1 : parent, child, d, &rv);
                    if (me >= 0) walk(d, cu, child, me, level + 1);
                }
                free(rv.v);
            } else if (tag == DW_TAG_lexical_block || tag == DW_TAG_try_block ||
                       tag == DW_TAG_catch_block) {
                walk(d, cu, child, parent, level + 1);
            } else if (parent < 0 && (tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
                                      tag == DW_TAG_structure_type || tag == DW_TAG_union_type ||
                                      tag == DW_TAG_module)) {
                walk(d, cu, child, -1, level + 1);
            }
        }
        Dwarf_Die next = NULL;
        if (!OK(dwarf_siblingof_b(d->dbg, child, 1, &next, &d->err))) next = NULL;
        dwarf_dealloc(d->dbg, child, DW_DLA_DIE);
        child = next;
    }
}

static cu_info *cu_get(mt_dwarf *d, uint64_t off)
{
    mt_u64map_slot *slot = mt_u64map_upsert(&d->cu_by_off, off);
    if (!slot) return NULL;
    if (slot->b) return slot->a ? &d->cus[slot->a - 1] : NULL;
    slot->b = 1;
    cu_info *nc = grow(d->cus, &d->cap_cus, d->ncus + 1, sizeof *nc);
    if (!nc) return NULL; /* a stays 0: the CU will look "failed" below */
    d->cus = nc;
    memset(&d->cus[d->ncus], 0, sizeof *d->cus);
    d->cus[d->ncus].off = off;
    slot->a = ++d->ncus;
    return &d->cus[d->ncus - 1];
}

static cu_info *cu_load(mt_dwarf *d, uint64_t off)
{
    cu_info *cu = cu_get(d, off);
    if (!cu || cu->state != 0) return cu && cu->state > 0 ? cu : NULL;
    cu->state = -1;
    Dwarf_Die die = NULL;
    if (!OK(dwarf_offdie_b(d->dbg, off, 1, &die, &d->err))) return NULL;
    Dwarf_Half offset_size = 0;
    if (dwarf_get_version_of_die(die, &cu->version, &offset_size) != DW_DLV_OK) cu->version = 4;
    Dwarf_Addr base = 0;
    if (!OK(dwarf_lowpc(die, &base, &d->err))) base = 0;
    cu->base = base;
    load_lines(d, cu, die);
    walk(d, cu, die, -1, 0);
    dwarf_dealloc(d->dbg, die, DW_DLA_DIE);
    d->cus_decoded++;
    cu->state = 1;
    return cu;
}

/* DWARF 5 numbers line-table files from 0, earlier versions from 1; dwarf_srcfiles returns them
 * in order either way. */
static const char *file_name(const cu_info *cu, uint32_t fileno)
{
    size_t i = cu->version >= 5 ? fileno : (size_t)fileno - 1;
    if (cu->version < 5 && fileno == 0) return "";
    return i < cu->nfiles && cu->files[i] ? cu->files[i] : "";
}

static int scope_has(const cu_info *cu, const scope *s, uint64_t addr)
{
    for (size_t i = 0; i < s->nranges; i++) {
        const pc_range *r = &cu->ranges[s->first_range + i];
        if (addr >= r->lo && addr < r->hi) return 1;
    }
    return 0;
}

/* ---- public (to src/symbols) ---------------------------------------------------------------- */

mt_dwarf *mt_dwarf_open(const char *path)
{
    mt_dwarf *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->fd = mt_open_regular(path);
    if (d->fd < 0 ||
        dwarf_init_b(d->fd, DW_DLC_READ, DW_GROUPNUMBER_ANY, NULL, NULL, &d->dbg, &d->err) !=
            DW_DLV_OK) {
        if (d->err) dwarf_dealloc(NULL, d->err, DW_DLA_ERROR);
        if (d->fd >= 0) close(d->fd);
        free(d);
        return NULL;
    }
    d->cu_by_off = (mt_u64map){0};
    index_from_aranges(d);
    if (!d->have_aranges) index_from_cu_dies(d);
    return d;
}

int mt_dwarf_lookup(mt_dwarf *d, uint64_t addr, mt_sym_frame *frames, int max)
{
    if (max <= 0) return 0;
    const cu_range *cr = index_find(d, addr);
    if (!cr && !d->walked) { /* aranges may omit CUs (asm, other compilers): walk once */
        index_from_cu_dies(d);
        cr = index_find(d, addr);
    }
    if (!cr) return 0;
    cu_info *cu = cu_load(d, cr->cu_off);
    if (!cu) return 0;

    const line_span *span = NULL;
    size_t lo = 0, hi = cu->nspans;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cu->spans[mid].lo <= addr) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0 && addr < cu->spans[lo - 1].hi) span = &cu->spans[lo - 1];

    int best = -1; /* the innermost scope holding addr */
    for (size_t i = 0; i < cu->nscopes; i++)
        if ((best < 0 || cu->scopes[i].depth > cu->scopes[best].depth) &&
            scope_has(cu, &cu->scopes[i], addr))
            best = (int)i;
    if (best < 0) {
        if (!span) return 0;
        frames[0] = (mt_sym_frame){"", file_name(cu, span->file), span->line};
        return 1;
    }
    int chain[MT_SYM_MAX_INLINE * 4], n = 0; /* innermost first, then reversed below */
    for (int s = best; s >= 0 && n < (int)(sizeof chain / sizeof chain[0]); s = cu->scopes[s].parent)
        chain[n++] = s;
    if (n > max) { /* keep the real function and the innermost max-1 callees */
        chain[max - 1] = chain[n - 1];
        n = max;
    }
    for (int i = 0; i < n; i++) {
        const scope *s = &cu->scopes[chain[n - 1 - i]];
        frames[i].function = s->name;
        if (i + 1 < n) { /* this function calls the next, inlined one: name that call site */
            const scope *callee = &cu->scopes[chain[n - 2 - i]];
            frames[i].file = file_name(cu, callee->call_file);
            frames[i].line = callee->call_line;
        } else {
            frames[i].file = span ? file_name(cu, span->file) : "";
            frames[i].line = span ? span->line : 0;
        }
    }
    return n;
}

uint64_t mt_dwarf_cus_decoded(const mt_dwarf *d)
{
    return d->cus_decoded;
}

void mt_dwarf_close(mt_dwarf *d)
{
    if (!d) return;
    for (size_t i = 0; i < d->ncus; i++) {
        cu_info *cu = &d->cus[i];
        for (size_t j = 0; j < cu->nfiles; j++) free(cu->files[j]);
        for (size_t j = 0; j < cu->nscopes; j++) free(cu->scopes[j].name);
        free(cu->files);
        free(cu->scopes);
        free(cu->ranges);
        free(cu->spans);
    }
    free(d->cus);
    free(d->index);
    mt_u64map_destroy(&d->cu_by_off);
    dwarf_finish(d->dbg, &d->err);
    close(d->fd);
    free(d);
}
