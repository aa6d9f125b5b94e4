/* cuda_host_fixture.h — the hand-built CUDA plan and the checks shared by
 * the host-side tests of the CUDA backend (test_cuda_host*.c), header-only
 * like the fake driver it drives (cuda_fake_driver.h: static functions, one
 * fake per test program).  The plan: conv2d on a bf16 weight, a broadcast
 * add, two silus sharing one kernel, in-place steps, two outputs; and a
 * variant whose scale weight is offloaded behind an OP_UPLOAD, in pinned host
 * memory or read on demand through two 12-byte bounce chunks.  Here too: the
 * plain evaluation it must equal bit for bit, the on-demand weight reader,
 * the leak check, and the check of a run's stream and event order call by
 * call (check_run_order). */
#ifndef DC_CUDA_HOST_FIXTURE_H
#define DC_CUDA_HOST_FIXTURE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "cuda_fake_driver.h"
#include "runtime/cuda_backend.h"
#include "runtime/diffrun.h"
#include "runtime/kernels.h"
#include "testutil.h"

/* Each test program uses some of these helpers, not all. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"

/* ==== the plan =========================================================== */
/* x[2,4,5,5], shift[1,8,1,1] -> conv2d(x, cast(w bf16), b) + shift -> silu
 * -> h (an output) -> mul by scale[8,1,1] -> silu -> out.  The two silus
 * share one kernel; add and the second silu run in place. */
enum { NW = 3 };
static uint16_t W_CONV[8 * 4 * 9];
static float W_BIAS[8], W_SCALE[8];
static const void *WEIGHT_DATA[NW] = {W_CONV, W_BIAS, W_SCALE};
static const char *WEIGHT_NAMES[NW] = {"conv.weight", "conv.bias", "scale"};

typedef struct {
  char *wpath;
  dc_plan plan;
  int offload; /* the scale weight goes through an OP_UPLOAD */
  int on_demand; /* ... read from "its file" (read_weight below) at each upload: module meta host_memory */
  int32_t x, shift, conv, add, silu1, upload, mul, silu2;
  char images[8][3][64]; /* per kernel: cubin sm_80, cubin sm_90, PTX compute_90 */
} fixture;

static uint64_t rng = 12345;
static float frand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void write_weights(const char *path) {
  for (size_t i = 0; i < sizeof W_CONV / sizeof W_CONV[0]; i++) W_CONV[i] = dc_f32_to_bf16(frand() * 0.5f);
  for (int i = 0; i < 8; i++) W_BIAS[i] = frand(), W_SCALE[i] = 1.5f * frand();
  dc_st_out t[NW] = {{WEIGHT_NAMES[0], {DT_BF16, 4, {8, 4, 3, 3}}, W_CONV},
                     {WEIGHT_NAMES[1], {DT_F32, 1, {8}}, W_BIAS},
                     {WEIGHT_NAMES[2], {DT_F32, 3, {8, 1, 1}}, W_SCALE}};
  CHECK_OK(dc_st_write(path, t, NW));
}

static int32_t add_node(dc_module *m, dc_node n, const char *scope) {
  n.scope = scope;
  if (!(dc_op_get(n.op)->flags & OPF_TYPE_GIVEN)) CHECK_OK(dc_infer_type(m, &n, &n.type));
  return dc_module_add_node(m, &n);
}

static int32_t add_weight(dc_module *m, const dc_st_file *f, int i) {
  const dc_st_tensor *t = dc_st_find(f, WEIGHT_NAMES[i]);
  dc_weight w = {.name = WEIGHT_NAMES[i], .file = 0, .offset = t->offset, .bytes = t->bytes, .type = {t->dtype, t->rank, {0}}};
  memcpy(w.type.dims, t->dims, sizeof t->dims);
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = dc_module_add_weight(m, &w);
  n.type = w.type;
  return add_node(m, n, "weights");
}

