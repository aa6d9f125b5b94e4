/* kernels_ref_nn.c — the plain C reference kernels (the oracle), part 2: the
 * ops that compute: conv2d, conv3d, linear, group and layer norm, attention (plain
 * and causal) and the timestep embedding.  The table that names them is in kernels_ref.c.
 *
 * Accumulation: sums of products (conv, linear, q·k, p·v) accumulate in
 * float, one output element at a time in the natural index order, the bias
 * added last; that matches PyTorch to well under 1e-4 relative.  Norm
 * statistics and softmax denominators are long sums and use double.  Loops
 * are ordered so the innermost one walks contiguous memory.
 *
 * Layouts: conv2d and group_norm also run channels last (a node with
 * layout nhwc, passes/layout.c).  Their NHWC branches sum the very same
 * terms in the very same order as the NCHW ones (conv: (c, ky, kx) per
 * output element; group norm: channel-major double sums), deliberately, so
 * a layout change is bit-exact on the reference backend and a test can
 * compare the two layouts bit for bit (the NHWC rows of tests/op_cases*.c).
 *
 * Epilogues (ops.def): conv2d and linear finish each output plane or row
 * with the bias, then apply act and add the residual with the very functions
 * the SILU, GELU, GEGLU and ADD kernels use, in the order the unfused ops
 * would run; group_norm applies its act after the affine.  A fused node
 * therefore gives the same bits as the chain of ops it replaced. */
#include "kernels_ref_internal.h"

#include <math.h>
#include <string.h>

/* ---- epilogue ---------------------------------------------------------- */
/* The act (silu, gelu; geglu is the linear kernel's) and the residual of a
 * conv2d/linear, applied to a block of output rows (a row: the output's last
 * dim) once the op and its bias are done. */
typedef struct {
  dc_act act;
  const dc_type *rtype; /* NULL without a residual */
  const float *r;
  const float *mod;     /* a linear's gated residual (infer.c checked the shapes): NULL without */
  int64_t mod_width, gate_at;
} epilogue;

static dc_status *epilogue_init(const dc_module *m, const dc_node *n, const void *const *in, epilogue *e) {
  int slot = 2 + (dc_node_int(n, "bias") != 0), gate = dc_node_gate_slot(n);
  e->act = (dc_act)dc_node_int(n, "act");
  e->rtype = dc_node_int(n, "residual") ? in_type(m, n, slot) : NULL;
  e->r = e->rtype ? in[slot] : NULL;
  e->mod = gate >= 0 ? in[gate] : NULL;
  e->mod_width = gate >= 0 ? in_type(m, n, gate)->dims[1] : 0;
  e->gate_at = gate >= 0 ? dc_node_int(n, "gate_at") : 0;
  /* an empty range checks the shapes only */
  if (!e->rtype || dc_ref_broadcast(0, &n->type, NULL, e->rtype, NULL, 0, 0, NULL) == 0) return NULL;
  return dc_error(DC_ERR_MISMATCH, "%s (%s): residual does not broadcast onto the output",
                  dc_op_get(n->op)->name, n->scope ? n->scope : "?");
}

/* acc holds rows [row0, row1) of the output with the bias added; the act is
 * applied in acc, then acc + residual goes to y (pointing at row0).  Without
 * a residual acc is y.  With one, acc is scratch, so y may be the residual's
 * own buffer (memplan writes the output over it in place): each y[i] is
 * written after its r[i] is read, as the ADD kernel does. */
static void gated_rows(const epilogue *e, const dc_type *out, const float *acc, int64_t row0, int64_t row1,
                       float *y);

static void epilogue_rows(const epilogue *e, const dc_type *out, float *acc, int64_t row0, int64_t row1,
                          float *y) {
  int64_t count = (row1 - row0) * out->dims[out->rank - 1];
  if (e->act == ACT_SILU || e->act == ACT_GELU || e->act == ACT_QUICK_GELU || e->act == ACT_GELU_TANH)
    act_apply(e->act, acc, count, acc);
  if (e->mod) gated_rows(e, out, acc, row0, row1, y);
  else if (e->r) dc_ref_broadcast(0, out, acc, e->rtype, e->r, row0, row1, y);
}

