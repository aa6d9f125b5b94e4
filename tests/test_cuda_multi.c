/* test_cuda_multi.c — multi-GPU plans (diffc --device-map, --target cuda)
 * on the CUDA backend without a GPU.  The unet_tiny fixture is compiled for
 * CUDA with a device map that sends down_blocks.1 and up_blocks.0.resnets.1
 * to GPU 1 and the rest to GPU 0 (so values cross both ways and GPU 0 runs
 * again after its values left), and runs through drt_load/drt_run, the
 * real CUDA backend and the fake driver (cuda_fake_driver.h) playing a
 * machine of two GPUs that holds the backend to the driver's context rules.
 *
 * Checked:
 *   - outputs: with the fake running each launch's reference kernel, bit
 *     for bit those of the reference backend on the same plan and of the
 *     one-GPU plan; with the emulator running the generated CUDA C, within
 *     1e-4 of diffusers and of the reference backend, and bit for bit the
 *     emulated one-GPU plan's;
 *   - call by call: each device checks its free memory and then allocates
 *     its own arena of the planned size (liveness dev_peak) and its weight
 *     block; every launch is on its device's compute stream with that
 *     device's arena base (params = arena_d + offset, weights in block_d);
 *     every transfer is a cuMemcpyPeerAsync on the destination's compute
 *     stream right after waiting for an event recorded on the source's
 *     compute stream, followed by an event that the source's compute stream
 *     waits on before its next launch; direct peer access is enabled for
 *     the pairs that copy;
 *   - ordering, whole: a happens-before check (cuda_fake_order.h: vector
 *     clocks over streams, events and host waits, from the call log) finds
 *     every pair of device operations that touch the same bytes, one
 *     writing, ordered, and every operation finished when the run returns;
 *     the same on plans with group offload + prefetch, pinned and on
 *     demand, whose uploads run on both GPUs; and on a hand-built plan
 *     where GPU 0 overwrites the bytes GPU 1 is copying from, the same
 *     check on the log without the waits for the transfers' events finds
 *     the races (so the rule is needed and the check can fail);
 *   - stats: per-device peaks = planned, weights, bytes transferred;
 *     profiling times transfers; --check-finite gives the same outputs;
 *   - errors: a 1-GPU machine refuses the plan before anything is made; a
 *     --device that leaves too few GPUs; too little free memory on GPU 1
 *     (named) before any allocation; an allocation failure on GPU 1 frees
 *     everything already made on GPU 0; --device 1 on 3 GPUs runs on GPUs
 *     1 and 2; without peer access the copies still run; each host
 *     allocation of a load failing in turn leaves nothing on either GPU.
 * Exits 77 without NVRTC or a host C++ compiler (the emulator part). */
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "passes/passes.h"
#include "cuda_fake_order.h"
#include "cuda_harness.h"
#include "runtime/cuda_backend.h"
#include "runtime/diffrun.h"
#include "runtime/kernels.h"
#include "testutil.h"

static dc_st_file io;
static dc_input_shape shapes[8];
static int nshapes, skip;
static const char *MAP = "{\"\": 0, \"down_blocks.1\": 1, \"up_blocks.0.resnets.1\": 1}";

/* ==== plans ============================================================== */
enum { PLAIN, OFFLOAD, ON_DEMAND };

/* unet_tiny for CUDA (PTX: nothing here runs it), on one GPU or placed by
 * MAP, optionally with group offload + prefetch. */
static dc_status *compile(const char *path, int placed, int memory) {
  char *model = dc_path_join(tu_source_dir, "fixtures/unet_tiny/model"), *map_path = tu_path("map.json");
  dc_compile_options co = {.model = model, .entry = "forward", .shapes = shapes, .nshapes = nshapes,
                           .target = "cuda", .cuda_arch = "compute_90"};
  dc_map_entry *map = NULL;
  int n = 0;
  dc_status *st = NULL;
  if (placed) {
    tu_write_file(map_path, MAP, strlen(MAP));
    st = dc_load_device_map(map_path, &map, &n);
    co.memory.device_map = DC_MAP_FILE, co.memory.device_map_file = map_path, co.memory.map = map;
    co.memory.nmap = n;
  }
  if (memory != PLAIN) {
    co.memory.offload = DC_OFFLOAD_GROUP, co.memory.group_level = DC_GROUP_BLOCK, co.memory.blocks_per_group = 1;
    co.memory.prefetch = 1;
    co.memory.host_memory = memory == ON_DEMAND ? DC_HOST_ON_DEMAND : DC_HOST_PINNED;
  }
  if (!st) st = dc_compile(&co, path, NULL);
  dc_free(map);
  free(model), free(map_path);
  return st;
}

/* A plan as read back, and what the memory plan says per device. */
typedef struct {
  char *path;
  dc_plan plan;
  dc_liveness live;
} plan_file;

static dc_status *plan_open(plan_file *pf, const char *name, int placed, int memory) {
  memset(pf, 0, sizeof *pf);
  pf->path = tu_path(name);
  DC_TRY(compile(pf->path, placed, memory));
  DC_TRY(dc_plan_read(pf->path, &pf->plan));
  return dc_liveness_compute(pf->plan.module, &pf->live);
}

static void plan_close(plan_file *pf) {
  dc_liveness_deinit(&pf->live);
  dc_plan_deinit(&pf->plan);
  free(pf->path);
}

