/* layout.c — pass "layout" (diffc --layout nhwc: channels_last).
 * Requires: a verified, fused module (after fuse-epilogue and cast-weights).
 * Guarantees: every 4-D conv2d and group_norm, and the layout-blind ops
 *   (add, mul, silu, gelu, clamp, cast, upsample, concat, slice, blend) whose
 *   4-D data comes from them, run in NHWC: their values are [N,H,W,C] and
 *   labelled nhwc, axis attributes remapped.  Conv weights are repacked at
 *   compile time ([O,C,kh,kw] -> [O,kh,kw,C], dc_weight.repack_pending;
 *   driver/weight_store.c writes them beside the plan).  A permute appears
 *   only where an NCHW value enters a region or an NHWC one leaves it, and
 *   permute chains are composed as they are built: an identity vanishes (a
 *   transformer's "permute(0,2,3,1) + reshape" token entry then reads the
 *   NHWC value as it is), and a permute that only moves size-1 dims becomes
 *   a reshape (a [N,C,1,1] time embedding).
 * Numbers: the same sums on the same values; the reference kernels are
 *   bit-identical in NHWC, generated kernels may sum a conv in another order.
 * Leaves the permutes it bypassed for dce. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

static const int64_t TO_NHWC[4] = {0, 2, 3, 1}, TO_NCHW[4] = {0, 3, 1, 2};
/* Where NCHW axis a lives in an NHWC value. */
static const int64_t NHWC_AXIS[4] = {0, 3, 1, 2};

typedef struct {
  dc_module *m;
  const dc_node *old; /* the module before the pass */
  int32_t nold;
  unsigned char *nhwc;      /* per old node: its value is NHWC after the pass */
  unsigned char *repack;    /* per old weight node: repacked at compile time */
  int32_t *map;             /* old id -> new id */
  int32_t *as_nhwc, *as_nchw; /* old id -> its value converted (new id), -1 until asked */
  int nconv, nnorm, nrepacked;
} lx;

static dc_status *add(lx *c, const dc_node *n, int32_t *id) {
  *id = dc_module_add_node(c->m, n);
  return *id < 0 ? dc_nomem("rewriting the layout") : NULL;
}

static int is_identity(const int64_t *p, int rank) {
  for (int i = 0; i < rank; i++)
    if (p[i] != i) return 0;
  return 1;
}

/* True when permuting by p keeps the order of every dim larger than 1: the
 * bytes do not move, a reshape is enough. */
static int moves_only_ones(const dc_type *t, const int64_t *p) {
  int64_t last = -1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[p[i]] == 1) continue;
    if (p[i] < last) return 0;
    last = p[i];
  }
  return 1;
}

static dc_status *emit_reshape(lx *c, int32_t v, const dc_type *t, dc_layout label, const char *scope, int32_t *out) {
  if (c->m->nodes[v].op == OP_RESHAPE) v = c->m->nodes[v].inputs[0]; /* reshape of a reshape: one */
  dc_node r = dc_node_make(OP_RESHAPE, 1, &v);
  r.type = *t;
  r.layout = label;
  r.device = c->m->nodes[v].device;
  r.scope = scope;
  return add(c, &r, out);
}

/* permute(v, p) in the new module, composed with v's own permute when it is
 * one.  label: the result's layout; an identity result takes it only when it
 * is nhwc (an NHWC reader needs the label; an NCHW reader reads bytes). */
