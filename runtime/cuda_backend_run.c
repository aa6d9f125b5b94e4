/* cuda_backend_run.c — one run of a CUDA plan that cuda_backend.c set up.
 * Inputs go up on their device's copy stream and its compute stream waits
 * for them; then every step, in schedule order, goes to the streams of its
 * node's device:
 *   - a launch: on the device's compute stream, its parameters the planned
 *     addresses (that device's arena + offset, its weight block + offset);
 *     it first waits for the uploads it reads, and no others; a GEMM step
 *     cuda_gemm_lt.c took enqueues its cuBLASLt matmul there instead;
 *   - an upload (an offloaded weight into its arena place): on the device's
 *     copy stream, once that device's compute scheduled before it is done
 *     (the place may have held a value until then), so prefetched uploads
 *     overlap the compute in between;
 *   - a transfer (a value of another device copied into this device's
 *     arena): cuMemcpyPeerAsync on this device's compute stream, after it
 *     waited for an event the source device's compute stream recorded when
 *     it got to the transfer (the value's producer has run by then).
 * The memory plan frees a transfer's source right after the transfer, so
 * the source device must not overwrite those bytes before the copy, which
 * runs on the other device, has read them.  The rule, simple and enough:
 * every step on a device first makes that device's compute stream wait for
 * the transfers out of it enqueued since its previous step (an event
 * recorded behind each copy).  Its uploads are ordered behind that as well,
 * since they wait for its compute stream, and so is the end of the run.
 * Outputs go down on their device's copy stream once its compute is done,
 * then the host waits for every copy stream.
 * Where cuda_graphs.c says a run may use a CUDA graph, the steps the caller
 * names are not enqueued one by one: end launches the range's graph (made
 * on its first run by capturing exactly these steps) between the inputs
 * and the outputs. */
#include "backend.h"
#include "cuda_backend_impl.h"

#include <string.h>

/* ---- the events between devices ---------------------------------------------- */
/* Device d's compute stream waits for every transfer out of d enqueued
 * since its previous step: the bytes they read may be overwritten now. */
static dc_status *wait_transfers_out(dc_cuda_backend *b, int d) {
  cuda_device *g = &b->dev[d];
  for (int i = 0; i < g->npending; i++) DC_TRY(CU(b, StreamWaitEvent, g->compute, b->moved[g->pending[i]], 0));
  g->npending = 0;
  return NULL;
}

/* Profiling: an event after every launch and transfer, on its device
 * (made on the first profiled run, or where a failed one left off). */
static dc_status *create_step_timers(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  if (!b->step_done) b->step_done = dc_calloc((size_t)m->nnodes + 1, sizeof *b->step_done);
  if (!b->step_done) return dc_nomem("profiling CUDA steps");
  for (int d = 0; d < b->ndevices; d++) {
    DC_TRY(dc_cuda_use_device(b, d));
    for (int32_t s = 0; s < m->nnodes; s++) {
      int timed = b->k->kernel_of_node[s] >= 0 || m->nodes[s].op == OP_TRANSFER;
      if (timed && m->nodes[s].device == d && !b->step_done[s])
        DC_TRY(CU(b, EventCreate, &b->step_done[s], DC_CU_EVENT_DEFAULT));
    }
  }
  return NULL;
}

/* Tracing: timed events around every upload's copy and, per device, at the
 * copy stream's start and around the outputs' copies (made on the first
 * traced run, or where a failed one left off). */