static int count_op(const dc_module *m, dc_op op, int device) {
  int n = 0;
  for (int32_t s = 0; s < m->nnodes; s++) n += m->nodes[s].op == op && (device < 0 || m->nodes[s].device == device);
  return n;
}

/* ==== running through drt on the fake ===================================== */
typedef struct {
  float *out;
  size_t numel;
  drt_stats stats;
  int from, to; /* the run's calls in fk.calls */
} run_result;

static void run_result_free(run_result *r) { free(r->out); }

/* Loads and runs the plan (drt, default backend = cuda on the fake when
 * backend is NULL); on a load error returns it. */
static dc_status *run_plan(const plan_file *pf, const char *backend, const drt_options *extra, run_result *r) {
  memset(r, 0, sizeof *r);
  drt_options o = {.backend = backend, .threads = 1};
  if (extra) o.device = extra->device, o.check_finite = extra->check_finite;
  drt_plan *p = NULL;
  DC_TRY(drt_load(pf->path, &o, &p));
  for (int i = 0; i < drt_input_count(p); i++) {
    const drt_tensor_info *in = drt_input_info(p, i);
    const dc_st_tensor *t = dc_st_find(&io, in->name);
    CHECK(t && t->bytes == in->numel * 4);
    if (t) CHECK_OK(drt_set_input(p, in->name, (const float *)(io.file.data + t->offset), in->numel));
  }
  r->from = fk.ncalls;
  dc_status *st = drt_run(p, &r->stats);
  r->to = fk.ncalls;
  const float *y = st ? NULL : drt_output(p, "sample", &r->numel);
  if (y) {
    r->out = malloc(r->numel * sizeof(float));
    memcpy(r->out, y, r->numel * sizeof(float));
  }
  drt_destroy(p);
  return st;
}

static int same_outputs(const run_result *a, const run_result *b) {
  return a->out && b->out && a->numel == b->numel && memcmp(a->out, b->out, a->numel * sizeof(float)) == 0;
}

static int count_calls(int kind, int from, int to) {
  int n = 0;
  for (int i = from; i < to; i++) n += fk.calls[i].kind == kind;
  return n;
}

static int no_leaks(void) {
  return live_objs() == 0 && live_blocks(0) == 0 && live_blocks(1) == 0 && fk.ctx_refs == 0;
}

/* A fresh fake machine of n GPUs whose launches stand for pf's kernels. */
static void fake_gpus(int n, const plan_file *pf) {
  fake_reset(9, 0);
  fk.ndevices = n;
  fake_bind(pf->plan.module, &pf->plan.cuda);
}

/* ==== what each device holds ================================================= */
typedef struct {
  int ndev;
  uint64_t arena[FAKE_MAX_DEVICES], arena_bytes[FAKE_MAX_DEVICES];
  uint64_t block[FAKE_MAX_DEVICES], block_bytes[FAKE_MAX_DEVICES];
  int compute[FAKE_MAX_DEVICES], copy[FAKE_MAX_DEVICES]; /* stream ids */
} devices;

/* The allocations of each device in the order the backend makes them
 * (arena, then weight block), and its streams (compute, then copy). */
static devices devices_of(int ndev, int first) {
  devices dv;
  memset(&dv, 0, sizeof dv);
  dv.ndev = ndev;
  int nalloc[FAKE_MAX_DEVICES] = {0}, nstream[FAKE_MAX_DEVICES] = {0};
  for (int i = 0; i < fk.ncalls; i++) {
    const fake_call *c = &fk.calls[i];
    if (c->kind != C_ALLOC || c->dev < first) continue;
    int d = c->dev - first;
    if (nalloc[d]++ == 0) dv.arena[d] = c->dst, dv.arena_bytes[d] = c->bytes;
    else dv.block[d] = c->dst, dv.block_bytes[d] = c->bytes;
  }
  for (int i = 0; i < fk.nobjs; i++) {
    const fake_obj *o = &fk.objs[i];
    if (o->kind != O_STREAM || o->device < first) continue;
    int d = o->device - first;
    if (nstream[d]++ == 0) dv.compute[d] = o->id;
    else dv.copy[d] = o->id;
  }
  return dv;
}

/* Device d's weight block by the layout rule: each weight resident there
 * (read by a kernel) at the next 256-byte boundary, in index order. */
static uint64_t weight_block_of(const dc_module *m, int d) {
  uint64_t top = 0;
  for (int w = 0; w < m->nweights; w++)
    for (int32_t s = 0; s < m->nnodes; s++)
      if (m->nodes[s].op == OP_WEIGHT && m->nodes[s].ref == w && m->nodes[s].device == d && !dc_weight_offloaded(m, s))
        top = ((top + 255) & ~(uint64_t)255) + m->weights[w].bytes;
  return top;
}

/* Each device checked its free memory first, then made one arena of its
 * planned size and one block for its weights. */
