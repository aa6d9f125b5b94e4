/* kernels_ref.c — the plain C reference kernels (the oracle), part 1: the op
 * table, CAST, the elementwise ops, the ops that only move data and the two
 * that read token ids (embedding, eos_pool).  The heavy ops (conv, linear, norms, attention,
 * timestep embedding) are in kernels_ref_nn.c.
 *
 * Why: the LLVM and CUDA backends are tested against these, so every kernel
 * is a straight loop nest whose result is easy to trust; speed matters only
 * enough that the tests of whole (tiny) models stay quick.  Math kernels take
 * f32 and say so in an error otherwise; data-movement kernels copy elements
 * of any dtype. */
#include "kernels_ref_internal.h"

#include <math.h>
#include <string.h>

/* (the scalar dtype conversions are support/dtype_convert.c's) */

void dc_ref_decode(dc_dtype t, const void *src, int64_t count, float *dst);

/* ---- CAST -------------------------------------------------------------- */
/* Converts in chunks through a float buffer, so each loop has one dtype. */
enum { CAST_CHUNK = 256 };

static void decode_chunk(dc_dtype t, const uint8_t *src, int64_t count, float *dst) {
  const uint16_t *s16 = (const uint16_t *)src;
  switch (t) {
  case DT_F32: memcpy(dst, src, (size_t)count * 4); break;
  case DT_F16: for (int64_t i = 0; i < count; i++) dst[i] = dc_f16_to_f32(s16[i]); break;
  case DT_BF16: for (int64_t i = 0; i < count; i++) dst[i] = dc_bf16_to_f32(s16[i]); break;
  case DT_F8_E4M3: for (int64_t i = 0; i < count; i++) dst[i] = dc_f8e4m3_to_f32(src[i]); break;
  case DT_F8_E5M2: for (int64_t i = 0; i < count; i++) dst[i] = dc_f8e5m2_to_f32(src[i]); break;
  default: break;
  }
}

void dc_ref_decode(dc_dtype t, const void *src, int64_t count, float *dst) { decode_chunk(t, src, count, dst); }

dc_status *dc_ref_params_f32(const dc_module *m, const dc_node *n, const void *const *in, const void **params,
                             float **owned) {
  int nparams = 1 + (int)dc_node_int(n, "bias");
  uint64_t total = 0;
  *owned = NULL;
  for (int i = 0; i < n->ninputs; i++) {
    dc_dtype t = in_type(m, n, i)->dtype;
    params[i] = in[i];
    if (t == DT_F32) continue;
    if (i < 1 || i > nparams)
      return dc_error(DC_ERR_UNSUPPORTED, "%s (%s): reference kernel needs f32 input %d, got %s", dc_op_get(n->op)->name,
                      n->scope ? n->scope : "?", i, dc_dtype_name(t));
    total += dc_type_numel(in_type(m, n, i));
  }
  if (!total) return NULL;
  float *buf = dc_malloc(total * sizeof(float));
  if (!buf) return dc_nomem("decoding stored weights");
  *owned = buf;
  for (int i = 1; i <= nparams; i++) {
    const dc_type *t = in_type(m, n, i);
    if (t->dtype == DT_F32) continue;
    decode_chunk(t->dtype, in[i], (int64_t)dc_type_numel(t), buf);
    params[i] = buf;
    buf += dc_type_numel(t);
  }
  return NULL;
}

static void encode_chunk(dc_dtype t, const float *src, int64_t count, uint8_t *dst) {
  uint16_t *d16 = (uint16_t *)dst;
  switch (t) {
  case DT_F32: memcpy(dst, src, (size_t)count * 4); break;
  case DT_F16: for (int64_t i = 0; i < count; i++) d16[i] = dc_f32_to_f16(src[i]); break;
  case DT_BF16: for (int64_t i = 0; i < count; i++) d16[i] = dc_f32_to_bf16(src[i]); break;
  default: break;
  }
}

/* A weight's bytes from host memory into the arena (the CPU backend's
 * model of a host-to-device copy). */
static dc_status *ref_upload(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  memcpy(out, in[0], dc_type_bytes(&n->type));
  return NULL;
}

