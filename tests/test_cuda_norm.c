/* test_cuda_norm.c — what the CUDA norm generators (codegen/cuda/g_norm.c)
 * refuse: a gamma of another dtype than f32 is an error naming the input,
 * never a kernel that reads it wrongly.  The norms' numeric cases are rows
 * of the op case table (tests/op_cases.c), run on every backend. */
#include "cuda_harness.h"
#include "testutil.h"

int main(int argc, char **argv) {
  tu_init(argc, argv);
  dc_module *m = dc_module_create();
  int64_t c = 8;
  int32_t in[3] = {kh_input(m, 2, (int64_t[]){3, 8}), kh_input(m, 1, &c), kh_input(m, 1, &c)};
  dc_node n = dc_node_make(OP_LAYER_NORM, 3, in);
  dc_node_set_float(&n, "eps", 1e-5);
  int32_t y = kh_node(m, n);
  dc_cuda_options o = {.compute = DC_CUDA_COMPUTE_F32};
  dc_cuda_kernel k;
  m->nodes[m->nodes[y].inputs[1]].type.dtype = DT_F8_E4M3; /* f32, bf16 and f16 load; an fp8 gamma does not */
  CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k", &k), "input 1 is f8e4m3[8]; expected f32, bf16 or f16");
  dc_module_destroy(m);
  return tu_finish();
}
