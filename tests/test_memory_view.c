/* test_memory_view.c — ir/memory_view.c: device bytes by kind per step
 * agree with liveness (the kinds but resident weights sum to live_bytes at
 * every step, the arena's high-water mark ends at the planned arena), and
 * the kinds land where they should: uploads are in flight under offload,
 * the text embeddings are held through the denoising loop of a pipeline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../driver/compile.h"
#include "testutil.h"

/* Returns the most bytes of kind k seen at any step of device 0. */
static uint64_t check_series(const dc_module *m) {
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  dc_mem_series s;
  CHECK_OK(dc_mem_series_compute(m, &l, &s));
  CHECK(s.nsteps == m->nnodes && s.ndevices == l.ndevices);
  int sums = 1;
  for (int32_t i = 0; i < s.nsteps && sums; i++) {
    uint64_t sum = 0, all = 0;
    for (int d = 0; d < s.ndevices; d++) {
      for (int k = DC_MEM_IN_FLIGHT; k < DC_MEM_KINDS; k++) sum += dc_mem_series_at(&s, i, d, (dc_mem_kind)k);
      sums &= dc_mem_series_at(&s, i, d, DC_MEM_WEIGHTS) == l.dev_weights[d];
    }
    all = l.live_bytes[i];
    sums &= sum == all;
  }
  CHECK(sums);
  for (int d = 0; d < s.ndevices; d++) CHECK(s.arena_top[(size_t)d * (size_t)s.nsteps + (size_t)s.nsteps - 1] == l.dev_peak[d]);
  uint64_t in_flight = 0, held = 0;
  for (int32_t i = 0; i < s.nsteps; i++) {
    if (dc_mem_series_at(&s, i, 0, DC_MEM_IN_FLIGHT) > in_flight) in_flight = dc_mem_series_at(&s, i, 0, DC_MEM_IN_FLIGHT);
    if (dc_mem_series_at(&s, i, 0, DC_MEM_HELD) > held) held = dc_mem_series_at(&s, i, 0, DC_MEM_HELD);
  }
  dc_mem_series_deinit(&s);
  dc_liveness_deinit(&l);
  return in_flight * 2 + (held > 0); /* in flight > 0 <=> result >= 2; held > 0 <=> odd */
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  dc_module *plain = tu_compile_fixture("unet_tiny/model", &(dc_memory_options){0});
  CHECK(check_series(plain) == 0); /* no uploads, no loop */
  dc_module_destroy(plain);
  dc_module *group = tu_compile_fixture("unet_tiny/model", &(dc_memory_options){.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK,
                                                                     .blocks_per_group = 1, .prefetch = 1});
  CHECK(check_series(group) >= 2);
  for (int32_t i = 0; i < group->nnodes; i++)
    if (group->nodes[i].op == OP_UPLOAD) CHECK(dc_mem_value_kind(group, i) == DC_MEM_IN_FLIGHT);
  dc_module_destroy(group);
  /* a pipeline: the prompt's embeddings are made in "text" and read by
   * every step of the loop; with model offload each component in flight */
  dc_module *pipe = tu_compile_fixture("pipelines/sd", &(dc_memory_options){.offload = DC_OFFLOAD_MODEL});
  uint64_t r = check_series(pipe);
  CHECK(r >= 2 && (r & 1));
  int held_nodes = 0;
  for (int32_t i = 0; i < pipe->nnodes; i++)
    if (dc_node_is_activation(&pipe->nodes[i]) && dc_mem_value_kind(pipe, i) == DC_MEM_HELD) {
      held_nodes++;
      CHECK(!pipe->phases[pipe->nodes[i].phase].loop);
    }
  CHECK(held_nodes > 0);
  dc_module_destroy(pipe);
  return tu_finish();
}
