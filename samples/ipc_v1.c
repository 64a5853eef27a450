/* ipc_v1.c — another process's memory opened through the first version of cuIpcOpenMemHandle,
 * for scripts/gpu-check.sh.
 *
 * cuda.h maps cuIpcOpenMemHandle to cuIpcOpenMemHandle_v2 (what PyTorch and CuPy call, which
 * samples/ipc.py checks); libcuda still exports the first version for programs built before it.
 * The parent allocates 64 MiB (cuMemAlloc), starts itself again with the IPC handle in hex; the
 * child opens it with the first version, writes it, closes it and exits; the parent frees it.
 * Prints "ipc_v1 parent ok child_rc=N" last; the child prints "ipc_v1 child ok".
 *
 *   cc -I/usr/local/cuda/include ipc_v1.c -lcuda -o ipc_v1
 */
#include <cuda.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#undef cuIpcOpenMemHandle
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags);

extern char **environ;

#define BYTES (64ull << 20)

static void check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return;
    const char *name = "?";
    cuGetErrorName(r, &name);
    fprintf(stderr, "ipc_v1: %s: %s\n", what, name);
    exit(1);
}

static CUdevice init(void)
{
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    return dev;
}

static __attribute__((noinline)) int child(const char *hex)
{
    CUipcMemHandle h;
    if (strlen(hex) != 2 * sizeof h.reserved) return 2;
    for (size_t i = 0; i < sizeof h.reserved; i++) {
        unsigned b;
        if (sscanf(hex + 2 * i, "%2x", &b) != 1) return 2;
        h.reserved[i] = (char)b;
    }
    CUdevice dev = init();
    CUdeviceptr p;
    check(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
    check(cuMemsetD8(p, 0x5a, BYTES), "cuMemsetD8");
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    check(cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    printf("ipc_v1 child ok\n");
    return 0;
}

static __attribute__((noinline)) int parent(const char *self)
{
    CUdevice dev = init();
    CUdeviceptr p;
    CUipcMemHandle h;
    check(cuMemAlloc(&p, BYTES), "cuMemAlloc");
    check(cuIpcGetMemHandle(&h, p), "cuIpcGetMemHandle");
    char hex[2 * sizeof h.reserved + 1];
    for (size_t i = 0; i < sizeof h.reserved; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
    fflush(stdout);
    pid_t pid;
    char *argv[] = {(char *)self, "--child", hex, NULL};
    int status = 0, rc = -1;
    if (posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0 && waitpid(pid, &status, 0) == pid)
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    check(cuMemFree(p), "cuMemFree");
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    printf("ipc_v1 parent ok child_rc=%d\n", rc);
    return rc != 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    return parent(self);
}
