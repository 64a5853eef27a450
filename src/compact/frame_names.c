/* What a frame is called, and what it means to a PyTorch user.
 *
 * mt_cxx_short_name turns a demangled C++ signature into the name a person reads:
 *
 *   std::vector<at::Tensor, std::allocator<at::Tensor> >
 *     torch::autograd::generated::NllLossBackward0::apply(std::vector<at::Tensor, ...>&&)
 *                                   -> torch::autograd::generated::NllLossBackward0::apply
 *   c10::cuda::CUDACachingAllocator::CudaMallocAsync::(anonymous namespace)::mallocAsync(void**,
 *     signed char, unsigned long, CUstream_st*)
 *                                   -> c10::cuda::CUDACachingAllocator::CudaMallocAsync::(anon)::mallocAsync
 *   at::native::foo(at::Tensor const&)::{lambda(int)#1}::operator()(int) const
 *                                   -> at::native::foo::{lambda#1}::operator()
 *
 * i.e. no return type, no template arguments, no parameter lists, no cv/ref qualifiers, no
 * "[clone .cold]"/"[abi:cxx11]" tags; "(anonymous namespace)" becomes "(anon)". Operator names
 * (operator(), operator<<, operator new[], conversion operators) are kept whole. Names that are not
 * C++ (C functions, "libfoo.so+0x12") come out unchanged. A malformed name (unbalanced brackets)
 * still gives a bounded result: the scan never looks back more than it wrote.
 *
 * Rust's legacy symbols (rustc's default mangling: PyO3 extensions such as safetensors' reader)
 * are Itanium names too, and the C++ runtime demangles them with Rust's escapes and hash left in:
 *   _$LT$pyo3..instance..Bound$LT$T$GT$$u20$as$u20$pyo3..PyAnyMethods$GT$::call::h6b1a7712e1a6ba52
 *                                   -> <pyo3::instance::Bound<T> as pyo3::PyAnyMethods>::call
 * as gdb and perf print it (libiberty's Rust demangler): rust_legacy_name.
 *
 * mt_frame_role says what a native frame is in the user's view of a stack (`--frames user`): an
 * ATen operator ("aten::linear" from at::_ops::linear::call or ::redispatch), an autograd node
 * ("ConvolutionBackward0" from torch::autograd::generated::ConvolutionBackward0::apply), the
 * library that allocated (cuBLAS, cuDNN, NCCL, an allocator), or nothing a user needs.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct sbuf {
    char *p;
    size_t n, cap; /* cap includes room for the NUL */
} sbuf;

static void put(sbuf *b, char c)
{
    if (b->n + 1 < b->cap) b->p[b->n++] = c;
}

static void puts_n(sbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) put(b, s[i]);
}

static int ident_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '$'; }

/* Space stands in for the blanks inside operator names ("operator new") so that the return-type
 * split below, which cuts at the last blank, does not cut them. */
#define KEEP_BLANK '\x01'

/* Copies the operator token that starts at s (just after the word "operator"); returns the
 * number of input characters used. */
static size_t copy_operator(sbuf *b, const char *s)
{
    size_t i = 0;
    puts_n(b, "operator", 8);
    if (s[0] == '(' && s[1] == ')') {
        puts_n(b, "()", 2);
        return 2;
    }
    if (s[0] == '[' && s[1] == ']') {
        puts_n(b, "[]", 2);
        return 2;
    }
    if (s[0] == '"' && s[1] == '"') { /* user-defined literal: operator""_km */
        puts_n(b, "\"\"", 2);
        for (i = 2; ident_char(s[i]); i++) put(b, s[i]);
        return i;
    }
    static const char sym[] = "+-*/%^&|~!=<>,";
    if (s[0] && strchr(sym, s[0])) {
        while (i < 3 && s[i] && strchr(sym, s[i])) put(b, s[i++]);
        return i;
    }
    /* operator new / delete [] and conversion operators: " TYPE" up to the parameter list */
    if (s[0] != ' ') return 0;
    int angle = 0;
    for (i = 0; s[i] && !(s[i] == '(' && angle == 0); i++) {
        if (s[i] == '<') angle++;
        else if (s[i] == '>' && angle) angle--;
        put(b, s[i] == ' ' ? KEEP_BLANK : s[i]);
    }
    return i;
}

