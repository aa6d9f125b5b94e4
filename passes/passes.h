/* passes.h — the pass interface and the pipeline that orders the passes.
 *
 * Every pass has one signature, a name (for --dump-after) and a contract
 * comment at the top of its file: what it requires, what it guarantees, what
 * it invalidates.  The pipeline runs the verifier after every pass, so a
 * pass that breaks the IR is named in the error.
 *
 * Sections (file: exports)
 *   passes/pipeline.c:    dc_pipeline_run, dc_pass_list
 *   passes/shape_infer.c: dc_pass_shape_infer
 *   passes/dce.c:         dc_pass_dce
 *   passes/fuse_norm_act.c: dc_pass_fuse_norm_act
 *   passes/fuse_epilogue.c: dc_pass_fuse_epilogue (both driven by passes/fuse_common.c)
 *   passes/cast_weights.c: dc_pass_cast_weights (layerwise casting)
 *   passes/layout.c:      dc_pass_layout (--layout nhwc)
 *   passes/activation_dtype.c: dc_pass_activation_dtype (bf16/f16 activations on cuda)
 *   passes/place.c:       dc_pass_place, dc_parse_max_memory, dc_place_check_budgets (--device-map)
 *   passes/offload.c:     dc_pass_offload, dc_memory_options_check
 *   passes/hoist.c:       dc_pass_hoist — loop-invariant work moved before the loop
 *   passes/fit.c:         dc_fit_table — each offload alternative's device bytes
 *   passes/memplan.c:     dc_pass_memplan, dc_memplan, dc_memplan_trace
 *   passes/cost_model.c:  dc_cost_profile_*, dc_cost_estimate_module — predicted time of a plan
 *   passes/budget.c:      dc_budget_search — the fastest memory options within a budget
 */
#ifndef DC_PASSES_H
#define DC_PASSES_H

#include <stdio.h>

#include "../ir/ir.h"

/* The memory techniques asked for (diffc options; zero = none).  Passes
 * that do not use them ignore them. */
typedef enum { DC_OFFLOAD_NONE, DC_OFFLOAD_MODEL, DC_OFFLOAD_SEQUENTIAL, DC_OFFLOAD_GROUP } dc_offload_kind;
typedef enum { DC_GROUP_NONE, DC_GROUP_BLOCK, DC_GROUP_LEAF } dc_group_level;
/* --host-memory: how offloaded weights wait in host memory.  pinned: all of
 * them read into page-locked memory at load (fast copies, host memory = the
 * offloaded bytes; diffusers' default); on-demand: read from their file at
 * each upload through a small pinned bounce buffer (diffusers'
 * low_cpu_mem_usage).  DEFAULT: pinned, or on-demand with --offload-dir. */
typedef enum { DC_HOST_DEFAULT, DC_HOST_PINNED, DC_HOST_ON_DEMAND } dc_host_memory;
/* --device-map: how modules are placed across devices (passes/place.c). */
typedef enum { DC_MAP_NONE, DC_MAP_BALANCED, DC_MAP_AUTO, DC_MAP_SEQUENTIAL, DC_MAP_FILE } dc_device_map_kind;
/* --max-memory 0=4GiB,1=4GiB,cpu=32GiB,disk=1TB: byte budgets. */
typedef struct {
  int ngpus;                           /* GPUs named: 0 .. ngpus-1 */
  uint64_t gpu[DC_MAX_DEVICES];
  int has_cpu, has_disk;
  uint64_t cpu, disk;
} dc_max_memory;
/* One line of a device map file: module path ("" = the whole model) and
 * its device: a GPU index, or DC_ON_CPU / DC_ON_DISK. */
enum { DC_ON_CPU = -1, DC_ON_DISK = -2 };
typedef struct dc_map_entry {
  const char *module;
  int device;
} dc_map_entry;
typedef struct dc_memory_options {
  dc_offload_kind offload;
  dc_group_level group_level; /* --offload group */
  int blocks_per_group;       /* --group-level block: consecutive entries of a block list per group */
  int prefetch;               /* --prefetch[=DEPTH]: uploads issued DEPTH groups ahead (0: right before use) */
  /* layerwise casting: --storage-dtype (DT_F32 = off), --skip-cast patterns
   * (NULL: diffusers' defaults; the model class's own are always added) */
  dc_dtype storage;
  const char *const *skip_cast;
  int nskip_cast;
  /* storage_all: the storage dtype for every float weight whose readers all
   * load typed weights (norm gammas, biases, embeddings and position tables
   * too), with no skip patterns: --compute-dtype bf16/f16's default on cuda,
   * as diffusers' pipe.to(dtype) casts everything */
  int storage_all;
  /* activations stored in it between kernels (passes/activation_dtype.c;
   * DT_F32 = off): --compute-dtype bf16/f16 on cuda */
  dc_dtype activation;
  dc_host_memory host_memory; /* --host-memory pinned|on-demand (needs offload) */
  dc_layout layout;           /* --layout nhwc: conv regions channels-last (passes/layout.c); 0 = as built */
  dc_device_map_kind device_map; /* --device-map (passes/place.c) */
  const char *device_map_file;   /* DC_MAP_FILE: the JSON file (read by driver/compile.c into map) */
  const struct dc_map_entry *map; /* DC_MAP_FILE: module path -> device, as the file says */
  int nmap;
  dc_max_memory max_memory;      /* --max-memory */
  int no_hoist;                  /* --no-hoist: compute nothing of a loop before it (passes/hoist.c) */
  int constants_as_weights;      /* --target cuda: constants become weights (passes/constant_weights.c) */
} dc_memory_options;

