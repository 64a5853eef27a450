"""Memory of another process, mapped through legacy CUDA IPC (cudaIpcOpenMemHandle).

    python ipc.py [--lib torch|cupy]

The parent allocates 64 MiB and hands it to a spawned child: with torch, a CUDA tensor put on a
torch.multiprocessing queue (the child's PyTorch opens its IPC handle); with cupy, the handle of
cupy.cuda.runtime.ipcGetMemHandle, which the child opens twice (the same mapping) and closes twice.
The child reads the memory, allocates 8 MiB of its own and closes the mapping. NCCL does the same
between ranks when NCCL_CUMEM_ENABLE=0.

The 64 MiB are the parent's: nvidia-smi counts them there, and so must memtrace. The child's own
peak is what its allocator reserved. Each process prints its numbers last:
    parent: ipc_parent reserved_peak=<bytes> child_rc=<rc>
    child:  ipc_child pid=<pid> reserved_peak=<bytes> mapped=<bytes>
(reserved_peak: torch.cuda.max_memory_reserved(), or the CuPy pool's total_bytes())
"""
import argparse
import multiprocessing as mp
import os

MAPPED = 64 << 20
OWN = 8 << 20


def torch_child(q, done):
    import torch

    t = q.get()  # PyTorch opens the IPC handle here
    s = int(t[: 1 << 20].sum())
    own = torch.empty(OWN, dtype=torch.uint8, device="cuda")
    own.fill_(1)
    torch.cuda.synchronize()
    print(f"ipc_child pid={os.getpid()} reserved_peak={torch.cuda.max_memory_reserved()} "
          f"mapped={t.numel()} sum={s}", flush=True)
    del t  # the mapping is closed when its last reference goes
    done.set()


def cupy_child(handle, q):
    import cupy as cp

    ptr = cp.cuda.runtime.ipcOpenMemHandle(handle)
    # opened again by the same context: the same mapping, one more reference (closed twice)
    again = cp.cuda.runtime.ipcOpenMemHandle(handle)
    mem = cp.cuda.UnownedMemory(ptr, MAPPED, None)
    a = cp.ndarray((MAPPED,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
    s = int(a[: 1 << 20].sum())
    own = cp.ones(OWN, dtype=cp.uint8)
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.ipcCloseMemHandle(again)
    cp.cuda.runtime.ipcCloseMemHandle(ptr)
    pool = cp.get_default_memory_pool().total_bytes()
    print(f"ipc_child pid={os.getpid()} reserved_peak={pool} mapped={MAPPED} sum={s} "
          f"same_mapping={int(again == ptr)}", flush=True)
    del own
    q.put(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=["torch", "cupy"], default="torch")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")  # a fork()ed child may not use CUDA
    q = ctx.Queue()
    if args.lib == "torch":
        import torch

        done = ctx.Event()
        x = torch.ones(MAPPED, dtype=torch.uint8, device="cuda")
        p = ctx.Process(target=torch_child, args=(q, done))
        p.start()
        q.put(x)
        done.wait(120)
        reserved = torch.cuda.max_memory_reserved()
    else:
        import cupy as cp

        x = cp.ones(MAPPED, dtype=cp.uint8)
        p = ctx.Process(target=cupy_child, args=(cp.cuda.runtime.ipcGetMemHandle(x.data.ptr), q))
        p.start()
        q.get(timeout=120)
        reserved = cp.get_default_memory_pool().total_bytes()
    p.join(120)
    print(f"ipc_parent reserved_peak={reserved} child_rc={p.exitcode}", flush=True)


if __name__ == "__main__":
    main()
