/* emit_kernels.h — compile a module's kernels for a CPU target into the
 * plan's KERN description (see runtime/plan_format.h). */
#ifndef DC_EMIT_KERNELS_H
#define DC_EMIT_KERNELS_H

#include "codegen/llvm/llvm_codegen.h"
#include "runtime/plan_format.h"

dc_status *dc_emit_cpu_kernels(const dc_module *m, const dc_cpu_target *t, int verbose, dc_plan_kernels *out);
/* The same with conv2d's Winograd path set (dc_llvm_set_winograd: 1 where
 * it pays, the default; 0 never; 2 wherever it is correct). */
dc_status *dc_emit_cpu_kernels_algo(const dc_module *m, const dc_cpu_target *t, int verbose, int winograd,
                                    dc_plan_kernels *out);

#endif
