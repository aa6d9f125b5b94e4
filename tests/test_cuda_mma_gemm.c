/* test_cuda_mma_gemm.c — what the op case table cannot say about the
 * mma.sync GEMM generator (codegen/cuda/g_mma_gemm.c); the table's rows
 * (op_cases_gemm.c) run its kernels in the emulator against the reference.
 * Here:
 *   - coverage: the table's rows at bf16 / f16 compute that reach it take
 *     every tile (128x128, 128x64, 64x64), 1, 2 and 3 pipeline stages, and
 *     every operand path (A: float4 or scalar f32 loads; B: cp.async,
 *     float4, scalar), read from the generated sources' header line;
 *   - 16-bit activations by cp.async (implicit-GEMM address generation per
 *     16-byte chunk, zero-fill for padding and tails): activations are f32
 *     in the IR today, so the generator is given the row's node with x
 *     declared bf16 (f16 under f16 compute) and run on x rounded to it; it
 *     must give the f32-x kernel's output bit for bit (the f32 path rounds
 *     x to the same values as it stages them);
 *   - tiles per shape: SDXL's shapes on 132 SMs, and the SM count moving the
 *     choice;
 *   - NVRTC (when installed): every distinct configuration compiles for
 *     sm_80 and sm_90 with no warning. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/g_gemm.h"
#include "cuda_harness.h"
#include "op_cases.h"
#include "support/dtype_convert.h"
#include "testutil.h"

static int skipped; /* no host C++ compiler: the emulated parts are a skip */

typedef struct {
  char tile[16], amode[48], bmode[48];
  int stages;
} kernel_desc;

/* The header line g_mma_gemm.c writes: "tile BMxBNx32, WGMxWGN warps, S
 * stages; x DT (MODE); weights DT (MODE)". */
static int describe(const char *src, kernel_desc *d) {
  const char *t = strstr(src, " * tile ");
  if (!t) return 0;
  memset(d, 0, sizeof *d);
  if (sscanf(t, " * tile %15[0-9x], %*[0-9x] warps, %d stages", d->tile, &d->stages) != 2) return 0;
  const char *x = strstr(t, "; x "), *w = strstr(t, "; weights ");
  if (!x || !w) return 0;
  if (sscanf(strchr(x, '(') + 1, "%47[^)]", d->amode) != 1) return 0;
  if (sscanf(strchr(w, '(') + 1, "%47[^)]", d->bmode) != 1) return 0;
  return 1;
}

static int reaches_mma(const op_case *c) {
  int on_cuda = (c->where ? c->where : OC_ALL) & OC_CUDA;
  int nhwc_or_linear = c->op == OP_LINEAR || (c->op == OP_CONV2D && c->layout == LAYOUT_NHWC);
  return on_cuda && nhwc_or_linear && (c->cuda_computes & (OC_CC_BF16 | OC_CC_F16));
}

static dc_cuda_compute first_tc(const op_case *c) {
  return c->cuda_computes & OC_CC_BF16 ? DC_CUDA_COMPUTE_BF16 : DC_CUDA_COMPUTE_F16;
}

/* ---- coverage of the table's rows ------------------------------------------------ */
enum { NSEEN = 16 };
typedef struct {
  const char *what[NSEEN];
  int n;
} seen_set;

static void see(seen_set *s, const char *v) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->what[i], v) == 0) return;
  if (s->n < NSEEN) s->what[s->n++] = dc_strdup(v);
}

static int has(const seen_set *s, const char *v) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->what[i], v) == 0) return 1;
  return 0;
}

static void free_set(seen_set *s) {
  for (int i = 0; i < s->n; i++) dc_free((void *)s->what[i]);
}

