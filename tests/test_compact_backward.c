/* A failed request of autograd's backward pass names the backward() call that started it
 * (src/compact/backward_calls.c): on synthetic traces whose answer is known by construction, and
 * on the GPU-recorded fixture tests/data/oom_graph_t.mtrace against PyTorch's own traceback
 * (oom_graph_t.stats.json: the line of samples/oom.py that called backward()). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_compact_fixture.h"

#define A ((uint64_t)0x7f0000000000)
#define PY(code, line) MT_PY_IP(code, line)
#define MAIN 7
#define WORKER 9
#define WORKER_PY 11 /* an autograd worker running a Python backward (thread pt_autograd_1) */

static void pycode(fx *f, uint32_t id, const char *file, const char *qual)
{
    mt_record r = {.type = MT_REC_PYCODE};
    r.u.pycode = (mt_pycode){.id = id, .firstlineno = 1, .filename = file, .qualname = qual};
    fx_put(f, &r);
}

static void thread(fx *f, uint32_t tid, const char *name)
{
    mt_record r = {.type = MT_REC_THREAD};
    r.u.thread = (mt_thread){.tid = tid, .name = name};
    fx_put(f, &r);
}

static void ev(fx *f, unsigned op, unsigned kind, uint64_t addr, uint64_t bytes, uint64_t t_ms,
               uint32_t stack, uint32_t tid)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = FX_T0 + t_ms * MS,
                           .address = addr,
                           .bytes = bytes,
                           .tid = tid,
                           .context = 1,
                           .stack = stack,
                           .device = 0,
                           .op = (uint8_t)op,
                           .kind = (uint8_t)kind,
                           .result = op == MT_OP_FAILED ? 2 : 0};
    fx_put(f, &r);
}

/* Stacks (leaf ids):
 *   1 train.py <module>:10 -> 2 step:20 (the program) -> 3 Tensor.backward -> 4 backward
 *     -> 5 _make_grads: loss.backward()'s initial gradient, called from step:20
 *   1 -> 6 step:30 -> 7 torch.autograd.grad -> 8 _make_grads: autograd.grad from step:30
 *   1 -> 9 Tensor.backward (called from <module> itself, line 40) -> 10 _make_grads
 *   1 -> 2 -> 11 Linear.forward: a forward allocation (no entry point)
 *   20 [autograd backward] -> 21 MmBackward0 (native): the worker's requests
 *   30 Twice.backward (a Python backward on the worker, no pseudo root) */
