/* test_alloc_sweep.c — allocation failure across the whole compiler and the
 * plan loader (issue 6, part 3): the Nth host allocation fails, for
 * N = 0, 1, 2, ... until the operation succeeds, and every failure must be a
 * clean error (the sanitizer build in CI checks that nothing leaks and
 * nothing is touched after free; a crash fails the test outright).
 *  - the front half of diffc (folder, config, frontend, every pass,
 *    offload, tiling, then also layout and placement) on vae_tiny with the
 *    memory techniques on: every N;
 *  - LLVM kernels and the plan file on a small graph (conv2d + group_norm:
 *    dc_emit_cpu_kernels, dc_plan_write): every N, compiled by LLVM, and
 *    again with every kernel read from a warm kernel cache;
 *  - the whole of dc_compile on vae_tiny (plus the fit table, LLVM kernels
 *    of 21 distinct ops, no kernel cache, plan writing): every N up to the
 *    kernels, then 16
 *    points spread evenly over the kernels and the writer, and the last.
 *    Each point past the kernels' compile pays for compiling all of them
 *    again, so sweeping every one of those took most of this test's time
 *    (659 s on 2 loaded cores); the small graph sweeps the same code at
 *    every point;
 *  - drt_load of a plan, reference and llvm backends: every N.
 * The plan path must never hold a partial file after a failed compile or
 * write. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "driver/compile.h"
#include "codegen/emit_kernels.h"
#include "driver/weight_store.h"
#include "kernel_harness.h"
#include "runtime/diffrun.h"
#include "plan/plan_format.h"
#include "testutil.h"

typedef dc_status *(*op_fn)(void *ctx);

/* Runs op with the nth allocation (and every one after) failing: 1 when it
 * failed, as it must, cleanly (a message, nothing left behind), 0 when it
 * succeeded (n is past its last allocation). */
static int fails_at(long n, op_fn op, void *ctx, int (*leftover)(void *)) {
  dc_alloc_fail_after(n);
  dc_status *st = op(ctx);
  dc_alloc_fail_after(-1);
  if (!st) return 0;
  if (dc_status_code_of(st) != DC_ERR_NOMEM) {
    /* Some failures surface as another error (e.g. a writer that could not
     * allocate reports the write); a message is all that is required. */
    CHECK(dc_status_message(st)[0] != 0);
  }
  dc_status_free(st);
  if (leftover) CHECK(!leftover(ctx));
  return 1;
}

/* Every N = 0, 1, .. until op succeeds (at most max_n); returns that N. */
static long sweep(const char *what, op_fn op, void *ctx, long max_n, int (*leftover)(void *)) {
  long n = 0;
  double t0 = dc_now_seconds();
  for (; fails_at(n, op, ctx, leftover); n++)
    if (n > max_n) {
      CHECK(!"the operation never succeeded");
      break;
    }
  printf("%-52s %5ld failure points, each a clean error; succeeds from N = %ld (%.1f s)\n", what, n, n,
         dc_now_seconds() - t0);
  return n;
}

/* N = 0 .. dense-1, then `spread` points evenly over [dense, all), then the
 * given extra points (all: op's allocation count); each must fail cleanly,
 * and op must succeed after. */
static void sweep_spread(const char *what, op_fn op, void *ctx, long dense, long all, int spread, const long *extra,
                         int nextra, int (*leftover)(void *)) {
  double t0 = dc_now_seconds();
  long failures = 0, points = 0;
  for (long n = 0; n < dense; n++, points++) failures += fails_at(n, op, ctx, leftover);
  for (int i = 0; i < spread; i++, points++) failures += fails_at(dense + (all - dense) * i / spread, op, ctx, leftover);
  for (int i = 0; i < nextra; i++, points++) failures += fails_at(extra[i], op, ctx, leftover);
  CHECK(failures == points);
  CHECK_OK(op(ctx));
  printf("%-52s %5ld failure points (every N < %ld, %d spread over the %ld after, %d more), each a clean error "
         "(%.1f s)\n", what, failures, dense, spread, all - dense, nextra, dc_now_seconds() - t0);
}

