/* fit.c — what each memory technique would need, for the message a user
 * gets when a plan does not fit the device (issue 6: "which diffc options
 * would fit").  diffc stores the table in the plan; diffrun reads it when the
 * device (or --device-memory) is too small and names the options that fit.
 *
 * Each alternative is the same frontend graph (copied with
 * dc_module_clone_borrowing, as the budget search copies it) run through
 * the whole pipeline with that option set, so
 * the numbers are the peaks those plans would really have — not estimates. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

typedef struct {
  const char *flags;
  dc_memory_options o;
} alternative;

/* From the most memory to the least: what a user would try in turn. */
static const alternative alternatives[] = {
    {"", {.offload = DC_OFFLOAD_NONE}},
    {"--offload group --group-level block --blocks-per-group 1 --prefetch",
     {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1, .prefetch = 1}},
    {"--offload group --group-level block --blocks-per-group 1",
     {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1}},
    {"--offload group --group-level leaf --prefetch",
     {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_LEAF, .prefetch = 1}},
    {"--offload sequential", {.offload = DC_OFFLOAD_SEQUENTIAL}},
};

/* The device bytes of a planned module: resident weights + the arena. */
static dc_status *device_peak(const dc_module *m, uint64_t *out) {
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  *out = l.weight_bytes + l.peak_bytes;
  dc_liveness_deinit(&l);
  return NULL;
}

dc_status *dc_fit_table(const dc_module *frontend, const dc_memory_options *base, dc_buf *json) {
  dc_buf_printf(json, "[");
  int first = 1;
  for (size_t i = 0; i < sizeof alternatives / sizeof alternatives[0]; i++) {
    dc_module *m = NULL;
    DC_TRY(dc_module_clone_borrowing(frontend, &m));
    /* the offload alternative with the user's storage dtype and layout, on
     * one device; not the user's --host-memory (it would be an error
     * without offload, and where the weights wait in host memory does not
     * change device bytes) */
    dc_memory_options o = alternatives[i].o;
    if (base) {
      o.storage = base->storage, o.skip_cast = base->skip_cast, o.nskip_cast = base->nskip_cast;
      o.layout = base->layout;
    }
    dc_pipeline_options po = {.memory = &o};
    uint64_t peak = 0;
    dc_status *st = dc_pipeline_run(m, &po);
    if (!st) st = device_peak(m, &peak);
    dc_module_destroy(m);
    if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED) { /* e.g. no block lists: not an alternative here */
      dc_status_free(st);
      continue;
    }
    DC_TRY(st);
    dc_buf_printf(json, "%s{\"flags\":\"%s\",\"device_bytes\":%" PRIu64 "}", first ? "" : ",", alternatives[i].flags,
                  peak);
    first = 0;
  }
  dc_buf_printf(json, "]");
  return dc_buf_status(json, "the memory alternatives");
}
