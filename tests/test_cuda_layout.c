/* test_cuda_layout.c — the generated CUDA kernels of the three ops that read
 * a node's layout, for nodes with layout nhwc (--layout nhwc): conv2d
 * (codegen/cuda/g_gemm.c, implicit GEMM with k = (r, q, c)), group_norm
 * (g_norm.c) and upsample_nearest (g_data.c).
 *
 * The oracle is the NCHW reference kernel (dc_ref_kernel_for) on the same
 * numbers: the test builds the NCHW node, runs the reference, and moves the
 * channels last on the host (x, the conv weight [O,C,kh,kw] -> [O,kh,kw,C],
 * the residual and the expected output), then runs the NHWC node's kernel
 * in the CPU emulator (tests/cuda_harness.h) with guard bytes around every
 * buffer.  conv2d: rel L2 <= 1e-5 for f32 compute, <= 1e-2 for bf16 tensor
 * cores (the bounds of test_cuda_gemm.c); group_norm <= 1e-5 (those of
 * test_cuda_norm.c); upsample bit-exact on random bytes.
 *
 * Cases: 1x1; 3x3 pad 1; 3x3 stride 2 with the VAE's (0,1,0,1) padding; odd
 * sizes; C = 4, 20 and 24 (16-byte loads) and C = 3, 5, 6 (scalar loads);
 * several M, N and K tiles; bias and none; act silu; full and per-channel
 * residuals, one written over in place; bf16- and fp8-stored weights;
 * group_norm with 32 groups and an odd number of groups, silu, a large mean,
 * rank 3, 1024 threads; upsample by 2 and by 3.
 *
 * Every distinct generated source is also compiled by NVRTC for sm_80 and
 * sm_90 when NVRTC is installed (any warning fails); without it that part
 * is reported as not run.  Exit 77 when there is no host C++ compiler. */
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cgen.h" /* dc_cuda_ctype */
#include "codegen/cuda/nvrtc.h"
#include "cuda_harness.h"
#include "runtime/kernels.h"
#include "testutil.h"

enum { RES_NONE, RES_FULL, RES_CHANNEL }; /* residual: none, output-shaped, one value per (sample, channel) */

static int skipped; /* no host C++ compiler: the whole test is a skip */

/* ---- NVRTC: each distinct source once, sm_80 and sm_90 ------------------ */
enum { MAX_SOURCES = 256 };
static dc_nvrtc *nv;
static dc_cuda_arch archs[DC_CUDA_MAX_ARCHS];
static int narchs, nvrtc_compiles;
static uint64_t compiled[MAX_SOURCES];
static int ncompiled;

static void nvrtc_init(void) {
  dc_status *st = dc_nvrtc_load(&nv);
  if (st) {
    printf("NVRTC not found (%s): sources are compiled by the emulator only\n", dc_status_message(st));
    dc_status_free(st);
    nv = NULL;
    return;
  }
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_80,sm_90", archs, &narchs));
  printf("NVRTC %s: every distinct source compiled for sm_80 and sm_90, warnings fail\n", dc_nvrtc_version(nv));
}

static void nvrtc_check(const dc_cuda_kernel *k) {
  if (!nv) return;
  uint64_t h = dc_hash64(k->source, strlen(k->source));
  for (int i = 0; i < ncompiled; i++)
    if (compiled[i] == h) return;
  if (ncompiled < MAX_SOURCES) compiled[ncompiled++] = h;
  for (int a = 0; a < narchs; a++) {
    dc_nvrtc_output out;
    memset(&out, 0, sizeof out);
    dc_status *st = dc_nvrtc_compile(nv, k->name, k->source, &archs[a], &out);
    CHECK_OK(st);
    CHECK(!st && !out.log);
    if (!st && out.log) fprintf(stderr, "NVRTC warnings for %s on %s:\n%s\n", k->name, archs[a].name, out.log);
    nvrtc_compiles++;
    dc_nvrtc_output_deinit(&out);
  }
}

/* ---- host data ------------------------------------------------------------ */
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return rng;
}

