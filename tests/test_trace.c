/* test_trace.c — the run trace (drt_set_tracing, drt_trace_write, diffrun
 * --trace) and the memory series measured from it (drt_memory_measured):
 *  - unet_tiny, plain and with group offload (block 1) + prefetch, on the
 *    llvm backend: the trace written, parsed back with cJSON: one span per
 *    step, no overlap on a track, timestamps monotonic per track, the run's
 *    span around its events, every upload's copy ended before a step that
 *    reads it starts, FLOPs and bytes as ir/flops.c counts them;
 *  - the measured memory series equals the plan's (dc_mem_series_compute)
 *    at every step without uploads; with them only the in-flight bytes may
 *    trail (a copy starts when the copy thread gets to it), never exceed,
 *    and every upload is counted by the steps that read it;
 *  - a pipeline's generation (2 steps of the tiny SD pipeline): one trace,
 *    one span per phase run around its kernels, loop iterations counted;
 *  - the CUDA backend's host side through the fake driver: the timing
 *    events made once, recorded around the upload's copy and after each
 *    launch, read back into events in stream order. */
#include <cjson/cJSON.h>
#include <math.h>

#include "cuda_host_fixture.h"
#include "driver/compile.h"
#include "pipeline/generate.h"
#include "plan/plan_format.h"
#include "runtime/backend.h"
#include "runtime/cuda_backend_impl.h"

/* ---- the trace file, parsed back ---- */
typedef struct {
  char name[64], cat[32];
  int pid, tid, run, step, iteration;
  long long ts, end; /* ns */
  uint64_t bytes, flops;
} span;

typedef struct {
  span *s;
  int n;
  int process_named, compute_named, copy_named;
} parsed;

static long long ns_of(const cJSON *v) { return cJSON_IsNumber(v) ? llround(v->valuedouble * 1000.0) : -1; }
static int int_of(const cJSON *o, const char *k, int def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? (int)v->valuedouble : def;
}
static uint64_t u64_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
}

static int read_trace(const char *path, parsed *out) {
  memset(out, 0, sizeof *out);
  char *text;
  size_t size;
  dc_status *st = dc_file_read_all(path, &text, &size);
  CHECK_OK(st);
  if (st) return 0;
  cJSON *root = cJSON_ParseWithLength(text, size);
  dc_free(text);
  const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  const cJSON *unit = cJSON_GetObjectItemCaseSensitive(root, "displayTimeUnit");
  CHECK(cJSON_IsArray(evs) && cJSON_IsString(unit) && !strcmp(unit->valuestring, "ms"));
  if (!cJSON_IsArray(evs)) {
    cJSON_Delete(root);
    return 0;
  }
  out->s = calloc((size_t)cJSON_GetArraySize(evs) + 1, sizeof *out->s);
  const cJSON *e;
  cJSON_ArrayForEach(e, evs) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "ph"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    if (!ph || !name || !cJSON_IsObject(args)) {
      CHECK(!"an event without ph, name or args");
      continue;
    }
    if (!strcmp(ph, "M")) {
      const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "name"));
      if (!what) continue;
      out->process_named |= !strcmp(name, "process_name") && !strncmp(what, "device 0 (", 10);
      out->compute_named |= !strcmp(name, "thread_name") && !strcmp(what, "compute") && int_of(e, "tid", -1) == 0;
      out->copy_named |= !strcmp(name, "thread_name") && !strcmp(what, "copy") && int_of(e, "tid", -1) == 1;
      continue;
    }
    CHECK(!strcmp(ph, "X"));
    span *s = &out->s[out->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->cat, sizeof s->cat, "%s", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "cat")));
    s->pid = int_of(e, "pid", -1), s->tid = int_of(e, "tid", -1);
    s->ts = ns_of(cJSON_GetObjectItemCaseSensitive(e, "ts"));
    s->end = s->ts + ns_of(cJSON_GetObjectItemCaseSensitive(e, "dur"));
    s->run = int_of(args, "run", -1), s->step = int_of(args, "step", -1), s->iteration = int_of(args, "iteration", -1);
    s->bytes = u64_of(args, "bytes"), s->flops = u64_of(args, "flops");
  }
  cJSON_Delete(root);
  return 1;
}

static int is_phase(const span *s) { return !strcmp(s->cat, "phase"); }