static dc_status *emit_permute(lx *c, int32_t v, const int64_t *p, dc_layout label, const char *scope,
                               int32_t *out) {
  const dc_node *x = &c->m->nodes[v];
  int64_t q[4];
  int32_t src = v;
  for (int i = 0; i < 4; i++) q[i] = p[i];
  if (x->op == OP_PERMUTE && x->nlist == 4) {
    for (int i = 0; i < 4; i++) q[i] = x->list[p[i]];
    src = x->inputs[0];
  }
  const dc_type *st = &c->m->nodes[src].type;
  if (is_identity(q, 4)) {
    if (label == LAYOUT_NHWC) c->m->nodes[src].layout = LAYOUT_NHWC;
    return *out = src, NULL;
  }
  dc_type t = *st;
  for (int i = 0; i < 4; i++) t.dims[i] = st->dims[q[i]];
  if (moves_only_ones(st, q)) return emit_reshape(c, src, &t, label, scope, out);
  dc_node n = dc_node_make(OP_PERMUTE, 1, &src);
  n.nlist = 4;
  for (int i = 0; i < 4; i++) n.list[i] = q[i];
  n.type = t;
  n.layout = label;
  n.device = c->m->nodes[src].device;
  n.scope = scope;
  return add(c, &n, out);
}

/* Old value v as an NHWC operand of a 4-D op (rank < 4 operands broadcast
 * from the right, so they are first made 4-D with leading ones). */
static dc_status *to_nhwc(lx *c, int32_t v, const char *scope, int32_t *out) {
  if (c->nhwc[v]) return *out = c->map[v], NULL;
  if (c->as_nhwc[v] >= 0) return *out = c->as_nhwc[v], NULL;
  int32_t nv = c->map[v];
  const dc_type *t = &c->m->nodes[nv].type;
  if (t->rank > 4)
    return dc_error(DC_ERR_INTERNAL, "layout: %s reads a rank-%d value in NHWC", scope ? scope : "?", t->rank);
  if (t->rank < 4) {
    dc_type t4 = {t->dtype, 4, {1, 1, 1, 1}};
    for (int i = 0; i < t->rank; i++) t4.dims[4 - t->rank + i] = t->dims[i];
    DC_TRY(emit_reshape(c, nv, &t4, LAYOUT_NCHW, scope, &nv));
  }
  DC_TRY(emit_permute(c, nv, TO_NHWC, LAYOUT_NHWC, scope, out));
  c->as_nhwc[v] = *out;
  return NULL;
}

/* Old NHWC value v as an NCHW operand, for a reader outside the region. */
static dc_status *to_nchw(lx *c, int32_t v, const char *scope, int32_t *out) {
  if (!c->nhwc[v]) return *out = c->map[v], NULL;
  if (c->as_nchw[v] >= 0) return *out = c->as_nchw[v], NULL;
  DC_TRY(emit_permute(c, c->map[v], TO_NCHW, LAYOUT_NCHW, scope, out));
  c->as_nchw[v] = *out;
  return NULL;
}

/* ---- deciding --------------------------------------------------------- */

static int full_shape_nhwc(const lx *c, const dc_node *n) {
  for (int k = 0; k < n->ninputs; k++) {
    int32_t v = n->inputs[k];
    if (c->nhwc[v] && dc_type_equal(&c->old[v].type, &n->type)) return 1;
  }
  return 0;
}

/* Whether old node i runs in NHWC: conv2d and group_norm always (they seed
 * the regions), the layout-blind ops when their data arrives in NHWC. */
static int runs_nhwc(const lx *c, int32_t i) {
  const dc_node *n = &c->old[i];
  if (n->type.rank != 4) return 0;
  int in0 = n->ninputs > 0 && c->nhwc[n->inputs[0]], in1 = n->ninputs > 1 && c->nhwc[n->inputs[1]];
  switch (n->op) {
    case OP_CONV2D:
    case OP_GROUP_NORM: return 1;
    case OP_UPSAMPLE:
    case OP_SILU:
    case OP_GELU:
    case OP_CLAMP:
    case OP_SLICE: return in0;
    case OP_CAST: return in0 && c->old[n->inputs[0]].op != OP_WEIGHT;
    case OP_ADD:
    case OP_MUL: return full_shape_nhwc(c, n);
    case OP_CONCAT:
    case OP_BLEND: return in0 || in1;
    default: return 0;
  }
}

/* Whether old node i's every reader is an NHWC conv reading it as its
 * weight (vacuously true for a node nothing reads: a cast that
 * cast-weights bypassed, left for dce). */
