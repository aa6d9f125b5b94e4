/* test_cuda_norm.c — the generated CUDA group_norm and layer_norm kernels
 * (codegen/cuda/g_norm.c) run in the CPU emulator against the reference
 * kernels (double statistics) to rel L2 <= 1e-5: group_norm on 3-D, 4-D and
 * 5-D inputs, small and 1024-thread groups, every act; layer_norm with rows
 * held in registers and rows too wide for them, odd widths, partial last
 * blocks; and both with a large mean (100 +- 1, 1e4 +- 1), where naive f32
 * sums lose the spread.  Prints rel L2 per case. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "testutil.h"

static int skipped; /* no host C++ compiler: the whole test is a skip */

static int is_skip(dc_status *st) {
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "compiler")) {
    skipped = 1;
    dc_status_free(st);
    return 1;
  }
  return 0;
}

static void report(dc_status *st, const kh_result *r, const char *what) {
  if (is_skip(st)) return;
  CHECK_OK(st);
  if (st) return;
  CHECK(r->rel_l2 <= 1e-5);
  printf("%-72s rel L2 %.3g, max abs %.3g%s\n", what, r->rel_l2, r->max_abs, r->rel_l2 <= 1e-5 ? "" : "  <-- FAIL");
}

/* A norm node over x of the given dims; gamma and beta of length c. */
static int32_t add_norm(dc_module *m, dc_op op, int rank, const int64_t *dims, int64_t groups, int act, double eps) {
  int64_t c = op == OP_GROUP_NORM ? dims[1] : dims[rank - 1];
  int32_t in[3] = {kh_input(m, rank, dims), kh_input(m, 1, &c), kh_input(m, 1, &c)};
  dc_node n = dc_node_make(op, 3, in);
  dc_node_set_float(&n, "eps", eps);
  if (op == OP_GROUP_NORM) {
    dc_node_set_int(&n, "groups", groups);
    dc_node_set_int(&n, "act", act);
  }
  return kh_node(m, n);
}

static void describe(char *what, size_t cap, dc_op op, int rank, const int64_t *dims, int64_t groups, int act,
                     const char *extra) {
  char d[80];
  if (op == OP_GROUP_NORM)
    snprintf(what, cap, "group_norm %s groups %lld %s%s", dc_dims_str(dims, rank, d, sizeof d), (long long)groups,
             dc_act_name((dc_act)act), extra);
  else
    snprintf(what, cap, "layer_norm %s%s", dc_dims_str(dims, rank, d, sizeof d), extra);
}

/* Random inputs (normal * scale, as ch_compare). */
static void check_random(dc_op op, int rank, const int64_t *dims, int64_t groups, int act, double scale) {
  dc_module *m = dc_module_create();
  int32_t y = add_norm(m, op, rank, dims, groups, act, 1e-6);
  char what[200], extra[40];
  snprintf(extra, sizeof extra, " x%g", scale);
  describe(what, sizeof what, op, rank, dims, groups, act, extra);
  CHECK(y >= 0);
  if (y >= 0) {
    dc_cuda_options o = {DC_CUDA_COMPUTE_BF16}; /* norms are f32 whatever the tensor-core precision */
    kh_result r;
    report(ch_compare(m, y, &o, 3, scale, &r), &r, what);
  }
  dc_module_destroy(m);
}

