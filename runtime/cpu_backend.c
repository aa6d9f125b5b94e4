/* cpu_backend.c — the CPU executor behind two backends (backend.h):
 * "reference" runs every step with the plain C kernels (kernels.h), for any
 * plan, CUDA plans included; "llvm" runs a CPU plan's compiled kernels
 * (cpu_kernels.h) on the thread pool, and the reference kernel for a step
 * that has none.
 *
 * Both run under the device-memory model of docs/ARCHITECTURE.md: "device
 * memory" is one arena per device the plan places values on, each of the
 * size the memory plan gives it (pass memplan), allocated at load; every
 * activation lives at its device's arena + its planned offset; inputs are
 * copied from host buffers into the arena when a run starts, outputs back
 * at the end.  Resident weights are read in place from the mapped files;
 * offloaded ones enter the arena only through upload steps, which run on
 * the copy stream (cpu_copy_stream.h) beside the compute stream (the
 * calling thread).  A transfer is a copy from one arena into another.  The
 * peak is measured, not copied: the highest arena byte a value placed
 * during the run occupied; it equals the plan's arena size exactly when
 * the plan is tight.  --device-memory gives the modelled device a
 * capacity, checked before anything is allocated. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_copy_stream.h"
#include "cpu_kernels.h"
#include "fit_advice.h"
#include "kernels.h"
#include "support/threadpool.h"

typedef struct {
  drt_backend_setup s;
  const dc_module *m;
  int use_llvm;                /* the llvm backend: compiled kernels where the plan has them */
  void **value;                /* per node: its data in the arena (or the mapped weight) */
  void **host_in;              /* the host side of inputs (their own dtype) and outputs (f32) */
  float **host_out;
  /* One arena per device: dc_malloc'd blocks, each arena its block rounded up to 64 bytes. */
  void *arena_block[DC_MAX_DEVICES];
  uint8_t *arena[DC_MAX_DEVICES];
  uint64_t arena_top[DC_MAX_DEVICES]; /* highest byte of each a value of this run occupied */
  /* llvm: the compiled kernel per node (NULL: its reference kernel). */
  dc_cpu_code *code;
  dc_cpu_kernel_fn *fn;
  dc_pool *pool;
  uint8_t *scratch;            /* nthreads x scratch_stride, host memory */
  uint64_t scratch_stride;
  int nreference;              /* nodes that run reference kernels */
  char reference_ops[96];      /* their ops, "blend, ..." (drt_stats.reference_ops) */
  double *step_seconds;        /* this run's, or NULL */
  drt_trace_event *trace;      /* this run's event slots (backend.h), or NULL */
  dc_copy_stream copies;
  int32_t first, end; /* the steps of the run in progress */
  int copying;                 /* the copy stream runs (the plan has uploads) */
} cpu_backend;

/* ---- create: can this plan run here ---- */
/* The modelled device (drt_options.device_memory) must hold the arena and
 * the resident weights; checked before anything is allocated or run. */
static dc_status *check_device_budget(const drt_backend_setup *s) {
  const dc_liveness *live = s->live;
  uint64_t budget = s->opt->device_memory;
  int d = 0; /* the device that needs the most (each is one modelled device) */
  for (int k = 1; k < live->ndevices; k++)
    if (live->dev_weights[k] + live->dev_peak[k] > live->dev_weights[d] + live->dev_peak[d]) d = k;
  uint64_t arena = live->dev_peak[d], weights = live->dev_weights[d], need = arena + weights;
  if (!budget || need <= budget) return NULL;
  char advice[1024], b1[32], b2[32], b3[32], b4[32];
  dc_fit_advice(s->plan->options_json, budget, advice, sizeof advice);
  return dc_error(DC_ERR_NOMEM,
                  "%s: the plan needs %s of device memory (%llu bytes: activation arena %s + resident weights %s) but "
                  "the device has %s (--device-memory); nothing was run%s",
                  s->path, dc_format_bytes(need, b1, sizeof b1), (unsigned long long)need,
                  dc_format_bytes(arena, b2, sizeof b2), dc_format_bytes(weights, b3, sizeof b3),
                  dc_format_bytes(budget, b4, sizeof b4), advice);
}

