/* test_cuda_gemm.c — what of the CUDA conv2d and linear kernels
 * (codegen/cuda/g_gemm.c) has no analogue on another backend; their shapes,
 * epilogues, stored weight dtypes and aliased residuals are rows of the op
 * case table (tests/op_cases_gemm.c, f32 and bf16 / f16 tensor cores).
 * Here: the 128x128 tensor-core tiles' launch geometry (8 warps, dynamic
 * shared memory over 48 KiB) and their results in the emulator (rel L2 <=
 * 1e-2) — the WMMA kernel's (an NCHW conv) and the mma.sync kernel's (a
 * linear; g_mma_gemm.c) — and the generator's refusal of a non-f32
 * activation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "kernel_runner.h"
#include "runtime/kernels.h"
#include "testutil.h"


static double tolerance(dc_cuda_compute c) { return c == DC_CUDA_COMPUTE_F32 ? 1e-5 : 1e-2; }

static int skipped; /* no host C++ compiler: the whole test is a skip */

/* Compares node y through the emulator; aliased: the output is written over
 * the residual (input `res_input`). */
static void check_node(const dc_module *m, int32_t y, dc_cuda_compute c, int res_input, int sm_count,
                       const char *what) {
  if (y < 0) {
    CHECK(!"node type inference failed");
    return;
  }
  dc_cuda_options o = {.compute = c, .sm_count = sm_count};
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
/* conv_shape, add_conv and add_linear: kernel_runner.h */


/* ---- the 128x128 tensor-core tiles ----------------------------------------- */
/* g_gemm.c's WMMA kernel (NCHW convs) takes the 128x128 tile (8 warps,
 * dynamic shared memory) when its grid has >= the SM count's blocks: 1536 x
 * 1408 is the smallest such GEMM on 132 SMs; K stays small so the emulator
 * (which runs every lane's WMMA in full) takes seconds.  The mma.sync
 * kernel (linear, NHWC convs) picks its tile by a model of the SMs' work
 * (g_mma_gemm.c): 256 x 256 geglu pairs with K = 96 (3 K tiles) on 4 SMs
 * take 128x128. */
static void check_big_tile(int32_t y, dc_module *m, int sm_count, const char *what) {
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_BF16, .sm_count = sm_count};
  dc_cuda_kernel k;
  dc_status *st = dc_cuda_gen_node(m, y, &o, "k_big", &k);
  CHECK_OK(st);
  if (st) return;
  CHECK(k.block[0] == 256 && k.smem_bytes > 48 * 1024); /* the case below covers that tile */
  dc_cuda_kernel_deinit(&k);
  check_node(m, y, DC_CUDA_COMPUTE_BF16, -1, sm_count, what);
}

static void big_tile_cases(void) {
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, 2, (int64_t[]){256, 96}, 512, 1, ACT_GEGLU, RES_NONE);
  if (y >= 0) check_big_tile(y, m, 4, "linear [256,96] x 512 b1 geglu, 4 SMs (mma.sync 128x128 tile)");
  int32_t v = add_conv(m, &(conv_shape){2, 8, 24, 32, 1408, 1, 1, 1, 0, 0, 0, 0}, 1, ACT_SILU, RES_NONE);
  if (v >= 0) check_big_tile(v, m, 0, "conv 2x8x24x32->1408 k1x1 b1 silu (WMMA 128x128 tile)");
  dc_module_destroy(m);
}

/* ---- generator errors --------------------------------------------------- */
static void error_cases(void) {
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, 2, (int64_t[]){3, 8}, 4, 0, ACT_NONE, RES_NONE);
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_F32};
  dc_cuda_kernel k;
  m->nodes[m->nodes[y].inputs[0]].type.dtype = DT_F8_E4M3; /* activations are f32, bf16 or f16 */
  CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k", &k), "input 0 is f8e4m3[3,8]; expected f32, bf16 or f16");
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  error_cases();
  big_tile_cases();
  if (skipped) {
    printf("SKIP: no host C++ compiler for the CUDA emulator\n");
    return 77;
  }
  return tu_finish();
}
