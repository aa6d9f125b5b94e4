/* cuda_backend.c — sets a CUDA plan up on its GPUs through the driver API
 * table of cuda_driver.h, and tears it down; cuda_backend_run.c runs it.
 * The device side of the runtime's model (docs/ARCHITECTURE.md), once per
 * device of the plan (one, or several after diffc --device-map; the
 * single-GPU plan is the one-device case of the same code): its primary
 * context, its arena at the planned size, its resident weights in one block
 * (cuda_memory.c), a copy stream and a compute stream, the modules of the
 * kernels its steps run (cuda_images.c).  Offloaded weights
 * (passes/offload.c) stay in one pinned host block, or with host_memory
 * on-demand in their files.  Everything is checked before the first
 * allocation: the device count, an image for every device, shared memory,
 * and every device's free memory.  Every driver call is checked and a
 * failure names what was being done: the device, the kernel, the buffer. */
#include "cuda_backend_impl.h"
#include "host_weights.h"

#include <string.h>

const char *dc_cuda_step_name(const dc_module *m, int32_t s, char *buf, size_t cap) {
  const dc_node *n = &m->nodes[s];
  if (n->scope && *n->scope) snprintf(buf, cap, "step %d (%s in %s)", (int)s, dc_op_get(n->op)->name, n->scope);
  else snprintf(buf, cap, "step %d (%s)", (int)s, dc_op_get(n->op)->name);
  return buf;
}

dc_status *dc_cuda_use_device(dc_cuda_backend *b, int d) {
  if (b->current == d) return NULL;
  DC_TRY(CU(b, CtxSetCurrent, b->dev[d].ctx));
  b->current = d;
  return NULL;
}

/* ---- checks on the plan --------------------------------------------------- */
/* Every step has a kernel but leaves and copies; the devices it names. */
static dc_status *check_kernels(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  const dc_plan_cuda *k = b->k;
  if (k->nnodes != m->nnodes || (m->nnodes && !k->kernel_of_node))
    return dc_error(DC_ERR_FORMAT, "%s: the CUDA kernel table covers %d nodes but the schedule has %d", b->path,
                    k->nnodes, m->nnodes);
  b->ndevices = 1;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    /* Leaves have no kernel, and uploads and transfers are copies, not kernels. */
    int none = (dc_op_get(n->op)->flags & OPF_LEAF) || dc_op_is_copy(n->op);
    int32_t ki = k->kernel_of_node[s];
    char what[300];
    if (none ? ki != -1 : ki < 0 || ki >= k->nkernels)
      return dc_error(DC_ERR_FORMAT, "%s: %s has kernel index %d (kernels 0..%d%s)", b->path,
                      dc_cuda_step_name(m, s, what, sizeof what), ki, k->nkernels - 1,
                      none ? "; leaves, uploads and transfers have none, -1" : "");
    if (n->device < 0 || n->device >= DC_MAX_DEVICES)
      return dc_error(DC_ERR_FORMAT, "%s: %s is on device %d (devices 0..%d)", b->path,
                      dc_cuda_step_name(m, s, what, sizeof what), n->device, DC_MAX_DEVICES - 1);
    if (n->device >= b->ndevices) b->ndevices = n->device + 1;
  }
  b->info.ndevices = b->ndevices;
  return NULL;
}
/* ---- devices ------------------------------------------------------------------ */
/* Plan device d runs on CUDA device opt.device + d: all of them must exist. */
static dc_status *check_device_count(const dc_cuda_backend *b, int count) {
  int first = b->opt.device, n = b->ndevices;
  if (first < 0 || (n == 1 && first >= count))
    return dc_error(DC_ERR_ARGUMENT, "--device %d: this machine has %d CUDA device(s)%s", first, count,
                    count > 0 ? " (numbered from 0)" : "");
  if (n > count)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: the plan places modules on %d GPUs; this machine has %d CUDA device(s): recompile it for "
                    "fewer (diffc --device-map with --max-memory naming the GPUs to use), or run it with --backend "
                    "reference or llvm, which model each GPU as its own arena",
                    b->path, n, count);
  if (first + n > count)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s: the plan places modules on %d GPUs, devices %d..%d from --device %d, and this machine has %d "
                    "CUDA devices (numbered from 0): use --device %d or lower",
                    b->path, n, first, first + n - 1, first, count, count - n);
  return NULL;
}

