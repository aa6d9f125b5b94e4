/* cuda_microbench — one op at one shape on the GPU, as diffc compiles it
 * (tools/microbench.h: the one-op IR module, the pass pipeline, the CUDA
 * generators and NVRTC, a plan run by the runtime's CUDA backend; the op's
 * own step timed with the runtime's per-step CUDA events after warm-up
 * runs).  The median and the best of N runs give TFLOP/s (ir/flops.c's
 * count) and the share of a peak.  A step's time runs from the event before
 * it (the run's start, recorded once the inputs are on the device) to the
 * one after it; at these shapes the host has queued the launch long before
 * the input copies end, so it is the kernel's time, not the host's launch
 * latency.
 *
 * Each case prints one line that tools/gpu_check_bench.sh reads and
 * bench/gpu_torch.py writes alike:
 *   BENCH impl=diffc case=conv3x3_nhwc shape=2x640x64x64x640 compute=bf16 act=f32
 *         median_ms=1.234 min_ms=1.201 tflops=123.4 pct_peak=12.5 status=ok
 * status is free text and comes last ("ok", "no GPU", "FAIL: why", ...).
 * Every case is compiled before any is timed; without a GPU the rows say
 * "no GPU" and the exit status is 77. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "microbench.h"
#include "runtime/cuda_driver.h"

static const char usage[] =
    "usage: cuda_microbench --op conv|linear|attention --shape DIMS [options]\n"
    "       cuda_microbench --all [options]\n"
    "\n"
    "Times one op as diffc compiles it for CUDA: a one-op IR module (random weights stored in the compute\n"
    "dtype), the pass pipeline, the generated kernel compiled by NVRTC, run by the CUDA backend with random\n"
    "inputs.  The op's own step is timed with CUDA events after warm-up runs; prints the median and the best\n"
    "time, TFLOP/s (2 flops per multiply-add) and the share of --peak, one BENCH line per case.\n"
    "Without a GPU it compiles every case, prints \"no GPU\" rows and exits 77.\n"
    "\n"
    "  --op conv|linear|attention   the op (conv: 3x3, stride 1, padding 1, bias)\n"
    "  --shape DIMS   conv: NxCxHxWxO (input [N,C,H,W], O output channels); linear: MxKxN (x [M,K],\n"
    "                 weight [N,K], bias); attention: BxHxSxD (q, k, v [B,S,H*D], H heads of D)\n"
    "  --layout nchw|nhwc   conv: the layout diffc compiles it in (default nchw; nhwc = --layout nhwc)\n"
    "  --all          the SDXL table: conv 3x3 640->640 at 64x64, batch 2, NCHW and NHWC; linear\n"
    "                 8192x640x640 and 2048x1280x5120; attention 2x10x4096x64 and 2x10x1024x64\n"
    "  --compute bf16|f32   precision of the matrix work (default bf16); weights are stored in it\n"
    "  --repeat N     timed runs (default 20); --warmup N: untimed runs first (default 3)\n"
    "  --peak T       TFLOP/s that 100%% means (default 989.4, an H100/H200 SXM's dense bf16 tensor\n"
    "                 peak; with --compute f32, 66.9, its f32 peak without tensor cores)\n"
    "  --cuda-arch L  architectures to compile for (default sm_90; diffc --cuda-arch's syntax)\n"
    "  --work DIR     weights and plans (default: a new folder under $TMPDIR, removed at the end)\n"
    "  --device N     CUDA device (default 0)\n"
    "  -h, --help     this help\n"
    "\n"
    "linear runs twice: \"diffc\" with DIFFC_CUBLASLT=0 (the generated kernel) and \"diffc+cublaslt\" with\n"
    "cuBLASLt allowed; when the runtime still ran the generated kernel, that row's status says why.\n";

typedef struct {
  mb_case cases[8];
  int ncases;
  dc_cuda_compute compute;
  int repeat, warmup, device;
  double peak;
  const char *archs, *work;
} options;

/* A compiled case, or why it did not compile. */
typedef struct {
  mb_compiled c;
  char *error; /* "FAIL: ..." (NULL: it compiled) */
} compiled;

