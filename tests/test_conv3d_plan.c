/* test_conv3d_plan.c — conv3d through the whole compiler and runtime, not
 * one kernel at a time as the op case table runs it: a causal conv as
 * CogVideoX's VAE builds it (the first frame repeated kt-1 times in front
 * with slice and concat, then a 3x3x3 conv padded in H and W), a group norm
 * with silu over C x T x H x W, and a 1x1x1 conv without bias, through every
 * pass of the default pipeline (fusion and layout leave the 5-D values
 * alone, memplan places them), LLVM kernels, a plan file, and drt_load on
 * the reference and llvm backends (2 threads): the two agree, the output
 * has the shape the op defines, and the run counts conv3d's multiply-adds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit_kernels.h"
#include "kernel_harness.h"
#include "passes/passes.h"
#include "plan/plan_format.h"
#include "runtime/diffrun.h"
#include "testutil.h"

enum { C = 3, T = 4, H = 6, W = 17, O = 8 };

static int32_t add(dc_module *m, dc_node n) {
  int32_t id = kh_node(m, n);
  CHECK(id >= 0);
  return id;
}

static int32_t conv3d(dc_module *m, int32_t x, int32_t w, int32_t b, int pad) {
  dc_node n = dc_node_make(OP_CONV3D, b >= 0 ? 3 : 2, (int32_t[]){x, w, b});
  dc_node_set_int(&n, "bias", b >= 0);
  const char *strides[3] = {"stride_t", "stride_h", "stride_w"};
  for (int i = 0; i < 3; i++) dc_node_set_int(&n, strides[i], 1);
  dc_node_set_int(&n, "pad_h", pad), dc_node_set_int(&n, "pad_w", pad);
  return add(m, n);
}

static dc_module *causal_graph(void) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 5, (int64_t[]){1, C, T, H, W}), w = kh_input(m, 5, (int64_t[]){O, C, 3, 3, 3});
  int32_t b = kh_input(m, 1, (int64_t[]){O}), g = kh_input(m, 1, (int64_t[]){O}), beta = kh_input(m, 1, (int64_t[]){O});
  int32_t w2 = kh_input(m, 5, (int64_t[]){O, O, 1, 1, 1});
  dc_node first = dc_node_make(OP_SLICE, 1, &x);
  dc_node_set_int(&first, "axis", 2), dc_node_set_int(&first, "start", 0), dc_node_set_int(&first, "end", 1);
  int32_t f = add(m, first);
  dc_node twice = dc_node_make(OP_CONCAT, 2, (int32_t[]){f, f});
  dc_node_set_int(&twice, "axis", 2);
  int32_t pad = add(m, twice);
  dc_node padded = dc_node_make(OP_CONCAT, 2, (int32_t[]){pad, x});
  dc_node_set_int(&padded, "axis", 2);
  int32_t c1 = conv3d(m, add(m, padded), w, b, 1);
  dc_node gn = dc_node_make(OP_GROUP_NORM, 3, (int32_t[]){c1, g, beta});
  dc_node_set_int(&gn, "groups", 2);
  dc_node_set_float(&gn, "eps", 1e-6);
  dc_node_set_int(&gn, "act", ACT_SILU);
  int32_t y = conv3d(m, add(m, gn), w2, -1, 0);
  CHECK_OK(dc_module_add_output(m, "y", y));
  return m;
}

/* Loads the plan on a backend, runs it on seeded random inputs, and copies out y. */
static float *run(const char *path, const char *backend, size_t *numel, double *flops) {
  drt_options o = {.backend = backend, .threads = 2};
  drt_plan *p = NULL;
  float *y = NULL;
  CHECK_OK(drt_load(path, &o, &p));
  if (!p) return NULL;
  drt_set_random_inputs(p, 7);
  drt_stats s;
  CHECK_OK(drt_run(p, &s));
  const float *out = drt_output(p, "y", numel);
  const drt_tensor_info *info = drt_output_info(p, 0);
  CHECK(out && info->rank == 5 && info->dims[1] == O && info->dims[2] == T && info->dims[3] == H && info->dims[4] == W);
  if (out && (y = malloc(*numel * sizeof *y))) memcpy(y, out, *numel * sizeof *y);
  *flops = s.flops;
  drt_destroy(p);
  return y;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  dc_module *m = causal_graph();
  dc_pipeline_options po = {0};
  CHECK_OK(dc_pipeline_run(m, &po));
  int convs = 0;
  for (int32_t i = 0; i < m->nnodes; i++) convs += m->nodes[i].op == OP_CONV3D && m->nodes[i].layout == LAYOUT_ROWMAJOR;
  CHECK(convs == 2);
  char *path = tu_path("conv3d.dplan");
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = (char *)"{}", .ir_text = (char *)"", .module = m};
  dc_cpu_target t = {0};
  CHECK_OK(kh_target(&t));
  dc_cpu_emit_options eo = {0};
  CHECK_OK(dc_emit_cpu_kernels(m, &t, &eo, &plan.kernels));
  CHECK_OK(dc_plan_write(path, &plan));
  dc_plan_kernels_deinit(&plan.kernels);
  dc_cpu_target_deinit(&t);
  size_t nr = 0, nl = 0;
  double fr = 0, fl = 0;
  float *ref = run(path, "reference", &nr, &fr), *llvm = run(path, "llvm", &nl, &fl);
  double want_flops = 2.0 * O * T * H * W * (C * 27 + O); /* the 3x3x3 conv, then the 1x1x1 */
  CHECK(ref && llvm && nr == nl && nr == (size_t)O * T * H * W);
  if (ref && llvm && nr == nl) {
    double rel = tu_rel_l2(llvm, ref, nr);
    CHECK(rel <= 1e-5);
    CHECK(fabs(fr - want_flops) < 0.5 && fabs(fl - want_flops) < 0.5);
    printf("causal conv3d -> group_norm+silu -> 1x1x1 conv3d, [1,%d,%d,%d,%d] -> [1,%d,%d,%d,%d], %d conv3d after "
           "the passes: the plan on reference and llvm (2 threads) agrees to rel L2 %.2e; %.0f flops counted\n",
           C, T, H, W, O, T, H, W, convs, rel, fl);
  }
  free(ref), free(llvm);
  remove(path);
  free(path);
  dc_module_destroy(m);
  return tu_finish();
}