/* Name, compute capability, images and shared memory of device d. */
static dc_status *describe_device(dc_cuda_backend *b, int d) {
  cuda_device *g = &b->dev[d];
  dc_cuda_device_info *di = &b->info.dev[d];
  g->ordinal = di->ordinal = b->opt.device + d;
  DC_TRY(CU(b, DeviceGet, &g->dev, g->ordinal));
  DC_TRY(CU(b, DeviceGetName, di->name, (int)sizeof di->name - 1, g->dev));
  DC_TRY(CU(b, DeviceGetAttribute, &di->cc_major, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev));
  DC_TRY(CU(b, DeviceGetAttribute, &di->cc_minor, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev));
  DC_TRY(CU(b, DeviceGetAttribute, &di->sm_count, DC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev));
  DC_TRY(CU(b, DeviceGetAttribute, &g->optin_smem, DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, g->dev));
  return dc_cuda_choose_images(b, d);
}

/* A transfer's copy runs on its destination device and reads the source
 * device's memory: let the destination reach it directly where the
 * hardware can (else the driver stages the copy through host memory). */
static dc_status *enable_peer_access(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  char pair[DC_MAX_DEVICES][DC_MAX_DEVICES] = {{0}};
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].op == OP_TRANSFER) pair[m->nodes[s].device][m->nodes[m->nodes[s].inputs[0]].device] = 1;
  for (int to = 0; to < b->ndevices; to++)
    for (int from = 0; from < b->ndevices; from++) {
      if (!pair[to][from] || to == from) continue;
      int can = 0;
      b->info.peer_pairs++;
      DC_TRY(CU(b, DeviceCanAccessPeer, &can, b->dev[to].dev, b->dev[from].dev));
      if (!can) continue;
      DC_TRY(dc_cuda_use_device(b, to));
      dc_cu_result r = b->api.CtxEnablePeerAccess(b->dev[from].ctx, 0);
      if (r == DC_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) r = DC_CUDA_SUCCESS; /* another user of the context */
      DC_TRY(dc_status_annotate(dc_cu_check(&b->api, r, "cuCtxEnablePeerAccess"),
                                "%s: letting device %d read device %d's memory", b->path, b->dev[to].ordinal,
                                b->dev[from].ordinal));
      b->info.peer_direct++;
    }
  return NULL;
}

/* Every device is described and checked before any context is retained. */
static dc_status *open_devices(dc_cuda_backend *b) {
  int count = 0;
  DC_TRY(CU(b, Init, 0));
  DC_TRY(CU(b, DeviceGetCount, &count));
  DC_TRY(check_device_count(b, count));
  for (int d = 0; d < b->ndevices; d++) DC_TRY(describe_device(b, d));
  memcpy(b->info.device_name, b->info.dev[0].name, sizeof b->info.device_name);
  b->info.cc_major = b->info.dev[0].cc_major;
  b->info.cc_minor = b->info.dev[0].cc_minor;
  for (int d = 0; d < b->ndevices; d++) {
    DC_TRY(CU(b, DevicePrimaryCtxRetain, &b->dev[d].ctx, b->dev[d].dev));
    b->dev[d].ctx_retained = 1;
  }
  DC_TRY(enable_peer_access(b));
  return dc_cuda_use_device(b, 0);
}

/* ---- streams and events ------------------------------------------------------------ */
/* The device whose context made a per-node event: a transfer's
 * source_ready is recorded on its source device's stream, every other on
 * the node's own device. */
static int source_device(const dc_module *m, int32_t s) { return m->nodes[m->nodes[s].inputs[0]].device; }

static dc_status *create_step_events(dc_cuda_backend *b, int d) {
  const dc_module *m = b->m;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_UPLOAD && n->device == d) {
      DC_TRY(CU(b, EventCreate, &b->copy_may_start[s], DC_CU_EVENT_DISABLE_TIMING));
      DC_TRY(CU(b, EventCreate, &b->copied[s], DC_CU_EVENT_DISABLE_TIMING));
    }
    if (n->op == OP_TRANSFER && source_device(m, s) == d)
      DC_TRY(CU(b, EventCreate, &b->source_ready[s], DC_CU_EVENT_DISABLE_TIMING));
    if (n->op == OP_TRANSFER && n->device == d) DC_TRY(CU(b, EventCreate, &b->moved[s], DC_CU_EVENT_DISABLE_TIMING));
  }
  return NULL;
}

