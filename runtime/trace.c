/* trace.c — see trace.h: the recorded run trace written as Chrome
 * trace-event JSON, and read back as the device memory the runs observed. */
#include <math.h>
#include <string.h>

#include "trace.h"

/* ---- Chrome trace-event JSON ---- */
/* Microseconds with nanosecond digits; start and end rounded alike so a
 * span nested in time stays nested in the file. */
static void json_time(dc_buf *b, const char *key, long long ns) {
  dc_buf_printf(b, "\"%s\":%lld.%03lld", key, ns / 1000, ns % 1000);
}

static const char *event_name(const dc_module *m, const drt_trace_event *e) {
  switch (e->kind) {
  case DRT_EVENT_INPUTS: return "inputs in";
  case DRT_EVENT_OUTPUTS: return "outputs out";
  case DRT_EVENT_PHASE: return e->step >= 0 && e->step < m->nphases ? m->phases[e->step].name : "run";
  default: return dc_op_get(m->nodes[e->step].op)->name; /* "upload", "transfer", "conv2d", ... */
  }
}

static const char *event_category(const dc_module *m, const drt_trace_event *e) {
  if (e->kind == DRT_EVENT_PHASE) return "phase";
  if (e->kind == DRT_EVENT_INPUTS || e->kind == DRT_EVENT_OUTPUTS) return "copy";
  return dc_cost_class_name(dc_node_cost_class(m, e->step));
}

static void json_event(dc_buf *b, const dc_module *m, const drt_trace_event *e) {
  long long t0 = llround(e->start * 1e9), t1 = llround(e->end * 1e9);
  double seconds = (double)(t1 - t0) * 1e-9;
  dc_buf_printf(b, ",\n{\"ph\":\"X\",\"name\":");
  dc_buf_json_string(b, event_name(m, e));
  dc_buf_printf(b, ",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,", event_category(m, e), e->device, e->stream);
  json_time(b, "ts", t0);
  dc_buf_u8(b, ',');
  json_time(b, "dur", t1 - t0);
  dc_buf_printf(b, ",\"args\":{\"run\":%d", e->run);
  if (e->kind == DRT_EVENT_PHASE) {
    dc_buf_printf(b, ",\"iteration\":%d}}", e->iteration);
    return;
  }
  if (e->step >= 0) {
    const char *scope = m->nodes[e->step].scope;
    dc_buf_printf(b, ",\"step\":%d,\"scope\":", e->step);
    dc_buf_json_string(b, scope ? scope : "");
  }
  dc_buf_printf(b, ",\"bytes\":%llu,\"flops\":%llu", (unsigned long long)e->bytes, (unsigned long long)e->flops);
  if (seconds > 0 && e->flops) dc_buf_printf(b, ",\"GFLOP/s\":%.3f", (double)e->flops / seconds * 1e-9);
  if (seconds > 0 && e->bytes) dc_buf_printf(b, ",\"GB/s\":%.3f", (double)e->bytes / seconds * 1e-9);
  dc_buf_printf(b, "}}");
}

static void json_names(dc_buf *b, int ndevices, const char *backend, const char *device) {
  for (int d = 0; d < ndevices; d++) {
    char name[300];
    snprintf(name, sizeof name, "device %d (%s, %s backend)", d, device, backend);
    dc_buf_printf(b, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", d ? ",\n" : "",
                  d);
    dc_buf_json_string(b, name);
    dc_buf_printf(b, "}},\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"compute\"}}",
                  d, DRT_STREAM_COMPUTE);
    dc_buf_printf(b, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"copy\"}}", d,
                  DRT_STREAM_COPY);
  }
}

