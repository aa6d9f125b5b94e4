/* cpu_target.c — which CPU a plan is compiled for, and whether it runs here.
 * LLVM 14 names CPUs newer than itself "generic" but still reports their
 * features (+avx512f ...), so a target is always the (cpu, features) pair. */
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_target.h"

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

/* The x86-64 psABI levels as LLVM 14 spells their features (the names
 * LLVMGetHostCPUFeatures reports, so dc_cpu_target_runs_here can match
 * them).  Each level adds to the one before. */
static const char *const LEVEL_ADDS[] = {
    "+64bit,+cmov,+cx8,+fxsr,+mmx,+sse,+sse2",
    "+crc32,+cx16,+popcnt,+sahf,+sse3,+sse4.1,+sse4.2,+ssse3",
    "+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+xsave",
    "+avx512bw,+avx512cd,+avx512dq,+avx512f,+avx512vl",
};

/* --cpu names: a level, or a CPU that is tuned for (LLVM's "tune-cpu")
 * while its code uses only its level's features.  A CPU name alone would
 * let LLVM use every feature of that CPU (aes, rdrnd, ...), which the plan
 * would not list and diffrun would not check. */
static const struct {
  const char *name;
  int level;
  const char *tune;
} NAMED[] = {
    {"x86-64", 1, NULL},          {"x86-64-v2", 2, NULL},         {"x86-64-v3", 3, NULL},
    {"x86-64-v4", 4, NULL},       {"haswell", 3, "haswell"},      {"skylake", 3, "skylake"},
    {"znver1", 3, "znver1"},      {"znver2", 3, "znver2"},        {"znver3", 3, "znver3"},
    {"skylake-avx512", 4, "skylake-avx512"}, {"icelake-server", 4, "icelake-server"},
    {"sapphirerapids", 4, "sapphirerapids"},
};

dc_status *dc_cpu_target_named(const char *name, dc_cpu_target *t) {
  memset(t, 0, sizeof *t);
  if (!name || !strcmp(name, "native")) return dc_cpu_target_host(t);
  if (!strcmp(name, "generic")) return dc_cpu_target_generic(t);
  int at = -1;
  for (int i = 0; i < (int)(sizeof NAMED / sizeof NAMED[0]); i++)
    if (!strcmp(name, NAMED[i].name)) at = i;
  if (at < 0) {
    dc_buf b;
    dc_buf_init(&b);
    for (int i = 0; i < (int)(sizeof NAMED / sizeof NAMED[0]); i++) dc_buf_printf(&b, ", %s", NAMED[i].name);
    dc_buf_u8(&b, 0);
    dc_status *st = dc_error(DC_ERR_ARGUMENT, "--cpu %s: expected native, generic%s", name,
                             b.failed ? "" : (const char *)b.data);
    dc_buf_deinit(&b);
    return st;
  }
  dc_status *st = take(LLVMGetDefaultTargetTriple(), &t->triple);
  if (!st && strncmp(t->triple, "x86_64", 6) != 0)
    st = dc_error(DC_ERR_UNSUPPORTED, "--cpu %s is an x86-64 target; this host is %s", name, t->triple);
  dc_buf f;
  dc_buf_init(&f);
  for (int l = 0; l < NAMED[at].level; l++) dc_buf_printf(&f, "%s%s", l ? "," : "", LEVEL_ADDS[l]);
  dc_buf_u8(&f, 0);
  char *sorted = NULL;
  if (!st && f.failed) st = dc_nomem("making the CPU target");
  if (!st) st = enabled_features((const char *)f.data, &sorted);
  dc_buf_deinit(&f);
  if (!st) {
    t->features = sorted;
    const char *level[] = {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
    t->cpu = dc_strdup(level[NAMED[at].level - 1]);
    t->tune = NAMED[at].tune ? dc_strdup(NAMED[at].tune) : NULL;
    if (!t->cpu || (NAMED[at].tune && !t->tune)) st = dc_nomem("making the CPU target");
  }
  if (st) dc_cpu_target_deinit(t);
  return st;
}

void dc_cpu_target_deinit(dc_cpu_target *t) {
  dc_free(t->triple);
  dc_free(t->cpu);
  dc_free(t->features);
  dc_free(t->tune);
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
