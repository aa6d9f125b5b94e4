/* test_cuda_gemm.c — the generated CUDA conv2d and linear kernels
 * (codegen/cuda/g_gemm.c) run in the CPU emulator against the reference
 * kernels, for f32 FMA (rel L2 <= 1e-5) and bf16 / f16 tensor-core compute
 * (rel L2 <= 1e-2): 3x3 pad 1, 1x1, stride 2 with the VAE's (0,1,0,1)
 * padding, O = 3, C = 4, odd sizes, several M, N and K tiles, every
 * epilogue (bias, silu, gelu, geglu, full and broadcast residuals), the
 * residual aliased onto the output, linear with M = 1 and M = 154, K not a
 * multiple of the K step, and bf16 / f16 / fp8 weights decoded in the
 * kernel.  Sizes stay small: every CUDA thread is an emulated fiber.
 * Prints rel L2 per case. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cgen.h" /* dc_cuda_ctype */
#include "cuda_harness.h"
#include "runtime/kernels.h"
#include "testutil.h"

enum { RES_NONE, RES_FULL, RES_CHANNEL }; /* residual: none, output-shaped, one value per channel */

static const dc_cuda_compute computes[] = {DC_CUDA_COMPUTE_F32, DC_CUDA_COMPUTE_BF16};

static double tolerance(dc_cuda_compute c) { return c == DC_CUDA_COMPUTE_F32 ? 1e-5 : 1e-2; }

static int skipped; /* no host C++ compiler: the whole test is a skip */

/* Compares node y through the emulator; aliased: the output is written over
 * the residual (input `res_input`). */
static void check_node(const dc_module *m, int32_t y, dc_cuda_compute c, int res_input, const char *what) {
  if (y < 0) {
    CHECK(!"node type inference failed");
    return;
  }
  dc_cuda_options o = {c};
  kh_result r;
  dc_status *st = res_input >= 0 ? ch_compare_aliased(m, y, &o, 11, 1.0, res_input, &r)
                                 : ch_compare(m, y, &o, 11, 1.0, &r);
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "compiler")) {
    skipped = 1;
    dc_status_free(st);
    return;
  }
  CHECK_OK(st);
  if (st) return;
  CHECK(r.rel_l2 <= tolerance(c));
  printf("%-5s %-70s rel L2 %.3g, max abs %.3g%s\n", dc_cuda_compute_name(c), what, r.rel_l2, r.max_abs,
         r.rel_l2 <= tolerance(c) ? "" : "  <-- FAIL");
}

/* ---- conv2d ------------------------------------------------------------- */
typedef struct {
  int64_t n, c, h, w, o, kh, kw, stride, pt, pb, pl, pr;
} conv_shape;

static int32_t add_conv(dc_module *m, const conv_shape *s, int bias, int act, int res) {
  int32_t in[4];
  int nin = 0;
  in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->c, s->h, s->w});
  in[nin++] = kh_input(m, 4, (int64_t[]){s->o, s->c, s->kh, s->kw});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){s->o});
  int64_t ho = (s->h + s->pt + s->pb - s->kh) / s->stride + 1, wo = (s->w + s->pl + s->pr - s->kw) / s->stride + 1;
  if (res == RES_FULL) in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->o, ho, wo});
  if (res == RES_CHANNEL) in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->o, 1, 1});
  dc_node n = dc_node_make(OP_CONV2D, nin, in);
  dc_node_set_int(&n, "stride", s->stride);
  dc_node_set_int(&n, "pad_t", s->pt);
  dc_node_set_int(&n, "pad_b", s->pb);
  dc_node_set_int(&n, "pad_l", s->pl);
  dc_node_set_int(&n, "pad_r", s->pr);
  dc_node_set_int(&n, "bias", bias);
  dc_node_set_int(&n, "act", act);
  dc_node_set_int(&n, "residual", res != RES_NONE);
  return kh_node(m, n);
}