static dc_status *ref_cast(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  dc_dtype from = in_type(m, n, 0)->dtype, to = n->type.dtype;
  int64_t total = (int64_t)dc_type_numel(&n->type);
  int fs = dc_dtype_size(from), ts = dc_dtype_size(to);
  float buf[CAST_CHUNK];
  if (from >= DT_COUNT || (to != DT_F32 && to != DT_F16 && to != DT_BF16))
    return dc_error(DC_ERR_UNSUPPORTED, "cast (%s): reference kernel casts to f32, f16 or bf16, not %s",
                    n->scope ? n->scope : "?", to < DT_COUNT ? dc_dtype_name(to) : "?");
  if (from == to) { /* also the "copy an unaligned weight" use */
    memcpy(out, in[0], (size_t)total * (size_t)fs);
    return NULL;
  }
  for (int64_t i = 0; i < total; i += CAST_CHUNK) {
    int64_t count = total - i < CAST_CHUNK ? total - i : CAST_CHUNK;
    decode_chunk(from, (const uint8_t *)in[0] + i * fs, count, buf);
    encode_chunk(to, buf, count, (uint8_t *)out + i * ts);
  }
  return NULL;
}

/* ---- ADD, MUL: numpy broadcasting of b onto a's shape ------------------- */
/* dc_ref_broadcast is also the residual epilogue of conv2d and linear. */
/* Strides of b indexed by a's dims (0 where b broadcasts); -1 when b does
 * not broadcast onto a. */
static int broadcast_strides(const dc_type *a, const dc_type *b, int64_t *bstride) {
  int off = a->rank - b->rank;
  int64_t s = 1;
  if (off < 0) return -1;
  for (int d = a->rank - 1; d >= 0; d--) {
    int64_t bd = d >= off ? b->dims[d - off] : 1;
    if (bd != 1 && bd != a->dims[d]) return -1;
    bstride[d] = bd == 1 ? 0 : s;
    s *= bd;
  }
  return 0;
}

static dc_status *broadcast_error(const dc_type *a, const dc_type *b, const dc_node *n) {
  char sa[96], sb[96];
  return dc_error(DC_ERR_MISMATCH, "%s (%s): %s does not broadcast onto %s", dc_op_get(n->op)->name,
                  n->scope ? n->scope : "?", dc_dims_str(b->dims, b->rank, sb, sizeof sb),
                  dc_dims_str(a->dims, a->rank, sa, sizeof sa));
}

static void binary_row(int is_mul, const float *a, const float *b, int64_t bs, int64_t len, float *y) {
  if (is_mul)
    for (int64_t j = 0; j < len; j++) y[j] = a[j] * b[j * bs];
  else
    for (int64_t j = 0; j < len; j++) y[j] = a[j] + b[j * bs];
}

int dc_ref_broadcast(int is_mul, const dc_type *ta, const float *a, const dc_type *tb, const float *b,
                     int64_t row0, int64_t row1, float *y) {
  int64_t bstride[DC_MAX_DIMS], idx[DC_MAX_DIMS] = {0};
  int r = ta->rank;
  int64_t inner = r ? ta->dims[r - 1] : 1, boff = 0, rest = row0;
  if (broadcast_strides(ta, tb, bstride)) return -1;
  if (row1 <= row0) return 0;
  if (dc_type_numel(tb) == dc_type_numel(ta)) { /* same layout, no broadcast */
    binary_row(is_mul, a, b + row0 * inner, 1, (row1 - row0) * inner, y);
    return 0;
  }
  /* Walk the rows (odometer over all dims but the last) from row0's index,
   * b's offset following its strides. */
  for (int d = r - 2; d >= 0; d--) {
    idx[d] = rest % ta->dims[d];
    rest /= ta->dims[d];
    boff += idx[d] * bstride[d];
  }
  for (int64_t o = 0; o < row1 - row0; o++) {
    binary_row(is_mul, a + o * inner, b + boff, bstride[r - 1], inner, y + o * inner);
    for (int d = r - 2; d >= 0; d--) {
      boff += bstride[d];
      if (++idx[d] < ta->dims[d]) break;
      boff -= bstride[d] * ta->dims[d];
      idx[d] = 0;
    }
  }
  return 0;
}

static dc_status *ref_binary(const dc_module *m, const dc_node *n, const void *const *in, float *y,
                             int is_mul) {
  const dc_type *ta = in_type(m, n, 0), *tb = in_type(m, n, 1);
  int64_t inner = ta->rank ? ta->dims[ta->rank - 1] : 1;
  int64_t rows = inner ? (int64_t)dc_type_numel(ta) / inner : 0;
  DC_TRY(need_f32(m, n));
  if (dc_ref_broadcast(is_mul, ta, in[0], tb, in[1], 0, rows, y)) return broadcast_error(ta, tb, n);
  return NULL;
}

