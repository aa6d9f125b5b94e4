/* ir.h — the diffc IR: a static-shape tensor graph in SSA form.
 *
 * A module is a list of nodes in schedule order; node i may only read nodes
 * < i.  Each node has one output value with a type (dtype + shape), a layout
 * and a placement.  Weights are references into safetensors files — (file,
 * offset, bytes, dtype, shape) — and are never copied by the compiler.
 * The module's arena owns every string and array of it.
 *
 * Sections (file: exports)
 *   ir/ir.c:        dtypes, op table, module create/destroy, node/weight/input/output/
 *                   constant add
 *   ir/infer.c:     dc_infer_type — the shape and dtype rule of every op
 *   ir/verify.c:    dc_verify — structural and type checks, run between passes
 *   ir/print.c:     dc_print — deterministic text dump with bytes and live ranges
 *   ir/parse.c:     dc_parse — the dump read back (tests text to text, fuzzing)
 *   ir/liveness.c:  dc_liveness — live ranges, in-place reuse, the activation peak, and
 *                   dc_memplan_check (no two live values overlap in the arena)
 *   ir/serialize.c: dc_serialize / dc_deserialize — the plan's binary schedule
 *   ir/flops.c:     dc_module_flops — the arithmetic of a run, for GFLOP/s figures
 *   ir/memory_view.c, ir/memory_timeline.c: device bytes by kind per step, and
 *                   their picture (SVG)
 */
#ifndef DC_IR_H
#define DC_IR_H

#include "../support/support.h"
#include "model_facts.h"

#define DC_MAX_DIMS 6
/* Limits chosen so large that no op binds them (issue 12: conv2d used up
 * the old 8 attributes, a fused DiT block needs more than 4 inputs), kept
 * inline so a dc_node stays a plain value that builders and passes copy
 * with "=": an input is 4 bytes and an attribute 8, so a node is ~0.6 KiB.
 * DC_MAX_ATTRS bounds ops.def only (ir.c asserts it when it reads the
 * table); DC_MAX_INPUTS bounds any node, checked by the verifier, the
 * parser and the plan reader. */
#define DC_MAX_INPUTS 64
#define DC_MAX_ATTRS 32
#define DC_MAX_DEVICES 8 /* devices a plan may place values on (--device-map) */

/* ---- dtypes ----------------------------------------------------------- */
/* Stored by number in plans: append, never insert.  The float dtypes are
 * activations (f32) and stored weights (all five); the integer dtypes are
 * values only (token ids as inputs, index tables as constants): only the
 * ops that read ids take them (embedding's ids, eos_pool's ids), and no
 * weight or cast holds one. */
typedef enum {
  DT_F32,
  DT_F16,
  DT_BF16,
  DT_F8_E4M3,
  DT_F8_E5M2,
  DT_I32,
  DT_I64,
  DT_COUNT
} dc_dtype;

const char *dc_dtype_name(dc_dtype t);            /* "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i32", "i64" */
const char *dc_dtype_safetensors_name(dc_dtype t); /* "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I32", "I64" */
int dc_dtype_size(dc_dtype t);
int dc_dtype_is_int(dc_dtype t); /* i32, i64 */
/* Returns 0 and sets *out when the name is known. */
int dc_dtype_from_name(const char *name, dc_dtype *out);
int dc_dtype_from_safetensors(const char *name, dc_dtype *out);

typedef struct {
  dc_dtype dtype;
  int rank;
  int64_t dims[DC_MAX_DIMS];
} dc_type;

uint64_t dc_type_numel(const dc_type *t);
uint64_t dc_type_bytes(const dc_type *t);
int dc_type_equal(const dc_type *a, const dc_type *b);
/* "f32[2,4,64,64]" into buf; returns buf. */
const char *dc_type_str(const dc_type *t, char *buf, size_t cap);
/* "[2,4,64,64]" */
const char *dc_dims_str(const int64_t *dims, int rank, char *buf, size_t cap);

/* ---- the op table ----------------------------------------------------- */
enum { OPF_ELEMENTWISE = 1, OPF_INPLACE = 2, OPF_LEAF = 4, OPF_TYPE_GIVEN = 8, OPF_TEST = 16 };

typedef enum {
#define OP(e, name, mi, ma, fl, at) OP_##e,
#include "ops.def"
#undef OP
  OP_COUNT
} dc_op;

