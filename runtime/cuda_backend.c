/* cuda_backend.c — sets a CUDA plan up on its GPUs through the driver API
 * table of cuda_driver.h, and tears it down; cuda_backend_run.c runs it.
 * The device side of runtime.c's model (docs/ARCHITECTURE.md), once per device of the
 * plan (one, or several after diffc --device-map; the single-GPU plan is
 * the one-device case of the same code): its primary context, its arena at
 * the planned size, its resident weights in one block, a copy stream and a
 * compute stream, the modules of the kernels its steps run.  Offloaded
 * weights (passes/offload.c) stay in one pinned host block, or with
 * host_memory on-demand in their files.  Everything is checked before the
 * first allocation: the device count, an image for every device, shared
 * memory, and every device's free memory.  Every driver call is checked and
 * a failure names what was being done: the device, the kernel, the buffer. */
#include "cuda_backend_impl.h"
#include "fit_advice.h"
#include "host_weights.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define WEIGHT_ALIGN 256u                    /* what cuMemAlloc guarantees; vector loads need 16 */
#define DEFAULT_STAGING ((uint64_t)64 << 20) /* two chunks of this: big enough for full copy speed */
#define DEFAULT_BOUNCE ((uint64_t)8 << 20)   /* on-demand: two chunks of this; reads overlap copies */
#define SMEM_DEFAULT_LIMIT (48u * 1024u)     /* above it a kernel must opt in */

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

/* ---- images ------------------------------------------------------------ */
/* "sm_90" -> 90, 'a' suffix etc.; 0 when the name is not an arch. */
static int parse_arch(const char *arch, const char *prefix, char *suffix) {
  size_t n = strlen(prefix);
  if (strncmp(arch, prefix, n) != 0 || !isdigit((unsigned char)arch[n])) return 0;
  char *end;
  long v = strtol(arch + n, &end, 10);
  if (v <= 0 || v > 10000 || (*end && ((*end != 'a' && *end != 'f') || end[1]))) return 0;
  *suffix = *end;
  return (int)v;
}

/* Higher is better; -1 when the image cannot run on major.minor.  Cubins
 * always beat PTX (no JIT at load); among equals the arch-specific 'a'
 * build beats the plain one, which beats the family 'f' one. */
static int image_score(const dc_plan_cuda_image *img, int major, int minor) {
  int dev = major * 10 + minor, cubin = img->kind == DC_CUDA_IMAGE_CUBIN;
  char suffix = 0;
  int v = parse_arch(img->arch, cubin ? "sm_" : "compute_", &suffix);
  if (!v || (img->kind != DC_CUDA_IMAGE_CUBIN && img->kind != DC_CUDA_IMAGE_PTX)) return -1;
  int ok;
  if (suffix == 'a') ok = v == dev;
  else if (cubin || suffix == 'f') ok = v / 10 == major && v % 10 <= minor;
  else ok = v <= dev;
  if (!ok) return -1;
  return (cubin ? 1 << 20 : 0) + v * 4 + (suffix == 'a' ? 2 : suffix == 'f' ? 0 : 1);
}

int dc_cuda_pick_image(const dc_plan_cuda_kernel *k, int major, int minor) {
  int best = -1, best_score = -1;
  for (int i = 0; i < k->nimages; i++) {
    int s = image_score(&k->images[i], major, minor);
    if (s > best_score) best = i, best_score = s;
  }
  return best;
}

