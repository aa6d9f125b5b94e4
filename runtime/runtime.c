/* runtime.c — executes a CPU plan with its compiled LLVM kernels (on the
 * thread pool) or, for any plan, with the plain C reference kernels, under
 * the device-memory model of docs/ARCHITECTURE.md: "device memory" is one arena of the
 * size the plan's memory plan gives (pass memplan), allocated at load time;
 * every activation lives at arena + its planned offset; inputs are copied
 * from host buffers into the arena when a run starts, outputs back at the
 * end.  The plan is checked before anything runs on it (dc_memplan_check:
 * no two values live at the same time overlap), so a wrong plan is an error,
 * not corrupted memory.  The peak is measured, not copied: the highest arena
 * byte a value placed during the run occupied; it equals the plan's arena
 * size exactly when the plan is tight.
 *
 * A CUDA plan (target DC_TARGET_CUDA) runs on the cuda backend
 * (cuda_backend.c: the same arena and offsets, on the GPU) unless the
 * reference backend is asked for: its module is the same, so the CPU
 * reference kernels run it too, for comparison. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cpu_kernels.h"
#include "cuda_backend.h"
#include "diffrun.h"
#include "fit_advice.h"
#include "host_weights.h"
#include "kernels.h"
#include "plan_format.h"
#include "threadpool.h"

_Static_assert(DC_MAX_DEVICES == 8, "drt_stats' per-device arrays hold 8 devices");

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
  dc_host_weights host;        /* offloaded weights: pinned block or on-demand reads (--host-memory) */
  /* One arena per device the plan places values on (--device-map; else
   * one): dc_malloc'd blocks, each arena its block rounded up to 64 bytes. */
  void *arena_block[DC_MAX_DEVICES];
  uint8_t *arena[DC_MAX_DEVICES];
  uint64_t arena_top[DC_MAX_DEVICES]; /* highest byte of each a value of this run occupied */
  /* The llvm backend: compiled kernels per node (NULL: reference kernel). */
  int use_llvm;
  dc_cpu_code *code;
  dc_cpu_kernel_fn *fn;
  dc_pool *pool;
  uint8_t *scratch;            /* nthreads x scratch_stride, host memory */
  uint64_t scratch_stride;
  int nreference;              /* nodes that run reference kernels */
  char reference_ops[96];      /* their ops, "blend, ..." (drt_stats.reference_ops) */
  double *step_seconds;        /* per node, when profiling */
  int check_finite;
  int inspect;                 /* loaded for drt_info only */
  /* The cuda backend: host_in/host_out are its pinned buffers then. */
  dc_cuda_backend *cuda;
  dc_cu_api cu_api;
  drt_plan_info info;
  char archs[512], device[400];
  double verify_seconds; /* hashing the weights' bytes at load (0 when skipped) */
  uint64_t verified_bytes;
  char signature[600];   /* drt_plan_info.signature */
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

/* The content check: every tensor the plan reads is hashed (XXH3) from the
 * mapping the run will read and compared with the hash diffc took when it
 * wrote the plan.  Nothing is cached: a hash keyed on size and mtime would
 * prove nothing.  The tensors are shared out among threads (one thread
 * reaches only part of the memory bandwidth). */
typedef struct {
  const dc_module *m;
  const bound_file *files;
  uint8_t *changed; /* per weight */
  atomic_int next;
} verify_job;

