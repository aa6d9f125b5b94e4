/* fuse_common.h — the driver the fusion passes share (passes/fuse_common.c):
 * one sweep over the schedule that offers each node to the pass as a
 * consumer, the reader counts that say whether a producer may be folded
 * into its reader, and the one place that rewrites the graph when it is.
 * Private to passes/fuse_*.c. */
#ifndef DC_FUSE_COMMON_H
#define DC_FUSE_COMMON_H

#include "passes.h"

typedef struct dc_fuse {
  dc_module *m;
  int32_t *readers;         /* reading edges per node; every node counts, dead code too */
  int32_t *repl;            /* node i's value is now computed by node repl[i] */
  unsigned char *is_output; /* the value is a graph output: it must stay materialized */
  unsigned char *dead;      /* absorbed: removed when the sweep is done */
} dc_fuse;

/* Offers every node c, in schedule order, to match(f, c) with c's inputs
 * already pointing at the nodes that now compute them; then points the
 * graph outputs there too and removes the absorbed nodes (the rest keep
 * their order, renumbered), so the module verifies. */
typedef dc_status *(*dc_fuse_match)(dc_fuse *f, int32_t c);
dc_status *dc_fuse_run(dc_module *m, dc_fuse_match match);

/* True when producer p may be folded into its reader c: c is its only
 * reading edge, p is not a graph output, both on the same device. */
int dc_fuse_single_reader(const dc_fuse *f, int32_t p, int32_t c);

/* Folds consumer c into producer p.  `fused` is p's node with its new
 * epilogue (and residual input); its type becomes c's.  It takes p's place
 * when every input it reads precedes p (nothing lives longer than before),
 * otherwise c's place (a residual computed after p, e.g. the time embedding
 * of a resnet); the node left behind is removed at the end.  Appends
 * "op(%c)" to the node's absorbed list: c numbered as the pass found the
 * module (as --dump-after of the previous pass prints it), since the pass
 * renumbers when it is done. */
dc_status *dc_fuse_commit(dc_fuse *f, int32_t p, int32_t c, const dc_node *fused);

#endif