static dc_status *create_trace_events(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  if (!b->copy_began) b->copy_began = dc_calloc((size_t)m->nnodes + 1, sizeof *b->copy_began);
  if (!b->copy_ended) b->copy_ended = dc_calloc((size_t)m->nnodes + 1, sizeof *b->copy_ended);
  if (!b->copy_began || !b->copy_ended) return dc_nomem("tracing CUDA steps");
  for (int d = 0; d < b->ndevices; d++) {
    cuda_device *g = &b->dev[d];
    DC_TRY(dc_cuda_use_device(b, d));
    dc_cu_event *own[] = {&g->trace_origin, &g->outputs_began, &g->outputs_done};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
      if (!*own[i]) DC_TRY(CU(b, EventCreate, own[i], DC_CU_EVENT_DEFAULT));
    for (int32_t s = 0; s < m->nnodes; s++) {
      if (m->nodes[s].op != OP_UPLOAD || m->nodes[s].device != d) continue;
      if (!b->copy_began[s]) DC_TRY(CU(b, EventCreate, &b->copy_began[s], DC_CU_EVENT_DEFAULT));
      if (!b->copy_ended[s]) DC_TRY(CU(b, EventCreate, &b->copy_ended[s], DC_CU_EVENT_DEFAULT));
    }
  }
  return NULL;
}

/* --check-finite: the step's output back to the host, then the check. */
static dc_status *check_step(dc_cuda_backend *b, int32_t s) {
  const dc_node *n = &b->m->nodes[s];
  const cuda_device *g = &b->dev[n->device];
  if (n->type.dtype != DT_F32) return NULL;
  DC_TRY(CU(b, MemcpyDtoHAsync, b->check_buf, b->value[s], dc_type_bytes(&n->type), g->compute));
  DC_TRY(CU(b, StreamSynchronize, g->compute));
  return b->opt.check_step(b->opt.check_ctx, s, b->check_buf);
}

/* ---- steps ------------------------------------------------------------------------ */
/* on-demand: weight w read from its file a chunk at a time into the next
 * bounce chunk and copied to dst on device d's copy stream.  The host
 * waits for a chunk's previous copy (on whichever device made it) before
 * refilling it; that copy was enqueued behind compute already enqueued, so
 * the wait always ends. */
static dc_status *upload_through_bounce(dc_cuda_backend *b, int d, int w, dc_cu_deviceptr dst, uint64_t bytes) {
  const cuda_device *g = &b->dev[d];
  uint64_t chunk = b->info.bounce_bytes;
  for (uint64_t at = 0; at < bytes; at += chunk) {
    int k = b->next_bounce;
    uint64_t len = bytes - at < chunk ? bytes - at : chunk;
    b->next_bounce ^= 1;
    if (b->bounce_device[k] >= 0) DC_TRY(CU(b, EventSynchronize, b->dev[b->bounce_device[k]].bounce_copied[k]));
    b->bounce_device[k] = -1;
    DC_TRY(b->opt.read_weight(b->opt.read_ctx, w, at, b->bounce[k], len));
    DC_TRY(CU(b, MemcpyHtoDAsync, dst + at, b->bounce[k], len, g->copy));
    DC_TRY(CU(b, EventRecord, g->bounce_copied[k], g->copy));
    b->bounce_device[k] = d;
  }
  return NULL;
}

/* An offloaded weight into its arena place: on the copy stream, after the
 * compute scheduled before it (the bytes may belong to a value until then). */
static dc_status *upload_step(dc_cuda_backend *b, int32_t s) {
  const dc_node *n = &b->m->nodes[s];
  const cuda_device *g = &b->dev[n->device];
  int w = b->m->nodes[n->inputs[0]].ref;
  DC_TRY(CU(b, EventRecord, b->copy_may_start[s], g->compute));
  DC_TRY(CU(b, StreamWaitEvent, g->copy, b->copy_may_start[s], 0));
  if (b->trace) DC_TRY(CU(b, EventRecord, b->copy_began[s], g->copy));
  uint64_t bytes = dc_type_bytes(&n->type);
  if (b->info.on_demand) DC_TRY(upload_through_bounce(b, n->device, w, b->value[s], bytes));
  else DC_TRY(CU(b, MemcpyHtoDAsync, b->value[s], b->host_weights + b->host_offset[w], bytes, g->copy));
  if (b->trace) DC_TRY(CU(b, EventRecord, b->copy_ended[s], g->copy));
  return CU(b, EventRecord, b->copied[s], g->copy);
}

