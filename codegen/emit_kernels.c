/* emit_kernels.c — the CPU codegen stage of the driver.
 *
 * Nodes with equal signatures share one kernel (codegen/kernel_group.h): a
 * UNet repeats its blocks.  The distinct kernels are split over
 * one LLVM module per CPU and compiled in parallel threads (each thread has
 * its own LLVM context, which LLVM allows), giving one object file each.
 * Nodes whose op has no LLVM kernel run their reference kernel; the count is
 * reported so it is never a surprise. */
#include "emit_kernels.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "codegen/kernel_group.h"
#include "codegen/llvm/kgen.h"

#define MAX_PARTS 16

typedef struct {
  const dc_module *m;
  const dc_cpu_target *t;
  const int32_t *reps; /* representative node of each distinct kernel */
  int nreps, part, nparts;
  int winograd;        /* dc_llvm_set_winograd */
  dc_cpu_kernel *out;  /* per rep */
  dc_buf obj;
  dc_status *st;
} part_job;

static int has_llvm_kernel(const dc_module *m, int32_t id) { return dc_kgen_emitter_for(m->nodes[id].op) != NULL; }

/* Non-leaf nodes whose op has no LLVM kernel: they run the reference one. */
static int count_reference(const dc_module *m, const dc_kernel_groups *g) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) /* uploads and transfers are copies, not kernels */
    n += g->group_of[i] < 0 && !(dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) && !dc_op_is_copy(m->nodes[i].op);
  return n;
}

static void *compile_part(void *arg) {
  part_job *j = arg;
  dc_llvm *g = NULL;
  j->st = dc_llvm_create(j->t, &g);
  if (!j->st) dc_llvm_set_winograd(g, j->winograd);
  for (int r = j->part; r < j->nreps && !j->st; r += j->nparts) {
    int has = 0;
    j->st = dc_llvm_emit_node(g, j->m, j->reps[r], &j->out[r], &has);
  }
  if (!j->st) j->st = dc_llvm_finish(g, &j->obj);
  dc_llvm_destroy(g);
  return NULL;
}

/* Runs the parts on threads (the last on this one). */
static dc_status *compile_parts(part_job *jobs, int nparts) {
  pthread_t th[MAX_PARTS];
  int started[MAX_PARTS] = {0};
  for (int p = 0; p < nparts - 1; p++) started[p] = pthread_create(&th[p], NULL, compile_part, &jobs[p]) == 0;
  for (int p = 0; p < nparts - 1; p++)
    if (!started[p]) compile_part(&jobs[p]); /* no thread: do it here */
  compile_part(&jobs[nparts - 1]);
  dc_status *st = NULL;
  for (int p = 0; p < nparts; p++) {
    if (p < nparts - 1 && started[p]) pthread_join(th[p], NULL);
    if (jobs[p].st && !st) st = jobs[p].st;
    else dc_status_free(jobs[p].st);
  }
  return st;
}

static dc_status *describe(const dc_module *m, const dc_cpu_target *t, const int32_t *rep_of, const dc_cpu_kernel *out,
                           part_job *jobs, int nparts, dc_plan_kernels *k) {
  k->triple = dc_strdup(t->triple);
  k->cpu = dc_strdup(t->cpu);
  k->features = dc_strdup(t->features);
  k->entries = dc_calloc((size_t)m->nnodes + 1, sizeof *k->entries);
  k->objects = dc_calloc((size_t)nparts, sizeof *k->objects);
  if (!k->triple || !k->cpu || !k->features || !k->entries || !k->objects) return dc_nomem("describing kernels");
  for (int p = 0; p < nparts; p++) {
    k->objects[k->nobjects++] = (dc_plan_object){jobs[p].obj.data, jobs[p].obj.len};
    dc_buf_init(&jobs[p].obj); /* now owned by k */
  }
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (rep_of[i] < 0) continue;
    const dc_cpu_kernel *c = &out[rep_of[i]];
    char *sym = dc_strdup(c->symbol);
    if (!sym) return dc_nomem("describing kernels");
    k->entries[k->nentries++] = (dc_plan_kernel){i, sym, c->scratch_bytes};
  }
  return NULL;
}

dc_status *dc_emit_cpu_kernels(const dc_module *m, const dc_cpu_target *t, int verbose, dc_plan_kernels *k) {
  return dc_emit_cpu_kernels_algo(m, t, verbose, 1, k);
}

dc_status *dc_emit_cpu_kernels_algo(const dc_module *m, const dc_cpu_target *t, int verbose, int winograd,
                                    dc_plan_kernels *k) {
  memset(k, 0, sizeof *k);
  double t0 = dc_now_seconds();
  dc_kernel_groups g;
  DC_TRY(dc_kernel_groups_build(m, has_llvm_kernel, NULL, &g));
  int nreps = g.nreps, nref = count_reference(m, &g), nparts = 0;
  dc_cpu_kernel *out = dc_calloc((size_t)nreps + 1, sizeof *out);
  part_job jobs[MAX_PARTS];
  memset(jobs, 0, sizeof jobs);
  dc_status *st = out ? NULL : dc_nomem("emitting kernels");
  if (!st && nreps > 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    nparts = (int)(cpus < 1 ? 1 : cpus > MAX_PARTS ? MAX_PARTS : cpus);
    if (nparts > nreps) nparts = nreps;
    for (int p = 0; p < nparts; p++) {
      jobs[p] = (part_job){m, t, g.reps, nreps, p, nparts, winograd, out, {0}, NULL};
      dc_buf_init(&jobs[p].obj);
    }
    st = compile_parts(jobs, nparts);
    if (!st) st = describe(m, t, g.group_of, out, jobs, nparts, k);
  }
  size_t code = 0;
  int nwino = 0; /* conv2d nodes on the Winograd kernel (k_winograd.c names its symbols so) */
  for (int p = 0; p < k->nobjects; p++) code += k->objects[p].size;
  for (int i = 0; i < k->nentries; i++) nwino += strstr(k->entries[i].symbol, "_winograd") != NULL;
  if (!st && verbose)
    fprintf(stderr,
            "diffc: %d nodes on %d distinct LLVM kernels for %s (%s), %zu bytes of code in %d parallel part(s), "
            "%d conv2d by Winograd F(2x2,3x3), %d nodes on reference kernels, %.0f ms\n",
            k->nentries, nreps, t->cpu, t->triple, code, nparts, nwino, nref, (dc_now_seconds() - t0) * 1e3);
  for (int r = 0; out && r < nreps; r++) dc_free(out[r].symbol);
  for (int p = 0; p < nparts; p++) dc_buf_deinit(&jobs[p].obj);
  dc_free(out);
  dc_kernel_groups_deinit(&g);
  if (st) dc_plan_kernels_deinit(k);
  return st;
}
