/* test_calibrate.c — diffrun --calibrate's runtime half (runtime/calibrate.c):
 * the profile written for the tiny UNet on the llvm backend holds every
 * documented field, its classes are exactly the plan's, its rates follow
 * from its own seconds and the plan's work by the documented fit, the
 * classes' seconds add up to the run; the file is replaced atomically and
 * the disk measurement's file removed; an unwritable path is one clear
 * error; the default path follows the cache root.  The CUDA copy
 * measurements' driver calls, in order, against the fake driver. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cuda_fake_driver.h"
#include "driver/compile.h"
#include "runtime/calibrate.h"
#include "runtime/session.h"
#include "testutil.h"

#define COPY_BYTES ((uint64_t)8 << 20) /* the test's copies and disk file: small, so it takes a second */

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
static const char *str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int positive(double x) { return isfinite(x) && x > 0; }

static cJSON *read_json(const char *path) {
  char *text = NULL;
  size_t n = 0;
  dc_status *st = dc_file_read_all(path, &text, &n);
  CHECK_OK(st);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  CHECK(j != NULL);
  dc_free(text);
  return j;
}

/* Files in the scratch folder whose name says they are the disk
 * measurement's. */
static int disk_files_left(void) {
  DIR *d = opendir(tu_tmpdir());
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, "diffc-calibrate") != NULL;
  if (d) closedir(d);
  return n;
}

/* The classes of the plan's kernel steps, their step counts and work, as
 * the cost model defines them. */
typedef struct {
  int steps[DC_COST_CLASSES];
  double work[DC_COST_CLASSES];
} plan_classes;

static void classes_of(const dc_module *m, plan_classes *pc) {
  memset(pc, 0, sizeof *pc);
  for (int32_t s = 0; s < m->nnodes; s++) {
    dc_cost_class k = dc_node_cost_class(m, s);
    if (k == DC_COST_COPY || k == DC_COST_NONE) continue;
    pc->steps[k]++;
    pc->work[k] += (double)(k == DC_COST_MEMORY ? dc_node_traffic_bytes(m, s) : dc_node_flops(m, s));
  }
}

static void check_classes(const cJSON *j, const dc_module *m) {
  plan_classes pc;
  classes_of(m, &pc);
  const cJSON *classes = cJSON_GetObjectItemCaseSensitive(j, "classes");
  CHECK(cJSON_IsObject(classes));
  double overhead = num(j, "overhead_us") * 1e-6, sum = 0;
  int listed = 0;
  for (const cJSON *c = classes ? classes->child : NULL; c; c = c->next) listed++;
  int expected = 0;
  for (int k = 0; k <= DC_COST_MEMORY; k++) {
    const char *name = dc_cost_class_name((dc_cost_class)k);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(classes, name);
    if (!pc.steps[k]) {
      CHECK(c == NULL);
      continue;
    }
    expected++;
    CHECK(c != NULL);
    if (!c) continue;
    double rate = num(c, k == DC_COST_MEMORY ? "gbps" : "gflops"), seconds = num(c, "seconds");
    CHECK(positive(rate) && positive(seconds));
    CHECK(num(c, "steps") == pc.steps[k]);
    CHECK(cJSON_GetObjectItemCaseSensitive(c, k == DC_COST_MEMORY ? "gflops" : "gbps") == NULL);
    /* the documented fit, from the file's own numbers and the plan's work */
    double busy = seconds - pc.steps[k] * overhead;
    if (busy < 0.1 * seconds) busy = 0.1 * seconds;
    double want = pc.work[k] / busy / 1e9;
    if (fabs(rate - want) > 1e-3 * want) fprintf(stderr, "class %s: rate %g, fit gives %g\n", name, rate, want);
    CHECK(fabs(rate - want) <= 1e-3 * want);
    sum += seconds;
  }
  CHECK(listed == expected && expected >= 4); /* the tiny UNet has conv3x3, conv, linear, attention, memory */
  /* the steps run inside the run: their time is the run's less the walk
   * between them (clock reads, inputs in, outputs out) */
  double run = num(j, "run_seconds");
  fprintf(stderr, "classes' seconds %.6f of the run's %.6f\n", sum, run);
  CHECK(positive(run) && sum <= run * 1.001 && sum >= 0.5 * run);
}

