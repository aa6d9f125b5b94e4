/* fuse_epilogue.c — pass "fuse-epilogue": folds what follows a conv2d or a
 * linear into its epilogue (ops.def: y = op(x) + bias; y = act(y); y += r):
 *   silu / gelu reading it          -> act=silu / act=gelu
 *   geglu reading a linear          -> act=geglu (the linear's output halves)
 *   quick_gelu reading a linear     -> act=quick_gelu (CLIP's mlp.fc1)
 *   add(p, r), or add(r, p) when r has p's shape
 *                                   -> residual=1, r appended as the last input
 *   gated_add(r, p, mod) reading a linear
 *                                   -> residual=1 gate=1 gate_at=at, r then
 *                                      mod appended (r + mod-chunk * p)
 * in that order, so conv → silu → add becomes one node.  In the diffusers
 * graphs: time_embedding.linear_1 + act, every resnet's conv1 + the time
 * embedding add and conv2 (or conv_shortcut) + the skip add, attention
 * to_out + the residual, ff.net.0.proj + GEGLU, ff.net.2 + the residual,
 * proj_out + the residual; in a DiT block, to_out / ff.net.2 / proj_out +
 * its gated residual.
 * Requires: a verified module.
 * Guarantees: a producer is folded only into its single reader, never when
 *   its value is a graph output, and only in epilogue order (no act after a
 *   residual, nothing after geglu but a residual); the schedule stays
 *   topological (the fused node takes the producer's place when every input
 *   it reads comes before it, else the consumer's: a residual computed after
 *   the producer); results are bit-identical (the reference kernels run the
 *   same scalar code as the separate ops); each fused node names what it
 *   absorbed, e.g. "silu(down_blocks.0.resnets.0.nonlinearity), add(down_blocks.0.resnets.0)".
 * Invalidates: node ids (the absorbed nodes are removed, the rest keep
 *   their order, renumbered). */
#include "fuse_common.h"

/* p is a conv2d/linear whose epilogue is still empty up to `stage`:
 * an act may be added while act=none and residual=0; a residual while
 * residual=0 (whatever the act). */
enum { STAGE_ACT, STAGE_RESIDUAL };
static int open_epilogue(const dc_node *np, int stage) {
  if (np->op != OP_CONV2D && np->op != OP_LINEAR) return 0;
  if (dc_node_int(np, "residual")) return 0;
  return stage == STAGE_RESIDUAL || dc_node_int(np, "act") == ACT_NONE;
}

static dc_status *fuse_act(dc_fuse *f, int32_t c, dc_act act) {
  int32_t p = f->m->nodes[c].inputs[0];
  const dc_node *np = &f->m->nodes[p];
  if (!open_epilogue(np, STAGE_ACT) || !dc_fuse_single_reader(f, p, c)) return NULL;
  if ((act == ACT_GEGLU || act == ACT_QUICK_GELU || act == ACT_GELU_TANH) && np->op != OP_LINEAR) return NULL;
  dc_node fused = *np;
  dc_node_set_int(&fused, "act", act);
  return dc_fuse_commit(f, p, c, &fused);
}

/* add(a, b) is a + b with b broadcast onto a: the producer folds in as a,
 * or as b when both have one shape (then a + b == b + a, bit for bit). */
static int residual_ok(const dc_fuse *f, int32_t p, int32_t r, int32_t c, int p_is_b) {
  const dc_node *np = &f->m->nodes[p];
  if (p == r || !open_epilogue(np, STAGE_RESIDUAL) || !dc_fuse_single_reader(f, p, c)) return 0;
  if (np->ninputs >= DC_MAX_INPUTS) return 0;
  return !p_is_b || dc_type_equal(&np->type, &f->m->nodes[r].type);
}

static dc_status *fuse_residual(dc_fuse *f, int32_t c) {
  int32_t a = f->m->nodes[c].inputs[0], b = f->m->nodes[c].inputs[1], p, r;
  int a_ok = residual_ok(f, a, b, c, 0), b_ok = residual_ok(f, b, a, c, 1);
  if (!a_ok && !b_ok) return NULL;
  /* Both qualify (conv2 + conv_shortcut): take the later one, so the
   * residual already exists there and the fused node keeps its place. */
  if (a_ok && (!b_ok || a > b)) p = a, r = b;
  else p = b, r = a;
  dc_node fused = f->m->nodes[p];
  dc_node_set_int(&fused, "residual", 1);
  fused.inputs[fused.ninputs++] = r;
  return dc_fuse_commit(f, p, c, &fused);
}

/* gated_add(r, p, mod) = r + mod[b, at + n] * p: p (input 1) folds in, r
 * becomes its residual and mod its gate.  Only a linear: the gate's row is
 * the output row's sample, which conv2d's NCHW output does not give. */
static dc_status *fuse_gated(dc_fuse *f, int32_t c) {
  const dc_node *nc = &f->m->nodes[c];
  int32_t r = nc->inputs[0], p = nc->inputs[1], mod = nc->inputs[2];
  const dc_node *np = &f->m->nodes[p];
  if (np->op != OP_LINEAR || p == r || p == mod || !open_epilogue(np, STAGE_RESIDUAL)) return NULL;
  if (!dc_fuse_single_reader(f, p, c) || np->ninputs + 2 > DC_MAX_INPUTS) return NULL;
  dc_node fused = *np;
  dc_node_set_int(&fused, "residual", 1);
  dc_node_set_int(&fused, "gate", 1);
  dc_node_set_int(&fused, "gate_at", dc_node_int(nc, "at"));
  fused.inputs[fused.ninputs++] = r;
  fused.inputs[fused.ninputs++] = mod;
  return dc_fuse_commit(f, p, c, &fused);
}

static dc_status *match(dc_fuse *f, int32_t c) {
  switch (f->m->nodes[c].op) {
  case OP_SILU: return fuse_act(f, c, ACT_SILU);
  case OP_GELU: return fuse_act(f, c, ACT_GELU);
  case OP_GEGLU: return fuse_act(f, c, ACT_GEGLU);
  case OP_QUICK_GELU: return fuse_act(f, c, ACT_QUICK_GELU);
  case OP_GELU_TANH: return fuse_act(f, c, ACT_GELU_TANH);
  case OP_ADD: return fuse_residual(f, c);
  case OP_GATED_ADD: return fuse_gated(f, c);
  default: return NULL;
  }
}

dc_status *dc_pass_fuse_epilogue(dc_module *m) {
  return dc_fuse_run(m, match);
}
