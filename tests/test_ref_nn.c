/* test_ref_nn.c — the reference kernels of the heavy ops
 * (runtime/kernels_ref_nn.c) against values computed independently here:
 * small hand-checked cases and naive loops written differently from the
 * kernel (padded copies instead of range clipping, one-pass moments instead
 * of two-pass, a full S×S softmax in double instead of query blocks), for
 * conv2d, conv3d, linear, the norms, their fused epilogues, attention and the
 * timestep embedding; and the op table (every op has a reference kernel or
 * says why not).  Nodes go through dc_infer_type first, so the kernels see
 * the types the compiler would give them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_check.h"

/* ---- the table -------------------------------------------------------- */
static void test_table(void) {
  int missing = 0;
  for (int op = 0; op < OP_COUNT; op++) {
    unsigned flags = dc_op_get((dc_op)op)->flags;
    /* a constant is a leaf whose kernel places its bytes; test-only ops have none */
    int none = ((flags & OPF_LEAF) && op != OP_CONSTANT) || (flags & OPF_TEST);
    if (none != (dc_ref_kernel_for((dc_op)op) == NULL)) {
      fprintf(stderr, "  op %s: kernel %s\n", dc_op_get((dc_op)op)->name, none ? "present" : "missing");
      missing++;
    }
  }
  CHECK(missing == 0);
  CHECK(dc_ref_kernel_for(OP_COUNT) == NULL);
  printf("table: every non-leaf op of %d has a kernel and so has constant; other leaves and test ops have none\n",
         OP_COUNT);
}

/* ---- conv2d ----------------------------------------------------------- */
/* A node whose third input is a bias (the epilogue flag of conv2d/linear). */
static dc_node with_bias(dc_node n) {
  dc_node_set_int(&n, "bias", 1);
  return n;
}

static dc_node conv_node(int32_t x, int32_t w, int32_t b, int stride, int pt, int pb, int pl, int pr) {
  int32_t ins[3] = {x, w, b};
  dc_node nd = dc_node_make(OP_CONV2D, b >= 0 ? 3 : 2, ins);
  dc_node_set_int(&nd, "bias", b >= 0);
  dc_node_set_int(&nd, "stride", stride);
  dc_node_set_int(&nd, "pad_t", pt);
  dc_node_set_int(&nd, "pad_b", pb);
  dc_node_set_int(&nd, "pad_l", pl);
  dc_node_set_int(&nd, "pad_r", pr);
  return nd;
}

static void test_conv_hand(void) {
  dc_module *m = dc_module_create();
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[9] = {0, 1, 0, 1, 1, 1, 0, 1, 0}, b[1] = {0.5f};
  /* plus-shaped kernel: each output is the pixel plus its 4 neighbours */
  float want[9] = {7.5f, 11.5f, 11.5f, 17.5f, 25.5f, 23.5f, 19.5f, 29.5f, 23.5f};
  int32_t ix = IN32(m, 1, 1, 3, 3), iw = IN32(m, 1, 1, 3, 3), ib = IN32(m, 1);
  const void *in[3] = {x, w, b};
  float *y = run_node(m, conv_node(ix, iw, ib, 1, 1, 1, 1, 1), in);
  check_closef("conv2d 3x3 plus kernel, pad 1, bias 0.5", y, want, 9, 0);
  free(y);
  dc_module_destroy(m);
}

/* Naive conv: copy the input into a zero-padded buffer, then sum in double. */
static double *conv_naive(const float *x, const float *w, const float *b, int64_t N, int64_t C,
                          int64_t H, int64_t W, int64_t O, int64_t K, int s, int pt, int pb, int pl,
                          int pr, int64_t *ho, int64_t *wo) {
  int64_t hp = H + pt + pb, wp = W + pl + pr;
  double *xp = calloc((size_t)(N * C * hp * wp), sizeof *xp);
  *ho = (hp - K) / s + 1;
  *wo = (wp - K) / s + 1;
  double *y = malloc((size_t)(N * O * *ho * *wo) * sizeof *y);
  for (int64_t i = 0; i < N * C; i++)
    for (int64_t r = 0; r < H; r++)
      for (int64_t c = 0; c < W; c++) xp[(i * hp + r + pt) * wp + c + pl] = x[(i * H + r) * W + c];
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t r = 0; r < *ho; r++)
        for (int64_t c = 0; c < *wo; c++) {
          double acc = b ? b[o] : 0;
          for (int64_t ci = 0; ci < C; ci++)
            for (int64_t ky = 0; ky < K; ky++)
              for (int64_t kx = 0; kx < K; kx++)
                acc += w[((o * C + ci) * K + ky) * K + kx] *
                       xp[((n * C + ci) * hp + r * s + ky) * wp + c * s + kx];
          y[((n * O + o) * *ho + r) * *wo + c] = acc;
        }
  free(xp);
  return y;
}

