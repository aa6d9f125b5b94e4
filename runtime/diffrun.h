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
 * Tensors cross this interface in C order: outputs as f32, inputs as f32
 * or, where the plan's input is integer (token ids), as i32 or i64
 * (drt_set_input_data). */
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
  /* "cuda": the GPU kernels of a plan compiled with --target cuda (the
   * default for such plans; needs an NVIDIA driver); "llvm": the CPU kernels
   * compiled into a CPU plan (the default when it has them); "reference":
   * the plain C kernels, the oracle, on the CPU (any plan; "llvm" on a CUDA
   * plan, which holds no CPU kernels, means the same). */
  const char *backend;
  int threads; /* llvm backend: worker threads; 0 = one per online CPU */
  /* Check every step's f32 output for NaN/Inf and fail at the first one,
   * naming the step and its module path (fp8 or fp16 overflow shows up
   * here).  Off by default; costs one pass over each output when on (on
   * CUDA also a copy back and a synchronisation per step). */
  int check_finite;
  int device;  /* cuda backend: the CUDA device ordinal */
  /* CPU backends: the device memory to model, in bytes (0: no limit).  A
   * plan whose arena plus resident weights exceed it fails at load, before
   * anything runs, naming the diffc options that would fit (as the cuda
   * backend does against the GPU's free memory). */
  uint64_t device_memory;
  /* Read and check the plan and its weight files only, for drt_info,
   * drt_ir_text and the signature: no arena, no kernels, no GPU needed;
   * drt_run then fails. */
  int inspect;
  /* Plans compiled with --host-memory on-demand: the bounce buffer that
   * offloaded weights are read through, in bytes (0: 4 MiB on the CPU, two
   * chunks of 8 MiB on CUDA; never more than the largest offloaded weight). */
  uint64_t bounce_bytes;
  /* Skip re-hashing the weights' bytes at load (diffrun
   * --no-verify-weights), for a trusted store where the cost matters: by
   * default every tensor the plan reads is hashed (XXH3) and compared with
   * the hash taken at compile time, and a plan whose weights changed is
   * refused, naming the file and the first tensor that differs.  The file
   * size and safetensors header are checked either way. */
  int no_verify_weights;
  /* A file of trusted Ed25519 public keys (plan/plan_sign.h; diffrun
   * --trusted-keys): the plan is refused unless one of them signed it
   * (diffc --sign) and the signature verifies, checked before any of the
   * plan is parsed.  NULL: signed and unsigned plans load alike. */
  const char *trusted_keys;
  /* cuda backend: every run enqueues its steps on streams (diffrun
   * --no-cuda-graphs; also DIFFC_CUDA_GRAPHS=0 in the environment).  By
   * default a one-GPU plan's run captures its steps (the whole schedule,
   * or one phase) into a CUDA graph the first time and replays it after:
   * one launch per run instead of one per kernel.  Profiling, tracing,
   * check_finite, on-demand uploads and --device-map plans use streams
   * either way; drt_note says what was chosen. */
  int no_cuda_graphs;
  /* cuda backend: run every GEMM step (linear, 1x1 conv2d) on its NVRTC
   * kernel, never cuBLASLt (diffrun --no-cublaslt; DIFFC_CUBLASLT=0 in the
   * environment does the same).  By default the steps cuBLASLt can compute
   * exactly as the plan defines them (bf16 or f16 operands, the epilogues
   * it has) run on it when libcublasLt loads. */
  int no_cublaslt;
} drt_options;

typedef struct {
  const char *name;
  int rank;
  int64_t dims[6];
  size_t numel;
  const char *dtype; /* "f32", or for an integer input "i32" or "i64" */
} drt_tensor_info;