/* Names for messages and the plan's options ("none", "model", ...). */
const char *dc_offload_name(dc_offload_kind k);
const char *dc_group_level_name(dc_group_level g);
/* Checks a combination: a group level only with --offload group (and then
 * required), blocks per group only at block level (and then >= 1), prefetch
 * only with group offload.  Messages say which option to add or drop. */
dc_status *dc_memory_options_check(const dc_memory_options *o);
dc_status *dc_pass_constant_weights(dc_module *m, const dc_memory_options *o);

typedef dc_status *(*dc_pass_fn)(dc_module *m, const dc_memory_options *mem);

typedef struct {
  const char *name;
  const char *summary; /* one line for --help and --list-passes */
  dc_pass_fn run;
} dc_pass;

/* The passes in pipeline order; *count receives how many. */
const dc_pass *dc_pass_list(int *count);

typedef struct {
  /* Called with the IR text after the named pass (or after every pass for
   * "all"); NULL to skip. */
  const char *dump_after;
  dc_status *(*dump)(void *user, const char *pass, const dc_module *m);
  void *user;
  int verbose; /* print each pass's name and node count to stderr */
  const dc_memory_options *memory; /* NULL: none */
  /* Run only the passes from first_pass to last_pass (inclusive; NULL: the
   * first / the last): the budget search runs the passes the memory
   * options do not change once and the rest once per candidate. */
  const char *first_pass, *last_pass;
} dc_pipeline_options;

dc_status *dc_pipeline_run(dc_module *m, const dc_pipeline_options *opt);

dc_status *dc_pass_shape_infer(dc_module *m);
dc_status *dc_pass_dce(dc_module *m);
dc_status *dc_pass_fuse_norm_act(dc_module *m);
dc_status *dc_pass_fuse_epilogue(dc_module *m);
/* passes/fit.c: the device bytes the graph (as the frontend built it)
 * needs under each offload alternative (with base's storage dtype), as a
 * JSON array of
 * {"flags": "<diffc options>", "device_bytes": N}, most memory first. */
dc_status *dc_fit_table(const dc_module *frontend, const dc_memory_options *base, dc_buf *json);
/* passes/cast_weights.c: conv/linear weights stored in --storage-dtype. */
dc_status *dc_pass_cast_weights(dc_module *m, const dc_memory_options *mem);
/* The skip patterns in force for a module: the given ones (or diffusers'
 * DEFAULT_SKIP_MODULES_PATTERN when none), plus its class's (facts->skip_cast;
 * facts may be NULL). */
int dc_cast_skip_patterns(const dc_memory_options *mem, const dc_model_facts *facts, const char **out, int cap);
/* passes/layout.c: --layout nhwc (channels_last). */
dc_status *dc_pass_layout(dc_module *m, const dc_memory_options *mem);
/* passes/activation_dtype.c: computed values stored in mem->activation. */
dc_status *dc_pass_activation_dtype(dc_module *m, const dc_memory_options *mem);

/* passes/place.c: --device-map / --max-memory. */
dc_status *dc_pass_place(dc_module *m, const dc_memory_options *mem);
/* "0=4GiB,1=4GiB,cpu=32GiB" into *out (accelerate's units: GiB = 2^30, GB = 10^9). */
dc_status *dc_parse_max_memory(const char *s, dc_max_memory *out);
/* After memory planning: every device's weights + arena within its
 * --max-memory budget, or an error naming the device and by how much. */
dc_status *dc_place_check_budgets(const dc_module *m, const dc_memory_options *mem);

/* passes/offload.c: upload nodes for offloaded weights (--offload). */
dc_status *dc_pass_offload(dc_module *m, const dc_memory_options *mem);

/* passes/memplan.c: arena offsets for every activation (the last pass).
 * dc_memplan plans m, writing one line per decision to trace when non-NULL;
 * the pass writes them to the sink set by dc_memplan_trace (diffc --debug
 * memplan; process-wide, NULL to stop). */
dc_status *dc_pass_memplan(dc_module *m);
dc_status *dc_pass_hoist(dc_module *m, const dc_memory_options *mem);
dc_status *dc_memplan(dc_module *m, FILE *trace);
void dc_memplan_trace(FILE *f);


/* ---- the cost model (passes/cost_model.c) -------------------------------
 * Achieved rates per kernel class (ir.h: dc_cost_class), from a calibration
 * profile (diffrun --calibrate) or built-in defaults per target. */
