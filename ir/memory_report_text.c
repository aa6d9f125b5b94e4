/* memory_report_text.c — the memory report (ir.h) as aligned text in
 * human units (dc_format_bytes), read from the top: the peak and what
 * makes it, then where the weights wait, what is copied, per phase and per
 * component, and the workspace the runtime adds outside the arena.  The
 * exact byte counts are the JSON form's (memory_report_json.c). */
#include <inttypes.h>
#include <string.h>

#include "ir.h"

#define MODULES_SHOWN 10 /* the rest summed on one line */

static const char *kind_meaning(dc_mem_kind k) {
  switch (k) {
    case DC_MEM_WEIGHTS: return "resident weights, the whole run";
    case DC_MEM_IN_FLIGHT: return "uploaded weights, from upload to last reader";
    case DC_MEM_HELD: return "made before the loop, held through it";
    default: return "activations, inputs, outputs, constants";
  }
}

static const char *phase_of(const dc_module *m, int32_t node) {
  return m->nphases ? m->phases[m->nodes[node].phase].name : NULL;
}

static void peak_lines(const dc_mem_report *r, int d, dc_buf *b) {
  const dc_mem_report_device *dv = &r->dev[d];
  const dc_module *m = r->m;
  char b1[32], b2[32], b3[32];
  dc_buf_printf(b, "device %d peak: %s = weights %s (resident) + arena %s (high-water mark)\n", d,
                dc_format_bytes(dv->peak_bytes, b1, sizeof b1), dc_format_bytes(dv->weight_bytes, b2, sizeof b2),
                dc_format_bytes(dv->arena_bytes, b3, sizeof b3));
  if (!m->nnodes) return;
  const dc_node *n = &m->nodes[dv->peak_step];
  const char *ph = phase_of(m, dv->peak_step);
  dc_buf_printf(b, "  reached at step %%%d %s%s%s%s%s\n", dv->peak_step, dc_op_get(n->op)->name,
                n->scope ? " in " : "", n->scope ? n->scope : "", ph ? ", phase " : "", ph ? ph : "");
  uint64_t pct = dv->arena_bytes ? (dv->live_at_peak_bytes * 100 + dv->arena_bytes / 2) / dv->arena_bytes : 100;
  dc_buf_printf(b, "  live then: %s, %" PRIu64 "%% of the arena (the most live at any step: %s)\n",
                dc_format_bytes(dv->live_at_peak_bytes, b1, sizeof b1), pct,
                dc_format_bytes(dv->live_peak_bytes, b2, sizeof b2));
}

static void kind_lines(const dc_mem_report_device *dv, dc_buf *b) {
  char bb[32];
  dc_buf_printf(b, "  by kind:\n");
  for (int k = 0; k < DC_MEM_KINDS; k++)
    dc_buf_printf(b, "    %-12s %10s  %s\n", dc_mem_kind_name((dc_mem_kind)k),
                  dc_format_bytes(dv->kind_bytes[k], bb, sizeof bb), kind_meaning((dc_mem_kind)k));
}

static void module_lines(const dc_mem_report_device *dv, dc_buf *b) {
  char bb[32];
  int width = 12;
  for (int32_t i = 0; i < dv->nmodules && i < MODULES_SHOWN; i++)
    if ((int)strlen(dv->modules[i].name) > width) width = (int)strlen(dv->modules[i].name);
  dc_buf_printf(b, "  by module (live arena bytes):\n");
  uint64_t rest = 0;
  int32_t rest_values = 0;
  for (int32_t i = 0; i < dv->nmodules; i++) {
    const dc_mem_report_module *md = &dv->modules[i];
    if (i >= MODULES_SHOWN) {
      rest += md->bytes, rest_values += md->values;
      continue;
    }
    dc_buf_printf(b, "    %-*s %10s  %d value%s\n", width, md->name, dc_format_bytes(md->bytes, bb, sizeof bb),
                  md->values, md->values == 1 ? "" : "s");
  }
  if (dv->nmodules > MODULES_SHOWN)
    dc_buf_printf(b, "    %-*s %10s  %d values\n", width, "(the rest)", dc_format_bytes(rest, bb, sizeof bb), rest_values);
}

