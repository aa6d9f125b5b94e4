/* test_cuda_elementwise.c — the generated CUDA elementwise kernels (silu,
 * gelu, clamp, add and mul under every broadcast pattern, geglu, cast) run
 * in the CPU emulator against the reference kernels: sizes that are and are
 * not multiples of the 4-float vector, special values (±0, ±inf, NaN,
 * subnormals, exp's edges), in-place runs (out == in0) as the memory planner
 * arranges them, and casts over every code of the 8- and 16-bit formats and
 * f32's rounding ties.  Bounds: rel L2 <= 1e-6 for silu, gelu and geglu;
 * bit-exact for clamp, add, mul and every cast. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "runtime/kernels.h"
#include "testutil.h"

static const dc_cuda_options F32 = {DC_CUDA_COMPUTE_F32};

static int exact_op(dc_op op) { return op == OP_CLAMP || op == OP_ADD || op == OP_MUL || op == OP_CAST; }

static int result_ok(dc_op op, const kh_result *r) { return exact_op(op) ? r->bit_exact : r->rel_l2 <= 1e-6; }

static void report(const char *what, const char *shape, const kh_result *r, int ok) {
  printf("%-12s %-34s rel L2 %.2g, max rel %.2g%s%s\n", what, shape, r->rel_l2, r->max_rel,
         r->bit_exact ? " (bit-exact)" : "", ok ? "" : "  <-- FAILED");
}

/* Node y with random inputs, and again in place (out == in0) when inplace. */
static void run_node(dc_module *m, int32_t y, const char *shape, double scale, int inplace) {
  CHECK(y >= 0);
  if (y < 0) return;
  dc_op op = m->nodes[y].op;
  for (int ip = 0; ip <= inplace; ip++) {
    kh_result r;
    dc_status *st = ip ? ch_compare_aliased(m, y, &F32, 42, scale, 0, &r) : ch_compare(m, y, &F32, 42, scale, &r);
    CHECK_OK(st);
    if (st) return;
    int ok = result_ok(op, &r);
    CHECK(ok);
    char what[32];
    snprintf(what, sizeof what, "%s%s", dc_op_get(op)->name, ip ? "/ip" : "");
    report(what, shape, &r, ok);
  }
}

static dc_node clamp_node(int32_t x, double lo, double hi) {
  dc_node n = dc_node_make(OP_CLAMP, 1, &x);
  dc_node_set_float(&n, "min", lo);
  dc_node_set_float(&n, "max", hi);
  return n;
}

static void check_unary(dc_op op, int rank, const int64_t *dims, int inplace) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, rank, dims);
  int32_t y = kh_node(m, op == OP_CLAMP ? clamp_node(x, -1.5, 2.0) : dc_node_make(op, 1, &x));
  char b[64];
  run_node(m, y, dc_dims_str(dims, rank, b, sizeof b), 3.0, inplace);
  dc_module_destroy(m);
}

/* ---- special values --------------------------------------------------------- */
static float *special_values(int64_t *n) {
  static const float base[] = {0.0f, 1.0f, 0.5f, 2.0f, 3.0f, 5.5f, 7.0f, 10.0f, 20.0f, 37.0f, 80.0f, 87.3f, 88.0f,
                               88.72283172607421875f, 89.0f, 103.97f, 104.0f, 105.0f, 1e10f, 1e30f, FLT_MAX,
                               FLT_MIN, 1e-30f, 1e-40f, 1e-45f, 1e-7f, 1.5f, 1.49999f, 2.00001f, INFINITY};
  int nb = (int)(sizeof base / sizeof base[0]), k = 0;
  float *v = malloc(sizeof(float) * (size_t)(2 * nb + 3));
  for (int i = 0; i < nb; i++) {
    v[k++] = base[i];
    v[k++] = -base[i];
  }
  v[k++] = NAN;
  v[k++] = dc_f32_from_bits(0x7f800001u); /* signalling NaN */
  v[k++] = dc_f32_from_bits(0xffc12345u); /* negative NaN with a payload */
  *n = k;
  return v;
}

