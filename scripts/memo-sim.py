#!/usr/bin/env python3
"""memo-sim.py — how often the unwinder's walk memo would thrash, simulated on a real trace.

    python3 scripts/memo-sim.py build/src/cli/memtrace tests/data/gpt2_tensors.mtrace [DRAWS]

The memo (src/record/unwind_memo.h) keeps a thread's walks in sets of ways, the set chosen by a
hash of the call site's key; which keys share a set is drawn anew in every process (the keys hash
code objects' addresses). This replays a trace's tensor allocations, thread by thread, against
such a memo for DRAWS random draws of that hash (default 1000), and says per layout how many of
the walks a process would have to do again in its steady state, and in how many draws more than
2% of them: a set whose walks outnumber its ways, visited in a cycle, misses on all of them.

What stands for what: a walk is one (key, path); the key is the innermost Python frame (code,
line) (the recorder uses the instruction, finer); the path is the native frames below the Python
ones plus the number of Python frames, which stands for the walk's depth on the C stack (each
nested nn.Module adds Python frames and C frames alike). "by line" chooses the set by the line
alone (the recorder before 2026-11-26), "by line+depth" by both (the recorder now folds the
capture's stack depth into the key). Threads without Python frames walk unkeyed: the set follows
each walk's own tag.
"""
import collections
import random
import subprocess
import sys

LAYOUTS = [(64, 8), (64, 16), (128, 8), (256, 8)]


def fields(parts):
    return dict(x.split("=", 1) for x in parts if "=" in x)


def read(memtrace, trace):
    dump = subprocess.run([memtrace, "dump", trace], capture_output=True, text=True, check=True)
    parent, python, ip = {}, {}, {}
    allocs = collections.defaultdict(list)
    for line in dump.stdout.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "node":
            d = fields(f[1:])
            n = int(d["id"])
            parent[n] = int(d["parent"])
            if f[3] == "python":
                python[n] = (d["code"], d["line"])
            else:
                ip[n] = d.get("ip")
        elif f[0] == "event" and "kind=tensor" in f and "op=alloc" in f:
            d = fields(f[1:])
            allocs[d["tid"]].append(int(d.get("stack", 0)))

    def walk(leaf):
        n, native = leaf, []
        while n and n not in python:
            native.append(ip.get(n))
            n = parent.get(n, 0)
        key, depth = python.get(n), 0
        while n:
            depth += 1
            n = parent.get(n, 0)
        return key, (tuple(native), depth)

    return {tid: [walk(leaf) for leaf in leaves] for tid, leaves in allocs.items()}


def replay(seq, sets, ways, with_depth, seed, rounds=6):
    """Share of walks done again over rounds 3..6 of the sequence's steady part (its last 2/3)."""
    rnd = random.Random(seed)
    where = {}
    memo = [collections.OrderedDict() for _ in range(sets)]
    steady = seq[len(seq) // 3:]
    missed = total = 0
    for r in range(rounds):
        for key, path in steady:
            if key is None:
                name = ("unkeyed", path)  # the set follows the walk's own tag
            elif with_depth:
                name = (key, path[1])
            else:
                name = key
            s = where.setdefault(name, rnd.randrange(sets))
            ways_of = memo[s]
            if (key, path) in ways_of:
                ways_of.move_to_end((key, path))
                hit = True
            else:
                hit = False
                if len(ways_of) >= ways:
                    ways_of.popitem(last=False)
                ways_of[(key, path)] = 1
            if r >= 2:
                total += 1
                missed += not hit
    return missed / max(total, 1)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    draws = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    for tid, seq in read(sys.argv[1], sys.argv[2]).items():
        per_key = collections.defaultdict(set)
        for key, path in seq:
            per_key[key].add(path)
        widest = sorted((len(v) for v in per_key.values()), reverse=True)[:6]
        print(f"thread {tid}: {len(seq)} allocations, {len(per_key)} keys, walks per key "
              f"(widest) {widest}")
        for with_depth in (False, True):
            if with_depth and list(per_key) == [None]:
                continue
            for sets, ways in LAYOUTS:
                rates = [replay(seq, sets, ways, with_depth, s) for s in range(draws)]
                bad = sum(x > 0.02 for x in rates) / draws
                how = "line+depth" if with_depth else "line"
                print(f"  by {how:10s} {sets:3d} sets x {ways:2d} ways: walks done again "
                      f"{sum(rates) / draws:6.2%} on average, processes over 2%: {bad:6.1%}, "
                      f"worst {max(rates):6.2%}")


if __name__ == "__main__":
    main()