static void check_profile(const char *path, const char *plan, const dc_module *m, const drt_calibration *c) {
  cJSON *j = read_json(path);
  if (!j) return;
  CHECK(str(j, "format") && !strcmp(str(j, "format"), "diffc-calibration"));
  CHECK(num(j, "version") == 1);
  CHECK(str(j, "target") && !strcmp(str(j, "target"), "cpu"));
  CHECK(str(j, "backend") && !strcmp(str(j, "backend"), "llvm"));
  CHECK(str(j, "device") && strlen(str(j, "device")) > 0 && !strcmp(str(j, "device"), c->device));
  CHECK(num(j, "threads") >= 1 && num(j, "threads") == c->threads);
  CHECK(str(j, "plan") && !strcmp(str(j, "plan"), plan));
  const char *created = str(j, "created");
  int y, mo, d, h, mi, s;
  char z = 0;
  CHECK(created && strlen(created) == 20 &&
        sscanf(created, "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &s, &z) == 7 && z == 'Z' && y >= 2024);
  CHECK(num(j, "runs") == 2);
  double overhead = num(j, "overhead_us");
  CHECK(isfinite(overhead) && overhead > 0);
  /* the tiny UNet's smallest steps move a few KiB: the overhead is its own,
   * no note that the built-in figure stands in */
  CHECK(!cJSON_GetObjectItemCaseSensitive(j, "overhead_note"));
  check_classes(j, m);
  const cJSON *copy = cJSON_GetObjectItemCaseSensitive(j, "copy");
  CHECK(positive(num(copy, "h2d_gbps")) && positive(num(copy, "disk_gbps")) && positive(num(copy, "d2d_gbps")));
  CHECK(num(copy, "d2d_gbps") == num(copy, "h2d_gbps")); /* a CPU transfer is the same memcpy */
  const cJSON *measured = cJSON_GetObjectItemCaseSensitive(copy, "measured");
  CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(measured, "h2d_gbps")));
  CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(measured, "disk_gbps")));
  CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(measured, "d2d_gbps")));
  fprintf(stderr, "overhead %.3f us, h2d %.2f GB/s, disk %.2f GB/s\n", overhead, num(copy, "h2d_gbps"),
          num(copy, "disk_gbps"));
  cJSON_Delete(j);
}

static drt_plan *load_tiny(char **plan_out) {
  char *model = dc_path_join(tu_source_dir, "fixtures/unet_tiny/model"), *plan = tu_path("tiny.dplan");
  dc_compile_options co = {.model = model};
  drt_options ro = {.backend = "llvm"};
  drt_plan *p = NULL;
  dc_status *st = dc_compile(&co, plan, NULL);
  if (!st) st = drt_load(plan, &ro, &p);
  CHECK_OK(st);
  free(model);
  *plan_out = plan;
  return p;
}

static void test_profile(void) {
  char *plan;
  drt_plan *p = load_tiny(&plan);
  if (!p) return free(plan);
  char *out = tu_path("calibration.json");
  drt_calibrate_options o = {.output = out, .runs = 2, .copy_bytes = COPY_BYTES, .scratch_dir = tu_tmpdir()};
  drt_calibration c;
  CHECK_OK(drt_calibrate(p, &o, &c));
  CHECK(!strcmp(c.path, out) && c.h2d_measured && c.disk_measured && c.d2d_measured && !c.copy_note[0]);
  check_profile(out, plan, drt_plan_module(p), &c);
  CHECK(tu_tmp_files_left() == 0 && disk_files_left() == 0);

  /* again onto the same name: a new file renamed over the old one */
  struct stat before, after;
  CHECK(stat(out, &before) == 0);
  CHECK_OK(drt_calibrate(p, &o, &c));
  CHECK(stat(out, &after) == 0 && after.st_ino != before.st_ino);
  check_profile(out, plan, drt_plan_module(p), &c);
  CHECK(tu_tmp_files_left() == 0 && disk_files_left() == 0);

  /* a folder that does not exist: one error naming the file, at once */
  o.output = "/nonexistent-diffc-folder/calibration.json";
  double t0 = dc_now_seconds();
  CHECK_ERR(drt_calibrate(p, &o, &c), "/nonexistent-diffc-folder/calibration.json: cannot create: no folder");
  CHECK(dc_now_seconds() - t0 < 0.5); /* before any measuring */

  /* the default location: the cache root, made as needed */
  char *root = tu_path("cache/deeper");
  setenv("DIFFC_CACHE_DIR", root, 1);
  o.output = NULL;
  CHECK_OK(drt_calibrate(p, &o, &c));
  char *want = dc_asprintf("%s/calibration-cpu.json", root);
  CHECK(!strcmp(c.path, want) && dc_file_exists(want));
  dc_free(want);
  free(root);
  drt_destroy(p);
  free(out);
  free(plan);
}

