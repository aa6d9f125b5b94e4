/* op_cases_gemm.c — the conv2d, conv3d and linear rows of the op case table
 * (op_cases.h), generated from compact shape lists because their inputs
 * (bias, residual) and output shape follow from the attributes.  The rows
 * come from the old test_llvm_gemm.c (blocking: channels and features not
 * multiples of the vector width, odd and tiny images, stride 2, asymmetric
 * padding, several k blocks, M = 1, K = 0, every epilogue) and
 * test_cuda_gemm.c (tiles of the CUDA generator, f32 and bf16 / f16 tensor-
 * core compute, weights stored as bf16 / f16 / fp8, the residual aliased
 * onto the output), merged: each runs on every backend but the LLVM ones
 * too big for the CUDA emulator (every CUDA thread a fiber), marked OC_CPU.
 * Tolerances (oc_default_tol): rel L2 1e-5 on LLVM and CUDA f32, 1e-2 on
 * the CUDA tensor cores, as the old files had. */
#include <math.h>
#include <string.h>

#include "op_cases.h"

enum { RES_NONE, RES_FULL, RES_CHANNEL }; /* residual: none, output-shaped, one per channel */

typedef struct {
  int64_t n, c, h, w, o, kh, kw, stride, pt, pb, pl, pr;
} conv_shape;

static oc_shape f32_shape(int rank, const int64_t *dims) {
  oc_shape s = {DT_F32, rank, {0}};
  memcpy(s.dims, dims, sizeof(int64_t) * (size_t)rank);
  return s;
}

static void set_epilogue(op_case *c, int first, int bias, int act, int res) {
  c->attrs[first] = (oc_attr){"bias", bias, 0, 0};
  c->attrs[first + 1] = (oc_attr){"act", act, 0, 0};
  c->attrs[first + 2] = (oc_attr){"residual", res != RES_NONE, 0, 0};
}

/* x [N,C,H,W] * w [O,C,kh,kw] (+ bias [O]) (+ residual [N,O,H',W'] or [N,O,1,1]). */
static op_case conv_row(conv_shape s, int bias, int act, int res) {
  op_case c = {.op = OP_CONV2D, .cuda_computes = OC_CC_GEMM};
  int64_t ho = (s.h + s.pt + s.pb - s.kh) / s.stride + 1, wo = (s.w + s.pl + s.pr - s.kw) / s.stride + 1;
  c.in[c.nin++] = f32_shape(4, (int64_t[]){s.n, s.c, s.h, s.w});
  c.in[c.nin++] = f32_shape(4, (int64_t[]){s.o, s.c, s.kh, s.kw});
  if (bias) c.in[c.nin++] = f32_shape(1, (int64_t[]){s.o});
  if (res == RES_FULL) c.in[c.nin++] = f32_shape(4, (int64_t[]){s.n, s.o, ho, wo});
  if (res == RES_CHANNEL) c.in[c.nin++] = f32_shape(4, (int64_t[]){s.n, s.o, 1, 1});
  static const char *pads[] = {"stride", "pad_t", "pad_b", "pad_l", "pad_r"};
  const int64_t vals[] = {s.stride, s.pt, s.pb, s.pl, s.pr};
  for (int i = 0; i < 5; i++) c.attrs[i] = (oc_attr){pads[i], vals[i], 0, 0};
  set_epilogue(&c, 5, bias, act, res);
  return c;
}

/* x [lead..., K] · w [N, K]ᵀ (+ bias [N]) (+ residual output-shaped or [N']). */
static op_case linear_row(int rank, const int64_t *xdims, int64_t n, int bias, int act, int res) {
  op_case c = {.op = OP_LINEAR, .cuda_computes = OC_CC_GEMM};
  int64_t odims[DC_MAX_DIMS];
  memcpy(odims, xdims, sizeof(int64_t) * (size_t)rank);
  odims[rank - 1] = act == ACT_GEGLU ? n / 2 : n;
  c.in[c.nin++] = f32_shape(rank, xdims);
  c.in[c.nin++] = f32_shape(2, (int64_t[]){n, xdims[rank - 1]});
  if (bias) c.in[c.nin++] = f32_shape(1, (int64_t[]){n});
  if (res == RES_FULL) c.in[c.nin++] = f32_shape(rank, odims);
  if (res == RES_CHANNEL) c.in[c.nin++] = f32_shape(1, &odims[rank - 1]);
  set_epilogue(&c, 0, bias, act, res);
  return c;
}

/* The row with the output also written over its residual (the last input). */
static op_case aliased(op_case c) {
  c.inplace = 1;
  c.alias = c.nin - 1;
  return c;
}

/* A linear row (output [B,S,N], full residual) with its residual gated
 * (ops.def): mod [B, width] appended, the gate the N values at `at`. */
static op_case gated(op_case c, int64_t width, int64_t at) {
  c.in[c.nin++] = f32_shape(2, (int64_t[]){c.in[0].dims[0], width});
  c.attrs[3] = (oc_attr){"gate", 1, 0, 0};
  c.attrs[4] = (oc_attr){"gate_at", at, 0, 0};
  return c;
}

/* A gated row with the output also written over its residual (before mod). */
static op_case gated_in_place(op_case c) {
  c.inplace = 1;
  c.alias = c.nin - 2;
  return c;
}