static void conv_case(const char *what, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                      int64_t K, int s, int pt, int pb, int pl, int pr, int bias) {
  dc_module *m = dc_module_create();
  float *x = rand_buf(N * C * H * W), *w = rand_buf(O * C * K * K), *b = rand_buf(O);
  int32_t ix = IN32(m, N, C, H, W), iw = IN32(m, O, C, K, K), ib = IN32(m, O);
  const void *in[3] = {x, w, b};
  int64_t ho, wo;
  double *want = conv_naive(x, w, bias ? b : NULL, N, C, H, W, O, K, s, pt, pb, pl, pr, &ho, &wo);
  float *y = run_node(m, conv_node(ix, iw, bias ? ib : -1, s, pt, pb, pl, pr), in);
  CHECK(m->nodes[m->nnodes - 1].type.dims[2] == ho && m->nodes[m->nnodes - 1].type.dims[3] == wo);
  check_close(what, y, want, N * O * ho * wo, 1e-5);
  free(x), free(w), free(b), free(y), free(want);
  dc_module_destroy(m);
}

static void test_conv(void) {
  printf("conv2d:\n");
  test_conv_hand();
  conv_case("conv2d 2x2x5x6 -> 3, 3x3, stride 1, pad 1, bias", 2, 2, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1);
  conv_case("conv2d 2x2x8x7 -> 3, 3x3, stride 2, pad (0,1,0,1) (VAE downsample)", 2, 2, 8, 7, 3, 3, 2, 0,
            1, 0, 1, 1);
  conv_case("conv2d 1x3x5x5 -> 2, 3x3, stride 2, pad (2,0,1,3), no bias", 1, 3, 5, 5, 2, 3, 2, 2, 0, 1,
            3, 0);
  conv_case("conv2d 1x4x3x3 -> 5, 1x1, no padding", 1, 4, 3, 3, 5, 1, 1, 0, 0, 0, 0, 1);

  /* Speed bar: 64 -> 64 channels, 3x3, 32x32 must run well under a second. */
  dc_module *m = dc_module_create();
  float *x = rand_buf(64 * 32 * 32), *w = rand_buf(64 * 64 * 9), *b = rand_buf(64);
  int32_t ix = IN32(m, 1, 64, 32, 32), iw = IN32(m, 64, 64, 3, 3), ib = IN32(m, 64);
  const void *in[3] = {x, w, b};
  double t0 = dc_now_seconds();
  float *y = run_node(m, conv_node(ix, iw, ib, 1, 1, 1, 1, 1), in);
  double dt = dc_now_seconds() - t0;
  const char *preload = getenv("LD_PRELOAD");
  int under_valgrind = preload && strstr(preload, "vgpreload"); /* ~50x slower: time not checked */
  CHECK(y != NULL && (dt < 1.0 || under_valgrind));
  printf("  conv2d 64->64 3x3 at 32x32: %.3f s%s\n", dt, under_valgrind ? " (valgrind)" : "");
  free(x), free(w), free(b), free(y);
  dc_module_destroy(m);
}

/* ---- conv3d ----------------------------------------------------------- */
typedef struct {
  int64_t b, c, t, h, w, o, kt, kh, kw;
  int st, sh, sw, ph, pw, bias;
} conv3d_shape;

static dc_node conv3d_node(int32_t x, int32_t w, int32_t b, const conv3d_shape *s) {
  int32_t ins[3] = {x, w, b};
  dc_node nd = dc_node_make(OP_CONV3D, b >= 0 ? 3 : 2, ins);
  dc_node_set_int(&nd, "bias", b >= 0);
  dc_node_set_int(&nd, "stride_t", s->st);
  dc_node_set_int(&nd, "stride_h", s->sh);
  dc_node_set_int(&nd, "stride_w", s->sw);
  dc_node_set_int(&nd, "pad_h", s->ph);
  dc_node_set_int(&nd, "pad_w", s->pw);
  return nd;
}

/* Frame t of x is t+1 everywhere; the kernel [1,1,2,1,1] = {1, 10} mixes
 * frames t*stride_t and t*stride_t+1; the bias 0.5 is added last. */
static void test_conv3d_hand(void) {
  dc_module *m = dc_module_create();
  float x[5 * 4], w[2] = {1, 10}, b[1] = {0.5f};
  for (int i = 0; i < 20; i++) x[i] = (float)(i / 4 + 1);
  conv3d_shape s = {1, 1, 5, 2, 2, 1, 2, 1, 1, 2, 1, 1, 0, 0, 1};
  int32_t ix = IN32(m, 1, 1, 5, 2, 2), iw = IN32(m, 1, 1, 2, 1, 1), ib = IN32(m, 1);
  const void *in[3] = {x, w, b};
  float *y = run_node(m, conv3d_node(ix, iw, ib, &s), in); /* frames (0,1) and (2,3); frame 4 is left over */
  float want[8] = {21.5f, 21.5f, 21.5f, 21.5f, 43.5f, 43.5f, 43.5f, 43.5f};
  CHECK(m->nodes[m->nnodes - 1].type.dims[2] == 2);
  check_closef("conv3d kt 2, stride_t 2, 1x1 taps, bias 0.5", y, want, 8, 0);
  free(y);
  dc_module_destroy(m);
}

/* Naive conv3d: copy the input into a buffer zero-padded in H and W, then
 * sum every output element in double. */
