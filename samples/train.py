"""Real training loops on random data (no downloads): a torchvision ResNet-18 or a GPT-2-like
transformer built from a transformers config, with AdamW (or SGD with momentum).

    python train.py --model resnet18|vit_b_16|gpt2|bert|lstm|fasterrcnn|recsys [--batch B] [--steps N] [--warmup W] [--optim adamw|sgd|sgd0|nadam|radam|adamax|adadelta|rprop|asgd|adagrad|rmsprop]
                    [--amp] [--compile] [--ab K] [--record-history] [--resume [--resume-format safetensors]] [--distill] [--loss-outside]

resnet18: torchvision.models.resnet18(num_classes=1000), 224x224 images, batch 32 by default;
vit_b_16 the same with torchvision's ViT-B/16.
bert:     transformers BertForMaskedLM(BertConfig(4 layers, 512 wide, 8 heads)), batch 8 of 256.
lstm:     an embedding, a 2-layer cuDNN LSTM (512) and a linear decoder over 10 000 words, batch
          32 of 64 tokens.
fasterrcnn: torchvision's fasterrcnn_mobilenet_v3_large_320_fpn(num_classes=91), no weights, in
          training mode (its losses summed), batch 4 of 320x320 images with 4 random boxes each:
          detection's tensors change size from step to step (NMS, the proposals).
gpt2:     transformers GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=512, n_head=8,
          n_positions=256, vocab_size=50257)), batch 8 of 256 tokens by default.
--amp runs forward and loss under torch.autocast(bfloat16); --compile wraps the model in
torch.compile (default mode; --compile-mode MODE: max-autotune, ...). --no-cache passes use_cache=False to the GPT-2-like model's forward
(by default transformers keeps its keys and values in a cache, in training too); --checkpointing
turns on its gradient checkpointing (non-reentrant: each block's activations recomputed in the
backward pass; implies --no-cache; --reentrant: the reentrant variant, whose recomputation runs a
backward pass of its own inside the backward pass). --optim sgd0 is SGD without momentum (no
state) with a weight decay. --fp16 runs forward and loss under torch.autocast(float16)
with a torch.amp.GradScaler; --accum K makes K backward passes before each optimizer step.
--freeze fine-tunes the last layers only (ResNet-18's fc; the GPT-2-like model's last block and
final norm): every other parameter has requires_grad=False and stays out of the optimizer.
--lora R (GPT-2-like) freezes the whole model and adds a rank-R adapter beside each block's
attention projection (c_attn: x @ A @ B, A random, B zero), the adapters alone trained: LoRA,
written out here since peft is not on every machine. --ema keeps an exponential moving average
of the weights in a deep copy of the model (requires_grad=False), updated after each step.
--gpu-augment (resnet18, vit_b_16) makes each step's batch on the GPU with torchvision's v2
transforms (a random resized crop of 256x256 uint8 images, a flip, to float, normalized).
--pretrained (gpt2) starts from the model saved with save_pretrained and loaded back with
from_pretrained(device_map=...), as fine-tuning a downloaded model does (no download: random
weights). --resume runs one step, saves a checkpoint of the model and the optimizer, loads it back with
map_location="cuda" (--resume-map cpu: "cpu") into both and keeps the loaded dict referenced, as a
resumed run often does (its tensors' bytes on the GPU: checkpoint_bytes, checkpoint_block_bytes in
$SAMPLE_STATS). --resume-format safetensors saves and loads the model's weights with safetensors
instead (save_file, then load_file(device="cuda") with --resume-map cuda), the optimizer's state
still with torch.save.
--loss-outside (gpt2) computes the loss in the training loop, as many hand-written loops do:
F.cross_entropy(model(ids).logits.view(-1, vocab), ids.view(-1)), not inside the model's forward.
recsys:   a recommendation model: a sparse EmbeddingBag of 1 000 000 x 64 (sparse=True: its
          gradient is the rows a batch touched, trained by SparseAdam) and a dense MLP (AdamW),
          batch 8192 of 16 ids; $SAMPLE_STATS gets sparse_grad_bytes and sparse_grad_index_bytes,
          the sparse gradient's values and indices after a backward pass.
--offload keeps the tensors saved for the backward pass in pinned host memory
(torch.autograd.graph.save_on_cpu(pin_memory=True)), copied back to the GPU as the backward pass
needs them.
--distill (resnet18) distills from a frozen teacher, torchvision's ResNet-50 in eval mode run
under torch.no_grad(): the loss is cross-entropy plus the KL divergence from the teacher's
softened outputs. The teacher's weights are on the GPU too, never trained.
--split (gpt2 --pretrained) loads the model with a device_map over two GPUs: the embedding, the
head and the first half of the blocks on cuda:0, the rest on cuda:1, run one after the other
(naive model parallelism; autograd runs each GPU's part of the backward pass on a thread of its
own).
--data-parallel wraps the model in torch.nn.DataParallel over every GPU of the machine: the batch
split between them, the weights, gradients and optimizer state on cuda:0, a replica of the
weights broadcast to every other GPU at each forward pass and their gradients summed back.

stdout is the same in every run. What the GPU checks compare with a trace goes to $SAMPLE_STATS
(mt_stats.py): PyTorch's per-device peaks, step_ms, and the textbook quantities of training
memory measured from the live objects at the end: parameter bytes (sum of numel*element_size),
gradient bytes (parameters with a .grad), optimizer state bytes (tensors in optimizer.state on
the GPU), and the caching allocator's blocks under the parameters and buffers (param_block_bytes,
from torch.cuda.memory_snapshot(): what a trace counts). --ab K alternates K-step phases with memtrace paused and recording (as cifar.py --ab;
with --ab-what history PyTorch's own _record_memory_history(stacks="python") instead; with none,
nothing: an A/A control) and adds ab_off_ms, ab_on_ms, ab_overhead_pct (median over on-phases of
on / the mean of the off-phases either side - 1: a steady drift cancels), ab_pairs, ab_order;
--ab-order random puts each pair of phases in a random order and compares within pairs (cifar.py).
The same comparison on CPU time: ab_cpu_off_ms and ab_cpu_pct for the whole process (every
thread), ab_main_cpu_off_ms and ab_main_cpu_pct for the main thread.
--record-history keeps PyTorch's recorder on for the whole run (its cost between processes).
"""
import argparse
import contextlib
import ctypes
import time