/* The span of steps the run of phase span p covered. */
static void steps_of(const dc_module *m, const span *p, int32_t *first, int32_t *end) {
  int32_t f[DC_MAX_PHASES], x[DC_MAX_PHASES];
  dc_phase_spans(m, f, x);
  int ph = m->nphases ? dc_phase_find(m, p->name) : -1;
  *first = ph >= 0 ? f[ph] : 0;
  *end = ph >= 0 ? x[ph] : m->nnodes;
}

typedef struct {
  int runs, spans, uploads;
  double copy_hidden; /* share of the copy stream's time that overlapped a kernel */
} trace_summary;

/* Every check of a written trace against the plan's module. */
static trace_summary check_trace(const dc_module *m, const char *path) {
  trace_summary sum = {0};
  parsed t;
  if (!read_trace(path, &t)) return sum;
  CHECK(t.process_named && t.compute_named && t.copy_named);
  const span *phase[256] = {0};
  int ok_one = 1, ok_nest = 1, ok_overlap = 1, ok_order = 1, ok_counts = 1, ok_copies = 1, ok_tracks = 1;
  for (int i = 0; i < t.n; i++)
    if (is_phase(&t.s[i]) && t.s[i].run >= 0 && t.s[i].run < 256) phase[t.s[i].run] = &t.s[i], sum.runs++;
  int *seen = calloc((size_t)m->nnodes + 1, sizeof *seen);
  for (int r = 0; r < sum.runs; r++) {
    CHECK(phase[r] != NULL);
    if (!phase[r]) continue;
    int32_t first, end;
    steps_of(m, phase[r], &first, &end);
    memset(seen, 0, sizeof *seen * ((size_t)m->nnodes + 1));
    for (int i = 0; i < t.n; i++) {
      const span *s = &t.s[i];
      if (s->run != r || is_phase(s)) continue;
      ok_nest &= s->ts >= phase[r]->ts && s->end <= phase[r]->end && s->ts <= s->end;
      ok_tracks &= s->pid == 0 && (s->tid == 0 || s->tid == 1);
      if (s->step < 0) continue; /* inputs in, outputs out */
      ok_one &= s->step >= first && s->step < end;
      if (s->step < first || s->step >= end) continue;
      seen[s->step]++;
      const dc_node *n = &m->nodes[s->step];
      ok_one &= !strcmp(s->name, dc_op_get(n->op)->name);
      ok_counts &= !strcmp(s->cat, dc_cost_class_name(dc_node_cost_class(m, s->step)));
      if (n->op == OP_UPLOAD || n->op == OP_TRANSFER) /* copies: the value's bytes; uploads on the copy track */
        ok_counts &= s->bytes == dc_type_bytes(&n->type) && s->tid == (n->op == OP_UPLOAD);
      else /* kernels: ir/flops.c's arithmetic and traffic, on the compute track */
        ok_counts &= s->flops == dc_node_flops(m, s->step) && s->bytes == dc_node_traffic_bytes(m, s->step) &&
                     s->tid == 0;
      if (n->op != OP_UPLOAD) continue;
      sum.uploads++;
      for (int j = 0; j < t.n; j++) { /* its readers in this run start after the copy ended */
        const span *q = &t.s[j];
        if (q->run != r || q->step < 0 || is_phase(q)) continue;
        for (int k = 0; k < m->nodes[q->step].ninputs; k++)
          if (m->nodes[q->step].inputs[k] == s->step) ok_copies &= q->ts >= s->end;
      }
    }
    for (int32_t s = first; s < end; s++) {
      dc_op op = m->nodes[s].op;
      ok_one &= seen[s] == (op == OP_INPUT || op == OP_WEIGHT ? 0 : 1);
      sum.spans += seen[s];
    }
  }
  /* per track, in file order: monotonic, no two spans overlapping */
  long long busy_copy = 0, hidden = 0;
  for (int tid = 0; tid < 2; tid++) {
    long long last_ts = -1, last_end = -1;
    for (int i = 0; i < t.n; i++) {
      const span *s = &t.s[i];
      if (s->tid != tid || is_phase(s)) continue;
      ok_order &= s->ts >= last_ts;
      ok_overlap &= s->ts >= last_end;
      last_ts = s->ts, last_end = s->end;
      if (tid != 1 || s->step < 0) continue;
      busy_copy += s->end - s->ts;
      for (int j = 0; j < t.n; j++) /* the kernels it ran beside */
        if (t.s[j].tid == 0 && !is_phase(&t.s[j])) {
          long long a = t.s[j].ts > s->ts ? t.s[j].ts : s->ts, b = t.s[j].end < s->end ? t.s[j].end : s->end;
          if (b > a) hidden += b - a;
        }
    }
  }
  long long last_phase = -1;
  for (int i = 0; i < t.n; i++)
    if (is_phase(&t.s[i])) {
      ok_order &= t.s[i].ts >= last_phase;
      ok_overlap &= t.s[i].ts >= last_phase;
      last_phase = t.s[i].end;
    }
  CHECK(ok_one);
  CHECK(ok_nest);
  CHECK(ok_overlap);
  CHECK(ok_order);
  CHECK(ok_counts);
  CHECK(ok_copies);
  CHECK(ok_tracks);
  sum.copy_hidden = busy_copy ? (double)hidden / (double)busy_copy : 0;
  free(seen);
  free(t.s);
  return sum;
}