/* count uniform(center - spread, center + spread) floats. */
static float *uniform(int64_t count, double center, double spread) {
  float *d = malloc((size_t)(count ? count : 1) * sizeof *d);
  for (int64_t i = 0; i < count; i++)
    d[i] = (float)(center + spread * ((double)(next_u64() >> 40) / (double)(1ull << 24) * 2.0 - 1.0));
  return d;
}

/* [a][b][s] -> [a][s][b] in elements of es bytes: NCHW -> NHWC with s = H*W,
 * the conv weight [O][C][kh*kw] -> [O][kh*kw][C], [N][C][spatial] -> [N][spatial][C]. */
static void *channels_last(const void *src, int64_t a, int64_t b, int64_t s, size_t es) {
  int64_t count = a * b * s;
  uint8_t *dst = malloc((size_t)(count > 0 ? count : 1) * es);
  const uint8_t *from = src;
  for (int64_t i = 0; i < a; i++)
    for (int64_t j = 0; j < b; j++)
      for (int64_t k = 0; k < s; k++) memcpy(dst + (size_t)((i * s + k) * b + j) * es, from + (size_t)((i * b + j) * s + k) * es, es);
  return dst;
}

/* Random finite weight bits of dtype t (fp8 in a moderate exponent range,
 * as test_cuda_gemm.c) and their exact f32 values. */
static void random_weights(dc_dtype t, int64_t count, uint8_t *bits, float *vals) {
  for (int64_t i = 0; i < count; i++) {
    uint64_t s = next_u64();
    float f = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    unsigned r = (unsigned)(s >> 20);
    switch (t) {
      case DT_BF16: ((uint16_t *)bits)[i] = dc_f32_to_bf16(f), vals[i] = dc_bf16_to_f32(((uint16_t *)bits)[i]); break;
      case DT_F8_E4M3: /* sign, exponent 4..9 (2^-3 .. 2^2), any mantissa */
        bits[i] = (uint8_t)((r & 0x80u) | ((4u + (r >> 8) % 6u) << 3) | (r & 7u));
        vals[i] = dc_f8e4m3_to_f32(bits[i]);
        break;
      default: ((float *)bits)[i] = f, vals[i] = f; break;
    }
  }
}

/* ---- guarded device buffers (as cuda_harness.c: 64- but not 128-aligned) --- */
enum { GUARD_PRE = 320, GUARD_POST = 256, GUARD_BYTE = 0xa5 };
typedef struct {
  uint8_t *base, *data;
  size_t bytes;
} gbuf;

static void gbuf_init(gbuf *g, const void *data, size_t bytes) {
  g->bytes = bytes;
  g->base = aligned_alloc(256, (GUARD_PRE + bytes + GUARD_POST + 255) / 256 * 256);
  g->data = g->base + GUARD_PRE;
  memset(g->base, GUARD_BYTE, GUARD_PRE + bytes + GUARD_POST);
  if (data) memcpy(g->data, data, bytes);
}

static int gbuf_guards_ok(const gbuf *g) {
  for (size_t i = 0; i < GUARD_PRE; i++)
    if (g->base[i] != GUARD_BYTE) return 0;
  for (size_t i = 0; i < GUARD_POST; i++)
    if (g->data[g->bytes + i] != GUARD_BYTE) return 0;
  return 1;
}

/* ---- one NHWC node through its generated kernel --------------------------- */
static int is_skip(dc_status *st) {
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "compiler")) {
    skipped = 1;
    dc_status_free(st);
    return 1;
  }
  return 0;
}

