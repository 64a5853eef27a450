/* memtrace/compact.h — the compactor: a trace's events turned into lifetimes, per-device usage,
 * peaks, what was live at each peak and at each failed request, leaks, and frame names.
 *
 * Three layers, each usable alone:
 *   mt_frames   stack trie + modules + symbols + Python code objects -> frame names
 *   mt_tracker  the event state machine: live allocations, per-device counters, peaks. Feed it
 *               events in file order; hooks tell a caller about every lifetime that ends and every
 *               change of a device's counters (the Chrome exporter streams from those).
 *   mt_analysis two passes over a trace file (see analyze.c): pass 1 finds peaks, leaks, failed
 *               requests; pass 2 replays up to each device's peak and snapshots the live set.
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

/* What one name of a path is (mt_frames_path_ex's flags). */
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
};

/* Owner names mt_frames_owner gives to stacks of allocators that keep memory cached. */
#define MT_OWNER_CACHING_ALLOCATOR "PyTorch caching allocator"
#define MT_OWNER_XLA_ALLOCATOR "XLA BFC allocator"
#define MT_OWNER_CUPY_POOL "CuPy memory pool"

mt_frames *mt_frames_new(void);
void mt_frames_free(mt_frames *f);
/* Keeps what it needs from STACK_NODE, MODULE, SYMBOL, PYCODE records (strings are copied).
 * Returns 1 if the record was one of those, 0 if not, -1 when out of memory. */
int mt_frames_add(mt_frames *f, const mt_record *r);
/* Names of the frames of stack `leaf`, root (outermost) first; an ip with inlined callees expands
 * into several names. Writes at most cap names into out and returns the full count. leaf 0 gives
 * the single pseudo frame "[no stack]". Names are owned by f and live as long as it does. */
size_t mt_frames_path(mt_frames *f, uint32_t leaf, mt_name_style style, const char **out,
                      size_t cap);
/* mt_frames_path keeping only the frames `filter` selects (MT_FRAMES_USER: names that stand for
 * frames, "aten::linear", carry MT_FF_ROLE); flags (may be NULL) receives MT_FF_* of each name
 * written. */
size_t mt_frames_path_ex(mt_frames *f, uint32_t leaf, mt_name_style style, mt_frame_filter filter,
                         const char **out, uint8_t *flags, size_t cap);
/* MT_NAME_SHORT shows Python files under dir relative to it (the CLI passes its cwd). NULL: none. */
void mt_frames_set_base_dir(mt_frames *f, const char *dir);
/* 1 when the trace has Python code objects (then MT_FRAMES_AUTO means MT_FRAMES_USER). */
int mt_frames_has_python(const mt_frames *f);
/* filter, with MT_FRAMES_AUTO replaced by what it means for this trace. */
mt_frame_filter mt_frames_resolve(const mt_frames *f, mt_frame_filter filter);
/* Stack nodes whose parent id was not below their own id (corrupt input: the recorder numbers
 * nodes in order, parents first). Their path ends at them. */
uint64_t mt_frames_bad_nodes(const mt_frames *f);
/* Filename and qualname of a Python code object; 0 if the trace has no PYCODE for it. */
int mt_frames_pycode(mt_frames *f, uint32_t code, const char **filename, const char **qualname);
/* The innermost Python frame of stack leaf (with file != NULL: the innermost whose file matches,
 * see mt_python_file_matches): its code id and line. 1 found, 0 none. */
int mt_frames_python_line(mt_frames *f, uint32_t leaf, const char *file, uint32_t *code,
                          uint32_t *line);
/* A recorded Python filename matches what a user typed: equal, one a '/'-suffix of the other
 * ("cifar.py", "examples/cifar.py" ~ "/home/u/examples/cifar.py"), or the same basename. */
int mt_python_file_matches(const char *recorded, const char *wanted);
/* Who allocated, from the stack's native frames (innermost match wins): MT_OWNER_CACHING_ALLOCATOR
 * ("CUDACachingAllocator" in a name; *is_allocator = 1), MT_OWNER_XLA_ALLOCATOR ("BFCAllocator";
 * allocator), MT_OWNER_CUPY_POOL (CuPy's memory pool; allocator), "cuBLAS" (cublas*, libcublas*,
 * PyTorch's cuBLAS handle and workspace functions), "cuDNN" (cudnn*, libcudnn*), "NCCL" (nccl*,
 * libnccl*), else the first user frame. Cached per stack. Short names. */
const char *mt_frames_owner(mt_frames *f, uint32_t leaf, int *is_allocator);
/* The frame that names an allocation, never an allocator or CUDA frame: the innermost Python
 * frame; else the autograd node ("ConvolutionBackward0") or, without one, the outermost ATen
 * operator ("aten::linear"); else the innermost native frame outside the CUDA stack, NVIDIA's
 * libraries and the allocators; else the innermost frame. Owned by f. */
const char *mt_frames_first_user(mt_frames *f, uint32_t leaf);
const char *mt_frames_first_user_ex(mt_frames *f, uint32_t leaf, mt_name_style style);

/* ---- Tracker ----------------------------------------------------------------------------------- */

