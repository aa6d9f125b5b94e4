/* test_progress.c — compile progress (support/progress.h) through
 * dc_compile's callback, on the vae_tiny decoder with --storage-dtype bf16
 * (so the converted weights are written too):
 *  - the stages arrive in order: building graph, passes, writing weights,
 *    kernels, writing plan, each counted stage starting at 0/total;
 *  - the kernel count goes 0..M one step at a time (the pool's threads
 *    report under one lock), its cache hits never above it, and ends at M =
 *    the module's distinct kernel signatures (what -v calls distinct LLVM
 *    kernels; two of them may have equal code, linked once in the plan);
 *  - a cold compile into an empty kernel cache counts as hits at most those
 *    duplicates (a signature whose code another one already put there);
 *    the same compile again counts all M as hits;
 *  - the weight bytes end at the bytes of the weights file beside the plan;
 *  - a pause event (stage NULL) comes before the -v lines. */
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_group.h"
#include "codegen/llvm/kgen.h"
#include "driver/compile.h"
#include "plan/plan_format.h"
#include "testutil.h"

#define MAX_EVENTS 4096

typedef struct {
  dc_progress_event e[MAX_EVENTS];
  char stage[MAX_EVENTS][32];
  int n, overflow;
} recording;

static void record(void *ctx, const dc_progress_event *e) {
  recording *r = ctx;
  if (r->n == MAX_EVENTS) {
    r->overflow = 1;
    return;
  }
  r->e[r->n] = *e;
  snprintf(r->stage[r->n], sizeof r->stage[0], "%s", e->stage ? e->stage : "");
  r->e[r->n].stage = e->stage ? r->stage[r->n] : NULL;
  r->n++;
}

static dc_input_shape z = {"z", 4, {1, 4, 8, 8}};

static dc_compile_options options(const char *model, const char *cache, int verbose, recording *r) {
  dc_compile_options o = {.model = model, .entry = "decode", .shapes = &z, .nshapes = 1, .kernel_cache = cache,
                          .verbose = verbose, .progress = record, .progress_ctx = r};
  o.memory.storage = DT_BF16;
  return o;
}

static dc_status *compile(const char *model, const char *cache, const char *plan, int verbose, recording *r) {
  dc_compile_options o = options(model, cache, verbose, r);
  memset(r, 0, sizeof *r);
  return dc_compile(&o, plan, NULL);
}

static int has_llvm_kernel(const dc_module *m, int32_t id) { return dc_kgen_emitter_for(m->nodes[id].op) != NULL; }

/* The module's distinct kernel signatures, grouped here as the CPU
 * emitter groups them. */
static int kernel_signatures(const char *model) {
  recording *r = calloc(1, sizeof *r);
  dc_compile_options o = options(model, NULL, 0, r);
  dc_folder f;
  dc_module *m = NULL;
  CHECK_OK(r ? dc_compile_module(&o, &f, &m) : dc_nomem("test"));
  dc_kernel_groups g = {0};
  if (m) CHECK_OK(dc_kernel_groups_build(m, has_llvm_kernel, NULL, &g));
  int n = g.nreps;
  dc_kernel_groups_deinit(&g);
  dc_module_destroy(m);
  dc_folder_close(&f);
  free(r);
  return n;
}

/* The stages in order, each once (repeats of the one before collapsed). */
static void check_stage_order(const recording *r) {
  static const char *const want[] = {"building graph", "passes", "writing weights", "kernels", "writing plan"};
  int k = 0, ok = 1;
  const char *last = "";
  for (int i = 0; i < r->n; i++) {
    const char *s = r->e[i].stage;
    if (!s || !strcmp(s, last)) continue;
    ok &= k < 5 && !strcmp(s, want[k]);
    if (k < 5 && strcmp(s, want[k])) fprintf(stderr, "stage %d: got \"%s\", want \"%s\"\n", k, s, want[k]);
    k++;
    last = s;
  }
  CHECK(ok && k == 5);
}

/* A counted stage's events: 0/total first, then done rising one unit
 * (kernels) or by a weight's bytes, ending at total.  Returns the last. */
static dc_progress_event check_count(const recording *r, const char *stage, int unit_steps) {
  dc_progress_event last = {0};
  int seen = 0, ok = 1;
  for (int i = 0; i < r->n; i++) {
    const dc_progress_event *e = &r->e[i];
    if (!e->stage || strcmp(e->stage, stage)) continue;
    if (!seen) ok &= e->done == 0 && e->cached == 0 && e->total > 0;
    else ok &= e->total == last.total && e->done > last.done && (!unit_steps || e->done == last.done + 1) &&
               e->cached >= last.cached && e->cached <= e->done;
    seen++;
    last = *e;
  }
  CHECK(ok && seen >= 2 && last.done == last.total);
  return last;
}

/* Distinct kernel symbols of the plan's nodes. */
static int plan_kernels(const char *path) {
  dc_plan p;
  memset(&p, 0, sizeof p);
  CHECK_OK(dc_plan_read(path, &p));
  int n = 0;
  for (int i = 0; i < p.kernels.nentries; i++) {
    int first = 1;
    for (int j = 0; j < i && first; j++) first = strcmp(p.kernels.entries[i].symbol, p.kernels.entries[j].symbol) != 0;
    n += first;
  }
  dc_plan_deinit(&p);
  return n;
}

static uint64_t file_tensor_bytes(const char *path) {
  dc_st_file f;
  CHECK_OK(dc_st_open(path, &f));
  uint64_t n = 0;
  for (int i = 0; i < f.ntensors; i++) n += f.tensors[i].bytes;
  dc_st_close(&f);
  return n;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  char *model = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model");
  char *cache = tu_path("kcache"), *plan = tu_path("p.dplan"), *weights = tu_path("p.dplan.weights.safetensors");
  recording *r = calloc(1, sizeof *r);
  if (!r) return 1;

  CHECK_OK(compile(model, cache, plan, 0, r));
  CHECK(!r->overflow);
  check_stage_order(r);
  dc_progress_event k = check_count(r, "kernels", 1);
  int m = kernel_signatures(model), linked = plan_kernels(plan);
  CHECK(m > 10 && k.total == m && linked <= m && k.cached <= m - linked);
  dc_progress_event w = check_count(r, "writing weights", 0);
  uint64_t wbytes = file_tensor_bytes(weights);
  CHECK(wbytes > 0 && (uint64_t)w.total == wbytes);
  printf("cold compile: %d events; kernels 0..%lld of %d signatures (%d distinct objects in the plan), %lld cached; "
         "weights %lld of %llu bytes\n",
         r->n, (long long)k.done, m, linked, (long long)k.cached, (long long)w.done, (unsigned long long)wbytes);

  CHECK_OK(compile(model, cache, plan, 0, r));
  check_stage_order(r);
  k = check_count(r, "kernels", 1);
  CHECK(k.total == m && k.cached == m);
  printf("warm compile: kernels %lld/%lld, all %lld from the cache\n", (long long)k.done, (long long)k.total,
         (long long)k.cached);

  /* with -v the stages print lines of their own: a pause comes first */
  CHECK_OK(compile(model, cache, plan, 1, r));
  int pause_after_passes = 0;
  for (int i = 1; i < r->n; i++)
    pause_after_passes |= !r->e[i].stage && r->e[i - 1].stage && !strcmp(r->e[i - 1].stage, "passes");
  CHECK(pause_after_passes);

  free(r);
  dc_free(model), free(cache), free(plan), free(weights);
  return tu_finish();
}