static void coverage(void) {
  int n = 0, rows = 0;
  const op_case *t = oc_table(&n);
  seen_set tiles = {{0}, 0}, amodes = {{0}, 0}, bmodes = {{0}, 0};
  int stages[4] = {0};
  for (int i = 0; i < n; i++) {
    const op_case *c = &t[i];
    if (!reaches_mma(c)) continue;
    dc_module *m = dc_module_create();
    int32_t y = oc_build(c, m);
    dc_cuda_options o = {.compute = first_tc(c), .sm_count = c->cuda_sm_count};
    dc_cuda_kernel k;
    dc_status *st = y >= 0 ? dc_cuda_gen_node(m, y, &o, "k_mma", &k) : dc_error(DC_ERR_MISMATCH, "oc_build");
    CHECK_OK(st);
    if (!st) {
      kernel_desc d;
      CHECK(describe(k.source, &d));
      see(&tiles, d.tile), see(&amodes, d.amode), see(&bmodes, d.bmode);
      if (d.stages >= 1 && d.stages <= 3) stages[d.stages]++;
      rows++;
      dc_cuda_kernel_deinit(&k);
    }
    dc_module_destroy(m);
  }
  CHECK(has(&tiles, "128x128x32") && has(&tiles, "128x64x32") && has(&tiles, "64x64x32"));
  CHECK(stages[1] && stages[2] && stages[3]);
  CHECK(has(&amodes, "float4 loads converted in registers") && has(&amodes, "scalar loads converted in registers"));
  CHECK(has(&bmodes, "cp.async") && has(&bmodes, "float4 loads converted in registers") &&
        has(&bmodes, "scalar loads converted in registers"));
  printf("%d table rows reach the mma.sync GEMM: %d tiles, stages 1/2/3 in %d/%d/%d rows, %d A paths, %d B paths\n", rows,
         tiles.n, stages[1], stages[2], stages[3], amodes.n, bmodes.n);
  free_set(&tiles), free_set(&amodes), free_set(&bmodes);
}

/* ---- 16-bit activations by cp.async --------------------------------------------- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double normal(void) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    u[i] = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* A 64-byte aligned buffer of input i of node n, random; x (i = 0) as
 * values of the 16-bit type x16 (f32 copy in x32). */
static void *fill(const dc_type *t, int is_x, dc_dtype x16, float **x32) {
  size_t count = dc_type_numel(t), es = is_x ? 2 : dc_dtype_size(t->dtype);
  void *p = aligned_alloc(64, (count * es + 63) / 64 * 64 + 64);
  if (is_x) *x32 = aligned_alloc(64, (count * 4 + 63) / 64 * 64 + 64);
  for (size_t i = 0; i < count; i++) {
    float v = (float)normal();
    if (is_x) {
      uint16_t h = x16 == DT_BF16 ? dc_f32_to_bf16(v) : dc_f32_to_f16(v);
      ((uint16_t *)p)[i] = h;
      (*x32)[i] = x16 == DT_BF16 ? dc_bf16_to_f32(h) : dc_f16_to_f32(h);
    } else if (t->dtype == DT_F32) {
      ((float *)p)[i] = v;
    } else if (t->dtype == DT_BF16) {
      ((uint16_t *)p)[i] = dc_f32_to_bf16(v);
    } else if (t->dtype == DT_F16) {
      ((uint16_t *)p)[i] = dc_f32_to_f16(v);
    } else {
      ((uint8_t *)p)[i] = dc_f32_to_f8e4m3(v);
    }
  }
  return p;
}

static dc_status *run(const dc_cuda_kernel *k, int nparams, const char *const *ctypes, void **params) {
  ch_kernel *ck;
  DC_TRY(ch_kernel_build(k->source, k->name, nparams, ctypes, &ck));
  dc_status *st = ch_kernel_launch(ck, k->grid, k->block, k->smem_bytes, params);
  ch_kernel_free(ck);
  return st;
}

