/* memtrace/trace.h — the trace format: what a .mtrace file holds, how to write it, how to read it.
 *
 * This is the contract between the stages. The recorder (src/record) produces records, the writer
 * (src/trace/writer.c) encodes them into zlib-compressed, CRC-checked chunks, the reader
 * (src/trace/reader.c) gives them back one by one to the compactor, the exporters and `dump`.
 * The byte layout is drawn in docs/trace-format.md and beside the encoder in src/trace/encode.c.
 *
 * Nothing here knows about CUDA or CUPTI: a trace can be written and read on a machine with no GPU.
 */
#ifndef MEMTRACE_TRACE_H
#define MEMTRACE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- File header --------------------------------------------------------------------------- */

#define MT_TRACE_MAGIC "\x89MTRACE\n" /* 8 bytes; the \x89 keeps text tools from guessing "text" */
#define MT_TRACE_VERSION 2 /* readers read every version up to theirs; see docs/trace-format.md */
#define MT_FILE_HEADER_SIZE 64

typedef struct mt_file_header {
    uint16_t version;            /* format version: as read; for a writer 0 = MT_TRACE_VERSION, or an
                                    older version to write (1) */
    uint32_t pid;                /* process that recorded */
    uint64_t start_monotonic_ns; /* CLOCK_MONOTONIC at recorder start; event times share this clock */
    uint64_t start_realtime_ns;  /* CLOCK_REALTIME at the same moment, to print wall-clock dates */
    uint32_t flags;              /* MT_HDR_* */
    /* Where the process sat in a distributed job, read from the launcher's environment at start
     * (RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK from torchrun; SLURM_*, OMPI_COMM_WORLD_*, PMI_*);
     * valid with MT_HDR_RANK, each -1 when not given. */
    int32_t rank, local_rank, world_size, node_rank;
} mt_file_header;

#define MT_HDR_RANK 1u /* the rank fields are valid */

/* ---- Memory events --------------------------------------------------------------------------- */

/* What happened. */
typedef enum mt_op {
    MT_OP_ALLOC = 1,         /* [address, address+bytes) became owned (for VMM_PHYSICAL: handle) */
    MT_OP_FREE = 2,          /* released; bytes = size if the recorder knew it, else 0 */
    MT_OP_FAILED = 3,        /* a request that failed (result = CUresult, bytes = requested) */
    MT_OP_POOL_RESERVED = 4, /* a memory pool now reserves `bytes` (address = pool handle) */
    MT_OP_POOL_TRIM = 5,     /* cuMemPoolTrimTo(pool = address, minBytesToKeep = bytes) */
    MT_OP_CTX_DESTROY = 6,   /* context `context` destroyed: whatever it still held is gone */
    MT_OP_MAX_ = 7
} mt_op;

/* Which kind of memory: one byte on disk, written only when it changes (encode.c). */
typedef enum mt_kind {
    MT_KIND_UNKNOWN = 0,
    MT_KIND_DEVICE = 1,          /* cuMemAlloc / cudaMalloc */
    MT_KIND_PITCH = 2,           /* cuMemAllocPitch; bytes = pitch * height, aux = pitch */
    MT_KIND_ASYNC = 3,           /* cuMemAllocAsync / FromPoolAsync / FreeAsync: stream ordered */
    MT_KIND_MANAGED = 4,         /* cuMemAllocManaged */
    MT_KIND_HOST_PINNED = 5,     /* cuMemHostAlloc / cuMemAllocHost / cuMemFreeHost */
    MT_KIND_HOST_REGISTERED = 6, /* cuMemHostRegister / Unregister (pins, does not allocate) */
    MT_KIND_VMM_RESERVE = 7,     /* cuMemAddressReserve / Free: virtual address space only */
    MT_KIND_VMM_PHYSICAL = 8,    /* cuMemCreate / Release: physical bytes, address = handle;
                                    cuMemCreate's aux = the handle types it asked for
                                    (CUmemAllocationHandleType bits; 0 before 2026-11-27) */
    MT_KIND_VMM_MAP = 9,         /* cuMemMap / Unmap: a mapped range; aux = physical handle */
    MT_KIND_POOL = 10,           /* memory pool bookkeeping (POOL_RESERVED, POOL_TRIM) */
    MT_KIND_DRIVER = 11,         /* driver-internal: seen only in activity records; aux = CUPTI
                                    memory kind (device, device static, ...) */
    MT_KIND_TENSOR = 12,         /* a block PyTorch's caching allocator handed to a tensor (record
                                    --tensors): lives inside a segment (MT_EF_SEGMENT); bytes =
                                    the block's size, what torch.cuda.memory_allocated() counts;
                                    aux = that counter for the device right after this event */
    MT_KIND_ARRAY = 13,          /* a CUDA array (cuArrayCreate, cuArray3DCreate,
                                    cuMipmappedArrayCreate: textures, surfaces): from CUPTI's
                                    activity record, which has the driver's size; address = the
                                    CUarray handle; stack and tid its creating call's (recorders
                                    from 2026-11-27: before, kind DRIVER with aux 4) */
    MT_KIND_MAX_ = 14
} mt_kind;