typedef enum { ATTR_INT, ATTR_FLOAT, ATTR_LIST, ATTR_ACT } dc_attr_kind;

/* Activation in an epilogue (the "act" attribute).  Stored by number in
 * plans: append, never insert.  quick_gelu and gelu_tanh (linear only) are
 * the ops of those names. */
typedef enum { ACT_NONE, ACT_SILU, ACT_GELU, ACT_GEGLU, ACT_QUICK_GELU, ACT_GELU_TANH, ACT_COUNT } dc_act;
const char *dc_act_name(dc_act a); /* "none", "silu", "gelu", "geglu", "quick_gelu", "gelu_tanh" */

typedef struct {
  const char *name;
  int min_inputs, max_inputs;
  unsigned flags;
  int nattrs;
  const char *attr_names[DC_MAX_ATTRS]; /* sorted */
  dc_attr_kind attr_kinds[DC_MAX_ATTRS];
} dc_op_info;

const dc_op_info *dc_op_get(dc_op op);
/* Returns the op with this name, or OP_COUNT. */
dc_op dc_op_from_name(const char *name);
/* Uploads and transfers are copies the runtime makes itself (a copy engine
 * on a GPU), not kernels: no backend generates code for them. */
int dc_op_is_copy(dc_op op);
/* Index of the attribute in the op's table, or -1. */
int dc_op_attr_index(dc_op op, const char *attr);

/* ---- nodes ------------------------------------------------------------ */
/* A value's memory order.  dims are always the physical shape: an NHWC
 * activation is [N,H,W,C], an NHWC conv weight [O,kh,kw,C] (passes/layout.c).
 * conv2d, group_norm and upsample_nearest read their node's layout to know
 * where the channels are (ops.def); every other op is layout-blind. */
typedef enum { LAYOUT_ROWMAJOR, LAYOUT_NCHW, LAYOUT_NHWC, LAYOUT_COUNT } dc_layout;
const char *dc_layout_name(dc_layout l); /* "row", "nchw", "nhwc" */

/* One attribute's value: i for ATTR_INT and ATTR_ACT, f for ATTR_FLOAT, by
 * the op table's kind (a union: 8 bytes, so DC_MAX_ATTRS costs little). */
typedef union {
  int64_t i;
  double f;
} dc_attr;

typedef struct {
  dc_op op;
  int ninputs;
  int32_t inputs[DC_MAX_INPUTS];
  dc_attr attrs[DC_MAX_ATTRS];    /* indexed like dc_op_info.attr_names */
  int64_t list[DC_MAX_DIMS];      /* the op's one ATTR_LIST attribute */
  int nlist;
  int32_t ref;                    /* OP_WEIGHT: weight index; OP_INPUT: input index */
  /* OP_CONSTANT: its value, dc_type_bytes(&type) bytes in C order, owned by
   * the module's arena (dc_module_add_constant copies them there); NULL for
   * every other op.  A node copied into another module must not outlive
   * this one's arena (passes rewrite nodes within their module). */
  const void *data;
  dc_type type;
  dc_layout layout;
  int device;                     /* placement: 0 = device 0 */
  const char *scope;              /* module path, e.g. "down_blocks.0.resnets.1.conv1"; may be NULL */
  const char *absorbed;           /* what fusion folded into this node, by module path: "silu(mid_block.resnets.0.nonlinearity)"; may be NULL */
  int64_t offset;                 /* byte offset in the activation arena, -1 until memory is planned */
  /* The phase of the run this node belongs to (ir/phases.c); 0 in a module
   * without phases.  dc_node_make sets DC_PHASE_INHERIT, which
   * dc_module_add_node resolves to the latest of the previous node's phase
   * and the inputs' phases: a node a pass inserts joins its neighbours. */
  int32_t phase;
} dc_node;
#define DC_PHASE_INHERIT (-1)

/* Epilogue inputs of conv2d and linear (see ops.def): -1 when absent. */
int32_t dc_node_bias(const dc_node *n);
int32_t dc_node_residual(const dc_node *n);
/* A linear's gated residual (gate=1): the input slot of its mod, the one
 * after the residual, or -1 (also for every other op). */
int dc_node_gate_slot(const dc_node *n);

