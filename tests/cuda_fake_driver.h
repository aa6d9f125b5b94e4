/* cuda_fake_driver.h — a fake CUDA driver table (runtime/cuda_driver.h) for
 * host-side tests of the CUDA backend, header-only (static functions: one
 * fake per test program).  Device memory is host memory (a device pointer
 * is a host address), copies are memcpy, and every call is logged:
 * allocations, module loads with the image they got, functions by name,
 * launches with grid/block/smem/stream and the parameter VALUES, event
 * records and waits with their streams, peer copies.  A launch runs the
 * reference kernel of the node its kernel was generated for (fake_bind:
 * nodes sharing a kernel have the same op, attributes and types), or
 * fk.execute when a test sets it (the emulator runs the generated CUDA C
 * instead).  Handles stay valid until fake_reset; fk counts what is still
 * alive, for leak checks.
 *
 * Stream capture, as the driver does it: cuStreamBeginCapture puts a
 * stream in capture; copies, launches, event records and waits enqueued on
 * a capturing stream are recorded into the capture instead of executed and
 * logged; a stream that waits on an event recorded in the capture joins it
 * (a fork), and must be joined back (the origin waits on an event recorded
 * on it after its last captured work) before cuStreamEndCapture, else
 * CUDA_ERROR_STREAM_CAPTURE_UNJOINED.  While a capture is active, an unsafe
 * call of the capturing thread (a stream or event synchronisation, an
 * elapsed time, an allocation or free) returns
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture; so does
 * a capturing stream waiting on an event recorded outside it (ISOLATION);
 * later captured work then returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
 * and so does the end of the capture, which gives no graph.  Querying an
 * event last recorded inside a capture is CUDA_ERROR_CAPTURED_EVENT.
 * cuGraphLaunch logs itself, then executes and logs the recorded work in
 * capture order: the origin stream's work on the launching stream, each
 * other stream's on a pseudo-stream of its own per executable graph, so
 * that the happens-before check (cuda_fake_order.h) sees exactly the
 * graph's edges (the fork and join events included).  One capture at a
 * time; fk.fail_instantiate makes cuGraphInstantiateWithFlags fail.
 *
 * fk.ndevices GPUs (1 by default), each with its primary context and its
 * own memory accounting (fk.free_bytes each, or fk.free_on[d] where set).
 * Objects and device memory belong to the context current when they were
 * made, and calls are held to the driver's context rules, so a backend
 * that uses the wrong context fails here as on a GPU: streams, events,
 * modules and device memory are made and freed in the current context; a
 * launch, a copy or an event record uses a stream of the current context
 * (and a function, an event, device memory of that context); an event may
 * be waited on from any context; a peer copy reads memory of its source
 * context and writes memory of its destination context. */
#ifndef DC_CUDA_FAKE_DRIVER_H
#define DC_CUDA_FAKE_DRIVER_H

#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_driver.h"
#include "runtime/kernels.h"
#include "plan/plan_format.h"

enum { C_HTOD, C_DTOH, C_RECORD, C_WAIT, C_EVSYNC, C_STREAMSYNC, C_LAUNCH, C_LOAD, C_GETFN, C_ATTR, C_ALLOC, C_MEMINFO,
       C_PEER, C_PEER_ENABLE, C_BEGIN_CAPTURE, C_END_CAPTURE, C_INSTANTIATE, C_GRAPH_LAUNCH };
enum { O_STREAM = 1, O_EVENT, O_MODULE, O_FUNCTION, O_GRAPH, O_GRAPH_EXEC };
#define MAX_CALLS 32768
#define MAX_OBJS 2048
#define MAX_BLOCKS 256
#define FAKE_MAX_DEVICES 8

typedef struct {
  int kind, alive, id;
  int device;             /* the device of the context it was made in */
  char name[64];          /* function: its symbol */
  int record_seq;         /* event: call index of its last record */
  int record_stream;      /* event: stream id of its last record */
  /* stream capture */
  int capturing;          /* stream: in the active capture */
  int joined;             /* stream: no captured work since the origin last waited on it */
  int captured_ops;       /* stream: work captured on it so far */
  int in_capture;         /* event: last recorded inside a capture: its stream's captured_ops then (>= 1) */
  int capture_of;         /* event: ... inside capture number capture_of (fk.cap.seq) */
  struct fake_call_st *ops; /* graph, executable graph: the captured work, in capture order */
  int nops;
  int origin;             /* graph, executable graph: the stream id the capture began on */
} fake_obj;