static dc_module *build_module(const char *wpath, fixture *fx) {
  dc_st_file f;
  CHECK_OK(dc_st_open(wpath, &f));
  dc_module *m = dc_module_create();
  dc_weight_file wf = {wpath, f.header_hash, f.file.size};
  dc_module_add_file(m, &wf);
  dc_type xt = {DT_F32, 4, {2, 4, 5, 5}}, st = {DT_F32, 4, {1, 8, 1, 1}};
  fx->x = dc_module_add_input(m, "sample", &xt, INIT_NORMAL);
  fx->shift = dc_module_add_input(m, "shift", &st, INIT_NORMAL);
  int32_t wconv = add_weight(m, &f, 0), wbias = add_weight(m, &f, 1), wscale = add_weight(m, &f, 2);
  dc_node cast = dc_node_make(OP_CAST, 1, &wconv);
  cast.type = m->nodes[wconv].type;
  cast.type.dtype = DT_F32;
  int32_t wf32 = add_node(m, cast, "conv");
  dc_node conv = dc_node_make(OP_CONV2D, 3, (int32_t[]){fx->x, wf32, wbias});
  dc_node_set_int(&conv, "bias", 1);
  dc_node_set_int(&conv, "stride", 1);
  const char *pads[] = {"pad_t", "pad_b", "pad_l", "pad_r"};
  for (int i = 0; i < 4; i++) dc_node_set_int(&conv, pads[i], 1);
  fx->conv = add_node(m, conv, "down.conv");
  fx->add = add_node(m, dc_node_make(OP_ADD, 2, (int32_t[]){fx->conv, fx->shift}), "down.shift");
  fx->silu1 = add_node(m, dc_node_make(OP_SILU, 1, &fx->add), "down.act");
  if (fx->offload) { /* scale stays in host memory; an upload brings it in just before use */
    dc_node up = dc_node_make(OP_UPLOAD, 1, &wscale);
    up.type = m->nodes[wscale].type;
    wscale = fx->upload = add_node(m, up, "up.scale");
  }
  fx->mul = add_node(m, dc_node_make(OP_MUL, 2, (int32_t[]){fx->silu1, wscale}), "up.scale");
  fx->silu2 = add_node(m, dc_node_make(OP_SILU, 1, &fx->mul), "up.act");
  CHECK_OK(dc_module_add_output(m, "out", fx->silu2));
  CHECK_OK(dc_module_add_output(m, "hidden", fx->silu1));
  dc_st_close(&f);
  CHECK_OK(dc_verify(m, "test"));
  CHECK_OK(dc_memplan(m, NULL));
  return m;
}

/* One kernel per distinct (op, types): the silus share kernel 3. */
static void build_kernels(fixture *fx) {
  const dc_module *m = fx->plan.module;
  dc_plan_cuda *k = &fx->plan.cuda;
  k->compute = dc_strdup("f32");
  k->nvrtc_version = dc_strdup("13.0");
  k->nnodes = m->nnodes;
  k->kernel_of_node = dc_calloc((size_t)m->nnodes, sizeof(int32_t));
  k->kernels = dc_calloc(5, sizeof *k->kernels);
  static const char *archs[3] = {"sm_80", "sm_90", "compute_90"};
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    int none = (dc_op_get(n->op)->flags & OPF_LEAF) || n->op == OP_UPLOAD;
    int32_t ki = none ? -1 : s == fx->silu2 ? k->kernel_of_node[fx->silu1] : k->nkernels;
    k->kernel_of_node[s] = ki;
    if (ki < 0 || ki < k->nkernels) continue;
    dc_plan_cuda_kernel *kk = &k->kernels[k->nkernels++];
    kk->name = dc_asprintf("k%d_%s", ki, dc_op_get(n->op)->name);
    kk->source = dc_strdup("/* emulated by the fake driver */");
    uint32_t g[3] = {(uint32_t)(7 + ki), 1 + (uint32_t)ki % 2, 1}, bl[3] = {128, (uint32_t)(1 + ki), 1};
    memcpy(kk->grid, g, sizeof g);
    memcpy(kk->block, bl, sizeof bl);
    kk->smem_bytes = 1024u * (uint32_t)ki;
    kk->images = dc_calloc(3, sizeof *kk->images);
    kk->nimages = 3;
    for (int i = 0; i < 3; i++) {
      dc_plan_cuda_image *im = &kk->images[i];
      im->arch = dc_strdup(archs[i]);
      im->kind = i == 2 ? DC_CUDA_IMAGE_PTX : DC_CUDA_IMAGE_CUBIN;
      snprintf(fx->images[ki][i], sizeof fx->images[ki][i], "%s%s image of %s", i == 2 ? "" : "\x7f" "ELF ",
               archs[i], kk->name); /* the plan reader wants cubins to be ELF */
      im->size = strlen(fx->images[ki][i]) + 1;
      im->data = (uint8_t *)dc_strdup(fx->images[ki][i]);
    }
  }
}