static double *conv3d_naive(const float *x, const float *w, const float *b, const conv3d_shape *s, int64_t out[3]) {
  int64_t hp = s->h + 2 * s->ph, wp = s->w + 2 * s->pw;
  int64_t to = (s->t - s->kt) / s->st + 1, ho = (hp - s->kh) / s->sh + 1, wo = (wp - s->kw) / s->sw + 1;
  double *xp = calloc((size_t)(s->b * s->c * s->t * hp * wp), sizeof *xp);
  double *y = malloc((size_t)(s->b * s->o * to * ho * wo) * sizeof *y);
  for (int64_t i = 0; i < s->b * s->c * s->t; i++)
    for (int64_t r = 0; r < s->h; r++)
      for (int64_t c = 0; c < s->w; c++) xp[(i * hp + r + s->ph) * wp + c + s->pw] = x[(i * s->h + r) * s->w + c];
  for (int64_t n = 0; n < s->b; n++)
    for (int64_t o = 0; o < s->o; o++)
      for (int64_t f = 0; f < to; f++)
        for (int64_t r = 0; r < ho; r++)
          for (int64_t c = 0; c < wo; c++) {
            double acc = b ? b[o] : 0;
            for (int64_t ci = 0; ci < s->c; ci++)
              for (int64_t kt = 0; kt < s->kt; kt++)
                for (int64_t ky = 0; ky < s->kh; ky++)
                  for (int64_t kx = 0; kx < s->kw; kx++)
                    acc += w[(((o * s->c + ci) * s->kt + kt) * s->kh + ky) * s->kw + kx] *
                           xp[(((n * s->c + ci) * s->t + f * s->st + kt) * hp + r * s->sh + ky) * wp + c * s->sw + kx];
            y[(((n * s->o + o) * to + f) * ho + r) * wo + c] = acc;
          }
  out[0] = to, out[1] = ho, out[2] = wo;
  free(xp);
  return y;
}

static void conv3d_case(const char *what, conv3d_shape s) {
  dc_module *m = dc_module_create();
  float *x = rand_buf(s.b * s.c * s.t * s.h * s.w), *w = rand_buf(s.o * s.c * s.kt * s.kh * s.kw), *b = rand_buf(s.o);
  int32_t ix = IN32(m, s.b, s.c, s.t, s.h, s.w), iw = IN32(m, s.o, s.c, s.kt, s.kh, s.kw), ib = IN32(m, s.o);
  const void *in[3] = {x, w, b};
  int64_t d[3];
  double *want = conv3d_naive(x, w, s.bias ? b : NULL, &s, d);
  float *y = run_node(m, conv3d_node(ix, iw, s.bias ? ib : -1, &s), in);
  const dc_type *t = &m->nodes[m->nnodes - 1].type;
  CHECK(t->rank == 5 && t->dims[0] == s.b && t->dims[1] == s.o && t->dims[2] == d[0] && t->dims[3] == d[1] &&
        t->dims[4] == d[2]);
  check_close(what, y, want, s.b * s.o * d[0] * d[1] * d[2], 1e-5);
  free(x), free(w), free(b), free(y), free(want);
  dc_module_destroy(m);
}

/* The type rule refuses what the op does not define, naming the problem. */
static void conv3d_refused(const char *what, conv3d_shape s, int64_t wc, const char *msg) {
  dc_module *m = dc_module_create();
  int32_t ix = IN32(m, s.b, s.c, s.t, s.h, s.w), iw = IN32(m, s.o, wc, s.kt, s.kh, s.kw), ib = IN32(m, s.o);
  dc_node nd = conv3d_node(ix, iw, s.bias ? ib : -1, &s);
  dc_type t;
  dc_status *st = dc_infer_type(m, &nd, &t);
  CHECK(st != NULL && strstr(dc_status_message(st), msg));
  printf("  refused %s: %s\n", what, st ? dc_status_message(st) : "(accepted)");
  dc_status_free(st);
  dc_module_destroy(m);
}

static void test_conv3d(void) {
  printf("conv3d:\n");
  test_conv3d_hand();
  conv3d_case("conv3d 2x3x4x5x6 -> 4, 3x3x3, stride 1, pad 1, bias (the causal conv after its padding frames)",
              (conv3d_shape){2, 3, 4, 5, 6, 4, 3, 3, 3, 1, 1, 1, 1, 1, 1});
  conv3d_case("conv3d 1x2x5x7x5 -> 3, 3x3x3, strides (2,2,1), pad (1,0), no bias",
              (conv3d_shape){1, 2, 5, 7, 5, 3, 3, 3, 3, 2, 2, 1, 1, 0, 0});
  conv3d_case("conv3d 1x2x3x6x7 -> 3, 1x3x1, strides (1,1,2), pad (0,1), bias",
              (conv3d_shape){1, 2, 3, 6, 7, 3, 1, 3, 1, 1, 1, 2, 0, 1, 1});
  conv3d_case("conv3d 2x4x2x3x3 -> 5, 1x1x1 (a 1x1 shortcut over frames)",
              (conv3d_shape){2, 4, 2, 3, 3, 5, 1, 1, 1, 1, 1, 1, 0, 0, 1});
  conv3d_case("conv3d 1x1x3x2x2 -> 1, 3x3x3, pad 2 (outputs wider than the input)",
              (conv3d_shape){1, 1, 3, 2, 2, 1, 3, 3, 3, 1, 1, 1, 2, 2, 0});
  conv3d_refused("channels", (conv3d_shape){1, 2, 3, 4, 4, 2, 1, 3, 3, 1, 1, 1, 1, 1, 1}, 3, "channels");
  conv3d_refused("more taps than frames", (conv3d_shape){1, 2, 2, 4, 4, 2, 3, 3, 3, 1, 1, 1, 1, 1, 0}, 2,
                 "larger than padded input");
  conv3d_refused("stride 0", (conv3d_shape){1, 2, 3, 4, 4, 2, 1, 3, 3, 0, 1, 1, 1, 1, 0}, 2, "bad stride");
}