typedef struct {
  double seconds;              /* wall time of the run (cuda: inputs in, kernels, outputs out) */
  double kernel_seconds;       /* cuda: device time from the first launch to the end of the last
                                * (events); cpu: the same as seconds */
  double flops;                /* arithmetic of the run (2 per multiply-add of conv2d, linear, attention) */
  uint64_t device_peak_bytes;  /* peak of the device arena (activations): the highest byte a
                                * value placed during the run occupied */
  uint64_t device_predicted_bytes; /* the plan's prediction of the same */
  uint64_t weight_bytes;       /* resident weights */
  uint64_t host_weight_bytes;  /* offloaded weights (diffc --offload): in host memory or on disk */
  uint64_t uploaded_bytes;     /* copied host -> device per run (the uploads of offloaded weights) */
  uint64_t device_total_bytes; /* device memory held: cuda: the arena + the weight block + the
                                * cuBLASLt workspace (all cuMemAlloc; pinned host buffers are not
                                * device memory and are in pinned_bytes); cpu: the arena (weights
                                * stay mapped from their files) */
  uint64_t pinned_bytes;       /* host memory pinned for the run.  cuda: inputs, outputs, and the
                                * offloaded weights (--host-memory pinned) or the two bounce chunks
                                * (on-demand); the resident weights' staging is freed after loading.
                                * cpu (which models pinned memory with ordinary memory): the block
                                * of offloaded weights (pinned) or the bounce buffer (on-demand) */
  const char *host_memory;     /* offloaded weights: "pinned", "on-demand"; "" when none */
  /* Per device (diffc --device-map; one device otherwise): each device's
   * arena peak measured and planned, and its resident weights.  The
   * device_* fields above give the largest device's (device_total_bytes
   * all of them).  transferred_bytes: copied between devices per run. */
  int ndevices;
  uint64_t dev_peak_bytes[8], dev_predicted_bytes[8], dev_weight_bytes[8];
  uint64_t transferred_bytes;
  int steps;                   /* kernels executed */
  const char *backend;         /* "cuda", "llvm" or "reference" */
  int threads;                 /* cpu worker threads; 0 on cuda */
  int reference_steps;         /* llvm backend: nodes that ran a reference kernel (no LLVM kernel yet) */
  const char *reference_ops;   /* their ops, e.g. "blend" (the tiled VAE's seams); "" when none */
  int cuda_graph;              /* cuda: the (last phase's) run replayed a CUDA graph */
  /* cuda: GEMM steps (linear, 1x1 conv2d) cuBLASLt could run by its rule
   * (runtime/cuda_gemm_lt.c), those that do, its workspaces (outside the
   * arena, counted in device_total_bytes), why it is not used ("" when it
   * is) and what the algorithm cache did ("read FILE", "wrote FILE",
   * "ignored FILE (why); ..."; "" when it was not consulted).  Zero and ""
   * on the CPU backends. */
  int gemm_steps, cublaslt_steps;
  uint64_t cublaslt_workspace_bytes;
  const char *cublaslt_note, *cublaslt_cache;
} drt_stats;

/* Loads the plan and binds its weights (mmap).  Refuses plans whose weight
 * files changed since compile (size, header, and unless
 * no_verify_weights the bytes of every tensor it reads), with a message
 * naming the file and the first tensor that differs. */
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

/* What the plan is and where it runs (diffrun --info). */
typedef struct {
  const char *target;  /* "cpu" or "cuda" */
  const char *compute; /* precision of the matrix work: "f32", "bf16", "f16" */
  const char *archs;   /* cuda: the images' archs, "sm_80, sm_90, compute_90"; cpu: the
                        * kernels' triple and cpu ("" without kernels) */
  int kernels;         /* compiled kernels in the plan (cuda: distinct kernels) */
  uint64_t flops;      /* arithmetic of one run */
  const char *backend; /* what drt_run uses; "" when loaded with inspect */
  const char *device;  /* cuda backend: "NVIDIA H200 (compute 9.0), cubin sm_90"; else "" */
  /* cuda backend: "tiles were chosen for 132 SMs; device 0 (NAME) has 108: ..." when the
   * plan's SM count (diffc --cuda-sm-count) is not the device's; else "" */
  const char *warning;
  /* The weight content check at load: bytes hashed and the seconds it took
   * (0 and 0 when skipped: drt_options.no_verify_weights, or inspect). */
  uint64_t verified_bytes;
  double verify_seconds;
  /* "none", "Ed25519 key 0123456789abcdef, verified against --trusted-keys
   * FILE", or "Ed25519 key ... (not verified: no --trusted-keys)". */
  const char *signature;
  /* diffc --memory-budget: "2.0 GiB: chose --offload ... (device peak,
   * predicted time, cost model)"; "" for a plan compiled without one. */
  const char *memory_budget;
} drt_plan_info;
const drt_plan_info *drt_info(const drt_plan *p);