/* Index just past the bracket that closes the one at s[0] ('(' or '[' or '{'), or strlen(s)
 * when it is not closed. Only brackets of the same kind are counted. */
static size_t skip_group(const char *s)
{
    char open = s[0], close = open == '(' ? ')' : open == '[' ? ']' : '}';
    int depth = 0;
    size_t i = 0;
    for (; s[i]; i++) {
        if (s[i] == open) depth++;
        else if (s[i] == close && --depth == 0) return i + 1;
    }
    return i;
}

static int is_hex_digit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* The character a "$...$" escape of Rust's legacy mangling at s stands for, its length in *n; 0
 * when s is not one rustc writes. */
static unsigned rust_escape(const char *s, size_t *n)
{
    static const struct { const char *esc; char c; } named[] = {
        {"$SP$", '@'}, {"$BP$", '*'}, {"$RF$", '&'}, {"$LT$", '<'},
        {"$GT$", '>'}, {"$LP$", '('}, {"$RP$", ')'}, {"$C$", ','}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        size_t k = strlen(named[i].esc);
        if (strncmp(s, named[i].esc, k) == 0) {
            *n = k;
            return (unsigned char)named[i].c;
        }
    }
    /* $uXX$: a character by its code (rustc writes a blank, braces, quotes... this way) */
    if (s[0] == '$' && s[1] == 'u' && is_hex_digit(s[2]) && is_hex_digit(s[3]) && s[4] == '$') {
        unsigned v = 0;
        for (int i = 2; i < 4; i++) v = v * 16 + (unsigned)(s[i] <= '9' ? s[i] - '0' : s[i] - 'a' + 10);
        if (v >= 0x20 && v < 0x7f) {
            *n = 5;
            return v;
        }
    }
    return 0;
}

/* in decoded into out when it is a Rust legacy name: its last component "h" and 16 hex digits
 * (dropped), ".." for "::" and the "$...$" escapes, every one of which must decode. Returns the
 * length, 0 when in is not such a name (out is then unspecified). */
static size_t rust_legacy_name(const char *in, char *out, size_t cap)
{
    size_t len = strlen(in);
    if (len < 19 || strncmp(in + len - 19, "::h", 3) != 0) return 0;
    for (size_t i = len - 16; i < len; i++)
        if (!is_hex_digit(in[i])) return 0;
    sbuf b = {out, 0, cap};
    const char *end = in + len - 19;
    for (const char *s = in; s < end; s++) {
        size_t n;
        unsigned c;
        /* an identifier that starts with an escape is written "_$": the "_" is not part of it */
        if (*s == '_' && s[1] == '$' && (s == in || s[-1] == ':')) continue;
        if (*s == '$') {
            if (!(c = rust_escape(s, &n))) return 0;
            put(&b, (char)c);
            s += n - 1;
        } else if (*s == '.' && s[1] == '.') {
            puts_n(&b, "::", 2);
            s++;
        } else {
            put(&b, *s);
        }
    }
    out[b.n] = 0;
    return b.n;
}

