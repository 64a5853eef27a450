"""A training run that dies with "CUDA out of memory", the moment memtrace exists for.

    python oom.py [--fraction F | --in-backward [--ballast]] [--catch] [--graph] [--checkpoint K]
                  [--width W] [--layers L]
    torchrun --nproc_per_node=N oom.py [...]

An MLP (L layers of W, ReLU, AdamW) trained on random data with a batch that doubles every step,
from a batch sized to fill an eighth of the memory it may use, until PyTorch's caching allocator
raises torch.OutOfMemoryError (in the forward pass or in autograd's backward, whichever runs out
first). The process then dies of it, as a training run does, with Python's traceback and exit 1.

--fraction F  torch.cuda.set_per_process_memory_fraction(F): the allocator refuses anything that
              would take its reservation past F of the GPU, without asking the driver, so the
              driver sees no failed request at all (shared GPUs, notebooks, Ray and the like).
--catch       a batch-size finder: the error is caught, the batch halved, one more step run, and
              the program exits 0.
--graph       each step's forward and backward are captured into a CUDA graph (a new one for each
              batch size, warmed up on a batch of one) and replayed: the allocations of the
              capture come from the graph's private pool, and so does the one that fails.
--in-backward eager steps that run out of memory in the backward pass: one step is measured
              first (the memory PyTorch reserves by the end of its forward and of its backward,
              max_memory_reserved), then the fraction is set halfway between the two, so the
              next step's forward fits and its backward (PowBackward0's temporaries) does not.
--ballast     with --in-backward: the same limit made by filling the GPU instead (a cudaMalloc
              holds what lies beyond it), so the driver itself refuses the backward's request. Under
              backend:cudaMallocAsync, which checks a memory fraction itself and asks the driver
              nothing beyond it, that is the only way the driver sees the failure.
--checkpoint K activation checkpointing (torch.utils.checkpoint, use_reentrant=False) of every K
              layers: the forward keeps only each block's input, and the backward pass computes
              each block again on autograd's worker thread, in Python, keeping what that block's
              own backward needs. With --in-backward and blocks of many layers, that recomputation
              is what runs out (e.g. --layers 16 --checkpoint 8).
Under torchrun the net is wrapped in DistributedDataParallel (NCCL, a GPU per rank) and rank r
trains on (1 + r) times the batch: the last rank runs out first and dies; the others wait for it
in an all-reduce until torchrun kills them (SIGTERM), as in a real job. Each line of stdout then
starts with "rank R: " (ranks print in any order).

stdout is the same in every run. What PyTorch itself said at the failure goes to $SAMPLE_STATS
(mt_stats.py) for the GPU checks: from an OOM observer, which the allocator calls at the moment it
gives up (after freeing its cache and trying again), "oom_alloc" (the segment it tried to get,
its message's "Tried to allocate"), "oom_allocated" and "oom_reserved" (memory_allocated and
memory_reserved then), "oom_free" (cudaMemGetInfo's free bytes) and "oom_limit" (the device's
total, or the fraction's limit); "oom_batch", "oom_num_ooms" (memory_stats' count), "oom_line"
(this file's innermost line in the traceback), "oom_in_backward" (raised in autograd's engine)
and "oom_message" (the error's first line).
"""
import argparse
import ctypes
import os
import sys
import traceback

import re

import torch
import torch.utils.checkpoint

import mt_stats

SEEN = {}


def observer(device, alloc, limit, free):
    # the allocator has let go of its lock; PyTorch's own counters are those of the failure
    SEEN.update(oom_alloc=alloc, oom_limit=limit, oom_free=free,
                oom_allocated=torch.cuda.memory_allocated(device),
                oom_reserved=torch.cuda.memory_reserved(device))


def line_out(text):
    # one write per line: the ranks share the pipe, and print() writes the newline on its own
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def build(width, layers):
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).cuda()


class Checkpointed(torch.nn.Module):
    # blocks of K layers whose activations are computed again in the backward pass
    def __init__(self, seq, per_block):
        super().__init__()
        mods, n = list(seq), 2 * per_block
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(*mods[i:i + n]) for i in range(0, len(mods), n))

    def forward(self, x):
        for b in self.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
        return x


def step(net, opt, batch, width):
    x = torch.randn(batch, width, device="cuda")
    loss = net(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def graph_step(net, opt, batch, width):
    # warm-up on a side stream (cuBLAS, autograd's lazy state) with a batch of one, so that the
    # memory of the step itself is first asked for during the capture, from the graph's pool
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        net(torch.randn(1, width, device="cuda")).square().mean().backward()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    x = torch.randn(batch, width, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        net(x).square().mean().backward()
    g.replay()
    opt.step()
    opt.zero_grad(set_to_none=True)


def hold_device_memory(nbytes):
    # a cudaMalloc of the CUDA runtime PyTorch loaded, never freed: outside PyTorch's allocator,
    # so that its error message counts only the program's tensors (the same traced or not, where
    # this size is not: the recorder's CUPTI takes a few MiB of the GPU)
    runtime = next(line.split()[-1] for line in open("/proc/self/maps") if "/libcudart.so" in line)
    p = ctypes.c_void_p()
    err = ctypes.CDLL(runtime).cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes))
    if err:
        raise RuntimeError(f"cudaMalloc({nbytes}) of the ballast: error {err}")