/* ---- arguments -------------------------------------------------------------------- */

static dc_status *parse_int(const char *opt, const char *v, long lo, long hi, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi)
    return dc_error(DC_ERR_ARGUMENT, "%s %s: expected an integer in [%ld, %ld]", opt, v, lo, hi);
  *out = (int)x;
  return NULL;
}

static dc_status *parse_shape(const char *v, mb_case *c) {
  int n = mb_op_ndims[c->op], k = 0;
  const char *p = v;
  while (k < n) {
    char *end;
    long long x = strtoll(p, &end, 10);
    if (end == p || x < 1 || x > (1 << 24)) break;
    c->d[k++] = x;
    p = end;
    if (*p != 'x' || k == n) break;
    p++;
  }
  static const char *const forms[] = {"NxCxHxWxO, e.g. 2x640x64x64x640", "MxKxN, e.g. 8192x640x640",
                                      "BxHxSxD, e.g. 2x10x4096x64"};
  if (k != n || *p)
    return dc_error(DC_ERR_ARGUMENT, "--shape %s: %s takes %s (positive sizes)", v, mb_op_names[c->op], forms[c->op]);
  return NULL;
}

static void add_case(options *o, mb_op op, const int64_t *d, int nhwc, int cublaslt) {
  mb_case *c = &o->cases[o->ncases++];
  *c = (mb_case){.op = op, .nhwc = nhwc, .cublaslt = cublaslt};
  memcpy(c->d, d, sizeof c->d);
}

static void add_sdxl_table(options *o) {
  static const int64_t conv[5] = {2, 640, 64, 64, 640}, lin1[5] = {8192, 640, 640}, lin2[5] = {2048, 1280, 5120},
                       att1[5] = {2, 10, 4096, 64}, att2[5] = {2, 10, 1024, 64};
  add_case(o, MB_CONV, conv, 0, 0);
  add_case(o, MB_CONV, conv, 1, 0);
  add_case(o, MB_LINEAR, lin1, 0, 0);
  add_case(o, MB_LINEAR, lin1, 0, 1);
  add_case(o, MB_LINEAR, lin2, 0, 0);
  add_case(o, MB_LINEAR, lin2, 0, 1);
  add_case(o, MB_ATTENTION, att1, 0, 0);
  add_case(o, MB_ATTENTION, att2, 0, 0);
}