static dc_status *check_reference_kernels(const drt_backend_setup *s) {
  const dc_module *m = s->plan->module;
  for (int i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (!(dc_op_get(n->op)->flags & OPF_LEAF) && !dc_ref_kernel_for(n->op))
      return dc_error(DC_ERR_UNSUPPORTED, "%s: op %s has no reference kernel", s->path, dc_op_get(n->op)->name);
  }
  return NULL;
}

static dc_status *create(const drt_backend_setup *s, int use_llvm, void **out) {
  *out = NULL;
  DC_TRY(check_device_budget(s));
  if (use_llvm && s->plan->kernels.nobjects == 0)
    return dc_error(DC_ERR_ARGUMENT, "%s: the plan holds no compiled kernels; run it with --backend reference", s->path);
  DC_TRY(check_reference_kernels(s));
  cpu_backend *c = dc_calloc(1, sizeof *c);
  if (!c) return dc_nomem("creating the CPU backend");
  c->s = *s;
  c->m = s->plan->module;
  c->use_llvm = use_llvm;
  *out = c;
  return NULL;
}

static dc_status *create_reference(const drt_backend_setup *s, void **out) { return create(s, 0, out); }
static dc_status *create_llvm(const drt_backend_setup *s, void **out) { return create(s, 1, out); }

/* ---- memory: the arenas, the host buffers, the weights ---- */
static uint8_t *arena_at(const cpu_backend *c, const dc_node *n) { return c->arena[n->device] + n->offset; }

/* The "device" arenas (one per device, each its planned size), where every
 * value lives, and the host copies of inputs and outputs. */
static dc_status *allocate(void *be) {
  cpu_backend *c = be;
  const dc_module *m = c->m;
  for (int d = 0; d < c->s.live->ndevices; d++) {
    c->arena_block[d] = dc_malloc((size_t)c->s.live->dev_peak[d] + DC_ARENA_ALIGN);
    if (!c->arena_block[d]) return dc_nomem("allocating the device arena");
    c->arena[d] = (uint8_t *)(((uintptr_t)c->arena_block[d] + DC_ARENA_ALIGN - 1) & ~(uintptr_t)(DC_ARENA_ALIGN - 1));
  }
  c->value = dc_calloc((size_t)m->nnodes + 1, sizeof *c->value);
  c->host_in = dc_calloc((size_t)m->ninputs + 1, sizeof *c->host_in);
  c->host_out = dc_calloc((size_t)m->noutputs + 1, sizeof *c->host_out);
  if (!c->value || !c->host_in || !c->host_out) return dc_nomem("loading a plan");
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].op != OP_WEIGHT) c->value[s] = arena_at(c, &m->nodes[s]);
  for (int i = 0; i < m->ninputs; i++) { /* f32 or integer: the input's own bytes */
    c->host_in[i] = dc_calloc(dc_type_bytes(&m->nodes[m->inputs[i].node].type) + 1, 1);
    if (!c->host_in[i]) return dc_nomem("allocating inputs");
  }
  for (int i = 0; i < m->noutputs; i++) {
    c->host_out[i] = dc_calloc(dc_type_numel(&m->nodes[m->outputs[i].node].type), sizeof(float));
    if (!c->host_out[i]) return dc_nomem("allocating outputs");
  }
  return NULL;
}

/* Resident weights are read in place from their mappings; offloaded ones
 * (NULL here: only uploads read them) wait in host memory as the plan's
 * host_memory says. */
