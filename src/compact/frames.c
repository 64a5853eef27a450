/* Frame naming: the stack trie, loaded modules, symbols and Python code objects of a trace, turned
 * into the names a person reads.
 *
 *   native, symbolized     report: "function (file:line)"   folded: "function"
 *                          (one ip with inlined callees expands to several frames, outer first)
 *   native, no symbol      "libfoo.so+0x1a2b" (offset = ip - load bias, what addr2line wants)
 *   native, no module      "0x7f12345678"
 *   Python                 report: "/full/path/file.py:LINE in qualname"
 *                          text:   "short/file.py:LINE in qualname" (see short_path)
 *                          folded: "file.py:qualname:line" (unchanged: flame graph tools key on it)
 *   pseudo                 mt_pseudo_name(ip), e.g. "[driver internal]"
 * Names never contain ';' or newlines (folded output and text reports rely on it).
 *
 * Records may come in any order (symbols are appended to a trace after recording), so lookups
 * are built lazily at the first naming call after new records arrived, and names are cached per
 * node once built.
 *
 * A trace is untrusted input, so memory and time stay proportional to its records: nodes live in
 * a vector found through a hash of their id (a single node with id 2^26 - 1 once made this
 * allocate 3 GiB), a node whose parent id is not below its own id is cut from its parent (the
 * recorder hands out ids in order, so a parent always has the smaller id; the rule makes parent
 * cycles impossible), and a path is cut after MAX_DEPTH frames (the recorder writes at most
 * MT_MAX_FRAMES = 128). Whether a node's own names name an owner is decided once per node.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#define MAX_DEPTH 256 /* frames kept of one path, innermost first: twice what the recorder writes */
#define NO_NODE UINT32_MAX

typedef struct node {
    uint32_t id, parent; /* as written */
    uint32_t parent_ix;  /* index of the parent; NO_NODE = none (root, unknown, or not below id);
                            resolved by link_nodes */
    uint8_t kind;
    int8_t owner_rule; /* -2 = not decided yet, -1 = its names name no owner, else a rule */
    uint64_t ip;
    uint8_t is_cuda;                     /* native frame inside a CUDA-stack module */
    uint32_t name_first[MT_NAME_STYLES_], name_count[MT_NAME_STYLES_]; /* cached names in f->names,
                                                                  per style; count 0 = not yet */
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
    node *nodes; /* in the order first seen */
    size_t n_nodes, cap_nodes;
    mt_u64map node_index; /* id -> a: index in nodes */
    int nodes_linked;     /* parent_ix is valid for every node */
    uint64_t bad_nodes;   /* nodes whose parent id was not below their own */
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
    char *base_dir;      /* MT_NAME_TEXT shows Python files under it relative to it; NULL = none */
    mt_u64map owner_index; /* leaf -> a: owner name (a pointer to a static or an f->names string,
                              which live as long as f), b: is the caching allocator */
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
    mt_u64map_destroy(&f->owner_index);
    free(f->base_dir);
    mt_u64map_destroy(&f->sym_index);
    mt_u64map_destroy(&f->code_index);
    mt_u64map_destroy(&f->node_index);
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
        if (n->id == 0) return 1;
        mt_u64map_slot *s = mt_u64map_upsert(&f->node_index, n->id);
        if (!s) return -1;
        if (!s->b) { /* new id (b marks the slot used, a is the index) */
            if (grow((void **)&f->nodes, &f->cap_nodes, f->n_nodes + 1, sizeof *f->nodes) < 0)
                return -1;
            s->a = f->n_nodes++;
            s->b = 1;
        } else { /* an id written twice (corrupt input): the last one wins */
            f->bad_nodes += f->nodes[s->a].parent >= f->nodes[s->a].id;
        }
        f->nodes[s->a] = (node){.id = n->id, .parent = n->parent, .parent_ix = NO_NODE,
                                .kind = n->frame_kind, .owner_rule = -2, .ip = n->ip};
        if (n->parent >= n->id) f->bad_nodes++;
        f->nodes_linked = 0;
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
    for (size_t i = 0; i < f->n_nodes; i++) {
        memset(f->nodes[i].name_count, 0, sizeof f->nodes[i].name_count);
        f->nodes[i].owner_rule = -2;
    }
    mt_u64map_clear(&f->owner_index); /* owners are named from frame names: redo them too */
}

