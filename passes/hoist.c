/* hoist.c — pass "hoist": work a loop repeats for nothing is done once,
 * before it (ir.h, "phases").
 *
 * Requires: a verified module after offload (held uploads exist), before
 *   memplan.  Without loop phases it does nothing.
 * Guarantees: for each loop (consecutive loop phases) preceded by a
 *   non-loop phase (the prologue), these nodes move to the prologue's end,
 *   in their order:
 *   - every held upload (--offload model) and its weight: a component
 *     resident for the loop is uploaded once, not once per iteration
 *     (always, --no-hoist or not);
 *   - unless --no-hoist, every node whose value is the same in every
 *     iteration because it depends on values computed before the loop —
 *     the cross-attention K and V of the text embeddings, SDXL's added
 *     condition embedding — with the weight conversions (casts of weights)
 *     only it reads.  A node that reads a loop input (the latents, the
 *     timestep) stays.  Work that reads nothing but weights (a weight's
 *     cast) is not hoisted on its own: it would hold a converted copy of
 *     every weight for the whole loop.
 *   Hoisted values that the loop reads live to its end (ir/liveness.c):
 *   module metadata "hoist" says how many bytes that holds and how many
 *   FLOPs each iteration no longer does.
 * Invalidates: node ids (inputs and outputs remapped here). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

typedef struct {
  const dc_module *m;
  int32_t start, end;   /* the loop: nodes [start, end) */
  unsigned char *moved; /* per node */
  unsigned char *pure;  /* per node in the loop: a function of weights only (a cast of a weight, a held upload) */
} hoist_ctx;

static int in_loop(const hoist_ctx *h, int32_t v) { return v >= h->start && v < h->end; }
static int is_held_upload(const dc_node *n) { return n->op == OP_UPLOAD && dc_node_int(n, "hold"); }

/* A value that is a weight's bytes wherever it sits: a weight, a constant,
 * a held upload (--offload model anchors those before the loop, so a loop
 * node reading one reads no value computed before the loop). */
static int is_weight_like(const dc_node *n) {
  return n->op == OP_WEIGHT || n->op == OP_CONSTANT || is_held_upload(n);
}

/* Weights, constants, held uploads and what only they feed: the same bytes
 * in every iteration, but not worth holding on their own. */
static void mark_pure(hoist_ctx *h) {
  for (int32_t i = h->start; i < h->end; i++) {
    const dc_node *n = &h->m->nodes[i];
    if (is_weight_like(n)) {
      h->pure[i] = 1;
      continue;
    }
    if (n->op == OP_INPUT || n->op == OP_UPLOAD || n->ninputs == 0) continue;
    int pure = 1;
    for (int k = 0; k < n->ninputs && pure; k++) {
      int32_t v = n->inputs[k];
      pure = in_loop(h, v) ? h->pure[v] : is_weight_like(&h->m->nodes[v]);
    }
    h->pure[i] = (unsigned char)pure;
  }
}

/* A loop node computed from values made before the loop (and weights):
 * the same in every iteration. */
static void mark_invariant(hoist_ctx *h) {
  for (int32_t i = h->start; i < h->end; i++) {
    const dc_node *n = &h->m->nodes[i];
    if (h->pure[i] || n->op == OP_INPUT || n->op == OP_UPLOAD || (dc_op_get(n->op)->flags & OPF_LEAF)) continue;
    int ok = 1, from_before = 0;
    for (int k = 0; k < n->ninputs && ok; k++) {
      int32_t v = n->inputs[k];
      if (!in_loop(h, v)) from_before |= !is_weight_like(&h->m->nodes[v]);
      else if (h->moved[v]) from_before = 1;
      else ok = h->pure[v];
    }
    h->moved[i] = (unsigned char)(ok && from_before);
  }
}

/* The pure nodes (and weights) a moved node reads move with it; held
 * uploads always move.  Backwards, so a chain moves whole. */
static void close_over_inputs(hoist_ctx *h) {
  for (int32_t i = h->start; i < h->end; i++)
    if (is_held_upload(&h->m->nodes[i])) h->moved[i] = 1;
  for (int32_t i = h->end - 1; i >= h->start; i--) {
    if (!h->moved[i]) continue;
    const dc_node *n = &h->m->nodes[i];
    for (int k = 0; k < n->ninputs; k++)
      if (in_loop(h, n->inputs[k])) h->moved[n->inputs[k]] = 1;
  }
}