/* Event flags. */
enum {
    MT_EF_ACTIVITY = 1u << 0,        /* built from a CUPTI activity record, not a callback */
    MT_EF_STACK_TRUNCATED = 1u << 1, /* the unwinder stopped before the outermost frame */
    MT_EF_PARTIAL_UNMAP = 1u << 2,   /* UNMAP of part of a mapped range (set by the recorder
                                        when it knows; the compactor checks anyway) */
    MT_EF_FROM_POOL = 1u << 3,       /* cuMemAllocFromPoolAsync: aux = pool handle */
    MT_EF_SEGMENT = 1u << 4,         /* made by PyTorch's caching allocator for its cache (a
                                        segment: cudaMalloc / cuMemCreate from libc10_cuda) */
    MT_EF_TENSORS_TRACKED = 1u << 5, /* with SEGMENT: the blocks handed out of it are in the trace
                                        as MT_KIND_TENSOR events, so it is the allocator's
                                        reservation, not an allocation of its own */
    MT_EF_CAPTURED = 1u << 6,        /* made while its thread was capturing a CUDA graph (stream
                                        capture, or an explicit graph memory node) */
    MT_EF_RETAIN = 1u << 7,          /* VMM_PHYSICAL ALLOC: one more reference to a live handle
                                        (cuMemRetainAllocationHandle), not new memory: the handle
                                        is freed by its last cuMemRelease */
    MT_EF_IMPORTED = 1u << 8,        /* another process's memory, not this process's bytes:
                                        VMM_PHYSICAL ALLOC, a handle imported with
                                        cuMemImportFromShareableHandle (NCCL's peer buffers);
                                        DEVICE ALLOC/FREE, a mapping by cuIpcOpenMemHandle and its
                                        cuIpcCloseMemHandle (legacy CUDA IPC) */
    /* Set by the reader, never written (src/trace/contextless.h): an activity record that named
     * no context, whose device CUPTI gives as 0 whatever it is, got the device the reader chose */
    MT_EF_DEVICE_INFERRED = 1u << 9, /* the trace's only device so far: exact */
    MT_EF_DEVICE_GUESSED = 1u << 10, /* with INFERRED: one of several, the latest context's */
    MT_EF_HOST_MEMORY = 1u << 11,    /* VMM_PHYSICAL, ASYNC, POOL: memory in host RAM (cuMemCreate
                                        or a pool located on the host or a host NUMA node:
                                        pinned host pages the GPU reaches); device = -1. Its
                                        release names no location: the analysis finds it there */
};

typedef struct mt_event {
    uint64_t time_ns;     /* CLOCK_MONOTONIC, the recorder's own clock */
    uint64_t address;     /* pointer; VMM_PHYSICAL: allocation handle; POOL: pool handle */
    uint64_t bytes;       /* size; FAILED: requested size */
    uint64_t stream;      /* CUstream handle value; 0 = legacy default stream / not stream-ordered */
    uint64_t aux;         /* kind-specific, see mt_kind */
    uint32_t tid;         /* kernel thread id of the caller */
    uint32_t context;     /* CUPTI context id; 0 = none/unknown */
    uint32_t stack;       /* leaf node of the stack trie; 0 = no stack */
    uint32_t correlation; /* CUPTI correlation id; 0 = none */
    int32_t device;       /* CUDA device ordinal; -1 = host memory or unknown */
    uint16_t api;         /* CUPTI driver callback id (CUPTI_DRIVER_TRACE_CBID_*); 0 = none */
    uint16_t result;      /* CUresult for MT_OP_FAILED, else 0 */
    uint16_t flags;       /* MT_EF_* */
    uint8_t op;           /* mt_op */
    uint8_t kind;         /* mt_kind */
} mt_event;