static int check_allocations(const plan_file *pf, const devices *dv, int first) {
  int ok = 1, first_alloc = -1, last_meminfo = -1;
  for (int i = 0; i < fk.ncalls; i++) {
    if (fk.calls[i].kind == C_MEMINFO) last_meminfo = i;
    if (fk.calls[i].kind == C_ALLOC && first_alloc < 0) first_alloc = i;
  }
  ok &= last_meminfo >= 0 && last_meminfo < first_alloc && count_calls(C_MEMINFO, 0, fk.ncalls) == dv->ndev;
  ok &= count_calls(C_ALLOC, 0, fk.ncalls) == 2 * dv->ndev;
  for (int d = 0; d < dv->ndev; d++) {
    ok &= dv->arena_bytes[d] == pf->live.dev_peak[d];
    ok &= dv->block_bytes[d] == weight_block_of(pf->plan.module, d) && dv->block_bytes[d] >= pf->live.dev_weights[d];
    printf("  device %d (CUDA %d): arena %llu B = planned, weight block %llu B for %llu B of weights\n", d, d + first,
           (unsigned long long)dv->arena_bytes[d], (unsigned long long)dv->block_bytes[d],
           (unsigned long long)pf->live.dev_weights[d]);
  }
  return ok;
}

/* Where value v lives: its device's arena at its offset, or (a resident
 * weight) somewhere in its device's weight block. */
static int address_ok(const dc_module *m, const devices *dv, int32_t v, uint64_t addr) {
  const dc_node *n = &m->nodes[v];
  int d = n->device;
  if (n->op != OP_WEIGHT) return addr == dv->arena[d] + (uint64_t)n->offset;
  return addr % 256 == 0 && addr >= dv->block[d] &&
         addr + m->weights[n->ref].bytes <= dv->block[d] + dv->block_bytes[d];
}

/* The run's launches, in schedule order, each on its device's compute
 * stream with addresses in that device's memory. */
static int check_launches(const dc_module *m, const dc_plan_cuda *k, const devices *dv, const run_result *r,
                          int per_device[]) {
  int ok = 1, i = r->from;
  for (int32_t s = 0; s < m->nnodes; s++) {
    if (k->kernel_of_node[s] < 0) continue;
    while (i < r->to && fk.calls[i].kind != C_LAUNCH) i++;
    if (i == r->to) return 0;
    const fake_call *c = &fk.calls[i++];
    const dc_node *n = &m->nodes[s];
    int good = !strcmp(c->fn, k->kernels[k->kernel_of_node[s]].name) && c->dev == n->device &&
               c->stream == dv->compute[n->device] && address_ok(m, dv, s, c->params[0]);
    for (int j = 0; j < n->ninputs; j++) good &= address_ok(m, dv, n->inputs[j], c->params[j + 1]);
    if (!good) fprintf(stderr, "launch of step %d: wrong device, stream or addresses\n", (int)s);
    ok &= good;
    per_device[n->device]++;
  }
  return ok;
}

/* The last call before `at` that recorded event e, or -1. */
static int last_record(int e, int at) {
  for (int i = at - 1; i >= 0; i--)
    if (fk.calls[i].kind == C_RECORD && fk.calls[i].event == e) return i;
  return -1;
}

/* Each transfer: the destination's compute stream waits for an event the
 * source's compute stream recorded, copies peer to peer, records an event;
 * the source's compute stream waits for it before its next launch. */
static int check_transfers(const dc_module *m, const devices *dv, const run_result *r, int *ntransfers) {
  int ok = 1, i = r->from;
  for (int32_t s = 0; s < m->nnodes; s++) {
    if (m->nodes[s].op != OP_TRANSFER) continue;
    while (i < r->to && fk.calls[i].kind != C_PEER) i++;
    if (i + 1 >= r->to || i < r->from + 1) return 0;
    const dc_node *n = &m->nodes[s];
    int32_t v = n->inputs[0];
    int to = n->device, from = m->nodes[v].device;
    const fake_call *c = &fk.calls[i], *wait = &fk.calls[i - 1], *done = &fk.calls[i + 1];
    int rec = wait->kind == C_WAIT ? last_record(wait->event, i - 1) : -1;
    int good = c->dev == to && c->src_dev == from && c->stream == dv->compute[to] &&
               c->bytes == dc_type_bytes(&n->type) && address_ok(m, dv, s, c->dst) && address_ok(m, dv, v, c->src);
    good &= wait->kind == C_WAIT && wait->stream == dv->compute[to] && rec >= 0 &&
            fk.calls[rec].stream == dv->compute[from];
    good &= done->kind == C_RECORD && done->stream == dv->compute[to];
    /* the source's next launch comes after a wait for that event */
    int waited = 0, j = i + 2;
    for (; j < r->to && !(fk.calls[j].kind == C_LAUNCH && fk.calls[j].stream == dv->compute[from]); j++)
      waited |= fk.calls[j].kind == C_WAIT && fk.calls[j].stream == dv->compute[from] &&
                fk.calls[j].event == done->event;
    good &= waited || j == r->to;
    if (!good) fprintf(stderr, "transfer step %d: not a peer copy ordered as described\n", (int)s);
    ok &= good;
    (*ntransfers)++;
    i += 2;
  }
  return ok;
}

static int race_free(const race_report *rep) {
  return rep->races == 0 && rep->unfinished == 0 && rep->host_refill_races == 0 && rep->cross_stream > 0;
}

/* The run's log without the source devices' waits for the transfers'
 * events (the record right after each peer copy). */
static int drop_transfer_waits(const run_result *r, fake_call *out) {
  int n = 0, moved[64], nmoved = 0;
  for (int i = r->from; i + 1 < r->to; i++)
    if (fk.calls[i].kind == C_PEER && nmoved < 64) moved[nmoved++] = fk.calls[i + 1].event;
  for (int i = r->from; i < r->to; i++) {
    int drop = 0;
    for (int k = 0; k < nmoved && fk.calls[i].kind == C_WAIT; k++) drop |= fk.calls[i].event == moved[k];
    if (!drop) out[n++] = fk.calls[i];
  }
  return n;
}