const char *dc_plan_cuda_archs(const dc_plan_cuda *k, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < k->nkernels; i++)
    for (int j = 0; j < k->kernels[i].nimages; j++) {
      const char *a = k->kernels[i].images[j].arch;
      int seen = 0;
      for (int i2 = 0; i2 <= i && !seen; i2++)
        for (int j2 = 0; j2 < (i2 == i ? j : k->kernels[i2].nimages) && !seen; j2++)
          seen = strcmp(k->kernels[i2].images[j2].arch, a) == 0;
      if (!seen && len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", a);
    }
  return buf;
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

static dc_status *no_image_error(const dc_cuda_backend *b, int d) {
  const dc_cuda_device_info *di = &b->info.dev[d];
  char archs[512];
  dc_plan_cuda_archs(b->k, archs, sizeof archs);
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: device %d (%s) has compute capability %d.%d, and the plan has no image for it (it holds %s: a "
                  "cubin sm_XY runs on X.Y and later GPUs of the same major X, PTX compute_XY on X.Y or newer); "
                  "recompile with diffc --target cuda --cuda-arch sm_%d%d",
                  b->path, di->ordinal, di->name, di->cc_major, di->cc_minor, archs[0] ? archs : "no images",
                  di->cc_major, di->cc_minor);
}

/* The image each kernel that runs on device d loads there. */
static dc_status *pick_images(dc_cuda_backend *b, int d) {
  const dc_cuda_device_info *di = &b->info.dev[d];
  for (int i = 0; i < b->k->nkernels; i++) {
    loaded_kernel *lk = &b->dev[d].kern[i];
    if (!lk->used) continue;
    lk->image = dc_cuda_pick_image(&b->k->kernels[i], di->cc_major, di->cc_minor);
    if (lk->image < 0) return no_image_error(b, d);
    const dc_plan_cuda_image *img = &b->k->kernels[i].images[lk->image];
    b->info.jit_kernels += img->kind == DC_CUDA_IMAGE_PTX;
    if (!b->info.image[0])
      snprintf(b->info.image, sizeof b->info.image, img->kind == DC_CUDA_IMAGE_PTX ? "PTX %s (JIT)" : "cubin %s",
               img->arch);
  }
  return NULL;
}

static dc_status *check_shared_memory(const dc_cuda_backend *b, int d) {
  const dc_cuda_device_info *di = &b->info.dev[d];
  int optin = b->dev[d].optin_smem;
  for (int i = 0; i < b->k->nkernels; i++) {
    const dc_plan_cuda_kernel *kk = &b->k->kernels[i];
    if (b->dev[d].kern[i].used && kk->smem_bytes > SMEM_DEFAULT_LIMIT && kk->smem_bytes > (uint32_t)optin)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: kernel %s needs %u bytes of dynamic shared memory per block, but device %d (%s, %d.%d) "
                      "allows at most %d; recompile for this GPU (diffc --cuda-arch sm_%d%d)",
                      b->path, kk->name, kk->smem_bytes, di->ordinal, di->name, di->cc_major, di->cc_minor, optin,
                      di->cc_major, di->cc_minor);
  }
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
  DC_TRY(CU(b, DeviceGetAttribute, &g->optin_smem, DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, g->dev));
  DC_TRY(pick_images(b, d));
  return check_shared_memory(b, d);
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

/* ---- memory plan ------------------------------------------------------------------ */
/* Places weight w at the aligned top of a block. */
static dc_status *place_weight(const dc_cuda_backend *b, int w, uint64_t *top, uint64_t *at) {
  *at = (*top + WEIGHT_ALIGN - 1) & ~(uint64_t)(WEIGHT_ALIGN - 1);
  if (dc_add_overflows(*at, b->m->weights[w].bytes, top))
    return dc_error(DC_ERR_FORMAT, "%s: weight \"%s\" overflows its block", b->path, b->m->weights[w].name);
  return NULL;
}

/* A weight lives where its node is (passes/place.c puts it with its first
 * reader; readers elsewhere get it through a transfer). */
static dc_status *assign_weight_devices(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  for (int w = 0; w < m->nweights; w++) b->weight_device[w] = -1;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op != OP_WEIGHT) continue;
    int *d = &b->weight_device[n->ref];
    if (*d >= 0 && *d != n->device)
      return dc_error(DC_ERR_FORMAT, "%s: weight \"%s\" has nodes on devices %d and %d; a weight lives on one device "
                      "(others read it through a transfer)", b->path, m->weights[n->ref].name, *d, n->device);
    *d = n->device;
  }
  for (int w = 0; w < m->nweights; w++)
    if (b->weight_device[w] < 0) b->weight_device[w] = 0;
  return NULL;
}

/* Each weight in its device's block or, when only uploads read it, in the
 * pinned host block. */
