/* dce.c — pass "dce" (dead-code elimination).
 * Requires: a verified module.
 * Guarantees: every node is an input or reaches an output; weights and
 *   weight files nothing reads are dropped; nodes renumbered in their
 *   original order (so the schedule order is kept).
 * Invalidates: node ids (the inputs/outputs tables are remapped here). */
#include "passes.h"

static dc_status *compact_weights(dc_module *m) {
  int32_t *wmap = dc_calloc((size_t)m->nweights + 1, sizeof *wmap);
  int32_t *fmap = dc_calloc((size_t)m->nfiles + 1, sizeof *fmap);
  if (!wmap || !fmap) {
    dc_free(wmap);
    dc_free(fmap);
    return dc_nomem("removing dead weights");
  }
  for (int32_t i = 0; i < m->nweights; i++) wmap[i] = -1;
  for (int32_t i = 0; i < m->nfiles; i++) fmap[i] = -1;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_WEIGHT) wmap[m->nodes[i].ref] = 0;
  int32_t nw = 0, nf = 0;
  for (int32_t i = 0; i < m->nweights; i++) {
    if (wmap[i] < 0) continue;
    if (fmap[m->weights[i].file] < 0) fmap[m->weights[i].file] = 0;
  }
  for (int32_t f = 0; f < m->nfiles; f++)
    if (fmap[f] == 0) {
      m->files[nf] = m->files[f];
      fmap[f] = nf++;
    }
  for (int32_t i = 0; i < m->nweights; i++) {
    if (wmap[i] < 0) continue;
    m->weights[nw] = m->weights[i];
    m->weights[nw].file = fmap[m->weights[nw].file];
    wmap[i] = nw++;
  }
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_WEIGHT) m->nodes[i].ref = wmap[m->nodes[i].ref];
  m->nweights = nw;
  m->nfiles = nf;
  dc_free(wmap);
  dc_free(fmap);
  return NULL;
}

dc_status *dc_pass_dce(dc_module *m) {
  unsigned char *live = dc_calloc((size_t)m->nnodes + 1, 1);
  int32_t *map = dc_calloc((size_t)m->nnodes + 1, sizeof *map);
  if (!live || !map) {
    dc_free(live);
    dc_free(map);
    return dc_nomem("removing dead code");
  }
  for (int i = 0; i < m->noutputs; i++) live[m->outputs[i].node] = 1;
  for (int i = 0; i < m->ninputs; i++) live[m->inputs[i].node] = 1; /* the signature stays */
  for (int32_t i = m->nnodes - 1; i >= 0; i--)
    if (live[i])
      for (int k = 0; k < m->nodes[i].ninputs; k++) live[m->nodes[i].inputs[k]] = 1;
  int32_t n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (!live[i]) continue;
    dc_node node = m->nodes[i];
    for (int k = 0; k < node.ninputs; k++) node.inputs[k] = map[node.inputs[k]];
    map[i] = n;
    m->nodes[n++] = node;
  }
  m->nnodes = n;
  for (int i = 0; i < m->ninputs; i++) m->inputs[i].node = map[m->inputs[i].node];
  for (int i = 0; i < m->noutputs; i++) m->outputs[i].node = map[m->outputs[i].node];
  dc_free(live);
  dc_free(map);
  return compact_weights(m);
}