size_t mt_cxx_short_name(const char *in, char *out, size_t cap)
{
    if (!cap) return 0;
    size_t rust = rust_legacy_name(in, out, cap);
    if (rust) return rust;
    sbuf b = {out, 0, cap};
    int angle = 0, paren = 0;
    size_t params_at = (size_t)-1; /* output length where the last top-level '(' group began */
    for (size_t i = 0; in[i];) {
        char c = in[i];
        int top = angle == 0 && paren == 0;
        if (top && c == 'o' && strncmp(in + i, "operator", 8) == 0 &&
            (i == 0 || !ident_char(in[i - 1])) && !ident_char(in[i + 8])) {
            size_t used = copy_operator(&b, in + i + 8);
            i += 8 + used;
            continue;
        }
        if (top && c == '(' && strncmp(in + i, "(anonymous namespace)", 21) == 0) {
            puts_n(&b, "(anon)", 6);
            i += 21;
            continue;
        }
        if (top && c == '{') { /* {lambda(int)#1}, {unnamed type#1}: keep without parameters */
            size_t end = i + skip_group(in + i);
            for (size_t k = i; k < end;) {
                if (in[k] == '(') {
                    k += skip_group(in + k);
                    continue;
                }
                put(&b, in[k] == ' ' ? KEEP_BLANK : in[k]);
                k++;
            }
            i = end;
            continue;
        }
        if (top && c == '[') { /* [clone .cold], [abi:cxx11] */
            i += skip_group(in + i);
            continue;
        }
        if (c == '<' && paren == 0) angle++;
        else if (c == '>' && paren == 0 && angle) angle--;
        else if (c == '(') {
            if (top) params_at = b.n;
            paren++;
        } else if (c == ')' && paren) {
            paren--;
        } else if (top) {
            put(&b, c);
        }
        i++;
    }
    if (params_at != (size_t)-1) b.n = params_at; /* drop qualifiers after the parameters */
    while (b.n && b.p[b.n - 1] == ' ') b.n--;
    /* the return type ends at the last blank outside operator names and lambdas; only functions
     * have one ("vtable for X", "guard variable for X" keep their words) */
    size_t start = 0;
    for (size_t k = 0; params_at != (size_t)-1 && k < b.n; k++)
        if (b.p[k] == ' ') start = k + 1;
    size_t n = 0;
    for (size_t k = start; k < b.n; k++) b.p[n++] = b.p[k] == KEEP_BLANK ? ' ' : b.p[k];
    b.p[n] = 0;
    if (n == 0) { /* nothing left (a name made only of brackets): keep what we were given */
        snprintf(out, cap, "%s", in);
        return strlen(out);
    }
    return n;
}

/* ---- roles in the user's view ------------------------------------------------------------------ */

/* Who allocated, by a native frame's function name or module: the first rule that matches wins.
 * Allocators by a name anywhere in the (namespaced) function; libraries by their own API prefix or
 * their module ("cublasCreate_v2", "libcublas.so.13+0x12"), so that PyTorch's operators named
 * after them (at::native::cudnn_convolution) stay the program's; PyTorch's own cuBLAS handle and
 * workspace functions count as cuBLAS. Python frames are never looked at (a script called
 * "nccl_test.py" is not NCCL). */
static const struct {
    const char *needle;
    int prefix; /* the name starts with needle (else: contains it) */
    const char *owner;
    int is_allocator;
} owner_rules[] = {
    /* c10::cuda::CUDACachingAllocator::CudaMallocAsync::...: the other backend, in the same
     * namespace */
    {"CudaMallocAsync", 0, MT_OWNER_ASYNC_ALLOCATOR, 1},
    {"CUDACachingAllocator", 0, MT_OWNER_CACHING_ALLOCATOR, 1},
    /* at::CachingHostAllocatorImpl, at::cuda::(anon)::CUDACachingHostAllocatorImpl */
    {"CachingHostAllocator", 0, MT_OWNER_HOST_ALLOCATOR, 1},
    {"BFCAllocator", 0, MT_OWNER_XLA_ALLOCATOR, 1},   /* XLA/TensorFlow (tsl::BFCAllocator) */
    {"cublas", 1, "cuBLAS", 0},                       /* cublasCreate_v2, cublasLtMatmul */
    {"libcublas", 1, "cuBLAS", 0},                    /* libcublas.so.13+0x21815a, libcublasLt */
    {"at::cuda::getCurrentCUDABlas", 1, "cuBLAS", 0}, /* handles */
    {"at::cuda::getCUDABlasLtWorkspace", 1, "cuBLAS", 0},
    {"at::cuda::setWorkspaceForHandle", 1, "cuBLAS", 0},
    {"cudnn", 1, "cuDNN", 0},
    {"libcudnn", 1, "cuDNN", 0},
    {"nccl", 1, "NCCL", 0},
    {"libnccl", 1, "NCCL", 0},
};

