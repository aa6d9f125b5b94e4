/* cuda_backend_impl.h — the CUDA backend's state, shared by its files:
 * cuda_backend.c sets it up and tears it down (devices, streams, events),
 * cuda_images.c picks and loads the kernels' images, cuda_memory.c lays out
 * and fills device and pinned memory, cuda_backend_run.c enqueues a run on
 * it.  Private to those files. */
#ifndef DC_CUDA_BACKEND_IMPL_H
#define DC_CUDA_BACKEND_IMPL_H

#include "cuda_backend.h"

#define NOT_HERE UINT64_MAX         /* a weight's offset in a block that does not hold it */
#define NPARAMS (DC_MAX_INPUTS + 1) /* launch parameters: out, then the inputs */

typedef struct {
  int used;      /* a step on this device runs the kernel: loaded here */
  int image;     /* which of its images this device loads */
  dc_cu_module module;
  dc_cu_function fn;
} loaded_kernel;

/* One GPU of the plan: plan device d runs on CUDA ordinal opt.device + d,
 * in its primary context, with everything it touches made there. */
typedef struct {
  int ordinal;
  dc_cu_device dev;
  dc_cu_context ctx;
  int ctx_retained;
  int optin_smem;                      /* the largest dynamic shared memory a kernel may opt in to */
  dc_cu_stream compute, copy;
  dc_cu_event inputs_ready, begin, end;
  /* tracing (made on the first traced run): the copy stream's start, and
   * around the outputs' copies */
  dc_cu_event trace_origin, outputs_began, outputs_done;
  double origin_seconds;               /* the host clock when trace_origin was recorded */
  dc_cu_event bounce_copied[2];        /* on-demand: behind this device's last copy out of each chunk */
  dc_cu_event fork, join;              /* CUDA graph capture: the copy stream pulled in, joined back */
  loaded_kernel *kern;                 /* per kernel of the plan */
  dc_cu_deviceptr arena, weights;
  /* Transfers out of this device (their sources lie in its arena) enqueued
   * since its last step: its compute stream waits for them before the
   * next one, which may overwrite those bytes. */
  int32_t *pending;
  int npending;
} cuda_device;

/* One step range's CUDA graph (cuda_graphs.c); exec NULL: its capture
 * failed, the range runs on streams. */
typedef struct {
  int32_t first, end;
  dc_cu_graph graph;
  dc_cu_graph_exec exec;
} cuda_graph;

struct dc_cuda_backend {
  char *path;
  const dc_module *m;
  const dc_plan_cuda *k;
  dc_cu_api api;
  dc_cuda_backend_options opt;
  dc_cuda_backend_info info;
  int ndevices;
  cuda_device dev[DC_MAX_DEVICES];
  int current;                   /* the device whose context is current on this thread, -1: unknown */
  dc_cu_event *step_done;        /* per node (launches, transfers), created on the first profiled run */
  dc_cu_event *copy_may_start, *copied; /* per OP_UPLOAD node: compute before it done; its copy done */
  dc_cu_event *source_ready, *moved;    /* per OP_TRANSFER node: its source computed; the copy done */
  dc_cu_event *copy_began, *copy_ended; /* tracing, per OP_UPLOAD node: timed around its copy */
  int *weight_device;            /* per weight: the device whose block (or uploads) hold it */
  uint64_t *weight_offset;       /* per weight, in its device's block, or NOT_HERE when offloaded */
  uint64_t *host_offset;         /* per weight, in host_weights, or NOT_HERE when resident */
  uint8_t *host_weights;         /* pinned: the offloaded weights (host_memory pinned) */
  uint64_t largest_upload;       /* the largest offloaded weight */
  /* host_memory on-demand: uploads read their weight's file chunk by chunk
   * into these, alternating; a chunk is refilled only after the event
   * recorded behind its last copy (on that copy's device) has completed. */
  void *bounce[2];
  int bounce_device[2];          /* the device whose copy last read each chunk, -1: none in flight */
  int next_bounce;
  dc_cu_deviceptr *value;        /* per node: where its value lives on its device */
  dc_cu_deviceptr *args;         /* per node, NPARAMS: out, then the inputs */
  void **params;                 /* per node, NPARAMS: &args[...] as cuLaunchKernel wants */
  float **host_in, **host_out;   /* pinned (portable: every device's copies use them) */
  float *check_buf;              /* pinned, the largest f32 step output (check_step only) */
  /* The run in progress (dc_cuda_backend_begin .. _end). */
  double *step_seconds;          /* NULL, or per node: device times are added at the end */
  drt_trace_event *trace;        /* NULL, or the run's event slots, filled at the end */
  int32_t run_first, run_end;    /* the run's steps */
  int started;                   /* work was enqueued: a failed run waits for every stream */
  int graph_run;                 /* the run goes through its range's CUDA graph: steps wait for end */
  int32_t next_step;             /* graph_run: the lowest step the caller may name next */
  cuda_graph *graphs;            /* per range run so far (cuda_graphs.c) */
  int ngraphs;
  char **notes;                  /* dc_cuda_backend_note */
  int nnotes;
  struct dc_cuda_lt *lt;         /* the GEMMs on cuBLASLt (cuda_gemm_lt.c); NULL: none */
};


/* Makes device d's context current (a no-op when it is already). */
dc_status *dc_cuda_use_device(dc_cuda_backend *b, int d);
/* "step 12 (conv2d in down_blocks.0.resnets.0)" */
const char *dc_cuda_step_name(const dc_module *m, int32_t s, char *buf, size_t cap);

/* cuda_backend_run.c: step s on its device's streams now (the stream path),
 * errors naming the step. */
dc_status *dc_cuda_enqueue_step(dc_cuda_backend *b, int32_t s);

/* cuda_graphs.c: whether the run now beginning uses its range's graph (a
 * note says why not); at end, that graph launched (captured first when the
 * range has none yet) or, when its capture failed, the steps on streams;
 * the graphs and notes freed at destroy (device 0's context current). */
int dc_cuda_graph_chosen(dc_cuda_backend *b);
dc_status *dc_cuda_graph_run(dc_cuda_backend *b);
void dc_cuda_graphs_destroy(dc_cuda_backend *b);

/* cuda_images.c: the image each kernel device d runs loads there, checked
 * against its compute capability and shared memory (before any allocation). */
dc_status *dc_cuda_choose_images(dc_cuda_backend *b, int d);

/* cuda_memory.c: every weight's and value's place, before any driver call;
 * then whether device d has room for its arena and weight block. */
dc_status *dc_cuda_lay_out(dc_cuda_backend *b);
dc_status *dc_cuda_check_free_memory(dc_cuda_backend *b, int d);

/* cuda_gemm_lt.c: the GEMM steps cuBLASLt runs, set up after the kernels
 * are loaded (never an error for cuBLASLt's sake: info.lt_note says why it
 * is not used), whether step s is one, its matmul on its device's compute
 * stream (the caller made the context current), and the teardown. */
dc_status *dc_cuda_lt_setup(dc_cuda_backend *b);
int dc_cuda_lt_runs(const dc_cuda_backend *b, int32_t s);
dc_status *dc_cuda_lt_launch(dc_cuda_backend *b, int32_t s);
void dc_cuda_lt_destroy(dc_cuda_backend *b);

#endif
