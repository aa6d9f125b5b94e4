/* runtime.c — executes a plan on the CPU with the reference kernels, under
 * the device-memory model of DESIGN.md: "device memory" is one arena of the
 * size the plan's memory plan gives (pass memplan), allocated at load time;
 * every activation lives at arena + its planned offset; inputs are copied
 * from host buffers into the arena when a run starts, outputs back at the
 * end.  The plan is checked before anything runs on it (dc_memplan_check:
 * no two values live at the same time overlap), so a wrong plan is an error,
 * not corrupted memory.  The peak is measured, not copied: the highest arena
 * byte a value placed during the run occupied; it equals the plan's arena
 * size exactly when the plan is tight. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "diffrun.h"
#include "kernels.h"
#include "plan_format.h"
#include "threadpool.h"

typedef struct {
  dc_mapped_file map;
} bound_file;

struct drt_plan {
  char *path;
  dc_plan plan;
  dc_liveness live;
  bound_file *files;
  drt_tensor_info *in_info, *out_info;
  float **host_in, **host_out; /* user-facing copies */
  void **value;                /* per node: its data in the arena (or the mapped weight) */
  void *arena_block;           /* dc_malloc'd; the arena is it rounded up to 64 bytes */
  uint8_t *arena;
  uint64_t arena_top;          /* highest arena byte a value of this run occupied */
  /* The llvm backend: compiled kernels per node (NULL: reference kernel). */
  int use_llvm;
  dc_cpu_code *code;
  dc_cpu_kernel_fn *fn;
  dc_pool *pool;
  uint8_t *scratch;            /* nthreads x scratch_stride, host memory */
  uint64_t scratch_stride;
  int nreference;              /* nodes that run reference kernels */
  double *step_seconds;        /* per node, when profiling */
  int check_finite;
};

/* ---- loading ---- */
static dc_status *bind_file(const char *plan_path, const dc_weight_file *wf, bound_file *bf) {
  dc_status *st = dc_file_map(wf->path, &bf->map);
  if (st)
    return dc_status_annotate(st, "%s: weight file named by the plan cannot be opened (moved or deleted since compile?)",
                              plan_path);
  const char *hint = "recompile the plan with diffc against the current weights";
  if (bf->map.size != wf->file_size)
    return dc_error(DC_ERR_MISMATCH, "%s: weight file %s changed since compile (it is %zu bytes, was %llu); %s",
                    plan_path, wf->path, bf->map.size, (unsigned long long)wf->file_size, hint);
  uint64_t n = 0;
  for (int i = 0; i < 8 && bf->map.size >= 8; i++) n |= (uint64_t)bf->map.data[i] << (8 * i);
  if (bf->map.size < 8 || n > bf->map.size - 8 || dc_hash64(bf->map.data, 8 + n) != wf->header_hash)
    return dc_error(DC_ERR_MISMATCH, "%s: weight file %s changed since compile (its safetensors header differs); %s",
                    plan_path, wf->path, hint);
  return NULL;
}

static void fill_info(const dc_module *m, const dc_io *io, drt_tensor_info *info) {
  const dc_type *t = &m->nodes[io->node].type;
  info->name = io->name;
  info->rank = t->rank;
  memcpy(info->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
  info->numel = dc_type_numel(t);
}

static dc_status *check_plan(drt_plan *p) {
  const dc_module *m = p->plan.module;
  if (p->plan.target != DC_TARGET_CPU)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: the plan was built for target %u (cuda), but this diffrun runs CPU plans only",
                    p->path, p->plan.target);
  for (int i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (!(dc_op_get(n->op)->flags & OPF_LEAF) && !dc_ref_kernel_for(n->op))
      return dc_error(DC_ERR_UNSUPPORTED, "%s: op %s has no reference kernel", p->path, dc_op_get(n->op)->name);
  }
  for (int i = 0; i < m->ninputs; i++)
    if (m->nodes[m->inputs[i].node].type.dtype != DT_F32)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: input \"%s\" is not f32", p->path, m->inputs[i].name);
  return NULL;
}

/* The memory plan is trusted no more than the rest of the file. */
static dc_status *check_memory_plan(drt_plan *p) {
  const dc_module *m = p->plan.module;
  if (!p->live.planned)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: the plan has no memory plan (arena offsets); recompile it with this diffc",
                    p->path);
  DC_TRY(dc_status_annotate(dc_memplan_check(m, &p->live), "%s", p->path));
  p->arena_block = dc_malloc((size_t)m->arena_bytes + DC_ARENA_ALIGN - 1);
  if (!p->arena_block) return dc_nomem("allocating the device arena");
  p->arena = (uint8_t *)(((uintptr_t)p->arena_block + DC_ARENA_ALIGN - 1) & ~(uintptr_t)(DC_ARENA_ALIGN - 1));
  return NULL;
}