const char *mt_owner_of_name(const char *fn, int *is_allocator)
{
    char shortn[512]; /* prefixes are matched without a return type ("void* at::cuda::...") */
    mt_cxx_short_name(fn, shortn, sizeof shortn);
    for (size_t r = 0; r < sizeof owner_rules / sizeof *owner_rules; r++) {
        const char *needle = owner_rules[r].needle;
        if (owner_rules[r].prefix ? strncmp(shortn, needle, strlen(needle)) == 0
                                  : strstr(fn, needle) != NULL) {
            if (is_allocator) *is_allocator = owner_rules[r].is_allocator;
            return owner_rules[r].owner;
        }
    }
    /* CuPy's pool: Cython functions of cupy.cuda.memory (__pyx_..._4cupy_4cuda_6memory_...) */
    if (strstr(fn, "cupy") && strstr(fn, "memory") && strstr(fn, "Pool")) {
        if (is_allocator) *is_allocator = 1;
        return MT_OWNER_CUPY_POOL;
    }
    return NULL;
}

/* The last "::"-separated component of a short name before its final "::apply" ("X" in
 * "a::b::X::apply"), or NULL. */
static const char *component_before_apply(const char *s, size_t *len)
{
    size_t n = strlen(s);
    if (n < 9 || strcmp(s + n - 7, "::apply") != 0) return NULL;
    size_t end = n - 7, start = end;
    while (start > 0 && !(s[start - 1] == ':' && start >= 2 && s[start - 2] == ':')) start--;
    if (start == end) return NULL;
    *len = end - start;
    return s + start;
}

/* A C++ autograd function's backward node, torch::autograd::CppNode<T>::apply: T's own name, the
 * last component of the template argument ("ROIAlignFunction" in CppNode<vision::ops::(anonymous
 * namespace)::ROIAlignFunction>), or NULL when the long name does not hold it (names of the
 * short style have no template arguments). */
static const char *cpp_node_function(const char *fn, size_t *len)
{
    static const char prefix[] = "torch::autograd::CppNode<";
    const char *at = strstr(fn, prefix);
    if (!at) return NULL;
    const char *start = at + sizeof prefix - 1, *last = start;
    int depth = 0;
    for (const char *p = start; *p; p++) {
        if (*p == '<' || *p == '(') depth++;
        else if ((*p == '>' || *p == ')') && depth > 0) depth--;
        else if (*p == '>') { /* the argument's end */
            if (p == last) return NULL;
            *len = (size_t)(p - last);
            return last;
        } else if (*p == ':' && p[1] == ':' && depth == 0) last = p + 2;
    }
    return NULL;
}

mt_frame_role mt_frame_role_of(const char *fn, char *user, size_t cap)
{
    if (cap) user[0] = 0;
    if (!fn || !fn[0]) return MT_ROLE_PLAIN;
    char shortn[512];
    mt_cxx_short_name(fn, shortn, sizeof shortn);
    /* at::_ops::<op>::call / ::redispatch: the dispatcher's entry for ATen operator <op> */
    if (strncmp(shortn, "at::_ops::", 10) == 0) {
        const char *op = shortn + 10, *sep = strstr(op, "::");
        if (sep && (strcmp(sep, "::call") == 0 || strcmp(sep, "::redispatch") == 0) && sep > op) {
            snprintf(user, cap, "aten::%.*s", (int)(sep - op), op);
            return MT_ROLE_ATEN;
        }
    }
    /* torch::autograd::generated::ConvolutionBackward0::apply, torch::autograd::AccumulateGrad::apply;
     * a C++ autograd function's backward, CppNode<ROIAlignFunction>::apply, named as PyTorch names
     * a Python one's ("ROIAlignFunctionBackward"). Not Node::apply, nor Function<T>::apply: that is
     * the function's forward, called from the forward pass (it read "Function" as if it were a
     * node of the backward pass). */
    if (strncmp(shortn, "torch::autograd::", 17) == 0) {
        size_t len;
        const char *node = component_before_apply(shortn, &len);
        if (node && len == 7 && strncmp(node, "CppNode", 7) == 0) {
            const char *fun = cpp_node_function(fn, &len);
            if (fun) snprintf(user, cap, "%.*sBackward", (int)len, fun);
            else snprintf(user, cap, "CppNode");
            return MT_ROLE_AUTOGRAD_NODE;
        }
        if (node && !(len == 4 && strncmp(node, "Node", 4) == 0) &&
            !(len == 8 && strncmp(node, "Function", 8) == 0)) {
            snprintf(user, cap, "%.*s", (int)len, node);
            return MT_ROLE_AUTOGRAD_NODE;
        }
    }
    int alloc = 0;
    const char *owner = mt_owner_of_name(fn, &alloc);
    if (owner) {
        snprintf(user, cap, "%s", owner);
        return alloc ? MT_ROLE_ALLOCATOR : MT_ROLE_LIBRARY;
    }
    return MT_ROLE_PLAIN;
}

