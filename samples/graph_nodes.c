/* graph_nodes: the CUDA graph features a memory tracer must neither break nor miscount, without
 * PyTorch: graph memory nodes made every way CUDA offers, and conditional nodes (if/else, switch,
 * while) whose bodies are filled by stream capture. scripts/gpu-check.sh runs it untraced and under
 * `memtrace record` in several modes and asserts that exit status and output are the same, that each
 * graph memory node is recorded once as captured (launches allocate nothing new), and that the
 * graph memory pool's reservation in the trace equals the driver's own high-water mark, which this
 * program writes to $SAMPLE_STATS.
 *
 *   step                    how the graph gets its memory                        bytes
 *   explicit_memory_nodes   cudaGraphAddMemAllocNode / cudaGraphAddMemFreeNode   64 MiB
 *                           cuGraphAddNode (CU_GRAPH_NODE_TYPE_MEM_ALLOC / FREE)  32 MiB
 *   captured_async          cudaMallocAsync / cudaFreeAsync under stream capture  16 MiB
 *   conditional_nodes       an if/else, a switch and a while node, bodies captured with
 *                           cuStreamBeginCaptureToGraph or built from memset nodes; around them
 *                           an allocation node and a free node in the parent graph   8 MiB
 * Each graph is launched several times: a tracer that recorded launches as allocations would
 * count the same memory again. stdout is the same in every run (values read back from the GPU).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024ull * 1024ull)

static int failures;

#define RT(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "graph_nodes: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,     \
                    cudaGetErrorName(e_));                                                        \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)

#define DRV(call)                                                                                 \
    do {                                                                                          \
        CUresult r_ = (call);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                                 \
            const char *s_ = "?";                                                                 \
            cuGetErrorName(r_, &s_);                                                              \
            fprintf(stderr, "graph_nodes: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, s_); \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)

/* Device memory of the device's default location, as a graph allocation node describes it. */
static void device_pool_props(CUmemPoolProps *p)
{
    memset(p, 0, sizeof *p);
    p->allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->location.id = 0;
}

static cudaGraphNode_t add_memset(cudaGraph_t g, const cudaGraphNode_t *dep, size_t ndep, void *dst,
                                  unsigned value, size_t words)
{
    struct cudaMemsetParams m = {.dst = dst, .value = value, .elementSize = 4, .width = words, .height = 1};
    cudaGraphNode_t n = NULL;
    RT(cudaGraphAddMemsetNode(&n, g, dep, ndep, &m));
    return n;
}

static cudaGraphNode_t add_copy_word(cudaGraph_t g, const cudaGraphNode_t *dep, size_t ndep,
                                     void *dst, const void *src)
{
    cudaGraphNode_t n = NULL;
    RT(cudaGraphAddMemcpyNode1D(&n, g, dep, ndep, dst, src, 4, cudaMemcpyDeviceToDevice));
    return n;
}

static void launch(cudaGraph_t g, cudaStream_t s, int times)
{
    cudaGraphExec_t x = NULL;
    RT(cudaGraphInstantiate(&x, g, 0));
    for (int i = 0; i < times; i++) RT(cudaGraphLaunch(x, s));
    RT(cudaStreamSynchronize(s));
    RT(cudaGraphExecDestroy(x));
}

/* 64 MiB through the runtime's memory node calls, 32 MiB through the generic cuGraphAddNode:
 * alloc A -> memset A -> alloc B -> memset B -> copy B[0] -> free B -> copy A[0] -> free A. */
static __attribute__((noinline)) void explicit_memory_nodes(cudaStream_t s, unsigned *result)
{
    cudaGraph_t g = NULL;
    RT(cudaGraphCreate(&g, 0));
    struct cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = 64 * MiB;
    cudaGraphNode_t a = NULL;
    RT(cudaGraphAddMemAllocNode(&a, g, NULL, 0, &ap));
    cudaGraphNode_t n = add_memset(g, &a, 1, ap.dptr, 0x64, 64 * MiB / 4);

    CUgraphNodeParams bp;
    memset(&bp, 0, sizeof bp);
    bp.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    device_pool_props(&bp.alloc.poolProps);
    bp.alloc.bytesize = 32 * MiB;
    CUgraphNode b = NULL;
    DRV(cuGraphAddNode(&b, (CUgraph)g, (CUgraphNode *)&n, NULL, 1, &bp));
    void *bptr = (void *)(uintptr_t)bp.alloc.dptr;
    n = add_memset(g, (cudaGraphNode_t *)&b, 1, bptr, 0x32, 32 * MiB / 4);
    n = add_copy_word(g, &n, 1, result + 0, bptr);

    CUgraphNodeParams fp;
    memset(&fp, 0, sizeof fp);
    fp.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    fp.free.dptr = bp.alloc.dptr;
    CUgraphNode fb = NULL;
    DRV(cuGraphAddNode(&fb, (CUgraph)g, (CUgraphNode *)&n, NULL, 1, &fp));
    n = add_copy_word(g, (cudaGraphNode_t *)&fb, 1, result + 1, ap.dptr);
    cudaGraphNode_t fa = NULL;
    RT(cudaGraphAddMemFreeNode(&fa, g, &n, 1, ap.dptr));
    launch(g, s, 5);
    RT(cudaGraphDestroy(g));
}

/* 16 MiB allocated and freed inside a stream capture: the captured cudaMallocAsync becomes a graph
 * memory node; the graph replays three times. */
static __attribute__((noinline)) void captured_async(cudaStream_t s, unsigned *result)
{
    cudaGraph_t g = NULL;
    void *p = NULL;
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    RT(cudaMallocAsync(&p, 16 * MiB, s));
    RT(cudaMemsetAsync(p, 0x16, 16 * MiB, s));
    RT(cudaMemcpyAsync(result + 2, p, 4, cudaMemcpyDeviceToDevice, s));
    RT(cudaFreeAsync(p, s));
    RT(cudaStreamEndCapture(s, &g));
    launch(g, s, 3);
    RT(cudaGraphDestroy(g));
}

