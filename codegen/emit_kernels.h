/* emit_kernels.h — compile a module's kernels for a CPU target into the
 * plan's KERN description (see runtime/plan_format.h). */
#ifndef DC_EMIT_KERNELS_H
#define DC_EMIT_KERNELS_H

#include "codegen/llvm/llvm_codegen.h"
#include "runtime/plan_format.h"

dc_status *dc_emit_cpu_kernels(const dc_module *m, const dc_cpu_target *t, int verbose, dc_plan_kernels *out);

#endif