static dc_status *ref_add(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  return ref_binary(m, n, in, out, 0);
}

static dc_status *ref_mul(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  return ref_binary(m, n, in, out, 1);
}

/* ---- unary elementwise ------------------------------------------------- */
/* SILU, GELU and QUICK_GELU share act_apply with the fused epilogues
 * (kernels_ref_internal.h). */
static dc_status *ref_act(const dc_module *m, const dc_node *n, const void *in, void *out, dc_act act) {
  DC_TRY(need_f32(m, n));
  act_apply(act, in, (int64_t)dc_type_numel(&n->type), out);
  return NULL;
}

static dc_status *ref_silu(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  return ref_act(m, n, in[0], out, ACT_SILU);
}

static dc_status *ref_gelu(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  return ref_act(m, n, in[0], out, ACT_GELU);
}

static dc_status *ref_quick_gelu(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  return ref_act(m, n, in[0], out, ACT_QUICK_GELU);
}

static dc_status *ref_gelu_tanh(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  return ref_act(m, n, in[0], out, ACT_GELU_TANH);
}

static dc_status *ref_scale(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const float *x = in[0];
  float *y = out, f = (float)dc_node_float(n, "factor");
  int64_t total = (int64_t)dc_type_numel(&n->type);
  DC_TRY(need_f32(m, n));
  for (int64_t i = 0; i < total; i++) y[i] = x[i] * f;
  return NULL;
}

/* Comparisons are false for NaN, so NaN passes through as in torch.clamp. */
static dc_status *ref_clamp(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const float *x = in[0];
  float *y = out;
  float lo = (float)dc_node_float(n, "min"), hi = (float)dc_node_float(n, "max");
  int64_t total = (int64_t)dc_type_numel(&n->type);
  DC_TRY(need_f32(m, n));
  for (int64_t i = 0; i < total; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
  return NULL;
}

/* diffusers GEGLU: hidden, gate = x.chunk(2, -1); hidden * gelu(gate).
 * gelu is rounded to float before the product, as torch does.  Also the
 * epilogue of linear{act=geglu}, one row at a time. */
void dc_ref_geglu_rows(const float *x, int64_t rows, int64_t h, float *y) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * 2 * h;
    for (int64_t j = 0; j < h; j++) y[r * h + j] = xr[j] * act_gelu(xr[h + j]);
  }
}

static dc_status *ref_geglu(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *t = in_type(m, n, 0);
  int64_t two_h = t->dims[t->rank - 1];
  int64_t rows = two_h ? (int64_t)dc_type_numel(t) / two_h : 0;
  DC_TRY(need_f32(m, n));
  if (two_h % 2)
    return dc_error(DC_ERR_MISMATCH, "geglu (%s): last dim %lld is odd", n->scope ? n->scope : "?",
                    (long long)two_h);
  dc_ref_geglu_rows(in[0], rows, two_h / 2, out);
  return NULL;
}

/* ---- data movement (any dtype) ---------------------------------------- */
static dc_status *ref_reshape(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  (void)m;
  memcpy(out, in[0], (size_t)dc_type_bytes(&n->type));
  return NULL;
}

/* Copies count elements of es bytes, reading src with an element stride. */
static void copy_strided(uint8_t *dst, const uint8_t *src, int64_t count, int64_t stride, int es) {
  if (es == 4) {
    uint32_t *d = (uint32_t *)dst;
    const uint32_t *s = (const uint32_t *)src;
    for (int64_t i = 0; i < count; i++) d[i] = s[i * stride];
  } else if (es == 2) {
    uint16_t *d = (uint16_t *)dst;
    const uint16_t *s = (const uint16_t *)src;
    for (int64_t i = 0; i < count; i++) d[i] = s[i * stride];
  } else {
    for (int64_t i = 0; i < count; i++) dst[i] = src[i * stride];
  }
}

static dc_status *check_perm(const dc_node *n, int rank) {
  int seen[DC_MAX_DIMS] = {0};
  int ok = n->nlist == rank;
  for (int i = 0; ok && i < rank; i++) {
    ok = n->list[i] >= 0 && n->list[i] < rank && !seen[n->list[i]];
    if (ok) seen[n->list[i]] = 1;
  }
  return ok ? NULL
            : dc_error(DC_ERR_MISMATCH, "permute (%s): perm is not a permutation of %d dims",
                       n->scope ? n->scope : "?", rank);
}

/* Output dim i is input dim perm[i]: walk the output in order (odometer over
 * its dims but the last), gathering each output row from the input. */
