/* compile.h — the compiler driver: model folder → frontend → passes → plan
 * file.  diffc is a CLI over this; tests call it directly. */
#ifndef DC_COMPILE_H
#define DC_COMPILE_H

#include "driver/pipeline_build.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "support/progress.h"

#define DIFFC_VERSION "0.1.0"

typedef struct {
  const char *model;      /* model or pipeline folder */
  const char *component;  /* pipeline component, or NULL */
  const char *variant;    /* weights variant, or NULL */
  const char *entry;      /* NULL = the model's default */
  const dc_input_shape *shapes;
  int nshapes;
  const char *dump_after; /* pass name, "all", or NULL */
  const char *dump_ir;    /* path for the final IR text ("-" = stdout), or NULL */
  int verbose;
  const char *debug;      /* comma-separated channels tracing decisions to stderr ("memplan"), or NULL */
  const char *cpu;        /* kernels for "native" (this machine; the default when NULL), "generic" x86-64, or a
                           * named target (x86-64-v3, haswell, ...: dc_cpu_target_named) */
  const char *target;     /* "cpu" (the default when NULL) or "cuda" */
  const char *cuda_arch;  /* --target cuda: "sm_80,sm_90,compute_90" style list; NULL = that default */
  int cuda_sm_count;      /* --target cuda: the SMs the GEMM tiles are chosen for; 0 = GPU 0's when a
                           * CUDA driver and device are present, else 132 (Hopper) */
  const char *compute;    /* precision of tensor-core work: "f32" (the default when NULL), "bf16", "f16";
                           * the cpu target takes f32 only.  On cuda, bf16/f16 also stores activations
                           * in it (pass activation-dtype) and, unless storage_dtype_given, every float
                           * weight (memory.storage_all) */
  int storage_dtype_given;  /* --storage-dtype was given (its value is memory.storage) */
  const char *kernel_cache; /* the kernel cache directory (codegen/kernel_cache.h); NULL = the default */
  int no_kernel_cache;      /* compile every kernel, read and write no cache */
  const char *conv_algo;    /* --target cpu: 3×3 conv2d by "auto" (the default when NULL: Winograd where it
                             * pays), "direct" (never Winograd) or "winograd" (wherever it is correct) */
  /* memory techniques */
  dc_memory_options memory; /* --offload, --group-level, --blocks-per-group, --prefetch */
  const char *offload_dir;  /* --offload-dir: the offload groups' weights as files there */
  int vae_slicing, vae_tiling; /* --vae-slicing, --vae-tiling (classes whose facts allow them) */
  int vae_no_frame_batching;   /* --no-vae-frame-batching (a video VAE: the coder over all frames at once) */
  /* --sign: sign the plan with this Ed25519 secret key (64 bytes, from
   * dc_secret_key_load), or NULL for an unsigned plan */
  const uint8_t *sign_secret;
  int64_t tile_size;           /* --tile-size PX (0: the config's sample_size) */
  double tile_overlap;         /* --tile-overlap F (0: 0.25; AutoencoderKLCogVideoX: 1/6 rows, 1/5 columns) */
  /* a pipeline folder (model_index.json, no --component): */
  int64_t height, width;       /* --height, --width (0: the pipeline's default) */
  int64_t batch;               /* --batch: images per prompt (0: 1) */
  int clip_skip;               /* --clip-skip */
  int max_sequence_length;     /* --max-sequence-length (Flux, SD3, CogVideoX: T5's tokens; 0 = the pipeline's default) */
  int64_t num_frames;          /* --num-frames (CogVideoX: the video's frames; 0 = the transformer's sample_frames) */
  int no_hoist;                /* --no-hoist (passes/hoist.c) */
  const char *config_dir;      /* --config DIR: a single-file checkpoint's configs, tokenizers, scheduler */
  /* Text encoders: --clip-hidden-state K adds the output hidden_state =
   * hidden_states[K] (dc_build_options.clip_hidden_index), --clip-final-norm
   * puts it through final_layer_norm.  clip_hidden_state says K was given
   * (0 is an index: the embeddings). */
  int clip_hidden_state, clip_hidden_index, clip_final_norm;
  /* Compile progress (support/progress.h), or NULL: the stages as they
   * start ("building graph", "passes", "kernels" with its count and cache
   * hits, "writing weights" with bytes, "writing plan"), and a pause event
   * before the compiler prints a line of its own.  Called from the kernel
   * pool's threads too, one call at a time. */
  dc_progress_fn progress;
  void *progress_ctx;
  /* --memory-timeline: write the plan's predicted device bytes per step as
   * an SVG picture here (ir.h, dc_memory_timeline_svg), or NULL */
  const char *memory_timeline;
  /* --memory-budget: search the memory options (passes/budget.c) for the
   * fastest plan whose device bytes fit this many per device (0: off);
   * --allow-cast: storage dtypes it may try; --calibration: the cost
   * model's profile (NULL: calibration-<target>.json in the cache root when
   * present, else the built-in defaults). */
  uint64_t memory_budget;
  dc_dtype allow_cast[4];
  int nallow_cast;
  const char *calibration;
} dc_compile_options;

