/* cast_weights.c — pass "cast-weights": layerwise casting (diffusers
 * enable_layerwise_casting: weights kept in a storage dtype, upcast where a
 * layer computes; docs/ARCHITECTURE.md has the pass order).
 *
 * Requires: a verified module; runs before dce and offload.
 * Guarantees: with --storage-dtype D, the weight and bias of every conv2d,
 *   conv3d and linear whose module path no skip pattern matches are stored
 *   in D: the WEIGHT node has dtype D (cast_pending records the file's dtype;
 *   the plan writer converts, driver/weight_store.c) and the consumer reads it
 *   directly — a CAST the frontend put after a bf16/f16 checkpoint tensor is
 *   bypassed (dce removes it).  The kernels upcast as they load: there is no
 *   full-tensor cast anywhere, in host memory, over the copy (uploads carry
 *   D) or on the device.  Module metadata "storage" says what was cast.
 * Skipping follows diffusers: a module is skipped with its subtree when a
 *   pattern matches (re.search, here POSIX extended regex) its full dotted
 *   name or any ancestor's; defaults pos_embed, patch_embed, norm,
 *   ^proj_in$, ^proj_out$; the module's class adds its own, always
 *   (facts->skip_cast, diffusers' _skip_layerwise_casting_patterns).  A weight that
 *   anything other than an eligible conv/linear parameter slot reads stays
 *   as it is (shared weights are rare; casting half of them would not save
 *   memory).
 * With storage_all (--compute-dtype bf16/f16 on cuda and no --storage-dtype:
 *   diffusers' pipe.to(dtype) casts every parameter) a weight is stored in D
 *   when every reader is a slot that loads a typed weight — any float input
 *   of an op that computes (norm gammas and betas, biases, embedding and
 *   position tables too), not a byte move — and no pattern skips anything. */
#include <regex.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

static const char *const default_skip[] = {"pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$"};

int dc_cast_skip_patterns(const dc_memory_options *o, const dc_model_facts *facts, const char **out, int cap) {
  int n = 0;
  if (o->skip_cast)
    for (int i = 0; i < o->nskip_cast && n < cap; i++) out[n++] = o->skip_cast[i];
  else
    for (size_t i = 0; i < sizeof default_skip / sizeof default_skip[0] && n < cap; i++) out[n++] = default_skip[i];
  for (const char *const *p = facts ? facts->skip_cast : NULL; p && *p && n < cap; p++) out[n++] = *p;
  return n;
}

/* Whether any pattern matches the path or one of its dotted prefixes. */
static int skipped(const regex_t *re, int nre, const char *path) {
  char prefix[512];
  size_t len = strlen(path);
  if (len >= sizeof prefix) len = sizeof prefix - 1;
  for (size_t end = 0; end <= len; end++) {
    if (end < len && path[end] != '.') continue;
    memcpy(prefix, path, end);
    prefix[end] = 0;
    for (int i = 0; i < nre; i++)
      if (regexec(&re[i], prefix, 0, NULL, 0) == 0) return 1;
  }
  return 0;
}

/* The WEIGHT node a parameter slot reads, through at most one CAST; -1 if
 * the slot reads a computed value. */
static int32_t param_weight(const dc_module *m, int32_t v) {
  const dc_node *n = &m->nodes[v];
  if (n->op == OP_WEIGHT) return v;
  if (n->op == OP_CAST && m->nodes[n->inputs[0]].op == OP_WEIGHT) return n->inputs[0];
  return -1;
}

static int is_param_slot(const dc_node *n, int k) {
  int weighted = n->op == OP_CONV2D || n->op == OP_CONV3D || n->op == OP_LINEAR;
  return weighted && (k == 1 || (k == 2 && dc_node_int(n, "bias")));
}

/* storage_all: input k of n loads a typed weight (every float input of an op
 * that computes; the byte moves store what they read, the runtime's copies
 * and casts are not readers of that kind). */
static int loads_typed(const dc_node *n, int k) {
  switch (n->op) {
    case OP_RESHAPE: case OP_PERMUTE: case OP_UPSAMPLE: case OP_CONCAT: case OP_SLICE: case OP_CAST:
    case OP_UPLOAD: case OP_TRANSFER: case OP_PROBE: return 0;
    case OP_EMBEDDING: return k == 1;
    case OP_EOS_POOL: return k == 0;
    default: return 1;
  }
}

static int slot_takes(const dc_node *n, int k, const dc_memory_options *o) {
  return o->storage_all ? loads_typed(n, k) : is_param_slot(n, k);
}