static float *uniform(int64_t count, uint64_t seed, double center, double spread) {
  float *d = malloc((size_t)count * sizeof *d);
  uint64_t s = seed;
  for (int64_t i = 0; i < count; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    d[i] = (float)(center + spread * ((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0));
  }
  return d;
}

/* x = mean + uniform(-1, 1): the statistics must not lose the spread. */
static void check_big_mean(dc_op op, int rank, const int64_t *dims, int64_t groups, double mean) {
  dc_module *m = dc_module_create();
  int32_t y = add_norm(m, op, rank, dims, groups, ACT_NONE, 1e-5);
  char what[200], extra[40];
  snprintf(extra, sizeof extra, " mean %g +- 1", mean);
  describe(what, sizeof what, op, rank, dims, groups, ACT_NONE, extra);
  CHECK(y >= 0);
  if (y >= 0) {
    int64_t n = 1, c = op == OP_GROUP_NORM ? dims[1] : dims[rank - 1];
    for (int i = 0; i < rank; i++) n *= dims[i];
    float *x = uniform(n, 1, mean, 1.0), *gamma = uniform(c, 2, 1.0, 0.5), *beta = uniform(c, 3, 0.0, 0.5);
    const void *in[3] = {x, gamma, beta};
    dc_cuda_options o = {DC_CUDA_COMPUTE_F32};
    kh_result r;
    report(ch_compare_with(m, y, &o, in, &r), &r, what);
    free(x), free(gamma), free(beta);
  }
  dc_module_destroy(m);
}

static void group_norm_cases(void) {
  for (int act = ACT_NONE; act <= ACT_GELU; act++)
    check_random(OP_GROUP_NORM, 4, (int64_t[]){2, 64, 9, 7}, 32, act, 1.0);
  check_random(OP_GROUP_NORM, 3, (int64_t[]){2, 12, 5}, 4, ACT_SILU, 3.0);                 /* [N, C, L] */
  check_random(OP_GROUP_NORM, 5, (int64_t[]){1, 8, 3, 4, 5}, 2, ACT_NONE, 1.0);            /* [N, C, D, H, W] */
  check_random(OP_GROUP_NORM, 4, (int64_t[]){1, 6, 1, 1}, 3, ACT_NONE, 1.0);              /* 2 values a group */
  check_random(OP_GROUP_NORM, 4, (int64_t[]){1, 64, 48, 48}, 4, ACT_SILU, 1.0);            /* 36864: 1024 threads */
  check_big_mean(OP_GROUP_NORM, 4, (int64_t[]){2, 32, 24, 24}, 2, 100.0);
  check_big_mean(OP_GROUP_NORM, 4, (int64_t[]){1, 64, 48, 48}, 4, 1e4);
}

static void layer_norm_cases(void) {
  check_random(OP_LAYER_NORM, 3, (int64_t[]){2, 77, 64}, 0, ACT_NONE, 1.0);
  check_random(OP_LAYER_NORM, 3, (int64_t[]){1, 13, 320}, 0, ACT_NONE, 2.0); /* 13 rows: a partial block */
  check_random(OP_LAYER_NORM, 2, (int64_t[]){3, 77}, 0, ACT_NONE, 1.0);     /* odd width */
  check_random(OP_LAYER_NORM, 2, (int64_t[]){9, 1}, 0, ACT_NONE, 1.0);      /* one value a row: y = beta */
  check_random(OP_LAYER_NORM, 2, (int64_t[]){4, 2048}, 0, ACT_NONE, 1.0);   /* widest row kept in registers */
  check_random(OP_LAYER_NORM, 3, (int64_t[]){1, 5, 2100}, 0, ACT_NONE, 1.0); /* streamed from memory */
  check_big_mean(OP_LAYER_NORM, 3, (int64_t[]){2, 9, 1280}, 0, 100.0);
  check_big_mean(OP_LAYER_NORM, 2, (int64_t[]){3, 4100}, 0, 1e4);
}

static void error_cases(void) {
  dc_module *m = dc_module_create();
  int32_t y = add_norm(m, OP_LAYER_NORM, 2, (int64_t[]){3, 8}, 0, ACT_NONE, 1e-5);
  dc_cuda_options o = {DC_CUDA_COMPUTE_F32};
  dc_cuda_kernel k;
  m->nodes[m->nodes[y].inputs[1]].type.dtype = DT_F16;
  CHECK_ERR(dc_cuda_gen_node(m, y, &o, "k", &k), "input 1 is f16[8]; expected f32");
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  error_cases();
  group_norm_cases();
  if (!skipped) layer_norm_cases();
  if (skipped) {
    printf("SKIP: no host C++ compiler for the CUDA emulator\n");
    return 77;
  }
  return tu_finish();
}