/* aliased: the output overwrites the (full) residual. */
static void check_conv(dc_cuda_compute c, conv_shape s, int bias, int act, int res, int aliased) {
  dc_module *m = dc_module_create();
  int32_t y = add_conv(m, &s, bias, act, res);
  char what[200];
  snprintf(what, sizeof what, "conv %lldx%lldx%lldx%lld->%lld k%lldx%lld s%lld p(%lld,%lld,%lld,%lld) b%d %s r%d%s",
           (long long)s.n, (long long)s.c, (long long)s.h, (long long)s.w, (long long)s.o, (long long)s.kh,
           (long long)s.kw, (long long)s.stride, (long long)s.pt, (long long)s.pb, (long long)s.pl, (long long)s.pr,
           bias, dc_act_name((dc_act)act), res, aliased ? " aliased" : "");
  check_node(m, y, c, aliased ? 2 + bias : -1, what);
  dc_module_destroy(m);
}

static void conv_cases(dc_cuda_compute c) {
  /* 3x3 pad 1 with C = 4 (conv_in), and O = 3 (the VAE's conv_out) */
  check_conv(c, (conv_shape){1, 4, 9, 7, 32, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, 0);
  check_conv(c, (conv_shape){1, 16, 10, 11, 3, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, 0);
  /* 1x1, odd pixel count, batch 2 */
  check_conv(c, (conv_shape){2, 24, 5, 7, 12, 1, 1, 1, 0, 0, 0, 0}, 1, ACT_NONE, RES_NONE, 0);
  /* stride 2: the VAE downsample's (0,1,0,1) padding, and symmetric */
  check_conv(c, (conv_shape){1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1}, 1, ACT_NONE, RES_NONE, 0);
  check_conv(c, (conv_shape){2, 8, 12, 12, 16, 3, 3, 2, 0, 1, 0, 1}, 0, ACT_NONE, RES_NONE, 0);
  check_conv(c, (conv_shape){1, 6, 9, 11, 7, 3, 3, 2, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, 0);
  /* several M and N tiles (180 rows, 70 columns) and K tiles (K = 180) */
  check_conv(c, (conv_shape){2, 3, 10, 9, 70, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, 0);
  check_conv(c, (conv_shape){1, 20, 8, 8, 24, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, 0);
  /* a non-square kernel with uneven padding, no bias */
  check_conv(c, (conv_shape){1, 4, 9, 10, 9, 4, 2, 1, 2, 1, 0, 1}, 0, ACT_NONE, RES_NONE, 0);
  /* epilogues: act x residual, and a residual written over in place */
  conv_shape e = {2, 6, 7, 5, 10, 3, 3, 1, 1, 1, 1, 1};
  for (int act = ACT_NONE; act <= ACT_GELU; act++)
    for (int res = RES_NONE; res <= RES_CHANNEL; res++) check_conv(c, e, res != RES_CHANNEL, act, res, 0);
  check_conv(c, e, 1, ACT_SILU, RES_FULL, 1);
  check_conv(c, (conv_shape){1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1}, 0, ACT_NONE, RES_FULL, 1);
}

/* ---- linear ------------------------------------------------------------- */
static int32_t add_linear(dc_module *m, int rank, const int64_t *xdims, int64_t n, int bias, int act, int res) {
  int32_t in[4];
  int nin = 0;
  int64_t k = xdims[rank - 1], odims[DC_MAX_DIMS];
  in[nin++] = kh_input(m, rank, xdims);
  in[nin++] = kh_input(m, 2, (int64_t[]){n, k});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){n});
  memcpy(odims, xdims, sizeof(int64_t) * (size_t)rank);
  odims[rank - 1] = act == ACT_GEGLU ? n / 2 : n;
  if (res == RES_FULL) in[nin++] = kh_input(m, rank, odims);
  if (res == RES_CHANNEL) in[nin++] = kh_input(m, 1, &odims[rank - 1]);
  dc_node nd = dc_node_make(OP_LINEAR, nin, in);
  dc_node_set_int(&nd, "bias", bias);
  dc_node_set_int(&nd, "act", act);
  dc_node_set_int(&nd, "residual", res != RES_NONE);
  return kh_node(m, nd);
}

static void check_linear(dc_cuda_compute c, int rank, const int64_t *xdims, int64_t n, int bias, int act, int res,
                         int aliased) {
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, rank, xdims, n, bias, act, res);
  char what[200], d[64];
  snprintf(what, sizeof what, "linear %s x %lld b%d %s r%d%s", dc_dims_str(xdims, rank, d, sizeof d), (long long)n,
           bias, dc_act_name((dc_act)act), res, aliased ? " aliased" : "");
  check_node(m, y, c, aliased ? 2 + bias : -1, what);
  dc_module_destroy(m);
}

static void linear_cases(dc_cuda_compute c) {
  /* M = 1 (a pooled text embedding), K not a multiple of 16 or 32 */
  check_linear(c, 2, (int64_t[]){1, 40}, 96, 1, ACT_SILU, RES_NONE, 0);
  /* M = 77 * 2 (text tokens, batch 2), K = 45, N = 70: several tiles */
  check_linear(c, 3, (int64_t[]){2, 77, 45}, 70, 1, ACT_NONE, RES_NONE, 0);
  check_linear(c, 3, (int64_t[]){2, 77, 24}, 40, 0, ACT_GELU, RES_FULL, 0);
  /* geglu: value and gate columns in the same block, H = 70 spans two blocks */
  check_linear(c, 3, (int64_t[]){2, 77, 24}, 140, 1, ACT_GEGLU, RES_NONE, 0);
  check_linear(c, 2, (int64_t[]){5, 33}, 22, 1, ACT_GEGLU, RES_FULL, 0);
  check_linear(c, 2, (int64_t[]){5, 33}, 22, 0, ACT_GEGLU, RES_FULL, 1);
  /* residual broadcast per feature, in place over a full residual */
  check_linear(c, 2, (int64_t[]){7, 50}, 65, 1, ACT_SILU, RES_CHANNEL, 0);
  check_linear(c, 3, (int64_t[]){2, 77, 40}, 40, 1, ACT_NONE, RES_FULL, 1);
  /* K = 1 and a long K (several K tiles) */
  check_linear(c, 2, (int64_t[]){9, 1}, 17, 1, ACT_NONE, RES_NONE, 0);
  check_linear(c, 2, (int64_t[]){3, 300}, 20, 1, ACT_NONE, RES_NONE, 0);
}

/* ---- the 128x128 tensor-core tile ------------------------------------------ */
/* g_gemm.c takes the 128x128 tile (8 warps, dynamic shared memory) when its
 * grid has >= 132 blocks: 1536 x 1408 is the smallest such GEMM; K stays
 * small so the emulator (which runs every lane's WMMA in full) takes
 * seconds. */
static void check_big_tile(int32_t y, dc_module *m, const char *what) {
  dc_cuda_options o = {DC_CUDA_COMPUTE_BF16};
  dc_cuda_kernel k;
  dc_status *st = dc_cuda_gen_node(m, y, &o, "k_big", &k);
  CHECK_OK(st);
  if (st) return;
  CHECK(k.block[0] == 256 && k.smem_bytes > 48 * 1024); /* the case below covers that tile */
  dc_cuda_kernel_deinit(&k);
  check_node(m, y, DC_CUDA_COMPUTE_BF16, -1, what);
}

static void big_tile_cases(void) {
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, 2, (int64_t[]){1536, 40}, 2816, 1, ACT_GEGLU, RES_NONE);
  if (y >= 0) check_big_tile(y, m, "linear [1536,40] x 2816 b1 geglu (128x128 tile)");
  int32_t v = add_conv(m, &(conv_shape){2, 8, 24, 32, 1408, 1, 1, 1, 0, 0, 0, 0}, 1, ACT_SILU, RES_NONE);
  if (v >= 0) check_big_tile(v, m, "conv 2x8x24x32->1408 k1x1 b1 silu (128x128 tile)");
  dc_module_destroy(m);
}

/* ---- weights stored as bf16 / f16 / fp8 ---------------------------------- */
/* Random finite weight bits of dtype t (fp8 limited to a moderate exponent
 * range) and their exact f32 values. */
static void random_weights(dc_dtype t, int64_t count, uint64_t seed, uint8_t *bits, float *vals) {
  uint64_t s = seed;
  for (int64_t i = 0; i < count; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    float f = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    unsigned r = (unsigned)(s >> 20);
    switch (t) {
      case DT_BF16: ((uint16_t *)bits)[i] = dc_f32_to_bf16(f), vals[i] = dc_bf16_to_f32(((uint16_t *)bits)[i]); break;
      case DT_F16: ((uint16_t *)bits)[i] = dc_f32_to_f16(f), vals[i] = dc_f16_to_f32(((uint16_t *)bits)[i]); break;
      case DT_F8_E4M3: /* sign, exponent 4..9 (2^-3 .. 2^2), any mantissa */
        bits[i] = (uint8_t)((r & 0x80u) | ((4u + (r >> 8) % 6u) << 3) | (r & 7u));
        vals[i] = dc_f8e4m3_to_f32(bits[i]);
        break;
      case DT_F8_E5M2: /* sign, exponent 12..17, any mantissa */
        bits[i] = (uint8_t)((r & 0x80u) | ((12u + (r >> 8) % 6u) << 2) | (r & 3u));
        vals[i] = dc_f8e5m2_to_f32(bits[i]);
        break;
      default: ((float *)bits)[i] = f, vals[i] = f; break;
    }
  }
}

static float *random_f32(int64_t count, uint64_t seed) {
  float *d = malloc((size_t)count * sizeof *d);
  uint64_t s = seed;
  for (int64_t i = 0; i < count; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    d[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
  }
  return d;
}

/* Runs the generated kernel of node y (its weight, input 1, re-typed to wt)
 * on the given buffers in the emulator. */
static dc_status *run_generated(dc_module *m, int32_t y, dc_cuda_compute c, void **bufs) {
  const dc_node *n = &m->nodes[y];
  dc_cuda_options o = {c};
  dc_cuda_kernel k;
  DC_TRY(dc_cuda_gen_node(m, y, &o, "k_w", &k));
  const char *ctypes[DC_MAX_INPUTS + 1] = {"float"};
  char wtype[64];
  snprintf(wtype, sizeof wtype, "const %s", dc_cuda_ctype(m->nodes[n->inputs[1]].type.dtype));
  for (int i = 0; i < n->ninputs; i++) ctypes[i + 1] = i == 1 ? wtype : "const float";
  ch_kernel *ck = NULL;
  dc_status *st = ch_kernel_build(k.source, k.name, n->ninputs + 1, ctypes, &ck);
  if (!st) st = ch_kernel_launch(ck, k.grid, k.block, k.smem_bytes, bufs);
  ch_kernel_free(ck);
  dc_cuda_kernel_deinit(&k);
  return st;
}

/* Node y of m (f32 as built) with its weight stored as wt: the reference
 * runs on the decoded f32 weights, the kernel on the stored bits. */
static void check_weight_dtype(dc_module *m, int32_t y, dc_cuda_compute c, dc_dtype wt, const char *what) {
  const dc_node *n = &m->nodes[y];
  int32_t wid = n->inputs[1];
  int64_t nw = (int64_t)dc_type_numel(&m->nodes[wid].type), nout = (int64_t)dc_type_numel(&n->type);
  void *in[DC_MAX_INPUTS];
  uint8_t *wbits = malloc((size_t)nw * 4);
  float *wvals = malloc((size_t)nw * sizeof *wvals), *want = malloc((size_t)nout * 4), *got = malloc((size_t)nout * 4);
  random_weights(wt, nw, 99, wbits, wvals);
  for (int i = 0; i < n->ninputs; i++)
    in[i] = i == 1 ? (void *)wvals : random_f32((int64_t)dc_type_numel(&m->nodes[n->inputs[i]].type), 5 + (uint64_t)i);
  CHECK_OK(dc_ref_kernel_for(n->op)(m, n, (const void *const *)in, want));
  m->nodes[wid].type.dtype = wt; /* the IR's dtype rule is f32 today; the kernel takes any storage dtype */
  void *bufs[DC_MAX_INPUTS + 1] = {got};
  for (int i = 0; i < n->ninputs; i++) bufs[i + 1] = i == 1 ? (void *)wbits : in[i];
  dc_status *st = run_generated(m, y, c, bufs);
  m->nodes[wid].type.dtype = DT_F32;
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "compiler")) {
    skipped = 1;
    dc_status_free(st);
  } else {
    CHECK_OK(st);
    if (!st) {
      double e = tu_rel_l2(got, want, nout);
      CHECK(e <= tolerance(c));
      printf("%-5s %-70s rel L2 %.3g%s\n", dc_cuda_compute_name(c), what, e, e <= tolerance(c) ? "" : "  <-- FAIL");
    }
  }
  for (int i = 0; i < n->ninputs; i++)
    if (i != 1) free(in[i]);
  free(wbits), free(wvals), free(want), free(got);
}