static void fixture_init(fixture *fx, int offload, int on_demand) {
  memset(fx, 0, sizeof *fx);
  fx->offload = offload;
  fx->on_demand = on_demand;
  fx->upload = -1;
  fx->wpath = tu_path("w.safetensors");
  write_weights(fx->wpath);
  fx->plan.target = DC_TARGET_CUDA;
  fx->plan.module = build_module(fx->wpath, fx);
  if (on_demand) CHECK_OK(dc_module_set_meta(fx->plan.module, "host_memory", "on-demand"));
  fx->plan.options_json = dc_strdup("{}");
  fx->plan.ir_text = dc_strdup("(test plan)\n");
  build_kernels(fx);
}

static void fixture_deinit(fixture *fx) {
  dc_plan_deinit(&fx->plan); /* the module, the texts and the CUDA kernels */
  free(fx->wpath);
}

/* The plain evaluation: a buffer per value, reference kernels. */
static float **reference_values(const dc_module *m, float *const *inputs) {
  float **v = calloc((size_t)m->nnodes, sizeof *v);
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    size_t bytes = dc_type_bytes(&n->type);
    v[s] = malloc(bytes ? bytes : 4);
    if (n->op == OP_INPUT) memcpy(v[s], inputs[n->ref], bytes);
    else if (n->op == OP_WEIGHT) memcpy(v[s], WEIGHT_DATA[n->ref], bytes);
    else {
      const void *in[DC_MAX_INPUTS];
      for (int i = 0; i < n->ninputs; i++) in[i] = v[n->inputs[i]];
      CHECK_OK(dc_ref_run(m, n, in, v[s]));
    }
  }
  return v;
}
static void free_values(const dc_module *m, float **v) {
  for (int32_t s = 0; s < m->nnodes; s++) free(v[s]);
  free(v);
}

/* The on-demand weight reader: WEIGHT_DATA stands for the file; read
 * number fail_read_at (1-based, 0 = none) fails. */
static int reads, fail_read_at;
static dc_status *read_weight(void *ctx, int w, uint64_t at, void *dst, uint64_t len) {
  if (ctx != &reads || w < 0 || w >= NW) return dc_error(DC_ERR_INTERNAL, "read_weight: bad arguments");
  if (++reads == fail_read_at)
    return dc_error(DC_ERR_IO, "weight file w.safetensors: tensor \"%s\": reading %llu bytes at file offset %llu got "
                    "only 0 (test)", WEIGHT_NAMES[w], (unsigned long long)len, (unsigned long long)at);
  memcpy(dst, (const uint8_t *)WEIGHT_DATA[w] + at, len);
  return NULL;
}
#define BOUNCE 12 /* the scale weight (32 B) goes up in chunks of 12, 12, 8 */

/* An on-demand fixture gets the reader unless the options say otherwise. */
static dc_status *create(fixture *fx, const dc_cuda_backend_options *o, dc_cuda_backend **b) {
  dc_cu_api api = fake_api();
  dc_cuda_backend_options with_reader = {0};
  if (o) with_reader = *o;
  if (fx->on_demand && !o) with_reader.read_weight = read_weight, with_reader.read_ctx = &reads;
  if (fx->on_demand && !with_reader.bounce_bytes) with_reader.bounce_bytes = BOUNCE;
  fake_bind(fx->plan.module, &fx->plan.cuda);
  return dc_cuda_backend_create("test.dplan", fx->plan.module, &fx->plan.cuda, WEIGHT_DATA, &api,
                                o || fx->on_demand ? &with_reader : NULL, b);
}

static int count_calls(int kind) {
  int n = 0;
  for (int i = 0; i < fk.ncalls; i++) n += fk.calls[i].kind == kind;
  return n;
}

static void check_no_leaks(const char *what) {
  int ok = live_objs() == 0 && live_blocks(0) == 0 && live_blocks(1) == 0 && fk.ctx_refs == 0;
  CHECK(ok);
  if (!ok)
    fprintf(stderr, "%s: leaked %d streams/events/modules, %d device and %d pinned blocks, %d context refs\n", what,
            live_objs(), live_blocks(0), live_blocks(1), fk.ctx_refs);
}