/* A value of the source device into this step's device: the destination's
 * compute stream waits until the source's has come this far, copies peer
 * to peer, and records the event the source waits on before its next step. */
static dc_status *transfer_step(dc_cuda_backend *b, int32_t s, int profiling) {
  const dc_node *n = &b->m->nodes[s];
  int32_t v = n->inputs[0];
  cuda_device *src = &b->dev[b->m->nodes[v].device], *dst = &b->dev[n->device];
  uint64_t bytes = dc_type_bytes(&n->type);
  DC_TRY(dc_cuda_use_device(b, b->m->nodes[v].device));
  if (b->m->nodes[v].op == OP_UPLOAD) DC_TRY(CU(b, StreamWaitEvent, src->compute, b->copied[v], 0));
  DC_TRY(CU(b, EventRecord, b->source_ready[s], src->compute));
  DC_TRY(dc_cuda_use_device(b, n->device));
  DC_TRY(CU(b, StreamWaitEvent, dst->compute, b->source_ready[s], 0));
  DC_TRY(CU(b, MemcpyPeerAsync, b->value[s], dst->ctx, b->value[v], src->ctx, bytes, dst->compute));
  DC_TRY(CU(b, EventRecord, b->moved[s], dst->compute));
  src->pending[src->npending++] = s;
  b->info.transferred_bytes += bytes;
  if (profiling) DC_TRY(CU(b, EventRecord, b->step_done[s], dst->compute));
  return NULL;
}

static dc_status *launch_step(dc_cuda_backend *b, int32_t s, int profiling) {
  const dc_plan_cuda_kernel *kk = &b->k->kernels[b->k->kernel_of_node[s]];
  const dc_node *n = &b->m->nodes[s];
  const cuda_device *g = &b->dev[n->device];
  for (int i = 0; i < n->ninputs; i++) /* a kernel waits for the uploads it reads, and no others */
    if (b->m->nodes[n->inputs[i]].op == OP_UPLOAD)
      DC_TRY(CU(b, StreamWaitEvent, g->compute, b->copied[n->inputs[i]], 0));
  if (dc_cuda_lt_runs(b, s)) DC_TRY(dc_cuda_lt_launch(b, s));
  else DC_TRY(CU(b, LaunchKernel, g->kern[b->k->kernel_of_node[s]].fn, kk->grid[0], kk->grid[1], kk->grid[2], kk->block[0],
            kk->block[1], kk->block[2], kk->smem_bytes, g->compute, &b->params[(size_t)s * NPARAMS], NULL));
  if (profiling) DC_TRY(CU(b, EventRecord, b->step_done[s], g->compute));
  if (b->opt.check_step) DC_TRY(check_step(b, s));
  return NULL;
}

static dc_status *run_step(dc_cuda_backend *b, int32_t s, int profiling) {
  const dc_node *n = &b->m->nodes[s];
  if (b->k->kernel_of_node[s] < 0 && !dc_op_is_copy(n->op)) return NULL; /* a leaf: in place already */
  DC_TRY(dc_cuda_use_device(b, n->device));
  DC_TRY(wait_transfers_out(b, n->device));
  if (n->op == OP_UPLOAD) return upload_step(b, s);
  if (n->op == OP_TRANSFER) return transfer_step(b, s, profiling);
  return launch_step(b, s, profiling);
}

/* ---- a run ------------------------------------------------------------------------- */
static dc_status *inputs_in(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  for (int d = 0; d < b->ndevices; d++) {
    cuda_device *g = &b->dev[d];
    DC_TRY(dc_cuda_use_device(b, d));
    if (b->trace) { /* the streams are idle: the event completes as it is recorded */
      g->origin_seconds = dc_now_seconds();
      DC_TRY(CU(b, EventRecord, g->trace_origin, g->copy));
    }
    for (int i = 0; i < m->ninputs; i++) {
      int32_t v = m->inputs[i].node;
      if (m->nodes[v].device != d || v < b->run_first || v >= b->run_end) continue;
      DC_TRY(dc_status_annotate(CU(b, MemcpyHtoDAsync, b->value[v], b->host_in[i], dc_type_bytes(&m->nodes[v].type),
                                   g->copy),
                                "%s: copying input \"%s\" to the device", b->path, m->inputs[i].name));
    }
    DC_TRY(CU(b, EventRecord, g->inputs_ready, g->copy));
    DC_TRY(CU(b, StreamWaitEvent, g->compute, g->inputs_ready, 0));
    DC_TRY(CU(b, EventRecord, g->begin, g->compute));
  }
  return NULL;
}

