"""torch.profiler started in the middle of a traced run: it subscribes to CUPTI (which allows one
subscriber) and takes the activity API.

    python profiler_inside.py [--profile-memory]

Trains samples/cifar.py's network for 40 steps; steps 10-19 run under torch.profiler with CUDA
activities (and profile_memory=True with --profile-memory). The batch of the profiled steps is
twice as large, so the run's peak falls inside the profiled window. memtrace must keep recording
every allocation throughout (its peaks equal PyTorch's) and the profiler must still work (it
prints how many CUDA kernel events it saw). PyTorch's numbers go to $SAMPLE_STATS (mt_stats.py).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cifar import Net  # noqa: E402
import mt_stats  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile-memory", action="store_true")
    args = ap.parse_args()
    device = torch.device("cuda")
    net = Net().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    x = torch.randn(256, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (256,), device=device)
    big_x = torch.randn(512, 3, 32, 32, device=device)
    big_y = torch.randint(0, 10, (512,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x=x, y=y):
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    for _ in range(10):
        step()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 profile_memory=args.profile_memory) as prof:
        for _ in range(10):
            step(big_x, big_y)
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    print(f"profiler_cuda_events={kernels}")
    print(f"max_memory_allocated={torch.cuda.max_memory_allocated()} "
          f"max_memory_reserved={torch.cuda.max_memory_reserved()}")
    mt_stats.write(profiler_cuda_events=kernels)


if __name__ == "__main__":
    main()