static void top_lines(const dc_mem_report *r, const dc_mem_report_device *dv, dc_buf *b) {
  char bb[32];
  if (!dv->ntop) return;
  dc_buf_printf(b, "  largest values live then:\n");
  for (int i = 0; i < dv->ntop; i++) {
    const dc_node *n = &r->m->nodes[dv->top[i].node];
    char id[16];
    snprintf(id, sizeof id, "%%%d", dv->top[i].node);
    const char *what = n->op == OP_INPUT ? r->m->inputs[n->ref].name : n->scope ? n->scope : "";
    dc_buf_printf(b, "    %-7s %-12s %10s  %-11s %s\n", id, dc_op_get(n->op)->name,
                  dc_format_bytes(dv->top[i].bytes, bb, sizeof bb), dc_mem_kind_name(dv->top[i].kind), what);
  }
}

static void host_lines(const dc_mem_report *r, dc_buf *b) {
  char b1[32], b2[32];
  if (!r->offloaded_weight_bytes) {
    dc_buf_printf(b, "host: no offloaded weights (every weight resident on the device)\n");
    return;
  }
  int on_demand = !strcmp(r->host_memory, "on-demand");
  dc_buf_printf(b, "host: offloaded weights %s, host_memory %s: %s\n", dc_format_bytes(r->offloaded_weight_bytes, b1, sizeof b1),
                r->host_memory,
                on_demand ? "read from their files at every upload through a small bounce buffer"
                          : "read once at load into a pinned host block of that size");
  if (r->offload_dir)
    dc_buf_printf(b, "  offload dir %s: %d group file%s, %s on disk\n", r->offload_dir, r->offload_files,
                  r->offload_files == 1 ? "" : "s", dc_format_bytes(r->offload_file_bytes, b2, sizeof b2));
}

static void copy_lines(const dc_mem_report *r, dc_buf *b) {
  char b1[32], b2[32];
  dc_buf_printf(b, "copies per run of the schedule: %s uploaded (%d upload%s), %s between devices (%d transfer%s)\n",
                dc_format_bytes(r->uploaded_bytes, b1, sizeof b1), r->uploads, r->uploads == 1 ? "" : "s",
                dc_format_bytes(r->transferred_bytes, b2, sizeof b2), r->transfers, r->transfers == 1 ? "" : "s");
}

static void phase_lines(const dc_mem_report *r, dc_buf *b) {
  const dc_module *m = r->m;
  char b1[32], b2[32], b3[32], b4[32], runs[32];
  if (!r->nphases) return;
  int steps = r->ctx.steps_per_image;
  dc_buf_printf(b, "phases:\n    %-16s %-10s %10s %10s %12s %12s\n", "phase", "runs", "uploaded", "transfers",
                "arena peak", "live peak");
  for (int p = 0; p < r->nphases; p++) {
    const dc_mem_report_phase *ph = &r->phases[p];
    if (!m->phases[p].loop) snprintf(runs, sizeof runs, "once");
    else if (steps > 0) snprintf(runs, sizeof runs, "x%d steps", steps);
    else snprintf(runs, sizeof runs, "per step");
    dc_buf_printf(b, "    %-16s %-10s %10s %10s %12s %12s\n", m->phases[p].name, runs,
                  dc_format_bytes(ph->uploaded_bytes, b1, sizeof b1), dc_format_bytes(ph->transferred_bytes, b2, sizeof b2),
                  dc_format_bytes(ph->arena_bytes, b3, sizeof b3), dc_format_bytes(ph->live_peak_bytes, b4, sizeof b4));
  }
  if (steps > 0)
    dc_buf_printf(b, "  per image (%d steps, the pipeline's default): %s uploaded, %s between devices\n", steps,
                  dc_format_bytes(r->image_uploaded_bytes, b1, sizeof b1),
                  dc_format_bytes(r->image_transferred_bytes, b2, sizeof b2));
  else
    dc_buf_printf(b, "  per image: the default step count is not known here; the loop phases' bytes above are per step\n");
}

