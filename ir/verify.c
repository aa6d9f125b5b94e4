/* verify.c — the IR checker that runs between passes (QBE's habit): every
 * structural invariant a later stage relies on, with a message naming the
 * node and the pass that broke it. */
#include <string.h>

#include "ir.h"

static dc_status *bad(const char *after, int32_t id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dc_status *bad(const char *after, int32_t id, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): %%%d: %s", after, id, msg);
}

static dc_status *verify_node(const dc_module *m, int32_t id, const char *after) {
  const dc_node *n = &m->nodes[id];
  if ((unsigned)n->op >= OP_COUNT) return bad(after, id, "unknown op %d", (int)n->op);
  const dc_op_info *info = dc_op_get(n->op);
  if (n->ninputs < info->min_inputs || n->ninputs > info->max_inputs)
    return bad(after, id, "%s has %d inputs", info->name, n->ninputs);
  for (int i = 0; i < n->ninputs; i++)
    if (n->inputs[i] < 0 || n->inputs[i] >= id)
      return bad(after, id, "input %d refers to %%%d, not an earlier node", i, n->inputs[i]);
  if (n->op == OP_WEIGHT) {
    if (n->ref < 0 || n->ref >= m->nweights) return bad(after, id, "weight index %d out of range", n->ref);
    if (!dc_type_equal(&n->type, &m->weights[n->ref].type))
      return bad(after, id, "type differs from weight \"%s\"", m->weights[n->ref].name);
  }
  if (n->op == OP_INPUT) {
    if (n->ref < 0 || n->ref >= m->ninputs || m->inputs[n->ref].node != id)
      return bad(after, id, "input index %d does not point back at this node", n->ref);
  }
  if (n->nlist < 0 || n->nlist > DC_MAX_DIMS) return bad(after, id, "bad list length");
  if (n->type.rank < 0 || n->type.rank > DC_MAX_DIMS || (unsigned)n->type.dtype >= DT_COUNT)
    return bad(after, id, "bad type");
  if (n->device < 0 || n->device >= DC_MAX_DEVICES) return bad(after, id, "device %d out of range", n->device);
  /* Data crosses devices only through a transfer (an upload reads host memory). */
  for (int i = 0; i < n->ninputs && n->op != OP_UPLOAD; i++) {
    const dc_node *in = &m->nodes[n->inputs[i]];
    int cross = in->device != n->device;
    if (cross != (n->op == OP_TRANSFER))
      return bad(after, id, "%s on dev%d reads %%%d on dev%d%s", info->name, n->device, n->inputs[i], in->device,
                 cross ? " without a transfer" : ": a transfer to its own device");
  }
  if ((unsigned)n->layout >= LAYOUT_COUNT) return bad(after, id, "bad layout %d", (int)n->layout);
  /* The ops that read their layout read input 0 (and conv2d its weight) in it. */
  int reads_layout = n->op == OP_CONV2D || n->op == OP_GROUP_NORM || n->op == OP_UPSAMPLE;
  if (reads_layout && n->layout == LAYOUT_NHWC)
    for (int i = 0; i < (n->op == OP_CONV2D ? 2 : 1); i++)
      if (m->nodes[n->inputs[i]].layout != LAYOUT_NHWC)
        return bad(after, id, "%s in nhwc reads %%%d, which is %s", info->name, n->inputs[i],
                   dc_layout_name(m->nodes[n->inputs[i]].layout));
  dc_type t;
  dc_status *st = dc_infer_type(m, n, &t);
  if (st) return dc_status_annotate(st, "IR verifier (after %s): %%%d", after, id);
  if (!dc_type_equal(&t, &n->type)) {
    char b1[160], b2[160];
    return bad(after, id, "stored type %s but the inputs imply %s", dc_type_str(&n->type, b1, sizeof b1),
               dc_type_str(&t, b2, sizeof b2));
  }
  return NULL;
}

static dc_status *verify_io(const dc_module *m, const dc_io *io, int n, const char *kind, const char *after) {
  for (int i = 0; i < n; i++) {
    if (io[i].node < 0 || io[i].node >= m->nnodes)
      return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): %s \"%s\" refers to a missing node", after,
                      kind, io[i].name);
    for (int j = 0; j < i; j++)
      if (strcmp(io[i].name, io[j].name) == 0)
        return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): two %ss named \"%s\"", after, kind, io[i].name);
  }
  return NULL;
}

dc_status *dc_verify(const dc_module *m, const char *after) {
  for (int32_t w = 0; w < m->nweights; w++) {
    const dc_weight *wt = &m->weights[w];
    if (wt->file < 0 || wt->file >= m->nfiles)
      return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): weight \"%s\" has file index %d", after,
                      wt->name, wt->file);
    if (wt->bytes != dc_type_bytes(&wt->type) || wt->offset > m->files[wt->file].file_size ||
        wt->bytes > m->files[wt->file].file_size - wt->offset)
      return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): weight \"%s\" bytes or offset out of range",
                      after, wt->name);
  }
  for (int32_t i = 0; i < m->nnodes; i++) DC_TRY(verify_node(m, i, after));
  DC_TRY(dc_phases_verify(m, after));
  DC_TRY(verify_io(m, m->inputs, m->ninputs, "input", after));
  DC_TRY(verify_io(m, m->outputs, m->noutputs, "output", after));
  if (m->noutputs == 0) return dc_error(DC_ERR_INTERNAL, "IR verifier (after %s): the module has no outputs", after);
  return NULL;
}