/* ---- Stacks ---------------------------------------------------------------------------------- */

/* A stack is a path in a trie from the root (id 0, never written) to a leaf. Each node is written
 * once, before or after the events that name it; events carry only the leaf id. The path from the
 * root to a leaf goes from the outermost frame (_start, main) to the innermost (the CUDA call). */
typedef enum mt_frame_kind {
    MT_FRAME_NATIVE = 0, /* ip = return address (look it up at ip-1 to name the call site) */
    MT_FRAME_PYTHON = 1, /* ip = MT_PY_IP(code id, line); code ids name MT_REC_PYCODE records */
    MT_FRAME_PSEUDO = 2, /* ip = one of mt_pseudo_frame */
} mt_frame_kind;

/* A Python frame's ip: its code object's id (MT_REC_PYCODE) and its line, in one word. */
#define MT_PY_IP(code, line) (((uint64_t)(uint32_t)(code) << 32) | (uint32_t)(line))
#define MT_PY_IP_CODE(ip) ((uint32_t)((uint64_t)(ip) >> 32))
#define MT_PY_IP_LINE(ip) ((uint32_t)(ip))

typedef enum mt_pseudo_frame {
    MT_PSEUDO_DRIVER_INTERNAL = 1, /* "[driver internal]": no public API call made it */
    MT_PSEUDO_AUTOGRAD = 2,        /* "[autograd backward]": a thread with no Python frames */
    MT_PSEUDO_NO_STACK = 3,        /* "[no stack]": capture failed or was off */
    MT_PSEUDO_TRUNCATED = 4,       /* "[truncated]": the unwinder gave up here */
} mt_pseudo_frame;

typedef struct mt_stack_node {
    uint32_t id;     /* > 0 */
    uint32_t parent; /* 0 = child of the root */
    uint64_t ip;     /* see mt_frame_kind */
    uint8_t frame_kind;
} mt_stack_node;

/* ---- Everything else a trace holds ------------------------------------------------------------ */

typedef struct mt_process {
    uint32_t pid, ppid;
    const char *comm;     /* short name of the executable */
    const char *cmdline;  /* arguments joined by spaces */
    const char *hostname;
} mt_process;

/* A loaded ELF object, as dl_iterate_phdr saw it. ip -> file address: ip - bias. */
typedef struct mt_module {
    uint32_t id;
    uint64_t bias;       /* load bias (dlpi_addr) */
    uint64_t start, end; /* lowest and highest address of its PT_LOAD segments (runtime) */
    const char *path;
    const uint8_t *build_id;
    uint32_t build_id_len;
} mt_module;

typedef struct mt_thread {
    uint32_t tid;
    const char *name;
} mt_thread;

typedef enum mt_note_level { MT_NOTE_INFO = 0, MT_NOTE_WARNING = 1 } mt_note_level;

typedef struct mt_note {
    uint64_t time_ns;
    uint8_t level;
    const char *text;
} mt_note;

/* The recorder's cost notes at exit (src/record/cuda/notes.c) read
 *     "NAME: about CALLS WHAT, NS ns each on average ..."
 * the whole tensor report's "NAME: NS ns each on average ...", and the rare work's (timed every
 * time, src/record/rare_work.h) "NAME: PIECES pieces, NS ns each on average ...". The analysis
 * reads the calls and ns of these names back (mt_recording_cost, compact.h), so the names are
 * shared here. */
#define MT_COST_NOTE_CALLBACKS "callbacks"
#define MT_COST_NOTE_HOOKED "hooked calls"
#define MT_COST_NOTE_TENSORS "tensor reports"
#define MT_COST_NOTE_TENSORS_WHOLE "tensor reports, whole"
#define MT_COST_NOTE_RARE "rare work"
#define MT_COST_NOTE_PIECES " pieces"
#define MT_COST_NOTE_EACH " ns each on average"
/* The writer thread's own CPU time, on none of the program's threads (recorders since
 * 2026-11-28): "NAME: MS ms of CPU in S s (P% of one core) over ..." */