static dc_status *lay_out_weights(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  char *resident = dc_calloc((size_t)m->nweights + 1, 1);
  if (!resident) return dc_nomem("laying out weights");
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].op == OP_WEIGHT && !dc_weight_offloaded(m, s)) resident[m->nodes[s].ref] = 1;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT && !resident[n->ref] && m->weights[n->ref].bytes > b->largest_upload)
      b->largest_upload = m->weights[n->ref].bytes;
  }
  uint64_t dev_top[DC_MAX_DEVICES] = {0}, host_top = 0;
  dc_status *st = NULL;
  for (int w = 0; w < m->nweights && !st; w++) {
    b->weight_offset[w] = b->host_offset[w] = NOT_HERE;
    st = place_weight(b, w, resident[w] ? &dev_top[b->weight_device[w]] : &host_top,
                      resident[w] ? &b->weight_offset[w] : &b->host_offset[w]);
  }
  dc_free(resident);
  for (int d = 0; d < b->ndevices; d++) {
    b->info.dev[d].weight_block_bytes = dev_top[d];
    b->info.weight_block_bytes += dev_top[d];
  }
  b->info.host_weight_bytes = host_top;
  return st;
}

/* Each device's arena: up to the highest byte a value placed there
 * occupies (memplan's size for that device); the module's arena_bytes
 * bounds them all. */
static dc_status *lay_out_arenas(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT) continue;
    uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
    if (n->offset < 0 || end > m->arena_bytes)
      return dc_error(DC_ERR_FORMAT, "%s: step %d lies at [%lld, %llu) outside the arena of %llu bytes", b->path,
                      (int)s, (long long)n->offset, (unsigned long long)end, (unsigned long long)m->arena_bytes);
    dc_cuda_device_info *di = &b->info.dev[n->device];
    if (end > di->arena_bytes) di->arena_bytes = end;
  }
  for (int d = 0; d < b->ndevices; d++) {
    b->info.arena_bytes += b->info.dev[d].arena_bytes;
    if (b->info.dev[d].arena_bytes > b->info.arena_peak_bytes) b->info.arena_peak_bytes = b->info.dev[d].arena_bytes;
  }
  return NULL;
}

/* Which kernels each device runs, and room for its pending transfers. */
static dc_status *plan_devices(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  for (int d = 0; d < b->ndevices; d++) {
    int transfers_out = 0;
    for (int32_t s = 0; s < m->nnodes; s++)
      transfers_out += m->nodes[s].op == OP_TRANSFER && m->nodes[m->nodes[s].inputs[0]].device == d;
    b->dev[d].kern = dc_calloc((size_t)b->k->nkernels + 1, sizeof *b->dev[d].kern);
    b->dev[d].pending = dc_calloc((size_t)transfers_out + 1, sizeof *b->dev[d].pending);
    if (!b->dev[d].kern || !b->dev[d].pending) return dc_nomem("laying out CUDA devices");
  }
  for (int32_t s = 0; s < m->nnodes; s++)
    if (b->k->kernel_of_node[s] >= 0) b->dev[m->nodes[s].device].kern[b->k->kernel_of_node[s]].used = 1;
  return NULL;
}

/* Weight places, arenas, kernels per device: all before any driver call. */
static dc_status *lay_out(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  size_t nodes = (size_t)m->nnodes + 1, weights = (size_t)m->nweights + 1;
  b->weight_device = dc_calloc(weights, sizeof *b->weight_device);
  b->weight_offset = dc_calloc(weights, sizeof *b->weight_offset);
  b->host_offset = dc_calloc(weights, sizeof *b->host_offset);
  b->value = dc_calloc(nodes, sizeof *b->value);
  b->args = dc_calloc(nodes * NPARAMS, sizeof *b->args);
  b->params = dc_calloc(nodes * NPARAMS, sizeof *b->params);
  b->copy_may_start = dc_calloc(nodes, sizeof *b->copy_may_start);
  b->copied = dc_calloc(nodes, sizeof *b->copied);
  b->source_ready = dc_calloc(nodes, sizeof *b->source_ready);
  b->moved = dc_calloc(nodes, sizeof *b->moved);
  if (!b->weight_device || !b->weight_offset || !b->host_offset || !b->value || !b->args || !b->params ||
      !b->copy_may_start || !b->copied || !b->source_ready || !b->moved)
    return dc_nomem("laying out device memory");
  DC_TRY(assign_weight_devices(b));
  DC_TRY(lay_out_weights(b));
  DC_TRY(lay_out_arenas(b));
  return plan_devices(b);
}

