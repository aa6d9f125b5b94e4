/* emit_kernels.h — compile a module's kernels for a CPU target into the
 * plan's KERN description (see plan/plan_format.h), through the kernel
 * cache (codegen/kernel_cache.h). */
#ifndef DC_EMIT_KERNELS_H
#define DC_EMIT_KERNELS_H

#include "codegen/kernel_cache.h"
#include "codegen/llvm/llvm_codegen.h"
#include "plan/plan_format.h"
#include "support/progress.h"

typedef enum { DC_CONV_AUTO, DC_CONV_DIRECT, DC_CONV_WINOGRAD } dc_conv_algo;

typedef struct {
  int verbose;           /* one line on stderr: kernels, cache hits, time */
  const char *cache_dir; /* NULL = the default (codegen/kernel_cache.h) */
  int no_cache;          /* compile every kernel, read and write no cache */
  dc_conv_algo conv_algo; /* 3x3 conv2d: Winograd where it pays (the default), never, or wherever correct */
  const dc_progress *progress; /* the "kernels" stage: distinct kernels, cache hits apart; NULL = none */
} dc_cpu_emit_options;

dc_status *dc_emit_cpu_kernels(const dc_module *m, const dc_cpu_target *t, const dc_cpu_emit_options *o,
                               dc_plan_kernels *out);

/* NULL when this build has the CPU code generator; else the error a
 * --target cpu compile gets, before any work (a -DDIFFC_LLVM=OFF build links
 * codegen/llvm_off/llvm_off.c in place of this file and codegen/llvm/). */
dc_status *dc_cpu_codegen_check(void);
/* The targets this build compiles for, one line for --help and --version. */
const char *dc_build_targets(void);

#endif
