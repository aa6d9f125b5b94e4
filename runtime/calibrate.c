/* calibrate.c — diffrun --calibrate: measures this machine and writes the
 * calibration profile that diffc's cost model reads (docs/ARCHITECTURE.md,
 * "The cost model"; the format is the README's "Calibrating the cost
 * model").
 *
 * Kernel rates come from the plan itself: random inputs, one warm-up run,
 * then `runs` runs with per-step timing (drt_set_profiling).  Every kernel
 * step falls in one class of ir/flops.c (dc_node_cost_class) and is modelled
 * as t = overhead + work / rate, work being its flops (conv3x3, conv,
 * linear, attention) or the bytes it moves (memory, dc_node_traffic_bytes),
 * the same definitions the cost model predicts with.  The overhead is the
 * median time of the tenth of the memory-class steps that move the fewest
 * bytes, unless those move too much to show it (fit_overhead says what
 * then).  Each class's rate is then
 * its summed work over its summed time less one overhead per step; where the
 * overhead would eat more than nine tenths of a class's time (a class of
 * only tiny steps) a tenth of the time is kept as work time, so the rate
 * stays finite and the prediction for those steps stays near what was
 * measured.  Upload and transfer steps are the copy stream's, not kernels;
 * inputs and weights run nothing.
 *
 * Copy bandwidths are measured directly, not from the plan: host to device
 * (CPU: memcpy between two buffers of copy_bytes, as the CPU copy stream
 * copies; CUDA: cuMemcpyHtoDAsync from pinned memory), disk (a temporary
 * file written, flushed and dropped from the page cache, then read back with
 * pread in 4 MiB chunks as on-demand uploads read), device to device (CUDA
 * peer copies with two devices or more; on the CPU a transfer is a memcpy,
 * so the host-to-device figure).  The profile says which were measured. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "calibrate.h"
#include "diffrun.h"
#include "session.h"

#define DEFAULT_RUNS 3
#define DEFAULT_COPY_BYTES ((uint64_t)256 << 20)
#define COPY_REPS 5
#define DISK_CHUNK ((uint64_t)4 << 20) /* as on-demand uploads read (DC_CPU_BOUNCE_BYTES) */
#define DISK_MIN_BYTES ((uint64_t)16 << 20)
/* Defaults for what cannot be measured here.  Disk: a SATA SSD's sequential
 * read (~0.5 GB/s), the slow end of what holds model weights.  CUDA d2d with
 * one device (no transfers can occur): H200 NVLink 4, 450 GB/s per
 * direction (NVIDIA H200 datasheet: 900 GB/s bidirectional), at 80%. */
#define DEFAULT_DISK_GBPS 0.5
#define DEFAULT_CUDA_D2D_GBPS 360.0

/* ---- kernel rates ---- */
typedef struct {
  int32_t step;
  double seconds; /* per run */
  uint64_t traffic;
} step_time;

