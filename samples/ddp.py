"""DDP on every GPU of the machine (torchrun), with uneven work per rank: rank r trains on a batch
(1 + r) times as large, so the last rank's peak is the largest — the rank table must say so.

    torchrun --nproc_per_node=N ddp.py [--steps S] [--fsdp [--bf16] [--checkpointing] [--hsdp]
                                       [--post-forward] | --fsdp1] [--stray MIB] [--stray-context]

--fsdp shards a small transformer with FSDP2 (torch.distributed.fsdp.fully_shard) instead: the
GPT-2-like model of train.py, AdamW, every rank the same batch. --fsdp1 shards the same model with
FSDP1 (FullyShardedDataParallel, each GPT2Block a unit of its own: one flat parameter per unit).
With --fsdp, --bf16 all-gathers the weights in bfloat16 (MixedPrecisionPolicy: compute in bf16,
gradients reduced in float32) and --checkpointing turns on transformers' gradient checkpointing
(non-reentrant): the usual recipe for a large model. --hsdp shards over a 2-D mesh instead
(HSDP: init_device_mesh("cuda", (N, 1), ("replicate", "shard")), each rank a replica of whole
weights, its gradients all-reduced). --post-forward gives fully_shard reshard_after_forward=1 and
makes PyTorch take that int as it takes any int that is not the shard group's size (N=2 of 8
GPUs, say): each module keeps a copy of its gathered weights for a group of 1 from its forward to
its backward pass (FSDPParam._sharded_post_forward_param_data). PyTorch 2.11 turns 1 into False
and any int equal to the shard group's size into True, so on 2 GPUs no int takes that path
unasked; --post-forward wraps its _get_post_forward_mesh_info to do what its own int case does.

--stray MIB makes the classic mistake of a torchrun script: every rank loads a checkpoint (MIB of
weights, saved from cuda:0) with torch.load and no map_location before torch.cuda.set_device, and
keeps it. So every rank holds a CUDA context and those weights on GPU 0, rank 0's GPU, besides its
own work: the rank table must say who holds what on another rank's GPU. --stray-context makes the
smaller mistake: a CUDA call (torch.cuda.mem_get_info) before set_device, which makes a context on
GPU 0 and allocates nothing there.

stdout: one line per rank (ranks print in any order). PyTorch's numbers per rank go to
$SAMPLE_STATS with "{rank}" in the path (mt_stats.py), with the textbook quantities of this rank
(scripts/categories_vs_torch.py): its parameters (FSDP: its shards), their allocator blocks, their
gradients and the optimizer's state, under FSDP2 the most it kept from a forward to its backward
pass (post_forward_bytes: nonzero with --post-forward), and under DDP what DDP's own logging says
of the reducer's buckets (ddp_logging: bucket_sizes, rebuilt_bucket_sizes, ...: the flat tensors
each bucket's gradients are copied into for the all-reduce).
"""
import argparse
import io
import os

import torch
import torch.distributed as dist

import mt_stats


def ddp_model(dev):
    return torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 1024)).to(dev)


