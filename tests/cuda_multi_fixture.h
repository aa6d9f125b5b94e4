/* cuda_multi_fixture.h — what the multi-GPU tests of the CUDA backend
 * (test_cuda_multi*.c) share, header-only like the fake driver they drive
 * (cuda_fake_driver.h, cuda_fake_order.h: static functions, one fake per
 * test program): the unet_tiny fixture compiled for CUDA on one GPU or placed
 * by a device map that sends down_blocks.1 and up_blocks.0.resnets.1 to GPU 1
 * and the rest to GPU 0 (so values cross both ways and GPU 0 runs again after
 * its values left), optionally with group offload + prefetch; a run through
 * drt_load/drt_run on the fake playing a machine of N GPUs; and the checks of
 * what each device holds and does, call by call (allocations, launches,
 * transfers, the happens-before check).  multi_init/multi_finish are each
 * program's first and last steps. */
#ifndef DC_CUDA_MULTI_FIXTURE_H
#define DC_CUDA_MULTI_FIXTURE_H

/* Each test program uses some of these helpers (and of cuda_fake_order.h's), not all. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"

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

/* Prints and frees st when it only says that `tool` is missing (then skip). */
static int missing_tool(dc_status *st, const char *tool) {
  if (!st || dc_status_code_of(st) != DC_ERR_UNSUPPORTED || !strstr(dc_status_message(st), tool)) return 0;
  printf("SKIP: %s\n", dc_status_message(st));
  dc_status_free(st);
  return skip = 1;
}

/* The inputs of unet_tiny (their shapes compile the plans) and the fake in
 * place of libcuda. */
static char *io_path;
static void multi_init(int argc, char **argv) {
  static dc_cu_api api;
  tu_init(argc, argv);
  ch_init(argv[1]);
  io_path = dc_path_join(tu_source_dir, "fixtures/unet_tiny/io_forward.safetensors");
  CHECK_OK(dc_st_open(io_path, &io));
  nshapes = tu_io_shapes(&io, shapes, 8);
  api = fake_api();
  dc_cu_api_set_override(&api);
}

static int multi_finish(void) {
  dc_cu_api_set_override(NULL);
  dc_st_close(&io);
  free(io_path);
  return tu_finish_or_skip(skip);
}

#pragma GCC diagnostic pop

#endif
