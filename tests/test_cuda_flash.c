/* test_cuda_flash.c — g_flash.c's mma.sync attention where the op case
 * table cannot reach it yet, run in the CPU emulator:
 *  - the choice (dc_cuda_gen_attention): bf16/f16 compute with D <= 160
 *    gets the mma.sync kernel, D = 512 keeps the wmma one, f32 the FMA one;
 *  - 16-bit activations (the reference kernels take f32 only): bf16 and
 *    f16 q, k, v staged by cp.async (the compute dtype, D a multiple of 8:
 *    D = 40 zero-fills a column chunk), staged through registers (another
 *    16-bit dtype, D = 20), bf16 and f16 outputs; causal, a bias with -inf
 *    keys, partial query and key tiles, several key tiles (the two-stage
 *    pipeline), D = 160's 32-key tiles — against attention computed here in
 *    double from the same rounded inputs, at the tensor-core tolerance of
 *    the op case table (rel L2 1e-2);
 *  - each kernel compiled by NVRTC for sm_80 and sm_90 without warnings
 *    (when NVRTC is installed). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cgen.h"
#include "cuda_harness.h"
#include "support/dtype_convert.h"
#include "testutil.h"

typedef struct {
  dc_op op;
  dc_dtype tin, tout;
  dc_cuda_compute compute;
  int64_t b, h, d, sq, sk;
  int masked; /* attention_bias: -inf on the first half of the keys of odd heads */
  const char *path; /* what the kernel's header comment must say: "cp.async" or "registers" */
} flash_case;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double gauss(void) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    u[i] = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

static float round_to(dc_dtype t, float v) {
  if (t == DT_BF16) return dc_bf16_to_f32(dc_f32_to_bf16(v));
  if (t == DT_F16) return dc_f16_to_f32(dc_f32_to_f16(v));
  return v;
}

/* values (already rounded to t) into a buffer of dtype t */
static void *pack(dc_dtype t, const float *v, size_t n) {
  size_t es = t == DT_F32 ? 4 : 2;
  unsigned char *p = aligned_alloc(64, (n * es + 63) / 64 * 64);
  for (size_t i = 0; i < n; i++) {
    if (t == DT_F32) ((float *)p)[i] = v[i];
    else ((uint16_t *)p)[i] = t == DT_BF16 ? dc_f32_to_bf16(v[i]) : dc_f32_to_f16(v[i]);
  }
  return p;
}

static float unpack(dc_dtype t, const void *p, size_t i) {
  if (t == DT_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return t == DT_BF16 ? dc_bf16_to_f32(h) : dc_f16_to_f32(h);
}

/* The node: f32 inputs for the type rules, then the case's dtypes. */
static int32_t build(dc_module *m, const flash_case *c, double scale) {
  dc_type tq = {DT_F32, 3, {c->b, c->sq, c->h * c->d}}, tk = {DT_F32, 3, {c->b, c->sk, c->h * c->d}};
  dc_type tb = {DT_F32, 3, {c->h, c->sq, c->sk}};
  int32_t ins[4] = {dc_module_add_input(m, "q", &tq, INIT_NORMAL), dc_module_add_input(m, "k", &tk, INIT_NORMAL),
                    dc_module_add_input(m, "v", &tk, INIT_NORMAL), 0};
  int nin = c->op == OP_ATTENTION_BIAS ? 4 : 3;
  if (nin == 4) ins[3] = dc_module_add_input(m, "bias", &tb, INIT_NORMAL);
  dc_node n = dc_node_make(c->op, nin, ins);
  dc_node_set_int(&n, "heads", c->h);
  dc_node_set_float(&n, "scale", scale);
  dc_status *st = dc_infer_type(m, &n, &n.type);
  CHECK_OK(st);
  if (st) return -1;
  n.type.dtype = c->tout;
  for (int i = 0; i < 3; i++) m->nodes[ins[i]].type.dtype = c->tin;
  return dc_module_add_node(m, &n);
}

/* softmax(scale q k^T + bias) v in double, per batch, head and query. */
static void reference(const flash_case *c, double scale, const float *q, const float *k, const float *v,
                      const float *bias, float *out) {
  int64_t hd = c->h * c->d;
  double *p = malloc(sizeof(double) * (size_t)c->sk);
  for (int64_t b = 0; b < c->b; b++)
    for (int64_t h = 0; h < c->h; h++)
      for (int64_t i = 0; i < c->sq; i++) {
        const float *qi = q + (b * c->sq + i) * hd + h * c->d;
        int64_t nk = c->op == OP_CAUSAL_ATTENTION ? i + 1 : c->sk;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < nk; j++) {
          const float *kj = k + (b * c->sk + j) * hd + h * c->d;
          double s = 0;
          for (int64_t e = 0; e < c->d; e++) s += (double)qi[e] * kj[e];
          p[j] = scale * s + (bias ? bias[(h * c->sq + i) * c->sk + j] : 0.0);
          mx = p[j] > mx ? p[j] : mx;
        }
        for (int64_t j = 0; j < nk; j++) sum += p[j] = exp(p[j] - mx);
        for (int64_t e = 0; e < c->d; e++) {
          double o = 0;
          for (int64_t j = 0; j < nk; j++) o += p[j] / sum * v[(b * c->sk + j) * hd + h * c->d + e];
          out[(b * c->sq + i) * hd + h * c->d + e] = (float)o;
        }
      }
  free(p);
}

