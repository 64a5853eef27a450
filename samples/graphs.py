"""CUDA graphs under memtrace: capture and replay with torch.cuda.graph, and optionally
torch.compile(mode="reduce-overhead") (CUDA graph trees).

    python graphs.py [--compile] [--replays N]

A small MLP is warmed up on a side stream (as PyTorch's docs prescribe), its forward is captured
into a graph (allocations during capture come from the graph's private pool, or become graph
memory nodes under backend:cudaMallocAsync) and replayed N times with new inputs copied into the
static input. Replays allocate nothing: a tracer must not count them again. stdout is the same in
every run; PyTorch's own numbers go to $SAMPLE_STATS (mt_stats.py).
"""
import argparse

import torch

import mt_stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--replays", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(dev)
    static_x = torch.randn(256, 1024, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_y = model(static_x)
    inputs = [torch.randn(256, 1024, device=dev) for _ in range(4)]
    total = 0.0
    for i in range(args.replays):
        static_x.copy_(inputs[i % len(inputs)])
        g.replay()
        total += float(static_y.sum())
    torch.cuda.synchronize()
    print(f"graph replays={args.replays} output_shape={tuple(static_y.shape)}")
    if args.compile:
        compiled = torch.compile(model, mode="reduce-overhead")
        with torch.no_grad():
            for i in range(6):
                out = compiled(inputs[i % len(inputs)])
        torch.cuda.synchronize()
        print(f"compiled reduce-overhead runs=6 output_shape={tuple(out.shape)}")
    del g
    mt_stats.write(checksum=total)
    print("graphs ok")


if __name__ == "__main__":
    main()
