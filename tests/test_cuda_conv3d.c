/* test_cuda_conv3d.c — what the op case table (op_cases.h) cannot say about
 * the CUDA conv3d kernel (g_gemm.c's implicit GEMM with time), whose numbers
 * the table's rows check in the emulator:
 *   - the conv3d rows' sources compile under NVRTC for sm_80 and sm_90
 *     with no warning, when NVRTC is installed (else reported as not run):
 *     no fixture holds a conv3d yet, so test_cuda_compile never sees one.
 *     Rows differ in the text by their constants, the bias, the stored
 *     dtypes' typedefs and loaders (which conv2d's sources compile in the
 *     other NVRTC tests), the compute and the activation dtype: the first
 *     row of each compute and activation dtype is compiled (some 0.4 s of
 *     NVRTC per source and arch; every row's took 75 s on 2 cores);
 *   - which main loop each compute takes: FMA for f32, WMMA for bf16 / f16
 *     (the mma.sync generator takes no NCHW-ordered conv). */
#include <string.h>

#include "cuda_harness.h"
#include "op_cases.h"
#include "testutil.h"

static void check_loop(const dc_cuda_kernel *k, dc_cuda_compute compute) {
  int wmma = strstr(k->source, "wmma::mma_sync") != NULL, conv3d = strstr(k->source, "#define G_KD ") != NULL;
  CHECK(conv3d && wmma == (compute != DC_CUDA_COMPUTE_F32));
  if (!conv3d || wmma != (compute != DC_CUDA_COMPUTE_F32))
    fprintf(stderr, "%s: expected the conv3d implicit GEMM on %s\n", k->name, compute ? "WMMA" : "FMA");
}

/* Whether a row with c's activation dtype at this compute was compiled already. */
static int kind_seen(const op_case *c, int p) {
  static int kinds[64], nkinds;
  int key = p | (int)c->act << 2;
  for (int i = 0; i < nkinds; i++)
    if (kinds[i] == key) return 1;
  if (nkinds < 64) kinds[nkinds++] = key;
  return 0;
}

static int row_sources(void) {
  static const dc_cuda_compute computes[3] = {DC_CUDA_COMPUTE_F32, DC_CUDA_COMPUTE_BF16, DC_CUDA_COMPUTE_F16};
  int n = 0, rows = 0;
  const op_case *t = oc_table(&n);
  for (int i = 0; i < n; i++) {
    const op_case *c = &t[i];
    if (c->op != OP_CONV3D || !((c->where ? c->where : OC_ALL) & OC_CUDA)) continue;
    int cc = c->cuda_computes ? c->cuda_computes : OC_CC_F32;
    for (int p = 0; p < 3; p++) {
      if (!(cc & (1 << p))) continue;
      dc_module *m = dc_module_create();
      int32_t y = oc_build(c, m);
      dc_cuda_options o = {.compute = computes[p]};
      dc_cuda_kernel k;
      dc_status *st = y >= 0 ? dc_cuda_gen_node(m, y, &o, "k_conv3d", &k) : dc_error(DC_ERR_MISMATCH, "oc_build");
      CHECK_OK(st);
      if (!st) {
        check_loop(&k, computes[p]);
        if (!kind_seen(c, p)) ch_nvrtc_check(&k);
        rows++;
        dc_cuda_kernel_deinit(&k);
      }
      dc_module_destroy(m);
    }
  }
  return rows;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  int have_nvrtc = ch_nvrtc_open(), sources = 0, compiles = 0;
  int rows = row_sources();
  CHECK(rows > 30); /* every conv3d row that runs on CUDA, at each compute: a row dropped from the table shows here */
  printf("%d sources of the conv3d rows generated: FMA at f32, WMMA at bf16 / f16\n", rows);
  ch_nvrtc_close(&sources, &compiles);
  if (have_nvrtc) printf("NVRTC: %d distinct sources, %d compiles, no warnings expected\n", sources, compiles);
  else printf("NVRTC: not run\n");
  return tu_finish();
}
