/* memory_report.c — drt_memory_report (diffrun.h): the plan's memory
 * report (ir/memory_report.c) with what only the loaded plan knows: its
 * target, its kernels' scratch and the bounce buffers the backends use.
 * Apart from runtime.c, which names no backend or target. */
#include <stdlib.h>

#include "diffrun.h"
#include "host_weights.h"
#include "session.h"
#include "plan/plan_format.h"

/* What the plan's sections add to the module's report: the target, the
 * CPU kernels' per-thread scratch (KERN), the on-demand bounce chunks as
 * the backends size them (before the cap at the largest weight). */
static dc_mem_report_context report_context(const drt_plan *p, int steps_per_image) {
  const dc_plan_kernels *k = &drt_plan_file(p)->kernels;
  int cuda = drt_plan_file(p)->target == DC_TARGET_CUDA;
  dc_mem_report_context c = {.target = cuda ? "cuda" : "cpu", .steps_per_image = steps_per_image};
  c.cpu_kernels = cuda ? 0 : k->nentries;
  for (int32_t i = 0; !cuda && i < k->nentries; i++)
    if (k->entries[i].scratch_bytes > c.scratch_per_thread) c.scratch_per_thread = k->entries[i].scratch_bytes;
  c.scratch_per_thread = (c.scratch_per_thread + 63) & ~(uint64_t)63; /* the backend's stride */
  c.bounce_bytes = drt_plan_bounce_bytes(p) ? drt_plan_bounce_bytes(p) : cuda ? DC_CUDA_BOUNCE_BYTES : DC_CPU_BOUNCE_BYTES;
  c.bounce_chunks = cuda ? 2 : 1;
  return c;
}

dc_status *drt_memory_report(const drt_plan *p, int json, int steps_per_image, char **out) {
  *out = NULL;
  dc_mem_report_context ctx = report_context(p, steps_per_image);
  dc_buf b;
  dc_buf_init(&b);
  dc_status *st = dc_mem_report_render(drt_plan_module(p), &ctx, json, &b);
  if (!st) {
    dc_buf_append(&b, "", 1);
    st = dc_buf_status(&b, "rendering the memory report");
  }
  if (st) dc_buf_deinit(&b);
  else *out = (char *)b.data;
  return st;
}
