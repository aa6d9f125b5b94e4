/* cuda_backend.c — a CUDA plan on one GPU, through the driver API table of
 * cuda_driver.h.  The device side of runtime.c's model (DESIGN.md): one
 * arena at the planned size, resident weights in one block, a copy stream
 * and a compute stream ordered by events.  Offloaded weights (passes/
 * offload.c) stay in one pinned host block, or with host_memory on-demand
 * in their files (read through two pinned bounce chunks at each upload);
 * each OP_UPLOAD step copies one into its arena place on the copy stream
 * once the compute before it in the schedule is done (the place may have
 * held a value until then), and the kernels that read it wait for that
 * copy alone, so prefetched uploads overlap the compute in between.
 * Every driver call is checked and a failure names what was being done:
 * the step, the kernel, the buffer. */
#include "cuda_backend.h"
#include "fit_advice.h"
#include "host_weights.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define WEIGHT_ALIGN 256u                    /* what cuMemAlloc guarantees; vector loads need 16 */
#define NOT_HERE UINT64_MAX                  /* a weight's offset in the block that does not hold it */
#define DEFAULT_STAGING ((uint64_t)64 << 20) /* two chunks of this: big enough for full copy speed */
#define DEFAULT_BOUNCE ((uint64_t)8 << 20)   /* on-demand: two chunks of this; reads overlap copies */
#define SMEM_DEFAULT_LIMIT (48u * 1024u)     /* above it a kernel must opt in */
#define NPARAMS (DC_MAX_INPUTS + 1)

typedef struct {
  dc_cu_module module;
  dc_cu_function fn;
  int image;
} loaded_kernel;

struct dc_cuda_backend {
  char *path;
  const dc_module *m;
  const dc_plan_cuda *k;
  dc_cu_api api;
  dc_cuda_backend_options opt;
  dc_cuda_backend_info info;
  dc_cu_device dev;
  dc_cu_context ctx;
  int ctx_retained;
  dc_cu_stream compute, copy;
  dc_cu_event inputs_ready, begin, end;
  dc_cu_event *step_done; /* per node, created on the first profiled run */
  dc_cu_event *copy_may_start, *copied; /* per OP_UPLOAD node: compute before it done; its copy done */
  loaded_kernel *kern;
  dc_cu_deviceptr arena, weights;
  uint64_t *weight_offset;       /* per weight, in the weight block, or NOT_HERE when offloaded */
  uint64_t *host_offset;         /* per weight, in host_weights, or NOT_HERE when resident */
  uint8_t *host_weights;         /* pinned: the offloaded weights (host_memory pinned) */
  uint64_t largest_upload;       /* the largest offloaded weight */
  /* host_memory on-demand: uploads read their weight's file chunk by chunk
   * into these, alternating; a chunk is refilled only after the event
   * recorded behind its last copy has completed. */
  void *bounce[2];
  dc_cu_event bounce_copied[2];
  int bounce_used[2], next_bounce;
  dc_cu_deviceptr *value;        /* per node: where its value lives on the device */
  dc_cu_deviceptr *args;         /* per node, NPARAMS: out, then the inputs */
  void **params;                 /* per node, NPARAMS: &args[...] as cuLaunchKernel wants */
  float **host_in, **host_out;   /* pinned */
  float *check_buf;              /* pinned, the largest f32 step output (check_step only) */
};

/* Calls a driver entry through the table and turns its result into a status. */
#define CU(b, fn, ...) dc_cu_check(&(b)->api, (b)->api.fn(__VA_ARGS__), "cu" #fn)