/* ---- linear ----------------------------------------------------------- */
static void test_linear(void) {
  dc_module *m = dc_module_create();
  printf("linear:\n");
  {
    float x[2] = {1, 2}, w[6] = {1, 0, 0, 1, 1, 1}, b[3] = {0.5f, 0, -1}, want[3] = {1.5f, 2, 2};
    float want_nb[3] = {1, 2, 3};
    int32_t ix = IN32(m, 1, 2), iw = IN32(m, 3, 2), ib = IN32(m, 3);
    int32_t ins[3] = {ix, iw, ib};
    const void *in[3] = {x, w, b};
    float *y = run_node(m, with_bias(dc_node_make(OP_LINEAR, 3, ins)), in);
    check_closef("linear [1,2] x [3,2]^T + bias, by hand", y, want, 3, 0);
    free(y);
    y = run_node(m, dc_node_make(OP_LINEAR, 2, ins), in);
    check_closef("linear without bias, by hand", y, want_nb, 3, 0);
    free(y);
  }
  {
    int64_t B = 2, S = 3, K = 5, N = 4;
    float *x = rand_buf(B * S * K), *w = rand_buf(N * K), *b = rand_buf(N);
    double *want = malloc((size_t)(B * S * N) * sizeof *want);
    int32_t ins[3] = {IN32(m, B, S, K), IN32(m, N, K), IN32(m, N)};
    const void *in[3] = {x, w, b};
    for (int64_t r = 0; r < B * S; r++)
      for (int64_t j = 0; j < N; j++) {
        double acc = b[j];
        for (int64_t k = 0; k < K; k++) acc += (double)x[r * K + k] * w[j * K + k];
        want[r * N + j] = acc;
      }
    float *y = run_node(m, with_bias(dc_node_make(OP_LINEAR, 3, ins)), in);
    CHECK(m->nodes[m->nnodes - 1].type.rank == 3 && m->nodes[m->nnodes - 1].type.dims[2] == N);
    check_close("linear 3-D input [2,3,5] -> [2,3,4] with bias", y, want, B * S * N, 1e-5);
    free(x), free(w), free(b), free(want), free(y);
  }
  dc_module_destroy(m);
}

/* ---- norms ------------------------------------------------------------ */
/* One-pass moments (E[x^2] - E[x]^2) in double: different from the kernel's
 * two-pass, equal to well within float rounding for these inputs. */
static void moments_1pass(const float *x, int64_t len, int64_t stride, double *mean, double *var) {
  double s = 0, q = 0;
  for (int64_t i = 0; i < len; i++) {
    s += x[i * stride];
    q += (double)x[i * stride] * x[i * stride];
  }
  *mean = s / len;
  *var = q / len - *mean * *mean;
}

static dc_node norm_node(dc_op op, int32_t x, int32_t g, int32_t b, double eps, int groups) {
  int32_t ins[3] = {x, g, b};
  dc_node nd = dc_node_make(op, 3, ins);
  dc_node_set_float(&nd, "eps", eps);
  if (op == OP_GROUP_NORM) dc_node_set_int(&nd, "groups", groups);
  return nd;
}

static void test_group_norm(void) {
  dc_module *m = dc_module_create();
  printf("group_norm:\n");
  {
    /* one group over [1,2,3,4]: mean 2.5, var 1.25 */
    float x[4] = {1, 2, 3, 4}, g[2] = {1, 2}, b[2] = {0, 1};
    double r = 1 / sqrt(1.25 + 1e-5);
    double want[4] = {-1.5 * r, -0.5 * r, 0.5 * r * 2 + 1, 1.5 * r * 2 + 1};
    const void *in[3] = {x, g, b};
    float *y = run_node(m, norm_node(OP_GROUP_NORM, IN32(m, 1, 2, 2), IN32(m, 2), IN32(m, 2), 1e-5, 1), in);
    check_close("group_norm 1 group over [1,2,3,4], by hand", y, want, 4, 1e-6);
    free(y);
  }
  {
    int64_t N = 2, C = 6, H = 3, W = 4, G = 3, cpg = C / G, hw = H * W;
    float *x = rand_buf(N * C * hw), *g = rand_buf(C), *b = rand_buf(C);
    double *want = malloc((size_t)(N * C * hw) * sizeof *want);
    for (int64_t i = 0; i < N * C * hw; i++) x[i] = x[i] * 3 + 0.5f; /* off-centre */
    for (int64_t n = 0; n < N; n++)
      for (int64_t gi = 0; gi < G; gi++) {
        double mean, var;
        moments_1pass(x + (n * C + gi * cpg) * hw, cpg * hw, 1, &mean, &var);
        for (int64_t c = gi * cpg; c < (gi + 1) * cpg; c++)
          for (int64_t p = 0; p < hw; p++) {
            int64_t at = (n * C + c) * hw + p;
            want[at] = (x[at] - mean) / sqrt(var + 1e-6) * g[c] + b[c];
          }
      }
    const void *in[3] = {x, g, b};
    float *y = run_node(m, norm_node(OP_GROUP_NORM, IN32(m, N, C, H, W), IN32(m, C), IN32(m, C), 1e-6, G), in);
    check_close("group_norm [2,6,3,4], 3 groups, eps 1e-6, vs one-pass moments", y, want,
                N * C * hw, 1e-5);
    free(x), free(g), free(b), free(want), free(y);
  }
  dc_module_destroy(m);
}

