/* print.c — the deterministic text dump: values numbered in order, attributes
 * in table (sorted) order, floats as %.9g, no pointers.  Each line shows the
 * value's type, scope, layout, placement, bytes, live range and arena offset
 * (once memory is planned); the tail shows the peak, what is live at the
 * peak, and how tightly the arena packs the live bytes, so a reader sees
 * where every byte goes. */
#include <inttypes.h>
#include <string.h>

#include "ir.h"

/* The tag of a timestep input: diffrun --random-inputs fills it with
 * timesteps, not normal values.  ir/parse.c reads the same words (the round
 * trip in tests/test_ir_parse.c checks that they agree). */
#define DC_TIMESTEP_TAG "timestep (--random-inputs: uniform integers 0..999)"

static void print_attrs(const dc_node *n, dc_buf *b) {
  const dc_op_info *info = dc_op_get(n->op);
  if (info->nattrs == 0) return;
  dc_buf_printf(b, " {");
  for (int i = 0; i < info->nattrs; i++) {
    dc_buf_printf(b, "%s%s=", i ? ", " : "", info->attr_names[i]);
    if (info->attr_kinds[i] == ATTR_INT) dc_buf_printf(b, "%" PRId64, n->attrs[i].i);
    else if (info->attr_kinds[i] == ATTR_ACT) dc_buf_printf(b, "%s", dc_act_name((dc_act)n->attrs[i].i));
    else if (info->attr_kinds[i] == ATTR_FLOAT) dc_buf_printf(b, "%.9g", n->attrs[i].f);
    else {
      dc_buf_printf(b, "[");
      for (int k = 0; k < n->nlist; k++) dc_buf_printf(b, k ? ",%" PRId64 : "%" PRId64, n->list[k]);
      dc_buf_printf(b, "]");
    }
  }
  dc_buf_printf(b, "}");
}

/* A constant's values in C order, " [1, 2.5, -3]" (f32 as %.9g, which reads
 * back to the same float; integers exactly); more than
 * DC_CONSTANT_PRINT_MAX elements are elided to their count and hash, and
 * ir/parse.c refuses that form. */
static void print_constant(const dc_node *n, dc_buf *b) {
  uint64_t count = dc_type_numel(&n->type);
  if (count > DC_CONSTANT_PRINT_MAX) {
    dc_buf_printf(b, " [... %" PRIu64 " values, xxh64 %016" PRIx64 "]", count,
                  dc_hash64(n->data, (size_t)dc_type_bytes(&n->type)));
    return;
  }
  dc_buf_printf(b, " [");
  for (uint64_t k = 0; k < count; k++) {
    if (k) dc_buf_printf(b, ", ");
    if (n->type.dtype == DT_F32) dc_buf_printf(b, "%.9g", (double)((const float *)n->data)[k]);
    else if (n->type.dtype == DT_I32) dc_buf_printf(b, "%" PRId32, ((const int32_t *)n->data)[k]);
    else dc_buf_printf(b, "%" PRId64, ((const int64_t *)n->data)[k]);
  }
  dc_buf_printf(b, "]");
}

static void print_node(const dc_module *m, const dc_liveness *l, int32_t id, dc_buf *b) {
  const dc_node *n = &m->nodes[id];
  char tb[160], bb[32];
  dc_buf_printf(b, "%%%d = %s", id, dc_op_get(n->op)->name);
  if (n->op == OP_INPUT) dc_buf_printf(b, " \"%s\"", m->inputs[n->ref].name);
  if (n->op == OP_WEIGHT) dc_buf_printf(b, " @%s", m->weights[n->ref].name);
  if (n->op == OP_CONSTANT) print_constant(n, b);
  if (n->ninputs) {
    dc_buf_printf(b, "(");
    for (int i = 0; i < n->ninputs; i++) dc_buf_printf(b, i ? ", %%%d" : "%%%d", n->inputs[i]);
    dc_buf_printf(b, ")");
  }
  print_attrs(n, b);
  dc_buf_printf(b, " : %s  # ", dc_type_str(&n->type, tb, sizeof tb));
  if (n->absorbed) dc_buf_printf(b, "absorbed %s, ", n->absorbed);
  if (n->scope && n->op != OP_INPUT && n->op != OP_WEIGHT) dc_buf_printf(b, "%s, ", n->scope);
  dc_buf_printf(b, "%s, dev%d, %s", dc_layout_name(n->layout), n->device,
                dc_format_bytes(dc_type_bytes(&n->type), bb, sizeof bb));
  if (n->op == OP_WEIGHT) {
    const dc_weight *w = &m->weights[n->ref];
    dc_buf_printf(b, ", %s, file %d @ %" PRIu64 "\n", dc_weight_offloaded(m, id) ? "offloaded" : "resident", w->file,
                  w->offset);
  } else {
    dc_buf_printf(b, ", live %d..%d", dc_value_first_step(m, id), l->last_use[id]);
    if (n->offset >= 0) dc_buf_printf(b, ", @off %" PRId64, n->offset);
    if (l->inplace_of[id] >= 0) dc_buf_printf(b, " in place over %%%d", l->inplace_of[id]);
    if (n->op == OP_INPUT && m->inputs[n->ref].init == INIT_TIMESTEP) dc_buf_printf(b, ", " DC_TIMESTEP_TAG);
    dc_buf_printf(b, "\n");
  }
}

