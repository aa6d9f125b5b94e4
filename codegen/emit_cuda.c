/* emit_cuda.c — see emit_cuda.h.  Three steps: group the nodes
 * (codegen/kernel_group.h, the compute precision in the signature), write
 * each distinct kernel's source (serially: it takes microseconds), then
 * compile kernel x arch jobs on a thread pool, each through the disk cache
 * (codegen/kernel_cache.h), counting them to the caller's progress
 * callback (support/progress.h). */
#include "emit_cuda.h"

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "codegen/kernel_cache.h"
#include "codegen/kernel_group.h"
#include "support/threadpool.h"

/* CUDA's launch limits, checked here so a bad geometry fails the compile
 * rather than the plan load (plan/plan_reader.c checks them again). */
#define MAX_BLOCK_THREADS 1024u
#define MAX_GRID_YZ 65535u
#define MAX_GRID_X 2147483647u
#define MAX_SMEM_BYTES (227u * 1024u)

typedef struct {
  int kernel, arch;
  dc_nvrtc_output out;
  int cached;
  dc_status *st;
} job;

typedef struct {
  const dc_nvrtc *nv;
  const dc_cuda_emit_options *o;
  dc_kcache *cache;
  const dc_cuda_kernel *kernels;
  job *jobs;
  int njobs;
  atomic_int failed;
  dc_progress_counter done; /* compiles finished, from whichever pool thread */
} compile_ctx;

/* ---- notes --------------------------------------------------------------- */

static dc_status *add_note(dc_cuda_note **list, int *n, const char *kernel, int32_t node, const char *arch,
                           const char *text) {
  dc_cuda_note *grown = dc_realloc(*list, ((size_t)*n + 1) * sizeof *grown);
  if (!grown) return dc_nomem("recording a CUDA kernel message");
  *list = grown;
  dc_cuda_note *e = &grown[(*n)++];
  e->kernel = dc_strdup(kernel);
  e->node = node;
  e->arch = arch ? dc_strdup(arch) : NULL;
  e->text = dc_strdup(text);
  if (!e->kernel || !e->text || (arch && !e->arch)) return dc_nomem("recording a CUDA kernel message");
  return NULL;
}

static void free_notes(dc_cuda_note *list, int n) {
  for (int i = 0; i < n; i++) {
    dc_free(list[i].kernel);
    dc_free(list[i].arch);
    dc_free(list[i].text);
  }
  dc_free(list);
}

void dc_cuda_emit_report_deinit(dc_cuda_emit_report *rep) {
  free_notes(rep->warnings, rep->nwarnings);
  free_notes(rep->errors, rep->nerrors);
  dc_free(rep->cache_dir);
  dc_free(rep->cache_warning);
  memset(rep, 0, sizeof *rep);
}

/* ---- generating ----------------------------------------------------------- */

static dc_status *check_geometry(const dc_cuda_kernel *k, int32_t node) {
  uint64_t threads = (uint64_t)k->block[0] * k->block[1] * k->block[2];
  int ok = threads >= 1 && threads <= MAX_BLOCK_THREADS && k->grid[0] >= 1 && k->grid[0] <= MAX_GRID_X &&
           k->grid[1] >= 1 && k->grid[1] <= MAX_GRID_YZ && k->grid[2] >= 1 && k->grid[2] <= MAX_GRID_YZ &&
           k->smem_bytes <= MAX_SMEM_BYTES;
  if (ok) return NULL;
  return dc_error(DC_ERR_INTERNAL,
                  "CUDA kernel %s (node %%%d): launch grid %ux%ux%u, block %ux%ux%u, %u bytes of shared memory are "
                  "outside CUDA's limits (block <= %u threads, grid y,z <= %u, shared <= %u bytes)",
                  k->name, (int)node, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
                  k->smem_bytes, MAX_BLOCK_THREADS, MAX_GRID_YZ, MAX_SMEM_BYTES);
}

static dc_status *generate_one(const dc_module *m, int32_t node, int index, const dc_cuda_options *co,
                               dc_cuda_kernel *k) {
  char name[64];
  snprintf(name, sizeof name, "k%d_%s", index, dc_op_get(m->nodes[node].op)->name);
  DC_TRY(dc_cuda_gen_node(m, node, co, name, k));
  dc_status *st = check_geometry(k, node);
  if (st) dc_cuda_kernel_deinit(k);
  return st;
}