static void test_layer_norm(void) {
  dc_module *m = dc_module_create();
  printf("layer_norm:\n");
  {
    float x[3] = {1, 2, 3}, g[3] = {1, 1, 1}, b[3] = {0, 0, 0};
    double r = 1 / sqrt(2.0 / 3 + 1e-5), want[3] = {-r, 0, r};
    const void *in[3] = {x, g, b};
    float *y = run_node(m, norm_node(OP_LAYER_NORM, IN32(m, 1, 3), IN32(m, 3), IN32(m, 3), 1e-5, 0), in);
    check_close("layer_norm [1,2,3], by hand", y, want, 3, 1e-6);
    free(y);
  }
  {
    int64_t R = 2 * 3, C = 7;
    float *x = rand_buf(R * C), *g = rand_buf(C), *b = rand_buf(C);
    double *want = malloc((size_t)(R * C) * sizeof *want);
    for (int64_t r = 0; r < R; r++) {
      double mean, var;
      moments_1pass(x + r * C, C, 1, &mean, &var);
      for (int64_t i = 0; i < C; i++) want[r * C + i] = (x[r * C + i] - mean) / sqrt(var + 1e-5) * g[i] + b[i];
    }
    const void *in[3] = {x, g, b};
    float *y = run_node(m, norm_node(OP_LAYER_NORM, IN32(m, 2, 3, C), IN32(m, C), IN32(m, C), 1e-5, 0), in);
    check_close("layer_norm [2,3,7] vs one-pass moments", y, want, R * C, 1e-5);
    free(x), free(g), free(b), free(want), free(y);
  }
  dc_module_destroy(m);
}

/* ---- fused epilogues -------------------------------------------------- */
/* A fused node must give the bits of the chain it replaces: the op with act
 * none, then the SILU/GELU/GEGLU kernel, then ADD of the residual (with the
 * producer as a, or as b when swapped).  Compared with memcmp, not a
 * tolerance.  A full-shape residual is also run with the output written
 * over it (in place, as the memory planner may arrange): same bits. */
static void check_same_bits(const char *what, const float *got, const float *want, int64_t count) {
  int same = got && want && memcmp(got, want, (size_t)count * sizeof *got) == 0;
  CHECK(same);
  printf("  %s: %lld values, %s\n", what, (long long)count, same ? "bit-identical" : "DIFFERENT");
}

static const dc_op act_op[ACT_COUNT] = {OP_COUNT, OP_SILU, OP_GELU, OP_GEGLU};

/* Runs the unfused chain; returns its output (free()) or NULL. */
static float *run_chain(dc_module *m, dc_node base, const void *const *in, dc_act act, int32_t res,
                        const float *rdata, int swap) {
  float *y = run_node(m, base, in), *t;
  int32_t id = m->nnodes - 1;
  if (y && act != ACT_NONE) {
    t = run_node(m, dc_node_make(act_op[act], 1, &id), (const void *[]){y});
    free(y);
    y = t;
    id = m->nnodes - 1;
  }
  if (y && res >= 0) {
    int32_t ins[2] = {swap ? res : id, swap ? id : res};
    t = run_node(m, dc_node_make(OP_ADD, 2, ins), (const void *[]){swap ? rdata : y, swap ? y : rdata});
    free(y);
    y = t;
  }
  return y;
}

/* "conv2d+bias act=silu, residual [2,5,1,1] -> [2,5,5,6]" */
static void describe(const dc_module *m, const dc_node *base, dc_act act, int32_t res, int swap, char *what,
                     size_t cap) {
  char s1[64], s2[64];
  const dc_type *to = &m->nodes[m->nnodes - 1].type;
  int len = snprintf(what, cap, "%s%s act=%s", dc_op_get(base->op)->name,
                     dc_node_bias(base) >= 0 ? "+bias" : "", dc_act_name(act));
  if (res >= 0)
    len += snprintf(what + len, cap - (size_t)len, ", residual %s%s",
                    dc_dims_str(m->nodes[res].type.dims, m->nodes[res].type.rank, s1, sizeof s1),
                    swap ? " as add's a" : "");
  snprintf(what + len, cap - (size_t)len, " -> %s", dc_dims_str(to->dims, to->rank, s2, sizeof s2));
}

/* Reruns the last node (fused, its residual last) with its output written
 * over a copy of the residual, as the memory planner may arrange. */
