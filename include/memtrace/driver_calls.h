/* memtrace/driver_calls.h — the CUDA driver calls memtrace knows, in one table (an X-macro, as
 * memray's FOR_EACH_HOOKED_FUNCTION). An event's `api` field (trace.h) holds one of these ids.
 *
 * Read by two stages that must not depend on each other:
 *   - the recorder (src/record/cuda/api_callbacks.c) enables a CUPTI callback for each traced call
 *     and reads what the call is to it from the third column, and checks at compile time that
 *     every id here is CUPTI_DRIVER_TRACE_CBID_<name> in the CUPTI header it builds against;
 *   - the trace library (src/trace/names.c) names the ids for `dump`, without the CUDA toolkit:
 *     so the ids are written out (CUDA 13.0's cupti_driver_cbid.h; CUPTI only ever appends ids).
 * That is why the table lives here, with the format, and not beside the recorder.
 *
 * MT_TRACED_DRIVER_CALLS(X) calls X(name, cbid, what) for every call the recorder listens to, in
 * the order it enables them. `what` is what the call is to the recorder, a combination of its
 * CALL_* flags (defined in api_callbacks.c, and only expanded there):
 *   CALL_MEMORY2         makes a MEMORY2 activity record (a duplicate of ours, not a
 *                        driver-internal allocation)
 *   CALL_STREAM_ORDERED  async_hooks.c records it while its stand-ins are active
 *   CALL_RELEASE         gives memory back: stamped when the call starts
 *   CALL_CAPTURE         begins or ends a CUDA graph capture (capture.c)
 *   CALL_POOL            makes or names a memory pool: where it is (device or host) is noted
 *   CALL_MEMORY2_SOMETIMES  makes a MEMORY2 record (a duplicate of ours) in some cases only
 *   CALL_ARRAY           makes a CUDA array, whose MEMORY2 record is the event (its stack noted)
 *   CALL_CTX_END         may destroy a context, whose CTX_DESTROY is written when the call
 *                        returns, after the activity records CUPTI still holds
 *
 * MT_NAMED_DRIVER_CALLS(X) calls X(name, cbid) for ids that are named but not traced (the first
 * versions of the memory calls): mt_api_name has always answered them. */
#ifndef MEMTRACE_DRIVER_CALLS_H
#define MEMTRACE_DRIVER_CALLS_H

