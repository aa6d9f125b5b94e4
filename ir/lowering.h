/* lowering.h — how a backend lowers each op of ir/ops.def: with a kernel of
 * its own, or a mark that says why not.  Each backend answers for every op
 * through one function beside its kernel table (dc_ref_lowering in
 * runtime/kernels_ref.c, dc_llvm_lowering in codegen/llvm/k_table.c,
 * dc_cuda_lowering in codegen/cuda/g_table.c); tests/test_op_lowering.c
 * checks that every op has a kernel or a mark on every backend, and that a
 * backend's marks agree with its kernel table.  dc_lowering_check turns the
 * marks into the compile-time refusal: a plan that needs an op its target
 * does not lower is refused, naming the node, its op and its module path,
 * before any kernel is generated — never a wrong or crashing plan. */
#ifndef DC_LOWERING_H
#define DC_LOWERING_H

#include "ir/ir.h"

typedef enum {
  DC_LOWER_UNMARKED = 0, /* no kernel and no mark: the completeness test fails, compiles refuse */
  DC_LOWER_KERNEL,       /* the backend has a kernel (or generator) for it */
  DC_LOWER_RUNTIME,      /* needs no kernel: a leaf or a copy the runtime does itself */
  DC_LOWER_REFERENCE,    /* the llvm backend only: the step runs the op's reference kernel */
  DC_LOWER_REFUSED,      /* not lowered here: a plan that needs it is refused (why says so) */
} dc_lower_how;

typedef struct {
  dc_lower_how how;
  const char *why; /* for the marks: one clause a refusal message ends with */
} dc_lowering;

typedef dc_lowering (*dc_lowering_fn)(dc_op op);

const char *dc_lower_how_name(dc_lower_how how);

/* NULL when every node of m is lowered by `lowering` (target names it in
 * the message: "cpu", "cuda"); else an error for the first node that is
 * not: "--target cuda: node %2 (constant in time_proj.scale) cannot run
 * there yet: WHY". */
dc_status *dc_lowering_check(const dc_module *m, const char *target, dc_lowering_fn lowering);

#endif