static void check_in_place(dc_module *m, const void **fin, const float *rdata, const float *got,
                           int64_t count) {
  const dc_node *fn = &m->nodes[m->nnodes - 1];
  float *buf = malloc((size_t)count * sizeof *buf);
  memcpy(buf, rdata, (size_t)count * sizeof *buf);
  fin[fn->ninputs - 1] = buf;
  CHECK_OK(dc_ref_kernel_for(fn->op)(m, fn, fin, buf));
  CHECK(got && memcmp(buf, got, (size_t)count * sizeof *buf) == 0);
  free(buf);
}

/* base: a conv2d/linear/group_norm node with act none and no residual whose
 * inputs' data are in[].  res: the residual's input node (or -1). */
static void epilogue_case(dc_module *m, dc_node base, const void *const *in, dc_act act, int32_t res,
                          const float *rdata, int swap) {
  float *want = run_chain(m, base, in, act, res, rdata, swap);
  int64_t count = (int64_t)dc_type_numel(&m->nodes[m->nnodes - 1].type);
  const void *fin[DC_MAX_INPUTS];
  dc_node f = base;
  memcpy(fin, in, (size_t)base.ninputs * sizeof *fin);
  dc_node_set_int(&f, "act", act);
  if (res >= 0) {
    dc_node_set_int(&f, "residual", 1);
    fin[f.ninputs] = rdata;
    f.inputs[f.ninputs++] = res;
  }
  float *got = run_node(m, f, fin);
  char what[200];
  describe(m, &base, act, res, swap, what, sizeof what);
  if (res >= 0 && dc_type_equal(&m->nodes[res].type, &m->nodes[m->nnodes - 1].type)) {
    check_in_place(m, fin, rdata, got, count);
    strncat(what, ", also in place over the residual", sizeof what - strlen(what) - 1);
  }
  check_same_bits(what, got, want, count);
  free(want), free(got);
}

static void test_conv_epilogues(void) {
  dc_module *m = dc_module_create();
  int64_t N = 2, C = 3, H = 5, W = 6, O = 5;
  float *x = rand_buf(N * C * H * W), *w = rand_buf(O * C * 9), *b = rand_buf(O);
  float *full = rand_buf(N * O * H * W), *temb = rand_buf(N * O);
  int32_t ix = IN32(m, N, C, H, W), iw = IN32(m, O, C, 3, 3), ib = IN32(m, O);
  int32_t rfull = IN32(m, N, O, H, W), rtemb = IN32(m, N, O, 1, 1), rchan = IN32(m, O, 1, 1);
  const void *in[3] = {x, w, b};
  for (int bias = 0; bias <= 1; bias++)
    for (int act = ACT_NONE; act <= ACT_GELU; act++) {
      dc_node base = conv_node(ix, iw, bias ? ib : -1, 1, 1, 1, 1, 1);
      epilogue_case(m, base, in, (dc_act)act, -1, NULL, 0);
      epilogue_case(m, base, in, (dc_act)act, rfull, full, 0);
      epilogue_case(m, base, in, (dc_act)act, rfull, full, 1);
      epilogue_case(m, base, in, (dc_act)act, rtemb, temb, 0);
      epilogue_case(m, base, in, (dc_act)act, rchan, temb, 0);
    }
  /* stride 2, asymmetric padding: the epilogue sees the smaller output */
  float *half = rand_buf(O * 2 * 3);
  int32_t rhalf = IN32(m, 1, O, 2, 3);
  epilogue_case(m, conv_node(ix, iw, ib, 2, 1, 0, 0, 1), in, ACT_SILU, rhalf, half, 0);
  free(x), free(w), free(b), free(full), free(temb), free(half);
  dc_module_destroy(m);
}

static dc_node linear_node(int32_t x, int32_t w, int32_t b) {
  int32_t ins[3] = {x, w, b};
  dc_node nd = dc_node_make(OP_LINEAR, b >= 0 ? 3 : 2, ins);
  dc_node_set_int(&nd, "bias", b >= 0);
  return nd;
}

static void test_linear_epilogues(void) {
  dc_module *m = dc_module_create();
  int64_t B = 2, S = 7, K = 9, Nout = 10; /* geglu: 10 -> 5 features */
  float *x = rand_buf(B * S * K), *w = rand_buf(Nout * K), *b = rand_buf(Nout);
  float *full = rand_buf(B * S * Nout), *row = rand_buf(Nout);
  int32_t ix = IN32(m, B, S, K), iw = IN32(m, Nout, K), ib = IN32(m, Nout);
  int32_t rfull = IN32(m, B, S, Nout), rrow = IN32(m, Nout), rhalf = IN32(m, B, S, Nout / 2);
  int32_t rhrow = IN32(m, 1, Nout / 2);
  const void *in[3] = {x, w, b};
  for (int bias = 0; bias <= 1; bias++) {
    dc_node base = linear_node(ix, iw, bias ? ib : -1);
    for (int act = ACT_NONE; act <= ACT_GELU; act++) {
      epilogue_case(m, base, in, (dc_act)act, -1, NULL, 0);
      epilogue_case(m, base, in, (dc_act)act, rfull, full, 0);
      epilogue_case(m, base, in, (dc_act)act, rfull, full, 1);
      epilogue_case(m, base, in, (dc_act)act, rrow, row, 0);
    }
    epilogue_case(m, base, in, ACT_GEGLU, -1, NULL, 0);
    epilogue_case(m, base, in, ACT_GEGLU, rhalf, full, 0);
    epilogue_case(m, base, in, ACT_GEGLU, rhalf, full, 1);
    epilogue_case(m, base, in, ACT_GEGLU, rhrow, row, 0);
  }
  free(x), free(w), free(b), free(full), free(row);
  dc_module_destroy(m);
}

