"""One process, several GPUs: a model split across devices driven from one thread, then one
thread per device training its own copy.

    python multi_gpu.py [--steps N]

Needs two or more GPUs (prints "multi_gpu skipped" with one). stdout is the same in every run;
PyTorch's per-device numbers go to $SAMPLE_STATS.
"""
import argparse
import threading

import torch

import mt_stats


def split_model_step(devs, steps):
    a = torch.nn.Linear(2048, 4096).to(devs[0])
    b = torch.nn.Linear(4096, 1024).to(devs[1])
    opt = torch.optim.AdamW(list(a.parameters()) + list(b.parameters()))
    for _ in range(steps):
        x = torch.randn(512, 2048, device=devs[0])
        y = b(torch.relu(a(x)).to(devs[1]))
        y.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def per_device(dev, steps, width):
    torch.cuda.set_device(dev)
    m = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, width)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    for _ in range(steps):
        x = torch.randn(256, width, device=dev)
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(dev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    n = torch.cuda.device_count()
    if n < 2:
        print("multi_gpu skipped: one GPU")
        return
    devs = [torch.device("cuda", i) for i in range(n)]
    split_model_step(devs, args.steps)
    ts = [threading.Thread(target=per_device, args=(d, args.steps, 1024 * (1 + i)))
          for i, d in enumerate(devs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"multi_gpu devices={n} steps={args.steps}")
    mt_stats.write()


if __name__ == "__main__":
    main()
