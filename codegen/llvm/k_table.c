/* k_table.c — which ops have an LLVM kernel, and where.  An op missing here
 * runs its reference kernel (the runtime says so with --verbose). */
#include "kgen.h"

dc_status *dc_k_silu(dc_kgen *g);

dc_kgen_emit_fn dc_kgen_emitter_for(dc_op op) {
  switch (op) {
    case OP_SILU: return dc_k_silu;
    default: return NULL;
  }
}