/* The gated residual: y = r + gate * acc, gate = mod[b, gate_at..) of the
 * row's sample b (output [B,S,N], r of its shape), the product rounded
 * first, as the GATED_ADD kernel computes it; r[i] read before y[i]. */
static void gated_rows(const epilogue *e, const dc_type *out, const float *acc, int64_t row0, int64_t row1,
                       float *y) {
  int64_t width = out->dims[2], per_sample = out->dims[1];
  for (int64_t row = row0; row < row1; row++) {
    const float *gate = e->mod + (row / per_sample) * e->mod_width + e->gate_at;
    const float *a = acc + (row - row0) * width, *r = e->r + row * width;
    float *o = y + (row - row0) * width;
    for (int64_t i = 0; i < width; i++) {
      float t = gate[i] * a[i];
      o[i] = r[i] + t;
    }
  }
}

/* ---- CONV2D ------------------------------------------------------------ */
/* Output positions o in [*lo, *hi) whose input index o*stride + off lies in
 * [0, in_len): the taps that read real pixels, not zero padding. */
static void valid_range(int64_t in_len, int64_t out_len, int64_t stride, int64_t off, int64_t *lo,
                        int64_t *hi) {
  int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
  int64_t h = in_len - 1 - off < 0 ? 0 : (in_len - 1 - off) / stride + 1;
  if (h > out_len) h = out_len;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

typedef struct {
  int64_t c, h, w;      /* input channels and size */
  int64_t kh, kw;       /* kernel size */
  int64_t ho, wo;       /* output size */
  int64_t sy, sx, pt, pl; /* strides in H and W; padding at the top and left */
} conv_geom;

/* One input plane xc [h, w] into an output plane: acc[oy, ox] +=
 * wk[ky, kx] * xc[iy, ix] over (ky, kx) in that order; the padding taps are
 * skipped (they add zero). */
static void conv_plane_add(const conv_geom *g, const float *xc, const float *wk, float *acc) {
  for (int64_t ky = 0; ky < g->kh; ky++) {
    int64_t y0, y1;
    valid_range(g->h, g->ho, g->sy, ky - g->pt, &y0, &y1);
    for (int64_t kx = 0; kx < g->kw; kx++) {
      float wv = wk[ky * g->kw + kx];
      int64_t x0, x1;
      valid_range(g->w, g->wo, g->sx, kx - g->pl, &x0, &x1);
      for (int64_t oy = y0; oy < y1; oy++) {
        const float *row = xc + (oy * g->sy + ky - g->pt) * g->w + kx - g->pl;
        float *arow = acc + oy * g->wo;
        for (int64_t ox = x0; ox < x1; ox++) arow[ox] += wv * row[ox * g->sx];
      }
    }
  }
}

/* One output plane: the sum over (c, ky, kx) in that order, so each output
 * element sums in natural order. */
static void conv_plane(const conv_geom *g, const float *x, const float *wo_, float *acc) {
  memset(acc, 0, (size_t)(g->ho * g->wo) * sizeof *acc);
  for (int64_t c = 0; c < g->c; c++) conv_plane_add(g, x + c * g->h * g->w, wo_ + c * g->kh * g->kw, acc);
}

/* One output plane at a time; with a residual the plane is computed in
 * scratch first (see epilogue_rows). */
static dc_status *conv2d_f32(const dc_module *m, const dc_node *n, const void *const *in, void *out);
static dc_status *conv2d_nhwc_f32(const dc_module *m, const dc_node *n, const void *const *in, void *out);

/* Weights stored in another dtype (layerwise casting) are decoded first. */
REF_KERNEL(dc_ref_conv2d) {
  const void *p[DC_MAX_INPUTS];
  float *owned;
  DC_TRY(dc_ref_params_f32(m, n, in, p, &owned));
  dc_status *st = n->layout == LAYOUT_NHWC ? conv2d_nhwc_f32(m, n, p, out) : conv2d_f32(m, n, p, out);
  dc_free(owned);
  return st;
}

static dc_status *conv2d_f32(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tx = in_type(m, n, 0), *tw = in_type(m, n, 1);
  const float *x = in[0], *w = in[1], *bias = dc_node_int(n, "bias") ? in[2] : NULL;
  float *y = out, *scratch = NULL;
  conv_geom g = {tx->dims[1], tx->dims[2], tx->dims[3], tw->dims[2], tw->dims[3],
                 n->type.dims[2], n->type.dims[3], dc_node_int(n, "stride"), dc_node_int(n, "stride"),
                 dc_node_int(n, "pad_t"), dc_node_int(n, "pad_l")};
  int64_t batch = tx->dims[0], oc = tw->dims[0], plane = g.ho * g.wo;
  epilogue e;
  DC_TRY(epilogue_init(m, n, in, &e));
  if (e.r && !(scratch = dc_malloc((size_t)(plane ? plane : 1) * sizeof *scratch)))
    return dc_nomem("allocating a conv2d output plane");
  for (int64_t b = 0; b < batch; b++)
    for (int64_t o = 0; o < oc; o++) {
      int64_t at = (b * oc + o) * plane, row0 = (b * oc + o) * g.ho;
      float *acc = scratch ? scratch : y + at;
      conv_plane(&g, x + b * g.c * g.h * g.w, w + o * g.c * g.kh * g.kw, acc);
      if (bias)
        for (int64_t i = 0; i < plane; i++) acc[i] += bias[o];
      epilogue_rows(&e, &n->type, acc, row0, row0 + g.ho, y + at);
    }
  dc_free(scratch);
  return NULL;
}

/* NHWC: x [N,H,W,C], w [O,kh,kw,C], out [N,H',W',O].  acc holds one output
 * row oy, [W'][O]; for each tap the weight column wt[(c, ky, kx)][0..O) is
 * contiguous (the weight is transposed once into scratch), so the inner
 * loop walks memory.  Every output element gets its products in conv_plane's
 * order, (c, ky, kx) with the padding taps skipped: bit-exact with NCHW. */
static void conv_row_nhwc(const conv_geom *g, int64_t oc, const float *x, const float *wt, int64_t oy, float *acc) {
  memset(acc, 0, (size_t)(g->wo * oc) * sizeof *acc);
  for (int64_t c = 0; c < g->c; c++)
    for (int64_t ky = 0; ky < g->kh; ky++) {
      int64_t iy = oy * g->sy + ky - g->pt;
      if (iy < 0 || iy >= g->h) continue;
      const float *xrow = x + iy * g->w * g->c + c;
      for (int64_t kx = 0; kx < g->kw; kx++) {
        const float *wc = wt + ((c * g->kh + ky) * g->kw + kx) * oc;
        int64_t x0, x1;
        valid_range(g->w, g->wo, g->sx, kx - g->pl, &x0, &x1);
        for (int64_t ox = x0; ox < x1; ox++) {
          float xv = xrow[(ox * g->sx + kx - g->pl) * g->c], *a = acc + ox * oc;
          for (int64_t o = 0; o < oc; o++) a[o] += wc[o] * xv;
        }
      }
    }
}

static dc_status *conv2d_nhwc_f32(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tx = in_type(m, n, 0), *tw = in_type(m, n, 1);
  const float *x = in[0], *w = in[1], *bias = dc_node_int(n, "bias") ? in[2] : NULL;
  float *y = out, *wt, *scratch = NULL;
  conv_geom g = {tx->dims[3], tx->dims[1], tx->dims[2], tw->dims[1], tw->dims[2],
                 n->type.dims[1], n->type.dims[2], dc_node_int(n, "stride"), dc_node_int(n, "stride"),
                 dc_node_int(n, "pad_t"), dc_node_int(n, "pad_l")};
  int64_t batch = tx->dims[0], oc = tw->dims[0], wn = oc * g.c * g.kh * g.kw, row = g.wo * oc;
  epilogue e;
  DC_TRY(epilogue_init(m, n, in, &e));
  if (!(wt = dc_malloc((size_t)(wn ? wn : 1) * sizeof *wt))) return dc_nomem("transposing a conv2d weight");
  if (e.r && !(scratch = dc_malloc((size_t)(row ? row : 1) * sizeof *scratch))) {
    dc_free(wt);
    return dc_nomem("allocating a conv2d output row");
  }
  /* wt[(c, ky, kx)][o] = w[o][ky][kx][c] */
  for (int64_t o = 0; o < oc; o++)
    for (int64_t t = 0; t < g.kh * g.kw; t++)
      for (int64_t c = 0; c < g.c; c++) wt[(c * g.kh * g.kw + t) * oc + o] = w[(o * g.kh * g.kw + t) * g.c + c];
  for (int64_t b = 0; b < batch; b++)
    for (int64_t oy = 0; oy < g.ho; oy++) {
      int64_t row0 = (b * g.ho + oy) * g.wo; /* epilogue rows: the output's last dim is O */
      float *acc = scratch ? scratch : y + row0 * oc;
      conv_row_nhwc(&g, oc, x + b * g.h * g.w * g.c, wt, oy, acc);
      for (int64_t ox = 0; bias && ox < g.wo; ox++)
        for (int64_t o = 0; o < oc; o++) acc[ox * oc + o] += bias[o];
      epilogue_rows(&e, &n->type, acc, row0, row0 + g.wo, y + row0 * oc);
    }
  dc_free(scratch);
  dc_free(wt);
  return NULL;
}

/* ---- CONV3D ------------------------------------------------------------ */
/* x [B,C,T,H,W], w [O,C,kt,kh,kw]: output frame ot of channel o is the sum,
 * over (c, kt) in that order, of input frame ot*stride_t+kt of channel c
 * convolved in (H, W) by the kernel plane w[o,c,kt] (conv_plane_add: ky, kx
 * within), then the bias; padding in H and W only. */
static dc_status *conv3d_f32(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tx = in_type(m, n, 0), *tw = in_type(m, n, 1);
  const float *x = in[0], *w = in[1], *bias = dc_node_int(n, "bias") ? in[2] : NULL;
  float *y = out;
  int64_t ph = dc_node_int(n, "pad_h"), pw = dc_node_int(n, "pad_w");
  conv_geom g = {tx->dims[1], tx->dims[3], tx->dims[4], tw->dims[3], tw->dims[4], n->type.dims[3], n->type.dims[4],
                 dc_node_int(n, "stride_h"), dc_node_int(n, "stride_w"), ph, pw};
  int64_t batch = tx->dims[0], oc = tw->dims[0], t = tx->dims[2], kt = tw->dims[2], to = n->type.dims[2];
  int64_t st = dc_node_int(n, "stride_t"), frame = g.h * g.w, plane = g.ho * g.wo, taps = g.kh * g.kw;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t o = 0; o < oc; o++)
      for (int64_t ot = 0; ot < to; ot++) {
        float *acc = y + ((b * oc + o) * to + ot) * plane;
        memset(acc, 0, (size_t)plane * sizeof *acc);
        for (int64_t c = 0; c < g.c; c++)
          for (int64_t k = 0; k < kt; k++)
            conv_plane_add(&g, x + ((b * g.c + c) * t + ot * st + k) * frame, w + ((o * g.c + c) * kt + k) * taps, acc);
        for (int64_t i = 0; bias && i < plane; i++) acc[i] += bias[o];
      }
  return NULL;
}

