/* test_backend.c — the runtime's backend table (runtime/backend.h): every
 * backend fills every entry; the choice of backend for a plan and an
 * --backend name; and the session (runtime/runtime.c) holds no backend
 * branch: its code, read without comments and string literals, names no
 * backend, no target and no backend-private API, and it includes only the
 * table's header among the runtime's backend files.  Running plans through
 * the table is what every other runtime test does. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "testutil.h"

static void every_entry_filled(void) {
  int n = 0;
  for (int i = 0; drt_backends[i]; i++, n++) {
    const drt_backend_i *b = drt_backends[i];
    CHECK(b->name && *b->name);
    CHECK(b->create && b->arena && b->upload_weights && b->load_kernels && b->input && b->output && b->begin_run &&
          b->run_step && b->copy && b->transfer && b->synchronise && b->stats && b->device && b->destroy);
    for (int j = 0; j < i; j++) CHECK(strcmp(drt_backends[j]->name, b->name) != 0);
  }
  CHECK(n == 3);
  CHECK(drt_backend_reference.reads_weights_in_place && drt_backend_llvm.reads_weights_in_place);
  CHECK(!drt_backend_cuda.reads_weights_in_place);
  printf("%d backends, every entry of the table filled\n", n);
}

static const drt_backend_i *choose(uint32_t target, int with_kernels, const char *asked) {
  dc_plan plan = {0};
  plan.target = target;
  plan.kernels.nobjects = with_kernels;
  const drt_backend_i *b = NULL;
  CHECK_OK(drt_backend_choose(&plan, "p.dplan", asked, &b));
  return b;
}

static void choice(void) {
  CHECK(choose(DC_TARGET_CPU, 1, NULL) == &drt_backend_llvm);
  CHECK(choose(DC_TARGET_CPU, 0, NULL) == &drt_backend_reference);
  CHECK(choose(DC_TARGET_CPU, 1, "reference") == &drt_backend_reference);
  CHECK(choose(DC_TARGET_CPU, 0, "llvm") == &drt_backend_llvm); /* which refuses it at create, naming reference */
  CHECK(choose(DC_TARGET_CUDA, 0, NULL) == &drt_backend_cuda);
  CHECK(choose(DC_TARGET_CUDA, 0, "cuda") == &drt_backend_cuda);
  CHECK(choose(DC_TARGET_CUDA, 0, "llvm") == &drt_backend_reference);
  CHECK(choose(DC_TARGET_CUDA, 0, "reference") == &drt_backend_reference);
  dc_plan cpu = {0};
  const drt_backend_i *b = NULL;
  CHECK_ERR(drt_backend_choose(&cpu, "p.dplan", "metal", &b),
            "backend \"metal\" is not available (backends: cuda, llvm, reference)");
  CHECK_ERR(drt_backend_choose(&cpu, "p.dplan", "cuda", &b), "p.dplan: --backend cuda needs a plan compiled for CUDA");
  cpu.target = 7;
  CHECK_ERR(drt_check_target(&cpu, "p.dplan"), "p.dplan: the plan was built for target 7");
  printf("backend choice: the plan's own by default, llvm on a CUDA plan means reference, unknown names refused\n");
}

/* The CPU executor's create: the modelled device's budget first, then the
 * llvm backend's need for compiled kernels; nothing is made on a refusal. */
static void cpu_create_refusals(void) {
  dc_plan plan = {0};
  dc_liveness live = {0};
  drt_options opt = {.device_memory = 1000};
  live.ndevices = 1;
  live.dev_peak[0] = 1024;
  live.dev_weights[0] = 512;
  drt_backend_setup s = {.path = "p.dplan", .plan = &plan, .live = &live, .opt = &opt};
  void *be = NULL;
  CHECK_ERR(drt_backend_llvm.create(&s, &be),
            "p.dplan: the plan needs 1.5 KiB of device memory (1536 bytes: activation arena 1.0 KiB + resident weights "
            "512 B) but the device has 1000 B (--device-memory); nothing was run");
  CHECK(!be);
  opt.device_memory = 0;
  CHECK_ERR(drt_backend_llvm.create(&s, &be),
            "p.dplan: the plan holds no compiled kernels; run it with --backend reference");
  CHECK(!be);
  printf("cpu create: over the --device-memory budget, or llvm without kernels: refused, nothing made\n");
}

/* The C source without comments and without the contents of string and
 * character literals (include names are kept apart, in includes). */
static char *code_of(const char *src, char *includes, size_t cap) {
  size_t n = strlen(src), o = 0, inc = 0;
  char *out = malloc(n + 1);
  for (size_t i = 0; i < n;) {
    if (!strncmp(src + i, "/*", 2)) {
      const char *end = strstr(src + i + 2, "*/");
      i = end ? (size_t)(end - src) + 2 : n;
    } else if (!strncmp(src + i, "//", 2)) {
      while (i < n && src[i] != '\n') i++;
    } else if (!strncmp(src + i, "#include", 8)) {
      while (i < n && src[i] != '\n') {
        if (inc + 1 < cap) includes[inc++] = src[i];
        i++;
      }
      if (inc + 1 < cap) includes[inc++] = '\n';
    } else if (src[i] == '"' || src[i] == '\'') {
      char q = src[i++];
      while (i < n && src[i] != q) i += src[i] == '\\' ? 2 : 1;
      i++;
      out[o++] = q;
      out[o++] = q;
    } else {
      out[o++] = src[i++];
    }
  }
  out[o] = 0;
  includes[inc] = 0;
  return out;
}

/* needle anywhere in hay, ignoring case (cuda, CUDA, p->cuda, DC_TARGET_CUDA...) */
static const char *find_nocase(const char *hay, const char *needle) {
  size_t k = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < k && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == k) return hay;
  }
  return NULL;
}

static void session_has_no_backend_branch(void) {
  char *path = dc_path_join(tu_source_dir, "../runtime/runtime.c");
  dc_mapped_file f;
  CHECK_OK(dc_file_map(path, &f));
  if (!f.data) {
    dc_free(path);
    return;
  }
  char *src = malloc(f.size + 1), includes[4096];
  memcpy(src, f.data, f.size);
  src[f.size] = 0;
  char *code = code_of(src, includes, sizeof includes);
  int found = 0;
  /* backends, targets, and what only a backend should touch */
  const char *words[] = {"cuda", "llvm", "reference", "dc_target", "use_llvm", "dc_cpu_", "dc_pool", "dc_ref_kernel",
                         "dc_cu_", "arena_at", "gpu"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    const char *hit = find_nocase(code, words[i]);
    if (hit) printf("runtime.c's code names %s: \"%.*s\"\n", words[i], (int)strcspn(hit, "\n"), hit);
    found += hit != NULL;
    CHECK(!hit);
  }
  const char *headers[] = {"cuda", "cpu_", "kernels", "threadpool", "fit_advice", "llvm"};
  for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
    const char *hit = find_nocase(includes, headers[i]);
    if (hit) printf("runtime.c includes a backend's header: %.*s\n", (int)strcspn(hit, "\n"), hit);
    found += hit != NULL;
    CHECK(!hit);
  }
  CHECK(strstr(includes, "\"backend.h\""));
  if (!found) printf("runtime.c: no backend, target or backend-private name in its code or its includes\n");
  free(code);
  free(src);
  dc_file_unmap(&f);
  dc_free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  every_entry_filled();
  choice();
  cpu_create_refusals();
  session_has_no_backend_branch();
  return tu_finish();
}
