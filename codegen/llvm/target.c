/* target.c — which CPU a plan is compiled for, and whether it runs here.
 * LLVM 14 names CPUs newer than itself "generic" but still reports their
 * features (+avx512f ...), so a target is always the (cpu, features) pair. */
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <stdlib.h>
#include <string.h>

#include "llvm_codegen.h"

static dc_status *take(char *llvm_str, char **out) {
  *out = dc_strdup(llvm_str ? llvm_str : "");
  LLVMDisposeMessage(llvm_str);
  return *out ? NULL : dc_nomem("reading the CPU target");
}

/* Keeps only the enabled features ("+x"), sorted, so plans are deterministic. */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static dc_status *enabled_features(const char *all, char **out) {
  char *copy = dc_strdup(all);
  size_t n = 0, cap = 16;
  char **items = dc_malloc(cap * sizeof *items);
  if (!copy || !items) {
    dc_free(copy);
    dc_free(items);
    return dc_nomem("reading CPU features");
  }
  for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    if (tok[0] != '+') continue;
    if (n == cap) {
      char **grown = dc_realloc(items, (cap *= 2) * sizeof *items);
      if (!grown) {
        dc_free(copy);
        dc_free(items);
        return dc_nomem("reading CPU features");
      }
      items = grown;
    }
    items[n++] = tok;
  }
  qsort(items, n, sizeof *items, cmp_str);
  dc_buf b;
  dc_buf_init(&b);
  for (size_t i = 0; i < n; i++) dc_buf_printf(&b, "%s%s", i ? "," : "", items[i]);
  dc_buf_u8(&b, 0);
  dc_free(copy);
  dc_free(items);
  if (b.failed) {
    dc_buf_deinit(&b);
    return dc_nomem("reading CPU features");
  }
  *out = (char *)b.data;
  return NULL;
}

dc_status *dc_cpu_target_host(dc_cpu_target *t) {
  memset(t, 0, sizeof *t);
  char *feats = NULL;
  dc_status *st = take(LLVMGetDefaultTargetTriple(), &t->triple);
  if (!st) st = take(LLVMGetHostCPUName(), &t->cpu);
  if (!st) st = take(LLVMGetHostCPUFeatures(), &feats);
  if (!st) st = enabled_features(feats, &t->features);
  dc_free(feats);
  if (st) dc_cpu_target_deinit(t);
  return st;
}

dc_status *dc_cpu_target_generic(dc_cpu_target *t) {
  memset(t, 0, sizeof *t);
  dc_status *st = take(LLVMGetDefaultTargetTriple(), &t->triple);
  if (!st && strncmp(t->triple, "x86_64", 6) != 0)
    st = dc_error(DC_ERR_UNSUPPORTED, "--cpu generic is defined for x86-64 hosts; this host is %s", t->triple);
  t->cpu = dc_strdup("x86-64");
  t->features = dc_strdup("");
  if (!st && (!t->cpu || !t->features)) st = dc_nomem("making the generic target");
  if (st) dc_cpu_target_deinit(t);
  return st;
}

void dc_cpu_target_deinit(dc_cpu_target *t) {
  dc_free(t->triple);
  dc_free(t->cpu);
  dc_free(t->features);
  memset(t, 0, sizeof *t);
}

/* Whether the comma-separated list holds the feature feat[0..len). */
static int has_feature(const char *list, const char *feat, size_t len) {
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && memcmp(p, feat, len) == 0) return 1;
    p += n + (end ? 1 : 0);
  }
  return 0;
}

int dc_cpu_target_runs_here(const dc_cpu_target *t, char **missing) {
  *missing = NULL;
  dc_cpu_target host;
  dc_status *st = dc_cpu_target_host(&host);
  if (st) {
    dc_status_free(st);
    return 0;
  }
  dc_buf miss;
  dc_buf_init(&miss);
  const char *dash = strchr(t->triple, '-');
  size_t arch = dash ? (size_t)(dash - t->triple) : strlen(t->triple);
  if (strncmp(t->triple, host.triple, arch) != 0 || (host.triple[arch] != '-' && host.triple[arch] != 0))
    dc_buf_printf(&miss, "architecture %.*s (this machine is %s)", (int)arch, t->triple, host.triple);
  for (const char *p = t->features; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (!has_feature(host.features, p, len)) dc_buf_printf(&miss, "%s%.*s", miss.len ? "," : "", (int)len, p);
    p += len + (end ? 1 : 0);
  }
  dc_cpu_target_deinit(&host);
  if (miss.len == 0) {
    dc_buf_deinit(&miss);
    return 1;
  }
  dc_buf_u8(&miss, 0);
  *missing = miss.failed ? NULL : (char *)miss.data;
  if (miss.failed) dc_buf_deinit(&miss);
  return 0;
}

int dc_cpu_target_vector_width(const dc_cpu_target *t) {
  if (has_feature(t->features, "+avx512f", 8)) return 16;
  if (has_feature(t->features, "+avx2", 5)) return 8;
  return 4;
}
