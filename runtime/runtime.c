/* runtime.c — the session behind diffrun.h: loads a plan and checks it
 * (format, signature, the memory plan), binds its weight files and verifies
 * their bytes, hands the plan to the backend that runs it, walks the
 * schedule through that backend's table (backend.h) and reports what a run
 * did.  It never asks which backend it holds: the reference and llvm
 * backends (cpu_backend.c) and the cuda backend (cuda_backend_iface.c)
 * differ behind the table only, and backend.c chooses among them.
 *
 * The device-memory model every backend follows is docs/ARCHITECTURE.md's:
 * one arena per device at the size the memory plan gives it, every
 * activation at its device's arena + its planned offset, inputs copied in
 * when a run starts and outputs out at its end; the plan is checked before
 * anything runs on it (dc_memplan_check: no two values live at the same
 * time overlap), so a wrong plan is an error, not corrupted memory. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "backend.h"
#include "diffrun.h"
#include "budget_summary.h"
#include "host_weights.h"
#include "session.h"
#include "plan/plan_format.h"
#include "trace.h"

_Static_assert(DC_MAX_DEVICES == 8, "drt_stats' per-device arrays hold 8 devices");

struct drt_plan {
  char *path;
  drt_options opt;             /* the caller's (zeroes when none); its strings are read by drt_load only */
  dc_plan plan;
  dc_liveness live;
  dc_mapped_file *files;       /* per weight file, mapped (unmapped once no backend reads it) */
  drt_tensor_info *in_info, *out_info;
  dc_host_weights host;        /* offloaded weights: pinned block or on-demand reads (--host-memory) */
  const drt_backend_i *be;     /* the backend's table, and its state */
  void *backend;
  double *step_seconds;        /* per node, when profiling */
  /* Tracing (drt_set_tracing): the events of every run since it was turned
   * on, each run's block led by its PHASE event; trace_origin is the clock
   * at the first traced run's start (0 before it). */
  int tracing;
  drt_trace_event *trace;
  int32_t ntrace, trace_cap, trace_runs;
  int32_t phase_runs[DC_MAX_PHASES + 1]; /* per phase (the last: the whole plan): runs traced */
  double trace_origin;
  int inspect;                 /* loaded for drt_info only: no backend */
  drt_plan_info info;
  char archs[512];
  double verify_seconds; /* hashing the weights' bytes at load (0 when skipped) */
  uint64_t verified_bytes;
  char signature[600];   /* drt_plan_info.signature */
  char memory_budget[600]; /* drt_plan_info.memory_budget */
};

/* ---- loading ---- */
static dc_status *bind_file(const char *plan_path, const dc_weight_file *wf, dc_mapped_file *bf) {
  dc_status *st = dc_file_map(wf->path, bf);
  if (st)
    return dc_status_annotate(st, "%s: weight file named by the plan cannot be opened (moved or deleted since compile?)",
                              plan_path);
  const char *hint = "recompile the plan with diffc against the current weights";
  if (bf->size != wf->file_size)
    return dc_error(DC_ERR_MISMATCH, "%s: weight file %s changed since compile (it is %zu bytes, was %llu); %s",
                    plan_path, wf->path, bf->size, (unsigned long long)wf->file_size, hint);
  uint64_t n = 0;
  for (int i = 0; i < 8 && bf->size >= 8; i++) n |= (uint64_t)bf->data[i] << (8 * i);
  if (bf->size < 8 || n > bf->size - 8 || dc_hash64(bf->data, 8 + n) != wf->header_hash)
    return dc_error(DC_ERR_MISMATCH, "%s: weight file %s changed since compile (its safetensors header differs); %s",
                    plan_path, wf->path, hint);
  return NULL;
}

/* The content check: every tensor the plan reads is hashed (XXH3) from the
 * mapping the run will read and compared with the hash diffc took when it
 * wrote the plan.  Nothing is cached: a hash keyed on size and mtime would
 * prove nothing.  The tensors are shared out among threads (one thread
 * reaches only part of the memory bandwidth), and each tensor's pages are
 * released from the resident set once hashed (dc_file_release). */
typedef struct {
  const dc_module *m;
  const dc_mapped_file *files;
  uint8_t *changed; /* per weight */
  atomic_int next;
} verify_job;

