/* test_llvm_kernels.c — the generated norm, timestep-embedding and
 * data-movement kernels against the reference kernels, on 1, 2 and 3
 * threads, at awkward shapes (sizes not multiples of the vector width,
 * 1-element dims, batch 3, odd spatial sizes, 1-channel groups) and SD's
 * real ones.  Bounds: rel L2 <= 1e-6 for the norms (also on data with a
 * large mean); bit-exact for the timestep embedding, permute, reshape,
 * upsample, concat, slice and every cast, the casts over every code of the
 * 8- and 16-bit formats and f32's special values.
 *
 * DIFFC_BENCH=1 also times group_norm+silu at 2×320×64×64 and layer_norm at
 * 8192×320 (GB/s of input read plus output written). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_harness.h"
#include "runtime/kernels.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 32);
}
static float uniform(void) { return ((float)(next_u32() >> 8) + 0.5f) / 16777216.0f; }
static float normal(void) { return sqrtf(-2.0f * logf(uniform())) * cosf(6.2831853f * uniform()); }

static const char *dims_s(const dc_type *t, char *b) { return dc_dims_str(t->dims, t->rank, b, 64); }

static void report(const char *what, const char *shape, int threads, const kh_result *r, int ok) {
  printf("%-14s %-30s %d thread(s): rel L2 %.2g, max abs %.2g%s%s\n", what, shape, threads, r->rel_l2, r->max_abs,
         r->bit_exact ? " (bit-exact)" : "", ok ? "" : "  <-- FAILED");
}

/* Checks node y on 1..3 threads: random normal inputs times scale, or the
 * given inputs; exact demands bit-exactness, else rel L2 <= 1e-6. */
static void run_all(dc_module *m, int32_t y, const char *what, const void *const *inputs, double scale, int exact) {
  CHECK(y >= 0);
  if (y < 0) return;
  char shape[64];
  dims_s(&m->nodes[m->nodes[y].inputs[0]].type, shape);
  for (int threads = 1; threads <= 3; threads++) {
    kh_result r;
    dc_status *st = inputs ? kh_compare_with(m, y, threads, inputs, &r)
                           : kh_compare(m, y, threads, 1000 + (uint64_t)threads, scale, &r);
    CHECK_OK(st);
    if (st) return;
    int ok = exact ? r.bit_exact : r.rel_l2 <= 1e-6;
    CHECK(ok);
    report(what, shape, threads, &r, ok);
  }
}