static void test_default_path(void) {
  char *saved[3];
  const char *vars[3] = {"DIFFC_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; i++) saved[i] = getenv(vars[i]) ? strdup(getenv(vars[i])) : NULL;
  char *path = NULL, *xdg = tu_path("xdg");
  unsetenv("DIFFC_CACHE_DIR");
  setenv("XDG_CACHE_HOME", xdg, 1);
  CHECK_OK(drt_calibration_default_path("cuda", &path));
  char *want = dc_asprintf("%s/diffc/calibration-cuda.json", xdg);
  CHECK(path && !strcmp(path, want));
  dc_free(want), dc_free(path), path = NULL;
  for (int i = 0; i < 3; i++) unsetenv(vars[i]);
  CHECK_ERR(drt_calibration_default_path("cpu", &path), "none of DIFFC_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
  CHECK(path == NULL);
  for (int i = 0; i < 3; i++) {
    if (saved[i]) setenv(vars[i], saved[i], 1);
    free(saved[i]);
  }
  free(xdg);
}

/* ---- CUDA, host side (the fake driver's 1 ms per logged call between two event records) ---- */
static int count_kind(int kind) {
  int n = 0;
  for (int i = 0; i < fk.ncalls; i++) n += fk.calls[i].kind == kind;
  return n;
}

static void test_cuda_h2d(void) {
  fake_reset(9, 0);
  dc_cu_api api = fake_api();
  double gbps = 0;
  const uint64_t bytes = (uint64_t)1 << 20;
  CHECK_OK(drt_cuda_h2d_gbps(&api, 0, bytes, 3, &gbps));
  /* the device buffer, then per repetition: record, the copy from pinned memory, record, wait */
  CHECK(fk.ncalls == 1 + 3 * 4 && fk.calls[0].kind == C_ALLOC && fk.calls[0].bytes == bytes);
  int stream = fk.calls[1].stream;
  for (int r = 0; r < 3 && fk.ncalls == 13; r++) {
    const fake_call *c = &fk.calls[1 + 4 * r];
    CHECK(c[0].kind == C_RECORD && c[1].kind == C_HTOD && c[2].kind == C_RECORD && c[3].kind == C_EVSYNC);
    CHECK(c[1].bytes == bytes && c[1].host_pinned && c[1].dst == fk.calls[0].dst && c[1].stream == stream);
    CHECK(c[0].stream == stream && c[2].stream == stream && c[3].event == c[2].event && c[0].event != c[2].event);
  }
  CHECK(fabs(gbps - (double)bytes / 2e-3 / 1e9) < 1e-9); /* two logged calls from record to record: 2 ms */
  CHECK(live_blocks(0) == 0 && live_blocks(1) == 0 && live_objs() == 0 && fk.ctx_refs == 0);

  /* the device cannot hold the buffer: the call named, everything made so far freed */
  fake_reset(9, 0);
  fk.fail_alloc_device = 0;
  CHECK_ERR(drt_cuda_h2d_gbps(&api, 0, bytes, 3, &gbps), "measuring host-to-device bandwidth: cuMemAlloc");
  CHECK(live_blocks(0) == 0 && live_blocks(1) == 0 && live_objs() == 0 && fk.ctx_refs == 0);
}

static void test_cuda_d2d(void) {
  fake_reset(9, 0);
  dc_cu_api api = fake_api();
  double gbps = 0;
  int measured = -1;
  const uint64_t bytes = (uint64_t)1 << 20;
  CHECK_OK(drt_cuda_d2d_gbps(&api, 0, bytes, 2, &gbps, &measured));
  CHECK(measured == 0 && fk.ncalls == 0 && fk.ctx_refs == 0); /* one device: nothing to time */

  fake_reset(9, 0);
  fk.ndevices = 2;
  CHECK_OK(drt_cuda_d2d_gbps(&api, 1, bytes, 2, &gbps, &measured));
  CHECK(measured == 1 && count_kind(C_PEER) == 2 && count_kind(C_PEER_ENABLE) == 1 && count_kind(C_ALLOC) == 2);
  for (int i = 0; i < fk.ncalls; i++)
    if (fk.calls[i].kind == C_PEER) /* from device 1 (asked for) to device 0 (the next), on device 1's stream */
      CHECK(fk.calls[i].src_dev == 1 && fk.calls[i].dev == 1 && fk.calls[i].bytes == bytes &&
            fk.calls[i - 1].kind == C_RECORD && fk.calls[i + 1].kind == C_RECORD);
  CHECK(fabs(gbps - (double)bytes / 2e-3 / 1e9) < 1e-9);
  CHECK(live_blocks(0) == 0 && live_objs() == 0 && fk.ctx_refs == 0);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  (void)fake_bind; /* the fake's launches run no kernels here: nothing to bind */
  test_default_path();
  test_cuda_h2d();
  test_cuda_d2d();
  test_profile();
  return tu_finish();
}
