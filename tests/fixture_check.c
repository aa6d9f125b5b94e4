/* fixture_check.c — one fixture made by diffusers (tests/fixtures/NAME):
 * for each run in its case.json, compile the model to a plan file, load
 * the plan, feed the recorded inputs, run, and compare every output with
 * diffusers' output (relative L2 error within the run's tolerance; max abs
 * error reported), and check the measured device peak equals the plan's.
 *
 * Usage: fixture_check FIXTURE_DIR [--backend llvm|reference] [--layout nhwc] [--cpu NAME]
 *                      [--target cuda [--compute f32|bf16|f32,bf16] [--cuda-arch LIST]]
 * The cpu target (the default) runs both CPU backends unless --backend
 * names one.  --target cuda compiles with NVRTC for each compute precision,
 * runs the plan with the reference backend (compared with diffusers too),
 * then on the GPU, and compares the GPU's outputs with diffusers AND with
 * the reference backend's, within the run's tolerance for f32 compute and
 * LOW_PRECISION_TOL for bf16/f16 (bf16 activations: see there); one "RESULT ..." line per output feeds
 * tools/gpu_check.sh.  That needs no LLVM: a -DDIFFC_LLVM=OFF build runs it
 * (its cpu target says it has no CPU code generator).  Exits 77 (skip) when
 * the machine has no NVIDIA driver or GPU, after the reference runs. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "support/cpu_target.h"
#include "runtime/diffrun.h"
#include "testutil.h"

/* A bf16/f16 plan against diffusers' fp32 outputs.  Since issue 16 such a
 * plan stores every activation in bf16/f16, so it is as far from fp32 as a
 * bf16 model is: diffusers' own bf16 run (the fixture's model and inputs,
 * `.to(torch.bfloat16)`) lands 3.7e-2 from its fp32 output on unet_tiny and
 * 1.8e-2 on vae_tiny decode; diffc's bf16 plans land 2.2e-2 and 1.8e-2.
 * The tolerance is that distance with room for the GPU's own rounding
 * order, not a looser test of f32 work (f32 compute keeps the run's
 * tolerance). */
#define LOW_PRECISION_TOL 5e-2

typedef struct {
  const char *dir, *backend, *target, *cuda_arch;
  dc_layout layout; /* --layout nhwc: the same check on the channels_last plan */
  const char *cpu;  /* --cpu NAME (diffc's): kernels for another x86-64 target, e.g. x86-64-v3 */
  const char *computes[4];
  int ncomputes;
} fc_options;

static int no_gpu; /* the CUDA backend found no driver or device: exit 77 */

