/* cuda_bandwidth — how fast bytes cross between host and GPU: host-to-device
 * from pinned (cuMemHostAlloc) and from pageable (malloc) memory, and
 * device-to-host into both, best of N copies of one size.  This bounds what
 * an offloaded plan can stream per step (docs/ARCHITECTURE.md: a step cannot beat
 * streamed bytes / host-to-device bandwidth).  Uses the same dlopen'd driver
 * table as diffrun. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_driver.h"

static const char usage[] =
    "usage: cuda_bandwidth [options]\n"
    "\n"
    "Measures host<->device copy bandwidth on an NVIDIA GPU: host-to-device from pinned and from\n"
    "pageable memory, and device-to-host into both (cuMemcpy*Async on a non-blocking stream, then a\n"
    "synchronise; wall time).  Prints the best of N copies in GB/s (10^9 bytes per second).\n"
    "\n"
    "options:\n"
    "  --size N[K|M|G]   bytes per copy (K/M/G: binary multiples; default 1G)\n"
    "  --repeat N        copies per direction and kind; the best counts (default 5)\n"
    "  --device N        CUDA device (default 0)\n"
    "  -h, --help        this help\n";

typedef struct {
  uint64_t size;
  int repeat, device;
} options;

static dc_status *parse_size(const char *v, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, end++;
  else if (*end == 'M' || *end == 'm') shift = 20, end++;
  else if (*end == 'G' || *end == 'g') shift = 30, end++;
  if (!*v || *v == '-' || *end || errno || x == 0 || x > (UINT64_C(1) << 40) >> shift)
    return dc_error(DC_ERR_ARGUMENT, "--size %s: expected a positive byte count such as 1G, 256M or 4096", v);
  *out = (uint64_t)x << shift;
  return NULL;
}

static dc_status *parse_count(const char *opt, const char *v, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return dc_error(DC_ERR_ARGUMENT, "%s %s: expected an integer in [%ld, %ld]", opt, v, lo, hi);
  *out = (int)x;
  return NULL;
}

static dc_status *parse_args(int argc, char **argv, options *o, int *exit_now) {
  *o = (options){(uint64_t)1 << 30, 5, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return *exit_now = 1, NULL;
    }
    if (strcmp(a, "--size") != 0 && strcmp(a, "--repeat") != 0 && strcmp(a, "--device") != 0)
      return dc_error(DC_ERR_ARGUMENT, "unknown argument %s (see cuda_bandwidth --help)", a);
    if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see cuda_bandwidth --help)", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--size")) DC_TRY(parse_size(v, &o->size));
    else if (!strcmp(a, "--repeat")) DC_TRY(parse_count(a, v, 1, 1000, &o->repeat));
    else DC_TRY(parse_count(a, v, 0, 1024, &o->device));
  }
  return NULL;
}

/* Everything one measurement holds; released by release(). */
typedef struct {
  dc_cu_api api;
  dc_cu_device dev;
  int ctx_retained;
  dc_cu_context ctx;
  dc_cu_stream stream;
  dc_cu_deviceptr dbuf;
  void *pinned, *pageable;
  char name[256];
} bench;


static dc_status *setup(bench *b, const options *o) {
  int count = 0;
  DC_TRY(CU(b, Init, 0));
  DC_TRY(CU(b, DeviceGetCount, &count));
  if (o->device >= count)
    return dc_error(DC_ERR_ARGUMENT, "--device %d: this machine has %d CUDA device(s)", o->device, count);
  DC_TRY(CU(b, DeviceGet, &b->dev, o->device));
  DC_TRY(CU(b, DeviceGetName, b->name, (int)sizeof b->name - 1, b->dev));
  DC_TRY(CU(b, DevicePrimaryCtxRetain, &b->ctx, b->dev));
  b->ctx_retained = 1;
  DC_TRY(CU(b, CtxSetCurrent, b->ctx));
  DC_TRY(CU(b, StreamCreate, &b->stream, DC_CU_STREAM_NON_BLOCKING));
  DC_TRY(dc_status_annotate(CU(b, MemAlloc, &b->dbuf, o->size), "device buffer of %llu bytes",
                            (unsigned long long)o->size));
  DC_TRY(dc_status_annotate(CU(b, MemHostAlloc, &b->pinned, o->size, DC_CU_MEMHOSTALLOC_PORTABLE),
                            "pinned buffer of %llu bytes", (unsigned long long)o->size));
  b->pageable = dc_malloc(o->size);
  if (!b->pageable) return dc_nomem("allocating the pageable buffer");
  /* Touch every page first, so the copies do not time page faults. */
  memset(b->pinned, 1, o->size);
  memset(b->pageable, 1, o->size);
  return NULL;
}

static void release(bench *b) {
  if (b->stream) b->api.StreamSynchronize(b->stream);
  if (b->dbuf) b->api.MemFree(b->dbuf);
  if (b->pinned) b->api.MemFreeHost(b->pinned);
  if (b->stream) b->api.StreamDestroy(b->stream);
  if (b->ctx_retained) b->api.DevicePrimaryCtxRelease(b->dev);
  dc_free(b->pageable);
  dc_cu_api_unload(&b->api);
}

/* Best of o->repeat copies, in seconds. */
static dc_status *time_copy(bench *b, const options *o, int to_device, void *host, double *best) {
  *best = 1e30;
  for (int r = 0; r < o->repeat; r++) {
    double t0 = dc_now_seconds();
    if (to_device) DC_TRY(CU(b, MemcpyHtoDAsync, b->dbuf, host, o->size, b->stream));
    else DC_TRY(CU(b, MemcpyDtoHAsync, host, b->dbuf, o->size, b->stream));
    DC_TRY(CU(b, StreamSynchronize, b->stream));
    double t = dc_now_seconds() - t0;
    if (t < *best) *best = t;
  }
  return NULL;
}

static dc_status *measure(bench *b, const options *o) {
  DC_TRY(setup(b, o));
  char sz[32];
  printf("device %d: %s; %s per copy, best of %d\n", o->device, b->name, dc_format_bytes(o->size, sz, sizeof sz),
         o->repeat);
  static const struct {
    const char *what;
    int to_device, pinned;
  } cases[] = {{"host -> device, pinned  ", 1, 1},
               {"host -> device, pageable", 1, 0},
               {"device -> host, pinned  ", 0, 1},
               {"device -> host, pageable", 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double t;
    DC_TRY(time_copy(b, o, cases[i].to_device, cases[i].pinned ? b->pinned : b->pageable, &t));
    printf("%s  %7.2f GB/s  (%.2f ms)\n", cases[i].what, (double)o->size / t * 1e-9, t * 1e3);
  }
  return NULL;
}

int main(int argc, char **argv) {
  options o;
  int exit_now = 0;
  dc_status *st = parse_args(argc, argv, &o, &exit_now);
  if (!st && !exit_now) {
    bench b;
    memset(&b, 0, sizeof b);
    st = dc_cu_api_open(NULL, &b.api);
    if (!st) {
      st = measure(&b, &o);
      release(&b);
    }
  }
  if (st) {
    fprintf(stderr, "cuda_bandwidth: error: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 1;
  }
  return 0;
}
