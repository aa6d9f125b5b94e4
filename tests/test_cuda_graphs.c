/* test_cuda_graphs.c — CUDA graphs in the CUDA backend (runtime/cuda_graphs.c)
 * through the fake driver, whose stream capture follows the driver's rules
 * (cuda_fake_driver.h; the first test holds the fake to them): a run's steps
 * are captured once, per step range, and replayed by one cuGraphLaunch per
 * run; outputs equal the reference evaluation's and the stream path's bit
 * for bit over runs with different inputs; the copy stream's uploads are in
 * the graph behind their events (the happens-before check of
 * cuda_fake_order.h over the replayed work); profiling, tracing,
 * check_step, on-demand uploads, the option off, DIFFC_CUDA_GRAPHS=0 and
 * drt_options.no_cuda_graphs keep the streams; a capture that fails falls
 * back to streams and is not retried; graphs are destroyed at unload. */
#include <stdlib.h>
#include <string.h>

#include "cuda_fake_order.h"
#include "cuda_host_fixture.h"
#include "runtime/backend.h"

/* ==== the fake's capture rules ======================================================= */
static void test_fake_capture_rules(void) {
  fake_reset(9, 0);
  dc_cu_api a = fake_api();
  dc_cu_device dev;
  dc_cu_context ctx;
  dc_cu_stream s1, s2;
  dc_cu_event e1, e2, outside;
  dc_cu_graph g = NULL;
  CHECK(!a.DeviceGet(&dev, 0) && !a.DevicePrimaryCtxRetain(&ctx, dev) && !a.CtxSetCurrent(ctx));
  CHECK(!a.StreamCreate(&s1, DC_CU_STREAM_NON_BLOCKING) && !a.StreamCreate(&s2, DC_CU_STREAM_NON_BLOCKING));
  CHECK(!a.EventCreate(&e1, 0) && !a.EventCreate(&e2, 0) && !a.EventCreate(&outside, 0));
  CHECK(!a.EventRecord(outside, s1));
  /* a fork never joined back */
  CHECK(!a.StreamBeginCapture(s1, DC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK(!a.EventRecord(e1, s1) && !a.StreamWaitEvent(s2, e1, 0));
  CHECK(a.StreamEndCapture(s1, &g) == DC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED && !g);
  /* joined back: a graph */
  CHECK(!a.StreamBeginCapture(s1, DC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK(!a.EventRecord(e1, s1) && !a.StreamWaitEvent(s2, e1, 0) && !a.EventRecord(e2, s2) && !a.StreamWaitEvent(s1, e2, 0));
  CHECK(!a.StreamEndCapture(s1, &g) && g && live_graphs() == 1);
  CHECK(a.EventSynchronize(e2) == DC_CUDA_ERROR_CAPTURED_EVENT); /* last recorded inside a capture */
  CHECK(!a.GraphDestroy(g));
  /* a synchronisation in a capture: refused, and the capture is lost */
  CHECK(!a.StreamBeginCapture(s1, DC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK(a.StreamSynchronize(s2) == DC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(a.EventRecord(e1, s1) == DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(a.StreamEndCapture(s1, &g) == DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && !g);
  /* a wait on work outside the capture */
  CHECK(!a.StreamBeginCapture(s1, DC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK(a.StreamWaitEvent(s1, outside, 0) == DC_CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  CHECK(a.StreamEndCapture(s1, &g) == DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && !g);
  CHECK(a.StreamEndCapture(s1, &g) == DC_CUDA_ERROR_STREAM_CAPTURE_UNMATCHED); /* nothing captures now */
  CHECK(!a.EventDestroy(e1) && !a.EventDestroy(e2) && !a.EventDestroy(outside));
  CHECK(!a.StreamDestroy(s1) && !a.StreamDestroy(s2) && !a.DevicePrimaryCtxRelease(dev));
  CHECK(live_objs() == 0 && live_graphs() == 0);
  printf("fake driver: an unjoined fork, a sync in a capture, a wait on outside work each fail the capture "
         "(no graph); a joined fork gives one; a captured event cannot be synchronised\n");
}

/* ==== replay ========================================================================== */
static dc_cuda_backend_options graph_options(void) {
  dc_cuda_backend_options o = {0};
  o.graphs = 1;
  return o;
}

static int count_between(int kind, int from, int to) {
  int n = 0;
  for (int i = from; i < to; i++) n += fk.calls[i].kind == kind;
  return n;
}

/* In the replayed work of the graph launched at call `at`: the upload's
 * copy, on a stream of its own, after a wait for an event recorded on the
 * launching (compute) stream; and the reader's launch after a wait for the
 * event recorded behind the copy. */
static int upload_in_graph(const fixture *fx, int at) {
  const dc_node *up = &fx->plan.module->nodes[fx->upload];
  int launch_stream = fk.calls[at].stream, copy = -1, waited = 0, done = 0;
  for (int i = at + 1; i < fk.ncalls && fk.calls[i].kind != C_GRAPH_LAUNCH; i++) {
    const fake_call *c = &fk.calls[i];
    if (c->kind == C_HTOD && c->bytes == dc_type_bytes(&up->type) && c->host_pinned) {
      copy = c->stream;
      for (int j = at + 1; j < i; j++) /* the wait before it on its stream, for an event the compute stream recorded */
        if (fk.calls[j].kind == C_WAIT && fk.calls[j].stream == copy)
          for (int k = at + 1; k < j; k++)
            waited |= fk.calls[k].kind == C_RECORD && fk.calls[k].event == fk.calls[j].event &&
                      fk.calls[k].stream == launch_stream;
    }
    if (copy >= 0 && c->kind == C_RECORD && c->stream == copy) done = c->event;
    if (c->kind == C_LAUNCH && strstr(c->fn, "_mul")) return copy >= 0 && copy != launch_stream && waited && done &&
                                                            i > 0 && fk.calls[i - 1].kind == C_WAIT &&
                                                            fk.calls[i - 1].event == done;
  }
  return 0;
}

static void run_with_inputs(const fixture *fx, dc_cuda_backend *b, uint64_t seed, float **keep) {
  rng = seed;
  set_random_inputs(fx, b, keep);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
}

/* Three runs with different inputs through a graph, the same three on
 * streams: equal outputs, the reference's; one capture, three launches. */
static void test_replay(fixture *fx) {
  const dc_module *m = fx->plan.module;
  float **inputs = input_arrays(m);
  float *streams_out[3][2];
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b)); /* graphs off: the stream path */
  if (!b) return;
  for (int r = 0; r < 3; r++) {
    run_with_inputs(fx, b, 100 + (uint64_t)r, inputs);
    for (int i = 0; i < m->noutputs; i++) {
      size_t bytes = dc_type_bytes(&m->nodes[m->outputs[i].node].type);
      streams_out[r][i] = malloc(bytes);
      memcpy(streams_out[r][i], dc_cuda_backend_output(b, i), bytes);
    }
  }
  CHECK(fk.cap.seq == 0 && dc_cuda_backend_note(b, 0) == NULL);
  dc_cuda_backend_destroy(b);

  fake_reset(9, 0);
  dc_cuda_backend_options o = graph_options();
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  int same = 1, launches_at[3] = {0};
  for (int r = 0; r < 3; r++) {
    int from = fk.ncalls;
    run_with_inputs(fx, b, 100 + (uint64_t)r, inputs);
    same &= outputs_match(fx, b, inputs);
    for (int i = 0; i < m->noutputs; i++)
      same &= !memcmp(streams_out[r][i], dc_cuda_backend_output(b, i), dc_type_bytes(&m->nodes[m->outputs[i].node].type));
    for (int i = from; i < fk.ncalls; i++)
      if (fk.calls[i].kind == C_GRAPH_LAUNCH) launches_at[r] = i;
    CHECK(count_between(C_GRAPH_LAUNCH, from, fk.ncalls) == 1 && count_between(C_LAUNCH, from, fk.ncalls) == 6);
    CHECK(count_between(C_BEGIN_CAPTURE, from, fk.ncalls) == (r == 0));
  }
  CHECK(same);
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(b);
  CHECK(fk.captures == 1 && fk.graph_launches == 3 && bi->graphs_captured == 1 && bi->graph_launches == 3 &&
        bi->last_run_graph);
  for (int r = 0; r < 3; r++) CHECK(upload_in_graph(fx, launches_at[r]));
  race_report rep = check_races(fk.calls, fk.ncalls, 0);
  CHECK(rep.races == 0 && rep.unfinished == 0 && rep.cross_stream > 0);
  if (rep.races) fprintf(stderr, "graph runs: %s\n", rep.first);
  char note[600] = "";
  if (dc_cuda_backend_note(b, 0)) snprintf(note, sizeof note, "%s", dc_cuda_backend_note(b, 0));
  CHECK(!strncmp(note, "CUDA graphs: captured 6 launches into a CUDA graph in ", 54) &&
        strstr(note, "for the plan (steps 0..") && dc_cuda_backend_note(b, 1) == NULL);
  CHECK(live_graphs() == 2); /* the graph and its executable */
  dc_cuda_backend_destroy(b);
  CHECK(live_graphs() == 0);
  check_no_leaks("graphs");
  printf("graph: captured once (%s), launched by each of 3 runs with new inputs; outputs equal the stream path's "
         "and the reference's bit for bit; the upload is a node behind the compute's event, its reader behind its "
         "copy (%d cross-stream pairs ordered, 0 races); graph and executable destroyed at unload\n",
         note, rep.cross_stream);
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < m->noutputs; i++) free(streams_out[r][i]);
  free_arrays(m, inputs);
}

/* Two ranges (as two phases run): a graph each, each replayed by its own runs. */
static void test_ranges(fixture *fx) {
  const dc_module *m = fx->plan.module;
  float **inputs = input_arrays(m);
  fake_reset(9, 0);
  dc_cuda_backend_options o = graph_options();
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  int32_t cut = fx->silu1 + 1, spans[2][2] = {{0, cut}, {cut, m->nnodes}};
  int same = 1;
  for (int r = 0; r < 2; r++) {
    rng = 300 + (uint64_t)r;
    set_random_inputs(fx, b, inputs);
    for (int k = 0; k < 2; k++) {
      dc_status *st = dc_cuda_backend_begin(b, NULL, NULL, spans[k][0], spans[k][1]);
      for (int32_t s = spans[k][0]; s < spans[k][1] && !st; s++) st = dc_cuda_backend_step(b, s);
      CHECK_OK(dc_cuda_backend_end(b, st, NULL));
    }
    same &= outputs_match(fx, b, inputs);
  }
  CHECK(same && fk.captures == 2 && fk.graph_launches == 4);
  CHECK(dc_cuda_backend_note(b, 0) && strstr(dc_cuda_backend_note(b, 0), "captured 4 launches") &&
        dc_cuda_backend_note(b, 1) && strstr(dc_cuda_backend_note(b, 1), "captured 2 launches"));
  /* a walk out of order is refused, not replayed wrong */
  CHECK_OK(dc_cuda_backend_begin(b, NULL, NULL, 0, cut));
  CHECK_OK(dc_cuda_backend_step(b, 3));
  CHECK_ERR(dc_cuda_backend_end(b, dc_cuda_backend_step(b, 2), NULL), "step 2 named out of schedule order");
  dc_cuda_backend_destroy(b);
  check_no_leaks("graph ranges");
  printf("graph per step range: two ranges, two graphs (4 and 2 launches), each replayed by 2 runs; outputs "
         "exact; a walk out of order refused\n");
  free_arrays(m, inputs);
}

/* ==== streams kept ====================================================================== */
static void no_capture_note(dc_cuda_backend *b, const char *what, const char *needle) {
  const char *note = dc_cuda_backend_note(b, 0);
  int ok = fk.cap.seq == 0 && fk.graph_launches == 0 && note && strstr(note, needle);
  CHECK(ok);
  if (!ok) fprintf(stderr, "%s: %d captures, note \"%s\"\n", what, fk.cap.seq, note ? note : "(none)");
}

static dc_status *accept_step(void *ctx, int32_t step, const float *values) { return NULL; }

static void test_streams_kept(fixture *fx) {
  const dc_module *m = fx->plan.module;
  float **inputs = input_arrays(m);
  dc_cuda_backend *b = NULL;
  dc_cuda_backend_options o = graph_options();
  /* profiling */
  fake_reset(9, 0);
  CHECK_OK(create(fx, &o, &b));
  double *steps = calloc((size_t)m->nnodes, sizeof *steps);
  set_random_inputs(fx, b, inputs);
  CHECK_OK(dc_cuda_backend_run(b, steps, NULL));
  CHECK(outputs_match(fx, b, inputs));
  no_capture_note(b, "profiling", "not used while profiling");
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL)); /* profiling off again: the graph */
  CHECK(fk.captures == 1 && outputs_match(fx, b, inputs));
  free(steps);
  /* tracing */
  drt_trace_event *slots = calloc((size_t)drt_trace_slots(0, m->nnodes, 1), sizeof *slots);
  dc_status *st = dc_cuda_backend_begin(b, NULL, slots, 0, m->nnodes);
  for (int32_t s = 0; s < m->nnodes && !st; s++) st = dc_cuda_backend_step(b, s);
  int launches = fk.graph_launches;
  CHECK_OK(dc_cuda_backend_end(b, st, NULL));
  CHECK(fk.graph_launches == launches && strstr(dc_cuda_backend_note(b, 2), "not used while tracing"));
  free(slots);
  dc_cuda_backend_destroy(b);
  /* check_step */
  fake_reset(9, 0);
  o.check_step = accept_step;
  CHECK_OK(create(fx, &o, &b));
  set_random_inputs(fx, b, inputs);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  no_capture_note(b, "check-finite", "not used with --check-finite");
  dc_cuda_backend_destroy(b);
  /* off */
  fake_reset(9, 0);
  CHECK_OK(create(fx, NULL, &b));
  set_random_inputs(fx, b, inputs);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(fk.cap.seq == 0 && dc_cuda_backend_note(b, 0) == NULL);
  dc_cuda_backend_destroy(b);
  check_no_leaks("streams kept");
  printf("streams kept (and said once) while profiling or tracing, with check_step, and with graphs off; a run "
         "after profiling captures\n");
  free_arrays(m, inputs);
}

static void test_on_demand_kept(fixture *fx) {
  const dc_module *m = fx->plan.module;
  float **inputs = input_arrays(m);
  fake_reset(9, 0);
  dc_cuda_backend_options o = graph_options();
  o.read_weight = read_weight, o.read_ctx = &reads;
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  set_random_inputs(fx, b, inputs);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(outputs_match(fx, b, inputs));
  no_capture_note(b, "on-demand", "weights read on demand");
  dc_cuda_backend_destroy(b);
  check_no_leaks("on-demand");
  printf("on-demand uploads: streams kept (the host refills the bounce chunks between copies)\n");
  free_arrays(m, inputs);
}

/* ==== a failing capture ================================================================ */
static void test_capture_fails(fixture *fx) {
  const dc_module *m = fx->plan.module;
  float **inputs = input_arrays(m);
  fake_reset(9, 0);
  fk.fail_instantiate = 1;
  dc_cuda_backend_options o = graph_options();
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  for (int r = 0; r < 2; r++) {
    set_random_inputs(fx, b, inputs);
    CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
    CHECK(outputs_match(fx, b, inputs));
  }
  char note[600] = "";
  if (dc_cuda_backend_note(b, 0)) snprintf(note, sizeof note, "%s", dc_cuda_backend_note(b, 0));
  CHECK(fk.cap.seq == 1 && fk.graph_launches == 0 && live_graphs() == 0 &&
        strstr(note, "capturing the plan (steps 0..") &&
        strstr(note, "failed (cuGraphInstantiateWithFlags: CUDA_ERROR_OUT_OF_MEMORY (out of memory)); it runs on streams"));
  race_report rep = check_races(fk.calls, fk.ncalls, 0);
  CHECK(rep.races == 0 && rep.unfinished == 0);
  dc_cuda_backend_destroy(b);
  check_no_leaks("failed capture");
  printf("a failing capture: \"%s\"; both runs on streams, exact, not captured again\n", note);
  /* a graph whose launch fails: the run's error says so */
  fake_reset(9, 0);
  CHECK_OK(create(fx, &o, &b));
  set_random_inputs(fx, b, inputs);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  fk.fail_launch_at = fk.launches + 2;
  CHECK_ERR(dc_cuda_backend_run(b, NULL, NULL),
            "test.dplan: launching the CUDA graph of steps 0..11 (diffrun --no-cuda-graphs runs on streams): "
            "cuGraphLaunch: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)");
  dc_cuda_backend_destroy(b);
  check_no_leaks("failed graph launch");
  free_arrays(m, inputs);
}

/* ==== the runtime: default on, the option and the variable off ========================= */
static void drt_case(const fixture *fx, const char *path, const drt_options *o, const char *env,
                     const char *want_note, int want_graph) {
  if (env) setenv("DIFFC_CUDA_GRAPHS", env, 1);
  else unsetenv("DIFFC_CUDA_GRAPHS");
  fake_reset(9, 0);
  fake_bind(fx->plan.module, &fx->plan.cuda);
  drt_plan *p = NULL;
  CHECK_OK(drt_load(path, o, &p));
  if (!p) return;
  drt_stats s = {0};
  drt_set_random_inputs(p, 1);
  CHECK_OK(drt_run(p, &s));
  CHECK_OK(drt_run(p, &s));
  const char *note = drt_note(p, 0);
  int ok = s.cuda_graph == want_graph && fk.graph_launches == 2 * want_graph && note && strstr(note, want_note) &&
           !drt_note(p, 1);
  CHECK(ok);
  if (!ok) fprintf(stderr, "drt with DIFFC_CUDA_GRAPHS=%s: note \"%s\", graph %d\n", env ? env : "(unset)",
                   note ? note : "(none)", s.cuda_graph);
  drt_destroy(p);
}

static void test_runtime(fixture *fx) {
  char *path = tu_path("graphs.dplan");
  CHECK_OK(dc_plan_write(path, &fx->plan));
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  drt_options on = {0}, off = {.no_cuda_graphs = 1};
  drt_case(fx, path, &on, NULL, "captured 6 launches into a CUDA graph", 1);
  drt_case(fx, path, &on, "1", "captured 6 launches into a CUDA graph", 1);
  drt_case(fx, path, &off, NULL, "CUDA graphs: off (--no-cuda-graphs)", 0);
  drt_case(fx, path, &on, "0", "CUDA graphs: off (DIFFC_CUDA_GRAPHS=0)", 0);
  setenv("DIFFC_CUDA_GRAPHS", "sometimes", 1);
  drt_plan *p = NULL;
  CHECK_ERR(drt_load(path, &on, &p), "DIFFC_CUDA_GRAPHS=sometimes: expected 0 (off) or 1 (on, the default)");
  unsetenv("DIFFC_CUDA_GRAPHS");
  check_no_leaks("drt graphs");
  dc_cu_api_set_override(NULL);
  printf("drt: graphs by default (replayed from the second run), off by drt_options.no_cuda_graphs or "
         "DIFFC_CUDA_GRAPHS=0, each said in drt_note; a bad DIFFC_CUDA_GRAPHS refused\n");
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_fake_capture_rules();
  fixture fx;
  fixture_init(&fx, 1, 0); /* the scale weight offloaded, in pinned memory: an upload in the graph */
  test_replay(&fx);
  test_ranges(&fx);
  test_streams_kept(&fx);
  test_capture_fails(&fx);
  test_runtime(&fx);
  fixture_deinit(&fx);
  fixture_init(&fx, 1, 1);
  test_on_demand_kept(&fx);
  fixture_deinit(&fx);
  return tu_finish();
}