static void weight_dtype_cases(dc_cuda_compute c) {
  static const dc_dtype dts[] = {DT_BF16, DT_F16, DT_F8_E4M3, DT_F8_E5M2};
  for (int i = 0; i < 4; i++) {
    char what[160];
    dc_module *m = dc_module_create();
    int32_t y = add_linear(m, 3, (int64_t[]){2, 77, 40}, 72, 1, ACT_GEGLU, RES_NONE);
    snprintf(what, sizeof what, "linear [2,77,40] x 72 b1 geglu, %s weights", dc_dtype_name(dts[i]));
    if (y >= 0) check_weight_dtype(m, y, c, dts[i], what);
    int32_t v = add_conv(m, &(conv_shape){1, 6, 9, 7, 10, 3, 3, 2, 0, 1, 0, 1}, 1, ACT_SILU, RES_NONE);
    snprintf(what, sizeof what, "conv 1x6x9x7->10 k3x3 s2 p(0,1,0,1) b1 silu, %s weights", dc_dtype_name(dts[i]));
    if (v >= 0) check_weight_dtype(m, v, c, dts[i], what);
    dc_module_destroy(m);
  }
}

/* ---- generator errors --------------------------------------------------- */
static void error_cases(void) {
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, 2, (int64_t[]){3, 8}, 4, 0, ACT_NONE, RES_NONE);
  dc_cuda_options o = {DC_CUDA_COMPUTE_F32};
  dc_cuda_kernel k;
  m->nodes[m->nodes[y].inputs[0]].type.dtype = DT_BF16; /* activations must be f32 */
  CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k", &k), "input 0 is bf16[3,8]; expected f32");
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  error_cases();
  for (size_t i = 0; i < sizeof computes / sizeof computes[0] && !skipped; i++) {
    conv_cases(computes[i]);
    linear_cases(computes[i]);
    weight_dtype_cases(computes[i]);
  }
  if (!skipped) big_tile_cases();
  if (!skipped) { /* f16 tensor cores: one conv, one linear */
    check_conv(DC_CUDA_COMPUTE_F16, (conv_shape){2, 6, 7, 5, 10, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_SILU, RES_FULL, 1);
    check_linear(DC_CUDA_COMPUTE_F16, 3, (int64_t[]){2, 77, 24}, 140, 1, ACT_GEGLU, RES_NONE, 0);
  }
  if (skipped) {
    printf("SKIP: no host C++ compiler for the CUDA emulator\n");
    return 77;
  }
  return tu_finish();
}