static void stacks(fx *f)
{
    pycode(f, 1, "/home/u/train.py", "<module>");
    pycode(f, 2, "/home/u/train.py", "step");
    pycode(f, 3, "/venv/lib/python3.12/site-packages/torch/_tensor.py", "Tensor.backward");
    pycode(f, 4, "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", "backward");
    pycode(f, 5, "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", "_make_grads");
    pycode(f, 6, "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", "grad");
    pycode(f, 7, "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "Linear.forward");
    pycode(f, 8, "/home/u/train.py", "Twice.backward");
    fx_node(f, 1, 0, PY(1, 10), MT_FRAME_PYTHON);
    fx_node(f, 2, 1, PY(2, 20), MT_FRAME_PYTHON);
    fx_node(f, 3, 2, PY(3, 630), MT_FRAME_PYTHON);
    fx_node(f, 4, 3, PY(4, 360), MT_FRAME_PYTHON);
    fx_node(f, 5, 4, PY(5, 230), MT_FRAME_PYTHON);
    fx_node(f, 6, 1, PY(2, 30), MT_FRAME_PYTHON);
    fx_node(f, 7, 6, PY(6, 440), MT_FRAME_PYTHON);
    fx_node(f, 8, 7, PY(5, 230), MT_FRAME_PYTHON);
    fx_node(f, 9, 0, PY(3, 630), MT_FRAME_PYTHON);
    fx_node(f, 10, 9, PY(5, 230), MT_FRAME_PYTHON);
    fx_node(f, 11, 2, PY(7, 125), MT_FRAME_PYTHON);
    fx_node(f, 20, 0, MT_PSEUDO_AUTOGRAD, MT_FRAME_PSEUDO);
    fx_node(f, 21, 20, 0x500100, MT_FRAME_NATIVE);
    fx_node(f, 30, 0, PY(8, 5), MT_FRAME_PYTHON);
    thread(f, MAIN, "python3");
    thread(f, WORKER, "pt_autograd_0");
    thread(f, WORKER_PY, "pt_autograd_1");
}

static const char *caller_name(mt_analysis *a, const mt_failed_request *r)
{
    return r->backward_stack ? mt_frames_first_user(a->frames, r->backward_stack, MT_NAME_SHORT)
                             : "(none)";
}

Test(backward, the_entry_points_and_their_caller)
{
    fx f;
    fx_open(&f, "bw_frames.mtrace");
    stacks(&f);
    ev(&f, MT_OP_ALLOC, MT_KIND_TENSOR, A, 512, 1, 11, MAIN);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_frames *fr = a->frames;
    cr_expect_eq(mt_frames_backward_caller(fr, 5), 2,
                 "loss.backward(): step, the outermost entry's caller");
    cr_expect_eq(mt_frames_backward_caller(fr, 4), 2);
    cr_expect_eq(mt_frames_backward_caller(fr, 8), 6, "torch.autograd.grad");
    cr_expect_eq(mt_frames_backward_caller(fr, 10), 9, "no Python caller: the entry itself");
    cr_expect_eq(mt_frames_backward_caller(fr, 11), 0, "a forward allocation");
    cr_expect_eq(mt_frames_backward_caller(fr, 21), 0);
    cr_expect_eq(mt_frames_backward_caller(fr, 999), 0, "an unknown stack");
    cr_expect(mt_frames_autograd_worker(fr, 21));
    cr_expect(mt_frames_autograd_worker(fr, 20));
    cr_expect(!mt_frames_autograd_worker(fr, 5));
    cr_expect(!mt_frames_autograd_worker(fr, 30), "a Python backward has no pseudo root");
    cr_expect(!mt_frames_autograd_worker(fr, 0));
    mt_analysis_free(a);
}

/* Each worker's failure takes the latest call before it, never one after; a failure of the main
 * thread (the forward) takes none; a worker running Python is known by its thread's name. */
Test(backward, each_failure_takes_the_latest_call_before_it)
{
    fx f;
    fx_open(&f, "bw_calls.mtrace");
    stacks(&f);
    ev(&f, MT_OP_ALLOC, MT_KIND_TENSOR, A, 4096, 1, 11, MAIN);        /* forward */
    ev(&f, MT_OP_ALLOC, MT_KIND_TENSOR, A + 0x1000, 512, 2, 5, MAIN); /* step:20 backward() */
    ev(&f, MT_OP_ALLOC, MT_KIND_TENSOR, A + 0x2000, 4096, 3, 21, WORKER);
    ev(&f, MT_OP_FAILED, MT_KIND_TENSOR, 0, 1 << 20, 4, 21, WORKER);    /* #1: step:20 */
    ev(&f, MT_OP_FAILED, MT_KIND_TENSOR, 0, 1 << 20, 5, 11, MAIN);      /* #2: the forward's */
    ev(&f, MT_OP_ALLOC, MT_KIND_TENSOR, A + 0x3000, 512, 6, 8, MAIN);   /* step:30 grad() */
    ev(&f, MT_OP_FAILED, MT_KIND_TENSOR, 0, 1 << 20, 7, 30, WORKER_PY); /* #3: step:30 */
    ev(&f, MT_OP_FAILED, MT_KIND_DEVICE, 0, 2 << 20, 8, 21, WORKER);    /* #4: step:30 */
    ev(&f, MT_OP_ALLOC, MT_KIND_TENSOR, A + 0x4000, 512, 9, 10, MAIN);  /* <module>:40, after */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_failed, 4);
    cr_expect_str_eq(caller_name(a, &a->failed[0]), "step (u/train.py:20)");
    cr_expect_eq(a->failed[0].backward_time_ns, 2 * MS);
    cr_expect_eq(a->failed[1].backward_stack, 0, "the main thread's failure is no backward's");
    cr_expect_str_eq(caller_name(a, &a->failed[2]), "step (u/train.py:30)");
    cr_expect_eq(a->failed[2].backward_time_ns, 6 * MS);
    cr_expect_str_eq(caller_name(a, &a->failed[3]), "step (u/train.py:30)");
    char *text = fx_capture(a, fx_report_text_fn, NULL, "bw_calls.txt");
    cr_expect(strstr(text, "with 0 B allocated, in the backward pass of step (u/train.py:20) "
                           "(failed request #1 below)\n"),
              "%s", text);
    cr_expect(strstr(text,
                     "     in the backward pass started at +0.002000 s by (innermost "
                     "first):\n       step (u/train.py:20)\n       <module> (u/train.py:10)\n"),
              "%s", text);
    free(text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, "bw_calls.json");
    cr_expect(strstr(json, "\"backward_call\":{\"time_ns\":6000000,\"frame\":\"step "
                           "(u/train.py:30)\",\"frames\":[\"<module> (u/train.py:10)\",\"step "
                           "(u/train.py:30)\"]},"),
              "%s", json);
    cr_expect(strstr(json, "\"backward_call\":null,"), "%s", json);
    free(json);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* Without --tensors no call is an event: nothing is named, and the report says what would. */
Test(backward, without_tensors_the_report_says_what_names_it)
{
    fx f;
    fx_open(&f, "bw_default.mtrace");
    stacks(&f);
    ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, A, 2 << 20, 1, 5, MAIN); /* a segment, in backward() */
    ev(&f, MT_OP_FAILED, MT_KIND_DEVICE, 0, 2 << 20, 2, 21, WORKER);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_failed, 1);
    cr_expect_eq(a->failed[0].backward_stack, 0);
    cr_expect(!mt_backward_calls_recorded(a));
    char *text = fx_capture(a, fx_report_text_fn, NULL, "bw_default.txt");
    cr_expect(strstr(text, "in autograd's backward pass (record --tensors names the backward() "
                           "call that started it)"),
              "%s", text);
    free(text);
    mt_analysis_free(a);
}