static void *verify_worker(void *arg) {
  verify_job *j = arg;
  for (int w; (w = atomic_fetch_add(&j->next, 1)) < j->m->nweights;) {
    const dc_weight *wt = &j->m->weights[w];
    j->changed[w] = XXH3_64bits(j->files[wt->file].data + wt->offset, (size_t)wt->bytes) != wt->content_hash;
    /* hashed once: its pages leave the resident set until a kernel or an
     * upload reads them (a 12B model's 14 GiB of offloaded weights would
     * otherwise stay mapped in, 14 GiB of RSS for weights read from disk) */
    dc_file_release(&j->files[wt->file], wt->offset, wt->bytes);
  }
  return NULL;
}

static void hash_all(verify_job *j, int threads) {
  pthread_t t[16];
  int n = 0;
  if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads > 16) threads = 16;
  while (n < threads - 1 && pthread_create(&t[n], NULL, verify_worker, j) == 0) n++;
  verify_worker(j); /* this thread too; fewer helpers if some did not start */
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

/* Refuses the plan at the first file holding a changed tensor, naming the
 * first one in the file and how many more there are. */
static dc_status *verify_contents(const char *plan_path, const dc_module *m, const dc_mapped_file *files, int threads) {
  verify_job j = {m, files, dc_calloc((size_t)m->nweights + 1, 1), 0};
  if (!j.changed) return dc_nomem("checking the weights");
  hash_all(&j, threads);
  dc_status *st = NULL;
  for (int32_t f = 0; f < m->nfiles && !st; f++) {
    int32_t first = -1, changed = 0;
    for (int32_t w = 0; w < m->nweights; w++) {
      if (m->weights[w].file != f || !j.changed[w]) continue;
      if (first < 0 || m->weights[w].offset < m->weights[first].offset) first = w;
      changed++;
    }
    if (!changed) continue;
    const dc_weight *wt = &m->weights[first];
    char more[64] = "";
    if (changed > 1) snprintf(more, sizeof more, " (and %d more tensor%s)", changed - 1, changed > 2 ? "s" : "");
    st = dc_error(DC_ERR_MISMATCH,
                  "%s: weight file %s changed since compile: the bytes of tensor %s (%llu bytes at offset %llu) are not "
                  "the ones the plan was compiled against%s; the plan must be recompiled with diffc against the "
                  "current weights",
                  plan_path, m->files[f].path, wt->name, (unsigned long long)wt->bytes, (unsigned long long)wt->offset,
                  more);
  }
  dc_free(j.changed);
  return st;
}

static void fill_info(const dc_module *m, const dc_io *io, drt_tensor_info *info) {
  const dc_type *t = &m->nodes[io->node].type;
  info->name = io->name;
  info->rank = t->rank;
  memcpy(info->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
  info->numel = dc_type_numel(t);
  info->dtype = dc_dtype_name(t->dtype);
}

static dc_status *check_plan(drt_plan *p) {
  const dc_module *m = p->plan.module;
  DC_TRY(drt_check_target(&p->plan, p->path));
  for (int i = 0; i < m->ninputs; i++) {
    dc_dtype t = m->nodes[m->inputs[i].node].type.dtype;
    if (t != DT_F32 && !dc_dtype_is_int(t))
      return dc_error(DC_ERR_UNSUPPORTED, "%s: input \"%s\" is %s; diffrun takes f32, i32 and i64 inputs", p->path,
                      m->inputs[i].name, dc_dtype_name(t));
  }
  for (int i = 0; i < m->noutputs; i++) { /* drt_output hands out floats */
    dc_dtype t = m->nodes[m->outputs[i].node].type.dtype;
    if (t != DT_F32)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: output \"%s\" is %s; diffrun returns f32 outputs only", p->path,
                      m->outputs[i].name, dc_dtype_name(t));
  }
  return NULL;
}

/* The memory plan is trusted no more than the rest of the file. */
static dc_status *check_memory_plan(drt_plan *p) {
  const dc_module *m = p->plan.module;
  if (!p->live.planned)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: the plan has no memory plan (arena offsets); recompile it with this diffc",
                    p->path);
  return dc_status_annotate(dc_memplan_check(m, &p->live), "%s", p->path);
}

