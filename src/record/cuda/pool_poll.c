/* Memory pools' reserved bytes, read from the driver.
 *
 * Stream-ordered allocations (cuMemAllocAsync: PyTorch's cudaMallocAsync backend, JAX, CuPy) are
 * carved out of a pool that reserves device memory in its own rhythm; what the process really
 * holds is the pool's reservation, not the sum of live allocations. The driver keeps two numbers
 * per pool — CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT and _HIGH (the high-water mark, which is what
 * torch.cuda.max_memory_reserved() reports in that mode) — and we read them:
 *   - on the writer thread, every tick (off the hot path), for every pool that served an
 *     allocation: each device's current pool, and pools named by cuMemAllocFromPoolAsync;
 *   - on the allocating thread, after a stream-ordered allocation, at most once per millisecond
 *     (a try-lock: a thread never waits for another's poll), so the reservation at a peak is at
 *     most ~1 ms old;
 *   - right after a failed request, so OOM forensics see the reservation of that moment;
 *   - never while a CUDA graph is being captured (capture.c).
 * Graph memory nodes (allocations captured into a CUDA graph under backend:cudaMallocAsync) get
 * their pages from the device's graph memory pool when the graph runs: its reservation
 * (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT/_HIGH) is written the same way, under a handle of its
 * own per device (GRAPH_POOL).
 * A change is written as MT_OP_POOL_RESERVED (address = pool handle, bytes = current,
 * aux = high-water). This does not depend on CUPTI activity records, which another profiler may
 * take away.
 * A pool may be located on the host (CUDA 12.2+: a host NUMA node; 13.0: the host, and default
 * and current pools per location): its allocations and its reservation are host memory, written
 * with device -1 and MT_EF_HOST_MEMORY. The driver cannot be asked where a pool is, so the pools
 * the program makes or names on the host are remembered (host_pools).
 */
#include <cuda.h>

#include "recorder.h"

#define POLL_EVERY_NS 1000000ull /* allocating threads poll at most once a millisecond */

void mt_pool_note_use(mt_recorder *r, int32_t device, uint64_t pool)
{
    /* Read first: the bit is set once, and a locked RMW on every allocation would pull this line
     * back and forth between the allocating threads. */
    if (device >= 0 && device < 64 &&
        !(atomic_load_explicit(&r->async_devices, memory_order_relaxed) & (1ull << device)))
        atomic_fetch_or_explicit(&r->async_devices, 1ull << device, memory_order_relaxed);
    if (!pool) return;
    for (int i = 0; i < MT_MAX_POOLS; i++) {
        uint64_t p = atomic_load_explicit(&r->named_pools[i].pool, memory_order_relaxed);
        if (p == pool) return;
        if (p == 0) {
            uint64_t expect = 0;
            if (atomic_compare_exchange_strong(&r->named_pools[i].pool, &expect, pool)) {
                r->named_pools[i].device = device;
                return;
            }
            if (expect == pool) return;
        }
    }
}

void mt_pool_note_host(mt_recorder *r, uint64_t pool)
{
    pthread_mutex_lock(&r->pool_lock);
    int i = 0, n = atomic_load_explicit(&r->n_host_pools, memory_order_relaxed);
    while (i < n && atomic_load_explicit(&r->host_pools[i], memory_order_relaxed) != pool &&
           atomic_load_explicit(&r->host_pools[i], memory_order_relaxed) != MT_POOL_DEAD)
        i++;
    if (i < MT_MAX_POOLS) {
        atomic_store_explicit(&r->host_pools[i], pool, memory_order_relaxed);
        if (i == n) atomic_store_explicit(&r->n_host_pools, n + 1, memory_order_release);
    } else {
        mt_warn_once("host pools",
                     "more than %d memory pools on the host: allocations from the "
                     "others are counted on the device they were made from",
                     MT_MAX_POOLS);
    }
    pthread_mutex_unlock(&r->pool_lock);
}

int mt_pool_is_host(mt_recorder *r, uint64_t pool)
{
    int n = atomic_load_explicit(&r->n_host_pools, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&r->host_pools[i], memory_order_relaxed) == pool) return 1;
    return 0;
}

/* Writes an event when a pool's reservation changed since the last one written. */
static void record_pool(mt_recorder *r, uint64_t key, uint64_t cur, uint64_t high, int32_t device)
{
    int i = 0;
    while (i < r->npools && r->pools[i].pool != key) i++;
    if (i < r->npools && r->pools[i].size == cur && r->pools[i].high == high) return;
    if (i == r->npools) {
        if (r->npools == MT_MAX_POOLS) return;
        r->npools++;
        r->pools[i].pool = key;
    }
    r->pools[i].size = cur;
    r->pools[i].high = high;
    r->pools[i].device = device;
    mt_event ev = {.time_ns = mt_now_ns(), .op = MT_OP_POOL_RESERVED, .kind = MT_KIND_POOL,
                   .address = key, .bytes = cur, .aux = high, .device = device};
    if (mt_pool_is_host(r, key)) ev.device = -1, ev.flags = MT_EF_HOST_MEMORY;
    mt_sink_event(r->sink, &ev);
}