static const char *node_what(const dc_module *m, int32_t s, char *buf, size_t cap) {
  const dc_node *n = &m->nodes[s];
  if (n->scope && *n->scope) snprintf(buf, cap, "step %d (%s in %s)", (int)s, dc_op_get(n->op)->name, n->scope);
  else snprintf(buf, cap, "step %d (%s)", (int)s, dc_op_get(n->op)->name);
  return buf;
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
static dc_status *check_kernels(const dc_cuda_backend *b) {
  const dc_module *m = b->m;
  const dc_plan_cuda *k = b->k;
  if (k->nnodes != m->nnodes || (m->nnodes && !k->kernel_of_node))
    return dc_error(DC_ERR_FORMAT, "%s: the CUDA kernel table covers %d nodes but the schedule has %d", b->path,
                    k->nnodes, m->nnodes);
  for (int32_t s = 0; s < m->nnodes; s++) {
    /* Leaves have no kernel, and an upload is a copy, not a kernel. */
    int none = (dc_op_get(m->nodes[s].op)->flags & OPF_LEAF) || m->nodes[s].op == OP_UPLOAD;
    int32_t ki = k->kernel_of_node[s];
    char what[300];
    if (none ? ki != -1 : ki < 0 || ki >= k->nkernels)
      return dc_error(DC_ERR_FORMAT, "%s: %s has kernel index %d (kernels 0..%d%s)", b->path,
                      node_what(m, s, what, sizeof what), ki, k->nkernels - 1,
                      none ? "; leaves and uploads have none, -1" : "");
  }
  return NULL;
}

static dc_status *no_image_error(const dc_cuda_backend *b) {
  char archs[512];
  dc_plan_cuda_archs(b->k, archs, sizeof archs);
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: device %d (%s) has compute capability %d.%d, and the plan has no image for it (it holds %s: a "
                  "cubin sm_XY runs on X.Y and later GPUs of the same major X, PTX compute_XY on X.Y or newer); "
                  "recompile with diffc --target cuda --cuda-arch sm_%d%d",
                  b->path, b->opt.device, b->info.device_name, b->info.cc_major, b->info.cc_minor,
                  archs[0] ? archs : "no images", b->info.cc_major, b->info.cc_minor);
}

static dc_status *pick_images(dc_cuda_backend *b) {
  b->kern = dc_calloc((size_t)b->k->nkernels + 1, sizeof *b->kern);
  if (!b->kern) return dc_nomem("loading CUDA kernels");
  for (int i = 0; i < b->k->nkernels; i++) {
    int img = dc_cuda_pick_image(&b->k->kernels[i], b->info.cc_major, b->info.cc_minor);
    if (img < 0) return no_image_error(b);
    b->kern[i].image = img;
    b->info.jit_kernels += b->k->kernels[i].images[img].kind == DC_CUDA_IMAGE_PTX;
  }
  if (b->k->nkernels > 0) {
    const dc_plan_cuda_image *img = &b->k->kernels[0].images[b->kern[0].image];
    snprintf(b->info.image, sizeof b->info.image, img->kind == DC_CUDA_IMAGE_PTX ? "PTX %s (JIT)" : "cubin %s",
             img->arch);
  }
  return NULL;
}

static dc_status *check_shared_memory(const dc_cuda_backend *b, int optin) {
  for (int i = 0; i < b->k->nkernels; i++) {
    const dc_plan_cuda_kernel *kk = &b->k->kernels[i];
    if (kk->smem_bytes > SMEM_DEFAULT_LIMIT && kk->smem_bytes > (uint32_t)optin)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: kernel %s needs %u bytes of dynamic shared memory per block, but device %d (%s, %d.%d) "
                      "allows at most %d; recompile for this GPU (diffc --cuda-arch sm_%d%d)",
                      b->path, kk->name, kk->smem_bytes, b->opt.device, b->info.device_name, b->info.cc_major,
                      b->info.cc_minor, optin, b->info.cc_major, b->info.cc_minor);
  }
  return NULL;
}