static int32_t input_of(dc_module *m, dc_dtype dt, int rank, const int64_t *dims) {
  dc_type t = {dt, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  char name[32];
  snprintf(name, sizeof name, "in%d", m->ninputs);
  return dc_module_add_input(m, name, &t, INIT_NORMAL);
}

/* ---- group norm, layer norm ------------------------------------------------ */
static int32_t norm_node(dc_module *m, dc_op op, int rank, const int64_t *dims, int64_t groups, dc_act act) {
  int64_t c = op == OP_GROUP_NORM ? dims[1] : dims[rank - 1];
  int32_t ins[3] = {kh_input(m, rank, dims), kh_input(m, 1, &c), kh_input(m, 1, &c)};
  dc_node n = dc_node_make(op, 3, ins);
  dc_node_set_float(&n, "eps", op == OP_GROUP_NORM ? 1e-6 : 1e-5);
  if (op == OP_GROUP_NORM) {
    dc_node_set_int(&n, "groups", groups);
    dc_node_set_int(&n, "act", act);
  }
  return kh_node(m, n);
}

/* x = offset + spread·normal, gamma and beta normal: a mean far from 0
 * tests the centring. */
static void check_norm(dc_op op, int rank, const int64_t *dims, int64_t groups, dc_act act, float offset) {
  dc_module *m = dc_module_create();
  int32_t y = norm_node(m, op, rank, dims, groups, act);
  char what[48];
  snprintf(what, sizeof what, "%s%s%s", op == OP_GROUP_NORM ? "gn" : "ln",
           act == ACT_SILU ? "+silu" : act == ACT_GELU ? "+gelu" : "", offset != 0 ? "+offset" : "");
  if (op == OP_GROUP_NORM) snprintf(what + strlen(what), sizeof what - strlen(what), "/%lld", (long long)groups);
  if (offset == 0) {
    run_all(m, y, what, NULL, 2.0, 0);
  } else {
    const dc_node *n = &m->nodes[y];
    float *in[3];
    for (int i = 0; i < 3; i++) {
      size_t len = dc_type_numel(&m->nodes[n->inputs[i]].type);
      in[i] = malloc(len * sizeof(float) + 4);
      for (size_t j = 0; j < len; j++) in[i][j] = (i == 0 ? offset : 0.0f) + normal();
    }
    run_all(m, y, what, (const void *const *)in, 0, 0);
    for (int i = 0; i < 3; i++) free(in[i]);
  }
  dc_module_destroy(m);
}

static void check_norms(void) {
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){2, 320, 64, 64}, 32, ACT_SILU, 0);
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){2, 320, 64, 64}, 32, ACT_NONE, 0);
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){1, 64, 32, 32}, 1, ACT_NONE, 0); /* one 64K-element group */
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){3, 6, 5, 7}, 3, ACT_SILU, 0);
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){3, 6, 5, 7}, 6, ACT_GELU, 0);   /* 1-channel groups */
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){2, 8, 9, 9}, 8, ACT_NONE, 0);
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){2, 4, 1, 1}, 2, ACT_NONE, 0);   /* 2 elements per group */
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){1, 32, 4, 4}, 32, ACT_SILU, 0); /* exactly one vector */
  check_norm(OP_GROUP_NORM, 3, (int64_t[]){2, 32, 100}, 8, ACT_GELU, 0);
  check_norm(OP_GROUP_NORM, 2, (int64_t[]){5, 12}, 4, ACT_NONE, 0);
  check_norm(OP_GROUP_NORM, 5, (int64_t[]){1, 4, 3, 5, 7}, 2, ACT_SILU, 0);
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){2, 40, 17, 19}, 4, ACT_SILU, 300.0f);
  check_norm(OP_GROUP_NORM, 4, (int64_t[]){1, 16, 64, 64}, 2, ACT_NONE, -1000.0f);
  check_norm(OP_LAYER_NORM, 2, (int64_t[]){8192, 320}, 0, ACT_NONE, 0);
  check_norm(OP_LAYER_NORM, 3, (int64_t[]){3, 77, 768}, 0, ACT_NONE, 0);
  check_norm(OP_LAYER_NORM, 2, (int64_t[]){5, 17}, 0, ACT_NONE, 0);
  check_norm(OP_LAYER_NORM, 2, (int64_t[]){7, 1}, 0, ACT_NONE, 0);
  check_norm(OP_LAYER_NORM, 1, (int64_t[]){33}, 0, ACT_NONE, 0);
  check_norm(OP_LAYER_NORM, 3, (int64_t[]){2, 9, 40}, 0, ACT_NONE, 0);
  check_norm(OP_LAYER_NORM, 3, (int64_t[]){2, 64, 320}, 0, ACT_NONE, 500.0f);
  check_norm(OP_LAYER_NORM, 2, (int64_t[]){3, 1280}, 0, ACT_NONE, -20.0f);
}

/* ---- timestep embedding ------------------------------------------------------ */
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
  for (int64_t i = 0; i < batch; i++) ts[i] = i < 8 ? some[i] : 1000.0f * uniform();
  char what[48];
  snprintf(what, sizeof what, "time_embed/%lld%s", (long long)dim, flip ? "/flip" : "");
  run_all(m, y, what, (const void *const[]){ts}, 0, 1);
  free(ts);
  dc_module_destroy(m);
}

static void check_time_embeds(void) {
  check_time_embed(2, 320, 1, 0.0);
  check_time_embed(8, 321, 0, 1.0);
  check_time_embed(1, 2, 1, 0.0);
  check_time_embed(3, 256, 0, 1.0);
  check_time_embed(64, 1280, 1, 0.0);
}