static void set_addresses(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op != OP_WEIGHT) b->value[s] = b->dev[n->device].arena + (uint64_t)n->offset;
    else if (b->weight_offset[n->ref] != NOT_HERE)
      b->value[s] = b->dev[b->weight_device[n->ref]].weights + b->weight_offset[n->ref];
    else b->value[s] = 0; /* offloaded: only uploads read it, from host_weights */
    dc_cu_deviceptr *a = &b->args[(size_t)s * NPARAMS];
    a[0] = b->value[s];
    for (int i = 0; i < n->ninputs; i++) a[i + 1] = b->value[n->inputs[i]];
    for (int i = 0; i < NPARAMS; i++) b->params[(size_t)s * NPARAMS + i] = &a[i];
  }
}

/* Device d must hold its arena and its resident weights. */
static dc_status *check_free_memory(dc_cuda_backend *b, int d) {
  dc_cuda_device_info *di = &b->info.dev[d];
  DC_TRY(dc_cuda_use_device(b, d));
  DC_TRY(CU(b, MemGetInfo, &di->free_bytes, &di->total_bytes));
  if (d == 0) b->info.device_free_bytes = di->free_bytes, b->info.device_total_bytes = di->total_bytes;
  uint64_t need = di->arena_bytes + di->weight_block_bytes;
  if (need <= di->free_bytes) return NULL;
  char n1[32], n2[32], n3[32], n4[32], n5[32], where[64] = "", advice[1024];
  if (b->ndevices > 1) snprintf(where, sizeof where, " on its device %d of %d", d, b->ndevices);
  dc_fit_advice(b->opt.options_json, di->free_bytes, advice, sizeof advice);
  return dc_error(DC_ERR_NOMEM,
                  "%s: the plan needs %s of device memory%s (%llu bytes: activation arena %s + resident weights %s) "
                  "but device %d (%s) has %s free (%llu bytes) of %s; nothing was run.  To fit, free GPU memory "
                  "(other processes?) or compile for less: diffc --offload model|sequential|group keeps weights in "
                  "host memory, a smaller batch or resolution (--input) shrinks the arena%s%s",
                  b->path, dc_format_bytes(need, n1, sizeof n1), where, (unsigned long long)need,
                  dc_format_bytes(di->arena_bytes, n2, sizeof n2),
                  dc_format_bytes(di->weight_block_bytes, n3, sizeof n3),
                  di->ordinal, di->name, dc_format_bytes(di->free_bytes, n4, sizeof n4),
                  (unsigned long long)di->free_bytes, dc_format_bytes(di->total_bytes, n5, sizeof n5),
                  b->ndevices > 1 ? ", a lower --max-memory budget for this device moves modules to the others" : "",
                  advice);
}

static dc_status *allocate_device(dc_cuda_backend *b, int d) {
  const dc_cuda_device_info *di = &b->info.dev[d];
  char n1[32], on[48] = "";
  if (b->ndevices > 1) snprintf(on, sizeof on, " on device %d", di->ordinal);
  DC_TRY(dc_cuda_use_device(b, d));
  if (di->arena_bytes)
    DC_TRY(dc_status_annotate(CU(b, MemAlloc, &b->dev[d].arena, di->arena_bytes), "%s: allocating the %s arena%s",
                              b->path, dc_format_bytes(di->arena_bytes, n1, sizeof n1), on));
  if (di->weight_block_bytes)
    DC_TRY(dc_status_annotate(CU(b, MemAlloc, &b->dev[d].weights, di->weight_block_bytes),
                              "%s: allocating the %s weight block%s", b->path,
                              dc_format_bytes(di->weight_block_bytes, n1, sizeof n1), on));
  b->info.device_bytes += di->arena_bytes + di->weight_block_bytes;
  return NULL;
}