/* Kind families: a FREE matches the live ALLOC of the same (device, family, address). */
typedef enum mt_family {
    MT_FAM_LINEAR = 0,     /* DEVICE, PITCH, ASYNC, MANAGED (one cuMemFree frees any of them) */
    MT_FAM_PINNED = 1,     /* HOST_PINNED (device forced to -1) */
    MT_FAM_REGISTERED = 2, /* HOST_REGISTERED (device forced to -1) */
    MT_FAM_VMM_RESERVE = 3,
    MT_FAM_VMM_PHYSICAL = 4,
    MT_FAM_DRIVER = 5,
    MT_FAM_OTHER = 6, /* UNKNOWN/POOL kinds: tracked, never counted */
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
    uint32_t extra_refs; /* VMM handles: references taken since (cuMemRetainAllocationHandle); the
                            lifetime ends with the release that finds none left */
    uint16_t flags;
    uint8_t kind, family;
} mt_lifetime;

typedef enum mt_end_reason {
    MT_END_FREE = 0,        /* a matching FREE */
    MT_END_REPLACED = 1,    /* a new ALLOC at the same address while this one was live */
    MT_END_CTX_DESTROY = 2, /* its context was destroyed */
    MT_END_TRACE_END = 3,   /* still live when the trace ended (mt_tracker_finish) */
} mt_end_reason;

/* Counters of one device (or of host memory: is_host). All bytes. */
typedef struct mt_usage {
    int32_t device; /* CUDA ordinal; -1 with is_host = 0: device memory of unknown device */
    int is_host;
    uint64_t in_use;     /* device bytes: DEVICE+PITCH+ASYNC+MANAGED+VMM_PHYSICAL+DRIVER
                            (host: HOST_PINNED+HOST_REGISTERED) */
    uint64_t api_in_use; /* the same without DRIVER */
    uint64_t by_kind[MT_KIND_MAX_];
    uint64_t by_kind_peak[MT_KIND_MAX_]; /* each kind's own high-water (any time) */
    uint64_t peak, peak_time, peak_seq; /* first time in_use reached its maximum; seq = event no. */
    uint64_t api_peak, api_peak_time;
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
    uint64_t unknown_ops;
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
} mt_tracker_hooks;

mt_tracker *mt_tracker_new(const mt_tracker_hooks *hooks); /* hooks may be NULL */
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
const mt_anomalies *mt_tracker_anomalies(const mt_tracker *t);

/* ---- Analysis ---------------------------------------------------------------------------------- */

/* Bytes and allocation count attributed to one stack. driver = 1: the "[driver internal]" pseudo
 * stack (DRIVER-kind allocations), stack is then ignored. */
typedef struct mt_stack_stat {
    uint32_t stack;
    uint8_t driver;
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
    uint64_t caching_bytes;    /* live DEVICE/VMM_PHYSICAL allocations of the caching allocator */
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
    const char *name;              /* from MT_REC_DEVICE, or NULL */
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
    uint16_t result;
    uint32_t stack, tid;
    uint64_t bytes;    /* requested */
    uint64_t stream;
    uint64_t in_use;   /* device bytes in use at that moment */
    int pool_free_known;
    uint64_t pool_free; /* sum of POOL_RESERVED - live ASYNC bytes on the device (clamped at 0) */
    mt_stack_list live; /* what was live on that device, by stack */
} mt_failed_request;

#define MT_MAX_FAILED_KEPT 64 /* failed requests with full forensics; all are counted */

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
    mt_anomalies anomalies;
    uint64_t records, events;
    uint64_t dropped;          /* max(sum of DROPPED records, END.dropped) */
    int ended_cleanly;         /* an END record was read */
    int truncated;             /* the file ends inside a chunk */
    char *truncated_msg;
    uint64_t damaged_chunks;   /* damaged chunks stepped over (mt_read_damage): their records */
    uint64_t damaged_bytes;    /* are missing from every number; bytes = file bytes in them */
    char *damage_msg;          /* the first one, "PATH: offset N: reason"; NULL when none */
    int fd;                    /* the trace, open for the exporters' later reads (a temporary
                                  copy when it was given as a pipe); closed by mt_analysis_free */
    uint64_t first_ns, last_ns; /* event times since trace start */
    uint64_t duration_ns;       /* last event (or END) since trace start */
    char **warnings;            /* WARNING notes of the recorder */
    size_t n_warnings;
    struct { uint32_t tid; char *name; } *threads;
    size_t n_threads;
} mt_analysis;

typedef struct mt_analyze_options {
    /* Called now and then with the fraction of the file read (0..1) and the pass (1 or 2). */
    void (*progress)(void *ctx, int pass, double fraction);
    void *progress_ctx;
    int strict; /* a damaged chunk or a truncated file fails the analysis instead of being
                   stepped over and reported */
} mt_analyze_options;

/* Reads the trace twice and fills *out. A truncated file is analysed up to where it ends, and
 * damaged chunks are stepped over (both said in the analysis) unless opt->strict; an unreadable
 * file, or a damaged one in strict mode, fails: returns -1 with a one-line reason in err. */
int mt_analyze(const char *path, const mt_analyze_options *opt, mt_analysis **out, char *err,
               size_t errlen);
void mt_analysis_free(mt_analysis *a);
/* The root frame of a device report: "cuda:N", "cuda:?" or "host". */
const char *mt_device_root_name(const mt_device_report *d, char *buf, size_t len);

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
} mt_rank_summary;

int mt_rank_summarize(mt_analysis *a, mt_rank_summary *s); /* 0, or -1 out of memory */
void mt_rank_summary_free(mt_rank_summary *s);

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

#ifdef __cplusplus
}
#endif
#endif
