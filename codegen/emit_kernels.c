/* emit_kernels.c — the CPU codegen stage of the driver.
 *
 * Nodes with equal signatures share one kernel (codegen/kernel_group.h): a
 * UNet repeats its blocks.  Each distinct kernel is generated into a module
 * of its own, named by a hash of its LLVM IR (dc_llvm_kernel_key), and its
 * object file comes from the kernel cache (codegen/kernel_cache.h) when an
 * entry for that hash exists, else from LLVM's O3 pipeline, written to the
 * cache after.  Generating IR takes milliseconds; optimizing and emitting
 * it is nearly all of a compile, so compiling a model again, with other
 * memory options or the same blocks at the same shapes in another model, is
 * fast.  Kernels are compiled on a thread pool (each with its own LLVM
 * context, which LLVM allows), one object file per distinct kernel (equal
 * IR from two signatures gives one object, linked once).  Nodes whose op
 * has no LLVM kernel run their reference kernel; the count is reported so
 * it is never a surprise. */
#define _GNU_SOURCE /* memmem */
#include "emit_kernels.h"

#include <string.h>
#include <unistd.h>

#include "codegen/kernel_group.h"
#include "codegen/llvm/kgen.h"
#include "llvm/Config/llvm-config.h" /* LLVM_VERSION_STRING */
#include "support/progress.h"
#include "support/threadpool.h"

typedef struct {
  const dc_module *m;
  const dc_cpu_target *t;
  const int32_t *reps; /* representative node of each distinct kernel */
  dc_kcache *cache;
  int winograd;        /* dc_llvm_set_winograd */
  dc_cpu_kernel *out;  /* per rep */
  dc_kernel_image *obj;
  uint64_t *key;
  int *cached;
  dc_status **st;
  dc_progress_counter *done; /* kernels finished, from whichever pool thread */
} emit_job;

static int has_llvm_kernel(const dc_module *m, int32_t id) { return dc_kgen_emitter_for(m->nodes[id].op) != NULL; }

/* Non-leaf nodes whose op has no LLVM kernel: they run the reference one. */
static int count_reference(const dc_module *m, const dc_kernel_groups *g) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) /* uploads and transfers are copies, not kernels */
    n += g->group_of[i] < 0 && !(dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) && !dc_op_is_copy(m->nodes[i].op);
  return n;
}

/* Whether a cached object names the symbol we are about to link against
 * (in its ELF string table): a cheap guard against an entry written by a
 * diffc that named its kernels otherwise, which the key should already
 * rule out. */
static int defines(const dc_kernel_image *o, const char *symbol) {
  size_t n = strlen(symbol) + 1; /* with its NUL, as the string table holds it */
  return o->image.len >= n && memmem(o->image.data, o->image.len, symbol, n) != NULL;
}

/* Kernel r: generated, keyed, and its object from the cache or LLVM. */
static dc_status *emit_one(emit_job *j, int r) {
  dc_llvm *g = NULL;
  int has = 0;
  dc_status *st = dc_llvm_create(j->t, &g);
  if (!st) dc_llvm_set_winograd(g, j->winograd);
  if (!st) st = dc_llvm_emit_node(g, j->m, j->reps[r], &j->out[r], &has);
  if (!st) st = dc_llvm_kernel_key(g, &j->out[r], &j->key[r]);
  if (!st && dc_kcache_get(j->cache, j->key[r], &j->obj[r]) && defines(&j->obj[r], j->out[r].symbol))
    j->cached[r] = 1;
  else if (!st) {
    dc_kernel_image_deinit(&j->obj[r]);
    dc_buf_init(&j->obj[r].image);
    st = dc_llvm_finish(g, &j->obj[r].image);
    if (!st) dc_kcache_put(j->cache, j->key[r], &j->obj[r]);
  }
  dc_llvm_destroy(g);
  return st;
}

static void emit_part(void *ctx, int64_t r, int64_t nreps, int thread) {
  emit_job *j = ctx;
  (void)nreps, (void)thread;
  j->st[r] = emit_one(j, (int)r);
  dc_progress_count_add(j->done, 1, j->cached[r]);
}

/* The first error in kernel order (so the message does not depend on the
 * threads' timing); the others are freed. */
static dc_status *first_error(dc_status **st, int n) {
  dc_status *first = NULL;
  for (int r = 0; r < n; r++) {
    if (st[r] && !first) first = st[r];
    else dc_status_free(st[r]);
    st[r] = NULL;
  }
  return first;
}

/* Index of the first rep before r with the same key, or r. */
static int first_with_key(const uint64_t *key, int r) {
  for (int q = 0; q < r; q++)
    if (key[q] == key[r]) return q;
  return r;
}

static dc_status *describe(const dc_module *m, const dc_cpu_target *t, const int32_t *rep_of, emit_job *j, int nreps,
                           dc_plan_kernels *k) {
  k->triple = dc_strdup(t->triple);
  k->cpu = dc_strdup(t->cpu);
  k->features = dc_strdup(t->features);
  k->entries = dc_calloc((size_t)m->nnodes + 1, sizeof *k->entries);
  k->objects = dc_calloc((size_t)nreps, sizeof *k->objects);
  if (!k->triple || !k->cpu || !k->features || !k->entries || !k->objects) return dc_nomem("describing kernels");
  for (int r = 0; r < nreps; r++) {
    if (first_with_key(j->key, r) != r) continue; /* the same code as an earlier kernel: linked once */
    k->objects[k->nobjects++] = (dc_plan_object){j->obj[r].image.data, j->obj[r].image.len};
    dc_buf_init(&j->obj[r].image); /* now owned by k */
  }
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (rep_of[i] < 0) continue;
    const dc_cpu_kernel *c = &j->out[rep_of[i]];
    char *sym = dc_strdup(c->symbol);
    if (!sym) return dc_nomem("describing kernels");
    k->entries[k->nentries++] = (dc_plan_kernel){i, sym, c->scratch_bytes};
  }
  return NULL;
}

