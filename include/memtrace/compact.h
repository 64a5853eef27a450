/* memtrace/compact.h — the compactor: a trace's events turned into lifetimes, per-device usage,
 * peaks, what was live at each peak and at each failed request, leaks, and frame names.
 *
 * Three layers, each usable alone:
 *   mt_frames   stack trie + modules + symbols + Python code objects -> frame names
 *   mt_tracker  the event state machine: live allocations, per-device counters, peaks. Feed it
 *               events in file order; hooks tell a caller about every lifetime that ends and every
 *               change of a device's counters (the Chrome exporter streams from those).
 *   mt_analysis one pass over a trace file (see analyze.c): peaks and what was live at them,
 *               leaks, failed requests, tensors' categories; a second when a stack's names came
 *               too late to categorize its tensors as they were read.
 * Memory is proportional to what is live plus per-stack aggregates, never to the event count.
 * Event semantics (what counts as device bytes, how frees match allocations) are documented in
 * src/compact/tracker.c and docs/analysis.md.
 */
#ifndef MEMTRACE_COMPACT_H
#define MEMTRACE_COMPACT_H

#include <stddef.h>
#include <stdint.h>

#include "memtrace/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Frames ------------------------------------------------------------------------------------ */

typedef struct mt_frames mt_frames;

/* How a frame is named. Every output (text and JSON reports, folded, Chrome, speedscope) uses the
 * same names; frames.c lists them. */
typedef enum mt_name_style {
    MT_NAME_SHORT = 0, /* default: C++ without return type, template arguments and parameters
                          ("at::native::cudnn_convolution_backward_weight"), Python
                          "Module._call_impl (torch/nn/modules/module.py:1790)" with a short path
                          (below site-packages, relative to the base dir, or the last 2 parts) */
    MT_NAME_LONG = 1,  /* `--long-names`: whole demangled signatures, Python paths as recorded */
    MT_NAME_STYLES_ = 2,
} mt_name_style;

/* Which frames a path keeps (`--frames`). Pseudo frames are always kept. */
typedef enum mt_frame_filter {
    MT_FRAMES_AUTO = 0,   /* user when the trace has Python frames, else all (mt_frames_resolve) */
    MT_FRAMES_ALL = 1,
    MT_FRAMES_PYTHON = 2, /* Python frames only */
    MT_FRAMES_NATIVE = 3, /* no Python frames */
    MT_FRAMES_USER = 4,   /* a PyTorch user's view: the Python frames, the ATen operator called
                             ("aten::linear"; of operators calling operators the first and the
                             last, "aten::conv2d", "aten::cudnn_convolution"), the autograd node
                             of a backward allocation ("ConvolutionBackward0"), the library that
                             allocated ("cuBLAS", MT_OWNER_CACHING_ALLOCATOR, ...); nothing else
                             (frame_names.c) */
} mt_frame_filter;

/* What one name of a path is (mt_path_opts.flags). */
enum {
    MT_FF_NATIVE = 1u << 0,
    MT_FF_PYTHON = 1u << 1,
    MT_FF_PSEUDO = 1u << 2,
    MT_FF_CUDA = 1u << 3, /* a native frame in libcuda*, libcudart*, libcupti*, libmemtrace_inject* */
    MT_FF_PYLIB = 1u << 4, /* a Python frame of an installed package or the standard library
                              (path holds site-packages, dist-packages or /lib/python) */
    MT_FF_LIB = 1u << 5,  /* a native frame in an NVIDIA library that allocates on its own
                             (libcublas*, libcudnn*, libnccl*, ...) */
    MT_FF_ROLE = 1u << 6, /* user view: a name that stands for frames (an ATen operator, an
                             autograd node, the allocating library), not a frame of the stack */
    MT_FF_SYSTEM = 1u << 7, /* a native frame in the C/C++ runtime (libc, the dynamic loader,
                               libstdc++, libgcc_s): where threads start; never a user's frame */
};

/* A Python frame of the program's own code: not an installed package's nor the standard
 * library's. */
static inline int mt_ff_own_python(uint8_t flags)
{
    return (flags & MT_FF_PYTHON) && !(flags & MT_FF_PYLIB);
}

/* Owner names mt_frames_owner gives to stacks of allocators that keep memory cached. */
#define MT_OWNER_CACHING_ALLOCATOR "PyTorch caching allocator"
/* PyTorch's other backend (backend:cudaMallocAsync): the driver's pool caches, not PyTorch */
#define MT_OWNER_ASYNC_ALLOCATOR "PyTorch cudaMallocAsync backend"
#define MT_OWNER_XLA_ALLOCATOR "XLA BFC allocator"
#define MT_OWNER_CUPY_POOL "CuPy memory pool"
/* PyTorch's CachingHostAllocator: pinned host blocks (pin_memory(), .item()'s staging buffer),
 * kept for the next pinned tensor until the process ends or the program empties that cache */
#define MT_OWNER_HOST_ALLOCATOR "PyTorch pinned-memory allocator"

mt_frames *mt_frames_new(void);
void mt_frames_free(mt_frames *f);
/* Keeps what it needs from STACK_NODE, MODULE, SYMBOL, PYCODE records (strings are copied).
 * Returns 1 if the record was one of those, 0 if not, -1 when out of memory. */
int mt_frames_add(mt_frames *f, const mt_record *r);
/* How mt_frames_path names a stack. Zero is short names, MT_FRAMES_AUTO, no flags. */
typedef struct mt_path_opts {
    mt_name_style style;
    mt_frame_filter filter; /* the frames kept (MT_FRAMES_USER: names that stand for frames,
                               "aten::linear", carry MT_FF_ROLE) */
    uint8_t *flags;         /* NULL, or receives MT_FF_* of each name written (cap of them) */
} mt_path_opts;
/* Names of the frames of stack `leaf` that opts keeps, root (outermost) first; an ip with inlined
 * callees expands into several names. Writes at most cap names into out and returns the full
 * count. leaf 0 gives the single pseudo frame "[no stack]". Names are owned by f and live as long
 * as it does. */
size_t mt_frames_path(mt_frames *f, uint32_t leaf, mt_path_opts opts, const char **out,
                      size_t cap);
/* MT_NAME_SHORT shows Python files under dir relative to it (the CLI passes its cwd). NULL: none. */
void mt_frames_set_base_dir(mt_frames *f, const char *dir);
/* 1 when the trace has Python code objects (then MT_FRAMES_AUTO means MT_FRAMES_USER). */
int mt_frames_has_python(const mt_frames *f);
/* filter, with MT_FRAMES_AUTO replaced by what it means for this trace. */
mt_frame_filter mt_frames_resolve(const mt_frames *f, mt_frame_filter filter);
/* Stack nodes whose parent id was not below their own id (corrupt input: the recorder numbers
 * nodes in order, parents first). Their path ends at them. */
uint64_t mt_frames_bad_nodes(const mt_frames *f);
/* A Python file as MT_NAME_SHORT names it (see frames.c): below site-packages the package path,
 * under the base dir relative to it, else the last two components. Points into path. */
const char *mt_frames_short_path(const mt_frames *f, const char *path);
/* Filename and qualname of a Python code object; 0 if the trace has no PYCODE for it. */
int mt_frames_pycode(mt_frames *f, uint32_t code, const char **filename, const char **qualname);
/* The innermost Python frame of stack leaf (with file != NULL: the innermost whose file matches,
 * see mt_python_file_matches): its code id and line. 1 found, 0 none. */
int mt_frames_python_line(mt_frames *f, uint32_t leaf, const char *file, uint32_t *code,
                          uint32_t *line);
/* A recorded Python filename matches what a user typed: equal, one a '/'-suffix of the other
 * ("cifar.py", "examples/cifar.py" ~ "/home/u/examples/cifar.py"), or the same basename. */
int mt_python_file_matches(const char *recorded, const char *wanted);
/* Who allocated, from the stack's native frames (innermost match wins): MT_OWNER_ASYNC_ALLOCATOR
 * ("CudaMallocAsync" in a name; *is_allocator = 1), MT_OWNER_CACHING_ALLOCATOR
 * ("CUDACachingAllocator" in a name; allocator), MT_OWNER_HOST_ALLOCATOR ("CachingHostAllocator";
 * allocator), MT_OWNER_XLA_ALLOCATOR ("BFCAllocator"; allocator), MT_OWNER_CUPY_POOL (CuPy's
 * memory pool; allocator), "cuBLAS" (cublas*, libcublas*,
 * PyTorch's cuBLAS handle and workspace functions), "cuDNN" (cudnn*, libcudnn*), "NCCL" (nccl*,
 * libnccl*), else the first user frame. Cached per stack. Short names. */