/* Writes every kernel; with keep_going a failure is noted and the rest go on
 * (that kernel's source stays NULL). */
static dc_status *generate(const dc_module *m, const dc_kernel_groups *g, const dc_cuda_emit_options *o,
                           dc_cuda_kernel *kernels, dc_cuda_emit_report *rep) {
  dc_cuda_options co = {.compute = o->compute, .sm_count = o->sm_count};
  for (int r = 0; r < g->nreps; r++) {
    dc_status *st = generate_one(m, g->reps[r], r, &co, &kernels[r]);
    if (!st) continue;
    if (!o->keep_going) return st;
    char name[64];
    snprintf(name, sizeof name, "k%d_%s", r, dc_op_get(m->nodes[g->reps[r]].op)->name);
    dc_status *nst = add_note(&rep->errors, &rep->nerrors, name, g->reps[r], NULL, dc_status_message(st));
    dc_status_free(st);
    DC_TRY(nst);
  }
  return NULL;
}

/* ---- compiling ------------------------------------------------------------ */

static void run_job(compile_ctx *c, job *j) {
  const dc_cuda_kernel *k = &c->kernels[j->kernel];
  const dc_cuda_arch *a = &c->o->archs[j->arch];
  uint64_t key = 0;
  int keyed = c->cache->dir && dc_nvrtc_cache_key(c->nv, k->source, a, &key);
  if (keyed && dc_kcache_get(c->cache, key, &j->out)) {
    j->cached = 1;
    return;
  }
  j->st = dc_nvrtc_compile(c->nv, k->name, k->source, a, &j->out);
  if (!j->st && keyed) dc_kcache_put(c->cache, key, &j->out);
}

/* Job i, on whichever pool thread claimed it. */
static void worker(void *arg, int64_t i, int64_t njobs, int thread) {
  compile_ctx *c = arg;
  (void)njobs, (void)thread;
  if (atomic_load(&c->failed) && !c->o->keep_going) return; /* the first failure ends the compile */
  run_job(c, &c->jobs[i]);
  if (c->jobs[i].st) atomic_store(&c->failed, 1);
  dc_progress_count_add(&c->done, 1, c->jobs[i].cached);
}

/* One job per generated kernel and arch, kernel-major. */
static job *make_jobs(const dc_cuda_kernel *kernels, int nkernels, int narchs, int *njobs) {
  job *jobs = dc_calloc((size_t)nkernels * (size_t)narchs + 1, sizeof *jobs);
  *njobs = 0;
  for (int k = 0; jobs && k < nkernels; k++)
    for (int a = 0; kernels[k].source && a < narchs; a++) {
      job *j = &jobs[(*njobs)++];
      j->kernel = k;
      j->arch = a;
      dc_buf_init(&j->out.image);
    }
  return jobs;
}

static dc_status *compile_all(compile_ctx *c, int *threads) {
  dc_pool *pool = NULL;
  int want = c->o->threads > 0 ? c->o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (want > c->njobs) want = c->njobs;
  DC_TRY(dc_pool_create(want < 1 ? 1 : want, &pool));
  *threads = dc_pool_size(pool);
  dc_progress_count_begin(&c->done, c->o->progress, "kernels", c->njobs, 0);
  dc_pool_run(pool, *threads, c->njobs, worker, c);
  dc_pool_destroy(pool);
  dc_progress_count_end(&c->done);
  return NULL;
}

/* Notes every job's warnings and (keep_going) errors; returns the first
 * error of a run without keep_going. */
static dc_status *collect(const dc_kernel_groups *g, const dc_cuda_kernel *kernels, const dc_cuda_emit_options *o,
                          job *jobs, int njobs, dc_cuda_emit_report *rep) {
  for (int i = 0; i < njobs; i++) {
    job *j = &jobs[i];
    const char *kname = kernels[j->kernel].name, *arch = o->archs[j->arch].name;
    int32_t node = g->reps[j->kernel];
    if (j->st && !o->keep_going) {
      dc_status *st = j->st;
      j->st = NULL;
      return st;
    }
    if (j->st)
      DC_TRY(add_note(&rep->errors, &rep->nerrors, kname, node, arch, dc_status_message(j->st)));
    else if (j->out.log)
      DC_TRY(add_note(&rep->warnings, &rep->nwarnings, kname, node, arch, j->out.log));
    rep->ncached += j->cached;
  }
  return NULL;
}

