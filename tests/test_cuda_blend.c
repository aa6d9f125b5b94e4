/* test_cuda_blend.c — the generated CUDA blend kernel (the tiled VAE's
 * seams, codegen/cuda/g_blend.c) in the CPU emulator against the reference:
 * bit-exact (each product rounded on its own, then added, as PyTorch does),
 * along H and W, with extents larger than either side (clamped), and written
 * in place over x as the memory planner arranges. */
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "testutil.h"

static const dc_cuda_options F32 = {DC_CUDA_COMPUTE_F32};

static int no_compiler;

static void blend_case(int axis, const int64_t *xd, const int64_t *pd, int64_t extent) {
  dc_module *m = dc_module_create();
  dc_type tx = {DT_F32, 4, {xd[0], xd[1], xd[2], xd[3]}}, tp = {DT_F32, 4, {pd[0], pd[1], pd[2], pd[3]}};
  int32_t in[2] = {dc_module_add_input(m, "x", &tx, INIT_NORMAL), dc_module_add_input(m, "p", &tp, INIT_NORMAL)};
  dc_node n = dc_node_make(OP_BLEND, 2, in);
  dc_node_set_int(&n, "axis", axis);
  dc_node_set_int(&n, "extent", extent);
  int32_t y = kh_node(m, n);
  CHECK(y >= 0);
  if (y >= 0) {
    kh_result r, ra;
    dc_status *st = ch_compare(m, y, &F32, 3, 1.0, &r);
    if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "compiler")) {
      dc_status_free(st);
      no_compiler = 1;
      dc_module_destroy(m);
      return;
    }
    CHECK_OK(st);
    CHECK_OK(ch_compare_aliased(m, y, &F32, 4, 1.0, 0, &ra));
    CHECK(r.bit_exact && ra.bit_exact);
    printf("blend axis %d x [%lld,%lld,%lld,%lld] prev [%lld,%lld,%lld,%lld] extent %lld: %s, in place %s\n", axis,
           (long long)xd[0], (long long)xd[1], (long long)xd[2], (long long)xd[3], (long long)pd[0], (long long)pd[1],
           (long long)pd[2], (long long)pd[3], (long long)extent, r.bit_exact ? "bit-exact" : "DIFFERS",
           ra.bit_exact ? "bit-exact" : "DIFFERS");
  }
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  blend_case(2, (int64_t[]){1, 3, 16, 12}, (int64_t[]){1, 3, 16, 12}, 4);
  blend_case(3, (int64_t[]){2, 3, 10, 16}, (int64_t[]){2, 3, 10, 7}, 8);  /* prev narrower than the extent */
  blend_case(2, (int64_t[]){1, 2, 3, 5}, (int64_t[]){1, 2, 9, 5}, 8);     /* x shorter than the extent */
  blend_case(3, (int64_t[]){1, 1, 1, 33}, (int64_t[]){1, 1, 1, 40}, 32);
  if (no_compiler) {
    printf("SKIP: no host C++ compiler for the CUDA emulator\n");
    return 77;
  }
  return tu_finish();
}
