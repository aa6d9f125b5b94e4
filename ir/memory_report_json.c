/* memory_report_json.c — the memory report (ir.h) as JSON for scripts:
 * every size in bytes as an integer, every field always present (null
 * where not known), keys in a fixed order.  The schema is
 * docs/memory-report.md's; "schema": "diffc.memory-report/1" changes its
 * number when a field changes meaning or goes away (new fields may be
 * added without). */
#include <inttypes.h>
#include <string.h>

#include "ir.h"

static void jstr(dc_buf *b, const char *s) {
  if (s) dc_buf_json_string(b, s);
  else dc_buf_printf(b, "null");
}

static void jkey(dc_buf *b, const char *key) {
  jstr(b, key);
  dc_buf_printf(b, ": ");
}

static void ju64(dc_buf *b, const char *key, uint64_t v, int comma) {
  jkey(b, key);
  dc_buf_printf(b, "%" PRIu64 "%s", v, comma ? ", " : "");
}

/* {"node": 12, "op": "conv2d", "scope": "...", "phase": "decode"} */
static void jstep(dc_buf *b, const dc_module *m, int32_t node) {
  const dc_node *n = &m->nodes[node];
  dc_buf_printf(b, "{\"node\": %d, \"op\": ", node);
  jstr(b, dc_op_get(n->op)->name);
  dc_buf_printf(b, ", \"scope\": ");
  jstr(b, n->op == OP_INPUT ? m->inputs[n->ref].name : n->scope);
  dc_buf_printf(b, ", \"phase\": ");
  jstr(b, m->nphases ? m->phases[n->phase].name : NULL);
  dc_buf_printf(b, "}");
}

static void jdevice(dc_buf *b, const dc_mem_report *r, int d) {
  const dc_mem_report_device *dv = &r->dev[d];
  dc_buf_printf(b, "    {\"device\": %d, ", d);
  ju64(b, "peak_bytes", dv->peak_bytes, 1);
  ju64(b, "weight_bytes", dv->weight_bytes, 1);
  ju64(b, "arena_bytes", dv->arena_bytes, 1);
  ju64(b, "live_at_peak_bytes", dv->live_at_peak_bytes, 1);
  ju64(b, "live_peak_bytes", dv->live_peak_bytes, 1);
  jkey(b, "peak_step");
  if (r->m->nnodes) jstep(b, r->m, dv->peak_step);
  else dc_buf_printf(b, "null");
  dc_buf_printf(b, ",\n     \"by_kind\": {");
  for (int k = 0; k < DC_MEM_KINDS; k++) ju64(b, dc_mem_kind_name((dc_mem_kind)k), dv->kind_bytes[k], k + 1 < DC_MEM_KINDS);
  dc_buf_printf(b, "},\n     \"by_module\": [");
  for (int32_t i = 0; i < dv->nmodules; i++) {
    dc_buf_printf(b, "%s{\"module\": ", i ? ", " : "");
    jstr(b, dv->modules[i].name);
    dc_buf_printf(b, ", \"bytes\": %" PRIu64 ", \"values\": %d}", dv->modules[i].bytes, dv->modules[i].values);
  }
  dc_buf_printf(b, "],\n     \"top_values\": [");
  for (int i = 0; i < dv->ntop; i++) {
    const dc_node *n = &r->m->nodes[dv->top[i].node];
    dc_buf_printf(b, "%s{\"node\": %d, \"op\": ", i ? ", " : "", dv->top[i].node);
    jstr(b, dc_op_get(n->op)->name);
    dc_buf_printf(b, ", \"scope\": ");
    jstr(b, n->op == OP_INPUT ? r->m->inputs[n->ref].name : n->scope);
    dc_buf_printf(b, ", \"kind\": ");
    jstr(b, dc_mem_kind_name(dv->top[i].kind));
    dc_buf_printf(b, ", \"bytes\": %" PRIu64 "}", dv->top[i].bytes);
  }
  dc_buf_printf(b, "]}");
}

static void jhost(dc_buf *b, const dc_mem_report *r) {
  dc_buf_printf(b, "  \"host\": {");
  ju64(b, "offloaded_weight_bytes", r->offloaded_weight_bytes, 1);
  jkey(b, "host_memory");
  jstr(b, r->host_memory);
  dc_buf_printf(b, ", ");
  jkey(b, "offload_dir");
  jstr(b, r->offload_dir);
  dc_buf_printf(b, ", \"offload_files\": %d, ", r->offload_files);
  ju64(b, "offload_file_bytes", r->offload_file_bytes, 0);
  dc_buf_printf(b, "},\n  \"copies\": {");
  ju64(b, "uploaded_bytes", r->uploaded_bytes, 1);
  dc_buf_printf(b, "\"uploads\": %d, ", r->uploads);
  ju64(b, "transferred_bytes", r->transferred_bytes, 1);
  dc_buf_printf(b, "\"transfers\": %d},\n", r->transfers);
}