/* Links the plan's kernels, starts the pool and sizes the scratch. */
static dc_status *load_kernels(drt_plan *p, int threads) {
  const dc_module *m = p->plan.module;
  const dc_plan_kernels *k = &p->plan.kernels;
  p->fn = dc_calloc((size_t)m->nnodes + 1, sizeof *p->fn);
  if (!p->fn) return dc_nomem("loading kernels");
  DC_TRY(dc_cpu_code_load(p->path, k, m->nnodes, &p->code, p->fn));
  DC_TRY(dc_pool_create(threads, &p->pool));
  for (int i = 0; i < k->nentries; i++)
    if (k->entries[i].scratch_bytes > p->scratch_stride) p->scratch_stride = k->entries[i].scratch_bytes;
  p->scratch_stride = (p->scratch_stride + 63) & ~(uint64_t)63;
  if (p->scratch_stride) {
    size_t bytes = (size_t)p->scratch_stride * (size_t)dc_pool_size(p->pool);
    if (posix_memalign((void **)&p->scratch, 64, bytes) != 0) return dc_nomem("allocating kernel scratch");
  }
  for (int i = 0; i < m->nnodes; i++)
    p->nreference += !(dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) && !p->fn[i];
  return NULL;
}

static dc_status *choose_backend(drt_plan *p, const drt_options *opt) {
  const char *b = opt && opt->backend ? opt->backend : NULL;
  int has_kernels = p->plan.kernels.nobjects > 0;
  if (b && strcmp(b, "reference") != 0 && strcmp(b, "llvm") != 0)
    return dc_error(DC_ERR_ARGUMENT, "backend \"%s\" is not available (backends: llvm, reference)", b);
  if (b && !strcmp(b, "llvm") && !has_kernels)
    return dc_error(DC_ERR_ARGUMENT, "%s: the plan holds no compiled kernels; run it with --backend reference", p->path);
  p->use_llvm = has_kernels && !(b && !strcmp(b, "reference"));
  return p->use_llvm ? load_kernels(p, opt ? opt->threads : 0) : NULL;
}

static dc_status *load(drt_plan *p, const drt_options *opt) {
  DC_TRY(dc_plan_read(p->path, &p->plan));
  DC_TRY(check_plan(p));
  const dc_module *m = p->plan.module;
  DC_TRY(dc_liveness_compute(m, &p->live));
  DC_TRY(check_memory_plan(p));
  p->files = dc_calloc((size_t)m->nfiles + 1, sizeof *p->files);
  p->value = dc_calloc((size_t)m->nnodes + 1, sizeof *p->value);
  p->in_info = dc_calloc((size_t)m->ninputs + 1, sizeof *p->in_info);
  p->out_info = dc_calloc((size_t)m->noutputs + 1, sizeof *p->out_info);
  p->host_in = dc_calloc((size_t)m->ninputs + 1, sizeof *p->host_in);
  p->host_out = dc_calloc((size_t)m->noutputs + 1, sizeof *p->host_out);
  if (!p->files || !p->value || !p->in_info || !p->out_info || !p->host_in || !p->host_out)
    return dc_nomem("loading a plan");
  for (int i = 0; i < m->nfiles; i++) DC_TRY(bind_file(p->path, &m->files[i], &p->files[i]));
  for (int i = 0; i < m->ninputs; i++) {
    fill_info(m, &m->inputs[i], &p->in_info[i]);
    p->host_in[i] = dc_calloc(p->in_info[i].numel, sizeof(float));
    if (!p->host_in[i]) return dc_nomem("allocating inputs");
  }
  for (int i = 0; i < m->noutputs; i++) {
    fill_info(m, &m->outputs[i], &p->out_info[i]);
    p->host_out[i] = dc_calloc(p->out_info[i].numel, sizeof(float));
    if (!p->host_out[i]) return dc_nomem("allocating outputs");
  }
  return choose_backend(p, opt);
}

dc_status *drt_load(const char *path, const drt_options *opt, drt_plan **out) {
  *out = NULL;
  drt_plan *p = dc_calloc(1, sizeof *p);
  if (!p) return dc_nomem("loading a plan");
  p->path = dc_strdup(path);
  p->check_finite = opt && opt->check_finite;
  dc_status *st = p->path ? load(p, opt) : dc_nomem("loading a plan");
  if (st) {
    drt_destroy(p);
    return st;
  }
  *out = p;
  return NULL;
}

