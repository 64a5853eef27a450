"""The classic CIFAR-10 walkthrough network, trained on random CIFAR-shaped data (no downloads).

conv1 3->6 k5, pool, conv2 6->16 k5, fc1 400->12000, fc2 12000->84, fc3 84->10 (fc1 is widened, as in
pytorch_memlab's walkthrough, so one layer clearly dominates memory). SGD with momentum, batch 256.

    python cifar.py [--steps N] [--batch B] [--warmup W] [--record-history] [--ab K --ab-what W]

Prints, last, the numbers the GPU checks compare with the trace:
    max_memory_allocated=<bytes> max_memory_reserved=<bytes> steps=<n> step_ms=<mean ms per step>
    nvml_process_bytes=<bytes>   (this process in NVML, as nvidia-smi lists it; when pynvml is there)
step_ms is measured over the steps after the warm-up, with the GPU synchronized.

--ab K measures what a recorder costs inside this one process, free of the few-percent spread
between identical processes: after the warm-up the run alternates phases of K steps with the
recorder off and on (memtrace: memtrace_set_paused, found when run under `memtrace record`;
history: torch's _record_memory_history; none: nothing, an A/A control whose figure is the
method's own noise and bias) and prints
    ab_off_ms=<median ms per step, off> ab_on_ms=<..., on> ab_overhead_pct=<median over on-phases
    of on / (mean of the off-phases either side) - 1> ab_pairs=<n>
Comparing each on-phase with the off-phases on both sides cancels a steady drift of the machine
(which a comparison with the phase before alone would count as the recorder's cost).
--ab-order random puts each pair of phases in a random order instead, (off, on) or (on, off), and
compares the two phases of each pair; the figure is the mean of two medians, over the pairs that
ran on first and over those that ran it second. Anything that falls on every other phase (a garbage
collection every so many allocations), which alternation always puts on the same side, and a drift
within pairs then count for one group and against the other, and cancel (ab_order is printed).
"""
import argparse
import ctypes
import os
import random
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 12000)
        self.fc2 = nn.Linear(12000, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


def recorder_switch(what):
    """A function on(bool) that turns the recorder being measured on or off."""
    if what == "none":
        return lambda on: None
    if what == "history":
        return lambda on: torch.cuda.memory._record_memory_history(
            enabled="all" if on else None, stacks="python")
    try:
        pause = ctypes.CDLL(None).memtrace_set_paused
    except AttributeError:
        raise SystemExit("--ab-what memtrace: not running under `memtrace record` (with its preload)")
    pause.argtypes = [ctypes.c_int]

    def switch(on):
        if pause(0 if on else 1) < 0:
            raise SystemExit("--ab-what memtrace: this process is not being recorded")
    return switch


def ab_ratios(off, on):
    """on[i] against the off-phases either side of it (off[i] before, off[i + 1] after, when
    there is one): a drift of the machine over the run moves both sides alike."""
    return [on[i] / ((off[i] + off[i + 1]) / 2.0 if i + 1 < len(off) else off[i]) - 1.0
            for i in range(min(len(off), len(on)))]


def ab_plan(order, seed=None):
    """on(k): whether phase k (from 0, after the warm-up) is an on-phase. alternate: off, on, off,
    on, ...; random: each pair of phases (2j, 2j + 1) is (off, on) or (on, off) at random."""
    rng, flips = random.Random(seed), []

    def on(k):
        if order == "alternate":
            return k % 2 == 1
        while len(flips) <= k // 2:
            flips.append(rng.random() < 0.5)
        return (k % 2 == 1) != flips[k // 2]
    return on


def ab_overhead(phases, order):
    """phases: [(on, ms per step)] in the order they ran. Returns (overhead, pairs), overhead as a
    fraction. alternate: the median over on-phases of on / (mean of the off-phases either side) - 1.
    random: each pair's on / off - 1, the median taken apart over the pairs that ran on first and
    those that ran it second, and the two averaged: a drift within pairs counts against one group
    and for the other, and so does anything that falls on every other phase, so both cancel (a
    median over all pairs would pick whichever group is larger)."""
    if order == "alternate":
        ratios = ab_ratios([ms for o, ms in phases if not o], [ms for o, ms in phases if o])
        return (statistics.median(ratios) if ratios else None), len(ratios)
    by_first = {True: [], False: []}
    for i in range(0, len(phases) - 1, 2):
        (first_on, a), (_, b) = phases[i], phases[i + 1]
        by_first[first_on].append((a / b if first_on else b / a) - 1.0)
    groups = [statistics.median(g) for g in by_first.values() if g]
    return (sum(groups) / len(groups) if groups else None), sum(map(len, by_first.values()))


def ab_fields(phases, order):
    """The A/B's printed figures, as a dict (empty without a whole pair)."""
    overhead, pairs = ab_overhead(phases, order)
    if overhead is None:
        return {}
    return {"ab_off_ms": statistics.median(ms for o, ms in phases if not o),
            "ab_on_ms": statistics.median(ms for o, ms in phases if o),
            "ab_overhead_pct": 100.0 * overhead, "ab_pairs": pairs, "ab_order": order}


def train(steps, batch, warmup, ab=0, switch=None, plan=None):
    device = torch.device("cuda")
    torch.manual_seed(0)
    net = Net().to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    images = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    start = None
    phases = []  # (recorder on, ms per step) of each phase, in order
    phase_start = None
    for step in range(steps):
        if step == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        if ab and step >= warmup and (step - warmup) % ab == 0:
            # a phase ends here (phase index - 1), the next begins
            torch.cuda.synchronize()
            now = time.perf_counter()
            index = (step - warmup) // ab
            if phase_start is not None:
                phases.append((plan(index - 1), (now - phase_start) * 1000.0 / ab))
            switch(plan(index))
            phase_start = time.perf_counter()
        optimizer.zero_grad()
        outputs = net(images)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start if start is not None else 0.0
    timed = max(steps - warmup, 1)
    return loss.item(), elapsed * 1000.0 / timed, phases


def nvml_process_bytes():
    """This process's GPU memory as nvidia-smi shows it (NVML), or None when pynvml is missing."""
    try:
        import pynvml
        pynvml.nvmlInit()
        total = 0
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == os.getpid() and proc.usedGpuMemory:
                    total += proc.usedGpuMemory
        return total
    except Exception:  # no pynvml, no NVML: the check that needs it says so
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--record-history", action="store_true",
                    help="turn on torch.cuda.memory._record_memory_history(stacks='python'), "
                         "to compare its cost with memtrace's")
    ap.add_argument("--ab", type=int, default=0, metavar="K",
                    help="alternate phases of K steps with the recorder off and on (see above)")
    ap.add_argument("--ab-what", choices=["memtrace", "history", "none"], default="memtrace")
    ap.add_argument("--ab-order", choices=["alternate", "random"], default="alternate")
    args = ap.parse_args()
    if args.record_history:
        torch.cuda.memory._record_memory_history(stacks="python")
    switch = recorder_switch(args.ab_what) if args.ab else None
    loss, step_ms, phases = train(args.steps, args.batch, min(args.warmup, args.steps - 1),
                                  args.ab, switch, ab_plan(args.ab_order))
    print(f"loss={loss:.4f}")
    ab = ab_fields(phases, args.ab_order) if args.ab else {}
    if ab:
        print(f"ab_off_ms={ab['ab_off_ms']:.4f} ab_on_ms={ab['ab_on_ms']:.4f} "
              f"ab_overhead_pct={ab['ab_overhead_pct']:.3f} ab_pairs={ab['ab_pairs']} "
              f"ab_order={ab['ab_order']}")
    nvml = nvml_process_bytes()
    print(
        f"max_memory_allocated={torch.cuda.max_memory_allocated()} "
        f"max_memory_reserved={torch.cuda.max_memory_reserved()} "
        f"steps={args.steps} step_ms={step_ms:.4f}"
        + (f" nvml_process_bytes={nvml}" if nvml is not None else "")
    )


if __name__ == "__main__":
    main()