/* ---- weights ---------------------------------------------------------- */
typedef struct {
  const char *path;      /* absolute path of the .safetensors file */
  uint64_t header_hash;  /* xxHash64 of the 8-byte length + JSON header */
  uint64_t file_size;
} dc_weight_file;

typedef struct {
  const char *name;      /* "down_blocks.0.resnets.0.conv1.weight" */
  int32_t file;          /* index into module->files */
  uint64_t offset;       /* absolute byte offset in the file */
  uint64_t bytes;
  dc_type type;
  /* XXH3-64 of the bytes [offset, offset + bytes) of the file: set by the
   * plan writer from the file it names, re-hashed by diffrun at load (a
   * plan never runs on tensor bytes that changed since compile). */
  uint64_t content_hash;
  /* Layerwise casting (pass cast-weights): when set, the file holds the
   * tensor in from_dtype (from_bytes at offset) and diffc converts it to
   * type.dtype when it writes the plan's weights (driver/weight_store.c);
   * a plan never holds a weight with a cast pending. */
  int cast_pending;
  dc_dtype from_dtype;
  uint64_t from_bytes;
  /* channels_last (pass layout): when set, the file holds the conv weight as
   * [O,C,kh,kw] and type is its repacked [O,kh,kw,C]; written repacked beside
   * the plan like a cast, never pending in a plan. */
  int repack_pending;
  /* --device-map: where the weight waits when its module is placed on the
   * cpu or disk (passes/place.c); the offload pass uploads such weights
   * before each use, on the device that runs the module.  Compile time
   * only: a plan shows it as uploads. */
  enum { DC_PLACE_DEVICE, DC_PLACE_CPU, DC_PLACE_DISK } place;
  /* A constant turned into a weight (pass constant-weights, for a target
   * that places no constants): its bytes, in the module's arena, written
   * beside the plan like a cast; the file is the pseudo file "<constants>"
   * until then.  Compile time only: pending, never in a plan. */
  const void *inline_bytes;
} dc_weight;
/* True while a weight's file bytes still need converting (cast or repack). */
int dc_weight_pending(const dc_weight *w);

/* Graph inputs and outputs, by their diffusers names. */
typedef enum { INIT_NORMAL, INIT_TIMESTEP } dc_input_init;
typedef struct {
  const char *name;
  int32_t node;
  dc_input_init init; /* how diffrun --random-inputs fills it */
} dc_io;

typedef struct {
  const char *key, *value;
} dc_meta;

typedef struct dc_module {
  dc_arena *arena;
  dc_node *nodes;
  int32_t nnodes, cap_nodes;
  dc_weight_file *files;
  int32_t nfiles, cap_files;
  dc_weight *weights;
  int32_t nweights, cap_weights;
  dc_io *inputs, *outputs;
  int32_t ninputs, noutputs, cap_inputs, cap_outputs;
  dc_meta *meta;     /* shown in the dump header: class, entry, scaling_factor, ... */
  int32_t nmeta, cap_meta;
  uint64_t arena_bytes; /* the activation arena's size (pass memplan); 0 until planned */
  /* The class facts passes read (block lists, skip patterns): set by the
   * frontend, NULL for a module parsed or read from a plan; not part of the
   * text or binary form (the plan records what the passes did with them). */
  const dc_model_facts *facts;
  /* Phases (ir/phases.c): a pipeline's module runs in parts the host
   * sequences (text encoding, the denoising loop's bodies, decode).  0
   * phases: one run of the whole schedule. */
  struct dc_phase {
    const char *name; /* "text", "prologue", "denoise.cond", "decode" (arena-owned) */
    int loop;         /* runs many times; consecutive loop phases form one loop */
  } phases[8];
  int32_t nphases;
} dc_module;
#define DC_MAX_PHASES 8
typedef struct dc_phase dc_phase;

dc_module *dc_module_create(void);
void dc_module_destroy(dc_module *m);

/* A copy of src whose arrays are its own but whose strings and constants'
 * bytes are src's (borrowed from its arena): cheap enough to run the passes
 * on many copies of one graph (passes/fit.c, passes/budget.c).  src must
 * outlive the copy and stay unchanged while it is used; what the passes add
 * to the copy (names, metadata) goes into the copy's own arena. */
