/* cuda_fake_driver.h — a fake CUDA driver table (runtime/cuda_driver.h) for
 * host-side tests of the CUDA backend, header-only (static functions: one
 * fake per test program).  Device memory is host memory (a device pointer
 * is a host address), copies are memcpy, and every call is logged:
 * allocations, module loads with the image they got, functions by name,
 * launches with grid/block/smem/stream and the parameter VALUES, event
 * records and waits with their streams.  A launch runs the reference kernel
 * of the node its kernel was generated for (fake_bind: nodes sharing a
 * kernel have the same op, attributes and types), or fk.execute when a test
 * sets it (the emulator runs the generated CUDA C instead).  Handles stay
 * valid until fake_reset; fk counts what is still alive, for leak checks. */
#ifndef DC_CUDA_FAKE_DRIVER_H
#define DC_CUDA_FAKE_DRIVER_H

#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_driver.h"
#include "runtime/kernels.h"
#include "runtime/plan_format.h"

enum { C_HTOD, C_DTOH, C_RECORD, C_WAIT, C_EVSYNC, C_STREAMSYNC, C_LAUNCH, C_LOAD, C_GETFN, C_ATTR, C_ALLOC, C_MEMINFO };
enum { O_STREAM = 1, O_EVENT, O_MODULE, O_FUNCTION };
#define MAX_CALLS 32768
#define MAX_OBJS 1024
#define MAX_BLOCKS 256

typedef struct {
  int kind, alive, id;
  char name[64];          /* function: its symbol */
  int record_seq;         /* event: call index of its last record */
  int record_stream;      /* event: stream id of its last record */
} fake_obj;

typedef struct {
  int kind, stream, event, jit, attr, value;
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
} fake_block;

static struct {
  int cc_major, cc_minor, optin, ndevices;
  size_t free_bytes;
  int fail_launch_at, launches;
  int fail_jit_at; /* the JIT of this PTX module (1-based) fails, with a log */
  int jits;
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
  fk.free_bytes = (size_t)80 << 30;
}

