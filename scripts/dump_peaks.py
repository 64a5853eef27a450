#!/usr/bin/env python3
"""dump_peaks.py — peaks computed from `memtrace dump` text alone: an independent check of the
compactor, used by scripts/gpu-check.sh.

    memtrace dump T | dump_peaks.py [--through REGEX] [--kinds device,pitch,...]

Prints one line per device: "dev=N peak=B peak_through=B other=[(bytes, function), ...]".
peak: peak of live API-requested bytes of the given kinds (activity records excluded).
peak_through: the same, counting only allocations whose stack has a frame whose symbol matches
REGEX (e.g. CUDACachingAllocator: what PyTorch's caching allocator reserved).
other: allocations live at the overall peak whose stack does not match, with the innermost frame
outside libcuda/libcudart/libcupti/memtrace that has a symbol.
"""
import argparse
import collections
import re
import shlex
import sys


def parse(line):
    kind, _, rest = line.partition(" ")
    fields = {}
    for tok in shlex.split(rest):
        k, _, v = tok.partition("=")
        fields[k] = v
    return kind, fields


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--through", default="CUDACachingAllocator")
    ap.add_argument("--kinds", default="device,pitch,managed,async,vmm_physical")
    ap.add_argument("dump", nargs="?", default="-")
    args = ap.parse_args()
    kinds = set(args.kinds.split(","))
    through = re.compile(args.through)
    src = sys.stdin if args.dump == "-" else open(args.dump)
    nodes, syms, events = {}, collections.defaultdict(list), []
    modules, sym_module = {}, {}
    for line in src:
        if line.startswith("#"):
            continue
        kind, f = parse(line.rstrip("\n"))
        if kind == "node":
            ip = f.get("ip")
            nodes[int(f["id"])] = (int(f["parent"]), int(ip, 16) if ip else None)
        elif kind == "module":
            modules[f["id"]] = f["path"]
        elif kind == "symbol":
            syms[int(f["ip"], 16)].append(f["function"])
            sym_module[int(f["ip"], 16)] = f["module"]
        elif kind == "event" and "activity" not in line:
            events.append(f)

    cache = {}

    def frames(leaf):
        out, n = [], leaf
        while n and n in nodes:
            parent, ip = nodes[n]
            out.extend(syms.get(ip, ["?"]) if ip is not None else ["?"])
            n = parent
        return out  # innermost first

    def matches(leaf):
        if leaf not in cache:
            cache[leaf] = any(through.search(fn) for fn in frames(leaf))
        return cache[leaf]

    cuda_stack = re.compile(r"lib(cuda|cudart|cupti|memtrace_inject)[.-]")

    def user_frame(leaf):
        n = leaf
        while n and n in nodes:
            parent, ip = nodes[n]
            path = modules.get(sym_module.get(ip), "")
            if ip in syms and not cuda_stack.search(path.rsplit("/", 1)[-1]):
                return syms[ip][-1]
            n = parent
        return "?"

    live, cur, cur_t, peak, peak_t, at_peak = {}, collections.Counter(), collections.Counter(), \
        collections.Counter(), collections.Counter(), {}
    for f in events:
        k, dev, op = f.get("kind"), f.get("dev"), f.get("op")
        if op == "ctx_destroy":  # the context's death releases what it held
            for key in [kk for kk, v in live.items() if v[2] == f.get("ctx")]:
                b, leaf, _ = live.pop(key)
                cur[key[0]] -= b
                if matches(leaf):
                    cur_t[key[0]] -= b
            continue
        if k not in kinds:
            continue
        fam = "p" if k == "vmm_physical" else "l"
        key = (dev, fam, f["addr"])
        if op == "alloc":
            b, leaf = int(f["bytes"]), int(f.get("stack", 0))
            live[key] = (b, leaf, f.get("ctx"))
            cur[dev] += b
            if matches(leaf):
                cur_t[dev] += b
            if cur[dev] > peak[dev]:
                peak[dev] = cur[dev]
                at_peak[dev] = [v[:2] for kk, v in live.items() if kk[0] == dev]
            peak_t[dev] = max(peak_t[dev], cur_t[dev])
        elif op == "free" and key in live:
            b, leaf, _ = live.pop(key)
            cur[dev] -= b
            if matches(leaf):
                cur_t[dev] -= b
    for dev in sorted(peak):
        other = collections.Counter()
        for b, leaf in at_peak.get(dev, []):
            if not matches(leaf):
                other[user_frame(leaf)] += b
        print("dev=%s peak=%d peak_through=%d other=%s" % (
            dev, peak[dev], peak_t[dev], sorted(((b, fn) for fn, b in other.items()), reverse=True)[:8]))


if __name__ == "__main__":
    main()