dc_status *dc_module_clone_borrowing(const dc_module *src, dc_module **out);
/* Appends a node (copied) and returns its index, or -1 on OOM. */
int32_t dc_module_add_node(dc_module *m, const dc_node *n);
int32_t dc_module_add_file(dc_module *m, const dc_weight_file *f);   /* path copied */
int32_t dc_module_add_weight(dc_module *m, const dc_weight *w);      /* name copied */
/* Adds an OP_INPUT node and registers it under name; returns node or -1.
 * An input may be f32 or an integer dtype (token ids). */
int32_t dc_module_add_input(dc_module *m, const char *name, const dc_type *t, dc_input_init init);
/* Adds an OP_CONSTANT node holding a copy of data (dc_type_bytes(t) bytes
 * in C order, f32/i32/i64) under scope (may be NULL); returns node or -1
 * on OOM.  A constant is a value like any other: placed in the arena at its
 * step by the runtime (its "kernel" copies the bytes), freed after its last
 * reader (ir/liveness.c); its bytes travel in the plan's schedule. */
int32_t dc_module_add_constant(dc_module *m, const char *scope, const dc_type *t, const void *data);
/* Constants up to this many elements are printed with their values (and
 * parse back); larger ones are printed elided, and such a dump does not
 * parse (ir/print.c). */
#define DC_CONSTANT_PRINT_MAX 256
dc_status *dc_module_add_output(dc_module *m, const char *name, int32_t node);
dc_status *dc_module_set_meta(dc_module *m, const char *key, const char *value);
const char *dc_module_get_meta(const dc_module *m, const char *key);
/* The dtype computed values may be stored in between kernels: bf16 or f16
 * when the module's metadata "activation_dtype" says so (pass
 * activation-dtype, for --target cuda with --compute-dtype bf16/f16), f32
 * otherwise.  The type rules (infer.c) then let every float value a node
 * computes, and every float input it reads, be f32 or that dtype. */
dc_dtype dc_module_activation_dtype(const dc_module *m);

/* A node with op and inputs set; attrs zeroed.  Helpers for builders.
 * The setters and getters assert that the attribute exists with that kind
 * (int getters read ATTR_INT and ATTR_ACT, float getters ATTR_FLOAT). */
dc_node dc_node_make(dc_op op, int ninputs, const int32_t *inputs);
void dc_node_set_int(dc_node *n, const char *attr, int64_t v);
void dc_node_set_float(dc_node *n, const char *attr, double v);
int64_t dc_node_int(const dc_node *n, const char *attr);
double dc_node_float(const dc_node *n, const char *attr);

/* ---- phases (ir/phases.c) ---------------------------------------------
 * A module may be split into phases: contiguous runs of the schedule that
 * the runtime runs separately (drt_run_phase), the host working between
 * them (a scheduler step between two UNet forwards).  Every node belongs to
 * one (dc_node.phase), phases never decrease along the schedule, and a node
 * reads only values of its own or earlier phases.  A loop phase may run
 * many times; consecutive loop phases form one loop (the two CFG halves of
 * a denoising step), and:
 *   - a value computed before a loop and read inside it stays live until
 *     the loop's end (liveness), since every iteration reads it again;
 *   - a loop phase reads no value another loop phase computed (a phase may
 *     be skipped: guidance <= 1 runs no unconditional half), nor does a
 *     later phase read one;
 *   - a graph input belongs to its phase: the host sets it before that
 *     phase runs; it lives from the phase's first step; a graph output
 *     lives to its phase's end, where the host reads it.
 * The table is stored in the module's metadata "phases" ("text@0
 * prologue@812 denoise.cond*@900 decode@2900": name, * for a loop, first
 * node), which dc_phases_sync_meta rewrites after every pass and
 * dc_phases_from_meta reads back (plans, parsed dumps). */
/* Appends a phase; returns its index or -1 (too many, or OOM). */
int32_t dc_module_add_phase(dc_module *m, const char *name, int loop);
/* The phase called name, or -1. */
int32_t dc_phase_find(const dc_module *m, const char *name);
/* first[p], end[p]: the node range [first, end) of each phase (empty
 * phases: first == end), for p < max(1, nphases). */
