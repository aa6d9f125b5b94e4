/* cuda_memory.c — where a CUDA plan's bytes live and how the weights get
 * there: each weight on the device of its node, in that device's block at a
 * 256-byte aligned offset, or (offloaded: only uploads read it) in the
 * pinned host block; each device's arena up to the highest byte the memory
 * plan places on it; every node's device address and launch parameters.
 * All of it is laid out before the first driver call, checked against each
 * device's free memory, then allocated; the resident weights go up through
 * two pinned staging chunks, and offloaded ones wait in their pinned block
 * or, on-demand, in their files behind two pinned bounce chunks. */
#include "cuda_backend_impl.h"
#include "fit_advice.h"
#include "host_weights.h"

#include <string.h>

#define WEIGHT_ALIGN 256u                    /* what cuMemAlloc guarantees; vector loads need 16 */
#define DEFAULT_STAGING ((uint64_t)64 << 20) /* two chunks of this: big enough for full copy speed */
#define DEFAULT_BOUNCE DC_CUDA_BOUNCE_BYTES   /* on-demand: two chunks (host_weights.h) */

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
dc_status *dc_cuda_lay_out(dc_cuda_backend *b) {
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
dc_status *dc_cuda_check_free_memory(dc_cuda_backend *b, int d) {
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

dc_status *dc_cuda_backend_allocate(dc_cuda_backend *b) {
  for (int d = 0; d < b->ndevices; d++) DC_TRY(allocate_device(b, d));
  set_addresses(b);
  return allocate_host_io(b);
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

dc_status *dc_cuda_backend_upload_weights(dc_cuda_backend *b, const void *const *weight_data) {
  DC_TRY(upload_weights(b, weight_data));
  return stage_host_weights(b, weight_data);
}