#define MT_COST_NOTE_WRITER "writer thread"
#define MT_COST_NOTE_CPU_IN " ms of CPU in "

/* The recorder's notes on its CUPTI activity records, which alone report driver-internal
 * allocations and CUDA arrays: an INFO note when they are off (record --activity off, the default
 * with --tensors=async), a WARNING when CUPTI refused them or they stopped mid-run (another CUPTI
 * client took the activity API). Each note's text starts with its prefix; the analysis reads them
 * back (mt_analysis.activity, compact.h), so that a report says "not recorded", not "0 B". */
#define MT_ACTIVITY_NOTE_OFF "activity records off"
#define MT_ACTIVITY_NOTE_UNAVAILABLE "activity records unavailable"
#define MT_ACTIVITY_NOTE_STOPPED "activity enrichment stopped"

/* One part of the recording cost: calls (an estimate, as the recorder counts them), the average
 * ns of a call, and how many timed calls that average stands on (0: not said). */
typedef struct mt_cost_part {
    uint64_t calls, timed;
    double ns;
} mt_cost_part;

/* The running totals: while the program runs, the recorder's writer thread notes what recording
 * has cost so far (src/record/cuda/notes.c: 5 s after the trace is created, then at intervals
 * that double up to a minute), so that a trace whose process was killed before its notes at exit
 * still says what recording cost up to then. One note holds all four parts, so none is missing
 * when the process dies between two notes:
 *     "recording cost so far: tensor reports C x N ns (T timed, whole), callbacks C x N ns
 *      (T timed), hooked calls C x N ns (T timed), rare work C x N ns (T timed) (...)"
 * in this order; ", whole" only when N of the tensor reports is the whole report's (the time
 * stamp included). The analysis reads the last one back when the notes at exit are missing
 * (mt_recording_cost.until_ns, compact.h). */
#define MT_COST_NOTE_RUNNING "recording cost so far"
/* The note's text into buf (truncated to len, always terminated). */
void mt_cost_running_note(char *buf, size_t len, const mt_cost_part *tensors, int tensor_whole,
                          const mt_cost_part *callbacks, const mt_cost_part *hooked,
                          const mt_cost_part *rare);

typedef struct mt_device {
    int32_t ordinal;
    uint64_t total_bytes;
    const char *name;
    const char *uuid;
} mt_device;

/* Symbolized native frame. One ip may carry several records when DWARF says code was inlined:
 * depth 0 is the real (outermost) function, depth 1.. the inlined callees, innermost last. */
typedef struct mt_symbol {
    uint64_t ip;          /* the return address as recorded */
    uint32_t module;      /* mt_module.id; 0 = none */
    uint32_t line;        /* 0 = unknown */
    uint32_t depth;       /* inline depth, see above */
    const char *function; /* demangled; "" = unknown */
    const char *file;     /* "" = unknown */
} mt_symbol;

/* A Python code object the recorder met. Python stack nodes name it by id. */
typedef struct mt_pycode {
    uint32_t id;
    uint32_t firstlineno;
    const char *filename;
    const char *qualname;
} mt_pycode;

typedef enum mt_counter {
    MT_COUNTER_NVML_PROCESS_BYTES = 1, /* what nvidia-smi shows for this process */
    MT_COUNTER_DEVICE_USED_BYTES = 2,  /* cuMemGetInfo total - free (whole device) */
} mt_counter;

typedef struct mt_sample {
    uint64_t time_ns;
    int32_t device;
    uint16_t counter; /* mt_counter */
    uint64_t value;
} mt_sample;

typedef struct mt_end {
    uint64_t time_ns;
    uint64_t events;  /* memory events written */
    uint64_t dropped; /* events the recorder could not keep */
} mt_end;

/* ---- Records ------------------------------------------------------------------------------- */