static dc_status *launch(const dc_module *m, const dc_node *n, const dc_cuda_kernel *k, void **params) {
  char types[1 + DC_MAX_INPUTS][48];
  const char *ptypes[1 + DC_MAX_INPUTS];
  snprintf(types[0], sizeof types[0], "%s", dc_cuda_ctype(n->type.dtype));
  for (int i = 0; i < n->ninputs; i++)
    snprintf(types[i + 1], sizeof types[i + 1], "const %s", dc_cuda_ctype(m->nodes[n->inputs[i]].type.dtype));
  for (int i = 0; i <= n->ninputs; i++) ptypes[i] = types[i];
  ch_kernel *ck = NULL;
  dc_status *st = ch_kernel_build(k->source, k->name, n->ninputs + 1, ptypes, &ck);
  if (!st) st = ch_kernel_launch(ck, k->grid, k->block, k->smem_bytes, params);
  ch_kernel_free(ck);
  return st;
}

/* Node y's kernel on inputs[i] (bytes in each input's dtype); the output
 * goes to got, written over input `alias`'s buffer when alias >= 0.  The
 * guards and the other inputs must come back untouched.  *source gets a
 * copy of the kernel's text (to look at what the generator chose). */
static dc_status *run_nhwc(const dc_module *m, int32_t y, dc_cuda_compute c, const void *const *inputs, int alias,
                           void *got, char **source) {
  const dc_node *n = &m->nodes[y];
  dc_cuda_options o = {c};
  dc_cuda_kernel k;
  DC_TRY(dc_cuda_gen_node(m, y, &o, "k_nhwc", &k));
  nvrtc_check(&k);
  *source = dc_strdup(k.source);
  gbuf in[DC_MAX_INPUTS], out;
  void *params[1 + DC_MAX_INPUTS];
  for (int i = 0; i < n->ninputs; i++) gbuf_init(&in[i], inputs[i], (size_t)dc_type_bytes(&m->nodes[n->inputs[i]].type));
  gbuf_init(&out, NULL, (size_t)dc_type_bytes(&n->type));
  gbuf *dst = alias >= 0 ? &in[alias] : &out;
  params[0] = dst->data;
  for (int i = 0; i < n->ninputs; i++) params[i + 1] = in[i].data;
  dc_status *st = launch(m, n, &k, params);
  if (!st && !gbuf_guards_ok(&out)) st = dc_error(DC_ERR_MISMATCH, "the kernel wrote outside its output buffer");
  for (int i = 0; i < n->ninputs && !st; i++) {
    if (!gbuf_guards_ok(&in[i])) st = dc_error(DC_ERR_MISMATCH, "the kernel wrote outside input %d's buffer", i);
    else if (i != alias && memcmp(in[i].data, inputs[i], in[i].bytes))
      st = dc_error(DC_ERR_MISMATCH, "the kernel wrote into input %d", i);
  }
  if (!st) memcpy(got, dst->data, dst->bytes);
  for (int i = 0; i < n->ninputs; i++) free(in[i].base);
  free(out.base);
  dc_cuda_kernel_deinit(&k);
  return st;
}

/* An input of m with the given dims and layout. */
static int32_t input_in(dc_module *m, int rank, const int64_t *dims, dc_layout l) {
  int32_t id = kh_input(m, rank, dims);
  m->nodes[id].layout = l;
  return id;
}

/* Adds n with layout l (which the type rules read); -1 on a type error. */
static int32_t node_in(dc_module *m, dc_node n, dc_layout l) {
  n.layout = l;
  dc_status *st = dc_infer_type(m, &n, &n.type);
  if (st) {
    fprintf(stderr, "type inference: %s\n", dc_status_message(st));
    dc_status_free(st);
    return -1;
  }
  return dc_module_add_node(m, &n);
}

/* Prints and checks one comparison. */
static void report(const char *label, const char *what, const kh_result *r, double tol) {
  int ok = tol > 0 ? r->rel_l2 <= tol : r->bit_exact;
  CHECK(ok);
  if (tol > 0)
    printf("%-5s %-72s rel L2 %.3g, max abs %.3g%s\n", label, what, r->rel_l2, r->max_abs, ok ? "" : "  <-- FAIL");
  else
    printf("%-5s %-72s %s\n", label, what, ok ? "bit-exact" : "DIFFERS  <-- FAIL");
}

/* ---- conv2d ------------------------------------------------------------------ */
typedef struct {
  int64_t n, c, h, w, o, kh, kw, stride, pt, pb, pl, pr;
} conv_shape;

