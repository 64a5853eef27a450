/* The synthetic traces of ci_traces.h, written record by record with the trace writer. */
#include "ci_traces.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/trace.h"

#define T0 1000000000ull              /* start_monotonic_ns */
#define REAL0 1700000000000000000ull  /* 2023-11-14 22:13:20 UTC */
#define MS 1000000ull
#define A ((uint64_t)0x7f0000000000)
#define PY(code, line) (((uint64_t)(code) << 32) | (line))
#define SEG (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED)

typedef struct tb {
    mt_writer *w;
    int fd, err;
    char path[1024];
} tb;

static int tb_open_ranked(tb *b, const char *dir, const char *name, uint32_t pid, int rank);

static int tb_open(tb *b, const char *dir, const char *name, uint32_t pid)
{
    return tb_open_ranked(b, dir, name, pid, -1);
}

/* rank >= 0: a rank of a job of 2 (the trace header's rank fields, as torchrun sets them) */
static int tb_open_ranked(tb *b, const char *dir, const char *name, uint32_t pid, int rank)
{
    memset(b, 0, sizeof *b);
    snprintf(b->path, sizeof b->path, "%s/%s", dir, name);
    b->fd = open(b->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (b->fd < 0) {
        perror(b->path);
        return -1;
    }
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = pid, .start_monotonic_ns = T0,
                        .start_realtime_ns = REAL0, .rank = -1, .local_rank = -1,
                        .world_size = -1, .node_rank = -1};
    if (rank >= 0) {
        h.flags |= MT_HDR_RANK;
        h.rank = h.local_rank = rank;
        h.world_size = 2;
        h.node_rank = 0;
    }
    b->w = mt_writer_open_fd(b->fd, &h, 0);
    if (!b->w) {
        fprintf(stderr, "%s: cannot start the trace\n", b->path);
        close(b->fd);
        return -1;
    }
    return 0;
}

static void put(tb *b, const mt_record *r)
{
    if (!b->err && mt_writer_put(b->w, r) < 0) b->err = 1;
}

static int tb_close(tb *b, uint64_t end_ms)
{
    mt_record r = {.type = MT_REC_END};
    r.u.end = (mt_end){.time_ns = T0 + end_ms * MS};
    put(b, &r);
    if (mt_writer_close(b->w, 1) < 0 || b->err) {
        fprintf(stderr, "%s: write failed\n", b->path);
        return -1;
    }
    return 0;
}

/* An event at T0 + t_us microseconds. */
static void ev(tb *b, unsigned op, unsigned kind, int device, uint64_t addr, uint64_t bytes,
               uint64_t t_us, uint32_t stack, uint16_t flags, uint64_t aux)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = T0 + t_us * 1000, .address = addr, .bytes = bytes,
                           .tid = 7, .context = 1, .stack = stack, .device = device, .aux = aux,
                           .flags = flags, .op = (uint8_t)op, .kind = (uint8_t)kind};
    if (op == MT_OP_FAILED) r.u.event.result = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    put(b, &r);
}

static void node(tb *b, uint32_t id, uint32_t parent, uint64_t ip, unsigned kind)
{
    mt_record r = {.type = MT_REC_STACK_NODE};
    r.u.node = (mt_stack_node){.id = id, .parent = parent, .ip = ip, .frame_kind = (uint8_t)kind};
    put(b, &r);
}

static void module(tb *b, uint32_t id, const char *path, uint64_t start, uint64_t end)
{
    mt_record r = {.type = MT_REC_MODULE};
    r.u.module = (mt_module){.id = id, .bias = start, .start = start, .end = end, .path = path};
    put(b, &r);
}

static void symbol(tb *b, uint64_t ip, const char *fn, const char *file, uint32_t line)
{
    mt_record r = {.type = MT_REC_SYMBOL};
    r.u.symbol = (mt_symbol){.ip = ip, .function = fn, .file = file, .line = line};
    put(b, &r);
}

static void pycode(tb *b, uint32_t id, const char *file, const char *qual)
{
    mt_record r = {.type = MT_REC_PYCODE};
    r.u.pycode = (mt_pycode){.id = id, .firstlineno = 1, .filename = file, .qualname = qual};
    put(b, &r);
}