/* ==== the hazard, by hand ====================================================== */
/* x (GPU 0) -> a = silu(x) -> t = transfer(a) to GPU 1 -> c = silu(t), an
 * output; GPU 0 goes on meanwhile: b = silu(x) lands on a's bytes (free
 * once the transfer is scheduled), e = b + x, an output.  The copy out of a
 * runs on GPU 1's stream, so b's launch must wait for it: the plan where
 * the rule matters (in unet_tiny the devices take turns, and each turn
 * waits for the other's results anyway). */
typedef struct {
  dc_plan plan;
  int32_t x, a, t, b, c, e;
} hazard;

static int32_t add_node(dc_module *m, dc_node n, int device) {
  n.device = device;
  if (!(dc_op_get(n.op)->flags & OPF_TYPE_GIVEN)) CHECK_OK(dc_infer_type(m, &n, &n.type));
  return dc_module_add_node(m, &n);
}

/* Two kernels, silu (a, b, c: on both GPUs) and add; PTX images only. */
static void hazard_kernels(hazard *h) {
  const dc_module *m = h->plan.module;
  dc_plan_cuda *k = &h->plan.cuda;
  k->compute = dc_strdup("f32");
  k->nvrtc_version = dc_strdup("13.0");
  k->nnodes = m->nnodes;
  k->kernel_of_node = dc_calloc((size_t)m->nnodes, sizeof(int32_t));
  k->kernels = dc_calloc(2, sizeof *k->kernels);
  k->nkernels = 2;
  for (int32_t s = 0; s < m->nnodes; s++)
    k->kernel_of_node[s] = m->nodes[s].op == OP_SILU ? 0 : m->nodes[s].op == OP_ADD ? 1 : -1;
  for (int i = 0; i < 2; i++) {
    dc_plan_cuda_kernel *kk = &k->kernels[i];
    kk->name = dc_strdup(i ? "k1_add" : "k0_silu");
    kk->source = dc_strdup("/* run by the fake driver's reference kernels */");
    kk->grid[0] = kk->grid[1] = kk->grid[2] = 1;
    kk->block[0] = 64, kk->block[1] = kk->block[2] = 1;
    kk->images = dc_calloc(1, sizeof *kk->images);
    kk->nimages = 1;
    kk->images[0].arch = dc_strdup("compute_90");
    kk->images[0].kind = DC_CUDA_IMAGE_PTX;
    kk->images[0].data = (uint8_t *)dc_asprintf("PTX of %s", kk->name);
    kk->images[0].size = strlen((const char *)kk->images[0].data) + 1;
  }
}

static void hazard_init(hazard *h) {
  memset(h, 0, sizeof *h);
  dc_module *m = dc_module_create();
  dc_type t = {DT_F32, 2, {1, 64}};
  h->x = dc_module_add_input(m, "x", &t, INIT_NORMAL);
  h->a = add_node(m, dc_node_make(OP_SILU, 1, &h->x), 0);
  dc_node tr = dc_node_make(OP_TRANSFER, 1, &h->a);
  tr.type = t;
  h->t = add_node(m, tr, 1);
  h->b = add_node(m, dc_node_make(OP_SILU, 1, &h->x), 0);
  h->c = add_node(m, dc_node_make(OP_SILU, 1, &h->t), 1);
  h->e = add_node(m, dc_node_make(OP_ADD, 2, (int32_t[]){h->b, h->x}), 0);
  CHECK_OK(dc_module_add_output(m, "e", h->e));
  CHECK_OK(dc_module_add_output(m, "c", h->c));
  CHECK_OK(dc_verify(m, "hazard"));
  CHECK_OK(dc_memplan(m, NULL));
  h->plan.target = DC_TARGET_CUDA;
  h->plan.module = m;
  h->plan.options_json = dc_strdup("{}");
  h->plan.ir_text = dc_strdup("(hazard plan)\n");
  hazard_kernels(h);
}

/* out = the reference kernel of node s on in0 (and in1). */
static void ref_apply(const dc_module *m, int32_t s, const float *in0, const float *in1, float *out) {
  const void *in[2] = {in0, in1};
  CHECK_OK(dc_ref_kernel_for(m->nodes[s].op)(m, &m->nodes[s], in, out));
}

