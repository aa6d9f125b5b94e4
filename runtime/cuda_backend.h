/* cuda_backend.h — runs a CUDA plan (target DC_TARGET_CUDA) on one GPU, or
 * on several when diffc --device-map placed its modules on several (plan
 * device d on CUDA device drt_options.device + d), through a dc_cu_api
 * table (runtime/cuda_driver.h): the driver, or a fake in tests.
 * The runtime's session (runtime.c) owns the plan, the weight files and
 * the public API and reaches this backend through its backend table
 * (cuda_backend_iface.c); this backend owns everything on the devices.  Per device:
 *   - its primary context;
 *   - one module per kernel its steps run, loaded in that context, from the
 *     cubin built for the device's architecture (same major, equal or lower
 *     minor) or else the PTX JIT;
 *   - ONE arena of the memory plan's size for that device (every
 *     activation at its device's arena + node offset, as on the CPU) and
 *     ONE block holding the weights resident there (each at a 256-byte
 *     aligned offset of its own), both allocated once at load, after
 *     checking every device has that much free;
 *   - two non-blocking streams: copy (inputs in, weights at load, uploads,
 *     outputs out) and compute (the launches and the transfers into the
 *     device), ordered by events.
 * Offloaded weights (read only by OP_UPLOAD steps) are copied into their
 * device's arena by their upload steps on its copy stream, from one pinned
 * host block filled at load (module meta host_memory "pinned", the
 * default) or, "on-demand", read from their files at each upload one chunk
 * at a time into two small pinned bounce chunks (a chunk is refilled only
 * after the event behind its previous copy).  An OP_TRANSFER step is a
 * peer copy from the source device's arena into its own device's, ordered
 * by events both ways (cuda_backend_run.c says how).  Pinned host buffers
 * hold inputs and outputs; weights go up through two pinned staging
 * chunks, freed once the upload is done.  With options.graphs, a run's
 * steps are captured into a CUDA graph on its first run and replayed after
 * (cuda_graphs.c says what is captured and when streams are kept).  GEMM
 * steps that cuBLASLt can compute as the plan defines them run as cuBLASLt
 * matmuls instead of their kernels when the library loads (cuda_gemm_lt.c: the rule, the algorithms
 * chosen at load, one workspace per device outside the arena). */
#ifndef DC_CUDA_BACKEND_H
#define DC_CUDA_BACKEND_H

#include "cuda_driver.h"
#include "diffrun.h"
#include "plan/plan_format.h"

typedef struct dc_cuda_backend dc_cuda_backend;

typedef struct {
  int device;              /* CUDA device ordinal of the plan's device 0 (device d runs on device + d) */
  uint64_t staging_bytes;  /* weight upload chunk (two pinned buffers of it); 0 = 64 MiB */
  /* When set, every f32 step's output is copied back after its launch (the
   * streams synchronise each step: slow, for debugging) and passed here. */
  dc_status *(*check_step)(void *ctx, int32_t step, const float *values);
  void *check_ctx;
  const char *options_json; /* the plan's OPTS: the out-of-memory message names the diffc options that fit */
  /* host_memory on-demand: reads len bytes of weight w (m->weights order)
   * from byte `at` of it into dst (the runtime: pread from the weight file,
   * host_weights.h); required then.  bounce_bytes: each of the two pinned
   * chunks (0 = 8 MiB; at most the largest offloaded weight). */
  dc_status *(*read_weight)(void *ctx, int w, uint64_t at, void *dst, uint64_t len);
  void *read_ctx;
  uint64_t bounce_bytes;
  /* 1: runs use CUDA graphs where they may (cuda_graphs.c: one-GPU plans,
   * no step timing, trace or check_step, no on-demand uploads): each step
   * range is captured on its first run and replayed by later ones.  0 (the
   * zeroed default here; the runtime turns it on): every run enqueues its
   * steps on the streams. */
  int graphs;
  /* 1: every GEMM step runs its NVRTC kernel, never cuBLASLt (diffrun
   * --no-cublaslt; DIFFC_CUBLASLT=0 in the environment does the same). */
  int no_cublaslt;
} dc_cuda_backend_options;