/* Weights stored in another dtype are decoded first, as for conv2d. */
REF_KERNEL(dc_ref_conv3d) {
  const void *p[DC_MAX_INPUTS];
  float *owned;
  DC_TRY(dc_ref_params_f32(m, n, in, p, &owned));
  dc_status *st = conv3d_f32(m, n, p, out);
  dc_free(owned);
  return st;
}

/* ---- LINEAR ------------------------------------------------------------ */
static float dot(const float *a, const float *b, int64_t len) {
  float s = 0.0f;
  for (int64_t i = 0; i < len; i++) s += a[i] * b[i];
  return s;
}

/* y[r, j] = x[r, :] . w[j, :] + b[j]; both rows are contiguous.  A row goes
 * through scratch when it has a geglu (2H values become H) or a residual
 * (see epilogue_rows). */
static dc_status *linear_f32(const dc_module *m, const dc_node *n, const void *const *in, void *out);

REF_KERNEL(dc_ref_linear) {
  const void *p[DC_MAX_INPUTS];
  float *owned;
  DC_TRY(dc_ref_params_f32(m, n, in, p, &owned));
  dc_status *st = linear_f32(m, n, p, out);
  dc_free(owned);
  return st;
}

static dc_status *linear_f32(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tw = in_type(m, n, 1);
  const float *x = in[0], *w = in[1], *bias = dc_node_int(n, "bias") ? in[2] : NULL;
  float *y = out, *row = NULL;
  int64_t nout = tw->dims[0], k = tw->dims[1], ny = n->type.dims[n->type.rank - 1];
  int64_t rows = ny ? (int64_t)dc_type_numel(&n->type) / ny : 0;
  int geglu = dc_node_int(n, "act") == ACT_GEGLU;
  epilogue e;
  DC_TRY(epilogue_init(m, n, in, &e));
  if ((geglu || e.r) && !(row = dc_malloc((size_t)(nout ? nout : 1) * sizeof *row)))
    return dc_nomem("allocating a linear output row");
  for (int64_t r = 0; r < rows; r++) {
    float *acc = row ? row : y + r * nout, *h = acc;
    for (int64_t j = 0; j < nout; j++) acc[j] = dot(x + r * k, w + j * k, k) + (bias ? bias[j] : 0.0f);
    if (geglu) { /* in place before a residual: h[j] is written after acc[j], acc[H + j] are read */
      h = e.r ? row : y + r * ny;
      dc_ref_geglu_rows(acc, 1, ny, h);
    }
    epilogue_rows(&e, &n->type, h, r, r + 1, y + r * ny);
  }
  dc_free(row);
  return NULL;
}