static void process(tb *b, uint32_t pid, const char *comm, const char *cmdline)
{
    mt_record r = {.type = MT_REC_PROCESS};
    r.u.process = (mt_process){.pid = pid, .ppid = 1, .comm = comm, .cmdline = cmdline,
                               .hostname = "ci-runner"};
    put(b, &r);
}

static void gpu(tb *b, int ordinal)
{
    mt_record r = {.type = MT_REC_DEVICE};
    r.u.device = (mt_device){.ordinal = ordinal, .total_bytes = 80ull << 30,
                             .name = "Synthetic GPU", .uuid = "GPU-0000"};
    put(b, &r);
}

static void nvml(tb *b, int device, uint64_t t_us, uint64_t value)
{
    mt_record r = {.type = MT_REC_SAMPLE};
    r.u.sample = (mt_sample){.time_ns = T0 + t_us * 1000, .device = device,
                             .counter = MT_COUNTER_NVML_PROCESS_BYTES, .value = value};
    put(b, &r);
}

static void note(tb *b, uint64_t t_us, uint32_t level, const char *text)
{
    mt_record r = {.type = MT_REC_NOTE};
    r.u.note = (mt_note){.time_ns = T0 + t_us * 1000, .level = level, .text = text};
    put(b, &r);
}

static int budget_trace(const char *dir)
{
    tb b;
    if (tb_open(&b, dir, "budget.mtrace", 4242) < 0) return -1;
    process(&b, 4242, "train", "./train --epochs 1");
    gpu(&b, 0);
    gpu(&b, 1);
    module(&b, 1, "/opt/app/train", 0x400000, 0x410000);
    static const char *const fns[] = {"main", "load_model", "train_step", "leak_cache",
                                      "too_big", "shard", "pinned_buffer"};
    for (uint32_t i = 0; i < 7; i++) {
        symbol(&b, 0x400100 + 0x100 * i, fns[i], "/src/train.c", 10 + i);
        node(&b, i + 1, i ? 1 : 0, 0x400100 + 0x100 * i, MT_FRAME_NATIVE);
    }
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, CI_MiB, 1000, 2, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 1, A + 0x10000000, CI_BUDGET_PEAK1, 2000, 6, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x1000000, 2 * CI_MiB + 5, 3000, 3, 0, 0);
    ev(&b, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x1000000, 2 * CI_MiB + 5, 4000, 3, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x2000000, CI_BUDGET_LEAK0, 5000, 4, 0, 0);
    ev(&b, MT_OP_FAILED, MT_KIND_DEVICE, 0, 0, 1ull << 30, 6000, 5, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_HOST_PINNED, -1, 0x5000000, 4096, 7000, 7, 0, 0);
    ev(&b, MT_OP_FREE, MT_KIND_HOST_PINNED, -1, 0x5000000, 4096, 7500, 7, 0, 0);
    ev(&b, MT_OP_FREE, MT_KIND_DEVICE, 1, A + 0x10000000, CI_BUDGET_PEAK1, 8000, 6, 0, 0);
    ev(&b, MT_OP_FREE, MT_KIND_DEVICE, 0, A, CI_MiB, 9000, 2, 0, 0);
    return tb_close(&b, 10);
}