static void jphases(dc_buf *b, const dc_mem_report *r) {
  dc_buf_printf(b, "  \"phases\": [");
  for (int p = 0; p < r->nphases; p++) {
    const dc_mem_report_phase *ph = &r->phases[p];
    dc_buf_printf(b, "%s\n    {\"name\": ", p ? "," : "");
    jstr(b, r->m->phases[p].name);
    dc_buf_printf(b, ", \"loop\": %s, \"first_node\": %d, \"end_node\": %d, ", r->m->phases[p].loop ? "true" : "false",
                  ph->first, ph->end);
    ju64(b, "uploaded_bytes", ph->uploaded_bytes, 1);
    ju64(b, "transferred_bytes", ph->transferred_bytes, 1);
    ju64(b, "arena_bytes", ph->arena_bytes, 1);
    ju64(b, "live_peak_bytes", ph->live_peak_bytes, 0);
    dc_buf_printf(b, "}");
  }
  dc_buf_printf(b, "],\n  \"per_image\": ");
  if (!r->nphases || r->ctx.steps_per_image <= 0) dc_buf_printf(b, "null");
  else {
    dc_buf_printf(b, "{\"steps\": %d, ", r->ctx.steps_per_image);
    ju64(b, "uploaded_bytes", r->image_uploaded_bytes, 1);
    ju64(b, "transferred_bytes", r->image_transferred_bytes, 0);
    dc_buf_printf(b, "}");
  }
  dc_buf_printf(b, ",\n  \"components\": [");
  for (int32_t c = 0; c < r->ncomponents; c++) {
    dc_buf_printf(b, "%s{\"name\": ", c ? ", " : "");
    jstr(b, r->components[c].name);
    dc_buf_printf(b, ", ");
    ju64(b, "resident_weight_bytes", r->components[c].resident_bytes, 1);
    ju64(b, "offloaded_weight_bytes", r->components[c].offloaded_bytes, 0);
    dc_buf_printf(b, "}");
  }
  dc_buf_printf(b, "],\n");
}

/* Numbers the runtime adds outside the arena; null where only the run
 * knows them. */
static void jworkspace(dc_buf *b, const dc_mem_report *r) {
  const char *t = r->ctx.target;
  int cpu = t && !strcmp(t, "cpu");
  dc_buf_printf(b, "  \"workspace\": {\"kernel_scratch_bytes_per_thread\": ");
  if (cpu) dc_buf_printf(b, "%" PRIu64, r->ctx.cpu_kernels ? r->ctx.scratch_per_thread : 0);
  else dc_buf_printf(b, t ? "0" : "null");
  dc_buf_printf(b, ", \"bounce_chunk_bytes\": ");
  int on_demand = r->host_memory && !strcmp(r->host_memory, "on-demand");
  if (on_demand && r->ctx.bounce_bytes) dc_buf_printf(b, "%" PRIu64 ", \"bounce_chunks\": %d", r->ctx.bounce_bytes, r->ctx.bounce_chunks);
  else dc_buf_printf(b, "%s, \"bounce_chunks\": %s", on_demand ? "null" : "0", on_demand ? "null" : "0");
  dc_buf_printf(b, ", ");
  ju64(b, "input_bytes", r->input_bytes, 1);
  ju64(b, "output_bytes", r->output_bytes, 0);
  dc_buf_printf(b, "}\n");
}

dc_status *dc_mem_report_json(const dc_mem_report *r, dc_buf *b) {
  dc_buf_printf(b, "{\n  \"schema\": \"diffc.memory-report/1\",\n  \"class\": ");
  jstr(b, dc_module_get_meta(r->m, "class"));
  dc_buf_printf(b, ",\n  \"entry\": ");
  jstr(b, dc_module_get_meta(r->m, "entry"));
  dc_buf_printf(b, ",\n  \"target\": ");
  jstr(b, r->ctx.target);
  dc_buf_printf(b, ",\n  \"steps\": %d,\n  ", r->m->nnodes);
  ju64(b, "resident_weight_bytes", r->resident_weight_bytes, 1);
  ju64(b, "offloaded_weight_bytes", r->offloaded_weight_bytes, 0);
  dc_buf_printf(b, ",\n  \"peak_device\": %d,\n  \"devices\": [\n", r->peak_device);
  for (int d = 0; d < r->ndevices; d++) {
    jdevice(b, r, d);
    dc_buf_printf(b, "%s\n", d + 1 < r->ndevices ? "," : "");
  }
  dc_buf_printf(b, "  ],\n");
  jhost(b, r);
  jphases(b, r);
  jworkspace(b, r);
  dc_buf_printf(b, "}\n");
  return dc_buf_status(b, "rendering the memory report as JSON");
}