static op_case cpu_only(op_case c, const char *why) {
  c.where = OC_CPU;
  c.why = why;
  return c;
}

static op_case stored(op_case c, dc_dtype wt) {
  c.wdtype = wt;
  c.data = OC_STORED;
  return c;
}

#define LLVM_BLOCKING "the LLVM gemm's blocking; too big for the CUDA emulator"
#define CONV(...) conv_row((conv_shape){__VA_ARGS__}
#define LIN(r, ...) linear_row(r, (int64_t[]){__VA_ARGS__}

/* The LLVM generator's cases (k_gemm.c, k_conv.c, k_linear.c). */
static int llvm_rows(op_case *out) {
  int k = 0;
  conv_shape s3 = {1, 16, 8, 16, 32, 3, 3, 1, 1, 1, 1, 1};
  out[k++] = conv_row(s3, 0, ACT_NONE, RES_NONE), out[k++] = conv_row(s3, 1, ACT_NONE, RES_NONE);
  /* pad 1 stride 1 at several widths: the rows packer (W' % 16 == 0) and the gather one */
  out[k++] = CONV(1, 17, 9, 7, 33, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(2, 5, 13, 5, 3, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 3, 16, 32, 17, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(3, 33, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1), 0, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 8, 1, 1, 7, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  /* stride 2, symmetric and diffusers' asymmetric downsample padding (0,1,0,1) */
  out[k++] = CONV(1, 16, 16, 16, 20, 3, 3, 2, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(2, 17, 16, 16, 33, 3, 3, 2, 0, 1, 0, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1), 1, ACT_NONE, RES_NONE);
  /* 1x1: pointwise packer, odd pixel counts, batch 3 */
  out[k++] = CONV(1, 32, 8, 8, 40, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(3, 17, 7, 9, 33, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 3, 1, 1, 5, 1, 1, 1, 0, 0, 0, 0), 0, ACT_NONE, RES_NONE);
  /* K > kc: several k blocks with partial sums in scratch */
  out[k++] = CONV(1, 40, 8, 16, 24, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(2, 300, 5, 6, 13, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE);
  /* conv_in-like 7x7 kernel, and a 4x2 one with uneven padding */
  out[k++] = CONV(1, 3, 12, 11, 8, 7, 7, 1, 3, 3, 3, 3), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 4, 9, 10, 9, 4, 2, 1, 2, 1, 0, 1), 0, ACT_NONE, RES_NONE);
  /* epilogues: each act, residuals, with one and several k blocks */
  conv_shape e1 = {2, 17, 7, 9, 33, 3, 3, 1, 1, 1, 1, 1}, e2 = {1, 40, 8, 16, 24, 3, 3, 1, 1, 1, 1, 1};
  for (int act = ACT_NONE; act <= ACT_GELU; act++)
    for (int res = RES_NONE; res <= RES_CHANNEL; res++) {
      out[k++] = cpu_only(conv_row(e1, 1, act, res), LLVM_BLOCKING);
      out[k++] = cpu_only(conv_row(e2, res != RES_FULL, act, res), LLVM_BLOCKING);
    }
  out[k++] = CONV(3, 5, 13, 5, 3, 3, 3, 2, 0, 1, 0, 1), 1, ACT_SILU, RES_FULL);
  /* the residual is the output buffer (k = 360: two k blocks) */
  conv_shape two = {2, 40, 8, 16, 24, 3, 3, 1, 1, 1, 1, 1};
  out[k++] = aliased(conv_row(two, 1, ACT_SILU, RES_FULL)), out[k++] = aliased(conv_row(two, 1, ACT_NONE, RES_FULL));
  out[k++] = aliased(LIN(3, 2, 77, 600), 40, 1, ACT_GELU, RES_FULL));

  static const int64_t ms[] = {1, 2, 7, 77, 154, 300}, ns[] = {1, 5, 16, 17, 40, 1280}, ks[] = {1, 3, 16, 33, 320};
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++) {
      int64_t m = ms[i], n = ns[j], kk = ks[(i + j) % 5];
      if (m * n * kk > 40000000) kk = 16;
      out[k++] = cpu_only(LIN(2, m, kk), n, (i + j) % 2, ACT_NONE, RES_NONE), LLVM_BLOCKING);
    }
  for (int i = 0; i < 5; i++) out[k++] = LIN(2, 7, ks[i]), 17, 1, ACT_NONE, RES_NONE);
  out[k++] = cpu_only(LIN(3, 2, 77, 320), 40, 1, ACT_NONE, RES_NONE), LLVM_BLOCKING);
  out[k++] = cpu_only(LIN(3, 2, 77, 768), 320, 0, ACT_NONE, RES_NONE), LLVM_BLOCKING);
  out[k++] = LIN(1, 33), 17, 1, ACT_NONE, RES_NONE);
  out[k++] = LIN(2, 3, 0), 5, 1, ACT_SILU, RES_NONE); /* K = 0: bias only */
  out[k++] = LIN(4, 2, 3, 5, 33), 19, 1, ACT_SILU, RES_FULL);
  /* epilogues: acts, geglu (H a multiple of 16 and not), residuals */
  for (int act = ACT_NONE; act <= ACT_GEGLU; act++)
    for (int res = RES_NONE; res <= RES_CHANNEL; res++) {
      out[k++] = cpu_only(LIN(3, 2, 77, 40), 34, 1, act, res), LLVM_BLOCKING);
      out[k++] = cpu_only(LIN(3, 3, 50, 300), 64, res != RES_FULL, act, res), LLVM_BLOCKING);
    }
  out[k++] = cpu_only(LIN(3, 2, 64, 320), 2560, 1, ACT_GEGLU, RES_NONE), LLVM_BLOCKING);
  out[k++] = cpu_only(LIN(2, 1, 1280), 1280, 1, ACT_SILU, RES_NONE), LLVM_BLOCKING);
  out[k++] = cpu_only(LIN(3, 2, 154, 1280), 320, 1, ACT_NONE, RES_FULL), LLVM_BLOCKING);
  /* quick_gelu (CLIP's fc1): a partial column block, and over its residual */
  out[k++] = cpu_only(LIN(3, 2, 77, 40), 34, 1, ACT_QUICK_GELU, RES_NONE), LLVM_BLOCKING);
  out[k++] = cpu_only(aliased(LIN(3, 3, 50, 300), 64, 1, ACT_QUICK_GELU, RES_FULL)), LLVM_BLOCKING);
  /* gelu_tanh (a DiT's feed-forward and T5's gated gelu_new): a partial
   * column block, over its residual in place, a wide one (SD3's 4·1536 at a
   * few tokens), M = 1 */
  out[k++] = cpu_only(LIN(3, 2, 77, 40), 34, 1, ACT_GELU_TANH, RES_NONE), LLVM_BLOCKING);
  out[k++] = cpu_only(aliased(LIN(3, 3, 50, 300), 64, 1, ACT_GELU_TANH, RES_FULL)), LLVM_BLOCKING);
  out[k++] = cpu_only(LIN(3, 1, 9, 1536), 6144, 1, ACT_GELU_TANH, RES_NONE), LLVM_BLOCKING);
  out[k++] = cpu_only(LIN(2, 1, 64), 40, 0, ACT_GELU_TANH, RES_CHANNEL), LLVM_BLOCKING);
  /* gated residuals (a DiT's to_out / ff.net.2 / proj_out with its
   * gated_add): K = 300 (two k blocks), S = 77 and 50 rows per sample (no
   * multiple of the 6-row tile: a tile straddles two samples), N odd, wide */
  out[k++] = cpu_only(gated(LIN(3, 2, 77, 300), 65, 1, ACT_NONE, RES_FULL), 6 * 65, 2 * 65), LLVM_BLOCKING);
  out[k++] = cpu_only(gated_in_place(gated(LIN(3, 3, 50, 300), 37, 1, ACT_GELU_TANH, RES_FULL), 3 * 37 + 3, 37 + 3)),
                      LLVM_BLOCKING);
  out[k++] = cpu_only(gated(LIN(3, 1, 9, 96), 384, 0, ACT_GELU_TANH, RES_FULL), 6 * 384, 5 * 384), LLVM_BLOCKING);
  return k;
}