dc_status *dc_trace_write_json(const dc_module *m, const char *backend, const char *device,
                               const drt_trace_event *ev, int32_t n, const char *path) {
  int ndevices = 1;
  for (int32_t i = 0; i < n; i++)
    if (ev[i].device + 1 > ndevices) ndevices = ev[i].device + 1;
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b, "{\"traceEvents\":[\n");
  json_names(&b, ndevices, backend, device);
  for (int32_t i = 0; i < n; i++) json_event(&b, m, &ev[i]);
  dc_buf_printf(&b, "\n],\"displayTimeUnit\":\"ms\"}\n");
  dc_status *st = dc_buf_status(&b, "writing the run trace");
  if (!st) st = dc_atomic_write_file(path, b.data, b.len);
  dc_buf_deinit(&b);
  return st;
}

/* ---- the memory the runs observed ---- */
/* A device's compute stream is serial (CPU: the calling thread; CUDA: one
 * stream per device), so what it writes and reads happens in step order
 * and its clock agrees with the step count: a value written there occupies
 * memory from its step to its last reader's (the plan's occupancy, kept),
 * and the run's inputs are in before its first step.  The copy stream is
 * the one that runs beside it, and its timing is measured: an upload's
 * bytes are counted from the first step that finished after its copy
 * started, sampled when each step finished (a step with no kernel of its
 * own samples when the one before it did).  The plan counts an upload from
 * its own step, where the compute stream only allows the copy to begin, so
 * the measured in-flight bytes trail the plan's while a copy waits to start
 * (the copy thread's wake-up on the CPU, a busy copy engine on a GPU); they
 * agree again by the upload's first reader, which waits for the copy. */
typedef struct {
  const dc_module *m;
  const dc_liveness *l;
  const dc_mem_series *plan; /* the plan's series: the occupancy by step */
  int nd;
  double *sample;            /* per step of the run: when it finished on its compute stream */
  int32_t *event_of;         /* per step of the run: its event, or -1 */
  uint64_t *late, *top;      /* per device and step: uploads not yet started; the arena's top this run */
} observer;

/* The span of steps the run whose PHASE event is e covered. */
static void run_span_of(const dc_module *m, const drt_trace_event *e, int32_t *first, int32_t *end) {
  int32_t f[DC_MAX_PHASES], x[DC_MAX_PHASES];
  *first = 0, *end = m->nnodes;
  if (e->step < 0 || e->step >= m->nphases) return;
  dc_phase_spans(m, f, x);
  *first = f[e->step], *end = x[e->step];
}

/* One run's observations: sample times, uploads still waiting, the top. */
static void observe_run(observer *o, const drt_trace_event *ev, int32_t i0, int32_t i1, int32_t first, int32_t end) {
  int32_t N = o->m->nnodes;
  for (int32_t s = first; s < end; s++) o->event_of[s] = -1;
  for (int32_t i = i0 + 1; i < i1; i++)
    if (ev[i].step >= first && ev[i].step < end) o->event_of[ev[i].step] = i;
  double now = ev[i0].start;
  for (int32_t s = first; s < end; s++) {
    int32_t e = o->event_of[s];
    if (e >= 0 && ev[e].stream == DRT_STREAM_COMPUTE) now = ev[e].end;
    o->sample[s] = now;
    for (int d = 0; d < o->nd; d++) o->late[(size_t)d * N + s] = o->top[(size_t)d * N + s] = 0;
    if (e >= 0 && ev[e].stream == DRT_STREAM_COMPUTE && ev[e].device < o->nd) {
      uint64_t *t = &o->top[(size_t)ev[e].device * N + s];
      if (ev[e].arena_top > *t) *t = ev[e].arena_top;
    }
  }
  for (int32_t i = i0 + 1; i < i1; i++) {
    const drt_trace_event *e = &ev[i];
    if (e->device >= o->nd) continue;
    size_t row = (size_t)e->device * N;
    if (e->kind == DRT_EVENT_INPUTS && first < end && e->arena_top > o->top[row + first])
      o->top[row + first] = e->arena_top;
    if (e->kind != DRT_EVENT_UPLOAD) continue;
    int32_t last = dc_value_last_step(o->l, e->step), s = e->step;
    for (; s < end && o->sample[s] < e->start; s++)
      if (s <= last) o->late[row + s] += e->bytes;
    if (s < end && e->arena_top > o->top[row + s]) o->top[row + s] = e->arena_top;
  }
  for (int d = 0; d < o->nd; d++) { /* the high-water mark: a running maximum */
    uint64_t *top = o->top + (size_t)d * N;
    for (int32_t s = first + 1; s < end; s++)
      if (top[s - 1] > top[s]) top[s] = top[s - 1];
  }
}