const char *mt_frames_owner(mt_frames *f, uint32_t leaf, int *is_allocator);
/* The frame that names an allocation, never an allocator or CUDA frame: the innermost Python
 * frame; else the autograd node ("ConvolutionBackward0") or, without one, the outermost ATen
 * operator ("aten::linear"); else the innermost native frame outside the CUDA stack, NVIDIA's
 * libraries, the C/C++ runtime and the allocators; else where the thread entered a library (the
 * outermost frame outside the C runtime and the CUDA stack: "ncclProxyService"); else the
 * innermost frame. Owned by f. */
const char *mt_frames_first_user(mt_frames *f, uint32_t leaf, mt_name_style style);
/* Where the program's own code asked: the innermost Python frame outside installed packages and
 * the standard library (mt_ff_own_python); else mt_frames_first_user. Short names, owned by f. */
const char *mt_frames_own_code(mt_frames *f, uint32_t leaf);
/* Autograd's backward pass. 1 when stack leaf is a worker thread's of autograd's engine that runs
 * no Python: its outermost frame is the pseudo frame "[autograd backward]". */
int mt_frames_autograd_worker(mt_frames *f, uint32_t leaf);
/* When stack leaf passes through the places where Python enters autograd's engine (Tensor.backward
 * in torch/_tensor.py; backward or grad in torch/autograd/__init__.py): the stack, a prefix of
 * leaf, whose innermost frame is the Python frame that called the outermost of them (the entry
 * itself when no Python frame called it). 0 when it does not pass through them. */
uint32_t mt_frames_backward_caller(mt_frames *f, uint32_t leaf);

/* ---- Tracker ----------------------------------------------------------------------------------- */

/* Kind families: a FREE matches the live ALLOC of the same (device, family, address). */
typedef enum mt_family {
    MT_FAM_LINEAR = 0,     /* DEVICE, PITCH, ASYNC, MANAGED (one cuMemFree frees any of them);
                              ARRAY (its handle is no device address: nothing else matches it) */
    MT_FAM_PINNED = 1,     /* HOST_PINNED (device forced to -1) */
    MT_FAM_REGISTERED = 2, /* HOST_REGISTERED (device forced to -1) */
    MT_FAM_VMM_RESERVE = 3,
    MT_FAM_VMM_PHYSICAL = 4,
    MT_FAM_DRIVER = 5,
    MT_FAM_OTHER = 6,  /* UNKNOWN/POOL kinds: tracked, never counted */
    MT_FAM_TENSOR = 7, /* TENSOR: blocks inside segments, freed only by tensor frees */
    MT_FAM_MAX_ = 8,
} mt_family;

/* One allocation while it lives. */
typedef struct mt_lifetime {
    uint64_t address, bytes, start_ns, stream, aux;
    uint64_t serial; /* 1, 2, ... in allocation order: a unique id for the lifetime */
    uint64_t start_seq; /* number of the ALLOC event that started it (mt_tracker_seq) */
    uint32_t stack, tid, context;
    int32_t device; /* -1 for host kinds */
    uint32_t extra_refs; /* VMM handles: references taken since (cuMemRetainAllocationHandle);
                            IPC mappings: opens of the same handle since (cuIpcOpenMemHandle gives
                            the same address again); the lifetime ends with the release that
                            finds none left */
    uint16_t flags;
    uint8_t kind, family;
    uint8_t category;    /* mt_category, for a tensor when the tracker has a categorizer */
    uint8_t prior_category; /* the category before its promotion (valid if promoted_at) */
    uint32_t promoted_at;   /* phase ends (backward + optimizer) counted when it was promoted;
                               0 = never: the category it had at an earlier phase end is
                               mt_category_at */
} mt_lifetime;

typedef enum mt_end_reason {
    MT_END_FREE = 0,        /* a matching FREE */
    MT_END_REPLACED = 1,    /* a new ALLOC at the same address while this one was live */
    MT_END_CTX_DESTROY = 2, /* its context was destroyed */
    MT_END_TRACE_END = 3,   /* still live when the trace ended (mt_tracker_finish) */
} mt_end_reason;

/* Counters of one device (or of host memory: is_host). All bytes. */
/* What a tensor is for (record --tensors; categories.c, docs/analysis.md lists the rules). */
typedef enum mt_category {
    MT_CAT_NONE = 0, /* not a tensor */
    MT_CAT_PARAMETERS,
    MT_CAT_UNSHARDED,      /* FSDP's all-gathered weights: the whole parameters of the modules it
                              is running, beside this rank's shards (the parameters) */
    MT_CAT_REPLICAS,       /* DataParallel's copies of the weights on its other GPUs, made again
                              at every forward pass */
    MT_CAT_GRADIENTS,
    MT_CAT_OPTIMIZER_STATE,
    MT_CAT_OPTIMIZER_TEMP, /* optimizer step temporaries */
    MT_CAT_ACTIVATIONS,
    MT_CAT_KV_CACHE,       /* an inference loop's keys and values (transformers' cache_utils.py,
                              a *kv_cache* / *KVCache* / *KVPool* function) */
    MT_CAT_GENERATION,     /* the decoding loop's own tensors outside the model (transformers'
                              generation/: scores, beams, token ids) */
    MT_CAT_BACKWARD_TEMP,  /* backward temporaries */
    MT_CAT_INPUTS,
    MT_CAT_CHECKPOINT,     /* loaded onto the GPU by torch.load (torch/serialization.py) */
    MT_CAT_COMPILATION,    /* torch.compile's own work: compiling, and autotuning kernels */
    MT_CAT_WORKSPACE,      /* a library's workspace taken from the allocator (cuBLAS's per handle) */
    MT_CAT_OTHER,
    MT_CAT_BUILTIN_,       /* user categories (a rules file) follow */
    MT_CAT_MAX = 32,
} mt_category;

typedef struct mt_usage {
    int32_t device; /* CUDA ordinal; -1 with is_host = 0: device memory of unknown device */
    int is_host;
    uint64_t in_use;     /* device bytes: DEVICE+PITCH+ASYNC+MANAGED+VMM_PHYSICAL+DRIVER
                            (host: HOST_PINNED+HOST_REGISTERED) */
    uint64_t api_in_use; /* the same without DRIVER */
    uint64_t by_kind[MT_KIND_MAX_];
    uint64_t by_kind_peak[MT_KIND_MAX_]; /* each kind's own high-water (any time) */
    /* the first moment in_use reached its maximum: CLOCK_MONOTONIC ns as recorded (the reports'
     * *_time_ns fields are relative to the trace's start), and the event number */
    uint64_t peak, peak_mono_ns, peak_seq;
    uint64_t api_peak, api_peak_mono_ns;
    uint64_t alloc_bytes, alloc_count, free_count, failed_count, zero_byte_allocs;
    uint64_t vmm_reserved, vmm_reserved_peak, vmm_mapped, vmm_mapped_peak;
    uint64_t pool_reserved, pool_reserved_peak; /* sum over pools of the last POOL_RESERVED */
    int has_pool_info;                          /* a POOL_RESERVED was seen for this device */
    /* PyTorch's caching allocator, when the trace shows it */
    uint64_t segment_bytes, segment_peak; /* live MT_EF_SEGMENT allocations: its reservation,
                                             torch.cuda.memory_reserved() (peak: max_...) */
    uint64_t tensor_counter_peak; /* the largest torch.cuda.memory_allocated() the allocator itself
                                     reported with a TENSOR event (aux): its max_memory_allocated(),
                                     to check by_kind_peak[MT_KIND_TENSOR] against */
    uint64_t captured_count, captured_bytes; /* allocations made during CUDA graph capture */
    /* another process's memory mapped here (cuIpcOpenMemHandle, MT_EF_IMPORTED): counted in the
     * exporter's process, never in in_use; said apart so that what this process uses is visible */
    uint64_t imported, imported_peak;
    /* live tensor bytes by their category now (with a categorizer, mt_tracker_set_categorizer):
     * a backward tensor counts as a backward temporary until its pass has ended */
    uint64_t by_category[MT_CAT_MAX];
} mt_usage;

/* Highest device ordinal the compactor accepts (CUDA ordinals are dense from 0; no machine has
 * this many GPUs). Events naming an ordinal outside -1..this are ignored and counted. */
#define MT_MAX_DEVICE_ORDINAL 255