/* ---- device, memory plan ---------------------------------------------------- */
static dc_status *open_device(dc_cuda_backend *b) {
  int count = 0, optin = 0;
  DC_TRY(CU(b, Init, 0));
  DC_TRY(CU(b, DeviceGetCount, &count));
  if (b->opt.device < 0 || b->opt.device >= count)
    return dc_error(DC_ERR_ARGUMENT, "--device %d: this machine has %d CUDA device(s)%s", b->opt.device, count,
                    count > 0 ? " (numbered from 0)" : "");
  DC_TRY(CU(b, DeviceGet, &b->dev, b->opt.device));
  DC_TRY(CU(b, DeviceGetName, b->info.device_name, (int)sizeof b->info.device_name - 1, b->dev));
  DC_TRY(CU(b, DeviceGetAttribute, &b->info.cc_major, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, b->dev));
  DC_TRY(CU(b, DeviceGetAttribute, &b->info.cc_minor, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, b->dev));
  DC_TRY(CU(b, DeviceGetAttribute, &optin, DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, b->dev));
  DC_TRY(pick_images(b));
  DC_TRY(check_shared_memory(b, optin));
  DC_TRY(CU(b, DevicePrimaryCtxRetain, &b->ctx, b->dev));
  b->ctx_retained = 1;
  return CU(b, CtxSetCurrent, b->ctx);
}

/* Places weight w at the aligned top of a block. */
static dc_status *place_weight(const dc_cuda_backend *b, int w, uint64_t *top, uint64_t *at) {
  *at = (*top + WEIGHT_ALIGN - 1) & ~(uint64_t)(WEIGHT_ALIGN - 1);
  if (dc_add_overflows(*at, b->m->weights[w].bytes, top))
    return dc_error(DC_ERR_FORMAT, "%s: weight \"%s\" overflows its block", b->path, b->m->weights[w].name);
  return NULL;
}

/* Each weight in the device block or, when only uploads read it, in the
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
  uint64_t dev_top = 0, host_top = 0;
  dc_status *st = NULL;
  for (int w = 0; w < m->nweights && !st; w++) {
    b->weight_offset[w] = b->host_offset[w] = NOT_HERE;
    st = place_weight(b, w, resident[w] ? &dev_top : &host_top,
                      resident[w] ? &b->weight_offset[w] : &b->host_offset[w]);
  }
  dc_free(resident);
  b->info.weight_block_bytes = dev_top;
  b->info.host_weight_bytes = host_top;
  return st;
}

/* Weight places, node addresses, launch parameters. */
static dc_status *lay_out(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  b->weight_offset = dc_calloc((size_t)m->nweights + 1, sizeof *b->weight_offset);
  b->host_offset = dc_calloc((size_t)m->nweights + 1, sizeof *b->host_offset);
  b->value = dc_calloc((size_t)m->nnodes + 1, sizeof *b->value);
  b->args = dc_calloc((size_t)m->nnodes * NPARAMS + 1, sizeof *b->args);
  b->params = dc_calloc((size_t)m->nnodes * NPARAMS + 1, sizeof *b->params);
  b->copy_may_start = dc_calloc((size_t)m->nnodes + 1, sizeof *b->copy_may_start);
  b->copied = dc_calloc((size_t)m->nnodes + 1, sizeof *b->copied);
  if (!b->weight_offset || !b->host_offset || !b->value || !b->args || !b->params || !b->copy_may_start ||
      !b->copied)
    return dc_nomem("laying out device memory");
  DC_TRY(lay_out_weights(b));
  b->info.arena_bytes = m->arena_bytes;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT) continue;
    uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
    if (n->offset < 0 || end > m->arena_bytes)
      return dc_error(DC_ERR_FORMAT, "%s: step %d lies at [%lld, %llu) outside the arena of %llu bytes", b->path,
                      (int)s, (long long)n->offset, (unsigned long long)end, (unsigned long long)m->arena_bytes);
    if (end > b->info.arena_peak_bytes) b->info.arena_peak_bytes = end;
  }
  return NULL;
}

static void set_addresses(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op != OP_WEIGHT) b->value[s] = b->arena + (uint64_t)n->offset;
    else if (b->weight_offset[n->ref] != NOT_HERE) b->value[s] = b->weights + b->weight_offset[n->ref];
    else b->value[s] = 0; /* offloaded: only uploads read it, from host_weights */
    dc_cu_deviceptr *a = &b->args[(size_t)s * NPARAMS];
    a[0] = b->value[s];
    for (int i = 0; i < n->ninputs; i++) a[i + 1] = b->value[n->inputs[i]];
    for (int i = 0; i < NPARAMS; i++) b->params[(size_t)s * NPARAMS + i] = &a[i];
  }
}