static void check_specials(dc_op op) {
  int64_t n;
  float *v = special_values(&n);
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 1, &n);
  int32_t y = kh_node(m, op == OP_CLAMP ? clamp_node(x, 0.0, 88.0) : dc_node_make(op, 1, &x));
  kh_result r;
  dc_status *st = ch_compare_with(m, y, &F32, (const void *const[]){v}, &r);
  CHECK_OK(st);
  if (!st) {
    int ok = result_ok(op, &r);
    CHECK(ok);
    report(dc_op_get(op)->name, "special values", &r, ok);
  }
  dc_module_destroy(m);
  free(v);
}

/* ---- add, mul ------------------------------------------------------------------ */
static void check_binary(dc_op op, int ra, const int64_t *da, int rb, const int64_t *db, int inplace) {
  dc_module *m = dc_module_create();
  int32_t ins[2] = {kh_input(m, ra, da), kh_input(m, rb, db)};
  int32_t y = kh_node(m, dc_node_make(op, 2, ins));
  char b1[64], b2[64], shape[140];
  snprintf(shape, sizeof shape, "%s by %s", dc_dims_str(da, ra, b1, sizeof b1), dc_dims_str(db, rb, b2, sizeof b2));
  run_node(m, y, shape, 2.0, inplace);
  dc_module_destroy(m);
}

static void check_broadcasts(void) {
  /* [N,C,H,W] with every pattern the UNet and VAE use, and the rest; a
   * multiple of 4 inside (the vector path). */
  const int64_t a4[] = {2, 20, 8, 8};
  const int64_t *b4[] = {(int64_t[]){2, 20, 8, 8}, (int64_t[]){2, 20, 1, 1}, (int64_t[]){20, 1, 1},
                         (int64_t[]){1, 20, 1, 1}, (int64_t[]){1},          (int64_t[]){8},
                         (int64_t[]){1, 1, 8, 8},  (int64_t[]){2, 1, 8, 8}, (int64_t[]){2, 20, 1, 8},
                         (int64_t[]){20, 8, 1},    (int64_t[]){2, 1, 1, 1}, (int64_t[]){1, 1, 1, 8}};
  const int rb4[] = {4, 4, 3, 4, 1, 1, 4, 4, 4, 3, 4, 4};
  for (int i = 0; i < 12; i++) check_binary(i % 2 ? OP_MUL : OP_ADD, 4, a4, rb4[i], b4[i], i % 3 == 0);
  /* Odd sizes: the scalar path. */
  const int64_t a_odd[] = {3, 5, 7, 9};
  check_binary(OP_ADD, 4, a_odd, 4, (int64_t[]){3, 5, 7, 9}, 1);
  check_binary(OP_MUL, 4, a_odd, 3, (int64_t[]){5, 1, 9}, 0);
  check_binary(OP_MUL, 4, a_odd, 4, (int64_t[]){3, 1, 7, 1}, 1);
  check_binary(OP_ADD, 4, a_odd, 2, (int64_t[]){7, 9}, 0);
  check_binary(OP_ADD, 4, a_odd, 4, (int64_t[]){3, 5, 1, 1}, 0);
  check_binary(OP_MUL, 4, a_odd, 1, (int64_t[]){1}, 0);
  /* Token rows [B,S,C] with [C] and friends; one element; a long 1-D row. */
  const int64_t a3[] = {2, 77, 40};
  check_binary(OP_ADD, 3, a3, 1, (int64_t[]){40}, 0);
  check_binary(OP_MUL, 3, a3, 3, (int64_t[]){2, 1, 40}, 0);
  check_binary(OP_MUL, 3, a3, 3, (int64_t[]){2, 77, 1}, 1);
  check_binary(OP_ADD, 1, (int64_t[]){1}, 1, (int64_t[]){1}, 0);
  check_binary(OP_ADD, 1, (int64_t[]){1001}, 1, (int64_t[]){1}, 0);
  check_binary(OP_MUL, 2, (int64_t[]){3, 1001}, 2, (int64_t[]){3, 1}, 0);
  /* SD shapes, in place as the memory planner runs them. */
  check_binary(OP_ADD, 4, (int64_t[]){2, 320, 32, 32}, 4, (int64_t[]){2, 320, 1, 1}, 1);
  check_binary(OP_MUL, 3, (int64_t[]){2, 1024, 320}, 1, (int64_t[]){320}, 1);
}