/* Things that went wrong in the event stream; counted, never fatal. */
typedef struct mt_anomalies {
    uint64_t unmatched_frees; /* FREE with no live ALLOC (and not a recent double free) */
    uint64_t double_frees;    /* FREE of an address freed recently and not reallocated since */
    uint64_t replaced;        /* ALLOC at an address already live: old lifetime closed */
    uint64_t partial_unmaps;  /* UNMAP covering only part of a mapped range */
    uint64_t ctx_destroy_released; /* lifetimes ended by MT_OP_CTX_DESTROY */
    uint64_t unknown_events;  /* events of an op the tracker does not know (a newer writer) */
    uint64_t unknown_device;  /* device allocations whose device the recorder could not tell:
                                 tracked (a free still matches them), counted on no device */
    uint64_t retained;        /* references taken on live VMM handles (not anomalies: NCCL does it) */
    uint64_t bad_devices;     /* events ignored: device ordinal outside -1..MT_MAX_DEVICE_ORDINAL */
    uint64_t bad_stack_nodes; /* stack nodes whose parent id is not below their own (corrupt:
                                 their paths end there); counted by the frames, see analyze.c */
} mt_anomalies;

typedef struct mt_tracker mt_tracker;

typedef struct mt_tracker_hooks {
    void *ctx;
    /* A lifetime ended (free, replaced, context destroyed, or finish). May be NULL. */
    void (*on_release)(void *ctx, const mt_lifetime *l, uint64_t end_ns, mt_end_reason why);
    /* A device's counters changed at time_ns (after the change). May be NULL. */
    void (*on_usage)(void *ctx, const mt_usage *u, uint64_t time_ns);
    /* With a categorizer: a backward pass or optimizer step (MT_PHASE_*) has ended and the live
     * tensors were promoted, before the event that told is applied. May be NULL. */
    void (*on_phase_end)(void *ctx, int phase, uint64_t time_ns);
    /* A lifetime began: an ALLOC entered the live set (after any lifetime it replaced ended,
     * before on_usage). VMM_MAP ranges are mappings, not lifetimes. May be NULL. */
    void (*on_start)(void *ctx, const mt_lifetime *l);
} mt_tracker_hooks;

/* ---- Categories: what a tensor is for (categories.c; docs/analysis.md lists the rules) --------- */


typedef struct mt_categorizer mt_categorizer;

enum { MT_PHASE_NONE = 0, MT_PHASE_FORWARD, MT_PHASE_BACKWARD, MT_PHASE_OPTIMIZER };

mt_categorizer *mt_categorizer_new(mt_frames *f);
void mt_categorizer_free(mt_categorizer *c);
/* User rules, one per line: "CATEGORY <- PATTERN" (a substring of any frame name; a new
 * CATEGORY name makes a category), '#' comments; tried first, in order. -1 with a reason. */
int mt_categorizer_load_rules(mt_categorizer *c, const char *path, char *err, size_t errlen);
const char *mt_category_name(const mt_categorizer *c, unsigned category);
size_t mt_category_count(const mt_categorizer *c); /* built-in + user categories */
/* The optimizer whose steps the trace saw ("AdamW", "SGD (momentum)", ...; NULL none) and the
 * size of its textbook state in parameter sizes (Adam: 2). */
const char *mt_categorizer_optimizer(const mt_categorizer *c, uint64_t *state_in_w);
/* 1 when, since the replay began, an optimizer step ended and no tensor was made as state or
 * outlived a step: the optimizer keeps none (SGD without momentum; its weight decay's temporaries
 * die in the step). Read when the backward pass after a peak ends (mt_device_report's
 * optimizer_stateless), so that one pass and two agree. */
int mt_categorizer_stateless(const mt_categorizer *c);

/* How far apart a tensor's block and its parameter's may be and still pair (categories.c): the
 * caching allocator hands out a whole block when splitting it would leave less than 1 MiB, and
 * rounds sizes over 10 MiB up to 2 MiB. */
#define MT_FIT_SLACK (2ull << 20)

/* How tensors of one category (gradients, optimizer state) compare with the parameters they
 * mirror: each is paired with a parameter of its size, or failing that the parameter nearest in
 * size within 2 MiB either way (a caching-allocator block is often larger than the tensor in it:
 * the tensor's, or its parameter's). Every parameter may be paired `copies` times (Adam's state:
 * 2). */
typedef struct mt_category_fit {
    uint64_t paired, n_paired;   /* the bytes the paired tensors mirror (the smaller of the two
                                    blocks: the nearer to the tensors' own size), how many */
    uint64_t larger, n_larger;   /* bytes the paired tensors are larger than their parameters */
    uint64_t smaller, n_smaller; /* bytes their parameters' blocks are larger than the tensors */
    uint64_t unpaired, n_unpaired; /* tensors like no parameter */
    uint64_t params_left, n_params_left; /* pairings left: parameters (times copies) unmirrored */
} mt_category_fit;
int mt_category_fit_compute(const uint64_t *params, size_t n_params, const uint64_t *sizes, size_t n,
                            unsigned copies, mt_category_fit *out);

/* 1 when the trace had a backward pass, ended or not: a tensor of one was seen (an inference run
 * has none, and no gradient to expect). */
int mt_categorizer_saw_backward(const mt_categorizer *c);
/* 1 when a stack of a sparse embedding's backward was seen (Embedding or EmbeddingBag with
 * sparse=True): its gradient, the rows a batch touched, is the size of no parameter. */
int mt_categorizer_saw_sparse_grad(const mt_categorizer *c);
/* Which data-parallel wrapper's tensors were seen, as bits: MT_SAW_DDP (DistributedDataParallel's
 * reducer: its gradient buckets), MT_SAW_FSDP (FSDP's shards, all-gathers or reduce-scatters),
 * MT_SAW_DP (torch.nn.DataParallel: a Python frame of data_parallel.py). */
enum { MT_SAW_DDP = 1, MT_SAW_FSDP = 2, MT_SAW_DP = 4 };
unsigned mt_categorizer_saw_parallel(const mt_categorizer *c);
/* Backward passes and optimizer steps ended so far (each a promotion of the live set). */
void mt_categorizer_phases(const mt_categorizer *c, uint64_t *backward_ends,
                           uint64_t *optimizer_ends);

mt_tracker *mt_tracker_new(const mt_tracker_hooks *hooks); /* hooks may be NULL */
/* With a categorizer the tracker gives every tensor its category as it is allocated, and promotes
 * live ones when a phase ends (backward temporaries that outlive the backward pass are gradients,
 * optimizer temporaries that outlive the step are state). The categorizer must outlive it. */
void mt_tracker_set_categorizer(mt_tracker *t, mt_categorizer *c);
void mt_tracker_free(mt_tracker *t);
/* Applies one event. Returns 0, or -1 when out of memory (the event is then lost). */
int mt_tracker_event(mt_tracker *t, const mt_event *e);
/* Number of events applied so far (the seq of the last one). */
uint64_t mt_tracker_seq(const mt_tracker *t);
/* Ends every live lifetime with MT_END_TRACE_END (on_release) and empties the live set. */
void mt_tracker_finish(mt_tracker *t, uint64_t end_ns);
/* Visits every live lifetime (any order). fn must not call back into the tracker. */
void mt_tracker_foreach_live(const mt_tracker *t, void (*fn)(void *ctx, const mt_lifetime *l),
                             void *ctx);
size_t mt_tracker_live_count(const mt_tracker *t);
/* Devices seen so far, host slot included (is_host). Valid until the next mt_tracker_event. */
size_t mt_tracker_usages(const mt_tracker *t, const mt_usage **out);
/* The slot of one device (or of host memory), NULL when not seen. Same validity. */
const mt_usage *mt_tracker_usage(const mt_tracker *t, int32_t device, int is_host);
/* Takes back the count of a failed request (MT_OP_FAILED) that turned out not to be one. */
void mt_tracker_uncount_failed(mt_tracker *t, int32_t device, int is_host);
const mt_anomalies *mt_tracker_anomalies(const mt_tracker *t);

/* ---- Analysis ---------------------------------------------------------------------------------- */

/* Bytes and allocation count attributed to one stack. driver = 1: the "[driver internal]" pseudo
 * stack (DRIVER-kind allocations), stack is then ignored. */
typedef struct mt_stack_stat {
    uint32_t stack;
    uint8_t driver;
    uint8_t category; /* mt_category of these bytes (peak lists of tensor traces), else 0 */
    uint64_t bytes, count;
} mt_stack_stat;

typedef struct mt_stack_list {
    mt_stack_stat *v; /* sorted by bytes, largest first (ties: stack id) */
    size_t n;
} mt_stack_list;