static dc_status *alloc_pinned(dc_cuda_backend *b, uint64_t bytes, void **out, const char *what) {
  *out = NULL;
  DC_TRY(dc_status_annotate(CU(b, MemHostAlloc, out, bytes ? bytes : 4, DC_CU_MEMHOSTALLOC_PORTABLE),
                            "%s: pinned host buffer for %s", b->path, what));
  memset(*out, 0, bytes);
  b->info.pinned_bytes += bytes;
  return NULL;
}

/* Pinned buffers are portable: the copies of every device use them. */
static dc_status *allocate_host_io(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  DC_TRY(dc_cuda_use_device(b, 0));
  b->host_in = dc_calloc((size_t)m->ninputs + 1, sizeof *b->host_in);
  b->host_out = dc_calloc((size_t)m->noutputs + 1, sizeof *b->host_out);
  if (!b->host_in || !b->host_out) return dc_nomem("allocating CUDA host buffers");
  for (int i = 0; i < m->ninputs; i++)
    DC_TRY(alloc_pinned(b, dc_type_bytes(&m->nodes[m->inputs[i].node].type), (void **)&b->host_in[i],
                        m->inputs[i].name));
  for (int i = 0; i < m->noutputs; i++)
    DC_TRY(alloc_pinned(b, dc_type_bytes(&m->nodes[m->outputs[i].node].type), (void **)&b->host_out[i],
                        m->outputs[i].name));
  if (!b->opt.check_step) return NULL;
  uint64_t most = 0;
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].type.dtype == DT_F32 && dc_type_bytes(&m->nodes[s].type) > most)
      most = dc_type_bytes(&m->nodes[s].type);
  return alloc_pinned(b, most, (void **)&b->check_buf, "--check-finite");
}

/* ---- weight upload ------------------------------------------------------------ */
/* The bytes of range [start, start + len) of device d's weight block: the
 * weights that overlap it, zeros in the alignment gaps.  *w is a cursor
 * over the weights in offset order. */
static void fill_chunk(const dc_cuda_backend *b, int d, const void *const *data, uint64_t start, uint64_t len,
                       int *w, uint8_t *dst) {
  const dc_module *m = b->m;
  uint64_t pos = start, end = start + len;
  while (pos < end) {
    while (*w < m->nweights && (b->weight_offset[*w] == NOT_HERE || b->weight_device[*w] != d ||
                                b->weight_offset[*w] + m->weights[*w].bytes <= pos))
      (*w)++;
    uint64_t wbeg = *w < m->nweights ? b->weight_offset[*w] : end;
    if (pos < wbeg) { /* gap before the next weight */
      uint64_t n = (wbeg < end ? wbeg : end) - pos;
      memset(dst + (pos - start), 0, n);
      pos += n;
      continue;
    }
    uint64_t wend = wbeg + m->weights[*w].bytes, n = (wend < end ? wend : end) - pos;
    memcpy(dst + (pos - start), (const uint8_t *)data[*w] + (pos - wbeg), n);
    pos += n;
  }
}

typedef struct {
  void *buf[2];
  dc_cu_event copied[2]; /* made in the context of the device being filled */
  int in_flight[2];
} staging;

static dc_status *upload_chunks(dc_cuda_backend *b, int d, const void *const *data, staging *sg, uint64_t chunk) {
  const cuda_device *g = &b->dev[d];
  uint64_t total = b->info.dev[d].weight_block_bytes;
  int w = 0;
  char n1[32];
  for (uint64_t start = 0, c = 0; start < total; start += chunk, c++) {
    int k = (int)(c & 1);
    uint64_t len = total - start < chunk ? total - start : chunk;
    /* The copy out of this buffer two chunks ago must be done before we
     * overwrite it; the other buffer's copy keeps running meanwhile. */
    if (sg->in_flight[k]) DC_TRY(CU(b, EventSynchronize, sg->copied[k]));
    fill_chunk(b, d, data, start, len, &w, sg->buf[k]);
    DC_TRY(dc_status_annotate(CU(b, MemcpyHtoDAsync, g->weights + start, sg->buf[k], len, g->copy),
                              "%s: uploading weights at %s of the weight block of device %d", b->path,
                              dc_format_bytes(start, n1, sizeof n1), g->ordinal));
    DC_TRY(CU(b, EventRecord, sg->copied[k], g->copy));
    sg->in_flight[k] = 1;
  }
  return CU(b, StreamSynchronize, g->copy);
}