static float *random_values(size_t n, dc_dtype t) {
  float *v = malloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) v[i] = round_to(t, (float)gauss());
  return v;
}

static void run_case(const flash_case *c) {
  double scale = 1.0 / sqrt((double)c->d);
  dc_module *m = dc_module_create();
  int32_t id = build(m, c, scale);
  dc_cuda_options o = {.compute = c->compute};
  dc_cuda_kernel kern;
  memset(&kern, 0, sizeof kern);
  char what[160];
  snprintf(what, sizeof what, "%s %s in, %s out, %s compute, B%lld H%lld D%lld Sq%lld Sk%lld%s",
           dc_op_get(c->op)->name, dc_dtype_name(c->tin), dc_dtype_name(c->tout), dc_cuda_compute_name(c->compute),
           (long long)c->b, (long long)c->h, (long long)c->d, (long long)c->sq, (long long)c->sk,
           c->masked ? ", masked" : "");
  dc_status *st = id < 0 ? dc_error(DC_ERR_INTERNAL, "building the node") : dc_cuda_gen_node(m, id, &o, "k0_flash", &kern);
  CHECK_OK(st);
  if (st) {
    dc_module_destroy(m);
    return;
  }
  CHECK(strstr(kern.source, "#include \"dc_mma.cuh\"") != NULL);
  CHECK(strstr(kern.source, c->path) != NULL);
  ch_nvrtc_check(&kern);
  int64_t hd = c->h * c->d;
  size_t nq = (size_t)(c->b * c->sq * hd), nk = (size_t)(c->b * c->sk * hd), nb = (size_t)(c->h * c->sq * c->sk);
  float *q = random_values(nq, c->tin), *k = random_values(nk, c->tin), *v = random_values(nk, c->tin);
  float *bias = c->op == OP_ATTENTION_BIAS ? random_values(nb, DT_F32) : NULL;
  if (bias && c->masked)
    for (int64_t h = 1; h < c->h; h += 2)
      for (int64_t i = 0; i < c->sq; i++)
        for (int64_t j = 0; j < c->sk / 2; j++) bias[(h * c->sq + i) * c->sk + j] = -INFINITY;
  float *want = malloc(sizeof(float) * nq), *got = malloc(sizeof(float) * nq);
  reference(c, scale, q, k, v, bias, want);
  void *bufs[5] = {pack(c->tout, want, nq), pack(c->tin, q, nq), pack(c->tin, k, nk), pack(c->tin, v, nk),
                   bias ? pack(DT_F32, bias, nb) : NULL};
  memset(bufs[0], 0xff, nq * (c->tout == DT_F32 ? 4 : 2)); /* NaN: every element must be written */
  const char *types[5] = {dc_cuda_ctype(c->tout), "const unsigned short", "const unsigned short", "const unsigned short",
                          "const float"};
  for (int i = 1; i < 4; i++)
    if (c->tin == DT_F32) types[i] = "const float";
  ch_kernel *ck = NULL;
  st = ch_kernel_build(kern.source, kern.name, bias ? 5 : 4, types, &ck);
  if (!st) st = ch_kernel_launch(ck, kern.grid, kern.block, kern.smem_bytes, bufs);
  CHECK_OK(st);
  ch_kernel_free(ck);
  if (!st) {
    for (size_t i = 0; i < nq; i++) got[i] = unpack(c->tout, bufs[0], i);
    double rel = tu_rel_l2(got, want, nq);
    CHECK(rel <= 1e-2);
    printf("%s: rel L2 %.2g (grid %u x %u x %u, %u threads, %u bytes of shared memory)\n", what, rel, kern.grid[0],
           kern.grid[1], kern.grid[2], kern.block[0], kern.smem_bytes);
  }
  for (int i = 0; i < 5; i++) free(bufs[i]);
  free(q), free(k), free(v), free(bias), free(want), free(got);
  dc_cuda_kernel_deinit(&kern);
  dc_module_destroy(m);
}

