"""The report of samples/oom.py against what PyTorch said at its OutOfMemoryError (gpu-check.sh).

    oom_check.py REPORT_JSON STATS_JSON [--driver-refused] [--caught] [--recompute] [--async]

Prints "ok", or what differs on one line. The stats are what the sample's OOM observer read when
the allocator gave up (samples/oom.py). The trace must hold exactly one torch.OutOfMemoryError (a
failed "tensor" request, recorded in every mode) and it must say:
  - bytes: the block the allocator looked for, = the observer's size (the sample's blocks are
    multiples of 2 MiB, so the block and the segment it asked for are the same size);
  - torch_allocated_bytes = memory_allocated() and torch_reserved_bytes = memory_reserved(),
    exactly, as the observer read them;
  - its stack: the sample's line in the traceback (oom_line), with the Python frames; or, when
    the error was raised in autograd's engine (oom_in_backward), autograd's worker, whose stack
    is "[autograd backward]" and the node (the worker runs no Python for a C++ node), and then,
    with --tensors, backward_call names the traceback's line (the backward() call); no
    backward_call otherwise;
  - with --tensors, by_category (the tensors live then, by category) sums to memory_allocated();
    none without;
  - driver_refusals: 0 under a memory fraction (the driver was never asked); with
    --driver-refused at least 1, and every refused request of the allocator (a failed "device"
    or, with expandable segments, "vmm_physical" request) says what came of it: recovered, or raised as this error (raised_as: its index),
    and was refused for memory (CUDA_ERROR_OUT_OF_MEMORY: a cuMemCreate refused for its handle
    type is no failed request).
--caught: the sample went on after it (a batch-size finder): exactly one error, all the same.
--recompute: raised in the backward pass while activation checkpointing computed a block again
  (oom.py --checkpoint): the stack is the worker's Python (torch/utils/checkpoint.py's frames, no
  "[autograd backward]"), and with --tensors backward_call names the traceback's line all the same.
--async: PyTorch's backend:cudaMallocAsync (oom.py --in-backward --ballast), which makes no
  torch.OutOfMemoryError event and calls no observer: the error is the last failed "async"
  request (a cudaMallocAsync the driver refused), of the size the error's message gives
  (oom_requested), said to be the error (outcome "raised", torch_allocated_bytes: its live async
  bytes, printed as the message printed memory_allocated(): oom_allocated_text), made by
  autograd's worker ("[autograd backward]", the node), and backward_call names the traceback's
  line, in any mode (every tensor is a cudaMallocAsync with its stack).
"""
import json
import sys


def frames_of(f):
    return [x for s in f["stack"] for x in s["frames"]]


def by_worker(fr):
    # a C++ node on autograd's worker: "[autograd backward]", then the node
    return len(fr) >= 2 and fr[0] == "[autograd backward]" and "Backward" in fr[1]


def names_step(bc, line):
    return bc and bc["frame"].endswith(line) and bc["frame"].split(" (")[0] in ("step", "graph_step")


def format_size(n):
    # c10's format_size, which PyTorch's messages print sizes with
    if n <= 1024:
        return "%d bytes" % n
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if n <= scale << 10 or unit == "GiB":
            return "%.2f %s" % (n / scale, unit)


def check_async(rep, st):
    failed = rep["failed_requests"]
    refused = [f for f in failed if f["kind"] == "async"]
    if not refused or rep["failed_total"] != len(failed):
        return "%d failed async requests in %d (%d kept), expected at least 1" % (
            len(refused), rep["failed_total"], len(failed))
    f, line = refused[-1], "oom.py:%d)" % st["oom_line"]
    problems = []
    if not st.get("oom_in_backward"):
        problems.append("the sample's error was not raised in backward")
    if f["bytes"] != st.get("oom_requested"):
        problems.append("bytes %s, the error's message asked for %s" % (f["bytes"],
                                                                       st.get("oom_requested")))
    if f.get("outcome") != "raised" or "torch_allocated_bytes" not in f:
        problems.append("not said to be the error: outcome %r" % f.get("outcome"))
    elif format_size(f["torch_allocated_bytes"]) != st.get("oom_allocated_text"):
        problems.append("torch_allocated_bytes %d (%s), the error's message: %s" % (
            f["torch_allocated_bytes"], format_size(f["torch_allocated_bytes"]),
            st.get("oom_allocated_text")))
    if f["result_name"] != "CUDA_ERROR_OUT_OF_MEMORY":
        problems.append("refused with %s" % f["result_name"])
    if not by_worker(frames_of(f)):
        problems.append("not autograd's worker: %s" % frames_of(f)[:6])
    if not names_step(f.get("backward_call"), line):
        bc = f.get("backward_call")
        problems.append("backward_call is %s (the traceback: ...%s)" % (bc and bc["frame"], line))
    return "ok" if not problems else "; ".join(problems)


