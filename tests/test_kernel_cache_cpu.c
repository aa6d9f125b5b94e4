/* test_kernel_cache_cpu.c — CPU kernels through the kernel cache
 * (codegen/kernel_cache.h, codegen/emit_kernels.c), on the vae_tiny
 * decoder:
 *  - a cold compile writes one entry per distinct object; a second compile
 *    reads them all and writes none, and its plan is byte-identical to the
 *    cold one and to a compile with --no-kernel-cache (a cached object is
 *    exactly what LLVM would emit);
 *  - the plan runs, with the same outputs as the uncached plan's;
 *  - an entry damaged on disk (a flipped payload byte, a truncated file) is
 *    rejected, recompiled and rewritten, and the plan is still identical;
 *  - another CPU target (x86-64-v3 kernels) gets entries of its own: the
 *    key covers the target;
 *  - --no-kernel-cache reads and writes nothing. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "runtime/diffrun.h"
#include "testutil.h"

static char *model, *cache;

/* Entries of kind "cpu-" in the cache directory. */
static int count_entries(char **first) {
  int n = 0;
  DIR *d = opendir(cache);
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, "cpu-", 4) && strstr(e->d_name, ".bin")) {
      if (first && !*first) *first = dc_path_join(cache, e->d_name);
      n++;
    }
  closedir(d);
  return n;
}

static dc_status *compile(const char *plan, const char *cpu, int no_cache) {
  dc_input_shape z = {"z", 4, {1, 4, 8, 8}};
  dc_compile_options o = {.model = model, .entry = "decode", .shapes = &z, .nshapes = 1, .cpu = cpu,
                          .kernel_cache = no_cache ? NULL : cache, .no_kernel_cache = no_cache};
  return dc_compile(&o, plan, NULL);
}

static int same_file(const char *a, const char *b) {
  char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  dc_status *s1 = dc_file_read_all(a, &x, &nx), *s2 = dc_file_read_all(b, &y, &ny);
  int same = !s1 && !s2 && nx == ny && memcmp(x, y, nx) == 0;
  dc_status_free(s1), dc_status_free(s2), dc_free(x), dc_free(y);
  return same;
}

/* The plan's output for fixed inputs, malloc'd. */
static float *run(const char *plan, size_t *n) {
  drt_plan *p = NULL;
  float *out = NULL;
  CHECK_OK(drt_load(plan, &(drt_options){.backend = "llvm", .threads = 2}, &p));
  if (!p) return NULL;
  drt_set_random_inputs(p, 7);
  drt_stats stats;
  CHECK_OK(drt_run(p, &stats));
  const float *y = drt_output(p, drt_output_info(p, 0)->name, n);
  if (y && (out = malloc(*n * sizeof *out))) memcpy(out, y, *n * sizeof *out);
  drt_destroy(p);
  return out;
}

static void flip_payload_byte(const char *path) {
  char *d = NULL;
  size_t n = 0;
  CHECK_OK(dc_file_read_all(path, &d, &n));
  if (!d || n < 64) return;
  d[n - 10] ^= 0x40;
  tu_write_file(path, d, n);
  dc_free(d);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  model = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model");
  cache = tu_path("kcache");
  char *cold = tu_path("cold.dplan"), *warm = tu_path("warm.dplan"), *none = tu_path("none.dplan");

  CHECK_OK(compile(cold, NULL, 0));
  int entries = count_entries(NULL);
  CHECK(entries > 10);
  CHECK_OK(compile(warm, NULL, 0));
  CHECK(count_entries(NULL) == entries);
  CHECK_OK(compile(none, NULL, 1));
  CHECK(same_file(cold, warm) && same_file(cold, none));
  printf("cold compile wrote %d entries; the warm compile's plan and an uncached one are byte-identical to it\n",
         entries);

  size_t n1 = 0, n2 = 0;
  float *a = run(warm, &n1), *b = run(none, &n2);
  CHECK(a && b && n1 == n2 && n1 > 0 && memcmp(a, b, n1 * sizeof *a) == 0);
  free(a), free(b);
  printf("the plan from cached kernels runs: %zu outputs, bit-identical to the uncached plan's\n", n1);

  char *victim = NULL;
  count_entries(&victim);
  CHECK(victim != NULL);
  if (victim) {
    flip_payload_byte(victim);
    CHECK_OK(compile(warm, NULL, 0));
    CHECK(same_file(cold, warm));
    char *d = NULL;
    size_t size = 0;
    CHECK_OK(dc_file_read_all(victim, &d, &size)); /* rewritten whole: truncate it now */
    if (d) tu_write_file(victim, d, size / 2);
    dc_free(d);
    CHECK_OK(compile(warm, NULL, 0));
    CHECK(same_file(cold, warm));
    CHECK(count_entries(NULL) == entries);
    printf("a flipped byte and a truncated entry were each rejected and recompiled; the plan is unchanged\n");
  }
  dc_free(victim);

  CHECK_OK(compile(warm, "x86-64-v3", 0));
  int more = count_entries(NULL);
  CHECK(more > entries);
  printf("x86-64-v3 kernels added %d entries of their own\n", more - entries);
  CHECK_OK(compile(none, "x86-64-v3", 1));
  CHECK(count_entries(NULL) == more);
  CHECK(same_file(warm, none));
  printf("--no-kernel-cache read and wrote nothing; its plan equals the cached one\n");

  dc_free(model), free(cache), free(cold), free(warm), free(none);
  return tu_finish();
}