/* ---- data movement ------------------------------------------------------------- */
/* Random bytes for every input of node y (any dtype: bits, not values). */
static void **random_bytes(const dc_module *m, int32_t y) {
  void **in = calloc(DC_MAX_INPUTS, sizeof *in);
  for (int i = 0; i < m->nodes[y].ninputs; i++) {
    size_t bytes = (size_t)dc_type_bytes(&m->nodes[m->nodes[y].inputs[i]].type);
    uint8_t *b = malloc(bytes + 4);
    for (size_t j = 0; j < bytes; j++) b[j] = (uint8_t)next_u32();
    in[i] = b;
  }
  return in;
}

static void free_all(void **in) {
  for (int i = 0; i < DC_MAX_INPUTS; i++) free(in[i]);
  free(in);
}

/* Bit-exact on 1..3 threads, inputs random bytes (NaN patterns included). */
static void run_bytes(dc_module *m, int32_t y, const char *what) {
  CHECK(y >= 0);
  if (y < 0) return;
  void **in = random_bytes(m, y);
  run_all(m, y, what, (const void *const *)in, 0, 1);
  free_all(in);
}

/* The IR's type rules take f32 for permute, concat and slice; the kernels
 * (and the reference) move elements of any size, tested here by adding the
 * node with its type stated (no inference) when dt is not f32. */
static int32_t add_typed(dc_module *m, dc_node n, dc_dtype dt, int rank, const int64_t *dims) {
  if (dt == DT_F32) return kh_node(m, n);
  n.type = (dc_type){dt, rank, {0}};
  memcpy(n.type.dims, dims, sizeof(int64_t) * (size_t)rank);
  n.layout = rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  return dc_module_add_node(m, &n);
}

static void check_reshape(dc_dtype dt, int rank, const int64_t *dims, int orank, const int64_t *odims) {
  dc_module *m = dc_module_create();
  int32_t x = input_of(m, dt, rank, dims);
  dc_node n = dc_node_make(OP_RESHAPE, 1, &x);
  n.type = (dc_type){dt, orank, {0}};
  memcpy(n.type.dims, odims, sizeof(int64_t) * (size_t)orank);
  char what[32];
  snprintf(what, sizeof what, "reshape/%s", dc_dtype_name(dt));
  run_bytes(m, kh_node(m, n), what);
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
  int64_t od[6];
  for (int i = 0; i < rank; i++) od[i] = dims[perm[i]];
  run_bytes(m, add_typed(m, n, dt, rank, od), what);
  dc_module_destroy(m);
}