/* Gated residuals on every backend (small enough for the CUDA emulator):
 * batch 1 and 3, S = 7, 11, 13 rows per sample (no multiple of the LLVM
 * tile's 6 or the CUDA tile's 64, so tiles straddle samples), N odd, the
 * gate at offsets no multiple of the vector width, with and without bias,
 * act gelu_tanh and geglu, in place over the residual, a weight stored in
 * bf16, and the tensor cores. */
static int gated_rows(op_case *out) {
  int k = 0;
  out[k++] = gated(LIN(3, 1, 7, 40), 33, 1, ACT_NONE, RES_FULL), 6 * 33, 2 * 33);
  out[k++] = gated(LIN(3, 3, 11, 24), 17, 1, ACT_GELU_TANH, RES_FULL), 3 * 17 + 5, 17 + 5);
  out[k++] = gated(LIN(3, 3, 13, 20), 35, 0, ACT_NONE, RES_FULL), 2 * 35, 35);
  out[k++] = gated_in_place(gated(LIN(3, 3, 13, 40), 35, 1, ACT_NONE, RES_FULL), 6 * 35, 5 * 35));
  out[k++] = gated_in_place(gated(LIN(3, 1, 9, 24), 19, 1, ACT_GELU_TANH, RES_FULL), 19, 0));
  out[k++] = gated(LIN(3, 2, 9, 24), 40, 1, ACT_GEGLU, RES_FULL), 3 * 20 + 1, 20 + 1);
  out[k++] = stored(gated(LIN(3, 3, 11, 24), 19, 1, ACT_GELU_TANH, RES_FULL), 6 * 19, 4 * 19), DT_BF16);
  out[k++] = gated_in_place(stored(gated(LIN(3, 1, 7, 33), 21, 1, ACT_NONE, RES_FULL), 3 * 21, 2 * 21), DT_BF16));
  /* two M tiles (150 rows) and two N tiles (70 columns) on CUDA; f16 tensor cores too */
  out[k] = gated(LIN(3, 3, 50, 24), 70, 1, ACT_GELU_TANH, RES_FULL), 6 * 70, 70);
  out[k++].cuda_computes |= OC_CC_F16;
  return k;
}

