/* emit_kernels.c — the CPU codegen stage of the driver: one LLVM kernel per
 * node that has an emitter (codegen/llvm/k_table.c), all in one module, one
 * object file, described for the plan's KERN section.  Nodes without an
 * LLVM kernel run their reference kernel; the count is reported so it is
 * never a surprise. */
#include "emit_kernels.h"

#include "codegen/llvm/kgen.h"

#include <string.h>

static dc_status *copy_target(const dc_cpu_target *t, dc_plan_kernels *k) {
  k->triple = dc_strdup(t->triple);
  k->cpu = dc_strdup(t->cpu);
  k->features = dc_strdup(t->features);
  return k->triple && k->cpu && k->features ? NULL : dc_nomem("describing the kernels");
}

/* What a kernel is specialised on: op, attributes and every operand's type.
 * Nodes with equal signatures share one kernel (a UNet repeats its blocks). */
static void signature(const dc_module *m, const dc_node *n, dc_buf *b) {
  char tb[160];
  dc_buf_printf(b, "%d|%s", (int)n->op, dc_type_str(&n->type, tb, sizeof tb));
  for (int i = 0; i < n->ninputs; i++) dc_buf_printf(b, "|%s", dc_type_str(&m->nodes[n->inputs[i]].type, tb, sizeof tb));
  for (int i = 0; i < DC_MAX_ATTRS; i++) dc_buf_printf(b, "|%lld,%.17g", (long long)n->attrs[i].i, n->attrs[i].f);
  for (int i = 0; i < n->nlist; i++) dc_buf_printf(b, "|%lld", (long long)n->list[i]);
  dc_buf_u8(b, 0);
}

static int find_same(char **sigs, int n, const char *sig) {
  for (int i = 0; i < n; i++)
    if (strcmp(sigs[i], sig) == 0) return i;
  return -1;
}

static dc_status *emit_all(dc_llvm *g, const dc_module *m, dc_plan_kernels *k, int *nref, int *nunique) {
  k->entries = dc_calloc((size_t)m->nnodes + 1, sizeof *k->entries);
  char **sigs = dc_calloc((size_t)m->nnodes + 1, sizeof *sigs);
  if (!k->entries || !sigs) {
    dc_free(sigs);
    return dc_nomem("emitting kernels");
  }
  dc_status *st = NULL;
  *nref = *nunique = 0;
  for (int32_t i = 0; i < m->nnodes && !st; i++) {
    if (dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) continue;
    if (!dc_kgen_emitter_for(m->nodes[i].op)) {
      (*nref)++;
      continue;
    }
    dc_buf sig;
    dc_buf_init(&sig);
    signature(m, &m->nodes[i], &sig);
    if ((st = dc_buf_status(&sig, "emitting kernels"))) break;
    int same = find_same(sigs, k->nentries, (const char *)sig.data);
    dc_cpu_kernel ck = {0};
    int has = 1;
    if (same >= 0) {
      ck = (dc_cpu_kernel){i, dc_strdup(k->entries[same].symbol), k->entries[same].scratch_bytes};
      if (!ck.symbol) st = dc_nomem("emitting kernels");
    } else {
      st = dc_llvm_emit_node(g, m, i, &ck, &has);
      (*nunique)++;
    }
    if (!st) {
      sigs[k->nentries] = (char *)sig.data;
      k->entries[k->nentries++] = (dc_plan_kernel){i, ck.symbol, ck.scratch_bytes};
    } else {
      dc_buf_deinit(&sig);
    }
  }
  for (int i = 0; i < k->nentries; i++) dc_free(sigs[i]);
  dc_free(sigs);
  return st;
}

dc_status *dc_emit_cpu_kernels(const dc_module *m, const dc_cpu_target *t, int verbose, dc_plan_kernels *k) {
  memset(k, 0, sizeof *k);
  double t0 = dc_now_seconds();
  dc_llvm *g = NULL;
  int nref = 0, nunique = 0;
  dc_buf obj;
  dc_buf_init(&obj);
  dc_status *st = dc_llvm_create(t, &g);
  if (!st) st = emit_all(g, m, k, &nref, &nunique);
  if (!st) st = dc_llvm_finish(g, &obj);
  dc_llvm_destroy(g);
  if (!st) st = copy_target(t, k);
  if (st) {
    dc_buf_deinit(&obj);
    dc_plan_kernels_deinit(k);
    return st;
  }
  k->object = obj.data;
  k->object_size = obj.len;
  if (verbose)
    fprintf(stderr,
            "diffc: %d nodes on %d distinct LLVM kernels for %s (%s), %zu bytes of code, %d nodes on reference "
            "kernels, %.0f ms\n",
            k->nentries, nunique, t->cpu, t->triple, obj.len, nref, (dc_now_seconds() - t0) * 1e3);
  return NULL;
}