/* Each device's outputs once its compute (and the transfers out of it) is
 * done; then the host waits for every device. */
static dc_status *outputs_out(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  for (int d = 0; d < b->ndevices; d++) {
    const cuda_device *g = &b->dev[d];
    DC_TRY(dc_cuda_use_device(b, d));
    DC_TRY(wait_transfers_out(b, d));
    DC_TRY(CU(b, EventRecord, g->end, g->compute));
    DC_TRY(CU(b, StreamWaitEvent, g->copy, g->end, 0));
    if (b->trace) DC_TRY(CU(b, EventRecord, g->outputs_began, g->copy));
    for (int i = 0; i < m->noutputs; i++) {
      int32_t v = m->outputs[i].node;
      if (m->nodes[v].device != d || v < b->run_first || v >= b->run_end) continue;
      DC_TRY(dc_status_annotate(CU(b, MemcpyDtoHAsync, b->host_out[i], b->value[v],
                                   dc_type_bytes(&m->nodes[v].type), g->copy),
                                "%s: copying output \"%s\" to the host", b->path, m->outputs[i].name));
    }
    if (b->trace) DC_TRY(CU(b, EventRecord, g->outputs_done, g->copy));
  }
  for (int d = 0; d < b->ndevices; d++) {
    DC_TRY(dc_cuda_use_device(b, d));
    /* An asynchronous kernel fault surfaces here, without its step. */
    DC_TRY(dc_status_annotate(CU(b, StreamSynchronize, b->dev[d].copy),
                              "%s: waiting for the run (a kernel may have failed; --check-finite synchronises after "
                              "every step and names the failing one)",
                              b->path));
  }
  return NULL;
}

static dc_status *elapsed(dc_cuda_backend *b, dc_cu_event from, dc_cu_event to, double *seconds) {
  float ms = 0;
  DC_TRY(CU(b, EventElapsedTime, &ms, from, to));
  *seconds = ms * 1e-3;
  return NULL;
}

/* Events are timed against others of their own device only: each step
 * from the previous timed step on its device (or the run's start there). */
static dc_status *read_times(dc_cuda_backend *b, double *step_seconds, double *kernel_seconds) {
  double t = 0, longest = 0;
  for (int d = 0; d < b->ndevices; d++) {
    DC_TRY(elapsed(b, b->dev[d].begin, b->dev[d].end, &t));
    if (t > longest) longest = t;
  }
  if (kernel_seconds) *kernel_seconds = longest;
  if (!step_seconds) return NULL;
  dc_cu_event prev[DC_MAX_DEVICES];
  for (int d = 0; d < b->ndevices; d++) prev[d] = b->dev[d].begin;
  for (int32_t s = b->run_first; s < b->run_end; s++) { /* the events this run recorded */
    if (!b->step_done[s]) continue;
    int d = b->m->nodes[s].device;
    DC_TRY(elapsed(b, prev[d], b->step_done[s], &t));
    step_seconds[s] += t;
    prev[d] = b->step_done[s];
  }
  return NULL;
}

/* ---- the trace -------------------------------------------------------------------- */
/* An event's time on the host clock: its device's origin plus the device
 * time since. */
static dc_status *host_time(dc_cuda_backend *b, int d, dc_cu_event e, double *t) {
  DC_TRY(elapsed(b, b->dev[d].trace_origin, e, t));
  *t += b->dev[d].origin_seconds;
  return NULL;
}