/* The CUDA generator's cases (g_gemm.c): its tiles, C = 4 and O = 3. */
static int cuda_rows(op_case *out) {
  int k = 0;
  /* 3x3 pad 1 with C = 4 (conv_in), and O = 3 (the VAE's conv_out) */
  out[k++] = CONV(1, 4, 9, 7, 32, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 16, 10, 11, 3, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  /* 1x1, odd pixel count, batch 2 */
  out[k++] = CONV(2, 24, 5, 7, 12, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE);
  /* stride 2: the VAE downsample's (0,1,0,1) padding, and symmetric */
  out[k++] = CONV(2, 8, 12, 12, 16, 3, 3, 2, 0, 1, 0, 1), 0, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 6, 9, 11, 7, 3, 3, 2, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  /* several M and N tiles (180 rows, 70 columns) and K tiles (K = 180) */
  out[k++] = CONV(2, 3, 10, 9, 70, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  out[k++] = CONV(1, 20, 8, 8, 24, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE);
  /* epilogues: act x residual, and a residual written over in place */
  conv_shape e = {2, 6, 7, 5, 10, 3, 3, 1, 1, 1, 1, 1};
  for (int act = ACT_NONE; act <= ACT_GELU; act++)
    for (int res = RES_NONE; res <= RES_CHANNEL; res++) out[k++] = conv_row(e, res != RES_CHANNEL, act, res);
  out[k] = aliased(conv_row(e, 1, ACT_SILU, RES_FULL));
  out[k++].cuda_computes |= OC_CC_F16; /* f16 tensor cores too */
  out[k++] = aliased(CONV(1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1), 0, ACT_NONE, RES_FULL));
  /* M = 1 (a pooled text embedding), K not a multiple of 16 or 32 */
  out[k++] = LIN(2, 1, 40), 96, 1, ACT_SILU, RES_NONE);
  /* M = 77 * 2 (text tokens, batch 2), K = 45, N = 70: several tiles */
  out[k++] = LIN(3, 2, 77, 45), 70, 1, ACT_NONE, RES_NONE);
  out[k++] = LIN(3, 2, 77, 24), 40, 0, ACT_GELU, RES_FULL);
  out[k++] = LIN(3, 2, 77, 24), 40, 1, ACT_QUICK_GELU, RES_NONE); /* CLIP's fc1 */
  out[k++] = stored(LIN(3, 2, 9, 24), 33, 1, ACT_QUICK_GELU, RES_CHANNEL), DT_F16);
  out[k] = LIN(3, 2, 77, 24), 70, 1, ACT_GELU_TANH, RES_NONE); /* a DiT's feed-forward */
  out[k++].cuda_computes |= OC_CC_F16;
  out[k++] = aliased(LIN(3, 2, 9, 40), 40, 0, ACT_GELU_TANH, RES_FULL));
  out[k++] = stored(LIN(2, 5, 33), 17, 1, ACT_GELU_TANH, RES_CHANNEL), DT_BF16);
  /* geglu: value and gate columns in the same block, H = 70 spans two blocks */
  out[k] = LIN(3, 2, 77, 24), 140, 1, ACT_GEGLU, RES_NONE);
  out[k++].cuda_computes |= OC_CC_F16;
  out[k++] = LIN(2, 5, 33), 22, 1, ACT_GEGLU, RES_FULL);
  out[k++] = aliased(LIN(2, 5, 33), 22, 0, ACT_GEGLU, RES_FULL));
  /* residual broadcast per feature, in place over a full residual */
  out[k++] = LIN(2, 7, 50), 65, 1, ACT_SILU, RES_CHANNEL);
  out[k++] = aliased(LIN(3, 2, 77, 40), 40, 1, ACT_NONE, RES_FULL));
  /* K = 1 and a long K (several K tiles) */
  out[k++] = LIN(2, 9, 1), 17, 1, ACT_NONE, RES_NONE);
  out[k++] = LIN(2, 3, 300), 20, 1, ACT_NONE, RES_NONE);
  /* weights stored as bf16 / f16 / fp8, decoded in the kernel */
  static const dc_dtype dts[] = {DT_BF16, DT_F16, DT_F8_E4M3, DT_F8_E5M2};
  for (int i = 0; i < 4; i++) {
    out[k++] = stored(LIN(3, 2, 77, 40), 72, 1, ACT_GEGLU, RES_NONE), dts[i]);
    out[k++] = stored(CONV(1, 6, 9, 7, 10, 3, 3, 2, 0, 1, 0, 1), 1, ACT_SILU, RES_NONE), dts[i]);
  }
  return k;
}

/* NHWC (--layout nhwc), shapes channels first.  LLVM at rel L2 6e-8·sqrt(K)
 * (it sums the K products in (ky, kx, c) order, the reference in (c, ky,
 * kx): two float sums differ by about eps·sqrt(K), measured under
 * 3e-8·sqrt(K)), bit for bit on small integers; CUDA at the table's 1e-5 and
 * 1e-2. */
static op_case nhwc(op_case c) {
  c.layout = LAYOUT_NHWC;
  c.tol[0] = (oc_tol){0, 6e-8 * sqrt((double)(c.in[1].dims[1] * c.in[1].dims[2] * c.in[1].dims[3])), 0};
  return c;
}

static op_case integers(op_case c) {
  c.data = OC_INTEGERS;
  c.tol[0] = (oc_tol){1, 0, 0};
  return cpu_only(c, "every partial sum exact: the LLVM kernel gives the reference's bits");
}

