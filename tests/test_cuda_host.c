/* test_cuda_host.c — the host side of the CUDA backend (runtime/cuda_backend.c,
 * cuda_driver.c) without a GPU, through the fake driver of
 * cuda_fake_driver.h: device memory is host memory, every call is logged,
 * and a launch runs the reference kernel of the node its kernel stands for,
 * so a hand-built plan (conv2d on a bf16 weight, a broadcast add, two silus
 * sharing one kernel, in-place steps, two outputs; and a variant whose scale
 * weight is offloaded behind an OP_UPLOAD, in pinned host memory or read on
 * demand through two 12-byte bounce chunks) runs through the real backend
 * and must give the plain evaluation's outputs bit for bit.
 *
 * Checked: which image runs on which compute capability (cubin same major
 * with minor >=, arch-specific 'a' only on its own, PTX JIT on newer
 * devices, a clear error naming the archs otherwise); launch parameters are
 * the arena offsets of the memory plan and the weights' places in the
 * weight block (out, then the inputs); grid/block/smem from the plan; the
 * stream and event order of a run, uploads included (on demand: chunk by
 * chunk, a chunk refilled only after its last copy's event, no pinned
 * block for the weights, a failed read reported with its step and the
 * backend usable after it); the opt-in shared
 * memory attribute; the weight upload through two pinned staging buffers;
 * errors that name the failing step, kernel or JIT log; the out-of-memory
 * message before any allocation; profiling and --check-finite; no leaked
 * device objects after any of it; the driver constants against the
 * toolkit's cuda.h when it is installed; and drt_load / drt_run / drt_info
 * on a CUDA plan file with the fake in place of libcuda. */
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
      CHECK_OK(dc_ref_kernel_for(n->op)(m, n, in, v[s]));
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


/* ==== image choice ========================================================= */
static const char *pick(dc_plan_cuda_image *im, int n, int major, int minor) {
  dc_plan_cuda_kernel k = {0};
  k.images = im;
  k.nimages = n;
  int i = dc_cuda_pick_image(&k, major, minor);
  return i < 0 ? "none" : im[i].arch;
}

