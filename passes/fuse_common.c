/* fuse_common.c — the driver of the fusion passes (see fuse_common.h).
 *
 * Why a driver: both fusion passes fold a consumer into its producer, and the
 * delicate part is the same for both — keeping reader counts exact while the
 * graph changes under the sweep, choosing where the fused node goes so the
 * schedule stays topological, and removing what was absorbed so the verifier
 * sees a clean graph (a consumer absorbed in place of a geglu'd linear would
 * no longer type-check).  It removes only what fusion absorbed: other dead
 * code is dce's to judge, and until dce has run it counts as a reader (a
 * missed fusion at worst, never a wrong one).  The passes only say which
 * (producer, consumer) pairs fuse. */
#include "fuse_common.h"

static void count_edges(dc_fuse *f, const dc_node *n, int delta) {
  for (int k = 0; k < n->ninputs; k++) f->readers[n->inputs[k]] += delta;
}

static dc_status *fuse_init(dc_fuse *f, dc_module *m) {
  f->m = m;
  f->readers = dc_calloc((size_t)m->nnodes + 1, sizeof *f->readers);
  f->repl = dc_calloc((size_t)m->nnodes + 1, sizeof *f->repl);
  f->is_output = dc_calloc((size_t)m->nnodes + 1, 1);
  f->dead = dc_calloc((size_t)m->nnodes + 1, 1);
  if (!f->readers || !f->repl || !f->is_output || !f->dead) return dc_nomem("counting readers for fusion");
  for (int32_t i = 0; i < m->nnodes; i++) {
    f->repl[i] = i;
    count_edges(f, &m->nodes[i], +1);
  }
  for (int i = 0; i < m->noutputs; i++) f->is_output[m->outputs[i].node] = 1;
  return NULL;
}

static void fuse_deinit(dc_fuse *f) {
  dc_free(f->readers);
  dc_free(f->repl);
  dc_free(f->is_output);
  dc_free(f->dead);
}

/* A consumer absorbed in place of its producer leaves readers pointing at a
 * dead node; the sweep redirects each reader when it gets there (readers
 * come later in the schedule), the outputs are redirected at the end. */
static void redirect_inputs(dc_fuse *f, dc_node *n) {
  for (int k = 0; k < n->ninputs; k++) n->inputs[k] = f->repl[n->inputs[k]];
}

/* Drops the absorbed nodes and renumbers the rest in order (dce's method).
 * Every kept node was visited by the sweep, so none may still read a dropped
 * one; if one did, that is our bug, reported rather than compiled. */
static dc_status *drop_absorbed(dc_fuse *f) {
  dc_module *m = f->m;
  int32_t *map = f->repl, n = 0; /* repl is spent: the outputs were redirected */
  for (int32_t i = 0; i < m->nnodes; i++) {
    dc_node node = m->nodes[i];
    map[i] = -1;
    if (f->dead[i]) continue;
    for (int k = 0; k < node.ninputs; k++) {
      if (map[node.inputs[k]] < 0)
        return dc_error(DC_ERR_INTERNAL, "fusion left %%%d reading the absorbed %%%d", i, node.inputs[k]);
      node.inputs[k] = map[node.inputs[k]];
    }
    map[i] = n;
    m->nodes[n++] = node;
  }
  m->nnodes = n;
  for (int i = 0; i < m->ninputs; i++) m->inputs[i].node = map[m->inputs[i].node];
  for (int i = 0; i < m->noutputs; i++) m->outputs[i].node = map[m->outputs[i].node];
  return NULL;
}

dc_status *dc_fuse_run(dc_module *m, dc_fuse_match match) {
  dc_fuse f;
  dc_status *st = fuse_init(&f, m);
  for (int32_t c = 0; !st && c < m->nnodes; c++) {
    redirect_inputs(&f, &m->nodes[c]);
    st = match(&f, c);
  }
  for (int i = 0; !st && i < m->noutputs; i++) m->outputs[i].node = f.repl[m->outputs[i].node];
  if (!st) st = drop_absorbed(&f);
  fuse_deinit(&f);
  return st;
}

int dc_fuse_single_reader(const dc_fuse *f, int32_t p, int32_t c) {
  const dc_node *np = &f->m->nodes[p];
  return f->readers[p] == 1 && !f->is_output[p] && np->device == f->m->nodes[c].device;
}

static int32_t last_input(const dc_node *n) {
  int32_t last = -1;
  for (int k = 0; k < n->ninputs; k++)
    if (n->inputs[k] > last) last = n->inputs[k];
  return last;
}

dc_status *dc_fuse_commit(dc_fuse *f, int32_t p, int32_t c, const dc_node *fused) {
  dc_module *m = f->m;
  dc_node n = *fused;
  const char *prev = m->nodes[p].absorbed;
  n.type = m->nodes[c].type;
  n.layout = m->nodes[c].layout;
  /* Named by module path, not node number: numbers change when passes
   * renumber, so the final dump would point at unrelated nodes. */
  const char *scope = m->nodes[c].scope, *op = dc_op_get(m->nodes[c].op)->name;
  n.absorbed = scope ? dc_arena_printf(m->arena, "%s%s%s(%s)", prev ? prev : "", prev ? ", " : "", op, scope)
                     : dc_arena_printf(m->arena, "%s%s%s", prev ? prev : "", prev ? ", " : "", op);
  if (!n.absorbed) return dc_nomem("recording a fusion");
  count_edges(f, &m->nodes[p], -1);
  count_edges(f, &m->nodes[c], -1); /* drops c's edge to p: readers[p] is 0 now */
  count_edges(f, &n, +1);
  if (last_input(&n) < p) { /* at p: c's readers read p from now on */
    m->nodes[p] = n;
    f->repl[c] = p;
    f->readers[p] = f->readers[c];
    f->readers[c] = 0;
    f->is_output[p] = f->is_output[c];
    f->dead[c] = 1;
  } else { /* at c: p is left unread */
    m->nodes[c] = n;
    f->dead[p] = 1;
  }
  return NULL;
}