/* ---- the measured memory series ---- */
/* uploads: 0 when the plan has none (then every cell must equal the
 * plan's); else in-flight bytes may trail the plan's, never exceed them,
 * and cover every upload at the steps that read it. */
static void check_measured(drt_plan *p, const dc_module *m, int uploads) {
  dc_liveness l;
  dc_mem_series want, got;
  CHECK_OK(dc_liveness_compute(m, &l));
  CHECK_OK(dc_mem_series_compute(m, &l, &want));
  dc_status *st = drt_memory_measured(p, &got);
  CHECK_OK(st);
  if (st) {
    dc_mem_series_deinit(&want);
    dc_liveness_deinit(&l);
    return;
  }
  CHECK(got.nsteps == want.nsteps && got.ndevices == want.ndevices);
  int equal = 1, bounded = 1, covered = 1, trailing = 0;
  for (int d = 0; d < want.ndevices; d++)
    for (int32_t s = 0; s < want.nsteps; s++) {
      for (int k = 0; k < DC_MEM_KINDS; k++) {
        uint64_t a = dc_mem_series_at(&got, s, d, (dc_mem_kind)k), b = dc_mem_series_at(&want, s, d, (dc_mem_kind)k);
        if (uploads && k == DC_MEM_IN_FLIGHT) bounded &= a <= b, trailing += a < b;
        else equal &= a == b;
      }
      uint64_t ta = got.arena_top[(size_t)d * want.nsteps + s], tb = want.arena_top[(size_t)d * want.nsteps + s];
      if (uploads) bounded &= ta <= tb;
      else equal &= ta == tb;
      uint64_t read = 0; /* the uploads this step reads are in */
      const dc_node *n = &m->nodes[s];
      for (int k = 0; k < n->ninputs; k++)
        if (m->nodes[n->inputs[k]].op == OP_UPLOAD && m->nodes[n->inputs[k]].device == d)
          read += dc_type_bytes(&m->nodes[n->inputs[k]].type);
      covered &= dc_mem_series_at(&got, s, d, DC_MEM_IN_FLIGHT) >= read;
    }
  size_t last = (size_t)want.nsteps - 1;
  CHECK(equal && bounded && covered);
  CHECK(got.arena_top[last] == want.arena_top[last]); /* the run's peak: what drt_stats measured */
  printf("  measured memory series: %s the plan's at all %d steps%s", equal && !trailing ? "equals" : "follows",
         want.nsteps, uploads ? "" : "\n");
  if (uploads) printf(" (in-flight bytes trailing at %d step(s) while a copy waited to start)\n", trailing);
  dc_mem_series_deinit(&got);
  dc_mem_series_deinit(&want);
  dc_liveness_deinit(&l);
}

/* ---- unet_tiny through the llvm backend ---- */
static char *compile_unet(const char *tag, const dc_memory_options *mem) {
  static const dc_input_shape shapes[] = {
      {"sample", 4, {4, 4, 16, 16}}, {"timestep", 1, {4}}, {"encoder_hidden_states", 3, {4, 4, 8}}};
  char name[64];
  snprintf(name, sizeof name, "unet-%s.dplan", tag);
  char *folder = dc_path_join(tu_source_dir, "fixtures/unet_tiny/model"), *plan = tu_path(name);
  dc_compile_options co = {.model = folder, .shapes = shapes, .nshapes = 3};
  if (mem) co.memory = *mem;
  dc_status *st = dc_compile(&co, plan, NULL);
  CHECK_OK(st);
  dc_free(folder);
  if (st) free(plan);
  return st ? NULL : plan;
}

