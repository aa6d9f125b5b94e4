/* test_cuda_compile.c — every CUDA kernel of every fixture model compiles.
 *
 * For each run of each tests/fixtures/NAME/case.json (the model, component,
 * variant, entry and the input shapes of its io file, as fixture_check
 * compiles it), the module goes through the frontend and the pass pipeline,
 * then every distinct kernel is generated as dc_emit_cuda_kernels groups
 * and generates them, in f32 compute and (each fixture's first run) as
 * --compute-dtype bf16 compiles it: bf16 activations and weights (passes
 * activation-dtype, cast-weights' storage_all), bf16 compute.  (bf16 compute over f32 activations is no
 * longer a plan diffc makes; the op case table still runs those kernels.)
 * Fixtures share many
 * kernels (the same conv at the same shapes, the elementwise ops), so each
 * distinct source is compiled once per run: every kernel is generated under
 * one entry name (the name is the only part of a source that depends on
 * where the kernel sits in its plan), and the distinct sources are compiled
 * by NVRTC at the end (sm_90; $DIFFC_TEST_CUDA_ARCHS names others, e.g.
 * "sm_80,sm_90").  Any generator error,
 * NVRTC error or NVRTC warning fails the test, printed with the kernel's
 * first use (model, kernel, node), the arch and NVRTC's log; every failure
 * is listed, not only the first.  Last, one fixture goes through
 * dc_compile --target cuda into a plan file, read back and checked (target,
 * options, one kernel per non-leaf node): the production path, names and
 * geometry checks included.
 *
 * Time: the compiles go through the disk kernel cache ($DIFFC_CACHE_DIR,
 * else the default), so a repeat takes seconds; a cold run compiles each
 * distinct kernel x 2 archs (~0.05-0.3 s each) on one thread per CPU.
 * Exit 77 when NVRTC is not installed.
 * Usage: test_cuda_compile TESTS_DIR [FIXTURE_NAME] (one fixture only). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "codegen/kernel_cache.h"
#include "codegen/emit_cuda.h"
#include "codegen/kernel_group.h"
#include "plan/plan_format.h"
#include "support/threadpool.h"
#include "testutil.h"

#define MAX_FIXTURES 32
#define ENTRY "dc_kernel" /* every kernel's entry name here, so that equal kernels have equal sources */

typedef struct {
  int runs, kernels, failures;
} totals;

/* The distinct kernel sources met so far, and their compiles. */
typedef struct {
  char *source;
  uint64_t hash;
  char *first_use; /* "unet_sd15 io_forward.safetensors forward bf16: k3_conv2d (node %12)" */
} distinct;

typedef struct {
  distinct *k;
  int n, cap;
  const dc_nvrtc *nv;
  const dc_cuda_arch *archs;
  int narchs;
  dc_kcache cache;
  dc_nvrtc_output *out; /* [n * narchs], kernel-major */
  dc_status **st;
  int *cached;
} kernel_set;

