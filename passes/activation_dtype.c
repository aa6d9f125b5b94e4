/* activation_dtype.c — pass "activation-dtype": with --target cuda and
 * --compute-dtype bf16 (f16), the values kernels hand each other are stored
 * in that dtype, as diffusers' pipe.to(torch.bfloat16) stores them; the
 * kernels load them as f32, compute in f32 (norm statistics, softmax, GEMM
 * accumulators, epilogues) and round once, as they store.  No cast node is
 * added: every CUDA generator and the reference dispatch (dc_ref_run) read
 * and write f32, bf16 and f16 values directly.
 *
 * Requires: a verified module; o->activation bf16 or f16 (otherwise the
 *   pass does nothing); the module's metadata "activation_dtype" already says
 *   so (dc_pipeline_run sets it before the first pass, so that cast-weights
 *   may give any reader a bf16/f16 weight); runs after layout (its permutes
 *   at region edges are values like any other, and a module output's last
 *   permute must stay f32) and before dce, place, offload and memplan (uploads
 *   and transfers copy the dtype they read; memplan sizes values by
 *   dc_type_bytes).
 * Guarantees: every float value a node computes is stored in the activation
 *   dtype, except
 *     - module outputs: f32, so a plan's interface does not change (the host
 *       reads them: noise predictions, latents, images, text embeddings);
 *     - what a value that must be f32 is a byte move of: reshape, permute,
 *       upsample_nearest, concat and slice move bytes, so they store the
 *       dtype they read, and a module output that is a move of a computed
 *       value makes that value f32 too (back through the moves);
 *     - a concat of inputs that would differ (an f32 module input beside a
 *       computed value): its computed inputs stay f32;
 *     - rope_freqs: the cos/sin tables stay f32 (diffusers computes rotary
 *       embeddings from f32 tables);
 *   leaves (inputs, weights, constants) and casts keep their types; integer
 *   values are untouched.  A move of a stored weight whose output must be f32
 *   cannot be both: the pass refuses the module, naming the node. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

static int moves_bytes(dc_op op) {
  return op == OP_RESHAPE || op == OP_PERMUTE || op == OP_UPSAMPLE || op == OP_CONCAT || op == OP_SLICE;
}

/* Values whose dtype the pass decides: computed floats. */
static int decided(const dc_node *n) {
  const dc_op_info *info = dc_op_get(n->op);
  if (info->flags & OPF_LEAF) return 0;
  if (n->op == OP_CAST || n->op == OP_UPLOAD || n->op == OP_TRANSFER || n->op == OP_PROBE) return 0;
  return !dc_dtype_is_int(n->type.dtype);
}

/* Back from the values that must be f32 through the moves that make them. */
static void spread_f32(const dc_module *m, unsigned char *f32) {
  for (int32_t i = m->nnodes - 1; i >= 0; i--) {
    const dc_node *n = &m->nodes[i];
    if (!f32[i] || !moves_bytes(n->op)) continue;
    for (int k = 0; k < n->ninputs; k++)
      if (decided(&m->nodes[n->inputs[k]])) f32[n->inputs[k]] = 1;
  }
}

/* One forward sweep: each decided value's dtype.  A concat whose inputs
 * disagree marks its decided inputs f32 and asks for another sweep (*again). */
static dc_status *assign(dc_module *m, unsigned char *f32, dc_dtype act, int *again) {
  *again = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    dc_node *n = &m->nodes[i];
    if (!decided(n)) continue;
    if (!moves_bytes(n->op)) {
      n->type.dtype = f32[i] ? DT_F32 : act;
      continue;
    }
    dc_dtype d = m->nodes[n->inputs[0]].type.dtype;
    int mixed = 0;
    for (int k = 1; k < n->ninputs; k++) mixed |= m->nodes[n->inputs[k]].type.dtype != d;
    if (mixed) { /* only a concat has several inputs */
      for (int k = 0; k < n->ninputs; k++)
        if (decided(&m->nodes[n->inputs[k]]) && !f32[n->inputs[k]]) f32[n->inputs[k]] = 1, *again = 1;
      if (!*again)
        return dc_error(DC_ERR_UNSUPPORTED, "%%%d (%s in %s): its inputs' dtypes differ and none is computed here; "
                        "a move stores the dtype it reads", (int)i, dc_op_get(n->op)->name, n->scope ? n->scope : "?");
      continue;
    }
    if (f32[i] && d != DT_F32)
      return dc_error(DC_ERR_UNSUPPORTED, "%%%d (%s in %s) must be f32 (a module output) but moves a stored %s "
                      "value; compile with --storage-dtype f32", (int)i, dc_op_get(n->op)->name,
                      n->scope ? n->scope : "?", dc_dtype_name(d));
    n->type.dtype = d;
  }
  return NULL;
}

static dc_status *run(dc_module *m, dc_dtype act, unsigned char *f32, int *stored) {
  for (int i = 0; i < m->noutputs; i++) f32[m->outputs[i].node] = 1;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_ROPE_FREQS) f32[i] = 1;
  int again = 1;
  while (again) { /* f32 only grows, so this ends */
    spread_f32(m, f32);
    DC_TRY(assign(m, f32, act, &again));
  }
  *stored = 0;
  for (int32_t i = 0; i < m->nnodes; i++) *stored += decided(&m->nodes[i]) && m->nodes[i].type.dtype == act;
  return NULL;
}

dc_status *dc_pass_activation_dtype(dc_module *m, const dc_memory_options *o) {
  if (!o || o->activation == DT_F32) return NULL;
  dc_dtype act = o->activation;
  if (act != DT_BF16 && act != DT_F16)
    return dc_error(DC_ERR_ARGUMENT, "activation dtype %s: expected bf16 or f16", dc_dtype_name(act));
  if (dc_module_activation_dtype(m) != act)
    return dc_error(DC_ERR_INTERNAL, "activation-dtype: the module's metadata activation_dtype is not %s",
                    dc_dtype_name(act));
  unsigned char *f32 = dc_calloc((size_t)m->nnodes + 1, 1);
  if (!f32) return dc_nomem("choosing activation dtypes");
  int stored = 0;
  dc_status *st = run(m, act, f32, &stored);
  dc_free(f32);
  if (st) return st;
  char what[160];
  snprintf(what, sizeof what, "%s: %d computed values (module outputs and what they move stay f32)",
           dc_dtype_name(act), stored);
  return dc_module_set_meta(m, "activations", what);
}
