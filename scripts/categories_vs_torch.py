#!/usr/bin/env python3
"""categories_vs_torch.py REPORT.json STATS.json — a trace's categories against PyTorch's own
numbers (samples/train.py's SAMPLE_STATS: Σ numel*element_size of the parameters, of the
parameters with a gradient, of the optimizer's state tensors on the GPU; the caching allocator's
blocks under the parameters and buffers, from torch.cuda.memory_snapshot()).

The trace counts the caching allocator's blocks (multiples of 512 bytes, sometimes larger than the
tensor: a whole block rather than a small remainder); the report pairs each gradient and state
tensor with a parameter of its size ("fit"). Checked: parameters equal to the allocator's blocks
of the parameters and buffers (within 1% of PyTorch's sum where a sample gives no blocks); the
optimizer state and the gradients after the backward pass, as paired with parameters, PyTorch's
sums within what pairing by size cannot tell apart (the bytes by which paired blocks differ from
their parameter's, plus 512 a tensor: PyTorch counts numel*element_size, the trace blocks of 512),
with every state and gradient tensor paired; no tensor left in "other"; the categories add up to the tensor peak, which
is max_memory_allocated(). Prints the numbers, then "ok" or what differs (last line).

--framework (samples/hf_trainer.py: transformers' Trainer through Accelerate): the optimizer state
may also hold tensors the size of no parameter if each is one 512-byte block (fused AdamW keeps a
step count per parameter on the GPU), and "other" up to 4 KiB (the framework's own scalars: the
loss divided for accumulation, the gradients' norm for clipping and logging).

--fine-tune (samples/train.py --freeze or --lora: part of the parameters frozen): the report's W_t
(w_trained_bytes, the parameters with a gradient after the backward pass) must be below W and be
PyTorch's trained parameters (grad_bytes), and the gradients and the state paired with parameters
PyTorch's sums, each within what the pairing by size cannot tell apart: the bytes by which paired
blocks differ (larger, smaller) plus 512 a tensor (PyTorch counts numel*element_size, the trace
blocks of 512). The state's textbook must be its copies times W_t.

--views (samples/train.py --model lstm: cuDNN keeps an LSTM's weights as views of one flat block):
the state tensors, one per view, are the size of no parameter; paired and unpaired together must
be PyTorch's state, the unpaired ones within the blocks' rounding of the parameter blocks left,
and the table's state line must say that they go together.

--resume (samples/train.py --resume: a checkpoint loaded back with map_location="cuda" and kept):
the checkpoint line must be the allocator's blocks under the loaded dict's tensors, to the byte,
and the state's line must point at it (the optimizer adopted the loaded state without a copy).

--sparse (samples/train.py --model recsys: an EmbeddingBag with sparse=True): its gradient is a
sparse tensor, the rows a batch touched (values and indices), the size of no parameter. The
gradients left unpaired after the backward pass must be PyTorch's values (sparse_grad_bytes), and
its indices at most (sparse_grad_index_bytes: they may be the batch's ids, reshaped), within 512
bytes a tensor, and the gradients' line must say what they are.

--optimizer NAME: the table's optimizer must be NAME (samples/train.py --optim nadam, ...), its
state's textbook k W_t for that optimizer's k.

--ddp (samples/ddp.py, a rank of DistributedDataParallel): beside the gradients paired with
parameters, the gradients after the backward pass hold DDP's buckets, one tensor per bucket the
size of no parameter: those must be the reducer's buckets as DDP's own logging gives them
(ddp_logging's rebuilt_bucket_sizes, or bucket_sizes before a rebuild), within 512 bytes a
tensor, and the gradients' line must say what they are.

--fsdp (samples/ddp.py --fsdp or --fsdp1, a rank of FSDP2 or FSDP1): W is this rank's shards (the
allocator's blocks of the parameters' local tensors), the gradients after the backward pass one
flat tensor per FSDP unit: together at least PyTorch's sharded gradients and at most W's blocks
(the shards are padded alike), and where they are not W the gradients' line says what they are;
the all-gathered weights are "unsharded parameters", not W.

--dp (samples/train.py --data-parallel: torch.nn.DataParallel over every GPU): the weights, their
gradients and the optimizer's state are on cuda:0; the gradients after the backward pass arrive
summed in flat buffers of up to 10 MiB whose views the smaller parameters' .grad are, so paired
and unpaired together must be PyTorch's gradients (within the pairing's slack and 512 bytes a
tensor) and the line must say so where some are unpaired. Every other GPU holds no parameter
(W 0 there), its "parameter replicas" above 0, and its categories add up to its own
max_memory_allocated().

--split (samples/train.py --model gpt2 --pretrained --split: the layers over every GPU): each GPU's
categories add up to its own max_memory_allocated(), and the checks above hold for their sums over
the GPUs (W, the gradients and the state of one model, wherever each layer is).

The stats' device is the report's first device with categories (a rank's trace: its own GPU).

--other N: up to N bytes in "other" (samples/gan.py: its two losses' sum, made in the training loop
outside any module, 512 bytes). Where PyTorch's optimizer holds no state (SGD without momentum),
the table's state line must be 0 with a textbook of 0."""
import json
import sys