static void test_pick_image(void) {
  dc_plan_cuda_image std[3] = {{"sm_80", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"sm_90", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"compute_90", DC_CUDA_IMAGE_PTX, NULL, 0}};
  static const struct {
    int major, minor;
    const char *want;
  } cases[] = {{9, 0, "sm_90"},       {8, 0, "sm_80"},       {8, 6, "sm_80"},  {8, 9, "sm_80"},
               {10, 0, "compute_90"}, {12, 0, "compute_90"}, {7, 5, "none"},   {9, 1, "sm_90"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *got = pick(std, 3, cases[i].major, cases[i].minor);
    CHECK(!strcmp(got, cases[i].want));
    printf("image for %d.%d among sm_80, sm_90, compute_90: %s\n", cases[i].major, cases[i].minor, got);
  }
  /* 'a' builds run only on their own arch, and win there; 'f' builds on their family. */
  dc_plan_cuda_image spec[4] = {{"sm_90", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                                {"sm_90a", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                                {"sm_100f", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                                {"compute_80", DC_CUDA_IMAGE_PTX, NULL, 0}};
  CHECK(!strcmp(pick(spec, 4, 9, 0), "sm_90a"));
  CHECK(!strcmp(pick(spec, 4, 9, 1), "sm_90"));
  CHECK(!strcmp(pick(spec, 4, 10, 3), "sm_100f"));
  CHECK(!strcmp(pick(spec, 4, 12, 0), "compute_80"));
  CHECK(!strcmp(pick(spec, 4, 8, 6), "compute_80"));
  CHECK(!strcmp(pick(spec + 1, 1, 9, 1), "none"));
  /* Names that are no arch, and kinds that do not match their name, never run. */
  dc_plan_cuda_image bad[4] = {{"sm_", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"sm_90x", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"compute_80", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"sm_80", DC_CUDA_IMAGE_PTX, NULL, 0}};
  CHECK(!strcmp(pick(bad, 4, 9, 0), "none"));
  printf("arch-specific sm_90a only on 9.0 (preferred there), sm_100f on 10.x, malformed names never\n");
}

/* The images the backend loads on each device, and the error when none fits. */
static void test_images_on_device(fixture *fx) {
  static const struct {
    int major, minor, image, jit;
  } cases[] = {{9, 0, 1, 0}, {8, 6, 0, 0}, {12, 0, 2, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    fake_reset(cases[c].major, cases[c].minor);
    dc_cuda_backend *b = NULL;
    CHECK_OK(create(fx, NULL, &b));
    int loads = 0, right = 1;
    for (int i = 0; i < fk.ncalls; i++) {
      const fake_call *call = &fk.calls[i];
      if (call->kind != C_LOAD) continue;
      const dc_plan_cuda_kernel *kk = &fx->plan.cuda.kernels[loads++];
      right &= call->image == kk->images[cases[c].image].data && call->jit == cases[c].jit;
    }
    CHECK(loads == fx->plan.cuda.nkernels && right);
    CHECK(count_calls(C_GETFN) == fx->plan.cuda.nkernels);
    const dc_cuda_backend_info *in = dc_cuda_backend_get_info(b);
    CHECK(in->jit_kernels == (cases[c].jit ? fx->plan.cuda.nkernels : 0));
    printf("device %d.%d: %d modules from %s, %s\n", cases[c].major, cases[c].minor, loads,
           fx->plan.cuda.kernels[0].images[cases[c].image].arch, in->image);
    dc_cuda_backend_destroy(b);
    check_no_leaks("images");
  }
  fake_reset(12, 0); /* the second kernel's PTX does not JIT: the first module is unloaded again */
  fk.fail_jit_at = 2;
  dc_cuda_backend *b = NULL;
  CHECK_ERR(create(fx, NULL, &b),
            "test.dplan: kernel k1_conv2d (PTX compute_90): cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (a PTX JIT "
            "compilation failed); the PTX JIT said: ptxas fatal: unknown instruction (fake)");
  check_no_leaks("JIT failure");
  fake_reset(7, 5);
  CHECK_ERR(create(fx, NULL, &b),
            "test.dplan: device 0 (Fake GPU 7.5) has compute capability 7.5, and the plan has no image for it (it "
            "holds sm_80, sm_90, compute_90: a cubin sm_XY runs on X.Y and later GPUs of the same major X, PTX "
            "compute_XY on X.Y or newer); recompile with diffc --target cuda --cuda-arch sm_75");
  CHECK(!b && count_calls(C_ALLOC) == 0 && count_calls(C_LOAD) == 0);
  check_no_leaks("no image");
  printf("device 7.5: refused before any allocation or module load\n");
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

static void test_run(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  const dc_cuda_backend_info *in = dc_cuda_backend_get_info(b);
  device_blocks d = blocks_of(fx);
  /* Layout: 256-aligned weights in index order; scale (32 B) leaves the
   * device block for the host one when offloaded. */
  uint64_t want_block = fx->offload ? 768 + 32 : 1024 + 32;
  CHECK(in->weight_block_bytes == want_block && d.weight_bytes == want_block);
  CHECK(in->host_weight_bytes == (fx->offload ? 32u : 0u));
  CHECK(in->arena_bytes == m->arena_bytes && in->device_bytes == m->arena_bytes + want_block);
  uint64_t top = 0, io = 0;
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].op != OP_WEIGHT && (uint64_t)m->nodes[s].offset + dc_type_bytes(&m->nodes[s].type) > top)
      top = (uint64_t)m->nodes[s].offset + dc_type_bytes(&m->nodes[s].type);
  for (int i = 0; i < m->ninputs; i++) io += dc_type_bytes(&m->nodes[m->inputs[i].node].type);
  for (int i = 0; i < m->noutputs; i++) io += dc_type_bytes(&m->nodes[m->outputs[i].node].type);
  /* pinned memory: inputs, outputs and the offloaded weights, or on demand
   * two bounce chunks instead of the weights */
  CHECK(in->on_demand == fx->on_demand && in->bounce_bytes == (fx->on_demand ? BOUNCE : 0u));
  CHECK(in->arena_peak_bytes == top && in->pinned_bytes == io + (fx->on_demand ? 2 * BOUNCE : in->host_weight_bytes));
  CHECK(live_blocks(1) == m->ninputs + m->noutputs + (fx->on_demand ? 2 : fx->offload));
  int meminfo_first = 0;
  for (int i = 0; i < fk.ncalls && !meminfo_first; i++)
    if (fk.calls[i].kind == C_MEMINFO || fk.calls[i].kind == C_ALLOC) meminfo_first = fk.calls[i].kind == C_MEMINFO;
  CHECK(meminfo_first);

  float **inputs = input_arrays(m);
  for (int r = 0; r < 2; r++) {
    set_random_inputs(fx, b, inputs);
    int from = fk.ncalls;
    double kernel_s = -1;
    CHECK_OK(dc_cuda_backend_run(b, NULL, &kernel_s));
    int order = check_run_order(fx, from, &d), same = outputs_match(fx, b, inputs);
    CHECK(order && same && kernel_s > 0);
    printf("%srun %d: %d calls in order (inputs, event, %d launches%s, event, outputs, sync), outputs %s\n",
           fx->on_demand ? "on-demand: " : fx->offload ? "offload: " : "", r + 1, fk.ncalls - from,
           fk.launches / (r + 1), fx->on_demand ? ", an upload in 3 chunks" : fx->offload ? ", an upload" : "",
           same ? "bit-exact" : "DIFFER");
  }
  free_arrays(m, inputs);
  printf("%sarena %llu B at the plan's offsets, weight block %llu B, %llu B offloaded, %s\n",
         fx->on_demand ? "on-demand: " : fx->offload ? "offload: " : "", (unsigned long long)in->arena_bytes,
         (unsigned long long)in->weight_block_bytes, (unsigned long long)in->host_weight_bytes,
         fx->on_demand ? "read at each upload through 2 pinned chunks of 12 B" : "in pinned host memory");
  dc_cuda_backend_destroy(b);
  check_no_leaks("run");
}

/* ==== the weight upload ======================================================= */
/* Chunks of 200 bytes through two pinned buffers: every chunk copied once,
 * contiguous, in order; a buffer is refilled only after the event recorded
 * behind its previous copy completed; the staging is freed afterwards. */
static void test_weight_upload(fixture *fx) {
  fake_reset(9, 0);
  dc_cuda_backend_options o = {0};
  o.staging_bytes = 200;
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  device_blocks d = blocks_of(fx);
  uint64_t total = dc_cuda_backend_get_info(b)->weight_block_bytes, pos = 0;
  uint64_t src[2] = {0, 0};
  int nchunks = 0, ok = 1, copy = 0, last_event[2] = {0, 0};
  for (int i = 0; i < fk.ncalls; i++) {
    const fake_call *c = &fk.calls[i];
    if (c->kind != C_HTOD) continue;
    int k = nchunks % 2;
    ok &= c->dst == d.weights + pos && c->bytes == (total - pos < 200 ? total - pos : 200) && c->host_pinned;
    copy = nchunks ? copy : c->stream;
    ok &= c->stream == copy && i + 1 < fk.ncalls && fk.calls[i + 1].kind == C_RECORD && fk.calls[i + 1].stream == copy;
    if (nchunks < 2) src[k] = c->src;
    ok &= c->src == src[k];
    if (nchunks >= 2) { /* the refill of buffer k waited for its previous copy */
      int waited = 0;
      for (int j = i - 1; j >= 0 && !waited && !(fk.calls[j].kind == C_HTOD && fk.calls[j].src == src[k]); j--)
        waited = fk.calls[j].kind == C_EVSYNC && fk.calls[j].event == last_event[k];
      ok &= waited;
    }
    last_event[k] = i + 1 < fk.ncalls ? fk.calls[i + 1].event : 0;
    pos += c->bytes;
    nchunks++;
  }
  CHECK(ok && src[0] != src[1] && pos == total && nchunks == (int)((total + 199) / 200));
  CHECK(dc_cuda_backend_get_info(b)->staging_bytes == 400);
  CHECK(live_blocks(1) == fx->plan.module->ninputs + fx->plan.module->noutputs); /* staging freed */
  /* The block's bytes, checked through where the launches find each weight. */
  float **inputs = input_arrays(fx->plan.module);
  set_random_inputs(fx, b, inputs);
  int from = fk.ncalls;
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(check_run_order(fx, from, &d) && outputs_match(fx, b, inputs));
  free_arrays(fx->plan.module, inputs);
  printf("weight upload: %llu B in %d chunks of <= 200 B through 2 pinned buffers, each refill after its copy's "
         "event; every weight's bytes in place\n",
         (unsigned long long)total, nchunks);
  dc_cuda_backend_destroy(b);
  check_no_leaks("upload");
}

/* ==== shared memory, failures, memory ============================================ */
static void test_big_shared_memory(fixture *fx) {
  dc_plan_cuda_kernel *conv = &fx->plan.cuda.kernels[fx->plan.cuda.kernel_of_node[fx->conv]];
  uint32_t saved = conv->smem_bytes;
  conv->smem_bytes = 100 * 1024;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  int attrs = 0, ok = 1;
  for (int i = 0; i < fk.ncalls; i++)
    if (fk.calls[i].kind == C_ATTR) {
      attrs++;
      ok &= !strcmp(fk.calls[i].fn, conv->name) && fk.calls[i].attr == DC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
            fk.calls[i].value == 100 * 1024;
    }
  CHECK(attrs == 1 && ok);
  if (b) {
    float **inputs = input_arrays(fx->plan.module);
    set_random_inputs(fx, b, inputs);
    CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
    int launched = 0;
    for (int i = 0; i < fk.ncalls; i++)
      if (fk.calls[i].kind == C_LAUNCH && !strcmp(fk.calls[i].fn, conv->name)) launched = fk.calls[i].smem == 100 * 1024;
    CHECK(launched);
    free_arrays(fx->plan.module, inputs);
  }
  dc_cuda_backend_destroy(b);
  check_no_leaks("smem");
  fake_reset(8, 0);
  fk.optin = 48 * 1024;
  CHECK_ERR(create(fx, NULL, &b),
            "test.dplan: kernel k1_conv2d needs 102400 bytes of dynamic shared memory per block, but device 0 (Fake "
            "GPU 8.0, 8.0) allows at most 49152; recompile for this GPU (diffc --cuda-arch sm_80)");
  CHECK(count_calls(C_ALLOC) == 0);
  check_no_leaks("smem refused");
  conv->smem_bytes = saved;
  printf("100 KiB of dynamic shared memory: the attribute set on that kernel only; refused where the opt-in max is "
         "48 KiB\n");
}

static void test_launch_failure(fixture *fx) {
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  fk.fail_launch_at = 3; /* cast, conv2d, then add */
  char want[256];
  snprintf(want, sizeof want,
           "test.dplan: step %d (add in down.shift): cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (unspecified launch "
           "failure)",
           (int)fx->add);
  CHECK_ERR(dc_cuda_backend_run(b, NULL, NULL), want);
  int n = fk.ncalls;
  CHECK(fk.launches == 3 && n >= 2 && fk.calls[n - 1].kind == C_STREAMSYNC && fk.calls[n - 2].kind == C_STREAMSYNC);
  dc_cuda_backend_destroy(b);
  check_no_leaks("launch failure");
  printf("a failing launch: \"%s\"; both streams synchronised, nothing launched after it\n", want);
}

static void test_out_of_memory(fixture *fx) {
  const dc_module *m = fx->plan.module;
  uint64_t need = m->arena_bytes + 1056;
  fake_reset(9, 0);
  fk.free_bytes = need - 1;
  dc_cuda_backend *b = NULL;
  dc_status *st = create(fx, NULL, &b);
  char n1[32], n2[32], n3[32], n4[32], want[700];
  snprintf(want, sizeof want,
           "test.dplan: the plan needs %s of device memory (%llu bytes: activation arena %s + resident weights %s) "
           "but device 0 (Fake GPU 9.0) has %s free (%llu bytes) of 80.0 GiB; nothing was run.  To fit, free GPU "
           "memory (other processes?) or compile for less: diffc --offload model|sequential|group keeps weights in "
           "host memory, a smaller batch or resolution (--input) shrinks the arena",
           dc_format_bytes(need, n1, sizeof n1), (unsigned long long)need,
           dc_format_bytes(m->arena_bytes, n2, sizeof n2), dc_format_bytes(1056, n3, sizeof n3),
           dc_format_bytes(need - 1, n4, sizeof n4), (unsigned long long)(need - 1));
  if (st) printf("out of memory: %s\n", dc_status_message(st));
  CHECK(st && dc_status_code_of(st) == DC_ERR_NOMEM);
  CHECK_ERR(st, want);
  CHECK(!b && count_calls(C_ALLOC) == 0 && count_calls(C_LOAD) == 0 && count_calls(C_LAUNCH) == 0);
  check_no_leaks("out of memory");
  fake_reset(9, 0);
  fk.free_bytes = need; /* exactly enough */
  CHECK_OK(create(fx, NULL, &b));
  dc_cuda_backend_destroy(b);
  check_no_leaks("exactly enough");
}

static void test_device_index(fixture *fx) {
  fake_reset(9, 0);
  dc_cuda_backend_options o = {0};
  o.device = 1;
  dc_cuda_backend *b = NULL;
  CHECK_ERR(create(fx, &o, &b), "--device 1: this machine has 1 CUDA device(s) (numbered from 0)");
  fake_reset(9, 0);
  fk.ndevices = 0;
  CHECK_ERR(create(fx, NULL, &b), "--device 0: this machine has 0 CUDA device(s)");
  check_no_leaks("device index");
}

/* Host allocation N fails, for N = 0, 1, ... until creating the backend and
 * a profiled run succeed: each failure is a clean DC_ERR_NOMEM and leaves no
 * device object behind (the sanitizer build checks the host side). */
static void test_alloc_failures(fixture *fx) {
  int n = 0, clean = 1;
  for (;; n++) {
    fake_reset(9, 0);
    dc_cuda_backend *b = NULL;
    double steps[64] = {0};
    dc_alloc_fail_after(n);
    dc_status *st = create(fx, NULL, &b);
    if (!st) st = dc_cuda_backend_run(b, steps, NULL);
    dc_alloc_fail_after(-1);
    dc_cuda_backend_destroy(b);
    clean &= live_objs() == 0 && live_blocks(0) == 0 && live_blocks(1) == 0 && fk.ctx_refs == 0;
    if (!st) break;
    clean &= dc_status_code_of(st) == DC_ERR_NOMEM;
    dc_status_free(st);
  }
  CHECK(clean && n > 5);
  printf("allocation failure: each of the first %d host allocations failed in turn: a clean error, nothing left on "
         "the device\n",
         n);
}

/* ==== profiling and --check-finite ================================================ */
/* The fake's clock: 1 ms per driver call between two event records.  Each
 * step's time runs from the event before it to its own; the steps together
 * span the first launch to the last. */
static void test_profiling(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  double *steps = calloc((size_t)m->nnodes, sizeof *steps), kernel_s = 0;
  CHECK_OK(dc_cuda_backend_run(b, steps, &kernel_s));
  CHECK_OK(dc_cuda_backend_run(b, steps, &kernel_s));
  double sum = 0;
  int ok = 1;
  for (int32_t s = 0; s < m->nnodes; s++) {
    int kernel = fx->plan.cuda.kernel_of_node[s] >= 0;
    ok &= kernel ? steps[s] >= 2 * 0.002 - 1e-9 : steps[s] == 0;
    sum += steps[s];
  }
  /* per run: begin .. last step event spans (record of end) - 1 calls */
  CHECK(ok && kernel_s > 0 && fabs(sum / 2 - (kernel_s - 0.001)) < 1e-9);
  printf("profiling over 2 runs: %.3f s in 6 launches (fake clock), leaves 0, kernels %.3f s per run\n", sum,
         kernel_s);
  free(steps);
  dc_cuda_backend_destroy(b);
  check_no_leaks("profiling");
}

typedef struct {
  float **ref;
  const dc_module *m;
  int32_t seen[32], fail_at;
  int nseen, same;
} finite_check;

static dc_status *on_step(void *ctx, int32_t step, const float *values) {
  finite_check *fc = ctx;
  if (fc->nseen < 32) fc->seen[fc->nseen++] = step;
  fc->same &= memcmp(values, fc->ref[step], dc_type_bytes(&fc->m->nodes[step].type)) == 0;
  return step == fc->fail_at ? dc_error(DC_ERR_MISMATCH, "produced NaN at element 3 (test)") : NULL;
}

static void test_check_step(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  finite_check fc = {NULL, m, {0}, -1, 0, 1};
  dc_cuda_backend_options o = {0};
  o.check_step = on_step;
  o.check_ctx = &fc;
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  float **inputs = input_arrays(m);
  set_random_inputs(fx, b, inputs);
  fc.ref = reference_values(m, inputs);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  int32_t want[] = {5, fx->conv, fx->add, fx->silu1, fx->mul, fx->silu2};
  CHECK(fc.nseen == 6 && !memcmp(fc.seen, want, sizeof want) && fc.same);
  CHECK(count_calls(C_DTOH) == 6 + m->noutputs);
  fc.nseen = 0, fc.fail_at = fx->mul;
  char msg[200];
  snprintf(msg, sizeof msg, "test.dplan: step %d (mul in up.scale): produced NaN at element 3 (test)", (int)fx->mul);
  CHECK_ERR(dc_cuda_backend_run(b, NULL, NULL), msg);
  CHECK(fc.nseen == 5);
  printf("check-finite: each of the 6 steps' outputs copied back and checked in order, values exact; a failing "
         "check stops the run: \"%s\"\n",
         msg);
  free_values(m, fc.ref);
  free_arrays(m, inputs);
  dc_cuda_backend_destroy(b);
  check_no_leaks("check-finite");
}

/* ==== the driver layer ============================================================= */
static void test_driver_messages(void) {
  dc_cu_api api = fake_api();
  char buf[128];
  CHECK(!strcmp(dc_cu_result_text(&api, DC_CUDA_ERROR_LAUNCH_FAILED, buf, sizeof buf),
                "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)"));
  CHECK(!strcmp(dc_cu_result_text(&api, 12345, buf, sizeof buf), "CUresult 12345"));
  CHECK(!strcmp(dc_cu_result_text(NULL, 2, buf, sizeof buf), "CUresult 2"));
  CHECK(dc_cu_check(&api, 0, "cuInit") == NULL);
  dc_status *st = dc_cu_check(&api, DC_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
  CHECK(st && dc_status_code_of(st) == DC_ERR_NOMEM);
  CHECK_ERR(st, "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  dc_cu_api loaded;
  st = dc_cu_api_load("libdiffc-no-such-driver.so.1", &loaded);
  CHECK(st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED);
  CHECK_ERR(st, "no NVIDIA driver was found (libdiffc-no-such-driver.so.1: ");
  CHECK_ERR(dc_cu_api_load("libm.so.6", &loaded),
            "libm.so.6 has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12.0; update the driver");
  CHECK(loaded.Init == NULL && loaded.lib == NULL);
  printf("driver layer: result names through cuGetErrorName/String, a missing library and one without "
         "cuGetProcAddress_v2 named\n");
}

/* Our constants against the toolkit's, where it is installed. */
#if defined(__has_include)
#if __has_include("/usr/local/cuda/include/cuda.h")
#include "/usr/local/cuda/include/cuda.h"
#define HAVE_CUDA_H 1
_Static_assert(sizeof(CUdeviceptr) == sizeof(dc_cu_deviceptr), "CUdeviceptr");
_Static_assert(sizeof(CUresult) == sizeof(dc_cu_result) && sizeof(CUdevice) == sizeof(dc_cu_device), "sizes");
#define SAME(a, b) ((int)(a) == (int)(b)) /* enums of different types */
_Static_assert(SAME(CUDA_SUCCESS, DC_CUDA_SUCCESS) && SAME(CUDA_ERROR_INVALID_VALUE, DC_CUDA_ERROR_INVALID_VALUE) &&
                   SAME(CUDA_ERROR_OUT_OF_MEMORY, DC_CUDA_ERROR_OUT_OF_MEMORY) &&
                   SAME(CUDA_ERROR_NOT_INITIALIZED, DC_CUDA_ERROR_NOT_INITIALIZED) &&
                   SAME(CUDA_ERROR_NO_DEVICE, DC_CUDA_ERROR_NO_DEVICE) &&
                   SAME(CUDA_ERROR_INVALID_DEVICE, DC_CUDA_ERROR_INVALID_DEVICE) &&
                   SAME(CUDA_ERROR_INVALID_CONTEXT, DC_CUDA_ERROR_INVALID_CONTEXT) &&
                   SAME(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, DC_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) &&
                   SAME(CUDA_ERROR_NO_BINARY_FOR_GPU, DC_CUDA_ERROR_NO_BINARY_FOR_GPU) &&
                   SAME(CUDA_ERROR_INVALID_PTX, DC_CUDA_ERROR_INVALID_PTX) &&
                   SAME(CUDA_ERROR_NOT_FOUND, DC_CUDA_ERROR_NOT_FOUND) &&
                   SAME(CUDA_ERROR_LAUNCH_FAILED, DC_CUDA_ERROR_LAUNCH_FAILED),
               "CUresult values");
_Static_assert(SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) &&
                   SAME(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, DC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) &&
                   SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) &&
                   SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) &&
                   SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
               "CUdevice_attribute values");
_Static_assert(SAME(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, DC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) &&
                   SAME(CU_STREAM_NON_BLOCKING, DC_CU_STREAM_NON_BLOCKING) && SAME(CU_EVENT_DEFAULT, DC_CU_EVENT_DEFAULT) &&
                   SAME(CU_EVENT_DISABLE_TIMING, DC_CU_EVENT_DISABLE_TIMING) &&
                   SAME(CU_MEMHOSTALLOC_PORTABLE, DC_CU_MEMHOSTALLOC_PORTABLE),
               "flags");
_Static_assert(SAME(CU_JIT_INFO_LOG_BUFFER, DC_CU_JIT_INFO_LOG_BUFFER) &&
                   SAME(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, DC_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) &&
                   SAME(CU_JIT_ERROR_LOG_BUFFER, DC_CU_JIT_ERROR_LOG_BUFFER) &&
                   SAME(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, DC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) &&
                   SAME(CU_GET_PROC_ADDRESS_DEFAULT, DC_CU_GET_PROC_ADDRESS_DEFAULT) &&
                   SAME(CU_GET_PROC_ADDRESS_SUCCESS, DC_CU_GET_PROC_ADDRESS_SUCCESS) &&
                   SAME(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, DC_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) &&
                   SAME(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, DC_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
               "JIT options and cuGetProcAddress");
#endif
#endif

static void test_constants(void) {
#ifdef HAVE_CUDA_H
  printf("driver constants: equal to /usr/local/cuda/include/cuda.h's (CUDA_VERSION %d), checked at compile time\n",
         CUDA_VERSION);
#else
  printf("driver constants: not checked here (no /usr/local/cuda/include/cuda.h)\n");
#endif
}

/* ==== diffrun's API on a CUDA plan file, the fake in place of libcuda ============= */
static void run_outputs(const char *path, const char *backend, int check_finite, float **out, drt_stats *stats) {
  drt_plan *p = NULL;
  drt_options o = {.backend = backend, .threads = 1, .check_finite = check_finite};
  CHECK_OK(drt_load(path, &o, &p));
  if (!p) return;
  drt_set_random_inputs(p, 7);
  CHECK_OK(drt_run(p, stats));
  for (int i = 0; i < drt_output_count(p); i++) {
    size_t n = 0;
    const float *y = drt_output(p, drt_output_info(p, i)->name, &n);
    out[i] = malloc(n * sizeof(float));
    memcpy(out[i], y, n * sizeof(float));
  }
  drt_destroy(p);
}

static void test_diffrun_api(fixture *fx) {
  char *path = tu_path("cuda.dplan"), *cpu_path = tu_path("cpu.dplan");
  CHECK_OK(dc_plan_write(path, &fx->plan));
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  fake_reset(9, 0);
  fake_bind(fx->plan.module, &fx->plan.cuda);
  /* --info needs no device */
  drt_plan *p = NULL;
  drt_options inspect = {.inspect = 1};
  CHECK_OK(drt_load(path, &inspect, &p));
  if (p) {
    const drt_plan_info *in = drt_info(p);
    CHECK(!strcmp(in->target, "cuda") && !strcmp(in->compute, "f32") && in->kernels == 5 &&
          !strcmp(in->archs, "sm_80, sm_90, compute_90") && in->flops == dc_module_flops(fx->plan.module));
    CHECK(fk.ncalls == 0 && fk.ctx_refs == 0);
    CHECK_ERR(drt_run(p, NULL), "loaded for inspection only");
    printf("inspect: target %s, compute %s, %d kernels for %s, %llu flops; no driver call\n", in->target, in->compute,
           in->kernels, in->archs, (unsigned long long)in->flops);
    drt_destroy(p);
  }
  float *cuda_out[2] = {NULL, NULL}, *ref_out[2] = {NULL, NULL}, *chk_out[2] = {NULL, NULL};
  drt_stats cs = {0}, rs = {0}, ks = {0};
  run_outputs(path, NULL, 0, cuda_out, &cs);
  CHECK(!strcmp(cs.backend, "cuda") && cs.device_peak_bytes == cs.device_predicted_bytes && cs.kernel_seconds > 0);
  CHECK(cs.device_total_bytes == fx->plan.module->arena_bytes + 1056 && cs.weight_bytes == 576 + 32 + 32);
  check_no_leaks("drt cuda");
  run_outputs(path, NULL, 1, chk_out, &ks);
  check_no_leaks("drt cuda check-finite");
  run_outputs(path, "reference", 0, ref_out, &rs);
  CHECK(!strcmp(rs.backend, "reference") && rs.device_peak_bytes == cs.device_peak_bytes);
  const dc_module *m = fx->plan.module;
  for (int i = 0; i < 2; i++) {
    size_t bytes = dc_type_bytes(&m->nodes[m->outputs[i].node].type);
    CHECK(cuda_out[i] && ref_out[i] && chk_out[i] && !memcmp(cuda_out[i], ref_out[i], bytes) &&
          !memcmp(chk_out[i], ref_out[i], bytes));
    free(cuda_out[i]), free(ref_out[i]), free(chk_out[i]);
  }
  printf("drt on a CUDA plan: backend %s (device peak %llu B = predicted, %llu B held) gives the reference "
         "backend's outputs bit for bit, with and without --check-finite\n",
         cs.backend, (unsigned long long)cs.device_peak_bytes, (unsigned long long)cs.device_total_bytes);
  /* llvm on a CUDA plan: the reference kernels; cuda on a CPU plan: refused */
  drt_options llvm = {.backend = "llvm"};
  CHECK_OK(drt_load(path, &llvm, &p));
  if (p) CHECK(!strcmp(drt_info(p)->backend, "reference"));
  drt_destroy(p);
  dc_plan cpu = fx->plan;
  cpu.target = DC_TARGET_CPU;
  memset(&cpu.cuda, 0, sizeof cpu.cuda);
  CHECK_OK(dc_plan_write(cpu_path, &cpu));
  drt_options want_cuda = {.backend = "cuda"};
  char msg[600];
  snprintf(msg, sizeof msg,
           "%s: --backend cuda needs a plan compiled for CUDA, and this one targets the CPU; recompile with diffc "
           "--target cuda (or run this one with --backend llvm or reference)",
           cpu_path);
  CHECK_ERR(drt_load(cpu_path, &want_cuda, &p), msg);
  /* profiling on CUDA: device times per step */
  CHECK_OK(drt_load(path, NULL, &p));
  if (p) {
    CHECK_OK(drt_set_profiling(p, 1));
    drt_set_random_inputs(p, 1);
    CHECK_OK(drt_run(p, NULL));
    drt_step_time t[16];
    int n = drt_profile(p, t, 16);
    CHECK(n == 6 && t[0].seconds > 0 && t[5].seconds > 0);
    drt_destroy(p);
  }
  check_no_leaks("drt");
  dc_cu_api_set_override(NULL);
  free(path);
  free(cpu_path);
}

/* ==== on demand: a failed read, no reader ========================================== */
/* The second chunk's read fails: the run's error names the step and the
 * reader's message, the streams are synchronised, and the next run (reads
 * working again) is in order and bit-exact.  A backend without a reader
 * refuses an on-demand plan before any driver call. */
static void test_on_demand_errors(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  device_blocks d = blocks_of(fx);
  float **inputs = input_arrays(m);
  set_random_inputs(fx, b, inputs);
  reads = 0, fail_read_at = 2;
  char want[300];
  snprintf(want, sizeof want,
           "test.dplan: step %d (upload in up.scale): weight file w.safetensors: tensor \"scale\": reading 12 bytes at "
           "file offset 12 got only 0 (test)",
           (int)fx->upload);
  int from = fk.ncalls;
  CHECK_ERR(dc_cuda_backend_run(b, NULL, NULL), want);
  int synced = 0, before = 0;
  for (int i = from; i < fk.ncalls; i++) synced += fk.calls[i].kind == C_STREAMSYNC;
  for (int32_t s = 0; s < fx->upload; s++) before += fx->plan.cuda.kernel_of_node[s] >= 0;
  CHECK(synced == 2 && fk.launches == before); /* the steps before the upload were launched; none after it */
  fail_read_at = 0;
  from = fk.ncalls;
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(check_run_order(fx, from, &d) && outputs_match(fx, b, inputs));
  free_arrays(m, inputs);
  dc_cuda_backend_destroy(b);
  check_no_leaks("on-demand read failure");
  fake_reset(9, 0);
  dc_cuda_backend_options no_reader = {0};
  CHECK_ERR(create(fx, &no_reader, &b),
            "test.dplan: the plan reads offloaded weights on demand (host_memory on-demand), and the backend was "
            "given no weight reader");
  CHECK(!b && fk.ncalls == 0);
  check_no_leaks("on-demand without a reader");
  printf("on-demand: a failed chunk read is the run's error (step and file named), the next run is bit-exact; no "
         "reader, no driver call\n");
}

/* drt on an on-demand CUDA plan: the runtime reads the real weight file
 * (pread) for the backend; outputs equal the reference backend's. */
static void test_diffrun_on_demand(fixture *fx) {
  char *path = tu_path("demand.dplan");
  CHECK_OK(dc_plan_write(path, &fx->plan));
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  fake_reset(9, 0);
  fake_bind(fx->plan.module, &fx->plan.cuda);
  float *cuda_out[2] = {NULL, NULL}, *ref_out[2] = {NULL, NULL};
  drt_stats cs = {0}, rs = {0};
  run_outputs(path, NULL, 0, cuda_out, &cs);
  check_no_leaks("drt on-demand");
  run_outputs(path, "reference", 0, ref_out, &rs);
  const dc_module *m = fx->plan.module;
  uint64_t io = 0;
  for (int i = 0; i < m->ninputs; i++) io += dc_type_bytes(&m->nodes[m->inputs[i].node].type);
  for (int i = 0; i < m->noutputs; i++) io += dc_type_bytes(&m->nodes[m->outputs[i].node].type);
  /* default chunks: 8 MiB, cut to the largest offloaded weight (32 B); the
   * reference backend's bounce buffer: one of 32 B */
  CHECK(!strcmp(cs.host_memory, "on-demand") && cs.pinned_bytes == io + 2 * 32 && cs.host_weight_bytes == 32);
  CHECK(!strcmp(rs.host_memory, "on-demand") && rs.pinned_bytes == 32);
  for (int i = 0; i < 2; i++) {
    size_t bytes = dc_type_bytes(&m->nodes[m->outputs[i].node].type);
    CHECK(cuda_out[i] && ref_out[i] && !memcmp(cuda_out[i], ref_out[i], bytes));
    free(cuda_out[i]), free(ref_out[i]);
  }
  dc_cu_api_set_override(NULL);
  printf("drt on an on-demand CUDA plan: weights read from %s at each upload, %llu B pinned (inputs, outputs, 2 "
         "chunks); outputs equal the reference backend's\n",
         fx->wpath, (unsigned long long)cs.pinned_bytes);
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_pick_image();
  test_driver_messages();
  test_constants();
  fixture fx;
  fixture_init(&fx, 0, 0);
  test_images_on_device(&fx);
  test_run(&fx);
  test_weight_upload(&fx);
  test_big_shared_memory(&fx);
  test_launch_failure(&fx);
  test_out_of_memory(&fx);
  test_device_index(&fx);
  test_alloc_failures(&fx);
  test_profiling(&fx);
  test_check_step(&fx);
  test_diffrun_api(&fx);
  fixture_deinit(&fx);
  fixture_init(&fx, 1, 0);
  test_run(&fx);
  fixture_deinit(&fx);
  fixture_init(&fx, 1, 1);
  test_run(&fx);
  test_on_demand_errors(&fx);
  test_diffrun_on_demand(&fx);
  fixture_deinit(&fx);
  return tu_finish();
}