void dc_phase_spans(const dc_module *m, int32_t *first, int32_t *end);
/* The last node + 1 of the loop phase p's loop (the consecutive loop
 * phases around p), or of p itself when it is not a loop. */
int32_t dc_phase_region_end(const dc_module *m, const int32_t *end, int32_t p);
/* Writes the metadata "phases" from the nodes (no-op without phases). */
dc_status *dc_phases_sync_meta(dc_module *m);
/* Reads the metadata "phases" (if present) into m->phases and every
 * node's phase; errors name what is malformed. */
dc_status *dc_phases_from_meta(dc_module *m);
/* The phase rules above (dc_verify calls it). */
dc_status *dc_phases_verify(const dc_module *m, const char *after);

/* ---- type inference (ir/infer.c) -------------------------------------- */
/* Computes the output type of node n from its inputs' types and attributes.
 * For OPF_TYPE_GIVEN ops it checks the given type against the inputs
 * (reshape: same numel; cast: same shape).  Errors name the node's scope. */
dc_status *dc_infer_type(const dc_module *m, const dc_node *n, dc_type *out);

/* ---- verifier (ir/verify.c) ------------------------------------------- */
/* Checks: every op known, arity within the table, inputs refer to earlier
 * nodes, weights/inputs refs in range, constants hold data of an f32 or
 * integer type, stored types equal inferred types (integer values reach
 * only the ops that read ids: embedding, eos_pool), outputs refer to valid
 * nodes, names unique.  `after`
 * names the pass for the message. */
dc_status *dc_verify(const dc_module *m, const char *after);

/* ---- liveness (ir/liveness.c) ----------------------------------------- */
/* Activation memory model shared by the dump, the memory planner and the
 * runtime: a non-leaf value is allocated when its node runs and freed after
 * its last reader runs; graph outputs live to the end; inputs live from the
 * start to their last use (or the end if they are outputs).  Weights are
 * counted separately as resident.
 *
 * Once memory is planned (every activation has an arena offset), a value may
 * be written in place over a parent (dc_inplace_parent): the parent's bytes
 * pass to the child at the child's step, so the parent's occupancy ends one
 * step before.  The peak is then the arena's high-water mark; before
 * planning it is the most bytes live at once. */
typedef struct {
  int32_t *last_use;      /* per node; the step after which it is freed (nnodes-1 for outputs) */
  int32_t *inplace_of;    /* per node: the parent it overwrote in place, or -1 (planned only) */
  uint64_t *live_bytes;   /* per step: distinct activation bytes live while step i runs */
  uint64_t peak_bytes;    /* planned: the arena's high-water mark; else max of live_bytes */
  int32_t peak_step;      /* the first step that reaches peak_bytes */
  uint64_t live_peak_bytes; /* max of live_bytes: what any packing needs at least */
  int32_t ninplace;       /* values written in place over a parent */
  int planned;            /* 1 when every activation has an arena offset */
  uint64_t weight_bytes;  /* weights resident on the device for the whole run (all devices) */
  /* Per device (--device-map): ndevices = 1 + the highest device any node
   * is on; dev_peak = that device's arena high-water mark (planned) or most
   * live bytes; dev_weights = the weights resident there. */
  int ndevices;
  uint64_t dev_peak[DC_MAX_DEVICES], dev_weights[DC_MAX_DEVICES];
  uint64_t host_weight_bytes; /* offloaded weights: in host memory, copied in by uploads */
} dc_liveness;
dc_status *dc_liveness_compute(const dc_module *m, dc_liveness *out);
void dc_liveness_deinit(dc_liveness *l);
/* True when weight node id is offloaded: it has readers and every one is an
 * OP_UPLOAD (passes/offload.c), so it lives in host memory, not on the device. */
int dc_weight_offloaded(const dc_module *m, int32_t id);
/* True when the node's value occupies activation memory (not a weight). */
int dc_node_is_activation(const dc_node *n);
int dc_node_is_output(const dc_module *m, int32_t id);
/* The step from which a value occupies memory: 0 for graph inputs (copied in
 * before step 0), else its own step. */
int32_t dc_value_first_step(const dc_module *m, int32_t id);
/* The last step it occupies memory: its last use, or the step before when
 * its last reader took its bytes over in place. */
