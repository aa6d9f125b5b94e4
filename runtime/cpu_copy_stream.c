/* cpu_copy_stream.c — see cpu_copy_stream.h: the upload steps on a thread
 * of their own, ordered against the compute stream as a GPU orders them. */
#include "cpu_copy_stream.h"

static uint8_t *place_of(const dc_copy_stream *c, const dc_node *n) { return c->arena[n->device] + n->offset; }

/* Upload s, once every step before it has computed; 0 when the copy
 * stream must stop (stopped from outside, or this copy failed). */
static int copy_one(dc_copy_stream *c, int32_t s) {
  const dc_node *n = &c->m->nodes[s];
  pthread_mutex_lock(&c->mu);
  while (c->computed < s && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
  int stop = c->stop;
  pthread_mutex_unlock(&c->mu);
  if (stop) return 0;
  double t0 = c->step_seconds || c->trace ? dc_now_seconds() : 0;
  uint64_t end = (uint64_t)n->offset + dc_type_bytes(&n->type);
  dc_pool_sibling_running(c->pool, 1);
  dc_status *st = dc_host_weights_upload(c->host, c->m->nodes[n->inputs[0]].ref, place_of(c, n));
  dc_pool_sibling_running(c->pool, -1);
  if (c->step_seconds || c->trace) {
    double t1 = dc_now_seconds();
    if (c->step_seconds) c->step_seconds[s] += t1 - t0;
    /* this thread's own slot; the session reads it after the join */
    if (c->trace && !st)
      c->trace[s - c->first] = (drt_trace_event){.kind = DRT_EVENT_UPLOAD, .step = s, .device = n->device,
                                                 .stream = DRT_STREAM_COPY, .start = t0, .end = t1,
                                                 .bytes = dc_type_bytes(&n->type), .arena_top = end};
  }
  pthread_mutex_lock(&c->mu);
  if (end > c->top[n->device]) c->top[n->device] = end;
  if (st)
    c->err = dc_status_annotate(st, "%s: upload step %%%d%s%s%s", c->path, (int)s, n->scope ? " (" : "",
                                n->scope ? n->scope : "", n->scope ? ")" : "");
  else c->copied = s + 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return !st;
}

static void *copy_stream_main(void *arg) {
  dc_copy_stream *c = arg;
  for (int32_t s = c->first; s < c->end; s++)
    if (c->m->nodes[s].op == OP_UPLOAD && !copy_one(c, s)) break;
  return NULL;
}

dc_status *dc_copy_stream_start(dc_copy_stream *c, const char *path, const dc_module *m, dc_host_weights *host,
                                uint8_t *const *arena, double *step_seconds, drt_trace_event *trace, int32_t first,
                                int32_t end, dc_pool *pool) {
  *c = (dc_copy_stream){.path = path, .m = m, .host = host, .arena = arena, .step_seconds = step_seconds,
                        .trace = trace, .first = first, .end = end, .pool = pool};
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (pthread_create(&c->thread, NULL, copy_stream_main, c) == 0) return NULL;
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  return dc_error(DC_ERR_NOMEM, "%s: cannot start the copy stream thread", path);
}

void dc_copy_stream_may_start(dc_copy_stream *c, int32_t s) {
  pthread_mutex_lock(&c->mu);
  c->computed = s;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

dc_status *dc_copy_stream_wait(dc_copy_stream *c, const dc_node *n) {
  int32_t need = -1;
  for (int k = 0; k < n->ninputs; k++) /* an upload of an earlier phase's run is in place already */
    if (c->m->nodes[n->inputs[k]].op == OP_UPLOAD && n->inputs[k] >= c->first && n->inputs[k] > need)
      need = n->inputs[k];
  if (need < 0) return NULL;
  pthread_mutex_lock(&c->mu);
  while (c->copied <= need && !c->err) pthread_cond_wait(&c->cv, &c->mu);
  dc_status *st = NULL;
  if (c->copied <= need) st = c->err, c->err = NULL;
  pthread_mutex_unlock(&c->mu);
  return st;
}

dc_status *dc_copy_stream_stop(dc_copy_stream *c, dc_status *st, uint64_t *arena_top) {
  pthread_mutex_lock(&c->mu);
  /* After a failure the copy stream must not wait for steps that never run.
   * After a run that succeeded it finishes every upload first, as a GPU's
   * end of run waits for its copy stream: a phase's upload may have its
   * readers in a later phase (a weight held for the loop, uploaded in the
   * prologue), so no step of this run waited for it. */
  if (st) c->stop = 1;
  else c->computed = c->end;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  for (int d = 0; d < DC_MAX_DEVICES; d++)
    if (c->top[d] > arena_top[d]) arena_top[d] = c->top[d];
  if (c->err && st) dc_status_free(c->err);
  else if (c->err) st = c->err;
  c->err = NULL;
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  return st;
}
