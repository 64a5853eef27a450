/* Frame naming: the stack trie, loaded modules, symbols and Python code objects of a trace, turned
 * into the names a person reads. One name per frame and style serves every output (text and JSON
 * reports, folded stacks, Chrome and speedscope files):
 *
 *   native, symbolized     "function (file:line)", "function" without a file; short style:
 *                          the function without return type, template arguments and parameters
 *                          (mt_cxx_short_name); one ip with inlined callees expands to several
 *                          frames, outer first
 *   native, no symbol      "libfoo.so+0x1a2b" (offset = ip - load bias, what addr2line wants)
 *   native, no module      "0x7f12345678"
 *   Python                 "qualname (path:LINE)": short style "Module._call_impl
 *                          (torch/nn/modules/module.py:1790)" (see short_path), long style with
 *                          the path as recorded
 *   pseudo                 mt_pseudo_name(ip), e.g. "[driver internal]"
 * Names never contain ';' or newlines (folded output and text reports rely on it). What a frame
 * means to a user (ATen operator, autograd node, allocating library) is frame_names.c's job.
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
 * MT_MAX_FRAMES = 128).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "grow.h"
#include "internal.h"

#define MAX_DEPTH 256 /* frames kept of one path, innermost first: twice what the recorder writes */
#define NO_NODE UINT32_MAX

typedef struct node {
    uint32_t id, parent; /* as written */
    uint32_t parent_ix;  /* index of the parent; NO_NODE = none (root, unknown, or not below id);
                            resolved by link_nodes or parent_of */
    uint8_t kind;
    uint64_t ip;
    uint8_t is_cuda;                     /* native frame inside a CUDA-stack module */
    uint8_t is_vendor;                   /* native frame inside an NVIDIA library (cuBLAS...) */
    uint8_t is_system;                   /* native frame inside the C/C++ runtime (libc...) */
    uint64_t name_hash[MT_NAME_STYLES_]; /* of its kind and names per style, 0 until asked */
    const char *mod_base; /* a native frame's names were built with this module (its base name, */
    uint64_t mod_bias;    /* owned by the module: never moves), or none (NULL) */
    uint32_t name_first[MT_NAME_STYLES_], name_count[MT_NAME_STYLES_]; /* cached names in f->names,
                                                                  per style; count 0 = not yet */
} node;

typedef struct module {
    uint32_t id;
    uint64_t bias, start, end;
    char *base; /* basename of path */
    int is_cuda, is_vendor, is_system;
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
    size_t linked;        /* nodes[0, linked) had their parent looked up (link_nodes) */
    uint64_t work;        /* nodes, modules and symbols visited again after new records
                             (mt_frames_work) */
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
    uint32_t *py_unnamed; /* nodes whose name was built before their code object came: named
                             again once one comes (Python code objects may come late) */
    size_t n_py_unnamed, cap_py_unnamed;
    char **names;         /* every name built, owned */
    size_t n_names, cap_names;
    uint32_t *scratch; /* node ids of one path */
    size_t cap_scratch;
    char *base_dir;      /* MT_NAME_SHORT shows Python files under it relative to it; NULL = none */
    mt_view_cache *view;   /* roles of names, user-view names, owners per leaf (frame_names.c) */
};

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
    mt_view_cache_free(f->view);
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
    free(f->py_unnamed);
    free(f);
}

