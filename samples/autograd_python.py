"""Allocations on autograd's worker thread, with Python frames and without.

A custom autograd.Function whose backward is Python runs on the device's autograd worker, with
the worker's Python frames; the built-in backward nodes beside it (matrix products, relu) run
there too, in C++, with none. Each step the worker goes from one kind to the other several times.
What the Python backward allocates is kept to the end, so it is the bulk of the peak.

For `scripts/gpu-check.sh programs`: under --tensors the peak's stacks must name the Python
backward's line for its blocks, and "[autograd backward]" plus the C++ node, with no Python
frame, for the gradients (src/record/cuda/stacks.c reads the worker's Python frames at every
allocation; a thread without any gets the pseudo frame).
"""
import torch

import mt_stats

KEEP = []


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        KEEP.append(torch.empty(3 << 20, device=grad.device))  # 12 MiB, from Python, on the worker
        return grad * 2


def main():
    torch.manual_seed(0)
    x = torch.randn(1024, 1024, device="cuda", requires_grad=True)
    w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
    for _ in range(8):
        y = Twice.apply(x @ w)
        z = Twice.apply(torch.relu(y) @ w)
        z.sum().backward()
    torch.cuda.synchronize()
    mt_stats.write()
    print(f"autograd_python kept={len(KEEP)} grad_norm={float(x.grad.norm()) > 0}")


if __name__ == "__main__":
    main()