static int only_nhwc_conv_weight_readers(const lx *c, int32_t i) {
  for (int32_t j = i + 1; j < c->nold; j++) {
    const dc_node *n = &c->old[j];
    for (int k = 0; k < n->ninputs; k++)
      if (n->inputs[k] == i && !(n->op == OP_CONV2D && k == 1 && c->nhwc[j])) return 0;
  }
  return 1;
}

static int is_weight_cast(const lx *c, int32_t i, int32_t w) {
  return c->old[i].op == OP_CAST && c->old[i].inputs[0] == w;
}

/* repack[w] = 1 for a 4-D weight read only as an NHWC conv's weight, directly
 * or through casts read only that way; its casts are repacked with it.  A
 * weight read any other way stays as it is and is permuted at run time. */
static void decide_repacks(lx *c) {
  for (int32_t w = 0; w < c->nold; w++) {
    if (c->old[w].op != OP_WEIGHT || c->old[w].type.rank != 4) continue;
    int ok = 1;
    for (int32_t j = w + 1; j < c->nold && ok; j++) {
      const dc_node *n = &c->old[j];
      for (int k = 0; k < n->ninputs && ok; k++) {
        if (n->inputs[k] != w) continue;
        if (is_weight_cast(c, j, w)) ok = only_nhwc_conv_weight_readers(c, j);
        else ok = n->op == OP_CONV2D && k == 1 && c->nhwc[j];
      }
    }
    if (!ok) continue;
    c->repack[w] = 1;
    for (int32_t j = w + 1; j < c->nold; j++)
      if (is_weight_cast(c, j, w)) c->repack[j] = 1;
  }
}

/* ---- rewriting -------------------------------------------------------- */

static void permute_dims(dc_type *t) {
  dc_type s = *t;
  for (int i = 0; i < 4; i++) t->dims[i] = s.dims[TO_NHWC[i]];
}

static dc_status *emit_repacked(lx *c, int32_t i) {
  dc_node n = c->old[i];
  if (n.op == OP_WEIGHT) {
    dc_weight *w = &c->m->weights[n.ref];
    if (w->repack_pending) return dc_error(DC_ERR_INTERNAL, "layout: weight %s repacked twice", w->name);
    permute_dims(&w->type);
    w->repack_pending = 1;
    c->nrepacked++;
  } else {
    n.inputs[0] = c->map[n.inputs[0]];
  }
  permute_dims(&n.type);
  n.layout = LAYOUT_NHWC;
  c->nhwc[i] = 1;
  return add(c, &n, &c->map[i]);
}

static int is_param_slot(const dc_node *n, int k) {
  if (n->op == OP_CONV2D) return k == 2 && dc_node_int(n, "bias");
  return n->op == OP_GROUP_NORM && k >= 1;
}

static dc_status *emit_nhwc(lx *c, int32_t i) {
  dc_node n = c->old[i];
  for (int k = 0; k < n.ninputs; k++) {
    if (is_param_slot(&n, k)) n.inputs[k] = c->map[n.inputs[k]];
    else DC_TRY(to_nhwc(c, n.inputs[k], n.scope, &n.inputs[k]));
  }
  int ax = dc_op_attr_index(n.op, "axis");
  if (ax >= 0) n.attrs[ax].i = NHWC_AXIS[n.attrs[ax].i];
  n.layout = LAYOUT_NHWC;
  if (n.op == OP_CAST) permute_dims(&n.type);
  else DC_TRY(dc_infer_type(c->m, &n, &n.type));
  c->nconv += n.op == OP_CONV2D;
  c->nnorm += n.op == OP_GROUP_NORM;
  return add(c, &n, &c->map[i]);
}