typedef struct {
  dc_compile_options co;
  const char *plan;
  dc_input_shape shape;
} compile_ctx;

static dc_status *front_half(void *p) {
  compile_ctx *c = p;
  dc_folder f;
  dc_module *m = NULL;
  dc_status *st = dc_compile_module(&c->co, &f, &m);
  dc_module_destroy(m);
  dc_folder_close(&f);
  return st;
}

static dc_status *whole(void *p) {
  compile_ctx *c = p;
  return dc_compile(&c->co, c->plan, NULL);
}

static int plan_left(void *p) {
  struct stat sb;
  return stat(((compile_ctx *)p)->plan, &sb) == 0;
}

/* The small graph: x -> conv2d(+bias, silu) -> group_norm -> y, compiled
 * into LLVM kernels and written as a plan. */
typedef struct {
  dc_module *m;
  dc_cpu_target t;
  const char *path;
  const char *cache_dir; /* NULL: LLVM compiles every kernel, no cache */
} small_ctx;

static dc_module *small_graph(void) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 4, (int64_t[]){1, 4, 6, 5}), w = kh_input(m, 4, (int64_t[]){8, 4, 3, 3});
  int32_t b = kh_input(m, 1, (int64_t[]){8}), g = kh_input(m, 1, (int64_t[]){8}), beta = kh_input(m, 1, (int64_t[]){8});
  dc_node conv = dc_node_make(OP_CONV2D, 3, (int32_t[]){x, w, b});
  dc_node_set_int(&conv, "bias", 1);
  dc_node_set_int(&conv, "stride", 1);
  dc_node_set_int(&conv, "pad_t", 1), dc_node_set_int(&conv, "pad_l", 1);
  dc_node_set_int(&conv, "pad_b", 1), dc_node_set_int(&conv, "pad_r", 1);
  dc_node_set_int(&conv, "act", ACT_SILU);
  int32_t c = kh_node(m, conv);
  dc_node gn = dc_node_make(OP_GROUP_NORM, 3, (int32_t[]){c, g, beta});
  dc_node_set_int(&gn, "groups", 2);
  dc_node_set_float(&gn, "eps", 1e-5);
  int32_t y = c >= 0 ? kh_node(m, gn) : -1;
  CHECK(y >= 0);
  CHECK_OK(y >= 0 ? dc_module_add_output(m, "y", y) : NULL);
  CHECK_OK(dc_memplan(m, NULL));
  return m;
}

static dc_status *emit_and_write(void *p) {
  small_ctx *c = p;
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = (char *)"{}", .ir_text = (char *)"", .module = c->m};
  dc_cpu_emit_options eo = {.cache_dir = c->cache_dir, .no_cache = !c->cache_dir};
  dc_status *st = dc_emit_cpu_kernels(c->m, &c->t, &eo, &plan.kernels);
  if (!st) st = dc_plan_write(c->path, &plan);
  dc_plan_kernels_deinit(&plan.kernels);
  return st;
}

static int small_left(void *p) {
  struct stat sb;
  return stat(((small_ctx *)p)->path, &sb) == 0;
}

typedef struct {
  const char *plan, *backend;
} load_ctx;