typedef struct {
  int bias, act, res, aliased;
  dc_dtype wtype; /* the weight's stored dtype */
} conv_epi;

/* conv2d over the inputs in[] of m, with the attributes of s and e. */
static int32_t conv_node(dc_module *m, const int32_t *in, int nin, const conv_shape *s, const conv_epi *e, dc_layout l) {
  dc_node n = dc_node_make(OP_CONV2D, nin, in);
  dc_node_set_int(&n, "stride", s->stride);
  dc_node_set_int(&n, "pad_t", s->pt);
  dc_node_set_int(&n, "pad_b", s->pb);
  dc_node_set_int(&n, "pad_l", s->pl);
  dc_node_set_int(&n, "pad_r", s->pr);
  dc_node_set_int(&n, "bias", e->bias);
  dc_node_set_int(&n, "act", e->act);
  dc_node_set_int(&n, "residual", e->res != RES_NONE);
  return node_in(m, n, l);
}

/* The conv's inputs in NCHW (nhwc = 0) or NHWC order; returns the node. */
static int32_t add_conv(dc_module *m, const conv_shape *s, const conv_epi *e, int nhwc) {
  int64_t ho = (s->h + s->pt + s->pb - s->kh) / s->stride + 1, wo = (s->w + s->pl + s->pr - s->kw) / s->stride + 1;
  dc_layout l = nhwc ? LAYOUT_NHWC : LAYOUT_NCHW;
  int32_t in[4];
  int nin = 0;
  in[nin++] = input_in(m, 4, nhwc ? (int64_t[]){s->n, s->h, s->w, s->c} : (int64_t[]){s->n, s->c, s->h, s->w}, l);
  in[nin++] = input_in(m, 4, nhwc ? (int64_t[]){s->o, s->kh, s->kw, s->c} : (int64_t[]){s->o, s->c, s->kh, s->kw}, l);
  if (e->bias) in[nin++] = input_in(m, 1, (int64_t[]){s->o}, LAYOUT_ROWMAJOR);
  if (e->res == RES_FULL)
    in[nin++] = input_in(m, 4, nhwc ? (int64_t[]){s->n, ho, wo, s->o} : (int64_t[]){s->n, s->o, ho, wo}, l);
  if (e->res == RES_CHANNEL)
    in[nin++] = input_in(m, 4, nhwc ? (int64_t[]){s->n, 1, 1, s->o} : (int64_t[]){s->n, s->o, 1, 1}, l);
  return conv_node(m, in, nin, s, e, l);
}

static void conv_label(char *what, size_t cap, const conv_shape *s, const conv_epi *e) {
  snprintf(what, cap, "conv nhwc %lldx%lldx%lldx%lld->%lld k%lldx%lld s%lld p(%lld,%lld,%lld,%lld) b%d %s r%d%s%s%s",
           (long long)s->n, (long long)s->h, (long long)s->w, (long long)s->c, (long long)s->o, (long long)s->kh,
           (long long)s->kw, (long long)s->stride, (long long)s->pt, (long long)s->pb, (long long)s->pl,
           (long long)s->pr, e->bias, dc_act_name((dc_act)e->act), e->res, e->aliased ? " aliased" : "",
           e->wtype != DT_F32 ? ", w " : "", e->wtype != DT_F32 ? dc_dtype_name(e->wtype) : "");
}

/* The NHWC data of the NCHW inputs: x, w, bias, residual. */
static void conv_inputs_nhwc(const conv_shape *s, const conv_epi *e, int nin, void *const *nchw, const uint8_t *wbits,
                             int64_t ho, int64_t wo, void **nhwc) {
  size_t wes = (size_t)dc_dtype_size(e->wtype);
  nhwc[0] = channels_last(nchw[0], s->n, s->c, s->h * s->w, 4);
  nhwc[1] = channels_last(wbits, s->o, s->c, s->kh * s->kw, wes);
  int at = 2;
  if (e->bias) nhwc[at] = channels_last(nchw[at], 1, s->o, 1, 4), at++;
  if (at < nin) nhwc[at] = channels_last(nchw[at], s->n, s->o, e->res == RES_FULL ? ho * wo : 1, 4);
}