/* ==== a run, call by call ================================================== */
static int cur, order_ok;
static const fake_call *next_call(int kind) {
  static const fake_call none;
  if (cur < fk.ncalls && fk.calls[cur].kind == kind) return &fk.calls[cur++];
  if (order_ok)
    fprintf(stderr, "call %d: expected kind %d, found %d\n", cur, kind, cur < fk.ncalls ? fk.calls[cur].kind : -1);
  order_ok = 0;
  return &none;
}

typedef struct {
  uint64_t arena, weights, weight_bytes;
} device_blocks;

/* The arena and the weight block are the first and second allocations. */
static device_blocks blocks_of(const fixture *fx) {
  device_blocks d = {0, 0, 0};
  int n = 0;
  for (int i = 0; i < fk.ncalls; i++) {
    if (fk.calls[i].kind != C_ALLOC) continue;
    if (n == 0) d.arena = fk.calls[i].dst;
    else d.weights = fk.calls[i].dst, d.weight_bytes = fk.calls[i].bytes;
    n++;
  }
  CHECK(n == 2);
  return d;
}

/* Where value v must be: the memory plan's offset, or for a weight a
 * 256-aligned place in the weight block holding exactly its bytes. */
static int address_ok(const fixture *fx, const device_blocks *d, int32_t v, uint64_t addr) {
  const dc_node *n = &fx->plan.module->nodes[v];
  if (n->op != OP_WEIGHT) return addr == d->arena + (uint64_t)n->offset;
  uint64_t bytes = fx->plan.module->weights[n->ref].bytes;
  return addr % 256 == 0 && addr >= d->weights && addr + bytes <= d->weights + d->weight_bytes &&
         memcmp((const void *)(uintptr_t)addr, WEIGHT_DATA[n->ref], bytes) == 0;
}

static void check_launch(const fixture *fx, const device_blocks *d, int32_t s, int compute) {
  const dc_node *n = &fx->plan.module->nodes[s];
  const dc_plan_cuda_kernel *kk = &fx->plan.cuda.kernels[fx->plan.cuda.kernel_of_node[s]];
  const fake_call *c = next_call(C_LAUNCH);
  int ok = !strcmp(c->fn, kk->name) && c->stream == compute && c->smem == kk->smem_bytes &&
           !memcmp(c->grid, kk->grid, sizeof c->grid) && !memcmp(c->block, kk->block, sizeof c->block);
  ok &= address_ok(fx, d, s, c->params[0]);
  for (int i = 0; i < n->ninputs; i++) ok &= address_ok(fx, d, n->inputs[i], c->params[i + 1]);
  if (!ok) fprintf(stderr, "launch of step %d: wrong kernel, geometry, stream or parameters\n", (int)s);
  order_ok &= ok;
}

/* on-demand: per bounce chunk, the event of its last copy in this run
 * (0: not used yet) and its address. */
static int chunk_event[2], next_chunk;
static uint64_t chunk_src[2];

/* on-demand: the weight in chunks of BOUNCE through alternating pinned
 * chunks; refilling a chunk first waits (cuEventSynchronize) for the event
 * recorded behind its previous copy. */
static void check_chunks(const dc_node *n, const device_blocks *d, int copy) {
  uint64_t bytes = dc_type_bytes(&n->type);
  for (uint64_t at = 0; at < bytes; at += BOUNCE) {
    int k = next_chunk;
    next_chunk ^= 1;
    if (chunk_event[k]) order_ok &= next_call(C_EVSYNC)->event == chunk_event[k];
    const fake_call *h = next_call(C_HTOD), *rec = next_call(C_RECORD);
    if (!chunk_src[k]) chunk_src[k] = h->src;
    uint64_t len = bytes - at < BOUNCE ? bytes - at : BOUNCE;
    order_ok &= h->stream == copy && h->host_pinned && h->src == chunk_src[k] && chunk_src[0] != chunk_src[1] &&
                h->dst == d->arena + (uint64_t)n->offset + at && h->bytes == len && rec->stream == copy;
    chunk_event[k] = rec->event;
  }
}

/* An upload: the copy stream waits for the compute so far, copies from the
 * pinned host block (or on demand through the bounce chunks), and records
 * the event its readers wait for. */
static int check_upload(const fixture *fx, const device_blocks *d, int32_t s, int copy, int compute) {
  const dc_node *n = &fx->plan.module->nodes[s];
  const fake_call *rec = next_call(C_RECORD), *wait = next_call(C_WAIT);
  order_ok &= rec->stream == compute && wait->stream == copy && wait->event == rec->event;
  if (fx->on_demand) {
    check_chunks(n, d, copy);
  } else {
    const fake_call *h = next_call(C_HTOD);
    order_ok &= h->stream == copy && h->host_pinned && h->dst == d->arena + (uint64_t)n->offset &&
                h->bytes == dc_type_bytes(&n->type);
  }
  const fake_call *done = next_call(C_RECORD);
  order_ok &= done->stream == copy;
  return done->event;
}

