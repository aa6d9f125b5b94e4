/* layers.c — see layers.h. */
#include "layers.h"

#include <assert.h>
#include <string.h>

const char *gb_path(char *buf, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, cap, fmt, ap);
  va_end(ap);
  (void)n; /* only the assert reads it */
  assert(n >= 0 && (size_t)n < cap && "module path too long for its buffer");
  return buf;
}

const dc_type *gb_type(const dc_gb *g, int32_t x) { return &g->m->nodes[x].type; }

int32_t gb_stored(const dc_gb *g, int32_t t) {
  const dc_node *n = &g->m->nodes[t];
  if (n->op != OP_CAST) return t;
  const dc_node *w = &g->m->nodes[n->inputs[0]];
  if (w->op != OP_WEIGHT || w->type.dtype == DT_F32) return t;
  return g->m->weights[w->ref].offset % (uint64_t)dc_dtype_size(w->type.dtype) ? t : n->inputs[0];
}

dc_status *gb_add(dc_gb *g, dc_node *n, const char *scope, int32_t *out) {
  n->scope = scope ? dc_arena_strdup(g->m->arena, scope) : NULL;
  if (scope && !n->scope) return dc_nomem("building the graph");
  /* For ops with a given type this checks it; for the others it derives it. */
  DC_TRY(dc_infer_type(g->m, n, &n->type));
  n->layout = n->type.rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  int32_t id = dc_module_add_node(g->m, n);
  if (id < 0) return dc_nomem("building the graph");
  *out = id;
  return NULL;
}

dc_status *gb_param(dc_gb *g, const char *prefix, const char *leaf, int rank, const int64_t *dims,
                    int32_t *out) {
  char name[512];
  return dc_weights_get(g->w, gb_path(name, sizeof name, "%s.%s", prefix, leaf), rank, dims, out);
}

dc_status *gb_conv2d(dc_gb *g, const char *prefix, int32_t x, int64_t cin, int64_t cout, int64_t k,
                     int64_t stride, const int64_t pad[4], int32_t *out) {
  int32_t in[3] = {x, -1, -1};
  DC_TRY(gb_param(g, prefix, "weight", 4, (int64_t[]){cout, cin, k, k}, &in[1]));
  DC_TRY(gb_param(g, prefix, "bias", 1, (int64_t[]){cout}, &in[2]));
  dc_node n = dc_node_make(OP_CONV2D, 3, in);
  dc_node_set_int(&n, "bias", 1);
  dc_node_set_int(&n, "stride", stride);
  dc_node_set_int(&n, "pad_t", pad[0]);
  dc_node_set_int(&n, "pad_b", pad[1]);
  dc_node_set_int(&n, "pad_l", pad[2]);
  dc_node_set_int(&n, "pad_r", pad[3]);
  return gb_add(g, &n, prefix, out);
}

dc_status *gb_conv2d_same(dc_gb *g, const char *prefix, int32_t x, int64_t cin, int64_t cout,
                          int64_t k, int64_t stride, int32_t *out) {
  int64_t p = k / 2;
  return gb_conv2d(g, prefix, x, cin, cout, k, stride, (int64_t[]){p, p, p, p}, out);
}

dc_status *gb_conv3d(dc_gb *g, const char *prefix, int32_t x, int64_t cin, int64_t cout, const int64_t k[3],
                     const int64_t stride[3], const int64_t pad_hw[2], int bias, int32_t *out) {
  int32_t in[3] = {x, -1, -1};
  DC_TRY(gb_param(g, prefix, "weight", 5, (int64_t[]){cout, cin, k[0], k[1], k[2]}, &in[1]));
  if (bias) DC_TRY(gb_param(g, prefix, "bias", 1, (int64_t[]){cout}, &in[2]));
  dc_node n = dc_node_make(OP_CONV3D, bias ? 3 : 2, in);
  dc_node_set_int(&n, "bias", bias ? 1 : 0);
  dc_node_set_int(&n, "stride_t", stride[0]);
  dc_node_set_int(&n, "stride_h", stride[1]);
  dc_node_set_int(&n, "stride_w", stride[2]);
  dc_node_set_int(&n, "pad_h", pad_hw[0]);
  dc_node_set_int(&n, "pad_w", pad_hw[1]);
  return gb_add(g, &n, prefix, out);
}