static dc_status *check_free_memory(dc_cuda_backend *b) {
  DC_TRY(CU(b, MemGetInfo, &b->info.device_free_bytes, &b->info.device_total_bytes));
  uint64_t need = b->info.arena_bytes + b->info.weight_block_bytes;
  if (need <= b->info.device_free_bytes) return NULL;
  char n1[32], n2[32], n3[32], n4[32], n5[32], advice[1024];
  dc_fit_advice(b->opt.options_json, b->info.device_free_bytes, advice, sizeof advice);
  return dc_error(DC_ERR_NOMEM,
                  "%s: the plan needs %s of device memory (%llu bytes: activation arena %s + resident weights %s) "
                  "but device %d (%s) has %s free (%llu bytes) of %s; nothing was run.  To fit, free GPU memory "
                  "(other processes?) or compile for less: diffc --offload model|sequential|group keeps weights in "
                  "host memory, a smaller batch or resolution (--input) shrinks the arena%s",
                  b->path, dc_format_bytes(need, n1, sizeof n1), (unsigned long long)need,
                  dc_format_bytes(b->info.arena_bytes, n2, sizeof n2),
                  dc_format_bytes(b->info.weight_block_bytes, n3, sizeof n3), b->opt.device, b->info.device_name,
                  dc_format_bytes(b->info.device_free_bytes, n4, sizeof n4),
                  (unsigned long long)b->info.device_free_bytes,
                  dc_format_bytes(b->info.device_total_bytes, n5, sizeof n5), advice);
}

