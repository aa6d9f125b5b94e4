/* host_weights.h — where offloaded weights wait between their uploads
 * (diffc --host-memory, recorded by pass offload as module meta
 * "host_memory"), for both backends:
 *   pinned     every offloaded weight read once at load into one host block
 *              (on the CPU a dc_malloc block models the page-locked one;
 *              the cuda backend allocates its own pinned block);
 *   on-demand  no host copy: each upload reads its weight from the weight
 *              file (pread) in chunks through a small bounce buffer, the
 *              file kept open for the plan's life (diffusers'
 *              low_cpu_mem_usage; the default with --offload-dir).
 * A weight is offloaded when only OP_UPLOAD steps read it.  Reads go
 * through pread, never the mapping, so the pages of offloaded weights are
 * not held by the mapping (a short read names file, tensor and offset). */
#ifndef DC_HOST_WEIGHTS_H
#define DC_HOST_WEIGHTS_H

#include "ir/ir.h"

#define DC_CPU_BOUNCE_BYTES ((uint64_t)4 << 20) /* the CPU's bounce buffer: 4 MiB */
#define DC_CUDA_BOUNCE_BYTES ((uint64_t)8 << 20) /* CUDA: two pinned chunks of this; reads overlap copies */

/* The plan's mode: *on_demand = 0 for "pinned" and for plans that offload
 * nothing or predate the meta; an unknown value is an error naming it. */
dc_status *dc_host_memory_mode(const dc_module *m, const char *plan_path, int *on_demand);

typedef struct {
  const dc_module *m;
  const char *plan_path;   /* borrowed, for messages */
  int on_demand;
  char *offloaded;         /* per weight: only uploads read it */
  int *fd;                 /* per weight file: open for pread while needed, else -1 */
  uint64_t offloaded_bytes, largest; /* all offloaded weights; the largest one */
  /* CPU backend (dc_host_weights_stage): */
  uint64_t *offset;        /* pinned: per weight, its place in block */
  uint8_t *block;          /* pinned: every offloaded weight */
  uint64_t block_bytes;
  uint8_t *bounce;         /* on-demand: reads land here, then go to the arena */
  uint64_t bounce_bytes;
} dc_host_weights;

/* Reads the mode, marks the offloaded weights and opens the files that
 * hold one (for pread: at load when pinned, at every upload when
 * on-demand).  hw is zeroed first; deinit also after an error. */
dc_status *dc_host_weights_init(dc_host_weights *hw, const char *plan_path, const dc_module *m);
void dc_host_weights_deinit(dc_host_weights *hw);
/* Closes the weight files: nothing will read them again (the weights were
 * copied where they wait, as the cuda backend's pinned block does). */
void dc_host_weights_close_files(dc_host_weights *hw);

/* len bytes of weight w from byte `at` of it, read from its file into dst.
 * The message names file, tensor, offset and what was read; the caller adds
 * the plan and the step. */
dc_status *dc_host_weights_read(const dc_host_weights *hw, int w, uint64_t at, void *dst, uint64_t len);

/* CPU backend.  pinned: every offloaded weight into one block, then the
 * files are closed; on-demand: a bounce buffer of min(bounce_bytes (0 =
 * DC_CPU_BOUNCE_BYTES), the largest offloaded weight). */
dc_status *dc_host_weights_stage(dc_host_weights *hw, uint64_t bounce_bytes);
/* Weight w into dst: from the block, or from its file through the bounce
 * buffer one chunk at a time. */
dc_status *dc_host_weights_upload(dc_host_weights *hw, int w, void *dst);
/* Host bytes held for the weights: the block or the bounce buffer. */
uint64_t dc_host_weights_held(const dc_host_weights *hw);

#endif
