"""A burst of tiny allocations: N torch.empty(...) on the GPU as fast as Python makes them, from T
threads. Under a tracer this is ~2 N events in a few seconds: none may be lost.

    python burst.py [--n N] [--threads T]

stdout is the same in every run; PyTorch's numbers (and the rate) go to $SAMPLE_STATS.
"""
import argparse
import threading
import time

import torch

import mt_stats


def burst(n):
    for _ in range(n):
        torch.empty(16, device="cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ts = [threading.Thread(target=burst, args=(args.n // args.threads,)) for _ in range(args.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"burst allocations={args.n // args.threads * args.threads} threads={args.threads}")
    mt_stats.write(seconds=dt, allocs_per_s=args.n / dt)


if __name__ == "__main__":
    main()