static dc_status *allocate_device(dc_cuda_backend *b) {
  char n1[32];
  if (b->info.arena_bytes)
    DC_TRY(dc_status_annotate(CU(b, MemAlloc, &b->arena, b->info.arena_bytes), "%s: allocating the %s arena",
                              b->path, dc_format_bytes(b->info.arena_bytes, n1, sizeof n1)));
  if (b->info.weight_block_bytes)
    DC_TRY(dc_status_annotate(CU(b, MemAlloc, &b->weights, b->info.weight_block_bytes),
                              "%s: allocating the %s weight block", b->path,
                              dc_format_bytes(b->info.weight_block_bytes, n1, sizeof n1)));
  b->info.device_bytes = b->info.arena_bytes + b->info.weight_block_bytes;
  set_addresses(b);
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

static dc_status *allocate_host_io(dc_cuda_backend *b) {
  const dc_module *m = b->m;
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
/* The bytes of device range [start, start + len) of the weight block: the
 * weights that overlap it, zeros in the alignment gaps.  *w is a cursor
 * over the weights in offset order. */
static void fill_chunk(const dc_cuda_backend *b, const void *const *data, uint64_t start, uint64_t len, int *w,
                       uint8_t *dst) {
  const dc_module *m = b->m;
  uint64_t pos = start, end = start + len;
  while (pos < end) {
    while (*w < m->nweights &&
           (b->weight_offset[*w] == NOT_HERE || b->weight_offset[*w] + m->weights[*w].bytes <= pos))
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
  dc_cu_event copied[2];
  int in_flight[2];
} staging;

static dc_status *upload_chunks(dc_cuda_backend *b, const void *const *data, staging *sg, uint64_t chunk) {
  uint64_t total = b->info.weight_block_bytes;
  int w = 0;
  char n1[32];
  for (uint64_t start = 0, c = 0; start < total; start += chunk, c++) {
    int k = (int)(c & 1);
    uint64_t len = total - start < chunk ? total - start : chunk;
    /* The copy out of this buffer two chunks ago must be done before we
     * overwrite it; the other buffer's copy keeps running meanwhile. */
    if (sg->in_flight[k]) DC_TRY(CU(b, EventSynchronize, sg->copied[k]));
    fill_chunk(b, data, start, len, &w, sg->buf[k]);
    DC_TRY(dc_status_annotate(CU(b, MemcpyHtoDAsync, b->weights + start, sg->buf[k], len, b->copy),
                              "%s: uploading weights at %s of the weight block", b->path,
                              dc_format_bytes(start, n1, sizeof n1)));
    DC_TRY(CU(b, EventRecord, sg->copied[k], b->copy));
    sg->in_flight[k] = 1;
  }
  return CU(b, StreamSynchronize, b->copy);
}

static dc_status *upload_weights(dc_cuda_backend *b, const void *const *data) {
  uint64_t total = b->info.weight_block_bytes;
  if (!total) return NULL;
  uint64_t chunk = b->opt.staging_bytes ? b->opt.staging_bytes : DEFAULT_STAGING;
  if (chunk > total) chunk = total;
  staging sg = {{NULL, NULL}, {NULL, NULL}, {0, 0}};
  dc_status *st = NULL;
  for (int k = 0; k < 2 && !st; k++) {
    st = dc_status_annotate(CU(b, MemHostAlloc, &sg.buf[k], chunk, DC_CU_MEMHOSTALLOC_PORTABLE),
                            "%s: pinned staging buffer for the weight upload", b->path);
    if (!st) st = CU(b, EventCreate, &sg.copied[k], DC_CU_EVENT_DISABLE_TIMING);
  }
  if (!st) {
    b->info.staging_bytes = 2 * chunk;
    st = upload_chunks(b, data, &sg, chunk);
  }
  if (st) b->api.StreamSynchronize(b->copy); /* no copy may still read the staging buffers */
  for (int k = 0; k < 2; k++) {
    if (sg.copied[k]) b->api.EventDestroy(sg.copied[k]);
    if (sg.buf[k]) b->api.MemFreeHost(sg.buf[k]);
  }
  return st;
}

/* on-demand: two pinned chunks and their events; no copy of the weights. */
static dc_status *allocate_bounce(dc_cuda_backend *b) {
  uint64_t chunk = b->opt.bounce_bytes ? b->opt.bounce_bytes : DEFAULT_BOUNCE;
  if (chunk > b->largest_upload) chunk = b->largest_upload;
  b->info.bounce_bytes = chunk;
  for (int k = 0; k < 2; k++) {
    DC_TRY(alloc_pinned(b, chunk, &b->bounce[k], "the on-demand weights' bounce chunk"));
    DC_TRY(CU(b, EventCreate, &b->bounce_copied[k], DC_CU_EVENT_DISABLE_TIMING));
  }
  return NULL;
}

/* Offloaded weights into their pinned block, for the uploads of each run
 * (on-demand: only the bounce chunks they will be read through). */
static dc_status *stage_host_weights(dc_cuda_backend *b, const void *const *data) {
  const dc_module *m = b->m;
  if (!b->info.host_weight_bytes || !b->largest_upload) return NULL;
  if (b->info.on_demand) return allocate_bounce(b);
  DC_TRY(alloc_pinned(b, b->info.host_weight_bytes, (void **)&b->host_weights, "the offloaded weights"));
  for (int w = 0; w < m->nweights; w++)
    if (b->host_offset[w] != NOT_HERE) memcpy(b->host_weights + b->host_offset[w], data[w], m->weights[w].bytes);
  return NULL;
}

/* ---- modules --------------------------------------------------------------------- */
static dc_status *load_module(dc_cuda_backend *b, int i) {
  const dc_plan_cuda_kernel *kk = &b->k->kernels[i];
  const dc_plan_cuda_image *img = &kk->images[b->kern[i].image];
  loaded_kernel *lk = &b->kern[i];
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
  return dc_status_annotate(st, "%s: kernel %s (%s %s)", b->path, kk->name,
                            img->kind == DC_CUDA_IMAGE_PTX ? "PTX" : "cubin", img->arch);
}

static dc_status *create_streams(dc_cuda_backend *b) {
  DC_TRY(CU(b, StreamCreate, &b->compute, DC_CU_STREAM_NON_BLOCKING));
  DC_TRY(CU(b, StreamCreate, &b->copy, DC_CU_STREAM_NON_BLOCKING));
  DC_TRY(CU(b, EventCreate, &b->inputs_ready, DC_CU_EVENT_DISABLE_TIMING));
  DC_TRY(CU(b, EventCreate, &b->begin, DC_CU_EVENT_DEFAULT));
  DC_TRY(CU(b, EventCreate, &b->end, DC_CU_EVENT_DEFAULT));
  for (int32_t s = 0; s < b->m->nnodes; s++) {
    if (b->m->nodes[s].op != OP_UPLOAD) continue;
    DC_TRY(CU(b, EventCreate, &b->copy_may_start[s], DC_CU_EVENT_DISABLE_TIMING));
    DC_TRY(CU(b, EventCreate, &b->copied[s], DC_CU_EVENT_DISABLE_TIMING));
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

static dc_status *create(dc_cuda_backend *b, const void *const *weight_data) {
  DC_TRY(check_kernels(b));
  DC_TRY(lay_out(b));
  DC_TRY(host_memory_mode(b));
  DC_TRY(open_device(b));
  DC_TRY(check_free_memory(b));
  DC_TRY(create_streams(b));
  DC_TRY(allocate_device(b));
  DC_TRY(allocate_host_io(b));
  DC_TRY(upload_weights(b, weight_data));
  DC_TRY(stage_host_weights(b, weight_data));
  for (int i = 0; i < b->k->nkernels; i++) DC_TRY(load_module(b, i));
  return NULL;
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
  if (o) b->opt = *o;
  dc_status *st = b->path ? create(b, weight_data) : dc_nomem("creating the CUDA backend");
  if (st) {
    dc_cuda_backend_destroy(b);
    return st;
  }
  *out = b;
  return NULL;
}

/* Teardown ignores driver errors: there is nothing left to do about them. */
void dc_cuda_backend_destroy(dc_cuda_backend *b) {
  if (!b) return;
  const dc_cu_api *a = &b->api;
  if (b->ctx_retained) a->CtxSetCurrent(b->ctx);
  if (b->compute) a->StreamSynchronize(b->compute);
  if (b->copy) a->StreamSynchronize(b->copy);
  for (int i = 0; b->kern && i < b->k->nkernels; i++)
    if (b->kern[i].module) a->ModuleUnload(b->kern[i].module);
  if (b->arena) a->MemFree(b->arena);
  if (b->weights) a->MemFree(b->weights);
  for (int i = 0; b->host_in && i < b->m->ninputs; i++)
    if (b->host_in[i]) a->MemFreeHost(b->host_in[i]);
  for (int i = 0; b->host_out && i < b->m->noutputs; i++)
    if (b->host_out[i]) a->MemFreeHost(b->host_out[i]);
  if (b->check_buf) a->MemFreeHost(b->check_buf);
  if (b->host_weights) a->MemFreeHost(b->host_weights);
  for (int k = 0; k < 2; k++) {
    if (b->bounce[k]) a->MemFreeHost(b->bounce[k]);
    if (b->bounce_copied[k]) a->EventDestroy(b->bounce_copied[k]);
  }
  for (int32_t s = 0; s < b->m->nnodes; s++) {
    if (b->step_done && b->step_done[s]) a->EventDestroy(b->step_done[s]);
    if (b->copy_may_start && b->copy_may_start[s]) a->EventDestroy(b->copy_may_start[s]);
    if (b->copied && b->copied[s]) a->EventDestroy(b->copied[s]);
  }
  dc_cu_event evs[] = {b->inputs_ready, b->begin, b->end};
  for (int i = 0; i < 3; i++)
    if (evs[i]) a->EventDestroy(evs[i]);
  if (b->compute) a->StreamDestroy(b->compute);
  if (b->copy) a->StreamDestroy(b->copy);
  if (b->ctx_retained) a->DevicePrimaryCtxRelease(b->dev);
  dc_free(b->step_done);
  dc_free(b->copy_may_start);
  dc_free(b->copied);
  dc_free(b->kern);
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

/* ---- a run ----------------------------------------------------------------------------- */
static dc_status *create_step_events(dc_cuda_backend *b) {
  if (b->step_done) return NULL;
  b->step_done = dc_calloc((size_t)b->m->nnodes + 1, sizeof *b->step_done);
  if (!b->step_done) return dc_nomem("profiling CUDA steps");
  for (int32_t s = 0; s < b->m->nnodes; s++)
    if (b->k->kernel_of_node[s] >= 0) DC_TRY(CU(b, EventCreate, &b->step_done[s], DC_CU_EVENT_DEFAULT));
  return NULL;
}

/* --check-finite: the step's output back to the host, then the check. */
static dc_status *check_step(dc_cuda_backend *b, int32_t s) {
  const dc_node *n = &b->m->nodes[s];
  if (n->type.dtype != DT_F32) return NULL;
  DC_TRY(CU(b, MemcpyDtoHAsync, b->check_buf, b->value[s], dc_type_bytes(&n->type), b->compute));
  DC_TRY(CU(b, StreamSynchronize, b->compute));
  return b->opt.check_step(b->opt.check_ctx, s, b->check_buf);
}

/* on-demand: weight w read from its file a chunk at a time into the next
 * bounce chunk and copied to dst on the copy stream.  The host waits for a
 * chunk's previous copy before refilling it; that copy was enqueued behind
 * compute already enqueued, so the wait always ends. */
static dc_status *upload_through_bounce(dc_cuda_backend *b, int w, dc_cu_deviceptr dst, uint64_t bytes) {
  uint64_t chunk = b->info.bounce_bytes;
  for (uint64_t at = 0; at < bytes; at += chunk) {
    int k = b->next_bounce;
    uint64_t len = bytes - at < chunk ? bytes - at : chunk;
    b->next_bounce ^= 1;
    if (b->bounce_used[k]) DC_TRY(CU(b, EventSynchronize, b->bounce_copied[k]));
    b->bounce_used[k] = 0;
    DC_TRY(b->opt.read_weight(b->opt.read_ctx, w, at, b->bounce[k], len));
    DC_TRY(CU(b, MemcpyHtoDAsync, dst + at, b->bounce[k], len, b->copy));
    DC_TRY(CU(b, EventRecord, b->bounce_copied[k], b->copy));
    b->bounce_used[k] = 1;
  }
  return NULL;
}

/* An offloaded weight into its arena place: on the copy stream, after the
 * compute scheduled before it (the bytes may belong to a value until then). */
static dc_status *upload_step(dc_cuda_backend *b, int32_t s) {
  const dc_node *n = &b->m->nodes[s];
  int w = b->m->nodes[n->inputs[0]].ref;
  DC_TRY(CU(b, EventRecord, b->copy_may_start[s], b->compute));
  DC_TRY(CU(b, StreamWaitEvent, b->copy, b->copy_may_start[s], 0));
  uint64_t bytes = dc_type_bytes(&n->type);
  if (b->info.on_demand) DC_TRY(upload_through_bounce(b, w, b->value[s], bytes));
  else DC_TRY(CU(b, MemcpyHtoDAsync, b->value[s], b->host_weights + b->host_offset[w], bytes, b->copy));
  return CU(b, EventRecord, b->copied[s], b->copy);
}

static dc_status *launch_step(dc_cuda_backend *b, int32_t s, int profiling) {
  const dc_plan_cuda_kernel *kk = &b->k->kernels[b->k->kernel_of_node[s]];
  const dc_node *n = &b->m->nodes[s];
  for (int i = 0; i < n->ninputs; i++) /* a kernel waits for the uploads it reads, and no others */
    if (b->m->nodes[n->inputs[i]].op == OP_UPLOAD) DC_TRY(CU(b, StreamWaitEvent, b->compute, b->copied[n->inputs[i]], 0));
  DC_TRY(CU(b, LaunchKernel, b->kern[b->k->kernel_of_node[s]].fn, kk->grid[0], kk->grid[1], kk->grid[2], kk->block[0],
            kk->block[1], kk->block[2], kk->smem_bytes, b->compute, &b->params[(size_t)s * NPARAMS], NULL));
  if (profiling) DC_TRY(CU(b, EventRecord, b->step_done[s], b->compute));
  if (b->opt.check_step) DC_TRY(check_step(b, s));
  return NULL;
}

static dc_status *enqueue(dc_cuda_backend *b, int profiling) {
  const dc_module *m = b->m;
  char what[300];
  for (int i = 0; i < m->ninputs; i++) {
    int32_t v = m->inputs[i].node;
    DC_TRY(dc_status_annotate(CU(b, MemcpyHtoDAsync, b->value[v], b->host_in[i], dc_type_bytes(&m->nodes[v].type),
                                 b->copy),
                              "%s: copying input \"%s\" to the device", b->path, m->inputs[i].name));
  }
  DC_TRY(CU(b, EventRecord, b->inputs_ready, b->copy));
  DC_TRY(CU(b, StreamWaitEvent, b->compute, b->inputs_ready, 0));
  DC_TRY(CU(b, EventRecord, b->begin, b->compute));
  for (int32_t s = 0; s < m->nnodes; s++) {
    dc_status *st = NULL;
    if (m->nodes[s].op == OP_UPLOAD) st = upload_step(b, s);
    else if (b->k->kernel_of_node[s] >= 0) st = launch_step(b, s, profiling);
    if (st) return dc_status_annotate(st, "%s: %s", b->path, node_what(m, s, what, sizeof what));
  }
  DC_TRY(CU(b, EventRecord, b->end, b->compute));
  DC_TRY(CU(b, StreamWaitEvent, b->copy, b->end, 0));
  for (int i = 0; i < m->noutputs; i++) {
    int32_t v = m->outputs[i].node;
    DC_TRY(dc_status_annotate(CU(b, MemcpyDtoHAsync, b->host_out[i], b->value[v], dc_type_bytes(&m->nodes[v].type),
                                 b->copy),
                              "%s: copying output \"%s\" to the host", b->path, m->outputs[i].name));
  }
  /* An asynchronous kernel fault surfaces here, without its step. */
  return dc_status_annotate(CU(b, StreamSynchronize, b->copy),
                            "%s: waiting for the run (a kernel may have failed; --check-finite synchronises after "
                            "every step and names the failing one)",
                            b->path);
}

static dc_status *elapsed(dc_cuda_backend *b, dc_cu_event from, dc_cu_event to, double *seconds) {
  float ms = 0;
  DC_TRY(CU(b, EventElapsedTime, &ms, from, to));
  *seconds = ms * 1e-3;
  return NULL;
}

static dc_status *read_times(dc_cuda_backend *b, double *step_seconds, double *kernel_seconds) {
  double t = 0;
  DC_TRY(elapsed(b, b->begin, b->end, &t));
  if (kernel_seconds) *kernel_seconds = t;
  if (!step_seconds) return NULL;
  dc_cu_event prev = b->begin;
  for (int32_t s = 0; s < b->m->nnodes; s++) {
    if (b->k->kernel_of_node[s] < 0) continue;
    DC_TRY(elapsed(b, prev, b->step_done[s], &t));
    step_seconds[s] += t;
    prev = b->step_done[s];
  }
  return NULL;
}

dc_status *dc_cuda_backend_run(dc_cuda_backend *b, double *step_seconds, double *kernel_seconds) {
  DC_TRY(CU(b, CtxSetCurrent, b->ctx)); /* the caller's thread may not be the one that loaded */
  if (step_seconds) DC_TRY(create_step_events(b));
  dc_status *st = enqueue(b, step_seconds != NULL);
  /* the run ends with both streams synchronised: both chunks free */
  b->bounce_used[0] = b->bounce_used[1] = b->next_bounce = 0;
  if (st) { /* nothing may still write the host buffers after we return */
    b->api.StreamSynchronize(b->compute);
    b->api.StreamSynchronize(b->copy);
    return st;
  }
  return read_times(b, step_seconds, kernel_seconds);
}
