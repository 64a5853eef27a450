/* CUDA graph capture: which threads are capturing, so that the recorder
 *   - marks what they allocate meanwhile as captured (MT_EF_CAPTURED): an allocation made during
 *     capture belongs to the graph (PyTorch's graph-private pool, or a graph memory node) and is
 *     not made again when the graph replays;
 *   - makes no CUDA call of its own while any capture is in progress. Under the default capture
 *     mode (cudaStreamCaptureModeGlobal) a "potentially unsafe" call from any thread invalidates
 *     the capture, and the program then dies with cudaErrorStreamCaptureInvalidated: that is what
 *     memtrace's pool polls (cuDeviceGetMemPool, cuMemPoolGetAttribute) once did to
 *     torch.cuda.graph under record --tensors. The polls wait for the captures to end.
 * Captures are seen through CUPTI's callbacks for cuStreamBeginCapture* and cuStreamEndCapture*
 * (every runtime capture call ends in one of them). A capture begun on one thread and ended on
 * another is found by its stream. Lock-free: a fixed table of MT_CAPTURE_SLOTS (stream, thread);
 * a capture that finds no free slot still counts in `active`, only its allocations go unmarked.
 */
#include "recorder.h"
#include "../hot_path.h"

void mt_capture_begin(mt_recorder *r, uint64_t stream)
{
    atomic_fetch_add(&r->capture.active, 1);
    for (int i = 0; i < MT_CAPTURE_SLOTS; i++) {
        uint64_t free_slot = 0;
        if (atomic_compare_exchange_strong(&r->capture.who[i].stream, &free_slot, stream ? stream : 1)) {
            atomic_store(&r->capture.who[i].tid, mt_gettid());
            return;
        }
    }
}

void mt_capture_end(mt_recorder *r, uint64_t stream)
{
    int left = atomic_fetch_sub(&r->capture.active, 1) - 1;
    if (left < 0) atomic_store(&r->capture.active, 0); /* began before we listened */
    for (int i = 0; i < MT_CAPTURE_SLOTS; i++)
        if (atomic_load(&r->capture.who[i].stream) == (stream ? stream : 1)) {
            atomic_store(&r->capture.who[i].tid, 0);
            atomic_store(&r->capture.who[i].stream, 0);
            return;
        }
}

int mt_capture_find_thread(mt_recorder *r, uint32_t tid)
{
    for (int i = 0; i < MT_CAPTURE_SLOTS; i++)
        if (atomic_load_explicit(&r->capture.who[i].tid, memory_order_relaxed) == tid &&
            atomic_load_explicit(&r->capture.who[i].stream, memory_order_relaxed))
            return 1;
    return 0;
}