int32_t dc_value_last_step(const dc_liveness *l, int32_t id);
/* Which input the node's output may overwrite, by the op alone: input 0 of
 * an OPF_INPLACE op, the residual of conv2d and linear (never x); -1
 * otherwise.  Kernels, reference and generated, must tolerate out == in[k]
 * for this k: read in[k][i] before writing out[i] (runtime/kernels.h). */
int dc_node_inplace_input(const dc_node *n);
/* The parent value node `id` may take over in place (ggml-alloc's rule), or
 * -1: the op allows it (above), same type, and the parent is an activation
 * that is not a graph input or output, that this node reads once, and whose
 * last reader this node is (every other reader ran before). */
int32_t dc_inplace_parent(const dc_module *m, const dc_liveness *l, int32_t id);
/* Checks a memory plan before anything runs on it: every activation has a
 * 64-byte aligned offset, lies inside m->arena_bytes, and overlaps no value
 * live at the same time (in-place handovers excepted).  O(n log n).  A
 * DC_ERR_INTERNAL error names both values of an overlap. */
dc_status *dc_memplan_check(const dc_module *m, const dc_liveness *l);
#define DC_ARENA_ALIGN 64

/* ---- memory by kind (ir/memory_view.c) ---------------------------------
 * One classification of device bytes that the memory report, the timeline
 * and budget fitting share, so their numbers agree with each other and with
 * liveness (live_bytes[s] is the sum over kinds but DC_MEM_WEIGHTS):
 *   weights      resident weights (liveness.dev_weights): the whole run;
 *   in_flight    uploaded weights (OP_UPLOAD values: offload and held
 *                model uploads) from their upload to their last reader;
 *   held         values made in a non-loop phase and read inside a loop
 *                phase, held to the loop's end (text embeddings, hoisted
 *                work);
 *   activations  every other arena value (inputs, outputs, constants,
 *                transfers, intermediate results). */
typedef enum { DC_MEM_WEIGHTS, DC_MEM_IN_FLIGHT, DC_MEM_HELD, DC_MEM_ACTIVATIONS, DC_MEM_KINDS } dc_mem_kind;
const char *dc_mem_kind_name(dc_mem_kind k); /* "weights", "in_flight", "held", "activations" */
/* The kind of an activation node's value (dc_node_is_activation). */
dc_mem_kind dc_mem_value_kind(const dc_module *m, int32_t id);

/* Device bytes per step by kind: at(s, d, k) = bytes of kind k occupying
 * device d while step s runs (DC_MEM_WEIGHTS: the resident weights, the
 * same at every step).  nsteps = m->nnodes.  arena_top[d*nsteps+s]: the
 * arena's high-water mark once step s has allocated (planned modules; else
 * the running maximum of the live bytes). */
typedef struct dc_mem_series { /* tagged: runtime/diffrun.h names it without ir.h */
  int32_t nsteps;
  int ndevices;
  uint64_t *bytes;     /* [(d * nsteps + s) * DC_MEM_KINDS + k] */
  uint64_t *arena_top; /* [d * nsteps + s] */
} dc_mem_series;
dc_status *dc_mem_series_compute(const dc_module *m, const dc_liveness *l, dc_mem_series *out);
void dc_mem_series_deinit(dc_mem_series *s);
static inline uint64_t dc_mem_series_at(const dc_mem_series *s, int32_t step, int dev, dc_mem_kind k) {
  return s->bytes[((size_t)dev * (size_t)s->nsteps + (size_t)step) * DC_MEM_KINDS + k];
}

/* ---- memory report (ir/memory_report.c) --------------------------------
 * Where a planned module's memory goes, from liveness and the memory
 * series above (nothing recomputed): per device the peak (resident weights
 * + the arena's high-water mark) and the step that reaches it, what is
 * live then by kind and by top-level module; host and disk bytes of
 * offloaded weights; bytes copied per run, per phase and per image; per
 * pipeline component its weights; and the workspace the runtime adds
 * outside the arena where the plan records it.  Rendered as text (human
 * units) or JSON (bytes; docs/memory-report.md describes every field).
 *
 * What only the caller knows comes in the context: the plan's target and
 * kernel scratch (plan sections), and the pipeline's default steps. */