/* ---- the user's view of a stack --------------------------------------------------------------- */

struct mt_view_cache {
    mt_u64map roles;  /* long name pointer -> a: role + 1, b: user name (owned, or a static) */
    char **owned;     /* user names built here */
    size_t n_owned, cap_owned;
    mt_u64map first[MT_NAME_STYLES_]; /* leaf -> first user frame name */
    mt_u64map owners; /* leaf -> a: owner name, b: is an allocator */
    mt_u64map libs;   /* leaf -> a: the innermost library that asked (NULL: none), b: 1 */
    /* two paths of one stack: every frame in the long style (roles are read from the whole
     * signature) and in the style asked for (what is shown) */
    const char **lng, **shw;
    uint8_t *flg;
    size_t cap;
};

void mt_view_cache_forget(mt_view_cache *v)
{
    if (!v) return;
    for (int s = 0; s < MT_NAME_STYLES_; s++) mt_u64map_clear(&v->first[s]);
    mt_u64map_clear(&v->owners);
    mt_u64map_clear(&v->libs);
}

void mt_view_cache_free(mt_view_cache *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->n_owned; i++) free(v->owned[i]);
    free(v->owned);
    mt_u64map_destroy(&v->roles);
    for (int s = 0; s < MT_NAME_STYLES_; s++) mt_u64map_destroy(&v->first[s]);
    mt_u64map_destroy(&v->owners);
    mt_u64map_destroy(&v->libs);
    free(v->lng);
    free(v->shw);
    free(v->flg);
    free(v);
}

static mt_view_cache *cache_of(mt_frames *f)
{
    mt_view_cache **p = mt_frames_view_cache(f);
    if (!*p) *p = calloc(1, sizeof **p);
    return *p;
}

/* Role and user name of long name `name` (a pointer owned by the frames: it never changes). */
static mt_frame_role role(mt_view_cache *v, const char *name, const char **user)
{
    mt_u64map_slot *s = mt_u64map_find(&v->roles, (uint64_t)(uintptr_t)name);
    if (s) {
        *user = (const char *)(uintptr_t)s->b;
        return (mt_frame_role)(s->a - 1);
    }
    char buf[256];
    mt_frame_role r = mt_frame_role_of(name, buf, sizeof buf);
    *user = NULL;
    if (r == MT_ROLE_LIBRARY || r == MT_ROLE_ALLOCATOR) {
        *user = mt_owner_of_name(name, NULL); /* a static: owners are compared by pointer */
    } else if (r != MT_ROLE_PLAIN) {
        char *copy = strdup(buf);
        if (copy && v->n_owned == v->cap_owned) {
            size_t ncap = v->cap_owned ? v->cap_owned * 2 : 64;
            char **no = realloc(v->owned, ncap * sizeof *no);
            if (no) {
                v->owned = no;
                v->cap_owned = ncap;
            }
        }
        if (!copy || v->n_owned == v->cap_owned) { /* out of memory: the frame is plain */
            free(copy);
            return MT_ROLE_PLAIN;
        }
        v->owned[v->n_owned++] = copy;
        *user = copy;
    }
    if ((s = mt_u64map_upsert(&v->roles, (uint64_t)(uintptr_t)name))) {
        s->a = (uint64_t)r + 1;
        s->b = (uint64_t)(uintptr_t)*user;
    }
    return r;
}

