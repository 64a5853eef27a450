"""Threads under memtrace: N Python threads, each allocating and freeing tensors on its own
CUDA stream, and optionally a DataLoader whose workers are fork()ed (they must not be traced, and
must not hang).

    python threads.py [--threads N] [--iters K] [--dataloader]

Threads start with no current CUDA context of their own (PyTorch binds the primary context
lazily), which is what once made a tracer put their allocations on an unknown device. stdout is
the same in every run; PyTorch's numbers go to $SAMPLE_STATS (mt_stats.py).
"""
import argparse
import threading

import torch

import mt_stats


def worker(i, iters, errors):
    try:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            keep = []
            for k in range(iters):
                t = torch.empty((1 + (i + k) % 7) * 256 * 1024, dtype=torch.float32, device="cuda")
                t.fill_(1.0)
                keep.append(t)
                if len(keep) > 4:
                    keep.pop(0)
            s.synchronize()
    except Exception as e:  # reported, not raised: a thread's exception would not fail the run
        errors.append(repr(e))


class Numbers(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((1024,), float(i))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--dataloader", action="store_true")
    args = ap.parse_args()
    torch.cuda.init()
    errors = []
    ts = [threading.Thread(target=worker, args=(i, args.iters, errors)) for i in range(args.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    print(f"threads={args.threads} iters={args.iters} errors={len(errors)}")
    if args.dataloader:
        dl = torch.utils.data.DataLoader(Numbers(), batch_size=8, num_workers=2,
                                         multiprocessing_context="fork", pin_memory=True)
        total = 0.0
        for batch in dl:
            total += float(batch.cuda(non_blocking=True).sum())
        torch.cuda.synchronize()
        print(f"dataloader batches=8 total={total:.0f}")
    mt_stats.write(errors=errors)
    print("threads ok")


if __name__ == "__main__":
    main()