/* Which kernel dc_cuda_gen_attention writes for f32 inputs at D, compute. */
static void check_choice(int64_t d, dc_cuda_compute compute, int want_mma) {
  flash_case c = {OP_ATTENTION, DT_F32, DT_F32, compute, 1, 2, d, 20, 20, 0, ""};
  dc_module *m = dc_module_create();
  int32_t id = build(m, &c, 0.125);
  dc_cuda_options o = {.compute = compute};
  dc_cuda_kernel kern;
  memset(&kern, 0, sizeof kern);
  CHECK_OK(dc_cuda_gen_node(m, id, &o, "k0_choice", &kern));
  int mma = kern.source && strstr(kern.source, "dc_mma.cuh") != NULL;
  CHECK(mma == want_mma);
  printf("attention D=%lld, %s compute: the %s kernel\n", (long long)d, dc_cuda_compute_name(compute),
         mma ? "mma.sync" : kern.source && strstr(kern.source, "wmma") ? "wmma" : "FMA");
  dc_cuda_kernel_deinit(&kern);
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  check_choice(64, DC_CUDA_COMPUTE_BF16, 1);
  check_choice(160, DC_CUDA_COMPUTE_F16, 1);
  check_choice(512, DC_CUDA_COMPUTE_BF16, 0);
  check_choice(64, DC_CUDA_COMPUTE_F32, 0);
  ch_kernel *probe = NULL;
  dc_status *st = ch_kernel_build("#include \"dc_cuda.cuh\"\nDC_KERNEL void probe(float *o) { o[0] = 1.0f; }\n", "probe", 1,
                                  (const char *const[]){"float"}, &probe);
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED) {
    printf("SKIP: %s\n", dc_status_message(st));
    dc_status_free(st);
    return tu_finish_or_skip(1);
  }
  CHECK_OK(st);
  ch_kernel_free(probe);
  ch_nvrtc_open();
  static const flash_case cases[] = {
      {OP_ATTENTION, DT_BF16, DT_F32, DC_CUDA_COMPUTE_BF16, 2, 2, 64, 70, 77, 0, "K/V by cp.async"},
      {OP_CAUSAL_ATTENTION, DT_BF16, DT_BF16, DC_CUDA_COMPUTE_BF16, 1, 2, 40, 70, 70, 0, "K/V by cp.async"},
      {OP_ATTENTION_BIAS, DT_F16, DT_F16, DC_CUDA_COMPUTE_F16, 1, 2, 80, 33, 150, 1, "K/V by cp.async"},
      {OP_ATTENTION, DT_F16, DT_BF16, DC_CUDA_COMPUTE_BF16, 1, 3, 20, 17, 19, 0, "K/V by registers"},
      {OP_ATTENTION, DT_BF16, DT_F32, DC_CUDA_COMPUTE_BF16, 1, 1, 160, 20, 40, 0, "K/V by cp.async"},
      {OP_ATTENTION, DT_BF16, DT_F32, DC_CUDA_COMPUTE_BF16, 1, 2, 12, 5, 3, 0, "K/V by registers"}, /* D % 8 = 4 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  int sources = 0, compiles = 0;
  ch_nvrtc_close(&sources, &compiles);
  printf("NVRTC: %d sources, %d compiles\n", sources, compiles);
  return tu_finish();
}