/* Folds one run into the series: a step run more than once keeps the most
 * any run observed. */
static void fold_run(const observer *o, int32_t first, int32_t end, unsigned char *seen, dc_mem_series *out) {
  int32_t N = o->m->nnodes;
  for (int d = 0; d < o->nd; d++)
    for (int32_t s = first; s < end; s++) {
      for (int k = 0; k < DC_MEM_KINDS; k++) {
        uint64_t v = dc_mem_series_at(o->plan, s, d, (dc_mem_kind)k);
        if (k == DC_MEM_IN_FLIGHT) v -= o->late[(size_t)d * N + s];
        uint64_t *at = &out->bytes[((size_t)d * N + s) * DC_MEM_KINDS + k];
        if (!seen[s] || v > *at) *at = v;
      }
      uint64_t *top = &out->arena_top[(size_t)d * N + s];
      if (!seen[s] || o->top[(size_t)d * N + s] > *top) *top = o->top[(size_t)d * N + s];
    }
  for (int32_t s = first; s < end; s++) seen[s] = 1;
}

dc_status *dc_trace_memory(const dc_module *m, const dc_liveness *l, const drt_trace_event *ev, int32_t n,
                           dc_mem_series *out) {
  dc_mem_series plan;
  DC_TRY(dc_mem_series_compute(m, l, &plan));
  dc_status *st = dc_mem_series_compute(m, l, out); /* the same shape; every cell is overwritten below */
  int32_t N = m->nnodes;
  observer o = {m, l, &plan, plan.ndevices, dc_calloc((size_t)N + 1, sizeof(double)),
                dc_calloc((size_t)N + 1, sizeof(int32_t)), dc_calloc((size_t)plan.ndevices * N + 1, sizeof(uint64_t)),
                dc_calloc((size_t)plan.ndevices * N + 1, sizeof(uint64_t))};
  unsigned char *seen = dc_calloc((size_t)N + 1, 1);
  if (!st && (!o.sample || !o.event_of || !o.late || !o.top || !seen)) st = dc_nomem("measuring the memory series");
  for (int32_t i0 = 0; !st && i0 < n; ) {
    int32_t i1 = i0 + 1, first, end;
    while (i1 < n && ev[i1].kind != DRT_EVENT_PHASE) i1++;
    if (ev[i0].kind == DRT_EVENT_PHASE) {
      run_span_of(m, &ev[i0], &first, &end);
      observe_run(&o, ev, i0, i1, first, end);
      fold_run(&o, first, end, seen, out);
    }
    i0 = i1;
  }
  /* a step no traced run reached held nothing but the resident weights */
  for (int d = 0; !st && d < o.nd; d++) {
    uint64_t top = 0;
    for (int32_t s = 0; s < N; s++) {
      for (int k = DC_MEM_IN_FLIGHT; k < DC_MEM_KINDS && !seen[s]; k++)
        out->bytes[((size_t)d * N + s) * DC_MEM_KINDS + k] = 0;
      uint64_t *at = &out->arena_top[(size_t)d * N + s];
      if (!seen[s]) *at = 0;
      if (*at > top) top = *at;
      *at = top;
    }
  }
  dc_free(o.sample);
  dc_free(o.event_of);
  dc_free(o.late);
  dc_free(o.top);
  dc_free(seen);
  dc_mem_series_deinit(&plan);
  if (st) dc_mem_series_deinit(out);
  return st;
}
