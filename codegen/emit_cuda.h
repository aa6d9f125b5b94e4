/* emit_cuda.h — the CUDA codegen stage of the driver: every distinct kernel
 * of a module written as CUDA C (codegen/cuda) and compiled by NVRTC for
 * every requested architecture, in parallel and through the disk cache,
 * into the plan's KERN description (plan/plan_format.h, dc_plan_cuda). */
#ifndef DC_EMIT_CUDA_H
#define DC_EMIT_CUDA_H

#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/nvrtc.h"
#include "plan/plan_format.h"
#include "support/progress.h"

typedef struct {
  dc_cuda_compute compute;
  int sm_count;              /* dc_cuda_options.sm_count */
  const dc_cuda_arch *archs; /* from dc_nvrtc_parse_archs */
  int narchs;
  const char *cache_dir; /* NULL = the default (codegen/kernel_cache.h) */
  int no_cache;
  int verbose;     /* the summary line and NVRTC's warnings */
  const dc_progress *progress; /* the "kernels" stage: kernel x arch compiles, cache hits apart; NULL = none */
  int keep_going;  /* after a failure, still generate and compile every other
                    * kernel, so the report lists all failures (tests) */
  int threads;     /* 0 = one per online CPU */
} dc_cuda_emit_options;

/* A message about one kernel. */
typedef struct {
  char *kernel; /* "k3_conv2d" */
  int32_t node; /* the first node that runs it */
  char *arch;   /* NULL when the kernel could not even be generated */
  char *text;   /* NVRTC's warnings, or the error message */
} dc_cuda_note;

typedef struct {
  int nkernels;  /* distinct kernels */
  int nnodes;    /* nodes running them */
  int ncompiles; /* kernels x archs */
  int ncached;   /* of those, taken from the disk cache */
  int nrejected; /* cache entries found corrupt (recompiled and rewritten) */
  int threads;
  double seconds;
  char *cache_dir;        /* the cache used, NULL when off */
  char *cache_warning;    /* why the cache could not be used or written */
  dc_cuda_note *warnings; /* compiles that succeeded with a non-empty log */
  int nwarnings;
  dc_cuda_note *errors; /* keep_going only: every failure, in kernel order */
  int nerrors;
} dc_cuda_emit_report;

/* Fills out (and rep, which may be NULL; deinit it either way when given).
 * Without keep_going the first failure is returned as it is; with it, the
 * status counts the failures and quotes the first. */
dc_status *dc_emit_cuda_kernels(const dc_module *m, const dc_nvrtc *nv, const dc_cuda_emit_options *o,
                                dc_plan_cuda *out, dc_cuda_emit_report *rep);
void dc_cuda_emit_report_deinit(dc_cuda_emit_report *rep);

/* The -v summary line, and each warning (kernel, arch, log) when verbose;
 * without verbose only how many kernels had warnings.  The cache warning is
 * always printed. */
void dc_cuda_emit_report_print(const dc_cuda_emit_report *rep, const dc_nvrtc *nv, const dc_cuda_emit_options *o,
                               FILE *f);

#endif