typedef struct {
  const char *target;          /* "cpu", "cuda"; NULL: not known */
  int cpu_kernels;             /* cpu: compiled kernels in the plan (0: none, or not known) */
  uint64_t scratch_per_thread; /* cpu: the largest per-thread scratch of those kernels (KERN) */
  int steps_per_image;         /* pipeline: the loop's default steps; 0: not known (per step only) */
  /* host_memory on-demand: the bounce buffer offloaded weights are read
   * through: bounce_chunks chunks of bounce_bytes (0: not known), capped
   * by the report at the largest offloaded weight as the runtime caps it */
  uint64_t bounce_bytes;
  int bounce_chunks;
} dc_mem_report_context;

#define DC_MEM_REPORT_TOP 8 /* values named at a peak */
typedef struct {
  const char *name; /* "up_blocks.1", "unet.up_blocks.1", "(inputs)", "(no module)" */
  uint64_t bytes;
  int32_t values;
} dc_mem_report_module;
typedef struct {
  int32_t node;
  uint64_t bytes;
  dc_mem_kind kind;
} dc_mem_report_value;
typedef struct {
  uint64_t peak_bytes;         /* weight_bytes + arena_bytes */
  uint64_t weight_bytes;       /* liveness.dev_weights */
  uint64_t arena_bytes;        /* liveness.dev_peak: the arena's high-water mark */
  uint64_t live_at_peak_bytes; /* live (arena) bytes while peak_step runs */
  uint64_t live_peak_bytes;    /* the most live bytes at any step: what any packing needs */
  int32_t peak_step;           /* the first step whose allocation reaches arena_bytes */
  uint64_t kind_bytes[DC_MEM_KINDS]; /* at peak_step; [DC_MEM_WEIGHTS] = weight_bytes */
  dc_mem_report_module *modules;     /* live at peak_step, largest first */
  int32_t nmodules;
  dc_mem_report_value top[DC_MEM_REPORT_TOP]; /* the largest values live then */
  int ntop;
} dc_mem_report_device;
typedef struct {
  int32_t first, end;          /* its nodes [first, end) */
  uint64_t arena_bytes;        /* the highest arena byte a value of the phase occupies (all devices' most) */
  uint64_t live_peak_bytes;    /* the most live bytes at any of its steps (all devices) */
  uint64_t uploaded_bytes, transferred_bytes; /* per run of the phase */
} dc_mem_report_phase;
typedef struct {
  const char *name; /* the first element of the weights' names: "unet", "vae", "text_encoder" */
  uint64_t resident_bytes, offloaded_bytes;
} dc_mem_report_component;
typedef struct {
  const dc_module *m;
  dc_mem_report_context ctx;
  dc_arena *arena; /* owns the names and tables */
  int ndevices;
  dc_mem_report_device dev[DC_MAX_DEVICES];
  int peak_device; /* the device with the largest peak_bytes */
  uint64_t resident_weight_bytes, offloaded_weight_bytes, largest_offloaded_bytes;
  const char *host_memory;   /* offloaded weights: "pinned", "on-demand"; NULL when none */
  const char *offload_dir;   /* metadata offload_dir, or NULL */
  int32_t offload_files;     /* weight files in offload_dir, and their bytes */
  uint64_t offload_file_bytes;
  uint64_t uploaded_bytes, transferred_bytes; /* per run of the whole schedule */
  int32_t uploads, transfers;
  uint64_t input_bytes, output_bytes;
  int nphases;
  dc_mem_report_phase phases[DC_MAX_PHASES];
  /* per image (pipelines, ctx.steps_per_image > 0): the non-loop phases
   * once, the loop phases steps_per_image times */
  uint64_t image_uploaded_bytes, image_transferred_bytes;
  dc_mem_report_component *components; /* pipelines only (nphases > 0) */
  int32_t ncomponents;
} dc_mem_report;
/* A planned module's report; l and s are its liveness and memory series. */
dc_status *dc_mem_report_build(const dc_module *m, const dc_liveness *l, const dc_mem_series *s,
                               const dc_mem_report_context *ctx, dc_mem_report *out);
void dc_mem_report_deinit(dc_mem_report *r);
/* The rolled-up module of a scope: its top-level block ("up_blocks.1" of
 * "up_blocks.1.attentions.0"), after the component in a pipeline module
 * ("unet.up_blocks.1"); into buf (truncated to cap), returned. */