static dc_status *parse_args(int argc, char **argv, options *o, int *exit_now) {
  *o = (options){.compute = DC_CUDA_COMPUTE_BF16, .repeat = 20, .warmup = 3, .archs = "sm_90"};
  const char *op = NULL, *shape = NULL, *layout = NULL;
  int all = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf(usage);
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "--all")) {
      all = 1;
      continue;
    }
    static const char *const valued[] = {"--op", "--shape", "--layout", "--compute", "--repeat", "--warmup",
                                         "--peak", "--cuda-arch", "--work", "--device"};
    int known = 0;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(a, valued[k]);
    if (!known) return dc_error(DC_ERR_ARGUMENT, "unknown argument %s (see cuda_microbench --help)", a);
    if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see cuda_microbench --help)", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--op")) op = v;
    else if (!strcmp(a, "--shape")) shape = v;
    else if (!strcmp(a, "--layout")) layout = v;
    else if (!strcmp(a, "--repeat")) DC_TRY(parse_int(a, v, 1, 10000, &o->repeat));
    else if (!strcmp(a, "--warmup")) DC_TRY(parse_int(a, v, 0, 1000, &o->warmup));
    else if (!strcmp(a, "--device")) DC_TRY(parse_int(a, v, 0, 1024, &o->device));
    else if (!strcmp(a, "--cuda-arch")) o->archs = v;
    else if (!strcmp(a, "--work")) o->work = v;
    else if (!strcmp(a, "--peak")) {
      char *end;
      o->peak = strtod(v, &end);
      if (!*v || *end || !(o->peak > 0 && o->peak < 1e6))
        return dc_error(DC_ERR_ARGUMENT, "--peak %s: expected TFLOP/s, a positive number", v);
    } else if (dc_cuda_compute_from_name(v, &o->compute) != 0 || o->compute == DC_CUDA_COMPUTE_F16)
      return dc_error(DC_ERR_ARGUMENT, "--compute %s: expected bf16 or f32", v);
  }
  if (!o->peak) o->peak = o->compute == DC_CUDA_COMPUTE_F32 ? 66.9 : 989.4;
  if (all && (op || shape || layout))
    return dc_error(DC_ERR_ARGUMENT, "--all runs its own table; --op, --shape and --layout are for one case");
  if (all) return add_sdxl_table(o), NULL;
  if (!op || !shape) return dc_error(DC_ERR_ARGUMENT, "give --op and --shape, or --all (see cuda_microbench --help)");
  mb_case c = {0};
  int k = 0;
  while (k < 3 && strcmp(op, mb_op_names[k]) != 0) k++;
  if (k == 3) return dc_error(DC_ERR_ARGUMENT, "--op %s: expected conv, linear or attention", op);
  c.op = (mb_op)k;
  DC_TRY(parse_shape(shape, &c));
  if (layout && c.op != MB_CONV) return dc_error(DC_ERR_ARGUMENT, "--layout applies to --op conv");
  if (layout && strcmp(layout, "nchw") != 0 && strcmp(layout, "nhwc") != 0)
    return dc_error(DC_ERR_ARGUMENT, "--layout %s: expected nchw or nhwc", layout);
  c.nhwc = layout && !strcmp(layout, "nhwc");
  add_case(o, c.op, c.d, c.nhwc, 0);
  if (c.op == MB_LINEAR) add_case(o, c.op, c.d, 0, 1);
  return NULL;
}

/* ---- the GPU ------------------------------------------------------------------------- */

/* Whether a CUDA device is there: NULL, or why not ("no GPU: ..."). */
static char *gpu_absent(int device) {
  dc_cu_api api;
  dc_status *st = dc_cu_api_open(NULL, &api);
  if (st) {
    char *why = dc_asprintf("no GPU (%s)", dc_status_message(st));
    dc_status_free(st);
    return why;
  }
  int count = 0;
  dc_cu_result r = api.Init(0);
  if (r == DC_CUDA_SUCCESS) r = api.DeviceGetCount(&count);
  char *why = NULL;
  if (r != DC_CUDA_SUCCESS) {
    char buf[160];
    why = dc_asprintf("no GPU (cuInit: %s)", dc_cu_result_text(&api, r, buf, sizeof buf));
  } else if (count <= device) {
    why = dc_asprintf("no GPU (device %d asked, %d found)", device, count);
  }
  dc_cu_api_unload(&api);
  return why;
}

/* ---- main ----------------------------------------------------------------------------- */