static op_case stored_with_bias(op_case c, dc_dtype wt) {
  c = stored(c, wt);
  c.wbias = 1;
  return c;
}

/* conv3d (ops.def): x [B,C,T,H,W] * w [O,C,kt,kh,kw] (+ bias [O]), padding
 * in H and W only.  Strides {t, h, w}, padding {h, w}. */
typedef struct {
  int64_t b, c, t, h, w, o, kt, kh, kw, st, sh, sw, ph, pw;
} conv3d_shape;

static op_case conv3d_row(conv3d_shape s, int bias) {
  op_case c = {.op = OP_CONV3D, .cuda_computes = OC_CC_GEMM};
  c.in[c.nin++] = f32_shape(5, (int64_t[]){s.b, s.c, s.t, s.h, s.w});
  c.in[c.nin++] = f32_shape(5, (int64_t[]){s.o, s.c, s.kt, s.kh, s.kw});
  if (bias) c.in[c.nin++] = f32_shape(1, (int64_t[]){s.o});
  static const char *names[] = {"bias", "pad_h", "pad_w", "stride_h", "stride_t", "stride_w"};
  const int64_t vals[] = {bias, s.ph, s.pw, s.sh, s.st, s.sw};
  for (int i = 0; i < 6; i++) c.attrs[i] = (oc_attr){names[i], vals[i], 0, 0};
  return c;
}

#define CONV3D(...) conv3d_row((conv3d_shape){__VA_ARGS__}

/* CogVideoX's causal convs (3x3x3 over the frames after the padding ones,
 * stride 1, pad 1) and 1x1x1 shortcuts; stride 2 in each axis alone and in
 * all three, kernels 1 and 3 per axis, padding 0 and 1, odd sizes, batch 2,
 * with and without bias, weights stored in bf16, f16 and fp8 e4m3. */
static int conv3d_rows(op_case *out) {
  int k = 0;
  out[k++] = CONV3D(1, 3, 3, 5, 6, 4, 3, 3, 3, 1, 1, 1, 1, 1), 1);
  out[k++] = CONV3D(2, 5, 4, 7, 5, 3, 3, 3, 3, 1, 1, 1, 1, 1), 0);
  out[k++] = CONV3D(2, 4, 5, 6, 7, 6, 3, 3, 3, 2, 1, 1, 1, 1), 1);  /* stride_t 2 */
  out[k++] = CONV3D(1, 3, 3, 9, 7, 5, 1, 3, 3, 1, 2, 1, 1, 1), 1);  /* stride_h 2 */
  out[k++] = CONV3D(1, 3, 3, 7, 9, 5, 1, 3, 3, 1, 1, 2, 0, 1), 0);  /* stride_w 2 */
  out[k++] = CONV3D(2, 3, 5, 9, 8, 4, 3, 3, 3, 2, 2, 2, 0, 0), 1);  /* every axis 2, no padding */
  out[k++] = CONV3D(2, 6, 3, 5, 5, 7, 1, 1, 1, 1, 1, 1, 0, 0), 1);  /* 1x1x1 */
  out[k++] = CONV3D(1, 4, 6, 5, 7, 3, 3, 1, 1, 1, 1, 1, 0, 0), 0);  /* 3x1x1: time only */
  out[k++] = CONV3D(1, 4, 3, 6, 5, 3, 1, 3, 1, 1, 1, 1, 1, 0), 1);  /* 1x3x1 */
  out[k++] = CONV3D(1, 4, 3, 5, 6, 3, 1, 1, 3, 1, 1, 1, 0, 1), 1);  /* 1x1x3 */
  out[k++] = CONV3D(1, 2, 3, 1, 1, 3, 3, 3, 3, 1, 1, 1, 1, 1), 1);  /* a 1x1 frame: only the centre taps */
  out[k++] = CONV3D(1, 17, 3, 4, 19, 33, 3, 3, 3, 1, 1, 1, 1, 1), 1); /* widths no multiple of a vector */
  /* W' a multiple of the vector width (LLVM's rows packer at 8 and 16
   * lanes), over several output frames and with stride_t 2; K = 11·27 = 297
   * (two k blocks) */
  out[k++] = CONV3D(1, 4, 4, 3, 16, 5, 3, 3, 3, 1, 1, 1, 1, 1), 1);
  out[k++] = CONV3D(2, 3, 5, 2, 32, 6, 3, 3, 3, 2, 1, 1, 1, 1), 0);
  out[k++] = CONV3D(1, 11, 3, 4, 8, 13, 3, 3, 3, 1, 1, 1, 1, 1), 1);
  out[k++] = stored(CONV3D(1, 5, 4, 5, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1), 1), DT_BF16);
  out[k++] = stored_with_bias(CONV3D(2, 3, 3, 6, 5, 4, 3, 3, 3, 1, 2, 2, 1, 1), 1), DT_F16);
  out[k++] = stored(CONV3D(1, 4, 3, 5, 7, 6, 3, 3, 3, 1, 1, 1, 1, 1), 0), DT_F8_E4M3);
  return k;
}