/* Index of node id, NO_NODE when the trace has none. */
static uint32_t index_of(const mt_frames *f, uint32_t id)
{
    const mt_u64map_slot *s = id ? mt_u64map_find(&f->node_index, id) : NULL;
    return s ? (uint32_t)s->a : NO_NODE;
}

/* Resolves every node's parent to an index once, so walks need no hashing. */
static void link_nodes(mt_frames *f)
{
    if (f->nodes_linked) return;
    for (size_t i = 0; i < f->n_nodes; i++) {
        node *n = &f->nodes[i];
        n->parent_ix = n->parent < n->id ? index_of(f, n->parent) : NO_NODE;
    }
    f->nodes_linked = 1;
}

static int prepare(mt_frames *f)
{
    link_nodes(f);
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

/* A Python file name that fits a text report: below a site-packages/dist-packages directory the
 * package path ("torch/nn/modules/linear.py"); under base_dir the path relative to it; else the
 * last two components ("proj/cifar.py"). Returns a pointer into path. */
static const char *short_path(const mt_frames *f, const char *path)
{
    static const char *const roots[] = {"/site-packages/", "/dist-packages/"};
    for (size_t i = 0; i < sizeof roots / sizeof *roots; i++) {
        const char *p = strstr(path, roots[i]);
        if (p) return p + strlen(roots[i]);
    }
    if (f->base_dir && f->base_dir[0]) {
        size_t n = strlen(f->base_dir);
        while (n > 1 && f->base_dir[n - 1] == '/') n--;
        if (strncmp(path, f->base_dir, n) == 0 && path[n] == '/') return path + n + 1;
    }
    const char *last = strrchr(path, '/');
    if (!last) return path;
    const char *prev = last;
    while (prev > path && prev[-1] != '/') prev--;
    return prev > path ? prev : path + (path[0] == '/');
}

/* Builds the names of node ix (pushes them onto f->names) and caches where they are. */
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
            if (style == MT_NAME_FOLDED)
                rc = push_name(f, fmt("%s:%s:%u", c->filename, c->qualname, line));
            else
                rc = push_name(f, fmt("%s:%u in %s",
                                      style == MT_NAME_TEXT ? short_path(f, c->filename)
                                                            : c->filename,
                                      line, c->qualname));
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
        const module *m = module_of(f, n->ip);
        n->is_cuda = m && m->is_cuda;
        if (!named && rc == 0) {
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

/* Node indexes of the path to leaf (an index), leaf first, in f->scratch. Returns the count. */
static size_t collect(mt_frames *f, uint32_t leaf)
{
    link_nodes(f);
    size_t n = 0;
    for (uint32_t ix = leaf; ix != NO_NODE && n < MAX_DEPTH; ix = f->nodes[ix].parent_ix) {
        if (grow((void **)&f->scratch, &f->cap_scratch, n + 1, sizeof *f->scratch) < 0) break;
        f->scratch[n++] = ix;
    }
    return n;
}

static int keep_frame(const node *n, mt_frame_filter filter)
{
    switch (filter) {
    case MT_FRAMES_PYTHON: return n->kind != MT_FRAME_NATIVE;
    case MT_FRAMES_NATIVE: return n->kind != MT_FRAME_PYTHON;
    default: return 1;
    }
}

int mt_frames_pycode(mt_frames *f, uint32_t code, const char **filename, const char **qualname);

static int is_library_python(const char *path)
{
    return strstr(path, "/site-packages/") || strstr(path, "/dist-packages/") ||
           strstr(path, "/lib/python");
}

static uint8_t frame_flags(mt_frames *f, const node *n)
{
    if (n->kind == MT_FRAME_PSEUDO) return MT_FF_PSEUDO;
    if (n->kind == MT_FRAME_NATIVE) return MT_FF_NATIVE | (n->is_cuda ? MT_FF_CUDA : 0);
    const char *file = NULL;
    mt_frames_pycode(f, (uint32_t)(n->ip >> 32), &file, NULL);
    return MT_FF_PYTHON | (file && is_library_python(file) ? MT_FF_PYLIB : 0);
}

size_t mt_frames_path_ex(mt_frames *f, uint32_t leaf, mt_name_style style, mt_frame_filter filter,
                         const char **out, uint8_t *flags, size_t cap)
{
    if (leaf == 0) {
        if (cap) out[0] = mt_pseudo_name(MT_PSEUDO_NO_STACK);
        if (cap && flags) flags[0] = MT_FF_PSEUDO;
        return 1;
    }
    uint32_t leaf_ix = index_of(f, leaf);
    if (prepare(f) < 0 || leaf_ix == NO_NODE) {
        if (cap) out[0] = "[unknown stack]";
        if (cap && flags) flags[0] = MT_FF_PSEUDO;
        return 1;
    }
    size_t depth = collect(f, leaf_ix), total = 0;
    for (size_t k = depth; k-- > 0;) {
        uint32_t id = f->scratch[k];
        if (!keep_frame(&f->nodes[id], filter)) continue;
        if (!f->nodes[id].name_count[style] && build_node_names(f, id, style) < 0) continue;
        const node *n = &f->nodes[id];
        for (uint32_t i = 0; i < n->name_count[style]; i++, total++) {
            if (total >= cap) continue;
            out[total] = f->names[n->name_first[style] + i];
            if (flags) flags[total] = frame_flags(f, n);
        }
    }
    return total;
}

size_t mt_frames_path(mt_frames *f, uint32_t leaf, mt_name_style style, const char **out,
                      size_t cap)
{
    return mt_frames_path_ex(f, leaf, style, MT_FRAMES_ALL, out, NULL, cap);
}

void mt_frames_set_base_dir(mt_frames *f, const char *dir)
{
    free(f->base_dir);
    f->base_dir = dir ? strdup(dir) : NULL;
    for (size_t i = 0; i < f->n_nodes; i++) f->nodes[i].name_count[MT_NAME_TEXT] = 0;
}

int mt_frames_pycode(mt_frames *f, uint32_t code, const char **filename, const char **qualname)
{
    const mt_u64map_slot *s = mt_u64map_find(&f->code_index, code);
    if (!s) return 0;
    if (filename) *filename = f->codes[s->a].filename;
    if (qualname) *qualname = f->codes[s->a].qualname;
    return 1;
}

int mt_python_file_matches(const char *recorded, const char *wanted)
{
    if (!recorded || !wanted || !wanted[0]) return 0;
    if (strcmp(recorded, wanted) == 0) return 1;
    while (wanted[0] == '.' && wanted[1] == '/') wanted += 2; /* "./cifar.py" */
    size_t r = strlen(recorded), w = strlen(wanted);
    /* one a suffix of the other at a '/' boundary: "cifar.py" ~ "/home/u/cifar.py" */
    if (r > w && strcmp(recorded + r - w, wanted) == 0 && recorded[r - w - 1] == '/') return 1;
    if (w > r && strcmp(wanted + w - r, recorded) == 0 && wanted[w - r - 1] == '/') return 1;
    const char *rb = strrchr(recorded, '/'), *wb = strrchr(wanted, '/');
    return strcmp(rb ? rb + 1 : recorded, wb ? wb + 1 : wanted) == 0;
}

int mt_frames_python_line(mt_frames *f, uint32_t leaf, const char *file, uint32_t *code,
                          uint32_t *line)
{
    uint32_t leaf_ix = index_of(f, leaf);
    if (leaf_ix == NO_NODE) return 0;
    size_t depth = collect(f, leaf_ix);
    for (size_t k = 0; k < depth; k++) { /* innermost first */
        const node *n = &f->nodes[f->scratch[k]];
        if (n->kind != MT_FRAME_PYTHON) continue;
        uint32_t c = (uint32_t)(n->ip >> 32);
        if (file) {
            const char *name = NULL;
            if (!mt_frames_pycode(f, c, &name, NULL) || !mt_python_file_matches(name, file))
                continue;
        }
        *code = c;
        *line = (uint32_t)n->ip;
        return 1;
    }
    return 0;
}

const char *mt_frames_first_user(mt_frames *f, uint32_t leaf)
{
    if (leaf == 0) return mt_pseudo_name(MT_PSEUDO_NO_STACK);
    uint32_t leaf_ix = index_of(f, leaf);
    if (prepare(f) < 0 || leaf_ix == NO_NODE) return "[unknown stack]";
    size_t depth = collect(f, leaf_ix);
    uint32_t pick = NO_NODE;
    for (size_t k = 0; k < depth && pick == NO_NODE; k++) /* innermost Python frame */
        if (f->nodes[f->scratch[k]].kind == MT_FRAME_PYTHON) pick = f->scratch[k];
    for (size_t k = 0; k < depth && pick == NO_NODE; k++) { /* innermost native outside CUDA */
        const node *n = &f->nodes[f->scratch[k]];
        if (n->kind != MT_FRAME_NATIVE) continue;
        const module *m = module_of(f, n->ip);
        if (!m || !m->is_cuda) pick = f->scratch[k];
    }
    if (pick == NO_NODE && depth) pick = f->scratch[0];
    if (pick == NO_NODE) return "[unknown stack]";
    const node *n = &f->nodes[pick];
    if (!n->name_count[MT_NAME_REPORT] && build_node_names(f, pick, MT_NAME_REPORT) < 0)
        return "[unknown stack]";
    n = &f->nodes[pick];
    /* The innermost of an inlined expansion is the code that actually made the call. */
    return f->names[n->name_first[MT_NAME_REPORT] + n->name_count[MT_NAME_REPORT] - 1];
}

/* Who made an allocation, by the names of its native frames, innermost first: the first frame that
 * names the PyTorch caching allocator or a library that allocates on its own wins. Python frames
 * are not looked at (a script called "nccl_test.py" is not NCCL). */
static const struct {
    const char *needle, *owner;
} owner_rules[] = {
    {"CUDACachingAllocator", MT_OWNER_CACHING_ALLOCATOR},
    {"cublas", "cuBLAS"}, /* cublasCreate_v2, cublasLt..., libcublas*.so+0x... */
    {"cudnn", "cuDNN"},
    {"nccl", "NCCL"},
};

/* The first owner rule the names of native node ix match (innermost name first), -1 for none;
 * decided once per node. */
static int node_owner_rule(mt_frames *f, uint32_t ix)
{
    if (f->nodes[ix].owner_rule != -2) return f->nodes[ix].owner_rule;
    if (f->nodes[ix].kind != MT_FRAME_NATIVE) return f->nodes[ix].owner_rule = -1;
    if (!f->nodes[ix].name_count[MT_NAME_FOLDED] && build_node_names(f, ix, MT_NAME_FOLDED) < 0)
        return -1; /* out of memory: undecided, asked again next time */
    const node *n = &f->nodes[ix];
    int rule = -1;
    for (uint32_t i = 0; i < n->name_count[MT_NAME_FOLDED] && rule < 0; i++) {
        const char *name = f->names[n->name_first[MT_NAME_FOLDED] + i];
        for (size_t r = 0; r < sizeof owner_rules / sizeof *owner_rules && rule < 0; r++)
            if (strstr(name, owner_rules[r].needle)) rule = (int)r;
    }
    return f->nodes[ix].owner_rule = (int8_t)rule;
}

const char *mt_frames_owner(mt_frames *f, uint32_t leaf, int *is_allocator)
{
    int ready = prepare(f) == 0; /* first: new symbols clear the cache */
    mt_u64map_slot *c = mt_u64map_find(&f->owner_index, leaf);
    if (c && c->a) {
        if (is_allocator) *is_allocator = (int)c->b;
        return (const char *)(uintptr_t)c->a;
    }
    const char *owner = NULL;
    int alloc = 0;
    uint32_t leaf_ix = index_of(f, leaf);
    if (ready && leaf_ix != NO_NODE) {
        size_t depth = collect(f, leaf_ix);
        for (size_t k = 0; k < depth && !owner; k++) {
            int rule = node_owner_rule(f, f->scratch[k]);
            if (rule >= 0) {
                owner = owner_rules[rule].owner;
                alloc = rule == 0;
            }
        }
    }
    if (!owner) owner = mt_frames_first_user(f, leaf); /* collect() is reused: call it last */
    c = mt_u64map_upsert(&f->owner_index, leaf);
    if (c) { /* no cache when out of memory: the answer is still right */
        c->a = (uint64_t)(uintptr_t)owner;
        c->b = (uint64_t)alloc;
    }
    if (is_allocator) *is_allocator = alloc;
    return owner;
}

uint64_t mt_frames_bad_nodes(const mt_frames *f)
{
    return f->bad_nodes;
}
