#!/usr/bin/env python3
"""kv_cache_check.py REPORT.json STATS.json — an inference trace (samples/generate.py under
record --tensors) against the model's own shape.

Checks, printing "ok" last when all hold:
  * the "KV cache" category at the peak is a whole number of one token's keys or values of one
    head set (heads x head size x element size: every cache tensor is sequences x heads x tokens x
    head size), and at most the full cache of the larger round plus one layer's old copy (the
    concatenation that grows a layer holds the old and the new tensor for a moment);
  * the gradients row has no textbook estimate (no backward pass in an inference trace);
  * no pinned host memory is called a leak (PyTorch's pinned-memory allocator keeps its blocks).
"""
import json
import sys


def main():
    report = json.load(open(sys.argv[1]))
    stats = json.load(open(sys.argv[2]))
    dev = report["devices"][0]
    rows = {r["name"]: r for r in dev["categories_at_peak"]["rows"]}
    kv = rows.get("KV cache", {}).get("bytes", 0)
    one = stats["heads"] * stats["head_dim"] * stats["elem_bytes"]
    seqs = stats["batch"] * max(1, stats["beams"])
    full = 2 * stats["layers"] * seqs * stats["tokens"] * one
    layer_copy = 2 * seqs * stats["tokens"] * one
    problems = []
    if kv <= 0:
        problems.append("no KV cache at the peak")
    if kv % one:
        problems.append(f"KV cache {kv} B is not a whole number of {one}-byte token rows")
    if kv > full + layer_copy:
        problems.append(f"KV cache {kv} B above the full cache {full} B + one layer's copy")
    grads = rows.get("gradients", {})
    if grads.get("textbook_bytes") is not None or "no backward pass" not in grads.get("why", ""):
        problems.append(f"gradients row: {grads}")
    host = report.get("host") or {}
    if host.get("leak_bytes", 0):
        problems.append(f"host memory called a leak: {host.get('leak_bytes')} B")
    print(f"KV cache at the peak {kv} B = {kv // one} token rows of {one} B; the full cache "
          f"{full} B ({seqs} sequences x {stats['tokens']} tokens x {stats['layers']} layers x 2)")
    print("; ".join(problems) if problems else "ok")


if __name__ == "__main__":
    main()
