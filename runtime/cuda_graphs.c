/* cuda_graphs.c — CUDA graphs for the CUDA backend: a run's steps captured
 * once into a graph through stream capture, then replayed by one
 * cuGraphLaunch per run instead of one driver call per launch, copy and
 * event (a forward of SDXL's UNet is some two thousand of them).
 *
 * What a graph holds.  The memory plan is static: every launch's
 * parameters, every upload's source in the pinned host block and every
 * event between the streams are the same in every run, so the steps of a
 * run range [first, end) (the whole schedule, or one phase of a pipeline:
 * the host works between phases, never inside one) are one fixed graph,
 * cached per range.  The capture begins on device 0's compute stream in
 * CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: the capturing thread's own unsafe
 * calls (a synchronisation, an allocation) fail the capture, so a bug shows
 * instead of being baked in, while another thread of the process (another
 * session) may still allocate; GLOBAL would fail that thread's calls too.
 * An event recorded on the compute stream and waited on by the copy stream
 * pulls the copy stream into the capture (the fork), so the uploads of
 * offloaded weights, on the copy stream behind their events exactly as on
 * streams, are nodes of the graph; an event recorded on the copy stream
 * and waited on by the compute stream joins it back before the capture
 * ends.  The run's inputs (host_in -> arena) and outputs (arena ->
 * host_out) stay outside the graph, around its launch, on the copy stream
 * as on streams: the graph never touches the user's buffers, and the
 * events that time a run (begin, end) keep their meaning.
 *
 * Where graphs are not used, the run enqueues its steps on the streams as
 * before: when the backend was opened without graphs; with step timing or
 * a trace (they time each step with events, which a capture cannot query);
 * with check_step (it synchronises after every step); for a range that
 * uploads weights read on demand (the host refills the bounce chunks
 * between copies, which a replay could not do); and for plans on several
 * GPUs (diffc --device-map: the transfers between devices and their events
 * would make one graph span contexts; those plans keep the streams they
 * are tested on).  A capture or instantiation that fails is never fatal:
 * the range is marked, runs on streams from then on, and a note says why.
 *
 * Notes (dc_cuda_backend_note): what was captured, and why a run used
 * streams, each said once. */
#include "cuda_backend_impl.h"

#include <stdarg.h>
#include <string.h>

