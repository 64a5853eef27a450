"""A memory pool with an allocator of the program's own: torch.cuda.MemPool over a
torch.cuda.memory.CUDAPluggableAllocator (samples/pluggable_alloc.c, plain cudaMalloc/cudaFree).

    python mem_pool.py PATH/TO/libpluggable_alloc.so

32 MiB from the default pool, then, inside torch.cuda.use_mem_pool, four tensors (16-19 MiB) kept
and a 100 MiB one dropped, then 8 MiB from the default pool again; the pool's segments are given
back when its tensors go. PyTorch's caching allocator asks the plugged allocator for the pool's
segments, so they are its segments as much as the default pool's: memtrace must count them once
(segments peak = max_memory_reserved, tensors peak = max_memory_allocated). stdout is the same in
every run; PyTorch's numbers go to $SAMPLE_STATS (mt_stats.py).
"""
import sys

import torch

import mt_stats


def main():
    alloc = torch.cuda.memory.CUDAPluggableAllocator(sys.argv[1], "sample_malloc", "sample_free")
    pool = torch.cuda.MemPool(alloc.allocator())
    a = torch.ones(32 << 20, dtype=torch.uint8, device="cuda")
    keep = []
    with torch.cuda.use_mem_pool(pool):
        for i in range(4):
            keep.append(torch.ones((16 + i) << 20, dtype=torch.uint8, device="cuda"))
        t = torch.ones(100 << 20, dtype=torch.uint8, device="cuda")
        del t
    b = torch.ones(8 << 20, dtype=torch.uint8, device="cuda")
    total = int(a.sum()) + sum(int(k.sum()) for k in keep) + int(b.sum())
    torch.cuda.synchronize()
    mt_stats.write(pool_segments=len(pool.snapshot()))
    del keep
    print(f"mem_pool ok {total}")


if __name__ == "__main__":
    main()