static dc_status *upload_weights(void *be, const void *const *weight_data) {
  cpu_backend *c = be;
  const dc_module *m = c->m;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT) c->value[s] = c->s.host->offloaded[n->ref] ? NULL : (void *)weight_data[n->ref];
  }
  return dc_host_weights_stage(c->s.host, c->s.opt->bounce_bytes);
}

/* ---- kernels ---- */
/* Adds op to the list "a, b" once (truncated with "..." if it ever fills). */
static void note_reference_op(char *list, size_t cap, const char *op) {
  size_t n = strlen(op), len = strlen(list);
  for (const char *s = strstr(list, op); s; s = strstr(s + 1, op))
    if ((s == list || s[-1] == ' ') && (s[n] == ',' || s[n] == 0)) return;
  if (len + n + 6 < cap) snprintf(list + len, cap - len, "%s%s", len ? ", " : "", op);
  else if (len + 5 < cap && strcmp(list + len - 3, "...") != 0) snprintf(list + len, cap - len, ", ...");
}

/* llvm: links the plan's kernels, starts the pool and sizes the scratch. */
static dc_status *load_kernels(void *be) {
  cpu_backend *c = be;
  const dc_module *m = c->m;
  const dc_plan_kernels *k = &c->s.plan->kernels;
  if (!c->use_llvm) return NULL; /* the reference kernels are linked in */
  c->fn = dc_calloc((size_t)m->nnodes + 1, sizeof *c->fn);
  if (!c->fn) return dc_nomem("loading kernels");
  DC_TRY(dc_cpu_code_load(c->s.path, k, m->nnodes, &c->code, c->fn));
  DC_TRY(dc_pool_create(c->s.opt->threads, &c->pool));
  /* beside other work, fall back to the caller alone (support/threadpool.c) */
  dc_pool_set_adaptive(c->pool, DC_POOL_ADAPT_STRAGGLE | DC_POOL_ADAPT_LOAD);
  for (int i = 0; i < k->nentries; i++)
    if (k->entries[i].scratch_bytes > c->scratch_stride) c->scratch_stride = k->entries[i].scratch_bytes;
  c->scratch_stride = (c->scratch_stride + 63) & ~(uint64_t)63;
  if (c->scratch_stride) {
    size_t bytes = (size_t)c->scratch_stride * (size_t)dc_pool_size(c->pool);
    if (posix_memalign((void **)&c->scratch, 64, bytes) != 0) return dc_nomem("allocating kernel scratch");
  }
  for (int i = 0; i < m->nnodes; i++) {
    const char *op = dc_op_get(m->nodes[i].op)->name;
    int ref = !(dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) && !dc_op_is_copy(m->nodes[i].op) && !c->fn[i];
    c->nreference += ref;
    if (ref) note_reference_op(c->reference_ops, sizeof c->reference_ops, op);
  }
  return NULL;
}

static void *input(void *be, int i) { return ((cpu_backend *)be)->host_in[i]; }
static float *output(void *be, int i) { return ((cpu_backend *)be)->host_out[i]; }

/* ---- a run ---- */
/* Value v is about to be written at its planned place: the highest byte used. */
static void *place(cpu_backend *c, int32_t v) {
  const dc_node *n = &c->m->nodes[v];
  uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
  if (end > c->arena_top[n->device]) c->arena_top[n->device] = end;
  return c->value[v];
}

static int has_uploads(const dc_module *m) {
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].op == OP_UPLOAD) return 1;
  return 0;
}

/* Tracing: inputs in or outputs out, one event per device that moved any
 * (the calling thread does them, serially with the compute stream). */
static void record_copies(cpu_backend *c, drt_event_kind kind, const uint64_t *moved, double t0, double t1) {
  int nd = c->s.live->ndevices;
  for (int d = 0; d < nd; d++) {
    if (!moved[d]) continue;
    int32_t slot = kind == DRT_EVENT_INPUTS ? drt_trace_inputs_slot(d)
                                            : drt_trace_outputs_slot(c->first, c->end, nd, d);
    c->trace[slot] = (drt_trace_event){.kind = kind, .step = -1, .device = d, .stream = DRT_STREAM_COPY,
                                       .start = t0, .end = t1, .bytes = moved[d], .arena_top = c->arena_top[d]};
  }
}