static void check_permutes(void) {
  /* The UNet's transposes: [B,C,HW] <-> [B,HW,C], NCHW <-> NHWC, heads. */
  check_permute(DT_F32, 3, (int64_t[]){2, 320, 4096}, (int64_t[]){0, 2, 1});
  check_permute(DT_F32, 3, (int64_t[]){2, 4096, 320}, (int64_t[]){0, 2, 1});
  check_permute(DT_F32, 4, (int64_t[]){2, 320, 16, 16}, (int64_t[]){0, 2, 3, 1});
  check_permute(DT_F32, 4, (int64_t[]){2, 16, 16, 320}, (int64_t[]){0, 3, 1, 2});
  check_permute(DT_F32, 4, (int64_t[]){2, 77, 8, 40}, (int64_t[]){0, 2, 1, 3});
  check_permute(DT_F32, 4, (int64_t[]){2, 8, 77, 40}, (int64_t[]){0, 2, 1, 3});
  /* Odd and tiny. */
  check_permute(DT_F32, 3, (int64_t[]){3, 17, 33}, (int64_t[]){0, 2, 1});
  check_permute(DT_F32, 2, (int64_t[]){17, 33}, (int64_t[]){1, 0});
  check_permute(DT_F32, 2, (int64_t[]){16, 16}, (int64_t[]){1, 0});
  check_permute(DT_F32, 2, (int64_t[]){1, 5}, (int64_t[]){1, 0});
  check_permute(DT_F32, 1, (int64_t[]){7}, (int64_t[]){0});
  check_permute(DT_F32, 3, (int64_t[]){3, 4, 5}, (int64_t[]){0, 1, 2});
  check_permute(DT_F32, 3, (int64_t[]){3, 1, 5}, (int64_t[]){2, 1, 0});
  check_permute(DT_F32, 3, (int64_t[]){40, 33, 48}, (int64_t[]){2, 0, 1});
  check_permute(DT_F32, 5, (int64_t[]){2, 3, 4, 5, 6}, (int64_t[]){4, 2, 0, 3, 1});
  check_permute(DT_F32, 6, (int64_t[]){2, 3, 1, 4, 5, 3}, (int64_t[]){5, 0, 4, 1, 3, 2});
  check_permute(DT_F16, 3, (int64_t[]){2, 40, 33}, (int64_t[]){0, 2, 1});
  check_permute(DT_BF16, 4, (int64_t[]){2, 5, 6, 7}, (int64_t[]){3, 1, 0, 2});
  check_permute(DT_F8_E4M3, 3, (int64_t[]){5, 19, 18}, (int64_t[]){2, 1, 0});
  /* Random permutes of every rank with dims 1..20. */
  for (int rank = 2; rank <= 6; rank++)
    for (int rep = 0; rep < 3; rep++) {
      int64_t dims[6], perm[6];
      for (int i = 0; i < rank; i++) {
        dims[i] = 1 + next_u32() % (rank <= 3 ? 20 : 6);
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

static void check_upsample(int rank, const int64_t *dims, int64_t factor) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, rank, dims);
  dc_node n = dc_node_make(OP_UPSAMPLE, 1, &x);
  dc_node_set_int(&n, "factor", factor);
  char what[32];
  snprintf(what, sizeof what, "upsample x%lld", (long long)factor);
  run_bytes(m, kh_node(m, n), what);
  dc_module_destroy(m);
}

static void check_concat(dc_dtype dt, int rank, const int64_t *da, int64_t axis, int64_t bsize) {
  dc_module *m = dc_module_create();
  int64_t db[6];
  memcpy(db, da, sizeof(int64_t) * (size_t)rank);
  db[axis] = bsize;
  int32_t ins[2] = {input_of(m, dt, rank, da), input_of(m, dt, rank, db)};
  dc_node n = dc_node_make(OP_CONCAT, 2, ins);
  dc_node_set_int(&n, "axis", axis);
  char what[32];
  snprintf(what, sizeof what, "concat@%lld/%s", (long long)axis, dc_dtype_name(dt));
  db[axis] += da[axis];
  run_bytes(m, add_typed(m, n, dt, rank, db), what);
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
  int64_t od[6];
  memcpy(od, dims, sizeof(int64_t) * (size_t)rank);
  od[axis] = end - start;
  run_bytes(m, add_typed(m, n, dt, rank, od), what);
  dc_module_destroy(m);
}

static void check_moves(void) {
  check_reshape(DT_F32, 4, (int64_t[]){2, 3, 5, 7}, 2, (int64_t[]){6, 35});
  check_reshape(DT_F16, 2, (int64_t[]){3, 1001}, 1, (int64_t[]){3003});
  check_reshape(DT_F32, 4, (int64_t[]){2, 320, 64, 64}, 3, (int64_t[]){2, 320, 4096});
  check_reshape(DT_F32, 1, (int64_t[]){1}, 2, (int64_t[]){1, 1});
  check_permutes();
  check_upsample(4, (int64_t[]){2, 4, 5, 7}, 2);
  check_upsample(4, (int64_t[]){1, 3, 8, 16}, 2);
  check_upsample(4, (int64_t[]){2, 3, 17, 33}, 2);
  check_upsample(4, (int64_t[]){2, 3, 17, 33}, 3);
  check_upsample(3, (int64_t[]){3, 5, 7}, 2);
  check_upsample(5, (int64_t[]){1, 2, 3, 4, 5}, 2);
  check_upsample(4, (int64_t[]){2, 3, 4, 5}, 1);
  check_upsample(4, (int64_t[]){1, 1, 1, 1}, 4);
  check_upsample(4, (int64_t[]){1, 2, 4, 20}, 8);
  check_upsample(4, (int64_t[]){1, 2, 3, 5}, 16);
  check_upsample(4, (int64_t[]){1, 2, 3, 5}, 17); /* above the vector width: the scalar path */
  check_upsample(4, (int64_t[]){2, 320, 32, 32}, 2);
  for (int axis = 0; axis < 4; axis++) {
    check_concat(DT_F32, 4, (int64_t[]){2, 3, 5, 7}, axis, 4);
    check_concat(DT_F16, 4, (int64_t[]){3, 2, 9, 5}, axis, 1);
  }
  check_concat(DT_F32, 4, (int64_t[]){2, 320, 64, 64}, 1, 320); /* a UNet skip connection */
  check_concat(DT_F32, 4, (int64_t[]){2, 640, 32, 32}, 1, 320);
  check_concat(DT_F32, 4, (int64_t[]){1, 4, 64, 64}, 0, 1);     /* classifier-free guidance's batch */
  check_concat(DT_F8_E5M2, 1, (int64_t[]){13}, 0, 7);
  static const int64_t sd[4] = {3, 10, 7, 9};
  const int64_t ranges[4][2] = {{1, 3}, {2, 9}, {0, 1}, {4, 9}};
  for (int axis = 0; axis < 4; axis++) {
    check_slice(DT_F32, 4, sd, axis, ranges[axis][0], ranges[axis][1]);
    check_slice(DT_BF16, 4, sd, axis, 0, sd[axis]);
  }
  check_slice(DT_F32, 3, (int64_t[]){2, 64, 10240}, 2, 5120, 10240); /* geglu's halves */
  check_slice(DT_F32, 3, (int64_t[]){2, 64, 10240}, 2, 0, 5120);
  check_slice(DT_F32, 2, (int64_t[]){4, 300000}, 1, 7, 299999);      /* runs longer than a chunk */
}

/* ---- cast ------------------------------------------------------------------------- */

static void cast_case(dc_dtype from, dc_dtype to, const void *data, int64_t n, const char *label) {
  dc_module *m = dc_module_create();
  int32_t x = input_of(m, from, 1, &n);
  dc_node node = dc_node_make(OP_CAST, 1, &x);
  node.type = (dc_type){to, 1, {n}};
  int32_t y = kh_node(m, node);
  char what[48];
  snprintf(what, sizeof what, "cast %s>%s %s", dc_dtype_name(from), dc_dtype_name(to), label);
  run_all(m, y, what, (const void *const[]){data}, 0, 1);
  dc_module_destroy(m);
}

/* Every code of a 16- or 8-bit format (plus a few so the length is odd). */
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

/* f32 inputs that exercise f16/bf16 rounding: every f16 and bf16 value, the
 * exact midpoints between neighbours (ties) and one ulp either side,
 * specials, and random bit patterns. */
static float *rounding_cases(int64_t *n) {
  int64_t cap = 2 * 65536 * 4 + (1 << 20) + 64, k = 0;
  float *v = malloc(sizeof(float) * (size_t)cap);
  for (uint32_t h = 0; h < 65536; h++) {
    float a = dc_f16_to_f32((uint16_t)h), b = dc_f16_to_f32((uint16_t)(h + 1));
    float c = dc_bf16_to_f32((uint16_t)h), d = dc_bf16_to_f32((uint16_t)(h + 1));
    v[k++] = a;
    if ((h & 0x7c00) != 0x7c00 && ((h + 1) & 0x7c00) != 0x7c00 && (h & 0x7fff) != 0x7fff) {
      float mid = (float)(((double)a + (double)b) / 2);
      v[k++] = mid;
      v[k++] = dc_f32_from_bits(dc_f32_bits(mid) + 1);
      v[k++] = dc_f32_from_bits(dc_f32_bits(mid) - 1);
    }
    v[k++] = c;
    v[k++] = dc_f32_from_bits(dc_f32_bits(c) | 0x8000); /* bf16 ties */
    v[k++] = dc_f32_from_bits(dc_f32_bits(c) | 0x8001);
    v[k++] = dc_f32_from_bits(dc_f32_bits(c) | 0x7fff);
    (void)d;
  }
  static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                                     0x7fbfffffu, 0xff812345u, 0x00000001u, 0x80000001u, 0x007fffffu,
                                     0x00800000u, 0x477ff000u, 0x477fefffu, 0x38800000u, 0x387fffffu,
                                     0x33000000u, 0x33000001u, 0x32ffffffu, 0x7f7fffffu, 0xff7fffffu};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) v[k++] = dc_f32_from_bits(special[i]);
  for (int i = 0; i < (1 << 20); i++) v[k++] = dc_f32_from_bits(next_u32());
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
    if (dc_dtype_size(narrow[i]) == 2) /* the reference casts to f32, f16 and bf16 only */
      cast_case(narrow[i], narrow[i], codes, n, "all codes (copy)");
    free(codes);
  }
  int64_t n;
  float *v = rounding_cases(&n);
  cast_case(DT_F32, DT_F16, v, n, "ties, specials, random");
  cast_case(DT_F32, DT_BF16, v, n, "ties, specials, random");
  cast_case(DT_F32, DT_F32, v, n, "(copy)");
  cast_case(DT_F32, DT_F16, v, 1, "1 element");
  cast_case(DT_F32, DT_BF16, v + 3, 17, "17 elements");
  free(v);
}

