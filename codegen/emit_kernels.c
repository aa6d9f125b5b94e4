/* emit_kernels.c — the CPU codegen stage of the driver.
 *
 * Nodes with equal signatures (op, attributes, operand types) share one
 * kernel: a UNet repeats its blocks.  The distinct kernels are split over
 * one LLVM module per CPU and compiled in parallel threads (each thread has
 * its own LLVM context, which LLVM allows), giving one object file each.
 * Nodes whose op has no LLVM kernel run their reference kernel; the count is
 * reported so it is never a surprise. */
#include "emit_kernels.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "codegen/llvm/kgen.h"

#define MAX_PARTS 16

typedef struct {
  const dc_module *m;
  const dc_cpu_target *t;
  const int32_t *reps; /* representative node of each distinct kernel */
  int nreps, part, nparts;
  dc_cpu_kernel *out;  /* per rep */
  dc_buf obj;
  dc_status *st;
} part_job;

/* What a kernel is specialised on: op, attributes and every operand's type. */
static void signature(const dc_module *m, const dc_node *n, dc_buf *b) {
  char tb[160];
  dc_buf_printf(b, "%d|%s", (int)n->op, dc_type_str(&n->type, tb, sizeof tb));
  for (int i = 0; i < n->ninputs; i++) dc_buf_printf(b, "|%s", dc_type_str(&m->nodes[n->inputs[i]].type, tb, sizeof tb));
  for (int i = 0; i < DC_MAX_ATTRS; i++) dc_buf_printf(b, "|%lld,%.17g", (long long)n->attrs[i].i, n->attrs[i].f);
  for (int i = 0; i < n->nlist; i++) dc_buf_printf(b, "|%lld", (long long)n->list[i]);
  dc_buf_u8(b, 0);
}

/* rep_of[i] = index into reps of node i's kernel, -1 for none. */
static dc_status *group_nodes(const dc_module *m, int32_t *reps, int *nreps, int32_t *rep_of, int *nref) {
  char **sigs = dc_calloc((size_t)m->nnodes + 1, sizeof *sigs);
  if (!sigs) return dc_nomem("grouping kernels");
  dc_status *st = NULL;
  *nreps = *nref = 0;
  for (int32_t i = 0; i < m->nnodes && !st; i++) {
    rep_of[i] = -1;
    if (dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) continue;
    if (!dc_kgen_emitter_for(m->nodes[i].op)) {
      (*nref)++;
      continue;
    }
    dc_buf sig;
    dc_buf_init(&sig);
    signature(m, &m->nodes[i], &sig);
    if ((st = dc_buf_status(&sig, "grouping kernels"))) break;
    int same = -1;
    for (int r = 0; r < *nreps && same < 0; r++)
      if (strcmp(sigs[r], (const char *)sig.data) == 0) same = r;
    if (same >= 0) {
      rep_of[i] = same;
      dc_buf_deinit(&sig);
    } else {
      sigs[*nreps] = (char *)sig.data;
      reps[*nreps] = i;
      rep_of[i] = (*nreps)++;
    }
  }
  for (int r = 0; r < *nreps; r++) dc_free(sigs[r]);
  dc_free(sigs);
  return st;
}

static void *compile_part(void *arg) {
  part_job *j = arg;
  dc_llvm *g = NULL;
  j->st = dc_llvm_create(j->t, &g);
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
  memset(k, 0, sizeof *k);
  double t0 = dc_now_seconds();
  int32_t *reps = dc_calloc((size_t)m->nnodes + 1, sizeof *reps), *rep_of = dc_calloc((size_t)m->nnodes + 1, sizeof *rep_of);
  dc_cpu_kernel *out = dc_calloc((size_t)m->nnodes + 1, sizeof *out);
  part_job jobs[MAX_PARTS];
  memset(jobs, 0, sizeof jobs);
  int nreps = 0, nref = 0, nparts = 0;
  dc_status *st = reps && rep_of && out ? group_nodes(m, reps, &nreps, rep_of, &nref) : dc_nomem("emitting kernels");
  if (!st && nreps > 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    nparts = (int)(cpus < 1 ? 1 : cpus > MAX_PARTS ? MAX_PARTS : cpus);
    if (nparts > nreps) nparts = nreps;
    for (int p = 0; p < nparts; p++) {
      jobs[p] = (part_job){m, t, reps, nreps, p, nparts, out, {0}, NULL};
      dc_buf_init(&jobs[p].obj);
    }
    st = compile_parts(jobs, nparts);
    if (!st) st = describe(m, t, rep_of, out, jobs, nparts, k);
  }
  size_t code = 0;
  for (int p = 0; p < k->nobjects; p++) code += k->objects[p].size;
  if (!st && verbose)
    fprintf(stderr,
            "diffc: %d nodes on %d distinct LLVM kernels for %s (%s), %zu bytes of code in %d parallel part(s), "
            "%d nodes on reference kernels, %.0f ms\n",
            k->nentries, nreps, t->cpu, t->triple, code, nparts, nref, (dc_now_seconds() - t0) * 1e3);
  for (int r = 0; out && r < nreps; r++) dc_free(out[r].symbol);
  for (int p = 0; p < nparts; p++) dc_buf_deinit(&jobs[p].obj);
  dc_free(out);
  dc_free(reps);
  dc_free(rep_of);
  if (st) dc_plan_kernels_deinit(k);
  return st;
}
