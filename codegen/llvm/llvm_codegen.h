/* llvm_codegen.h — CPU code generation through the LLVM C API.
 *
 * diffc builds one LLVM module per distinct kernel, optimizes it
 * (default<O3>) for the plan's CPU target (support/cpu_target.h) unless the
 * kernel cache has its object already (codegen/emit_kernels.c), and stores
 * the object code in the plan's KERN section.  diffrun maps the objects
 * with LLVM's ORC JIT linker (runtime/cpu_kernels.c): relocation only, no
 * compilation at run time.
 *
 * Every kernel has the C signature
 *     void kernel(void **bufs, int64_t part, int64_t nparts);
 * bufs[0] is the output, bufs[1..ninputs] the node's inputs in order, and
 * bufs[ninputs+1] the running thread's scratch (scratch_bytes, 64-byte
 * aligned, distinct per thread).  Shapes and attributes are compile-time
 * constants.  The kernel computes part `part` of an even split of its work
 * into `nparts`; the pool (support/threadpool.h) runs every part once, on
 * whichever thread claims it, and the step ends when all have finished.
 *
 * Sections (file: exports)
 *   codegen/llvm/kgen.c:    dc_llvm_* — module, per-node emission, cache key, object file
 *   codegen/llvm/k_*.c:     the kernels, one file per family (see kgen.h)
 */
#ifndef DC_LLVM_CODEGEN_H
#define DC_LLVM_CODEGEN_H

#include "ir/ir.h"
#include "ir/lowering.h"

#include "support/cpu_target.h"

typedef struct dc_llvm dc_llvm;

typedef struct {
  int32_t node;
  char *symbol;
  uint64_t scratch_bytes; /* per thread */
} dc_cpu_kernel;

dc_status *dc_llvm_create(const dc_cpu_target *t, dc_llvm **out);
void dc_llvm_destroy(dc_llvm *g);
/* Whether 3×3 stride-1 conv2d kernels emitted from now on use
 * Winograd F(2×2, 3×3): 1 (the default) where it pays, 0 never (every
 * conv2d is the direct one: comparisons, benchmarks), 2 wherever it is
 * correct, however small (tests). */
void dc_llvm_set_winograd(dc_llvm *g, int on);
/* Emits the kernel of node id.  *out is set (symbol owned by the caller)
 * or, when the op has no LLVM kernel yet, *has_kernel = 0 and the runtime
 * runs the reference kernel for that node. */
dc_status *dc_llvm_emit_node(dc_llvm *g, const dc_module *m, int32_t id, dc_cpu_kernel *out, int *has_kernel);
/* For a module holding one kernel k (just emitted): its cache key, an
 * xxh64 of the kernel's LLVM IR as generated (with a fixed entry name), the
 * target, the optimization pipeline and LLVM's version, that is of
 * everything its object code depends on; and the kernel renamed
 * "dck_<key in hex>_<op>[_<variant>]" (k->symbol too), so that equal kernels from any plan
 * have equal objects and two kernels in one plan never share a name unless
 * they are equal. */
dc_status *dc_llvm_kernel_key(dc_llvm *g, dc_cpu_kernel *k, uint64_t *key);
/* Verifies, optimizes and writes the object file into obj. */
dc_status *dc_llvm_finish(dc_llvm *g, dc_buf *obj);
/* The machine code of the module (after dc_llvm_finish) as assembly text,
 * dc_malloc'd: for tests that check what the micro-kernels compile to. */
dc_status *dc_llvm_asm_text(dc_llvm *g, char **out);
/* The LLVM IR text of the module (for tests and --dump-llvm). */
char *dc_llvm_ir_text(dc_llvm *g);

/* How the llvm backend lowers op: an LLVM kernel, or the mark that says
 * why it has none (ir/lowering.h; the marks are in k_table.c). */
dc_lowering dc_llvm_lowering(dc_op op);
int dc_llvm_has_kernel(dc_op op);

#endif
