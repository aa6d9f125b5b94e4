/* kernel_harness.c — see kernel_harness.h. */
#include "kernel_harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/kernel_cache.h"
#include "codegen/llvm/llvm_codegen.h"
#include "runtime/cpu_kernels.h"
#include "runtime/kernels.h"
#include "support/threadpool.h"

int32_t kh_input(dc_module *m, int rank, const int64_t *dims) {
  dc_type t = {DT_F32, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  char name[32];
  snprintf(name, sizeof name, "in%d", m->ninputs);
  return dc_module_add_input(m, name, &t, INIT_NORMAL);
}

int32_t kh_node(dc_module *m, dc_node n) {
  dc_status *st = dc_infer_type(m, &n, &n.type);
  if (st) {
    fprintf(stderr, "kh_node: %s\n", dc_status_message(st));
    dc_status_free(st);
    return -1;
  }
  if (n.layout != LAYOUT_NHWC) n.layout = n.type.rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  return dc_module_add_node(m, &n);
}

static float *random_data(size_t n, uint64_t *s, double scale) {
  float *d = malloc(n * sizeof *d + 64);
  for (size_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    d[i] = (float)(scale * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
  }
  return d;
}

typedef struct {
  dc_cpu_kernel_fn fn;
  void **bufs;
  uint8_t *scratch;
  uint64_t scratch_bytes;
  int nbufs;
} launch;

/* One part of the kernel's split, with the running thread's scratch. */
static void run_kernel(void *ctx, int64_t part, int64_t nparts, int thread) {
  launch *l = ctx;
  void *bufs[8];
  memcpy(bufs, l->bufs, sizeof(void *) * (size_t)l->nbufs);
  bufs[l->nbufs] = l->scratch + (size_t)thread * l->scratch_bytes;
  l->fn(bufs, part, nparts);
}

dc_status *kh_target(dc_cpu_target *t) {
  const char *name = getenv("DIFFC_TEST_CPU");
  DC_TRY(dc_cpu_target_named(name && *name ? name : "native", t));
  char *missing = NULL;
  if (dc_cpu_target_runs_here(t, &missing)) return NULL;
  printf("SKIP: DIFFC_TEST_CPU=%s: this machine lacks %s\n", name, missing ? missing : "its features");
  fflush(stdout);
  dc_free(missing);
  dc_cpu_target_deinit(t); /* nothing left for LeakSanitizer to report at exit */
  exit(77);
}

static dc_kcache kcache;
static int kcache_open;

dc_status *kh_finish_cached(dc_llvm *g, dc_cpu_kernel *ck, dc_buf *obj) {
  if (!kcache_open) {
    DC_TRY(dc_kcache_open(NULL, 0, "cpu", &kcache));
    kcache_open = 1; /* open for the process's life */
  }
  uint64_t key = 0;
  DC_TRY(dc_llvm_kernel_key(g, ck, &key));
  dc_kernel_image img;
  if (dc_kcache_get(&kcache, key, &img)) {
    dc_buf_append(obj, img.image.data, img.image.len);
    dc_kernel_image_deinit(&img);
    return dc_buf_status(obj, "reading a cached kernel");
  }
  dc_kernel_image_deinit(&img);
  DC_TRY(dc_llvm_finish(g, obj));
  img = (dc_kernel_image){*obj, NULL};
  dc_kcache_put(&kcache, key, &img);
  return NULL;
}

static kh_options options = {1, NULL};
static char last_symbol[160];

void kh_set_options(const kh_options *o) { options = o ? *o : (kh_options){1, NULL}; }

const char *kh_last_symbol(void) { return last_symbol; }

dc_status *kh_compile_kernel(const dc_module *m, int32_t id, dc_cpu_target *t, int winograd, dc_plan_kernels *k) {
  memset(k, 0, sizeof *k);
  dc_llvm *g = NULL;
  dc_cpu_kernel ck = {0};
  int has = 0;
  dc_buf obj;
  dc_buf_init(&obj);
  dc_status *st = dc_llvm_create(t, &g);
  if (!st) dc_llvm_set_winograd(g, winograd);
  if (!st) st = dc_llvm_emit_node(g, m, id, &ck, &has);
  if (!st && !has) st = dc_error(DC_ERR_UNSUPPORTED, "op %s has no LLVM kernel", dc_op_get(m->nodes[id].op)->name);
  if (!st) st = kh_finish_cached(g, &ck, &obj);
  dc_llvm_destroy(g);
  k->triple = t->triple, k->cpu = t->cpu, k->features = t->features; /* now k's */
  dc_free(t->tune);
  k->objects = st ? NULL : dc_calloc(1, sizeof *k->objects);
  k->entries = st ? NULL : dc_calloc(1, sizeof *k->entries);
  if (!st && (!k->objects || !k->entries)) st = dc_nomem("kernel object");
  if (st) {
    dc_buf_deinit(&obj);
    dc_free(ck.symbol);
    return st;
  }
  k->objects[0] = (dc_plan_object){obj.data, obj.len};
  k->nobjects = 1;
  k->entries[0] = (dc_plan_kernel){id, ck.symbol, ck.scratch_bytes};
  k->nentries = 1;
  return NULL;
}

static dc_status *compile_node(const dc_module *m, int32_t id, dc_plan_kernels *k) {
  dc_cpu_target t;
  if (options.cpu) DC_TRY(dc_cpu_target_named(options.cpu, &t));
  else DC_TRY(kh_target(&t));
  DC_TRY(kh_compile_kernel(m, id, &t, options.winograd, k));
  snprintf(last_symbol, sizeof last_symbol, "%s", k->entries[0].symbol);
  return NULL;
}

/* The kernel of node id, compiled, linked and ready to run on a pool. */
typedef struct {
  dc_plan_kernels k;
  dc_cpu_code *code;
  dc_cpu_kernel_fn *fns;
  dc_pool *pool;
} compiled;

static dc_status *compiled_init(const dc_module *m, int32_t id, int nthreads, compiled *c) {
  memset(c, 0, sizeof *c);
  c->fns = calloc((size_t)m->nnodes, sizeof *c->fns);
  dc_status *st = compile_node(m, id, &c->k);
  if (!st) st = dc_cpu_code_load("kernel test", &c->k, m->nnodes, &c->code, c->fns);
  if (!st) st = dc_pool_create(nthreads, &c->pool);
  return st;
}

static void compiled_deinit(compiled *c) {
  dc_pool_destroy(c->pool);
  dc_cpu_code_destroy(c->code);
  dc_plan_kernels_deinit(&c->k);
  free(c->fns);
}

/* One run of the kernel writing out, reading inputs in[0..). */
static void compiled_run(compiled *c, const dc_node *n, int32_t id, const void *const *in, void *out) {
  void *bufs[8] = {out};
  for (int i = 0; i < n->ninputs; i++) bufs[i + 1] = (void *)in[i];
  launch l = {c->fns[id], bufs, NULL, c->k.entries[0].scratch_bytes, n->ninputs + 1};
  int nt = dc_pool_size(c->pool);
  if (posix_memalign((void **)&l.scratch, 64, l.scratch_bytes * (size_t)nt + 64)) return;
  /* more parts than threads, as diffrun cuts big steps (cpu_backend.c parts_for) */
  dc_pool_run(c->pool, nt, nt > 1 ? 3 * nt + 1 : 1, run_kernel, &l);
  free(l.scratch);
}

static void compare_f32(size_t numel, const float *got, const float *want, kh_result *out);

/* bf16 / f16 outputs (activations) are compared as the f32 values they hold. */
static void compare_widened(const dc_type *t, const void *got_, const void *want_, kh_result *out) {
  size_t numel = dc_type_numel(t);
  float *got = malloc(numel * sizeof *got + 4), *want = malloc(numel * sizeof *want + 4);
  if (got && want) {
    const uint16_t *g16 = got_, *w16 = want_;
    for (size_t i = 0; i < numel; i++) {
      got[i] = t->dtype == DT_BF16 ? dc_bf16_to_f32(g16[i]) : dc_f16_to_f32(g16[i]);
      want[i] = t->dtype == DT_BF16 ? dc_bf16_to_f32(w16[i]) : dc_f16_to_f32(w16[i]);
    }
    compare_f32(numel, got, want, out);
  }
  free(got), free(want);
}

void kh_compare_out(const dc_type *t, const void *got_, const void *want_, kh_result *out) {
  size_t numel = dc_type_numel(t);
  out->bit_exact = memcmp(got_, want_, (size_t)dc_type_bytes(t)) == 0;
  out->max_abs = out->rel_l2 = out->max_rel = out->bit_exact ? 0 : INFINITY;
  if (out->bit_exact) return;
  if (t->dtype == DT_BF16 || t->dtype == DT_F16) compare_widened(t, got_, want_, out);
  if (t->dtype == DT_F32) compare_f32(numel, got_, want_, out);
}

static void compare_f32(size_t numel, const float *got, const float *want, kh_result *out) {
  double d2 = 0, r2 = 0, maxabs = 0, maxrel = 0;
  for (size_t i = 0; i < numel; i++) {
    if (isnan(got[i]) && isnan(want[i])) continue;
    double d = (double)got[i] - want[i];
    if (isnan(got[i]) || isnan(want[i]) || isinf(d)) d = INFINITY;
    else if (isinf(want[i])) d = 0; /* equal infinities */
    d2 += d * d;
    if (isfinite(want[i])) r2 += (double)want[i] * want[i];
    if (!(fabs(d) <= maxabs)) maxabs = fabs(d);
    if (fabs(want[i]) >= 1e-30 && !(fabs(d) / fabs(want[i]) <= maxrel)) maxrel = fabs(d) / fabs(want[i]);
  }
  out->max_abs = maxabs;
  out->max_rel = maxrel;
  out->rel_l2 = sqrt(d2 / (r2 > 0 ? r2 : 1));
}

/* alias >= 0: the kernel's output buffer is (a copy of) input `alias`;
 * then *same says whether that gave the bits of a separate output buffer. */
static dc_status *compare(const dc_module *m, int32_t id, int nthreads, const void *const *in, int alias,
                          kh_result *out, int *same) {
  const dc_node *n = &m->nodes[id];
  size_t bytes = (size_t)dc_type_bytes(&n->type);
  uint8_t *want = malloc(bytes + 64), *got = malloc(bytes + 64);
  const void *kin[DC_MAX_INPUTS];
  memset(got, 0xff, bytes + 64); /* NaN where f32: unwritten elements show */
  memset(want, 0, bytes + 64);
  for (int i = 0; i < n->ninputs; i++) kin[i] = in[i];
  if (alias >= 0) {
    memcpy(got, in[alias], bytes);
    kin[alias] = got;
  }
  compiled c = {0};
  dc_status *st = dc_ref_kernel_for(n->op)(m, n, in, want);
  if (!st) st = compiled_init(m, id, nthreads, &c);
  if (!st) {
    compiled_run(&c, n, id, kin, got);
    kh_compare_out(&n->type, got, want, out);
  }
  if (!st && same) {
    uint8_t *sep = malloc(bytes + 64);
    memset(sep, 0xff, bytes + 64);
    compiled_run(&c, n, id, in, sep);
    *same = memcmp(sep, got, bytes) == 0;
    free(sep);
  }
  compiled_deinit(&c);
  free(want);
  free(got);
  return st;
}

dc_status *kh_compare_with(const dc_module *m, int32_t id, int nthreads, const void *const *in, kh_result *out) {
  return compare(m, id, nthreads, in, -1, out, NULL);
}

static void **random_inputs(const dc_module *m, const dc_node *n, uint64_t seed, double scale) {
  void **in = calloc(DC_MAX_INPUTS, sizeof *in);
  uint64_t s = seed;
  for (int i = 0; i < n->ninputs; i++) in[i] = random_data(dc_type_numel(&m->nodes[n->inputs[i]].type), &s, scale);
  return in;
}

static void free_inputs(void **in) {
  for (int i = 0; i < DC_MAX_INPUTS; i++) free(in[i]);
  free(in);
}

dc_status *kh_compare(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale, kh_result *out) {
  void **in = random_inputs(m, &m->nodes[id], seed, scale);
  dc_status *st = compare(m, id, nthreads, (const void *const *)in, -1, out, NULL);
  free_inputs(in);
  return st;
}

dc_status *kh_compare_inplace(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale,
                              kh_result *out) {
  void **in = random_inputs(m, &m->nodes[id], seed, scale);
  dc_status *st = compare(m, id, nthreads, (const void *const *)in, 0, out, NULL);
  free_inputs(in);
  return st;
}

dc_status *kh_compare_aliased(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale, int input,
                              kh_result *out, int *same) {
  const dc_node *n = &m->nodes[id];
  if (input < 0 || input >= n->ninputs || !dc_type_equal(&m->nodes[n->inputs[input]].type, &n->type))
    return dc_error(DC_ERR_ARGUMENT, "kh_compare_aliased: input %d of %%%d is not output-shaped", input, id);
  void **in = random_inputs(m, n, seed, scale);
  dc_status *st = compare(m, id, nthreads, (const void *const *)in, input, out, same);
  free_inputs(in);
  return st;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dc_status *kh_time(const dc_module *m, int32_t id, int nthreads, int iters, double *seconds) {
  const dc_node *n = &m->nodes[id];
  void **in = random_inputs(m, n, 1, 1.0);
  void *y = malloc((size_t)dc_type_bytes(&n->type) + 64);
  compiled c = {0};
  dc_status *st = compiled_init(m, id, nthreads, &c);
  *seconds = INFINITY;
  for (int it = 0; !st && it <= iters; it++) {
    double t0 = now_s();
    compiled_run(&c, n, id, (const void *const *)in, y);
    double t = now_s() - t0;
    if (it > 0 && t < *seconds) *seconds = t; /* the first run warms caches and pages */
  }
  compiled_deinit(&c);
  free(y);
  free_inputs(in);
  return st;
}
