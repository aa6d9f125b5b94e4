/* test_ref_data.c — the reference kernels of the elementwise and
 * data-movement ops (runtime/kernels_ref.c) against values computed
 * independently here: add and mul with numpy broadcasting, the unary
 * activations and geglu, reshape and permute (any rank, any permutation),
 * nearest upsampling, concat and slice on every axis.  Nodes go through
 * dc_infer_type first, so the kernels see the types the compiler would give
 * them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_check.h"

/* ---- add, mul --------------------------------------------------------- */
/* Expected value by index arithmetic: b's index drops a's leading dims and
 * pins its size-1 dims to 0. */
static void binary_case(dc_op op, int ra, const int64_t *da, int rb, const int64_t *db) {
  dc_module *m = dc_module_create();
  int64_t na = numel_of(da, ra), ia[DC_MAX_DIMS], ib[DC_MAX_DIMS];
  float *a = rand_buf(na), *b = rand_buf(numel_of(db, rb));
  double *want = malloc((size_t)na * sizeof *want);
  for (int64_t i = 0; i < na; i++) {
    unravel(i, da, ra, ia);
    for (int k = 0; k < rb; k++) ib[k] = db[k] == 1 ? 0 : ia[ra - rb + k];
    float bv = b[ravel(ib, db, rb)];
    want[i] = op == OP_ADD ? (double)(a[i] + bv) : (double)(a[i] * bv);
  }
  int32_t ins[2] = {add_in(m, DT_F32, ra, da), add_in(m, DT_F32, rb, db)};
  const void *in[2] = {a, b};
  float *y = run_node(m, dc_node_make(op, 2, ins), in);
  char what[160], s1[64], s2[64];
  snprintf(what, sizeof what, "%s %s with %s", dc_op_get(op)->name, dc_dims_str(da, ra, s1, sizeof s1),
           dc_dims_str(db, rb, s2, sizeof s2));
  check_close(what, y, want, na, 1e-7);
  free(a), free(b), free(want), free(y);
  dc_module_destroy(m);
}

static void test_binary(void) {
  printf("add, mul:\n");
  binary_case(OP_ADD, DIMS(2, 3, 4, 5), DIMS(2, 3, 1, 1));
  binary_case(OP_ADD, DIMS(2, 3, 4, 5), DIMS(2, 3, 4, 5));
  binary_case(OP_ADD, DIMS(2, 3, 4), DIMS(3, 1));
  binary_case(OP_ADD, DIMS(2, 3), DIMS(1));
  binary_case(OP_MUL, DIMS(2, 3, 4), DIMS(4));
  binary_case(OP_MUL, DIMS(2, 3, 4, 5), DIMS(1, 3, 1, 5));
  {
    dc_module *m = dc_module_create();
    float a[4] = {1, 2, 3, 4}, b[2] = {10, 20}, want[4] = {11, 22, 13, 24};
    int32_t ins[2] = {IN32(m, 2, 2), IN32(m, 2)};
    const void *in[2] = {a, b};
    float *y = run_node(m, dc_node_make(OP_ADD, 2, ins), in);
    check_closef("add [[1,2],[3,4]] + [10,20], by hand", y, want, 4, 0);
    free(y);
    dc_module_destroy(m);
  }
}

/* ---- unary elementwise, geglu ----------------------------------------- */
static float *unary(dc_module *m, dc_op op, const float *x, int64_t count, double lo, double hi) {
  int32_t ins[1] = {IN32(m, count)};
  dc_node nd = dc_node_make(op, 1, ins);
  const void *in[1] = {x};
  if (op == OP_CLAMP) {
    dc_node_set_float(&nd, "min", lo);
    dc_node_set_float(&nd, "max", hi);
  }
  return run_node(m, nd, in);
}