def reserved_by_phase(net, batch, width):
    # what one step at this batch makes PyTorch reserve by the end of its forward, and of its
    # backward; then everything it made is given back
    torch.cuda.reset_peak_memory_stats()
    loss = net(torch.randn(batch, width, device="cuda")).square().mean()
    forward = torch.cuda.max_memory_reserved()
    loss.backward()
    backward = torch.cuda.max_memory_reserved()
    del loss
    net.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    return forward, backward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fraction", type=float)
    ap.add_argument("--catch", action="store_true")
    ap.add_argument("--graph", action="store_true")
    ap.add_argument("--in-backward", action="store_true")
    ap.add_argument("--ballast", action="store_true")
    ap.add_argument("--checkpoint", type=int, default=0)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    a = ap.parse_args()
    rank = int(os.environ.get("RANK", -1))
    say = print if rank < 0 else (lambda m, **k: line_out(f"rank {rank}: {m}"))
    if rank >= 0:
        import torch.distributed as dist
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)  # before the process group: no stray context on GPU 0
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    torch.manual_seed(0)
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if a.fraction:
        torch.cuda.set_per_process_memory_fraction(a.fraction)
    usable = total * (a.fraction or 1.0)
    try:
        torch._C._cuda_attach_out_of_memory_observer(observer)
    except RuntimeError:  # backend:cudaMallocAsync has no observers
        pass
    net = build(a.width, a.layers)
    if a.checkpoint:
        net = Checkpointed(net, a.checkpoint)
    if rank >= 0:
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.AdamW(net.parameters())
    # what a sample keeps for backward: each layer's input and its ReLU's mask, ~2 floats a unit
    per_sample = a.layers * a.width * 4 * 2
    batch = 1 << max(int(usable / 8 / per_sample).bit_length() - 1, 0)
    batch *= 1 + max(rank, 0)
    if a.in_backward:  # a batch of ~1 GiB of activations, and a limit between forward and backward
        batch = 1 << max(int(2**30 / per_sample).bit_length() - 1, 0)
        forward, backward = reserved_by_phase(net, batch, a.width)
        if a.ballast:  # the driver's free memory: what the program may still reserve
            free = torch.cuda.mem_get_info()[0]
            room = (forward + backward) // 2 - torch.cuda.memory_reserved()
            hold_device_memory((free - room) & ~((2 << 20) - 1))
        else:
            torch.cuda.set_per_process_memory_fraction((forward + backward) / 2 / total)
        say("oom.py: limit halfway between the forward's and the backward's reservations", flush=True)
    say(f"oom.py: {a.layers} layers of {a.width}, batch from {batch}, doubling", flush=True)
    stats = {}
    run = graph_step if a.graph else step
    try:
        for n in range(64):
            run(net, opt, batch, a.width)
            torch.cuda.synchronize()
            say(f"step {n}: batch {batch} ok", flush=True)
            batch *= 2
    except torch.OutOfMemoryError as e:
        every = traceback.extract_tb(e.__traceback__)
        tb = [f for f in every if f.filename == __file__]
        # raised in autograd's engine: a backward pass (its allocations are its worker's)
        backward = any("torch/autograd/" in f.filename for f in every)
        # backend:cudaMallocAsync's message (no observer is called): "Requested : 512.00 MiB"
        # and its memory_allocated() then, "Currently allocated : 1.32 GiB", as it printed it
        asked = re.search(r"\nRequested\s*: ([0-9.]+) (bytes|KiB|MiB|GiB)", str(e))
        if asked:
            SEEN["oom_requested"] = round(float(asked.group(1)) * 1024 ** [
                "bytes", "KiB", "MiB", "GiB"].index(asked.group(2)))
        held = re.search(r"\nCurrently allocated\s*: (.*)", str(e))
        if held:
            SEEN["oom_allocated_text"] = held.group(1).strip()
        stats = dict(SEEN, oom_batch=batch, oom_line=tb[-1].lineno if tb else 0,
                     oom_in_backward=backward,
                     oom_num_ooms=torch.cuda.memory_stats()["num_ooms"],
                     oom_message=str(e).splitlines()[0])
        say(f"step {n}: batch {batch}: torch.OutOfMemoryError", flush=True)
        if not a.catch:
            mt_stats.write(**stats)
            raise
    if stats:
        # out of the except block: the traceback, and the activations its frames hold, are gone
        opt.zero_grad(set_to_none=True)
        batch //= 2
        run(net, opt, batch, a.width)
        torch.cuda.synchronize()
        say(f"recovered: batch {batch} ok", flush=True)
    mt_stats.write(**stats)


if __name__ == "__main__":
    main()