/* An upload copies its weight's bytes into its own arena slot: the two
 * sizes must agree, or a damaged plan would write past the slot. */
static dc_status *check_upload_sizes(const drt_plan *p) {
  const dc_module *m = p->plan.module;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op != OP_UPLOAD) continue;
    const dc_node *w = n->ninputs == 1 ? &m->nodes[n->inputs[0]] : NULL;
    if (!w || w->op != OP_WEIGHT || m->weights[w->ref].bytes != dc_type_bytes(&n->type))
      return dc_error(DC_ERR_FORMAT, "%s: upload step %%%d does not read one weight of its own size", p->path, (int)s);
  }
  return NULL;
}

/* The first element of step s's output y that is NaN or infinite, if any. */
static dc_status *check_finite(const drt_plan *p, int32_t s, const float *y) {
  const dc_node *n = &p->plan.module->nodes[s];
  if (n->type.dtype != DT_F32) return NULL;
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

/* ---- the backend ---- */
static dc_status *check_step_finite(void *ctx, int32_t step, const float *values) {
  return check_finite(ctx, step, values);
}

/* Resident weights where the backend reads them, then the weight files it
 * no longer needs unmapped: all of them when it copied the weights away,
 * else those that hold only offloaded weights (uploads read those through
 * host_weights, never the mapping). */
static dc_status *upload_weights(drt_plan *p) {
  const dc_module *m = p->plan.module;
  const void **data = dc_calloc((size_t)m->nweights + 1, sizeof *data);
  if (!data) return dc_nomem("binding weights");
  for (int w = 0; w < m->nweights; w++) data[w] = p->files[m->weights[w].file].data + m->weights[w].offset;
  dc_status *st = p->be->upload_weights(p->backend, data);
  dc_free(data);
  DC_TRY(st);
  for (int f = 0; f < m->nfiles; f++) {
    int needed = 0;
    for (int w = 0; w < m->nweights && !needed && p->be->reads_weights_in_place; w++)
      needed = m->weights[w].file == f && !p->host.offloaded[w];
    if (!needed) dc_file_unmap(&p->files[f]);
  }
  return NULL;
}

/* The backend the options ask for (or the plan's own), set up through its
 * table: created, its arenas allocated, the weights bound, the kernels
 * loaded.  The uploads and host weights are the session's to check, for
 * every backend alike. */
static dc_status *open_backend(drt_plan *p) {
  DC_TRY(drt_backend_choose(&p->plan, p->path, p->opt.backend, &p->be));
  DC_TRY(check_upload_sizes(p));
  DC_TRY(dc_host_weights_init(&p->host, p->path, p->plan.module));
  drt_backend_setup s = {p->path, &p->plan, &p->live, &p->host, &p->opt,
                         p->opt.check_finite ? check_step_finite : NULL, p};
  DC_TRY(p->be->create(&s, &p->backend));
  DC_TRY(p->be->arena(p->backend));
  DC_TRY(upload_weights(p));
  DC_TRY(p->be->load_kernels(p->backend));
  p->info.backend = p->be->name;
  p->info.device = p->be->device(p->backend);
  const char *warning = p->be->warning ? p->be->warning(p->backend) : NULL;
  p->info.warning = warning ? warning : "";
  return NULL;
}

/* drt_info's fields that the plan alone gives. */
static void describe(drt_plan *p) {
  drt_plan_info *in = &p->info;
  in->flops = dc_module_flops(p->plan.module);
  in->backend = "";
  in->device = "";
  in->verified_bytes = p->verified_bytes;
  in->verify_seconds = p->verify_seconds;
  in->signature = p->signature;
  dc_budget_summary(p->plan.options_json, p->memory_budget, sizeof p->memory_budget);
  in->memory_budget = p->memory_budget;
  drt_describe_target(&p->plan, in, p->archs, sizeof p->archs);
}

/* The plan file; with trusted keys, only when one of them signed it. */
static dc_status *read_plan(drt_plan *p, const char *trusted_keys) {
  dc_trusted_keys keys = {0};
  if (trusted_keys) DC_TRY(dc_trusted_keys_load(trusted_keys, &keys));
  dc_status *st = dc_plan_read_trusted(p->path, trusted_keys ? &keys : NULL, &p->plan);
  char id[17];
  dc_key_id(p->plan.signer, id);
  if (!p->plan.is_signed) snprintf(p->signature, sizeof p->signature, "none");
  else if (p->plan.signature_verified)
    snprintf(p->signature, sizeof p->signature, "Ed25519 key %s, verified against --trusted-keys %s", id, keys.path);
  else
    snprintf(p->signature, sizeof p->signature, "Ed25519 key %s (not verified: no --trusted-keys)", id);
  if (trusted_keys) dc_trusted_keys_deinit(&keys);
  return st;
}

static dc_status *load(drt_plan *p) {
  DC_TRY(read_plan(p, p->opt.trusted_keys));
  DC_TRY(check_plan(p));
  const dc_module *m = p->plan.module;
  DC_TRY(dc_liveness_compute(m, &p->live));
  DC_TRY(check_memory_plan(p));
  p->files = dc_calloc((size_t)m->nfiles + 1, sizeof *p->files);
  p->in_info = dc_calloc((size_t)m->ninputs + 1, sizeof *p->in_info);
  p->out_info = dc_calloc((size_t)m->noutputs + 1, sizeof *p->out_info);
  if (!p->files || !p->in_info || !p->out_info) return dc_nomem("loading a plan");
  for (int i = 0; i < m->nfiles; i++) DC_TRY(bind_file(p->path, &m->files[i], &p->files[i]));
  /* --info and --print-ir run nothing: the size and header checks suffice */
  if (!p->inspect && !p->opt.no_verify_weights) {
    double t0 = dc_now_seconds();
    DC_TRY(verify_contents(p->path, m, p->files, p->opt.threads));
    p->verify_seconds = dc_now_seconds() - t0;
    for (int32_t w = 0; w < m->nweights; w++) p->verified_bytes += m->weights[w].bytes;
  }
  for (int i = 0; i < m->ninputs; i++) fill_info(m, &m->inputs[i], &p->in_info[i]);
  for (int i = 0; i < m->noutputs; i++) fill_info(m, &m->outputs[i], &p->out_info[i]);
  describe(p);
  return p->inspect ? NULL : open_backend(p);
}

dc_status *drt_load(const char *path, const drt_options *opt, drt_plan **out) {
  *out = NULL;
  drt_plan *p = dc_calloc(1, sizeof *p);
  if (!p) return dc_nomem("loading a plan");
  p->path = dc_strdup(path);
  if (opt) p->opt = *opt;
  p->inspect = p->opt.inspect;
  dc_status *st = p->path ? load(p) : dc_nomem("loading a plan");
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
  if (p->backend) p->be->destroy(p->backend);
  for (int i = 0; m && p->files && i < m->nfiles; i++) dc_file_unmap(&p->files[i]);
  dc_host_weights_deinit(&p->host);
  dc_free(p->step_seconds);
  dc_free(p->trace);
  dc_free(p->files);
  dc_free(p->in_info);
  dc_free(p->out_info);
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
const drt_plan_info *drt_info(const drt_plan *p) { return &p->info; }
const char *drt_note(const drt_plan *p, int i) {
  return p->backend && p->be->note ? p->be->note(p->backend, i) : NULL;
}
dc_status *drt_memory_timeline(const drt_plan *p, const struct dc_mem_series *measured, const char *path) {
  return dc_memory_timeline_write(p->plan.module, measured, path);
}

static int find_io(const dc_io *io, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(io[i].name, name) == 0) return i;
  return -1;
}

/* The embedding that reads input node `input` as its ids (directly, or
 * through reshapes and transfers, which move its bytes unchanged) with the
 * fewest table rows; -1 when none does. */
static int32_t ids_reader(const dc_module *m, int32_t input) {
  int32_t best = -1;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_EMBEDDING) continue;
    int32_t src = n->inputs[0];
    while (m->nodes[src].op == OP_RESHAPE || m->nodes[src].op == OP_TRANSFER) src = m->nodes[src].inputs[0];
    if (src == input && (best < 0 || m->nodes[n->inputs[1]].type.dims[0] < m->nodes[m->nodes[best].inputs[1]].type.dims[0]))
      best = i;
  }
  return best;
}