/* ---- geglu ------------------------------------------------------------------------ */
static void check_geglu(int rank, const int64_t *dims) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, rank, dims);
  int32_t y = kh_node(m, dc_node_make(OP_GEGLU, 1, &x));
  char b[64];
  run_node(m, y, dc_dims_str(dims, rank, b, sizeof b), 2.0, 0);
  dc_module_destroy(m);
}

/* ---- cast -------------------------------------------------------------------------- */
static void cast_case(dc_dtype from, dc_dtype to, const void *data, int64_t n, const char *label) {
  dc_module *m = dc_module_create();
  dc_type t = {from, 1, {n}};
  int32_t x = dc_module_add_input(m, "x", &t, INIT_NORMAL);
  dc_node node = dc_node_make(OP_CAST, 1, &x);
  node.type = (dc_type){to, 1, {n}};
  int32_t y = kh_node(m, node);
  char what[32];
  snprintf(what, sizeof what, "cast %s>%s", dc_dtype_name(from), dc_dtype_name(to));
  kh_result r;
  dc_status *st = ch_compare_with(m, y, &F32, (const void *const[]){data}, &r);
  CHECK_OK(st);
  if (!st) {
    CHECK(r.bit_exact);
    report(what, label, &r, r.bit_exact);
  }
  dc_module_destroy(m);
}

/* Every code of a 16- or 8-bit format, plus a few so the length is odd. */
static void *all_codes(int bytes, int64_t *n) {
  int64_t count = bytes == 2 ? 65536 : 256;
  *n = count + 7;
  uint8_t *d = malloc((size_t)(*n * bytes));
  for (int64_t i = 0; i < *n; i++) {
    if (bytes == 2) ((uint16_t *)d)[i] = (uint16_t)(i % count);
    else d[i] = (uint8_t)(i % count);
  }
  return d;
}

/* f32 values where f16/bf16 rounding has edges: every 16-bit value, the
 * midpoints to the next one (ties) and the floats either side, specials,
 * and random bit patterns (NaNs with payloads among them). */
static float *rounding_cases(int64_t *n) {
  int64_t cap = 65536 * 8 + 20 + 200000, k = 0;
  float *v = malloc(sizeof(float) * (size_t)cap);
  for (uint32_t h = 0; h < 65536; h++) {
    uint32_t bits[2] = {dc_f32_bits(dc_f16_to_f32((uint16_t)h)), dc_f32_bits(dc_bf16_to_f32((uint16_t)h))};
    uint32_t half_ulp[2] = {0x1000u, 0x8000u};
    for (int t = 0; t < 2; t++) {
      v[k++] = dc_f32_from_bits(bits[t]);
      v[k++] = dc_f32_from_bits(bits[t] + half_ulp[t]);
      v[k++] = dc_f32_from_bits(bits[t] + half_ulp[t] - 1);
      v[k++] = dc_f32_from_bits(bits[t] + half_ulp[t] + 1);
    }
  }
  static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                                     0x7fbfffffu, 0xff812345u, 0x00000001u, 0x80000001u, 0x007fffffu,
                                     0x00800000u, 0x477ff000u, 0x477fefffu, 0x38800000u, 0x387fffffu,
                                     0x33000000u, 0x33000001u, 0x32ffffffu, 0x7f7fffffu, 0xff7fffffu};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) v[k++] = dc_f32_from_bits(special[i]);
  uint64_t s = 5;
  while (k < cap) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[k++] = dc_f32_from_bits((uint32_t)(s >> 32));
  }
  *n = k;
  return v;
}