typedef struct fake_call_st {
  int kind, stream, event, jit, attr, value;
  int dev;                /* the device whose context was current */
  int src_dev;            /* peer copies: the source's device (dev: the destination's) */
  uint64_t dst, src, bytes;
  int host_pinned;        /* copies: the host side lies in pinned memory */
  const void *image;
  char fn[64];
  unsigned grid[3], block[3], smem;
  uint64_t params[DC_MAX_INPUTS + 1];
} fake_call;

typedef struct {
  void *p;
  size_t bytes;
  int pinned, alive;
  int device;             /* device memory: its device */
} fake_block;

static struct {
  int cc_major, cc_minor, optin, ndevices;
  int sm_count;                          /* every device's multiprocessors (132 after fake_reset) */
  size_t free_bytes;                     /* each device's free memory before allocations ... */
  size_t free_on[FAKE_MAX_DEVICES];      /* ... or this one's, where nonzero */
  size_t used[FAKE_MAX_DEVICES];         /* cuMemAlloc'd and not freed */
  int fail_alloc_device;                 /* every cuMemAlloc there fails (out of memory); -1: none */
  int no_peer;                           /* cuDeviceCanAccessPeer says no */
  char peer_enabled[FAKE_MAX_DEVICES][FAKE_MAX_DEVICES]; /* [current][peer] */
  int ctx_tag[FAKE_MAX_DEVICES];         /* the primary contexts are &ctx_tag[d] */
  int dev_ctx_refs[FAKE_MAX_DEVICES];
  int current;                           /* the device whose context is current; -1: none */
  int fail_launch_at, launches;
  int fail_jit_at; /* the JIT of this PTX module (1-based) fails, with a log */
  int jits;
  struct {
    int active, invalid, origin; /* origin: the stream id it began on */
    int seq;                     /* captures begun */
    fake_call *ops;
    int nops;
  } cap;
  int fail_instantiate;          /* cuGraphInstantiateWithFlags fails (out of memory) */
  int captures, graph_launches;  /* successful ends of capture, graph launches */
  fake_call calls[MAX_CALLS];
  int ncalls;
  fake_obj objs[MAX_OBJS];
  int nobjs;
  fake_block blocks[MAX_BLOCKS];
  int nblocks;
  int ctx_refs;
  /* executing launches (fake_bind): kernel symbol -> the node it was generated for */
  const dc_module *m;
  const dc_plan_cuda *plan;
  int32_t kernel_node[256];
  /* When set, runs launches instead of the reference kernels; returns a CUresult. */
  int (*execute)(int kernel, const unsigned grid[3], const unsigned block[3], unsigned smem, void **params);
} fk;

static void fake_reset(int major, int minor) {
  memset(&fk, 0, sizeof fk);
  fk.cc_major = major, fk.cc_minor = minor, fk.optin = 227 * 1024, fk.ndevices = 1;
  fk.sm_count = 132;
  fk.free_bytes = (size_t)80 << 30;
  fk.fail_alloc_device = -1;
  fk.current = -1;
}

