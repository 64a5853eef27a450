#include "hostile.h"

#include <fcntl.h>
#include <unistd.h>

#include "memtrace/trace.h"

static mt_writer *open_trace_at(const char *path, uint64_t realtime_ns)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return NULL;
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 4242, .start_monotonic_ns = 1000,
                        .start_realtime_ns = realtime_ns};
    mt_writer *w = mt_writer_open_fd(fd, &h, 0);
    if (!w) close(fd);
    return w;
}

static mt_writer *open_trace(const char *path) { return open_trace_at(path, 0); }

static int put_node(mt_writer *w, uint32_t id, uint32_t parent, uint64_t ip)
{
    mt_record r = {.type = MT_REC_STACK_NODE,
                   .u.node = {.id = id, .parent = parent, .ip = ip, .frame_kind = MT_FRAME_NATIVE}};
    return mt_writer_put(w, &r);
}

static int put_event(mt_writer *w, uint8_t op, int32_t device, uint64_t address, uint64_t bytes,
                     uint32_t stack, uint64_t t)
{
    mt_record r = {.type = MT_REC_EVENT,
                   .u.event = {.time_ns = 1000 + t,
                               .address = address,
                               .bytes = bytes,
                               .device = device,
                               .stack = stack,
                               .op = op,
                               .kind = MT_KIND_DEVICE,
                               .context = 1,
                               .tid = 7}};
    return mt_writer_put(w, &r);
}

static int finish(mt_writer *w, int rc)
{
    return mt_writer_close(w, 1) == 0 && rc == 0 ? 0 : -1;
}

int mt_hostile_id_bomb(const char *path, uint32_t id)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = put_node(w, id, 0, 0x401000);
    rc |= put_event(w, MT_OP_ALLOC, 0, 0x7f0000000000, 4096, id, 1);
    return finish(w, rc);
}

int mt_hostile_devices(const char *path, uint32_t n)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        int32_t dev = i % 16 == 15 ? -(int32_t)i : (int32_t)i;
        rc = put_event(w, MT_OP_ALLOC, dev, 0x7f0000000000 + (uint64_t)i * 4096, 4096, 0, i);
    }
    return finish(w, rc);
}

int mt_hostile_unknown_device_frees(const char *path, uint32_t n_devices, uint32_t n_frees)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    for (uint32_t i = 0; i < n_devices && rc == 0; i++)
        rc = put_event(w, MT_OP_ALLOC, (int32_t)i, 0x7f0000000000 + (uint64_t)i * 4096, 4096, 0, i);
    for (uint32_t i = 0; i < n_frees && rc == 0; i++)
        rc = put_event(w, MT_OP_FREE, -1, 0x100000000 + (uint64_t)i * 512, 0, 0, n_devices + i);
    return finish(w, rc);
}

int mt_hostile_parent_cycle(const char *path, uint32_t ring, uint32_t leaves)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = put_node(w, 1, ring, 0x401000);
    for (uint32_t id = 2; id <= ring && rc == 0; id++)
        rc = put_node(w, id, id - 1, 0x401000 + id);
    for (uint32_t i = 0; i < leaves && rc == 0; i++) {
        uint32_t leaf = ring + 1 + i;
        rc = put_node(w, leaf, 1 + i % ring, 0x500000 + i);
        rc |= put_event(w, MT_OP_ALLOC, 0, 0x7f0000000000 + (uint64_t)i * 4096, 4096, leaf, i);
    }
    return finish(w, rc);
}

int mt_hostile_deep_chain(const char *path, uint32_t depth, uint32_t leaves)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    for (uint32_t id = 1; id <= depth && rc == 0; id++)
        rc = put_node(w, id, id - 1, 0x401000 + id);
    for (uint32_t i = 0; i < leaves && rc == 0; i++) {
        uint32_t leaf = depth + 1 + i;
        rc = put_node(w, leaf, depth, 0x500000 + i);
        rc |= put_event(w, MT_OP_ALLOC, 0, 0x7f0000000000 + (uint64_t)i * 4096, 4096, leaf, i);
    }
    return finish(w, rc);
}

static int put_full(mt_writer *w, const mt_event *e)
{
    mt_record r = {.type = MT_REC_EVENT, .u.event = *e};
    return mt_writer_put(w, &r);
}

int mt_hostile_peaks_over_a_big_live_set(const char *path, uint32_t live, uint32_t devices)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    uint64_t t = 0;
    for (uint32_t i = 0; i < live && rc == 0; i++)
        rc = put_event(w, MT_OP_ALLOC, 0, 0x7f0000000000 + (uint64_t)i * 512, 512, 1 + i % 64, t++);
    for (uint32_t d = 1; d <= devices && rc == 0; d++)
        rc = put_event(w, MT_OP_ALLOC, (int32_t)d, 0x10000000000 * d, 4096, 1, t++);
    return finish(w, rc);
}

int mt_hostile_many_pools(const char *path, uint32_t n)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        mt_event e = {.time_ns = 1000 + i, .address = 0x5000 + (uint64_t)i * 16, .bytes = 1u << 20,
                      .op = MT_OP_POOL_RESERVED, .kind = MT_KIND_POOL, .device = 0};
        rc = put_full(w, &e);
    }
    return finish(w, rc);
}