/* Token ids for an embedding must index its table.  The kernels would give
 * a zero row for any other (ops.def), which is no model's output: refused
 * here, before a run, naming the input, the index and the bound. */
static dc_status *check_ids(const drt_plan *p, int i, const void *data, size_t numel) {
  const dc_module *m = p->plan.module;
  int32_t e = ids_reader(m, m->inputs[i].node);
  if (e < 0) return NULL;
  dc_dtype t = m->nodes[m->inputs[i].node].type.dtype;
  int64_t rows = m->nodes[m->nodes[e].inputs[1]].type.dims[0];
  for (size_t k = 0; k < numel; k++) {
    int64_t id = t == DT_I32 ? ((const int32_t *)data)[k] : ((const int64_t *)data)[k];
    if (id < 0 || id >= rows)
      return dc_error(DC_ERR_ARGUMENT, "%s: input \"%s\"[%zu] is %lld, outside [0, %lld): the ids index the %lld rows "
                      "of %s", p->path, m->inputs[i].name, k, (long long)id, (long long)rows, (long long)rows,
                      m->nodes[e].scope ? m->nodes[e].scope : "an embedding table");
  }
  return NULL;
}

dc_status *drt_set_input_data(drt_plan *p, const char *name, const char *dtype, const void *data, size_t numel) {
  const dc_module *m = p->plan.module;
  int i = find_io(m->inputs, m->ninputs, name);
  if (i < 0) return dc_error(DC_ERR_ARGUMENT, "%s: the plan has no input \"%s\"", p->path, name);
  const dc_type *t = &m->nodes[m->inputs[i].node].type;
  if (strcmp(dtype, dc_dtype_name(t->dtype)) != 0)
    return dc_error(DC_ERR_MISMATCH, "%s: input \"%s\" is %s, but %s values were given", p->path, name,
                    dc_dtype_name(t->dtype), dtype);
  if (numel != p->in_info[i].numel)
    return dc_error(DC_ERR_MISMATCH, "%s: input \"%s\" needs %zu values, got %zu", p->path, name, p->in_info[i].numel, numel);
  if (p->inspect)
    return dc_error(DC_ERR_ARGUMENT, "%s: the plan was loaded for inspection only; it takes no inputs", p->path);
  if (dc_dtype_is_int(t->dtype)) DC_TRY(check_ids(p, i, data, numel));
  memcpy(p->be->input(p->backend, i), data, (size_t)dc_type_bytes(t));
  return NULL;
}