/* PyTorch's backend:cudaMallocAsync: every tensor is a cudaMallocAsync (an `async` event), the
 * initial gradient's too, in any mode; a segment (a DEVICE allocation) made in another backward()
 * call is not read: the caching allocator grows one only now and then. Its refusal for memory
 * under the backend's own code is the torch.OutOfMemoryError (torch_async), with the device's
 * live async bytes for memory_allocated(); another library's cudaMallocAsync refused, or one
 * refused for another reason, is not. */
Test(backward, under_the_async_backend_its_allocations_name_the_call)
{
    fx f;
    fx_open(&f, "bw_async.mtrace");
    stacks(&f);
    fx_module(&f, 1, "/opt/torch/lib/libc10_cuda.so", 0x500000, 0x510000);
    fx_symbol(&f, 0x500200, 0,
              "c10::cuda::CUDACachingAllocator::CudaMallocAsync::(anonymous namespace)::"
              "mallocAsync(void**, signed char, unsigned long, CUstream_st*)",
              "", 0);
    fx_node(&f, 22, 21, 0x500200, MT_FRAME_NATIVE);           /* the backend's, under the node */
    ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, A, 4096, 1, 11, MAIN); /* forward */
    ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, A + 0x1000, 512, 2, 5, MAIN);        /* backward() */
    ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, A + 0x100000, 2 << 20, 3, 8, MAIN); /* a segment */
    ev(&f, MT_OP_FAILED, MT_KIND_ASYNC, 0, 1 << 20, 4, 21, WORKER);         /* not its code */
    ev(&f, MT_OP_FAILED, MT_KIND_ASYNC, 0, 3 << 20, 5, 22, WORKER);         /* the error */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_failed, 2);
    cr_expect(mt_backward_calls_recorded(a));
    cr_expect_str_eq(caller_name(a, &a->failed[0]), "step (u/train.py:20)");
    cr_expect_eq(a->failed[0].backward_time_ns, 2 * MS);
    cr_expect(!a->failed[0].torch_async, "another library's cudaMallocAsync");
    cr_expect_eq(a->failed[0].torch_allocated, 0);
    cr_expect(a->failed[1].torch_async);
    cr_expect_eq(a->failed[1].torch_allocated, 4096 + 512, "the live async bytes");
    char *text = fx_capture(a, fx_report_text_fn, NULL, "bw_async.txt");
    cr_expect(strstr(text, "     in the backward pass started at +0.002000 s by (innermost "
                           "first):\n       step (u/train.py:20)\n"),
              "%s", text);
    cr_expect(!strstr(text, "record --tensors names"), "%s", text);
    cr_expect(strstr(text, "  out of memory    torch.OutOfMemoryError at +0.005000 s: 3.00 MiB, "
                           "with 4.50 KiB allocated, in the backward pass of step "
                           "(u/train.py:20) (failed request #2 below)\n"),
              "%s", text);
    cr_expect(strstr(text, "     then: PyTorch's backend:cudaMallocAsync raised "
                           "torch.OutOfMemoryError at once"),
              "%s", text);
    cr_expect(!strstr(text, "failed request #1 below"), "%s", text);
    free(text);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

