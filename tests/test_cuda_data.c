/* test_cuda_data.c — the generated CUDA data-movement kernels (reshape,
 * permute, upsample_nearest, concat, slice) and the timestep embedding, run
 * in the CPU emulator against the reference kernels, all bit-exact.  Inputs
 * are random bytes (NaN patterns included: moves copy bits, not values) in
 * f32 and in the 16- and 8-bit dtypes, at awkward shapes: odd sizes,
 * 1-element dims, permutes of rank 1..6 (the tiled transpose with partial
 * tiles, batches and every dim order, and the gather), the UNet's own
 * transposes, concat and slice on every axis. */
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "testutil.h"

static const dc_cuda_options F32 = {DC_CUDA_COMPUTE_F32};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 32);
}

/* Node y against the reference with `inputs` (random bytes when NULL). */
static void run_exact(dc_module *m, int32_t y, const char *what, const void *const *inputs) {
  CHECK(y >= 0);
  if (y < 0) return;
  void *mine[DC_MAX_INPUTS] = {0};
  if (!inputs) {
    for (int i = 0; i < m->nodes[y].ninputs; i++) {
      size_t bytes = (size_t)dc_type_bytes(&m->nodes[m->nodes[y].inputs[i]].type);
      uint8_t *b = malloc(bytes + 1);
      for (size_t j = 0; j < bytes; j++) b[j] = (uint8_t)next_u32();
      mine[i] = b;
    }
    inputs = (const void *const *)mine;
  }
  kh_result r;
  dc_status *st = ch_compare_with(m, y, &F32, inputs, &r);
  CHECK_OK(st);
  if (!st) {
    char shape[64];
    const dc_type *t = &m->nodes[m->nodes[y].inputs[0]].type;
    CHECK(r.bit_exact);
    printf("%-30s %-22s %s\n", what, dc_dims_str(t->dims, t->rank, shape, sizeof shape),
           r.bit_exact ? "bit-exact" : "DIFFERS  <-- FAILED");
  }
  for (int i = 0; i < DC_MAX_INPUTS; i++) free(mine[i]);
}

