/* synth_file.c — the synthetic trace file of synth_file.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "synth_file.h"
#include "trace/synthetic.h"

#define MiB (1024ull * 1024ull)
#define PY(code, line) (((uint64_t)(code) << 32) | (line))
#define STEPS 4
#define BLOCKS 8
#define OPS 8

/* The file being written: its writer, the first write error (sticky), the next stack node id. */
typedef struct synth_out {
    mt_writer *w;
    int failed; /* errno of the first failed write, 0 while none */
    uint32_t next_node;
    int tensors; /* mt_synth_file_write_tensors: the events are PyTorch's tensor reports */
} synth_out;

static void put(synth_out *o, const mt_record *r)
{
    if (!o->failed && mt_writer_put(o->w, r) < 0) o->failed = errno ? errno : EIO;
}

static uint32_t node(synth_out *o, uint32_t parent, uint64_t ip, unsigned kind)
{
    mt_record r = {.type = MT_REC_STACK_NODE};
    r.u.node = (mt_stack_node){.id = o->next_node, .parent = parent, .ip = ip, .frame_kind = (uint8_t)kind};
    put(o, &r);
    return o->next_node++;
}

static void pycode(synth_out *o, uint32_t id, const char *file, const char *qual)
{
    mt_record r = {.type = MT_REC_PYCODE};
    r.u.pycode = (mt_pycode){.id = id, .firstlineno = 1, .filename = file, .qualname = qual};
    put(o, &r);
}

static void module(synth_out *o, uint32_t id, const char *path, uint64_t start)
{
    mt_record r = {.type = MT_REC_MODULE};
    r.u.module = (mt_module){.id = id, .bias = start, .start = start, .end = start + 0x100000, .path = path};
    put(o, &r);
}

static void symbol(synth_out *o, uint64_t ip, uint32_t mod, const char *fn)
{
    mt_record r = {.type = MT_REC_SYMBOL};
    r.u.symbol = (mt_symbol){.ip = ip, .module = mod, .function = fn, .file = ""};
    put(o, &r);
}

/* The trie; returns the leaf of every synthetic stack id 1..256 in leaf[]. */
static void stacks(synth_out *o, uint32_t leaf[257])
{
    static const char *const ops[OPS] = {
        "at::_ops::linear::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)",
        "at::_ops::empty_strided::call(c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>)",
        "at::_ops::layer_norm::call(at::Tensor const&, c10::ArrayRef<c10::SymInt>)",
        "at::_ops::gelu::call(at::Tensor const&, std::basic_string_view<char>)",
        "at::_ops::softmax_int::call(at::Tensor const&, long, std::optional<c10::ScalarType>)",
        "at::_ops::cat::call(c10::IListRef<at::Tensor> const&, long)",
        "at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&, c10::Scalar const&)",
        "at::_ops::matmul::call(at::Tensor const&, at::Tensor const&)",
    };
    module(o, 1, "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so", 0x10000000);
    module(o, 2, "/opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13", 0x20000000);
    module(o, 3, "/opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13", 0x30000000);
    pycode(o, 1, "/home/user/proj/train.py", "<module>");
    pycode(o, 2, "/home/user/proj/train.py", "main");
    pycode(o, 3, "/home/user/proj/train.py", "train_step");
    pycode(o, 4, "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", "Module._call_impl");
    if (o->tensors) /* the optimizer's step, for its thread's stacks (below) */
        pycode(o, 5, "/opt/venv/lib/python3.12/site-packages/torch/optim/adamw.py", "AdamW.step");
    char qual[64];
    for (unsigned b = 0; b < BLOCKS; b++) {
        snprintf(qual, sizeof qual, "Block%u.forward", b);
        pycode(o, 10 + b, "/home/user/proj/model.py", qual);
    }
    /* a SYMBOL names the return address a stack node holds */
    for (unsigned k = 0; k < OPS; k++) symbol(o, 0x10001000 + 0x100 * k + 8, 1, ops[k]);
    symbol(o, 0x10009000 + 8, 1, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)");
    symbol(o, 0x30001000 + 8, 3, "cublasLtMatmul");
    symbol(o, 0x20001000 + 8, 2, "cudaMalloc");
    if (o->tensors)
        symbol(o, 0x10002000 + 8, 1,
               "torch::autograd::Engine::evaluate_function("
               "std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*)");
    uint32_t top = node(o, 0, PY(1, 120), MT_FRAME_PYTHON);
    uint32_t mainf = node(o, top, PY(2, 80), MT_FRAME_PYTHON);
    uint32_t id = 1;
    for (unsigned s = 0; s < STEPS; s++) {
        /* train.py:60 forward, :63 loss, :66 backward, :69 optimizer step */
        uint32_t step = node(o, mainf, PY(3, 60 + 3 * s), MT_FRAME_PYTHON);
        /* With tensors, the stacks of the third thread (synthetic.h: thread t allocates with
         * stack ids t*64+1..) are a backward pass's and the fourth's an optimizer step's, so
         * the analysis finds every category's phase and their ends, as in a training run. */
        if (o->tensors && s == 2) step = node(o, step, 0x10002000 + 8, MT_FRAME_NATIVE);
        if (o->tensors && s == 3) step = node(o, step, PY(5, 210), MT_FRAME_PYTHON);
        for (unsigned b = 0; b < BLOCKS; b++) {
            uint32_t call = node(o, step, PY(4, 1790), MT_FRAME_PYTHON);
            uint32_t blk = node(o, call, PY(10 + b, 30 + 4 * (b % 4)), MT_FRAME_PYTHON);
            for (unsigned k = 0; k < OPS; k++) {
                uint32_t op = node(o, blk, 0x10001000 + 0x100 * k + 8, MT_FRAME_NATIVE);
                uint32_t lib = k == OPS - 1 ? node(o, op, 0x30001000 + 8, MT_FRAME_NATIVE)
                                            : node(o, op, 0x10009000 + 8, MT_FRAME_NATIVE);
                leaf[id++] = node(o, lib, 0x20001000 + 8, MT_FRAME_NATIVE);
            }
        }
    }
}