/* ---- benchmarks -------------------------------------------------------------- */
static void bench(const char *what, dc_module *m, int32_t y, double bytes) {
  for (int threads = 1; threads <= 2; threads++) {
    double s;
    dc_status *st = kh_time(m, y, threads, 20, &s);
    CHECK_OK(st);
    if (!st) printf("bench %-28s %d thread(s): %8.3f ms, %6.1f GB/s\n", what, threads, s * 1e3, bytes / s * 1e-9);
  }
}

static void run_benches(void) {
  dc_module *m = dc_module_create();
  int32_t y = norm_node(m, OP_GROUP_NORM, 4, (int64_t[]){2, 320, 64, 64}, 32, ACT_SILU);
  bench("group_norm+silu 2x320x64x64", m, y, 2.0 * 4 * 2 * 320 * 64 * 64);
  dc_module_destroy(m);
  m = dc_module_create();
  y = norm_node(m, OP_LAYER_NORM, 2, (int64_t[]){8192, 320}, 0, ACT_NONE);
  bench("layer_norm 8192x320", m, y, 2.0 * 4 * 8192 * 320);
  dc_module_destroy(m);
  /* The UNet's [B,C,HW] -> [B,HW,C] transpose and a cast, for scale. */
  m = dc_module_create();
  int32_t x = kh_input(m, 3, (int64_t[]){2, 320, 4096});
  dc_node n = dc_node_make(OP_PERMUTE, 1, &x);
  n.nlist = 3;
  memcpy(n.list, (int64_t[]){0, 2, 1}, 3 * sizeof(int64_t));
  bench("permute 2x320x4096 (0,2,1)", m, kh_node(m, n), 2.0 * 4 * 2 * 320 * 4096);
  dc_module_destroy(m);
  m = dc_module_create();
  x = input_of(m, DT_BF16, 2, (int64_t[]){4096, 2560});
  n = dc_node_make(OP_CAST, 1, &x);
  n.type = (dc_type){DT_F32, 2, {4096, 2560}};
  bench("cast bf16>f32 4096x2560", m, kh_node(m, n), 6.0 * 4096 * 2560);
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  check_norms();
  check_time_embeds();
  check_moves();
  check_casts();
  const char *b = getenv("DIFFC_BENCH");
  if (b && atoi(b) == 1) run_benches();
  return tu_finish();
}