static dc_status *create_streams(dc_cuda_backend *b) {
  for (int d = 0; d < b->ndevices; d++) {
    cuda_device *g = &b->dev[d];
    DC_TRY(dc_cuda_use_device(b, d));
    DC_TRY(CU(b, StreamCreate, &g->compute, DC_CU_STREAM_NON_BLOCKING));
    DC_TRY(CU(b, StreamCreate, &g->copy, DC_CU_STREAM_NON_BLOCKING));
    DC_TRY(CU(b, EventCreate, &g->inputs_ready, DC_CU_EVENT_DISABLE_TIMING));
    DC_TRY(CU(b, EventCreate, &g->begin, DC_CU_EVENT_DEFAULT));
    DC_TRY(CU(b, EventCreate, &g->end, DC_CU_EVENT_DEFAULT));
    DC_TRY(create_step_events(b, d));
    if (b->info.on_demand && b->largest_upload)
      for (int k = 0; k < 2; k++) DC_TRY(CU(b, EventCreate, &g->bounce_copied[k], DC_CU_EVENT_DISABLE_TIMING));
  }
  return NULL;
}

/* The plan's host_memory; on-demand needs a way to read the files. */
static dc_status *host_memory_mode(dc_cuda_backend *b) {
  DC_TRY(dc_host_memory_mode(b->m, b->path, &b->info.on_demand));
  if (b->info.on_demand && b->largest_upload && !b->opt.read_weight)
    return dc_error(DC_ERR_ARGUMENT, "%s: the plan reads offloaded weights on demand (host_memory on-demand), and the "
                    "backend was given no weight reader", b->path);
  return NULL;
}

/* ---- the phases of create ------------------------------------------------------------ */
static dc_status *open_backend(dc_cuda_backend *b) {
  DC_TRY(check_kernels(b));
  DC_TRY(dc_cuda_lay_out(b));
  DC_TRY(host_memory_mode(b));
  DC_TRY(open_devices(b));
  for (int d = 0; d < b->ndevices; d++) DC_TRY(dc_cuda_check_free_memory(b, d));
  return create_streams(b);
}

dc_status *dc_cuda_backend_open(const char *path, const dc_module *m, const dc_plan_cuda *k, const dc_cu_api *api,
                                const dc_cuda_backend_options *o, dc_cuda_backend **out) {
  *out = NULL;
  dc_cuda_backend *b = dc_calloc(1, sizeof *b);
  if (!b) return dc_nomem("creating the CUDA backend");
  b->path = dc_strdup(path);
  b->m = m;
  b->k = k;
  b->api = *api;
  b->current = -1;
  b->bounce_device[0] = b->bounce_device[1] = -1;
  if (o) b->opt = *o;
  dc_status *st = b->path ? open_backend(b) : dc_nomem("creating the CUDA backend");
  if (st) {
    dc_cuda_backend_destroy(b);
    return st;
  }
  *out = b;
  return NULL;
}

dc_status *dc_cuda_backend_create(const char *path, const dc_module *m, const dc_plan_cuda *k,
                                  const void *const *weight_data, const dc_cu_api *api,
                                  const dc_cuda_backend_options *o, dc_cuda_backend **out) {
  dc_cuda_backend *b;
  *out = NULL;
  DC_TRY(dc_cuda_backend_open(path, m, k, api, o, &b));
  dc_status *st = dc_cuda_backend_allocate(b);
  if (!st) st = dc_cuda_backend_upload_weights(b, weight_data);
  if (!st) st = dc_cuda_backend_load_kernels(b);
  if (st) {
    dc_cuda_backend_destroy(b);
    return st;
  }
  *out = b;
  return NULL;
}

/* ---- destroy ------------------------------------------------------------------------- */
static void destroy_event(const dc_cu_api *a, dc_cu_event *events, int32_t s) {
  if (events && events[s]) a->EventDestroy(events[s]);
}

