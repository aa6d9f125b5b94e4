/* test_alloc_sweep.c — allocation failure across the whole compiler and the
 * plan loader (issue 6, part 3): the Nth host allocation fails, for
 * N = 0, 1, 2, ... until the operation succeeds, and every failure must be a
 * clean error (the sanitizer build in CI checks that nothing leaks and
 * nothing is touched after free; a crash fails the test outright).
 *  - the front half of diffc (folder, config, frontend, every pass,
 *    offload, tiling, then also layout and placement) on vae_tiny with the
 *    memory techniques on: every N;
 *  - the whole of dc_compile (plus the fit table, LLVM kernels, plan
 *    writing): every N;
 *  - drt_load of a plan, reference and llvm backends: every N.
 * The plan path must never hold a partial file after a failed compile. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/compile.h"
#include "runtime/diffrun.h"
#include "testutil.h"

/* Runs op with the Nth allocation failing, N = 0.. until it succeeds (at
 * most max_n), every `stride`th N past `dense`; returns the N that passed. */
typedef dc_status *(*op_fn)(void *ctx);

static long sweep(const char *what, op_fn op, void *ctx, long dense, long stride, long max_n, int (*leftover)(void *)) {
  long n = 0, failures = 0;
  for (;; n += n < dense ? 1 : stride) {
    dc_alloc_fail_after(n);
    dc_status *st = op(ctx);
    dc_alloc_fail_after(-1);
    if (!st) break;
    failures++;
    if (dc_status_code_of(st) != DC_ERR_NOMEM) {
      /* Some failures surface as another error (e.g. a writer that could not
       * allocate reports the write); a message is all that is required. */
      CHECK(dc_status_message(st)[0] != 0);
    }
    dc_status_free(st);
    if (leftover) CHECK(!leftover(ctx));
    if (n > max_n) {
      CHECK(!"the operation never succeeded");
      break;
    }
  }
  printf("%-44s %5ld failure points, each a clean error; succeeds from N = %ld\n", what, failures, n);
  return n;
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
                              .memory = {DC_OFFLOAD_GROUP, DC_GROUP_BLOCK, 1, 1}};
  long before = dc_alloc_count();
  CHECK_OK(front_half(&c));
  long front = dc_alloc_count() - before;
  sweep("frontend + passes (tiled, sliced, offloaded)", front_half, &c, front + 1, 1, front + 10, NULL);

  /* channels_last and two devices on top (passes layout and place) */
  c.co.memory.layout = LAYOUT_NHWC;
  c.co.memory.device_map = DC_MAP_BALANCED;
  CHECK_OK(dc_parse_max_memory("0=1GiB,1=1GiB", &c.co.memory.max_memory));
  before = dc_alloc_count();
  CHECK_OK(front_half(&c));
  front = dc_alloc_count() - before;
  sweep("frontend + passes (nhwc, two devices, offloaded)", front_half, &c, front + 1, 1, front + 10, NULL);

  c.shape = (dc_input_shape){"z", 4, {1, 4, 4, 4}};
  c.co.vae_slicing = c.co.vae_tiling = 0; /* the whole compile: nhwc (its weights repacked into a file), two devices */
  before = dc_alloc_count();
  CHECK_OK(whole(&c));
  long all = dc_alloc_count() - before;
  remove(plan);
  sweep("dc_compile (frontend .. kernels .. plan file)", whole, &c, all + 1, 1, all + 10, plan_left);
  CHECK_OK(whole(&c));

  load_ctx l = {plan, "reference"};
  sweep("drt_load + drt_run, reference backend", load, &l, 1L << 30, 1, 1L << 20, NULL);
  l.backend = "llvm";
  sweep("drt_load + drt_run, llvm backend", load, &l, 1L << 30, 1, 1L << 20, NULL);
  dc_free(model);
  free(plan);
  return tu_finish();
}