import torch

import mt_stats
from cifar import ab_fields, ab_plan  # the A/B's schedule and comparison, shared with cifar.py


def pretrained(net, dev, split=False):
    """The model as fine-tuning starts from one: saved with save_pretrained (its random weights,
    no download) and loaded back with from_pretrained(device_map=...), which puts the weights
    straight onto the GPU through safetensors and Accelerate."""
    import os
    import tempfile
    from transformers.utils import logging
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    logging.disable_progress_bar()  # stderr stays the same in every run (their rates vary)
    d = tempfile.mkdtemp()
    net.save_pretrained(d)
    if split:  # the blocks over two GPUs (naive model parallelism, as device_map="auto" does for
        # a model too large for one); the tied embedding and head, and the batch, on the first
        n = net.config.n_layer
        where = {"transformer.wte": 0, "transformer.wpe": 0, "transformer.drop": 0, "lm_head": 0,
                 "transformer.ln_f": 1}
        where.update({f"transformer.h.{i}": int(i >= n // 2) for i in range(n)})
        return type(net).from_pretrained(d, device_map=where)
    return type(net).from_pretrained(d, device_map={"": dev.index or 0})


def build(model, batch, dev, use_cache=True, from_pretrained=False, augment=False, teacher=None,
          loss_outside=False, split=False):
    if model in ("resnet18", "vit_b_16"):
        import torchvision
        net = torchvision.models.get_model(model, num_classes=1000).to(dev)
        x = torch.randn(batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        loss_fn = torch.nn.CrossEntropyLoss()
        if teacher is not None:  # knowledge distillation from a frozen, larger model
            t = torchvision.models.resnet50(num_classes=1000).to(dev).eval().requires_grad_(False)
            teacher.append(t)

            def distill(m):
                with torch.no_grad():
                    soft = torch.softmax(t(x) / 4.0, dim=1)
                out = m(x)
                kl = torch.nn.functional.kl_div(torch.log_softmax(out / 4.0, dim=1), soft,
                                                reduction="batchmean")
                return loss_fn(out, y) + kl

            return net, distill
        if augment:  # each step's batch augmented on the GPU (torchvision's v2 transforms)
            from torchvision.transforms import v2
            raw = torch.randint(0, 256, (batch, 3, 256, 256), dtype=torch.uint8, device=dev)
            aug = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                              v2.ToDtype(torch.float32, scale=True),
                              v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
            return net, lambda m: loss_fn(m(aug(raw)), y)
        return net, lambda m: loss_fn(m(x), y)
    if model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, n_positions=256, vocab_size=50257)
        net = pretrained(GPT2LMHeadModel(cfg), dev, split) if from_pretrained else GPT2LMHeadModel(cfg).to(dev)
        ids = torch.randint(0, cfg.vocab_size, (batch, 256), device=dev)
        if loss_outside:  # the loss in the loop, outside any module
            return net, lambda m: torch.nn.functional.cross_entropy(
                m(input_ids=ids, use_cache=use_cache).logits.view(-1, cfg.vocab_size), ids.view(-1))
        return net, lambda m: m(input_ids=ids, labels=ids, use_cache=use_cache).loss
    if model == "bert":
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(num_hidden_layers=4, hidden_size=512, num_attention_heads=8,
                         intermediate_size=2048, vocab_size=30522, max_position_embeddings=256)
        net = BertForMaskedLM(cfg).to(dev)
        ids = torch.randint(0, cfg.vocab_size, (batch, 256), device=dev)
        return net, lambda m: m(input_ids=ids, labels=ids).loss
    if model == "lstm":
        # a word-level language model: cuDNN's LSTM keeps its weights in one flat buffer (the
        # parameters are views of it) and its backward returns their gradients the same way
        class LM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(10000, 512)
                self.rnn = torch.nn.LSTM(512, 512, num_layers=2, batch_first=True)
                self.out = torch.nn.Linear(512, 10000)

            def forward(self, x):
                return self.out(self.rnn(self.emb(x))[0])

        net = LM().to(dev)
        ids = torch.randint(0, 10000, (batch, 65), device=dev)
        loss_fn = torch.nn.CrossEntropyLoss()
        return net, lambda m: loss_fn(m(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    if model == "recsys":
        class RecSys(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.EmbeddingBag(1_000_000, 64, mode="sum", sparse=True)
                self.mlp = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(),
                                               torch.nn.Linear(1024, 1))

            def forward(self, ids):
                return self.mlp(self.emb(ids)).squeeze(1)

        net = RecSys().to(dev)
        ids = torch.randint(0, 1_000_000, (batch, 16), device=dev)
        y = torch.rand(batch, device=dev)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        return net, lambda m: loss_fn(m(ids), y)
    if model == "fasterrcnn":
        # torchvision's detection training: a list of images and of targets in, a dict of losses
        # out; NMS and the proposal sampler make tensors whose sizes change from step to step
        import torchvision
        net = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, num_classes=91).to(dev)
        images = [torch.rand(3, 320, 320, device=dev) for _ in range(batch)]
        targets = []
        for _ in range(batch):
            xy = torch.rand(4, 2, device=dev) * 200
            targets.append({"boxes": torch.cat([xy, xy + 10 + torch.rand(4, 2, device=dev) * 100], 1),
                            "labels": torch.randint(1, 91, (4,), device=dev)})
        return net, lambda m: sum(m(images, targets).values())
    raise SystemExit(f"unknown model {model}")


class LoRA(torch.nn.Module):
    """base(x) + x @ a @ b: a low-rank adapter beside a frozen transformers Conv1D (weight nx x nf)."""

    def __init__(self, base, r):
        super().__init__()
        nx, nf = base.weight.shape
        self.base = base
        self.a = torch.nn.Parameter(torch.randn(nx, r, device=base.weight.device) / r)
        self.b = torch.nn.Parameter(torch.zeros(r, nf, device=base.weight.device))

    def forward(self, x):
        return self.base(x) + (x @ self.a) @ self.b


def fine_tune(net, model, freeze, lora):
    """Freezes what --freeze / --lora leave untrained, adds the adapters."""
    if not (freeze or lora):
        return
    for p in net.parameters():
        p.requires_grad_(False)
    if freeze:
        last = {"resnet18": lambda: [net.fc], "vit_b_16": lambda: [net.heads],
                "gpt2": lambda: [net.transformer.h[-1], net.transformer.ln_f]}[model]()
        for m in last:
            for p in m.parameters():
                p.requires_grad_(True)
    if lora:
        if model != "gpt2":
            raise SystemExit("--lora: the GPT-2-like model only")
        for block in net.transformer.h:
            block.attn.c_attn = LoRA(block.attn.c_attn, lora)


class Optimizers:
    """Several optimizers stepped as one (what the loop below and the stats ask of one)."""

    def __init__(self, *opts):
        self.opts = opts

    def step(self):
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none=True):
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)

    @property
    def state(self):
        return {p: s for o in self.opts for p, s in o.state.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--optim", default="adamw")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-mode", default=None)
    ap.add_argument("--ab", type=int, default=0)
    ap.add_argument("--ab-what", default="memtrace", choices=["memtrace", "history", "none"])
    ap.add_argument("--ab-order", default="alternate", choices=["alternate", "random"])
    ap.add_argument("--record-history", action="store_true")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--reentrant", action="store_true")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--freeze", action="store_true")
    ap.add_argument("--lora", type=int, default=0)
    ap.add_argument("--ema", action="store_true")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--resume-map", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--pretrained", action="store_true")
    ap.add_argument("--gpu-augment", action="store_true")
    ap.add_argument("--resume-format", default="torch", choices=["torch", "safetensors"])
    ap.add_argument("--distill", action="store_true")
    ap.add_argument("--loss-outside", action="store_true")
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--data-parallel", action="store_true")
    ap.add_argument("--split", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    batch = args.batch or {"gpt2": 8, "bert": 8, "fasterrcnn": 4, "recsys": 8192}.get(args.model, 32)
    teacher = [] if args.distill else None
    net, loss_of = build(args.model, batch, dev, from_pretrained=args.pretrained,
                         augment=args.gpu_augment, teacher=teacher, loss_outside=args.loss_outside,
                         split=args.split,
                         use_cache=not (args.no_cache or args.checkpointing))
    if args.checkpointing:  # transformers' own switch: each block's activations recomputed
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": args.reentrant})
    fine_tune(net, args.model, args.freeze, args.lora)
    model = torch.compile(net, mode=args.compile_mode) if args.compile else net
    if args.data_parallel:  # one process, every GPU: the weights broadcast to each at every step
        model = torch.nn.DataParallel(model)
    trained = [p for p in net.parameters() if p.requires_grad]
    if args.model == "recsys":  # the sparse table's own optimizer beside the MLP's
        opt = Optimizers(torch.optim.SparseAdam([net.emb.weight], lr=1e-3),
                         torch.optim.AdamW(net.mlp.parameters(), lr=1e-4))
    elif args.optim == "adamw":
        opt = torch.optim.AdamW(trained, lr=1e-4)
    elif args.optim == "sgd0":  # plain SGD: no state, a weight decay's temporaries in its step
        opt = torch.optim.SGD(trained, lr=1e-3, weight_decay=1e-4)
    elif args.optim == "sgd":
        opt = torch.optim.SGD(trained, lr=1e-3, momentum=0.9)
    else:  # PyTorch's other optimizers, by name, with their defaults (state: docs/analysis.md)
        kinds = {"nadam": torch.optim.NAdam, "radam": torch.optim.RAdam, "adamax": torch.optim.Adamax,
                 "adadelta": torch.optim.Adadelta, "rprop": torch.optim.Rprop, "asgd": torch.optim.ASGD,
                 "adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop}
        if args.optim not in kinds:
            raise SystemExit(f"unknown optimizer {args.optim}")
        opt = kinds[args.optim](trained, lr=1e-4)

    sparse_grad = [0, 0]
    if args.model == "recsys":  # the sparse gradient's values and indices, after each backward
        def sizes(p):
            sparse_grad[:] = mt_stats.tensor_bytes(p.grad._values()), mt_stats.tensor_bytes(p.grad._indices())
        net.emb.weight.register_post_accumulate_grad_hook(sizes)
    scaler = torch.amp.GradScaler("cuda") if args.fp16 else None
    ema = None
    if args.ema:  # an exponential moving average of the weights, as timm's ModelEmaV2 keeps it
        import copy
        ema = copy.deepcopy(net).requires_grad_(False)

    def step():
        for _ in range(args.accum):  # gradient accumulation: backward passes before one step
            with torch.autocast("cuda", dtype=torch.float16 if args.fp16 else torch.bfloat16,
                                enabled=args.amp or args.fp16), \
                    torch.autograd.graph.save_on_cpu(pin_memory=True) if args.offload \
                    else contextlib.nullcontext():
                loss = loss_of(model)
                if args.accum > 1:
                    loss = loss / args.accum
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        if ema is not None:
            with torch.no_grad():
                torch._foreach_lerp_(list(ema.parameters()), list(net.parameters()), 0.001)

    if args.record_history:
        torch.cuda.memory._record_memory_history(enabled="all", stacks="python")
    ckpt = None
    if args.resume:
        # resuming as many training scripts do: a checkpoint of the model and the optimizer,
        # loaded back with map_location="cuda" and kept referenced (the dict is never deleted)
        import os
        import tempfile
        step()
        path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        if args.resume_format == "safetensors":  # the weights in a .safetensors file of their own
            from safetensors.torch import load_file, save_file
            save_file(net.state_dict(), path + ".safetensors")
            torch.save({"opt": opt.state_dict()}, path)
            ckpt = torch.load(path, map_location=args.resume_map)
            ckpt["model"] = load_file(path + ".safetensors", device=args.resume_map)
            os.remove(path + ".safetensors")
        else:
            torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, path)
            ckpt = torch.load(path, map_location=args.resume_map)
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        os.remove(path)
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    extra = {}
    if ckpt is not None:  # the checkpoint's tensors still held on the GPU
        held = [t for t in ckpt["model"].values() if torch.is_tensor(t)]
        held += [v for st in ckpt["opt"]["state"].values() for v in st.values() if torch.is_tensor(v)]
        extra["checkpoint_bytes"] = sum(mt_stats.tensor_bytes(t) for t in held if t.is_cuda)
        extra["checkpoint_block_bytes"] = mt_stats.block_bytes(held)
    if args.ab:
        if args.ab_what == "none":  # the A/A control: the method's own noise and bias
            def pause(p):
                pass
        elif args.ab_what == "history":  # PyTorch's own recorder, switched the same way
            def pause(p):
                torch.cuda.memory._record_memory_history(enabled=None if p else "all",
                                                         stacks="python")
        else:
            pause = ctypes.CDLL(None).memtrace_set_paused
            pause.argtypes = [ctypes.c_int]
        # Each phase is timed three ways: the wall clock (what the A/B reports), the CPU time
        # of the whole process (every thread: the program's, autograd's, memtrace's writer) and
        # that of this thread. Where recording's wall cost exceeds what its cost notes account
        # for, the CPU clocks say whether the excess was spent on a CPU (the recorder's threads,
        # or the program's own code running slower after a report: caches, TLB) or waited.
        plan, phases, cpu, main_cpu = ab_plan(args.ab_order), [], [], []
        for k in range(args.steps // args.ab):
            on = plan(k)
            pause(0 if on else 1)
            torch.cuda.synchronize()
            t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
            for _ in range(args.ab):
                step()
            torch.cuda.synchronize()
            phases.append((on, (time.perf_counter() - t0) * 1000.0 / args.ab))
            cpu.append((on, (time.process_time() - c0) * 1000.0 / args.ab))
            main_cpu.append((on, (time.thread_time() - m0) * 1000.0 / args.ab))
        pause(0)
        extra = ab_fields(phases, args.ab_order)
        for name, clock in (("cpu", cpu), ("main_cpu", main_cpu)):
            more = ab_fields(clock, args.ab_order)
            if more:
                extra.update({f"ab_{name}_off_ms": more["ab_off_ms"],
                              f"ab_{name}_pct": more["ab_overhead_pct"]})
    else:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        extra["step_ms"] = (time.perf_counter() - t0) * 1000.0 / max(args.steps, 1)
    # the textbook quantities, measured on the live objects (issue 18's oracles)
    params = list(net.parameters())
    others = [t for m in teacher or [] for t in list(m.parameters()) + list(m.buffers())]
    extra["param_bytes"] = sum(mt_stats.tensor_bytes(p) for p in params + others)
    # the allocator's blocks of the parameters and the modules' buffers (a teacher's too): the
    # report's parameters row (W, "module buffers such as BatchNorm's statistics included")
    extra["param_block_bytes"] = mt_stats.block_bytes(params + list(net.buffers()) + others)
    # .grad: same shape/dtype, but for a sparse gradient (below)
    extra["grad_bytes"] = sum(mt_stats.tensor_bytes(p) for p in params if p.requires_grad and
                              not (args.model == "recsys" and p is net.emb.weight))
    if args.model == "recsys":  # the sparse gradient's own tensors, as the backward pass left them
        # (the indices may be the batch's own ids, reshaped: not a tensor of the backward pass)
        extra["sparse_grad_bytes"], extra["sparse_grad_index_bytes"] = sparse_grad
    extra["optimizer_state_bytes"] = mt_stats.state_bytes(opt)
    print(f"train model={args.model} batch={batch} steps={args.steps} optim={args.optim} "
          f"amp={int(args.amp)} compile={int(args.compile)}")
    mt_stats.write(**extra)


if __name__ == "__main__":
    main()
