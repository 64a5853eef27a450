"""Processes and memtrace: a fork()ed child that does not touch CUDA, and spawned children that do.

    python processes.py [--spawn N]

The parent initializes CUDA and allocates 64 MiB; then a fork()ed child (no exec, no CUDA: it only
computes and exits — the recorder must step aside there and never hang); then N spawn children
(fresh interpreters, so a fresh CUDA injection each) allocate (16 + i) MiB each. `memtrace record`
must leave 1 + N traces. Prints "children_ok=<n>" last.
"""
import argparse
import multiprocessing as mp
import os

import torch


def cuda_child(i, q):
    t = torch.empty((16 + i) * 1024 * 1024, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    q.put((os.getpid(), t.numel()))


def forked_child():
    # no CUDA here: a fork()ed child of a CUDA process may not use CUDA anyway
    os._exit(0 if sum(range(1000)) == 499500 else 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spawn", type=int, default=2)
    args = ap.parse_args()
    keep = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()

    pid = os.fork()
    if pid == 0:
        forked_child()
    _, status = os.waitpid(pid, 0)
    ok = int(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=cuda_child, args=(i, q)) for i in range(args.spawn)]
    for p in procs:
        p.start()
    got = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        ok += int(p.exitcode == 0)
    print("spawned", sorted(n for _, n in got), "parent holds", keep.numel())
    print(f"children_ok={ok}")


if __name__ == "__main__":
    main()