#define MT_TIMELINE_POINTS 256

/* One timeline bucket: the moment of highest in_use inside it. */
typedef struct mt_timeline_point {
    uint64_t time_ns; /* since trace start */
    uint64_t in_use;
    uint64_t by_kind[MT_KIND_MAX_];
} mt_timeline_point;

/* ---- Reconciliation: the four numbers people confuse --------------------------------------------
 *   process total (NVML, what nvidia-smi shows)
 *     = CUDA context & driver (the remainder; includes the driver-internal bytes the trace saw)
 *     + allocator reserved  (caching allocator segments, or the pools' reservation in tensor mode)
 *         = tensors allocated + cached but free   (known only in tensor mode)
 *     + other libraries' direct allocations (by owner: cuBLAS, cuDNN, NCCL, first user frame)
 * Rules and caveats are in docs/analysis.md and src/compact/breakdown.c. */

#define MT_MAX_OWNERS 8 /* owners listed; the rest are summed into "[other owners]" */

typedef struct mt_owner_bytes {
    const char *owner; /* owned by the analysis' frames (or static) */
    uint64_t bytes, count;
} mt_owner_bytes;

/* Why the process total of a breakdown is unknown. */
typedef enum mt_process_unknown {
    MT_PROCESS_KNOWN = 0,
    MT_PROCESS_NO_SAMPLES = 1,   /* the trace has no NVML sample for the device */
    MT_PROCESS_LAGGED = 2,       /* the samples around the moment read less than the trace had
                                    live then: the ~50 ms sampler missed a burst */
} mt_process_unknown;

typedef struct mt_breakdown {
    int valid;                 /* computed */
    uint64_t time_ns;          /* the moment, since trace start */
    int process_known;         /* an NVML sample consistent with the moment exists */
    uint64_t process_bytes;    /* that sample's value */
    uint64_t process_sample_ns; /* its time, since trace start */
    int process_sample_same;   /* the trace had the moment's bytes live when it was read: the
                                  total is the moment's (else it is the sample after or before) */
    int process_sample_after;  /* it was read after the moment */
    mt_process_unknown process_unknown; /* why not, when !process_known */
    uint64_t visible_bytes;    /* what NVML must see of the trace at the moment
                                  (mt_breakdown_visible): a sample reading less missed it */
    uint64_t before_ns, before_bytes, after_ns, after_bytes; /* MT_PROCESS_LAGGED: the samples
                                  around the moment (after_ns = 0: none after it) */
    int64_t context_bytes;     /* process - reserved - other, never negative */
    uint64_t driver_bytes;     /* DRIVER-kind bytes the trace saw (inside context_bytes) */
    uint64_t reserved_bytes;   /* caching_bytes + pool_bytes */
    uint64_t caching_bytes;    /* live DEVICE/VMM_PHYSICAL allocations of the caching allocator
                                  (PyTorch's), or of another allocator that caches (XLA, CuPy) */
    uint64_t torch_bytes;      /* the part of caching_bytes that is PyTorch's segments */
    const char *cache_owner;   /* the allocator of the rest (MT_OWNER_XLA_ALLOCATOR, ...), or
                                  "several allocators"; NULL when caching_bytes are all PyTorch's */
    int has_pool;              /* POOL_RESERVED seen for the device (tensor mode) */
    uint64_t pool_bytes;       /* max(sum of the pools' reservations, live async bytes) */
    int allocated_known;       /* = has_pool */
    uint64_t allocated_bytes;  /* live async bytes: tensors */
    uint64_t cached_free_bytes; /* reserved - allocated, when known */
    uint64_t other_bytes;      /* every other live API allocation */
    mt_owner_bytes owners[MT_MAX_OWNERS]; /* other_bytes by owner, largest first */
    size_t n_owners;
} mt_breakdown;

/* Who holds memory still live at the end of a trace. Allocators keep their cache until exit by
 * design (PyTorch's caching allocator, XLA's preallocation, CuPy's pool): not a leak; nor are
 * libraries' workspaces or the driver's own allocations. The rest is the program's. */
typedef enum mt_holder_kind {
    MT_HOLD_CACHE = 0,   /* an allocator's cached segments (mt_frames_owner says allocator) */
    MT_HOLD_LIBRARY = 1, /* cuBLAS, cuDNN, NCCL workspaces and handles */
    MT_HOLD_DRIVER = 2,  /* driver-internal allocations (released with the context) */
    MT_HOLD_PROGRAM = 3, /* everything else: leaks, or memory the program still referenced */
} mt_holder_kind;

#define MT_MAX_END_HOLDERS 8 /* holders listed; the rest summed into the last one of its kind */

typedef struct mt_end_holder {
    const char *holder; /* owner name (static or owned by the frames), or "program" / "driver" */
    mt_holder_kind kind;
    uint64_t bytes, count;
} mt_end_holder;

typedef struct mt_sample_point {
    uint64_t time_ns; /* since trace start */
    uint64_t value;
    uint64_t api_visible; /* NVML samples: mt_breakdown_visible less driver-internal bytes on the
                             device when the sample was read in file order (samples and events of
                             other threads interleave in the file within the recorder's flush
                             delay; driver-internal records come later still) */
} mt_sample_point;

typedef struct mt_device_report {
    mt_usage u;                    /* counters at the end of the trace; peaks over the trace;
                                      times here are absolute (trace clock) */
    uint64_t peak_time_ns;         /* since trace start */
    uint64_t api_peak_time_ns;     /* since trace start */
    uint64_t by_kind_at_peak[MT_KIND_MAX_];
    uint64_t driver_at_peak;       /* DRIVER bytes inside peak */
    uint64_t driver_guessed;       /* DRIVER bytes allocated here by the reader's guess
                                      (MT_EF_DEVICE_GUESSED: a context's static memory, which
                                      CUPTI gives no device, in a process with several) */
    const char *name;              /* from MT_REC_DEVICE, or NULL */
    const char *uuid;              /* from MT_REC_DEVICE ("GPU-..."), or NULL when it has none */
    uint64_t capacity;             /* device total bytes from MT_REC_DEVICE, 0 = unknown */
    mt_stack_list peak_stacks;     /* live at the peak, by stack; sums to u.peak exactly */
    mt_stack_list live_end;        /* live at the end of the trace, by stack (sums to u.in_use) */
    mt_end_holder end_holders[MT_MAX_END_HOLDERS]; /* the same by holder, largest first */
    size_t n_end_holders;
    mt_stack_list leaks;           /* live at the end and held by the program (MT_HOLD_PROGRAM):
                                      leaks, or tensors still referenced at exit */
    uint64_t leak_bytes, leak_count;
    mt_stack_list allocs;          /* bytes ever allocated, by stack */
    mt_timeline_point *timeline;   /* n_timeline points, time order */
    size_t n_timeline;
    mt_breakdown at_peak;          /* reconciliation at the peak (peak_time_ns) */
    mt_breakdown at_end;           /* ... and when the trace ended */
    mt_sample_point *nvml;         /* MT_COUNTER_NVML_PROCESS_BYTES samples, file order */
    size_t n_nvml;
    uint64_t nvml_max, nvml_max_time_ns; /* the largest sample (first time); valid if n_nvml */
    /* --tensors: bytes live at the peak by mt_category (the tensors' final categories: a backward
     * or optimizer tensor of the peak is categorized by whether it outlived its phase);
     * categories_known = 0 for a trace without tensors */
    int categories_known;
    uint64_t by_category_at_peak[MT_CAT_MAX];
    /* the tensors live when the first backward pass to end after the peak had ended (every
     * gradient is then live; the peak is often in a forward pass, when none is), if one did */
    int after_backward_known;
    uint64_t after_backward_time_ns; /* since trace start */
    int optimizer_stateless; /* then: mt_categorizer_stateless (an optimizer step had ended and
                                left no state) */
    uint64_t by_category_after_backward[MT_CAT_MAX];
    /* gradients [0] and optimizer state [1] against the parameters live at the same moment */
    mt_category_fit fit_at_peak[2], fit_after_backward[2];
} mt_device_report;

/* ---- By line: memory per Python source line --------------------------------------------------- */

typedef struct mt_line_stat {
    uint32_t code, line;          /* Python code id and line */
    const char *file, *qualname;  /* owned by the frames ("?" when the code is unknown) */
    uint64_t alloc_bytes, alloc_count; /* ALLOCs ever attributed to the line */
    uint64_t peak_bytes, peak_count;   /* attributed bytes live at the device's peak */
} mt_line_stat;

