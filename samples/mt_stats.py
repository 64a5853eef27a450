"""What PyTorch itself says about memory, written where the GPU checks can read it.

The samples print only what is the same in every run on stdout (so a traced run's output can be
compared with an untraced run's, byte for byte); the numbers the checks compare with the trace go
to the JSON file named by $SAMPLE_STATS ("{pid}" and "{rank}" in it are replaced), one object:
    {"pid": ..., "rank": ..., "devices": {"0": {"max_allocated": ..., "max_reserved": ...}, ...},
     ...extra keys a sample adds}
"""
import json
import os

import torch


def local(t):
    """This process's own part of t: a DTensor's local shard (FSDP2's parameters, gradients and
    optimizer state), else t itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def tensor_bytes(t):
    """numel * element_size of this process's own part of t."""
    t = local(t)
    return t.numel() * t.element_size()


def state_bytes(opt):
    """The optimizer's state tensors on a GPU, numel * element_size each (this process's part)."""
    return sum(tensor_bytes(v) for s in opt.state.values() for v in s.values()
               if torch.is_tensor(v) and local(v).is_cuda)


def block_bytes(tensors):
    """The caching allocator's blocks under these tensors' storages, each counted once (tied
    weights share one), from torch.cuda.memory_snapshot(): what a trace counts for them, a multiple
    of 512 bytes and sometimes more than numel * element_size (a whole block rather than a small
    remainder). Tensors not in a block of the snapshot (not on a GPU) count nothing; a DTensor counts
    its local shard."""
    sizes = {}
    for seg in torch.cuda.memory_snapshot():
        at = seg["address"]
        for b in seg["blocks"]:  # in address order, from the segment's start
            if b["state"] == "active_allocated":
                sizes[b.get("address", at)] = b["size"]
            at += b["size"]
    seen = {t.untyped_storage().data_ptr() for t in map(local, tensors) if t.is_cuda}
    return sum(sizes.get(p, 0) for p in seen)


def write(**extra):
    path = os.environ.get("SAMPLE_STATS")
    if not path:
        return
    rank = os.environ.get("RANK", "")
    path = path.replace("{pid}", str(os.getpid())).replace("{rank}", rank or str(os.getpid()))
    devs = {}
    for d in range(torch.cuda.device_count()):
        if torch.cuda.memory_reserved(d) or torch.cuda.max_memory_reserved(d):
            devs[str(d)] = {"max_allocated": torch.cuda.max_memory_allocated(d),
                            "max_reserved": torch.cuda.max_memory_reserved(d),
                            "allocated": torch.cuda.memory_allocated(d),
                            "reserved": torch.cuda.memory_reserved(d)}
    out = {"pid": os.getpid(), "rank": rank, "devices": devs}
    out.update(extra)
    with open(path, "w") as f:
        json.dump(out, f)