/* As PyTorch's caching allocator reports them under record --tensors: kind tensor, no context,
 * API or correlation, a free without a stack, and aux its `allocated` counter after the event. */
static void as_tensor(mt_event *e, uint64_t *allocated)
{
    *allocated = e->op == MT_OP_ALLOC ? *allocated + e->bytes : *allocated - e->bytes;
    e->kind = MT_KIND_TENSOR;
    e->context = 0;
    e->api = 0;
    e->correlation = 0;
    e->aux = *allocated;
    if (e->op == MT_OP_FREE) e->stack = 0;
}

static int write_file(const char *path, uint64_t n, uint64_t seed, int tensors)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    const uint64_t t0 = 3600ull * 1000000000ull; /* synthetic.h's clocks start here */
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 4242, .start_monotonic_ns = t0,
                        .start_realtime_ns = 1767225600ull * 1000000000ull /* 2026-01-01 */};
    synth_out out = {.w = mt_writer_open_fd(fd, &h, 0), .next_node = 1, .tensors = tensors};
    synth_out *o = &out;
    if (!o->w) {
        close(fd);
        return -1;
    }
    mt_record r = {.type = MT_REC_PROCESS};
    r.u.process = (mt_process){.pid = 4242, .ppid = 1, .comm = "python3",
                               .cmdline = "python3 train.py --synthetic", .hostname = "synthetic"};
    put(o, &r);
    r = (mt_record){.type = MT_REC_DEVICE};
    r.u.device = (mt_device){.ordinal = 0, .total_bytes = 80ull << 30, .name = "Synthetic GPU", .uuid = ""};
    put(o, &r);
    uint32_t leaf[257] = {0};
    stacks(o, leaf);
    mt_synth s;
    mt_synth_init(&s, seed);
    uint64_t live = 0, next_sample = t0, last = t0, allocated = 0;
    for (uint64_t i = 0; i < n; i++) {
        r = (mt_record){.type = MT_REC_EVENT};
        mt_synth_next(&s, &r.u.event);
        mt_event *e = &r.u.event;
        if (e->stack >= 1 && e->stack <= 256) e->stack = leaf[e->stack];
        if (tensors) as_tensor(e, &allocated);
        live = e->op == MT_OP_ALLOC ? live + e->bytes : live - e->bytes;
        put(o, &r);
        if (e->time_ns > last) last = e->time_ns;
        if (e->time_ns >= next_sample) { /* the sampler thread, every 50 ms */
            mt_record smp = {.type = MT_REC_SAMPLE};
            smp.u.sample = (mt_sample){.time_ns = e->time_ns, .device = 0,
                                       .counter = MT_COUNTER_NVML_PROCESS_BYTES,
                                       .value = live + 600 * MiB};
            put(o, &smp);
            next_sample = e->time_ns + 50000000ull;
        }
    }
    r = (mt_record){.type = MT_REC_END};
    r.u.end = (mt_end){.time_ns = last + 1000, .events = n, .dropped = 0};
    put(o, &r);
    int failed = o->failed;
    if (mt_writer_close(o->w, 1) < 0) return -1;
    errno = failed;
    return failed ? -1 : 0;
}

int mt_synth_file_write(const char *path, uint64_t n, uint64_t seed)
{
    return write_file(path, n, seed, 0);
}

int mt_synth_file_write_tensors(const char *path, uint64_t n, uint64_t seed)
{
    return write_file(path, n, seed, 1);
}