const char *dc_mem_report_module_of(const dc_module *m, const char *scope, char *buf, size_t cap);
dc_status *dc_mem_report_text(const dc_mem_report *r, dc_buf *out);
dc_status *dc_mem_report_json(const dc_mem_report *r, dc_buf *out);
/* The whole way: liveness, series, report, rendered (json: 1 for JSON). */
dc_status *dc_mem_report_render(const dc_module *m, const dc_mem_report_context *ctx, int json, dc_buf *out);

/* ---- memory timeline (ir/memory_timeline.c) ---------------------------
 * Device bytes over the schedule as an SVG picture (diffc and diffrun
 * --memory-timeline): per device a panel of the predicted series' kinds
 * stacked (resident weights at the bottom, then held, in flight,
 * activations), the arena's high-water mark, the peak named by step, op and
 * module path, a tick per upload with a bar to its first reader, and under
 * the panels the phases and top-level modules along the x axis (the step).
 * `measured`, when not NULL, is a series over the same steps and devices
 * (recorded from a run) drawn as a line over the prediction.  Deterministic:
 * the same module and series give the same bytes.  Appends to out. */
dc_status *dc_memory_timeline_svg(const dc_module *m, const dc_mem_series *predicted, const dc_mem_series *measured,
                                  dc_buf *out);
/* Computes m's predicted series and writes the SVG to path (temporary name,
 * then rename). */
dc_status *dc_memory_timeline_write(const dc_module *m, const dc_mem_series *measured, const char *path);
/* The CLIs' check of --memory-timeline PATH before any work: a name ending
 * in .svg, in a folder that exists and can be written. */
dc_status *dc_memory_timeline_check_path(const char *path);

/* ---- arithmetic (ir/flops.c) ------------------------------------------ */
/* Flops of one run: 2 per multiply-add of conv2d, linear and attention. */
uint64_t dc_module_flops(const dc_module *m);
uint64_t dc_node_flops(const dc_module *m, int32_t id); /* one node's */

/* Kernel classes of the cost model (budget fitting) and of calibration
 * (diffrun --calibrate), one definition for both: each class has its own
 * achieved rate; conv3x3 apart from other convs because Winograd and
 * implicit-GEMM kernels reach other rates on them.  DC_COST_MEMORY is every
 * other kernel, timed by the bytes it moves; DC_COST_COPY uploads and
 * transfers (the copy stream); DC_COST_NONE leaves that run no code
 * (input, weight). */
typedef enum {
  DC_COST_CONV3X3, DC_COST_CONV, DC_COST_LINEAR, DC_COST_ATTENTION, DC_COST_MEMORY, DC_COST_COPY, DC_COST_NONE,
  DC_COST_CLASSES
} dc_cost_class;
const char *dc_cost_class_name(dc_cost_class c); /* "conv3x3", "conv", "linear", "attention", "memory", "copy", "none" */
dc_cost_class dc_node_cost_class(const dc_module *m, int32_t id);
/* Bytes a step reads and writes: its output plus every input (weights in
 * their stored dtype), counted once each. */
uint64_t dc_node_traffic_bytes(const dc_module *m, int32_t id);

/* ---- text dump (ir/print.c) ------------------------------------------- */
dc_status *dc_print(const dc_module *m, dc_buf *out);

/* ---- text form back (ir/parse.c) -------------------------------------- */
/* Parses dc_print's text (what names the source in messages, with line
 * numbers); the result is verified, and its memory plan checked when the
 * text has one.  dc_print(dc_parse(dc_print(m))) == dc_print(m). */
dc_status *dc_parse(const char *text, size_t len, const char *what, dc_module **out);

/* ---- binary form (ir/serialize.c) ------------------------------------- */
/* Two parts, stored as two plan sections: the weight references (files and
 * tensors) and the schedule (metadata, inputs, outputs, nodes). */
dc_status *dc_serialize_weights(const dc_module *m, dc_buf *out);
dc_status *dc_serialize(const dc_module *m, dc_buf *out);
/* Validates every field and then runs dc_verify; the `what`s name the
 * sources in messages (e.g. "unet.dplan: section SCHD"). */
dc_status *dc_deserialize(const void *weights, size_t weights_size, const char *weights_what,
                          const void *schedule, size_t schedule_size, const char *schedule_what,
                          dc_module **out);

#endif