static void test_hazard(void) {
  hazard h;
  hazard_init(&h);
  const dc_module *m = h.plan.module;
  CHECK(m->nodes[h.b].device == 0 && m->nodes[h.b].offset == m->nodes[h.a].offset);
  fake_reset(9, 0);
  fk.ndevices = 2;
  fake_bind(m, &h.plan.cuda);
  dc_cu_api api = fake_api();
  dc_cuda_backend *b = NULL;
  CHECK_OK(dc_cuda_backend_create("hazard.dplan", m, &h.plan.cuda, NULL, &api, NULL, &b));
  if (!b) {
    dc_plan_deinit(&h.plan);
    return;
  }
  float x[64], a[64], c[64], bb[64], e[64];
  for (int i = 0; i < 64; i++) x[i] = dc_cuda_backend_input(b, 0)[i] = (float)(i - 32) / 8;
  int loads[2] = {0, 0};
  for (int i = 0; i < fk.ncalls; i++)
    if (fk.calls[i].kind == C_LOAD) loads[fk.calls[i].dev]++;
  run_result r = {.from = fk.ncalls};
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  r.to = fk.ncalls;
  ref_apply(m, h.a, x, NULL, a), ref_apply(m, h.c, a, NULL, c);
  ref_apply(m, h.b, x, NULL, bb), ref_apply(m, h.e, bb, x, e);
  CHECK(!memcmp(dc_cuda_backend_output(b, 0), e, sizeof e) && !memcmp(dc_cuda_backend_output(b, 1), c, sizeof c));
  const dc_cuda_backend_info *in = dc_cuda_backend_get_info(b);
  CHECK(in->ndevices == 2 && in->transferred_bytes == 256 && in->peer_pairs == 1 && in->peer_direct == 1);
  CHECK(loads[0] == 2 && loads[1] == 1); /* silu and add on GPU 0, silu on GPU 1 */
  /* b's launch comes after GPU 0's compute stream waited for the copy */
  int peer = -1, moved = 0, waited = 0, launches0 = 0;
  for (int i = r.from; i < r.to; i++) {
    const fake_call *call = &fk.calls[i];
    if (call->kind == C_PEER) peer = i, moved = fk.calls[i + 1].event;
    if (peer >= 0 && call->kind == C_WAIT && call->event == moved && call->dev == 0) waited = 1;
    if (call->kind == C_LAUNCH && call->dev == 0 && ++launches0 == 2) CHECK(peer >= 0 && waited);
  }
  race_report ok = check_races(fk.calls + r.from, r.to - r.from, 0);
  fake_call cut[256];
  CHECK(r.to - r.from <= 256);
  int n = drop_transfer_waits(&r, cut);
  race_report bad = check_races(cut, n, 0);
  /* without the wait, b's launch and e's (in place over b) each write bytes the copy may still read */
  int in_place = m->nodes[h.e].offset == m->nodes[h.b].offset;
  CHECK(race_free(&ok) && bad.races == 1 + in_place);
  printf("hazard plan: b = silu(x) on GPU 0 reuses the bytes GPU 1 copies a from; with the rule, %d pairs of accesses "
         "to the same bytes all ordered and outputs exact; without GPU 0's wait: %d races (first: %s)\n",
         ok.pairs, bad.races, bad.first);
  dc_cuda_backend_destroy(b);
  CHECK(no_leaks());
  dc_plan_deinit(&h.plan);
}

/* ==== the two-GPU plan, call by call ============================================ */
static void test_placed_run(const plan_file *one, const plan_file *two) {
  const dc_module *m = two->plan.module;
  run_result ref, ref1, first, second;
  CHECK(two->live.ndevices == 2 && count_op(m, OP_TRANSFER, 0) > 0 && count_op(m, OP_TRANSFER, 1) > 0);
  CHECK_OK(run_plan(two, "reference", NULL, &ref));
  CHECK_OK(run_plan(one, "reference", NULL, &ref1));
  fake_gpus(2, two);
  /* one backend, two runs: both checked */
  drt_plan *p = NULL;
  drt_options o = {0};
  CHECK_OK(drt_load(two->path, &o, &p));
  if (!p) return;
  devices dv = devices_of(2, 0);
  CHECK(check_allocations(two, &dv, 0));
  int enabled = 0;
  for (int i = 0; i < fk.ncalls; i++)
    enabled += fk.calls[i].kind == C_PEER_ENABLE && ((fk.calls[i].dev == 1 && fk.calls[i].src_dev == 0) ||
                                                     (fk.calls[i].dev == 0 && fk.calls[i].src_dev == 1));
  CHECK(enabled == 2);
  run_result *runs[2] = {&first, &second};
  for (int k = 0; k < 2; k++) {
    run_result *r = runs[k];
    memset(r, 0, sizeof *r);
    for (int i = 0; i < drt_input_count(p); i++) {
      const drt_tensor_info *in = drt_input_info(p, i);
      const dc_st_tensor *t = dc_st_find(&io, in->name);
      CHECK_OK(drt_set_input(p, in->name, (const float *)(io.file.data + t->offset), in->numel));
    }
    r->from = fk.ncalls;
    CHECK_OK(drt_run(p, &r->stats));
    r->to = fk.ncalls;
    const float *y = drt_output(p, "sample", &r->numel);
    r->out = malloc(r->numel * sizeof(float));
    memcpy(r->out, y, r->numel * sizeof(float));
    int launches[2] = {0, 0}, transfers = 0;
    CHECK(check_launches(m, &two->plan.cuda, &dv, r, launches));
    CHECK(check_transfers(m, &dv, r, &transfers));
    race_report rep = check_races(fk.calls + r->from, r->to - r->from, 0);
    CHECK(race_free(&rep));
    if (rep.first[0]) printf("  race: %s\n", rep.first);
    CHECK(same_outputs(r, &ref) && same_outputs(r, &ref1));
    printf("run %d: %d launches on GPU 0 and %d on GPU 1 at their own arena bases, %d peer copies ordered by events; "
           "%d pairs of accesses to the same bytes (%d across streams) all ordered, all done at return; outputs %s "
           "the reference backend's and the one-GPU plan's\n",
           k + 1, launches[0], launches[1], transfers, rep.pairs, rep.cross_stream,
           same_outputs(r, &ref) && same_outputs(r, &ref1) ? "bit-identical to" : "DIFFER from");
  }
  const drt_stats *s = &second.stats;
  uint64_t moved = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_TRANSFER) moved += dc_type_bytes(&m->nodes[i].type);
  CHECK(!strcmp(s->backend, "cuda") && s->ndevices == 2 && s->transferred_bytes == moved && moved > 0);
  for (int d = 0; d < 2; d++)
    CHECK(s->dev_peak_bytes[d] == s->dev_predicted_bytes[d] && s->dev_peak_bytes[d] == two->live.dev_peak[d] &&
          s->dev_weight_bytes[d] == two->live.dev_weights[d]);
  CHECK(s->device_total_bytes == dv.arena_bytes[0] + dv.block_bytes[0] + dv.arena_bytes[1] + dv.block_bytes[1]);
  uint64_t fullest = s->dev_peak_bytes[0] > s->dev_peak_bytes[1] ? s->dev_peak_bytes[0] : s->dev_peak_bytes[1];
  CHECK(s->device_peak_bytes == fullest);
  printf("stats: GPU 0 arena %llu B, GPU 1 %llu B (= planned), %llu B transferred per run, %llu B of device memory\n",
         (unsigned long long)s->dev_peak_bytes[0], (unsigned long long)s->dev_peak_bytes[1],
         (unsigned long long)s->transferred_bytes, (unsigned long long)s->device_total_bytes);
  drt_destroy(p);
  CHECK(no_leaks());
  run_result_free(&first), run_result_free(&second), run_result_free(&ref), run_result_free(&ref1);
}