/* The NCHW node yr of mr (the reference) against the NHWC node yh of mh. */
static void compare_conv(dc_cuda_compute c, const conv_shape *s, const conv_epi *e, dc_module *mr, int32_t yr,
                         dc_module *mh, int32_t yh, const char *what) {
  const dc_node *nr = &mr->nodes[yr], *nh = &mh->nodes[yh];
  int64_t ho = nr->type.dims[2], wo = nr->type.dims[3], nout = (int64_t)dc_type_numel(&nr->type);
  CHECK(nh->type.dims[1] == ho && nh->type.dims[2] == wo && nh->type.dims[3] == s->o);
  int64_t nw = s->o * s->c * s->kh * s->kw;
  uint8_t *wbits = malloc((size_t)nw * 4);
  void *in[DC_MAX_INPUTS] = {0}, *inh[DC_MAX_INPUTS] = {0};
  for (int i = 0; i < nr->ninputs; i++) in[i] = uniform((int64_t)dc_type_numel(&mr->nodes[nr->inputs[i]].type), 0.0, 1.0);
  random_weights(e->wtype, nw, wbits, in[1]); /* the reference sees the stored weights' exact values */
  float *want = malloc((size_t)nout * 4), *got = malloc((size_t)nout * 4);
  CHECK_OK(dc_ref_kernel_for(OP_CONV2D)(mr, nr, (const void *const *)in, want));
  float *want_h = channels_last(want, s->n, s->o, ho * wo, 4);
  conv_inputs_nhwc(s, e, nr->ninputs, in, wbits, ho, wo, inh);
  mh->nodes[nh->inputs[1]].type.dtype = e->wtype; /* stored as the casting pass leaves it */
  char *source = NULL;
  dc_status *st = run_nhwc(mh, yh, c, (const void *const *)inh, e->aliased ? nr->ninputs - 1 : -1, got, &source);
  if (!is_skip(st)) {
    CHECK_OK(st);
    if (!st) {
      kh_result r;
      kh_compare_out(&nh->type, got, want_h, &r);
      report(dc_cuda_compute_name(c), what, &r, c == DC_CUDA_COMPUTE_F32 ? 1e-5 : 1e-2);
      /* the 16-byte A loads exactly when every tap is a whole number of float4s */
      CHECK((strstr(source, "g_f4") != NULL) == (s->c % 4 == 0));
    }
  }
  free(source);
  for (int i = 0; i < DC_MAX_INPUTS; i++) free(in[i]), free(inh[i]);
  free(wbits), free(want), free(want_h), free(got);
}

static void check_conv(dc_cuda_compute c, conv_shape s, conv_epi e) {
  char what[200];
  conv_label(what, sizeof what, &s, &e);
  dc_module *mr = dc_module_create(), *mh = dc_module_create();
  int32_t yr = add_conv(mr, &s, &e, 0), yh = add_conv(mh, &s, &e, 1);
  CHECK(yr >= 0 && yh >= 0);
  if (yr >= 0 && yh >= 0) compare_conv(c, &s, &e, mr, yr, mh, yh, what);
  dc_module_destroy(mr);
  dc_module_destroy(mh);
}