static dc_status *emit_nchw(lx *c, int32_t i) {
  dc_node n = c->old[i];
  if (n.op == OP_PERMUTE && n.nlist == 4 && c->nhwc[n.inputs[0]]) { /* composes with the edge's permute */
    int32_t e;
    DC_TRY(to_nchw(c, n.inputs[0], n.scope, &e));
    return emit_permute(c, e, n.list, n.layout, n.scope, &c->map[i]);
  }
  for (int k = 0; k < n.ninputs; k++) DC_TRY(to_nchw(c, n.inputs[k], n.scope, &n.inputs[k]));
  return add(c, &n, &c->map[i]);
}

static int is_output(const lx *c, int32_t old_id) {
  for (int i = 0; i < c->m->noutputs; i++)
    if (c->m->outputs[i].node == old_id) return 1;
  return 0;
}

static dc_status *rewrite(lx *c) {
  for (int32_t i = 0; i < c->nold; i++) {
    if (c->repack[i] == 1) DC_TRY(emit_repacked(c, i));
    else if (c->nhwc[i]) DC_TRY(emit_nhwc(c, i));
    else DC_TRY(emit_nchw(c, i));
    int32_t back; /* an NHWC output leaves the region right where it is made, in its own phase */
    if (c->nhwc[i] && is_output(c, i)) DC_TRY(to_nchw(c, i, c->old[i].scope, &back));
  }
  for (int i = 0; i < c->m->ninputs; i++) c->m->inputs[i].node = c->map[c->m->inputs[i].node];
  for (int i = 0; i < c->m->noutputs; i++) {
    int32_t v = c->m->outputs[i].node;
    DC_TRY(to_nchw(c, v, c->old[v].scope, &c->m->outputs[i].node));
  }
  return NULL;
}

static dc_status *describe(lx *c) {
  char what[200];
  snprintf(what, sizeof what, "nhwc: %d conv2d and %d group_norm channels-last, %d conv weights repacked",
           c->nconv, c->nnorm, c->nrepacked);
  return dc_module_set_meta(c->m, "layout", what);
}

dc_status *dc_pass_layout(dc_module *m, const dc_memory_options *o) {
  if (!o || o->layout != LAYOUT_NHWC) return NULL;
  /* The frontend labels its own [N,H,W,C] values (a transformer's token
   * entry and exit) nhwc too: only an op that reads its layout tells. */
  for (int32_t i = 0; i < m->nnodes; i++) {
    dc_op op = m->nodes[i].op;
    if (m->nodes[i].layout == LAYOUT_NHWC && (op == OP_CONV2D || op == OP_GROUP_NORM || op == OP_UPSAMPLE))
      return dc_error(DC_ERR_INTERNAL, "layout: the module is NHWC already");
  }
  lx c = {.m = m, .nold = m->nnodes};
  dc_node *old = dc_malloc(sizeof *old * (size_t)(m->nnodes + 1));
  c.nhwc = dc_calloc((size_t)m->nnodes + 1, 1);
  c.repack = dc_calloc((size_t)m->nnodes + 1, 1);
  c.map = dc_calloc((size_t)m->nnodes + 1, sizeof *c.map);
  c.as_nhwc = dc_calloc((size_t)m->nnodes + 1, sizeof *c.as_nhwc);
  c.as_nchw = dc_calloc((size_t)m->nnodes + 1, sizeof *c.as_nchw);
  dc_status *st = old && c.nhwc && c.repack && c.map && c.as_nhwc && c.as_nchw ? NULL : dc_nomem("the layout pass");
  if (!st) {
    memcpy(old, m->nodes, sizeof *old * (size_t)m->nnodes);
    c.old = old;
    for (int32_t i = 0; i < c.nold; i++) c.as_nhwc[i] = c.as_nchw[i] = -1;
    for (int32_t i = 0; i < c.nold; i++) c.nhwc[i] = (unsigned char)runs_nhwc(&c, i);
    decide_repacks(&c);
    m->nnodes = 0;
    st = rewrite(&c);
  }
  if (!st) st = describe(&c);
  dc_free(old), dc_free(c.nhwc), dc_free(c.repack), dc_free(c.map), dc_free(c.as_nhwc), dc_free(c.as_nchw);
  return st;
}
