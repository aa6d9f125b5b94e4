/* test_cuda_multi.c — multi-GPU plans (diffc --device-map, --target cuda)
 * on the CUDA backend without a GPU.  The unet_tiny fixture is compiled for
 * CUDA with a device map that sends down_blocks.1 and up_blocks.0.resnets.1
 * to GPU 1 and the rest to GPU 0 (so values cross both ways and GPU 0 runs
 * again after its values left), and runs through drt_load/drt_run, the
 * real CUDA backend and the fake driver (cuda_fake_driver.h) playing a
 * machine of two GPUs that holds the backend to the driver's context rules
 * (the plans and the shared checks: cuda_multi_fixture.h).  Errors are in
 * test_cuda_multi_errors.c, the generated kernels emulated in
 * test_cuda_multi_emu.c.
 *
 * Checked here:
 *   - outputs: with the fake running each launch's reference kernel, bit
 *     for bit those of the reference backend on the same plan and of the
 *     one-GPU plan;
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
 *     profiling times transfers; --check-finite gives the same outputs.
 * Exits 77 without NVRTC. */
#include <stdlib.h>
#include <string.h>

#include "cuda_multi_fixture.h"

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
  dc_cuda_backend_options graphs = {0};
  graphs.graphs = 1; /* asked for, and not used: a plan on two GPUs keeps its streams */
  CHECK_OK(dc_cuda_backend_create("hazard.dplan", m, &h.plan.cuda, NULL, &api, &graphs, &b));
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
  const char *note = dc_cuda_backend_note(b, 0);
  CHECK(fk.cap.seq == 0 && in->graph_launches == 0 && note && strstr(note, "not used for a plan on 2 GPUs"));
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

int main(int argc, char **argv) {
  multi_init(argc, argv);
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
    plan_close(&two);
  }
  plan_close(&one);
  return multi_finish();
}
