/* test_cuda_dit_ops.c — what the op case table (op_cases.h) cannot say about
 * the CUDA generators of the DiT family's norm and elementwise ops
 * (rms_norm, mod_layer_norm, gated_add, gelu_tanh, scale, and linear's
 * gelu_tanh act), whose numbers the table's rows check in the emulator:
 *   - every distinct source of their rows compiles under NVRTC for sm_80 and
 *     sm_90 with no warning, when NVRTC is installed (else reported as not
 *     run): until a DiT fixture exists, test_cuda_compile never sees them;
 *   - the roundings the reference makes survive on a GPU: NVRTC contracts
 *     a*b + c into one fma (--fmad=true), which the emulator's host build
 *     does not, so gated_add, scale and the modulation must say __fmul_rn;
 *   - a non-f32 input is an error naming it, never a kernel that misreads it. */
#include <string.h>

#include "cuda_harness.h"
#include "op_cases.h"
#include "testutil.h"

static int is_dit_row(const op_case *c) {
  if (c->op == OP_LINEAR)
    for (int a = 0; a < 8 && c->attrs[a].name; a++)
      if (strcmp(c->attrs[a].name, "act") == 0) return c->attrs[a].i == ACT_GELU_TANH;
  return c->op == OP_RMS_NORM || c->op == OP_MOD_LAYER_NORM || c->op == OP_GATED_ADD || c->op == OP_GELU_TANH ||
         c->op == OP_SCALE;
}

/* The product rounded on its own: the source multiplies with __fmul_rn. */
static void check_roundings(const op_case *c, const dc_cuda_kernel *k) {
  int needs = c->op == OP_GATED_ADD || c->op == OP_SCALE || c->op == OP_MOD_LAYER_NORM;
  int ok = !needs || strstr(k->source, "__fmul_rn") != NULL;
  CHECK(ok);
  if (!ok) fprintf(stderr, "%s: no __fmul_rn in its source: NVRTC may fuse the reference's rounded product\n",
                   dc_op_get(c->op)->name);
}

static int row_sources(void) {
  static const dc_cuda_compute computes[3] = {DC_CUDA_COMPUTE_F32, DC_CUDA_COMPUTE_BF16, DC_CUDA_COMPUTE_F16};
  int n = 0, rows = 0;
  const op_case *t = oc_table(&n);
  for (int i = 0; i < n; i++) {
    const op_case *c = &t[i];
    if (!is_dit_row(c) || !((c->where ? c->where : OC_ALL) & OC_CUDA)) continue;
    int cc = c->cuda_computes ? c->cuda_computes : OC_CC_F32;
    for (int p = 0; p < 3; p++) {
      if (!(cc & (1 << p))) continue;
      dc_module *m = dc_module_create();
      int32_t y = oc_build(c, m);
      dc_cuda_options o = {.compute = computes[p]};
      dc_cuda_kernel k;
      dc_status *st = y >= 0 ? dc_cuda_gen_node(m, y, &o, "k_dit", &k) : dc_error(DC_ERR_MISMATCH, "oc_build");
      CHECK_OK(st);
      if (!st) {
        check_roundings(c, &k);
        ch_nvrtc_check(&k);
        rows++;
        dc_cuda_kernel_deinit(&k);
      }
      dc_module_destroy(m);
    }
  }
  return rows;
}

/* Node op over inputs of the given shapes (input `bad` stored as f8e4m3:
 * activations and gammas load as f32, bf16 or f16 only). */
static void refused(dc_op op, int nin, const int64_t dims[][3], const int *ranks, int bad, const char *attr,
                    const char *want) {
  dc_module *m = dc_module_create();
  int32_t in[4];
  for (int i = 0; i < nin; i++) in[i] = kh_input(m, ranks[i], dims[i]);
  dc_node n = dc_node_make(op, nin, in);
  if (attr) dc_node_set_int(&n, attr, 0);
  if (op != OP_GATED_ADD) dc_node_set_float(&n, "eps", 1e-6);
  int32_t y = kh_node(m, n);
  CHECK(y >= 0);
  if (y >= 0) {
    dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_F32};
    dc_cuda_kernel k;
    m->nodes[in[bad]].type.dtype = DT_F8_E4M3;
    CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k", &k), want);
  }
  dc_module_destroy(m);
}

static void error_cases(void) {
  refused(OP_RMS_NORM, 2, (const int64_t[][3]){{3, 8}, {8}}, (const int[]){2, 1}, 1, NULL,
          "input 1 is f8e4m3[8]; expected f32, bf16 or f16");
  refused(OP_MOD_LAYER_NORM, 2, (const int64_t[][3]){{2, 3, 8}, {2, 16}}, (const int[]){3, 2}, 1, "scale_at",
          "input 1 is f8e4m3[2,16]; expected f32, bf16 or f16");
  refused(OP_GATED_ADD, 3, (const int64_t[][3]){{2, 3, 8}, {2, 3, 8}, {2, 16}}, (const int[]){3, 3, 2}, 2, "at",
          "gated_add: the CUDA kernel reads and writes f32, bf16 or f16 input 2, got f8e4m3");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  int have_nvrtc = ch_nvrtc_open(), sources = 0, compiles = 0;
  error_cases();
  int rows = row_sources();
  CHECK(rows > 50); /* every DiT row that runs on CUDA: a row dropped from the table shows here */
  printf("%d sources of the DiT ops' rows generated, every rounded product through __fmul_rn\n", rows);
  ch_nvrtc_close(&sources, &compiles);
  if (have_nvrtc) printf("NVRTC: %d distinct sources, %d compiles, no warnings expected\n", sources, compiles);
  else printf("NVRTC: not run\n");
  return tu_finish();
}