/* ---- GROUP_NORM, LAYER_NORM -------------------------------------------- */
/* Biased mean and variance, two passes in double, of the nc × np floats
 * x[c·cs + p·ps], summed channel-major (c outer, p inner) in both layouts:
 * contiguous for NCHW and layer norm (cs = np, ps = 1), strided for NHWC
 * (cs = 1, ps = C) — the same additions in the same order either way. */
static void moments(const float *x, int64_t nc, int64_t np, int64_t cs, int64_t ps, double *mean, double *var) {
  double s = 0.0, q = 0.0;
  for (int64_t c = 0; c < nc; c++)
    for (int64_t p = 0; p < np; p++) s += x[c * cs + p * ps];
  s /= (double)(nc * np);
  for (int64_t c = 0; c < nc; c++)
    for (int64_t p = 0; p < np; p++) q += (x[c * cs + p * ps] - s) * (x[c * cs + p * ps] - s);
  *mean = s;
  *var = q / (double)(nc * np);
}

/* (x - mean) / sqrt(var + eps) * gamma + beta, in double, rounded once, for
 * len floats stride apart. */
static void normalize(const float *x, int64_t len, int64_t stride, double mean, double rstd, float gamma, float beta,
                      float *y) {
  for (int64_t i = 0; i < len; i++) y[i * stride] = (float)((x[i * stride] - mean) * rstd * gamma + beta);
}