/* Attributes every allocation of device report d to the innermost Python frame of its stack (with
 * file != NULL: the innermost frame whose file matches it; stacks without one are skipped), and
 * sums per (code, line). Sorted by peak_bytes, then alloc_bytes, largest first. *out is malloc'd
 * (NULL when empty). Returns 0, -1 on OOM. */
int mt_by_line(mt_frames *f, const mt_device_report *d, const char *file, mt_line_stat **out,
               size_t *n);

typedef struct mt_failed_request {
    uint64_t time_ns; /* since trace start */
    int32_t device;
    uint8_t kind;
    uint8_t is_host; /* host memory: a host kind, or memory asked for on the host (-1 device) */
    uint16_t result;
    uint32_t stack, tid;
    uint64_t bytes;    /* requested */
    uint64_t stream;
    uint64_t in_use;   /* device bytes in use at that moment */
    int pool_free_known;
    uint64_t pool_free; /* sum of POOL_RESERVED - live ASYNC bytes on the device (clamped at 0) */
    mt_stack_list live; /* what was live on that device, by stack */
    /* PyTorch's caching allocator. Kind TENSOR is its out-of-memory report, made as it raises
     * torch.OutOfMemoryError (recorded in every mode): */
    uint64_t torch_allocated; /* its memory_allocated() then (the report's own counter); for
                                 torch_async, the device's live async bytes then */
    uint64_t torch_reserved;  /* its memory_reserved() then: its segments live in the trace
                                 (also for a refused request of its own, a segment) */
    uint32_t driver_refusals; /* its device requests the driver refused on that thread, since its
                                 last that succeeded: 0 when the allocator refused on its own (a
                                 limit such as torch.cuda.set_per_process_memory_fraction) */
    /* A device request of the allocator's (a segment) that the driver refused: what came of it
     * on that thread. MT_FAILED_RAISED: `raised_as` is that OutOfMemoryError's index in failed[]
     * (-1 when it is past the ones kept). */
    uint8_t outcome;
    int32_t raised_as;
    uint64_t event_index; /* its place among the trace's events (1: the first) */
    /* A request made in autograd's backward pass, on one of the engine's worker threads: the
     * backward() call that started that pass (backward_calls.c). backward_stack is the stack of
     * the Python frame that called it (mt_frames_backward_caller), 0 when not known: a trace
     * that cannot tell (mt_backward_calls_recorded), or no such call before it. backward_time_ns:
     * when, since trace start. */
    uint32_t backward_stack;
    uint64_t backward_time_ns;
    /* PyTorch's other backend (backend:cudaMallocAsync, --tensors=async) makes no out-of-memory
     * report: a cudaMallocAsync of its own (MT_OWNER_ASYNC_ALLOCATOR on the stack) that the
     * driver refused for memory is the torch.OutOfMemoryError itself, raised at once (it has no
     * cache to free and does not ask again). Set by mt_analyze (failed_ties.c). */
    uint8_t torch_async;
    /* record --tensors, a GPU's request: the tensors live on its device at that moment by what
     * they were for then (mt_category; until a backward pass ends, a gradient it handed to .grad
     * without a copy counts among its backward temporaries). Their sum is the live tensor bytes
     * then: PyTorch's memory_allocated(). Set by mt_analyze (failure_replay.c). */
    int categories_known;
    uint64_t by_category[MT_CAT_MAX];
} mt_failed_request;

/* The request is a torch.OutOfMemoryError: the caching allocator's report, or torch_async. */
static inline int mt_failed_is_torch_oom(const mt_failed_request *f)
{
    return f->kind == MT_KIND_TENSOR || f->torch_async;
}

enum {
    MT_FAILED_UNTOLD = 0, /* not the caching allocator's, or the trace ends first */
    MT_FAILED_RECOVERED,  /* its next device request on that thread succeeded (it had freed its
                             cached blocks and tried again) */
    MT_FAILED_RAISED,     /* it raised torch.OutOfMemoryError instead */
};

#define MT_MAX_FAILED_KEPT 64 /* failed requests with full forensics; all are counted */

/* What recording cost the program on its own threads, read back from the recorder's cost notes
 * at exit (MT_COST_NOTE_*, trace.h), from its sampled self-timing; when those are missing (the
 * process was killed), from the last of its running totals (MT_COST_NOTE_RUNNING), which cover
 * the recording up to until_ns. All 0 when the trace has neither (a recorder killed in its first
 * seconds, or one that predates the notes). */
typedef struct mt_recording_cost {
    mt_cost_part tensors;   /* PyTorch's allocator's reports (--tensors) */
    int tensor_whole;       /* tensors.ns is the whole report's (time stamp included), not the
                               timed part's */
    mt_cost_part callbacks; /* CUPTI API callbacks, entry and exit */
    mt_cost_part hooked;    /* the cudaMallocAsync/cudaFreeAsync stand-ins */
    mt_cost_part rare;      /* rare, slow work, timed every time (timed == calls); not in the
                               parts above (recorders since 2026-11-27) */
    uint64_t until_ns;      /* 0: the notes at exit, which cover the whole recording; else the
                               running totals' time (since the trace's start): they cover the
                               recording up to there */
    double writer_cpu_ns;   /* the writer thread's CPU time, and the time it ran (its note at */
    double writer_wall_ns;  /* exit, MT_COST_NOTE_WRITER; both 0 without): on none of the
                               program's threads, so not in the total */
} mt_recording_cost;

/* The total of the parts above, in ns (0 without any). */
double mt_recording_cost_ns(const mt_recording_cost *c);

/* Whether the writer thread's figures can be said: its note was read, and said some CPU time
 * (0.0 ms where its clock could not be read) over some time run. */
static inline int mt_cost_writer_known(const mt_recording_cost *c)
{
    return c->writer_cpu_ns > 0 && c->writer_wall_ns > 0;
}

/* Whether the trace saw driver-internal allocations and CUDA arrays, which only the recorder's
 * CUPTI activity records report (its notes say: MT_ACTIVITY_NOTE_*, trace.h). Where it did not,
 * their bytes are not known, not 0: reports say "not recorded". */
typedef enum mt_activity_state {
    MT_ACTIVITY_ON = 0,          /* (also a trace whose recorder did not say) */
    MT_ACTIVITY_OFF = 1,         /* record --activity off, the default with --tensors=async */
    MT_ACTIVITY_UNAVAILABLE = 2, /* CUPTI refused them */
    MT_ACTIVITY_STOPPED = 3,     /* from activity_stopped_ns on (another CUPTI client took them) */
} mt_activity_state;

typedef struct mt_analysis {
    char *path;
    mt_file_header header;
    uint32_t pid, ppid;
    char *comm, *cmdline, *hostname; /* "" when the trace has no PROCESS record */
    mt_frames *frames;
    mt_device_report *devices; /* GPU devices by ordinal (an ordinal -1 = unknown device last) */
    size_t n_devices;
    mt_device_report *host;    /* host pinned/registered memory; NULL when the trace has none */
    mt_failed_request *failed;
    size_t n_failed;           /* kept (<= MT_MAX_FAILED_KEPT) */
    uint64_t failed_total;
    uint64_t failed_retried; /* failed driver calls made again inside the same API call, which
                                succeeded: not in failed_total nor in failed (failed_ties.c) */
    uint64_t failed_probes;  /* cuMemCreate calls refused for the handle type they asked for and
                                made again at once with another, which succeeded: PyTorch's
                                expandable segments and NCCL ask for a fabric handle first. Not
                                in failed_total nor in failed (failed_ties.c) */
    mt_anomalies anomalies;
    uint64_t records, events;
    uint64_t dropped;          /* max(sum of DROPPED records, END.dropped) */
    int ended_cleanly;         /* an END record was read */
    int truncated;             /* the file ends inside a chunk */
    int passes;                /* reads of the trace the analysis took: 2 when its tensors were
                                  categorized by a second (the names they need came too late) */
    char *truncated_msg;
    uint64_t damaged_chunks;   /* damaged chunks stepped over (mt_read_damage): their records */
    uint64_t damaged_bytes;    /* are missing from every number; bytes = file bytes in them */
    char *damage_msg;          /* the first one, "PATH: offset N: reason"; NULL when none */
    int fd;                    /* the trace, open for the exporters' later reads (a temporary
                                  copy when it was given as a pipe); closed by mt_analysis_free */
    uint64_t first_ns, last_ns; /* event times since trace start */
    uint64_t duration_ns;       /* last event (or END) since trace start */
    char **warnings;            /* WARNING notes of the recorder */
    uint64_t *warning_times_ns; /* when each was noted, since trace start (parallel to warnings) */
    size_t n_warnings;
    mt_recording_cost cost;     /* from the recorder's notes at exit */
    mt_activity_state activity; /* whether driver-internal allocations and arrays were seen */
    uint64_t activity_stopped_ns; /* MT_ACTIVITY_STOPPED: since trace start, none seen after it */
    struct { uint32_t tid; char *name; } *threads;
    size_t n_threads;
    mt_categorizer *categories; /* names of the categories and the optimizer; NULL without tensors */
} mt_analysis;