typedef enum mt_record_type {
    MT_REC_PROCESS = 1,
    MT_REC_EVENT = 2,
    MT_REC_STACK_NODE = 3,
    MT_REC_MODULE = 4,
    MT_REC_THREAD = 5,
    MT_REC_NOTE = 6,
    MT_REC_DROPPED = 7, /* u64: events dropped since the last DROPPED record */
    MT_REC_END = 8,     /* the recorder shut down cleanly */
    MT_REC_SYMBOL = 9,
    MT_REC_PYCODE = 10,
    MT_REC_SAMPLE = 11,
    MT_REC_DEVICE = 12,
    MT_REC_MAX_ = 13
} mt_record_type;

typedef struct mt_record {
    mt_record_type type;
    union {
        mt_process process;
        mt_event event;
        mt_stack_node node;
        mt_module module;
        mt_thread thread;
        mt_note note;
        uint64_t dropped;
        mt_end end;
        mt_symbol symbol;
        mt_pycode pycode;
        mt_sample sample;
        mt_device device;
    } u;
} mt_record;

/* ---- Writer ---------------------------------------------------------------------------------- */

/* One writer owns one file descriptor; it is not thread-safe (the recorder's single background
 * thread owns it). Records are encoded into a chunk buffer; a full chunk, mt_writer_flush and
 * mt_writer_close compress it, prefix it with its length and CRC32, and write it with write(2).
 * A chunk on disk is whole or it is the last thing in the file. */
typedef struct mt_writer mt_writer;

#define MT_CHUNK_RAW_DEFAULT (256u * 1024u)

/* hdr != NULL: write the file header first (new file), in format version hdr->version (0 = the
 * current one). hdr == NULL: append chunks to a file that already has one (fd opened with
 * O_RDWR | O_APPEND: the writer reads the header to write chunks in the file's own version).
 * chunk_raw_bytes = 0 picks MT_CHUNK_RAW_DEFAULT. Returns NULL on allocation failure, when the
 * header cannot be written, or (errno EINVAL) for a version this writer cannot write or a file
 * whose header it cannot read. */
mt_writer *mt_writer_open_fd(int fd, const mt_file_header *hdr, size_t chunk_raw_bytes);
int mt_writer_put(mt_writer *w, const mt_record *r); /* 0 ok, -1 write error (errno set) */
int mt_writer_flush(mt_writer *w);                   /* finish the current chunk */
/* Flush and free. Closes the fd only if close_fd. Returns -1 if any write ever failed. */
int mt_writer_close(mt_writer *w, int close_fd);
/* From now on each chunk is written only if the fd is still the file it is now (device and inode,
 * one fstat per chunk); else the write fails with EBADF. For a writer inside someone else's
 * process, which may close our fd and open a file of its own on the same number. */
int mt_writer_guard_fd(mt_writer *w);
uint64_t mt_writer_bytes_written(const mt_writer *w); /* file bytes so far, header included */

/* ---- Reader ---------------------------------------------------------------------------------- */

typedef struct mt_reader mt_reader;

typedef enum mt_read_status {
    MT_READ_RECORD = 1,    /* *out holds a record; its strings live until the next call */
    MT_READ_END = 0,       /* end of file (damaged chunks stepped over are in mt_reader_damage) */
    MT_READ_TRUNCATED = -1, /* the file ends inside a chunk: everything before it was returned */
    MT_READ_CORRUPT = -2,  /* strict mode only: damage at mt_reader_error_offset() */
    MT_READ_IO = -3,       /* read(2) failed, or out of memory */
} mt_read_status;

/* A trace named on a command line, as a descriptor of a regular file that can be read more than
 * once: the file itself, or for a pipe, FIFO, socket or terminal an unlinked temporary copy of
 * its bytes (in $TMPDIR, else /tmp; made only once the stream starts with the trace magic).
 * -1 with a one-line reason (naming the file) in err. */
int mt_input_open(const char *path, char *err, size_t errlen);

/* Opens and checks the header. On failure returns NULL and writes a one-line reason (naming the
 * file and offset) into err. A path that is not a regular file goes through mt_input_open. */
mt_reader *mt_reader_open(const char *path, char *err, size_t errlen);
/* The same on a descriptor of a regular file (not consumed: the reader keeps its own copy and reads
 * with pread, so several readers may share fd). name is used in messages. */