/* NCHW x [N, C, rest...]: group g of sample n is one contiguous run of
 * (C/G)·rest elements.  NHWC x [N, rest..., C]: channel c of position p is
 * at p·C + c.  act (silu, gelu) follows the affine. */
REF_KERNEL(dc_ref_group_norm) {
  const dc_type *tx = in_type(m, n, 0);
  const float *x = in[0], *gamma = in[1], *beta = in[2];
  float *y = out;
  int nhwc = n->layout == LAYOUT_NHWC;
  int64_t batch = tx->dims[0], ch = tx->dims[nhwc ? tx->rank - 1 : 1], groups = dc_node_int(n, "groups");
  int64_t rest = batch * ch != 0 ? (int64_t)dc_type_numel(tx) / (batch * ch) : 0, cpg = ch / groups;
  int64_t cs = nhwc ? 1 : rest, ps = nhwc ? ch : 1; /* element strides of a channel and a position */
  double eps = dc_node_float(n, "eps");
  DC_TRY(need_f32(m, n));
  for (int64_t b = 0; b < batch; b++)
    for (int64_t g = 0; g < groups; g++) {
      int64_t base = b * ch * rest + g * cpg * cs;
      double mean, var, rstd;
      moments(x + base, cpg, rest, cs, ps, &mean, &var);
      rstd = 1.0 / sqrt(var + eps);
      for (int64_t c = g * cpg; c < (g + 1) * cpg; c++) {
        int64_t at = b * ch * rest + c * cs;
        normalize(x + at, rest, ps, mean, rstd, gamma[c], beta[c], y + at);
      }
    }
  act_apply((dc_act)dc_node_int(n, "act"), y, (int64_t)dc_type_numel(&n->type), y);
  return NULL;
}

