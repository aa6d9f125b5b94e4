/* test_cpu_target.c — which CPU a plan's kernels are for: the host target
 * runs here; a target with a feature this CPU lacks is refused with the
 * missing feature named; named targets (x86-64 levels, CPU names) have
 * their level's features and vector width; a generic and an x86-64-v3 plan
 * compile and run and match the native one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Object.h>

#include "driver/compile.h"
#include "codegen/emit_kernels.h"
#include "codegen/llvm/llvm_codegen.h"
#include "runtime/diffrun.h"
#include "testutil.h"

static void test_runs_here(void) {
  dc_cpu_target host;
  CHECK_OK(dc_cpu_target_host(&host));
  char *missing = NULL;
  CHECK(dc_cpu_target_runs_here(&host, &missing) && missing == NULL);
  printf("host target: %s, cpu %s, vector width %d\n", host.triple, host.cpu, dc_cpu_target_vector_width(&host));
  dc_cpu_target fake = {host.triple, host.cpu, "+sse2,+diffc-imaginary-feature", NULL};
  CHECK(!dc_cpu_target_runs_here(&fake, &missing));
  CHECK(missing && strcmp(missing, "+diffc-imaginary-feature") == 0);
  printf("a target needing +diffc-imaginary-feature is refused, missing: %s\n", missing ? missing : "?");
  dc_free(missing);
  dc_cpu_target other = {"aarch64-unknown-linux-gnu", "generic", "", NULL};
  CHECK(!dc_cpu_target_runs_here(&other, &missing));
  CHECK(missing && strstr(missing, "architecture aarch64"));
  dc_free(missing);
  dc_cpu_target generic;
  CHECK_OK(dc_cpu_target_generic(&generic));
  CHECK(dc_cpu_target_runs_here(&generic, &missing) && dc_cpu_target_vector_width(&generic) == 4);
  dc_cpu_target_deinit(&generic);
  dc_cpu_target_deinit(&host);
}

/* Compiles the tiny UNet for `cpu`, runs it on a ramp input, returns sample. */
static float *run_tiny(const char *cpu, size_t *numel) {
  char *model = dc_path_join(tu_source_dir, "fixtures/unet_tiny/model"), *plan = tu_path("cpu.dplan");
  dc_compile_options co = {.model = model, .cpu = cpu};
  drt_plan *p = NULL;
  float *copy = NULL;
  dc_status *st = dc_compile(&co, plan, NULL);
  if (!st) st = drt_load(plan, NULL, &p);
  for (int i = 0; !st && i < drt_input_count(p); i++) {
    const drt_tensor_info *in = drt_input_info(p, i);
    float *d = malloc(in->numel * sizeof *d);
    for (size_t k = 0; k < in->numel; k++) d[k] = (float)((double)(k % 13) / 6.0 - 1.0);
    st = drt_set_input(p, in->name, d, in->numel);
    free(d);
  }
  drt_stats s;
  if (!st) st = drt_run(p, &s);
  CHECK_OK(st);
  if (p && !st) {
    const float *y = drt_output(p, "sample", numel);
    copy = malloc(*numel * sizeof *copy);
    memcpy(copy, y, *numel * sizeof *copy);
  }
  drt_destroy(p);
  free(model);
  free(plan);
  return copy;
}

/* The names --cpu takes: each level's features (a superset of the level
 * below), its vector width, the tune CPU; an unknown name lists them. */
