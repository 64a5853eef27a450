"""Where a CUDA context's own memory is: a process that works on cuda:0, then 2 s later on cuda:1
(or with --gpu1-only on cuda:1 alone, as a torchrun rank does after torch.cuda.set_device(1)).

    python context_memory.py [--gpu1-only]

Each context the driver makes loads the modules of the kernels it runs, and their static device
memory (__device__ variables, ~200-650 KiB for PyTorch's) comes in CUPTI activity records that name
no context and device 0, whatever the device. The GPU checks (gpu-check.sh, multigpu) ask that the
report put it on the GPU whose context it is: as much on cuda:1 as on cuda:0, and nothing on cuda:0
for --gpu1-only (NVML lists that process on cuda:1 only). stdout is the same in every run.
"""
import argparse
import time

import torch


def work(dev):
    x = torch.randn(1024, 1024, device=dev)
    return float((x @ x).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu1-only", action="store_true")
    a = ap.parse_args()
    if a.gpu1_only:
        torch.cuda.set_device(1)
        work("cuda:1")
    else:
        work("cuda:0")
        time.sleep(2)  # the second context's records come apart from the first's
        work("cuda:1")
    torch.cuda.synchronize()
    print("context_memory ok")


if __name__ == "__main__":
    main()