/* Where the plan's memory goes (diffc --memory-report, diffc inspect,
 * diffrun --info): per device the peak and what is live at it, by kind
 * and by module; offloaded weights and where they wait; bytes copied per
 * run, per phase and per image; the workspace outside the arena.  json:
 * 0 for text in human units, 1 for JSON in bytes (docs/memory-report.md).
 * steps_per_image: a pipeline's default denoising steps (0: per step
 * only).  Works on a plan loaded with inspect.  *out is NUL-terminated;
 * free() it. */
dc_status *drt_memory_report(const drt_plan *p, int json, int steps_per_image, char **out);

/* Per-step timing: when on, every run adds each step's time to a per-step
 * total that drt_profile reads: wall time on the CPU (a clock read per
 * step), device time on CUDA (an event after each launch). */
dc_status *drt_set_profiling(drt_plan *p, int on);
typedef struct {
  int step;
  const char *op, *scope; /* scope may be "" */
  const char *cost_class; /* the cost model's kernel class (ir.h: dc_cost_class_name): "conv3x3", ..., "copy" */
  double seconds;         /* summed over the runs since profiling was turned on */
} drt_step_time;
/* Fills up to max entries, slowest first; returns how many. */
int drt_profile(const drt_plan *p, drt_step_time *out, int max);
/* Step `step`'s time (schedule index, as drt_step_time.step), summed over
 * the runs since profiling was turned on; 0 when profiling is off, for a
 * step out of range, and for inputs and weights (no code runs for them). */
double drt_step_seconds(const drt_plan *p, int step);

/* The plan's memory timeline (diffrun --memory-timeline): an SVG picture of
 * the device bytes per step by kind that the plan predicts (ir/ir.h,
 * dc_memory_timeline_svg), written to path (a temporary name, then
 * renamed).  `measured`, when not NULL, is a series over the plan's steps
 * and devices recorded from a run (struct dc_mem_series of ir/ir.h), drawn
 * over the prediction as a line.  Needs no run: a plan loaded with inspect
 * draws too. */
struct dc_mem_series;
dc_status *drt_memory_timeline(const drt_plan *p, const struct dc_mem_series *measured, const char *path);

/* Run trace (diffrun --trace): when on, every run records one event per
 * kernel step and per copy, with one clock for every stream (seconds since
 * the first traced run began; CUDA: device events placed on the host's
 * clock at the run's start).  Turning it on clears what was recorded; runs
 * and phase runs then append, so a pipeline's generation is one trace.
 * Slots are reserved before a run starts (one per step of the run), so a
 * kernel's recording is two clock reads and a store; off, a branch per step. */
