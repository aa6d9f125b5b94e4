/* nvrtc.h — NVRTC, the CUDA runtime compiler, loaded with dlopen: diffc has
 * no link-time dependency on the CUDA toolkit, so CPU-only users need none,
 * and `--target cuda` without one is a single message saying what was
 * searched.  Sources are compiled ahead of time to a cubin per real
 * architecture (sm_80) or to PTX for a virtual one (compute_90), with the
 * generated headers "dc_cuda.cuh" and "dc_mma.cuh" (codegen/cuda/prelude.c)
 * given in memory.
 *
 * Where NVRTC is looked for, in order:
 *   $DIFFC_NVRTC (a full path; when set, nothing else is tried),
 *   $CUDA_HOME/{lib64,lib}, $CUDA_PATH/{lib64,lib}, the dynamic loader's
 *   path (LD_LIBRARY_PATH, ldconfig), /usr/local/cuda/{lib64,lib};
 *   as libnvrtc.so.13, libnvrtc.so, libnvrtc.so.12.
 * The CUDA headers (cuda_bf16.h and mma.h; include/cccl too when present,
 * CUDA 13 moved <nv/target> there) come from $CUDA_HOME/include,
 * $CUDA_PATH/include, <the loaded library's dir>/../include, or
 * /usr/local/cuda/include, the first that has them. */
#ifndef DC_NVRTC_H
#define DC_NVRTC_H

#include "codegen/kernel_cache.h"
#include "support/support.h"

typedef struct dc_nvrtc dc_nvrtc;

/* One compilation target.  A real architecture gives a cubin, a virtual
 * one PTX that the driver compiles for newer GPUs at load time. */
typedef struct {
  char name[24]; /* "sm_80", "sm_90a", "compute_90" */
  int number;    /* 80, 90, ... */
  int ptx;       /* 1 for compute_XX */
} dc_cuda_arch;

#define DC_CUDA_MAX_ARCHS 8
/* cubins for Ampere and Hopper, PTX so that newer GPUs can still load it */
#define DC_CUDA_DEFAULT_ARCHS "sm_80,sm_90,compute_90"

dc_status *dc_nvrtc_load(dc_nvrtc **out);
void dc_nvrtc_unload(dc_nvrtc *nv);

const char *dc_nvrtc_version(const dc_nvrtc *nv);      /* "13.0" */
const char *dc_nvrtc_library(const dc_nvrtc *nv);      /* the file that was loaded */
const char *dc_nvrtc_include_dirs(const dc_nvrtc *nv); /* "-I/usr/local/cuda/include -I..." */
/* The supported architecture numbers, ascending ("75 80 86 ... 121"). */
const char *dc_nvrtc_supported_archs(const dc_nvrtc *nv);

/* Parses a comma-separated list ("sm_80,sm_90,compute_90"; NULL or "" = the
 * default).  Each is sm_N, sm_Na, compute_N or compute_Na with N one of
 * NVRTC's supported architectures; an unknown or repeated one is an error
 * that lists the supported ones. */
dc_status *dc_nvrtc_parse_archs(const dc_nvrtc *nv, const char *list, dc_cuda_arch *out, int *n);
/* "sm_80,sm_90,compute_90" back from a parsed list, into buf. */
const char *dc_cuda_archs_str(const dc_cuda_arch *a, int n, char *buf, size_t cap);

/* What one compile produced. */
/* cubin bytes, or PTX text with its terminating NUL; the log is NVRTC's
 * when it said anything although it succeeded (warnings), else NULL */
typedef dc_kernel_image dc_nvrtc_output;

void dc_nvrtc_output_deinit(dc_nvrtc_output *o);

/* Compiles `source` (which includes "dc_cuda.cuh") for arch.  Options:
 * --gpu-architecture, -std=c++17, the include dirs, --fmad=true; never fast
 * math.  A failed compile is an error naming `name`, the arch and the first
 * lines of the log.  Safe to call from several threads at once. */
dc_status *dc_nvrtc_compile(const dc_nvrtc *nv, const char *name, const char *source, const dc_cuda_arch *arch,
                            dc_nvrtc_output *out);

/* The disk-cache key of that compile: xxh64 of everything that decides its
 * output: the source, the text of dc_cuda.cuh (and of dc_mma.cuh when the
 * source includes it), the options, the NVRTC
 * version and the arch.  Returns 0 (no key: do not use the cache) when
 * memory ran out. */
int dc_nvrtc_cache_key(const dc_nvrtc *nv, const char *source, const dc_cuda_arch *arch, uint64_t *key);

#endif