/* The calls of one run from call `from`: inputs up on the copy stream, an
 * event the compute stream waits on, the launches in schedule order (each
 * after the uploads it reads), an event the copy stream waits on, outputs
 * down, synchronise. */
static int check_run_order(const fixture *fx, int from, const device_blocks *d) {
  const dc_module *m = fx->plan.module;
  cur = from, order_ok = 1;
  chunk_event[0] = chunk_event[1] = next_chunk = 0; /* each run starts with both chunks free, */
  chunk_src[0] = chunk_src[1] = 0;                   /* learnt from its first two copies */
  int copy = 0, upload_event[64] = {0};
  for (int i = 0; i < m->ninputs; i++) {
    const fake_call *c = next_call(C_HTOD);
    const dc_node *v = &m->nodes[m->inputs[i].node];
    copy = i ? copy : c->stream;
    order_ok &= c->stream == copy && c->host_pinned && c->dst == d->arena + (uint64_t)v->offset &&
                c->bytes == dc_type_bytes(&v->type);
  }
  const fake_call *ready = next_call(C_RECORD), *wait = next_call(C_WAIT);
  int compute = wait->stream;
  order_ok &= ready->stream == copy && wait->event == ready->event && compute != copy;
  order_ok &= next_call(C_RECORD)->stream == compute; /* the timing start */
  for (int32_t s = 0; s < m->nnodes && s < 64; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_UPLOAD) upload_event[s] = check_upload(fx, d, s, copy, compute);
    if (fx->plan.cuda.kernel_of_node[s] < 0) continue;
    for (int i = 0; i < n->ninputs; i++)
      if (m->nodes[n->inputs[i]].op == OP_UPLOAD) {
        const fake_call *w = next_call(C_WAIT);
        order_ok &= w->stream == compute && w->event == upload_event[n->inputs[i]];
      }
    check_launch(fx, d, s, compute);
  }
  const fake_call *end = next_call(C_RECORD), *wait_end = next_call(C_WAIT);
  order_ok &= end->stream == compute && wait_end->stream == copy && wait_end->event == end->event;
  for (int i = 0; i < m->noutputs; i++) {
    const fake_call *c = next_call(C_DTOH);
    const dc_node *v = &m->nodes[m->outputs[i].node];
    order_ok &= c->stream == copy && c->host_pinned && c->src == d->arena + (uint64_t)v->offset &&
                c->bytes == dc_type_bytes(&v->type);
  }
  order_ok &= next_call(C_STREAMSYNC)->stream == copy && cur == fk.ncalls;
  return order_ok;
}

static void set_random_inputs(const fixture *fx, dc_cuda_backend *b, float **keep) {
  const dc_module *m = fx->plan.module;
  for (int i = 0; i < m->ninputs; i++) {
    size_t n = dc_type_numel(&m->nodes[m->inputs[i].node].type);
    float *in = dc_cuda_backend_input(b, i);
    for (size_t k = 0; k < n; k++) in[k] = keep[i][k] = 2 * frand();
  }
}

/* The outputs equal the plain evaluation's, bit for bit. */
static int outputs_match(const fixture *fx, dc_cuda_backend *b, float **inputs) {
  const dc_module *m = fx->plan.module;
  float **ref = reference_values(m, inputs);
  int same = 1;
  for (int i = 0; i < m->noutputs; i++) {
    int32_t v = m->outputs[i].node;
    same &= memcmp(dc_cuda_backend_output(b, i), ref[v], dc_type_bytes(&m->nodes[v].type)) == 0;
  }
  free_values(m, ref);
  return same;
}

static float **input_arrays(const dc_module *m) {
  float **in = calloc((size_t)m->ninputs, sizeof *in);
  for (int i = 0; i < m->ninputs; i++) in[i] = malloc(dc_type_bytes(&m->nodes[m->inputs[i].node].type));
  return in;
}
static void free_arrays(const dc_module *m, float **in) {
  for (int i = 0; i < m->ninputs; i++) free(in[i]);
  free(in);
}

#pragma GCC diagnostic pop

#endif
