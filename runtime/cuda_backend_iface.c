/* cuda_backend_iface.c — the cuda backend behind the runtime's backend
 * table (backend.h): the driver found at create (dc_cu_api_open: libcuda
 * through dlopen, or a test's fake), then cuda_backend.h's phases and run
 * steps one for one.  Resident weights are copied onto the devices, so the
 * session unmaps every weight file after upload_weights; offloaded ones go
 * into the backend's own pinned block (host_memory pinned: the files are
 * closed then) or are read at each upload through the session's host
 * weights (on-demand).  CUDA graphs are on unless drt_options.no_cuda_graphs
 * or DIFFC_CUDA_GRAPHS=0 turns them off. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"

typedef struct {
  drt_backend_setup s;
  dc_cu_api api;
  dc_cuda_backend *gpu;
  double kernel_seconds;  /* the last run's device time */
  char device[400];       /* drt_plan_info.device */
  char graphs_off[160];   /* why CUDA graphs are off ("" when on): note 0 then */
  char warning[4800];     /* drt_plan_info.warning: the plan's path, a device name and the advice */
} cuda_iface;

static dc_status *no_driver(const char *path, dc_status *why) {
  dc_status *msg = dc_error(dc_status_code_of(why),
                            "%s: this plan targets CUDA, and %s; --backend reference runs it on the CPU (plain C "
                            "kernels, slow), or compile with diffc --target cpu for this CPU",
                            path, dc_status_message(why));
  dc_status_free(why);
  return msg;
}

static dc_status *read_weight(void *ctx, int w, uint64_t at, void *dst, uint64_t len) {
  return dc_host_weights_read(ctx, w, at, dst, len);
}

/* "device 0: NAME (compute 9.0), cubin sm_90"; a --device-map plan names
 * the range of GPUs it runs on by the first. */
static void describe_devices(cuda_iface *c) {
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(c->gpu);
  int first = c->s.opt->device, n = c->s.live->ndevices;
  if (n > 1)
    snprintf(c->device, sizeof c->device, "devices %d..%d: %s (compute %d.%d), %s", first, first + n - 1,
             bi->device_name, bi->cc_major, bi->cc_minor, bi->image);
  else
    snprintf(c->device, sizeof c->device, "device %d: %s (compute %d.%d), %s", first, bi->device_name, bi->cc_major,
             bi->cc_minor, bi->image);
}

/* The GEMM tiles were chosen for the SM count in the plan's OPTS
 * (cuda_sm_count; absent in plans from before it was recorded): a device
 * with another count runs them, but the grids may fill it less well. */
static void check_sm_count(cuda_iface *c) {
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(c->gpu);
  cJSON *j = c->s.plan->options_json ? cJSON_Parse(c->s.plan->options_json) : NULL;
  const cJSON *n = j ? cJSON_GetObjectItemCaseSensitive(j, "cuda_sm_count") : NULL;
  int planned = cJSON_IsNumber(n) ? n->valueint : 0, have = bi->dev[0].sm_count;
  cJSON_Delete(j);
  if (planned <= 0 || have <= 0 || planned == have) return;
  snprintf(c->warning, sizeof c->warning,
           "%s: tiles were chosen for %d SMs; device %d (%s) has %d: recompile with diffc --cuda-sm-count %d (or "
           "on this machine, which finds it) for grids that fill it",
           c->s.path, planned, bi->dev[0].ordinal, bi->dev[0].name, have, have);
}

static const char *warning(const void *be) { return ((const cuda_iface *)be)->warning; }

static void destroy(void *be) {
  cuda_iface *c = be;
  if (!c) return;
  dc_cuda_backend_destroy(c->gpu);
  dc_cu_api_unload(&c->api);
  dc_free(c);
}

/* diffc refuses constants for --target cuda at compile time (codegen/emit_cuda.c). */
static dc_status *check_no_constants(const drt_backend_setup *s) {
  const dc_module *m = s->plan->module;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_CONSTANT)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: node %%%d is a constant, which the cuda backend does not place yet; "
                      "run the plan with --backend reference", s->path, (int)i);
  return NULL;
}

/* Whether runs may use CUDA graphs: drt_options.no_cuda_graphs, then
 * DIFFC_CUDA_GRAPHS (0/off/no/false or 1/on/yes/true; unset or empty: on);
 * why not, in c->graphs_off. */
static dc_status *graphs_wanted(cuda_iface *c, int *on) {
  static const char *const off[] = {"0", "off", "no", "false"}, *const yes[] = {"1", "on", "yes", "true"};
  const char *env = getenv("DIFFC_CUDA_GRAPHS");
  *on = 1;
  if (c->s.opt->no_cuda_graphs) {
    snprintf(c->graphs_off, sizeof c->graphs_off, "CUDA graphs: off (--no-cuda-graphs): runs enqueue their steps on "
             "streams");
    return *on = 0, NULL;
  }
  if (!env || !*env) return NULL;
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    if (!strcasecmp(env, yes[i])) return NULL;
    if (strcasecmp(env, off[i])) continue;
    snprintf(c->graphs_off, sizeof c->graphs_off, "CUDA graphs: off (DIFFC_CUDA_GRAPHS=%s): runs enqueue their steps "
             "on streams", env);
    return *on = 0, NULL;
  }
  return dc_error(DC_ERR_ARGUMENT, "DIFFC_CUDA_GRAPHS=%s: expected 0 (off) or 1 (on, the default)", env);
}