/* Inputs host -> device, then the copy stream starts when there is
 * anything to upload. */
static dc_status *begin_run(void *be, double *step_seconds, drt_trace_event *trace, int32_t first, int32_t end) {
  cpu_backend *c = be;
  const dc_module *m = c->m;
  memset(c->arena_top, 0, sizeof c->arena_top);
  c->step_seconds = step_seconds;
  c->trace = trace;
  c->first = first, c->end = end;
  double t0 = trace ? dc_now_seconds() : 0;
  uint64_t moved[DC_MAX_DEVICES] = {0};
  for (int i = 0; i < m->ninputs; i++) {
    int32_t v = m->inputs[i].node;
    if (v < first || v >= end) continue;
    memcpy(place(c, v), c->host_in[i], dc_type_bytes(&m->nodes[v].type));
    moved[m->nodes[v].device] += dc_type_bytes(&m->nodes[v].type);
  }
  if (trace) record_copies(c, DRT_EVENT_INPUTS, moved, t0, dc_now_seconds());
  if (!has_uploads(m)) return NULL;
  drt_trace_event *step_slots = trace ? trace + drt_trace_step_slot(first, c->s.live->ndevices, first) : NULL;
  DC_TRY(dc_copy_stream_start(&c->copies, c->s.path, m, c->s.host, c->arena, step_seconds, step_slots, first, end,
                                    c->pool));
  c->copying = 1;
  return NULL;
}

typedef struct {
  dc_cpu_kernel_fn fn;
  void *bufs[DC_MAX_INPUTS + 2];
  int nbufs; /* output + inputs; the scratch slot follows */
  uint8_t *scratch;
  uint64_t stride;
} launch;

/* One part of a step: the kernel's (tid, nthreads) split is its (part,
 * nparts); the scratch is the running thread's. */
static void run_part(void *ctx, int64_t part, int64_t nparts, int thread) {
  const launch *l = ctx;
  void *bufs[DC_MAX_INPUTS + 2];
  memcpy(bufs, l->bufs, sizeof bufs);
  bufs[l->nbufs] = l->scratch ? l->scratch + (uint64_t)thread * l->stride : NULL;
  l->fn(bufs, part, nparts);
}

/* A step is split across threads only when each thread's share is worth
 * waking it for: waking a sleeping worker and joining it costs some 5-50 µs,
 * about what one core takes to move SPLIT_BYTES.  Work is the bytes a step
 * reads and writes plus, for the matrix ops, their multiply-adds at
 * FLOPS_PER_BYTE per byte's time (ir/flops.c counts them the same way).
 * A reshape or a small add then runs on the calling thread alone (issue 11:
 * split, a reshape cost more in waking and joining than in copying). */
#define SPLIT_BYTES (64u << 10)
#define FLOPS_PER_BYTE 4u

static uint64_t step_work(const dc_module *m, const dc_node *n) {
  uint64_t bytes = dc_type_bytes(&n->type), flops = 0;
  for (int k = 0; k < n->ninputs; k++) bytes += dc_type_bytes(&m->nodes[n->inputs[k]].type);
  const dc_type *a = n->ninputs > 0 ? &m->nodes[n->inputs[0]].type : NULL;
  const dc_type *b = n->ninputs > 1 ? &m->nodes[n->inputs[1]].type : NULL;
  if (n->op == OP_CONV2D || n->op == OP_CONV3D) /* w [O, C, k...] (or [O, kh, kw, C]): 2·out·C·k... */
    flops = 2 * dc_type_numel(&n->type) * (dc_type_numel(b) / (uint64_t)b->dims[0]);
  else if (n->op == OP_LINEAR) /* w [N, K]: 2·rows·N·K */
    flops = 2 * (dc_type_numel(a) / (uint64_t)b->dims[1]) * dc_type_numel(b);
  else if (n->op == OP_ATTENTION || n->op == OP_ATTENTION_BIAS) /* q [B, Sq, H·D], k [B, Sk, H·D]: 4·B·Sq·Sk·H·D */
    flops = 4 * dc_type_numel(a) * (uint64_t)b->dims[1];
  else if (n->op == OP_CAUSAL_ATTENTION) /* half of that: query i meets keys 0..i */
    flops = 2 * dc_type_numel(a) * (uint64_t)(b->dims[1] + 1);
  else if (n->op == OP_EMBEDDING) /* the rows gathered, not the whole table */
    bytes = 2 * dc_type_bytes(&n->type) + dc_type_bytes(a);
  return bytes + flops / FLOPS_PER_BYTE;
}