/* One device of the plan. */
typedef struct {
  int ordinal;                  /* its CUDA device ordinal */
  char name[256];
  int cc_major, cc_minor;
  int sm_count;                 /* its streaming multiprocessors */
  uint64_t arena_bytes;         /* its activation arena: up to the highest byte a value placed on it
                                 * occupies (the memory plan's size for it, so also its peak) */
  uint64_t weight_block_bytes;  /* the weights resident on it, aligned, in one allocation */
  size_t free_bytes, total_bytes; /* cuMemGetInfo before allocating */
} dc_cuda_device_info;

typedef struct {
  /* The plan's first device (device_name .. device_total_bytes); byte
   * counts are of all devices together, arena_peak_bytes of the device
   * whose peak is highest. */
  char device_name[256];
  int cc_major, cc_minor;
  char image[64];               /* what runs: "cubin sm_90", "PTX compute_90 (JIT)" (of the first kernel) */
  int jit_kernels;              /* modules loaded from PTX (on every device) */
  uint64_t arena_bytes;         /* the activation arenas (the memory plan's sizes) */
  uint64_t arena_peak_bytes;    /* the highest arena byte any value occupies, on the fullest device */
  uint64_t weight_block_bytes;  /* the resident weights, aligned, one allocation per device */
  uint64_t host_weight_bytes;   /* offloaded weights (read only by uploads): the pinned host block,
                                 * or on-demand their bytes in the files */
  int on_demand;                /* host_memory on-demand: uploads read the files */
  uint64_t bounce_bytes;        /* on-demand: each of the two pinned bounce chunks */
  uint64_t device_bytes;        /* everything allocated with cuMemAlloc: arenas + weight blocks
                                 * + cuBLASLt workspaces */
  uint64_t pinned_bytes;        /* pinned host memory kept: inputs, outputs, offloaded weights or
                                 * the two bounce chunks (+ the check buffer) */
  uint64_t staging_bytes;       /* pinned staging used while the weights were uploaded */
  size_t device_free_bytes, device_total_bytes; /* cuMemGetInfo before allocating */
  /* Several devices (diffc --device-map): each one's own numbers. */
  int ndevices;
  dc_cuda_device_info dev[DC_MAX_DEVICES];
  int peer_pairs;               /* (source, destination) device pairs some transfer copies between */
  int peer_direct;              /* of them, those with direct peer access (else the driver stages the
                                 * copy through host memory) */
  uint64_t transferred_bytes;   /* copied between devices by the last run */
  int graphs_captured;          /* step ranges captured into CUDA graphs */
  uint64_t graph_launches;      /* runs that replayed a graph */
  int last_run_graph;           /* the last run replayed one */
  /* GEMMs through cuBLASLt (runtime/cuda_gemm_lt.c): the steps eligible by
   * its rule, those that run on it, those it had no algorithm for, the
   * candidates the heuristic offered (timed when more than one), the
   * workspaces (one per device, outside the arena, in device_bytes too),
   * why it is not used ("" when it is) and what the algorithm cache did. */
  int lt_eligible, lt_steps, lt_no_algorithm, lt_candidates;
  int lt_problems;              /* distinct GEMM problems the heuristic was asked about */
  uint64_t lt_workspace_bytes;
  char lt_note[512];
  char lt_cache[600];
} dc_cuda_backend_info;

/* NULL when step s of m runs on cuBLASLt where it is available; else why
 * not ("a padded conv2d", "an activation cuBLASLt has no epilogue for", ...):
 * the one rule, stated at the top of runtime/cuda_gemm_lt.c. */
const char *dc_cuda_lt_why_not(const dc_module *m, int32_t s);

/* Sets up everything; weight_data[w] points at weight w's bytes (m->weights
 * order).  Fails before allocating anything on the device when the plan does
 * not fit, and before loading modules when no image suits the device.
 * `path` names the plan in messages.  The backend keeps pointers to m and k,
 * which must outlive it; the api table is copied.  It is the four phases
 * below in order, destroying the backend when one fails. */
dc_status *dc_cuda_backend_create(const char *path, const dc_module *m, const dc_plan_cuda *k,
                                  const void *const *weight_data, const dc_cu_api *api,
                                  const dc_cuda_backend_options *o, dc_cuda_backend **out);