static int nhwc_rows(op_case *out) {
  int k = 0;
  /* the old test_layout_kernels.c: 1x1 (a linear over [N·H·W, C]), C no multiple of 16 */
  out[k++] = nhwc(CONV(2, 40, 6, 7, 24, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(1, 17, 5, 9, 33, 1, 1, 1, 0, 0, 0, 0), 0, ACT_NONE, RES_FULL));
  /* 3x3 pad 1: resnet convs; C > 256 gives two k blocks per tap */
  out[k++] = nhwc(CONV(2, 32, 9, 10, 40, 3, 3, 1, 1, 1, 1, 1), 1, ACT_SILU, RES_NONE));
  out[k++] = nhwc(CONV(1, 300, 5, 6, 20, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_FULL));
  out[k++] = nhwc(CONV(1, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  /* VAE conv_in / conv_out: 3 channels in or out */
  out[k++] = nhwc(CONV(1, 3, 12, 11, 8, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(3, 5, 7, 5, 3, 3, 3, 1, 1, 1, 1, 1), 1, ACT_SILU, RES_NONE));
  /* the VAE encoder's downsample: stride 2, pad (0,1,0,1); odd sizes; the UNet's: pad 1 */
  out[k++] = nhwc(CONV(1, 24, 16, 15, 20, 3, 3, 2, 0, 1, 0, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(2, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(1, 33, 9, 8, 17, 3, 3, 2, 1, 1, 1, 1), 0, ACT_NONE, RES_NONE));
  /* a 1x1 that is no linear: stride 2 (one k segment, rows addressed per pixel) */
  out[k++] = nhwc(CONV(1, 20, 9, 8, 12, 1, 1, 2, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE));
  /* other kernels and uneven padding */
  out[k++] = nhwc(CONV(1, 4, 9, 10, 9, 4, 2, 1, 2, 1, 0, 1), 0, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(1, 3, 8, 9, 16, 7, 7, 1, 3, 3, 3, 3), 1, ACT_NONE, RES_NONE));
  /* epilogues: silu then residual, per-channel residual, residual in place */
  out[k++] = nhwc(CONV(2, 17, 7, 9, 33, 3, 3, 1, 1, 1, 1, 1), 1, ACT_SILU, RES_FULL));
  out[k++] = nhwc(CONV(2, 17, 7, 9, 33, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_CHANNEL));
  out[k++] = nhwc(aliased(CONV(2, 320, 6, 7, 37, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_FULL)));
  out[k++] = nhwc(aliased(CONV(1, 40, 6, 5, 24, 1, 1, 1, 0, 0, 0, 0), 0, ACT_SILU, RES_FULL)));
  /* stored weights (layerwise casting): bf16 and fp8 e4m3 weight and bias */
  out[k++] = nhwc(stored_with_bias(CONV(1, 20, 7, 9, 18, 3, 3, 1, 1, 1, 1, 1), 1, ACT_SILU, RES_NONE), DT_BF16));
  out[k++] = nhwc(stored_with_bias(CONV(2, 19, 6, 6, 21, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_FULL), DT_BF16));
  out[k++] = nhwc(stored_with_bias(CONV(1, 20, 7, 9, 18, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE), DT_F8_E4M3));
  out[k++] = nhwc(stored_with_bias(CONV(1, 12, 9, 8, 10, 3, 3, 2, 0, 1, 0, 1), 1, ACT_SILU, RES_NONE), DT_F8_E4M3));
  /* small integers: every partial sum exact, so any summation order gives the reference's bits */
  out[k++] = integers(nhwc(CONV(2, 300, 6, 7, 37, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_FULL)));
  out[k++] = integers(nhwc(CONV(1, 24, 16, 15, 20, 3, 3, 2, 0, 1, 0, 1), 1, ACT_NONE, RES_NONE)));
  out[k] = integers(nhwc(CONV(2, 19, 6, 6, 21, 1, 1, 1, 0, 0, 0, 0), 0, ACT_NONE, RES_CHANNEL)));
  out[k++].wdtype = DT_BF16;
  /* the old test_cuda_layout.c: C = 24, 4, 20 (16-byte loads), 3, 5, 6 (scalar loads);
   * several M, N and K tiles; epilogues; stored weights decoded in the kernel */
  out[k++] = nhwc(CONV(2, 24, 5, 7, 12, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(1, 4, 9, 7, 32, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(2, 3, 10, 9, 70, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(1, 20, 8, 8, 24, 3, 3, 1, 1, 1, 1, 1), 0, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1), 0, ACT_NONE, RES_NONE));
  out[k++] = nhwc(CONV(2, 8, 12, 11, 16, 3, 3, 2, 0, 1, 0, 1), 1, ACT_NONE, RES_NONE));
  conv_shape e = {2, 6, 7, 5, 10, 3, 3, 1, 1, 1, 1, 1};
  out[k++] = nhwc(conv_row(e, 1, ACT_SILU, RES_FULL));
  out[k++] = nhwc(aliased(conv_row(e, 1, ACT_SILU, RES_FULL)));
  out[k++] = nhwc(CONV(1, 8, 6, 7, 12, 3, 3, 1, 1, 1, 1, 1), 0, ACT_SILU, RES_CHANNEL));
  out[k++] = nhwc(aliased(CONV(1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1), 0, ACT_NONE, RES_FULL)));
  out[k++] = nhwc(stored_with_bias(CONV(1, 8, 9, 7, 10, 3, 3, 2, 0, 1, 0, 1), 1, ACT_SILU, RES_NONE), DT_BF16));
  out[k++] = nhwc(stored_with_bias(CONV(1, 6, 9, 7, 10, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE), DT_F8_E4M3));
  /* a wide grid (1536 pixels x 1408 channels, 528 blocks of 64x64 on 132
   * SMs: one K tile of 8 favours many resident warps over a big tile) on
   * the mma.sync kernel; K = 8 keeps the emulator to seconds */
  out[k] = nhwc(CONV(2, 8, 24, 32, 1408, 1, 1, 1, 0, 0, 0, 0), 1, ACT_SILU, RES_NONE));
  out[k].cuda_computes = OC_CC_BF16, out[k].where = OC_CUDA, out[k++].why = "a wide grid of the CUDA mma.sync kernel";
  return k;
}

