/* test_llvm_alias.c — the generated conv2d and linear kernels (k_gemm.c,
 * k_conv.c, k_linear.c) writing their output over their residual input,
 * as the memory planner arranges when the residual has no later reader
 * (dc_node_inplace_input): the output buffer is the residual buffer,
 * pre-filled with the residual, and the result must be the bits the same
 * kernel writes to a separate buffer, and match the reference kernel.
 *
 * Shapes cover one k block and many (K = 2880 for a 3x3 conv over 320
 * channels, K = 1280 for a linear: partial sums live in scratch across k
 * blocks, and the residual must not be read or written before the last
 * one), every packer (pointwise, rows, gather; stride 2), row counts that
 * leave a short tile, bias and each activation before the residual add,
 * geglu, batches, on 1 and 2 threads. */
#include <string.h>

#include "kernel_harness.h"
#include "testutil.h"

typedef struct {
  int64_t n, c, h, w, o, kh, kw, stride, pad;
} conv_shape;

static int aliased_ok(const dc_module *m, int32_t y, const char *what) {
  if (y < 0) {
    CHECK(!"node type inference failed");
    return 0;
  }
  int k = dc_node_int(&m->nodes[y], "bias") ? 3 : 2, ok = 1;
  /* the planner's rule: this input, and only when it is output-shaped */
  CHECK(m->nodes[y].inputs[k] == dc_node_residual(&m->nodes[y]));
  for (int threads = 1; threads <= 2; threads++) {
    kh_result r;
    int same = 0;
    dc_status *st = kh_compare_aliased(m, y, threads, 11 + (uint64_t)threads, 1.0, k, &r, &same);
    CHECK_OK(st);
    if (st) return 0;
    CHECK(same);
    CHECK(r.rel_l2 <= 1e-5);
    ok &= same && r.rel_l2 <= 1e-5;
    printf("%-58s %d thread%s: out over the residual %s; rel L2 %.2g vs the reference\n", what, threads,
           threads > 1 ? "s" : " ", same ? "gives the same bits" : "DIFFERS", r.rel_l2);
  }
  return ok;
}

static void check_conv(conv_shape s, int bias, int act) {
  dc_module *m = dc_module_create();
  int64_t ho = (s.h + 2 * s.pad - s.kh) / s.stride + 1, wo = (s.w + 2 * s.pad - s.kw) / s.stride + 1;
  int32_t in[4];
  int nin = 0;
  in[nin++] = kh_input(m, 4, (int64_t[]){s.n, s.c, s.h, s.w});
  in[nin++] = kh_input(m, 4, (int64_t[]){s.o, s.c, s.kh, s.kw});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){s.o});
  in[nin++] = kh_input(m, 4, (int64_t[]){s.n, s.o, ho, wo});
  dc_node n = dc_node_make(OP_CONV2D, nin, in);
  dc_node_set_int(&n, "stride", s.stride);
  dc_node_set_int(&n, "pad_t", s.pad);
  dc_node_set_int(&n, "pad_b", s.pad);
  dc_node_set_int(&n, "pad_l", s.pad);
  dc_node_set_int(&n, "pad_r", s.pad);
  dc_node_set_int(&n, "bias", bias);
  dc_node_set_int(&n, "act", act);
  dc_node_set_int(&n, "residual", 1);
  char what[128];
  snprintf(what, sizeof what, "conv %lldx%lldx%lldx%lld->%lld k%lld s%lld (K %lld) b%d %s", (long long)s.n,
           (long long)s.c, (long long)s.h, (long long)s.w, (long long)s.o, (long long)s.kh, (long long)s.stride,
           (long long)(s.c * s.kh * s.kw), bias, dc_act_name((dc_act)act));
  aliased_ok(m, kh_node(m, n), what);
  dc_module_destroy(m);
}

static void check_linear(int rank, const int64_t *xdims, int64_t nout, int bias, int act) {
  dc_module *m = dc_module_create();
  int64_t k = xdims[rank - 1], odims[DC_MAX_DIMS];
  int32_t in[4];
  int nin = 0;
  in[nin++] = kh_input(m, rank, xdims);
  in[nin++] = kh_input(m, 2, (int64_t[]){nout, k});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){nout});
  memcpy(odims, xdims, sizeof(int64_t) * (size_t)rank);
  odims[rank - 1] = act == ACT_GEGLU ? nout / 2 : nout;
  in[nin++] = kh_input(m, rank, odims);
  dc_node n = dc_node_make(OP_LINEAR, nin, in);
  dc_node_set_int(&n, "bias", bias);
  dc_node_set_int(&n, "act", act);
  dc_node_set_int(&n, "residual", 1);
  char what[128], d[64];
  snprintf(what, sizeof what, "linear %s x %lld (K %lld) b%d %s", dc_dims_str(xdims, rank, d, sizeof d),
           (long long)nout, (long long)k, bias, dc_act_name((dc_act)act));
  aliased_ok(m, kh_node(m, n), what);
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  /* resnet conv2 over 320 channels: K = 2880, a dozen k blocks; rows packer (W' = 16) */
  check_conv((conv_shape){2, 320, 6, 16, 320, 3, 3, 1, 1}, 1, ACT_NONE);
  /* the same K through the gather packer (W' = 7), O not a multiple of the tile rows */
  check_conv((conv_shape){1, 320, 5, 7, 37, 3, 3, 1, 1}, 1, ACT_SILU);
  /* shortcut-style 1x1 (pointwise packer) with K = 640 */
  check_conv((conv_shape){2, 640, 4, 6, 320, 1, 1, 1, 0}, 1, ACT_NONE);
  /* small K (one k block), awkward channels, batch 3, no bias, gelu */
  check_conv((conv_shape){3, 5, 7, 9, 33, 3, 3, 1, 1}, 0, ACT_GELU);
  /* stride 2 (gather packer), K = 360 */
  check_conv((conv_shape){1, 40, 9, 11, 24, 3, 3, 2, 1}, 1, ACT_NONE);

  /* transformer proj_out / ff out: K = 1280 (5 k blocks), rows 2·77 */
  check_linear(3, (int64_t[]){2, 77, 1280}, 320, 1, ACT_NONE);
  /* K = 320 (2 blocks), many output features */
  check_linear(3, (int64_t[]){2, 64, 320}, 1280, 1, ACT_NONE);
  /* awkward sizes, one k block, silu, no bias */
  check_linear(3, (int64_t[]){3, 5, 40}, 33, 0, ACT_SILU);
  /* geglu: value and gate columns, output half the features, K = 300 */
  check_linear(2, (int64_t[]){50, 300}, 80, 1, ACT_GEGLU);
  /* M = 1 */
  check_linear(2, (int64_t[]){1, 1280}, 1280, 1, ACT_NONE);
  return tu_finish();
}