static void test_unet(const char *tag, const dc_memory_options *mem) {
  char *path = compile_unet(tag, mem), *json = tu_path("unet.json");
  if (!path) return;
  dc_plan plan;
  drt_plan *p = NULL;
  CHECK_OK(dc_plan_read(path, &plan));
  CHECK_OK(drt_load(path, NULL, &p));
  if (p && plan.module) {
    const dc_module *m = plan.module;
    drt_set_random_inputs(p, 1);
    CHECK_ERR(drt_trace_write(p, json), "no run was traced");
    dc_mem_series none;
    CHECK_ERR(drt_memory_measured(p, &none), "no run was traced");
    CHECK_OK(drt_set_tracing(p, 1));
    drt_stats st;
    CHECK_OK(drt_run(p, &st));
    CHECK_OK(drt_run(p, &st)); /* a second run appends: two run spans */
    CHECK_OK(drt_trace_write(p, json));
    trace_summary sum = check_trace(m, json);
    int want_uploads = 0;
    for (int32_t s = 0; s < m->nnodes; s++) want_uploads += m->nodes[s].op == OP_UPLOAD;
    CHECK(sum.runs == 2 && sum.uploads == 2 * want_uploads && (mem == NULL) == (want_uploads == 0));
    printf("unet_tiny %s: %d events, 2 runs, %d step spans, %d uploads (%.0f%% of the copy stream's time beside a "
           "kernel)\n", tag, drt_trace_count(p), sum.spans, sum.uploads, 100 * sum.copy_hidden);
    check_measured(p, m, want_uploads);
    CHECK_OK(drt_set_tracing(p, 0)); /* off: a run records nothing */
    CHECK_OK(drt_run(p, &st));
    CHECK(drt_trace_count(p) == 0 && drt_trace_event_at(p, 0) == NULL);
  }
  drt_destroy(p);
  dc_plan_deinit(&plan);
  free(path);
  free(json);
}

/* ---- a pipeline's generation ---- */
static void test_pipeline(void) {
  char *folder = dc_path_join(tu_source_dir, "fixtures/pipelines/sd"), *path = tu_path("sd.dplan");
  char *json = tu_path("sd.json");
  dc_compile_options co = {.model = folder};
  CHECK_OK(dc_compile(&co, path, NULL));
  dc_plan plan;
  drt_plan *p = NULL;
  CHECK_OK(dc_plan_read(path, &plan));
  CHECK_OK(drt_load(path, NULL, &p));
  if (p && plan.module) {
    const dc_module *m = plan.module;
    CHECK_OK(drt_set_tracing(p, 1));
    dc_generate_options go = {.prompt = "a red cube", .steps = 2, .guidance = NAN};
    dc_generate_result r;
    CHECK_OK(dc_generate(p, &go, &r));
    CHECK_OK(drt_trace_write(p, json));
    trace_summary sum = check_trace(m, json);
    /* every phase run is one span; a loop phase's runs count their iterations */
    int runs = 0, iterations_ok = 1, per_phase[DC_MAX_PHASES] = {0};
    for (int i = 0; i < drt_trace_count(p); i++) {
      const drt_trace_event *e = drt_trace_event_at(p, i);
      if (e->kind != DRT_EVENT_PHASE) continue;
      runs++;
      iterations_ok &= e->step >= 0 && e->step < m->nphases && e->iteration == per_phase[e->step]++;
    }
    int loops = 0;
    for (int ph = 0; ph < m->nphases; ph++) loops += m->phases[ph].loop && per_phase[ph] == r.steps;
    CHECK(iterations_ok && runs == sum.runs && loops >= 1);
    printf("pipeline sd, %d steps: %d phase runs in one trace, %d step spans, each loop phase run %d times\n", r.steps,
           runs, sum.spans, r.steps);
    check_measured(p, m, 0);
    dc_generate_result_free(&r);
  }
  drt_destroy(p);
  dc_plan_deinit(&plan);
  dc_free(folder);
  free(path);
  free(json);
}

/* ---- the CUDA backend's host side, through the fake driver ---- */
static int call_index(int kind, int event, int from) {
  for (int i = from; i < fk.ncalls; i++)
    if (fk.calls[i].kind == kind && (event < 0 || fk.calls[i].event == event)) return i;
  return -1;
}

