/* Frame naming: the stack trie, loaded modules, symbols and Python code objects of a trace, turned
 * into the names a person reads.
 *
 *   native, symbolized     report: "function (file:line)"   folded: "function"
 *                          (one ip with inlined callees expands to several frames, outer first)
 *   native, no symbol      "libfoo.so+0x1a2b" (offset = ip - load bias, what addr2line wants)
 *   native, no module      "0x7f12345678"
 *   Python                 "file.py:qualname:line"
 *   pseudo                 mt_pseudo_name(ip), e.g. "[driver internal]"
 * Names never contain ';' or newlines (folded output and text reports rely on it).
 *
 * Records may come in any order (symbols are appended to a trace after recording), so lookups
 * are built lazily at the first naming call after new records arrived, and names are cached per
 * node once built.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_NODE_ID (1u << 26) /* ids beyond this are treated as unknown (corrupt input) */
#define MAX_DEPTH 4096         /* a parent chain longer than this is a cycle (corrupt input) */

typedef struct node {
    uint32_t parent;
    uint8_t kind, present;
    uint64_t ip;
    uint32_t name_first[2], name_count[2]; /* cached names in f->names, per style; count 0 = not yet */
} node;

typedef struct module {
    uint32_t id;
    uint64_t bias, start, end;
    char *base; /* basename of path */
    int is_cuda;
} module;

typedef struct symbol {
    uint64_t ip;
    uint32_t depth, line;
    char *function, *file;
} symbol;

typedef struct pycode {
    char *filename, *qualname;
} pycode;

struct mt_frames {
    node *nodes;
    size_t n_nodes; /* array size (max id + 1) */
    module *mods;
    size_t n_mods, cap_mods;
    int mods_sorted;
    symbol *syms;
    size_t n_syms, cap_syms;
    int syms_sorted;
    mt_u64map sym_index; /* ip -> a: first index in syms, b: count */
    pycode *codes;
    size_t n_codes, cap_codes;
    mt_u64map code_index; /* code id -> a: index in codes */
    char **names;         /* every name built, owned */
    size_t n_names, cap_names;
    uint32_t *scratch; /* node ids of one path */
    size_t cap_scratch;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    void *np = realloc(*p, ncap * elem);
    if (!np) return -1;
    *p = np;
    *cap = ncap;
    return 0;
}

static char *dup(const char *s) { return strdup(s ? s : ""); }

mt_frames *mt_frames_new(void) { return calloc(1, sizeof(mt_frames)); }

void mt_frames_free(mt_frames *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n_mods; i++) free(f->mods[i].base);
    for (size_t i = 0; i < f->n_syms; i++) {
        free(f->syms[i].function);
        free(f->syms[i].file);
    }
    for (size_t i = 0; i < f->n_codes; i++) {
        free(f->codes[i].filename);
        free(f->codes[i].qualname);
    }
    for (size_t i = 0; i < f->n_names; i++) free(f->names[i]);
    mt_u64map_destroy(&f->sym_index);
    mt_u64map_destroy(&f->code_index);
    free(f->nodes);
    free(f->mods);
    free(f->syms);
    free(f->codes);
    free(f->names);
    free(f->scratch);
    free(f);
}