static dc_status *make_work_dir(options *o, char **owned) {
  *owned = NULL;
  if (o->work) {
    if (dc_make_dirs(o->work) != 0) return dc_error(DC_ERR_IO, "--work %s: cannot create the folder", o->work);
    return NULL;
  }
  const char *tmp = getenv("TMPDIR");
  char *dir = dc_asprintf("%s/diffc-microbench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!dir) return dc_nomem("naming the work folder");
  if (!mkdtemp(dir)) {
    dc_status *st = dc_error(DC_ERR_IO, "%s: cannot create a work folder", dir);
    return dc_free(dir), st;
  }
  o->work = *owned = dir;
  return NULL;
}

static void remove_work(const options *o, const compiled *k, int n) {
  for (int i = 0; i < n; i++) {
    if (!k[i].c.plan_path) continue;
    char *w = dc_asprintf("%s.weights.safetensors", k[i].c.plan_path);
    if (w) unlink(w);
    dc_free(w);
    unlink(k[i].c.plan_path);
    w = dc_asprintf("%s/case%d.weights.safetensors", o->work, i);
    if (w) unlink(w);
    dc_free(w);
  }
  rmdir(o->work);
}

static dc_status *compile_all(const options *o, compiled *k, int *ok) {
  dc_nvrtc *nv = NULL;
  DC_TRY(dc_status_annotate(dc_nvrtc_load(&nv), "cuda_microbench"));
  dc_cuda_arch archs[DC_CUDA_MAX_ARCHS];
  int narchs = 0;
  dc_status *st = dc_nvrtc_parse_archs(nv, o->archs, archs, &narchs);
  for (int i = 0; !st && i < o->ncases; i++) {
    mb_names(&o->cases[i], &k[i].c);
    if (o->cases[i].cublaslt) { /* the same plan as the row before, run with cuBLASLt allowed */
      k[i].c = k[i - 1].c;
      k[i].c.plan_path = dc_strdup(k[i - 1].c.plan_path);
      k[i].error = k[i - 1].error ? dc_strdup(k[i - 1].error) : NULL;
      *ok += !k[i].error;
      continue;
    }
    printf("%s %s (%s):\n", k[i].c.name, k[i].c.shape, dc_cuda_compute_name(o->compute));
    dc_status *cs = mb_compile(&o->cases[i], o->compute, o->work, i, nv, archs, narchs, &k[i].c);
    if (cs) {
      k[i].error = dc_asprintf("FAIL: %s", dc_status_message(cs));
      printf("  %s\n", k[i].error);
      dc_status_free(cs);
    }
    *ok += !k[i].error;
  }
  dc_nvrtc_unload(nv);
  return st;
}

int main(int argc, char **argv) {
  options o;
  int exit_now = 0;
  dc_status *st = parse_args(argc, argv, &o, &exit_now);
  if (exit_now) return 0;
  char *owned_work = NULL;
  if (!st) st = make_work_dir(&o, &owned_work);
  if (st) {
    fprintf(stderr, "cuda_microbench: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 2;
  }
  compiled k[8];
  memset(k, 0, sizeof k);
  int ncompiled = 0;
  st = compile_all(&o, k, &ncompiled);
  if (st) {
    fprintf(stderr, "cuda_microbench: %s\n", dc_status_message(st));
    dc_status_free(st);
    if (owned_work) remove_work(&o, k, o.ncases);
    dc_free(owned_work);
    return 1;
  }
  char *absent = gpu_absent(o.device);
  if (absent) printf("%s: %d of %d case(s) compiled, none timed\n", absent, ncompiled, o.ncases);
  else printf("timing on device %d: median and best of %d runs after %d warm-up runs; %.1f TFLOP/s = 100%%\n",
              o.device, o.repeat, o.warmup, o.peak);
  int failed = ncompiled < o.ncases;
  double *t = dc_calloc((size_t)o.repeat, sizeof *t);
  for (int i = 0; i < o.ncases; i++) {
    const mb_case *c = &o.cases[i];
    const char *status = k[i].error ? k[i].error : absent ? "no GPU" : NULL;
    char *why = NULL, note[600];
    int timed = 0;
    if (!status) {
      dc_status *ts = t ? mb_time(c, &k[i].c, o.device, o.warmup, o.repeat, t, note, sizeof note) : dc_nomem("the timings");
      if (ts) why = dc_asprintf("FAIL: %s", dc_status_message(ts)), failed = 1;
      else if (note[0]) why = dc_asprintf("ok; %s", note);
      timed = !ts;
      status = why ? why : ts ? "FAIL" : "ok";
      dc_status_free(ts);
    }
    char row[1024];
    mb_row(c, &k[i].c, o.compute, timed ? t : NULL, o.repeat, o.peak, status, row, sizeof row);
    printf("%s\n", row);
    fflush(stdout);
    dc_free(why);
  }
  dc_free(t);
  if (owned_work) remove_work(&o, k, o.ncases);
  for (int i = 0; i < o.ncases; i++) dc_free(k[i].c.plan_path), dc_free(k[i].error);
  int code = absent && !failed ? 77 : failed ? 1 : 0;
  dc_free(absent);
  dc_free(owned_work);
  return code;
}
