/* fuse_norm_act.c — pass "fuse-norm-act": a group_norm whose only reader is
 * an activation computes the activation itself (group_norm{act=silu|gelu}),
 * as every resnet's norm1/norm2 → nonlinearity and the decoder's
 * conv_norm_out → conv_act do.  One kernel, and the normalized tensor never
 * exists in memory on its own.
 * Requires: a verified module.
 * Guarantees: no group_norm with act=none is read only by a silu or gelu
 *   (unless it is a graph output); the fused group_norm takes its own place
 *   in the schedule; results are bit-identical (the reference kernel applies
 *   the same scalar silu/gelu after the affine); the absorbed activation is
 *   named in the node's `absorbed` note, e.g. "silu(down_blocks.0.resnets.0.nonlinearity)".
 * Invalidates: node ids (the absorbed nodes are removed, the rest keep
 *   their order, renumbered). */
#include "fuse_common.h"

static dc_act act_of(dc_op op) {
  return op == OP_SILU ? ACT_SILU : op == OP_GELU ? ACT_GELU : ACT_NONE;
}

static dc_status *match(dc_fuse *f, int32_t c) {
  const dc_node *nc = &f->m->nodes[c];
  dc_act act = act_of(nc->op);
  if (act == ACT_NONE) return NULL;
  int32_t p = nc->inputs[0];
  const dc_node *np = &f->m->nodes[p];
  if (np->op != OP_GROUP_NORM || dc_node_int(np, "act") != ACT_NONE || !dc_fuse_single_reader(f, p, c))
    return NULL;
  dc_node fused = *np;
  dc_node_set_int(&fused, "act", act);
  return dc_fuse_commit(f, p, c, &fused);
}

dc_status *dc_pass_fuse_norm_act(dc_module *m) {
  return dc_fuse_run(m, match);
}