static int32_t input_of(dc_module *m, dc_dtype dt, int rank, const int64_t *dims) {
  dc_type t = {dt, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  char name[32];
  snprintf(name, sizeof name, "in%d", m->ninputs);
  return dc_module_add_input(m, name, &t, INIT_NORMAL);
}

/* The IR's type rules take f32 for permute, concat and slice; the kernels
 * move elements of any size, so other dtypes get their type stated. */
static int32_t add_typed(dc_module *m, dc_node n, dc_dtype dt, int rank, const int64_t *dims) {
  if (dt == DT_F32) return kh_node(m, n);
  n.type = (dc_type){dt, rank, {0}};
  memcpy(n.type.dims, dims, sizeof(int64_t) * (size_t)rank);
  n.layout = rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  return dc_module_add_node(m, &n);
}

/* ---- reshape, permute ---------------------------------------------------------- */
static void check_reshape(dc_dtype dt, int rank, const int64_t *dims, int orank, const int64_t *odims) {
  dc_module *m = dc_module_create();
  int32_t x = input_of(m, dt, rank, dims);
  dc_node n = dc_node_make(OP_RESHAPE, 1, &x);
  n.type = (dc_type){dt, orank, {0}};
  memcpy(n.type.dims, odims, sizeof(int64_t) * (size_t)orank);
  char what[32];
  snprintf(what, sizeof what, "reshape/%s", dc_dtype_name(dt));
  run_exact(m, kh_node(m, n), what, NULL);
  dc_module_destroy(m);
}

static void check_permute(dc_dtype dt, int rank, const int64_t *dims, const int64_t *perm) {
  dc_module *m = dc_module_create();
  int32_t x = input_of(m, dt, rank, dims);
  dc_node n = dc_node_make(OP_PERMUTE, 1, &x);
  n.nlist = rank;
  memcpy(n.list, perm, sizeof(int64_t) * (size_t)rank);
  char what[48], b[64];
  snprintf(what, sizeof what, "permute%s/%s", dc_dims_str(perm, rank, b, sizeof b), dc_dtype_name(dt));
  int64_t od[DC_MAX_DIMS];
  for (int i = 0; i < rank; i++) od[i] = dims[perm[i]];
  run_exact(m, add_typed(m, n, dt, rank, od), what, NULL);
  dc_module_destroy(m);
}

static void check_permutes(void) {
  /* The UNet's transposes: [B,C,HW] <-> [B,HW,C], NCHW <-> NHWC, heads. */
  check_permute(DT_F32, 3, (int64_t[]){2, 320, 1024}, (int64_t[]){0, 2, 1});
  check_permute(DT_F32, 3, (int64_t[]){2, 1024, 320}, (int64_t[]){0, 2, 1});
  check_permute(DT_F32, 4, (int64_t[]){2, 320, 16, 16}, (int64_t[]){0, 2, 3, 1});
  check_permute(DT_F32, 4, (int64_t[]){2, 16, 16, 320}, (int64_t[]){0, 3, 1, 2});
  check_permute(DT_F32, 4, (int64_t[]){2, 77, 8, 40}, (int64_t[]){0, 2, 1, 3});
  /* Partial tiles, tiny, identity, size-1 dims, the transposed batch. */
  check_permute(DT_F32, 3, (int64_t[]){3, 17, 33}, (int64_t[]){0, 2, 1});
  check_permute(DT_F32, 2, (int64_t[]){65, 97}, (int64_t[]){1, 0});
  check_permute(DT_F32, 2, (int64_t[]){1, 5}, (int64_t[]){1, 0});
  check_permute(DT_F32, 1, (int64_t[]){7}, (int64_t[]){0});
  check_permute(DT_F32, 3, (int64_t[]){3, 4, 5}, (int64_t[]){0, 1, 2});
  check_permute(DT_F32, 3, (int64_t[]){3, 1, 5}, (int64_t[]){2, 1, 0});
  check_permute(DT_F32, 3, (int64_t[]){40, 33, 48}, (int64_t[]){2, 0, 1});
  check_permute(DT_F32, 3, (int64_t[]){5, 33, 40}, (int64_t[]){2, 1, 0});
  check_permute(DT_F32, 5, (int64_t[]){2, 3, 4, 5, 6}, (int64_t[]){4, 2, 0, 3, 1});
  check_permute(DT_F32, 6, (int64_t[]){2, 3, 1, 4, 5, 3}, (int64_t[]){5, 0, 4, 1, 3, 2});
  check_permute(DT_F16, 3, (int64_t[]){2, 40, 33}, (int64_t[]){0, 2, 1});
  check_permute(DT_BF16, 4, (int64_t[]){2, 5, 6, 7}, (int64_t[]){3, 1, 0, 2});
  check_permute(DT_F8_E4M3, 3, (int64_t[]){5, 19, 18}, (int64_t[]){2, 1, 0});
  /* Random permutes of rank 2..4 with dims 1..40. */
  for (int rank = 2; rank <= 4; rank++)
    for (int rep = 0; rep < 3; rep++) {
      int64_t dims[DC_MAX_DIMS], perm[DC_MAX_DIMS];
      for (int i = 0; i < rank; i++) {
        dims[i] = 1 + next_u32() % (rank == 2 ? 40 : rank == 3 ? 20 : 9);
        perm[i] = i;
      }
      for (int i = rank - 1; i > 0; i--) {
        int j = (int)(next_u32() % (uint32_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
      }
      check_permute(rep == 2 ? DT_F16 : DT_F32, rank, dims, perm);
    }
}

/* ---- upsample, concat, slice ------------------------------------------------------ */
static void check_upsample(int rank, const int64_t *dims, int64_t factor) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, rank, dims);
  dc_node n = dc_node_make(OP_UPSAMPLE, 1, &x);
  dc_node_set_int(&n, "factor", factor);
  char what[32];
  snprintf(what, sizeof what, "upsample x%lld", (long long)factor);
  run_exact(m, kh_node(m, n), what, NULL);
  dc_module_destroy(m);
}

static void check_concat(dc_dtype dt, int rank, const int64_t *da, int64_t axis, int64_t bsize) {
  dc_module *m = dc_module_create();
  int64_t db[DC_MAX_DIMS];
  memcpy(db, da, sizeof(int64_t) * (size_t)rank);
  db[axis] = bsize;
  int32_t ins[2] = {input_of(m, dt, rank, da), input_of(m, dt, rank, db)};
  dc_node n = dc_node_make(OP_CONCAT, 2, ins);
  dc_node_set_int(&n, "axis", axis);
  char what[32];
  snprintf(what, sizeof what, "concat@%lld+%lld/%s", (long long)axis, (long long)bsize, dc_dtype_name(dt));
  db[axis] += da[axis];
  run_exact(m, add_typed(m, n, dt, rank, db), what, NULL);
  dc_module_destroy(m);
}

static void check_slice(dc_dtype dt, int rank, const int64_t *dims, int64_t axis, int64_t start, int64_t end) {
  dc_module *m = dc_module_create();
  int32_t x = input_of(m, dt, rank, dims);
  dc_node n = dc_node_make(OP_SLICE, 1, &x);
  dc_node_set_int(&n, "axis", axis);
  dc_node_set_int(&n, "start", start);
  dc_node_set_int(&n, "end", end);
  char what[40];
  snprintf(what, sizeof what, "slice@%lld[%lld,%lld)/%s", (long long)axis, (long long)start, (long long)end,
           dc_dtype_name(dt));
  int64_t od[DC_MAX_DIMS];
  memcpy(od, dims, sizeof(int64_t) * (size_t)rank);
  od[axis] = end - start;
  run_exact(m, add_typed(m, n, dt, rank, od), what, NULL);
  dc_module_destroy(m);
}

static void check_moves(void) {
  check_reshape(DT_F32, 4, (int64_t[]){2, 3, 5, 7}, 2, (int64_t[]){6, 35});
  check_reshape(DT_F16, 2, (int64_t[]){3, 1001}, 1, (int64_t[]){3003});
  check_reshape(DT_F8_E5M2, 1, (int64_t[]){13}, 2, (int64_t[]){13, 1});
  check_reshape(DT_F32, 4, (int64_t[]){2, 32, 16, 16}, 3, (int64_t[]){2, 32, 256});
  check_reshape(DT_F32, 1, (int64_t[]){1}, 2, (int64_t[]){1, 1});
  check_permutes();
  check_upsample(4, (int64_t[]){2, 4, 5, 7}, 2);
  check_upsample(4, (int64_t[]){2, 3, 17, 33}, 3);
  check_upsample(3, (int64_t[]){3, 5, 7}, 2);
  check_upsample(4, (int64_t[]){2, 3, 4, 5}, 1);
  check_upsample(4, (int64_t[]){1, 1, 1, 1}, 4);
  check_upsample(4, (int64_t[]){2, 32, 16, 16}, 2);
  for (int axis = 0; axis < 4; axis++) {
    check_concat(DT_F32, 4, (int64_t[]){2, 3, 5, 7}, axis, 4);
    check_concat(DT_F16, 4, (int64_t[]){3, 2, 9, 5}, axis, 1);
  }
  check_concat(DT_F32, 4, (int64_t[]){2, 64, 16, 16}, 1, 32); /* a UNet skip connection (16-byte units) */
  check_concat(DT_F32, 4, (int64_t[]){1, 4, 8, 8}, 0, 1);     /* classifier-free guidance's batch */
  check_concat(DT_F8_E5M2, 1, (int64_t[]){13}, 0, 7);
  static const int64_t sd[4] = {3, 10, 7, 9};
  const int64_t ranges[4][2] = {{1, 3}, {2, 9}, {0, 1}, {4, 9}};
  for (int axis = 0; axis < 4; axis++) {
    check_slice(DT_F32, 4, sd, axis, ranges[axis][0], ranges[axis][1]);
    check_slice(DT_BF16, 4, sd, axis, 0, sd[axis]);
  }
  check_slice(DT_F32, 3, (int64_t[]){2, 64, 2560}, 2, 1280, 2560); /* geglu's halves */
  check_slice(DT_F32, 3, (int64_t[]){2, 64, 2560}, 2, 0, 1280);
  check_slice(DT_F8_E4M3, 3, (int64_t[]){2, 5, 12}, 2, 3, 12);
}

/* ---- timestep embedding ------------------------------------------------------------ */
static void check_time_embed(int64_t batch, int64_t dim, int flip, double shift) {
  dc_module *m = dc_module_create();
  int32_t t = kh_input(m, 1, &batch);
  dc_node n = dc_node_make(OP_TIME_EMBED, 1, &t);
  dc_node_set_int(&n, "dim", dim);
  dc_node_set_int(&n, "flip_sin_to_cos", flip);
  dc_node_set_float(&n, "freq_shift", shift);
  int32_t y = kh_node(m, n);
  float *ts = malloc(sizeof(float) * (size_t)batch);
  static const float some[] = {0.0f, 999.0f, 1.0f, 500.5f, 981.0f, 0.25f, 12345.0f, -3.0f};
  for (int64_t i = 0; i < batch; i++) ts[i] = i < 8 ? some[i] : (float)(next_u32() % 1000000) / 1000.0f;
  char what[48];
  snprintf(what, sizeof what, "time_embed/%lld%s/shift %g", (long long)dim, flip ? "/flip" : "", shift);
  run_exact(m, y, what, (const void *const[]){ts});
  free(ts);
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  {
    dc_module *m = dc_module_create();
    int32_t x = kh_input(m, 1, (int64_t[]){4});
    dc_node n = dc_node_make(OP_RESHAPE, 1, &x);
    n.type = (dc_type){DT_F32, 2, {2, 2}};
    kh_result r;
    dc_status *st = ch_compare(m, kh_node(m, n), &F32, 1, 1.0, &r);
    dc_module_destroy(m);
    if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "C++ compiler")) {
      printf("SKIP: %s\n", dc_status_message(st));
      dc_status_free(st);
      return 77;
    }
    CHECK_OK(st);
  }
  check_moves();
  check_time_embed(2, 320, 1, 0.0);
  check_time_embed(8, 321, 0, 1.0);
  check_time_embed(1, 2, 1, 0.0);
  check_time_embed(3, 256, 0, 1.0);
  check_time_embed(64, 1280, 1, 0.0);
  check_time_embed(5, 3, 1, 1.0);
  return tu_finish();
}
