/* cublaslt.h — the few pieces of NVIDIA's cuBLASLt the CUDA backend uses for
 * its GEMMs (runtime/cuda_gemm_lt.c), declared here so that building diffc
 * needs no CUDA toolkit, and reached through a function table so that nothing
 * links against the library: dc_lt_api_load dlopens libcublasLt and fills
 * the table with dlsym; tests fill it with a fake instead
 * (dc_lt_api_set_override), as runtime/cuda_driver.h does for the driver.
 *
 * Types and constants carry a dc_lt / DC_LT prefix so that a translation unit
 * may include the toolkit's cublasLt.h beside this header (the test that
 * checks these values against it does).  Values are those of CUDA 12/13's
 * cublasLt.h, cublas_api.h and library_types.h; the ABI of every entry below
 * is unchanged since CUDA 11. */
#ifndef DC_CUBLASLT_H
#define DC_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_driver.h"
#include "support/support.h"

typedef int dc_lt_status; /* cublasStatus_t */
typedef struct dc_lt_ctx_st *dc_lt_handle;          /* cublasLtHandle_t */
typedef struct dc_lt_desc_st *dc_lt_matmul_desc;    /* cublasLtMatmulDesc_t */
typedef struct dc_lt_layout_st *dc_lt_layout;       /* cublasLtMatrixLayout_t */
typedef struct dc_lt_pref_st *dc_lt_preference;     /* cublasLtMatmulPreference_t */

/* cublasLtMatmulAlgo_t: semi-opaque; the library says its bytes may be
 * saved and given back to the same library version, which the algorithm
 * cache (cuda_gemm_lt.c) does. */
typedef struct {
  uint64_t data[8];
} dc_lt_algo;

/* cublasLtMatmulHeuristicResult_t */
typedef struct {
  dc_lt_algo algo;
  size_t workspace_size;
  dc_lt_status state;
  float waves_count;
  int reserved[4];
} dc_lt_heuristic;

/* cublasStatus_t values we name. */
enum {
  DC_LT_STATUS_SUCCESS = 0,
  DC_LT_STATUS_NOT_INITIALIZED = 1,
  DC_LT_STATUS_ALLOC_FAILED = 3,
  DC_LT_STATUS_INVALID_VALUE = 7,
  DC_LT_STATUS_EXECUTION_FAILED = 13,
  DC_LT_STATUS_NOT_SUPPORTED = 15,
};

/* cudaDataType_t, cublasComputeType_t, cublasOperation_t */
enum { DC_LT_R_32F = 0, DC_LT_R_16F = 2, DC_LT_R_16BF = 14 };
enum { DC_LT_COMPUTE_32F = 68 };
enum { DC_LT_OP_N = 0, DC_LT_OP_T = 1 };