REF_KERNEL(dc_ref_layer_norm) {
  const dc_type *tx = in_type(m, n, 0);
  const float *x = in[0], *gamma = in[1], *beta = in[2];
  float *y = out;
  int64_t c = tx->dims[tx->rank - 1], rows = c ? (int64_t)dc_type_numel(tx) / c : 0;
  double eps = dc_node_float(n, "eps");
  DC_TRY(need_f32(m, n));
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * c;
    double mean, var, rstd;
    moments(xr, 1, c, c, 1, &mean, &var);
    rstd = 1.0 / sqrt(var + eps);
    for (int64_t i = 0; i < c; i++)
      y[r * c + i] = (float)((xr[i] - mean) * rstd * gamma[i] + beta[i]);
  }
  return NULL;
}

/* RMS norm of rows of C: the mean square in double, rounded once with the
 * weight. */
REF_KERNEL(dc_ref_rms_norm) {
  const dc_type *tx = in_type(m, n, 0);
  const float *x = in[0], *w = n->ninputs > 1 ? in[1] : NULL;
  float *y = out;
  int64_t c = tx->dims[tx->rank - 1], rows = c ? (int64_t)dc_type_numel(tx) / c : 0;
  double eps = dc_node_float(n, "eps");
  DC_TRY(need_f32(m, n));
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * c;
    double q = 0.0;
    for (int64_t i = 0; i < c; i++) q += (double)xr[i] * xr[i];
    double rstd = 1.0 / sqrt(q / (double)c + eps);
    for (int64_t i = 0; i < c; i++) y[r * c + i] = (float)(xr[i] * rstd * (w ? w[i] : 1.0f));
  }
  return NULL;
}

/* Layer norm of every row of x [B,S,C] (affine when gamma and beta are
 * given), modulated by sample b's scale and shift chunks of mod [B,M]:
 * the norm rounded to f32, then n * (1 + scale) + shift in f32 as torch. */
