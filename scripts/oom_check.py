"""The report of samples/oom.py against what PyTorch said at its OutOfMemoryError (gpu-check.sh).

    oom_check.py REPORT_JSON STATS_JSON [--driver-refused] [--caught]

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
  - driver_refusals: 0 under a memory fraction (the driver was never asked); with
    --driver-refused at least 1, and every refused request of the allocator (a failed "device"
    or, with expandable segments, "vmm_physical" request) says what came of it: recovered, or raised as this error (raised_as: its index),
    and was refused for memory (CUDA_ERROR_OUT_OF_MEMORY: a cuMemCreate refused for its handle
    type is no failed request).
--caught: the sample went on after it (a batch-size finder): exactly one error, all the same.
"""
import json
import sys


def frames_of(f):
    return [x for s in f["stack"] for x in s["frames"]]


def main():
    rep, st = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
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
        recompute = any("torch/utils/checkpoint.py" in x for x in fr)
        if not recompute and (not fr or fr[0] != "[autograd backward]" or len(fr) < 2
                              or "Backward" not in fr[1]):
            problems.append("raised in backward, but the stack is %s" % fr[:6])
        if tensors and (not bc or not bc["frame"].endswith(line)
                        or bc["frame"].split(" (")[0] not in steps):
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