/* Bytes the hoisted values hold through the loop, FLOPs an iteration saves. */
static void measure(const hoist_ctx *h, uint64_t *held, uint64_t *flops, int *values) {
  *held = *flops = 0, *values = 0;
  for (int32_t i = h->start; i < h->end; i++) {
    if (!h->moved[i]) continue;
    const dc_node *n = &h->m->nodes[i];
    *flops += dc_node_flops(h->m, i);
    if (!dc_node_is_activation(n) || n->op == OP_UPLOAD) continue;
    int read_in_loop = 0;
    for (int32_t j = i + 1; j < h->end && !read_in_loop; j++)
      for (int k = 0; k < h->m->nodes[j].ninputs; k++) read_in_loop |= !h->moved[j] && h->m->nodes[j].inputs[k] == i;
    if (read_in_loop) *held += dc_type_bytes(&n->type), (*values)++;
  }
}

/* The new order: before the loop, the moved nodes (now in phase `to`), the
 * rest of the loop, after it. */
static dc_status *reorder(dc_module *m, const hoist_ctx *h, int32_t to) {
  int32_t n = m->nnodes;
  dc_node *old = dc_malloc(sizeof *old * (size_t)n);
  int32_t *map = dc_malloc(sizeof *map * (size_t)n);
  if (!old || !map) return dc_free(old), dc_free(map), dc_nomem("hoisting loop-invariant work");
  memcpy(old, m->nodes, sizeof *old * (size_t)n);
  int32_t k = 0;
  for (int pass = 0; pass < 3; pass++)
    for (int32_t i = 0; i < n; i++) {
      int take = pass == 0 ? i < h->start : pass == 1 ? in_loop(h, i) && h->moved[i] : !(i < h->start) && !(in_loop(h, i) && h->moved[i]);
      if (!take) continue;
      m->nodes[k] = old[i];
      if (pass == 1) m->nodes[k].phase = to;
      map[i] = k++;
    }
  for (int32_t i = 0; i < n; i++)
    for (int j = 0; j < m->nodes[i].ninputs; j++) m->nodes[i].inputs[j] = map[m->nodes[i].inputs[j]];
  for (int i = 0; i < m->ninputs; i++) m->inputs[i].node = map[m->inputs[i].node];
  for (int i = 0; i < m->noutputs; i++) m->outputs[i].node = map[m->outputs[i].node];
  dc_free(old), dc_free(map);
  return NULL;
}

static dc_status *hoist_loop(dc_module *m, const dc_memory_options *o, int32_t first_phase, int32_t start, int32_t end,
                             uint64_t *held, uint64_t *flops, int *values, int *moved) {
  hoist_ctx h = {m, start, end, dc_calloc((size_t)m->nnodes + 1, 1), dc_calloc((size_t)m->nnodes + 1, 1)};
  if (!h.moved || !h.pure) return dc_free(h.moved), dc_free(h.pure), dc_nomem("hoisting loop-invariant work");
  mark_pure(&h);
  if (!o || !o->no_hoist) mark_invariant(&h);
  close_over_inputs(&h);
  uint64_t b, f;
  int v;
  measure(&h, &b, &f, &v);
  *held += b, *flops += f, *values += v;
  for (int32_t i = start; i < end; i++) *moved += h.moved[i];
  dc_status *st = reorder(m, &h, first_phase - 1);
  dc_free(h.moved), dc_free(h.pure);
  return st;
}

dc_status *dc_pass_hoist(dc_module *m, const dc_memory_options *o) {
  uint64_t held = 0, flops = 0;
  int values = 0, moved = 0, loops = 0;
  for (int32_t p = 1; p < m->nphases; p++) {
    if (!m->phases[p].loop || m->phases[p - 1].loop) continue; /* the first phase of a loop */
    int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
    dc_phase_spans(m, first, end);
    DC_TRY(hoist_loop(m, o, p, first[p], dc_phase_region_end(m, end, p), &held, &flops, &values, &moved));
    loops++;
  }
  if (!loops) return NULL;
  char bb[32], what[256];
  snprintf(what, sizeof what, "%s%d nodes moved before the loop; %d values hold %s through it; %.3f GFLOP less per iteration",
           o && o->no_hoist ? "off (--no-hoist; held uploads only): " : "", moved, values,
           dc_format_bytes(held, bb, sizeof bb), (double)flops * 1e-9);
  DC_TRY(dc_module_set_meta(m, "hoist", what));
  char num[64];
  snprintf(num, sizeof num, "%" PRIu64 " %" PRIu64, held, flops);
  return dc_module_set_meta(m, "hoist_bytes_flops", num);
}