REF_KERNEL(dc_ref_mod_layer_norm) {
  const dc_type *tx = in_type(m, n, 0), *tm = in_type(m, n, 1);
  const float *x = in[0], *mod = in[1];
  const float *gamma = n->ninputs == 4 ? in[2] : NULL, *beta = n->ninputs == 4 ? in[3] : NULL;
  float *y = out;
  int64_t batch = tx->dims[0], seq = tx->dims[1], c = tx->dims[2];
  int64_t scale_at = dc_node_int(n, "scale_at"), shift_at = dc_node_int(n, "shift_at");
  double eps = dc_node_float(n, "eps");
  DC_TRY(need_f32(m, n));
  for (int64_t b = 0; b < batch; b++) {
    const float *scale = mod + b * tm->dims[1] + scale_at, *shift = mod + b * tm->dims[1] + shift_at;
    for (int64_t s = 0; s < seq; s++) {
      const float *xr = x + (b * seq + s) * c;
      float *yr = y + (b * seq + s) * c;
      double mean, var;
      moments(xr, 1, c, c, 1, &mean, &var);
      double rstd = 1.0 / sqrt(var + eps);
      for (int64_t i = 0; i < c; i++) {
        float nrm = gamma ? (float)((xr[i] - mean) * rstd * gamma[i] + beta[i]) : (float)((xr[i] - mean) * rstd);
        float t = nrm * (1.0f + scale[i]);
        yr[i] = t + shift[i];
      }
    }
  }
  return NULL;
}

/* ---- ATTENTION, CAUSAL_ATTENTION ---------------------------------------- */
/* Queries are processed ATTN_BLOCK rows at a time so scratch is
 * ATTN_BLOCK × Sk floats, never Sq × Sk. */
enum { ATTN_BLOCK = 32 };

typedef struct {
  int64_t sq, sk, hd, d; /* query and key lengths, row width H·D, head size D */
  float scale;
  int causal;            /* query i attends to keys 0..i only */
  const float *bias;     /* attention_bias: this head's [Sq, Sk] scores bias, or NULL */
} attn_geom;

/* The keys query `row` attends to: all, or with the causal mask 0..row. */
static int64_t attn_keys(const attn_geom *g, int64_t row) {
  return g->causal && row + 1 < g->sk ? row + 1 : g->sk;
}

/* p[i, j] = softmax_j(scale · q_i · k_j) over query q0 + i's keys (0 past
 * them): max subtracted, denominator in double; p is normalised before it
 * weights v, like softmax-then-matmul. */
static void attn_probs(const attn_geom *g, const float *q, const float *k, int64_t q0, int64_t rows, float *p) {
  for (int64_t i = 0; i < rows; i++) {
    float *pi = p + i * g->sk, mx = -INFINITY;
    int64_t nk = attn_keys(g, q0 + i);
    double sum = 0.0;
    for (int64_t j = 0; j < nk; j++) {
      pi[j] = g->scale * dot(q + i * g->hd, k + j * g->hd, g->d);
      if (g->bias) pi[j] += g->bias[(q0 + i) * g->sk + j];
      if (pi[j] > mx) mx = pi[j];
    }
    for (int64_t j = 0; j < nk; j++) {
      pi[j] = expf(pi[j] - mx);
      sum += pi[j];
    }
    for (int64_t j = 0; j < nk; j++) pi[j] = (float)(pi[j] / sum);
  }
}

/* o_i = sum_j p[i, j] v_j over query q0 + i's keys, accumulated in float
 * over j in order. */
static void attn_mix(const attn_geom *g, const float *p, const float *v, int64_t q0, int64_t rows, float *o) {
  for (int64_t i = 0; i < rows; i++) {
    float *oi = o + i * g->hd;
    int64_t nk = attn_keys(g, q0 + i);
    memset(oi, 0, (size_t)g->d * sizeof *oi);
    for (int64_t j = 0; j < nk; j++) {
      float pij = p[i * g->sk + j];
      const float *vj = v + j * g->hd;
      for (int64_t e = 0; e < g->d; e++) oi[e] += pij * vj[e];
    }
  }
}

