"""torch.profiler started in the middle of a traced run: it takes CUPTI's activity API.

    python profiler_inside.py

Trains samples/cifar.py's network for 40 steps; steps 10-19 run under torch.profiler with CUDA
activities. memtrace must keep recording every allocation through its callbacks (tensor peak ==
max_memory_allocated) and note that activity enrichment stopped; the profiler must still work
(it prints how many CUDA kernel events it saw).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cifar import Net  # noqa: E402


def main():
    device = torch.device("cuda")
    net = Net().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    x = torch.randn(256, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (256,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    for _ in range(10):
        step()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    print(f"profiler_cuda_events={kernels}")
    print(f"max_memory_allocated={torch.cuda.max_memory_allocated()} "
          f"max_memory_reserved={torch.cuda.max_memory_reserved()}")


if __name__ == "__main__":
    main()
