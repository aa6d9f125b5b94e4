/* memory_view.c — device bytes by kind and by step (ir.h, "memory by
 * kind"): the one view of a planned module's memory that the memory
 * report, the timeline and budget fitting read.  It adds nothing to the
 * memory model: every value occupies the steps liveness gives it
 * (dc_value_first_step .. dc_value_last_step), so the kinds at a step sum
 * to liveness's live_bytes there. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

const char *dc_mem_kind_name(dc_mem_kind k) {
  static const char *const names[DC_MEM_KINDS] = {"weights", "in_flight", "held", "activations"};
  return (unsigned)k < DC_MEM_KINDS ? names[k] : "?";
}

/* A value of a non-loop phase that a loop phase reads is held through the
 * loop (liveness extends it to the loop's end). */
static int held_through_loop(const dc_module *m, int32_t id) {
  const dc_node *n = &m->nodes[id];
  if (!m->nphases || m->phases[n->phase].loop) return 0;
  for (int32_t i = id + 1; i < m->nnodes; i++) {
    const dc_node *r = &m->nodes[i];
    if (!m->phases[r->phase].loop) continue;
    for (int k = 0; k < r->ninputs; k++)
      if (r->inputs[k] == id) return 1;
  }
  return 0;
}

dc_mem_kind dc_mem_value_kind(const dc_module *m, int32_t id) {
  if (m->nodes[id].op == OP_UPLOAD) return DC_MEM_IN_FLIGHT;
  if (held_through_loop(m, id)) return DC_MEM_HELD;
  return DC_MEM_ACTIVATIONS;
}

void dc_mem_series_deinit(dc_mem_series *s) {
  dc_free(s->bytes);
  dc_free(s->arena_top);
  memset(s, 0, sizeof *s);
}

dc_status *dc_mem_series_compute(const dc_module *m, const dc_liveness *l, dc_mem_series *out) {
  memset(out, 0, sizeof *out);
  int32_t n = m->nnodes;
  int nd = l->ndevices > 0 ? l->ndevices : 1;
  size_t cells = (size_t)nd * ((size_t)n + 1) * DC_MEM_KINDS;
  int64_t *delta = dc_calloc(cells, sizeof *delta);
  out->bytes = dc_calloc(cells, sizeof *out->bytes);
  out->arena_top = dc_calloc((size_t)nd * ((size_t)n + 1), sizeof *out->arena_top);
  if (!delta || !out->bytes || !out->arena_top) {
    dc_free(delta);
    dc_mem_series_deinit(out);
    return dc_nomem("computing the memory series");
  }
  out->nsteps = n;
  out->ndevices = nd;
  /* a difference array per (device, kind) over the steps a value occupies;
   * one pass over the readers marks what is held through a loop */
  unsigned char *held = m->nphases ? dc_calloc((size_t)n + 1, 1) : NULL;
  if (m->nphases && !held) {
    dc_free(delta);
    dc_mem_series_deinit(out);
    return dc_nomem("computing the memory series");
  }
  for (int32_t i = 0; held && i < n; i++) {
    const dc_node *r = &m->nodes[i];
    if (!m->phases[r->phase].loop) continue;
    for (int k = 0; k < r->ninputs; k++) {
      int32_t v = r->inputs[k];
      if (!m->phases[m->nodes[v].phase].loop) held[v] = 1;
    }
  }
  for (int32_t i = 0; i < n; i++) {
    const dc_node *node = &m->nodes[i];
    if (!dc_node_is_activation(node)) continue;
    dc_mem_kind k = node->op == OP_UPLOAD ? DC_MEM_IN_FLIGHT : held && held[i] ? DC_MEM_HELD : DC_MEM_ACTIVATIONS;
    int d = node->device < nd ? node->device : nd - 1;
    int64_t b = (int64_t)dc_type_bytes(&node->type);
    delta[((size_t)d * ((size_t)n + 1) + (size_t)dc_value_first_step(m, i)) * DC_MEM_KINDS + k] += b;
    delta[((size_t)d * ((size_t)n + 1) + (size_t)dc_value_last_step(l, i) + 1) * DC_MEM_KINDS + k] -= b;
  }
  for (int d = 0; d < nd; d++) {
    int64_t run[DC_MEM_KINDS] = {0};
    for (int32_t s = 0; s < n; s++)
      for (int k = 0; k < DC_MEM_KINDS; k++) {
        run[k] += delta[((size_t)d * ((size_t)n + 1) + (size_t)s) * DC_MEM_KINDS + k];
        out->bytes[((size_t)d * (size_t)n + (size_t)s) * DC_MEM_KINDS + k] =
            k == DC_MEM_WEIGHTS ? l->dev_weights[d] : (uint64_t)run[k];
      }
  }
  /* the arena's high-water mark as the steps allocate: a value's top is
   * reached at its first step (planned); before planning, the live bytes */
  for (int32_t i = 0; i < n; i++) {
    const dc_node *node = &m->nodes[i];
    if (!dc_node_is_activation(node)) continue;
    int d = node->device < nd ? node->device : nd - 1;
    uint64_t top = l->planned ? (uint64_t)node->offset + dc_type_bytes(&node->type) : 0;
    uint64_t *at = &out->arena_top[(size_t)d * (size_t)n + (size_t)dc_value_first_step(m, i)];
    if (top > *at) *at = top;
  }
  for (int d = 0; d < nd; d++) {
    uint64_t top = 0;
    for (int32_t s = 0; s < n; s++) {
      uint64_t *at = &out->arena_top[(size_t)d * (size_t)n + (size_t)s];
      if (!l->planned) {
        uint64_t live = 0;
        for (int k = DC_MEM_IN_FLIGHT; k < DC_MEM_KINDS; k++) live += dc_mem_series_at(out, s, d, (dc_mem_kind)k);
        *at = live;
      }
      if (*at > top) top = *at;
      *at = top;
    }
  }
  dc_free(held);
  dc_free(delta);
  return NULL;
}
