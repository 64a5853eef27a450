"""A training run that dies with "CUDA out of memory", the moment memtrace exists for.

    python oom.py [--fraction F] [--catch] [--width W] [--layers L]

An MLP (L layers of W, ReLU, AdamW) trained on random data with a batch that doubles every step,
from a batch sized to fill an eighth of the memory it may use, until PyTorch's caching allocator
raises torch.OutOfMemoryError (in the forward pass or in autograd's backward, whichever runs out
first). The process then dies of it, as a training run does, with Python's traceback and exit 1.

--fraction F  torch.cuda.set_per_process_memory_fraction(F): the allocator refuses anything that
              would take its reservation past F of the GPU, without asking the driver, so the
              driver sees no failed request at all (shared GPUs, notebooks, Ray and the like).
--catch       a batch-size finder: the error is caught, the batch halved, one more step run, and
              the program exits 0.

stdout is the same in every run. What PyTorch itself said at the failure goes to $SAMPLE_STATS
(mt_stats.py) for the GPU checks: from an OOM observer, which the allocator calls at the moment it
gives up (after freeing its cache and trying again), "oom_alloc" (the segment it tried to get,
its message's "Tried to allocate"), "oom_allocated" and "oom_reserved" (memory_allocated and
memory_reserved then), "oom_free" (cudaMemGetInfo's free bytes) and "oom_limit" (the device's
total, or the fraction's limit); "oom_batch", "oom_num_ooms" (memory_stats' count), "oom_line"
(this file's innermost line in the traceback) and "oom_message" (the error's first line).
"""
import argparse
import traceback

import torch

import mt_stats

SEEN = {}


def observer(device, alloc, limit, free):
    # the allocator has let go of its lock; PyTorch's own counters are those of the failure
    SEEN.update(oom_alloc=alloc, oom_limit=limit, oom_free=free,
                oom_allocated=torch.cuda.memory_allocated(device),
                oom_reserved=torch.cuda.memory_reserved(device))


def build(width, layers):
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).cuda()


def step(net, opt, batch, width):
    x = torch.randn(batch, width, device="cuda")
    loss = net(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fraction", type=float)
    ap.add_argument("--catch", action="store_true")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    a = ap.parse_args()
    torch.manual_seed(0)
    total = torch.cuda.get_device_properties(0).total_memory
    if a.fraction:
        torch.cuda.set_per_process_memory_fraction(a.fraction)
    usable = total * (a.fraction or 1.0)
    try:
        torch._C._cuda_attach_out_of_memory_observer(observer)
    except RuntimeError:  # backend:cudaMallocAsync has no observers
        pass
    net = build(a.width, a.layers)
    opt = torch.optim.AdamW(net.parameters())
    # what a sample keeps for backward: each layer's input and its ReLU's mask, ~2 floats a unit
    per_sample = a.layers * a.width * 4 * 2
    batch = 1 << max(int(usable / 8 / per_sample).bit_length() - 1, 0)
    print(f"oom.py: {a.layers} layers of {a.width}, batch from {batch}, doubling", flush=True)
    stats = {}
    try:
        for n in range(64):
            step(net, opt, batch, a.width)
            torch.cuda.synchronize()
            print(f"step {n}: batch {batch} ok", flush=True)
            batch *= 2
    except torch.OutOfMemoryError as e:
        tb = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == __file__]
        stats = dict(SEEN, oom_batch=batch, oom_line=tb[-1].lineno if tb else 0,
                     oom_num_ooms=torch.cuda.memory_stats()["num_ooms"],
                     oom_message=str(e).splitlines()[0])
        print(f"step {n}: batch {batch}: torch.OutOfMemoryError", flush=True)
        if not a.catch:
            mt_stats.write(**stats)
            raise
    if stats:
        # out of the except block: the traceback, and the activations its frames hold, are gone
        opt.zero_grad(set_to_none=True)
        batch //= 2
        step(net, opt, batch, a.width)
        torch.cuda.synchronize()
        print(f"recovered: batch {batch} ok", flush=True)
    mt_stats.write(**stats)


if __name__ == "__main__":
    main()