/* Row c's node with x in f32 and in the 16-bit compute type: bit-equal outputs. */
static int async_a_row(const op_case *c, dc_cuda_compute compute) {
  dc_module *m = dc_module_create();
  int32_t y = oc_build(c, m);
  dc_cuda_options o = {.compute = compute, .sm_count = c->cuda_sm_count};
  gemm g32, g16;
  dc_cuda_kernel k32 = {0}, k16 = {0};
  dc_status *st = y >= 0 ? dc_gemm_read(m, &m->nodes[y], &g32) : dc_error(DC_ERR_MISMATCH, "oc_build");
  int ran = 0;
  if (!st) {
    g32.compute = compute;
    g16 = g32;
    g16.xtype = compute == DC_CUDA_COMPUTE_BF16 ? DT_BF16 : DT_F16;
    st = dc_mma_gemm_generate(&g32, &o, "f32 x", "k_x32", &k32);
    if (!st) st = dc_mma_gemm_generate(&g16, &o, "16-bit x", "k_x16", &k16);
  }
  CHECK_OK(st);
  kernel_desc d;
  if (!st && describe(k16.source, &d) && strcmp(d.amode, "cp.async") == 0) {
    const dc_node *n = &m->nodes[y];
    int np = 1 + n->ninputs;
    const char *ctypes[8];
    char cbuf[8][40];
    void *bufs[8] = {0}, *out32, *out16;
    float *x32 = NULL;
    size_t obytes = dc_type_numel(&n->type) * 4;
    out32 = aligned_alloc(64, (obytes + 63) / 64 * 64 + 64), out16 = aligned_alloc(64, (obytes + 63) / 64 * 64 + 64);
    ctypes[0] = "float";
    for (int i = 0; i < n->ninputs; i++) {
      const dc_type *t = &m->nodes[n->inputs[i]].type;
      snprintf(cbuf[i], sizeof cbuf[i], "const %s", dc_cuda_ctype(t->dtype));
      ctypes[1 + i] = cbuf[i];
      bufs[i] = fill(t, i == 0, g16.xtype, &x32);
    }
    void *p32[8] = {out32, x32}, *p16[8] = {out16, bufs[0]};
    for (int i = 1; i < n->ninputs; i++) p32[1 + i] = p16[1 + i] = bufs[i];
    /* the 16-bit kernel's x parameter has its own type (g_x_t) */
    const char *ctypes16[8];
    char x16type[40];
    memcpy(ctypes16, ctypes, sizeof ctypes16);
    snprintf(x16type, sizeof x16type, "const %s", dc_cuda_ctype(g16.xtype));
    ctypes16[1] = x16type;
    st = run(&k32, np, ctypes, p32);
    if (!st) st = run(&k16, np, ctypes16, p16);
    if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "compiler")) {
      skipped = 1;
      dc_status_free(st);
    } else {
      CHECK_OK(st);
      if (!st) {
        int same = memcmp(out32, out16, obytes) == 0;
        CHECK(same);
        char what[160];
        oc_describe(c, what, sizeof what);
        printf("%s x %s by cp.async (%s, %d stages): %s\n", what, dc_dtype_name(g16.xtype), d.tile, d.stages,
               same ? "bit-equal to the f32-x kernel" : "DIFFERS from the f32-x kernel  <-- FAIL");
        ran = 1;
      }
    }
    ch_nvrtc_check(&k16);
    free(out32), free(out16), free(x32);
    for (int i = 0; i < n->ninputs; i++) free(bufs[i]);
  }
  dc_cuda_kernel_deinit(&k32), dc_cuda_kernel_deinit(&k16);
  dc_module_destroy(m);
  return ran;
}

/* The table's mma rows (those with an SM count of their own) whose A runs
 * are whole chunks (C or K % 8 == 0), with f32, bf16 or f16 weights. */
static void async_activations(void) {
  int n = 0, ran = 0;
  const op_case *t = oc_table(&n);
  for (int i = 0; i < n && !skipped; i++) {
    const op_case *c = &t[i];
    if (!reaches_mma(c) || !c->cuda_sm_count || (c->wdtype && c->wdtype != DT_BF16 && c->wdtype != DT_F16)) continue;
    int64_t run_len = c->op == OP_LINEAR ? c->in[0].dims[c->in[0].rank - 1] : c->in[0].dims[1];
    if (run_len % 8) continue;
    if (c->cuda_computes & OC_CC_BF16) ran += async_a_row(c, DC_CUDA_COMPUTE_BF16);
    if (c->cuda_computes & OC_CC_F16) ran += async_a_row(c, DC_CUDA_COMPUTE_F16);
  }
  if (!skipped) CHECK(ran >= 6);
}