static int threads_for(const cpu_backend *c, const dc_node *n) {
  uint64_t shares = step_work(c->m, n) / SPLIT_BYTES;
  int pool = dc_pool_size(c->pool);
  return shares >= (uint64_t)pool ? pool : shares < 1 ? 1 : (int)shares;
}

static dc_status *run_node(cpu_backend *c, int32_t s) {
  const dc_module *m = c->m;
  const dc_node *n = &m->nodes[s];
  void *out = place(c, s);
  if (c->use_llvm && c->fn[s]) {
    launch l = {c->fn[s], {out}, n->ninputs + 1, c->scratch, c->scratch_stride};
    for (int k = 0; k < n->ninputs; k++) l.bufs[k + 1] = c->value[n->inputs[k]];
    int threads = threads_for(c, n);
    /* one part per thread: threads claim parts as they get to them, so the
     * caller takes a part a late worker never started; more parts would
     * cost each kernel's per-part setup again (a GEMM packs its B panel,
     * the Winograd conv transforms its weights, once per part): 4 per
     * thread made the 2-thread VAE decode 37% slower on an idle machine
     * (bench/threads.md).  A thread preempted inside its part is what the
     * pool's adaptive modes handle. */
    dc_pool_run(c->pool, threads, threads, run_part, &l);
    return NULL;
  }
  const void *in[DC_MAX_INPUTS];
  for (int k = 0; k < n->ninputs; k++) in[k] = c->value[n->inputs[k]];
  dc_status *st = dc_ref_run(m, n, in, out);
  if (st) return dc_status_annotate(st, "step %%%d (%s, %s)", s, dc_op_get(n->op)->name, n->scope ? n->scope : "");
  return NULL;
}

/* Tracing: step s ran on the calling thread, the compute stream, from t0 to t1. */
static void record_step(cpu_backend *c, int32_t s, double t0, double t1) {
  const dc_node *n = &c->m->nodes[s];
  int transfer = n->op == OP_TRANSFER;
  drt_trace_event *e = &c->trace[drt_trace_step_slot(c->first, c->s.live->ndevices, s)];
  *e = (drt_trace_event){.kind = transfer ? DRT_EVENT_TRANSFER : DRT_EVENT_KERNEL, .step = s, .device = n->device,
                         .stream = DRT_STREAM_COMPUTE, .start = t0, .end = t1,
                         .bytes = transfer ? dc_type_bytes(&n->type) : 0, .arena_top = c->arena_top[n->device]};
}

/* A kernel step on the compute stream, once the uploads it reads are in
 * place.  A transfer is one too (its reference kernel copies between the
 * two arenas), and so is a constant (its kernel places its bytes). */
static dc_status *run_step(void *be, int32_t s) {
  cpu_backend *c = be;
  if (c->copying) DC_TRY(dc_copy_stream_wait(&c->copies, &c->m->nodes[s]));
  double t0 = c->step_seconds || c->trace ? dc_now_seconds() : 0;
  DC_TRY(run_node(c, s));
  if (c->step_seconds || c->trace) {
    double t1 = dc_now_seconds();
    if (c->step_seconds) c->step_seconds[s] += t1 - t0;
    if (c->trace) record_step(c, s, t0, t1);
  }
  if (c->s.check_step) DC_TRY(c->s.check_step(c->s.check_ctx, s, c->value[s]));
  return NULL;
}