static void conv_cases(dc_cuda_compute c) {
  const conv_epi plain = {1, ACT_NONE, RES_NONE, 0, DT_F32}, nobias = {0, ACT_NONE, RES_NONE, 0, DT_F32};
  /* 1x1, odd pixel count, batch 2, C = 24 (16-byte loads) */
  check_conv(c, (conv_shape){2, 24, 5, 7, 12, 1, 1, 1, 0, 0, 0, 0}, plain);
  /* 3x3 pad 1: C = 4 (conv_in), and C = 3, O = 70 (several M and N tiles, K = 27) */
  check_conv(c, (conv_shape){1, 4, 9, 7, 32, 3, 3, 1, 1, 1, 1, 1}, plain);
  check_conv(c, (conv_shape){2, 3, 10, 9, 70, 3, 3, 1, 1, 1, 1, 1}, plain);
  /* C = 20: a multiple of 4 but not of 16, K = 180 over several K steps */
  check_conv(c, (conv_shape){1, 20, 8, 8, 24, 3, 3, 1, 1, 1, 1, 1}, nobias);
  /* stride 2 with the VAE downsample's (0,1,0,1) padding: C = 5 and C = 8 */
  check_conv(c, (conv_shape){1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1}, nobias);
  check_conv(c, (conv_shape){2, 8, 12, 11, 16, 3, 3, 2, 0, 1, 0, 1}, plain);
  /* epilogues: silu + full residual, in place over it too, per-channel residual */
  conv_shape e = {2, 6, 7, 5, 10, 3, 3, 1, 1, 1, 1, 1};
  check_conv(c, e, (conv_epi){1, ACT_SILU, RES_FULL, 0, DT_F32});
  check_conv(c, e, (conv_epi){1, ACT_SILU, RES_FULL, 1, DT_F32});
  check_conv(c, (conv_shape){1, 8, 6, 7, 12, 3, 3, 1, 1, 1, 1, 1}, (conv_epi){0, ACT_SILU, RES_CHANNEL, 0, DT_F32});
  check_conv(c, (conv_shape){1, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1}, (conv_epi){0, ACT_NONE, RES_FULL, 1, DT_F32});
  /* weights stored as bf16 and fp8 (e4m3), decoded in the kernel */
  check_conv(c, (conv_shape){1, 8, 9, 7, 10, 3, 3, 2, 0, 1, 0, 1}, (conv_epi){1, ACT_SILU, RES_NONE, 0, DT_BF16});
  check_conv(c, (conv_shape){1, 6, 9, 7, 10, 3, 3, 1, 1, 1, 1, 1}, (conv_epi){1, ACT_NONE, RES_NONE, 0, DT_F8_E4M3});
}

/* The 128x128 tensor-core tile (8 warps, dynamic shared memory), which
 * g_gemm.c takes when its grid has >= 132 blocks: 1536 pixels x 1408
 * channels is the smallest; K = 8 keeps the emulator to seconds. */
static void big_tile_case(void) {
  conv_shape s = {2, 8, 24, 32, 1408, 1, 1, 1, 0, 0, 0, 0};
  conv_epi e = {1, ACT_SILU, RES_NONE, 0, DT_F32};
  dc_module *m = dc_module_create();
  int32_t y = add_conv(m, &s, &e, 1);
  dc_cuda_options o = {DC_CUDA_COMPUTE_BF16};
  dc_cuda_kernel k;
  dc_status *st = y >= 0 ? dc_cuda_gen_node(m, y, &o, "k_big", &k) : dc_error(DC_ERR_MISMATCH, "type inference");
  CHECK_OK(st);
  if (!st) {
    CHECK(k.block[0] == 256 && k.smem_bytes > 48 * 1024); /* the case below covers that tile */
    dc_cuda_kernel_deinit(&k);
  }
  dc_module_destroy(m);
  check_conv(DC_CUDA_COMPUTE_BF16, s, e);
}

/* ---- group_norm ---------------------------------------------------------------- */
/* x [N, C, spatial...] for the reference, [N, spatial..., C] for the kernel. */
static int32_t add_group_norm(dc_module *m, int rank, const int64_t *dims, int64_t groups, int act, int nhwc) {
  int64_t c = nhwc ? dims[rank - 1] : dims[1];
  dc_layout l = rank == 4 ? (nhwc ? LAYOUT_NHWC : LAYOUT_NCHW) : (nhwc ? LAYOUT_NHWC : LAYOUT_ROWMAJOR);
  int32_t in[3] = {input_in(m, rank, dims, l), input_in(m, 1, &c, LAYOUT_ROWMAJOR), input_in(m, 1, &c, LAYOUT_ROWMAJOR)};
  dc_node n = dc_node_make(OP_GROUP_NORM, 3, in);
  dc_node_set_float(&n, "eps", 1e-6);
  dc_node_set_int(&n, "groups", groups);
  dc_node_set_int(&n, "act", act);
  return node_in(m, n, l);
}