def main():
    rep, st = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    if "--async" in sys.argv:
        print(check_async(rep, st))
        return
    driver_refused = "--driver-refused" in sys.argv
    problems = []
    failed = rep["failed_requests"]
    raised = [i for i, f in enumerate(failed) if f["kind"] == "tensor"]
    if len(raised) != 1 or rep["failed_total"] != len(failed):
        print("%d torch.OutOfMemoryError in %d failed requests (%d kept), expected 1"
              % (len(raised), rep["failed_total"], len(failed)))
        return
    k = raised[0]
    f = failed[k]
    for field, want in (("bytes", "oom_alloc"), ("torch_allocated_bytes", "oom_allocated"),
                        ("torch_reserved_bytes", "oom_reserved")):
        if f.get(field) != st[want]:
            problems.append("%s %s, PyTorch's %s %s" % (field, f.get(field), want, st[want]))
    line = "oom.py:%d)" % st["oom_line"]
    fr = frames_of(f)
    bc = f.get("backward_call")
    tensors = any(d.get("tensors_peak_bytes") for d in rep["devices"])
    steps = ("step", "graph_step")
    if st.get("oom_in_backward"):
        # a C++ node: "[autograd backward]", the node; a segment recomputed by activation
        # checkpointing: Python on the worker, torch.utils.checkpoint's frames
        recompute = (any("torch/utils/checkpoint.py" in x for x in fr)
                     and fr[0] != "[autograd backward]")
        if "--recompute" in sys.argv and not recompute:
            problems.append("not raised in a recomputation: %s" % fr[:6])
        if not recompute and not by_worker(fr):
            problems.append("raised in backward, but the stack is %s" % fr[:6])
        if tensors and not names_step(bc, line):
            problems.append("raised in backward, but backward_call is %s (the traceback: ...%s)"
                            % (bc and bc["frame"], line))
        if not tensors and bc:
            problems.append("backward_call %s without --tensors" % bc["frame"])
    else:
        if not any(x.endswith(line) and x.split(" (")[0] in steps for x in fr):
            problems.append("the stack has no step (...%s: %s" % (line, fr[:6]))
        if bc:
            problems.append("raised outside backward, but backward_call is %s" % bc["frame"])
    if f["outcome"] != "raised":
        problems.append("outcome %r" % f["outcome"])
    # --tensors: the tensors live then by category add up to memory_allocated() then
    cats = f.get("by_category")
    if tensors and (cats is None or sum(c["bytes"] for c in cats) != st["oom_allocated"]):
        problems.append("by_category %s, PyTorch's oom_allocated %s" % (
            cats and sum(c["bytes"] for c in cats), st["oom_allocated"]))
    if not tensors and cats is not None:
        problems.append("by_category without --tensors")
    if driver_refused:
        # segments: cudaMalloc's, or expandable segments' cuMemCreate (vmm_physical)
        refused = [g for g in failed if g["kind"] in ("device", "vmm_physical")]
        if f["driver_refusals"] < 1:
            problems.append("no driver refusal before it")
        if not refused or any(g["outcome"] not in ("recovered", "raised") for g in refused):
            problems.append("refusals' outcomes %s" % [g["outcome"] for g in refused])
        # a refusal of a handle type (expandable segments' first cuMemCreate asks for a fabric
        # handle) is no failed request: failed_probes
        if any(g["result_name"] != "CUDA_ERROR_OUT_OF_MEMORY" for g in refused):
            problems.append("refusals %s" % [g["result_name"] for g in refused])
        tied = [g for g in refused if g["outcome"] == "raised"]
        if len(tied) != f["driver_refusals"] or any(g["raised_as"] != k for g in tied):
            problems.append("%d refusals tied to it (%s), it counts %d"
                            % (len(tied), [g["raised_as"] for g in tied], f["driver_refusals"]))
    elif f["driver_refusals"] != 0 or len(failed) != 1:
        problems.append("%d driver refusals, %d failed requests: the driver was never asked"
                        % (f["driver_refusals"], len(failed)))
    print("ok" if not problems else "; ".join(problems))


if __name__ == "__main__":
    main()
