/* kernel_harness.h — checks one generated CPU kernel against the reference
 * kernel: random inputs for the node's operands, the reference result, the
 * LLVM kernel compiled for the host and linked the way diffrun links it,
 * run on 1..N threads, and the difference. */
#ifndef DC_KERNEL_HARNESS_H
#define DC_KERNEL_HARNESS_H

#include "ir/ir.h"

typedef struct {
  double max_abs, rel_l2;
  int bit_exact;
} kh_result;

/* Node id of m (whose inputs are any earlier nodes: their data is random,
 * normal(0,1) scaled by `scale`) with the LLVM kernel on nthreads threads.
 * Returns an error if the op has no LLVM kernel. */
dc_status *kh_compare(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale,
                      kh_result *out);

/* Adds an f32 input node of the given dims to m; returns its id. */
int32_t kh_input(dc_module *m, int rank, const int64_t *dims);
/* Adds node n (type inferred) to m; returns its id or -1 on a type error (printed). */
int32_t kh_node(dc_module *m, dc_node n);

#endif