typedef struct {
  double overhead_s;                /* fixed cost per kernel step */
  double gflops[DC_COST_CLASSES];   /* the FLOP classes: conv3x3, conv, linear, attention */
  double memory_gbps;               /* the memory class, and the floor of every kernel */
  double h2d_gbps, disk_gbps, d2d_gbps; /* uploads (pinned), on-demand reads, device-to-device */
  int calibrated;                   /* read from a profile (else the defaults) */
  char source[512];                 /* the profile's path, or "built-in cpu defaults" */
} dc_cost_profile;
void dc_cost_profile_default(int cuda, dc_cost_profile *p);
/* Reads a profile for target ("cpu" or "cuda"); errors name the file and
 * the key (wrong format, version or target, a missing field, a rate that is
 * not positive).  On error *p holds the defaults. */
dc_status *dc_cost_profile_load(const char *path, const char *target, dc_cost_profile *p);
/* One kernel step of class c (0 for copy and none). */
double dc_cost_kernel_seconds(const dc_cost_profile *p, dc_cost_class c, uint64_t flops, uint64_t bytes);
/* Node id of m: a kernel, an upload (on_demand: read from its file) or a transfer. */
double dc_cost_step_seconds(const dc_cost_profile *p, const dc_module *m, int32_t id, int on_demand);
typedef struct {
  double seconds;            /* a forward; a pipeline: an image (non-loop phases + loop phases x loop_steps) */
  double compute_seconds;    /* kernels, summed */
  double copy_seconds;       /* uploads and transfers, summed (overlapping compute or not) */
  double copy_stall_seconds; /* time kernels waited for a copy they read */
  double class_seconds[DC_COST_CLASSES];
  int nphases, loop_steps;
  double phase_seconds[DC_MAX_PHASES]; /* one run of each phase */
} dc_cost_estimate;
/* Simulates the two streams per device over a planned module.  host_memory:
 * DC_HOST_DEFAULT reads the module's "host_memory" metadata, else overrides it. */
dc_status *dc_cost_estimate_module(const dc_module *m, const dc_cost_profile *p, int loop_steps, int host_memory,
                                   dc_cost_estimate *out);

/* ---- the budget search (passes/budget.c) --------------------------------
 * diffc --memory-budget: every memory option combination on copies of the
 * frontend graph, the fastest whose device bytes fit chosen. */
typedef struct {
  const char *flags;        /* the build options of this graph ("--vae-tiling"; "" for none) */
  const dc_module *frontend; /* the frontend graph built with them */
} dc_budget_variant;
typedef struct {
  uint64_t budget;           /* --memory-budget: bytes per device (--max-memory N= overrides device N) */
  dc_memory_options base;    /* fixed: layout, device map, max memory, skip patterns, storage when no cast allowed */
  const dc_dtype *casts;     /* --allow-cast: storage dtypes the search may also try */
  int ncasts;
  int loop_steps;            /* a pipeline: loop phases per image (0: one forward) */
  const dc_cost_profile *profile;
  const dc_budget_variant *variants;
  int nvariants;
} dc_budget_request;
typedef struct {
  char flags[256];           /* the diffc options that reproduce it */
  int variant;               /* index into the request's variants */
  dc_memory_options options;
  uint64_t device_bytes;     /* the largest device's weights + arena peak */
  uint64_t per_device[DC_MAX_DEVICES];
  int ndevices;
  uint64_t over;             /* bytes over budget (the worst device); 0: fits */
  uint64_t host_bytes;       /* offloaded weights */
  double seconds, copy_stall_seconds; /* predicted, per forward or image */
  double class_seconds[DC_COST_CLASSES]; /* predicted per kernel class (copy: the copy stream's busy time) */
} dc_budget_candidate;
typedef struct {
  dc_budget_candidate *c;
  int n, cap;
  int chosen;                /* the fastest that fits, or -1 */
  int runner[2];             /* runners-up, or -1 */
  int smallest;              /* the smallest device peak (the error names it) */
  double seconds;            /* the search's time */
} dc_budget_result;
dc_status *dc_budget_search(const dc_budget_request *r, dc_budget_result *res);
void dc_budget_result_free(dc_budget_result *res);
uint64_t dc_budget_of_device(const dc_budget_request *r, int d);
/* The error when nothing fits: the smallest reachable peak and its options. */
dc_status *dc_budget_no_fit(const dc_budget_request *r, const dc_budget_result *res);
/* The choice, its peak and time, the runners-up and why they lost, the count and time. */
void dc_budget_print(const dc_budget_request *r, const dc_budget_result *res, FILE *f);
/* The same as JSON (the plan's OPTS "budget"); the choice also has
 * "class_seconds", its predicted seconds per kernel class (bench/cost_model.sh
 * compares them with diffrun --profile's per-class times). */
dc_status *dc_budget_json(const dc_budget_request *r, const dc_budget_result *res, dc_buf *b);

#endif