static int by_traffic(const void *a, const void *b) {
  uint64_t x = ((const step_time *)a)->traffic, y = ((const step_time *)b)->traffic;
  return x < y ? -1 : x > y;
}
static int by_seconds(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int is_kernel(dc_cost_class c) { return c != DC_COST_COPY && c != DC_COST_NONE; }

/* Below this many bytes per step a step's time shows its fixed cost; the
 * smallest steps of a plan of large tensors (a VAE at 512², 16 MiB at
 * least) show transfer time only. */
#define OVERHEAD_VISIBLE_BYTES ((uint64_t)1 << 20)
/* The cost model's built-in figures (passes/cost_model.c), for a plan whose
 * steps cannot show the fixed cost: the CPU's dispatch, a CUDA launch. */
#define CPU_DEFAULT_OVERHEAD_S 2e-6
#define CUDA_DEFAULT_OVERHEAD_S 5e-6

/* The fixed cost of a step.  An upper bound is the median time of the tenth
 * (at least one) of the memory-class steps with the least traffic (of all
 * kernel steps when the plan has no memory step): those are as close to
 * "no work" as the plan gets.  When those steps move little
 * (OVERHEAD_VISIBLE_BYTES) the bound is the estimate (a slight
 * over-estimate: they still move bytes).  Otherwise their time is transfer,
 * and no fit of time against traffic separates the two when ops of one
 * class move bytes at different rates (a reshape at 45 GB/s, a group_norm
 * at 20): the cost model's built-in figure is taken (capped at the bound),
 * and *note says so. */
static dc_status *fit_overhead(const dc_module *m, const double *per_run, int cuda, double *overhead, char *note,
                               size_t cap) {
  step_time *c = dc_calloc((size_t)m->nnodes + 1, sizeof *c);
  double *t = dc_calloc((size_t)m->nnodes + 1, sizeof *t);
  if (!c || !t) {
    dc_free(c), dc_free(t);
    return dc_nomem("fitting the step overhead");
  }
  int n = 0, any_memory = 0;
  for (int32_t s = 0; s < m->nnodes; s++) any_memory |= dc_node_cost_class(m, s) == DC_COST_MEMORY;
  for (int32_t s = 0; s < m->nnodes; s++) {
    dc_cost_class k = dc_node_cost_class(m, s);
    if (any_memory ? k == DC_COST_MEMORY : is_kernel(k))
      c[n++] = (step_time){s, per_run[s], dc_node_traffic_bytes(m, s)};
  }
  int take = n / 10 > 0 ? n / 10 : 1;
  if (take > n) take = n;
  qsort(c, (size_t)n, sizeof *c, by_traffic);
  for (int i = 0; i < take; i++) t[i] = c[i].seconds;
  qsort(t, (size_t)take, sizeof *t, by_seconds);
  double bound = n ? t[take / 2] : 0;
  uint64_t small = n ? c[take / 2].traffic : 0;
  note[0] = 0;
  *overhead = bound;
  if (n && small > OVERHEAD_VISIBLE_BYTES) {
    double d = cuda ? CUDA_DEFAULT_OVERHEAD_S : CPU_DEFAULT_OVERHEAD_S;
    *overhead = d < bound ? d : bound;
    snprintf(note, cap, "the plan's smallest steps move %llu bytes, too many to show the fixed cost: the built-in "
             "%.0f us", (unsigned long long)small, d * 1e6);
  }
  dc_free(c), dc_free(t);
  return NULL;
}

static dc_status *fit_classes(const dc_module *m, const double *per_run, double overhead, drt_calibration *out) {
  double seconds[DC_COST_CLASSES] = {0}, work[DC_COST_CLASSES] = {0};
  int steps[DC_COST_CLASSES] = {0};
  for (int32_t s = 0; s < m->nnodes; s++) {
    dc_cost_class k = dc_node_cost_class(m, s);
    if (!is_kernel(k)) continue;
    steps[k]++;
    seconds[k] += per_run[s];
    work[k] += (double)(k == DC_COST_MEMORY ? dc_node_traffic_bytes(m, s) : dc_node_flops(m, s));
  }
  out->nclasses = 0;
  for (int k = 0; k < DC_COST_MEMORY + 1; k++) {
    if (!steps[k]) continue;
    double busy = seconds[k] - steps[k] * overhead;
    if (busy < 0.1 * seconds[k]) busy = 0.1 * seconds[k];
    double rate = work[k] / busy / 1e9;
    if (!(rate > 0) || !isfinite(rate))
      return dc_error(DC_ERR_INTERNAL, "%s: class %s: %d steps, %.3g s, work %.3g: no rate can be fitted",
                      "calibration", dc_cost_class_name((dc_cost_class)k), steps[k], seconds[k], work[k]);
    out->classes[out->nclasses++] =
        (drt_class_rate){dc_cost_class_name((dc_cost_class)k), steps[k], seconds[k], work[k], rate};
  }
  return NULL;
}

static dc_status *measure_kernels(drt_plan *p, int runs, drt_calibration *out) {
  const dc_module *m = drt_plan_module(p);
  drt_stats s;
  drt_set_random_inputs(p, 0);
  DC_TRY(drt_run(p, &s)); /* warm-up: first touches, caches, lazily bound kernels */
  DC_TRY(drt_set_profiling(p, 1));
  double total = 0;
  dc_status *st = NULL;
  for (int r = 0; r < runs && !st; r++) {
    st = drt_run(p, &s);
    total += s.kernel_seconds;
  }
  double *per_run = st ? NULL : dc_calloc((size_t)m->nnodes + 1, sizeof *per_run);
  if (!st && !per_run) st = dc_nomem("calibrating");
  for (int32_t i = 0; !st && i < m->nnodes; i++) per_run[i] = drt_step_seconds(p, i) / runs;
  double overhead = 0;
  if (!st) st = fit_overhead(m, per_run, !strcmp(out->target, "cuda"), &overhead, out->overhead_note,
                            sizeof out->overhead_note);
  if (!st) st = fit_classes(m, per_run, overhead, out);
  dc_free(per_run);
  drt_set_profiling(p, 0);
  DC_TRY(st);
  out->runs = runs;
  out->run_seconds = total / runs;
  out->overhead_us = overhead * 1e6;
  out->threads = s.threads;
  out->backend = s.backend;
  return NULL;
}

/* ---- copy bandwidths ---- */
static uint64_t rounded_chunks(uint64_t bytes) { return bytes < DISK_CHUNK ? bytes : bytes / DISK_CHUNK * DISK_CHUNK; }

/* memcpy between two separate buffers of `bytes`, both touched first, best
 * of COPY_REPS: what the CPU copy stream does for an upload. */
static dc_status *memcpy_gbps(uint64_t bytes, double *gbps) {
  uint8_t *a = dc_malloc((size_t)bytes), *b = dc_malloc((size_t)bytes);
  if (!a || !b) {
    dc_free(a), dc_free(b);
    return dc_nomem("the copy bandwidth measurement's buffers");
  }
  memset(a, 1, (size_t)bytes);
  memset(b, 2, (size_t)bytes);
  double best = INFINITY;
  for (int r = 0; r < COPY_REPS; r++) {
    double t0 = dc_now_seconds();
    memcpy(b, a, (size_t)bytes);
    double t = dc_now_seconds() - t0;
    if (t < best) best = t;
    a[r] = b[(size_t)bytes - 1 - (size_t)r]; /* a use of b, so the copy stays */
  }
  dc_free(a), dc_free(b);
  *gbps = (double)bytes / (best > 1e-9 ? best : 1e-9) / 1e9;
  return NULL;
}

/* One pass reading path back in DISK_CHUNK preads, after dropping its
 * pages from the page cache. */
static dc_status *read_back(int fd, const char *path, uint64_t bytes, uint8_t *buf, double *seconds) {
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  double t0 = dc_now_seconds();
  for (uint64_t at = 0; at < bytes;) {
    ssize_t got = pread(fd, buf, (size_t)(bytes - at < DISK_CHUNK ? bytes - at : DISK_CHUNK), (off_t)at);
    if (got <= 0)
      return dc_error(DC_ERR_IO, "%s: reading back the disk measurement's file at byte %llu: %s", path,
                      (unsigned long long)at, got < 0 ? strerror(errno) : "unexpected end of file");
    at += (uint64_t)got;
  }
  *seconds = dc_now_seconds() - t0;
  return NULL;
}

static dc_status *write_and_time(int fd, const char *path, uint64_t bytes, uint8_t *buf, double *gbps) {
  for (uint64_t at = 0; at < bytes;) {
    for (size_t i = 0; i < DISK_CHUNK; i += 4096) buf[i] = (uint8_t)(at >> 12) ^ (uint8_t)i; /* no two chunks alike */
    ssize_t put = pwrite(fd, buf, (size_t)(bytes - at < DISK_CHUNK ? bytes - at : DISK_CHUNK), (off_t)at);
    if (put <= 0)
      return dc_error(DC_ERR_IO, "%s: writing the disk measurement's file at byte %llu: %s", path,
                      (unsigned long long)at, put < 0 ? strerror(errno) : "nothing written");
    at += (uint64_t)put;
  }
  if (fdatasync(fd) != 0) return dc_error(DC_ERR_IO, "%s: fdatasync: %s", path, strerror(errno));
  double best = INFINITY, t = 0;
  for (int r = 0; r < 2; r++) {
    DC_TRY(read_back(fd, path, bytes, buf, &t));
    if (t < best) best = t;
  }
  *gbps = (double)bytes / (best > 1e-9 ? best : 1e-9) / 1e9;
  return NULL;
}

/* The folder the disk file goes in: the caller's, else the cache root
 * (where offload-dir files default to living beside), else $TMPDIR, /tmp. */
static char *scratch_dir(const char *asked) {
  if (asked) return dc_strdup(asked);
  char *root = dc_cache_root_dir();
  if (root && dc_make_dirs(root) == 0) return root;
  dc_free(root);
  const char *t = getenv("TMPDIR");
  return dc_strdup(t && *t ? t : "/tmp");
}

/* Disk read bandwidth; not measured (a note says why) when the folder has
 * less than DISK_MIN_BYTES to spare.  The file is at most a quarter of the
 * free space. */
static dc_status *disk_gbps(const char *asked_dir, uint64_t bytes, drt_calibration *out) {
  char *dir = scratch_dir(asked_dir);
  if (!dir) return dc_nomem("the disk measurement");
  struct statvfs fs;
  if (statvfs(dir, &fs) != 0) {
    dc_status *st = dc_error(DC_ERR_IO, "%s: cannot measure disk reads there: %s", dir, strerror(errno));
    dc_free(dir);
    return st;
  }
  uint64_t room = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize / 4;
  if (room < (bytes < DISK_MIN_BYTES ? bytes : DISK_MIN_BYTES)) {
    snprintf(out->copy_note + strlen(out->copy_note), sizeof out->copy_note - strlen(out->copy_note),
             "%sdisk_gbps: %s has too little free space to measure", out->copy_note[0] ? "; " : "", dir);
    dc_free(dir);
    return NULL;
  }
  if (bytes > room) bytes = rounded_chunks(room);
  char *path = dc_asprintf("%s/diffc-calibrate.%ld.tmp", dir, (long)getpid());
  uint8_t *buf = dc_malloc((size_t)DISK_CHUNK);
  dc_status *st = NULL;
  int fd = -1;
  if (!path || !buf) st = dc_nomem("the disk measurement");
  else if ((fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
    st = dc_error(DC_ERR_IO, "%s: cannot create the disk measurement's file: %s (set TMPDIR to a writable folder)",
                  path, strerror(errno));
  if (!st) st = write_and_time(fd, path, bytes, buf, &out->disk_gbps);
  if (fd >= 0) close(fd), unlink(path);
  if (!st) out->disk_measured = 1;
  dc_free(path), dc_free(buf), dc_free(dir);
  return st;
}

/* ---- CUDA ---- */
typedef struct {
  dc_cu_api api; /* CU() reaches the table through ->api */
} cu_ref;

dc_status *drt_cuda_h2d_gbps(const dc_cu_api *api, int device, uint64_t bytes, int reps, double *gbps) {
  cu_ref b = {*api};
  dc_cu_device dev;
  dc_cu_context ctx = NULL;
  void *host = NULL;
  dc_cu_deviceptr dptr = 0;
  dc_cu_stream stream = NULL;
  dc_cu_event ev[2] = {NULL, NULL};
  double best = INFINITY;
  dc_status *st = CU(&b, Init, 0);
  if (!st) st = CU(&b, DeviceGet, &dev, device);
  if (!st) st = CU(&b, DevicePrimaryCtxRetain, &ctx, dev);
  if (!st) st = CU(&b, CtxSetCurrent, ctx);
  if (!st) st = CU(&b, MemHostAlloc, &host, (size_t)bytes, 0);
  if (!st) memset(host, 1, (size_t)bytes);
  if (!st) st = CU(&b, MemAlloc, &dptr, (size_t)bytes);
  if (!st) st = CU(&b, StreamCreate, &stream, DC_CU_STREAM_NON_BLOCKING);
  for (int i = 0; i < 2 && !st; i++) st = CU(&b, EventCreate, &ev[i], DC_CU_EVENT_DEFAULT);
  for (int r = 0; r < reps && !st; r++) {
    float ms = 0;
    st = CU(&b, EventRecord, ev[0], stream);
    if (!st) st = CU(&b, MemcpyHtoDAsync, dptr, host, (size_t)bytes, stream);
    if (!st) st = CU(&b, EventRecord, ev[1], stream);
    if (!st) st = CU(&b, EventSynchronize, ev[1]);
    if (!st) st = CU(&b, EventElapsedTime, &ms, ev[0], ev[1]);
    if (!st && ms > 0 && ms * 1e-3 < best) best = ms * 1e-3;
  }
  /* freed in the context they were made in, whatever failed */
  for (int i = 0; i < 2; i++)
    if (ev[i]) api->EventDestroy(ev[i]);
  if (stream) api->StreamDestroy(stream);
  if (dptr) api->MemFree(dptr);
  if (host) api->MemFreeHost(host);
  if (ctx) api->DevicePrimaryCtxRelease(dev);
  if (!st && !isfinite(best))
    st = dc_error(DC_ERR_IO, "CUDA device %d: the host-to-device copies timed at 0 ms: no bandwidth measured", device);
  if (!st) *gbps = (double)bytes / best / 1e9;
  return dc_status_annotate(st, "measuring host-to-device bandwidth");
}

/* A buffer of `bytes` on device d, made in its context. */
static dc_status *peer_buffer(cu_ref *b, dc_cu_context ctx, uint64_t bytes, dc_cu_deviceptr *out) {
  DC_TRY(CU(b, CtxSetCurrent, ctx));
  return CU(b, MemAlloc, out, (size_t)bytes);
}

/* Peer access from the current context to peer's, as the runtime's
 * transfers ask for it (already enabled is fine). */
static dc_status *enable_peer(cu_ref *b, dc_cu_device from, dc_cu_device to, dc_cu_context peer) {
  int can = 0;
  DC_TRY(CU(b, DeviceCanAccessPeer, &can, from, to));
  if (!can) return NULL;
  dc_cu_result r = b->api.CtxEnablePeerAccess(peer, 0);
  return r == DC_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED ? NULL : dc_cu_check(&b->api, r, "cuCtxEnablePeerAccess");
}

dc_status *drt_cuda_d2d_gbps(const dc_cu_api *api, int device, uint64_t bytes, int reps, double *gbps, int *measured) {
  cu_ref b = {*api};
  int count = 0;
  *measured = 0;
  DC_TRY(CU(&b, Init, 0));
  DC_TRY(CU(&b, DeviceGetCount, &count));
  if (count < 2) return NULL;
  dc_cu_device dev[2] = {0, 0};
  dc_cu_context ctx[2] = {NULL, NULL};
  dc_cu_deviceptr buf[2] = {0, 0};
  dc_cu_stream stream = NULL;
  dc_cu_event ev[2] = {NULL, NULL};
  double best = INFINITY;
  dc_status *st = NULL;
  for (int i = 0; i < 2 && !st; i++) {
    st = CU(&b, DeviceGet, &dev[i], (device + i) % count);
    if (!st) st = CU(&b, DevicePrimaryCtxRetain, &ctx[i], dev[i]);
    if (!st) st = peer_buffer(&b, ctx[i], bytes, &buf[i]);
  }
  /* the copy runs on a stream of the source's context, reading device[0] */
  if (!st) st = CU(&b, CtxSetCurrent, ctx[0]);
  if (!st) st = enable_peer(&b, dev[0], dev[1], ctx[1]);
  if (!st) st = CU(&b, StreamCreate, &stream, DC_CU_STREAM_NON_BLOCKING);
  for (int i = 0; i < 2 && !st; i++) st = CU(&b, EventCreate, &ev[i], DC_CU_EVENT_DEFAULT);
  for (int r = 0; r < reps && !st; r++) {
    float ms = 0;
    st = CU(&b, EventRecord, ev[0], stream);
    if (!st) st = CU(&b, MemcpyPeerAsync, buf[1], ctx[1], buf[0], ctx[0], (size_t)bytes, stream);
    if (!st) st = CU(&b, EventRecord, ev[1], stream);
    if (!st) st = CU(&b, EventSynchronize, ev[1]);
    if (!st) st = CU(&b, EventElapsedTime, &ms, ev[0], ev[1]);
    if (!st && ms > 0 && ms * 1e-3 < best) best = ms * 1e-3;
  }
  if (ctx[0]) api->CtxSetCurrent(ctx[0]);
  for (int i = 0; i < 2; i++)
    if (ev[i]) api->EventDestroy(ev[i]);
  if (stream) api->StreamDestroy(stream);
  for (int i = 1; i >= 0; i--) { /* each buffer freed in its own context */
    if (!buf[i]) continue;
    api->CtxSetCurrent(ctx[i]);
    api->MemFree(buf[i]);
  }
  for (int i = 0; i < 2; i++)
    if (ctx[i]) api->DevicePrimaryCtxRelease(dev[i]);
  if (!st && !isfinite(best))
    st = dc_error(DC_ERR_IO, "CUDA devices %d and %d: the peer copies timed at 0 ms: no bandwidth measured", device,
                  (device + 1) % count);
  if (!st) *gbps = (double)bytes / best / 1e9, *measured = 1;
  return dc_status_annotate(st, "measuring device-to-device bandwidth");
}

static dc_status *measure_copies(drt_plan *p, const drt_calibrate_options *opt, uint64_t bytes, drt_calibration *out) {
  if (!strcmp(out->target, "cuda")) {
    dc_cu_api api;
    DC_TRY(dc_cu_api_open(NULL, &api));
    int device = drt_plan_device(p);
    dc_status *st = drt_cuda_h2d_gbps(&api, device, bytes, COPY_REPS, &out->h2d_gbps);
    if (!st) st = drt_cuda_d2d_gbps(&api, device, bytes, COPY_REPS, &out->d2d_gbps, &out->d2d_measured);
    dc_cu_api_unload(&api);
    DC_TRY(st);
    out->h2d_measured = 1;
    if (!out->d2d_measured) {
      out->d2d_gbps = DEFAULT_CUDA_D2D_GBPS;
      snprintf(out->copy_note, sizeof out->copy_note, "d2d_gbps: one CUDA device, no peer copies to time");
    }
  } else { /* the CPU's copy stream and its transfers are both memcpy */
    DC_TRY(memcpy_gbps(bytes, &out->h2d_gbps));
    out->d2d_gbps = out->h2d_gbps;
    out->h2d_measured = out->d2d_measured = 1;
  }
  DC_TRY(disk_gbps(opt->scratch_dir, bytes, out));
  if (!out->disk_measured) out->disk_gbps = DEFAULT_DISK_GBPS;
  return NULL;
}

/* ---- the device's name ---- */
/* "model name" of /proc/cpuinfo and which of the flags that matter to the
 * kernels it has. */
static void cpu_name(char *buf, size_t cap) {
  static const char *const wanted[] = {"avx512f", "avx2", "fma"};
  snprintf(buf, cap, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[8192], model[200] = "", flags[64] = "";
  int have_model = 0, have_flags = 0;
  while ((!have_model || !have_flags) && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    char *v = colon + 1 + (colon[1] == ' ');
    v[strcspn(v, "\n")] = 0;
    if (!have_model && !strncmp(line, "model name", 10)) {
      snprintf(model, sizeof model, "%s", v);
      have_model = 1;
    } else if (!have_flags && !strncmp(line, "flags", 5)) {
      have_flags = 1;
      for (size_t i = 0; i < sizeof wanted / sizeof *wanted; i++) {
        char key[32];
        snprintf(key, sizeof key, " %s ", wanted[i]);
        char padded[8200];
        snprintf(padded, sizeof padded, " %s ", v);
        if (strstr(padded, key))
          snprintf(flags + strlen(flags), sizeof flags - strlen(flags), "%s%s", flags[0] ? " " : "", wanted[i]);
      }
    }
  }
  fclose(f);
  if (have_model) snprintf(buf, cap, "%s (%s)", model, flags[0] ? flags : "no avx2/avx512f/fma");
}

/* ---- the profile ---- */
dc_status *drt_calibration_default_path(const char *target, char **out) {
  *out = NULL;
  char *root = dc_cache_root_dir();
  if (!root)
    return dc_error(DC_ERR_ARGUMENT, "no place for the calibration profile: none of DIFFC_CACHE_DIR, XDG_CACHE_HOME, "
                    "HOME is set (name a file with --calibrate=FILE)");
  int err = dc_make_dirs(root);
  dc_status *st = err ? dc_error(DC_ERR_IO, "%s: cannot create the cache folder for the calibration profile: %s",
                                 root, strerror(err))
                      : NULL;
  if (!st && !(*out = dc_asprintf("%s/calibration-%s.json", root, target))) st = dc_nomem("the profile's path");
  dc_free(root);
  return st;
}

/* Numbers kept to 6 significant digits: measured rates carry no more. */
static cJSON *add_number(cJSON *o, const char *key, double v) {
  char s[32];
  snprintf(s, sizeof s, "%.6g", v);
  return cJSON_AddNumberToObject(o, key, strtod(s, NULL));
}

static cJSON *profile_json(const drt_plan *p, const drt_calibration *c) {
  cJSON *j = cJSON_CreateObject(), *classes, *copy, *measured;
  char when[32];
  time_t now = time(NULL);
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  const char *model = drt_meta(p, "class");
  cJSON_AddStringToObject(j, "format", "diffc-calibration");
  cJSON_AddNumberToObject(j, "version", 1);
  cJSON_AddStringToObject(j, "target", c->target);
  cJSON_AddStringToObject(j, "backend", c->backend);
  cJSON_AddStringToObject(j, "device", c->device);
  cJSON_AddNumberToObject(j, "threads", c->threads);
  cJSON_AddStringToObject(j, "plan", drt_plan_path(p));
  if (model) cJSON_AddStringToObject(j, "model", model);
  cJSON_AddStringToObject(j, "created", when);
  cJSON_AddNumberToObject(j, "runs", c->runs);
  add_number(j, "run_seconds", c->run_seconds);
  add_number(j, "overhead_us", c->overhead_us);
  if (c->overhead_note[0]) cJSON_AddStringToObject(j, "overhead_note", c->overhead_note);
  cJSON_AddItemToObject(j, "classes", classes = cJSON_CreateObject());
  for (int i = 0; i < c->nclasses; i++) {
    const drt_class_rate *r = &c->classes[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(classes, r->name, o);
    add_number(o, strcmp(r->name, "memory") ? "gflops" : "gbps", r->rate);
    cJSON_AddNumberToObject(o, "steps", r->steps);
    add_number(o, "seconds", r->seconds);
  }
  cJSON_AddItemToObject(j, "copy", copy = cJSON_CreateObject());
  add_number(copy, "h2d_gbps", c->h2d_gbps);
  add_number(copy, "disk_gbps", c->disk_gbps);
  add_number(copy, "d2d_gbps", c->d2d_gbps);
  cJSON_AddItemToObject(copy, "measured", measured = cJSON_CreateObject());
  cJSON_AddBoolToObject(measured, "h2d_gbps", c->h2d_measured);
  cJSON_AddBoolToObject(measured, "disk_gbps", c->disk_measured);
  cJSON_AddBoolToObject(measured, "d2d_gbps", c->d2d_measured);
  if (c->copy_note[0]) cJSON_AddStringToObject(copy, "note", c->copy_note);
  return j;
}

/* The profile's path: the caller's, or the default (its folder made). */
static dc_status *profile_path(const drt_calibrate_options *opt, drt_calibration *out) {
  char *path = NULL;
  if (opt->output) path = dc_strdup(opt->output);
  else DC_TRY(drt_calibration_default_path(out->target, &path));
  if (!path) return dc_nomem("the profile's path");
  dc_status *st = strlen(path) < sizeof out->path ? NULL
                  : dc_error(DC_ERR_ARGUMENT, "%.200s...: the profile's path is longer than %zu bytes", path,
                             sizeof out->path - 1);
  if (!st) snprintf(out->path, sizeof out->path, "%s", path);
  dc_free(path);
  return st;
}

static dc_status *measure(drt_plan *p, const drt_calibrate_options *opt, drt_calibration *out) {
  DC_TRY(measure_kernels(p, opt->runs > 0 ? opt->runs : DEFAULT_RUNS, out));
  DC_TRY(measure_copies(p, opt, opt->copy_bytes ? opt->copy_bytes : DEFAULT_COPY_BYTES, out));
  if (!strcmp(out->target, "cuda")) snprintf(out->device, sizeof out->device, "%s", drt_info(p)->device);
  else cpu_name(out->device, sizeof out->device);
  return NULL;
}

dc_status *drt_calibrate(drt_plan *p, const drt_calibrate_options *options, drt_calibration *out) {
  drt_calibrate_options opt = options ? *options : (drt_calibrate_options){0};
  memset(out, 0, sizeof *out);
  out->target = drt_info(p)->target;
  DC_TRY(profile_path(&opt, out));
  /* opened first: a profile that cannot be written fails before minutes of
   * measuring; the temporary goes away whatever fails after */
  dc_atomic_file f;
  DC_TRY(dc_atomic_open(out->path, &f));
  dc_status *st = measure(p, &opt, out);
  cJSON *j = st ? NULL : profile_json(p, out);
  char *text = j ? cJSON_Print(j) : NULL;
  cJSON_Delete(j);
  if (!st && !text) st = dc_nomem("the calibration profile");
  if (st) {
    dc_atomic_abort(&f);
    cJSON_free(text);
    return st;
  }
  dc_atomic_write(&f, text, strlen(text));
  dc_atomic_write(&f, "\n", 1);
  cJSON_free(text);
  return dc_atomic_commit(&f);
}
