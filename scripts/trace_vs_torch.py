#!/usr/bin/env python3
"""trace_vs_torch.py — compares what memtrace says about a run with what PyTorch said, for
scripts/gpu-check.sh. Prints "ok" or one line saying what differs, and exits 0 either way (the
caller compares the line).

    trace_vs_torch.py MODE REPORT_JSON STATS_JSON [--captured] [--devices N]

MODE: default  every device's PyTorch segments peak == max_memory_reserved()
      tensors  ... and the tensor peak == max_memory_allocated() == the allocator's own counter
      async    (backend:cudaMallocAsync, --tensors=async) the peak of live async bytes ==
               max_memory_allocated()
REPORT_JSON: `memtrace report --json T`; STATS_JSON: what the sample wrote (samples/mt_stats.py).
Always: no anomaly, no device -1, no dropped event, no event out of time order.
--captured: some allocation was made during CUDA graph capture. --devices N: exactly N devices
with PyTorch memory.
"""
import json
import sys


def main():
    args = sys.argv[1:]
    mode, rep_path, stats_path = args[0], args[1], args[2]
    want_captured = "--captured" in args
    want_devices = int(args[args.index("--devices") + 1]) if "--devices" in args else None
    rep = json.load(open(rep_path))
    stats = json.load(open(stats_path))
    problems = []
    devs = {d["device"]: d for d in rep["devices"]}
    if -1 in devs:
        problems.append("a device -1 in the report")
    an = rep.get("anomalies", {})
    bad = {k: v for k, v in an.items() if v and k != "ctx_destroy_released"}
    if bad:
        problems.append("anomalies %s" % bad)
    if rep.get("dropped", 0):
        problems.append("dropped %s events" % rep["dropped"])
    for w in rep.get("warnings", []):
        if "out of time order" in w and " 0 events reached" not in w:
            problems.append("warning: " + w)
    captured = 0
    torch_devs = stats["devices"]
    if want_devices is not None and len(torch_devs) != want_devices:
        problems.append("torch used %d devices, wanted %d" % (len(torch_devs), want_devices))
    for key, t in torch_devs.items():
        d = devs.get(int(key))
        if d is None:
            problems.append("cuda:%s missing from the trace" % key)
            continue
        captured += d.get("captured_allocations", 0)
        if mode in ("default", "tensors") and d["segments_peak_bytes"] != t["max_reserved"]:
            problems.append("cuda:%s segments peak %d != max_memory_reserved %d"
                            % (key, d["segments_peak_bytes"], t["max_reserved"]))
        if mode == "tensors":
            if d["tensors_peak_bytes"] != t["max_allocated"]:
                problems.append("cuda:%s tensor peak %d != max_memory_allocated %d"
                                % (key, d["tensors_peak_bytes"], t["max_allocated"]))
            if d["torch_allocated_peak_bytes"] != t["max_allocated"]:
                problems.append("cuda:%s allocator's own counter peak %d != %d"
                                % (key, d["torch_allocated_peak_bytes"], t["max_allocated"]))
        if mode == "async":
            got = d["peak_by_kind"].get("async", 0)
            if got != t["max_allocated"]:
                problems.append("cuda:%s async peak %d != max_memory_allocated %d"
                                % (key, got, t["max_allocated"]))
    if want_captured and not captured:
        problems.append("no allocation marked as made during graph capture")
    print("ok" if not problems else "; ".join(problems))


if __name__ == "__main__":
    main()