/* ---- the plan ------------------------------------------------------------- */

/* Moves kernels' texts and the jobs' images into out. */
static dc_status *fill_plan(const dc_module *m, const dc_nvrtc *nv, const dc_cuda_emit_options *o,
                            const dc_kernel_groups *g, dc_cuda_kernel *kernels, job *jobs, dc_plan_cuda *out) {
  out->compute = dc_strdup(dc_cuda_compute_name(o->compute));
  out->nvrtc_version = dc_strdup(dc_nvrtc_version(nv));
  out->kernels = dc_calloc((size_t)g->nreps + 1, sizeof *out->kernels);
  out->kernel_of_node = dc_calloc((size_t)m->nnodes + 1, sizeof *out->kernel_of_node);
  if (!out->compute || !out->nvrtc_version || !out->kernels || !out->kernel_of_node)
    return dc_nomem("describing CUDA kernels");
  memcpy(out->kernel_of_node, g->group_of, (size_t)m->nnodes * sizeof *g->group_of);
  out->nnodes = m->nnodes;
  for (int k = 0; k < g->nreps; k++) {
    dc_plan_cuda_kernel *pk = &out->kernels[out->nkernels++];
    dc_cuda_kernel *src = &kernels[k];
    pk->name = src->name;
    pk->source = src->source;
    src->name = src->source = NULL;
    memcpy(pk->grid, src->grid, sizeof pk->grid);
    memcpy(pk->block, src->block, sizeof pk->block);
    pk->smem_bytes = src->smem_bytes;
    pk->images = dc_calloc((size_t)o->narchs, sizeof *pk->images);
    if (!pk->images) return dc_nomem("describing CUDA kernels");
    for (int a = 0; a < o->narchs; a++) {
      job *j = &jobs[k * o->narchs + a];
      dc_plan_cuda_image *im = &pk->images[pk->nimages++];
      im->arch = dc_strdup(o->archs[a].name);
      if (!im->arch) return dc_nomem("describing CUDA kernels");
      im->kind = o->archs[a].ptx ? DC_CUDA_IMAGE_PTX : DC_CUDA_IMAGE_CUBIN;
      im->data = j->out.image.data;
      im->size = j->out.image.len;
      dc_buf_init(&j->out.image); /* now owned by out */
    }
  }
  return NULL;
}

/* ---- driver ----------------------------------------------------------------- */

/* Every op marked as lowered by a kernel (g_table.c); leaves and copies are
 * the runtime's, and the rest was refused before grouping. */
static int has_cuda_kernel(const dc_module *m, int32_t id) {
  return dc_cuda_lowering(m->nodes[id].op).how == DC_LOWER_KERNEL;
}

static dc_status *failures(const dc_cuda_emit_report *rep) {
  const dc_cuda_note *e = &rep->errors[0];
  return dc_error(
      DC_ERR_INTERNAL,
      "%d of %d CUDA kernel compiles failed (or their kernels could not be written); the first, %s (node %%%d)%s%s: %s",
      rep->nerrors, rep->ncompiles, e->kernel, (int)e->node, e->arch ? " for " : "", e->arch ? e->arch : "", e->text);
}

static dc_status *emit(const dc_module *m, const dc_nvrtc *nv, const dc_cuda_emit_options *o, dc_kcache *cache,
                       const dc_kernel_groups *g, dc_cuda_kernel *kernels, dc_plan_cuda *out,
                       dc_cuda_emit_report *rep) {
  DC_TRY(generate(m, g, o, kernels, rep));
  compile_ctx c = {.nv = nv, .o = o, .cache = cache, .kernels = kernels};
  c.jobs = make_jobs(kernels, g->nreps, o->narchs, &c.njobs);
  if (!c.jobs) return dc_nomem("compiling CUDA kernels");
  dc_status *st = compile_all(&c, &rep->threads);
  if (!st) st = collect(g, kernels, o, c.jobs, c.njobs, rep);
  if (!st && rep->nerrors) st = failures(rep);
  if (!st) st = fill_plan(m, nv, o, g, kernels, c.jobs, out);
  for (int i = 0; i < c.njobs; i++) {
    dc_nvrtc_output_deinit(&c.jobs[i].out);
    dc_status_free(c.jobs[i].st);
  }
  dc_free(c.jobs);
  return st;
}