def summed(cats):
    """Several GPUs' categories_at_peak as one: bytes, textbooks and fits added row by row (a
    model split over the GPUs: W, its gradients and state are the sums); "tensors_bytes" is then
    compared per GPU by the caller."""
    out = dict(cats[0])
    for key in ("w_bytes", "w_trained_bytes"):
        out[key] = sum(c.get(key) or 0 for c in cats)

    def add_fit(a, b):
        return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}

    rows = {}
    for c in cats:
        for r in c["rows"]:
            t = rows.setdefault(r["name"], dict(r, bytes=0, textbook_bytes=0, fit={}))
            t["bytes"] += r["bytes"]
            t["textbook_bytes"] = (t["textbook_bytes"] or 0) + (r.get("textbook_bytes") or 0)
            t["fit"] = add_fit(t["fit"], r.get("fit") or {})
    out["rows"] = list(rows.values())
    ab = [c.get("after_backward") or {} for c in cats]
    out["after_backward"] = dict(ab[0], gradients_fit={})
    for a in ab:
        out["after_backward"]["gradients_fit"] = add_fit(out["after_backward"]["gradients_fit"],
                                                         a.get("gradients_fit") or {})
    return out


def main():
    framework = "--framework" in sys.argv[3:]
    args = sys.argv[3:]
    other_ok = int(args[args.index("--other") + 1]) if "--other" in args else (4096 if framework else 0)
    fine_tune = "--fine-tune" in sys.argv[3:]
    views = "--views" in sys.argv[3:]
    resume = "--resume" in sys.argv[3:]
    sparse = "--sparse" in sys.argv[3:]
    ddp, fsdp, dp = "--ddp" in args, "--fsdp" in args, "--dp" in args
    optimizer = args[args.index("--optimizer") + 1] if "--optimizer" in args else None
    rep = json.load(open(sys.argv[1]))
    st = json.load(open(sys.argv[2]))
    split = "--split" in args
    dev = ([d for d in rep["devices"] if d.get("categories_at_peak")] or rep["devices"])[0]
    cat = dev.get("categories_at_peak")
    if not cat:
        print("no categories (record --tensors?)")
        return 1
    errs = []
    gpus = [d for d in rep["devices"] if d.get("categories_at_peak") and d.get("device", -1) >= 0]

    def adds_up(d):  # a GPU's categories against its own max_memory_allocated()
        want = st["devices"].get(str(d["device"]), {}).get("max_allocated")
        if d["categories_at_peak"]["tensors_bytes"] != want:
            errs.append(f"cuda:{d['device']}: categories add up to "
                        f"{d['categories_at_peak']['tensors_bytes']}, max_memory_allocated {want}")

    if split:  # one model over every GPU: each GPU's own sum, then the model's over them all
        for d in gpus:
            adds_up(d)
        cat = summed([d["categories_at_peak"] for d in gpus])
    rows = {r["name"]: r["bytes"] for r in cat["rows"]}

    def near(what, got, want, tol):
        if want and abs(got - want) / want > tol:
            errs.append(f"{what} {got} vs PyTorch {want} ({100.0 * (got - want) / want:+.2f}%)")

    fits = {r["name"]: r["fit"] for r in cat["rows"] if "fit" in r}
    ab = cat.get("after_backward") or {}
    state, grads = fits.get("optimizer state", {}), ab.get("gradients_fit", {})
    if "param_block_bytes" in st:  # the allocator's own blocks (samples/train.py): to the byte
        if rows.get("parameters", 0) != st["param_block_bytes"]:
            errs.append(f"parameters {rows.get('parameters', 0)} vs the allocator's blocks of the "
                        f"parameters and buffers {st['param_block_bytes']}")
    else:
        near("parameters", rows.get("parameters", 0), st["param_bytes"], 0.01)
    def within_slack(what, got, want, f):
        slack = f.get("larger_bytes", 0) + f.get("smaller_bytes", 0) + 512 * f.get("paired_count", 0)
        if abs(got - want) > slack:
            errs.append(f"{what} {got} vs PyTorch {want}: {got - want:+d} bytes, more than the "
                        f"pairing's slack {slack}")

    def row(name):
        return [r for r in cat["rows"] if r["name"] == name][0]

    if fsdp:  # flat gradients, one per group: their sum between PyTorch's and the padded shards'
        got = grads.get("paired_bytes", 0) + grads.get("unpaired_bytes", 0) + grads.get("larger_bytes", 0) - grads.get("smaller_bytes", 0)
        if not st["grad_bytes"] <= got <= st["param_block_bytes"]:
            errs.append(f"FSDP's gradients after backward {got}, not between PyTorch's {st['grad_bytes']} "
                        f"and the shards' blocks {st['param_block_bytes']}")
        if got != cat["w_bytes"] and "FSDP's sharded gradients" not in row("gradients")["why"]:
            errs.append("the gradients' line does not say FSDP's sharded gradients: " + row("gradients")["why"])
        if not rows.get("unsharded parameters"):
            errs.append("no unsharded parameters at the peak")
    elif dp:  # flat buffers for the small ones: paired and unpaired together
        got = grads.get("paired_bytes", 0) + grads.get("unpaired_bytes", 0)
        slack = grads.get("larger_bytes", 0) + grads.get("smaller_bytes", 0) + 512 * (
            grads.get("paired_count", 0) + grads.get("unpaired_count", 0))
        if abs(got - st["grad_bytes"]) > slack:
            errs.append(f"gradients after backward {got} (paired and not) vs PyTorch {st['grad_bytes']}, "
                        f"more than the slack {slack}")
        if grads.get("unpaired_count") and "DataParallel's gradients" not in row("gradients")["why"]:
            errs.append("the gradients' line does not say DataParallel's buffers: " + row("gradients")["why"])
        for other in gpus:
            if other is dev:
                continue
            orow = {r["name"]: r["bytes"] for r in other["categories_at_peak"]["rows"]}
            if orow.get("parameters") or not orow.get("parameter replicas"):
                errs.append(f"cuda:{other['device']}: parameters {orow.get('parameters')}, replicas "
                            f"{orow.get('parameter replicas')}")
            adds_up(other)
    else:  # the gradients after the backward pass, paired with parameters, are PyTorch's
        within_slack("gradients after backward (paired)", grads.get("paired_bytes", 0),
                     st["grad_bytes"], grads)
    if ddp:  # and DDP's buckets, unpaired: the reducer's own sizes
        log = st["ddp_logging"]
        sizes = log.get("rebuilt_bucket_sizes") or log.get("bucket_sizes")
        want = sum(int(x) for x in str(sizes).split(","))
        got, n = grads.get("unpaired_bytes", 0), grads.get("unpaired_count", 0)
        if abs(got - want) > 512 * n or not n:
            errs.append(f"unpaired gradients {got} in {n} tensors vs DDP's buckets {want} ({sizes})")
        if "DDP's gradient buckets" not in row("gradients")["why"]:
            errs.append("the gradients' line does not say DDP's buckets: " + row("gradients")["why"])
    srow = row("optimizer state")
    if fine_tune:
        wt, w = cat.get("w_trained_bytes", 0), cat["w_bytes"]
        if not wt < w:
            errs.append(f"W_t {wt} not below W {w}: the frozen parameters not seen")
        within_slack("W_t", wt, st["grad_bytes"], grads)
        within_slack("optimizer state (paired)", state.get("paired_bytes", 0),
                     st["optimizer_state_bytes"], state)
        if srow["textbook_bytes"] != cat["optimizer_state_in_w"] * wt:
            errs.append(f"the state's textbook {srow['textbook_bytes']} is not "
                        f"{cat['optimizer_state_in_w']} x W_t")
    elif resume:  # the optimizer's state is the loaded checkpoint's (load_state_dict: no copy)
        if rows.get("checkpoint", 0) != st["checkpoint_block_bytes"]:
            errs.append(f"checkpoint {rows.get('checkpoint', 0)} vs the allocator's blocks of the "
                        f"loaded dict {st['checkpoint_block_bytes']}")
        if "checkpoint loaded onto the GPU" not in srow["why"]:
            errs.append("the state's line does not point at the checkpoint: " + srow["why"])
    elif views:  # state tensors of views: paired or not, all of them against PyTorch's state
        within_slack("optimizer state (paired and not)",
                     state.get("paired_bytes", 0) + state.get("unpaired_bytes", 0),
                     st["optimizer_state_bytes"], state)
        apart = abs(state.get("unpaired_bytes", 0) - state.get("parameters_left_bytes", 0))
        if apart > 512 * state.get("unpaired_count", 0) + (2 << 20) * state.get("parameters_left_count", 0):
            errs.append(f"the state's unpaired tensors are {apart} bytes from the parameters left")
        if "views of one block" not in srow["why"]:
            errs.append("the state's line does not pair the views with their block: " + srow["why"])
    else:
        within_slack("optimizer state (paired)", state.get("paired_bytes", 0),
                     st["optimizer_state_bytes"], state)
    if sparse:  # the sparse gradient: unpaired by nature, PyTorch's values and indices
        got, n = grads.get("unpaired_bytes", 0), grads.get("unpaired_count", 0)
        lo = st["sparse_grad_bytes"]  # its values; its indices too, unless they are the batch's
        hi = lo + st["sparse_grad_index_bytes"] + 512 * n
        if not (n and lo <= got <= hi):
            errs.append(f"unpaired gradients {got} in {n} tensors vs the sparse gradient's values "
                        f"{lo} (and indices {st['sparse_grad_index_bytes']})")
        grow = row("gradients")
        if "sparse" not in grow["why"]:
            errs.append("the gradients' line does not say a sparse gradient: " + grow["why"])
    for what, f in (("optimizer state", state), ("gradients after backward", grads)):
        if (sparse or ddp or fsdp or dp) and what == "gradients after backward":
            continue
        small = f.get("unpaired_bytes") == 512 * f.get("unpaired_count", 0)
        if framework and what == "optimizer state" and small:
            continue
        # ASGD keeps eta and mu, scalars, on each parameter's device beside its average
        if optimizer == "ASGD" and small and what == "optimizer state":
            continue
        if (views or resume) and what == "optimizer state":
            continue
        if f.get("unpaired_count", 1):
            errs.append(f"{what}: {f.get('unpaired_count')} tensors paired with no parameter")
    grads_after = {c["name"]: c["bytes"] for c in ab.get("by_category", [])}.get("gradients", 0)
    print(f"parameters {rows.get('parameters', 0)} (PyTorch {st['param_bytes']}, blocks "
          f"{st.get('param_block_bytes', '-')}); optimizer state "
          f"{rows.get('optimizer state', 0)}, paired {state.get('paired_bytes')} (PyTorch "
          f"{st['optimizer_state_bytes']}), {state.get('larger_bytes')} in {state.get('larger_count')} "
          f"larger blocks; gradients after backward {grads_after}, "
          f"paired {grads.get('paired_bytes')} (PyTorch {st['grad_bytes']}), {grads.get('larger_bytes')} "
          f"in {grads.get('larger_count')} larger blocks; W {cat['w_bytes']}, W_t "
          f"{cat.get('w_trained_bytes')}")
    if optimizer:  # the optimizer named, and its textbook k W (or k W_t)
        k, wt = cat.get("optimizer_state_in_w", 0), cat.get("w_trained_bytes") or cat["w_bytes"]
        if cat.get("optimizer") != optimizer:
            errs.append(f"optimizer {cat.get('optimizer')!r}, not {optimizer!r}")
        elif srow["textbook_bytes"] != k * wt:
            errs.append(f"the state's textbook {srow['textbook_bytes']} is not {k} x {wt}")
    if st["optimizer_state_bytes"] == 0:  # plain SGD: no state, and none in the textbook
        if srow["bytes"] or srow["textbook_bytes"] != 0:
            errs.append(f"no optimizer state in PyTorch, the table's {srow['bytes']} with a "
                        f"textbook of {srow['textbook_bytes']}")
    if rows.get("other", 0) > other_ok:
        errs.append(f"{rows['other']} bytes in 'other'")
    if not split:
        adds_up(dev)
    print("; ".join(errs) if errs else "ok")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
