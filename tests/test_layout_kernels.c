/* test_layout_kernels.c — the channels-last (NHWC) kernels of conv2d,
 * group_norm and upsample_nearest, nodes with layout nhwc (passes/layout.c):
 *   (a) the reference kernel on NHWC data gives exactly the bits the NCHW
 *       reference gives on the same data permuted (activations, conv
 *       weights [O,C,kh,kw] -> [O,kh,kw,C], residuals, outputs): a layout
 *       change is bit-exact on the reference backend, by design of
 *       runtime/kernels_ref_nn.c; also with the output written over the
 *       residual, as the memory planner arranges;
 *   (b) the generated LLVM kernel (codegen/llvm k_conv.c, k_norm.c,
 *       k_data.c) against the NHWC reference on 1 and 3 threads: conv2d
 *       within rel L2 conv_bound(K) (it sums the K products in (ky, kx, c)
 *       order, the reference in (c, ky, kx): two float sums of K terms
 *       differ by about eps·sqrt(K), measured under 3e-8·sqrt(K)), and bit-exact
 *       on small-integer data where every partial sum is exact in float;
 *       group_norm within GN_L2 (the NCHW kernel's bound); upsample
 *       bit-exact; a conv writing its output over its residual gives the
 *       bits it writes elsewhere.
 * Shapes are SD UNet / VAE cases at reduced size: 1x1, 3x3 pad 1, the VAE
 * encoder's downsample (3x3 stride 2, pad 0,1,0,1), odd sizes, channels
 * that are no multiple of 16 (and C > 256: several k blocks per tap), bias
 * or none, silu, full / per-channel / in-place residuals, bf16 and
 * fp8 e4m3 stored weights; group norms of 32 and odd group counts.
 *
 * The NCHW-against-NHWC timings are bench/bench_kernels's `layout` mode. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_harness.h"
#include "runtime/kernels.h"
#include "testutil.h"

#define GN_L2 1e-6

/* float eps·sqrt(K): about 3 times the difference measured between two
 * orders of summing K products. */
static double conv_bound(int64_t k) { return 6e-8 * sqrt((double)k); }

enum { RES_NONE, RES_FULL, RES_CHANNEL, RES_INPLACE };

static double worst_conv, worst_gn; /* the largest LLVM rel L2 seen per op */

/* ---- data ---- */
static uint64_t rng = 88172645463325252ull;
static float normal(void) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    u[i] = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
  }
  return (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static int integers; /* random_of draws small integers (exact sums) instead */

/* n values offset + spread·normal, stored in dtype t. */
static void *random_of(dc_dtype t, int64_t n, float offset, float spread) {
  uint8_t *p = malloc((size_t)n * (size_t)dc_dtype_size(t) + 64);
  for (int64_t i = 0; i < n; i++) {
    float v = integers ? rintf(2 * normal()) : offset + spread * normal();
    uint16_t h;
    switch (t) {
      case DT_BF16: h = dc_f32_to_bf16(v), memcpy(p + 2 * i, &h, 2); break;
      case DT_F8_E4M3: p[i] = dc_f32_to_f8e4m3(v); break;
      default: memcpy(p + 4 * i, &v, 4); break;
    }
  }
  return p;
}

/* dst = src (elements of es bytes, shape dims) with its dims permuted:
 * dst dim i is src dim perm[i]. */
static void *permuted(const void *src, int es, int rank, const int64_t *dims, const int *perm) {
  int64_t n = 1, sstr[DC_MAX_DIMS], idx[DC_MAX_DIMS] = {0};
  for (int d = rank - 1; d >= 0; d--) sstr[d] = n, n *= dims[d];
  uint8_t *dst = malloc((size_t)n * (size_t)es + 64);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < rank; d++) off += idx[d] * sstr[perm[d]];
    memcpy(dst + i * es, (const uint8_t *)src + off * es, (size_t)es);
    for (int d = rank - 1; d >= 0 && ++idx[d] == dims[perm[d]]; d--) idx[d] = 0;
  }
  return dst;
}

