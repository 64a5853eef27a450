"""Many short-lived threads, each allocating a tensor once: what the process keeps per thread.

    python thread_churn.py [--threads N]

Each thread makes one small CUDA tensor (under `record --tensors` that is a stack capture on a
thread the recorder has never seen) and exits. The resident memory of the process is read after a
warm-up of 500 threads and again after N more; the growth per thread goes to $SAMPLE_STATS
(mt_stats.py: rss_growth_per_thread_bytes), so a tracer that keeps per-thread state shows as a
difference between the traced and the untraced run. stdout is the same in every run.
"""
import argparse
import threading

import torch

import mt_stats


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def one(out):
    t = torch.empty(1024, device="cuda")
    out.append(t.numel())


def churn(n):
    done = []
    for _ in range(n):
        th = threading.Thread(target=one, args=(done,))
        th.start()
        th.join()
    return len(done)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=20000)
    args = ap.parse_args()
    torch.empty(1, device="cuda")
    churn(500)
    before = rss_bytes()
    n = churn(args.threads)
    after = rss_bytes()
    print(f"thread_churn threads={n}")
    mt_stats.write(rss_before=before, rss_after=after,
                   rss_growth_per_thread_bytes=(after - before) / max(n, 1))


if __name__ == "__main__":
    main()
