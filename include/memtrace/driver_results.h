/* memtrace/driver_results.h — the CUDA driver's result codes (CUresult) by name, for the failed
 * requests a trace holds (an event's `result` field, trace.h): "CUDA_ERROR_OUT_OF_MEMORY" says
 * more to a reader than 2, and 201, CUDA_ERROR_INVALID_CONTEXT (an allocation from a thread with no
 * current context), is not a number anyone remembers.
 *
 * Written out from CUDA 13.0's cuda.h (enum cudaError_enum), as driver_calls.h writes out the
 * CUPTI ids, so that every tool reading traces builds without the CUDA toolkit; the driver only
 * ever adds codes. To add a newer toolkit's: one line per `NAME = VALUE` of that enum, in its
 * order; tests/test_trace_names.c checks the list against the header when the toolkit is
 * installed (every code there named as there, and no other).
 *
 * MT_DRIVER_RESULTS(X) calls X(name, value) for every code. */
#ifndef MEMTRACE_DRIVER_RESULTS_H
#define MEMTRACE_DRIVER_RESULTS_H

/* clang-format off */
#define MT_DRIVER_RESULTS(X)                                                                       \
    X(CUDA_SUCCESS,                                 0)                                             \
    X(CUDA_ERROR_INVALID_VALUE,                     1)                                             \
    X(CUDA_ERROR_OUT_OF_MEMORY,                     2)                                             \
    X(CUDA_ERROR_NOT_INITIALIZED,                   3)                                             \
    X(CUDA_ERROR_DEINITIALIZED,                     4)                                             \
    X(CUDA_ERROR_PROFILER_DISABLED,                 5)                                             \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED,          6)                                             \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED,          7)                                             \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED,          8)                                             \
    X(CUDA_ERROR_STUB_LIBRARY,                     34)                                             \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER,       36)                                             \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE,               46)                                             \
    X(CUDA_ERROR_NO_DEVICE,                       100)                                             \
    X(CUDA_ERROR_INVALID_DEVICE,                  101)                                             \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED,             102)                                             \
    X(CUDA_ERROR_INVALID_IMAGE,                   200)                                             \
    X(CUDA_ERROR_INVALID_CONTEXT,                 201)                                             \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT,         202)                                             \
    X(CUDA_ERROR_MAP_FAILED,                      205)                                             \
    X(CUDA_ERROR_UNMAP_FAILED,                    206)                                             \
    X(CUDA_ERROR_ARRAY_IS_MAPPED,                 207)                                             \
    X(CUDA_ERROR_ALREADY_MAPPED,                  208)                                             \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU,               209)                                             \
    X(CUDA_ERROR_ALREADY_ACQUIRED,                210)                                             \
    X(CUDA_ERROR_NOT_MAPPED,                      211)                                             \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY,             212)                                             \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER,           213)                                             \
    X(CUDA_ERROR_ECC_UNCORRECTABLE,               214)                                             \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT,               215)                                             \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE,          216)                                             \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,         217)                                             \
    X(CUDA_ERROR_INVALID_PTX,                     218)                                             \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT,        219)                                             \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE,            220)                                             \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND,          221)                                             \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,         222)                                             \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED,        223)                                             \
    X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,       224)                                             \
    X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,        225)                                             \
    X(CUDA_ERROR_CONTAINED,                       226)                                             \
    X(CUDA_ERROR_INVALID_SOURCE,                  300)                                             \
    X(CUDA_ERROR_FILE_NOT_FOUND,                  301)                                             \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND,  302)                                             \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,       303)                                             \
    X(CUDA_ERROR_OPERATING_SYSTEM,                304)                                             \
    X(CUDA_ERROR_INVALID_HANDLE,                  400)                                             \
    X(CUDA_ERROR_ILLEGAL_STATE,                   401)                                             \
    X(CUDA_ERROR_LOSSY_QUERY,                     402)                                             \
    X(CUDA_ERROR_NOT_FOUND,                       500)                                             \
    X(CUDA_ERROR_NOT_READY,                       600)                                             \
    X(CUDA_ERROR_ILLEGAL_ADDRESS,                 700)                                             \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,         701)                                             \
    X(CUDA_ERROR_LAUNCH_TIMEOUT,                  702)                                             \
    X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING,   703)                                             \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,     704)                                             \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,         705)                                             \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,          708)                                             \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED,            709)                                             \
    X(CUDA_ERROR_ASSERT,                          710)                                             \
    X(CUDA_ERROR_TOO_MANY_PEERS,                  711)                                             \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,  712)                                             \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,      713)                                             \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR,            714)                                             \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION,             715)                                             \
    X(CUDA_ERROR_MISALIGNED_ADDRESS,              716)                                             \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE,           717)                                             \
    X(CUDA_ERROR_INVALID_PC,                      718)                                             \
    X(CUDA_ERROR_LAUNCH_FAILED,                   719)                                             \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,    720)                                             \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK,              721)                                             \
    X(CUDA_ERROR_NOT_PERMITTED,                   800)                                             \
    X(CUDA_ERROR_NOT_SUPPORTED,                   801)                                             \
    X(CUDA_ERROR_SYSTEM_NOT_READY,                802)                                             \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,          803)                                             \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,  804)                                             \
    X(CUDA_ERROR_MPS_CONNECTION_FAILED,           805)                                             \
    X(CUDA_ERROR_MPS_RPC_FAILURE,                 806)                                             \
    X(CUDA_ERROR_MPS_SERVER_NOT_READY,            807)                                             \
    X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,         808)                                             \
    X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,     809)                                             \
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED,           810)                                             \
    X(CUDA_ERROR_CDP_NOT_SUPPORTED,               811)                                             \
    X(CUDA_ERROR_CDP_VERSION_MISMATCH,            812)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,      900)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,      901)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE,            902)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,        903)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED,         904)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,        905)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,         906)                                             \
    X(CUDA_ERROR_CAPTURED_EVENT,                  907)                                             \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,     908)                                             \
    X(CUDA_ERROR_TIMEOUT,                         909)                                             \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,       910)                                             \
    X(CUDA_ERROR_EXTERNAL_DEVICE,                 911)                                             \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE,            912)                                             \
    X(CUDA_ERROR_FUNCTION_NOT_LOADED,             913)                                             \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE,           914)                                             \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,  915)                                             \
    X(CUDA_ERROR_KEY_ROTATION,                    916)                                             \
    X(CUDA_ERROR_UNKNOWN,                         999)
/* clang-format on */

#endif