/* The driver, then the plan's devices opened and checked (no allocation yet). */
static dc_status *create(const drt_backend_setup *s, void **out) {
  *out = NULL;
  DC_TRY(check_no_constants(s));
  cuda_iface *c = dc_calloc(1, sizeof *c);
  if (!c) return dc_nomem("creating the CUDA backend");
  c->s = *s;
  int graphs = 1;
  dc_status *st = graphs_wanted(c, &graphs);
  if (st) {
    dc_free(c);
    return st;
  }
  st = dc_cu_api_open(NULL, &c->api);
  if (st) {
    dc_free(c);
    return no_driver(s->path, st);
  }
  dc_cuda_backend_options o = {s->opt->device, 0, s->check_step, s->check_ctx, s->plan->options_json,
                               read_weight, s->host, s->opt->bounce_bytes, graphs, s->opt->no_cublaslt};
  st = dc_cuda_backend_open(s->path, s->plan->module, &s->plan->cuda, &c->api, &o, &c->gpu);
  if (st) {
    destroy(c);
    return st;
  }
  describe_devices(c);
  check_sm_count(c);
  *out = c;
  return NULL;
}

static dc_status *allocate(void *be) { return dc_cuda_backend_allocate(((cuda_iface *)be)->gpu); }

/* pinned: the backend copied the offloaded weights into its pinned block,
 * so their files need not stay open; on-demand: its uploads read them from
 * the files kept open by the session's host weights. */
static dc_status *upload_weights(void *be, const void *const *weight_data) {
  cuda_iface *c = be;
  DC_TRY(dc_cuda_backend_upload_weights(c->gpu, weight_data));
  if (!c->s.host->on_demand) dc_host_weights_close_files(c->s.host);
  return NULL;
}

static dc_status *load_kernels(void *be) { return dc_cuda_backend_load_kernels(((cuda_iface *)be)->gpu); }
static void *input(void *be, int i) { return dc_cuda_backend_input(((cuda_iface *)be)->gpu, i); }
static float *output(void *be, int i) { return dc_cuda_backend_output(((cuda_iface *)be)->gpu, i); }

static dc_status *begin_run(void *be, double *step_seconds, drt_trace_event *trace, int32_t first, int32_t end) {
  return dc_cuda_backend_begin(((cuda_iface *)be)->gpu, step_seconds, trace, first, end);
}

/* Launches, uploads and transfers alike: the backend enqueues each on the
 * streams of its node's device. */
static dc_status *step(void *be, int32_t s) { return dc_cuda_backend_step(((cuda_iface *)be)->gpu, s); }

static dc_status *synchronise(void *be, dc_status *st) {
  cuda_iface *c = be;
  return dc_cuda_backend_end(c->gpu, st, &c->kernel_seconds);
}

/* Each device's arena reaches its planned size: the highest byte a value
 * placed there occupies.  Device memory is every cuMemAlloc (arenas and
 * weight blocks); pinned host memory is counted apart. */
static void stats(const void *be, drt_stats *st) {
  const cuda_iface *c = be;
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(c->gpu);
  st->kernel_seconds = c->kernel_seconds;
  st->device_peak_bytes = bi->arena_peak_bytes;
  for (int d = 0; d < bi->ndevices; d++) st->dev_peak_bytes[d] = bi->dev[d].arena_bytes;
  st->transferred_bytes = bi->transferred_bytes;
  st->device_total_bytes = bi->device_bytes;
  st->pinned_bytes = bi->pinned_bytes;
  st->cuda_graph = bi->last_run_graph;
  st->gemm_steps = bi->lt_eligible;
  st->cublaslt_steps = bi->lt_steps;
  st->cublaslt_workspace_bytes = bi->lt_workspace_bytes;
  st->cublaslt_note = bi->lt_note;
  st->cublaslt_cache = bi->lt_cache;
}

static const char *device(const void *be) { return ((const cuda_iface *)be)->device; }

/* Why graphs are off, when they are, then the backend's own notes. */
static const char *note(const void *be, int i) {
  const cuda_iface *c = be;
  if (c->graphs_off[0] && i-- == 0) return c->graphs_off;
  return dc_cuda_backend_note(c->gpu, i);
}

const drt_backend_i drt_backend_cuda = {
    .name = "cuda",
    .reads_weights_in_place = 0,
    .create = create,
    .arena = allocate,
    .upload_weights = upload_weights,
    .load_kernels = load_kernels,
    .input = input,
    .output = output,
    .begin_run = begin_run,
    .run_step = step,
    .copy = step,
    .transfer = step,
    .synchronise = synchronise,
    .stats = stats,
    .device = device,
    .note = note,
    .warning = warning,
    .destroy = destroy,
};