static long stats_int(const char *path, const char *key)
{
    FILE *fp = fopen(path, "r");
    cr_assert(fp, "%s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    char want[64];
    snprintf(want, sizeof want, "\"%s\": ", key);
    const char *p = strstr(buf, want);
    cr_assert(p, "%s has no %s", path, key);
    return strtol(p + strlen(want), NULL, 10);
}

/* A fixture recorded on the GPU (tests/data/NAME.mtrace): its one failed request is autograd's
 * worker's (a C++ node's, under "[autograd backward]", or with python_on_worker Python run on the
 * worker, which its thread's name tells), and the backward() call named is FUNCTION at the line
 * of samples/oom.py that PyTorch's traceback gave (NAME.stats.json: oom_line). */
static void expect_worker_call(const char *name, const char *function, int python_on_worker)
{
    char path[512], stats[512], want[64];
    snprintf(path, sizeof path, "%s/%s.mtrace", MT_TEST_DATA_DIR, name);
    snprintf(stats, sizeof stats, "%s/%s.stats.json", MT_TEST_DATA_DIR, name);
    mt_analysis *a = fx_analyze(path);
    long line = stats_int(stats, "oom_line");
    cr_assert_eq(a->n_failed, 1, "%s", name);
    const mt_failed_request *r = &a->failed[0];
    cr_expect_eq(mt_frames_autograd_worker(a->frames, r->stack), !python_on_worker, "%s", name);
    snprintf(want, sizeof want, "%s (samples/oom.py:%ld)", function, line);
    cr_expect_str_eq(caller_name(a, r), want);
    cr_expect(r->backward_time_ns < r->time_ns, "%s", name);
    mt_analysis_free(a);
}

static void expect_fixture_call(const char *name, const char *function)
{
    expect_worker_call(name, function, 0);
}

/* Recorded on an H200 (samples/oom.py --fraction 0.05 --graph): PyTorch raised in autograd's
 * engine during a CUDA graph's capture; the traceback's innermost line of oom.py is the
 * backward() call. */
Test(backward, gpu_fixture_names_the_line_of_pytorchs_traceback)
{
    expect_fixture_call("oom_graph_t", "graph_step");
}

/* Recorded on an H200 (samples/oom.py --in-backward --layers 2): an eager step whose forward fits
 * and whose backward does not; the traceback's line of oom.py is loss.backward(). */
Test(backward, gpu_fixture_of_an_eager_backward_names_its_line)
{
    expect_fixture_call("oom_bwd_t", "step");
}

/* Recorded on an H200 (samples/oom.py --in-backward --layers 16 --checkpoint 8, --tensors):
 * activation checkpointing computes a block again in the backward pass, in Python on autograd's
 * worker (no "[autograd backward]": its thread's name says whose it is), and that runs out. */
Test(backward, gpu_fixture_of_a_recomputation_names_its_line)
{
    expect_worker_call("oom_ckpt_t", "step", 1);
}

/* Recorded on an H200 under backend:cudaMallocAsync (samples/oom.py --in-backward --ballast), with
 * --tensors=async and in default mode: the driver refuses the worker's cudaMallocAsync, which is
 * the torch.OutOfMemoryError; the initial gradient's cudaMallocAsync names loss.backward(). */
Test(backward, gpu_fixtures_of_the_async_backend_name_the_line)
{
    expect_fixture_call("oom_bwd_ta", "step");
    expect_fixture_call("oom_bwd_async", "step");
}