static void test_cuda(void) {
  fixture fx;
  fixture_init(&fx, 1, 0); /* the scale weight goes through an upload */
  const dc_module *m = fx.plan.module;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(&fx, NULL, &b));
  if (!b) {
    fixture_deinit(&fx);
    return;
  }
  float **inputs = input_arrays(m);
  int32_t nslots = drt_trace_slots(0, m->nnodes, 1);
  drt_trace_event *slots = calloc((size_t)nslots, sizeof *slots);
  int made = 0, ok_runs = 1, from = 0;
  for (int r = 0; r < 2; r++) {
    set_random_inputs(&fx, b, inputs);
    memset(slots, 0, (size_t)nslots * sizeof *slots);
    from = fk.ncalls;
    dc_status *st = dc_cuda_backend_begin(b, NULL, slots, 0, m->nnodes);
    for (int32_t s = 0; s < m->nnodes && !st; s++) st = dc_cuda_backend_step(b, s);
    CHECK_OK(dc_cuda_backend_end(b, st, NULL));
    ok_runs &= outputs_match(&fx, b, inputs);
    if (r == 0) made = live_objs();
  }
  CHECK(ok_runs);
  /* the upload's copy: timed after the copy stream's wait, before the next copy */
  int32_t u = fx.upload;
  int began = obj_id(b->copy_began[u]), ended = obj_id(b->copy_ended[u]);
  int i_began = call_index(C_RECORD, began, from), i_copy = i_began < 0 ? -1 : call_index(C_HTOD, -1, i_began);
  int i_ended = i_copy < 0 ? -1 : call_index(C_RECORD, ended, i_copy);
  CHECK(i_began > from && fk.calls[i_began - 1].kind == C_WAIT && i_copy == i_began + 1 && i_ended == i_copy + 1);
  CHECK(fk.calls[i_began].stream == fk.calls[i_copy].stream);
  /* events in order, on the fake's clock (1 ms per driver call between two records) */
  int ok = 1, kernels = 0;
  double last_end = -1;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const drt_trace_event *e = &slots[drt_trace_step_slot(0, 1, s)];
    int launched = fx.plan.cuda.kernel_of_node[s] >= 0;
    if (s == u) {
      ok &= e->kind == DRT_EVENT_UPLOAD && e->stream == DRT_STREAM_COPY && e->end - e->start > 0.0005 &&
            e->bytes == dc_type_bytes(&m->nodes[s].type);
      continue;
    }
    if (!launched) {
      ok &= e->kind == DRT_EVENT_NONE;
      continue;
    }
    kernels++;
    ok &= e->kind == DRT_EVENT_KERNEL && e->stream == DRT_STREAM_COMPUTE && e->step == s;
    ok &= e->start >= last_end && e->end - e->start > 0.0005; /* serial, each at least one call long */
    last_end = e->end;
    for (int k = 0; k < m->nodes[s].ninputs; k++)
      if (m->nodes[s].inputs[k] == u) ok &= e->start >= slots[drt_trace_step_slot(0, 1, u)].end;
  }
  const drt_trace_event *in = &slots[drt_trace_inputs_slot(0)];
  const drt_trace_event *out = &slots[drt_trace_outputs_slot(0, m->nnodes, 1, 0)];
  ok &= in->kind == DRT_EVENT_INPUTS && in->end > in->start && in->end <= slots[drt_trace_step_slot(0, 1, fx.conv)].start;
  ok &= out->kind == DRT_EVENT_OUTPUTS && out->start >= last_end && out->end > out->start;
  CHECK(ok && kernels > 0);
  /* the timing events were made on the first traced run only */
  CHECK(live_objs() == made);
  printf("cuda (fake driver): %d launches and an upload traced over 2 runs; the copy timed between its wait and the "
         "next call, each kernel after the upload it reads\n", kernels);
  free(slots);
  free_arrays(m, inputs);
  dc_cuda_backend_destroy(b);
  check_no_leaks("trace");
  fixture_deinit(&fx);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_unet("plain", NULL);
  dc_memory_options prefetch = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1,
                                .prefetch = 1};
  test_unet("block 1 + prefetch", &prefetch);
  test_pipeline();
  test_cuda();
  return tu_finish();
}