static int tensors_trace(const char *dir)
{
    tb b;
    if (tb_open(&b, dir, "tensors.mtrace", 5151) < 0) return -1;
    process(&b, 5151, "python3", "python3 train.py --tensors-demo");
    gpu(&b, 0);
    /* relative, as Python records a script run as `python proj/train.py`: a check that runs in a
     * directory holding proj/train.py sees the source lines */
    const char *file = CI_TENSOR_FILE;
    static const char *const quals[] = {"<module>", "make_a", CI_TENSOR_FN_B, CI_TENSOR_FN_C,
                                        CI_TENSOR_FN_WS, "alloc_segment"};
    for (uint32_t i = 0; i < 6; i++) {
        pycode(&b, i + 1, file, quals[i]);
        node(&b, i + 1, i ? 1 : 0, PY(i + 1, 10 * (i + 1)), MT_FRAME_PYTHON);
    }
    nvml(&b, 0, 0, 500 * CI_MiB);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, CI_TENSOR_RESERVED, 1000, 6, SEG, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_TENSOR, 0, A, 512, 3000, 2, 0, 512);
    ev(&b, MT_OP_ALLOC, MT_KIND_TENSOR, 0, A + 512, 1024, 4000, 3, 0, 1536);
    ev(&b, MT_OP_FREE, MT_KIND_TENSOR, 0, A, 512, 5000, 0, 0, 1024);
    ev(&b, MT_OP_ALLOC, MT_KIND_TENSOR, 0, A + 4096, 4096, 6000, 4, 0, 5120);
    ev(&b, MT_OP_FREE, MT_KIND_TENSOR, 0, A + 512, 1024, 7000, 0, 0, 4096);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x4000000, CI_MiB, 8000, 5, 0, 0);
    nvml(&b, 0, 9000, 600 * CI_MiB);
    /* the recorder's cost notes at exit, as a --tensors run writes them (notes.c) */
    note(&b, 9500, MT_NOTE_INFO,
         "tensor reports: about 4 allocations and frees reported by PyTorch's caching allocator, "
         "300 ns each on average inside memtrace (1 in 16 timed)");
    note(&b, 9500, MT_NOTE_INFO,
         "writer thread: 1.5 ms of CPU in 0.010 s (15.00% of one core) over 3 cycles: 0.5 ms in "
         "its ticks (modules, pool polls, CUPTI's buffers flushed), the rest ordering, "
         "compressing and writing the trace; on none of the program's threads, so in none of "
         "the times above");
    return tb_close(&b, 10);
}

static int names_trace(const char *dir)
{
    tb b;
    if (tb_open(&b, dir, "names.mtrace", 6262) < 0) return -1;
    process(&b, 6262, "python3", "python3 'we|ird dir/mod_x.py' --flag=`x` <in");
    gpu(&b, 0);
    static const char *const quals[] = {"<module>", CI_NAME_LOCALS, CI_NAME_PIPE, CI_NAME_TICK,
                                        CI_NAME_UNDER, CI_NAME_STAR};
    for (uint32_t i = 0; i < 6; i++) {
        pycode(&b, i + 1, CI_NAME_FILE, quals[i]);
        node(&b, i + 1, i ? 1 : 0, PY(i + 1, 100 + i), MT_FRAME_PYTHON);
    }
    module(&b, 1, "/opt/lib/libflags.so", 0x800000, 0x810000);
    symbol(&b, 0x800100, "ns::Flags::operator|(ns::Flags, ns::Flags)", "", 0);
    node(&b, 20, 0, 0x800100, MT_FRAME_NATIVE);
    for (uint32_t i = 0; i < 5; i++)
        ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x100000 * i, (i + 1) * CI_MiB, 1000 + i, 2 + i, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x900000, 6 * CI_MiB, 1010, 20, 0, 0);
    ev(&b, MT_OP_FAILED, MT_KIND_DEVICE, 0, 0, 1ull << 34, 2000, 3, 0, 0);
    for (uint32_t i = 1; i < 5; i++)
        ev(&b, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x100000 * i, (i + 1) * CI_MiB, 3000 + i, 2 + i, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_HOST_PINNED, -1, 0x5000000, 8192, 4000, 4, 0, 0);
    return tb_close(&b, 5);
}