/* "on", "off", "unavailable" or "stopped": report --json's `activity_records`. */
const char *mt_activity_name(mt_activity_state s);

/* 1 when every driver-internal allocation and CUDA array live at t (since trace start) is in
 * the trace, 0 when some may not be (mt_analysis.activity). */
static inline int mt_activity_saw(const mt_analysis *a, uint64_t t)
{
    return a->activity == MT_ACTIVITY_ON ||
           (a->activity == MT_ACTIVITY_STOPPED && t < a->activity_stopped_ns);
}

typedef struct mt_analyze_options {
    const char *category_rules; /* a rules file for the categories (mt_categorizer_load_rules) */
    /* Called now and then with the fraction of the file read (0..1) and the pass (1 or 2). */
    void (*progress)(void *ctx, int pass, double fraction);
    void *progress_ctx;
    int strict; /* a damaged chunk or a truncated file fails the analysis instead of being
                   stepped over and reported */
    /* Called with every event of the first pass, in file order (an exporter's own survey of the
     * trace, made without a read of its own: mt_chrome_survey_event). */
    void (*on_event)(void *ctx, const mt_event *e);
    void *event_ctx;
    /* Tensors are categorized by a second read even when the first could (the way every trace
     * was analysed before 2026-11-28; tests compare the two). */
    int two_passes;
} mt_analyze_options;

/* Reads the trace (twice when pass 1 cannot categorize its tensors, mt_analysis.passes) and
 * fills *out. A truncated file is analysed up to where it ends, and
 * damaged chunks are stepped over (both said in the analysis) unless opt->strict; an unreadable
 * file, or a damaged one in strict mode, fails: returns -1 with a one-line reason in err. */
int mt_analyze(const char *path, const mt_analyze_options *opt, mt_analysis **out, char *err,
               size_t errlen);
void mt_analysis_free(mt_analysis *a);
/* 1 when the trace can name the backward() call of a failed request of autograd's workers: its
 * tensors are events (record --tensors, or PyTorch's backend:cudaMallocAsync, whose every tensor is
 * a cudaMallocAsync), so backward()'s initial gradient is one (backward_calls.c). */
int mt_backward_calls_recorded(const mt_analysis *a);
/* The root frame of a device report: "cuda:N", "cuda:?" or "host". */
const char *mt_device_root_name(const mt_device_report *d, char *buf, size_t len);
/* The same for where a failed request was made (a pinned or registered host request: "host"). */
const char *mt_failed_root_name(const mt_failed_request *f, char *buf, size_t len);

/* ---- PyTorch's allocator numbers (allocator_peaks.c) ------------------------------------------- */

/* A device's torch.cuda.max_memory_allocated() and max_memory_reserved(), from whichever records
 * the trace has. "Allocated" is known only when the tensors are in the trace. */
typedef struct mt_allocator_peaks {
    int allocated_known;
    uint64_t allocated_peak;  /* record --tensors: the peak of live tensors (MT_KIND_TENSOR);
                                 --tensors=async (backend:cudaMallocAsync, its pools seen): the
                                 peak of live cudaMallocAsync bytes (MT_KIND_ASYNC) */
    uint8_t allocated_kind;   /* MT_KIND_TENSOR or MT_KIND_ASYNC (when known) */
    uint64_t counter_peak;    /* tensor mode: PyTorch's own counter as it reported it
                                 (u.tensor_counter_peak); equal to allocated_peak when memtrace
                                 missed no report; 0 otherwise */
    int reserved_known;
    uint64_t reserved_peak;   /* PyTorch's segments (MT_EF_SEGMENT) when the trace has them, else
                                 the pools' reservation (POOL_RESERVED) */
    const char *reserved_source; /* "PyTorch segments", "pool reservations" or NULL */
} mt_allocator_peaks;

/* Fills p for device report d of analysis a. A trace recorded with --tensors has tensor events on
 * some device: then a device without any has an allocated peak of 0 (known). Same for a
 * backend:cudaMallocAsync trace. Host memory has neither. */
void mt_allocator_peaks_of(const mt_analysis *a, const mt_device_report *d, mt_allocator_peaks *p);
/* The kind that holds a's allocated bytes: MT_KIND_TENSOR (record --tensors), MT_KIND_ASYNC
 * (backend:cudaMallocAsync with its pools seen), or -1 when the trace cannot tell them. */
int mt_allocated_kind(const mt_analysis *a);

/* What was live of one allocation kind on device d at the first moment that kind reached its own
 * peak (d->u.by_kind_peak[kind]): the stacks of the tensors at the tensor peak. Re-reads the trace
 * (one pass, stopping there). *time_ns (may be NULL) gets the moment, since the trace start. 0, or
 * -1 with a one-line reason in err. */
int mt_kind_peak_stacks(const mt_analysis *a, const mt_device_report *d, unsigned kind,
                        mt_stack_list *out, uint64_t *time_ns, char *err, size_t errlen);

/* ---- Budgets (budget.c): `memtrace check` ------------------------------------------------------ */

typedef enum mt_budget_kind {
    MT_BUDGET_PEAK = 0,           /* a GPU's peak of device bytes (peak_bytes) */
    MT_BUDGET_ALLOCATED_PEAK = 1, /* max_memory_allocated (mt_allocator_peaks): refused on a trace
                                     without tensors */
    MT_BUDGET_LIVE_AT_EXIT = 2,   /* bytes held by the program at the end (leak_bytes): never an
                                     allocator's cache, a library's workspace or the driver's */
    MT_BUDGET_FAILED = 3,         /* failed allocation requests (a count) */
    MT_BUDGET_OTHER_GPUS = 4,     /* memory on each GPU other than the trace's own (mt_own_gpu):
                                     NVML's largest sample there (the CUDA context included), or
                                     the trace's peak there when larger or without samples */
    MT_BUDGETS_ = 5,
} mt_budget_kind;

#define MT_BUDGET_ALL_DEVICES (-1000) /* mt_budgets.device: every GPU of the trace */

typedef struct mt_budgets {
    int device;               /* an ordinal, or MT_BUDGET_ALL_DEVICES */
    int set[MT_BUDGETS_];     /* which budgets apply */
    uint64_t limit[MT_BUDGETS_]; /* bytes, or a count for MT_BUDGET_FAILED */
} mt_budgets;

/* One budget on one device (or, for failed requests without a device, the whole trace). */
typedef struct mt_verdict {
    mt_budget_kind kind;
    const mt_device_report *d; /* NULL: the whole trace (failed requests), or a trace with no GPU */
    uint64_t value, limit;
    int exceeded;              /* value > limit */
    uint64_t time_ns;          /* since the trace start: when a peak was first reached (the
                                  allocated peak's moment comes from a re-read); live at exit:
                                  the end of the trace; failed requests: 0 */
    uint64_t counter;          /* allocated peak in tensor mode: PyTorch's own counter; on another
                                  GPU: NVML's largest sample there (0: none) */
    /* When exceeded, what makes value, largest first: the stacks live at the peak, the tensors live
     * at the tensor peak (a re-read of the trace), what the program held at exit, or the stacks of
     * the failed requests (bytes = bytes requested). Empty when the budget holds. */
    mt_stack_list stacks;
    uint64_t stacks_whole;     /* what the stacks' shares are of */
} mt_verdict;

/* The verdicts of every budget set in b on analysis a, in device order (per device: peak,
 * allocated peak, live at exit; failed requests per device with b->device), then one per GPU
 * other than the trace's own (or one with d = NULL and value 0 when there is none), then failed
 * requests once for the trace without b->device. 0; -1 with a one-line reason in err when the budgets cannot be checked on
 * this trace (no such device, no tensors for an allocated-peak budget) or out of memory. */
int mt_check_budgets(const mt_analysis *a, const mt_budgets *b, mt_verdict **out, size_t *n,
                     char *err, size_t errlen);
void mt_verdicts_free(mt_verdict *v, size_t n);
/* "peak", "allocated peak", "live at exit", "failed requests", "on another GPU". */
const char *mt_budget_name(mt_budget_kind k);