void dc_cuda_backend_destroy(dc_cuda_backend *b);

/* The phases of create, for a caller that interleaves its own work (the
 * runtime's backend table, cuda_backend_iface.c).  open: checks the plan,
 * lays out memory, opens the devices (contexts, images chosen, free memory
 * checked, streams and events); on failure nothing is left (*out NULL).
 * After open, a failing phase leaves the backend for dc_cuda_backend_destroy.
 * allocate: the arenas and weight blocks, the pinned input/output buffers.
 * upload_weights: the resident weights onto their devices, the offloaded
 * ones into the pinned block (or, on-demand, the bounce chunks).
 * load_kernels: the kernels' modules into each device's context. */
dc_status *dc_cuda_backend_open(const char *path, const dc_module *m, const dc_plan_cuda *k, const dc_cu_api *api,
                                const dc_cuda_backend_options *o, dc_cuda_backend **out);
dc_status *dc_cuda_backend_allocate(dc_cuda_backend *b);
dc_status *dc_cuda_backend_upload_weights(dc_cuda_backend *b, const void *const *weight_data);
dc_status *dc_cuda_backend_load_kernels(dc_cuda_backend *b);

/* Pinned host buffers of input / output i (m->inputs, m->outputs order),
 * f32, numel of the value.  Inputs are read by the next run; outputs hold
 * the last run's results. */
float *dc_cuda_backend_input(dc_cuda_backend *b, int i);
float *dc_cuda_backend_output(dc_cuda_backend *b, int i);

/* One run: inputs up on their device's copy stream, its compute stream
 * waits for them, every step in schedule order on its device's streams,
 * outputs down once their device is done, then synchronise.
 * kernel_seconds: device time from the first launch to the end of the last
 * (events; with several devices, the longest device's).  step_seconds (NULL
 * or nnodes entries): each launch's and transfer's device time is ADDED to
 * it.  A failing driver call is an error naming the step. */
dc_status *dc_cuda_backend_run(dc_cuda_backend *b, double *step_seconds, double *kernel_seconds);

/* The same run step by step, for a caller that walks the schedule itself:
 * begin (inputs up, step timers when step_seconds is given), step for every
 * node in schedule order (leaves enqueue nothing), end.  end takes the
 * status the walk ended with (NULL: every step enqueued): on success it
 * copies the outputs down, waits and reads the times; on failure it waits
 * for every stream and returns st.  dc_cuda_backend_run is exactly these. */
/* Steps [first, end) (all, or one phase): their inputs in, their outputs out at the end. */
/* trace: NULL, or the run's event slots (runtime/backend.h): kernels,
 * transfers, uploads, inputs and outputs timed by events (made on the first
 * traced run) and placed on dc_now_seconds' clock at the run's start. */
dc_status *dc_cuda_backend_begin(dc_cuda_backend *b, double *step_seconds, drt_trace_event *trace, int32_t first,
                                 int32_t end);
dc_status *dc_cuda_backend_step(dc_cuda_backend *b, int32_t s);
dc_status *dc_cuda_backend_end(dc_cuda_backend *b, dc_status *st, double *kernel_seconds);

const dc_cuda_backend_info *dc_cuda_backend_get_info(const dc_cuda_backend *b);

/* Note i (from 0) of what the backend chose that a user may want to know:
 * a CUDA graph captured ("captured N launches into a CUDA graph in X ms
 * for ..."), or why runs use streams; each said once; NULL past the last. */
const char *dc_cuda_backend_note(const dc_cuda_backend *b, int i);

/* Which image of k runs on a device of compute capability major.minor: a
 * cubin "sm_XY" when X == major and Y <= minor (the highest such; "sm_XYa"
 * only when equal), else PTX "compute_XY" when XY <= the device's (the
 * highest such), else -1. */
int dc_cuda_pick_image(const dc_plan_cuda_kernel *k, int major, int minor);

/* The distinct image archs of a plan, "sm_80, sm_90, compute_90", in
 * buf; returns buf. */
const char *dc_plan_cuda_archs(const dc_plan_cuda *k, char *buf, size_t cap);

#endif