static fake_call *log_call(int kind) {
  if (fk.ncalls == MAX_CALLS) abort();
  fake_call *c = &fk.calls[fk.ncalls++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  return c;
}

static void *new_obj(int kind, const char *name) {
  if (fk.nobjs == MAX_OBJS) abort();
  fake_obj *o = &fk.objs[fk.nobjs];
  *o = (fake_obj){kind, 1, ++fk.nobjs, "", -1, 0};
  if (name) snprintf(o->name, sizeof o->name, "%s", name);
  return o;
}
static int obj_id(const void *h) { return h ? ((const fake_obj *)h)->id : 0; }
static int kill_obj(void *h, int kind) {
  fake_obj *o = h;
  if (!o || o->kind != kind || !o->alive) return DC_CUDA_ERROR_INVALID_VALUE;
  o->alive = 0;
  return 0;
}

static int new_block(size_t bytes, int pinned, void **out) {
  if (fk.nblocks == MAX_BLOCKS) return DC_CUDA_ERROR_OUT_OF_MEMORY;
  void *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
  if (!p) return DC_CUDA_ERROR_OUT_OF_MEMORY;
  fk.blocks[fk.nblocks++] = (fake_block){p, bytes, pinned, 1};
  *out = p;
  return 0;
}
static int free_block(void *p, int pinned) {
  for (int i = 0; i < fk.nblocks; i++)
    if (fk.blocks[i].p == p && fk.blocks[i].alive && fk.blocks[i].pinned == pinned) {
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
    default: return DC_CUDA_ERROR_INVALID_VALUE;
  }
}
static int f_DevicePrimaryCtxRetain(dc_cu_context *c, dc_cu_device d) {
  fk.ctx_refs++;
  *c = (dc_cu_context)&fk;
  return 0;
}
static int f_DevicePrimaryCtxRelease(dc_cu_device d) { return fk.ctx_refs-- > 0 ? 0 : DC_CUDA_ERROR_INVALID_VALUE; }
static int f_CtxSetCurrent(dc_cu_context c) { return c == (dc_cu_context)&fk ? 0 : DC_CUDA_ERROR_INVALID_VALUE; }
static int f_MemGetInfo(size_t *free_bytes, size_t *total) {
  log_call(C_MEMINFO);
  *free_bytes = fk.free_bytes, *total = (size_t)80 << 30;
  return 0;
}
static int f_MemAlloc(dc_cu_deviceptr *p, size_t n) {
  void *h = NULL;
  if (!n || n > fk.free_bytes) return n ? DC_CUDA_ERROR_OUT_OF_MEMORY : DC_CUDA_ERROR_INVALID_VALUE;
  int r = new_block(n, 0, &h);
  *p = (uintptr_t)h;
  fake_call *c = log_call(C_ALLOC);
  c->dst = *p, c->bytes = n;
  return r;
}
static int f_MemFree(dc_cu_deviceptr p) { return free_block((void *)(uintptr_t)p, 0); }
static int f_MemHostAlloc(void **p, size_t n, unsigned flags) { return new_block(n, 1, p); }
static int f_MemFreeHost(void *p) { return free_block(p, 1); }
static int f_MemcpyHtoDAsync(dc_cu_deviceptr dst, const void *src, size_t n, dc_cu_stream s) {
  if (!inside((void *)(uintptr_t)dst, n, 0)) return DC_CUDA_ERROR_INVALID_VALUE;
  fake_call *c = log_call(C_HTOD);
  c->dst = dst, c->src = (uintptr_t)src, c->bytes = n, c->stream = obj_id(s), c->host_pinned = inside(src, n, 1);
  memcpy((void *)(uintptr_t)dst, src, n);
  return 0;
}
static int f_MemcpyDtoHAsync(void *dst, dc_cu_deviceptr src, size_t n, dc_cu_stream s) {
  if (!inside((void *)(uintptr_t)src, n, 0)) return DC_CUDA_ERROR_INVALID_VALUE;
  fake_call *c = log_call(C_DTOH);
  c->dst = (uintptr_t)dst, c->src = src, c->bytes = n, c->stream = obj_id(s), c->host_pinned = inside(dst, n, 1);
  memcpy(dst, (void *)(uintptr_t)src, n);
  return 0;
}
static int f_StreamCreate(dc_cu_stream *s, unsigned flags) {
  *s = new_obj(O_STREAM, flags == DC_CU_STREAM_NON_BLOCKING ? "non-blocking" : "blocking");
  return 0;
}
static int f_StreamDestroy(dc_cu_stream s) { return kill_obj(s, O_STREAM); }
static int f_StreamSynchronize(dc_cu_stream s) { return log_call(C_STREAMSYNC)->stream = obj_id(s), 0; }
static int f_StreamWaitEvent(dc_cu_stream s, dc_cu_event e, unsigned flags) {
  fake_call *c = log_call(C_WAIT);
  c->stream = obj_id(s), c->event = obj_id(e);
  return ((fake_obj *)e)->record_seq < 0 ? DC_CUDA_ERROR_INVALID_VALUE : 0; /* waiting on nothing recorded */
}
static int f_EventCreate(dc_cu_event *e, unsigned flags) { return *e = new_obj(O_EVENT, NULL), 0; }
static int f_EventDestroy(dc_cu_event e) { return kill_obj(e, O_EVENT); }
static int f_EventRecord(dc_cu_event e, dc_cu_stream s) {
  fake_obj *o = (fake_obj *)e;
  fake_call *c = log_call(C_RECORD);
  c->stream = obj_id(s), c->event = o->id;
  o->record_seq = fk.ncalls - 1, o->record_stream = obj_id(s);
  return 0;
}
static int f_EventSynchronize(dc_cu_event e) { return log_call(C_EVSYNC)->event = obj_id(e), 0; }
/* 1 ms per logged call between the two records: deterministic profiles. */
static int f_EventElapsedTime(float *ms, dc_cu_event a, dc_cu_event b) {
  const fake_obj *x = (const fake_obj *)a, *y = (const fake_obj *)b;
  if (x->record_seq < 0 || y->record_seq < 0) return DC_CUDA_ERROR_INVALID_VALUE;
  *ms = (float)(y->record_seq - x->record_seq);
  return 0;
}
static int f_ModuleLoadData(dc_cu_module *mod, const void *image) {
  fake_call *c = log_call(C_LOAD);
  c->image = image;
  *mod = new_obj(O_MODULE, NULL);
  return 0;
}
static int f_ModuleLoadDataEx(dc_cu_module *mod, const void *image, unsigned n, int *opts, void **vals) {
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

/* Runs the reference kernel of the kernel's node on the pointers passed. */
static int f_LaunchKernel(dc_cu_function fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned smem, dc_cu_stream s, void **params, void **extra) {
  fake_call *c = log_call(C_LAUNCH);
  const fake_obj *f = (const fake_obj *)fn;
  snprintf(c->fn, sizeof c->fn, "%s", f->name);
  c->grid[0] = gx, c->grid[1] = gy, c->grid[2] = gz, c->block[0] = bx, c->block[1] = by, c->block[2] = bz;
  c->smem = smem, c->stream = obj_id(s);
  int ki = kernel_index(f->name);
  if (ki < 0 || extra) return DC_CUDA_ERROR_INVALID_VALUE;
  const dc_node *n = &fk.m->nodes[fk.kernel_node[ki]];
  for (int i = 0; i <= n->ninputs; i++) memcpy(&c->params[i], params[i], sizeof c->params[i]);
  if (++fk.launches == fk.fail_launch_at) return DC_CUDA_ERROR_LAUNCH_FAILED;
  if (fk.execute) return fk.execute(ki, c->grid, c->block, smem, params);
  const void *in[DC_MAX_INPUTS];
  for (int i = 0; i < n->ninputs; i++) in[i] = (const void *)(uintptr_t)c->params[i + 1];
  dc_status *st = dc_ref_kernel_for(n->op)(fk.m, n, in, (void *)(uintptr_t)c->params[0]);
  if (st) dc_status_free(st);
  return st ? DC_CUDA_ERROR_LAUNCH_FAILED : 0;
}
static int f_GetErrorName(dc_cu_result r, const char **s) {
  switch (r) {
    case 0: return *s = "CUDA_SUCCESS", 0;
    case DC_CUDA_ERROR_OUT_OF_MEMORY: return *s = "CUDA_ERROR_OUT_OF_MEMORY", 0;
    case DC_CUDA_ERROR_LAUNCH_FAILED: return *s = "CUDA_ERROR_LAUNCH_FAILED", 0;
    case DC_CUDA_ERROR_INVALID_PTX: return *s = "CUDA_ERROR_INVALID_PTX", 0;
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