/* An upload: the compute stream has got this far; the copy stream runs it. */
static dc_status *copy(void *be, int32_t s) {
  cpu_backend *c = be;
  dc_copy_stream_may_start(&c->copies, s);
  return NULL;
}

/* The copy stream stopped and joined, then outputs device -> host. */
static dc_status *synchronise(void *be, dc_status *st) {
  cpu_backend *c = be;
  const dc_module *m = c->m;
  if (c->copying) st = dc_copy_stream_stop(&c->copies, st, c->arena_top);
  c->copying = 0;
  if (st) return st;
  double t0 = c->trace ? dc_now_seconds() : 0;
  uint64_t moved[DC_MAX_DEVICES] = {0};
  for (int i = 0; i < m->noutputs; i++) {
    int32_t v = m->outputs[i].node;
    if (v < c->first || v >= c->end) continue;
    memcpy(c->host_out[i], c->value[v], dc_type_bytes(&m->nodes[v].type));
    moved[m->nodes[v].device] += dc_type_bytes(&m->nodes[v].type);
  }
  if (c->trace) record_copies(c, DRT_EVENT_OUTPUTS, moved, t0, dc_now_seconds());
  return NULL;
}

/* Each arena's measured peak; cpu worker threads; the steps with no
 * compiled kernel.  Offloaded weights wait in ordinary memory standing in
 * for pinned memory: pinned_bytes. */
static void stats(const void *be, drt_stats *st) {
  const cpu_backend *c = be;
  const dc_liveness *live = c->s.live;
  st->device_peak_bytes = 0;
  for (int d = 0; d < live->ndevices; d++) {
    st->dev_peak_bytes[d] = c->arena_top[d];
    if (c->arena_top[d] > st->device_peak_bytes) st->device_peak_bytes = c->arena_top[d];
    st->device_total_bytes += live->dev_peak[d];
  }
  st->pinned_bytes = dc_host_weights_held(c->s.host);
  st->threads = c->pool ? dc_pool_size(c->pool) : 1;
  st->reference_steps = c->use_llvm ? c->nreference : 0;
  st->reference_ops = c->use_llvm ? c->reference_ops : "";
}

static const char *device(const void *be) {
  (void)be;
  return "";
}

static void destroy(void *be) {
  cpu_backend *c = be;
  if (!c) return;
  for (int i = 0; c->host_in && i < c->m->ninputs; i++) dc_free(c->host_in[i]);
  for (int i = 0; c->host_out && i < c->m->noutputs; i++) dc_free(c->host_out[i]);
  dc_pool_destroy(c->pool);
  dc_cpu_code_destroy(c->code);
  free(c->scratch);
  dc_free(c->fn);
  dc_free(c->value);
  for (int d = 0; d < DC_MAX_DEVICES; d++) dc_free(c->arena_block[d]);
  dc_free(c->host_in);
  dc_free(c->host_out);
  dc_free(c);
}

#define CPU_BACKEND(NAME, CREATE)                                                                                    \
  {.name = NAME, .reads_weights_in_place = 1, .create = CREATE, .arena = allocate, .upload_weights = upload_weights, \
   .load_kernels = load_kernels, .input = input, .output = output, .begin_run = begin_run, .run_step = run_step,     \
   .copy = copy, .transfer = run_step, .synchronise = synchronise, .stats = stats, .device = device,               \
   .destroy = destroy}

const drt_backend_i drt_backend_reference = CPU_BACKEND("reference", create_reference);
const drt_backend_i drt_backend_llvm = CPU_BACKEND("llvm", create_llvm);
