"""The trace of samples/graph_nodes.c against what the driver itself says (scripts/gpu-check.sh).

    graph_nodes_vs_trace.py DUMP REPORT_JSON STATS_JSON

DUMP is `memtrace dump` of the trace, REPORT_JSON `memtrace report --json`, STATS_JSON what the
sample wrote to $SAMPLE_STATS (cudaDeviceGetGraphMemAttribute at its end). Prints "ok", or what
differs on one line:
  - each graph memory node (64, 32, 16 and 8 MiB: runtime node calls, the generic cuGraphAddNode,
    a captured cudaMallocAsync, a node beside conditional nodes) is one allocation marked captured,
    with a device, and is freed once: launches add nothing;
  - the report counts 4 captured allocations of 120 MiB on cuda:0, no anomaly, no device -1;
  - the graph memory pool's reservation in the trace peaks at the driver's own high-water mark.
"""
import json
import re
import sys

MiB = 1024 * 1024
NODES = [64 * MiB, 32 * MiB, 16 * MiB, 8 * MiB]
GRAPH_POOL = 0x8000000000000000


def main():
    dump, rep_path, stats_path = sys.argv[1:4]
    stats = json.load(open(stats_path))
    rep = json.load(open(rep_path))
    problems = []
    sizes, live, graph_pool_high = [], {}, 0  # live: address -> bytes (graph memory nodes)
    for line in open(dump):
        if not line.startswith("event ") or " activity" in line:
            continue
        f = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        op, kind = f["op"], f["kind"]
        if op == "alloc" and kind == "async":
            if " captured" not in line:
                problems.append("an async allocation of %s B not marked captured" % f["bytes"])
            if f["dev"] == "-1":
                problems.append("a graph allocation without a device")
            if f["addr"] in live:  # the graph pool reuses addresses, but only once they are free
                problems.append("%s B allocated at %s while %d B live there"
                                % (f["bytes"], f["addr"], live[f["addr"]]))
            live[f["addr"]] = int(f["bytes"])
            sizes.append(int(f["bytes"]))
        elif op == "free" and kind == "async":
            if live.pop(f["addr"], None) is None:
                problems.append("a free of %s, not live" % f["addr"])
        elif op == "pool_reserved" and int(f["addr"], 16) == GRAPH_POOL | 0:
            graph_pool_high = max(graph_pool_high, int(f.get("aux", "0x0"), 16), int(f["bytes"]))
    if sorted(sizes) != sorted(NODES):
        problems.append("graph allocations of %s MiB, want one of each of %s"
                        % ([b / MiB for b in sizes], [b // MiB for b in NODES]))
    if live:
        problems.append("never freed: %s" % live)
    devs = {d["device"]: d for d in rep["devices"]}
    if -1 in devs:
        problems.append("a device -1 in the report")
    bad = {k: v for k, v in rep.get("anomalies", {}).items() if v and k != "ctx_destroy_released"}
    if bad:
        problems.append("anomalies %s" % bad)
    d0 = devs.get(0, {})
    got = (d0.get("captured_allocations"), d0.get("captured_bytes"))
    if got != (4, sum(NODES)):
        problems.append("report: captured %s, want (4, %d)" % (got, sum(NODES)))
    if graph_pool_high != stats["graph_reserved_high"]:
        problems.append("graph pool reservation in the trace peaks at %d B, the driver says %d B"
                        % (graph_pool_high, stats["graph_reserved_high"]))
    print("ok" if not problems else "; ".join(problems))


if __name__ == "__main__":
    main()