/* The mma.sync generator (g_mma_gemm.c: linear and NHWC conv at bf16 / f16
 * compute), its tiles forced by the SM count the rows give (tests/
 * test_cuda_mma_gemm.c checks that each tile, 1, 2 and 3 stages and every
 * operand path of the kernel are taken by some row): partial M, N and K
 * tiles everywhere; A as f32 (float4 or scalar loads), B by cp.async (a
 * weight in the compute type, K % 8 == 0) or converted in registers. */
static op_case mma(op_case c, int sm_count, int f16_too) {
  c.cuda_sm_count = sm_count;
  c.cuda_computes = OC_CC_BF16 | (f16_too ? OC_CC_F16 : 0);
  c.where = OC_CUDA;
  c.why = "the CUDA mma.sync tiles, forced by the SM count";
  return c;
}

static int mma_rows(op_case *out) {
  int k = 0;
  /* 128x128, 3 stages, 4 K tiles (the last partial), f32 weights; and again
   * on 64x64 (the default 132 SMs), with f16 compute too */
  out[k++] = mma(LIN(3, 2, 100, 100), 200, 1, ACT_GELU_TANH, RES_NONE), 1, 1);
  out[k++] = mma(LIN(3, 2, 100, 100), 200, 1, ACT_GELU_TANH, RES_NONE), 0, 1);
  /* 128x64 with geglu pairs and a bf16 weight by cp.async; in place over the residual */
  out[k++] = mma(stored(LIN(2, 200, 96), 260, 1, ACT_GEGLU, RES_NONE), DT_BF16), 1, 0);
  out[k++] = mma(aliased(LIN(2, 200, 96), 130, 1, ACT_NONE, RES_FULL)), 1, 0); /* (an aliased run draws any finite bf16: f32 here) */
  /* NHWC 3x3 pad 1 on 128x128 (1 SM) and 128x64 (2 SMs): a bf16 weight and
   * bias by cp.async, silu and a residual; an f16 weight (cp.async under f16
   * compute, registers under bf16) */
  out[k++] = mma(nhwc(stored_with_bias(CONV(2, 16, 11, 12, 72, 3, 3, 1, 1, 1, 1, 1), 1, ACT_SILU, RES_FULL), DT_BF16)), 1, 0);
  out[k++] = mma(nhwc(stored_with_bias(CONV(2, 16, 11, 12, 72, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE), DT_F16)), 2, 1);
  /* stride 2 with the VAE's (0,1,0,1) padding on 128x64, and C % 4 != 0 (scalar A loads) */
  out[k++] = mma(nhwc(CONV(2, 24, 20, 18, 150, 3, 3, 2, 0, 1, 0, 1), 1, ACT_NONE, RES_CHANNEL)), 2, 0);
  out[k++] = mma(nhwc(CONV(2, 6, 20, 18, 150, 3, 3, 2, 1, 1, 1, 1), 1, ACT_SILU, RES_NONE)), 2, 0);
  /* 1x1, one K tile (1 stage); fp8 weights (registers) on 128x128 */
  out[k++] = mma(nhwc(CONV(2, 32, 9, 10, 48, 1, 1, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_FULL)), 0, 1);
  out[k++] = mma(nhwc(stored(CONV(2, 16, 11, 12, 72, 3, 3, 1, 1, 1, 1, 1), 0, ACT_NONE, RES_NONE), DT_F8_E4M3)), 1, 0);
  return k;
}

/* Winograd F(2×2, 3×3) (k_winograd.c), forced on the old test_llvm_gemm.c's
 * awkward shapes (LLVM only): odd and even sizes, images smaller than a tile
 * or than a vector of tiles, tile rows of several vectors with a partial
 * last one, padding 0, 1, 2 and asymmetric, batch, C and O no multiples of
 * the vector width, C > 256 (two k blocks), O > 96 (several output-channel
 * blocks, a short last tile), every epilogue, the residual in place,
 * weights stored in bf16, f16 and fp8, NHWC.  At the host's width (16
 * lanes on AVX-512), 8 in the x86-64-v3 repeat, and the NCHW shapes again
 * at 4 (--cpu generic, SSE2); rel L2 1e-5 as every conv. */
static op_case wino(op_case c) {
  c.winograd = OC_WINO_FORCE;
  c.where = OC_LLVM;
  c.why = "forces the LLVM Winograd conv";
  return c;
}

/* NHWC Winograd: the conv tolerance (1e-5), not the direct NHWC kernel's sqrt(K) bound. */
static op_case nhwc_wino(op_case c) {
  c.layout = LAYOUT_NHWC;
  return wino(c);
}