static int has_prefix(const char *base, const char *const *prefixes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strncmp(base, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

/* The CUDA stack itself: driver, runtime, CUPTI, the recorder (MT_FF_CUDA). */
static int is_cuda_module(const char *base)
{
    static const char *const prefixes[] = {"libcuda", "libcupti", "libmemtrace_inject"};
    return has_prefix(base, prefixes, sizeof prefixes / sizeof *prefixes);
}

/* NVIDIA's libraries that allocate on their own behalf (MT_FF_LIB): never a user's frame. */
static int is_vendor_module(const char *base)
{
    static const char *const prefixes[] = {"libcublas", "libcudnn", "libnccl", "libcufft",
                                           "libcurand", "libcusparse", "libcusolver", "libnvrtc",
                                           "libnvJitLink", "libnvidia-"};
    return has_prefix(base, prefixes, sizeof prefixes / sizeof *prefixes);
}

/* The C and C++ runtime (MT_FF_SYSTEM): where every thread starts (clone3, start_thread,
 * std::thread's trampoline, __libc_start_main) and callbacks pass through. Never a user's frame:
 * a NCCL proxy thread's stack is rooted in libc, and naming it after libc's start_thread
 * ("libc.so.6+0x9cb84") told a user nothing. */
static int is_system_module(const char *base)
{
    static const char *const prefixes[] = {"libc.so", "libc-", "libpthread", "ld-linux", "ld64.so",
                                           "libstdc++", "libgcc_s", "libc++"};
    return has_prefix(base, prefixes, sizeof prefixes / sizeof *prefixes);
}

static void forget_names(mt_frames *f);

int mt_frames_add(mt_frames *f, const mt_record *r)
{
    switch (r->type) {
    case MT_REC_STACK_NODE: {
        const mt_stack_node *n = &r->u.node;
        if (n->id == 0) return 1;
        mt_u64map_slot *s = mt_u64map_upsert(&f->node_index, n->id);
        if (!s) return -1;
        if (!s->b) { /* new id (b marks the slot used, a is the index) */
            if (MT_GROW(f->nodes, f->cap_nodes, f->n_nodes + 1) < 0)
                return -1;
            s->a = f->n_nodes++;
            s->b = 1;
        } else { /* an id written twice (corrupt input): the last one wins */
            f->bad_nodes += f->nodes[s->a].parent >= f->nodes[s->a].id;
        }
        f->nodes[s->a] = (node){.id = n->id, .parent = n->parent, .parent_ix = NO_NODE,
                                .kind = n->frame_kind, .ip = n->ip};
        if (n->parent >= n->id) f->bad_nodes++;
        return 1;
    }
    case MT_REC_MODULE: {
        if (MT_GROW(f->mods, f->cap_mods, f->n_mods + 1) < 0) return -1;
        const char *path = r->u.module.path ? r->u.module.path : "";
        const char *slash = strrchr(path, '/');
        module *m = &f->mods[f->n_mods];
        *m = (module){.id = r->u.module.id, .bias = r->u.module.bias,
                      .start = r->u.module.start, .end = r->u.module.end,
                      .base = dup(slash ? slash + 1 : path)};
        if (!m->base) return -1;
        m->is_cuda = is_cuda_module(m->base);
        m->is_vendor = is_vendor_module(m->base);
        m->is_system = is_system_module(m->base);
        f->n_mods++;
        f->mods_sorted = 0;
        return 1;
    }
    case MT_REC_SYMBOL: {
        if (MT_GROW(f->syms, f->cap_syms, f->n_syms + 1) < 0) return -1;
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
        if (MT_GROW(f->codes, f->cap_codes, f->n_codes + 1) < 0)
            return -1;
        pycode *c = &f->codes[f->n_codes];
        *c = (pycode){.filename = dup(r->u.pycode.filename), .qualname = dup(r->u.pycode.qualname)};
        /* an id written again (not by the recorder): the names built with the old one go */
        if (mt_u64map_find(&f->code_index, r->u.pycode.id) && f->n_names) forget_names(f);
        mt_u64map_slot *s = mt_u64map_upsert(&f->code_index, r->u.pycode.id);
        if (!c->filename || !c->qualname || !s) return -1;
        s->a = f->n_codes++;
        /* names built without a code object are named again (a few: codes come first as a rule) */
        f->work += f->n_py_unnamed;
        for (size_t i = 0; i < f->n_py_unnamed; i++)
            memset(f->nodes[f->py_unnamed[i]].name_count, 0, sizeof f->nodes[0].name_count);
        if (f->n_py_unnamed) mt_view_cache_forget(f->view);
        f->n_py_unnamed = 0;
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
    f->work += f->n_nodes;
    f->n_py_unnamed = 0; /* each is named anew anyway */
    for (size_t i = 0; i < f->n_nodes; i++)
        memset(f->nodes[i].name_count, 0, sizeof f->nodes[i].name_count);
    mt_view_cache_forget(f->view); /* owners are named from frame names: redo them too */
}

/* Index of node id, NO_NODE when the trace has none. */
static uint32_t index_of(const mt_frames *f, uint32_t id)
{
    const mt_u64map_slot *s = id ? mt_u64map_find(&f->node_index, id) : NULL;
    return s ? (uint32_t)s->a : NO_NODE;
}

/* Resolves each new node's parent to an index once, so walks need no hashing. A parent that comes
 * after its child, and a node written again (its slot starts over unlinked), are resolved by the
 * walk itself (parent_of): nodes are only looked at once here, however often records and names
 * alternate (the analysis names stacks while it reads, categories.c). */
static void link_nodes(mt_frames *f)
{
    for (; f->linked < f->n_nodes; f->linked++) {
        node *n = &f->nodes[f->linked];
        n->parent_ix = n->parent < n->id ? index_of(f, n->parent) : NO_NODE;
    }
}

/* The index of node ix's parent, NO_NODE for none (root, unknown, or not below its id). */
static uint32_t parent_of(mt_frames *f, uint32_t ix)
{
    node *n = &f->nodes[ix];
    if (n->parent_ix == NO_NODE && n->parent && n->parent < n->id)
        n->parent_ix = index_of(f, n->parent); /* it may have come since */
    return n->parent_ix;
}

static const module *module_of(const mt_frames *f, uint64_t ip)
{
    size_t lo = 0, hi = f->n_mods;
    while (lo < hi) { /* last module with start <= ip */
        size_t mid = (lo + hi) / 2;
        if (f->mods[mid].start <= ip)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Modules can be reloaded at other addresses; scan back a little for one containing ip. */
    for (size_t i = lo; i-- > 0 && lo - i <= 8;)
        if (ip >= f->mods[i].start && ip < f->mods[i].end) return &f->mods[i];
    return NULL;
}

/* Modules came: the native frames whose names were built with another module than the one they
 * are in now (module_of) are named again. Only those: a module loaded while the trace is read
 * (analyze.c names stacks as it reads) would otherwise have every name built again. */
static void renamed_by_modules(mt_frames *f)
{
    int any = 0;
    f->work += f->n_nodes;
    for (size_t i = 0; i < f->n_nodes; i++) {
        node *n = &f->nodes[i];
        if (n->kind != MT_FRAME_NATIVE) continue;
        int named = 0;
        for (int s = 0; s < MT_NAME_STYLES_; s++)
            named |= n->name_count[s] != 0;
        if (!named) continue;
        const module *m = module_of(f, n->ip);
        if ((m ? m->base : NULL) == n->mod_base && (m ? m->bias : 0) == n->mod_bias) continue;
        memset(n->name_count, 0, sizeof n->name_count);
        any = 1;
    }
    if (any) mt_view_cache_forget(f->view); /* owners are named from frame names: redo them too */
}

static int prepare(mt_frames *f)
{
    link_nodes(f);
    if (!f->mods_sorted) {
        f->work += f->n_mods;
        if (f->n_mods) qsort(f->mods, f->n_mods, sizeof *f->mods, cmp_mod);
        f->mods_sorted = 1;
        renamed_by_modules(f);
    }
    if (!f->syms_sorted) {
        f->work += f->n_syms;
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
    if (MT_GROW(f->names, f->cap_names, f->n_names + 1) < 0) {
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
    char *shortn = NULL;
    const char *fn = s->function;
    if (style == MT_NAME_SHORT) {
        size_t cap = strlen(fn) + 1;
        if (!(shortn = malloc(cap))) return NULL;
        mt_cxx_short_name(fn, shortn, cap);
        fn = shortn;
    }
    char *name;
    const char *slash = strrchr(s->file, '/');
    const char *file = slash ? slash + 1 : s->file; /* basenames keep the report narrow */
    if (!s->file[0]) name = dup(fn);
    else if (s->line) name = fmt("%s (%s:%u)", fn, file, s->line);
    else name = fmt("%s (%s)", fn, file);
    free(shortn);
    return name;
}

/* A Python file name that fits a flame graph label: below a site-packages/dist-packages directory the
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
        uint32_t code = MT_PY_IP_CODE(n->ip), line = MT_PY_IP_LINE(n->ip);
        const mt_u64map_slot *s = mt_u64map_find(&f->code_index, code);
        if (s) {
            const pycode *c = &f->codes[s->a];
            rc = push_name(f, fmt("%s (%s:%u)", c->qualname,
                                  style == MT_NAME_SHORT ? short_path(f, c->filename) : c->filename,
                                  line));
        } else {
            rc = push_name(f, fmt("[python code %u]:%u", code, line));
            if (rc == 0 && MT_GROW(f->py_unnamed, f->cap_py_unnamed, f->n_py_unnamed + 1) == 0)
                f->py_unnamed[f->n_py_unnamed++] = id;
            else
                rc = -1;
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
        n->is_vendor = m && m->is_vendor;
        n->is_system = m && m->is_system;
        n->mod_base = m ? m->base : NULL;
        n->mod_bias = m ? m->bias : 0;
        if (!named && rc == 0) {
            if (m) rc = push_name(f, fmt("%s+0x%llx", m->base, (unsigned long long)(n->ip - m->bias)));
            else rc = push_name(f, fmt("0x%llx", (unsigned long long)n->ip));
        }
    }
    if (rc < 0) return -1;
    n = &f->nodes[id];
    n->name_first[style] = first;
    n->name_count[style] = (uint32_t)(f->n_names - first);
    n->name_hash[style] = 0; /* made when asked (mt_frames_path_hash) */
    return 0;
}

/* The hash of node n's kind and names in style (built): FNV-1a over each name and its NUL. */
static uint64_t node_hash(mt_frames *f, node *n, mt_name_style style)
{
    if (n->name_hash[style]) return n->name_hash[style];
    uint64_t h = 0xcbf29ce484222325ull ^ n->kind;
    for (uint32_t i = 0; i < n->name_count[style]; i++)
        for (const char *c = f->names[n->name_first[style] + i];; c++) {
            h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
            if (!*c) break;
        }
    return n->name_hash[style] = h ? h : 1;
}

/* Node indexes of the path to leaf (an index), leaf first, in f->scratch. Returns the count. */
static size_t collect(mt_frames *f, uint32_t leaf)
{
    link_nodes(f);
    size_t n = 0;
    for (uint32_t ix = leaf; ix != NO_NODE && n < MAX_DEPTH; ix = parent_of(f, ix)) {
        if (MT_GROW(f->scratch, f->cap_scratch, n + 1) < 0) break;
        f->scratch[n++] = ix;
    }
    return n;
}

static int keep_frame(const node *n, mt_frame_filter filter)
{
    switch (filter) {
    case MT_FRAMES_PYTHON: return n->kind != MT_FRAME_NATIVE;
    case MT_FRAMES_NATIVE: return n->kind != MT_FRAME_PYTHON;
    default: return 1; /* MT_FRAMES_ALL */
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
    if (n->kind == MT_FRAME_NATIVE)
        return MT_FF_NATIVE | (n->is_cuda ? MT_FF_CUDA : 0) | (n->is_vendor ? MT_FF_LIB : 0) |
               (n->is_system ? MT_FF_SYSTEM : 0);
    const char *file = NULL;
    mt_frames_pycode(f, MT_PY_IP_CODE(n->ip), &file, NULL);
    return MT_FF_PYTHON | (file && is_library_python(file) ? MT_FF_PYLIB : 0);
}

/* The nodes of stack leaf (not 0), leaf first, in f->scratch (*depth of them: 0 when out of
 * memory), with f's indexes brought up to date for naming them. -1 when the trace has no node
 * leaf. */
static int path_nodes(mt_frames *f, uint32_t leaf, size_t *depth)
{
    uint32_t leaf_ix = index_of(f, leaf);
    if (prepare(f) < 0 || leaf_ix == NO_NODE) return -1;
    *depth = collect(f, leaf_ix);
    return 0;
}

size_t mt_frames_path(mt_frames *f, uint32_t leaf, mt_path_opts opts, const char **out,
                      size_t cap)
{
    mt_name_style style = opts.style;
    mt_frame_filter filter = opts.filter;
    uint8_t *flags = opts.flags;
    if (filter == MT_FRAMES_AUTO) filter = mt_frames_resolve(f, filter);
    if (filter == MT_FRAMES_USER) return mt_frames_user_path(f, leaf, style, out, flags, cap);
    if (leaf == 0) {
        if (cap) out[0] = mt_pseudo_name(MT_PSEUDO_NO_STACK);
        if (cap && flags) flags[0] = MT_FF_PSEUDO;
        return 1;
    }
    size_t depth = 0, total = 0;
    if (path_nodes(f, leaf, &depth) < 0) {
        if (cap) out[0] = "[unknown stack]";
        if (cap && flags) flags[0] = MT_FF_PSEUDO;
        return 1;
    }
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

uint64_t mt_frames_path_hash(mt_frames *f, uint32_t leaf, mt_name_style style)
{
    size_t depth = 0;
    if (leaf == 0 || path_nodes(f, leaf, &depth) < 0) return leaf == 0 ? 1 : 2;
    uint64_t h = depth; /* 0 (out of memory) when the walk found no node */
    for (size_t k = depth; k-- > 0;) {
        uint32_t id = f->scratch[k];
        if (!f->nodes[id].name_count[style] && build_node_names(f, id, style) < 0) return 0;
        h = mt_mix64(h ^ node_hash(f, &f->nodes[id], style));
    }
    return h;
}

void mt_frames_set_base_dir(mt_frames *f, const char *dir)
{
    free(f->base_dir);
    f->base_dir = dir ? strdup(dir) : NULL;
    for (size_t i = 0; i < f->n_nodes; i++) f->nodes[i].name_count[MT_NAME_SHORT] = 0;
    mt_view_cache_forget(f->view); /* first user frames and owners may be short Python names */
}

int mt_frames_has_python(const mt_frames *f) { return f->n_codes > 0; }

mt_frame_filter mt_frames_resolve(const mt_frames *f, mt_frame_filter filter)
{
    if (filter != MT_FRAMES_AUTO) return filter;
    return mt_frames_has_python(f) ? MT_FRAMES_USER : MT_FRAMES_ALL;
}

mt_view_cache **mt_frames_view_cache(mt_frames *f)
{
    prepare(f); /* records added since the last call rebuild names: per-leaf answers go first */
    return &f->view;
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
        uint32_t c = MT_PY_IP_CODE(n->ip);
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

uint64_t mt_frames_work(const mt_frames *f)
{
    return f->work;
}

uint64_t mt_frames_bad_nodes(const mt_frames *f)
{
    return f->bad_nodes;
}

const char *mt_frames_short_path(const mt_frames *f, const char *path)
{
    return short_path(f, path);
}

/* ---- autograd's backward pass ---------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Where Python enters autograd's engine: Tensor.backward calls torch.autograd.backward, which (as
 * torch.autograd.grad does) makes the initial gradient on the calling thread and then waits for
 * the engine. */
static int is_autograd_entry(mt_frames *f, const node *n)
{
    const char *file = NULL, *qual = NULL;
    if (n->kind != MT_FRAME_PYTHON || !mt_frames_pycode(f, MT_PY_IP_CODE(n->ip), &file, &qual))
        return 0;
    if (ends_with(file, "torch/_tensor.py")) return strcmp(qual, "Tensor.backward") == 0;
    return ends_with(file, "torch/autograd/__init__.py") &&
           (strcmp(qual, "backward") == 0 || strcmp(qual, "grad") == 0);
}

int mt_frames_autograd_worker(mt_frames *f, uint32_t leaf)
{
    uint32_t leaf_ix = index_of(f, leaf);
    size_t depth = leaf_ix == NO_NODE ? 0 : collect(f, leaf_ix);
    const node *root = depth ? &f->nodes[f->scratch[depth - 1]] : NULL;
    return root && root->kind == MT_FRAME_PSEUDO && root->ip == MT_PSEUDO_AUTOGRAD;
}

uint32_t mt_frames_backward_caller(mt_frames *f, uint32_t leaf)
{
    uint32_t leaf_ix = index_of(f, leaf);
    if (leaf_ix == NO_NODE) return 0;
    size_t depth = collect(f, leaf_ix), entry = depth;
    for (size_t k = 0; k < depth; k++) /* innermost first: the last one found is the outermost */
        if (is_autograd_entry(f, &f->nodes[f->scratch[k]])) entry = k;
    if (entry == depth) return 0;
    for (size_t k = entry + 1; k < depth; k++)
        if (f->nodes[f->scratch[k]].kind == MT_FRAME_PYTHON) return f->nodes[f->scratch[k]].id;
    return f->nodes[f->scratch[entry]].id;
}