static const char *str_or_null(const cJSON *run, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(run, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* 1 when source is new (then the set owns it), 0 when an equal one is known. */
static int add_source(kernel_set *s, char *source, const char *first_use) {
  uint64_t h = dc_hash64(source, strlen(source));
  for (int i = 0; i < s->n; i++)
    if (s->k[i].hash == h && !strcmp(s->k[i].source, source)) return 0;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    distinct *grown = dc_realloc(s->k, (size_t)cap * sizeof *grown);
    CHECK(grown != NULL);
    if (!grown) return 0;
    s->k = grown, s->cap = cap;
  }
  s->k[s->n++] = (distinct){source, h, dc_strdup(first_use)};
  return 1;
}

static int has_cuda_kernel(const dc_module *m, int32_t id) { return !dc_op_is_copy(m->nodes[id].op); }

/* Generates every kernel of m for one precision, as dc_emit_cuda_kernels
 * groups them; new sources join the set, generator errors are failures. */
static void add_module(kernel_set *s, const dc_module *m, dc_cuda_compute compute, const char *label, totals *t) {
  dc_kernel_groups g;
  dc_status *st = dc_kernel_groups_build(m, has_cuda_kernel, dc_cuda_compute_name(compute), &g);
  CHECK_OK(st);
  if (st) return;
  int nnodes = 0, fresh = 0, errors = 0;
  for (int32_t i = 0; i < m->nnodes; i++) nnodes += g.group_of[i] >= 0;
  dc_cuda_options o = {.compute = compute};
  for (int r = 0; r < g.nreps; r++) {
    char use[256];
    snprintf(use, sizeof use, "%s %s: k%d_%s (node %%%d)", label, dc_cuda_compute_name(compute), r,
             dc_op_get(m->nodes[g.reps[r]].op)->name, (int)g.reps[r]);
    dc_cuda_kernel k;
    st = dc_cuda_gen_node(m, g.reps[r], &o, ENTRY, &k);
    if (st) {
      fprintf(stderr, "  ERROR: kernel %s (not generated):\n%s\n", use, dc_status_message(st));
      dc_status_free(st);
      errors++;
      continue;
    }
    if (add_source(s, k.source, use)) {
      k.source = NULL; /* now the set's */
      fresh++;
    }
    dc_cuda_kernel_deinit(&k);
  }
  CHECK(errors == 0);
  printf("%-44s %-4s %3d kernels for %4d nodes, %3d not met before%s\n", label, dc_cuda_compute_name(compute), g.nreps,
         nnodes, fresh, errors ? ", GENERATOR ERRORS" : "");
  t->kernels += g.nreps;
  t->failures += errors;
  dc_kernel_groups_deinit(&g);
}

/* One compile job (kernel i / narchs for arch i % narchs), through the disk cache. */
static void compile_job(kernel_set *s, int i) {
  const distinct *k = &s->k[i / s->narchs];
  const dc_cuda_arch *a = &s->archs[i % s->narchs];
  uint64_t key = 0;
  int keyed = s->cache.dir && dc_nvrtc_cache_key(s->nv, k->source, a, &key);
  if (keyed && dc_kcache_get(&s->cache, key, &s->out[i])) {
    s->cached[i] = 1;
    return;
  }
  s->st[i] = dc_nvrtc_compile(s->nv, ENTRY, k->source, a, &s->out[i]);
  if (!s->st[i] && keyed) dc_kcache_put(&s->cache, key, &s->out[i]);
}

static void compile_worker(void *ctx, int64_t job, int64_t njobs, int thread) {
  (void)njobs, (void)thread;
  compile_job(ctx, (int)job);
}

/* Compiles every distinct kernel for every arch; prints and counts failures. */
static void compile_set(kernel_set *s, totals *t) {
  int njobs = s->n * s->narchs, ncached = 0, failures = 0;
  double t0 = dc_now_seconds();
  s->out = dc_calloc((size_t)njobs + 1, sizeof *s->out);
  s->st = dc_calloc((size_t)njobs + 1, sizeof *s->st);
  s->cached = dc_calloc((size_t)njobs + 1, sizeof *s->cached);
  dc_pool *pool = NULL;
  CHECK(s->out && s->st && s->cached);
  CHECK_OK(dc_kcache_open(NULL, 0, "cuda", &s->cache));
  CHECK_OK(dc_pool_create(0, &pool));
  if (!s->out || !s->st || !s->cached || !pool) return;
  for (int i = 0; i < njobs; i++) dc_buf_init(&s->out[i].image);
  int threads = dc_pool_size(pool);
  dc_pool_run(pool, threads, njobs, compile_worker, s);
  dc_pool_destroy(pool);
  for (int i = 0; i < njobs; i++) {
    const char *use = s->k[i / s->narchs].first_use, *arch = s->archs[i % s->narchs].name;
    if (s->st[i]) fprintf(stderr, "  ERROR: kernel %s for %s:\n%s\n", use, arch, dc_status_message(s->st[i]));
    else if (s->out[i].log) fprintf(stderr, "  WARNING: kernel %s for %s:\n%s\n", use, arch, s->out[i].log);
    failures += s->st[i] || s->out[i].log;
    ncached += s->cached[i];
    dc_status_free(s->st[i]);
    dc_nvrtc_output_deinit(&s->out[i]);
  }
  CHECK(failures == 0);
  printf("%d distinct kernels x %d archs: %d compiles (%d from the kernel cache%s%s), %d failures, %.1f s on %d "
         "thread(s)\n", s->n, s->narchs, njobs, ncached, s->cache.warning ? "; " : "",
         s->cache.warning ? s->cache.warning : "", failures, dc_now_seconds() - t0, threads);
  t->failures += failures;
  dc_kcache_close(&s->cache);
  dc_free(s->out), dc_free(s->st), dc_free(s->cached);
}

/* typed: also the --compute-dtype bf16 module (each fixture's first run: the typed kernels of
 * its ops; the other runs differ in shapes, which the op case table's bf16 rows cover) */
static void compile_run(const char *name, const char *dir, const cJSON *run, int typed_too, kernel_set *ks,
                        totals *t) {
  const char *io_name = str_or_null(run, "io"), *entry = str_or_null(run, "entry");
  char *io_path = dc_path_join(dir, io_name), *model = dc_path_join(dir, "model");
  dc_st_file io;
  dc_status *st = dc_st_open(io_path, &io);
  CHECK_OK(st);
  if (!st) {
    dc_input_shape shapes[8];
    dc_compile_options co = {.model = model,
                             .component = str_or_null(run, "component"),
                             .variant = str_or_null(run, "variant"),
                             .entry = entry,
                             .shapes = shapes,
                             .nshapes = tu_io_shapes(&io, shapes, 8)};
    dc_folder f;
    dc_module *m = NULL;
    st = dc_compile_module(&co, &f, &m);
    CHECK_OK(st);
    char label[160];
    snprintf(label, sizeof label, "%s %s%s%s", name, io_name, entry ? " " : "", entry ? entry : "");
    if (!st) add_module(ks, m, DC_CUDA_COMPUTE_F32, label, t);
    t->runs++;
    dc_module_destroy(m);
    dc_folder_close(&f);
    if (!st && typed_too) { /* --compute-dtype bf16 on cuda: the typed kernels of every op a fixture has */
      co.memory = (dc_memory_options){.activation = DT_BF16, .storage = DT_BF16, .storage_all = 1};
      m = NULL;
      dc_status *typed = dc_compile_module(&co, &f, &m);
      CHECK_OK(typed);
      if (!typed) {
        snprintf(label + strlen(label), sizeof label - strlen(label), " (bf16 values)");
        add_module(ks, m, DC_CUDA_COMPUTE_BF16, label, t);
      }
      dc_module_destroy(m);
      dc_folder_close(&f);
    }
    dc_st_close(&io);
  }
  free(io_path);
  free(model);
}

static void compile_fixture(const char *name, kernel_set *ks, totals *t) {
  char *dir = dc_asprintf("%s/fixtures/%s", tu_source_dir, name), *case_path = dc_path_join(dir, "case.json");
  char *text = NULL;
  CHECK_OK(dc_file_read_all(case_path, &text, NULL));
  cJSON *c = text ? cJSON_Parse(text) : NULL;
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(c, "runs"), *run;
  CHECK(cJSON_IsArray(runs) && cJSON_GetArraySize(runs) > 0);
  int first = 1;
  cJSON_ArrayForEach(run, runs) compile_run(name, dir, run, first, ks, t), first = 0;
  cJSON_Delete(c);
  dc_free(text);
  dc_free(case_path);
  dc_free(dir);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The fixture names, sorted (the order of the printout). */
static int list_fixtures(char **names, int max) {
  char *dir = dc_path_join(tu_source_dir, "fixtures");
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) && n < max;) {
    char *case_path = dc_asprintf("%s/%s/case.json", dir, e->d_name);
    if (e->d_name[0] != '.' && dc_file_exists(case_path)) names[n++] = dc_strdup(e->d_name);
    dc_free(case_path);
  }
  if (d) closedir(d);
  dc_free(dir);
  qsort(names, (size_t)n, sizeof *names, by_name);
  return n;
}