static fake_call *log_call(int kind) {
  if (fk.ncalls == MAX_CALLS) abort();
  fake_call *c = &fk.calls[fk.ncalls++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->dev = fk.current;
  return c;
}

static void *new_obj(int kind, const char *name) {
  if (fk.nobjs == MAX_OBJS) abort();
  fake_obj *o = &fk.objs[fk.nobjs];
  *o = (fake_obj){.kind = kind, .alive = 1, .id = ++fk.nobjs, .device = fk.current, .record_seq = -1};
  if (name) snprintf(o->name, sizeof o->name, "%s", name);
  return o;
}
static int obj_id(const void *h) { return h ? ((const fake_obj *)h)->id : 0; }
/* A live object of the kind made in the current context. */
static int current_obj(const void *h, int kind) {
  const fake_obj *o = h;
  return o && o->kind == kind && o->alive && fk.current >= 0 && o->device == fk.current;
}
static int kill_obj(void *h, int kind) {
  fake_obj *o = h;
  if (!o || o->kind != kind || !o->alive) return DC_CUDA_ERROR_INVALID_VALUE;
  if (o->device != fk.current) return DC_CUDA_ERROR_INVALID_CONTEXT;
  o->alive = 0;
  free(o->ops);
  o->ops = NULL;
  return 0;
}
static fake_obj *obj_of(int id) { return id > 0 && id <= fk.nobjs ? &fk.objs[id - 1] : NULL; }

/* ---- stream capture ---- */
/* An unsafe call while a capture is active: refused, and the capture is lost. */
static int capture_forbids(void) {
  if (!fk.cap.active) return 0;
  fk.cap.invalid = 1;
  return DC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}
/* Work c on capturing stream s: recorded, neither executed nor logged. */
static int capture_op(fake_obj *s, const fake_call *c) {
  if (fk.cap.invalid) return DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  fake_call *grown = realloc(fk.cap.ops, (size_t)(fk.cap.nops + 1) * sizeof *grown);
  if (!grown) abort();
  fk.cap.ops = grown;
  fk.cap.ops[fk.cap.nops++] = *c;
  s->joined = 0;
  s->captured_ops++;
  return 0;
}
static inline int live_graphs(void) {
  int n = 0;
  for (int i = 0; i < fk.nobjs; i++) n += fk.objs[i].alive && (fk.objs[i].kind == O_GRAPH || fk.objs[i].kind == O_GRAPH_EXEC);
  return n;
}

static int new_block(size_t bytes, int pinned, void **out) {
  if (fk.nblocks == MAX_BLOCKS) return DC_CUDA_ERROR_OUT_OF_MEMORY;
  void *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
  if (!p) return DC_CUDA_ERROR_OUT_OF_MEMORY;
  fk.blocks[fk.nblocks++] = (fake_block){p, bytes, pinned, 1, pinned ? -1 : fk.current};
  *out = p;
  return 0;
}
static int free_block(void *p, int pinned) {
  for (int i = 0; i < fk.nblocks; i++)
    if (fk.blocks[i].p == p && fk.blocks[i].alive && fk.blocks[i].pinned == pinned) {
      if (!pinned && fk.blocks[i].device != fk.current) return DC_CUDA_ERROR_INVALID_CONTEXT;
      if (!pinned) fk.used[fk.current] -= fk.blocks[i].bytes;
      fk.blocks[i].alive = 0;
      free(p);
      return 0;
    }
  return DC_CUDA_ERROR_INVALID_VALUE;
}
/* Whether [p, p+n) lies inside one live block of the kind. */
static int inside(const void *p, size_t n, int pinned) {
  for (int i = 0; i < fk.nblocks; i++) {
    const fake_block *b = &fk.blocks[i];
    if (b->alive && b->pinned == pinned && (const char *)p >= (const char *)b->p &&
        (const char *)p + n <= (const char *)b->p + b->bytes)
      return 1;
  }
  return 0;
}
/* Whether [p, p+n) lies inside one live block of device d's memory. */
static int inside_device(uint64_t p, size_t n, int d) {
  for (int i = 0; i < fk.nblocks; i++) {
    const fake_block *b = &fk.blocks[i];
    if (b->alive && !b->pinned && b->device == d && p >= (uintptr_t)b->p && p + n <= (uintptr_t)b->p + b->bytes)
      return 1;
  }
  return 0;
}
static size_t device_free(int d) { return (fk.free_on[d] ? fk.free_on[d] : fk.free_bytes) - fk.used[d]; }
/* The device of a context handle, -1 when it is none of ours or not retained. */
static int ctx_device(dc_cu_context c) {
  for (int d = 0; d < fk.ndevices && d < FAKE_MAX_DEVICES; d++)
    if (c == (dc_cu_context)&fk.ctx_tag[d]) return fk.dev_ctx_refs[d] > 0 ? d : -1;
  return -1;
}
static int live_blocks(int pinned) {
  int n = 0;
  for (int i = 0; i < fk.nblocks; i++) n += fk.blocks[i].alive && fk.blocks[i].pinned == pinned;
  return n;
}
static int live_objs(void) {
  int n = 0;
  for (int i = 0; i < fk.nobjs; i++) n += fk.objs[i].alive && fk.objs[i].kind != O_FUNCTION;
  return n;
}

static int f_Init(unsigned flags) { return flags ? DC_CUDA_ERROR_INVALID_VALUE : 0; }
static int f_DriverGetVersion(int *v) { return *v = 13000, 0; }
static int f_DeviceGetCount(int *n) { return *n = fk.ndevices, 0; }
static int f_DeviceGet(dc_cu_device *d, int i) { return i < fk.ndevices ? (*d = i, 0) : DC_CUDA_ERROR_INVALID_DEVICE; }
static int f_DeviceGetName(char *name, int len, dc_cu_device d) {
  snprintf(name, (size_t)len, "Fake GPU %d.%d", fk.cc_major, fk.cc_minor);
  return 0;
}
static int f_DeviceGetAttribute(int *v, int attr, dc_cu_device d) {
  switch (attr) {
    case DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return *v = fk.cc_major, 0;
    case DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return *v = fk.cc_minor, 0;
    case DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return *v = fk.optin, 0;
    case DC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return *v = fk.sm_count, 0;
    default: return DC_CUDA_ERROR_INVALID_VALUE;
  }
}
static int f_DevicePrimaryCtxRetain(dc_cu_context *c, dc_cu_device d) {
  if (d < 0 || d >= fk.ndevices || d >= FAKE_MAX_DEVICES) return DC_CUDA_ERROR_INVALID_DEVICE;
  fk.ctx_refs++, fk.dev_ctx_refs[d]++;
  *c = (dc_cu_context)&fk.ctx_tag[d];
  return 0;
}
static int f_DevicePrimaryCtxRelease(dc_cu_device d) {
  if (d < 0 || d >= FAKE_MAX_DEVICES || fk.dev_ctx_refs[d] <= 0) return DC_CUDA_ERROR_INVALID_VALUE;
  fk.ctx_refs--;
  if (--fk.dev_ctx_refs[d] == 0 && fk.current == d) fk.current = -1; /* the context is gone */
  return 0;
}
static int f_CtxSetCurrent(dc_cu_context c) {
  int d = ctx_device(c);
  if (d < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  fk.current = d;
  return 0;
}
static int f_DeviceCanAccessPeer(int *can, dc_cu_device d, dc_cu_device peer) {
  if (d < 0 || d >= fk.ndevices || peer < 0 || peer >= fk.ndevices) return DC_CUDA_ERROR_INVALID_DEVICE;
  *can = d != peer && !fk.no_peer;
  return 0;
}
static int f_CtxEnablePeerAccess(dc_cu_context peer, unsigned flags) {
  int p = ctx_device(peer);
  if (fk.current < 0 || p < 0 || p == fk.current || flags) return DC_CUDA_ERROR_INVALID_CONTEXT;
  fake_call *c = log_call(C_PEER_ENABLE);
  c->src_dev = p;
  if (fk.peer_enabled[fk.current][p]) return DC_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  fk.peer_enabled[fk.current][p] = 1;
  return 0;
}
static int f_MemGetInfo(size_t *free_bytes, size_t *total) {
  if (fk.current < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  log_call(C_MEMINFO);
  *free_bytes = device_free(fk.current), *total = (size_t)80 << 30;
  return 0;
}
static int f_MemAlloc(dc_cu_deviceptr *p, size_t n) {
  void *h = NULL;
  if (fk.current < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  if (fk.cap.active) return capture_forbids();
  if (!n) return DC_CUDA_ERROR_INVALID_VALUE;
  if (n > device_free(fk.current) || fk.current == fk.fail_alloc_device) return DC_CUDA_ERROR_OUT_OF_MEMORY;
  int r = new_block(n, 0, &h);
  if (r) return r;
  *p = (uintptr_t)h;
  fk.used[fk.current] += n;
  fake_call *c = log_call(C_ALLOC);
  c->dst = *p, c->bytes = n;
  return 0;
}
static int f_MemFree(dc_cu_deviceptr p) {
  return fk.cap.active ? capture_forbids() : free_block((void *)(uintptr_t)p, 0);
}
static int f_MemHostAlloc(void **p, size_t n, unsigned flags) {
  if (fk.cap.active) return capture_forbids();
  return fk.current < 0 ? DC_CUDA_ERROR_INVALID_CONTEXT : new_block(n, 1, p);
}
static int f_MemFreeHost(void *p) {
  if (fk.cap.active) return capture_forbids();
  return fk.current < 0 ? DC_CUDA_ERROR_INVALID_CONTEXT : free_block(p, 1);
}

/* Tells the fake which node each kernel of the plan stands for. */
static void fake_bind(const dc_module *m, const dc_plan_cuda *k) {
  fk.m = m;
  fk.plan = k;
  for (int i = 0; i < k->nkernels && i < 256; i++)
    for (int32_t s = k->nnodes - 1; s >= 0; s--)
      if (k->kernel_of_node[s] == i) fk.kernel_node[i] = s;
}

static int kernel_index(const char *name) {
  for (int i = 0; fk.plan && i < fk.plan->nkernels && i < 256; i++)
    if (!strcmp(fk.plan->kernels[i].name, name)) return i;
  return -1;
}

/* Work t, executed now: logged (on the stream t names), then done — a copy
 * moves its bytes, a record marks its event, a launch runs the reference
 * kernel of its node (or fk.execute) on the parameter values t holds. */
static int execute(const fake_call *t) {
  fake_call *c = log_call(t->kind);
  int dev = c->dev;
  *c = *t;
  c->dev = dev;
  switch (c->kind) {
    case C_HTOD: case C_DTOH: memcpy((void *)(uintptr_t)c->dst, (const void *)(uintptr_t)c->src, c->bytes); return 0;
    case C_PEER: memmove((void *)(uintptr_t)c->dst, (const void *)(uintptr_t)c->src, c->bytes); return 0;
    case C_RECORD: {
      fake_obj *e = obj_of(c->event);
      e->record_seq = fk.ncalls - 1, e->record_stream = c->stream, e->in_capture = 0;
      return 0;
    }
    case C_WAIT: return 0;
    case C_LAUNCH: break;
    default: abort();
  }
  int ki = kernel_index(c->fn);
  const dc_node *n = &fk.m->nodes[fk.kernel_node[ki]];
  if (++fk.launches == fk.fail_launch_at) return DC_CUDA_ERROR_LAUNCH_FAILED;
  void *params[DC_MAX_INPUTS + 1];
  for (int i = 0; i <= n->ninputs; i++) params[i] = &c->params[i];
  if (fk.execute) return fk.execute(ki, c->grid, c->block, c->smem, params);
  const void *in[DC_MAX_INPUTS];
  for (int i = 0; i < n->ninputs; i++) in[i] = (const void *)(uintptr_t)c->params[i + 1];
  dc_status *st = dc_ref_run(fk.m, n, in, (void *)(uintptr_t)c->params[0]);
  if (st) dc_status_free(st);
  return st ? DC_CUDA_ERROR_LAUNCH_FAILED : 0;
}

/* Work t on stream s: recorded when s is capturing, else executed. */
static int enqueue(dc_cu_stream s, const fake_call *t) {
  fake_obj *so = (fake_obj *)s;
  return so->capturing ? capture_op(so, t) : execute(t);
}

static int f_MemcpyHtoDAsync(dc_cu_deviceptr dst, const void *src, size_t n, dc_cu_stream s) {
  if (!current_obj(s, O_STREAM)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  if (!inside_device(dst, n, fk.current)) return DC_CUDA_ERROR_INVALID_VALUE;
  fake_call c = {.kind = C_HTOD, .dst = dst, .src = (uintptr_t)src, .bytes = n, .stream = obj_id(s),
                 .host_pinned = inside(src, n, 1)};
  return enqueue(s, &c);
}
static int f_MemcpyDtoHAsync(void *dst, dc_cu_deviceptr src, size_t n, dc_cu_stream s) {
  if (!current_obj(s, O_STREAM)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  if (!inside_device(src, n, fk.current)) return DC_CUDA_ERROR_INVALID_VALUE;
  fake_call c = {.kind = C_DTOH, .dst = (uintptr_t)dst, .src = src, .bytes = n, .stream = obj_id(s),
                 .host_pinned = inside(dst, n, 1)};
  return enqueue(s, &c);
}
static int f_MemcpyPeerAsync(dc_cu_deviceptr dst, dc_cu_context dst_ctx, dc_cu_deviceptr src, dc_cu_context src_ctx,
                             size_t n, dc_cu_stream s) {
  int to = ctx_device(dst_ctx), from = ctx_device(src_ctx);
  if (!current_obj(s, O_STREAM) || to < 0 || from < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  if (!inside_device(dst, n, to) || !inside_device(src, n, from)) return DC_CUDA_ERROR_INVALID_VALUE;
  fake_call c = {.kind = C_PEER, .dst = dst, .src = src, .bytes = n, .stream = obj_id(s), .src_dev = from};
  return enqueue(s, &c);
}
static int f_StreamCreate(dc_cu_stream *s, unsigned flags) {
  if (fk.current < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  *s = new_obj(O_STREAM, flags == DC_CU_STREAM_NON_BLOCKING ? "non-blocking" : "blocking");
  return 0;
}
static int f_StreamDestroy(dc_cu_stream s) {
  if (s && ((fake_obj *)s)->capturing) return DC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return kill_obj(s, O_STREAM);
}
static int f_StreamSynchronize(dc_cu_stream s) {
  if (fk.cap.active) return capture_forbids();
  return log_call(C_STREAMSYNC)->stream = obj_id(s), 0;
}
/* The event may be of another context than the stream (as the driver
 * allows).  In a capture: a wait on an event recorded in it pulls the
 * stream in (a fork), or, on the origin, joins the event's stream back
 * when nothing was captured there since the record. */
static int f_StreamWaitEvent(dc_cu_stream s, dc_cu_event e, unsigned flags) {
  if (!current_obj(s, O_STREAM)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  fake_obj *so = (fake_obj *)s, *eo = (fake_obj *)e;
  fake_call c = {.kind = C_WAIT, .stream = obj_id(s), .event = obj_id(e)};
  int in_this = eo->in_capture && fk.cap.active && eo->capture_of == fk.cap.seq;
  if (eo->in_capture && !in_this) return DC_CUDA_ERROR_CAPTURED_EVENT; /* recorded in a capture that has ended */
  if (fk.cap.invalid && (so->capturing || in_this)) return DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (so->capturing && !in_this) { /* a dependency on work outside the capture */
    fk.cap.invalid = 1;
    return DC_CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  if (in_this) {
    so->capturing = 1;
    fake_obj *from = obj_of(eo->record_stream);
    int r = capture_op(so, &c);
    if (!r && so->id == fk.cap.origin && from != so && from->captured_ops == eo->in_capture) from->joined = 1;
    return r;
  }
  fake_call *l = log_call(C_WAIT);
  l->stream = c.stream, l->event = c.event;
  return eo->record_seq < 0 ? DC_CUDA_ERROR_INVALID_VALUE : 0; /* waiting on nothing recorded */
}
static int f_EventCreate(dc_cu_event *e, unsigned flags) {
  if (fk.current < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  return *e = new_obj(O_EVENT, NULL), 0;
}
static int f_EventDestroy(dc_cu_event e) { return kill_obj(e, O_EVENT); }
static int f_EventRecord(dc_cu_event e, dc_cu_stream s) {
  fake_obj *o = (fake_obj *)e, *so = (fake_obj *)s;
  if (!current_obj(s, O_STREAM) || !current_obj(e, O_EVENT)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  fake_call c = {.kind = C_RECORD, .stream = obj_id(s), .event = o->id};
  if (!so->capturing) return execute(&c);
  int r = capture_op(so, &c);
  if (!r) o->in_capture = so->captured_ops, o->capture_of = fk.cap.seq, o->record_stream = so->id; /* its stream's work up to here */
  return r;
}
static int f_EventSynchronize(dc_cu_event e) {
  if (fk.cap.active) return capture_forbids();
  if (((fake_obj *)e)->in_capture) return DC_CUDA_ERROR_CAPTURED_EVENT;
  return log_call(C_EVSYNC)->event = obj_id(e), 0;
}
/* 1 ms per logged call between the two records: deterministic profiles.
 * Only events of one device time each other. */
static int f_EventElapsedTime(float *ms, dc_cu_event a, dc_cu_event b) {
  const fake_obj *x = (const fake_obj *)a, *y = (const fake_obj *)b;
  if (fk.cap.active) return capture_forbids();
  if (x->in_capture || y->in_capture) return DC_CUDA_ERROR_CAPTURED_EVENT;
  if (x->record_seq < 0 || y->record_seq < 0 || x->device != y->device) return DC_CUDA_ERROR_INVALID_VALUE;
  *ms = (float)(y->record_seq - x->record_seq);
  return 0;
}
static int f_ModuleLoadData(dc_cu_module *mod, const void *image) {
  if (fk.current < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  fake_call *c = log_call(C_LOAD);
  c->image = image;
  *mod = new_obj(O_MODULE, NULL);
  return 0;
}
static int f_ModuleLoadDataEx(dc_cu_module *mod, const void *image, unsigned n, int *opts, void **vals) {
  if (fk.current < 0) return DC_CUDA_ERROR_INVALID_CONTEXT;
  int has_log = 0;
  for (unsigned i = 0; i < n; i++) has_log |= opts[i] == DC_CU_JIT_ERROR_LOG_BUFFER && vals[i];
  if (!has_log) return DC_CUDA_ERROR_INVALID_VALUE;
  if (++fk.jits == fk.fail_jit_at) {
    for (unsigned i = 0; i < n; i++)
      if (opts[i] == DC_CU_JIT_ERROR_LOG_BUFFER) strcpy(vals[i], "ptxas fatal: unknown instruction (fake)");
    return DC_CUDA_ERROR_INVALID_PTX;
  }
  fake_call *c = log_call(C_LOAD);
  c->image = image, c->jit = 1;
  *mod = new_obj(O_MODULE, NULL);
  return 0;
}
static int f_ModuleUnload(dc_cu_module mod) { return kill_obj(mod, O_MODULE); }
static int f_ModuleGetFunction(dc_cu_function *fn, dc_cu_module mod, const char *name) {
  if (!mod || !((fake_obj *)mod)->alive) return DC_CUDA_ERROR_INVALID_VALUE;
  if (!current_obj(mod, O_MODULE)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  snprintf(log_call(C_GETFN)->fn, 64, "%s", name);
  *fn = new_obj(O_FUNCTION, name);
  return 0;
}
static int f_FuncSetAttribute(dc_cu_function fn, int attr, int value) {
  fake_call *c = log_call(C_ATTR);
  snprintf(c->fn, sizeof c->fn, "%s", ((fake_obj *)fn)->name);
  c->attr = attr, c->value = value;
  return 0;
}

static int f_LaunchKernel(dc_cu_function fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned smem, dc_cu_stream s, void **params, void **extra) {
  if (!current_obj(s, O_STREAM) || !current_obj(fn, O_FUNCTION)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  const fake_obj *f = (const fake_obj *)fn;
  fake_call c = {.kind = C_LAUNCH, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .smem = smem, .stream = obj_id(s)};
  snprintf(c.fn, sizeof c.fn, "%s", f->name);
  int ki = kernel_index(f->name);
  if (ki < 0 || extra) return log_call(C_LAUNCH), DC_CUDA_ERROR_INVALID_VALUE;
  const dc_node *n = &fk.m->nodes[fk.kernel_node[ki]];
  for (int i = 0; i <= n->ninputs; i++) memcpy(&c.params[i], params[i], sizeof c.params[i]); /* values, as the driver copies them */
  return enqueue(s, &c);
}

/* ---- capture and graphs ---- */
static int f_StreamBeginCapture(dc_cu_stream s, int mode) {
  fake_obj *so = (fake_obj *)s;
  if (!current_obj(s, O_STREAM)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  if (mode < DC_CU_STREAM_CAPTURE_MODE_GLOBAL || mode > DC_CU_STREAM_CAPTURE_MODE_RELAXED) return DC_CUDA_ERROR_INVALID_VALUE;
  if (so->capturing) return DC_CUDA_ERROR_ILLEGAL_STATE;
  if (fk.cap.active) abort(); /* the fake holds one capture at a time */
  log_call(C_BEGIN_CAPTURE)->stream = so->id;
  fk.cap.active = 1, fk.cap.invalid = 0, fk.cap.origin = so->id, fk.cap.ops = NULL, fk.cap.nops = 0, fk.cap.seq++;
  so->capturing = 1, so->joined = 1, so->captured_ops = 0;
  return 0;
}
/* Every stream leaves the capture; the graph is made unless it failed or a fork was left unjoined. */
static int f_StreamEndCapture(dc_cu_stream s, dc_cu_graph *graph) {
  fake_obj *so = (fake_obj *)s;
  *graph = NULL;
  if (!current_obj(s, O_STREAM)) return DC_CUDA_ERROR_INVALID_CONTEXT;
  if (!fk.cap.active || so->id != fk.cap.origin) return DC_CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  log_call(C_END_CAPTURE)->stream = so->id;
  int r = fk.cap.invalid ? DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : 0;
  for (int i = 0; i < fk.nobjs; i++) {
    fake_obj *o = &fk.objs[i];
    if (o->kind != O_STREAM || !o->capturing) continue;
    if (!r && o != so && !o->joined) r = DC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    o->capturing = 0, o->captured_ops = 0;
  }
  fk.cap.active = 0;
  if (r) {
    free(fk.cap.ops);
    fk.cap.ops = NULL;
    return r;
  }
  fake_obj *g = new_obj(O_GRAPH, NULL);
  g->ops = fk.cap.ops, g->nops = fk.cap.nops, g->origin = so->id;
  fk.cap.ops = NULL;
  fk.captures++;
  *graph = (dc_cu_graph)g;
  return 0;
}
static int f_GraphInstantiateWithFlags(dc_cu_graph_exec *exec, dc_cu_graph graph, unsigned long long flags) {
  const fake_obj *g = (const fake_obj *)graph;
  if (!g || g->kind != O_GRAPH || !g->alive || flags) return DC_CUDA_ERROR_INVALID_VALUE;
  if (fk.cap.active) return capture_forbids();
  log_call(C_INSTANTIATE);
  if (fk.fail_instantiate) return DC_CUDA_ERROR_OUT_OF_MEMORY;
  fake_obj *x = new_obj(O_GRAPH_EXEC, NULL);
  x->ops = malloc((size_t)(g->nops ? g->nops : 1) * sizeof *x->ops);
  if (!x->ops) abort();
  if (g->nops) memcpy(x->ops, g->ops, (size_t)g->nops * sizeof *x->ops);
  x->nops = g->nops, x->origin = g->origin;
  *exec = (dc_cu_graph_exec)x;
  return 0;
}
/* The graph's work in capture order: the origin's on the launching stream,
 * the others' each on a pseudo-stream of this executable graph. */
static int f_GraphLaunch(dc_cu_graph_exec exec, dc_cu_stream s) {
  const fake_obj *x = (const fake_obj *)exec;
  if (!x || x->kind != O_GRAPH_EXEC || !x->alive) return DC_CUDA_ERROR_INVALID_VALUE;
  if (!current_obj(s, O_STREAM) || x->device != fk.current) return DC_CUDA_ERROR_INVALID_CONTEXT;
  if (((const fake_obj *)s)->capturing) return DC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* not modelled */
  log_call(C_GRAPH_LAUNCH)->stream = obj_id(s);
  fk.graph_launches++;
  for (int i = 0; i < x->nops; i++) {
    fake_call c = x->ops[i];
    c.stream = c.stream == x->origin ? obj_id(s) : c.stream + x->id * (MAX_OBJS + 1);
    int r = execute(&c);
    if (r) return r;
  }
  return 0;
}
static int f_GraphExecDestroy(dc_cu_graph_exec exec) { return kill_obj(exec, O_GRAPH_EXEC); }
static int f_GraphDestroy(dc_cu_graph graph) { return kill_obj(graph, O_GRAPH); }
static int f_GetErrorName(dc_cu_result r, const char **s) {
  switch (r) {
    case 0: return *s = "CUDA_SUCCESS", 0;
    case DC_CUDA_ERROR_OUT_OF_MEMORY: return *s = "CUDA_ERROR_OUT_OF_MEMORY", 0;
    case DC_CUDA_ERROR_LAUNCH_FAILED: return *s = "CUDA_ERROR_LAUNCH_FAILED", 0;
    case DC_CUDA_ERROR_INVALID_PTX: return *s = "CUDA_ERROR_INVALID_PTX", 0;
    case DC_CUDA_ERROR_INVALID_CONTEXT: return *s = "CUDA_ERROR_INVALID_CONTEXT", 0;
    case DC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", 0;
    case DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return *s = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", 0;
    case DC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return *s = "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", 0;
    case DC_CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return *s = "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", 0;
    case DC_CUDA_ERROR_CAPTURED_EVENT: return *s = "CUDA_ERROR_CAPTURED_EVENT", 0;
    default: return *s = NULL, DC_CUDA_ERROR_INVALID_VALUE;
  }
}
static int f_GetErrorString(dc_cu_result r, const char **s) {
  switch (r) {
    case DC_CUDA_ERROR_OUT_OF_MEMORY: return *s = "out of memory", 0;
    case DC_CUDA_ERROR_LAUNCH_FAILED: return *s = "unspecified launch failure", 0;
    case DC_CUDA_ERROR_INVALID_PTX: return *s = "a PTX JIT compilation failed", 0;
    default: return *s = NULL, DC_CUDA_ERROR_INVALID_VALUE;
  }
}

static dc_cu_api fake_api(void) {
  dc_cu_api a = {0};
#define FAKE_ENTRY(name, params) a.name = f_##name;
  DC_CU_API_ENTRIES(FAKE_ENTRY)
#undef FAKE_ENTRY
  return a;
}

#endif