dc_status *drt_set_tracing(drt_plan *p, int on);
typedef enum {
  DRT_EVENT_NONE,     /* an unused slot (never returned by drt_trace_event_at) */
  DRT_EVENT_KERNEL,   /* a kernel step (a constant placing its bytes too), compute stream */
  DRT_EVENT_UPLOAD,   /* an offloaded weight copied host -> device, copy stream */
  DRT_EVENT_TRANSFER, /* a value copied from another device, the destination's compute stream */
  DRT_EVENT_INPUTS,   /* the run's inputs host -> device on one device, copy stream */
  DRT_EVENT_OUTPUTS,  /* the run's outputs device -> host from one device, copy stream */
  DRT_EVENT_PHASE     /* one run (of a phase, or of the whole plan), enclosing its steps */
} drt_event_kind;
enum { DRT_STREAM_COMPUTE, DRT_STREAM_COPY };
typedef struct {
  drt_event_kind kind;
  int32_t step;        /* the node; PHASE: the phase index (-1: the whole plan); INPUTS/OUTPUTS: -1 */
  int32_t run;         /* which run since tracing began (0, 1, ...): a step's events and its run's PHASE share it */
  int32_t iteration;   /* PHASE: how many runs of the same phase came before it */
  int device, stream;  /* stream: DRT_STREAM_COMPUTE or DRT_STREAM_COPY */
  double start, end;   /* seconds since the first traced run began */
  uint64_t bytes;      /* copies: bytes moved; kernels: bytes read and written (dc_node_traffic_bytes) */
  uint64_t flops;      /* kernels: dc_node_flops */
  uint64_t arena_top;  /* the device arena's high-water mark once the event's bytes were placed, as the
                        * backend measured it (CUDA: the value's planned end) */
} drt_trace_event;
int drt_trace_count(const drt_plan *p);
const drt_trace_event *drt_trace_event_at(const drt_plan *p, int i); /* NULL out of range */
/* The recorded events as Chrome trace-event JSON (Perfetto, chrome://tracing):
 * a process per device, a thread per stream; written to a temporary name
 * and renamed.  An error when nothing was recorded. */
dc_status *drt_trace_write(const drt_plan *p, const char *path);
/* The device memory of the traced runs as they observed it, in ir.h's
 * "memory by kind" series (same steps, same kinds as dc_mem_series_compute):
 * each value counted from when its bytes were written until its last
 * reader finished, sampled when each step finished on its compute stream,
 * and the arena's high-water mark the backend measured.  A step run more
 * than once (a loop phase, --repeat) shows the most any of its runs held.
 * An error when nothing was recorded.  Free with dc_mem_series_deinit. */
struct dc_mem_series;
dc_status *drt_memory_measured(const drt_plan *p, struct dc_mem_series *out);

/* Copies numel floats for input `name`; numel must match the plan, and the
 * input must be f32 (an integer input is refused, naming its dtype). */
dc_status *drt_set_input(drt_plan *p, const char *name, const float *data, size_t numel);
/* Copies numel values of dtype ("f32", "i32", "i64": the input's own, as
 * drt_input_info says; another is refused, naming both) for input `name`.
 * Token ids that index an embedding table must lie in [0, its rows): an id
 * outside is refused, naming the input, its index and the bound. */
dc_status *drt_set_input_data(drt_plan *p, const char *name, const char *dtype, const void *data, size_t numel);
/* Fills every input with seeded random values: f32 inputs normal,
 * timesteps uniform integers in [0, 1000), integer inputs (token ids)
 * uniform integers in [0, DRT_RANDOM_INT_END), ids every tokenizer of the
 * supported models knows (below a smaller table's rows, when the ids index
 * one). */
#define DRT_RANDOM_INT_END 1000
void drt_set_random_inputs(drt_plan *p, uint64_t seed);
dc_status *drt_run(drt_plan *p, drt_stats *stats);
/* Phases (a pipeline plan: text encoding, the denoising loop's bodies,
 * decode; see docs/ARCHITECTURE.md): 0 for a plan without.  drt_run runs
 * every phase once in order; drt_run_phase runs one: the inputs that belong
 * to it are copied in, its steps run, the outputs that belong to it are
 * copied out (the others keep their last values).  The host runs them in
 * the order the plan's pipeline says, a loop phase as often as it needs. */
