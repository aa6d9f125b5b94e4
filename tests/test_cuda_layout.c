/* test_cuda_layout.c — what the op case table (op_cases.h) cannot say about
 * the CUDA kernels of NHWC nodes (--layout nhwc): the table's NHWC rows run
 * conv2d (codegen/cuda/g_gemm.c, implicit GEMM with k = (r, q, c)),
 * group_norm (g_norm.c) and upsample_nearest (g_data.c) in the emulator
 * against the reference; here, from the same rows' generated sources:
 *   - a conv's 16-byte A loads (g_f4) exactly when every tap is a whole
 *     number of float4s (C % 4 == 0);
 *   - at bf16 / f16 an NHWC conv is the mma.sync kernel (g_mma_gemm.c; its
 *     tiles are checked in test_cuda_mma_gemm.c), at f32 the FMA one;
 *   - every distinct source compiles under NVRTC for sm_80 and sm_90 with no
 *     warning, when NVRTC is installed (else reported as not run);
 *   - the generator's error for groups that do not divide the last dim. */
#include <string.h>

#include "cuda_harness.h"
#include "op_cases.h"
#include "testutil.h"

/* The table's NHWC rows that run on CUDA, each compute precision they run at. */
static void row_sources(void) {
  int n = 0, rows = 0, on_mma = 0;
  const op_case *t = oc_table(&n);
  for (int i = 0; i < n; i++) {
    const op_case *c = &t[i];
    if (c->layout != LAYOUT_NHWC || !((c->where ? c->where : OC_ALL) & OC_CUDA)) continue;
    int cc = c->cuda_computes ? c->cuda_computes : OC_CC_F32;
    for (int p = 0; p < 3; p++) {
      if (!(cc & (1 << p))) continue;
      static const dc_cuda_compute computes[3] = {DC_CUDA_COMPUTE_F32, DC_CUDA_COMPUTE_BF16, DC_CUDA_COMPUTE_F16};
      dc_module *m = dc_module_create();
      int32_t y = oc_build(c, m);
      dc_cuda_options o = {.compute = computes[p]};
      dc_cuda_kernel k;
      dc_status *st = y >= 0 ? dc_cuda_gen_node(m, y, &o, "k_nhwc", &k) : dc_error(DC_ERR_MISMATCH, "oc_build");
      CHECK_OK(st);
      if (!st) {
        ch_nvrtc_check(&k);
        if (c->op == OP_CONV2D) {
          int64_t ch = c->in[0].dims[1];
          CHECK((strstr(k.source, "g_f4") != NULL) == (ch % 4 == 0));
          int mma = strstr(k.source, "mma.sync m16n8k16") != NULL;
          CHECK(mma == (p != 0));
          on_mma += mma;
        }
        rows++;
        dc_cuda_kernel_deinit(&k);
      }
      dc_module_destroy(m);
    }
  }
  CHECK(rows > 40 && on_mma > 20);
  printf("%d NHWC sources of the case table generated: 16-byte loads exactly when C %% 4 == 0, %d convs on mma.sync\n",
         rows, on_mma);
}

/* ---- generator errors ---------------------------------------------------------- */
static void error_cases(void) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 4, (int64_t[]){1, 4, 4, 12}), c = kh_input(m, 1, (int64_t[]){12});
  int32_t in[3] = {x, c, c};
  m->nodes[x].layout = LAYOUT_NHWC;
  dc_node n = dc_node_make(OP_GROUP_NORM, 3, in);
  dc_node_set_float(&n, "eps", 1e-6);
  dc_node_set_int(&n, "groups", 3);
  dc_node_set_int(&n, "act", ACT_NONE);
  n.layout = LAYOUT_NHWC;
  CHECK_OK(dc_infer_type(m, &n, &n.type));
  int32_t y = dc_module_add_node(m, &n);
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_F32};
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
  int have_nvrtc = ch_nvrtc_open(), sources = 0, compiles = 0;
  error_cases();
  row_sources();
  ch_nvrtc_close(&sources, &compiles);
  if (have_nvrtc) printf("NVRTC: %d distinct sources, %d compiles, no warnings expected\n", sources, compiles);
  else printf("NVRTC: not run\n");
  return tu_finish();
}