/* Fills v->lng/v->shw/v->flg with every frame of leaf, root first; returns the count (0 when out
 * of memory). The two styles expand the same frames, so index k is one frame in both. */
static size_t both_paths(mt_frames *f, mt_view_cache *v, uint32_t leaf, mt_name_style style)
{
    for (;;) {
        mt_path_opts lng = {.style = MT_NAME_LONG, .filter = MT_FRAMES_ALL, .flags = v->flg};
        size_t n = mt_frames_path(f, leaf, lng, v->lng, v->cap);
        if (n <= v->cap) {
            mt_path_opts shw = {.style = style, .filter = MT_FRAMES_ALL};
            size_t m = mt_frames_path(f, leaf, shw, v->shw, v->cap);
            return m == n ? n : 0;
        }
        size_t ncap = n + 64;
        const char **a = realloc(v->lng, ncap * sizeof *a);
        if (a) v->lng = a;
        const char **b = realloc(v->shw, ncap * sizeof *b);
        if (b) v->shw = b;
        uint8_t *c = realloc(v->flg, ncap);
        if (c) v->flg = c;
        if (!a || !b || !c) return 0;
        v->cap = ncap;
    }
}

/* A native frame a user could have written: not the CUDA stack, not NVIDIA's libraries, not the
 * C/C++ runtime, not an allocator or library that the rules recognise, not XLA's device-memory
 * layer (stream_executor::, under every allocation XLA makes: a JAX run's autotuning buffers were
 * named "stream_executor::gpu::CreatePhysicalAllocation::$_0::operator()", not what asked). */
static int user_native(mt_view_cache *v, size_t k)
{
    const char *user;
    if (!(v->flg[k] & MT_FF_NATIVE) || (v->flg[k] & (MT_FF_CUDA | MT_FF_LIB | MT_FF_SYSTEM)))
        return 0;
    if (strncmp(v->lng[k], "stream_executor::", 17) == 0) return 0;
    mt_frame_role r = role(v, v->lng[k], &user);
    return r != MT_ROLE_LIBRARY && r != MT_ROLE_ALLOCATOR;
}

/* A stack with no frame of the user's (a library's own thread: NCCL's proxy service): the
 * outermost frame outside the C runtime and the CUDA stack, the thread's entry into the library
 * ("ncclProxyService (proxy.cc:1721)"). n when there is none. */
static size_t thread_entry(const mt_view_cache *v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if ((v->flg[k] & MT_FF_NATIVE) && !(v->flg[k] & (MT_FF_CUDA | MT_FF_SYSTEM))) return k;
    return n;
}