static void count_nodes(const dc_module *m, const dc_kernel_groups *g, dc_cuda_emit_report *rep) {
  rep->nkernels = g->nreps;
  for (int32_t i = 0; i < m->nnodes; i++) rep->nnodes += g->group_of[i] >= 0;
}

dc_status *dc_emit_cuda_kernels(const dc_module *m, const dc_nvrtc *nv, const dc_cuda_emit_options *o,
                                dc_plan_cuda *out, dc_cuda_emit_report *rep_out) {
  memset(out, 0, sizeof *out);
  dc_cuda_emit_report local, *rep = rep_out ? rep_out : &local;
  memset(rep, 0, sizeof *rep); /* before any return: the caller prints and frees the report whatever happens */
  /* an op the CUDA backend does not lower (a constant, say: its bytes are
   * placed by the CPU runtime only so far) is refused here, naming the node */
  DC_TRY(dc_lowering_check(m, "cuda", dc_cuda_lowering));
  double t0 = dc_now_seconds();
  dc_kcache cache;
  DC_TRY(dc_kcache_open(o->cache_dir, o->no_cache, "cuda", &cache));
  dc_kernel_groups g;
  dc_status *st = dc_kernel_groups_build(m, has_cuda_kernel, dc_cuda_compute_name(o->compute), &g);
  dc_cuda_kernel *kernels = st ? NULL : dc_calloc((size_t)g.nreps + 1, sizeof *kernels);
  if (!st && !kernels) st = dc_nomem("generating CUDA kernels");
  if (!st) {
    count_nodes(m, &g, rep);
    rep->ncompiles = g.nreps * o->narchs;
    st = emit(m, nv, o, &cache, &g, kernels, out, rep);
  }
  for (int k = 0; kernels && k < g.nreps; k++) dc_cuda_kernel_deinit(&kernels[k]);
  dc_free(kernels);
  dc_kernel_groups_deinit(&g);
  rep->nrejected = cache.rejected;
  rep->seconds = dc_now_seconds() - t0;
  rep->cache_dir = cache.dir ? dc_strdup(cache.dir) : NULL;
  rep->cache_warning = cache.warning ? dc_strdup(cache.warning) : NULL;
  dc_kcache_close(&cache);
  if (st) dc_plan_cuda_deinit(out);
  if (!rep_out) dc_cuda_emit_report_deinit(&local);
  return st;
}

/* ---- reporting ------------------------------------------------------------ */

void dc_cuda_emit_report_print(const dc_cuda_emit_report *rep, const dc_nvrtc *nv, const dc_cuda_emit_options *o,
                               FILE *f) {
  if (rep->cache_warning) fprintf(f, "diffc: warning: %s\n", rep->cache_warning);
  if (o->verbose)
    for (int i = 0; i < rep->nwarnings; i++)
      fprintf(f, "diffc: warning: NVRTC on kernel %s (node %%%d) for %s:\n%s\n", rep->warnings[i].kernel,
              (int)rep->warnings[i].node, rep->warnings[i].arch, rep->warnings[i].text);
  else if (rep->nwarnings)
    fprintf(f, "diffc: warning: NVRTC gave warnings on %d kernel compile(s); -v shows them\n", rep->nwarnings);
  if (!o->verbose) return;
  char archs[256];
  fprintf(f,
          "diffc: %d nodes on %d distinct CUDA kernels (compute %s) for %s: %d images, %d from the kernel cache%s%s%s, "
          "%d compiled by NVRTC %s (%s) on %d thread(s), %.0f ms\n",
          rep->nnodes, rep->nkernels, dc_cuda_compute_name(o->compute),
          dc_cuda_archs_str(o->archs, o->narchs, archs, sizeof archs), rep->ncompiles, rep->ncached,
          rep->cache_dir ? " (" : " (off)", rep->cache_dir ? rep->cache_dir : "", rep->cache_dir ? ")" : "",
          rep->ncompiles - rep->ncached, dc_nvrtc_version(nv), dc_nvrtc_library(nv), rep->threads, rep->seconds * 1e3);
  if (rep->nrejected)
    fprintf(f, "diffc: %d kernel cache entr%s failed verification and %s recompiled\n", rep->nrejected,
            rep->nrejected == 1 ? "y" : "ies", rep->nrejected == 1 ? "was" : "were");
}