/* ---- notes ------------------------------------------------------------------------ */
static void add_note(dc_cuda_backend *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(dc_cuda_backend *b, const char *fmt, ...) {
  char text[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  for (int i = 0; i < b->nnotes; i++)
    if (!strcmp(b->notes[i], text)) return; /* each said once */
  char **grown = dc_realloc(b->notes, (size_t)(b->nnotes + 1) * sizeof *grown);
  if (!grown) return; /* a note lost to a full heap is no reason to fail a run */
  b->notes = grown;
  if ((b->notes[b->nnotes] = dc_strdup(text))) b->nnotes++;
}

const char *dc_cuda_backend_note(const dc_cuda_backend *b, int i) {
  return i >= 0 && i < b->nnotes ? b->notes[i] : NULL;
}

/* "phase \"decode\" (steps 1200..1399)", "the plan (steps 0..2101)" */
static const char *range_name(const dc_cuda_backend *b, char *buf, size_t cap) {
  const dc_module *m = b->m;
  int32_t first = b->run_first, end = b->run_end;
  if (m->nphases && first < end)
    snprintf(buf, cap, "phase \"%s\" (steps %d..%d)", m->phases[m->nodes[first].phase].name, (int)first, (int)end - 1);
  else snprintf(buf, cap, "the plan (steps %d..%d)", (int)first, (int)end - 1);
  return buf;
}

/* ---- the choice ----------------------------------------------------------------------- */
static int range_uploads(const dc_cuda_backend *b) {
  for (int32_t s = b->run_first; s < b->run_end; s++)
    if (b->m->nodes[s].op == OP_UPLOAD) return 1;
  return 0;
}

static cuda_graph *find_graph(dc_cuda_backend *b) {
  for (int i = 0; i < b->ngraphs; i++)
    if (b->graphs[i].first == b->run_first && b->graphs[i].end == b->run_end) return &b->graphs[i];
  return NULL;
}

/* Whether the run that begins (b->run_first .. run_end, b->step_seconds,
 * b->trace set) goes through its range's graph; a note says why not. */
int dc_cuda_graph_chosen(dc_cuda_backend *b) {
  char range[160];
  if (!b->opt.graphs || b->run_first >= b->run_end) return 0;
  if (b->ndevices > 1) {
    add_note(b, "CUDA graphs: not used for a plan on %d GPUs (diffc --device-map): its runs enqueue their steps on "
             "streams; graphs are captured for one-GPU plans", b->ndevices);
    return 0;
  }
  if (b->step_seconds || b->trace) {
    add_note(b, "CUDA graphs: not used while %s: it times every step with events, so those runs enqueue their steps "
             "on streams", b->trace ? "tracing (--trace)" : "profiling (--profile)");
    return 0;
  }
  if (b->opt.check_step) {
    add_note(b, "CUDA graphs: not used with --check-finite: it reads every step's output back on the host, so runs "
             "enqueue their steps on streams");
    return 0;
  }
  if (b->info.on_demand && range_uploads(b)) {
    add_note(b, "CUDA graphs: not used for %s: it uploads weights read on demand (--host-memory on-demand), the host "
             "refilling the bounce chunks between copies, which a graph cannot replay; it runs on streams",
             range_name(b, range, sizeof range));
    return 0;
  }
  const cuda_graph *g = find_graph(b);
  return !g || g->exec; /* not captured yet, or captured: a failed capture is not retried */
}

/* ---- capture ------------------------------------------------------------------------- */
/* The fork and join events, made on the first capture (disable timing: only order). */
static dc_status *create_fork_join(dc_cuda_backend *b) {
  cuda_device *g = &b->dev[0];
  if (!g->fork) DC_TRY(CU(b, EventCreate, &g->fork, DC_CU_EVENT_DISABLE_TIMING));
  if (!g->join) DC_TRY(CU(b, EventCreate, &g->join, DC_CU_EVENT_DISABLE_TIMING));
  return NULL;
}

/* The range's steps enqueued while the compute stream captures, the copy
 * stream forked in at the start and joined back at the end. */
static dc_status *record_steps(dc_cuda_backend *b) {
  cuda_device *g = &b->dev[0];
  DC_TRY(CU(b, EventRecord, g->fork, g->compute));
  DC_TRY(CU(b, StreamWaitEvent, g->copy, g->fork, 0));
  for (int32_t s = b->run_first; s < b->run_end; s++) DC_TRY(dc_cuda_enqueue_step(b, s));
  DC_TRY(CU(b, EventRecord, g->join, g->copy));
  return CU(b, StreamWaitEvent, g->compute, g->join, 0);
}

/* Captures the range and instantiates its graph into gr; on failure gr
 * holds nothing and the capture has ended (both streams out of it). */
static dc_status *capture(dc_cuda_backend *b, cuda_graph *gr) {
  cuda_device *g = &b->dev[0];
  DC_TRY(create_fork_join(b));
  DC_TRY(CU(b, StreamBeginCapture, g->compute, DC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  dc_status *st = record_steps(b);
  dc_cu_graph graph = NULL;
  dc_status *ended = CU(b, StreamEndCapture, g->compute, &graph); /* always: it takes the streams out of capture */
  if (!st) st = ended;
  else dc_status_free(ended);
  if (!st) st = CU(b, GraphInstantiateWithFlags, &gr->exec, graph, 0);
  if (st) {
    if (graph) b->api.GraphDestroy(graph);
    gr->exec = NULL;
    return st;
  }
  gr->graph = graph;
  return NULL;
}

static int range_launches(const dc_cuda_backend *b) {
  int n = 0;
  for (int32_t s = b->run_first; s < b->run_end; s++) n += b->k->kernel_of_node[s] >= 0;
  return n;
}

/* The range's graph, captured now when it has none; NULL when it runs on
 * streams (the capture failed now or before). */
static cuda_graph *graph_for_range(dc_cuda_backend *b) {
  cuda_graph *gr = find_graph(b);
  if (gr) return gr->exec ? gr : NULL;
  cuda_graph *grown = dc_realloc(b->graphs, (size_t)(b->ngraphs + 1) * sizeof *grown);
  if (!grown) return NULL; /* no room to remember a graph: this run uses streams */
  b->graphs = grown;
  gr = &b->graphs[b->ngraphs++];
  *gr = (cuda_graph){b->run_first, b->run_end, NULL, NULL};
  char range[160];
  double t0 = dc_now_seconds();
  dc_status *st = capture(b, gr);
  if (st) {
    add_note(b, "CUDA graphs: capturing %s failed (%s); it runs on streams", range_name(b, range, sizeof range),
             dc_status_message(st));
    dc_status_free(st);
    return NULL;
  }
  b->info.graphs_captured++;
  add_note(b, "CUDA graphs: captured %d launches into a CUDA graph in %.1f ms for %s; its runs replay it",
           range_launches(b), (dc_now_seconds() - t0) * 1e3, range_name(b, range, sizeof range));
  return gr;
}

/* The run's steps, between begin's inputs and end's outputs: the range's
 * graph launched on the compute stream, or the steps on streams. */
dc_status *dc_cuda_graph_run(dc_cuda_backend *b) {
  DC_TRY(dc_cuda_use_device(b, 0));
  cuda_graph *gr = graph_for_range(b);
  if (!gr) {
    for (int32_t s = b->run_first; s < b->run_end; s++) DC_TRY(dc_cuda_enqueue_step(b, s));
    return NULL;
  }
  b->info.graph_launches++;
  b->info.last_run_graph = 1;
  return dc_status_annotate(CU(b, GraphLaunch, gr->exec, b->dev[0].compute),
                            "%s: launching the CUDA graph of steps %d..%d (diffrun --no-cuda-graphs runs on streams)",
                            b->path, (int)gr->first, (int)gr->end - 1);
}

/* At destroy, in device 0's context, once nothing runs. */
void dc_cuda_graphs_destroy(dc_cuda_backend *b) {
  for (int i = 0; i < b->ngraphs; i++) {
    if (b->graphs[i].exec) b->api.GraphExecDestroy(b->graphs[i].exec);
    if (b->graphs[i].graph) b->api.GraphDestroy(b->graphs[i].graph);
  }
  dc_free(b->graphs);
  for (int i = 0; i < b->nnotes; i++) dc_free(b->notes[i]);
  dc_free(b->notes);
  b->graphs = NULL, b->notes = NULL, b->ngraphs = b->nnotes = 0;
}