size_t mt_frames_user_path(mt_frames *f, uint32_t leaf, mt_name_style style, const char **out,
                           uint8_t *flags, size_t cap)
{
    mt_view_cache *v = cache_of(f);
    size_t n = v ? both_paths(f, v, leaf, style) : 0;
    if (!n) { /* the view could not be built (out of memory): the Python frames alone */
        mt_path_opts py = {.style = style, .filter = MT_FRAMES_PYTHON, .flags = flags};
        return mt_frames_path(f, leaf, py, out, cap);
    }
    size_t total = 0;
    int meaningful = 0; /* a Python frame or a role was kept */
    const char *lib = NULL, *run_last = NULL; /* run_last: the last operator of a run not shown */
    const char *last_role = NULL;
#define EMIT(name, fl)                                                                             \
    do {                                                                                           \
        if (total < cap) {                                                                         \
            out[total] = (name);                                                                   \
            if (flags) flags[total] = (uint8_t)(fl);                                               \
        }                                                                                          \
        total++;                                                                                   \
    } while (0)
    /* A run of ATen operators (one calls the next) shows its first, what the code above called,
     * and its last, what allocated: "aten::conv2d", "aten::cudnn_convolution". */
#define END_RUN()                                                                                  \
    do {                                                                                           \
        if (run_last) EMIT(run_last, MT_FF_NATIVE | MT_FF_ROLE);                                   \
        run_last = NULL;                                                                           \
    } while (0)
    for (size_t k = 0; k < n; k++) {
        uint8_t fl = v->flg[k];
        if (fl & (MT_FF_PYTHON | MT_FF_PSEUDO)) {
            END_RUN();
            EMIT(v->shw[k], fl);
            if (fl & MT_FF_PYTHON) {
                meaningful = 1;
                last_role = NULL;
            }
            continue;
        }
        const char *user;
        mt_frame_role r = role(v, v->lng[k], &user);
        if (r == MT_ROLE_AUTOGRAD_NODE) {
            END_RUN();
            if (!last_role || strcmp(last_role, user) != 0) EMIT(user, MT_FF_NATIVE | MT_FF_ROLE);
            last_role = user;
            meaningful = 1;
        } else if (r == MT_ROLE_ATEN) {
            /* at::_ops::x::call, then x::redispatch of the same operator: one frame */
            if (last_role && strcmp(last_role, user) == 0) continue;
            if (last_role && strncmp(last_role, "aten::", 6) == 0) run_last = user; /* in a run */
            else EMIT(user, MT_FF_NATIVE | MT_FF_ROLE);
            last_role = user;
            meaningful = 1;
        } else if (r == MT_ROLE_LIBRARY || r == MT_ROLE_ALLOCATOR) {
            lib = user; /* innermost wins */
        }
    }
    END_RUN();
#undef END_RUN
    if (!meaningful) { /* no Python and no operator: the first native frame a user wrote */
        size_t k = n;
        while (k-- > 0 && !user_native(v, k)) {
        }
        if (k == (size_t)-1) k = thread_entry(v, n); /* none: where the thread entered a library */
        if (k < n) EMIT(v->shw[k], v->flg[k]);
    }
    if (lib) EMIT(lib, MT_FF_NATIVE | MT_FF_ROLE | MT_FF_LIB);
#undef EMIT
    return total;
}

const char *mt_frames_first_user(mt_frames *f, uint32_t leaf, mt_name_style style)
{
    if (leaf == 0) return mt_pseudo_name(MT_PSEUDO_NO_STACK);
    mt_view_cache *v = cache_of(f);
    if (!v) return "[unknown stack]";
    mt_u64map_slot *c = mt_u64map_find(&v->first[style], leaf);
    if (c) return (const char *)(uintptr_t)c->a;
    size_t n = both_paths(f, v, leaf, style);
    if (!n) return "[unknown stack]";
    const char *pick = NULL, *node = NULL, *op = NULL;
    for (size_t k = n; k-- > 0 && !pick;) /* innermost Python frame */
        if (v->flg[k] & MT_FF_PYTHON) pick = v->shw[k];
    for (size_t k = 0; k < n && !pick; k++) { /* autograd node (innermost), outermost operator */
        const char *user;
        mt_frame_role r = (v->flg[k] & MT_FF_NATIVE) ? role(v, v->lng[k], &user) : MT_ROLE_PLAIN;
        if (r == MT_ROLE_AUTOGRAD_NODE) node = user;
        if (r == MT_ROLE_ATEN && !op) op = user;
    }
    if (!pick) pick = node ? node : op;
    for (size_t k = n; k-- > 0 && !pick;)
        if (user_native(v, k)) pick = v->shw[k];
    size_t entry = pick ? n : thread_entry(v, n);
    if (!pick) pick = v->shw[entry < n ? entry : n - 1];
    if ((c = mt_u64map_upsert(&v->first[style], leaf))) c->a = (uint64_t)(uintptr_t)pick;
    return pick;
}