static dc_status *load(void *p) {
  load_ctx *c = p;
  drt_options o = {.backend = c->backend, .threads = 1};
  drt_plan *pl = NULL;
  dc_status *st = drt_load(c->plan, &o, &pl);
  if (!st) {
    drt_set_random_inputs(pl, 1);
    st = drt_run(pl, NULL);
  }
  drt_destroy(pl);
  return st;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  char *model = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model"), *plan = tu_path("sweep.dplan");
  compile_ctx c = {.plan = plan, .shape = {"z", 4, {2, 4, 20, 20}}};
  c.co = (dc_compile_options){.model = model,
                              .entry = "decode",
                              .shapes = &c.shape,
                              .nshapes = 1,
                              .vae_slicing = 1,
                              .vae_tiling = 1,
                              .no_kernel_cache = 1, /* LLVM's compile under every failure, not a cache hit */
                              .memory = {DC_OFFLOAD_GROUP, DC_GROUP_BLOCK, 1, 1}};
  CHECK_OK(front_half(&c));
  sweep("frontend + passes (tiled, sliced, offloaded)", front_half, &c, 1L << 20, NULL);

  /* channels_last and two devices on top (passes layout and place) */
  c.co.memory.layout = LAYOUT_NHWC;
  c.co.memory.device_map = DC_MAP_BALANCED;
  CHECK_OK(dc_parse_max_memory("0=1GiB,1=1GiB", &c.co.memory.max_memory));
  CHECK_OK(front_half(&c));
  sweep("frontend + passes (nhwc, two devices, offloaded)", front_half, &c, 1L << 20, NULL);

  small_ctx sm = {small_graph(), {0}, tu_path("small.dplan"), NULL};
  CHECK_OK(kh_target(&sm.t));
  sweep("LLVM kernels + plan file, conv2d + group_norm", emit_and_write, &sm, 1L << 20, small_left);
  dc_plan rd;
  CHECK_OK(dc_plan_read(sm.path, &rd)); /* what the sweep's last call wrote is a whole plan */
  dc_plan_deinit(&rd);
  sm.cache_dir = tu_path("kcache");
  CHECK_OK(emit_and_write(&sm)); /* fills the cache: every kernel of the sweep below is a hit */
  remove(sm.path);
  sweep("the same, every kernel from the kernel cache", emit_and_write, &sm, 1L << 20, small_left);
  CHECK_OK(dc_plan_read(sm.path, &rd));
  dc_plan_deinit(&rd);
  free((char *)sm.cache_dir);
  dc_cpu_target_deinit(&sm.t);
  dc_module_destroy(sm.m);
  free((char *)sm.path);

  c.shape = (dc_input_shape){"z", 4, {1, 4, 4, 4}};
  c.co.vae_slicing = c.co.vae_tiling = 0; /* the whole compile: nhwc (its weights repacked into a file), two devices */
  long before = dc_alloc_count();
  CHECK_OK(whole(&c));
  long all = dc_alloc_count() - before;
  remove(plan);
  /* The compile's last allocations are its kernels' and the plan writer's:
   * how many, from emitting and writing the same module once more. */
  dc_folder f;
  small_ctx big = {NULL, {0}, tu_path("big.dplan"), NULL};
  CHECK_OK(dc_compile_module(&c.co, &f, &big.m));
  char *wpath = dc_asprintf("%s.weights.safetensors", big.path); /* the nhwc repack, as dc_compile does first */
  CHECK_OK(big.m ? dc_store_cast_weights(big.m, wpath, 0, NULL) : NULL);
  CHECK_OK(kh_target(&big.t));
  before = dc_alloc_count();
  CHECK_OK(big.m ? emit_and_write(&big) : NULL);
  long tail = dc_alloc_count() - before;
  dc_cpu_target_deinit(&big.t);
  dc_module_destroy(big.m);
  dc_folder_close(&f);
  remove(big.path);
  remove(wpath);
  dc_free(wpath);
  free((char *)big.path);
  CHECK(tail > 0 && tail < all);
  long last[] = {all - 1};
  sweep_spread("dc_compile (frontend .. kernels .. plan file)", whole, &c, all - tail, all, 16, last, 1, plan_left);

  load_ctx l = {plan, "reference"};
  sweep("drt_load + drt_run, reference backend", load, &l, 1L << 20, NULL);
  l.backend = "llvm";
  sweep("drt_load + drt_run, llvm backend", load, &l, 1L << 20, NULL);
  dc_free(model);
  free(plan);
  return tu_finish();
}