/* A pipeline being compiled: its source and what the build found. */
typedef struct {
  int open;
  dc_pipeline_source src;
  dc_pipeline_info info;
} dc_compile_pipeline;
void dc_compile_pipeline_close(dc_compile_pipeline *pl);
/* Whether the options name a whole pipeline (a folder with model_index.json
 * and no --component). */
int dc_compile_is_pipeline(const dc_compile_options *o);

typedef struct {
  int steps;
  uint64_t weight_bytes, peak_activation_bytes; /* weight_bytes: resident on the device */
  uint64_t offloaded_weight_bytes;              /* copied in by uploads (--offload, --device-map cpu/disk) */
  double seconds;
  /* --target cuda: distinct kernels, compiles (kernels x archs), how many
   * of those came from the kernel cache, and how many had NVRTC warnings */
  int cuda_kernels, cuda_compiles, cuda_cached, cuda_warnings;
  int cast_steps; /* cast nodes in the schedule: conversions every run does (0 with --compute-dtype
                   * bf16 on cuda when every weight is stored in it) */
} dc_compile_report;

/* Reads a --device-map JSON file: {"module.path": 0 | "cpu" | "disk" |
 * "cuda:N", ...} ("" = the whole model).  *out is one allocation (entries
 * and their strings) for dc_free. */
dc_status *dc_load_device_map(const char *path, dc_map_entry **out, int *n);

/* Writes the plan to plan_path atomically; on error nothing is left there.
 * With --storage-dtype the converted weights go to PLAN.weights.safetensors
 * (also atomically, before the plan). */
dc_status *dc_compile(const dc_compile_options *o, const char *plan_path, dc_compile_report *rep);

/* GPU 0's multiprocessor count through the CUDA driver, or 0 when there is
 * no driver or GPU (the default of --cuda-sm-count). */
int dc_gpu0_sm_count(void);

/* The front half of dc_compile: opens the folder into *f (a pipeline
 * folder's components are closed again: the module holds nothing of
 * them), builds the graph and runs the pass pipeline into *m.  The caller
 * closes f and destroys m, also after an error (tests compile the module's
 * kernels themselves). */
dc_status *dc_compile_module(const dc_compile_options *o, dc_folder *f, dc_module **m);

/* The graph as the frontend builds it (a pipeline's or one model's), before
 * any pass: the budget search builds one per VAE option.  The caller closes
 * f and pl and destroys m, also after an error. */
dc_status *dc_compile_build_frontend(const dc_compile_options *o, dc_folder *f, dc_compile_pipeline *pl,
                                     dc_module **m);
/* driver/budget_choose.c: --memory-budget.  Refuses the options the search
 * chooses, searches (passes/budget.c), prints the choice and the runners-up
 * on stderr, writes the summary JSON (the plan's OPTS "budget") and sets
 * *eff to o with the chosen memory and VAE options.  keep (may be NULL)
 * receives the search's candidates, also when nothing fits (for
 * dc_budget_result_free). */
dc_status *dc_compile_budget(const dc_compile_options *o, dc_compile_options *eff, dc_buf *json, dc_budget_result *keep);
/* After the real compile: every device of m within its budget (the search
 * ran the same passes, so this failing is a bug, said as one). */
dc_status *dc_compile_budget_check(const dc_compile_options *o, const dc_module *m);
#endif