const char *mt_frames_owner(mt_frames *f, uint32_t leaf, int *is_allocator)
{
    mt_view_cache *v = cache_of(f);
    mt_u64map_slot *c = v ? mt_u64map_find(&v->owners, leaf) : NULL;
    if (c) {
        if (is_allocator) *is_allocator = (int)c->b;
        return (const char *)(uintptr_t)c->a;
    }
    const char *owner = NULL;
    int alloc = 0;
    size_t n = v && leaf ? both_paths(f, v, leaf, MT_NAME_SHORT) : 0;
    for (size_t k = n; k-- > 0 && !owner;) { /* innermost match wins */
        const char *user;
        if (!(v->flg[k] & MT_FF_NATIVE)) continue;
        mt_frame_role r = role(v, v->lng[k], &user);
        if (r == MT_ROLE_LIBRARY || r == MT_ROLE_ALLOCATOR) {
            owner = user;
            alloc = r == MT_ROLE_ALLOCATOR;
        }
    }
    if (!owner) owner = mt_frames_first_user(f, leaf, MT_NAME_SHORT);
    if (v && (c = mt_u64map_upsert(&v->owners, leaf))) {
        c->a = (uint64_t)(uintptr_t)owner;
        c->b = (uint64_t)alloc;
    }
    if (is_allocator) *is_allocator = alloc;
    return owner;
}

mt_holder_kind mt_frames_holder(mt_frames *f, const mt_lifetime *l, const char **holder)
{
    if (l->kind == MT_KIND_DRIVER) {
        *holder = "driver-internal";
        return MT_HOLD_DRIVER;
    }
    int alloc = 0;
    const char *owner = mt_frames_owner(f, l->stack, &alloc);
    /* an allocator's own reservations; what it hands out (async tensors in tensor mode) is the
     * program's, or a library's when a library asked for it (cuBLAS workspaces). Pinned host
     * memory too: PyTorch's and CuPy's pinned-memory pools keep what they took until exit */
    int reserves = l->kind == MT_KIND_DEVICE || l->kind == MT_KIND_VMM_PHYSICAL ||
                   l->kind == MT_KIND_PITCH || l->kind == MT_KIND_MANAGED ||
                   l->kind == MT_KIND_HOST_PINNED;
    if (alloc && reserves) {
        *holder = owner;
        return MT_HOLD_CACHE;
    }
    /* the innermost library that asked for it: once per stack (this runs for every allocation
     * live at the end, and a path costs its depth) */
    mt_view_cache *v = cache_of(f);
    mt_u64map_slot *c = v ? mt_u64map_find(&v->libs, l->stack) : NULL;
    const char *lib = c ? (const char *)(uintptr_t)c->a : NULL;
    if (!c) {
        size_t n = v && l->stack ? both_paths(f, v, l->stack, MT_NAME_SHORT) : 0;
        for (size_t k = n; k-- > 0 && !lib;) {
            const char *user;
            if ((v->flg[k] & MT_FF_NATIVE) && role(v, v->lng[k], &user) == MT_ROLE_LIBRARY)
                lib = user;
        }
        if (v && (c = mt_u64map_upsert(&v->libs, l->stack))) {
            c->a = (uint64_t)(uintptr_t)lib;
            c->b = 1;
        }
    }
    if (lib) {
        *holder = lib;
        return MT_HOLD_LIBRARY;
    }
    *holder = "program";
    return MT_HOLD_PROGRAM;
}

const char *mt_frames_own_code(mt_frames *f, uint32_t leaf)
{
    enum { CAP = 1024 };
    const char *names[CAP]; /* the names are f's */
    uint8_t flags[CAP];
    mt_path_opts opts = {.style = MT_NAME_SHORT, .filter = MT_FRAMES_USER, .flags = flags};
    size_t n = mt_frames_path(f, leaf, opts, names, CAP);
    for (size_t i = n < CAP ? n : CAP; i-- > 0;)
        if (mt_ff_own_python(flags[i])) return names[i];
    return mt_frames_first_user(f, leaf, MT_NAME_SHORT);
}