void drt_destroy(drt_plan *p) {
  if (!p) return;
  const dc_module *m = p->plan.module;
  if (m) {
    for (int i = 0; p->files && i < m->nfiles; i++) dc_file_unmap(&p->files[i].map);
    for (int i = 0; p->host_in && i < m->ninputs; i++) dc_free(p->host_in[i]);
    for (int i = 0; p->host_out && i < m->noutputs; i++) dc_free(p->host_out[i]);
  }
  dc_free(p->step_seconds);
  dc_pool_destroy(p->pool);
  dc_cpu_code_destroy(p->code);
  free(p->scratch);
  dc_free(p->fn);
  dc_free(p->files);
  dc_free(p->value);
  dc_free(p->arena_block);
  dc_free(p->in_info);
  dc_free(p->out_info);
  dc_free(p->host_in);
  dc_free(p->host_out);
  dc_liveness_deinit(&p->live);
  dc_plan_deinit(&p->plan);
  dc_free(p->path);
  dc_free(p);
}

/* ---- the signature ---- */
int drt_input_count(const drt_plan *p) { return p->plan.module->ninputs; }
int drt_output_count(const drt_plan *p) { return p->plan.module->noutputs; }
const drt_tensor_info *drt_input_info(const drt_plan *p, int i) { return &p->in_info[i]; }
const drt_tensor_info *drt_output_info(const drt_plan *p, int i) { return &p->out_info[i]; }
const char *drt_meta(const drt_plan *p, const char *key) { return dc_module_get_meta(p->plan.module, key); }
const char *drt_ir_text(const drt_plan *p) { return p->plan.ir_text; }

static int find_io(const dc_io *io, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(io[i].name, name) == 0) return i;
  return -1;
}

dc_status *drt_set_input(drt_plan *p, const char *name, const float *data, size_t numel) {
  const dc_module *m = p->plan.module;
  int i = find_io(m->inputs, m->ninputs, name);
  if (i < 0) return dc_error(DC_ERR_ARGUMENT, "%s: the plan has no input \"%s\"", p->path, name);
  if (numel != p->in_info[i].numel)
    return dc_error(DC_ERR_MISMATCH, "%s: input \"%s\" needs %zu values, got %zu", p->path, name, p->in_info[i].numel, numel);
  memcpy(p->host_in[i], data, numel * sizeof(float));
  return NULL;
}

const float *drt_output(const drt_plan *p, const char *name, size_t *numel) {
  const dc_module *m = p->plan.module;
  int i = find_io(m->outputs, m->noutputs, name);
  if (i < 0) return NULL;
  if (numel) *numel = p->out_info[i].numel;
  return p->host_out[i];
}

/* splitmix64 + Box-Muller: reproducible across machines, no libc rand. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double next_unit(uint64_t *s) { return ((double)(next_u64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void drt_set_random_inputs(drt_plan *p, uint64_t seed) {
  const dc_module *m = p->plan.module;
  uint64_t s = seed;
  for (int i = 0; i < m->ninputs; i++) {
    float *d = p->host_in[i];
    for (size_t k = 0; k < p->in_info[i].numel; k++) {
      if (m->inputs[i].init == INIT_TIMESTEP) {
        d[k] = (float)(int)(next_unit(&s) * 1000.0);
      } else {
        double u1 = next_unit(&s), u2 = next_unit(&s);
        d[k] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
      }
    }
  }
}

/* ---- execution ---- */
/* Puts value v at its planned place and records the highest byte used. */
static void *place(drt_plan *p, int32_t v) {
  const dc_node *n = &p->plan.module->nodes[v];
  uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
  if (end > p->arena_top) p->arena_top = end;
  return p->value[v] = p->arena + n->offset;
}

typedef struct {
  dc_cpu_kernel_fn fn;
  void *bufs[DC_MAX_INPUTS + 2];
  int nbufs; /* output + inputs; the scratch slot follows */
  uint8_t *scratch;
  uint64_t stride;
} launch;

static void run_on_thread(void *ctx, int64_t tid, int64_t nthreads) {
  const launch *l = ctx;
  void *bufs[DC_MAX_INPUTS + 2];
  memcpy(bufs, l->bufs, sizeof bufs);
  bufs[l->nbufs] = l->scratch ? l->scratch + (uint64_t)tid * l->stride : NULL;
  l->fn(bufs, tid, nthreads);
}

/* The first element of step s's output that is NaN or infinite, if any. */
static dc_status *check_finite(const drt_plan *p, int32_t s) {
  const dc_node *n = &p->plan.module->nodes[s];
  if (n->type.dtype != DT_F32) return NULL;
  const float *y = p->value[s];
  uint64_t count = dc_type_numel(&n->type);
  for (uint64_t i = 0; i < count; i++)
    if (!isfinite(y[i]))
      return dc_error(DC_ERR_MISMATCH,
                      "%s: step %%%d (%s, %s) produced %s at element %llu of %s; the steps before it were finite "
                      "(fp8/fp16 overflow or an attention softmax overflow are the usual causes)",
                      p->path, s, dc_op_get(n->op)->name, n->scope ? n->scope : "", isnan(y[i]) ? "NaN" : "Inf",
                      (unsigned long long)i, dc_type_str(&n->type, (char[160]){0}, 160));
  return NULL;
}