/* Device d's weight block through the staging buffers, with events of its
 * own context; every copy is done when this returns, even on failure. */
static dc_status *upload_device_weights(dc_cuda_backend *b, int d, const void *const *data, staging *sg,
                                        uint64_t chunk) {
  DC_TRY(dc_cuda_use_device(b, d));
  dc_status *st = NULL;
  sg->in_flight[0] = sg->in_flight[1] = 0;
  for (int k = 0; k < 2 && !st; k++) st = CU(b, EventCreate, &sg->copied[k], DC_CU_EVENT_DISABLE_TIMING);
  if (!st) st = upload_chunks(b, d, data, sg, chunk);
  if (st) b->api.StreamSynchronize(b->dev[d].copy); /* no copy may still read the staging buffers */
  for (int k = 0; k < 2; k++) {
    if (sg->copied[k]) b->api.EventDestroy(sg->copied[k]);
    sg->copied[k] = NULL;
  }
  return st;
}

static dc_status *upload_weights(dc_cuda_backend *b, const void *const *data) {
  uint64_t largest = 0;
  for (int d = 0; d < b->ndevices; d++)
    if (b->info.dev[d].weight_block_bytes > largest) largest = b->info.dev[d].weight_block_bytes;
  if (!largest) return NULL;
  uint64_t chunk = b->opt.staging_bytes ? b->opt.staging_bytes : DEFAULT_STAGING;
  if (chunk > largest) chunk = largest;
  staging sg = {{NULL, NULL}, {NULL, NULL}, {0, 0}};
  dc_status *st = NULL;
  for (int k = 0; k < 2 && !st; k++)
    st = dc_status_annotate(CU(b, MemHostAlloc, &sg.buf[k], chunk, DC_CU_MEMHOSTALLOC_PORTABLE),
                            "%s: pinned staging buffer for the weight upload", b->path);
  if (!st) b->info.staging_bytes = 2 * chunk;
  for (int d = 0; d < b->ndevices && !st; d++)
    if (b->info.dev[d].weight_block_bytes) st = upload_device_weights(b, d, data, &sg, chunk);
  for (int k = 0; k < 2; k++)
    if (sg.buf[k]) b->api.MemFreeHost(sg.buf[k]);
  return st;
}

/* on-demand: two pinned chunks (their events are each device's). */
static dc_status *allocate_bounce(dc_cuda_backend *b) {
  uint64_t chunk = b->opt.bounce_bytes ? b->opt.bounce_bytes : DEFAULT_BOUNCE;
  if (chunk > b->largest_upload) chunk = b->largest_upload;
  b->info.bounce_bytes = chunk;
  for (int k = 0; k < 2; k++) DC_TRY(alloc_pinned(b, chunk, &b->bounce[k], "the on-demand weights' bounce chunk"));
  return NULL;
}

/* Offloaded weights into their pinned block, for the uploads of each run
 * (on-demand: only the bounce chunks they will be read through). */
static dc_status *stage_host_weights(dc_cuda_backend *b, const void *const *data) {
  const dc_module *m = b->m;
  if (!b->info.host_weight_bytes || !b->largest_upload) return NULL;
  DC_TRY(dc_cuda_use_device(b, 0));
  if (b->info.on_demand) return allocate_bounce(b);
  DC_TRY(alloc_pinned(b, b->info.host_weight_bytes, (void **)&b->host_weights, "the offloaded weights"));
  for (int w = 0; w < m->nweights; w++)
    if (b->host_offset[w] != NOT_HERE) memcpy(b->host_weights + b->host_offset[w], data[w], m->weights[w].bytes);
  return NULL;
}

