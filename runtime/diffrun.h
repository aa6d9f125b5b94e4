/* diffrun.h — the diffc runtime's one public header: load a plan, bind its
 * inputs, run it, read its outputs.  Errors are status values: a NULL
 * dc_status* means success; otherwise read the message and free it.
 *
 *   drt_plan *p;
 *   dc_status *st = drt_load("unet.dplan", NULL, &p);
 *   if (st) { fprintf(stderr, "%s\n", dc_status_message(st)); dc_status_free(st); ... }
 *   drt_set_input(p, "sample", data, numel);  ...
 *   drt_run(p, &stats);
 *   const float *out = drt_output(p, "sample", &numel);
 *   drt_destroy(p);
 *
 * Tensors cross this interface as f32 in C order. */
#ifndef DIFFRUN_H
#define DIFFRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dc_status dc_status;
const char *dc_status_message(const dc_status *st);
void dc_status_free(dc_status *st);

typedef struct drt_plan drt_plan;

typedef struct {
  /* "llvm": the kernels compiled into the plan (the default when it has
   * them); "reference": the plain C kernels, the oracle. */
  const char *backend;
  int threads; /* llvm backend: worker threads; 0 = one per online CPU */
  /* Check every step's f32 output for NaN/Inf and fail at the first one,
   * naming the step and its module path (fp8 or fp16 overflow shows up
   * here).  Off by default; costs one pass over each output when on. */
  int check_finite;
} drt_options;

typedef struct {
  const char *name;
  int rank;
  int64_t dims[6];
  size_t numel;
} drt_tensor_info;

typedef struct {
  double seconds;              /* wall time of the run */
  uint64_t device_peak_bytes;  /* measured peak of the device arena (activations) */
  uint64_t device_predicted_bytes; /* the plan's prediction of the same */
  uint64_t weight_bytes;       /* resident weights */
  int steps;                   /* kernels executed */
  const char *backend;         /* "llvm" or "reference" */
  int threads;
  int reference_steps;         /* llvm backend: nodes that ran a reference kernel (no LLVM kernel yet) */
} drt_stats;

/* Loads the plan and binds its weights (mmap).  Refuses plans whose weight
 * files changed since compile, with a message naming the file. */
dc_status *drt_load(const char *path, const drt_options *opt, drt_plan **out);
void drt_destroy(drt_plan *p);

int drt_input_count(const drt_plan *p);
int drt_output_count(const drt_plan *p);
const drt_tensor_info *drt_input_info(const drt_plan *p, int i);
const drt_tensor_info *drt_output_info(const drt_plan *p, int i);
/* Metadata of the compiled model ("class", "entry", ...), or NULL. */
const char *drt_meta(const drt_plan *p, const char *key);
/* The IR dump stored in the plan. */
const char *drt_ir_text(const drt_plan *p);

/* Per-step timing: when on, every run adds each step's wall time to a
 * per-step total that drt_profile reads (the runs in between are not
 * slowed by more than a clock read per step). */
dc_status *drt_set_profiling(drt_plan *p, int on);
typedef struct {
  int step;
  const char *op, *scope; /* scope may be "" */
  double seconds;         /* summed over the runs since profiling was turned on */
} drt_step_time;
/* Fills up to max entries, slowest first; returns how many. */
int drt_profile(const drt_plan *p, drt_step_time *out, int max);

/* Copies numel floats for input `name`; numel must match the plan. */
dc_status *drt_set_input(drt_plan *p, const char *name, const float *data, size_t numel);
/* Fills every input with seeded random values (normal; timesteps uniform in
 * [0, 1000)). */
void drt_set_random_inputs(drt_plan *p, uint64_t seed);
dc_status *drt_run(drt_plan *p, drt_stats *stats);
/* Valid after a successful drt_run until the next run or destroy. */
const float *drt_output(const drt_plan *p, const char *name, size_t *numel);

#ifdef __cplusplus
}
#endif
#endif