/* Adds a conditional node of `type` with `nbodies` bodies after `dep`; returns the bodies. */
static CUgraph *add_conditional(CUgraph g, CUgraphNode *node, CUgraphNode dep, CUcontext ctx,
                                CUgraphConditionalNodeType type, unsigned nbodies, unsigned value)
{
    CUgraphConditionalHandle h = 0;
    DRV(cuGraphConditionalHandleCreate(&h, g, ctx, value, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNodeParams cp;
    memset(&cp, 0, sizeof cp);
    cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    cp.conditional.handle = h;
    cp.conditional.type = type;
    cp.conditional.size = nbodies;
    cp.conditional.ctx = ctx;
    DRV(cuGraphAddNode(node, g, dep ? &dep : NULL, NULL, dep ? 1 : 0, &cp));
    return cp.conditional.phGraph_out;
}

/* Fills a body graph by capturing a memset into it (cuStreamBeginCaptureToGraph). */
static void capture_memset_into(CUgraph body, CUstream s, unsigned *dst, unsigned value)
{
    DRV(cuStreamBeginCaptureToGraph(s, body, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    DRV(cuMemsetD32Async((CUdeviceptr)(uintptr_t)dst, value, 1, s));
    CUgraph got = NULL;
    DRV(cuStreamEndCapture(s, &got));
}

/* Parent graph: alloc 8 MiB -> memset -> if/else -> switch -> while -> copy -> free.
 * if (default 1) writes 7, its else 9; switch (default 2) writes 10, 11, 12 in its bodies 0..2;
 * while (default 0) never runs its body (it would write 13). */
static __attribute__((noinline)) void conditional_nodes(cudaStream_t s, unsigned *result)
{
    CUcontext ctx = NULL;
    DRV(cuCtxGetCurrent(&ctx));
    CUgraph g = NULL;
    DRV(cuGraphCreate(&g, 0));
    CUgraphNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    device_pool_props(&ap.alloc.poolProps);
    ap.alloc.bytesize = 8 * MiB;
    CUgraphNode a = NULL, n = NULL;
    DRV(cuGraphAddNode(&a, g, NULL, NULL, 0, &ap));
    void *scratch = (void *)(uintptr_t)ap.alloc.dptr;
    n = (CUgraphNode)add_memset((cudaGraph_t)g, (cudaGraphNode_t *)&a, 1, scratch, 0x08, 8 * MiB / 4);

    CUgraph *ifb = add_conditional(g, &n, n, ctx, CU_GRAPH_COND_TYPE_IF, 2, 1);
    if (ifb) {
        capture_memset_into(ifb[0], (CUstream)s, result + 3, 7);
        add_memset((cudaGraph_t)ifb[1], NULL, 0, result + 3, 9, 1);
    }
    CUgraph *sw = add_conditional(g, &n, n, ctx, CU_GRAPH_COND_TYPE_SWITCH, 3, 2);
    for (unsigned i = 0; sw && i < 3; i++) capture_memset_into(sw[i], (CUstream)s, result + 4, 10 + i);
    CUgraph *wh = add_conditional(g, &n, n, ctx, CU_GRAPH_COND_TYPE_WHILE, 1, 0);
    if (wh) add_memset((cudaGraph_t)wh[0], NULL, 0, result + 5, 13, 1);

    n = (CUgraphNode)add_copy_word((cudaGraph_t)g, (cudaGraphNode_t *)&n, 1, result + 6, scratch);
    CUgraphNodeParams fp;
    memset(&fp, 0, sizeof fp);
    fp.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    fp.free.dptr = ap.alloc.dptr;
    CUgraphNode f = NULL;
    DRV(cuGraphAddNode(&f, g, &n, NULL, 1, &fp));
    launch((cudaGraph_t)g, s, 4);
    DRV(cuGraphDestroy(g));
}

static void write_stats(const char *path)
{
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    unsigned long long reserved_high = 0, used_high = 0, reserved_now = 0;
    RT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &reserved_high));
    RT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &used_high));
    RT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved_now));
    fprintf(f,
            "{\"graph_reserved_high\": %llu, \"graph_used_high\": %llu, "
            "\"graph_reserved_end\": %llu}\n",
            reserved_high, used_high, reserved_now);
    fclose(f);
}

int main(void)
{
    RT(cudaSetDevice(0));
    RT(cudaFree(0)); /* the primary context, current for the driver calls too */
    cudaStream_t s = NULL;
    RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned *result = NULL;
    RT(cudaMalloc((void **)&result, 8 * sizeof *result));
    RT(cudaMemset(result, 0, 8 * sizeof *result));
    if (failures) return 1;

    explicit_memory_nodes(s, result);
    captured_async(s, result);
    conditional_nodes(s, result);

    unsigned host[8] = {0};
    RT(cudaMemcpy(host, result, sizeof host, cudaMemcpyDeviceToHost));
    printf("memory nodes: A[0]=%#x B[0]=%#x captured[0]=%#x\n", host[1], host[0], host[2]);
    printf("conditionals: if=%u switch=%u while_body_ran=%s scratch[0]=%#x\n", host[3], host[4],
           host[5] ? "yes" : "no", host[6]);
    write_stats(getenv("SAMPLE_STATS"));
    RT(cudaFree(result));
    RT(cudaStreamDestroy(s));
    if (failures) fprintf(stderr, "graph_nodes: %d calls failed\n", failures);
    return failures ? 1 : 0;
}