/* cublasLtMatmulDescAttributes_t */
enum {
  DC_LT_DESC_TRANSA = 3,
  DC_LT_DESC_TRANSB = 4,
  DC_LT_DESC_EPILOGUE = 7,
  DC_LT_DESC_BIAS_POINTER = 8,
  DC_LT_DESC_BIAS_DATA_TYPE = 26,
};
/* cublasLtMatrixLayoutAttribute_t */
enum { DC_LT_LAYOUT_BATCH_COUNT = 5, DC_LT_LAYOUT_STRIDED_BATCH_OFFSET = 6 };
/* cublasLtMatmulPreferenceAttributes_t */
enum {
  DC_LT_PREF_MAX_WORKSPACE_BYTES = 1,
  DC_LT_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* the heuristic assumes 256 unless told */
  DC_LT_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  DC_LT_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  DC_LT_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
/* cublasLtEpilogue_t.  Its GELU is the tanh approximation (PyTorch made
 * _addmm_activation's other GPU paths use tanh to agree with its cuBLASLt
 * epilogue): it serves act gelu_tanh only, never the exact (erf) gelu. */
enum {
  DC_LT_EPILOGUE_DEFAULT = 1,
  DC_LT_EPILOGUE_BIAS = 4,
  DC_LT_EPILOGUE_GELU = 32,
  DC_LT_EPILOGUE_GELU_BIAS = 36,
};

/* The library's entry points: X(return type, name without "cublasLt",
 * params). */
#define DC_LT_API_ENTRIES(X)                                                                                      \
  X(dc_lt_status, Create, (dc_lt_handle * handle))                                                                \
  X(dc_lt_status, Destroy, (dc_lt_handle handle))                                                                 \
  X(size_t, GetVersion, (void))                                                                                   \
  X(const char *, GetStatusName, (dc_lt_status status))                                                           \
  X(dc_lt_status, MatmulDescCreate, (dc_lt_matmul_desc * desc, int compute_type, int scale_type))                \
  X(dc_lt_status, MatmulDescDestroy, (dc_lt_matmul_desc desc))                                                    \
  X(dc_lt_status, MatmulDescSetAttribute, (dc_lt_matmul_desc desc, int attr, const void *buf, size_t size))      \
  X(dc_lt_status, MatrixLayoutCreate, (dc_lt_layout * layout, int type, uint64_t rows, uint64_t cols, int64_t ld)) \
  X(dc_lt_status, MatrixLayoutDestroy, (dc_lt_layout layout))                                                     \
  X(dc_lt_status, MatrixLayoutSetAttribute, (dc_lt_layout layout, int attr, const void *buf, size_t size))       \
  X(dc_lt_status, MatmulPreferenceCreate, (dc_lt_preference * pref))                                              \
  X(dc_lt_status, MatmulPreferenceDestroy, (dc_lt_preference pref))                                               \
  X(dc_lt_status, MatmulPreferenceSetAttribute, (dc_lt_preference pref, int attr, const void *buf, size_t size)) \
  X(dc_lt_status, MatmulAlgoGetHeuristic,                                                                         \
    (dc_lt_handle handle, dc_lt_matmul_desc desc, dc_lt_layout a, dc_lt_layout b, dc_lt_layout c, dc_lt_layout d, \
     dc_lt_preference pref, int requested, dc_lt_heuristic *results, int *returned))                              \
  X(dc_lt_status, MatmulAlgoCheck,                                                                                \
    (dc_lt_handle handle, dc_lt_matmul_desc desc, dc_lt_layout a, dc_lt_layout b, dc_lt_layout c, dc_lt_layout d, \
     const dc_lt_algo *algo, dc_lt_heuristic *result))                                                            \
  X(dc_lt_status, Matmul,                                                                                         \
    (dc_lt_handle handle, dc_lt_matmul_desc desc, const void *alpha, const void *a, dc_lt_layout adesc,           \
     const void *b, dc_lt_layout bdesc, const void *beta, const void *c, dc_lt_layout cdesc, void *d,            \
     dc_lt_layout ddesc, const dc_lt_algo *algo, void *workspace, size_t workspace_bytes, dc_cu_stream stream))

typedef struct dc_lt_api {
#define DC_LT_FIELD(ret, name, params) ret(*name) params;
  DC_LT_API_ENTRIES(DC_LT_FIELD)
#undef DC_LT_FIELD
  void *lib; /* the dlopen handle; NULL for a fake */
} dc_lt_api;

/* Opens libname (NULL: "libcublasLt.so.13", then "libcublasLt.so.12", then
 * "libcublasLt.so") and resolves every entry.  No library: DC_ERR_UNSUPPORTED
 * "cuBLASLt was not found (<dlerror>)"; a library missing an entry is an
 * error naming it. */
dc_status *dc_lt_api_load(const char *libname, dc_lt_api *out);
void dc_lt_api_unload(dc_lt_api *api);

/* The table the CUDA backend uses: the override when a test set one (a
 * fake; NULL restores the real library), else the loaded library — but only
 * beside the real driver (real_driver: the backend's driver table came from
 * libcuda): with a test's fake driver, device pointers are host memory the
 * real cuBLASLt must never see, so the open fails and the NVRTC kernels run.
 * dc_lt_api_set_missing(1) makes every later open fail as if the library
 * were not installed (tests of the fallback). */
void dc_lt_api_set_override(const dc_lt_api *fake);
void dc_lt_api_set_missing(int missing);
dc_status *dc_lt_api_open(const char *libname, int real_driver, dc_lt_api *out);

/* NULL when r is success; else DC_ERR_IO "<call>: CUBLAS_STATUS_... (N)". */
dc_status *dc_lt_check(const dc_lt_api *api, dc_lt_status r, const char *call);
/* Calls entry fn through the table lt (a dc_lt_api *) and turns its status
 * into one naming the call. */
#define LT(lt, fn, ...) dc_lt_check((lt), (lt)->fn(__VA_ARGS__), "cublasLt" #fn)

#endif