dc_status *drt_set_input(drt_plan *p, const char *name, const float *data, size_t numel) {
  return drt_set_input_data(p, name, "f32", data, numel);
}

const float *drt_output(const drt_plan *p, const char *name, size_t *numel) {
  const dc_module *m = p->plan.module;
  int i = find_io(m->outputs, m->noutputs, name);
  if (i < 0) return NULL;
  if (numel) *numel = p->out_info[i].numel;
  return p->inspect ? NULL : p->be->output(p->backend, i);
}

/* splitmix64 + Box-Muller: reproducible across machines, no libc rand. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double next_unit(uint64_t *s) { return ((double)(next_u64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* An integer input (token ids): uniform integers in [0, end). */
static void random_ints(void *d, dc_dtype t, size_t numel, int64_t end, uint64_t *s) {
  for (size_t k = 0; k < numel; k++) {
    int64_t v = (int64_t)(next_unit(s) * (double)end);
    if (t == DT_I32) ((int32_t *)d)[k] = (int32_t)v;
    else ((int64_t *)d)[k] = v;
  }
}

void drt_set_random_inputs(drt_plan *p, uint64_t seed) {
  const dc_module *m = p->plan.module;
  uint64_t s = seed;
  if (p->inspect) return; /* no input buffers */
  for (int i = 0; i < m->ninputs; i++) {
    dc_dtype t = m->nodes[m->inputs[i].node].type.dtype;
    if (dc_dtype_is_int(t)) { /* ids inside every table they index, as check_ids wants them */
      int32_t e = ids_reader(m, m->inputs[i].node);
      int64_t rows = e < 0 ? DRT_RANDOM_INT_END : m->nodes[m->nodes[e].inputs[1]].type.dims[0];
      random_ints(p->be->input(p->backend, i), t, p->in_info[i].numel, rows < DRT_RANDOM_INT_END ? rows : DRT_RANDOM_INT_END, &s);
      continue;
    }
    float *d = p->be->input(p->backend, i);
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

/* ---- a run ---- */
/* Every step in schedule order, through the table.  Inputs and weights
 * need no call: inputs were copied in by begin_run, weights bound at load.
 * A constant is a step like a kernel's: it places its bytes in the arena. */
static dc_status *walk_schedule(drt_plan *p, int32_t first, int32_t end) {
  const dc_module *m = p->plan.module;
  for (int32_t s = first; s < end; s++) {
    dc_op op = m->nodes[s].op;
    if (op == OP_INPUT || op == OP_WEIGHT) continue;
    dc_status *st = op == OP_UPLOAD     ? p->be->copy(p->backend, s)
                    : op == OP_TRANSFER ? p->be->transfer(p->backend, s)
                                        : p->be->run_step(p->backend, s);
    if (st) return st;
  }
  return NULL;
}

/* The plan's own figures; then the backend adds what it measured. */
static void fill_stats(const drt_plan *p, double seconds, drt_stats *stats, int32_t first, int32_t end) {
  const dc_module *m = p->plan.module;
  memset(stats, 0, sizeof *stats);
  stats->seconds = seconds;
  stats->cublaslt_note = stats->cublaslt_cache = ""; /* the cuda backend's stats fill them */
  stats->kernel_seconds = seconds; /* unless the backend times the device itself */
  stats->flops = (double)p->info.flops;
  stats->device_predicted_bytes = m->arena_bytes;
  stats->weight_bytes = p->live.weight_bytes;
  stats->host_weight_bytes = p->live.host_weight_bytes;
  stats->host_memory = p->host.on_demand ? "on-demand" : stats->host_weight_bytes ? "pinned" : "";
  for (int32_t i = first; i < end; i++) { /* the run's steps: all, or one phase's */
    if (m->nodes[i].op == OP_UPLOAD) stats->uploaded_bytes += dc_type_bytes(&m->nodes[i].type);
    if (m->nodes[i].op == OP_TRANSFER) stats->transferred_bytes += dc_type_bytes(&m->nodes[i].type);
  }
  stats->steps = end - first;
  stats->ndevices = p->live.ndevices;
  for (int d = 0; d < p->live.ndevices; d++) {
    stats->dev_predicted_bytes[d] = p->live.dev_peak[d];
    stats->dev_weight_bytes[d] = p->live.dev_weights[d];
  }
  stats->backend = p->be->name;
  p->be->stats(p->backend, stats);
}

/* ---- tracing ---- */
/* Room for one more run of steps [first, end): its PHASE event, then its
 * slots, cleared; grown here, before the run, never while it records. */
static dc_status *trace_reserve(drt_plan *p, int32_t first, int32_t end, drt_trace_event **slots) {
  int32_t need = p->ntrace + 1 + drt_trace_slots(first, end, p->live.ndevices);
  if (need > p->trace_cap) {
    int32_t chunk = 1 + drt_trace_slots(0, p->plan.module->nnodes, p->live.ndevices);
    int32_t cap = p->trace_cap + chunk > need ? p->trace_cap + chunk : need;
    drt_trace_event *grown = dc_realloc(p->trace, (size_t)cap * sizeof *grown);
    if (!grown) return dc_nomem("recording the run trace");
    p->trace = grown, p->trace_cap = cap;
  }
  *slots = p->trace + p->ntrace + 1;
  memset(*slots, 0, (size_t)drt_trace_slots(first, end, p->live.ndevices) * sizeof **slots);
  return NULL;
}

/* A run that succeeded: its PHASE event, then the slots it filled, packed
 * (in time order on each track: inputs, steps, outputs), on the trace's
 * clock, with each kernel's arithmetic and traffic. */
static void trace_commit(drt_plan *p, int phase, int32_t first, int32_t end, double t0, double t1) {
  const dc_module *m = p->plan.module;
  if (!p->trace_runs) p->trace_origin = t0;
  int which = phase < 0 ? DC_MAX_PHASES : phase;
  drt_trace_event *slots = p->trace + p->ntrace + 1;
  int32_t nslots = drt_trace_slots(first, end, p->live.ndevices), w = p->ntrace;
  p->trace[w++] = (drt_trace_event){.kind = DRT_EVENT_PHASE, .step = phase, .run = p->trace_runs,
                                    .iteration = p->phase_runs[which]++, .stream = DRT_STREAM_COMPUTE,
                                    .start = t0 - p->trace_origin, .end = t1 - p->trace_origin};
  for (int32_t i = 0; i < nslots; i++) {
    drt_trace_event e = slots[i];
    if (e.kind == DRT_EVENT_NONE) continue;
    e.run = p->trace_runs;
    e.start -= p->trace_origin, e.end -= p->trace_origin;
    if (e.kind == DRT_EVENT_KERNEL) {
      e.flops = dc_node_flops(m, e.step);
      e.bytes = dc_node_traffic_bytes(m, e.step);
    }
    p->trace[w++] = e; /* w <= the slot's own index: packing never overwrites an unread slot */
  }
  p->ntrace = w;
  p->trace_runs++;
}

/* Steps [first, end) (phase `phase`, -1 for the whole plan without
 * phases): their inputs in, the steps, their outputs out. */
static dc_status *run_span(drt_plan *p, int phase, int32_t first, int32_t end) {
  if (p->inspect)
    return dc_error(DC_ERR_ARGUMENT, "%s: the plan was loaded for inspection only (drt_options.inspect); load it again "
                    "to run it", p->path);
  drt_trace_event *slots = NULL;
  if (p->tracing) DC_TRY(trace_reserve(p, first, end, &slots));
  double t0 = slots ? dc_now_seconds() : 0;
  dc_status *st = p->be->begin_run(p->backend, p->step_seconds, slots, first, end);
  if (!st) st = walk_schedule(p, first, end);
  st = p->be->synchronise(p->backend, st);
  if (slots && !st) trace_commit(p, phase, first, end, t0, dc_now_seconds());
  return st;
}

/* Every phase once, in order (the whole schedule when there are none):
 * each phase's inputs are copied in just before it runs. */
dc_status *drt_run(drt_plan *p, drt_stats *stats) {
  const dc_module *m = p->plan.module;
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  double t0 = dc_now_seconds();
  dc_status *st = NULL;
  drt_stats most = {0}, one;
  for (int32_t ph = 0; ph < (m->nphases ? m->nphases : 1) && !st; ph++) {
    if (m->nphases && first[ph] == end[ph]) continue;
    st = run_span(p, m->nphases ? ph : -1, first[ph], end[ph]);
    if (st || !stats) continue;
    fill_stats(p, 0, &one, first[ph], end[ph]); /* each phase's measured arena: the run's is the most */
    if (one.device_peak_bytes > most.device_peak_bytes) most.device_peak_bytes = one.device_peak_bytes;
    for (int d = 0; d < one.ndevices && d < DC_MAX_DEVICES; d++)
      if (one.dev_peak_bytes[d] > most.dev_peak_bytes[d]) most.dev_peak_bytes[d] = one.dev_peak_bytes[d];
  }
  double t1 = dc_now_seconds();
  if (st) return st;
  if (!stats) return NULL;
  fill_stats(p, t1 - t0, stats, 0, m->nnodes);
  stats->device_peak_bytes = most.device_peak_bytes;
  memcpy(stats->dev_peak_bytes, most.dev_peak_bytes, sizeof most.dev_peak_bytes);
  return NULL;
}

int drt_phase_count(const drt_plan *p) { return p->plan.module->nphases; }
const char *drt_pipeline_json(const drt_plan *p) { return p->plan.pipeline_json; }
const char *drt_pipeline_file(const drt_plan *p, int i, const void **data, size_t *size) {
  const dc_text_files *fs = &p->plan.pipeline_files;
  if (i < 0 || i >= fs->nfiles) return NULL;
  *data = fs->files[i].data, *size = fs->files[i].size;
  return fs->files[i].name;
}
const char *drt_phase_name(const drt_plan *p, int i) {
  return i >= 0 && i < p->plan.module->nphases ? p->plan.module->phases[i].name : NULL;
}
int drt_phase_find(const drt_plan *p, const char *name) { return dc_phase_find(p->plan.module, name); }

dc_status *drt_run_phase(drt_plan *p, int phase, drt_stats *stats) {
  const dc_module *m = p->plan.module;
  if (phase < 0 || phase >= m->nphases)
    return dc_error(DC_ERR_ARGUMENT, "%s: no phase %d (the plan has %d)", p->path, phase, m->nphases);
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  double t0 = dc_now_seconds();
  DC_TRY(run_span(p, phase, first[phase], end[phase]));
  if (stats) fill_stats(p, dc_now_seconds() - t0, stats, first[phase], end[phase]);
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

double drt_step_seconds(const drt_plan *p, int step) {
  const dc_module *m = p->plan.module;
  if (!p->step_seconds || step < 0 || step >= m->nnodes) return 0;
  return p->step_seconds[step];
}

const dc_module *drt_plan_module(const drt_plan *p) { return p->plan.module; }
const char *drt_plan_path(const drt_plan *p) { return p->path; }
int drt_plan_device(const drt_plan *p) { return p->opt.device; }
const dc_plan *drt_plan_file(const drt_plan *p) { return &p->plan; }
uint64_t drt_plan_bounce_bytes(const drt_plan *p) { return p->opt.bounce_bytes; }

int drt_profile(const drt_plan *p, drt_step_time *out, int max) {
  const dc_module *m = p->plan.module;
  if (!p->step_seconds || max <= 0) return 0;
  drt_step_time *all = dc_calloc((size_t)m->nnodes + 1, sizeof *all);
  if (!all) return 0;
  int n = 0;
  for (int s = 0; s < m->nnodes; s++) {
    if (dc_op_get(m->nodes[s].op)->flags & OPF_LEAF) continue;
    all[n++] = (drt_step_time){s, dc_op_get(m->nodes[s].op)->name, m->nodes[s].scope ? m->nodes[s].scope : "",
                               dc_cost_class_name(dc_node_cost_class(m, s)), p->step_seconds[s]};
  }
  qsort(all, (size_t)n, sizeof *all, slower_first);
  if (n > max) n = max;
  memcpy(out, all, (size_t)n * sizeof *out);
  dc_free(all);
  return n;
}

/* ---- the run trace ---- */
dc_status *drt_set_tracing(drt_plan *p, int on) {
  dc_free(p->trace);
  p->trace = NULL;
  p->ntrace = p->trace_cap = p->trace_runs = 0;
  memset(p->phase_runs, 0, sizeof p->phase_runs);
  p->trace_origin = 0;
  p->tracing = on;
  if (!on || p->inspect) return NULL;
  /* one run of every step, reserved now: a plan without phases never grows it */
  p->trace_cap = 1 + drt_trace_slots(0, p->plan.module->nnodes, p->live.ndevices);
  p->trace = dc_calloc((size_t)p->trace_cap, sizeof *p->trace);
  if (!p->trace) p->tracing = 0, p->trace_cap = 0;
  return p->trace ? NULL : dc_nomem("recording the run trace");
}

int drt_trace_count(const drt_plan *p) { return p->ntrace; }

const drt_trace_event *drt_trace_event_at(const drt_plan *p, int i) {
  return i >= 0 && i < p->ntrace ? &p->trace[i] : NULL;
}

dc_status *drt_trace_write(const drt_plan *p, const char *path) {
  if (!p->ntrace)
    return dc_error(DC_ERR_ARGUMENT, "%s: no run was traced (drt_set_tracing before drt_run); %s not written", p->path,
                    path);
  const char *device = p->info.device && *p->info.device ? p->info.device : "cpu model";
  return dc_trace_write_json(p->plan.module, p->be->name, device, p->trace, p->ntrace, path);
}

dc_status *drt_memory_measured(const drt_plan *p, struct dc_mem_series *out) {
  if (!p->ntrace)
    return dc_error(DC_ERR_ARGUMENT, "%s: no run was traced (drt_set_tracing before drt_run): no measured memory",
                    p->path);
  return dc_trace_memory(p->plan.module, &p->live, p->trace, p->ntrace, out);
}