/* dims are NHWC's [N, spatial..., C]; x = mean + uniform(-1, 1) * spread. */
static void check_group_norm(int rank, const int64_t *dims, int64_t groups, int act, double mean, double spread) {
  int64_t nchw[DC_MAX_DIMS], ch = dims[rank - 1], spatial = 1;
  nchw[0] = dims[0], nchw[1] = ch;
  for (int d = 1; d < rank - 1; d++) nchw[d + 1] = dims[d], spatial *= dims[d];
  char what[200], d[80];
  snprintf(what, sizeof what, "group_norm nhwc %s groups %lld %s, x %g +- %g", dc_dims_str(dims, rank, d, sizeof d),
           (long long)groups, dc_act_name((dc_act)act), mean, spread);
  dc_module *mr = dc_module_create(), *mh = dc_module_create();
  int32_t yr = add_group_norm(mr, rank, nchw, groups, act, 0), yh = add_group_norm(mh, rank, dims, groups, act, 1);
  CHECK(yr >= 0 && yh >= 0);
  if (yr >= 0 && yh >= 0) {
    int64_t count = dims[0] * ch * spatial;
    float *x = uniform(count, mean, spread), *gamma = uniform(ch, 1.0, 0.5), *beta = uniform(ch, 0.0, 0.5);
    float *want = malloc((size_t)count * 4), *got = malloc((size_t)count * 4);
    const void *in[3] = {x, gamma, beta};
    CHECK_OK(dc_ref_kernel_for(OP_GROUP_NORM)(mr, &mr->nodes[yr], in, want));
    float *xh = channels_last(x, dims[0], ch, spatial, 4), *want_h = channels_last(want, dims[0], ch, spatial, 4);
    const void *inh[3] = {xh, gamma, beta};
    char *source = NULL;
    dc_status *st = run_nhwc(mh, yh, DC_CUDA_COMPUTE_F32, inh, -1, got, &source);
    if (!is_skip(st)) {
      CHECK_OK(st);
      if (!st) {
        kh_result r;
        kh_compare_out(&mh->nodes[yh].type, got, want_h, &r);
        report("f32", what, &r, 1e-5);
      }
    }
    free(source);
    free(x), free(gamma), free(beta), free(want), free(got), free(xh), free(want_h);
  }
  dc_module_destroy(mr);
  dc_module_destroy(mh);
}

static void group_norm_cases(void) {
  check_group_norm(4, (int64_t[]){2, 9, 7, 64}, 32, ACT_SILU, 0.0, 1.7);      /* 32 groups of 2 channels */
  check_group_norm(4, (int64_t[]){1, 5, 6, 96}, 3, ACT_SILU, 0.0, 1.0);       /* odd groups, 32 channels each */
  check_group_norm(4, (int64_t[]){2, 3, 5, 21}, 7, ACT_NONE, 0.0, 1.0);       /* odd C, 3 channels a group */
  check_group_norm(3, (int64_t[]){2, 13, 12}, 4, ACT_GELU, 0.0, 2.0);         /* [N, L, C] */
  check_group_norm(4, (int64_t[]){1, 48, 48, 64}, 4, ACT_SILU, 0.0, 1.0);     /* 36864 a group: 1024 threads */
  check_group_norm(4, (int64_t[]){2, 12, 12, 32}, 2, ACT_NONE, 100.0, 1.0);   /* a large mean keeps its spread */
}