/* All the weights, then where they are during a run: resident on the
 * device for the whole run, or offloaded (copied in by uploads; the
 * "# offloaded" line at the end says where they wait).  The resident bytes
 * alone would read as "no weights" for an offloaded plan. */
static void print_weights(const dc_module *m, const dc_liveness *l, dc_buf *b) {
  char bb[32], b2[32], b3[32];
  uint64_t all = l->weight_bytes + l->host_weight_bytes;
  dc_buf_printf(b, "# weights: %d tensors, %s (%" PRIu64 " bytes) in %d file(s)", m->nweights,
                dc_format_bytes(all, bb, sizeof bb), all, m->nfiles);
  if (!l->host_weight_bytes) dc_buf_printf(b, ", all resident on the device\n");
  else
    dc_buf_printf(b, ": resident %s, offloaded %s\n", dc_format_bytes(l->weight_bytes, b2, sizeof b2),
                  dc_format_bytes(l->host_weight_bytes, b3, sizeof b3));
}

static void print_header(const dc_module *m, const dc_liveness *l, dc_buf *b) {
  dc_buf_printf(b, "# diffc IR\n");
  for (int i = 0; i < m->nmeta; i++) dc_buf_printf(b, "# %s = %s\n", m->meta[i].key, m->meta[i].value);
  print_weights(m, l, b);
  for (int i = 0; i < m->nfiles; i++)
    dc_buf_printf(b, "#   file %d: %s (%" PRIu64 " bytes, header xxh64 %016" PRIx64 ")\n", i, m->files[i].path,
                  m->files[i].file_size, m->files[i].header_hash);
  for (int i = 0; i < m->ninputs; i++) {
    char tb[160];
    dc_buf_printf(b, "# input %s : %s\n", m->inputs[i].name, dc_type_str(&m->nodes[m->inputs[i].node].type, tb, sizeof tb));
  }
}

/* The planned arena next to the live-bytes lower bound: the gap is what
 * fragmentation costs. */
static void print_arena(const dc_liveness *l, dc_buf *b) {
  char bb[32], b2[32];
  if (!l->planned) {
    dc_buf_printf(b, "# arena: not planned (pass memplan has not run): the peak is the most bytes live at once\n");
    return;
  }
  if (l->ndevices > 1) { /* packing is per device: each device's line below */
    dc_buf_printf(b, "# arena: %s planned (the largest of %d device arenas), %d value%s in place\n",
                  dc_format_bytes(l->peak_bytes, bb, sizeof bb), l->ndevices, l->ninplace, l->ninplace == 1 ? "" : "s");
    return;
  }
  uint64_t pct = l->peak_bytes ? (l->live_peak_bytes * 100 + l->peak_bytes / 2) / l->peak_bytes : 100;
  dc_buf_printf(b, "# arena: %s planned (live bytes at most %s: %" PRIu64 "%% packed), %d value%s in place\n",
                dc_format_bytes(l->peak_bytes, bb, sizeof bb), dc_format_bytes(l->live_peak_bytes, b2, sizeof b2), pct,
                l->ninplace, l->ninplace == 1 ? "" : "s");
}

/* Where offloaded weights wait between uploads, as the runtime will do it
 * (meta host_memory, set by pass offload; absent means pinned, as
 * runtime/host_weights.c reads it): read once into pinned host memory, or
 * read from their files at every upload; with --offload-dir those files
 * are the group files there (meta offload_dir). */
static const char *offload_where(const dc_module *m) {
  const char *hm = dc_module_get_meta(m, "host_memory");
  if (!hm || strcmp(hm, "on-demand") != 0) return "read once, at load, into pinned host memory (host_memory pinned)";
  if (dc_module_get_meta(m, "offload_dir"))
    return "on disk in the offload_dir group files, read at every upload (host_memory on-demand)";
  return "on disk in their weight files, read at every upload (host_memory on-demand)";
}