int drt_phase_count(const drt_plan *p);
/* A pipeline plan's description (JSON: class, sizes, scaling factor) and
 * files (tokenizer/..., scheduler/...): pipeline/generate.c runs it.  NULL
 * for a plan of one model / past the last file. */
const char *drt_pipeline_json(const drt_plan *p);
const char *drt_pipeline_file(const drt_plan *p, int i, const void **data, size_t *size);
const char *drt_phase_name(const drt_plan *p, int i); /* NULL out of range */
int drt_phase_find(const drt_plan *p, const char *name); /* -1 when absent */
dc_status *drt_run_phase(drt_plan *p, int phase, drt_stats *stats);
/* Note i (from 0) of what the backend chose that a user may want to know
 * (diffrun -v prints them): on CUDA "CUDA graphs: captured N launches into
 * a CUDA graph in X ms for ...", or why runs enqueue their steps on streams
 * instead.  Each note once, in the order they arose; NULL past the last
 * (and on backends that have none). */
const char *drt_note(const drt_plan *p, int i);

/* Valid after a successful drt_run until the next run or destroy. */
const float *drt_output(const drt_plan *p, const char *name, size_t *numel);

/* ---- calibration (diffrun --calibrate; runtime/calibrate.c) ----
 * Measures this machine with a loaded plan and writes the calibration
 * profile diffc's cost model reads (docs/ARCHITECTURE.md, "The cost
 * model"): each kernel class's achieved rate from timed runs of the plan
 * (random inputs, one warm-up, then `runs` runs with per-step timing: a
 * pipeline plan's phases each once per run), the fixed cost per kernel
 * step, and the copy bandwidths measured directly (host to device, disk
 * reads as on-demand uploads do them, device to device). */
typedef struct {
  const char *output;      /* the profile's path; NULL: calibration-<target>.json in diffc's cache root
                            * ($DIFFC_CACHE_DIR, $XDG_CACHE_HOME/diffc or ~/.cache/diffc), created */
  int runs;                /* timed runs after the warm-up (0: 3) */
  uint64_t copy_bytes;     /* bytes per copy measurement and of the disk file (0: 256 MiB); tests pass less */
  const char *scratch_dir; /* folder of the disk measurement's temporary file (NULL: the cache root, else
                            * $TMPDIR, else /tmp) */
} drt_calibrate_options;

/* One kernel class's figures, per run. */
typedef struct {
  const char *name; /* "conv3x3", "conv", "linear", "attention", "memory" (ir.h, dc_cost_class) */
  int steps;
  double seconds;   /* the class's steps' summed time */
  double work;      /* flops (the FLOP classes) or bytes moved (memory) */
  double rate;      /* GFLOP/s, or GB/s for memory: work / (seconds - steps * overhead) */
} drt_class_rate;

typedef struct {
  char path[4096];   /* where the profile was written */
  char device[256];  /* "Intel(R) Xeon(R) ... (avx512f avx2 fma)", or the GPU's name */
  const char *target, *backend;
  int threads, runs;
  double run_seconds; /* one timed run's mean time (cuda: the kernels' device time) */
  double overhead_us; /* fixed cost per kernel step */
  char overhead_note[160]; /* why it is not the plan's own (no step small enough to see it); "" when it is */
  int nclasses;       /* the classes the plan has, in dc_cost_class order */
  drt_class_rate classes[5];
  double h2d_gbps, disk_gbps, d2d_gbps;
  int h2d_measured, disk_measured, d2d_measured; /* 0: a built-in default (the note says why) */
  char copy_note[256]; /* why a bandwidth was not measured; "" when all were */
} drt_calibration;

/* Runs the measurements and writes the profile atomically (temporary name,
 * then rename); out says what was measured and where it went.  The plan's
 * outputs and inputs are overwritten; profiling is left off. */
dc_status *drt_calibrate(drt_plan *p, const drt_calibrate_options *opt, drt_calibration *out);

#ifdef __cplusplus
}
#endif
#endif