static void report(const dc_cpu_emit_options *o, const dc_kcache *cache, const dc_plan_kernels *k, int nreps,
                   int ncached, int nref, int threads, double seconds, const dc_cpu_target *t) {
  if (cache->warning || cache->rejected || o->verbose) dc_progress_pause(o->progress); /* lines of their own */
  if (cache->warning) fprintf(stderr, "diffc: warning: %s\n", cache->warning);
  if (cache->rejected)
    fprintf(stderr, "diffc: %d kernel cache entr%s failed verification and %s recompiled\n", cache->rejected,
            cache->rejected == 1 ? "y" : "ies", cache->rejected == 1 ? "was" : "were");
  if (!o->verbose) return;
  size_t code = 0;
  int nwino = 0; /* conv2d and conv3d nodes on the Winograd kernel (k_winograd.c's variant names its symbols so) */
  for (int p = 0; p < k->nobjects; p++) code += k->objects[p].size;
  for (int i = 0; i < k->nentries; i++) nwino += strstr(k->entries[i].symbol, "_winograd") != NULL;
  fprintf(stderr,
          "diffc: %d nodes on %d distinct LLVM kernels for %s (%s), %d from the kernel cache%s%s%s, %d compiled on %d "
          "thread(s), %zu bytes of code; %d convs by Winograd F(2x2,3x3), %d nodes on reference kernels; %.0f ms\n",
          k->nentries, nreps, t->cpu, t->triple, ncached, cache->dir ? " (" : " (off)", cache->dir ? cache->dir : "",
          cache->dir ? ")" : "", nreps - ncached, threads, code, nwino, nref, seconds * 1e3);
}

/* Runs emit_one for every rep on a pool of up to one thread per CPU. */
static dc_status *emit_all(emit_job *j, int nreps, int *threads) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int want = (int)(cpus < 1 ? 1 : cpus);
  if (want > nreps) want = nreps;
  dc_pool *pool = NULL;
  DC_TRY(dc_pool_create(want, &pool));
  *threads = dc_pool_size(pool);
  dc_pool_run(pool, *threads, nreps, emit_part, j);
  dc_pool_destroy(pool);
  return first_error(j->st, nreps);
}

dc_status *dc_emit_cpu_kernels(const dc_module *m, const dc_cpu_target *t, const dc_cpu_emit_options *o,
                               dc_plan_kernels *k) {
  memset(k, 0, sizeof *k);
  DC_TRY(dc_lowering_check(m, "cpu", dc_llvm_lowering)); /* k_table.c's marks: an op no CPU kernel runs */
  /* The LLVM kernels compute and store f32 only: a module with 16-bit
   * activations (pass activation-dtype, CUDA's) never reaches them. */
  if (dc_module_activation_dtype(m) != DT_F32)
    return dc_error(DC_ERR_UNSUPPORTED, "--target cpu: the module stores activations in %s; the CPU kernels take f32 "
                    "activations only (bf16/f16 activations are --target cuda's)",
                    dc_dtype_name(dc_module_activation_dtype(m)));
  double t0 = dc_now_seconds();
  dc_kernel_groups g;
  DC_TRY(dc_kernel_groups_build(m, has_llvm_kernel, NULL, &g));
  dc_kcache cache;
  dc_status *st = dc_kcache_open(o->cache_dir, o->no_cache, "cpu", &cache);
  int nreps = g.nreps, threads = 0, ncached = 0;
  size_t n = (size_t)nreps + 1;
  static const int winograd_mode[] = {[DC_CONV_AUTO] = 1, [DC_CONV_DIRECT] = 0, [DC_CONV_WINOGRAD] = 2};
  emit_job j = {m, t, g.reps, &cache, winograd_mode[o->conv_algo], dc_calloc(n, sizeof *j.out), dc_calloc(n, sizeof *j.obj),
                dc_calloc(n, sizeof *j.key), dc_calloc(n, sizeof *j.cached), dc_calloc(n, sizeof *j.st), NULL};
  if (!st && (!j.out || !j.obj || !j.key || !j.cached || !j.st)) st = dc_nomem("emitting kernels");
  if (!st && nreps > 0) {
    dc_progress_counter done;
    dc_progress_count_begin(&done, o->progress, "kernels", nreps, 0);
    j.done = &done;
    st = emit_all(&j, nreps, &threads);
    dc_progress_count_end(&done);
    if (!st) st = describe(m, t, g.group_of, &j, nreps, k);
  }
  for (int r = 0; r < nreps && j.cached; r++) ncached += j.cached[r];
  if (!st) report(o, &cache, k, nreps, ncached, count_reference(m, &g), threads, dc_now_seconds() - t0, t);
  for (int r = 0; j.out && j.obj && r < nreps; r++) {
    dc_free(j.out[r].symbol);
    dc_kernel_image_deinit(&j.obj[r]);
  }
  dc_free(j.out), dc_free(j.obj), dc_free(j.key), dc_free(j.cached), dc_free(j.st);
  dc_kcache_close(&cache);
  dc_kernel_groups_deinit(&g);
  if (st) dc_plan_kernels_deinit(k);
  return st;
}

dc_status *dc_cpu_codegen_check(void) { return NULL; }

const char *dc_build_targets(void) { return "cpu (LLVM " LLVM_VERSION_STRING "), cuda (NVRTC, loaded when used)"; }