static dc_status *ref_permute(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *t = in_type(m, n, 0);
  int r = t->rank, es = dc_dtype_size(t->dtype);
  int64_t istride[DC_MAX_DIMS], ostride[DC_MAX_DIMS], odims[DC_MAX_DIMS], idx[DC_MAX_DIMS] = {0};
  int64_t total = (int64_t)dc_type_numel(t), inner, ioff = 0, s = 1;
  DC_TRY(check_perm(n, r));
  if (r == 0 || total == 0) {
    memcpy(out, in[0], (size_t)total * (size_t)es);
    return NULL;
  }
  for (int d = r - 1; d >= 0; d--) {
    istride[d] = s;
    s *= t->dims[d];
  }
  for (int i = 0; i < r; i++) {
    odims[i] = t->dims[n->list[i]];
    ostride[i] = istride[n->list[i]];
  }
  inner = odims[r - 1];
  for (int64_t o = 0; o * inner < total; o++) {
    copy_strided((uint8_t *)out + o * inner * es, (const uint8_t *)in[0] + ioff * es, inner,
                 ostride[r - 1], es);
    for (int d = r - 2; d >= 0; d--) {
      ioff += ostride[d];
      if (++idx[d] < odims[d]) break;
      ioff -= ostride[d] * odims[d];
      idx[d] = 0;
    }
  }
  return NULL;
}

/* Nearest: output (y, x) reads input (y / f, x / f), like
 * F.interpolate(scale_factor=f, mode="nearest") for an integer f.  NCHW
 * (any rank >= 3): the last two dims of every plane; NHWC [N,H,W,C]: dims 1
 * and 2, each pixel's C channels moving together. */
static dc_status *ref_upsample(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *t = in_type(m, n, 0);
  const float *x = in[0];
  float *y = out;
  int nhwc = n->layout == LAYOUT_NHWC;
  int64_t f = dc_node_int(n, "factor"), ch = nhwc ? t->dims[3] : 1;
  int64_t h = t->dims[t->rank - 2 - nhwc], w = t->dims[t->rank - 1 - nhwc];
  int64_t planes = h * w * ch != 0 ? (int64_t)dc_type_numel(t) / (h * w * ch) : 0, wo = w * f;
  DC_TRY(need_f32(m, n));
  for (int64_t p = 0; p < planes; p++) {
    const float *xp = x + p * h * w * ch;
    float *yp = y + p * h * f * wo * ch;
    for (int64_t oy = 0; oy < h * f; oy++) {
      const float *row = xp + (oy / f) * w * ch;
      for (int64_t ox = 0; ox < wo; ox++)
        for (int64_t c = 0; c < ch; c++) yp[(oy * wo + ox) * ch + c] = row[(ox / f) * ch + c];
    }
  }
  return NULL;
}

static int norm_axis(int64_t axis, int rank) {
  return (int)(axis < 0 ? axis + rank : axis);
}

/* Bytes of one contiguous run at dims [axis, rank) and the number of runs. */
static void split_at(const dc_type *t, int axis, int64_t *outer, int64_t *run_bytes) {
  int64_t o = 1, r = dc_dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++) {
    if (d < axis) o *= t->dims[d];
    else r *= t->dims[d];
  }
  *outer = o;
  *run_bytes = r;
}

static dc_status *ref_concat(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *ta = in_type(m, n, 0), *tb = in_type(m, n, 1);
  int axis = norm_axis(dc_node_int(n, "axis"), ta->rank);
  int64_t outer, outer_b, ra, rb; /* outer_b == outer: the dims before axis agree */
  uint8_t *y = out;
  split_at(ta, axis, &outer, &ra);
  split_at(tb, axis, &outer_b, &rb);
  (void)outer_b;
  for (int64_t o = 0; o < outer; o++) {
    memcpy(y, (const uint8_t *)in[0] + o * ra, (size_t)ra);
    memcpy(y + ra, (const uint8_t *)in[1] + o * rb, (size_t)rb);
    y += ra + rb;
  }
  return NULL;
}

