/* test_op_lowering.c — the completeness test of ir/lowering.h: every op of
 * ir/ops.def is lowered by every backend (reference, llvm, cuda) with a
 * kernel or carries a mark saying why not; each backend's marks agree with
 * its kernel table (a mark on an op that has a kernel is stale, a kernel
 * without the KERNEL answer is unreachable); an llvm op that runs its
 * reference kernel has one; and a plan that needs an op its target does
 * not lower is refused at compile time, naming the node, the op and its
 * module path.  (That every lowered op has rows in the case table, on each
 * backend that lowers it, is test_op_cases's own check.) */
#include <string.h>

#include "codegen/cuda/cuda_codegen.h"
#include "codegen/emit_cuda.h"
#include "codegen/emit_kernels.h"
#include "codegen/llvm/llvm_codegen.h"
#include "ir/lowering.h"
#include "kernel_harness.h"
#include "runtime/kernels.h"
#include "testutil.h"

typedef struct {
  const char *name;
  dc_lowering_fn lowering;
  int (*has_kernel)(dc_op op);
} backend;

static int ref_has_kernel(dc_op op) { return dc_ref_kernel_for(op) != NULL; }

static const backend backends[] = {
  {"reference", dc_ref_lowering, ref_has_kernel},
  {"llvm", dc_llvm_lowering, dc_llvm_has_kernel},
  {"cuda", dc_cuda_lowering, dc_cuda_has_generator},
};

static void check_op(const backend *b, dc_op op) {
  const char *name = dc_op_get(op)->name;
  dc_lowering l = b->lowering(op);
  int kernel = b->has_kernel(op);
  int ok = l.how != DC_LOWER_UNMARKED && (l.how == DC_LOWER_KERNEL) == (kernel != 0) &&
           (l.how == DC_LOWER_KERNEL || (l.why && *l.why));
  if (l.how == DC_LOWER_REFERENCE) ok = ok && strcmp(b->name, "llvm") == 0 && dc_ref_kernel_for(op) != NULL;
  if (dc_op_get(op)->flags & OPF_TEST) ok = ok && l.how == DC_LOWER_REFUSED;
  CHECK(ok);
  printf("%-10s %-20s %-9s%s%s%s\n", b->name, name, dc_lower_how_name(l.how), kernel ? " (has a kernel)" : "",
         l.why ? ": " : "", l.why ? l.why : "");
  if (!ok) fprintf(stderr, "  <-- %s: op %s: no kernel and no mark, a stale mark, or a mark without a reason\n",
                   b->name, name);
}

static void check_completeness(void) {
  for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++)
    for (int op = 0; op < OP_COUNT; op++) check_op(&backends[b], (dc_op)op);
}

/* A module with one probe node (the op no backend lowers) under a scope. */
static dc_module *probe_module(void) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 1, (int64_t[]){4});
  dc_node n = dc_node_make(OP_PROBE, 1, &x);
  n.type = (dc_type){DT_F32, 1, {4}};
  n.scope = "blocks.0.probe";
  dc_module_add_node(m, &n);
  return m;
}

static void check_refusals(void) {
  dc_module *m = probe_module();
  dc_cpu_target t;
  CHECK_OK(dc_cpu_target_named("native", &t));
  dc_cpu_emit_options eo = {.no_cache = 1};
  dc_plan_kernels k;
  CHECK_ERR(dc_emit_cpu_kernels(m, &t, &eo, &k),
            "--target cpu: node %1 (probe in blocks.0.probe) cannot run there yet: probe is an op for the IR's own "
            "tests");
  dc_cpu_target_deinit(&t);
  dc_cuda_emit_options co = {.no_cache = 1};
  dc_plan_cuda cuda;
  CHECK_ERR(dc_emit_cuda_kernels(m, NULL, &co, &cuda, NULL),
            "--target cuda: node %1 (probe in blocks.0.probe) cannot run there yet");
  dc_module_destroy(m);
}

/* An op with neither a kernel nor a mark is refused too (never a crash). */
static dc_lowering only_leaves_lowered(dc_op op) {
  if (dc_op_get(op)->flags & OPF_LEAF) return (dc_lowering){DC_LOWER_RUNTIME, "a leaf"};
  return (dc_lowering){DC_LOWER_UNMARKED, NULL};
}

static void check_unmarked_refused(void) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 1, (int64_t[]){4});
  dc_node n = dc_node_make(OP_SILU, 1, &x);
  n.scope = "mid_block.act";
  kh_node(m, n);
  CHECK_ERR(dc_lowering_check(m, "cpu", only_leaves_lowered),
            "--target cpu: node %1 (silu in mid_block.act) cannot run there yet: its op has no kernel and no mark for "
            "this target");
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  check_completeness();
  check_refusals();
  check_unmarked_refused();
  return tu_finish();
}