static dc_status *run_node(drt_plan *p, int32_t s) {
  const dc_module *m = p->plan.module;
  const dc_node *n = &m->nodes[s];
  void *out = place(p, s);
  if (p->use_llvm && p->fn[s]) {
    launch l = {p->fn[s], {out}, n->ninputs + 1, p->scratch, p->scratch_stride};
    for (int k = 0; k < n->ninputs; k++) l.bufs[k + 1] = p->value[n->inputs[k]];
    dc_pool_run(p->pool, run_on_thread, &l);
    return NULL;
  }
  const void *in[DC_MAX_INPUTS];
  for (int k = 0; k < n->ninputs; k++) in[k] = p->value[n->inputs[k]];
  dc_status *st = dc_ref_kernel_for(n->op)(m, n, in, out);
  if (st) return dc_status_annotate(st, "step %%%d (%s, %s)", s, dc_op_get(n->op)->name, n->scope ? n->scope : "");
  return NULL;
}

static dc_status *run_steps(drt_plan *p) {
  const dc_module *m = p->plan.module;
  for (int i = 0; i < m->ninputs; i++) { /* host -> device */
    int32_t v = m->inputs[i].node;
    memcpy(place(p, v), p->host_in[i], dc_type_bytes(&m->nodes[v].type));
  }
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT) {
      const dc_weight *w = &m->weights[n->ref];
      p->value[s] = (void *)(p->files[w->file].map.data + w->offset);
    } else if (n->op != OP_INPUT) {
      double t0 = p->step_seconds ? dc_now_seconds() : 0;
      DC_TRY(run_node(p, s));
      if (p->step_seconds) p->step_seconds[s] += dc_now_seconds() - t0;
      if (p->check_finite) DC_TRY(check_finite(p, s));
    }
  }
  for (int i = 0; i < m->noutputs; i++) { /* device -> host */
    int32_t v = m->outputs[i].node;
    memcpy(p->host_out[i], p->value[v], dc_type_bytes(&m->nodes[v].type));
  }
  return NULL;
}

dc_status *drt_run(drt_plan *p, drt_stats *stats) {
  p->arena_top = 0;
  double t0 = dc_now_seconds();
  dc_status *st = run_steps(p);
  double t1 = dc_now_seconds();
  if (st) return st;
  if (stats) {
    stats->seconds = t1 - t0;
    stats->device_peak_bytes = p->arena_top;
    stats->device_predicted_bytes = p->plan.module->arena_bytes;
    stats->weight_bytes = p->live.weight_bytes;
    stats->steps = p->plan.module->nnodes;
    stats->backend = p->use_llvm ? "llvm" : "reference";
    stats->threads = p->pool ? dc_pool_size(p->pool) : 1;
    stats->reference_steps = p->use_llvm ? p->nreference : 0;
  }
  return NULL;
}

/* ---- profiling ---- */
dc_status *drt_set_profiling(drt_plan *p, int on) {
  dc_free(p->step_seconds);
  p->step_seconds = NULL;
  if (!on) return NULL;
  p->step_seconds = dc_calloc((size_t)p->plan.module->nnodes + 1, sizeof *p->step_seconds);
  return p->step_seconds ? NULL : dc_nomem("profiling");
}

static int slower_first(const void *a, const void *b) {
  double x = ((const drt_step_time *)a)->seconds, y = ((const drt_step_time *)b)->seconds;
  return x < y ? 1 : x > y ? -1 : ((const drt_step_time *)a)->step - ((const drt_step_time *)b)->step;
}

int drt_profile(const drt_plan *p, drt_step_time *out, int max) {
  const dc_module *m = p->plan.module;
  if (!p->step_seconds || max <= 0) return 0;
  drt_step_time *all = dc_calloc((size_t)m->nnodes + 1, sizeof *all);
  if (!all) return 0;
  int n = 0;
  for (int s = 0; s < m->nnodes; s++) {
    if (dc_op_get(m->nodes[s].op)->flags & OPF_LEAF) continue;
    all[n++] = (drt_step_time){s, dc_op_get(m->nodes[s].op)->name, m->nodes[s].scope ? m->nodes[s].scope : "",
                               p->step_seconds[s]};
  }
  qsort(all, (size_t)n, sizeof *all, slower_first);
  if (n > max) n = max;
  memcpy(out, all, (size_t)n * sizeof *out);
  dc_free(all);
  return n;
}
