/* test_cuda_compile.c — every CUDA kernel of every fixture model compiles.
 *
 * For each run of each tests/fixtures/NAME/case.json (the model, component,
 * variant, entry and the input shapes of its io file, as fixture_check
 * compiles it), the module goes through the frontend and the pass pipeline,
 * then every distinct kernel is generated and compiled by NVRTC for sm_80
 * and sm_90, in f32 and in bf16 compute.  Any generator error, NVRTC error
 * or NVRTC warning fails the test, printed with the kernel, its node and
 * NVRTC's log; every failure is listed, not only the first.  Last, one
 * fixture goes through dc_compile --target cuda into a plan file, read back
 * and checked (target, options, one kernel per non-leaf node).
 *
 * Time: the kernels go through the disk kernel cache ($DIFFC_CACHE_DIR, else
 * the default), so a repeat takes seconds; a cold run compiles each kernel
 * x 2 archs x 2 precisions (~0.05-0.3 s each) on one thread per CPU, and
 * prints how long each model took.  Exit 77 when NVRTC is not installed.
 * Usage: test_cuda_compile TESTS_DIR [FIXTURE_NAME] (one fixture only). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/compile.h"
#include "codegen/emit_cuda.h"
#include "runtime/plan_format.h"
#include "testutil.h"

#define MAX_FIXTURES 32

typedef struct {
  int runs, kernels, compiles, cached, failures;
  double seconds;
} totals;

static const char *str_or_null(const cJSON *run, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(run, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void print_notes(const char *what, const dc_cuda_note *notes, int n) {
  for (int i = 0; i < n; i++)
    fprintf(stderr, "  %s: kernel %s (node %%%d)%s%s:\n%s\n", what, notes[i].kernel, (int)notes[i].node,
            notes[i].arch ? " for " : "", notes[i].arch ? notes[i].arch : " (not generated)", notes[i].text);
}

/* All kernels of m for one precision; failures printed and counted. */
static void compile_module(const dc_module *m, const dc_nvrtc *nv, const dc_cuda_arch *archs, int narchs,
                           dc_cuda_compute compute, const char *label, totals *t) {
  dc_cuda_emit_options o = {.compute = compute, .archs = archs, .narchs = narchs, .keep_going = 1, .no_progress = 1};
  dc_cuda_emit_report r;
  dc_plan_cuda c;
  dc_status *st = dc_emit_cuda_kernels(m, nv, &o, &c, &r);
  print_notes("ERROR", r.errors, r.nerrors);
  print_notes("WARNING", r.warnings, r.nwarnings);
  int ok = !st && r.nwarnings == 0;
  CHECK(ok);
  if (st && !r.nerrors) fprintf(stderr, "  ERROR: %s\n", dc_status_message(st));
  printf("%-44s %-4s %3d kernels for %4d nodes, %4d compiles (%4d cached), %6.1f s: %s", label,
         dc_cuda_compute_name(compute), r.nkernels, r.nnodes, r.ncompiles, r.ncached, r.seconds,
         ok ? "ok\n" : "FAILED");
  if (!ok) printf(" (%d errors, %d warnings)\n", r.nerrors, r.nwarnings);
  if (r.cache_warning) printf("  (%s)\n", r.cache_warning);
  t->kernels += r.nkernels;
  t->compiles += r.ncompiles;
  t->cached += r.ncached;
  t->failures += r.nerrors + r.nwarnings + (st && !r.nerrors);
  dc_status_free(st);
  dc_cuda_emit_report_deinit(&r);
  dc_plan_cuda_deinit(&c);
}

static void compile_run(const char *name, const char *dir, const cJSON *run, const dc_nvrtc *nv,
                        const dc_cuda_arch *archs, int narchs, totals *t) {
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
    double t0 = dc_now_seconds();
    st = dc_compile_module(&co, &f, &m);
    CHECK_OK(st);
    char label[160];
    snprintf(label, sizeof label, "%s %s%s%s", name, io_name, entry ? " " : "", entry ? entry : "");
    if (!st) {
      compile_module(m, nv, archs, narchs, DC_CUDA_COMPUTE_F32, label, t);
      compile_module(m, nv, archs, narchs, DC_CUDA_COMPUTE_BF16, label, t);
    }
    t->runs++;
    t->seconds += dc_now_seconds() - t0;
    dc_module_destroy(m);
    dc_folder_close(&f);
    dc_st_close(&io);
  }
  free(io_path);
  free(model);
}

static void compile_fixture(const char *name, const dc_nvrtc *nv, const dc_cuda_arch *archs, int narchs, totals *t) {
  char *dir = dc_asprintf("%s/fixtures/%s", tu_source_dir, name), *case_path = dc_path_join(dir, "case.json");
  char *text = NULL;
  CHECK_OK(dc_file_read_all(case_path, &text, NULL));
  cJSON *c = text ? cJSON_Parse(text) : NULL;
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(c, "runs"), *run;
  CHECK(cJSON_IsArray(runs) && cJSON_GetArraySize(runs) > 0);
  cJSON_ArrayForEach(run, runs) compile_run(name, dir, run, nv, archs, narchs, t);
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
  CHECK_OK(dc_nvrtc_parse_archs(nv, "sm_80,sm_90", archs, &narchs));
  printf("NVRTC %s (%s), %s; sm_80 and sm_90, f32 and bf16 compute\n", dc_nvrtc_version(nv), dc_nvrtc_library(nv),
         dc_nvrtc_include_dirs(nv));
  char *names[MAX_FIXTURES];
  int n = list_fixtures(names, MAX_FIXTURES);
  CHECK(n > 0);
  totals t = {0};
  for (int i = 0; i < n; i++) {
    if (argc < 3 || !strcmp(argv[2], names[i])) compile_fixture(names[i], nv, archs, narchs, &t);
    dc_free(names[i]);
  }
  printf("%d model runs: %d kernels, %d compiles (%d from the kernel cache), %d failures, %.1f s\n", t.runs, t.kernels,
         t.compiles, t.cached, t.failures, t.seconds);
  if (argc < 3) check_plan_file();
  dc_nvrtc_unload(nv);
  return tu_finish();
}