/* The channels-last order of a channels-first shape, and back. */
static void to_last(int rank, int *perm) {
  perm[0] = 0;
  for (int d = 1; d < rank - 1; d++) perm[d] = d + 1;
  perm[rank - 1] = 1;
}
static void to_first(int rank, int *perm) {
  perm[0] = 0;
  perm[1] = rank - 1;
  for (int d = 2; d < rank; d++) perm[d] = d - 1;
}
static void dims_last(int rank, const int64_t *first, int64_t *last) {
  int perm[DC_MAX_DIMS];
  to_last(rank, perm);
  for (int d = 0; d < rank; d++) last[d] = first[perm[d]];
}

/* ---- the two modules of a case ---- */
/* One op twice: nchw (channels first) and nhwc, the same inputs in both
 * orders.  permute[i]: whether input i has channels to move (activations,
 * the conv weight, a residual) or is a vector (bias, gamma, beta). */
typedef struct {
  dc_module *m[2];
  int32_t y[2];
  void *in[2][DC_MAX_INPUTS];
  int nin;
} pair;

static int32_t add_input(dc_module *m, dc_dtype dt, int rank, const int64_t *dims) {
  dc_type t = {dt, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  char name[32];
  snprintf(name, sizeof name, "in%d", m->ninputs);
  return dc_module_add_input(m, name, &t, INIT_NORMAL);
}

/* kh_node picks the layout from the rank; these nodes are NHWC. */
static int32_t add_node(dc_module *m, dc_node n, dc_layout layout) {
  n.layout = layout;
  int32_t y = kh_node(m, n);
  if (y >= 0) m->nodes[y].layout = layout;
  return y;
}

/* Input i of both modules: data (channels first, dtype dt) and its permuted copy. */
static void pair_input(pair *p, int32_t *ids0, int32_t *ids1, dc_dtype dt, int rank, const int64_t *dims, int permute,
                       void *data) {
  int64_t last[DC_MAX_DIMS];
  int perm[DC_MAX_DIMS];
  to_last(rank, perm);
  if (permute) dims_last(rank, dims, last);
  else memcpy(last, dims, sizeof(int64_t) * (size_t)rank);
  ids0[p->nin] = add_input(p->m[0], dt, rank, dims);
  ids1[p->nin] = add_input(p->m[1], dt, rank, last);
  p->in[0][p->nin] = data;
  p->in[1][p->nin] = permute ? permuted(data, dc_dtype_size(dt), rank, dims, perm) : NULL;
  p->nin++;
}

static const void *in_of(const pair *p, int layout, int i) {
  return layout && p->in[1][i] ? p->in[1][i] : p->in[0][i];
}

static void pair_free(pair *p) {
  for (int l = 0; l < 2; l++) {
    dc_module_destroy(p->m[l]);
    for (int i = 0; i < p->nin; i++) free(p->in[l][i]);
  }
}

/* Runs the reference of layout l (0 nchw, 1 nhwc) into a new buffer; with
 * alias >= 0 the output buffer starts as a copy of input alias and is
 * passed as that input too (in place). */
static float *run_ref(const pair *p, int l, int alias) {
  const dc_node *n = &p->m[l]->nodes[p->y[l]];
  size_t bytes = (size_t)dc_type_bytes(&n->type);
  float *out = malloc(bytes + 64);
  const void *in[DC_MAX_INPUTS];
  memset(out, 0xff, bytes + 64);
  for (int i = 0; i < p->nin; i++) in[i] = in_of(p, l, i);
  if (alias >= 0) {
    memcpy(out, in[alias], bytes);
    in[alias] = out;
  }
  CHECK_OK(dc_ref_kernel_for(n->op)(p->m[l], n, in, out));
  return out;
}

/* (a): nhwc reference == nchw reference, bits, after permuting back; also
 * in place over input alias when alias >= 0. */
static int ref_layouts_agree(const pair *p, int alias) {
  const dc_type *t = &p->m[0]->nodes[p->y[0]].type;
  int perm[DC_MAX_DIMS], ok;
  to_first(t->rank, perm);
  float *want = run_ref(p, 0, -1), *last = run_ref(p, 1, -1);
  int64_t lastdims[DC_MAX_DIMS];
  dims_last(t->rank, t->dims, lastdims);
  float *back = permuted(last, 4, t->rank, lastdims, perm);
  ok = memcmp(back, want, (size_t)dc_type_bytes(t)) == 0;
  if (alias >= 0) {
    float *inplace = run_ref(p, 1, alias);
    ok &= memcmp(inplace, last, (size_t)dc_type_bytes(t)) == 0;
    free(inplace);
  }
  CHECK(ok);
  free(want);
  free(last);
  free(back);
  return ok;
}

/* (b): the LLVM kernel of the nhwc node vs its reference, 1 and 3 threads;
 * returns the worst rel L2 (bit_exact: all runs gave the reference's bits). */
static double llvm_vs_ref(const pair *p, double bound, int *bit_exact) {
  const void *in[DC_MAX_INPUTS];
  double worst = 0;
  for (int i = 0; i < p->nin; i++) in[i] = in_of(p, 1, i);
  *bit_exact = 1;
  for (int threads = 1; threads <= 3; threads += 2) {
    kh_result r;
    dc_status *st = kh_compare_with(p->m[1], p->y[1], threads, in, &r);
    CHECK_OK(st);
    if (st) return INFINITY;
    CHECK(r.rel_l2 <= bound);
    if (r.rel_l2 > worst) worst = r.rel_l2;
    *bit_exact &= r.bit_exact;
  }
  return worst;
}

/* ---- conv2d ---- */
typedef struct {
  int64_t n, c, h, w, o, kh, kw, stride, pt, pb, pl, pr;
} conv_shape;

static void conv_attrs(dc_node *n, const conv_shape *s, int bias, dc_act act, int res) {
  dc_node_set_int(n, "stride", s->stride);
  dc_node_set_int(n, "pad_t", s->pt);
  dc_node_set_int(n, "pad_b", s->pb);
  dc_node_set_int(n, "pad_l", s->pl);
  dc_node_set_int(n, "pad_r", s->pr);
  dc_node_set_int(n, "bias", bias);
  dc_node_set_int(n, "act", act);
  dc_node_set_int(n, "residual", res != RES_NONE);
}

static void check_conv(conv_shape s, int bias, dc_act act, int res, dc_dtype wdt) {
  pair p = {{dc_module_create(), dc_module_create()}, {-1, -1}, {{0}}, 0};
  int32_t ids[2][DC_MAX_INPUTS];
  int64_t ho = (s.h + s.pt + s.pb - s.kh) / s.stride + 1, wo = (s.w + s.pl + s.pr - s.kw) / s.stride + 1;
  int64_t xd[4] = {s.n, s.c, s.h, s.w}, wd[4] = {s.o, s.c, s.kh, s.kw};
  int64_t rd[4] = {s.n, s.o, res == RES_CHANNEL ? 1 : ho, res == RES_CHANNEL ? 1 : wo};
  float wscale = 1.0f / sqrtf((float)(s.c * s.kh * s.kw));
  pair_input(&p, ids[0], ids[1], DT_F32, 4, xd, 1, random_of(DT_F32, s.n * s.c * s.h * s.w, 0, 1));
  float wspread = wdt == DT_F32 ? wscale : 0.3f; /* fp8 and bf16 codes of moderate size */
  pair_input(&p, ids[0], ids[1], wdt, 4, wd, 1, random_of(wdt, s.o * s.c * s.kh * s.kw, 0, wspread));
  if (bias) pair_input(&p, ids[0], ids[1], wdt, 1, &s.o, 0, random_of(wdt, s.o, 0, 0.5f));
  if (res != RES_NONE)
    pair_input(&p, ids[0], ids[1], DT_F32, 4, rd, 1, random_of(DT_F32, rd[0] * rd[1] * rd[2] * rd[3], 0, 1));
  for (int l = 0; l < 2; l++) {
    dc_node n = dc_node_make(OP_CONV2D, p.nin, ids[l]);
    conv_attrs(&n, &s, bias, act, res);
    p.y[l] = add_node(p.m[l], n, l ? LAYOUT_NHWC : LAYOUT_NCHW);
  }
  char what[192];
  snprintf(what, sizeof what, "conv %lldx%lldx%lldx%lld->%lld k%lldx%lld s%lld p(%lld,%lld,%lld,%lld)%s%s%s%s%s",
           (long long)s.n, (long long)s.c, (long long)s.h, (long long)s.w, (long long)s.o, (long long)s.kh,
           (long long)s.kw, (long long)s.stride, (long long)s.pt, (long long)s.pb, (long long)s.pl, (long long)s.pr,
           bias ? " bias" : "", act == ACT_SILU ? " silu" : "",
           res == RES_FULL      ? " +res"
           : res == RES_CHANNEL ? " +res[N,O,1,1]"
           : res == RES_INPLACE ? " +res in place"
                                : "",
           wdt == DT_F32 ? "" : " w:", wdt == DT_F32 ? "" : dc_dtype_name(wdt));
  CHECK(p.y[0] >= 0 && p.y[1] >= 0);
  if (p.y[0] >= 0 && p.y[1] >= 0) {
    int exact = ref_layouts_agree(&p, res == RES_INPLACE ? p.nin - 1 : -1), llvm_exact;
    double bound = conv_bound(s.c * s.kh * s.kw), l2 = llvm_vs_ref(&p, integers ? 0 : bound, &llvm_exact);
    if (integers) CHECK(llvm_exact);
    if (l2 / bound > worst_conv) worst_conv = l2 / bound;
    int same = 1;
    kh_result r = {0};
    if (res == RES_INPLACE) { /* output over the residual, random inputs */
      CHECK_OK(kh_compare_aliased(p.m[1], p.y[1], 2, 5, 1.0, p.nin - 1, &r, &same));
      CHECK(same && r.rel_l2 <= bound);
      if (r.rel_l2 / bound > worst_conv) worst_conv = r.rel_l2 / bound;
    }
    printf("%-78s ref nhwc==nchw %s; LLVM rel L2 %.2g (bound %.1g)%s", what, exact ? "bit-exact" : "DIFFERS", l2,
           bound, integers ? (llvm_exact ? ", integers: bit-exact" : ", integers: DIFFERS") : "");
    if (res == RES_INPLACE) printf(", in place %s (rel L2 %.2g)", same ? "same bits" : "DIFFERS", r.rel_l2);
    printf("\n");
  }
  pair_free(&p);
}

static void conv_cases(void) {
  /* 1x1 (linear over x [N·H·W, C]): shortcut / proj_in style, C not a multiple of 16 */
  check_conv((conv_shape){2, 40, 6, 7, 24, 1, 1, 1, 0, 0, 0, 0}, 1, ACT_NONE, RES_NONE, DT_F32);
  check_conv((conv_shape){1, 17, 5, 9, 33, 1, 1, 1, 0, 0, 0, 0}, 0, ACT_NONE, RES_FULL, DT_F32);
  /* 3x3 pad 1: resnet convs; C > 256 gives two k blocks per tap */
  check_conv((conv_shape){2, 32, 9, 10, 40, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_SILU, RES_NONE, DT_F32);
  check_conv((conv_shape){1, 300, 5, 6, 20, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_FULL, DT_F32);
  check_conv((conv_shape){1, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, DT_F32);
  /* VAE conv_in / conv_out: 3 channels in or out */
  check_conv((conv_shape){1, 3, 12, 11, 8, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, DT_F32);
  check_conv((conv_shape){3, 5, 7, 5, 3, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_SILU, RES_NONE, DT_F32);
  /* the VAE encoder's downsample: stride 2, pad (0,1,0,1); odd sizes */
  check_conv((conv_shape){1, 24, 16, 15, 20, 3, 3, 2, 0, 1, 0, 1}, 1, ACT_NONE, RES_NONE, DT_F32);
  check_conv((conv_shape){2, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1}, 1, ACT_NONE, RES_NONE, DT_F32);
  /* the UNet's downsample: stride 2, pad 1 */
  check_conv((conv_shape){1, 33, 9, 8, 17, 3, 3, 2, 1, 1, 1, 1}, 0, ACT_NONE, RES_NONE, DT_F32);
  /* a 1x1 that is no linear: stride 2 (one k segment, rows addressed per pixel) */
  check_conv((conv_shape){1, 20, 9, 8, 12, 1, 1, 2, 0, 0, 0, 0}, 1, ACT_NONE, RES_NONE, DT_F32);
  /* other kernels and uneven padding */
  check_conv((conv_shape){1, 4, 9, 10, 9, 4, 2, 1, 2, 1, 0, 1}, 0, ACT_NONE, RES_NONE, DT_F32);
  check_conv((conv_shape){1, 3, 8, 9, 16, 7, 7, 1, 3, 3, 3, 3}, 1, ACT_NONE, RES_NONE, DT_F32);
  /* epilogues: silu then residual, per-channel residual, residual in place */
  check_conv((conv_shape){2, 17, 7, 9, 33, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_SILU, RES_FULL, DT_F32);
  check_conv((conv_shape){2, 17, 7, 9, 33, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_CHANNEL, DT_F32);
  check_conv((conv_shape){2, 320, 6, 7, 37, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_INPLACE, DT_F32);
  check_conv((conv_shape){1, 40, 6, 5, 24, 1, 1, 1, 0, 0, 0, 0}, 0, ACT_SILU, RES_INPLACE, DT_F32);
  /* stored weights (layerwise casting): bf16 and fp8 e4m3 weight and bias */
  check_conv((conv_shape){1, 20, 7, 9, 18, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_SILU, RES_NONE, DT_BF16);
  check_conv((conv_shape){2, 19, 6, 6, 21, 1, 1, 1, 0, 0, 0, 0}, 1, ACT_NONE, RES_FULL, DT_BF16);
  check_conv((conv_shape){1, 20, 7, 9, 18, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_NONE, DT_F8_E4M3);
  check_conv((conv_shape){1, 12, 9, 8, 10, 3, 3, 2, 0, 1, 0, 1}, 1, ACT_SILU, RES_NONE, DT_F8_E4M3);
  /* small integers: every partial sum exact, so any summation order gives the reference's bits */
  integers = 1;
  check_conv((conv_shape){2, 300, 6, 7, 37, 3, 3, 1, 1, 1, 1, 1}, 1, ACT_NONE, RES_FULL, DT_F32);
  check_conv((conv_shape){1, 24, 16, 15, 20, 3, 3, 2, 0, 1, 0, 1}, 1, ACT_NONE, RES_NONE, DT_F32);
  check_conv((conv_shape){2, 19, 6, 6, 21, 1, 1, 1, 0, 0, 0, 0}, 0, ACT_NONE, RES_CHANNEL, DT_BF16);
  integers = 0;
}

/* ---- group norm ---- */
static void check_gn(int rank, const int64_t *dims, int64_t groups, dc_act act, float offset) {
  pair p = {{dc_module_create(), dc_module_create()}, {-1, -1}, {{0}}, 0};
  int32_t ids[2][DC_MAX_INPUTS];
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  pair_input(&p, ids[0], ids[1], DT_F32, rank, dims, 1, random_of(DT_F32, numel, offset, 2));
  pair_input(&p, ids[0], ids[1], DT_F32, 1, &dims[1], 0, random_of(DT_F32, dims[1], 1, 0.5f));
  pair_input(&p, ids[0], ids[1], DT_F32, 1, &dims[1], 0, random_of(DT_F32, dims[1], 0, 0.5f));
  for (int l = 0; l < 2; l++) {
    dc_node n = dc_node_make(OP_GROUP_NORM, 3, ids[l]);
    dc_node_set_float(&n, "eps", 1e-6);
    dc_node_set_int(&n, "groups", groups);
    dc_node_set_int(&n, "act", act);
    p.y[l] = add_node(p.m[l], n, l ? LAYOUT_NHWC : rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR);
  }
  char what[128], d[64];
  snprintf(what, sizeof what, "group_norm %s /%lld%s%s", dc_dims_str(dims, rank, d, sizeof d), (long long)groups,
           act == ACT_SILU ? " silu" : act == ACT_GELU ? " gelu" : "", offset != 0 ? " offset" : "");
  CHECK(p.y[0] >= 0 && p.y[1] >= 0);
  if (p.y[0] >= 0 && p.y[1] >= 0) {
    int exact = ref_layouts_agree(&p, -1), llvm_exact;
    double l2 = llvm_vs_ref(&p, GN_L2, &llvm_exact);
    if (l2 > worst_gn) worst_gn = l2;
    printf("%-78s ref nhwc==nchw %s; LLVM rel L2 %.2g\n", what, exact ? "bit-exact" : "DIFFERS", l2);
  }
  pair_free(&p);
}

static void gn_cases(void) {
  check_gn(4, (int64_t[]){2, 320, 16, 16}, 32, ACT_SILU, 0);  /* 10 channels a group: blocks of 2 groups */
  check_gn(4, (int64_t[]){1, 128, 24, 20}, 32, ACT_NONE, 0);  /* VAE: 4 channels a group, 4 groups a vector */
  check_gn(4, (int64_t[]){1, 640, 8, 8}, 32, ACT_SILU, 0);    /* 20 a group: a masked tail vector */
  check_gn(4, (int64_t[]){2, 1280, 4, 4}, 32, ACT_NONE, 0);   /* 40 a group */
  check_gn(4, (int64_t[]){1, 2560, 3, 3}, 32, ACT_SILU, 0);   /* 80 a group: two passes of vectors */
  check_gn(4, (int64_t[]){3, 21, 5, 7}, 7, ACT_SILU, 0);      /* odd groups, one 21-channel block */
  check_gn(4, (int64_t[]){2, 15, 9, 4}, 5, ACT_GELU, 0);
  check_gn(4, (int64_t[]){2, 6, 5, 7}, 6, ACT_NONE, 0);       /* 1-channel groups */
  check_gn(4, (int64_t[]){1, 64, 12, 12}, 1, ACT_NONE, 0);    /* one group of every channel */
  check_gn(4, (int64_t[]){2, 96, 7, 9}, 32, ACT_SILU, 300.0f); /* mean far from 0 */
  check_gn(3, (int64_t[]){2, 32, 50}, 8, ACT_GELU, 0);        /* [N, C, L] vs [N, L, C] */
  check_gn(2, (int64_t[]){5, 12}, 4, ACT_NONE, 0);            /* no spatial dims */
}

/* ---- upsample ---- */
static void check_up(const int64_t *dims, int64_t factor) {
  pair p = {{dc_module_create(), dc_module_create()}, {-1, -1}, {{0}}, 0};
  int32_t ids[2][DC_MAX_INPUTS];
  pair_input(&p, ids[0], ids[1], DT_F32, 4, dims, 1, random_of(DT_F32, dims[0] * dims[1] * dims[2] * dims[3], 0, 1));
  for (int l = 0; l < 2; l++) {
    dc_node n = dc_node_make(OP_UPSAMPLE, 1, ids[l]);
    dc_node_set_int(&n, "factor", factor);
    p.y[l] = add_node(p.m[l], n, l ? LAYOUT_NHWC : LAYOUT_NCHW);
  }
  char what[128], d[64];
  snprintf(what, sizeof what, "upsample %s x%lld", dc_dims_str(dims, 4, d, sizeof d), (long long)factor);
  CHECK(p.y[0] >= 0 && p.y[1] >= 0);
  if (p.y[0] >= 0 && p.y[1] >= 0) {
    int exact = ref_layouts_agree(&p, -1), llvm_exact;
    double l2 = llvm_vs_ref(&p, 0, &llvm_exact);
    CHECK(llvm_exact);
    printf("%-78s ref nhwc==nchw %s; LLVM %s (rel L2 %.2g)\n", what, exact ? "bit-exact" : "DIFFERS",
           llvm_exact ? "bit-exact" : "DIFFERS", l2);
  }
  pair_free(&p);
}

static void up_cases(void) {
  check_up((int64_t[]){2, 40, 8, 8}, 2);
  check_up((int64_t[]){1, 17, 5, 7}, 2);
  check_up((int64_t[]){1, 3, 4, 5}, 3);
  check_up((int64_t[]){2, 5, 3, 3}, 1);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  conv_cases();
  gn_cases();
  up_cases();
  printf("worst LLVM rel L2 vs the NHWC reference: conv2d %.2g·sqrt(K) (bound 6e-08·sqrt(K)), group_norm %.2g "
         "(bound %.0e)\n", worst_conv * 6e-8, worst_gn, GN_L2);
  return tu_finish();
}
