"""CUDA arrays (the memory behind textures and surfaces), made with CuPy.

    python cuda_arrays.py

Three 64 MiB float arrays (4096 x 4096) made and dropped, a 16 MiB one (2048 x 2048) kept until
main returns, 8 MiB of ordinary device memory from CuPy's pool, and one 3D array too large for any GPU
(16384 x 16384 x 2048 floats, 2 TiB), which the driver refuses. CUDA arrays are the program's
memory; CUPTI reports them only in activity records, where memtrace once took them for the
driver's. Prints "cuda_arrays ok refused=<1 or 0>" last.
"""
import cupy as cp
from cupy.cuda import runtime
from cupy.cuda.texture import ChannelFormatDescriptor, CUDAarray


def make(w, h, d=0):
    ch = ChannelFormatDescriptor(32, 0, 0, 0, runtime.cudaChannelFormatKindFloat)
    return CUDAarray(ch, w, h, d)


def main():
    dropped = [make(4096, 4096) for _ in range(3)]
    kept = make(2048, 2048)
    del dropped
    x = cp.zeros(8 << 20, dtype=cp.uint8)
    refused = 0
    try:
        make(16384, 16384, 2048)
    except cp.cuda.runtime.CUDARuntimeError:
        refused = 1
    runtime.deviceSynchronize()
    print(f"cuda_arrays ok refused={refused} kept={kept.width}x{kept.height} x={x.nbytes}", flush=True)


if __name__ == "__main__":
    main()