static void test_unary(void) {
  dc_module *m = dc_module_create();
  float x[6] = {0, 1, -1, 3, -20, NAN};
  /* silu(x) = x / (1 + e^-x); gelu(x) = x·Φ(x), Φ(1) = 0.841344746068543 */
  double silu[6] = {0, 0.731058578630005, -0.268941421369995, 2.857722380467300,
                    -20 / (1 + exp(20.0)), NAN};
  double gelu[6] = {0, 0.841344746068543, -0.158655253931457, 2.995950305905110,
                    -20 * 0.5 * erfc(20 / sqrt(2.0)), NAN};
  double clamp[6] = {0, 1, -0.5, 2, -0.5, NAN};
  printf("silu, gelu, clamp:\n");
  float *y = unary(m, OP_SILU, x, 6, 0, 0);
  check_close("silu at 0, 1, -1, 3, -20, NaN", y, silu, 6, 1e-7);
  free(y);
  y = unary(m, OP_GELU, x, 6, 0, 0);
  check_close("gelu (erf) at 0, 1, -1, 3, -20, NaN", y, gelu, 6, 1e-7);
  free(y);
  y = unary(m, OP_CLAMP, x, 6, -0.5, 2);
  check_close("clamp to [-0.5, 2], NaN passes through", y, clamp, 6, 0);
  free(y);
  dc_module_destroy(m);
}

static void test_geglu(void) {
  dc_module *m = dc_module_create();
  /* rows [h0 h1 | g0 g1]: out = h * gelu(g) */
  float x[8] = {1, 2, 0, 1, -3, 0.5f, -1, 3};
  double want[4] = {0, 2 * 0.841344746068543, -3 * -0.158655253931457, 0.5 * 2.995950305905110};
  int32_t ins[1] = {IN32(m, 2, 4)};
  const void *in[1] = {x};
  float *y = run_node(m, dc_node_make(OP_GEGLU, 1, ins), in);
  printf("geglu:\n");
  CHECK(m->nodes[m->nnodes - 1].type.dims[1] == 2);
  check_close("geglu [2,4] -> [2,2], by hand", y, want, 4, 1e-7);
  free(y);
  dc_module_destroy(m);
}

/* ---- data movement ---------------------------------------------------- */
static void permute_case(int rank, const int64_t *dims, const int64_t *perm) {
  dc_module *m = dc_module_create();
  int64_t count = numel_of(dims, rank), od[DC_MAX_DIMS], oi[DC_MAX_DIMS], idx[DC_MAX_DIMS];
  float *x = rand_buf(count);
  double *want = malloc((size_t)count * sizeof *want);
  int32_t ins[1] = {add_in(m, DT_F32, rank, dims)};
  dc_node nd = dc_node_make(OP_PERMUTE, 1, ins);
  const void *in[1] = {x};
  char what[128], sd[64], sp[64];
  for (int k = 0; k < rank; k++) od[k] = dims[perm[k]];
  for (int64_t o = 0; o < count; o++) { /* out[oi] = x[idx] with idx[perm[k]] = oi[k] */
    unravel(o, od, rank, oi);
    for (int k = 0; k < rank; k++) idx[perm[k]] = oi[k];
    want[o] = x[ravel(idx, dims, rank)];
  }
  memcpy(nd.list, perm, (size_t)rank * sizeof *perm);
  nd.nlist = rank;
  float *y = run_node(m, nd, in);
  snprintf(what, sizeof what, "permute %s by %s", dc_dims_str(dims, rank, sd, sizeof sd),
           dc_dims_str(perm, rank, sp, sizeof sp));
  check_close(what, y, want, count, 0);
  free(x), free(want), free(y);
  dc_module_destroy(m);
}

static void test_reshape_permute(void) {
  dc_module *m = dc_module_create();
  float *x = rand_buf(120);
  int32_t ins[1] = {IN32(m, 2, 3, 4, 5)};
  dc_node nd = dc_node_make(OP_RESHAPE, 1, ins);
  const void *in[1] = {x};
  printf("reshape, permute:\n");
  nd.type = (dc_type){DT_F32, 2, {6, 20}};
  float *y = run_node(m, nd, in);
  CHECK(y && memcmp(x, y, 120 * sizeof *x) == 0);
  printf("  reshape [2,3,4,5] -> [6,20]: same 120 values\n");
  free(x), free(y);
  dc_module_destroy(m);
  permute_case(DIMS(2, 3, 4, 5), ((int64_t[]){0, 2, 3, 1})); /* NCHW -> NHWC */
  permute_case(DIMS(2, 3, 4, 5), ((int64_t[]){3, 1, 0, 2}));
  permute_case(DIMS(2, 3, 4, 5), ((int64_t[]){0, 1, 2, 3}));
  permute_case(DIMS(4, 7), ((int64_t[]){1, 0}));
  permute_case(DIMS(2, 3, 2, 4, 3, 2), ((int64_t[]){5, 0, 3, 1, 4, 2}));
}