/* clang-format off */
#define MT_TRACED_DRIVER_CALLS(X)                                                                  \
    X(cuMemAlloc_v2,                       243, CALL_MEMORY2)                                      \
    X(cuMemAllocPitch_v2,                  244, CALL_MEMORY2)                                      \
    X(cuMemFree_v2,                        245, CALL_MEMORY2 | CALL_RELEASE)                       \
    X(cuMemAllocHost_v2,                   294, CALL_MEMORY2)                                      \
    X(cuMemHostAlloc,                       39, CALL_MEMORY2)                                      \
    X(cuMemHostAlloc_v2,                   271, CALL_MEMORY2)                                      \
    X(cuMemFreeHost,                        38, CALL_MEMORY2 | CALL_RELEASE)                       \
    X(cuMemHostRegister,                   301, CALL_MEMORY2)                                      \
    X(cuMemHostRegister_v2,                379, CALL_MEMORY2)                                      \
    X(cuMemHostUnregister,                 302, CALL_MEMORY2 | CALL_RELEASE)                       \
    X(cuMemAllocManaged,                   371, CALL_MEMORY2)                                      \
    X(cuMemAddressReserve,                 547, 0)                                                 \
    X(cuMemAddressFree,                    548, CALL_RELEASE)                                      \
    X(cuMemCreate,                         549, 0)                                                 \
    X(cuMemRetainAllocationHandle,         565, 0)                                                 \
    X(cuMemImportFromShareableHandle,      555, 0)                                                 \
    X(cuMemRelease,                        550, CALL_RELEASE)                                      \
    /* another process's cudaMalloc, mapped here (legacy CUDA IPC: torch.multiprocessing, CuPy, */ \
    /* NCCL with NCCL_CUMEM_ENABLE=0); CUPTI reports a mapping of memory on this GPU as a device */ \
    /* allocation and one of another GPU's memory not at all, only its release (H200, CUDA 13) */  \
    X(cuIpcOpenMemHandle,                  329, CALL_MEMORY2_SOMETIMES)                            \
    X(cuIpcOpenMemHandle_v2,               567, CALL_MEMORY2_SOMETIMES)                            \
    X(cuIpcCloseMemHandle,                 330, CALL_MEMORY2 | CALL_RELEASE)                       \
    /* mapped ranges show up as device memory records */                                          \
    X(cuMemMap,                            551, CALL_MEMORY2)                                      \
    X(cuMemUnmap,                          552, CALL_MEMORY2 | CALL_RELEASE)                       \
    X(cuMemAllocAsync,                     598, CALL_MEMORY2 | CALL_STREAM_ORDERED)                \
    X(cuMemAllocAsync_ptsz,                599, CALL_MEMORY2 | CALL_STREAM_ORDERED)                \
    X(cuMemFreeAsync,                      600, CALL_MEMORY2 | CALL_STREAM_ORDERED | CALL_RELEASE) \
    X(cuMemFreeAsync_ptsz,                 601, CALL_MEMORY2 | CALL_STREAM_ORDERED | CALL_RELEASE) \
    X(cuMemAllocFromPoolAsync,             611, CALL_MEMORY2 | CALL_STREAM_ORDERED)                \
    X(cuMemAllocFromPoolAsync_ptsz,        612, CALL_MEMORY2 | CALL_STREAM_ORDERED)                \
    X(cuMemPoolTrimTo,                     602, 0)                                                 \
    X(cuMemPoolDestroy,                    608, 0)                                                 \
    X(cuMemPoolCreate,                     607, CALL_POOL)                                         \
    X(cuMemGetDefaultMemPool,              801, CALL_POOL)                                         \
    X(cuMemGetMemPool,                     802, CALL_POOL)                                         \
    /* CUDA arrays (textures, surfaces); their releases come as activity records too */          \
    X(cuArrayCreate_v2,                    272, CALL_ARRAY)                                        \
    X(cuArrayCreate,                        87, CALL_ARRAY)                                        \
    X(cuArray3DCreate_v2,                  274, CALL_ARRAY)                                        \
    X(cuArray3DCreate,                      90, CALL_ARRAY)                                        \
    X(cuMipmappedArrayCreate,              347, CALL_ARRAY)                                        \
    X(cuGraphAddMemAllocNode,              638, 0)                                                 \
    X(cuGraphAddMemFreeNode,               639, 0)                                                 \
    /* the generic node calls: memory nodes among them */                                         \
    X(cuGraphAddNode,                      712, 0)                                                 \
    X(cuGraphAddNode_v2,                   723, 0)                                                 \
    X(cuStreamBeginCapture,                495, CALL_CAPTURE)                                      \
    X(cuStreamBeginCapture_ptsz,           496, CALL_CAPTURE)                                      \
    X(cuStreamBeginCapture_v2,             539, CALL_CAPTURE)                                      \
    X(cuStreamBeginCapture_v2_ptsz,        540, CALL_CAPTURE)                                      \
    X(cuStreamBeginCaptureToGraph,         720, CALL_CAPTURE)                                      \
    X(cuStreamBeginCaptureToGraph_ptsz,    721, CALL_CAPTURE)                                      \
    X(cuStreamEndCapture,                  497, CALL_CAPTURE)                                      \
    X(cuStreamEndCapture_ptsz,             498, CALL_CAPTURE)                                      \
    /* may destroy a context (cudaDeviceReset is cuDevicePrimaryCtxReset_v2) */                   \
    X(cuCtxDestroy,                         11, CALL_CTX_END)                                      \
    X(cuCtxDestroy_v2,                     322, CALL_CTX_END)                                      \
    X(cuDevicePrimaryCtxRelease,           387, CALL_CTX_END)                                      \
    X(cuDevicePrimaryCtxReset,             389, CALL_CTX_END)                                      \
    X(cuDevicePrimaryCtxRelease_v2,        544, CALL_CTX_END)                                      \
    X(cuDevicePrimaryCtxReset_v2,          545, CALL_CTX_END)

#define MT_NAMED_DRIVER_CALLS(X)                                                                   \
    X(cuMemAlloc,                           29)                                                    \
    X(cuMemAllocPitch,                      31)                                                    \
    X(cuMemFree,                            33)                                                    \
    X(cuMemAllocHost,                       37)
/* clang-format on */

#endif