static void test_norm_epilogues(void) {
  dc_module *m = dc_module_create();
  int64_t N = 2, C = 6, H = 4, W = 5;
  float *x = rand_buf(N * C * H * W), *g = rand_buf(C), *b = rand_buf(C);
  const void *in[3] = {x, g, b};
  dc_node base = norm_node(OP_GROUP_NORM, IN32(m, N, C, H, W), IN32(m, C), IN32(m, C), 1e-5, 3);
  epilogue_case(m, base, in, ACT_SILU, -1, NULL, 0);
  epilogue_case(m, base, in, ACT_GELU, -1, NULL, 0);
  free(x), free(g), free(b);
  dc_module_destroy(m);
}

static void test_epilogues(void) {
  printf("fused epilogues vs the unfused chain:\n");
  test_conv_epilogues();
  test_linear_epilogues();
  test_norm_epilogues();
}

/* ---- attention -------------------------------------------------------- */
/* Full S×S scores per (batch, head) in double, softmax, then p·v. */
static double *attention_naive(const float *q, const float *k, const float *v, int64_t B,
                               int64_t Sq, int64_t Sk, int64_t H, int64_t D, double scale) {
  int64_t hd = H * D;
  double *y = malloc((size_t)(B * Sq * hd) * sizeof *y), *s = malloc((size_t)(Sq * Sk) * sizeof *s);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      for (int64_t i = 0; i < Sq; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Sk; j++) {
          double acc = 0;
          for (int64_t d = 0; d < D; d++)
            acc += (double)q[(b * Sq + i) * hd + h * D + d] * k[(b * Sk + j) * hd + h * D + d];
          s[i * Sk + j] = acc * scale;
          mx = fmax(mx, s[i * Sk + j]);
        }
        for (int64_t j = 0; j < Sk; j++) sum += s[i * Sk + j] = exp(s[i * Sk + j] - mx);
        for (int64_t d = 0; d < D; d++) {
          double acc = 0;
          for (int64_t j = 0; j < Sk; j++) acc += s[i * Sk + j] / sum * v[(b * Sk + j) * hd + h * D + d];
          y[(b * Sq + i) * hd + h * D + d] = acc;
        }
      }
    }
  free(s);
  return y;
}

static dc_node attn_node(int32_t q, int32_t k, int32_t v, int heads, double scale) {
  int32_t ins[3] = {q, k, v};
  dc_node nd = dc_node_make(OP_ATTENTION, 3, ins);
  dc_node_set_int(&nd, "heads", heads);
  dc_node_set_float(&nd, "scale", scale);
  return nd;
}

static void attention_case(const char *what, int64_t B, int64_t Sq, int64_t Sk, int64_t H, int64_t D) {
  dc_module *m = dc_module_create();
  float *q = rand_buf(B * Sq * H * D), *k = rand_buf(B * Sk * H * D), *v = rand_buf(B * Sk * H * D);
  for (int64_t i = 0; i < B * Sq * H * D; i++) q[i] *= 4; /* peaky softmax: max subtraction matters */
  double scale = 1 / sqrt((double)D);
  double *want = attention_naive(q, k, v, B, Sq, Sk, H, D, scale);
  const void *in[3] = {q, k, v};
  float *y = run_node(m, attn_node(IN32(m, B, Sq, H * D), IN32(m, B, Sk, H * D), IN32(m, B, Sk, H * D),
                                   (int)H, scale), in);
  check_close(what, y, want, B * Sq * H * D, 1e-5);
  free(q), free(k), free(v), free(want), free(y);
  dc_module_destroy(m);
}

