/* kernel_group.c — see kernel_group.h. */
#include "kernel_group.h"

#include <string.h>

/* What a kernel is specialised on: op, attributes, layouts and every
 * operand's type. */
static void signature(const dc_module *m, const dc_node *n, const char *salt, dc_buf *b) {
  char tb[160];
  dc_buf_printf(b, "%d|%d|%s", (int)n->op, (int)n->layout, dc_type_str(&n->type, tb, sizeof tb));
  for (int i = 0; i < n->ninputs; i++) {
    const dc_node *in = &m->nodes[n->inputs[i]];
    dc_buf_printf(b, "|%d:%s", (int)in->layout, dc_type_str(&in->type, tb, sizeof tb));
  }
  const dc_op_info *info = dc_op_get(n->op);
  for (int i = 0; i < info->nattrs; i++) /* the op's own attributes, each as its kind */
    if (info->attr_kinds[i] == ATTR_FLOAT) dc_buf_printf(b, "|%.17g", n->attrs[i].f);
    else dc_buf_printf(b, "|%lld", (long long)n->attrs[i].i);
  for (int i = 0; i < n->nlist; i++) dc_buf_printf(b, "|%lld", (long long)n->list[i]);
  if (salt) dc_buf_printf(b, "|%s", salt);
  dc_buf_u8(b, 0);
}

/* Index of sig among the first n signatures, or -1. */
static int find_same(char *const *sigs, int n, const char *sig) {
  for (int r = 0; r < n; r++)
    if (strcmp(sigs[r], sig) == 0) return r;
  return -1;
}

static dc_status *group(const dc_module *m, dc_kernel_filter has_kernel, const char *salt, char **sigs,
                        dc_kernel_groups *g) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    g->group_of[i] = -1;
    if ((dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) || !has_kernel(m, i)) continue;
    dc_buf sig;
    dc_buf_init(&sig);
    signature(m, &m->nodes[i], salt, &sig);
    dc_status *st = dc_buf_status(&sig, "grouping kernels");
    if (st) { /* a failed grow may leave what was grown before */
      dc_buf_deinit(&sig);
      return st;
    }
    int same = find_same(sigs, g->nreps, (const char *)sig.data);
    if (same >= 0) {
      g->group_of[i] = same;
      dc_buf_deinit(&sig);
    } else {
      sigs[g->nreps] = (char *)sig.data;
      g->reps[g->nreps] = i;
      g->group_of[i] = g->nreps++;
    }
  }
  return NULL;
}

dc_status *dc_kernel_groups_build(const dc_module *m, dc_kernel_filter has_kernel, const char *salt,
                                  dc_kernel_groups *g) {
  memset(g, 0, sizeof *g);
  size_t n = (size_t)m->nnodes + 1;
  char **sigs = dc_calloc(n, sizeof *sigs);
  g->reps = dc_calloc(n, sizeof *g->reps);
  g->group_of = dc_calloc(n, sizeof *g->group_of);
  dc_status *st = sigs && g->reps && g->group_of ? group(m, has_kernel, salt, sigs, g) : dc_nomem("grouping kernels");
  for (int r = 0; sigs && r < g->nreps; r++) dc_free(sigs[r]);
  dc_free(sigs);
  if (st) dc_kernel_groups_deinit(g);
  return st;
}

void dc_kernel_groups_deinit(dc_kernel_groups *g) {
  dc_free(g->reps);
  dc_free(g->group_of);
  memset(g, 0, sizeof *g);
}
