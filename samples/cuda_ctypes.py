"""cuda_ctypes.py — GPU memory from Python with no framework: the CUDA driver API through ctypes.

Runs under any CPython 3 with ctypes, so it checks memtrace's Python frames on interpreters that
have no PyTorch (scripts/gpu-check.sh, section "pythons": Debian's 3.14 and 3.15). What is live at
the peak, and from where (the lines marked "# at:" name the frames scripts/python_frames_check.py
expects):
    4 layers           1 + 2 + 3 + 4 MiB   <module> -> main -> build -> Layer.__init__ -> alloc
    3 buffers          3 x 1 MiB           <module> -> main -> buffers (a generator) -> alloc
    a thread's         5 MiB               threading's frames -> worker -> alloc
    scratch            4 x 8 MiB           <module> -> main -> scratch -> alloc
so the peak is 50 MiB of cuMemAlloc, and everything is freed before the end.
"""
import ctypes
import threading

cuda = ctypes.CDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        raise SystemExit("%s failed: CUresult %d" % (what, rc))


def init():
    check(cuda.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def alloc(nbytes):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)), "cuMemAlloc")  # at: alloc
    return ptr.value


def free(ptr):
    check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")


class Layer:
    def __init__(self, i):
        self.weights = alloc((i + 1) << 20)  # at: init


def build(n):
    layers = []
    for i in range(n):
        layers.append(Layer(i))  # at: build
    return layers


def buffers(n):
    for _ in range(n):
        yield alloc(1 << 20)  # at: buffers


def worker(ctx, out):
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")  # a thread starts with no context
    out.append(alloc(5 << 20))  # at: worker


def scratch():
    tmp = []
    for _ in range(4):
        tmp.append(alloc(8 << 20))  # at: scratch
    for p in tmp:
        free(p)


def main():
    ctx = init()
    layers = build(4)  # at: main-build
    held = list(buffers(3))  # at: main-buffers
    thread = threading.Thread(target=worker, args=(ctx, held))
    thread.start()
    thread.join()
    scratch()  # at: main-scratch
    if len(held) != 4:
        raise SystemExit("cuda_ctypes: the thread's allocation failed")
    for p in held:
        free(p)
    for layer in layers:
        free(layer.weights)
    print("cuda_ctypes: done")


main()  # at: module