static int wino_rows(op_case *out) {
  int k = 0, first = 0;
  const conv_shape odd = {1, 19, 9, 7, 21, 3, 3, 1, 1, 1, 1, 1}, even = {2, 16, 8, 16, 24, 3, 3, 1, 1, 1, 1, 1};
  out[k++] = wino(conv_row(odd, 1, ACT_NONE, RES_NONE));
  out[k++] = wino(conv_row(even, 0, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(1, 8, 1, 1, 7, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(3, 9, 2, 3, 5, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(1, 20, 5, 70, 13, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(1, 17, 10, 11, 9, 3, 3, 1, 0, 0, 0, 0), 1, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(1, 12, 9, 8, 10, 3, 3, 1, 0, 1, 0, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(2, 12, 7, 9, 10, 3, 3, 1, 2, 0, 1, 2), 0, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(1, 300, 6, 10, 14, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = wino(CONV(2, 24, 6, 9, 200, 3, 3, 1, 1, 1, 1, 1), 1, ACT_SILU, RES_NONE));
  out[k++] = wino(aliased(conv_row(even, 1, ACT_SILU, RES_FULL)));
  out[k++] = wino(aliased(CONV(1, 300, 7, 9, 37, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_FULL)));
  out[k++] = wino(stored_with_bias(conv_row(odd, 1, ACT_SILU, RES_NONE), DT_BF16));
  out[k++] = wino(stored_with_bias(conv_row(even, 1, ACT_NONE, RES_FULL), DT_F16));
  out[k++] = wino(stored_with_bias(conv_row(odd, 1, ACT_NONE, RES_NONE), DT_F8_E4M3));
  int at4 = k - first; /* the rows above again at 4 lanes */
  for (int i = 0; i < at4; i++) {
    out[k] = out[first + i];
    out[k++].cpu = "generic";
  }
  /* every epilogue (its code is the same at any width) */
  for (int act = ACT_NONE; act <= ACT_GELU; act++)
    for (int res = RES_NONE; res <= RES_CHANNEL; res++) out[k++] = wino(conv_row(odd, res != RES_CHANNEL, act, res));
  /* channels last: the same kinds of shapes (vectors run along channels) */
  out[k++] = nhwc_wino(conv_row(odd, 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc_wino(conv_row(even, 0, ACT_GELU, RES_NONE));
  out[k++] = nhwc_wino(CONV(1, 8, 1, 1, 7, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc_wino(CONV(2, 12, 7, 9, 10, 3, 3, 1, 2, 0, 1, 2), 1, ACT_NONE, RES_NONE));
  out[k++] = nhwc_wino(aliased(CONV(1, 300, 7, 9, 37, 3, 3, 1, 1, 1, 1, 1), 1, ACT_NONE, RES_FULL)));
  out[k++] = nhwc_wino(CONV(1, 24, 13, 11, 200, 3, 3, 1, 1, 1, 1, 1), 1, ACT_SILU, RES_CHANNEL));
  out[k++] = nhwc_wino(CONV(2, 17, 9, 8, 21, 3, 3, 1, 0, 0, 0, 0), 1, ACT_SILU, RES_FULL));
  out[k++] = nhwc_wino(stored_with_bias(conv_row(odd, 1, ACT_SILU, RES_NONE), DT_BF16));
  out[k++] = nhwc_wino(stored_with_bias(conv_row(even, 1, ACT_NONE, RES_FULL), DT_F8_E4M3));
  return k;
}

/* conv3d on the Winograd kernel (its output frames as images, (c, kt) as
 * channels): 3x3x3 over several frames, time stride 2, kt 1, odd and even
 * sizes, padding 0 and 1 (and 2: outputs wider than the input), C·kt past
 * 256 (two k blocks), O past a block of 96, batch 2, with and without bias,
 * weights stored in bf16 and fp8. */
static int conv3d_wino_rows(op_case *out) {
  int k = 0;
  out[k++] = wino(CONV3D(1, 3, 4, 7, 9, 5, 3, 3, 3, 1, 1, 1, 1, 1), 1));
  out[k++] = wino(CONV3D(2, 4, 5, 8, 6, 7, 3, 3, 3, 2, 1, 1, 1, 1), 0));
  out[k++] = wino(CONV3D(1, 5, 3, 9, 11, 4, 1, 3, 3, 1, 1, 1, 0, 0), 1));
  out[k++] = wino(CONV3D(1, 2, 3, 3, 2, 3, 3, 3, 3, 1, 1, 1, 2, 2), 1));
  out[k++] = wino(CONV3D(1, 100, 3, 6, 20, 100, 3, 3, 3, 1, 1, 1, 1, 1), 1));
  out[k++] = wino(stored(CONV3D(2, 6, 3, 5, 7, 9, 3, 3, 3, 1, 1, 1, 1, 1), 1), DT_BF16));
  out[k++] = wino(stored_with_bias(CONV3D(1, 4, 4, 6, 6, 5, 2, 3, 3, 2, 1, 1, 1, 1), 1), DT_F8_E4M3));
  return k;
}

int oc_gemm_rows(op_case *out) {
  int k = llvm_rows(out);
  k += conv3d_rows(out + k);
  k += conv3d_wino_rows(out + k);
  k += cuda_rows(out + k);
  k += gated_rows(out + k);
  k += nhwc_rows(out + k);
  k += mma_rows(out + k);
  return k + wino_rows(out + k);
}