/* What device d holds, released in its own context. */
static void release_device(dc_cuda_backend *b, int d) {
  const dc_cu_api *a = &b->api;
  const dc_module *m = b->m;
  cuda_device *g = &b->dev[d];
  a->CtxSetCurrent(g->ctx);
  for (int i = 0; g->kern && i < b->k->nkernels; i++)
    if (g->kern[i].module) a->ModuleUnload(g->kern[i].module);
  if (g->arena) a->MemFree(g->arena);
  if (g->weights) a->MemFree(g->weights);
  for (int32_t s = 0; s < m->nnodes; s++) {
    if (m->nodes[s].device == d) {
      destroy_event(a, b->step_done, s);
      destroy_event(a, b->copy_may_start, s);
      destroy_event(a, b->copied, s);
      destroy_event(a, b->moved, s);
      destroy_event(a, b->copy_began, s);
      destroy_event(a, b->copy_ended, s);
    }
    if (m->nodes[s].op == OP_TRANSFER && source_device(m, s) == d) destroy_event(a, b->source_ready, s);
  }
  if (d == 0) dc_cuda_graphs_destroy(b); /* made in device 0's context */
  dc_cu_event evs[] = {g->inputs_ready,      g->begin,        g->end,           g->bounce_copied[0],
                       g->bounce_copied[1], g->trace_origin, g->outputs_began, g->outputs_done,
                       g->fork,             g->join};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
    if (evs[i]) a->EventDestroy(evs[i]);
  if (g->compute) a->StreamDestroy(g->compute);
  if (g->copy) a->StreamDestroy(g->copy);
}

/* Pinned host memory, in the first device's context (it made it). */
static void free_pinned(dc_cuda_backend *b) {
  const dc_cu_api *a = &b->api;
  a->CtxSetCurrent(b->dev[0].ctx);
  for (int i = 0; b->host_in && i < b->m->ninputs; i++)
    if (b->host_in[i]) a->MemFreeHost(b->host_in[i]);
  for (int i = 0; b->host_out && i < b->m->noutputs; i++)
    if (b->host_out[i]) a->MemFreeHost(b->host_out[i]);
  if (b->check_buf) a->MemFreeHost(b->check_buf);
  if (b->host_weights) a->MemFreeHost(b->host_weights);
  for (int k = 0; k < 2; k++)
    if (b->bounce[k]) a->MemFreeHost(b->bounce[k]);
}

/* Teardown ignores driver errors: there is nothing left to do about them. */
void dc_cuda_backend_destroy(dc_cuda_backend *b) {
  if (!b) return;
  const dc_cu_api *a = &b->api;
  for (int d = 0; d < b->ndevices; d++) { /* nothing may still run before anything is freed */
    if (!b->dev[d].ctx_retained) continue;
    a->CtxSetCurrent(b->dev[d].ctx);
    if (b->dev[d].compute) a->StreamSynchronize(b->dev[d].compute);
    if (b->dev[d].copy) a->StreamSynchronize(b->dev[d].copy);
  }
  dc_cuda_lt_destroy(b);
  for (int d = 0; d < b->ndevices; d++)
    if (b->dev[d].ctx_retained) release_device(b, d);
  if (b->dev[0].ctx_retained) free_pinned(b); /* pinned memory exists only once every context was retained */
  for (int d = 0; d < b->ndevices; d++) {
    if (b->dev[d].ctx_retained) a->DevicePrimaryCtxRelease(b->dev[d].dev);
    dc_free(b->dev[d].kern);
    dc_free(b->dev[d].pending);
  }
  dc_free(b->step_done);
  dc_free(b->copy_may_start);
  dc_free(b->copied);
  dc_free(b->source_ready);
  dc_free(b->moved);
  dc_free(b->copy_began);
  dc_free(b->copy_ended);
  dc_free(b->weight_device);
  dc_free(b->weight_offset);
  dc_free(b->host_offset);
  dc_free(b->value);
  dc_free(b->args);
  dc_free(b->params);
  dc_free(b->host_in);
  dc_free(b->host_out);
  dc_cuda_graphs_destroy(b); /* the notes, when device 0 never had a context (no graph then) */
  dc_free(b->path);
  dc_free(b);
}

float *dc_cuda_backend_input(dc_cuda_backend *b, int i) { return b->host_in[i]; }
float *dc_cuda_backend_output(dc_cuda_backend *b, int i) { return b->host_out[i]; }
const dc_cuda_backend_info *dc_cuda_backend_get_info(const dc_cuda_backend *b) { return &b->info; }