/* dc_compile --target cuda end to end on vae_tiny's decoder. */
static void check_plan_file(void) {
  char *model = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model"), *plan_path = tu_path("vae.dplan");
  dc_compile_options o = {
      .model = model, .entry = "decode", .target = "cuda", .cuda_arch = "sm_80,sm_90", .compute = "bf16"};
  dc_compile_report rep;
  dc_status *st = dc_compile(&o, plan_path, &rep);
  CHECK_OK(st);
  dc_plan p;
  if (!st) st = dc_plan_read(plan_path, &p);
  CHECK_OK(st);
  if (st) {
    free(model);
    free(plan_path);
    return;
  }
  CHECK(p.target == DC_TARGET_CUDA && p.cuda.nkernels == rep.cuda_kernels && rep.cuda_compiles == 2 * rep.cuda_kernels);
  CHECK(strstr(p.options_json, "\"target\":\"cuda\"") && strstr(p.options_json, "\"cuda_arch\":\"sm_80,sm_90\"") &&
        strstr(p.options_json, "\"compute_dtype\":\"bf16\"") && strstr(p.options_json, "\"nvrtc_version\":"));
  CHECK(!strcmp(p.cuda.compute, "bf16") && p.cuda.nnodes == p.module->nnodes);
  int nonleaf = 0, covered = 0;
  for (int32_t i = 0; i < p.module->nnodes; i++) {
    int leaf = (dc_op_get(p.module->nodes[i].op)->flags & OPF_LEAF) != 0;
    nonleaf += !leaf;
    covered += !leaf && p.cuda.kernel_of_node[i] >= 0;
  }
  CHECK(nonleaf == covered && p.cuda.kernels[0].nimages == 2);
  printf(
      "plan: vae_tiny decode --target cuda --compute-dtype bf16: %d nodes on %d kernels, %d images each; "
      "options %s\n",
      nonleaf, p.cuda.nkernels, p.cuda.kernels[0].nimages, p.options_json);
  dc_plan_deinit(&p);
  free(model);
  free(plan_path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  dc_nvrtc *nv = NULL;
  dc_status *st = dc_nvrtc_load(&nv);
  if (st) {
    printf("SKIP: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 77;
  }
  dc_cuda_arch archs[DC_CUDA_MAX_ARCHS];
  int narchs = 0;
  /* The sweep compiles for sm_90 (the GPU the check runs on): both archs
   * double a cold run (1754 distinct kernels: ~12 min on 2 cores), too much
   * for CI; every op case row's kernel is compiled for sm_80 and sm_90 by
   * the CUDA op tests, and DIFFC_TEST_CUDA_ARCHS=sm_80,sm_90 runs the whole
   * sweep for both. */
  const char *arch_list = getenv("DIFFC_TEST_CUDA_ARCHS");
  if (!arch_list || !*arch_list) arch_list = "sm_90";
  CHECK_OK(dc_nvrtc_parse_archs(nv, arch_list, archs, &narchs));
  printf("NVRTC %s (%s), %s; %s, f32 and bf16 compute\n", dc_nvrtc_version(nv), dc_nvrtc_library(nv),
         dc_nvrtc_include_dirs(nv), arch_list);
  char *names[MAX_FIXTURES];
  int n = list_fixtures(names, MAX_FIXTURES);
  CHECK(n > 0);
  totals t = {0};
  kernel_set ks = {.nv = nv, .archs = archs, .narchs = narchs};
  for (int i = 0; i < n; i++) {
    if (argc < 3 || !strcmp(argv[2], names[i])) compile_fixture(names[i], &ks, &t);
    dc_free(names[i]);
  }
  printf("%d model runs: %d kernels, %d distinct\n", t.runs, t.kernels, ks.n);
  compile_set(&ks, &t);
  for (int i = 0; i < ks.n; i++) dc_free(ks.k[i].source), dc_free(ks.k[i].first_use);
  dc_free(ks.k);
  if (argc < 3) check_plan_file();
  dc_nvrtc_unload(nv);
  return tu_finish();
}