/* [start, end) along axis; the length comes from the output type. */
static dc_status *ref_slice(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *t = in_type(m, n, 0);
  int axis = norm_axis(dc_node_int(n, "axis"), t->rank);
  int64_t dim = t->dims[axis], start = dc_node_int(n, "start"), len = n->type.dims[axis];
  int64_t outer, run, inner;
  if (start < 0) start += dim;
  if (start < 0 || len < 0 || start + len > dim)
    return dc_error(DC_ERR_MISMATCH, "slice (%s): [%lld, +%lld) is outside dim %d of size %lld",
                    n->scope ? n->scope : "?", (long long)start, (long long)len, axis,
                    (long long)dim);
  split_at(t, axis, &outer, &run);
  inner = dim ? run / dim : 0; /* bytes of one index along axis */
  for (int64_t o = 0; o < outer; o++)
    memcpy((uint8_t *)out + o * len * inner, (const uint8_t *)in[0] + o * run + start * inner,
           (size_t)(len * inner));
  return NULL;
}

/* out = x, its first E indices along axis cross-faded from prev's last E
 * (diffusers blend_v/blend_h): the weights are Python floats rounded to f32,
 * each product rounded, then the sum — as PyTorch's two muls and an add. */
static dc_status *ref_blend(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *x = in_type(m, n, 0), *p = in_type(m, n, 1);
  int axis = (int)dc_node_int(n, "axis");
  int64_t lx = x->dims[axis], lp = p->dims[axis], e = dc_node_int(n, "extent");
  if (e > lx) e = lx;
  if (e > lp) e = lp;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= x->dims[i];
  for (int i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
  const float *xv = in[0], *pv = in[1];
  float *o = out;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t y = 0; y < lx; y++) {
      const float *xr = xv + (a * lx + y) * inner;
      float *orow = o + (a * lx + y) * inner;
      if (y >= e) {
        if (orow != xr) memmove(orow, xr, (size_t)inner * sizeof(float));
        continue;
      }
      const float *pr = pv + (a * lp + lp - e + y) * inner;
      float wp = (float)(1.0 - (double)y / (double)e), wx = (float)((double)y / (double)e);
      for (int64_t i = 0; i < inner; i++) {
        /* each product rounded on its own: no fused multiply-add even with -mfma */
        volatile float t1 = pr[i] * wp, t2 = xr[i] * wx;
        orow[i] = t1 + t2;
      }
    }
  return NULL;
}

