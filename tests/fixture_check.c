/* fixture_check.c — one fixture made by diffusers (tests/fixtures/NAME):
 * for each run in its case.json, compile the model to a plan file, load
 * the plan, feed the recorded inputs, run, and compare every output with
 * diffusers' output (relative L2 error within the run's tolerance; max abs
 * error reported), and check the measured device peak equals the plan's.
 * Usage: fixture_check FIXTURE_DIR [--backend llvm|reference]  (default: both) */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/compile.h"
#include "runtime/diffrun.h"
#include "testutil.h"

static const char *str_or_null(const cJSON *run, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(run, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Every tensor of the io file not named out.* is an input. */
static int collect_shapes(const dc_st_file *io, dc_input_shape *shapes, int max) {
  int n = 0;
  for (int i = 0; i < io->ntensors && n < max; i++) {
    const dc_st_tensor *t = &io->tensors[i];
    if (strncmp(t->name, "out.", 4) == 0) continue;
    shapes[n].name = t->name;
    shapes[n].rank = t->rank;
    memcpy(shapes[n].dims, t->dims, sizeof t->dims);
    n++;
  }
  return n;
}

static const float *tensor_f32(const dc_st_file *f, const dc_st_tensor *t) {
  float *copy = malloc(t->bytes ? t->bytes : 1);
  memcpy(copy, f->file.data + t->offset, t->bytes);
  return copy;
}

static void compare(const char *label, const float *got, const float *want, size_t n, double tol) {
  double diff2 = 0, ref2 = 0, maxabs = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - want[i];
    diff2 += d * d;
    ref2 += (double)want[i] * want[i];
    if (!(fabs(d) <= maxabs)) maxabs = fabs(d);
  }
  double rel = sqrt(diff2 / (ref2 > 0 ? ref2 : 1));
  int ok = rel <= tol;
  CHECK(ok);
  printf("  %-40s rel L2 %.3g (tolerance %.0e), max abs %.3g  %s\n", label, rel, tol, maxabs, ok ? "ok" : "FAIL");
}

/* Loads the plan with one backend, feeds the recorded inputs, runs, and
 * compares every output with diffusers'. */
static void run_backend(const char *plan, const char *backend, const dc_st_file *io, const dc_input_shape *shapes,
                        int ns, double tol, const char *label) {
  drt_plan *p = NULL;
  drt_options ro = {.backend = backend, .check_finite = 1};
  dc_status *st = drt_load(plan, &ro, &p);
  for (int i = 0; !st && i < ns; i++) {
    const dc_st_tensor *t = dc_st_find(io, shapes[i].name);
    const float *d = tensor_f32(io, t);
    st = drt_set_input(p, t->name, d, t->bytes / 4);
    free((void *)d);
  }
  drt_stats s = {0};
  if (!st) st = drt_run(p, &s);
  CHECK_OK(st);
  if (!p) return;
  printf("%s [%s]: %d steps (%d on reference kernels), %.3f s, device peak %llu bytes (predicted %llu), weights %llu bytes\n",
         label, s.backend, s.steps, s.reference_steps, s.seconds, (unsigned long long)s.device_peak_bytes,
         (unsigned long long)s.device_predicted_bytes, (unsigned long long)s.weight_bytes);
  CHECK(s.device_peak_bytes == s.device_predicted_bytes);
  for (int i = 0; !st && i < drt_output_count(p); i++) {
    const drt_tensor_info *info = drt_output_info(p, i);
    char ref_name[128];
    snprintf(ref_name, sizeof ref_name, "out.%s", info->name);
    const dc_st_tensor *ref = dc_st_find(io, ref_name);
    CHECK(ref && ref->bytes / 4 == info->numel);
    if (!ref || ref->bytes / 4 != info->numel) continue;
    const float *want = tensor_f32(io, ref);
    compare(ref_name, drt_output(p, info->name, NULL), want, info->numel, tol);
    free((void *)want);
  }
  drt_destroy(p);
}

/* One run of case.json: compile once, then check the plan on each backend
 * (the compiled llvm kernels, and the reference kernels). */
static void check_run(const char *dir, const cJSON *run, const char *backend) {
  const char *entry = str_or_null(run, "entry"), *io_name = str_or_null(run, "io");
  const cJSON *tol_j = cJSON_GetObjectItemCaseSensitive(run, "tolerance");
  double tol = cJSON_IsNumber(tol_j) ? tol_j->valuedouble : 1e-4;
  char *io_path = dc_path_join(dir, io_name), *model = dc_path_join(dir, "model"), *plan = tu_path("fixture.dplan");
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shapes[8];
  int ns = collect_shapes(&io, shapes, 8);
  dc_compile_options co = {.model = model, .component = str_or_null(run, "component"),
                           .variant = str_or_null(run, "variant"), .entry = entry, .shapes = shapes, .nshapes = ns};
  dc_compile_report rep;
  dc_status *st = dc_compile(&co, plan, &rep);
  CHECK_OK(st);
  char label[256];
  snprintf(label, sizeof label, "%s %s", io_name, entry ? entry : "");
  static const char *all[] = {"llvm", "reference"};
  for (int b = 0; !st && b < 2; b++)
    if (!backend || !strcmp(backend, all[b])) run_backend(plan, all[b], &io, shapes, ns, tol, label);
  dc_st_close(&io);
  free(io_path);
  free(model);
  free(plan);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (argc < 2) {
    fprintf(stderr, "usage: fixture_check FIXTURE_DIR [--backend NAME]\n");
    return 2;
  }
  const char *dir = argv[1], *backend = argc > 3 && !strcmp(argv[2], "--backend") ? argv[3] : NULL;
  char *case_path = dc_path_join(dir, "case.json"), *text = NULL;
  CHECK_OK(dc_file_read_all(case_path, &text, NULL));
  cJSON *c = text ? cJSON_Parse(text) : NULL;
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(c, "runs"), *run;
  CHECK(cJSON_IsArray(runs) && cJSON_GetArraySize(runs) > 0);
  printf("fixture %s\n", dir);
  cJSON_ArrayForEach(run, runs) check_run(dir, run, backend);
  cJSON_Delete(c);
  dc_free(text);
  free(case_path);
  return tu_finish();
}