/* Profiling (device times per launch and per transfer, each against its
 * own device's events) and --check-finite (a copy back per step). */
static void test_profiling_and_checks(const plan_file *two) {
  const dc_module *m = two->plan.module;
  fake_gpus(2, two);
  drt_plan *p = NULL;
  CHECK_OK(drt_load(two->path, NULL, &p));
  if (!p) return;
  CHECK_OK(drt_set_profiling(p, 1));
  drt_set_random_inputs(p, 3);
  CHECK_OK(drt_run(p, NULL));
  drt_step_time *t = calloc((size_t)m->nnodes, sizeof *t);
  int n = drt_profile(p, t, m->nnodes), timed = 0, transfers = 0, ok = 1;
  for (int i = 0; i < n; i++) {
    const dc_node *node = &m->nodes[t[i].step];
    int expect = two->plan.cuda.kernel_of_node[t[i].step] >= 0 || node->op == OP_TRANSFER;
    ok &= expect ? t[i].seconds > 0 : t[i].seconds == 0;
    timed += t[i].seconds > 0;
    transfers += node->op == OP_TRANSFER && t[i].seconds > 0;
  }
  CHECK(ok && transfers == count_op(m, OP_TRANSFER, -1));
  printf("profiling on two GPUs: %d steps timed, the %d transfers among them\n", timed, transfers);
  free(t);
  drt_destroy(p);
  CHECK(no_leaks());
  run_result plain, checked;
  drt_options cf = {.check_finite = 1};
  fake_gpus(2, two);
  CHECK_OK(run_plan(two, NULL, NULL, &plain));
  int from = fk.ncalls;
  CHECK_OK(run_plan(two, NULL, &cf, &checked));
  int copies = 0, want = m->noutputs; /* each f32 launch's output, on its own device, then the outputs */
  for (int32_t s = 0; s < m->nnodes; s++)
    want += two->plan.cuda.kernel_of_node[s] >= 0 && m->nodes[s].type.dtype == DT_F32;
  for (int i = from; i < fk.ncalls; i++) copies += fk.calls[i].kind == C_DTOH;
  CHECK(same_outputs(&plain, &checked) && copies == want && no_leaks());
  printf("--check-finite on two GPUs: %d copies back, outputs unchanged\n", copies);
  run_result_free(&plain), run_result_free(&checked);
}

/* Group offload + prefetch on the two GPUs: uploads on each GPU's copy
 * stream; pinned, and on demand through the bounce chunks both GPUs share. */
static void test_offload(int memory) {
  plan_file pf;
  const char *name = memory == ON_DEMAND ? "demand.dplan" : "offload.dplan";
  CHECK_OK(plan_open(&pf, name, 1, memory));
  const dc_module *m = pf.plan.module;
  run_result ref, r;
  CHECK_OK(run_plan(&pf, "reference", NULL, &ref));
  fake_gpus(2, &pf);
  CHECK_OK(run_plan(&pf, NULL, NULL, &r));
  race_report rep = check_races(fk.calls + r.from, r.to - r.from, memory == ON_DEMAND);
  CHECK(race_free(&rep) && same_outputs(&r, &ref) && no_leaks());
  if (rep.first[0]) printf("  race: %s\n", rep.first);
  int up0 = count_op(m, OP_UPLOAD, 0), up1 = count_op(m, OP_UPLOAD, 1);
  CHECK(up0 > 0 && up1 > 0 && r.stats.ndevices == 2 &&
        !strcmp(r.stats.host_memory, memory == ON_DEMAND ? "on-demand" : "pinned"));
  printf("group offload + prefetch on two GPUs (%s): %d uploads on GPU 0, %d on GPU 1; %d pairs of accesses to the "
         "same bytes (%d across streams) all ordered%s; outputs %s the reference backend's\n",
         r.stats.host_memory, up0, up1, rep.pairs, rep.cross_stream,
         memory == ON_DEMAND ? ", no bounce chunk refilled under a copy" : "",
         same_outputs(&r, &ref) ? "bit-identical to" : "DIFFER from");
  if (memory == ON_DEMAND) { /* without the host's waits for the chunks' events, refills race the copies */
    fake_call *cut = malloc(sizeof(fake_call) * (size_t)(r.to - r.from));
    int n = 0;
    for (int i = r.from; i < r.to; i++)
      if (fk.calls[i].kind != C_EVSYNC) cut[n++] = fk.calls[i];
    race_report bad = check_races(cut, n, 1);
    CHECK(n < r.to - r.from && bad.host_refill_races > 0);
    printf("  without the host's waits before refilling a chunk: %d refills under a copy\n", bad.host_refill_races);
    free(cut);
  }
  run_result_free(&ref), run_result_free(&r);
  plan_close(&pf);
}