static void *verify_worker(void *arg) {
  verify_job *j = arg;
  for (int w; (w = atomic_fetch_add(&j->next, 1)) < j->m->nweights;) {
    const dc_weight *wt = &j->m->weights[w];
    j->changed[w] = XXH3_64bits(j->files[wt->file].map.data + wt->offset, (size_t)wt->bytes) != wt->content_hash;
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
static dc_status *verify_contents(const char *plan_path, const dc_module *m, const bound_file *files, int threads) {
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
  if (p->plan.target != DC_TARGET_CPU && p->plan.target != DC_TARGET_CUDA)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: the plan was built for target %u, which this diffrun does not know",
                    p->path, p->plan.target);
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

/* ---- the CPU backends ---- */
static dc_status *check_reference_kernels(const drt_plan *p) {
  const dc_module *m = p->plan.module;
  for (int i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (!(dc_op_get(n->op)->flags & OPF_LEAF) && !dc_ref_kernel_for(n->op))
      return dc_error(DC_ERR_UNSUPPORTED, "%s: op %s has no reference kernel", p->path, dc_op_get(n->op)->name);
  }
  return NULL;
}

/* The "device" arenas (one per device, each its planned size) and the host
 * copies of inputs and outputs. */
static dc_status *allocate_cpu(drt_plan *p) {
  const dc_module *m = p->plan.module;
  for (int d = 0; d < p->live.ndevices; d++) {
    p->arena_block[d] = dc_malloc((size_t)p->live.dev_peak[d] + DC_ARENA_ALIGN);
    if (!p->arena_block[d]) return dc_nomem("allocating the device arena");
    p->arena[d] = (uint8_t *)(((uintptr_t)p->arena_block[d] + DC_ARENA_ALIGN - 1) & ~(uintptr_t)(DC_ARENA_ALIGN - 1));
  }
  for (int i = 0; i < m->ninputs; i++) { /* f32 or integer: the input's own bytes */
    p->host_in[i] = dc_calloc(dc_type_bytes(&m->nodes[m->inputs[i].node].type) + 1, 1);
    if (!p->host_in[i]) return dc_nomem("allocating inputs");
  }
  for (int i = 0; i < m->noutputs; i++) {
    p->host_out[i] = dc_calloc(p->out_info[i].numel, sizeof(float));
    if (!p->host_out[i]) return dc_nomem("allocating outputs");
  }
  return NULL;
}

/* Links the plan's kernels, starts the pool and sizes the scratch. */
/* Adds op to the list "a, b" once (truncated with "..." if it ever fills). */
static void note_reference_op(char *list, size_t cap, const char *op) {
  size_t n = strlen(op), len = strlen(list);
  for (const char *s = strstr(list, op); s; s = strstr(s + 1, op))
    if ((s == list || s[-1] == ' ') && (s[n] == ',' || s[n] == 0)) return;
  if (len + n + 6 < cap) snprintf(list + len, cap - len, "%s%s", len ? ", " : "", op);
  else if (len + 5 < cap && strcmp(list + len - 3, "...") != 0) snprintf(list + len, cap - len, ", ...");
}

static dc_status *load_kernels(drt_plan *p, int threads) {
  const dc_module *m = p->plan.module;
  const dc_plan_kernels *k = &p->plan.kernels;
  p->fn = dc_calloc((size_t)m->nnodes + 1, sizeof *p->fn);
  if (!p->fn) return dc_nomem("loading kernels");
  DC_TRY(dc_cpu_code_load(p->path, k, m->nnodes, &p->code, p->fn));
  DC_TRY(dc_pool_create(threads, &p->pool));
  dc_pool_set_adaptive(p->pool, 1); /* beside other work, fall back to the caller alone (threadpool.c) */
  for (int i = 0; i < k->nentries; i++)
    if (k->entries[i].scratch_bytes > p->scratch_stride) p->scratch_stride = k->entries[i].scratch_bytes;
  p->scratch_stride = (p->scratch_stride + 63) & ~(uint64_t)63;
  if (p->scratch_stride) {
    size_t bytes = (size_t)p->scratch_stride * (size_t)dc_pool_size(p->pool);
    if (posix_memalign((void **)&p->scratch, 64, bytes) != 0) return dc_nomem("allocating kernel scratch");
  }
  for (int i = 0; i < m->nnodes; i++) {
    const char *op = dc_op_get(m->nodes[i].op)->name;
    int ref = !(dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) && !dc_op_is_copy(m->nodes[i].op) && !p->fn[i];
    p->nreference += ref;
    if (ref) note_reference_op(p->reference_ops, sizeof p->reference_ops, op);
  }
  return NULL;
}

/* A CUDA plan holds no CPU kernels: "llvm" then means the reference kernels. */
/* The modelled device (drt_options.device_memory) must hold the arena and
 * the resident weights; checked before anything is allocated or run. */
static dc_status *check_device_budget(const drt_plan *p, uint64_t budget) {
  int d = 0; /* the device that needs the most (each is one modelled device) */
  for (int k = 1; k < p->live.ndevices; k++)
    if (p->live.dev_weights[k] + p->live.dev_peak[k] > p->live.dev_weights[d] + p->live.dev_peak[d]) d = k;
  uint64_t arena = p->live.dev_peak[d], weights = p->live.dev_weights[d], need = arena + weights;
  if (!budget || need <= budget) return NULL;
  char advice[1024], b1[32], b2[32], b3[32], b4[32];
  dc_fit_advice(p->plan.options_json, budget, advice, sizeof advice);
  return dc_error(DC_ERR_NOMEM,
                  "%s: the plan needs %s of device memory (%llu bytes: activation arena %s + resident weights %s) but "
                  "the device has %s (--device-memory); nothing was run%s",
                  p->path, dc_format_bytes(need, b1, sizeof b1), (unsigned long long)need,
                  dc_format_bytes(arena, b2, sizeof b2), dc_format_bytes(weights, b3, sizeof b3),
                  dc_format_bytes(budget, b4, sizeof b4), advice);
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

/* Offloaded weights wait in host memory as the plan's host_memory says
 * (host_weights.h); a weight file that holds none a kernel reads is
 * unmapped then (resident weights are read in place from the mapping). */
static dc_status *bind_host_weights(drt_plan *p, const drt_options *opt) {
  const dc_module *m = p->plan.module;
  DC_TRY(check_upload_sizes(p));
  DC_TRY(dc_host_weights_init(&p->host, p->path, m));
  DC_TRY(dc_host_weights_stage(&p->host, opt ? opt->bounce_bytes : 0));
  for (int f = 0; f < m->nfiles; f++) {
    int needed = 0;
    for (int w = 0; w < m->nweights && !needed; w++) needed = m->weights[w].file == f && !p->host.offloaded[w];
    if (!needed) dc_file_unmap(&p->files[f].map);
  }
  return NULL;
}

static dc_status *setup_cpu(drt_plan *p, const drt_options *opt, const char *b) {
  int cpu_plan = p->plan.target == DC_TARGET_CPU, has_kernels = cpu_plan && p->plan.kernels.nobjects > 0;
  DC_TRY(check_device_budget(p, opt ? opt->device_memory : 0));
  if (b && !strcmp(b, "llvm") && cpu_plan && !has_kernels)
    return dc_error(DC_ERR_ARGUMENT, "%s: the plan holds no compiled kernels; run it with --backend reference", p->path);
  DC_TRY(check_reference_kernels(p));
  DC_TRY(allocate_cpu(p));
  DC_TRY(bind_host_weights(p, opt));
  p->use_llvm = has_kernels && !(b && !strcmp(b, "reference"));
  p->info.backend = p->use_llvm ? "llvm" : "reference";
  return p->use_llvm ? load_kernels(p, opt ? opt->threads : 0) : NULL;
}

/* ---- the cuda backend ---- */
static dc_status *check_step_finite(void *ctx, int32_t step, const float *values);

static dc_status *read_weight(void *ctx, int w, uint64_t at, void *dst, uint64_t len) {
  return dc_host_weights_read(ctx, w, at, dst, len);
}

static dc_status *setup_cuda(drt_plan *p, const drt_options *opt) {
  const dc_module *m = p->plan.module;
  for (int32_t i = 0; i < m->nnodes; i++) /* diffc refuses these at compile time (codegen/emit_cuda.c) */
    if (m->nodes[i].op == OP_CONSTANT)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: node %%%d is a constant, which the cuda backend does not place yet; "
                      "run the plan with --backend reference", p->path, (int)i);
  dc_status *st = dc_cu_api_open(NULL, &p->cu_api);
  if (st) {
    dc_status *msg = dc_error(dc_status_code_of(st),
                              "%s: this plan targets CUDA, and %s; --backend reference runs it on the CPU (plain C "
                              "kernels, slow), or compile with diffc --target cpu for this CPU",
                              p->path, dc_status_message(st));
    dc_status_free(st);
    return msg;
  }
  const void **data = dc_calloc((size_t)m->nweights + 1, sizeof *data);
  if (!data) return dc_nomem("binding weights");
  for (int w = 0; w < m->nweights; w++) data[w] = p->files[m->weights[w].file].map.data + m->weights[w].offset;
  dc_cuda_backend_options o = {opt ? opt->device : 0, 0, p->check_finite ? check_step_finite : NULL, p,
                               p->plan.options_json, read_weight, &p->host, opt ? opt->bounce_bytes : 0};
  st = check_upload_sizes(p);
  if (!st) st = dc_host_weights_init(&p->host, p->path, m);
  if (!st) st = dc_cuda_backend_create(p->path, m, &p->plan.cuda, data, &p->cu_api, &o, &p->cuda);
  dc_free(data);
  if (st) return st;
  /* pinned: the backend copied the offloaded weights into its pinned block;
   * on-demand: its uploads read them from the files kept open here. */
  if (!p->host.on_demand) dc_host_weights_deinit(&p->host);
  /* The weights live on the device now; their pages need not stay mapped. */
  for (int i = 0; i < m->nfiles; i++) dc_file_unmap(&p->files[i].map);
  for (int i = 0; i < m->ninputs; i++) p->host_in[i] = dc_cuda_backend_input(p->cuda, i);
  for (int i = 0; i < m->noutputs; i++) p->host_out[i] = dc_cuda_backend_output(p->cuda, i);
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(p->cuda);
  if (p->live.ndevices > 1) /* a --device-map plan: the GPUs it runs on, named by the first */
    snprintf(p->device, sizeof p->device, "devices %d..%d: %s (compute %d.%d), %s", o.device,
             o.device + p->live.ndevices - 1, bi->device_name, bi->cc_major, bi->cc_minor, bi->image);
  else
    snprintf(p->device, sizeof p->device, "device %d: %s (compute %d.%d), %s", o.device, bi->device_name, bi->cc_major,
             bi->cc_minor, bi->image);
  p->info.device = p->device;
  p->info.backend = "cuda";
  return NULL;
}

static dc_status *choose_backend(drt_plan *p, const drt_options *opt) {
  const char *b = opt && opt->backend ? opt->backend : NULL;
  if (b && strcmp(b, "reference") != 0 && strcmp(b, "llvm") != 0 && strcmp(b, "cuda") != 0)
    return dc_error(DC_ERR_ARGUMENT, "backend \"%s\" is not available (backends: cuda, llvm, reference)", b);
  int cuda_plan = p->plan.target == DC_TARGET_CUDA;
  if (b && !strcmp(b, "cuda") && !cuda_plan)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s: --backend cuda needs a plan compiled for CUDA, and this one targets the CPU; recompile "
                    "with diffc --target cuda (or run this one with --backend llvm or reference)",
                    p->path);
  if (cuda_plan && (!b || !strcmp(b, "cuda"))) return setup_cuda(p, opt);
  return setup_cpu(p, opt, b);
}

/* drt_info's fields that the plan alone gives. */
static void describe(drt_plan *p) {
  drt_plan_info *in = &p->info;
  in->flops = dc_module_flops(p->plan.module);
  in->backend = "";
  in->device = "";
  in->archs = p->archs;
  in->verified_bytes = p->verified_bytes;
  in->verify_seconds = p->verify_seconds;
  in->signature = p->signature;
  if (p->plan.target == DC_TARGET_CUDA) {
    in->target = "cuda";
    in->compute = p->plan.cuda.compute ? p->plan.cuda.compute : "f32";
    in->kernels = p->plan.cuda.nkernels;
    dc_plan_cuda_archs(&p->plan.cuda, p->archs, sizeof p->archs);
  } else {
    const dc_plan_kernels *k = &p->plan.kernels;
    in->target = "cpu";
    in->compute = "f32";
    in->kernels = k->nentries;
    if (k->triple) snprintf(p->archs, sizeof p->archs, "%s, cpu %s", k->triple, k->cpu ? k->cpu : "?");
  }
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

static dc_status *load(drt_plan *p, const drt_options *opt) {
  DC_TRY(read_plan(p, opt ? opt->trusted_keys : NULL));
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
  /* --info and --print-ir run nothing: the size and header checks suffice */
  if (!p->inspect && !(opt && opt->no_verify_weights)) {
    double t0 = dc_now_seconds();
    DC_TRY(verify_contents(p->path, m, p->files, opt ? opt->threads : 0));
    p->verify_seconds = dc_now_seconds() - t0;
    for (int32_t w = 0; w < m->nweights; w++) p->verified_bytes += m->weights[w].bytes;
  }
  for (int i = 0; i < m->ninputs; i++) fill_info(m, &m->inputs[i], &p->in_info[i]);
  for (int i = 0; i < m->noutputs; i++) fill_info(m, &m->outputs[i], &p->out_info[i]);
  describe(p);
  return p->inspect ? NULL : choose_backend(p, opt);
}

dc_status *drt_load(const char *path, const drt_options *opt, drt_plan **out) {
  *out = NULL;
  drt_plan *p = dc_calloc(1, sizeof *p);
  if (!p) return dc_nomem("loading a plan");
  p->path = dc_strdup(path);
  p->check_finite = opt && opt->check_finite;
  p->inspect = opt && opt->inspect;
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
    for (int i = 0; !p->cuda && p->host_in && i < m->ninputs; i++) dc_free(p->host_in[i]);
    for (int i = 0; !p->cuda && p->host_out && i < m->noutputs; i++) dc_free(p->host_out[i]);
  }
  dc_cuda_backend_destroy(p->cuda);
  dc_host_weights_deinit(&p->host);
  dc_cu_api_unload(&p->cu_api);
  dc_free(p->step_seconds);
  dc_pool_destroy(p->pool);
  dc_cpu_code_destroy(p->code);
  free(p->scratch);
  dc_free(p->fn);
  dc_free(p->files);
  dc_free(p->value);
  for (int d = 0; d < DC_MAX_DEVICES; d++) dc_free(p->arena_block[d]);
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
const drt_plan_info *drt_info(const drt_plan *p) { return &p->info; }

static int find_io(const dc_io *io, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(io[i].name, name) == 0) return i;
  return -1;
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
  memcpy(p->host_in[i], data, (size_t)dc_type_bytes(t));
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

/* An integer input (token ids): uniform integers in [0, DRT_RANDOM_INT_END). */
static void random_ints(void *d, dc_dtype t, size_t numel, uint64_t *s) {
  for (size_t k = 0; k < numel; k++) {
    int64_t v = (int64_t)(next_unit(s) * DRT_RANDOM_INT_END);
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
    if (dc_dtype_is_int(t)) {
      random_ints(p->host_in[i], t, p->in_info[i].numel, &s);
      continue;
    }
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
/* Where node n's value lives: its device's arena at its planned offset. */
static uint8_t *arena_at(const drt_plan *p, const dc_node *n) { return p->arena[n->device] + n->offset; }

static void *place(drt_plan *p, int32_t v) {
  const dc_node *n = &p->plan.module->nodes[v];
  uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
  if (end > p->arena_top[n->device]) p->arena_top[n->device] = end;
  return p->value[v] = arena_at(p, n);
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

/* A step is split across threads only when each thread's share is worth
 * waking it for: waking a sleeping worker and joining it costs some 5-50 µs,
 * about what one core takes to move SPLIT_BYTES.  Work is the bytes a step
 * reads and writes plus, for the matrix ops, their multiply-adds at
 * FLOPS_PER_BYTE per byte's time (ir/flops.c counts them the same way).
 * A reshape or a small add then runs on the calling thread alone (issue 11:
 * split, a reshape cost more in waking and joining than in copying). */
#define SPLIT_BYTES (64u << 10)
#define FLOPS_PER_BYTE 4u
#define PARTS_PER_THREAD 4u

static uint64_t step_work(const dc_module *m, const dc_node *n) {
  uint64_t bytes = dc_type_bytes(&n->type), flops = 0;
  for (int k = 0; k < n->ninputs; k++) bytes += dc_type_bytes(&m->nodes[n->inputs[k]].type);
  const dc_type *a = n->ninputs > 0 ? &m->nodes[n->inputs[0]].type : NULL;
  const dc_type *b = n->ninputs > 1 ? &m->nodes[n->inputs[1]].type : NULL;
  if (n->op == OP_CONV2D) /* w [O, C, kh, kw] (or [O, kh, kw, C]): 2·out·C·kh·kw */
    flops = 2 * dc_type_numel(&n->type) * (dc_type_numel(b) / (uint64_t)b->dims[0]);
  else if (n->op == OP_LINEAR) /* w [N, K]: 2·rows·N·K */
    flops = 2 * (dc_type_numel(a) / (uint64_t)b->dims[1]) * dc_type_numel(b);
  else if (n->op == OP_ATTENTION) /* q [B, Sq, H·D], k [B, Sk, H·D]: 4·B·Sq·Sk·H·D */
    flops = 4 * dc_type_numel(a) * (uint64_t)b->dims[1];
  return bytes + flops / FLOPS_PER_BYTE;
}

static int threads_for(const drt_plan *p, const dc_node *n) {
  uint64_t shares = step_work(p->plan.module, n) / SPLIT_BYTES;
  int pool = dc_pool_size(p->pool);
  return shares >= (uint64_t)pool ? pool : shares < 1 ? 1 : (int)shares;
}

/* Parts a step is cut into: PARTS_PER_THREAD per thread where the work
 * allows (each part at least SPLIT_BYTES' worth), so that a thread the
 * scheduler delays holds up at most a small part while the others take the
 * rest (threadpool.h). */
static int64_t parts_for(const drt_plan *p, const dc_node *n, int threads) {
  if (threads <= 1) return 1;
  uint64_t shares = step_work(p->plan.module, n) / SPLIT_BYTES;
  uint64_t most = (uint64_t)threads * PARTS_PER_THREAD;
  return (int64_t)(shares < (uint64_t)threads ? (uint64_t)threads : shares > most ? most : shares);
}

static dc_status *run_node(drt_plan *p, int32_t s) {
  const dc_module *m = p->plan.module;
  const dc_node *n = &m->nodes[s];
  void *out = place(p, s);
  if (p->use_llvm && p->fn[s]) {
    launch l = {p->fn[s], {out}, n->ninputs + 1, p->scratch, p->scratch_stride};
    for (int k = 0; k < n->ninputs; k++) l.bufs[k + 1] = p->value[n->inputs[k]];
    int threads = threads_for(p, n);
    dc_pool_run(p->pool, threads, parts_for(p, n, threads), run_part, &l);
    return NULL;
  }
  const void *in[DC_MAX_INPUTS];
  for (int k = 0; k < n->ninputs; k++) in[k] = p->value[n->inputs[k]];
  dc_status *st = dc_ref_kernel_for(n->op)(m, n, in, out);
  if (st) return dc_status_annotate(st, "step %%%d (%s, %s)", s, dc_op_get(n->op)->name, n->scope ? n->scope : "");
  return NULL;
}

/* ---- the copy stream ----
 * Uploads (pass offload) run on a second thread, as a GPU's copy engine
 * would run them: an upload starts once the compute stream has finished
 * every step before it in the schedule (so the arena bytes it overwrites
 * are free: liveness placed it there), and a kernel waits only for the
 * uploads it reads.  Prefetch is then real overlap: the pass moved uploads
 * earlier, and their copies run while the steps in between compute.
 * A copy reads its weight from the host block (pinned) or from the file
 * through the bounce buffer (on-demand); a failed read stops both
 * streams and is the run's error. */
typedef struct {
  drt_plan *p;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int32_t computed;    /* the compute stream has finished every step < computed */
  int32_t copied;      /* every upload < copied is in the arena */
  uint64_t top[DC_MAX_DEVICES]; /* highest byte of each arena the uploads occupied */
  int stop;            /* the compute stream failed: stop copying */
  dc_status *err;      /* the copy stream failed (a weight read): the compute stream stops */
} copy_stream;

static void *copy_stream_main(void *arg) {
  copy_stream *c = arg;
  const dc_module *m = c->p->plan.module;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op != OP_UPLOAD) continue;
    pthread_mutex_lock(&c->mu);
    while (c->computed < s && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    int stop = c->stop;
    pthread_mutex_unlock(&c->mu);
    if (stop) break;
    double t0 = c->p->step_seconds ? dc_now_seconds() : 0;
    uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
    dc_status *st = dc_host_weights_upload(&c->p->host, m->nodes[n->inputs[0]].ref, arena_at(c->p, n));
    if (c->p->step_seconds) c->p->step_seconds[s] += dc_now_seconds() - t0;
    pthread_mutex_lock(&c->mu);
    if (end > c->top[n->device]) c->top[n->device] = end;
    if (st)
      c->err = dc_status_annotate(st, "%s: upload step %%%d%s%s%s", c->p->path, (int)s, n->scope ? " (" : "",
                                  n->scope ? n->scope : "", n->scope ? ")" : "");
    else c->copied = s + 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (st) break;
  }
  return NULL;
}

static void copy_stream_advance(copy_stream *c, int32_t computed) {
  pthread_mutex_lock(&c->mu);
  c->computed = computed;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* Blocks until every upload step s reads has been copied; 0 when the copy
 * stream failed instead (its error is the run's). */
static int copy_stream_wait_inputs(copy_stream *c, const dc_module *m, const dc_node *n) {
  int32_t need = -1;
  for (int k = 0; k < n->ninputs; k++)
    if (m->nodes[n->inputs[k]].op == OP_UPLOAD && n->inputs[k] > need) need = n->inputs[k];
  if (need < 0) return 1;
  pthread_mutex_lock(&c->mu);
  while (c->copied <= need && !c->err) pthread_cond_wait(&c->cv, &c->mu);
  int ok = c->copied > need;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

static int has_uploads(const dc_module *m) {
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].op == OP_UPLOAD) return 1;
  return 0;
}

/* The compute stream: every step but the uploads, in schedule order. */
static dc_status *compute_steps(drt_plan *p, copy_stream *c) {
  const dc_module *m = p->plan.module;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT) { /* resident: in place in its mapping; offloaded: read by uploads only */
      const dc_weight *w = &m->weights[n->ref];
      p->value[s] = p->host.offloaded[n->ref] ? NULL : (void *)(p->files[w->file].map.data + w->offset);
    } else if (n->op == OP_UPLOAD && c) {
      p->value[s] = arena_at(p, n); /* the copy stream fills it */
    } else if (n->op != OP_INPUT) {
      if (c && !copy_stream_wait_inputs(c, m, n)) return NULL; /* the copy stream's error is the run's */
      double t0 = p->step_seconds ? dc_now_seconds() : 0;
      DC_TRY(run_node(p, s));
      if (p->step_seconds) p->step_seconds[s] += dc_now_seconds() - t0;
      if (p->check_finite) DC_TRY(check_finite(p, s, p->value[s]));
    }
    if (c) copy_stream_advance(c, s + 1);
  }
  return NULL;
}

static dc_status *run_steps(drt_plan *p) {
  const dc_module *m = p->plan.module;
  for (int i = 0; i < m->ninputs; i++) { /* host -> device */
    int32_t v = m->inputs[i].node;
    memcpy(place(p, v), p->host_in[i], dc_type_bytes(&m->nodes[v].type));
  }
  if (!has_uploads(m)) {
    DC_TRY(compute_steps(p, NULL));
  } else {
    copy_stream c = {.p = p};
    pthread_t th;
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    dc_status *st = NULL;
    if (pthread_create(&th, NULL, copy_stream_main, &c) != 0) {
      st = dc_error(DC_ERR_NOMEM, "%s: cannot start the copy stream thread", p->path);
    } else {
      st = compute_steps(p, &c);
      pthread_mutex_lock(&c.mu);
      c.stop = 1; /* after a failure the copy stream must not wait for steps that never run */
      pthread_cond_broadcast(&c.cv);
      pthread_mutex_unlock(&c.mu);
      pthread_join(th, NULL);
      for (int d = 0; d < DC_MAX_DEVICES; d++)
        if (c.top[d] > p->arena_top[d]) p->arena_top[d] = c.top[d];
      if (c.err && st) dc_status_free(c.err);
      else if (c.err) st = c.err;
    }
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    DC_TRY(st);
  }
  for (int i = 0; i < m->noutputs; i++) { /* device -> host */
    int32_t v = m->outputs[i].node;
    memcpy(p->host_out[i], p->value[v], dc_type_bytes(&m->nodes[v].type));
  }
  return NULL;
}

static dc_status *check_step_finite(void *ctx, int32_t step, const float *values) {
  return check_finite(ctx, step, values);
}

static void fill_stats(const drt_plan *p, double seconds, double kernel_seconds, drt_stats *stats) {
  memset(stats, 0, sizeof *stats);
  stats->seconds = seconds;
  stats->kernel_seconds = kernel_seconds;
  stats->flops = (double)p->info.flops;
  stats->device_predicted_bytes = p->plan.module->arena_bytes;
  stats->weight_bytes = p->live.weight_bytes;
  stats->host_weight_bytes = p->live.host_weight_bytes;
  stats->host_memory = p->host.on_demand ? "on-demand" : stats->host_weight_bytes ? "pinned" : "";
  for (int32_t i = 0; i < p->plan.module->nnodes; i++)
    if (p->plan.module->nodes[i].op == OP_UPLOAD) stats->uploaded_bytes += dc_type_bytes(&p->plan.module->nodes[i].type);
  stats->steps = p->plan.module->nnodes;
  stats->ndevices = p->live.ndevices;
  for (int d = 0; d < p->live.ndevices; d++) {
    stats->dev_predicted_bytes[d] = p->live.dev_peak[d];
    stats->dev_weight_bytes[d] = p->live.dev_weights[d];
  }
  for (int32_t i = 0; i < p->plan.module->nnodes; i++)
    if (p->plan.module->nodes[i].op == OP_TRANSFER)
      stats->transferred_bytes += dc_type_bytes(&p->plan.module->nodes[i].type);
  stats->backend = p->info.backend;
  if (p->cuda) { /* each device's arena reaches its planned size: the highest byte a value placed there occupies */
    const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(p->cuda);
    stats->device_peak_bytes = bi->arena_peak_bytes;
    for (int d = 0; d < bi->ndevices; d++) stats->dev_peak_bytes[d] = bi->dev[d].arena_bytes;
    stats->transferred_bytes = bi->transferred_bytes;
    stats->device_total_bytes = bi->device_bytes;
    stats->pinned_bytes = bi->pinned_bytes;
    return;
  }
  stats->device_peak_bytes = 0;
  for (int d = 0; d < p->live.ndevices; d++) {
    stats->dev_peak_bytes[d] = p->arena_top[d];
    if (p->arena_top[d] > stats->device_peak_bytes) stats->device_peak_bytes = p->arena_top[d];
    stats->device_total_bytes += p->live.dev_peak[d];
  }
  stats->pinned_bytes = dc_host_weights_held(&p->host);
  stats->threads = p->pool ? dc_pool_size(p->pool) : 1;
  stats->reference_steps = p->use_llvm ? p->nreference : 0;
  stats->reference_ops = p->use_llvm ? p->reference_ops : "";
}

dc_status *drt_run(drt_plan *p, drt_stats *stats) {
  if (p->inspect)
    return dc_error(DC_ERR_ARGUMENT, "%s: the plan was loaded for inspection only (drt_options.inspect); load it again "
                    "to run it", p->path);
  memset(p->arena_top, 0, sizeof p->arena_top);
  double t0 = dc_now_seconds(), kernel_seconds = 0;
  dc_status *st = p->cuda ? dc_cuda_backend_run(p->cuda, p->step_seconds, &kernel_seconds) : run_steps(p);
  double t1 = dc_now_seconds();
  if (st) return st;
  if (stats) fill_stats(p, t1 - t0, p->cuda ? kernel_seconds : t1 - t0, stats);
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