int mt_hostile_descending_maps(const char *path, uint32_t n)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    uint64_t top = 0x7f0000000000;
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (uint32_t i = 0; i < n && rc == 0; i++) {
            mt_event e = {.time_ns = 1000 + pass * n + i, .address = top - (uint64_t)i * 0x200000,
                          .bytes = 0x200000, .aux = 1 + i, .op = pass ? MT_OP_FREE : MT_OP_ALLOC,
                          .kind = MT_KIND_VMM_MAP, .device = 0, .context = 1};
            rc = put_full(w, &e);
        }
    return finish(w, rc);
}

int mt_hostile_context_churn(const char *path, uint32_t live, uint32_t n)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    uint64_t t = 0;
    for (uint32_t i = 0; i < live && rc == 0; i++)
        rc = put_event(w, MT_OP_ALLOC, 0, 0x7f0000000000 + (uint64_t)i * 512, 512, 0, t++);
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        mt_event a = {.time_ns = 1000 + t++, .address = 0x100000000 + (uint64_t)i * 512,
                      .bytes = 512, .op = MT_OP_ALLOC, .kind = MT_KIND_DEVICE, .context = 2};
        mt_event d = {.time_ns = 1000 + t++, .op = MT_OP_CTX_DESTROY, .kind = MT_KIND_UNKNOWN,
                      .context = 2};
        rc = put_full(w, &a) | put_full(w, &d);
    }
    return finish(w, rc);
}

int mt_hostile_future_samples(const char *path, uint32_t samples, uint32_t events)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    int rc = 0;
    for (uint32_t i = 0; i < samples && rc == 0; i++) {
        mt_record r = {.type = MT_REC_SAMPLE,
                       .u.sample = {.time_ns = 4000000000000000000ull + i, .device = 0,
                                    .counter = MT_COUNTER_NVML_PROCESS_BYTES, .value = 1u << 30}};
        rc = mt_writer_put(w, &r);
    }
    for (uint32_t i = 0; i < events && rc == 0; i++) {
        uint8_t op = (i / 1000) % 2 ? MT_OP_FREE : MT_OP_ALLOC;
        rc = put_event(w, op, 0, 0x7f0000000000 + (uint64_t)(i % 1000) * 4096, 4096, 0, 1000 + i);
        if (i % 1000 == 0 && rc == 0) {
            mt_record r = {.type = MT_REC_SAMPLE,
                           .u.sample = {.time_ns = 1000 + i, .device = 0,
                                        .counter = MT_COUNTER_NVML_PROCESS_BYTES,
                                        .value = 1u << 30}};
            rc = mt_writer_put(w, &r);
        }
    }
    return finish(w, rc);
}

int mt_hostile_phase_churn(const char *path, uint32_t live, uint32_t n)
{
    mt_writer *w = open_trace(path);
    if (!w) return -1;
    mt_record code[2] = {
        {.type = MT_REC_PYCODE,
         .u.pycode = {.id = 1, .firstlineno = 1, .filename = "/venv/lib/python3.12/site-packages/torch/optim/adam.py",
                      .qualname = "Adam.step"}},
        {.type = MT_REC_PYCODE,
         .u.pycode = {.id = 2, .firstlineno = 1, .filename = "/src/model.py",
                      .qualname = "Net.forward"}}};
    mt_record node[2] = {
        {.type = MT_REC_STACK_NODE,
         .u.node = {.id = 1, .parent = 0, .ip = 1ull << 32 | 10, .frame_kind = MT_FRAME_PYTHON}},
        {.type = MT_REC_STACK_NODE,
         .u.node = {.id = 2, .parent = 0, .ip = 2ull << 32 | 20, .frame_kind = MT_FRAME_PYTHON}}};
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) rc = mt_writer_put(w, &code[i]) | mt_writer_put(w, &node[i]);
    uint64_t t = 0, a = 0x7f0000000000;
    for (uint32_t i = 0; i < live && rc == 0; i++) {
        mt_event e = {.time_ns = 1000 + t++, .address = a += 512, .bytes = 512, .stack = 2,
                      .op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .device = 0, .context = 1};
        rc = put_full(w, &e);
    }
    for (uint32_t i = 0; i < n && rc == 0; i++)
        for (uint32_t stack = 1; stack <= 2 && rc == 0; stack++) {
            mt_event e = {.time_ns = 1000 + t++, .address = a += 512, .bytes = 512, .stack = stack,
                          .op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .device = 0, .context = 1};
            rc = put_full(w, &e);
        }
    return finish(w, rc);
}

int mt_hostile_python_source(const char *path, const char *filename, uint32_t line)
{
    return mt_hostile_python_source_at(path, filename, line, 0);
}

int mt_hostile_python_source_at(const char *path, const char *filename, uint32_t line,
                                uint64_t realtime_ns)
{
    mt_writer *w = open_trace_at(path, realtime_ns);
    if (!w) return -1;
    mt_record code = {.type = MT_REC_PYCODE,
                      .u.pycode = {.id = 1, .firstlineno = 1, .filename = filename,
                                   .qualname = "step"}};
    mt_record node = {.type = MT_REC_STACK_NODE,
                      .u.node = {.id = 1, .parent = 0, .ip = 1ull << 32 | line,
                                 .frame_kind = MT_FRAME_PYTHON}};
    int rc = mt_writer_put(w, &code) | mt_writer_put(w, &node);
    mt_event e = {.time_ns = 2000, .address = 0x7f0000000000, .bytes = 4096, .stack = 1,
                  .op = MT_OP_ALLOC, .kind = MT_KIND_TENSOR, .device = 0, .context = 1};
    if (rc == 0) rc = put_full(w, &e);
    return finish(w, rc);
}