/* ---- upsample_nearest ------------------------------------------------------------ */
/* x [N, H, W, C] of random bytes (NaN patterns included: the copy moves bits). */
static void check_upsample(const int64_t *dims, int64_t f) {
  int64_t n = dims[0], h = dims[1], w = dims[2], c = dims[3], count = n * h * w * c, ocount = count * f * f;
  char what[120], d[64];
  snprintf(what, sizeof what, "upsample_nearest nhwc %s factor %lld", dc_dims_str(dims, 4, d, sizeof d), (long long)f);
  dc_module *mr = dc_module_create(), *mh = dc_module_create();
  int32_t xr = input_in(mr, 4, (int64_t[]){n, c, h, w}, LAYOUT_NCHW), xh = input_in(mh, 4, dims, LAYOUT_NHWC);
  dc_node ur = dc_node_make(OP_UPSAMPLE, 1, &xr), uh = dc_node_make(OP_UPSAMPLE, 1, &xh);
  dc_node_set_int(&ur, "factor", f);
  dc_node_set_int(&uh, "factor", f);
  int32_t yr = node_in(mr, ur, LAYOUT_NCHW), yh = node_in(mh, uh, LAYOUT_NHWC);
  CHECK(yr >= 0 && yh >= 0);
  if (yr >= 0 && yh >= 0) {
    uint32_t *x = malloc((size_t)count * 4), *want = malloc((size_t)ocount * 4), *got = malloc((size_t)ocount * 4);
    for (int64_t i = 0; i < count; i++) x[i] = (uint32_t)(next_u64() >> 32);
    const void *in[1] = {x};
    CHECK_OK(dc_ref_kernel_for(OP_UPSAMPLE)(mr, &mr->nodes[yr], in, want));
    void *xh_data = channels_last(x, n, c, h * w, 4), *want_h = channels_last(want, n, c, h * w * f * f, 4);
    const void *inh[1] = {xh_data};
    char *source = NULL;
    dc_status *st = run_nhwc(mh, yh, DC_CUDA_COMPUTE_F32, inh, -1, got, &source);
    if (!is_skip(st)) {
      CHECK_OK(st);
      if (!st) {
        kh_result r;
        kh_compare_out(&mh->nodes[yh].type, got, want_h, &r);
        report("f32", what, &r, 0);
      }
    }
    free(source);
    free(x), free(want), free(got), free(xh_data), free(want_h);
  }
  dc_module_destroy(mr);
  dc_module_destroy(mh);
}

static void upsample_cases(void) {
  check_upsample((int64_t[]){2, 5, 3, 7}, 2); /* a pixel is 28 bytes: 4-byte copies */
  check_upsample((int64_t[]){1, 4, 3, 8}, 2); /* 32 bytes: 16-byte copies */
  check_upsample((int64_t[]){1, 3, 2, 6}, 3); /* factor 3, 24 bytes: 8-byte copies */
}

/* ---- generator errors ---------------------------------------------------------- */
static void error_cases(void) {
  dc_module *m = dc_module_create();
  int32_t y = add_group_norm(m, 4, (int64_t[]){1, 4, 4, 12}, 3, ACT_NONE, 1);
  dc_cuda_options o = {DC_CUDA_COMPUTE_F32};
  dc_cuda_kernel k;
  CHECK(y >= 0);
  if (y >= 0) {
    dc_node_set_int(&m->nodes[y], "groups", 5); /* the channels are the last dim: 12 */
    CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k", &k), "12 channels do not split into 5 groups");
  }
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  double t0 = dc_now_seconds();
  nvrtc_init();
  error_cases();
  conv_cases(DC_CUDA_COMPUTE_F32);
  if (!skipped) conv_cases(DC_CUDA_COMPUTE_BF16);
  if (!skipped) big_tile_case();
  if (!skipped) group_norm_cases();
  if (!skipped) upsample_cases();
  if (skipped) {
    printf("SKIP: no host C++ compiler for the CUDA emulator\n");
    if (nv) dc_nvrtc_unload(nv);
    return 77;
  }
  if (nv) printf("NVRTC: %d distinct sources, %d compiles, no warnings expected\n", ncompiled, nvrtc_compiles);
  printf("%.1f s\n", dc_now_seconds() - t0);
  if (nv) dc_nvrtc_unload(nv);
  return tu_finish();
}
