/* constant_weights.c — pass "constant-weights": for a target that places no
 * constants (cuda), every constant becomes a weight holding the same bytes.
 *
 * Why: a constant's bytes live in the plan and a CPU runtime writes them
 * into the arena when their step runs; the CUDA runtime has no such step.
 * A weight it already places (resident, or offloaded and uploaded before
 * use like any other), so a position table computed at compile time (a
 * video model's RoPE grid, a sincos table) runs on the GPU without a new
 * runtime path.  The weight's bytes are written beside the plan with the
 * converted weights (driver/weight_store.c), from `inline_bytes`.
 *
 * Requires: a verified module; dc_memory_options.constants_as_weights.
 *   After cast-weights (a table keeps its f32 bytes: the kernels that read
 *   position tables want them exact) and activation-dtype (which leaves
 *   constants f32); before dce (nothing it needs) and offload (a weight
 *   from here is offloaded by its scope like the model's own).
 * Guarantees: no f32 OP_CONSTANT node; each former constant is an OP_WEIGHT
 *   whose weight refers to the pseudo file "<constants>" (dropped once the
 *   bytes are stored) with inline_bytes set (so it is pending until then).
 * Invalidates: nothing (node ids and order are kept). */
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* A unique, deterministic safetensors name: the node's scope and index. */
static const char *weight_name(dc_module *m, int32_t i) {
  const dc_node *n = &m->nodes[i];
  char *s = dc_asprintf("diffc.constant.%d%s%s", (int)i, n->scope ? "." : "", n->scope ? n->scope : "");
  if (!s) return NULL;
  const char *kept = dc_arena_strdup(m->arena, s);
  dc_free(s);
  return kept;
}

/* Integer constants (ids) stay: no kernel reads an integer weight, and the
 * CUDA target refuses them by name as before. */
static int is_float_constant(const dc_node *n) { return n->op == OP_CONSTANT && n->type.dtype == DT_F32; }

static uint64_t constant_bytes(const dc_module *m) {
  uint64_t total = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (is_float_constant(&m->nodes[i])) total += dc_type_bytes(&m->nodes[i].type);
  return total;
}

dc_status *dc_pass_constant_weights(dc_module *m, const dc_memory_options *o) {
  if (!o || !o->constants_as_weights) return NULL;
  uint64_t total = constant_bytes(m);
  if (total == 0) return NULL;
  dc_weight_file pseudo = {"<constants>", 0, total};
  int32_t file = dc_module_add_file(m, &pseudo);
  if (file < 0) return dc_nomem("turning constants into weights");
  uint64_t at = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    dc_node *n = &m->nodes[i];
    if (!is_float_constant(n)) continue;
    dc_weight w;
    memset(&w, 0, sizeof w);
    w.name = weight_name(m, i);
    if (!w.name) return dc_nomem("turning constants into weights");
    w.file = file;
    w.offset = at;
    w.bytes = dc_type_bytes(&n->type);
    w.type = n->type;
    w.inline_bytes = n->data;
    w.place = DC_PLACE_DEVICE;
    int32_t id = dc_module_add_weight(m, &w);
    if (id < 0) return dc_nomem("turning constants into weights");
    n->op = OP_WEIGHT;
    n->ref = id;
    n->data = NULL;
    at += w.bytes;
  }
  return NULL;
}