static void component_lines(const dc_mem_report *r, dc_buf *b) {
  char b1[32], b2[32];
  if (!r->ncomponents) return;
  dc_buf_printf(b, "components (weights):\n    %-16s %12s %12s\n", "component", "resident", "offloaded");
  for (int32_t c = 0; c < r->ncomponents; c++)
    dc_buf_printf(b, "    %-16s %12s %12s\n", r->components[c].name,
                  dc_format_bytes(r->components[c].resident_bytes, b1, sizeof b1),
                  dc_format_bytes(r->components[c].offloaded_bytes, b2, sizeof b2));
}

/* The bounce buffer on-demand weights are read through, as the runtime
 * sizes it (the caller says; before the plan is loaded it is not known). */
static void bounce_line(const dc_mem_report *r, dc_buf *b) {
  char b1[32];
  if (!r->ctx.bounce_bytes) {
    dc_buf_printf(b, "  bounce buffer (on-demand): sized by the runtime at load\n");
    return;
  }
  dc_buf_printf(b, "  bounce buffer (on-demand): %d pinned chunk%s of %s\n", r->ctx.bounce_chunks,
                r->ctx.bounce_chunks == 1 ? "" : "s", dc_format_bytes(r->ctx.bounce_bytes, b1, sizeof b1));
}

static void workspace_lines(const dc_mem_report *r, dc_buf *b) {
  const char *t = r->ctx.target;
  char b1[32], b2[32];
  int cuda = t && !strcmp(t, "cuda");
  dc_buf_printf(b, "outside the arena (runtime workspace):\n");
  if (!t) dc_buf_printf(b, "  target not known: kernel workspace is known once the plan is written\n");
  else if (cuda)
    dc_buf_printf(b, "  kernels: no device workspace (device memory = arena + weight block, each weight 256-byte "
                     "aligned); GEMM steps on cuBLASLt: one workspace per GPU of at most 32 MiB, sized at load; "
                     "the CUDA context is not counted\n  pinned host: inputs %s, outputs %s\n",
                  dc_format_bytes(r->input_bytes, b1, sizeof b1), dc_format_bytes(r->output_bytes, b2, sizeof b2));
  else if (r->ctx.cpu_kernels)
    dc_buf_printf(b, "  kernel scratch: %s per worker thread (llvm backend; threads are chosen at run time: "
                     "diffrun --threads, default one per online CPU)\n",
                  dc_format_bytes(r->ctx.scratch_per_thread, b1, sizeof b1));
  else dc_buf_printf(b, "  kernels: none compiled (the reference kernels allocate their own scratch per step)\n");
  if (r->host_memory && !strcmp(r->host_memory, "on-demand")) bounce_line(r, b);
  else if (r->host_memory)
    dc_buf_printf(b, "  pinned host block: %s (the offloaded weights)\n", dc_format_bytes(r->offloaded_weight_bytes, b1, sizeof b1));
}

dc_status *dc_mem_report_text(const dc_mem_report *r, dc_buf *b) {
  const char *cls = dc_module_get_meta(r->m, "class"), *entry = dc_module_get_meta(r->m, "entry");
  dc_buf_printf(b, "memory report: %s%s%s, target %s\n", cls ? cls : "module", entry ? ", entry " : "",
                entry ? entry : "", r->ctx.target ? r->ctx.target : "not known");
  for (int d = 0; d < r->ndevices; d++) {
    peak_lines(r, d, b);
    kind_lines(&r->dev[d], b);
    module_lines(&r->dev[d], b);
    top_lines(r, &r->dev[d], b);
  }
  host_lines(r, b);
  copy_lines(r, b);
  phase_lines(r, b);
  component_lines(r, b);
  workspace_lines(r, b);
  return dc_buf_status(b, "rendering the memory report");
}