static void test_attention(void) {
  printf("attention:\n");
  {
    /* equal scores: output is the mean of v; then q picks the larger key */
    dc_module *m = dc_module_create();
    float q[2] = {0, 1}, k[2] = {0, 0}, v[2] = {1, 3};
    float k2[2] = {0, 100};
    double want[2] = {2, 2}, want2[2] = {2, 3};
    int32_t iq = IN32(m, 1, 2, 1), ik = IN32(m, 1, 2, 1), iv = IN32(m, 1, 2, 1);
    const void *in[3] = {q, k, v};
    float *y = run_node(m, attn_node(iq, ik, iv, 1, 1.0), in);
    check_close("attention, equal scores average v (by hand)", y, want, 2, 1e-7);
    free(y);
    in[1] = k2; /* row 0 ties again; row 1 scores 0 vs 100: all weight on v[1] */
    y = run_node(m, attn_node(iq, ik, iv, 1, 1.0), in);
    check_close("attention, one dominant key (by hand)", y, want2, 2, 1e-7);
    free(y);
    dc_module_destroy(m);
  }
  attention_case("attention B2 Sq37 Sk37 H3 D4 (self, Sq not a multiple of 32)", 2, 37, 37, 3, 4);
  attention_case("attention B1 Sq70 Sk19 H2 D8 (cross, 3 query blocks)", 1, 70, 19, 2, 8);
  attention_case("attention B2 Sq5 Sk64 H1 D16 (one head, short query)", 2, 5, 64, 1, 16);
  {
    /* the score buffer's allocation fails: a clean error, nothing leaks */
    dc_module *m = dc_module_create();
    float buf[8] = {0};
    const void *in[3] = {buf, buf, buf};
    dc_node nd = attn_node(IN32(m, 1, 4, 2), IN32(m, 1, 4, 2), IN32(m, 1, 4, 2), 1, 1.0);
    dc_type t;
    CHECK_OK(dc_infer_type(m, &nd, &t));
    nd.type = t;
    float out[8];
    dc_alloc_fail_after(0);
    dc_status *st = dc_ref_kernel_for(OP_ATTENTION)(m, &nd, in, out);
    dc_alloc_fail_after(-1);
    CHECK_ERR(st, "attention scores");
    dc_module_destroy(m);
  }
}

/* ---- timestep embedding ----------------------------------------------- */
/* Made with numpy 2.4 by mirroring diffusers get_timestep_embedding op by op
 * in float32 (exp/sin/cos evaluated in float64 and rounded once):
 *   half = dim // 2
 *   e = np.float32(-math.log(10000)) * np.arange(half, dtype=np.float32)
 *   e = (e / np.float32(half - shift)).astype(np.float32)
 *   f = np.exp(e.astype(np.float64)).astype(np.float32)
 *   a = (np.float32(t)[:, None] * f[None, :]).astype(np.float32)
 *   emb = cat(sin(a), cos(a)) (flip: cat(cos, sin)); odd dim: pad a zero column
 * with t = [0, 1, 2.5, 999].  Evaluating the same formula in float64 instead
 * differs by 2.8e-6 at t = 999, so the 1e-6 bound below checks the order. */
static const float te_d8[4][8] = {
  {0, 0, 0, 0, 1, 1, 1, 1},
  {0.841470957f, 0.0463992283f, 0.00215443317f, 9.99999902e-05f, 0.540302277f, 0.998923004f, 0.999997675f, 1},
  {0.598472118f, 0.115779489f, 0.00538606104f, 0.000249999983f, -0.801143587f, 0.993274927f, 0.999985516f,
   0.99999994f},
  {-0.0264607519f, 0.684861422f, 0.835648477f, 0.0997339115f, 0.999649882f, -0.728673339f, -0.549264669f,
   0.995014131f},
};
static const float te_d9_flip_shift0[4][9] = {
  {1, 1, 1, 1, 0, 0, 0, 0, 0},
  {0.540302277f, 0.995004177f, 0.999949992f, 0.999999523f, 0.841470957f, 0.099833414f, 0.00999983307f,
   0.000999999815f, 0},
  {-0.801143587f, 0.968912423f, 0.999687493f, 0.999996901f, 0.598472118f, 0.247403949f, 0.0249973945f,
   0.00249999738f, 0},
  {0.999649882f, 0.807455063f, -0.844469845f, 0.541143537f, -0.0264607519f, -0.589929104f, -0.535603166f,
   0.840930223f, 0},
};
static const float te_d6_flip[4][6] = {
  {1, 1, 1, 0, 0, 0},
  {0.540302277f, 0.999949992f, 1, 0.841470957f, 0.00999983307f, 9.99999902e-05f},
  {-0.801143587f, 0.999687493f, 0.99999994f, 0.598472118f, 0.0249973945f, 0.000249999983f},
  {0.999649882f, -0.844469845f, 0.995014131f, -0.0264607519f, -0.535603166f, 0.0997339115f},
};

static void time_embed_case(const char *what, int dim, int flip, double shift, const float *want) {
  dc_module *m = dc_module_create();
  float t[4] = {0, 1, 2.5f, 999};
  int32_t ins[1] = {IN32(m, 4)};
  dc_node nd = dc_node_make(OP_TIME_EMBED, 1, ins);
  const void *in[1] = {t};
  dc_node_set_int(&nd, "dim", dim);
  dc_node_set_int(&nd, "flip_sin_to_cos", flip);
  dc_node_set_float(&nd, "freq_shift", shift);
  float *y = run_node(m, nd, in);
  check_closef(what, y, want, 4 * dim, 1e-6);
  free(y);
  dc_module_destroy(m);
}

static void test_time_embed(void) {
  printf("timestep_embedding:\n");
  time_embed_case("dim 8, sin first, freq_shift 1 (SD UNet)", 8, 0, 1.0, &te_d8[0][0]);
  time_embed_case("dim 9 (odd, zero pad), flip, freq_shift 0", 9, 1, 0.0, &te_d9_flip_shift0[0][0]);
  time_embed_case("dim 6, flip, freq_shift 1", 6, 1, 1.0, &te_d6_flip[0][0]);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_table();
  test_conv();
  test_conv3d();
  test_linear();
  test_group_norm();
  test_layer_norm();
  test_epilogues();
  test_attention();
  test_time_embed();
  return tu_finish();
}
