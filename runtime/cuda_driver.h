/* cuda_driver.h — the few pieces of the CUDA driver API the runtime uses,
 * declared here so that building diffc needs no CUDA toolkit, and reached
 * through a function table so that nothing links against libcuda:
 * dc_cu_api_load dlopens libcuda.so.1 and fills the table through
 * cuGetProcAddress; tests fill it with a fake driver instead.
 *
 * Types and constants carry a dc_cu / DC_CU prefix so that a translation
 * unit may include the toolkit's cuda.h beside this header (the test that
 * checks these values against it does).  Values are those of CUDA 12/13's
 * cuda.h; the ABI of every entry below is unchanged since CUDA 12.0, the
 * version we ask cuGetProcAddress for. */
#ifndef DC_CUDA_DRIVER_H
#define DC_CUDA_DRIVER_H

#include <stddef.h>

#include "support/support.h"

typedef int dc_cu_result;                  /* CUresult */
typedef int dc_cu_device;                  /* CUdevice */
typedef unsigned long long dc_cu_deviceptr; /* CUdeviceptr (64-bit) */
typedef struct dc_cu_ctx_st *dc_cu_context;
typedef struct dc_cu_mod_st *dc_cu_module;
typedef struct dc_cu_func_st *dc_cu_function;
typedef struct dc_cu_stream_st *dc_cu_stream;
typedef struct dc_cu_event_st *dc_cu_event;
typedef struct dc_cu_graph_st *dc_cu_graph;           /* CUgraph */
typedef struct dc_cu_graph_exec_st *dc_cu_graph_exec; /* CUgraphExec */

/* CUresult values we name in code or tests. */
enum {
  DC_CUDA_SUCCESS = 0,
  DC_CUDA_ERROR_INVALID_VALUE = 1,
  DC_CUDA_ERROR_OUT_OF_MEMORY = 2,
  DC_CUDA_ERROR_NOT_INITIALIZED = 3,
  DC_CUDA_ERROR_NO_DEVICE = 100,
  DC_CUDA_ERROR_INVALID_DEVICE = 101,
  DC_CUDA_ERROR_INVALID_CONTEXT = 201,
  DC_CUDA_ERROR_ILLEGAL_STATE = 401,
  DC_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  DC_CUDA_ERROR_INVALID_PTX = 218,
  DC_CUDA_ERROR_NOT_FOUND = 500,
  DC_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  DC_CUDA_ERROR_LAUNCH_FAILED = 719,
  DC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900, /* a call not allowed while the stream (or thread) captures */
  DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901, /* the capture failed earlier; it records nothing more */
  DC_CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,  /* the capture ended on a stream it did not begin on */
  DC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,    /* a stream forked into the capture never joined back */
  DC_CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,   /* a wait on work outside the capture */
  DC_CUDA_ERROR_CAPTURED_EVENT = 907,             /* a query or sync of an event recorded in a capture */
};