mt_reader *mt_reader_open_fd(int fd, const char *name, char *err, size_t errlen);
/* strict = 1: the first damaged chunk ends reading with MT_READ_CORRUPT (sticky). Default 0: a
 * damaged chunk is stepped over (the reader resynchronises on the next chunk that passes every
 * check, see docs/trace-format.md) and counted in mt_reader_damage. */
void mt_reader_set_strict(mt_reader *r, int strict);
const mt_file_header *mt_reader_header(const mt_reader *r);
mt_read_status mt_reader_next(mt_reader *r, mt_record *out);
/* The same record in place: *out points into the reader's own buffers (with the second thread, the
 * batch it handed over: no copy of the record on this thread) and stays valid until the next call
 * of mt_reader_next or mt_reader_next_ref, or mt_reader_close. */
mt_read_status mt_reader_next_ref(mt_reader *r, const mt_record **out);
/* The next records in place, as many as are at hand (at least one): *recs points at them, valid
 * until the next call of any mt_reader_next*, and the count is returned. 0 when there are none:
 * then *st is what mt_reader_next would return (the end, or a failure). The same records, in the
 * same order, as mt_reader_next gives one at a time (mt_reader_offset and mt_reader_damage say the
 * same for each of them: a group never spans two chunks). */
size_t mt_reader_next_group(mt_reader *r, const mt_record **recs, mt_read_status *st);
/* After TRUNCATED/CORRUPT/IO: a one-line description and the byte offset of the bad chunk. */
const char *mt_reader_error(const mt_reader *r);
uint64_t mt_reader_error_offset(const mt_reader *r);
uint64_t mt_reader_offset(const mt_reader *r); /* file offset of the chunk being read */
uint64_t mt_reader_file_size(const mt_reader *r);

/* The SYMBOL records the trace ends with (`record` and `symbolize` append them after the recording,
 * in chunks that hold nothing else), found from the end of the file backwards without reading the
 * rest (src/trace/tail.c): fn gets each, in file order, and *start is the offset of their first
 * chunk (the file's size when the trace ends otherwise). Every record at or after *start that
 * mt_reader_next gives is one of them (mt_reader_offset says where a record is). Independent of
 * where r is reading. 0, or -1 when a read fails or fn does (*start is then UINT64_MAX). */
int mt_reader_tail_symbols(const mt_reader *r, uint64_t *start,
                           int (*fn)(void *ctx, const mt_record *rec), void *ctx);

/* Damage stepped over so far (lenient mode). */
typedef struct mt_read_damage {
    uint64_t chunks;       /* damaged regions skipped: one per chunk that failed (a run of garbage
                              up to the next good chunk counts once) */
    uint64_t bytes;        /* file bytes in them, not read (for a chunk whose records stopped
                              decoding partway: the whole chunk, though its first records were
                              returned) */
    uint64_t first_offset; /* where the first one starts */
    const char *first;     /* "PATH: offset N: reason" of the first one; "" when none. Lives as long
                              as the reader */
} mt_read_damage;
void mt_reader_damage(const mt_reader *r, mt_read_damage *out);
void mt_reader_close(mt_reader *r);

/* ---- Names ------------------------------------------------------------------------------------ */

const char *mt_op_name(unsigned op);     /* "alloc", "free", ... ; "?" if out of range */
const char *mt_kind_name(unsigned kind); /* "device", "async", ... */
const char *mt_pseudo_name(uint64_t id); /* "[driver internal]", ... */
/* CUPTI driver callback id -> API name ("cuMemAlloc_v2"); "" if not a call listed in
 * memtrace/driver_calls.h (the calls the recorder traces, and a few older ones). */
const char *mt_api_name(unsigned cbid);
/* CUresult -> its name in cuda.h ("CUDA_ERROR_OUT_OF_MEMORY"); "" if not in
 * memtrace/driver_results.h (CUDA 13.0's codes). */
const char *mt_result_name(unsigned result);
/* A GPU's 16-byte UUID (cuDeviceGetUuid) as nvidia-smi -L and NVML write it, the DEVICE record's
 * uuid: "GPU-" then 8-4-4-4-12 lower-case hex digits (41 bytes with the NUL; less: truncated). */
void mt_format_gpu_uuid(const uint8_t bytes[16], char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