static int is_cuda_module(const char *base)
{
    static const char *const prefixes[] = {"libcuda", "libcupti", "libmemtrace_inject"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(base, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

int mt_frames_add(mt_frames *f, const mt_record *r)
{
    switch (r->type) {
    case MT_REC_STACK_NODE: {
        const mt_stack_node *n = &r->u.node;
        if (n->id == 0 || n->id >= MAX_NODE_ID) return 1;
        if (n->id >= f->n_nodes) {
            size_t ncap = f->n_nodes ? f->n_nodes : 1024;
            while (ncap <= n->id) ncap *= 2;
            node *nn = realloc(f->nodes, ncap * sizeof *nn);
            if (!nn) return -1;
            memset(nn + f->n_nodes, 0, (ncap - f->n_nodes) * sizeof *nn);
            f->nodes = nn;
            f->n_nodes = ncap;
        }
        f->nodes[n->id] = (node){.parent = n->parent, .kind = n->frame_kind, .present = 1,
                                 .ip = n->ip};
        return 1;
    }
    case MT_REC_MODULE: {
        if (grow((void **)&f->mods, &f->cap_mods, f->n_mods + 1, sizeof *f->mods) < 0) return -1;
        const char *path = r->u.module.path ? r->u.module.path : "";
        const char *slash = strrchr(path, '/');
        module *m = &f->mods[f->n_mods];
        *m = (module){.id = r->u.module.id, .bias = r->u.module.bias,
                      .start = r->u.module.start, .end = r->u.module.end,
                      .base = dup(slash ? slash + 1 : path)};
        if (!m->base) return -1;
        m->is_cuda = is_cuda_module(m->base);
        f->n_mods++;
        f->mods_sorted = 0;
        return 1;
    }
    case MT_REC_SYMBOL: {
        if (grow((void **)&f->syms, &f->cap_syms, f->n_syms + 1, sizeof *f->syms) < 0) return -1;
        symbol *s = &f->syms[f->n_syms];
        *s = (symbol){.ip = r->u.symbol.ip, .depth = r->u.symbol.depth,
                      .line = r->u.symbol.line, .function = dup(r->u.symbol.function),
                      .file = dup(r->u.symbol.file)};
        if (!s->function || !s->file) return -1;
        f->n_syms++;
        f->syms_sorted = 0;
        return 1;
    }
    case MT_REC_PYCODE: {
        if (grow((void **)&f->codes, &f->cap_codes, f->n_codes + 1, sizeof *f->codes) < 0)
            return -1;
        pycode *c = &f->codes[f->n_codes];
        *c = (pycode){.filename = dup(r->u.pycode.filename), .qualname = dup(r->u.pycode.qualname)};
        mt_u64map_slot *s = mt_u64map_upsert(&f->code_index, r->u.pycode.id);
        if (!c->filename || !c->qualname || !s) return -1;
        s->a = f->n_codes++;
        return 1;
    }
    default:
        return 0;
    }
}

/* ---- lazy indexes ------------------------------------------------------------------------------ */

static int cmp_mod(const void *pa, const void *pb)
{
    const module *a = pa, *b = pb;
    return a->start < b->start ? -1 : a->start > b->start;
}

static int cmp_sym(const void *pa, const void *pb)
{
    const symbol *a = pa, *b = pb;
    if (a->ip != b->ip) return a->ip < b->ip ? -1 : 1;
    return a->depth < b->depth ? -1 : a->depth > b->depth;
}

static void forget_names(mt_frames *f)
{
    for (size_t i = 0; i < f->n_nodes; i++) f->nodes[i].name_count[0] = f->nodes[i].name_count[1] = 0;
}

static int prepare(mt_frames *f)
{
    if (!f->mods_sorted) {
        if (f->n_mods) qsort(f->mods, f->n_mods, sizeof *f->mods, cmp_mod);
        f->mods_sorted = 1;
        forget_names(f);
    }
    if (!f->syms_sorted) {
        if (f->n_syms) qsort(f->syms, f->n_syms, sizeof *f->syms, cmp_sym);
        mt_u64map_clear(&f->sym_index);
        for (size_t i = 0; i < f->n_syms;) {
            size_t j = i;
            while (j < f->n_syms && f->syms[j].ip == f->syms[i].ip) j++;
            mt_u64map_slot *s = mt_u64map_upsert(&f->sym_index, f->syms[i].ip);
            if (!s) return -1;
            s->a = i;
            s->b = j - i;
            i = j;
        }
        f->syms_sorted = 1;
        forget_names(f);
    }
    return 0;
}

static const module *module_of(const mt_frames *f, uint64_t ip)
{
    size_t lo = 0, hi = f->n_mods;
    while (lo < hi) { /* last module with start <= ip */
        size_t mid = (lo + hi) / 2;
        if (f->mods[mid].start <= ip) lo = mid + 1;
        else hi = mid;
    }
    /* Modules can be reloaded at other addresses; scan back a little for one containing ip. */
    for (size_t i = lo; i-- > 0 && lo - i <= 8;)
        if (ip >= f->mods[i].start && ip < f->mods[i].end) return &f->mods[i];
    return NULL;
}

/* ---- names ------------------------------------------------------------------------------------- */

static char *clean(char *s)
{
    for (char *p = s; *p; p++)
        if (*p == ';') *p = ',';
        else if (*p == '\n' || *p == '\r') *p = ' ';
    return s;
}

static int push_name(mt_frames *f, char *name)
{
    if (!name) return -1;
    if (grow((void **)&f->names, &f->cap_names, f->n_names + 1, sizeof *f->names) < 0) {
        free(name);
        return -1;
    }
    f->names[f->n_names++] = clean(name);
    return 0;
}

static char *fmt(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    char *s = NULL;
    if (vasprintf(&s, format, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static char *symbol_name(const symbol *s, mt_name_style style)
{
    if (style == MT_NAME_FOLDED || !s->file[0]) return dup(s->function);
    const char *slash = strrchr(s->file, '/');
    const char *file = slash ? slash + 1 : s->file; /* basenames keep the report narrow */
    if (s->line) return fmt("%s (%s:%u)", s->function, file, s->line);
    return fmt("%s (%s)", s->function, file);
}

/* Builds the names of node id (pushes them onto f->names) and caches where they are. */
static int build_node_names(mt_frames *f, uint32_t id, mt_name_style style)
{
    node *n = &f->nodes[id];
    uint32_t first = (uint32_t)f->n_names;
    int rc = 0;
    if (n->kind == MT_FRAME_PSEUDO) {
        rc = push_name(f, dup(mt_pseudo_name(n->ip)));
    } else if (n->kind == MT_FRAME_PYTHON) {
        uint32_t code = (uint32_t)(n->ip >> 32), line = (uint32_t)n->ip;
        const mt_u64map_slot *s = mt_u64map_find(&f->code_index, code);
        if (s) {
            const pycode *c = &f->codes[s->a];
            rc = push_name(f, fmt("%s:%s:%u", c->filename, c->qualname, line));
        } else {
            rc = push_name(f, fmt("[python code %u]:%u", code, line));
        }
    } else {
        const mt_u64map_slot *s = mt_u64map_find(&f->sym_index, n->ip);
        size_t named = 0;
        for (size_t i = 0; s && i < s->b && rc == 0; i++) {
            const symbol *sym = &f->syms[s->a + i];
            if (!sym->function[0]) continue;
            rc = push_name(f, symbol_name(sym, style));
            named++;
        }
        if (!named && rc == 0) {
            const module *m = module_of(f, n->ip);
            if (m) rc = push_name(f, fmt("%s+0x%llx", m->base, (unsigned long long)(n->ip - m->bias)));
            else rc = push_name(f, fmt("0x%llx", (unsigned long long)n->ip));
        }
    }
    if (rc < 0) return -1;
    n = &f->nodes[id];
    n->name_first[style] = first;
    n->name_count[style] = (uint32_t)(f->n_names - first);
    return 0;
}

static int node_known(const mt_frames *f, uint32_t id)
{
    return id < f->n_nodes && f->nodes[id].present;
}

/* Node ids of the path to leaf, leaf first, in f->scratch. Returns the count. */
static size_t collect(mt_frames *f, uint32_t leaf)
{
    size_t n = 0;
    for (uint32_t id = leaf; id != 0 && node_known(f, id) && n < MAX_DEPTH; id = f->nodes[id].parent) {
        if (grow((void **)&f->scratch, &f->cap_scratch, n + 1, sizeof *f->scratch) < 0) break;
        f->scratch[n++] = id;
    }
    return n;
}

size_t mt_frames_path(mt_frames *f, uint32_t leaf, mt_name_style style, const char **out,
                      size_t cap)
{
    if (leaf == 0) {
        if (cap) out[0] = mt_pseudo_name(MT_PSEUDO_NO_STACK);
        return 1;
    }
    if (prepare(f) < 0 || !node_known(f, leaf)) {
        if (cap) out[0] = "[unknown stack]";
        return 1;
    }
    size_t depth = collect(f, leaf), total = 0;
    for (size_t k = depth; k-- > 0;) {
        uint32_t id = f->scratch[k];
        if (!f->nodes[id].name_count[style] && build_node_names(f, id, style) < 0) continue;
        const node *n = &f->nodes[id];
        for (uint32_t i = 0; i < n->name_count[style]; i++, total++)
            if (total < cap) out[total] = f->names[n->name_first[style] + i];
    }
    return total;
}

const char *mt_frames_first_user(mt_frames *f, uint32_t leaf)
{
    if (leaf == 0) return mt_pseudo_name(MT_PSEUDO_NO_STACK);
    if (prepare(f) < 0 || !node_known(f, leaf)) return "[unknown stack]";
    size_t depth = collect(f, leaf);
    uint32_t pick = 0;
    for (size_t k = 0; k < depth && !pick; k++) /* innermost Python frame */
        if (f->nodes[f->scratch[k]].kind == MT_FRAME_PYTHON) pick = f->scratch[k];
    for (size_t k = 0; k < depth && !pick; k++) { /* innermost native frame outside CUDA */
        const node *n = &f->nodes[f->scratch[k]];
        if (n->kind != MT_FRAME_NATIVE) continue;
        const module *m = module_of(f, n->ip);
        if (!m || !m->is_cuda) pick = f->scratch[k];
    }
    if (!pick && depth) pick = f->scratch[0];
    if (!pick) return "[unknown stack]";
    const node *n = &f->nodes[pick];
    if (!n->name_count[MT_NAME_REPORT] && build_node_names(f, pick, MT_NAME_REPORT) < 0)
        return "[unknown stack]";
    n = &f->nodes[pick];
    /* The innermost of an inlined expansion is the code that actually made the call. */
    return f->names[n->name_first[MT_NAME_REPORT] + n->name_count[MT_NAME_REPORT] - 1];
}
