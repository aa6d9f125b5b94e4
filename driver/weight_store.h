/* weight_store.h — weight files diffc writes at compile time (see
 * driver/weight_store.c): the per-group files of --offload-dir. */
#ifndef DC_WEIGHT_STORE_H
#define DC_WEIGHT_STORE_H

#include "ir/ir.h"
#include "support/progress.h"

typedef struct {
  int written, reused; /* group files written now / found complete and identical */
} dc_offload_store_report;

/* Writes each offload group's weights (the module's UPLOAD nodes, pass
 * offload) to dir/group_<content hash>.safetensors, reusing a file only
 * when its content matches, and repoints the module's weights to them.
 * disk_only: only the groups holding a weight --device-map put on disk
 * (the others, placed on the cpu, stay in host memory).  The bytes of the
 * groups written or checked go to progress ("writing weights"; may be NULL). */
dc_status *dc_store_offload_groups(dc_module *m, const char *dir, int disk_only, int verbose,
                                   const dc_progress *progress, dc_offload_store_report *rep);

/* Layerwise casting: converts every weight with a cast pending (pass
 * cast-weights) from its file's dtype to its storage dtype (nearest even,
 * as PyTorch; fp8 e4m3 values beyond its range are an error naming the
 * tensor), writes them to `path` (atomically; the plan's weights file for
 * them, beside the plan) and repoints the module's weights there.  The
 * bytes converted go to progress ("writing weights"; may be NULL). */
dc_status *dc_store_cast_weights(dc_module *m, const char *path, int verbose, const dc_progress *progress);

#endif