/* ---- Comparing two runs (compare.c): `memtrace diff` ------------------------------------------ */

/* One stack in both runs, matched by its frames' names (the user view for Python programs, short
 * names; CUDA's own leaf frames and unsymbolized frames left out of the match, locations reduced to
 * their file name), never by stack id or address: runs on other machines, pids and builds and in
 * other directories compare. */
typedef struct mt_stack_delta {
    const char *const *frames; /* names, root first: NEW's when it has the stack, else BASE's */
    const uint8_t *flags;      /* MT_FF_* of each name */
    size_t n_frames;
    uint64_t base_bytes, base_count, new_bytes, new_count; /* count 0: not in that run */
    int moved;                 /* matched only once line numbers were ignored (the code moved) */
} mt_stack_delta;

/* One Python line at the peak in both runs, matched by (file name, function, line). */
typedef struct mt_line_delta {
    const char *file;          /* short path (mt_frames_short_path) */
    const char *function;
    uint32_t base_line, new_line; /* 0: not in that run */
    uint64_t base_bytes, new_bytes;  /* live at the peak */
    uint64_t base_alloc, new_alloc;  /* ever allocated */
    int moved;                 /* matched by file and function once line numbers were ignored */
} mt_line_delta;

typedef struct mt_device_delta {
    int32_t device;                       /* CUDA ordinal (-1: the unknown device): NEW's GPU when
                                             it has one here, else BASE's; base->u.device and
                                             new_->u.device differ only for the GPUs paired across
                                             ordinals (mt_diff.paired_by) */
    const mt_device_report *base, *new_;  /* NULL: the device is not in that run */
    mt_allocator_peaks base_alloc, new_alloc;
    mt_stack_delta *stacks;  /* live at either peak; change (new - base) descending */
    size_t n_stacks;
    mt_stack_delta *leaks;   /* held by the program at either end; the same order */
    size_t n_leaks;
    mt_line_delta *lines;    /* Python lines live at either peak; the same order */
    size_t n_lines;
} mt_device_delta;

/* How the GPUs of the two runs are paired. Ordinals mean the same GPU in two runs of one
 * program, but not in two ranks of one job: rank 1 works on cuda:1 and may hold a stray context
 * on cuda:0 (a real pitfall), so pairing by ordinal would set rank 0's whole GPU against that
 * context. Each run's own GPU (mt_own_gpu) is then paired with the other's, and the rest by
 * ordinal: a stray context is still shown, against nothing or another stray one. */
typedef enum mt_pairing {
    MT_PAIR_AUTO = 0,    /* asked: own GPUs when the runs are different ranks of a job, or each
                            used one GPU (the others hold at most the driver's own memory) and
                            not the same one; else by ordinal */
    MT_PAIR_ORDINAL = 1, /* cuda:N with cuda:N */
    MT_PAIR_OWN = 2,     /* result: each run's own GPU with the other's, the rest by ordinal */
    MT_PAIR_CHOSEN = 3,  /* asked (`diff --devices A:B`): BASE's cuda:A with NEW's cuda:B, the
                            rest by ordinal */
} mt_pairing;

typedef struct mt_diff_pairing {
    mt_pairing how;                  /* MT_PAIR_AUTO, MT_PAIR_ORDINAL or MT_PAIR_CHOSEN */
    int32_t base_device, new_device; /* MT_PAIR_CHOSEN: the two ordinals */
} mt_diff_pairing;

/* The GPU a run works on: a rank's LOCAL_RANK device (the trace header) when the trace has that
 * GPU with more than the driver's own memory on it, else its GPU with the largest peak (the lower
 * ordinal on a tie); NULL without a GPU. *why (may be NULL) gets "LOCAL_RANK" or "largest peak". */
const mt_device_report *mt_own_gpu(const mt_analysis *a, const char **why);
/* A GPU on which the program allocated nothing: only driver-internal memory (a CUDA context made
 * there, often by mistake), api_peak 0. */
int mt_gpu_is_stray(const mt_device_report *d);
/* A GPU the trace knows from NVML's samples alone (analyze.c): NVML lists the process there (a
 * CUDA context), and nothing was allocated or asked for there. Its peak is a 0 at no moment. */
int mt_gpu_from_nvml_alone(const mt_device_report *d);

typedef struct mt_diff {
    const mt_analysis *base, *new_;
    mt_device_delta *devices; /* GPUs of either run: the pair across ordinals first (own or chosen
                                 GPUs), then the rest by ordinal */
    size_t n_devices;
    mt_pairing paired_by;     /* MT_PAIR_ORDINAL, MT_PAIR_OWN or MT_PAIR_CHOSEN */
    const char *pairing_reason; /* why, for the outputs: "the runs are different ranks", ...;
                                   NULL by ordinal */
    const char *base_own_why, *new_own_why; /* OWN: mt_own_gpu's why; CHOSEN: "--devices" */
    int modes_differ;         /* one run has tensors (or cudaMallocAsync pools), the other not:
                                 their peaks count different things */
    struct mt_diff_arena *arena; /* names and arrays the deltas point into */
} mt_diff;

/* Compares NEW with BASE. Frames are named in MT_NAME_SHORT (a base dir set on the analyses'
 * frames shapes what is shown; matching uses file names only). 0, or -1 when out of memory. */
int mt_diff_analyses(const mt_analysis *base, const mt_analysis *new_, mt_diff **out);
/* The same with the GPUs paired as p asks (NULL: MT_PAIR_AUTO, as mt_diff_analyses). 0; -1 with a
 * one-line reason in err when a chosen GPU is not in its run, or out of memory. */
int mt_diff_analyses_paired(const mt_analysis *base, const mt_analysis *new_,
                            const mt_diff_pairing *p, mt_diff **out, char *err, size_t errlen);
void mt_diff_free(mt_diff *d);
/* new - base as a signed number (saturating). */
int64_t mt_delta(uint64_t base, uint64_t new_);
/* NEW's peak over BASE's on dd's device in percent: (new - base) / base * 100; +infinity when only
 * NEW has bytes there, 0 when neither has, -100 when the device is gone. */
double mt_peak_change_pct(const mt_device_delta *dd);
/* 0 for a GPU that holds only driver memory in both runs (listed, never gated). */
int mt_diff_is_gated(const mt_device_delta *dd);
/* `diff --fail-on-increase PCT` on one device: 1 when it is gated and its peak grew by more than
 * pct percent. */
int mt_diff_device_exceeds(const mt_device_delta *dd, double pct);
/* The same for the whole diff: 1 when some device exceeds. */
int mt_diff_exceeds(const mt_diff *d, double pct);

/* ---- Ranks: several traces of one distributed job (ranks.c) ------------------------------------ */

/* "rank 3 (host)" for a trace with a rank (trace header), else "comm[pid] on host": how every
 * output names a trace among several. Returns buf. */
const char *mt_trace_label(const mt_analysis *a, char *buf, size_t len);

#define MT_RANK_STACKS 64 /* stacks kept per rank, by name, for comparing ranks */

typedef struct mt_named_bytes {
    char *name; /* the stack's names in the user view, joined by ';' */
    uint64_t bytes, count;
} mt_named_bytes;

/* What one trace contributes to the rank table: small, so that N ranks fit in memory. */
#define MT_RANK_GPUS 16 /* GPUs kept per rank, for memory on another rank's GPU */

/* A rank's memory on one GPU. */
typedef struct mt_rank_gpu {
    int32_t device;
    char uuid[48];     /* the GPU's (mt_device_report.uuid), "" when the trace has none */
    uint64_t peak;     /* the rank's peak there (what the trace saw: allocations, static memory) */
    uint64_t nvml_max; /* NVML's largest sample of the process there (its CUDA context, which the
                          trace cannot see, included), 0 when there is none */
    int own;           /* the rank's own GPU (mt_own_gpu) */
    int driver_only;   /* only the driver's memory there (mt_gpu_is_stray): a context */
    char *top_frame;   /* who holds the largest stack at that peak: the program's own line
                          (mt_frames_own_code), else as mt_rank_summary.top_frame */
} mt_rank_gpu;