/* ==== errors ================================================================================ */
static void test_errors(const plan_file *two) {
  run_result r;
  char want[700];
  /* a machine with one GPU */
  fake_gpus(1, two);
  snprintf(want, sizeof want,
           "%s: the plan places modules on 2 GPUs; this machine has 1 CUDA device(s): recompile it for fewer (diffc "
           "--device-map with --max-memory naming the GPUs to use), or run it with --backend reference or llvm, "
           "which model each GPU as its own arena",
           two->path);
  CHECK_ERR(run_plan(two, NULL, NULL, &r), want);
  CHECK(fk.ncalls == 0 && no_leaks());
  /* two GPUs, from --device 1 */
  fake_gpus(2, two);
  drt_options dev1 = {.device = 1};
  snprintf(want, sizeof want,
           "%s: the plan places modules on 2 GPUs, devices 1..2 from --device 1, and this machine has 2 CUDA devices "
           "(numbered from 0): use --device 0 or lower",
           two->path);
  CHECK_ERR(run_plan(two, NULL, &dev1, &r), want);
  CHECK(no_leaks());
  printf("refused before any device call: a 2-GPU plan on 1 GPU, and from --device 1 on 2 GPUs\n");
  /* three GPUs, from --device 1: GPUs 1 and 2 */
  fake_gpus(3, two);
  run_result ok;
  CHECK_OK(run_plan(two, NULL, &dev1, &ok));
  devices dv = devices_of(2, 1);
  int on0 = 0;
  for (int i = 0; i < fk.ncalls; i++) on0 += fk.calls[i].kind == C_ALLOC && fk.calls[i].dev == 0;
  CHECK(on0 == 0 && dv.arena_bytes[0] == two->live.dev_peak[0] && dv.arena_bytes[1] == two->live.dev_peak[1]);
  CHECK(no_leaks());
  printf("--device 1 on three GPUs: the plan's devices 0 and 1 on CUDA devices 1 and 2\n");
  /* too little free memory on GPU 1: named, before any allocation */
  fake_gpus(2, two);
  uint64_t need1 = two->live.dev_peak[1] + dv.block_bytes[1];
  fk.free_on[1] = need1 - 1;
  dc_status *st = run_plan(two, NULL, NULL, &r);
  char n1[32];
  snprintf(want, sizeof want, "%s: the plan needs %s of device memory on its device 1 of 2 (%llu bytes", two->path,
           dc_format_bytes(need1, n1, sizeof n1), (unsigned long long)need1);
  CHECK(st && dc_status_code_of(st) == DC_ERR_NOMEM &&
        strstr(dc_status_message(st), "but device 1 (Fake GPU 9.0) has"));
  if (st) printf("out of memory on GPU 1: %.200s...\n", dc_status_message(st));
  CHECK_ERR(st, want);
  CHECK(count_calls(C_ALLOC, 0, fk.ncalls) == 0 && no_leaks());
  /* an allocation failure on GPU 1 frees what GPU 0 got */
  fake_gpus(2, two);
  fk.fail_alloc_device = 1;
  char n2[32];
  snprintf(want, sizeof want,
           "%s: allocating the %s arena on device 1: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", two->path,
           dc_format_bytes(two->live.dev_peak[1], n2, sizeof n2));
  CHECK_ERR(run_plan(two, NULL, NULL, &r), want);
  int allocs0 = 0;
  for (int i = 0; i < fk.ncalls; i++) allocs0 += fk.calls[i].kind == C_ALLOC && fk.calls[i].dev == 0;
  CHECK(allocs0 == 2 && fk.used[0] == 0 && no_leaks());
  printf("an allocation failure on GPU 1 after GPU 0's arena and weights: \"%s\"; everything freed\n", want);
  /* no peer access: the driver stages the copies; same outputs */
  fake_gpus(2, two);
  fk.no_peer = 1;
  run_result staged;
  CHECK_OK(run_plan(two, NULL, NULL, &staged));
  CHECK(count_calls(C_PEER_ENABLE, 0, fk.ncalls) == 0 && count_calls(C_PEER, staged.from, staged.to) > 0);
  CHECK(same_outputs(&staged, &ok) && no_leaks());
  printf("without peer access: no cuCtxEnablePeerAccess, the same peer copies and outputs\n");
  run_result_free(&ok), run_result_free(&staged);
}

/* Host allocation N of a load fails, for N = 0, 1, ... until the load
 * succeeds: each failure is a clean error that leaves nothing on either
 * GPU; the load that succeeds runs.  (Only the load: the fake's reference
 * kernels allocate too, and the backend's run allocates nothing.) */