static const char *str_or_null(const cJSON *run, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(run, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static float *tensor_f32(const dc_st_file *f, const dc_st_tensor *t) {
  float *copy = malloc(t->bytes ? t->bytes : 1);
  memcpy(copy, f->file.data + t->offset, t->bytes);
  return copy;
}

/* Relative L2 error of got against want; *maxabs the largest |difference|. */
static double rel_l2(const float *got, const float *want, size_t n, double *maxabs) {
  double diff2 = 0, ref2 = 0;
  *maxabs = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - want[i];
    diff2 += d * d;
    ref2 += (double)want[i] * want[i];
    if (!(fabs(d) <= *maxabs)) *maxabs = fabs(d); /* NaN sticks */
  }
  return sqrt(diff2 / (ref2 > 0 ? ref2 : 1));
}

static int compare(const char *label, const float *got, const float *want, size_t n, double tol, double *out_rel) {
  double maxabs, rel = rel_l2(got, want, n, &maxabs);
  int ok = rel <= tol;
  CHECK(ok);
  printf("  %-40s rel L2 %.3g (tolerance %.0e), max abs %.3g  %s\n", label, rel, tol, maxabs, ok ? "ok" : "FAIL");
  if (out_rel) *out_rel = rel;
  return ok;
}

/* True when st says the machine has no NVIDIA driver or no GPU. */
static int is_no_gpu(const dc_status *st) {
  const char *m = dc_status_message(st);
  return strstr(m, "no NVIDIA driver was found") || strstr(m, "CUDA_ERROR_NO_DEVICE") ||
         strstr(m, "has 0 CUDA device(s)");
}

/* Loads the plan with one backend and feeds the recorded inputs (f32, or
 * token ids in their own integer dtype). */
static dc_status *load_with_inputs(const char *plan, const char *backend, const dc_st_file *io,
                                   const dc_input_shape *shapes, int ns, drt_plan **out) {
  drt_options ro = {.backend = backend, .check_finite = 1};
  dc_status *st = drt_load(plan, &ro, out);
  for (int i = 0; !st && i < ns; i++) st = tu_set_io_input(*out, io, dc_st_find(io, shapes[i].name));
  return st;
}

static void print_stats(const char *label, const drt_stats *s) {
  printf("%s [%s]: %d steps (%d on reference kernels), %.3f s, device peak %llu bytes (predicted %llu), weights %llu bytes\n",
         label, s->backend, s->steps, s->reference_steps, s->seconds, (unsigned long long)s->device_peak_bytes,
         (unsigned long long)s->device_predicted_bytes, (unsigned long long)s->weight_bytes);
  CHECK(s->device_peak_bytes == s->device_predicted_bytes);
}

/* diffusers' recording of output `name` ("out.<name>"), or NULL. */
static float *reference_output(const dc_st_file *io, const drt_tensor_info *info) {
  char ref_name[128];
  snprintf(ref_name, sizeof ref_name, "out.%s", info->name);
  const dc_st_tensor *ref = dc_st_find(io, ref_name);
  CHECK(ref && ref->bytes / 4 == info->numel);
  return ref && ref->bytes / 4 == info->numel ? tensor_f32(io, ref) : NULL;
}

/* ---- the cpu target ------------------------------------------------------- */

/* Runs the plan with one backend and compares every output with diffusers'. */
static void run_backend(const char *plan, const char *backend, const dc_st_file *io, const dc_input_shape *shapes,
                        int ns, double tol, const char *label) {
  drt_plan *p = NULL;
  drt_stats s = {0};
  dc_status *st = load_with_inputs(plan, backend, io, shapes, ns, &p);
  if (!st) st = drt_run(p, &s);
  CHECK_OK(st);
  if (!p) return;
  if (!st) print_stats(label, &s);
  for (int i = 0; !st && i < drt_output_count(p); i++) {
    const drt_tensor_info *info = drt_output_info(p, i);
    float *want = reference_output(io, info);
    char name[128];
    snprintf(name, sizeof name, "out.%s", info->name);
    if (want) compare(name, drt_output(p, info->name, NULL), want, info->numel, tol, NULL);
    free(want);
  }
  drt_destroy(p);
}

/* ---- the cuda target ------------------------------------------------------ */

/* The reference backend's outputs of plan (output order; NULL on failure,
 * *nout 0): the same graph on the plain C kernels, which need no GPU and no
 * LLVM, so a build without LLVM checks the GPU against them too.  Each is
 * compared with diffusers' within tol. */
static float **reference_outputs(const char *plan, const dc_st_file *io, const dc_input_shape *shapes, int ns,
                                 double tol, const char *label, int *nout) {
  drt_plan *p = NULL;
  drt_stats s = {0};
  dc_status *st = load_with_inputs(plan, "reference", io, shapes, ns, &p);
  if (!st) st = drt_run(p, &s);
  CHECK_OK(st);
  float **outs = NULL;
  *nout = 0;
  if (!st) {
    print_stats(label, &s);
    *nout = drt_output_count(p);
    outs = calloc((size_t)*nout, sizeof *outs);
    for (int i = 0; i < *nout; i++) {
      const drt_tensor_info *info = drt_output_info(p, i);
      size_t n;
      const float *o = drt_output(p, info->name, &n);
      outs[i] = malloc(n * sizeof(float) + 1);
      memcpy(outs[i], o, n * sizeof(float));
      float *want = reference_output(io, info);
      char name[160];
      snprintf(name, sizeof name, "out.%s reference vs diffusers", info->name);
      if (want) compare(name, outs[i], want, info->numel, tol, NULL);
      free(want);
    }
  }
  drt_destroy(p);
  return outs;
}

static void free_outputs(float **outs, int n) {
  for (int i = 0; i < n; i++) free(outs[i]);
  free(outs);
}

/* One compute precision on the GPU: compile, run the plan with the
 * reference backend (also without a GPU), then on the GPU, and compare each
 * GPU output with diffusers and with the reference. */
static void check_cuda(const fc_options *fo, const dc_compile_options *base, const char *compute, double run_tol,
                       const dc_st_file *io, const char *io_name, const dc_input_shape *shapes, int ns,
                       const char *label) {
  char *plan = tu_path("fixture_cuda.dplan");
  dc_compile_options co = *base;
  co.target = "cuda", co.compute = compute, co.cuda_arch = fo->cuda_arch;
  double tol = strcmp(compute, "f32") == 0 ? run_tol : fmax(run_tol, LOW_PRECISION_TOL);
  dc_compile_report rep;
  drt_plan *p = NULL;
  drt_stats s = {0};
  float **ref = NULL;
  int nref = 0;
  char ref_label[300];
  snprintf(ref_label, sizeof ref_label, "%s [cuda %s plan]", label, compute);
  dc_status *st = dc_compile(&co, plan, &rep);
  CHECK_OK(st);
  if (!st) {
    printf("%s [cuda %s]: %d kernels, %d NVRTC compiles (%d cached, %d with warnings)\n", label, compute,
           rep.cuda_kernels, rep.cuda_compiles, rep.cuda_cached, rep.cuda_warnings);
    CHECK(rep.cuda_warnings == 0);
    ref = reference_outputs(plan, io, shapes, ns, tol, ref_label, &nref);
    st = load_with_inputs(plan, "cuda", io, shapes, ns, &p);
    if (st && is_no_gpu(st)) {
      printf("SKIP: no GPU: %s\n", dc_status_message(st));
      dc_status_free(st);
      no_gpu = 1;
      drt_destroy(p);
      free_outputs(ref, nref);
      free(plan);
      return;
    }
    if (!st) st = drt_run(p, &s);
    CHECK_OK(st);
  }
  if (!st) print_stats(label, &s);
  const char *fixture = strrchr(fo->dir, '/') ? strrchr(fo->dir, '/') + 1 : fo->dir;
  for (int i = 0; !st && i < drt_output_count(p); i++) {
    const drt_tensor_info *info = drt_output_info(p, i);
    const float *got = drt_output(p, info->name, NULL);
    float *want = reference_output(io, info);
    double vs_diffusers = NAN, vs_reference = NAN;
    char name[160];
    snprintf(name, sizeof name, "out.%s vs diffusers", info->name);
    int ok = want && compare(name, got, want, info->numel, tol, &vs_diffusers);
    snprintf(name, sizeof name, "out.%s vs reference backend", info->name);
    CHECK(ref && i < nref);
    ok &= ref && i < nref && compare(name, got, ref[i], info->numel, tol, &vs_reference);
    printf("RESULT fixture=%s io=%s entry=%s output=%s compute=%s vs_diffusers=%.3g vs_reference=%.3g tol=%.0e "
           "status=%s\n",
           fixture, io_name, base->entry ? base->entry : "default", info->name, compute, vs_diffusers, vs_reference,
           tol, ok ? "ok" : "FAIL");
    free(want);
  }
  drt_destroy(p);
  free_outputs(ref, nref);
  free(plan);
}

/* ---- runs ------------------------------------------------------------------ */

/* A memory technique the run asks for (it must not change the outputs):
 * --offload KIND, --group-level block|leaf, --blocks-per-group N,
 * --storage-dtype fp8_e4m3.  0 for
 * another flag or a value diffc would refuse. */
static int memory_option(const char *flag, const char *value, dc_memory_options *m) {
  if (!strcmp(flag, "--offload")) {
    for (int k = DC_OFFLOAD_NONE; k <= DC_OFFLOAD_GROUP; k++)
      if (!strcmp(value, dc_offload_name((dc_offload_kind)k))) return m->offload = (dc_offload_kind)k, 1;
    return 0;
  }
  if (!strcmp(flag, "--group-level") && (!strcmp(value, "block") || !strcmp(value, "leaf")))
    return m->group_level = !strcmp(value, "block") ? DC_GROUP_BLOCK : DC_GROUP_LEAF, 1;
  if (!strcmp(flag, "--blocks-per-group") && atoi(value) > 0) return m->blocks_per_group = atoi(value), 1;
  if (!strcmp(flag, "--storage-dtype") && !strcmp(value, "fp8_e4m3")) return m->storage = DT_F8_E4M3, 1;
  return 0;
}

/* The run's "diffc_options" (diffc flags for the diffusers options it used)
 * into co.  A flag this checker cannot pass is a failure naming it: compiling
 * without it would compare a different graph with diffusers. */
static int apply_diffc_options(const cJSON *run, const char *io_name, dc_compile_options *co) {
  const cJSON *opts = cJSON_GetObjectItemCaseSensitive(run, "diffc_options"), *o;
  int ok = 1;
  cJSON_ArrayForEach(o, opts) {
    const char *flag = cJSON_IsString(o) ? o->valuestring : "(not a string)";
    const cJSON *value = o->next;
    if (!strcmp(flag, "--vae-tiling")) co->vae_tiling = 1;
    else if (!strcmp(flag, "--vae-slicing")) co->vae_slicing = 1;
    else if (!strcmp(flag, "--no-vae-frame-batching")) co->vae_no_frame_batching = 1;
    else if (!strcmp(flag, "--clip-final-norm")) co->clip_final_norm = 1;
    else if (!strcmp(flag, "--clip-hidden-state") && cJSON_IsString(value)) { /* its value is the next string */
      co->clip_hidden_state = 1;
      co->clip_hidden_index = atoi(value->valuestring);
      o = o->next;
    } else if (cJSON_IsString(value) && memory_option(flag, value->valuestring, &co->memory)) {
      o = o->next;
    } else if (!strcmp(flag, "--prefetch")) {
      co->memory.prefetch = 1;
    } else {
      printf("  %s: case.json asks for diffc option %s, which fixture_check does not know\n", io_name, flag);
      ok = 0;
    }
  }
  CHECK(ok);
  return ok;
}

/* One run of case.json: compile, then check the plan on each backend. */
static void check_run(const fc_options *fo, const cJSON *run) {
  const char *entry = str_or_null(run, "entry"), *io_name = str_or_null(run, "io");
  const cJSON *tol_j = cJSON_GetObjectItemCaseSensitive(run, "tolerance");
  double tol = cJSON_IsNumber(tol_j) ? tol_j->valuedouble : 1e-4;
  char *io_path = dc_path_join(fo->dir, io_name), *model = dc_path_join(fo->dir, "model");
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shapes[8];
  int ns = tu_io_shapes(&io, shapes, 8);
  dc_compile_options co = {.model = model, .component = str_or_null(run, "component"),
                           .variant = str_or_null(run, "variant"), .entry = entry, .shapes = shapes, .nshapes = ns};
  co.memory.layout = fo->layout;
  co.cpu = fo->cpu;
  char label[256];
  snprintf(label, sizeof label, "%s %s", io_name, entry ? entry : "");
  int flags_ok = apply_diffc_options(run, io_name, &co);
  if (flags_ok && !strcmp(fo->target, "cuda")) {
    for (int c = 0; c < fo->ncomputes; c++) /* without a GPU, the reference runs still check each plan */
      check_cuda(fo, &co, fo->computes[c], tol, &io, io_name, shapes, ns, label);
  } else if (flags_ok) {
    char *plan = tu_path("fixture.dplan");
    dc_compile_report rep;
    dc_status *st = dc_compile(&co, plan, &rep);
    CHECK_OK(st);
    static const char *all[] = {"llvm", "reference"};
    for (int b = 0; !st && b < 2; b++)
      if (!fo->backend || !strcmp(fo->backend, all[b])) run_backend(plan, all[b], &io, shapes, ns, tol, label);
    free(plan);
  }
  dc_st_close(&io);
  free(io_path);
  free(model);
}

static int parse_computes(char *list, fc_options *o) {
  for (char *s = strtok(list, ","); s; s = strtok(NULL, ",")) {
    if (o->ncomputes == 4 || (strcmp(s, "f32") && strcmp(s, "bf16") && strcmp(s, "f16"))) return 0;
    o->computes[o->ncomputes++] = s;
  }
  return o->ncomputes > 0;
}

static int parse_args(int argc, char **argv, fc_options *o) {
  memset(o, 0, sizeof *o);
  o->target = "cpu";
  o->dir = argc > 1 ? argv[1] : NULL;
  for (int i = 2; i + 1 < argc; i += 2) {
    const char *a = argv[i];
    if (!strcmp(a, "--backend")) o->backend = argv[i + 1];
    else if (!strcmp(a, "--target")) o->target = argv[i + 1];
    else if (!strcmp(a, "--cuda-arch")) o->cuda_arch = argv[i + 1];
    else if (!strcmp(a, "--cpu")) o->cpu = argv[i + 1];
    else if (!strcmp(a, "--layout")) {
      if (strcmp(argv[i + 1], "nhwc") != 0) return 0;
      o->layout = LAYOUT_NHWC;
    } else if (!strcmp(a, "--compute")) {
      if (!parse_computes(argv[i + 1], o)) return 0;
    } else return 0;
  }
  if (!o->ncomputes) o->computes[o->ncomputes++] = "f32";
  return o->dir && argc % 2 == 0 && (!strcmp(o->target, "cpu") || !strcmp(o->target, "cuda"));
}

int main(int argc, char **argv) {
  fc_options fo;
  if (!parse_args(argc, argv, &fo)) {
    fprintf(stderr, "usage: fixture_check FIXTURE_DIR [--backend llvm|reference] [--layout nhwc] [--cpu NAME]\n"
                    "                     [--target cuda [--compute f32|bf16|f32,bf16] [--cuda-arch LIST]]\n");
    return 2;
  }
  tu_init(0, argv);
  if (fo.cpu) { /* a target this machine cannot run is a skip, not a failure */
    dc_cpu_target t;
    char *missing = NULL;
    CHECK_OK(dc_cpu_target_named(fo.cpu, &t));
    int runs = t.triple && dc_cpu_target_runs_here(&t, &missing);
    dc_cpu_target_deinit(&t);
    if (!runs) {
      printf("SKIP: --cpu %s: this machine lacks %s\n", fo.cpu, missing ? missing : "its features");
      dc_free(missing);
      return tu_finish() ? 1 : 77;
    }
  }
  char *case_path = dc_path_join(fo.dir, "case.json"), *text = NULL;
  CHECK_OK(dc_file_read_all(case_path, &text, NULL));
  cJSON *c = text ? cJSON_Parse(text) : NULL;
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(c, "runs"), *run;
  CHECK(cJSON_IsArray(runs) && cJSON_GetArraySize(runs) > 0);
  printf("fixture %s (target %s)\n", fo.dir, fo.target);
  cJSON_ArrayForEach(run, runs) check_run(&fo, run);
  cJSON_Delete(c);
  dc_free(text);
  free(case_path);
  return tu_finish_or_skip(no_gpu);
}