/* Reads one pool. */
static void poll_pool(mt_recorder *r, CUmemoryPool pool, int32_t device)
{
    cuuint64_t cur = 0, high = 0;
    if (r->cuda.MemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &cur) != CUDA_SUCCESS ||
        r->cuda.MemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high) != CUDA_SUCCESS)
        return;
    record_pool(r, (uint64_t)(uintptr_t)pool, cur, high, device);
}

static void poll_locked(mt_recorder *r);

/* No CUDA call while a graph is being captured anywhere: it could invalidate the capture
 * (capture.c). The next poll after it ends reads the same counters. */
static int capturing(mt_recorder *r)
{
    if (!mt_capture_any(r)) return 0;
    atomic_fetch_add_explicit(&r->capture.skipped_polls, 1, memory_order_relaxed);
    return 1;
}

void mt_pool_poll(mt_recorder *r)
{
    if (capturing(r)) return;
    pthread_mutex_lock(&r->pool_lock);
    poll_locked(r);
    pthread_mutex_unlock(&r->pool_lock);
}

void mt_pool_poll_rare(mt_recorder *r)
{
    uint64_t rare = mt_rare_begin(); /* on the program's thread: rare work (rare_work.h) */
    mt_pool_poll(r);
    mt_rare_end(rare, MT_RARE_POOL);
}

void mt_pool_poll_if_due(mt_recorder *r, uint64_t now)
{
    if (now - atomic_load_explicit(&r->pool_polled_ns, memory_order_relaxed) < POLL_EVERY_NS) return;
    if (capturing(r) || pthread_mutex_trylock(&r->pool_lock) != 0) return;
    uint64_t rare = mt_rare_begin(); /* driver calls once a millisecond: rare work (rare_work.h) */
    poll_locked(r);
    mt_rare_end(rare, MT_RARE_POOL);
    pthread_mutex_unlock(&r->pool_lock);
}

/* A graph memory pool's handle in POOL_RESERVED events: none exists, so one per device. */
#define GRAPH_POOL(d) (0x8000000000000000ull | (uint64_t)(d))

/* The device's graph memory pool (graph memory nodes: allocations made while capturing a CUDA
 * graph under backend:cudaMallocAsync get their pages from it when the graph runs). */
static void poll_graph_pool(mt_recorder *r, int device)
{
    cuuint64_t cur = 0, high = 0;
    if (!r->cuda.DeviceGetGraphMemAttribute ||
        r->cuda.DeviceGetGraphMemAttribute(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &cur) !=
            CUDA_SUCCESS ||
        r->cuda.DeviceGetGraphMemAttribute(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &high) !=
            CUDA_SUCCESS)
        return;
    record_pool(r, GRAPH_POOL(device), cur, high, device);
}

static void poll_locked(mt_recorder *r)
{
    atomic_store_explicit(&r->pool_polled_ns, mt_now_ns(), memory_order_relaxed);
    uint64_t devs = atomic_load_explicit(&r->async_devices, memory_order_relaxed);
    for (int d = 0; devs; d++, devs >>= 1) {
        CUmemoryPool pool;
        if ((devs & 1) && r->cuda.DeviceGetMemPool(&pool, d) == CUDA_SUCCESS) poll_pool(r, pool, d);
    }
    uint64_t graphs = atomic_load_explicit(&r->graph_devices, memory_order_relaxed);
    for (int d = 0; graphs; d++, graphs >>= 1)
        if (graphs & 1) poll_graph_pool(r, d);
    for (int i = 0; i < MT_MAX_POOLS; i++) {
        uint64_t p = atomic_load_explicit(&r->named_pools[i].pool, memory_order_relaxed);
        if (!p) break;
        if (p == MT_POOL_DEAD) continue;
        poll_pool(r, (CUmemoryPool)(uintptr_t)p, r->named_pools[i].device);
    }
}

void mt_pool_forget(mt_recorder *r, uint64_t pool)
{
    /* cuMemPoolDestroy: the pool's reservation is gone; never read a dead handle again. */
    pthread_mutex_lock(&r->pool_lock);
    for (int i = 0; i < MT_MAX_POOLS; i++)
        if (atomic_load(&r->named_pools[i].pool) == pool)
            atomic_store(&r->named_pools[i].pool, MT_POOL_DEAD);
    for (int i = 0; i < r->npools; i++)
        if (r->pools[i].pool == pool && r->pools[i].size) {
            r->pools[i].size = 0;
            mt_event ev = {.time_ns = mt_now_ns(), .op = MT_OP_POOL_RESERVED,
                           .kind = MT_KIND_POOL, .address = pool, .bytes = 0,
                           .aux = r->pools[i].high, .device = r->pools[i].device};
            if (mt_pool_is_host(r, pool)) ev.device = -1, ev.flags = MT_EF_HOST_MEMORY;
            mt_sink_event(r->sink, &ev);
        }
    for (int i = 0; i < atomic_load(&r->n_host_pools); i++)
        if (atomic_load(&r->host_pools[i]) == pool) atomic_store(&r->host_pools[i], MT_POOL_DEAD);
    pthread_mutex_unlock(&r->pool_lock);
}
