/* kernel_group.h — which nodes share a kernel.  Nodes with equal signatures
 * (op, attributes, layout, every operand's type, plus whatever the target
 * adds, e.g. the CUDA compute precision) share one kernel: a UNet repeats
 * its blocks, so a model has far fewer distinct kernels than nodes.  Both
 * code generators group through here (codegen/emit_kernels.c for the CPU,
 * codegen/emit_cuda.c for CUDA). */
#ifndef DC_KERNEL_GROUP_H
#define DC_KERNEL_GROUP_H

#include "ir/ir.h"

/* Whether node id gets a generated kernel at all. */
typedef int (*dc_kernel_filter)(const dc_module *m, int32_t id);

typedef struct {
  int32_t *reps; /* the first node of each group, in schedule order */
  int nreps;
  int32_t *group_of; /* per node: its group (index into reps), -1 for none */
} dc_kernel_groups;

/* salt (may be NULL) is appended to every signature. */
dc_status *dc_kernel_groups_build(const dc_module *m, dc_kernel_filter has_kernel, const char *salt,
                                  dc_kernel_groups *out);
void dc_kernel_groups_deinit(dc_kernel_groups *g);

#endif