/* CUdevice_attribute */
enum {
  DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  DC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum { DC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 }; /* CUfunction_attribute */
enum { DC_CU_STREAM_NON_BLOCKING = 0x1 };                          /* CUstream_flags */
enum { DC_CU_EVENT_DEFAULT = 0x0, DC_CU_EVENT_DISABLE_TIMING = 0x2 }; /* CUevent_flags */
enum { DC_CU_MEMHOSTALLOC_PORTABLE = 0x01 };
/* CUstreamCaptureMode: THREAD_LOCAL forbids the capturing thread's unsafe
 * calls (syncs, allocations) and leaves other threads alone; GLOBAL would
 * also fail another thread's (another session's) cuMemAlloc while we
 * capture. */
enum {
  DC_CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  DC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  DC_CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};
/* CUjit_option, for the PTX JIT's logs. */
enum {
  DC_CU_JIT_INFO_LOG_BUFFER = 3,
  DC_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  DC_CU_JIT_ERROR_LOG_BUFFER = 5,
  DC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};
/* cuGetProcAddress flags and its symbol status. */
enum { DC_CU_GET_PROC_ADDRESS_DEFAULT = 0 };
enum {
  DC_CU_GET_PROC_ADDRESS_SUCCESS = 0,
  DC_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  DC_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

/* The CUDA version whose ABI we request each entry point at: every driver
 * from 12.0 on serves it (CUDA 13's renames — cuMemAlloc_v2,
 * cuEventElapsedTime_v2, ... — are what cuda.h's macros select; asking by
 * base name and version gets the matching ABI without them).  So
 * "cuStreamBeginCapture" at 12.0 is cuStreamBeginCapture_v2 (the mode
 * argument honoured per call), and graphs are instantiated through
 * cuGraphInstantiateWithFlags by that name: CUDA 12's cuda.h maps
 * cuGraphInstantiate onto it, CUDA 11's cuGraphInstantiate took five
 * arguments. */
#define DC_CU_API_VERSION 12000

/* The driver entry points, by base name.  The X-macro keeps the table, the
 * loader and the fakes in step: X(name, params); every entry returns a
 * CUresult. */
#define DC_CU_API_ENTRIES(X)                                                                          \
  X(Init, (unsigned flags))                                                                           \
  X(DriverGetVersion, (int *version))                                                                 \
  X(DeviceGetCount, (int *count))                                                                     \
  X(DeviceGet, (dc_cu_device * dev, int ordinal))                                                     \
  X(DeviceGetName, (char *name, int len, dc_cu_device dev))                                          \
  X(DeviceGetAttribute, (int *value, int attrib, dc_cu_device dev))                                  \
  X(DevicePrimaryCtxRetain, (dc_cu_context * ctx, dc_cu_device dev))                                 \
  X(DevicePrimaryCtxRelease, (dc_cu_device dev))                                                      \
  X(CtxSetCurrent, (dc_cu_context ctx))                                                               \
  X(DeviceCanAccessPeer, (int *can_access, dc_cu_device dev, dc_cu_device peer))                      \
  X(CtxEnablePeerAccess, (dc_cu_context peer, unsigned flags))                                        \
  X(MemGetInfo, (size_t * free_bytes, size_t *total_bytes))                                           \
  X(MemAlloc, (dc_cu_deviceptr * dptr, size_t bytes))                                                 \
  X(MemFree, (dc_cu_deviceptr dptr))                                                                  \
  X(MemHostAlloc, (void **p, size_t bytes, unsigned flags))                                           \
  X(MemFreeHost, (void *p))                                                                           \
  X(MemcpyHtoDAsync, (dc_cu_deviceptr dst, const void *src, size_t bytes, dc_cu_stream stream))       \
  X(MemcpyDtoHAsync, (void *dst, dc_cu_deviceptr src, size_t bytes, dc_cu_stream stream))             \
  X(MemcpyPeerAsync, (dc_cu_deviceptr dst, dc_cu_context dst_ctx, dc_cu_deviceptr src, dc_cu_context src_ctx, \
                      size_t bytes, dc_cu_stream stream))                                             \
  X(StreamCreate, (dc_cu_stream * stream, unsigned flags))                                            \
  X(StreamDestroy, (dc_cu_stream stream))                                                             \
  X(StreamSynchronize, (dc_cu_stream stream))                                                         \
  X(StreamWaitEvent, (dc_cu_stream stream, dc_cu_event event, unsigned flags))                        \
  X(EventCreate, (dc_cu_event * event, unsigned flags))                                               \
  X(EventDestroy, (dc_cu_event event))                                                                \
  X(EventRecord, (dc_cu_event event, dc_cu_stream stream))                                            \
  X(EventSynchronize, (dc_cu_event event))                                                            \
  X(EventElapsedTime, (float *ms, dc_cu_event start, dc_cu_event end))                                \
  X(ModuleLoadData, (dc_cu_module * module, const void *image))                                       \
  X(ModuleLoadDataEx, (dc_cu_module * module, const void *image, unsigned nopts, int *opts, void **vals)) \
  X(ModuleUnload, (dc_cu_module module))                                                              \
  X(ModuleGetFunction, (dc_cu_function * fn, dc_cu_module module, const char *name))                 \
  X(FuncSetAttribute, (dc_cu_function fn, int attrib, int value))                                     \
  X(LaunchKernel, (dc_cu_function fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,  \
                   unsigned bz, unsigned smem_bytes, dc_cu_stream stream, void **params, void **extra)) \
  X(StreamBeginCapture, (dc_cu_stream stream, int mode))                                              \
  X(StreamEndCapture, (dc_cu_stream stream, dc_cu_graph * graph))                                     \
  X(GraphInstantiateWithFlags, (dc_cu_graph_exec * exec, dc_cu_graph graph, unsigned long long flags)) \
  X(GraphLaunch, (dc_cu_graph_exec exec, dc_cu_stream stream))                                        \
  X(GraphExecDestroy, (dc_cu_graph_exec exec))                                                        \
  X(GraphDestroy, (dc_cu_graph graph))                                                                \
  X(GetErrorName, (dc_cu_result r, const char **name))                                                \
  X(GetErrorString, (dc_cu_result r, const char **text))

typedef struct dc_cu_api {
#define DC_CU_FIELD(name, params) dc_cu_result(*name) params;
  DC_CU_API_ENTRIES(DC_CU_FIELD)
#undef DC_CU_FIELD
  void *lib; /* the dlopen handle; NULL for a fake */
} dc_cu_api;

/* Opens the driver library (libname NULL = "libcuda.so.1") and resolves
 * every entry.  No library: DC_ERR_UNSUPPORTED "no NVIDIA driver was found
 * (libcuda.so.1: <dlerror>)", which callers complete with what it means for
 * them.  A driver older than CUDA 12.0 or one missing an entry is an error
 * naming the entry. */
dc_status *dc_cu_api_load(const char *libname, dc_cu_api *out);
void dc_cu_api_unload(dc_cu_api *api);

/* The table drt_load and the tools use: the override when a test set one,
 * else the loaded driver.  Tests: dc_cu_api_set_override(&fake) makes every
 * later load use the fake (NULL restores the real driver). */
void dc_cu_api_set_override(const dc_cu_api *fake);
dc_status *dc_cu_api_open(const char *libname, dc_cu_api *out);

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" into buf, through the driver's
 * own names; "CUresult 12345" when it has none. */
const char *dc_cu_result_text(const dc_cu_api *api, dc_cu_result r, char *buf, size_t cap);
/* NULL when r is success; else DC_ERR_IO "<call>: <result text>". */
dc_status *dc_cu_check(const dc_cu_api *api, dc_cu_result r, const char *call);
/* Calls driver entry fn through the table b->api (any struct with an `api`
 * member) and turns its result into a status naming the call. */
#define CU(b, fn, ...) dc_cu_check(&(b)->api, (b)->api.fn(__VA_ARGS__), "cu" #fn)

#endif
