/* liveness.c — the activation memory model that the IR dump predicts and
 * the runtime measures: one definition, so the two agree exactly.
 *
 * A non-leaf value is allocated just before its node runs and freed after
 * its last reader runs; a graph input is allocated before step 0; a graph
 * output lives to the end.  Weights are counted apart, as resident bytes. */
#include "ir.h"

static int is_output(const dc_module *m, int32_t id) {
  for (int i = 0; i < m->noutputs; i++)
    if (m->outputs[i].node == id) return 1;
  return 0;
}

dc_status *dc_liveness_compute(const dc_module *m, dc_liveness *l) {
  int32_t n = m->nnodes;
  l->last_use = dc_calloc((size_t)n, sizeof *l->last_use);
  l->live_bytes = dc_calloc((size_t)n, sizeof *l->live_bytes);
  l->peak_bytes = 0;
  l->peak_step = 0;
  l->weight_bytes = 0;
  if (!l->last_use || !l->live_bytes) {
    dc_liveness_deinit(l);
    return dc_nomem("computing live ranges");
  }
  for (int32_t i = 0; i < n; i++) l->last_use[i] = i;
  for (int32_t i = 0; i < n; i++)
    for (int k = 0; k < m->nodes[i].ninputs; k++) l->last_use[m->nodes[i].inputs[k]] = i;
  for (int32_t i = 0; i < n; i++)
    if (is_output(m, i)) l->last_use[i] = n - 1;
  /* Difference array over steps: +bytes at the first step, -bytes after the last. */
  int64_t *delta = dc_calloc((size_t)n + 1, sizeof *delta);
  if (!delta) {
    dc_liveness_deinit(l);
    return dc_nomem("computing live ranges");
  }
  for (int32_t i = 0; i < n; i++) {
    const dc_node *node = &m->nodes[i];
    if (!dc_node_is_activation(node)) continue;
    int32_t first = node->op == OP_INPUT ? 0 : i;
    delta[first] += (int64_t)dc_type_bytes(&node->type);
    delta[l->last_use[i] + 1] -= (int64_t)dc_type_bytes(&node->type);
  }
  int64_t live = 0;
  for (int32_t s = 0; s < n; s++) {
    live += delta[s];
    l->live_bytes[s] = (uint64_t)live;
    if (l->live_bytes[s] > l->peak_bytes) {
      l->peak_bytes = l->live_bytes[s];
      l->peak_step = s;
    }
  }
  dc_free(delta);
  for (int32_t w = 0; w < m->nweights; w++) l->weight_bytes += m->weights[w].bytes;
  return NULL;
}

void dc_liveness_deinit(dc_liveness *l) {
  dc_free(l->last_use);
  dc_free(l->live_bytes);
  l->last_use = NULL;
  l->live_bytes = NULL;
}