/* One run of the "moved" program. new_run: the second machine and the edited program. */
static int moved_trace(const char *dir, int new_run)
{
    tb b;
    uint32_t pid = new_run ? 2002 : 1001, c = new_run ? 100 : 0, n = new_run ? 500 : 0;
    uint64_t bias = new_run ? 0x7100000 : 0x7000000, off = new_run ? 0x1250 : 0x1234;
    const char *file = new_run ? "/srv/runner/_work/proj2/proj2/train.py" : "/home/a/proj/train.py";
    const char *torch = "/usr/lib/python3/site-packages/torch/nn/modules/module.py";
    if (tb_open(&b, dir, new_run ? "moved_new.mtrace" : "moved_base.mtrace", pid) < 0) return -1;
    process(&b, pid, "python3", "python3 train.py");
    gpu(&b, 0);
    module(&b, 1, "/usr/lib/libfoo.so", bias, bias + 0x10000);
    pycode(&b, c + 1, file, "<module>");
    pycode(&b, c + 2, file, "grow");
    pycode(&b, c + 3, file, "step");
    pycode(&b, c + 4, file, "keep");
    pycode(&b, c + 5, file, new_run ? "only_new" : "only_base");
    pycode(&b, c + 6, torch, "Module._call_impl");
    node(&b, n + 1, 0, PY(c + 1, 5), MT_FRAME_PYTHON);
    node(&b, n + 2, n + 1, PY(c + 2, 10), MT_FRAME_PYTHON);                 /* grow */
    node(&b, n + 3, n + 2, PY(c + 6, 1790), MT_FRAME_PYTHON);
    node(&b, n + 4, n + 1, PY(c + 3, new_run ? 22 : 20), MT_FRAME_PYTHON);  /* step, moved */
    node(&b, n + 5, n + 1, PY(c + 4, 30), MT_FRAME_PYTHON);                 /* keep */
    node(&b, n + 6, n + 1, PY(c + 5, 40), MT_FRAME_PYTHON);                 /* only_* */
    node(&b, n + 7, 0, bias + off, MT_FRAME_NATIVE);                        /* no symbol */
    uint64_t t = 1000;
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, new_run ? CI_MOVED_GROW_NEW : CI_MOVED_GROW_BASE, t++,
       n + 3, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x1000000, new_run ? CI_MOVED_STEP_NEW : CI_MOVED_STEP,
       t++, n + 4, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x2000000, CI_MOVED_KEEP, t++, n + 5, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x3000000,
       new_run ? CI_MOVED_ONLY_NEW : CI_MOVED_ONLY_BASE, t++, n + 6, 0, 0);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + 0x4000000, CI_MiB, t++, n + 7, 0, 0);
    /* the second machine's run had a profiler take CUPTI's activity records at its end */
    if (new_run)
        note(&b, t, MT_NOTE_WARNING,
             MT_ACTIVITY_NOTE_STOPPED ": torch.profiler registered its own CUPTI activity buffers");
    for (uint64_t k = 0; k < 5; k++) ev(&b, MT_OP_FREE, MT_KIND_DEVICE, 0, A + 0x1000000 * k, 0, t++, 0, 0, 0);
    return tb_close(&b, 5);
}

static int rank_trace(const char *dir, int rank)
{
    tb b;
    char name[32], cmd[64];
    snprintf(name, sizeof name, "rank%d.mtrace", rank);
    snprintf(cmd, sizeof cmd, "python3 train.py --rank %d", rank);
    if (tb_open_ranked(&b, dir, name, 3000 + (uint32_t)rank, rank) < 0) return -1;
    process(&b, 3000 + (uint32_t)rank, "python3", cmd);
    gpu(&b, rank);
    module(&b, 1, "/opt/app/train", 0x400000, 0x410000);
    symbol(&b, 0x400100, "all_reduce_buffers", "/src/dist.c", 7);
    node(&b, 1, 0, 0x400100, MT_FRAME_NATIVE);
    ev(&b, MT_OP_ALLOC, MT_KIND_DEVICE, rank, A, rank ? CI_RANK1_PEAK : CI_RANK0_PEAK, 1000, 1, 0, 0);
    ev(&b, MT_OP_FREE, MT_KIND_DEVICE, rank, A, 0, 2000, 0, 0, 0);
    return tb_close(&b, 3);
}

int ci_traces_write(const char *dir)
{
    if (budget_trace(dir) < 0 || tensors_trace(dir) < 0 || names_trace(dir) < 0 ||
        moved_trace(dir, 0) < 0 || moved_trace(dir, 1) < 0 || rank_trace(dir, 0) < 0 ||
        rank_trace(dir, 1) < 0)
        return -1;
    return 0;
}