/* q [B,Sq,H·D], k and v [B,Sk,H·D]; head h lives in columns [h·D, (h+1)·D)
 * of every row, so a head's q, k, v and output are rows of stride H·D. */
static dc_status *attention(const dc_module *m, const dc_node *n, const void *const *in, void *out, int causal) {
  const dc_type *tq = in_type(m, n, 0), *tk = in_type(m, n, 1);
  const float *q = in[0], *k = in[1], *v = in[2];
  float *y = out, *p;
  int64_t batch = tq->dims[0], heads = dc_node_int(n, "heads");
  attn_geom g = {tq->dims[1], tk->dims[1], tq->dims[2], tq->dims[2] / heads,
                 (float)dc_node_float(n, "scale"), causal, NULL};
  const float *bias = n->op == OP_ATTENTION_BIAS ? in[3] : NULL;
  DC_TRY(need_f32(m, n));
  if (g.sk < 1 || g.sq < 1) return NULL; /* nothing to attend to, or nothing asked */
  p = dc_malloc((size_t)(ATTN_BLOCK * g.sk) * sizeof *p);
  if (!p) return dc_nomem("allocating attention scores");
  for (int64_t b = 0; b < batch; b++)
    for (int64_t h = 0; h < heads; h++) {
      const float *kb = k + b * g.sk * g.hd + h * g.d, *vb = v + b * g.sk * g.hd + h * g.d;
      g.bias = bias ? bias + h * g.sq * g.sk : NULL;
      for (int64_t i0 = 0; i0 < g.sq; i0 += ATTN_BLOCK) {
        int64_t rows = g.sq - i0 < ATTN_BLOCK ? g.sq - i0 : ATTN_BLOCK;
        int64_t at = (b * g.sq + i0) * g.hd + h * g.d;
        attn_probs(&g, q + at, kb, i0, rows, p);
        attn_mix(&g, p, vb, i0, rows, y + at);
      }
    }
  dc_free(p);
  return NULL;
}

REF_KERNEL(dc_ref_attention) { return attention(m, n, in, out, 0); }
REF_KERNEL(dc_ref_causal_attention) { return attention(m, n, in, out, 1); }
REF_KERNEL(dc_ref_attention_bias) { return attention(m, n, in, out, 0); }

/* ---- TIME_EMBED -------------------------------------------------------- */
/* Mirrors diffusers get_timestep_embedding (src/diffusers/models/
 * embeddings.py) op by op in float32, as torch runs it on the CPU:
 *   exponent = -math.log(10000) * arange(half, f32)  -> f32(-ln 1e4) * f32(i)
 *   exponent = exponent / (half - shift)             -> f32 divide by f32(half - shift)
 *   emb = exp(exponent); emb = t[:, None] * emb      -> expf, f32 product
 *   emb = cat(sin(emb), cos(emb)); flip -> cat(cos, sin); odd dim -> zero column
 * (torch casts a Python scalar to the tensor's f32 before the op, and its CPU
 * division by a scalar is a true division, not a reciprocal multiply.) */
REF_KERNEL(dc_ref_time_embed) {
  const float *t = in[0];
  float *y = out;
  int64_t dim = dc_node_int(n, "dim"), half = dim / 2;
  int64_t batch = (int64_t)dc_type_numel(in_type(m, n, 0));
  int flip = dc_node_int(n, "flip_sin_to_cos") != 0;
  float neg_log = (float)-log(10000.0);
  float denom = (float)((double)half - dc_node_float(n, "freq_shift"));
  DC_TRY(need_f32(m, n));
  for (int64_t b = 0; b < batch; b++) {
    float *yb = y + b * dim;
    for (int64_t i = 0; i < half; i++) {
      float exponent = neg_log * (float)i;
      float arg = t[b] * expf(exponent / denom);
      yb[flip ? half + i : i] = sinf(arg);
      yb[flip ? i : half + i] = cosf(arg);
    }
    if (dim % 2) yb[dim - 1] = 0.0f;
  }
  return NULL;
}
