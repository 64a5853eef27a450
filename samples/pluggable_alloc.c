/* pluggable_alloc — an allocator for torch.cuda.memory.CUDAPluggableAllocator
 * (samples/mem_pool.py): cudaMalloc and cudaFree from the CUDA runtime the process already has
 * (PyTorch's), found with dlopen, so that the library links nothing of CUDA's. vLLM's sleep mode
 * and NCCL's registered memory plug allocators into PyTorch the same way. */
#include <dlfcn.h>
#include <stddef.h>
#include <sys/types.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
static malloc_fn cuda_malloc;
static free_fn cuda_free;

static void find_runtime(void)
{
    void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return;
    cuda_malloc = (malloc_fn)dlsym(h, "cudaMalloc");
    cuda_free = (free_fn)dlsym(h, "cudaFree");
}

void *sample_malloc(ssize_t size, int device, void *stream)
{
    (void)device, (void)stream;
    if (!cuda_malloc) find_runtime();
    void *p = NULL;
    return cuda_malloc && cuda_malloc(&p, (size_t)size) == 0 ? p : NULL;
}

void sample_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size, (void)device, (void)stream;
    if (!cuda_free) find_runtime();
    if (cuda_free) cuda_free(ptr);
}