static void test_alloc_failures(const plan_file *two) {
  int n = 0, clean = 1;
  for (;; n++) {
    fake_gpus(2, two);
    drt_plan *p = NULL;
    dc_alloc_fail_after(n);
    dc_status *st = drt_load(two->path, NULL, &p);
    dc_alloc_fail_after(-1);
    if (!st) {
      drt_set_random_inputs(p, 1);
      CHECK_OK(drt_run(p, NULL));
    }
    drt_destroy(p);
    clean &= no_leaks();
    if (!st) break;
    clean &= dc_status_code_of(st) == DC_ERR_NOMEM;
    dc_status_free(st);
  }
  CHECK(clean && n > 20);
  printf("allocation failure: each of the first %d host allocations of loading a 2-GPU plan failed in turn: a clean "
         "error, nothing left on either GPU\n", n);
}

/* ==== the generated kernels, emulated ========================================================= */
static const dc_plan *emu_plan;
static ch_kernel **built;
static char launch_error[600];

static void free_built(void) {
  ch_plan_free(emu_plan, built);
  built = NULL;
}

static int emulate(int ki, const unsigned grid[3], const unsigned block[3], unsigned smem, void **params) {
  dc_status *st = ch_plan_launch(emu_plan, built, ki, grid, block, smem, params);
  if (!st) return DC_CUDA_SUCCESS;
  snprintf(launch_error, sizeof launch_error, "%s", dc_status_message(st));
  dc_status_free(st);
  return DC_CUDA_ERROR_LAUNCH_FAILED;
}

/* Prints and frees st when it only says that `tool` is missing (then skip). */
static int missing_tool(dc_status *st, const char *tool) {
  if (!st || dc_status_code_of(st) != DC_ERR_UNSUPPORTED || !strstr(dc_status_message(st), tool)) return 0;
  printf("SKIP: %s\n", dc_status_message(st));
  dc_status_free(st);
  return skip = 1;
}

/* plan on `ndev` GPUs with the generated kernels (the kernels of the one-
 * and two-GPU plans are the same sources, built once). */
static dc_status *emulated_run(const plan_file *pf, int ndev, run_result *r) {
  fake_gpus(ndev, pf);
  emu_plan = &pf->plan;
  if (!built) DC_TRY(ch_plan_build(emu_plan, &built));
  for (int i = 0; i < pf->plan.cuda.nkernels; i++)
    if (!built[i]) return dc_error(DC_ERR_INTERNAL, "kernel %d was not built", i);
  fk.execute = emulate;
  dc_status *st = run_plan(pf, NULL, NULL, r);
  fk.execute = NULL;
  if (st && launch_error[0]) printf("emulator: %s\n", launch_error);
  return st;
}

static void test_emulated(const plan_file *one, const plan_file *two) {
  run_result e1, e2, ref;
  CHECK(one->plan.cuda.nkernels == two->plan.cuda.nkernels);
  for (int i = 0; i < one->plan.cuda.nkernels; i++) /* the same kernels, so one build serves both */
    CHECK(!strcmp(one->plan.cuda.kernels[i].source, two->plan.cuda.kernels[i].source));
  double t0 = dc_now_seconds();
  dc_status *st = emulated_run(two, 2, &e2);
  if (missing_tool(st, "C++ compiler")) return;
  CHECK_OK(st);
  double t1 = dc_now_seconds();
  CHECK_OK(emulated_run(one, 1, &e1));
  CHECK_OK(run_plan(two, "reference", NULL, &ref));
  const dc_st_tensor *w = dc_st_find(&io, "out.sample");
  CHECK(w && e2.out && w->bytes == e2.numel * 4);
  if (w && e2.out && ref.out) {
    double vs_diffusers = tu_rel_l2(e2.out, (const float *)(io.file.data + w->offset), e2.numel);
    double vs_ref = tu_rel_l2(e2.out, ref.out, e2.numel);
    CHECK(vs_diffusers <= 1e-4 && vs_ref <= 1e-4 && same_outputs(&e1, &e2));
    printf("generated kernels, emulated on two GPUs (%.1f s with the builds): rel L2 %.3g vs diffusers, %.3g vs the "
           "reference backend (tolerance 1e-4); %s the emulated one-GPU plan\n",
           t1 - t0, vs_diffusers, vs_ref, same_outputs(&e1, &e2) ? "bit-identical to" : "DIFFERENT from");
  }
  run_result_free(&e1), run_result_free(&e2), run_result_free(&ref);
  free_built();
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  char *io_path = dc_path_join(tu_source_dir, "fixtures/unet_tiny/io_forward.safetensors");
  CHECK_OK(dc_st_open(io_path, &io));
  nshapes = tu_io_shapes(&io, shapes, 8);
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  plan_file one, two;
  dc_status *st = plan_open(&one, "one.dplan", 0, PLAIN);
  if (!missing_tool(st, "NVRTC")) {
    CHECK_OK(st);
    CHECK_OK(plan_open(&two, "two.dplan", 1, PLAIN));
    test_hazard();
    test_placed_run(&one, &two);
    test_profiling_and_checks(&two);
    test_offload(OFFLOAD);
    test_offload(ON_DEMAND);
    test_errors(&two);
    test_alloc_failures(&two);
    test_emulated(&one, &two);
    plan_close(&two);
  }
  plan_close(&one);
  dc_cu_api_set_override(NULL);
  dc_st_close(&io);
  free(io_path);
  return tu_finish_or_skip(skip);
}