/* ---- modules --------------------------------------------------------------------- */
/* Kernel i into device d's context (current). */
static dc_status *load_module(dc_cuda_backend *b, int d, int i) {
  const dc_plan_cuda_kernel *kk = &b->k->kernels[i];
  loaded_kernel *lk = &b->dev[d].kern[i];
  const dc_plan_cuda_image *img = &kk->images[lk->image];
  dc_status *st;
  if (img->kind == DC_CUDA_IMAGE_PTX) {
    char log[4096] = "";
    int opts[] = {DC_CU_JIT_ERROR_LOG_BUFFER, DC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(uintptr_t)(sizeof log - 1)};
    st = CU(b, ModuleLoadDataEx, &lk->module, img->data, 2, opts, vals);
    if (st && log[0]) { /* what the JIT said is the useful part */
      dc_status *with_log = dc_error(dc_status_code_of(st), "%s; the PTX JIT said: %.600s", dc_status_message(st), log);
      dc_status_free(st);
      st = with_log;
    }
  } else {
    st = CU(b, ModuleLoadData, &lk->module, img->data);
  }
  if (!st) st = CU(b, ModuleGetFunction, &lk->fn, lk->module, kk->name);
  if (!st && kk->smem_bytes > SMEM_DEFAULT_LIMIT)
    st = CU(b, FuncSetAttribute, lk->fn, DC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)kk->smem_bytes);
  char on[48] = "";
  if (b->ndevices > 1) snprintf(on, sizeof on, " on device %d", b->dev[d].ordinal);
  return dc_status_annotate(st, "%s: kernel %s (%s %s)%s", b->path, kk->name,
                            img->kind == DC_CUDA_IMAGE_PTX ? "PTX" : "cubin", img->arch, on);
}

static dc_status *load_modules(dc_cuda_backend *b) {
  for (int d = 0; d < b->ndevices; d++) {
    DC_TRY(dc_cuda_use_device(b, d));
    for (int i = 0; i < b->k->nkernels; i++)
      if (b->dev[d].kern[i].used) DC_TRY(load_module(b, d, i));
  }
  return NULL;
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

/* ---- create, destroy ------------------------------------------------------------------ */
static dc_status *create(dc_cuda_backend *b, const void *const *weight_data) {
  DC_TRY(check_kernels(b));
  DC_TRY(lay_out(b));
  DC_TRY(host_memory_mode(b));
  DC_TRY(open_devices(b));
  for (int d = 0; d < b->ndevices; d++) DC_TRY(check_free_memory(b, d));
  DC_TRY(create_streams(b));
  for (int d = 0; d < b->ndevices; d++) DC_TRY(allocate_device(b, d));
  set_addresses(b);
  DC_TRY(allocate_host_io(b));
  DC_TRY(upload_weights(b, weight_data));
  DC_TRY(stage_host_weights(b, weight_data));
  return load_modules(b);
}

dc_status *dc_cuda_backend_create(const char *path, const dc_module *m, const dc_plan_cuda *k,
                                  const void *const *weight_data, const dc_cu_api *api,
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
  dc_status *st = b->path ? create(b, weight_data) : dc_nomem("creating the CUDA backend");
  if (st) {
    dc_cuda_backend_destroy(b);
    return st;
  }
  *out = b;
  return NULL;
}

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
    }
    if (m->nodes[s].op == OP_TRANSFER && source_device(m, s) == d) destroy_event(a, b->source_ready, s);
  }
  dc_cu_event evs[] = {g->inputs_ready, g->begin, g->end, g->bounce_copied[0], g->bounce_copied[1]};
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
  dc_free(b->weight_device);
  dc_free(b->weight_offset);
  dc_free(b->host_offset);
  dc_free(b->value);
  dc_free(b->args);
  dc_free(b->params);
  dc_free(b->host_in);
  dc_free(b->host_out);
  dc_free(b->path);
  dc_free(b);
}

float *dc_cuda_backend_input(dc_cuda_backend *b, int i) { return b->host_in[i]; }
float *dc_cuda_backend_output(dc_cuda_backend *b, int i) { return b->host_out[i]; }
const dc_cuda_backend_info *dc_cuda_backend_get_info(const dc_cuda_backend *b) { return &b->info; }