static void check_casts(void) {
  static const dc_dtype narrow[4] = {DT_F16, DT_BF16, DT_F8_E4M3, DT_F8_E5M2};
  for (int i = 0; i < 4; i++) {
    int64_t n;
    void *codes = all_codes(dc_dtype_size(narrow[i]), &n);
    cast_case(narrow[i], DT_F32, codes, n, "all codes");
    cast_case(narrow[i], narrow[i] == DT_F16 ? DT_BF16 : DT_F16, codes, n, "all codes");
    if (dc_dtype_size(narrow[i]) == 2) cast_case(narrow[i], narrow[i], codes, n, "all codes (copy)");
    free(codes);
  }
  int64_t n;
  float *v = rounding_cases(&n);
  cast_case(DT_F32, DT_F16, v, n, "ties, specials, random");
  cast_case(DT_F32, DT_BF16, v, n, "ties, specials, random");
  cast_case(DT_F32, DT_F32, v, n, "(copy, NaN payloads)");
  cast_case(DT_F32, DT_BF16, v + 3, 17, "17 elements");
  free(v);
  /* Random finite inputs of each narrow type through the harness. */
  for (int i = 0; i < 4; i++) {
    dc_module *m = dc_module_create();
    dc_type t = {narrow[i], 3, {3, 5, 7}};
    int32_t x = dc_module_add_input(m, "x", &t, INIT_NORMAL);
    dc_node node = dc_node_make(OP_CAST, 1, &x);
    node.type = (dc_type){DT_F32, 3, {3, 5, 7}};
    int32_t y = kh_node(m, node);
    kh_result r;
    dc_status *st = ch_compare(m, y, &F32, 11, 1.0, &r);
    CHECK_OK(st);
    if (!st) {
      CHECK(r.bit_exact);
      char what[32];
      snprintf(what, sizeof what, "cast %s>f32", dc_dtype_name(narrow[i]));
      report(what, "[3,5,7] random", &r, r.bit_exact);
    }
    dc_module_destroy(m);
  }
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  {
    dc_module *m = dc_module_create();
    int32_t x = kh_input(m, 1, (int64_t[]){4});
    kh_result r;
    dc_status *st = ch_compare(m, kh_node(m, dc_node_make(OP_SILU, 1, &x)), &F32, 1, 1.0, &r);
    dc_module_destroy(m);
    if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "C++ compiler")) {
      printf("SKIP: %s\n", dc_status_message(st));
      dc_status_free(st);
      return 77;
    }
    CHECK_OK(st);
  }
  const int64_t *shapes[] = {(int64_t[]){16}, (int64_t[]){1}, (int64_t[]){17}, (int64_t[]){3, 5, 7, 9},
                             (int64_t[]){64, 1000}};
  const int ranks[] = {1, 1, 1, 4, 2};
  dc_op unary_ops[] = {OP_SILU, OP_GELU, OP_CLAMP};
  for (int o = 0; o < 3; o++) {
    for (int i = 0; i < 5; i++) check_unary(unary_ops[o], ranks[i], shapes[i], 0);
    check_unary(unary_ops[o], 4, (int64_t[]){2, 4, 63, 65}, 1); /* odd total, in place */
    check_unary(unary_ops[o], 4, (int64_t[]){2, 4, 16, 16}, 1); /* vector path, in place */
    check_specials(unary_ops[o]);
  }
  check_broadcasts();
  check_geglu(3, (int64_t[]){2, 77, 2 * 40});
  check_geglu(3, (int64_t[]){3, 5, 34});
  check_geglu(1, (int64_t[]){2});
  check_geglu(2, (int64_t[]){1, 2 * 17});
  check_geglu(3, (int64_t[]){2, 64, 2 * 1280});
  check_casts();
  return tu_finish();
}