/* ---- token ids: EMBEDDING, EOS_POOL --------------------------------------- */
/* Id i of an i32 or i64 id tensor. */
static int64_t id_at(const void *ids, dc_dtype t, int64_t i) {
  return t == DT_I32 ? ((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

/* Row ids[i] of the table (in its stored dtype, decoded exactly), or zeros
 * for an id outside it (ops.def): the table is never read out of bounds,
 * whatever the ids. */
static dc_status *ref_embedding(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *ti = in_type(m, n, 0), *tt = in_type(m, n, 1);
  const uint8_t *table = in[1];
  float *y = out;
  int64_t count = (int64_t)dc_type_numel(ti), rows = tt->dims[0], d = tt->dims[1];
  int es = dc_dtype_size(tt->dtype);
  if (!dc_dtype_is_int(ti->dtype) || dc_dtype_is_int(tt->dtype))
    return dc_error(DC_ERR_UNSUPPORTED, "embedding (%s): reference kernel takes integer ids and a float table",
                    n->scope ? n->scope : "?");
  for (int64_t i = 0; i < count; i++) {
    int64_t id = id_at(in[0], ti->dtype, i);
    if (id >= 0 && id < rows) decode_chunk(tt->dtype, table + id * d * es, d, y + i * d);
    else memset(y + i * d, 0, (size_t)d * sizeof *y);
  }
  return NULL;
}

/* The position eos_pool takes of one row of s ids: the first equal to eos
 * (0 when none is), or with argmax the first of the largest. */
static int64_t pool_position(const void *ids, dc_dtype t, int64_t row0, int64_t s, int argmax, int64_t eos) {
  int64_t best = 0;
  for (int64_t j = 0; j < s; j++) {
    int64_t id = id_at(ids, t, row0 + j);
    if (!argmax && id == eos) return j;
    if (argmax && id > id_at(ids, t, row0 + best)) best = j;
  }
  return argmax ? best : 0;
}

static dc_status *ref_eos_pool(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tx = in_type(m, n, 0), *ti = in_type(m, n, 1);
  const float *x = in[0];
  float *y = out;
  int64_t b = tx->dims[0], s = tx->dims[1], d = tx->dims[2];
  int argmax = dc_node_int(n, "argmax") != 0;
  if (tx->dtype != DT_F32 || !dc_dtype_is_int(ti->dtype))
    return dc_error(DC_ERR_UNSUPPORTED, "eos_pool (%s): reference kernel takes f32 rows and integer ids",
                    n->scope ? n->scope : "?");
  for (int64_t r = 0; r < b; r++) {
    int64_t p = pool_position(in[1], ti->dtype, r * s, s, argmax, dc_node_int(n, "eos"));
    memcpy(y + r * d, x + (r * s + p) * d, (size_t)d * sizeof *y);
  }
  return NULL;
}

/* ---- the DiT ops: GATED_ADD, ROPE_FREQS, ROPE, REL_POS_BIAS ------------- */
/* x + gate * y, gate = mod[b, at..at+C); y may be x's buffer or x's own. */
static dc_status *ref_gated_add(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tx = in_type(m, n, 0), *tm = in_type(m, n, 2);
  const float *x = in[0], *yv = in[1], *mod = in[2];
  float *o = out;
  int64_t batch = tx->dims[0], rows = tx->dims[1], c = tx->dims[2], at = dc_node_int(n, "at");
  DC_TRY(need_f32(m, n));
  for (int64_t b = 0; b < batch; b++) {
    const float *gate = mod + b * tm->dims[1] + at;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t i = 0; i < c; i++) {
        int64_t e = (b * rows + r) * c + i;
        float t = gate[i] * yv[e];
        o[e] = x[e] + t;
      }
  }
  return NULL;
}

/* ops.def: per axis, pair i of its d dims turns by pos * theta^(-2i/d),
 * all in double; cos and sin each written to both columns of the pair. */
static dc_status *ref_rope_freqs(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tp = in_type(m, n, 0);
  const float *pos = in[0];
  float *y = out;
  int64_t seq = tp->dims[0], naxes = tp->dims[1], d = n->type.dims[2];
  double theta = dc_node_float(n, "theta");
  DC_TRY(need_f32(m, n));
  for (int64_t s = 0; s < seq; s++) {
    float *cs = y + s * 2 * d, *sn = cs + d;
    int64_t col = 0;
    for (int64_t a = 0; a < naxes; a++) {
      int64_t da = n->list[a];
      for (int64_t i = 0; i < da / 2; i++) {
        double freq = 1.0 / pow(theta, (double)(2 * i) / (double)da);
        double angle = (double)pos[s * naxes + a] * freq;
        cs[col + 2 * i] = cs[col + 2 * i + 1] = (float)cos(angle);
        sn[col + 2 * i] = sn[col + 2 * i + 1] = (float)sin(angle);
      }
      col += da;
    }
  }
  return NULL;
}

/* Adjacent pairs of every head of tokens >= start turned by the table's
 * angles (ops.def); each product rounded, then the sum, as torch.  Reads a
 * pair before writing it, so y may be x. */
static dc_status *ref_rope(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tx = in_type(m, n, 0);
  const float *x = in[0], *f = in[1];
  float *y = out;
  int64_t batch = tx->dims[0], seq = tx->dims[1], hd = tx->dims[2], heads = dc_node_int(n, "heads");
  int64_t d = hd / heads, start = dc_node_int(n, "start");
  DC_TRY(need_f32(m, n));
  for (int64_t b = 0; b < batch; b++)
    for (int64_t s = 0; s < seq; s++) {
      const float *xr = x + (b * seq + s) * hd;
      float *yr = y + (b * seq + s) * hd;
      if (s < start) {
        if (yr != xr) memcpy(yr, xr, (size_t)hd * sizeof *yr);
        continue;
      }
      const float *cs = f + (s - start) * 2 * d, *sn = cs + d;
      for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < d; i += 2) {
          float x0 = xr[h * d + i], x1 = xr[h * d + i + 1];
          float a0 = x0 * cs[i], b0 = -x1 * sn[i], a1 = x1 * cs[i + 1], b1 = x0 * sn[i + 1];
          yr[h * d + i] = a0 + b0;
          yr[h * d + i + 1] = a1 + b1;
        }
    }
  return NULL;
}

/* transformers' T5Attention._relative_position_bucket for one offset
 * (key - query), with the log term in f32 as torch computes it. */
int64_t dc_t5_position_bucket(int64_t rel, int64_t buckets, int bidirectional, int64_t max_distance) {
  int64_t bucket = 0;
  if (bidirectional) {
    buckets /= 2;
    if (rel > 0) bucket += buckets;
    rel = rel < 0 ? -rel : rel;
  } else {
    rel = rel < 0 ? -rel : 0;
  }
  int64_t max_exact = buckets / 2;
  if (rel < max_exact) return bucket + rel;
  float ratio = (float)rel / (float)max_exact;
  float scaled = logf(ratio) / (float)log((double)max_distance / (double)max_exact) * (float)(buckets - max_exact);
  int64_t large = max_exact + (int64_t)scaled;
  return bucket + (large < buckets - 1 ? large : buckets - 1);
}

static dc_status *ref_rel_pos_bias(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  const dc_type *tt = in_type(m, n, 0);
  int64_t nb = tt->dims[0], heads = tt->dims[1], sq = n->type.dims[1], sk = n->type.dims[2];
  int bidir = dc_node_int(n, "bidirectional") != 0;
  int64_t maxd = dc_node_int(n, "max_distance");
  float *y = out, *row = dc_malloc((size_t)heads * sizeof *row);
  if (!row) return dc_nomem("allocating a position bias row");
  for (int64_t i = 0; i < sq; i++)
    for (int64_t j = 0; j < sk; j++) {
      int64_t bk = dc_t5_position_bucket(j - i, nb, bidir, maxd);
      decode_chunk(tt->dtype, (const uint8_t *)in[0] + bk * heads * dc_dtype_size(tt->dtype), heads, row);
      for (int64_t h = 0; h < heads; h++) y[(h * sq + i) * sk + j] = row[h];
    }
  dc_free(row);
  return NULL;
}

/* ---- CONSTANT: nothing to compute; its bytes, held by the node, are
 * placed at its arena slot when its step runs (ir.h) ------------------- */
static dc_status *ref_constant(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  (void)m, (void)in;
  memcpy(out, n->data, (size_t)dc_type_bytes(&n->type));
  return NULL;
}

/* ---- the table ---------------------------------------------------------- */
static const dc_ref_kernel ref_kernels[OP_COUNT] = {
  [OP_CONV2D] = dc_ref_conv2d,
  [OP_LINEAR] = dc_ref_linear,
  [OP_GROUP_NORM] = dc_ref_group_norm,
  [OP_LAYER_NORM] = dc_ref_layer_norm,
  [OP_ADD] = ref_add,
  [OP_MUL] = ref_mul,
  [OP_SILU] = ref_silu,
  [OP_GELU] = ref_gelu,
  [OP_CLAMP] = ref_clamp,
  [OP_GEGLU] = ref_geglu,
  [OP_ATTENTION] = dc_ref_attention,
  [OP_RESHAPE] = ref_reshape,
  [OP_PERMUTE] = ref_permute,
  [OP_UPSAMPLE] = ref_upsample,
  [OP_CONCAT] = ref_concat,
  [OP_SLICE] = ref_slice,
  [OP_BLEND] = ref_blend,
  [OP_TIME_EMBED] = dc_ref_time_embed,
  [OP_CAST] = ref_cast,
  [OP_UPLOAD] = ref_upload,
  [OP_TRANSFER] = ref_upload, /* a copy between two arenas, like an upload */
  [OP_CONSTANT] = ref_constant, /* the one leaf with a kernel: it places its bytes */
  [OP_EMBEDDING] = ref_embedding,
  [OP_CAUSAL_ATTENTION] = dc_ref_causal_attention,
  [OP_QUICK_GELU] = ref_quick_gelu,
  [OP_EOS_POOL] = ref_eos_pool,
  [OP_RMS_NORM] = dc_ref_rms_norm,
  [OP_MOD_LAYER_NORM] = dc_ref_mod_layer_norm,
  [OP_GATED_ADD] = ref_gated_add,
  [OP_GELU_TANH] = ref_gelu_tanh,
  [OP_SCALE] = ref_scale,
  [OP_ROPE_FREQS] = ref_rope_freqs,
  [OP_ROPE] = ref_rope,
  [OP_ATTENTION_BIAS] = dc_ref_attention_bias,
  [OP_REL_POS_BIAS] = ref_rel_pos_bias,
  [OP_CONV3D] = dc_ref_conv3d,
};

dc_ref_kernel dc_ref_kernel_for(dc_op op) {
  if ((int)op < 0 || op >= OP_COUNT) return NULL;
  return ref_kernels[op];
}

/* ---- the dispatch: any float dtype in and out ----------------------------- */
/* The ops whose kernels move elements of any dtype (input and output dtypes
 * equal), or convert (cast): they run on the stored bytes.  (upsample's
 * kernel takes f32: a bf16 value widened and rounded back is the same value.) */
static int moves_bytes(dc_op op) {
  switch (op) {
    case OP_RESHAPE: case OP_PERMUTE: case OP_CONCAT: case OP_SLICE:
    case OP_UPLOAD: case OP_TRANSFER: case OP_CONSTANT: case OP_CAST: return 1;
    default: return 0;
  }
}

static int needs_widening(dc_dtype t) { return t != DT_F32 && !dc_dtype_is_int(t); }

static int all_f32_io(const dc_module *m, const dc_node *n) {
  if (needs_widening(n->type.dtype)) return 0;
  for (int i = 0; i < n->ninputs; i++)
    if (needs_widening(in_type(m, n, i)->dtype)) return 0;
  return 1;
}

/* n over f32 copies of its values: a module of n's inputs (their nodes as
 * they are, dtype f32) and n itself, which the kernel reads as it would m. */
static dc_status *run_widened(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  int k = n->ninputs;
  dc_node *nodes = dc_malloc(sizeof(dc_node) * (size_t)(k + 1));
  const void *win[DC_MAX_INPUTS];
  void *owned[DC_MAX_INPUTS] = {0};
  float *fout = NULL;
  dc_status *st = nodes ? NULL : dc_nomem("reference kernel: f32 copies of bf16/f16 values");
  for (int i = 0; i < k && !st; i++) {
    const dc_type *t = in_type(m, n, i);
    nodes[i] = m->nodes[n->inputs[i]];
    win[i] = in[i];
    if (!needs_widening(t->dtype)) continue;
    nodes[i].type.dtype = DT_F32;
    owned[i] = dc_malloc(dc_type_numel(t) * sizeof(float) + 1);
    if (!owned[i]) st = dc_nomem("reference kernel: an input widened to f32");
    else decode_chunk(t->dtype, in[i], (int64_t)dc_type_numel(t), owned[i]), win[i] = owned[i];
  }
  if (!st) {
    nodes[k] = *n;
    for (int i = 0; i < k; i++) nodes[k].inputs[i] = i;
    nodes[k].type.dtype = needs_widening(n->type.dtype) ? DT_F32 : n->type.dtype;
    if (nodes[k].type.dtype != n->type.dtype) {
      fout = dc_malloc(dc_type_numel(&n->type) * sizeof(float) + 1);
      if (!fout) st = dc_nomem("reference kernel: an f32 output to round");
    }
  }
  if (!st) {
    dc_module view = {0}; /* only the nodes: what the kernels read of a module */
    view.nodes = nodes, view.nnodes = view.cap_nodes = k + 1;
    st = ref_kernels[n->op](&view, &nodes[k], win, fout ? (void *)fout : out);
  }
  if (!st && fout) encode_chunk(n->type.dtype, fout, (int64_t)dc_type_numel(&n->type), out);
  for (int i = 0; i < k; i++) dc_free(owned[i]);
  dc_free(fout);
  dc_free(nodes);
  return st;
}

dc_status *dc_ref_run(const dc_module *m, const dc_node *n, const void *const *in, void *out) {
  dc_ref_kernel k = dc_ref_kernel_for(n->op);
  if (!k) return dc_error(DC_ERR_UNSUPPORTED, "%s (%s): no reference kernel", dc_op_get(n->op)->name, n->scope ? n->scope : "?");
  if (moves_bytes(n->op) || all_f32_io(m, n)) return k(m, n, in, out);
  if (n->type.dtype != DT_F32 && n->type.dtype != DT_BF16 && n->type.dtype != DT_F16)
    return dc_error(DC_ERR_UNSUPPORTED, "%s (%s): reference kernels write f32, bf16 or f16, not %s", dc_op_get(n->op)->name,
                    n->scope ? n->scope : "?", dc_dtype_name(n->type.dtype));
  return run_widened(m, n, in, out);
}

/* The ops above without a kernel, and why (ir/lowering.h). */
static const dc_lowering ref_marks[OP_COUNT] = {
  [OP_INPUT] = {DC_LOWER_RUNTIME, "the runtime copies inputs into the arena"},
  [OP_WEIGHT] = {DC_LOWER_RUNTIME, "kernels read weights where the runtime mapped them"},
  [OP_PROBE] = {DC_LOWER_REFUSED, "probe is an op for the IR's own tests (OPF_TEST); no backend lowers it"},
};

dc_lowering dc_ref_lowering(dc_op op) {
  if ((int)op < 0 || op >= OP_COUNT) return (dc_lowering){DC_LOWER_UNMARKED, NULL};
  if (ref_marks[op].how) return ref_marks[op];
  return (dc_lowering){ref_kernels[op] ? DC_LOWER_KERNEL : DC_LOWER_UNMARKED, NULL};
}