/* ---- tiles per shape --------------------------------------------------------------- */
static void check_tile(dc_module *m, int32_t y, int sm, const char *want_tile, int want_stages, const char *what) {
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_BF16, .sm_count = sm};
  dc_cuda_kernel k;
  dc_status *st = y >= 0 ? dc_cuda_gen_node(m, y, &o, "k_tile", &k) : dc_error(DC_ERR_MISMATCH, "node");
  CHECK_OK(st);
  if (st) return;
  kernel_desc d;
  int ok = describe(k.source, &d) && strcmp(d.tile, want_tile) == 0 && d.stages == want_stages;
  CHECK(ok);
  printf("%-52s on %3d SMs: tile %s, %d stages, grid %ux%u, %u threads, %u B dynamic shared%s\n", what, sm, d.tile,
         d.stages, k.grid[0], k.grid[1], k.block[0], k.smem_bytes, ok ? "" : "  <-- FAIL");
  ch_nvrtc_check(&k);
  dc_cuda_kernel_deinit(&k);
}

/* An NHWC conv node (shapes channels first, as the table's). */
static int32_t nhwc_conv(dc_module *m, int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kk, int64_t stride,
                         int64_t pad) {
  op_case oc = {.op = OP_CONV2D, .nin = 3, .layout = LAYOUT_NHWC};
  oc.in[0] = (oc_shape){DT_F32, 4, {n, c, h, w}};
  oc.in[1] = (oc_shape){DT_F32, 4, {o, c, kk, kk}};
  oc.in[2] = (oc_shape){DT_F32, 1, {o}};
  static const char *names[] = {"stride", "pad_t", "pad_b", "pad_l", "pad_r", "bias", "act", "residual"};
  const int64_t vals[] = {stride, pad, pad, pad, pad, 1, ACT_NONE, 0};
  for (int i = 0; i < 8; i++) oc.attrs[i] = (oc_attr){names[i], vals[i], 0, 0};
  return oc_build(&oc, m);
}

static int32_t linear(dc_module *m, int64_t rows, int64_t k, int64_t n) {
  op_case oc = {.op = OP_LINEAR, .nin = 2};
  oc.in[0] = (oc_shape){DT_F32, 2, {rows, k}};
  oc.in[1] = (oc_shape){DT_F32, 2, {n, k}};
  static const char *names[] = {"bias", "act", "residual"};
  for (int i = 0; i < 3; i++) oc.attrs[i] = (oc_attr){names[i], i == 1 ? ACT_NONE : 0, 0, 0};
  return oc_build(&oc, m);
}

static void tiles_per_shape(void) {
  dc_module *m = dc_module_create();
  /* SDXL: a 640-channel resnet conv at 64x64, batch 2, and a 640-wide linear over 8192 tokens:
   * 128x128 would be 320 blocks, 2.4 waves on 132 SMs; 128x64's 640 blocks lose less to the last wave */
  check_tile(m, nhwc_conv(m, 2, 640, 64, 64, 640, 3, 1, 1), 132, "128x64x32", 3, "conv 3x3 640->640 at 64x64, batch 2 (NHWC)");
  check_tile(m, linear(m, 8192, 640, 640), 132, "128x64x32", 3, "linear 8192x640 by 640x640");
  /* the text encoder's projections: few blocks, so the small tile spreads them wider */
  check_tile(m, linear(m, 154, 768, 320), 132, "64x64x32", 3, "linear 154x768 by 320x768");
  /* the SM count moves the choice: a GEMM of 4 big blocks fills one SM, not 132 */
  check_tile(m, linear(m, 200, 100, 200), 132, "64x64x32", 3, "linear 200x100 by 200x100");
  check_tile(m, linear(m, 200, 100, 200), 1, "128x128x32", 3, "linear 200x100 by 200x100");
  /* one K tile: one stage, nothing to pipeline */
  check_tile(m, linear(m, 300, 32, 64), 132, "64x64x32", 1, "linear 300x32 by 64x32");
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  int have_nvrtc = ch_nvrtc_open(), sources = 0, compiles = 0;
  coverage();
  tiles_per_shape();
  async_activations();
  ch_nvrtc_close(&sources, &compiles);
  if (have_nvrtc) printf("NVRTC: %d distinct sources, %d compiles, no warnings\n", sources, compiles);
  else printf("NVRTC: not run\n");
  if (skipped) {
    printf("SKIP: no host C++ compiler for the CUDA emulator\n");
    return 77;
  }
  return tu_finish();
}
