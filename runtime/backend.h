/* backend.h — the interface between the runtime's session (runtime.c) and
 * the backends that run a plan's steps: a table of functions, as ggml's
 * ggml_backend_i, that the reference and llvm backends (the CPU executor,
 * cpu_backend.c) and the cuda backend (cuda_backend_iface.c over
 * cuda_backend.c) implement.  The session loads and checks the plan, binds
 * and verifies its weights, and walks the schedule through this table; it
 * never asks which backend it holds.
 *
 * The life of a backend, in the order the session calls it:
 *   create          the plan can run here (kernels, memory budget, the
 *                   driver and its devices) or an error saying why;
 *   arena           device memory: one activation arena per device at its
 *                   planned size, and the host buffers of inputs/outputs;
 *   upload_weights  resident weights where the kernels read them (the
 *                   mapped files, or a device block), offloaded ones staged
 *                   in host memory as the plan's host_memory says;
 *   load_kernels    the kernels made callable (linked, modules loaded);
 *   then per run:
 *     begin_run     the run's steps (all, or one phase); their inputs
 *                   copied host -> device;
 *     run_step      a kernel step (or a constant placing its bytes);
 *     copy          an upload of an offloaded weight;
 *     transfer      a value copied from another device's arena;
 *                   (OP_INPUT and OP_WEIGHT get no call)
 *     synchronise   every stream waited for and, when the run succeeded,
 *                   the outputs copied device -> host;
 *     stats         what the backend measured;
 *   destroy         at any point after create, also after a failed step.
 * Errors are status values.  A backend may queue work (cuda does): a step's
 * failure may then surface at synchronise, which also takes the status the
 * walk ended with and returns the run's. */
#ifndef DC_BACKEND_H
#define DC_BACKEND_H

#include "diffrun.h"
#include "host_weights.h"
#include "plan/plan_format.h"

/* What a backend is given at create; everything outlives the backend. */
typedef struct {
  const char *path;          /* the plan file, for messages */
  const dc_plan *plan;       /* schedule, kernels, OPTS */
  const dc_liveness *live;   /* the memory plan: each device's arena and resident weights */
  dc_host_weights *host;     /* the offloaded weights' host side, initialised by the session */
  const drt_options *opt;    /* never NULL (zeroes when the caller gave none) */
  /* --check-finite (NULL: off): the backend passes each kernel step's f32
   * output, as the host can read it, before the next step runs. */
  dc_status *(*check_step)(void *ctx, int32_t step, const float *values);
  void *check_ctx;
} drt_backend_setup;

/* A backend's state is its own; the session holds it as void *. */
typedef struct drt_backend_i {
  const char *name; /* "reference", "llvm", "cuda": drt_stats.backend and drt_plan_info.backend */
  /* Resident weights are read in place from the mapped weight files for the
   * backend's life (the session keeps those files mapped); else they are
   * copied at upload_weights and the session unmaps every file. */
  int reads_weights_in_place;
  dc_status *(*create)(const drt_backend_setup *setup, void **out);
  dc_status *(*arena)(void *be);
  /* weight_data[w]: weight w's bytes in its mapped file (m->weights order);
   * valid during the call only. */
  dc_status *(*upload_weights)(void *be, const void *const *weight_data);
  dc_status *(*load_kernels)(void *be);
  /* Host buffers of input i (its own dtype and bytes: f32, or i32/i64 for
   * token ids) and output i (f32): inputs are read by the next run, outputs
   * hold the last run's results. */
  void *(*input)(void *be, int i);
  float *(*output)(void *be, int i);
  /* step_seconds: NULL, or one entry per node to which each step's time
   * (wall time on the CPU, device time on a GPU) is added by this run. */
  /* first, end: the steps this run covers, [first, end) — the whole
   * schedule, or one phase of a pipeline (ir.h, "phases"): only the inputs
   * among those steps are copied in, only the outputs among them out, only
   * the uploads among them issued. */
  /* trace: NULL, or the run's event slots (drt_set_tracing), cleared to
   * DRT_EVENT_NONE: per device d its inputs' slot, then one per step
   * (drt_trace_step_slot), then per device its outputs' slot.  The backend fills
   * kind, step, device, stream, start and end (dc_now_seconds' clock; a
   * device's times placed on it), bytes for copies and arena_top; each
   * stream writes only its own steps' slots, so no lock is needed, and the
   * session reads them after synchronise. */
  dc_status *(*begin_run)(void *be, double *step_seconds, drt_trace_event *trace, int32_t first, int32_t end);
  dc_status *(*run_step)(void *be, int32_t step);
  dc_status *(*copy)(void *be, int32_t step);
  dc_status *(*transfer)(void *be, int32_t step);
  /* Takes st (the walk's status, NULL when every step was issued) and
   * returns the run's. */
  dc_status *(*synchronise)(void *be, dc_status *st);
  /* Fills what the backend measured or holds over the plan's figures the
   * session wrote: arena peaks, device and pinned bytes, threads,
   * kernel_seconds where it times the device itself. */
  void (*stats)(const void *be, drt_stats *stats);
  /* Where it runs, for drt_plan_info.device ("" when nothing to say). */
  const char *(*device)(const void *be);
  /* NULL, or note i of what it chose (drt_note); NULL past the last. */
  const char *(*note)(const void *be, int i);
  /* A warning about how the plan suits the device, for drt_plan_info.warning
   * (NULL or "" when none; a backend may leave this NULL). */
  const char *(*warning)(const void *be);
  void (*destroy)(void *be);
} drt_backend_i;

/* The trace slots of a run of steps [first, end) on ndevices devices. */
static inline int32_t drt_trace_slots(int32_t first, int32_t end, int ndevices) { return end - first + 2 * ndevices; }
static inline int32_t drt_trace_inputs_slot(int d) { return d; }
static inline int32_t drt_trace_step_slot(int32_t first, int ndevices, int32_t s) { return ndevices + s - first; }
static inline int32_t drt_trace_outputs_slot(int32_t first, int32_t end, int ndevices, int d) {
  return ndevices + end - first + d;
}

extern const drt_backend_i drt_backend_reference, drt_backend_llvm, drt_backend_cuda;

/* Every backend, NULL-terminated, in the order errors list them. */
extern const drt_backend_i *const drt_backends[];

/* An error unless some backend here runs the plan's target. */
dc_status *drt_check_target(const dc_plan *plan, const char *path);

/* The backend that runs the plan: the one `asked` names (NULL: the plan's
 * own: cuda for a CUDA plan, llvm for a CPU plan with compiled kernels,
 * else reference).  "llvm" on a CUDA plan, which holds no CPU kernels,
 * means reference.  An unknown name, or cuda for a CPU plan, is an error. */
dc_status *drt_backend_choose(const dc_plan *plan, const char *path, const char *asked, const drt_backend_i **out);

/* drt_plan_info's target, compute, kernels and archs (written into archs,
 * cap bytes) from the plan's kernels section. */
void drt_describe_target(const dc_plan *plan, drt_plan_info *info, char *archs, size_t cap);

#endif