/* Bytes moved and the highest arena byte of the values, per device, of
 * the run's inputs (outputs: 0 when is_input is 0, nothing is placed). */
static void io_bytes(const dc_cuda_backend *b, int is_input, uint64_t *bytes, uint64_t *top) {
  const dc_module *m = b->m;
  int n = is_input ? m->ninputs : m->noutputs;
  for (int i = 0; i < n; i++) {
    int32_t v = is_input ? m->inputs[i].node : m->outputs[i].node;
    if (v < b->run_first || v >= b->run_end) continue;
    const dc_node *node = &m->nodes[v];
    bytes[node->device] += dc_type_bytes(&node->type);
    uint64_t end = (uint64_t)node->offset + dc_type_bytes(&node->type);
    if (is_input && end > top[node->device]) top[node->device] = end;
  }
}

/* The run's events from the device's: a step on a compute stream runs
 * from the later of the previous step's end there and the end of every
 * upload it waited for, to its own event; an upload between the events
 * around its copy. */
static dc_status *read_trace(dc_cuda_backend *b) {
  const dc_module *m = b->m;
  int32_t first = b->run_first, end = b->run_end;
  uint64_t in[DC_MAX_DEVICES] = {0}, out[DC_MAX_DEVICES] = {0}, in_top[DC_MAX_DEVICES] = {0}, none[DC_MAX_DEVICES];
  double prev[DC_MAX_DEVICES];
  io_bytes(b, 1, in, in_top);
  io_bytes(b, 0, out, none);
  for (int d = 0; d < b->ndevices; d++) {
    double t0, t1;
    DC_TRY(host_time(b, d, b->dev[d].begin, &prev[d]));
    t0 = b->dev[d].origin_seconds;
    if (in[d])
      b->trace[drt_trace_inputs_slot(d)] =
          (drt_trace_event){.kind = DRT_EVENT_INPUTS, .step = -1, .device = d, .stream = DRT_STREAM_COPY, .start = t0,
                            .end = prev[d], .bytes = in[d], .arena_top = in_top[d]};
    DC_TRY(host_time(b, d, b->dev[d].outputs_began, &t0));
    DC_TRY(host_time(b, d, b->dev[d].outputs_done, &t1));
    if (out[d])
      b->trace[drt_trace_outputs_slot(first, end, b->ndevices, d)] =
          (drt_trace_event){.kind = DRT_EVENT_OUTPUTS, .step = -1, .device = d, .stream = DRT_STREAM_COPY,
                            .start = t0, .end = t1, .bytes = out[d]};
  }
  for (int32_t s = first; s < end; s++) { /* uploads first: their readers start after them */
    const dc_node *n = &m->nodes[s];
    if (n->op != OP_UPLOAD) continue;
    drt_trace_event *e = &b->trace[drt_trace_step_slot(first, b->ndevices, s)];
    *e = (drt_trace_event){.kind = DRT_EVENT_UPLOAD, .step = s, .device = n->device, .stream = DRT_STREAM_COPY,
                           .bytes = dc_type_bytes(&n->type),
                           .arena_top = (uint64_t)n->offset + dc_type_bytes(&n->type)};
    DC_TRY(host_time(b, n->device, b->copy_began[s], &e->start));
    DC_TRY(host_time(b, n->device, b->copy_ended[s], &e->end));
  }
  for (int32_t s = first; s < end; s++) {
    const dc_node *n = &m->nodes[s];
    if (!b->step_done[s]) continue;
    int d = n->device;
    double start = prev[d];
    for (int k = 0; k < n->ninputs; k++) {
      int32_t v = n->inputs[k];
      const drt_trace_event *up = &b->trace[drt_trace_step_slot(first, b->ndevices, v)];
      if (m->nodes[v].op == OP_UPLOAD && v >= first && up->end > start) start = up->end;
    }
    drt_trace_event *e = &b->trace[drt_trace_step_slot(first, b->ndevices, s)];
    int transfer = n->op == OP_TRANSFER;
    *e = (drt_trace_event){.kind = transfer ? DRT_EVENT_TRANSFER : DRT_EVENT_KERNEL, .step = s, .device = d,
                           .stream = DRT_STREAM_COMPUTE, .start = start,
                           .bytes = transfer ? dc_type_bytes(&n->type) : 0,
                           .arena_top = (uint64_t)n->offset + dc_type_bytes(&n->type)};
    DC_TRY(host_time(b, d, b->step_done[s], &e->end));
    prev[d] = e->end;
  }
  return NULL;
}

