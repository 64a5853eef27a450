"""Inference, as a serving process does it: a GPT-2-like model (transformers config, no download,
random weights) generates text with its KV cache, under torch.inference_mode().

    python generate.py [--layers L] [--width W] [--batch B] [--prompt P] [--new N] [--beams K]
                       [--dtype float16|bfloat16|float32] [--side-stream]

Three rounds: greedy decoding of B prompts of P random tokens for N new tokens; the same with K
beams (the cache is reordered at every step); then the weights are dropped and the cache emptied
(torch.cuda.empty_cache), so the segments go back to the driver. --side-stream copies each
round's output to a tensor made on a second stream and hands it back with record_stream, the way
a pipelined server overlaps its copies (the block is freed only once that stream is done with
it).

stdout is the same in every run (token ids of a seeded model). What the GPU checks compare with a
trace goes to $SAMPLE_STATS (mt_stats.py): PyTorch's per-device peaks, the shape of the KV cache
(layers, heads, head size, element size, sequences per round, tokens at the end) and its full size
(2 x layers x batch x beams x heads x head size x tokens x element size).
"""
import argparse

import torch

import mt_stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=96)
    ap.add_argument("--beams", type=int, default=4)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    ap.add_argument("--side-stream", action="store_true")
    args = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()  # generation's advice goes to stderr, not our business

    torch.manual_seed(0)
    dev = torch.device("cuda")
    dtype = getattr(torch, args.dtype)
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.width // 64,
                     n_positions=args.prompt + args.new, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(device=dev, dtype=dtype).eval()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device=dev)
    side = torch.cuda.Stream() if args.side_stream else None
    kept = []
    with torch.inference_mode():
        for name, beams in (("greedy", 1), ("beams", args.beams)):
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                                 min_new_tokens=args.new, do_sample=False, num_beams=beams,
                                 pad_token_id=0, use_cache=True)
            if side is not None:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    copy = out.to(torch.float32) * 1.0
                out.record_stream(side)
                kept.append(copy)
            torch.cuda.synchronize()
            print(name, out.shape[1], out[0, -8:].tolist())
    torch.cuda.synchronize()
    head = args.width // cfg.n_head
    elem = torch.tensor([], dtype=dtype).element_size()
    total = args.prompt + args.new
    kv = {b: 2 * args.layers * args.batch * b * cfg.n_head * head * total * elem
          for b in (1, args.beams)}
    del model, out, ids
    kept.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    print("done")
    mt_stats.write(param_bytes=param_bytes, kv_cache_greedy_bytes=kv[1],
                   kv_cache_beams_bytes=kv[args.beams], layers=args.layers, heads=cfg.n_head,
                   head_dim=head, elem_bytes=elem, batch=args.batch, beams=args.beams,
                   tokens=total)


if __name__ == "__main__":
    main()
