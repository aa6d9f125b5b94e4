/* lowering.c — see lowering.h. */
#include "lowering.h"

const char *dc_lower_how_name(dc_lower_how how) {
  switch (how) {
    case DC_LOWER_KERNEL: return "kernel";
    case DC_LOWER_RUNTIME: return "runtime";
    case DC_LOWER_REFERENCE: return "reference";
    case DC_LOWER_REFUSED: return "refused";
    default: return "unmarked";
  }
}

dc_status *dc_lowering_check(const dc_module *m, const char *target, dc_lowering_fn lowering) {
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    dc_lowering l = lowering(n->op);
    if (l.how != DC_LOWER_REFUSED && l.how != DC_LOWER_UNMARKED) continue;
    const char *name = dc_op_get(n->op)->name, *scope = n->scope && *n->scope ? n->scope : NULL;
    return dc_error(DC_ERR_UNSUPPORTED, "--target %s: node %%%d (%s%s%s) cannot run there yet: %s", target, (int)i,
                    name, scope ? " in " : "", scope ? scope : "",
                    l.how == DC_LOWER_REFUSED ? l.why : "its op has no kernel and no mark for this target");
  }
  return NULL;
}