typedef struct mt_rank_summary {
    char *path, *host, *comm, *label;
    int has_rank;
    int32_t rank, local_rank, world_size; /* -1 unknown */
    uint32_t pid;
    char devices[128];        /* GPU ordinals, "0,1" */
    size_t n_devices;
    int32_t peak_device;      /* the GPU with the largest peak */
    uint64_t peak;            /* its peak */
    uint64_t peak_unix_ns;    /* when, on the wall clock (traces of several hosts compare) */
    uint64_t tensor_peak;     /* --tensors: that device's tensor peak (max_memory_allocated) */
    uint64_t segment_peak;    /* PyTorch's segments there (max_memory_reserved), 0 unknown */
    uint64_t start_unix_ns;
    uint64_t live_at_exit, leak_bytes, failed; /* over the trace's GPUs */
    char *top_frame;          /* first user frame of the largest stack at the peak */
    uint64_t top_bytes;
    mt_named_bytes *stacks;   /* the peak's stacks by name, largest first (<= MT_RANK_STACKS) */
    size_t n_stacks;
    /* How the rank ended: cleanly (an END record), or not (killed: torchrun kills the other ranks
     * when one fails); its trace's last event, on the wall clock. */
    int ended_cleanly;
    uint64_t end_unix_ns;
    mt_activity_state activity; /* its trace's: driver-internal memory and arrays seen or not */
    /* Its first torch.OutOfMemoryError (a failed request of kind TENSOR), when has_oom. */
    int has_oom;
    uint64_t oom_unix_ns, oom_bytes, oom_allocated;
    int32_t oom_device;
    char *oom_frame; /* the first user frame of its stack */
    char *oom_backward_call;        /* in the backward pass: the frame that called backward()
                                       (mt_failed_request.backward_stack), else NULL */
    mt_rank_gpu gpus[MT_RANK_GPUS]; /* its GPUs, ordinals ascending (the first MT_RANK_GPUS) */
    size_t n_gpus;
} mt_rank_summary;

int mt_rank_summarize(mt_analysis *a, mt_rank_summary *s); /* 0, or -1 out of memory */
void mt_rank_summary_free(mt_rank_summary *s);

/* Memory that a rank holds on a GPU other than its own: a checkpoint loaded, or a CUDA call made,
 * before torch.cuda.set_device puts a context (and tensors) on GPU 0 in every rank. One entry per
 * such rank and GPU, ranks in s[]'s order. Two ranks' GPUs are the same GPU when they are on the
 * same host and have the same UUID (the same ordinal when either trace has no UUID). Only traces
 * with a rank count. */
typedef struct mt_rank_foreign {
    size_t rank; /* index into s[] */
    size_t gpu;  /* index into s[rank].gpus */
    long owner;  /* index into s[] of the rank whose own GPU it is, -1 when none is */
} mt_rank_foreign;
/* *out is malloc'd (NULL when there is none). 0, or -1 out of memory. */
int mt_rank_foreign_gpus(const mt_rank_summary *s, size_t n, mt_rank_foreign **out, size_t *n_out);

/* Indexes into s[] of the ranks with the largest, the median (the lower one for an even count)
 * and the smallest peak. -1 when n == 0. */
typedef struct mt_imbalance {
    size_t max, median, min;
} mt_imbalance;
int mt_rank_imbalance(const mt_rank_summary *s, size_t n, mt_imbalance *out);

/* Stacks of rank hi against rank lo, matched by name: a = hi's bytes at its peak, b = lo's,
 * delta = a - b; sorted by delta, largest first. *out is malloc'd; names point into the
 * summaries. */
typedef struct mt_named_diff {
    const char *name;
    uint64_t a, b;
    int64_t delta;
} mt_named_diff;
int mt_rank_stack_diff(const mt_rank_summary *hi, const mt_rank_summary *lo, mt_named_diff **out,
                       size_t *n);
/* ---- Moments: a finer timeline, and what was live at chosen moments (moments.c) ----------------
 * For viewers where a person points at a moment (export --format html). Two more reads of a trace
 * already analysed, each through a fresh tracker, so event numbers are mt_usage.peak_seq's:
 *   read 1  each device's usage over time. A trace of at most `exact` events keeps every change;
 *           a longer one is cut into `points` time buckets, each keeping its highest point (the
 *           first, in file order, of its highest in_use) and its last one, so every peak is exact
 *           (as the Chrome export's counters). Every point also splits its bytes into series: one
 *           label per allocation (mt_series_key; the kind today). Time is also cut into `spans`
 *           spans and the highest point of each is chosen, and the device's peak.
 *   read 2  at each chosen moment, the device's live set by stack: the `top` largest stacks and
 *           the rest summed, so a moment's size does not grow with what was live.
 * Memory: the live set, buckets x series per device (with more than 8 devices, fewer buckets
 * each, 256 at least), moments x top; time: two reads plus one pass over the live set per
 * moment, at most `work` lifetimes in all: a trace whose live set is too large for every span
 * keeps every k-th of them (and the peak). */

/* What a timeline's series are: a label for every counted allocation, given by `of` when the
 * allocation starts, or, for labels that change while an allocation lives (a tensor's category
 * when its backward pass ends), by `split` from the device's counters at each point. */
typedef struct mt_series_key {
    const char *by; /* what the labels are: "kind", "category" */
    size_t n;       /* labels 0..n-1 */
    const char *(*name)(void *ctx, size_t key); /* static, or owned by ctx */
    size_t (*of)(void *ctx, const mt_lifetime *l); /* the label of l; n or more: the last */
    /* when set, instead of `of`: u's bytes in use by label into values[0..n) (they add up to
     * u->in_use) */
    void (*split)(void *ctx, const mt_usage *u, uint64_t *values);
    void *ctx;
} mt_series_key;

/* Series by allocation kind (mt_kind_name). */
const mt_series_key *mt_series_by_kind(void);
/* Series by category where the trace has them (record --tensors: a->categories): the tensors by
 * what they are for at that moment (parameters, gradients, ...: mt_category_name; one not
 * categorized is a "tensor"), every other allocation by its kind. 0, or -1 when the trace has no
 * categories (*out untouched). */
int mt_series_by_category(const mt_analysis *a, mt_series_key *out);

typedef struct mt_usage_point {
    uint64_t time_ns; /* since trace start */
    uint64_t seq;     /* event number */
    uint64_t in_use;  /* the device's bytes in use after that event */
} mt_usage_point;

typedef struct mt_moment {
    uint64_t time_ns, seq, in_use; /* the point (as mt_usage_point) */
    uint64_t from_ns, to_ns;       /* the span [from, to) whose highest point it is */
    int is_peak;                   /* the device's peak (seq = mt_usage.peak_seq) */
    mt_stack_list top;             /* its largest stacks, largest first */
    uint64_t rest_bytes, rest_count, rest_stacks; /* every other stack, summed: top + rest =
                                                     in_use */
} mt_moment;

typedef struct mt_device_moments {
    int32_t device;
    int is_host;
    mt_usage_point *points; /* time order (then file order) */
    size_t n_points;
    uint64_t *series;       /* n_points rows of n_series values: point i's bytes by label */
    uint64_t changes;       /* events that changed the device's bytes (or their split), in the
                               whole trace */
    int downsampled;        /* points are each bucket's highest and last (else every change) */
    uint64_t bucket_ns;     /* bucket width when downsampled */
    mt_moment *moments;     /* time order */
    size_t n_moments;
} mt_device_moments;

typedef struct mt_moments {
    const char *series_by;
    size_t n_series;
    const char **series_names;  /* n_series: the key's names */
    mt_device_moments *devices; /* one per device report: a->devices in order, then a->host */
    size_t n_devices;
    size_t spans, top;          /* as used */
    size_t thinned;             /* k > 1: only every k-th span's moment was kept (work) */
} mt_moments;

#define MT_MOMENTS_EXACT 16384 /* traces of at most this many events keep every change */
#define MT_MOMENTS_POINTS 4096 /* else: time buckets per device */
#define MT_MOMENTS_SPANS 256   /* chosen moments per device (and the peak) */
#define MT_MOMENTS_TOP 32      /* stacks kept per moment */
#define MT_MOMENTS_WORK (1ull << 28) /* live allocations visited for all snapshots, at most */

typedef struct mt_moments_options {
    size_t exact, points, spans, top; /* 0: the defaults above */
    uint64_t work;                    /* 0: MT_MOMENTS_WORK */
    const mt_series_key *series; /* NULL: mt_series_by_kind() */
    void (*progress)(void *ctx, int read, double fraction); /* read 1 or 2; may be NULL */
    void *progress_ctx;
} mt_moments_options;

/* Reads a's trace twice more (see above). Returns 0, or -1 with a one-line reason in err. */
int mt_moments_compute(const mt_analysis *a, const mt_moments_options *opt, mt_moments **out,
                       char *err, size_t errlen);
void mt_moments_free(mt_moments *m);

#ifdef __cplusplus
}
#endif
#endif