/* ok[w] = 1 for weight nodes every reader of which (directly, or through a
 * cast) is an eligible parameter slot; 2 once seen disqualified. */
static void find_eligible(const dc_module *m, const dc_memory_options *o, const regex_t *re, int nre, unsigned char *ok) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    for (int k = 0; k < n->ninputs; k++) {
      int32_t v = n->inputs[k], w = param_weight(m, v);
      if (m->nodes[v].op == OP_CAST && n->op == OP_CAST) continue;
      if (w < 0) continue;
      if (m->nodes[v].op == OP_WEIGHT && n->op == OP_CAST) continue; /* judged by the cast's readers */
      int eligible = slot_takes(n, k, o) && !(m->nodes[w].scope && skipped(re, nre, m->nodes[w].scope));
      ok[w] = eligible && ok[w] != 2 ? 1 : 2;
    }
  }
}

static dc_status *cast_weight(dc_module *m, int32_t w, dc_dtype d) {
  dc_node *wn = &m->nodes[w];
  dc_weight *wt = &m->weights[wn->ref];
  if (wt->cast_pending) return dc_error(DC_ERR_INTERNAL, "weight %s is cast twice", wt->name);
  if (wt->type.dtype == d) return NULL;
  if (wt->repack_pending) return dc_error(DC_ERR_INTERNAL, "weight %s is cast after its repack", wt->name);
  wt->cast_pending = 1;
  wt->from_dtype = wt->type.dtype;
  wt->from_bytes = wt->bytes;
  wt->type.dtype = d;
  wt->bytes = dc_type_bytes(&wt->type);
  wn->type.dtype = d;
  return NULL;
}

static dc_status *compile_patterns(const dc_module *m, const dc_memory_options *o, regex_t *re, int *nre) {
  const char *pats[32];
  int n = dc_cast_skip_patterns(o, m->facts, pats, 32);
  *nre = 0;
  for (int i = 0; i < n; i++) {
    int rc = regcomp(&re[i], pats[i], REG_EXTENDED | REG_NOSUB);
    if (rc) {
      char why[128];
      regerror(rc, &re[i], why, sizeof why);
      for (int j = 0; j < i; j++) regfree(&re[j]);
      return dc_error(DC_ERR_ARGUMENT, "--skip-cast \"%s\": not a valid pattern (%s)", pats[i], why);
    }
    *nre = i + 1;
  }
  return NULL;
}

dc_status *dc_pass_cast_weights(dc_module *m, const dc_memory_options *o) {
  if (!o || o->storage == DT_F32) return NULL;
  regex_t re[32];
  int nre = 0;
  if (!o->storage_all) DC_TRY(compile_patterns(m, o, re, &nre)); /* pipe.to(dtype) skips nothing */
  unsigned char *ok = dc_calloc((size_t)m->nnodes + 1, 1);
  dc_status *st = ok ? NULL : dc_nomem("layerwise casting");
  if (!st) find_eligible(m, o, re, nre, ok);
  int ncast = 0;
  uint64_t before = 0, after = 0;
  for (int32_t w = 0; w < m->nnodes && !st; w++) {
    if (ok[w] != 1) continue;
    before += m->weights[m->nodes[w].ref].bytes;
    st = cast_weight(m, w, o->storage);
    after += m->weights[m->nodes[w].ref].bytes;
    ncast++;
  }
  /* Parameter slots read their weight directly (the frontend's casts die in dce). */
  for (int32_t i = 0; i < m->nnodes && !st; i++) {
    dc_node *n = &m->nodes[i];
    for (int k = 0; k < n->ninputs; k++) {
      int32_t w = slot_takes(n, k, o) ? param_weight(m, n->inputs[k]) : -1;
      if (w >= 0 && ok[w] == 1) n->inputs[k] = w;
    }
  }
  for (int i = 0; i < nre; i++) regfree(&re[i]);
  dc_free(ok);
  if (st) return st;
  char what[200], b1[32], b2[32];
  if (o->storage_all)
    snprintf(what, sizeof what, "%s: %d tensors (every weight a kernel loads typed), %s -> %s", dc_dtype_name(o->storage),
             ncast, dc_format_bytes(before, b1, sizeof b1), dc_format_bytes(after, b2, sizeof b2));
  else
    snprintf(what, sizeof what, "%s: %d conv/linear tensors, %s -> %s (the rest skipped by pattern or kept)",
             dc_dtype_name(o->storage), ncast, dc_format_bytes(before, b1, sizeof b1), dc_format_bytes(after, b2, sizeof b2));
  return dc_module_set_meta(m, "storage", what);
}