static void test_upsample(void) {
  dc_module *m = dc_module_create();
  float x1[4] = {1, 2, 3, 4}, want1[16] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
  int64_t P = 6, H = 3, W = 5, f = 3;
  float *x = rand_buf(P * H * W);
  double *want = malloc((size_t)(P * H * W * f * f) * sizeof *want);
  int32_t ins1[1] = {IN32(m, 1, 1, 2, 2)}, ins[1] = {IN32(m, 2, 3, H, W)};
  dc_node nd1 = dc_node_make(OP_UPSAMPLE, 1, ins1), nd = dc_node_make(OP_UPSAMPLE, 1, ins);
  const void *in1[1] = {x1}, *in[1] = {x};
  printf("upsample_nearest:\n");
  dc_node_set_int(&nd1, "factor", 2);
  float *y = run_node(m, nd1, in1);
  check_closef("upsample [1,1,2,2] x2, by hand", y, want1, 16, 0);
  free(y);
  for (int64_t p = 0; p < P; p++)
    for (int64_t r = 0; r < H * f; r++)
      for (int64_t c = 0; c < W * f; c++)
        want[(p * H * f + r) * W * f + c] = x[(p * H + r / f) * W + c / f];
  dc_node_set_int(&nd, "factor", f);
  y = run_node(m, nd, in);
  check_close("upsample [2,3,3,5] x3", y, want, P * H * W * f * f, 0);
  free(x), free(want), free(y);
  dc_module_destroy(m);
}

static void concat_case(int axis) {
  dc_module *m = dc_module_create();
  int64_t da[3] = {2, 2, 3}, db[3] = {2, 2, 3}, dy[3], idx[3];
  double want[64];
  char what[96], sb[32];
  db[axis] = 1 + axis; /* a different length along the axis */
  memcpy(dy, da, sizeof dy);
  dy[axis] += db[axis];
  float *a = rand_buf(numel_of(da, 3)), *b = rand_buf(numel_of(db, 3));
  for (int64_t o = 0; o < numel_of(dy, 3); o++) {
    unravel(o, dy, 3, idx);
    if (idx[axis] < da[axis]) {
      want[o] = a[ravel(idx, da, 3)];
    } else {
      idx[axis] -= da[axis];
      want[o] = b[ravel(idx, db, 3)];
    }
  }
  int32_t ins[2] = {add_in(m, DT_F32, 3, da), add_in(m, DT_F32, 3, db)};
  dc_node nd = dc_node_make(OP_CONCAT, 2, ins);
  const void *in[2] = {a, b};
  dc_node_set_int(&nd, "axis", axis);
  float *y = run_node(m, nd, in);
  snprintf(what, sizeof what, "concat [2,2,3] with %s on axis %d", dc_dims_str(db, 3, sb, sizeof sb), axis);
  check_close(what, y, want, numel_of(dy, 3), 0);
  free(a), free(b), free(y);
  dc_module_destroy(m);
}

static void slice_case(int axis, int64_t start, int64_t end) {
  dc_module *m = dc_module_create();
  int64_t d[3] = {2, 5, 3}, od[3] = {2, 5, 3}, idx[3];
  float *x = rand_buf(30);
  double want[30];
  char what[64];
  od[axis] = end - start;
  for (int64_t o = 0; o < numel_of(od, 3); o++) {
    unravel(o, od, 3, idx);
    idx[axis] += start;
    want[o] = x[ravel(idx, d, 3)];
  }
  int32_t ins[1] = {add_in(m, DT_F32, 3, d)};
  dc_node nd = dc_node_make(OP_SLICE, 1, ins);
  const void *in[1] = {x};
  dc_node_set_int(&nd, "axis", axis);
  dc_node_set_int(&nd, "start", start);
  dc_node_set_int(&nd, "end", end);
  float *y = run_node(m, nd, in);
  snprintf(what, sizeof what, "slice [2,5,3] axis %d [%lld, %lld)", axis, (long long)start, (long long)end);
  check_close(what, y, want, numel_of(od, 3), 0);
  free(x), free(y);
  dc_module_destroy(m);
}

static void test_concat_slice(void) {
  printf("concat, slice:\n");
  for (int axis = 0; axis < 3; axis++) concat_case(axis);
  slice_case(1, 1, 4);
  slice_case(2, 2, 3);
  slice_case(0, 1, 2);
  slice_case(1, 0, 5);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_binary();
  test_unary();
  test_geglu();
  test_reshape_permute();
  test_upsample();
  test_concat_slice();
  return tu_finish();
}