/* What offloading moves: the offloaded weights, where they wait, and the
 * uploads that copy them in (each weight once per run, or more if its group
 * runs more than once). */
static void print_offload(const dc_module *m, const dc_liveness *l, dc_buf *b) {
  char bb[32], b2[32];
  uint64_t copied = 0;
  int uploads = 0, groups = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (m->nodes[i].op != OP_UPLOAD) continue;
    uploads++;
    copied += dc_type_bytes(&m->nodes[i].type);
    int g = (int)dc_node_int(&m->nodes[i], "group");
    if (g + 1 > groups) groups = g + 1;
  }
  dc_buf_printf(b, "# offloaded: %s of weights, %s; %d upload%s in %d group%s copy %s to the device per run\n",
                dc_format_bytes(l->host_weight_bytes, bb, sizeof bb), offload_where(m), uploads, uploads == 1 ? "" : "s",
                groups, groups == 1 ? "" : "s", dc_format_bytes(copied, b2, sizeof b2));
}

static void print_peak(const dc_module *m, const dc_liveness *l, dc_buf *b) {
  char bb[32], b2[32], b3[32];
  int32_t s = l->peak_step;
  dc_buf_printf(b, "# peak activations: %s (%" PRIu64 " bytes) while %%%d runs; live then:\n",
                dc_format_bytes(l->peak_bytes, bb, sizeof bb), l->peak_bytes, s);
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (!dc_node_is_activation(n) || dc_value_first_step(m, i) > s || dc_value_last_step(l, i) < s) continue;
    dc_buf_printf(b, "#   %%%d %s %s", i, dc_op_get(n->op)->name,
                  dc_format_bytes(dc_type_bytes(&n->type), bb, sizeof bb));
    if (n->offset >= 0) dc_buf_printf(b, " @off %" PRId64, n->offset);
    dc_buf_printf(b, " (%s)\n", n->scope ? n->scope : "");
  }
  print_arena(l, b);
  if (l->ndevices > 1) { /* each device's own line below */
    int most = 0;
    for (int d = 1; d < l->ndevices; d++)
      if (l->dev_weights[d] + l->dev_peak[d] > l->dev_weights[most] + l->dev_peak[most]) most = d;
    dc_buf_printf(b, "# peak device memory: %s on device %d, the most of %d devices:\n",
                  dc_format_bytes(l->dev_weights[most] + l->dev_peak[most], bb, sizeof bb), most, l->ndevices);
  } else {
    /* uploaded weights are values in the arena, like activations */
    dc_buf_printf(b, "# peak device memory: %s = weights %s (resident) + %s %s\n",
                  dc_format_bytes(l->weight_bytes + l->peak_bytes, bb, sizeof bb),
                  dc_format_bytes(l->weight_bytes, b2, sizeof b2),
                  l->host_weight_bytes ? "arena (activations and uploaded weights)" : "activations",
                  dc_format_bytes(l->peak_bytes, b3, sizeof b3));
  }
  for (int d = 0; l->ndevices > 1 && d < l->ndevices; d++) { /* --device-map: each device's own arena */
    int transfers = 0, uploads = 0;
    for (int32_t i = 0; i < m->nnodes; i++) {
      transfers += m->nodes[i].op == OP_TRANSFER && m->nodes[i].device == d;
      uploads += m->nodes[i].op == OP_UPLOAD && m->nodes[i].device == d;
    }
    dc_buf_printf(b, "#   device %d: %s = weights %s + %s %s; %d transfer%s in\n", d,
                  dc_format_bytes(l->dev_weights[d] + l->dev_peak[d], bb, sizeof bb),
                  dc_format_bytes(l->dev_weights[d], b2, sizeof b2),
                  uploads ? "arena (activations and uploaded weights)" : "activations",
                  dc_format_bytes(l->dev_peak[d], b3, sizeof b3), transfers, transfers == 1 ? "" : "s");
  }
  if (l->host_weight_bytes) print_offload(m, l, b);
}

dc_status *dc_print(const dc_module *m, dc_buf *b) {
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  print_header(m, &l, b);
  for (int32_t i = 0; i < m->nnodes; i++) print_node(m, &l, i, b);
  for (int i = 0; i < m->noutputs; i++) dc_buf_printf(b, "output %s = %%%d\n", m->outputs[i].name, m->outputs[i].node);
  print_peak(m, &l, b);
  dc_liveness_deinit(&l);
  return dc_buf_status(b, "printing the IR");
}