def load_checkpoint(nbytes):
    """The weights of a checkpoint saved from cuda:0, loaded the way many scripts do: torch.load
    without map_location puts every tensor back on the device it was saved from."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(nbytes // 4, device="cuda:0")}, buf)
    buf.seek(0)
    return torch.load(buf)


def take_int_path_of_reshard_after_forward(n):
    """fully_shard(..., reshard_after_forward=n) as PyTorch takes an int that is neither 1 nor the
    shard group's size: the post-forward mesh is the shard mesh viewed (-1, n) (PyTorch 2.11's
    _get_post_forward_mesh_info, int case), one mesh for every call."""
    import importlib
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp._fully_shard._fsdp_common import HSDPMeshInfo
    mods = [importlib.import_module("torch.distributed.fsdp._fully_shard." + m)
            for m in ("_fsdp_init", "_fully_shard")]
    orig, made = mods[0]._get_post_forward_mesh_info, {}

    def post_forward_mesh_info(reshard_after_forward, mesh_info):
        if isinstance(reshard_after_forward, bool) or reshard_after_forward != n:
            return orig(reshard_after_forward, mesh_info)
        if id(mesh_info.mesh) not in made:
            mesh = DeviceMesh(mesh_info.mesh.device_type, mesh_info.mesh.mesh.view(-1, n))
            made[id(mesh_info.mesh)] = HSDPMeshInfo(mesh, shard_mesh_dim=1, replicate_mesh_dim=0)
        return made[id(mesh_info.mesh)]
    for mod in mods:  # fully_shard's module binds the name on import
        if hasattr(mod, "_get_post_forward_mesh_info"):
            mod._get_post_forward_mesh_info = post_forward_mesh_info


def post_forward_bytes(model):
    """What FSDP2 keeps between a forward and its backward pass for reshard_after_forward=int."""
    out = 0
    for m in model.modules():
        state = m._get_fsdp_state() if hasattr(m, "_get_fsdp_state") else None
        group = getattr(state, "_fsdp_param_group", None)
        for p in group.fsdp_params if group else []:
            t = getattr(p, "_sharded_post_forward_param_data", None)
            out += t.untyped_storage().nbytes() if t is not None else 0
    return out


def textbook(model, opt, fsdp):
    """What this rank holds of W, its gradients and the optimizer's state, by PyTorch's objects
    (FSDP2's are DTensors: this rank's shards)."""
    params = list(model.parameters())
    out = {"param_bytes": sum(mt_stats.tensor_bytes(p) for p in params),
           "param_block_bytes": mt_stats.block_bytes(params + list(model.buffers())),
           "grad_bytes": sum(mt_stats.tensor_bytes(p) for p in params if p.requires_grad),
           "optimizer_state_bytes": mt_stats.state_bytes(opt)}
    if not fsdp:  # the reducer's buckets, as DDP's own logging reports them
        data = model._get_ddp_logging_data()
        out["ddp_logging"] = {k: v for k, v in data.items() if "bucket" in k or "grad" in k}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--fsdp", action="store_true")
    ap.add_argument("--fsdp1", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--hsdp", action="store_true")
    ap.add_argument("--post-forward", action="store_true")
    ap.add_argument("--stray", type=int, default=0, metavar="MIB")
    ap.add_argument("--stray-context", action="store_true")
    args = ap.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    stale = load_checkpoint(args.stray << 20) if args.stray else None
    if args.stray_context:
        torch.cuda.mem_get_info()  # on the current device, cuda:0: a context there
    torch.cuda.set_device(local)  # before the process group: no stray context on GPU 0
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    torch.manual_seed(rank)
    if args.fsdp or args.fsdp1:
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, n_positions=256, vocab_size=50257)
        model = GPT2LMHeadModel(cfg).to(dev)
        if args.checkpointing:  # transformers' own switch, non-reentrant, before sharding
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if args.fsdp1:
            from torch.distributed.fsdp import FullyShardedDataParallel
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy
            from transformers.models.gpt2.modeling_gpt2 import GPT2Block
            model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({GPT2Block}),
                                             device_id=dev)
        else:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if args.bf16 else None,
                                      reduce_dtype=torch.float32 if args.bf16 else None)
            kw = {}
            if args.hsdp:
                from torch.distributed.device_mesh import init_device_mesh
                kw["mesh"] = init_device_mesh("cuda", (dist.get_world_size(), 1),
                                              mesh_dim_names=("replicate", "shard"))
            if args.post_forward:
                take_int_path_of_reshard_after_forward(1)
                kw["reshard_after_forward"] = 1
            for block in model.transformer.h:
                fully_shard(block, mp_policy=mp, **kw)
            fully_shard(model, mp_policy=mp, **kw)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, cfg.vocab_size, (8, 256), device=dev)
        kept = 0
        for _ in range(args.steps):
            loss = model(input_ids=ids, labels=ids, use_cache=not args.checkpointing).loss
            kept = max(kept, post_forward_bytes(model) if args.fsdp else 0)
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        model = torch.nn.parallel.DistributedDataParallel(ddp_model(dev), device_ids=[local])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        batch = 256 * (1 + rank)
        for _ in range(args.steps):
            x = torch.randn(batch, 2048, device=dev)
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dist.barrier()
    kind = "fsdp" if args.fsdp else "fsdp1" if args.fsdp1 else "ddp"
    print(f"rank {rank} of {dist.get_world_size()} done ({kind})")
    extra = {"post_forward_bytes": kept} if args.fsdp else {}
    mt_stats.write(world_size=dist.get_world_size(), **extra, **textbook(model, opt, kind != "ddp"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