/* ---- a run, step by step ------------------------------------------------------------ */
dc_status *dc_cuda_backend_begin(dc_cuda_backend *b, double *step_seconds, drt_trace_event *trace, int32_t first,
                                 int32_t end) {
  b->run_first = first, b->run_end = end;
  b->current = -1; /* the caller's thread may not be the one that loaded, or have another context current */
  b->started = 0;
  b->step_seconds = step_seconds;
  b->trace = trace;
  DC_TRY(dc_cuda_use_device(b, 0));
  if (step_seconds || trace) DC_TRY(create_step_timers(b));
  if (trace) DC_TRY(create_trace_events(b));
  for (int d = 0; d < b->ndevices; d++) b->dev[d].npending = 0;
  b->info.transferred_bytes = 0;
  b->info.last_run_graph = 0;
  b->graph_run = dc_cuda_graph_chosen(b);
  b->next_step = first;
  b->started = 1;
  return inputs_in(b);
}

dc_status *dc_cuda_enqueue_step(dc_cuda_backend *b, int32_t s) {
  char what[300];
  dc_status *st = run_step(b, s, b->step_seconds || b->trace);
  return st ? dc_status_annotate(st, "%s: %s", b->path, dc_cuda_step_name(b->m, s, what, sizeof what)) : NULL;
}

/* A graph run enqueues its steps at end, all of the range in order: the
 * caller's walk must be that order. */
dc_status *dc_cuda_backend_step(dc_cuda_backend *b, int32_t s) {
  if (!b->graph_run) return dc_cuda_enqueue_step(b, s);
  if (s < b->next_step || s >= b->run_end)
    return dc_error(DC_ERR_INTERNAL, "%s: step %d named out of schedule order (expected %d..%d after step %d)", b->path,
                    (int)s, (int)b->next_step, (int)b->run_end - 1, (int)b->next_step - 1);
  b->next_step = s + 1;
  return NULL;
}

dc_status *dc_cuda_backend_end(dc_cuda_backend *b, dc_status *st, double *kernel_seconds) {
  if (!b->started) return st; /* nothing was enqueued */
  b->started = 0;
  if (!st && b->graph_run) st = dc_cuda_graph_run(b);
  b->graph_run = 0;
  if (!st) st = outputs_out(b);
  /* the run ends with every stream synchronised: both chunks free */
  b->bounce_device[0] = b->bounce_device[1] = -1;
  b->next_bounce = 0;
  if (st) { /* nothing may still write the host buffers after we return */
    for (int d = 0; d < b->ndevices; d++) {
      b->api.CtxSetCurrent(b->dev[d].ctx);
      b->api.StreamSynchronize(b->dev[d].compute);
      b->api.StreamSynchronize(b->dev[d].copy);
    }
    b->current = -1;
    return st;
  }
  DC_TRY(read_times(b, b->step_seconds, kernel_seconds));
  return b->trace ? read_trace(b) : NULL;
}

dc_status *dc_cuda_backend_run(dc_cuda_backend *b, double *step_seconds, double *kernel_seconds) {
  dc_status *st = dc_cuda_backend_begin(b, step_seconds, NULL, 0, b->m->nnodes);
  for (int32_t s = 0; s < b->m->nnodes && !st; s++) st = dc_cuda_backend_step(b, s);
  return dc_cuda_backend_end(b, st, kernel_seconds);
}
