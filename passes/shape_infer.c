/* shape_infer.c — pass "shape-infer".
 * Requires: nodes in topological order (inputs before readers).
 * Guarantees: every node's type is the one its op's rule derives from its
 *   inputs (ir/infer.c); given types (input, weight, reshape, cast) checked.
 * Invalidates: nothing. */
#include "passes.h"

dc_status *dc_pass_shape_infer(dc_module *m) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    dc_node *n = &m->nodes[i];
    for (int k = 0; k < n->ninputs; k++)
      if (n->inputs[k] < 0 || n->inputs[k] >= i)
        return dc_error(DC_ERR_INTERNAL, "%%%d reads %%%d, which is not an earlier node", i, n->inputs[k]);
    dc_type t;
    DC_TRY(dc_status_annotate(dc_infer_type(m, n, &t), "%%%d", i));
    n->type = t;
  }
  return NULL;
}