dc_status *gb_linear(dc_gb *g, const char *prefix, int32_t x, int64_t in_features, int64_t out_features,
                     int bias, int32_t *out) {
  int32_t in[3] = {x, -1, -1};
  DC_TRY(gb_param(g, prefix, "weight", 2, (int64_t[]){out_features, in_features}, &in[1]));
  if (bias) DC_TRY(gb_param(g, prefix, "bias", 1, (int64_t[]){out_features}, &in[2]));
  dc_node n = dc_node_make(OP_LINEAR, bias ? 3 : 2, in);
  dc_node_set_int(&n, "bias", bias ? 1 : 0);
  return gb_add(g, &n, prefix, out);
}

dc_status *gb_linear_halves_swapped(dc_gb *g, const char *prefix, int bias, int *swapped) {
  char w[512], b[512];
  int bias_swapped = 0;
  DC_TRY(dc_weights_halves_swapped(g->w, gb_path(w, sizeof w, "%s.weight", prefix), swapped));
  if (!bias) return NULL;
  DC_TRY(dc_weights_halves_swapped(g->w, gb_path(b, sizeof b, "%s.bias", prefix), &bias_swapped));
  if (bias_swapped == *swapped) return NULL;
  return dc_error(DC_ERR_INTERNAL, "%s: \"%s\" and \"%s\" disagree on the order of their halves", g->w->folder->dir, w,
                  b);
}

static dc_status *norm(dc_gb *g, dc_op op, const char *prefix, int32_t x, int64_t c, int64_t groups,
                       double eps, int32_t *out) {
  int32_t in[3] = {x, -1, -1};
  DC_TRY(gb_param(g, prefix, "weight", 1, &c, &in[1]));
  DC_TRY(gb_param(g, prefix, "bias", 1, &c, &in[2]));
  dc_node n = dc_node_make(op, 3, in);
  dc_node_set_float(&n, "eps", eps);
  if (op == OP_GROUP_NORM) dc_node_set_int(&n, "groups", groups);
  return gb_add(g, &n, prefix, out);
}

dc_status *gb_group_norm(dc_gb *g, const char *prefix, int32_t x, int64_t channels, int64_t groups,
                         double eps, int32_t *out) {
  return norm(g, OP_GROUP_NORM, prefix, x, channels, groups, eps, out);
}

dc_status *gb_layer_norm(dc_gb *g, const char *prefix, int32_t x, int64_t channels, double eps,
                         int32_t *out) {
  return norm(g, OP_LAYER_NORM, prefix, x, channels, 0, eps, out);
}

dc_status *gb_rms_norm(dc_gb *g, const char *prefix, int32_t x, int64_t channels, int affine, double eps,
                       int32_t *out) {
  int32_t in[2] = {x, -1};
  if (affine) DC_TRY(gb_param(g, prefix, "weight", 1, &channels, &in[1]));
  dc_node n = dc_node_make(OP_RMS_NORM, affine ? 2 : 1, in);
  dc_node_set_float(&n, "eps", eps);
  return gb_add(g, &n, prefix, out);
}

dc_status *gb_mod_layer_norm(dc_gb *g, const char *prefix, int32_t x, int32_t mod, int64_t scale_at, int64_t shift_at,
                             int affine, double eps, int32_t *out) {
  int64_t c = gb_type(g, x)->dims[gb_type(g, x)->rank - 1];
  int32_t in[4] = {x, mod, -1, -1};
  if (affine) {
    DC_TRY(gb_param(g, prefix, "weight", 1, &c, &in[2]));
    DC_TRY(gb_param(g, prefix, "bias", 1, &c, &in[3]));
  }
  dc_node n = dc_node_make(OP_MOD_LAYER_NORM, affine ? 4 : 2, in);
  dc_node_set_float(&n, "eps", eps);
  dc_node_set_int(&n, "scale_at", scale_at);
  dc_node_set_int(&n, "shift_at", shift_at);
  return gb_add(g, &n, prefix, out);
}

dc_status *gb_gated_add(dc_gb *g, const char *scope, int32_t x, int32_t y, int32_t mod, int64_t at, int32_t *out) {
  dc_node n = dc_node_make(OP_GATED_ADD, 3, (int32_t[]){x, y, mod});
  dc_node_set_int(&n, "at", at);
  return gb_add(g, &n, scope, out);
}

