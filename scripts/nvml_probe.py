#!/usr/bin/env python3
"""nvml_probe.py: does asking NVML what memtrace's sampler asks slow a launch-bound CUDA loop?

No memtrace involved: a thread calls nvmlDeviceGetComputeRunningProcesses_v3 and/or
nvmlDeviceGetMemoryInfo every PERIOD seconds (default 0.05, the sampler's period) in some phases
of a loop of OPS small element-wise kernels a step; each round runs every mode once, PH steps each,
in random order, and compares each mode's mean step with the round's phase without calls.
"none_again" is the A/A control: the spread of the method itself. On the GPU machine:

    PH=50 ROUNDS=30 python3 scripts/nvml_probe.py          (docs/performance.md, twenty-fifth session)
"""
import ctypes
import os
import random
import statistics
import threading
import time

import torch

nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0


class Proc(ctypes.Structure):  # nvmlProcessInfo_t, as *_v3 fills it
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]


class Mem(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


procs, mem = (Proc * 256)(), Mem()
PERIOD = float(os.environ.get("PERIOD", "0.05"))
OPS = int(os.environ.get("OPS", "800"))
PH = int(os.environ.get("PH", "50"))
ROUNDS = int(os.environ.get("ROUNDS", "30"))
NAMES = {0: "none", 1: "meminfo", 2: "processes", 3: "both", 4: "none_again"}
state = {"mode": 0, "stop": False}
calls, ns = [0, 0], [0, 0]  # [processes, meminfo]


def sampler():
    while not state["stop"]:
        m = state["mode"]
        if m in (2, 3):
            n = ctypes.c_uint(256)
            t = time.perf_counter_ns()
            nv.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), procs)
            ns[0] += time.perf_counter_ns() - t
            calls[0] += 1
        if m in (1, 3):
            t = time.perf_counter_ns()
            nv.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem))
            ns[1] += time.perf_counter_ns() - t
            calls[1] += 1
        time.sleep(PERIOD)


threading.Thread(target=sampler, daemon=True).start()
xs = [torch.randn(1024, device="cuda") for _ in range(8)]


def step():
    x = xs[0]
    for i in range(OPS):
        x = x * 1.0001 + xs[i % 8]
    torch.cuda.synchronize()


for _ in range(50):
    step()
ratios = {k: [] for k in NAMES}
steps = {k: [] for k in NAMES}
for _ in range(ROUNDS):
    order = list(NAMES)
    random.shuffle(order)
    mean = {}
    for m in order:
        state["mode"] = 0 if m == 4 else m
        time.sleep(PERIOD + 0.01)  # the sampler has seen the mode
        ts = []
        for _ in range(PH):
            t = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t)
        mean[m] = statistics.mean(ts)  # a stall that hits a few steps counts
        steps[m].append(mean[m])
    for m in NAMES:
        ratios[m].append(mean[m] / mean[0] - 1)
state["stop"] = True
for m, name in NAMES.items():
    rs = sorted(ratios[m])
    print(f"{name:11s} step {statistics.median(steps[m]) * 1e3:7.3f} ms  vs none: median "
          f"{statistics.median(rs) * 100:+6.2f}%  q25 {rs[len(rs) // 4] * 100:+6.2f}%  "
          f"q75 {rs[3 * len(rs) // 4] * 100:+6.2f}%")
print(f"nvmlDeviceGetComputeRunningProcesses_v3: {calls[0]} calls, "
      f"{ns[0] / max(calls[0], 1) / 1e3:.0f} us each; nvmlDeviceGetMemoryInfo: {calls[1]} calls, "
      f"{ns[1] / max(calls[1], 1) / 1e3:.0f} us each")