static void test_named(void) {
  static const struct {
    const char *name, *cpu, *tune, *has, *lacks;
    int width;
  } cases[] = {
      {"x86-64", "x86-64", NULL, "+sse2", "+sse3", 4},
      {"x86-64-v2", "x86-64-v2", NULL, "+sse4.2", "+avx", 4},
      {"x86-64-v3", "x86-64-v3", NULL, "+fma", "+avx512f", 8},
      {"haswell", "x86-64-v3", "haswell", "+avx2", "+avx512f", 8},
      {"znver1", "x86-64-v3", "znver1", "+f16c", "+avx512f", 8},
      {"x86-64-v4", "x86-64-v4", NULL, "+avx512vl", "+avx512bf16", 16},
      {"skylake-avx512", "x86-64-v4", "skylake-avx512", "+avx512bw", "+amx-tile", 16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dc_cpu_target t;
    CHECK_OK(dc_cpu_target_named(cases[i].name, &t));
    const char *f = t.features ? t.features : "";
    char has[32], lacks[32];
    snprintf(has, sizeof has, "%s,", cases[i].has);
    snprintf(lacks, sizeof lacks, "%s,", cases[i].lacks);
    char *fc = malloc(strlen(f) + 2);
    sprintf(fc, "%s,", f); /* every feature ends in ',' for strstr */
    CHECK(!strcmp(t.cpu, cases[i].cpu));
    CHECK(cases[i].tune ? t.tune && !strcmp(t.tune, cases[i].tune) : !t.tune);
    CHECK(strstr(fc, has) && !strstr(fc, lacks) && strstr(fc, "+sse2,"));
    CHECK(dc_cpu_target_vector_width(&t) == cases[i].width);
    printf("--cpu %-15s cpu %s, tune %s, %d lanes, features %s\n", cases[i].name, t.cpu, t.tune ? t.tune : "-",
           dc_cpu_target_vector_width(&t), f);
    free(fc);
    dc_cpu_target_deinit(&t);
  }
  dc_cpu_target t;
  CHECK_ERR(dc_cpu_target_named("pentium", &t), "--cpu pentium: expected native, generic, x86-64, x86-64-v2, "
                                                 "x86-64-v3, x86-64-v4, haswell");
  /* this host's own features include its level's: an AVX2 host runs v3 */
  dc_cpu_target host, v3;
  CHECK_OK(dc_cpu_target_host(&host));
  CHECK_OK(dc_cpu_target_named("x86-64-v3", &v3));
  char *missing = NULL;
  int runs = dc_cpu_target_runs_here(&v3, &missing);
  CHECK(runs == (dc_cpu_target_vector_width(&host) >= 8));
  printf("x86-64-v3 code %s here%s%s\n", runs ? "runs" : "does not run", missing ? ": lacks " : "",
         missing ? missing : "");
  dc_free(missing);
  dc_cpu_target_deinit(&v3);
  dc_cpu_target_deinit(&host);
}

static void test_generic_plan(void) {
  size_t n1 = 0, n2 = 0;
  float *native = run_tiny("native", &n1), *generic = run_tiny("generic", &n2);
  CHECK(native && generic && n1 == n2);
  double d2 = 0, r2 = 0;
  for (size_t i = 0; native && generic && i < n1; i++) {
    d2 += ((double)native[i] - generic[i]) * ((double)native[i] - generic[i]);
    r2 += (double)native[i] * native[i];
  }
  double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
  CHECK(rel < 1e-5);
  printf("--cpu generic plan runs; its output matches the native plan's (rel L2 %.2g)\n", rel);
  dc_cpu_target host;
  CHECK_OK(dc_cpu_target_host(&host));
  if (dc_cpu_target_vector_width(&host) >= 8) {
    size_t n3 = 0;
    float *v3 = run_tiny("x86-64-v3", &n3);
    CHECK(v3 && n3 == n1);
    double e2 = 0;
    for (size_t i = 0; v3 && native && n3 == n1 && i < n1; i++)
      e2 += ((double)native[i] - v3[i]) * ((double)native[i] - v3[i]);
    double rel3 = sqrt(e2 / (r2 > 0 ? r2 : 1));
    CHECK(rel3 < 1e-5);
    printf("--cpu x86-64-v3 plan runs; its output matches the native plan's (rel L2 %.2g)\n", rel3);
    free(v3);
  }
  dc_cpu_target_deinit(&host);
  dc_compile_options bad = {.model = "unused", .cpu = "pentium"};
  char *plan = tu_path("x.dplan");
  CHECK_ERR(dc_compile(&bad, plan, NULL), "--cpu pentium: expected native, generic, x86-64");
  free(plan);
  free(native);
  free(generic);
}

/* diffrun links kernels with ORC's RuntimeDyld, which may place sections
 * more than 2 GiB apart (it did beside 3 GiB of mmapped weights, and half
 * the runs crashed): no relocation may be 32-bit. */
static int count_short_relocations(const dc_plan_object *o, int *total) {
  LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)o->data, o->size, "k");
  char *err = NULL;
  LLVMBinaryRef bin = LLVMCreateBinary(mb, NULL, &err);
  int bad = 0;
  if (!bin) {
    fprintf(stderr, "not an object: %s\n", err ? err : "?");
    LLVMDisposeMessage(err);
    LLVMDisposeMemoryBuffer(mb);
    return -1;
  }
  LLVMSectionIteratorRef sec = LLVMObjectFileCopySectionIterator(bin);
  for (; !LLVMObjectFileIsSectionIteratorAtEnd(bin, sec); LLVMMoveToNextSection(sec)) {
    LLVMRelocationIteratorRef r = LLVMGetRelocations(sec);
    for (; !LLVMIsRelocationIteratorAtEnd(sec, r); LLVMMoveToNextRelocation(r)) {
      uint64_t type = LLVMGetRelocationType(r);
      (*total)++;
      /* R_X86_64_PC32, PLT32, 32, 32S, GOTPCREL, GOTPCRELX, REX_GOTPCRELX */
      bad += type == 2 || type == 4 || type == 10 || type == 11 || type == 9 || type == 41 || type == 42;
    }
    LLVMDisposeRelocationIterator(r);
  }
  LLVMDisposeSectionIterator(sec);
  LLVMDisposeBinary(bin);
  LLVMDisposeMemoryBuffer(mb);
  return bad;
}

static void test_no_short_relocations(void) {
  char *model = dc_path_join(tu_source_dir, "fixtures/unet_tiny/model");
  dc_folder f;
  dc_module *m = NULL;
  dc_status *st = dc_folder_open(model, NULL, &f);
  if (!st) st = dc_frontend_build(&f, NULL, &m);
  dc_cpu_target t;
  dc_plan_kernels k = {0};
  if (!st) st = dc_cpu_target_host(&t);
  if (!st) {
    dc_cpu_emit_options eo = {.no_cache = 1}; /* the relocations LLVM emits now, not a cached object */
    st = dc_emit_cpu_kernels(m, &t, &eo, &k);
    dc_cpu_target_deinit(&t);
  }
  CHECK_OK(st);
  int bad = 0, total = 0;
  for (int i = 0; i < k.nobjects; i++) bad += count_short_relocations(&k.objects[i], &total);
  CHECK(k.nobjects > 0 && total > 0 && bad == 0);
  printf("kernel objects: %d relocations, %d of them 32-bit (must be 0: the large code model)\n", total, bad);
  dc_plan_kernels_deinit(&k);
  dc_module_destroy(m);
  dc_folder_close(&f);
  free(model);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_runs_here();
  test_named();
  test_generic_plan();
  test_no_short_relocations();
  return tu_finish();
}