dc_status *gb_scale(dc_gb *g, const char *scope, int32_t x, double factor, int32_t *out) {
  dc_node n = dc_node_make(OP_SCALE, 1, &x);
  dc_node_set_float(&n, "factor", factor);
  return gb_add(g, &n, scope, out);
}

dc_status *gb_concat(dc_gb *g, const char *scope, int32_t a, int32_t b, int axis, int32_t *out) {
  dc_node n = dc_node_make(OP_CONCAT, 2, (int32_t[]){a, b});
  dc_node_set_int(&n, "axis", axis);
  return gb_add(g, &n, scope, out);
}

dc_status *gb_slice(dc_gb *g, const char *scope, int32_t x, int axis, int64_t start, int64_t end, int32_t *out) {
  dc_node n = dc_node_make(OP_SLICE, 1, &x);
  dc_node_set_int(&n, "axis", axis);
  dc_node_set_int(&n, "start", start);
  dc_node_set_int(&n, "end", end);
  return gb_add(g, &n, scope, out);
}

dc_status *gb_unary(dc_gb *g, dc_op op, const char *scope, int32_t x, int32_t *out) {
  dc_node n = dc_node_make(op, 1, &x);
  return gb_add(g, &n, scope, out);
}

dc_status *gb_binary(dc_gb *g, dc_op op, const char *scope, int32_t a, int32_t b, int32_t *out) {
  dc_node n = dc_node_make(op, 2, (int32_t[]){a, b});
  return gb_add(g, &n, scope, out);
}

dc_status *gb_reshape(dc_gb *g, const char *scope, int32_t x, int rank, const int64_t *dims,
                      int32_t *out) {
  dc_node n = dc_node_make(OP_RESHAPE, 1, &x);
  n.type.dtype = gb_type(g, x)->dtype;
  n.type.rank = rank;
  memcpy(n.type.dims, dims, sizeof(int64_t) * (size_t)rank);
  return gb_add(g, &n, scope, out);
}

/* The layout label of a permute's result: what its dims are.  nchw by
 * (0,2,3,1) is [N,H,W,C], nhwc; nhwc by (0,3,1,2) is nchw again; any other
 * 4-D order has no image-axis meaning (row). */
static dc_layout permuted_layout(dc_layout in, int rank, const int64_t *perm) {
  static const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2}, same[4] = {0, 1, 2, 3};
  size_t bytes = sizeof(int64_t) * 4;
  if (rank != 4) return LAYOUT_ROWMAJOR;
  if (!memcmp(perm, same, bytes)) return in;
  if (in == LAYOUT_NCHW && !memcmp(perm, to_nhwc, bytes)) return LAYOUT_NHWC;
  if (in == LAYOUT_NHWC && !memcmp(perm, to_nchw, bytes)) return LAYOUT_NCHW;
  return LAYOUT_ROWMAJOR;
}

dc_status *gb_permute(dc_gb *g, const char *scope, int32_t x, int rank, const int64_t *perm,
                      int32_t *out) {
  dc_node n = dc_node_make(OP_PERMUTE, 1, &x);
  n.nlist = rank;
  memcpy(n.list, perm, sizeof(int64_t) * (size_t)rank);
  dc_layout in = g->m->nodes[x].layout;
  DC_TRY(gb_add(g, &n, scope, out));
  g->m->nodes[*out].layout = permuted_layout(in, rank, perm);
  return NULL;
}

dc_status *gb_to_tokens(dc_gb *g, const char *scope, int32_t x, int32_t *out) {
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], ch = t->dims[1], hw = t->dims[2] * t->dims[3];
  DC_TRY(gb_permute(g, scope, x, 4, (int64_t[]){0, 2, 3, 1}, &x));
  return gb_reshape(g, scope, x, 3, (int64_t[]){b, hw, ch}, out);
}

dc_status *gb_from_tokens(dc_gb *g, const char *scope, int32_t x, int64_t h, int64_t w, int32_t *out) {
  int64_t b = gb_type(g, x)->dims[0], ch = gb_type(g, x)->dims[2];
  DC_TRY(gb_reshape(g, scope, x, 4, (int64_t[]){b, h, w, ch}, &x));
  g->m->nodes[x].layout = LAYOUT_NHWC; /* [B,H,W,C]: the label says what the dims are */
  return gb_permute(g, scope, x, 4, (int64_t[]){0, 3, 1, 2}, out);
}
