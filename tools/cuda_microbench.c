/* cuda_microbench — one op at one shape on the GPU, as diffc compiles it:
 * the op alone in an IR module built here (weights random, written to a
 * safetensors file in the work folder), through the pass pipeline, the
 * CUDA generators and NVRTC (codegen/emit_cuda.h), written as a plan and
 * run by the CUDA backend of the runtime (diffrun.h).  The op's own step is
 * timed with the runtime's per-step profile (CUDA events around the
 * launch), after warm-up runs; the median and the best of N runs give
 * TFLOP/s (ir/flops.c's count) and the share of a peak.  A step's time runs
 * from the event before it (the run's start, recorded once the inputs are
 * on the device) to the one after it; at these shapes the host has queued
 * the launch long before the input copies end, so it is the kernel's time,
 * not the host's launch latency.
 *
 * Each case prints one line that tools/gpu_check_bench.sh reads and
 * bench/gpu_torch.py writes alike:
 *   BENCH impl=diffc case=conv3x3_nhwc shape=2x640x64x64x640 compute=bf16 act=f32
 *         median_ms=1.234 min_ms=1.201 tflops=123.4 pct_peak=12.5 status=ok
 * status is free text and comes last ("ok", "no GPU", "FAIL: why", ...).
 *
 * Activations: with --compute bf16 the op reads and writes bf16 activations
 * when this build's IR and generators take them (the op between two casts,
 * its own step timed); otherwise the module's f32 activations, as every
 * plan of this build has them.  act= says which was measured. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/emit_cuda.h"
#include "driver/weight_store.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "plan/plan_format.h"
#include "runtime/cuda_driver.h"
#include "runtime/diffrun.h"
#include "support/dtype_convert.h"

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
    "cuBLASLt allowed; a build whose runtime has no cuBLASLt path says \"cuBLASLt: not in this build\".\n";

typedef enum { OPK_CONV, OPK_LINEAR, OPK_ATTENTION } op_kind;
static const char *const op_names[] = {"conv", "linear", "attention"};
static const int op_ndims[] = {5, 3, 4};

typedef struct {
  op_kind op;
  int64_t d[5]; /* conv N,C,H,W,O; linear M,K,N; attention B,H,S,D */
  int nhwc;     /* conv */
  int cublaslt; /* linear: the row with cuBLASLt allowed */
} bench_case;

typedef struct {
  bench_case cases[8];
  int ncases;
  dc_cuda_compute compute;
  int repeat, warmup, device;
  double peak;
  const char *archs, *work;
} options;

/* What compiling one case left behind. */
typedef struct {
  char *plan_path;
  int32_t step;       /* the op's node in the plan */
  uint64_t flops;
  dc_dtype act;       /* the op's activation dtype */
  char shape[64], name[32];
  char *error;        /* why it did not compile (NULL: it did) */
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

static dc_status *parse_shape(const char *v, bench_case *c) {
  int n = op_ndims[c->op], k = 0;
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
    return dc_error(DC_ERR_ARGUMENT, "--shape %s: %s takes %s (positive sizes)", v, op_names[c->op], forms[c->op]);
  return NULL;
}

static void add_case(options *o, op_kind op, const int64_t *d, int nhwc, int cublaslt) {
  bench_case *c = &o->cases[o->ncases++];
  *c = (bench_case){.op = op, .nhwc = nhwc, .cublaslt = cublaslt};
  memcpy(c->d, d, sizeof c->d);
}

static void add_sdxl_table(options *o) {
  static const int64_t conv[5] = {2, 640, 64, 64, 640}, lin1[5] = {8192, 640, 640}, lin2[5] = {2048, 1280, 5120},
                       att1[5] = {2, 10, 4096, 64}, att2[5] = {2, 10, 1024, 64};
  add_case(o, OPK_CONV, conv, 0, 0);
  add_case(o, OPK_CONV, conv, 1, 0);
  add_case(o, OPK_LINEAR, lin1, 0, 0);
  add_case(o, OPK_LINEAR, lin1, 0, 1);
  add_case(o, OPK_LINEAR, lin2, 0, 0);
  add_case(o, OPK_LINEAR, lin2, 0, 1);
  add_case(o, OPK_ATTENTION, att1, 0, 0);
  add_case(o, OPK_ATTENTION, att2, 0, 0);
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
  bench_case c = {0};
  int k = 0;
  while (k < 3 && strcmp(op, op_names[k]) != 0) k++;
  if (k == 3) return dc_error(DC_ERR_ARGUMENT, "--op %s: expected conv, linear or attention", op);
  c.op = (op_kind)k;
  DC_TRY(parse_shape(shape, &c));
  if (layout && c.op != OPK_CONV) return dc_error(DC_ERR_ARGUMENT, "--layout applies to --op conv");
  if (layout && strcmp(layout, "nchw") != 0 && strcmp(layout, "nhwc") != 0)
    return dc_error(DC_ERR_ARGUMENT, "--layout %s: expected nchw or nhwc", layout);
  c.nhwc = layout && !strcmp(layout, "nhwc");
  add_case(o, c.op, c.d, c.nhwc, 0);
  if (c.op == OPK_LINEAR) add_case(o, c.op, c.d, 0, 1);
  return NULL;
}

/* ---- the module ----------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform01(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}

/* A weight tensor of uniform values in [-bound, bound] (a kaiming-uniform
 * layer's range), in dtype (f32 or bf16). */
static void *random_tensor(const dc_type *t, double bound) {
  size_t n = dc_type_numel(t);
  void *p = dc_malloc(n * dc_dtype_size(t->dtype) + 1);
  for (size_t i = 0; p && i < n; i++) {
    float v = (float)((2 * uniform01() - 1) * bound);
    if (t->dtype == DT_BF16) ((uint16_t *)p)[i] = dc_f32_to_bf16(v);
    else ((float *)p)[i] = v;
  }
  return p;
}

/* Writes the case's weights to path: "w" and "b" (conv and linear). */
static dc_status *write_weights(const bench_case *c, dc_dtype wt, const char *path) {
  dc_type w, b;
  if (c->op == OPK_CONV) w = (dc_type){wt, 4, {c->d[4], c->d[1], 3, 3}}, b = (dc_type){wt, 1, {c->d[4]}};
  else w = (dc_type){wt, 2, {c->d[2], c->d[1]}}, b = (dc_type){wt, 1, {c->d[2]}};
  double bound = 1 / sqrt((double)dc_type_numel(&w) / (double)w.dims[0]);
  void *wd = random_tensor(&w, bound), *bd = random_tensor(&b, bound);
  dc_status *st = wd && bd ? NULL : dc_nomem("the random weights");
  dc_st_out t[2] = {{"w", w, wd}, {"b", b, bd}};
  if (!st) st = dc_st_write(path, t, 2);
  dc_free(wd);
  dc_free(bd);
  return st;
}

static dc_status *add_node(dc_module *m, dc_node n, const char *scope, int32_t *id) {
  n.scope = scope;
  if (!(dc_op_get(n.op)->flags & OPF_TYPE_GIVEN)) DC_TRY(dc_infer_type(m, &n, &n.type));
  *id = dc_module_add_node(m, &n);
  return *id < 0 ? dc_nomem("building the module") : NULL;
}

static dc_status *add_weight(dc_module *m, const dc_st_file *f, const char *name, int32_t *id) {
  const dc_st_tensor *t = dc_st_find(f, name);
  if (!t) return dc_error(DC_ERR_INTERNAL, "%s: no tensor \"%s\" in the file just written", f->file.path, name);
  dc_weight w = {.name = name, .file = 0, .offset = t->offset, .bytes = t->bytes, .type = {t->dtype, t->rank, {0}}};
  memcpy(w.type.dims, t->dims, sizeof t->dims);
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = dc_module_add_weight(m, &w);
  n.type = w.type;
  return n.ref < 0 ? dc_nomem("building the module") : add_node(m, n, "bench", id);
}

/* A module input in f32 (the plan's interface), cast to act when that is
 * not f32. */
static dc_status *add_activation(dc_module *m, const char *name, const dc_type *t, dc_dtype act, int32_t *id) {
  *id = dc_module_add_input(m, name, t, INIT_NORMAL);
  if (*id < 0) return dc_nomem("building the module");
  if (act == DT_F32) return NULL;
  dc_node cast = dc_node_make(OP_CAST, 1, id);
  cast.type = *t;
  cast.type.dtype = act;
  return add_node(m, cast, "bench.in", id);
}

static dc_status *add_op(dc_module *m, const bench_case *c, const dc_st_file *f, dc_dtype act, int32_t *op) {
  dc_node n;
  if (c->op == OPK_ATTENTION) {
    dc_type t = {DT_F32, 3, {c->d[0], c->d[2], c->d[1] * c->d[3]}};
    int32_t qkv[3];
    DC_TRY(add_activation(m, "q", &t, act, &qkv[0]));
    DC_TRY(add_activation(m, "k", &t, act, &qkv[1]));
    DC_TRY(add_activation(m, "v", &t, act, &qkv[2]));
    n = dc_node_make(OP_ATTENTION, 3, qkv);
    dc_node_set_int(&n, "heads", c->d[1]);
    dc_node_set_float(&n, "scale", 1 / sqrt((double)c->d[3]));
  } else {
    dc_type t = c->op == OPK_CONV ? (dc_type){DT_F32, 4, {c->d[0], c->d[1], c->d[2], c->d[3]}}
                                  : (dc_type){DT_F32, 2, {c->d[0], c->d[1]}};
    int32_t in[3];
    DC_TRY(add_activation(m, "x", &t, act, &in[0]));
    DC_TRY(add_weight(m, f, "w", &in[1]));
    DC_TRY(add_weight(m, f, "b", &in[2]));
    n = dc_node_make(c->op == OPK_CONV ? OP_CONV2D : OP_LINEAR, 3, in);
    dc_node_set_int(&n, "bias", 1);
    if (c->op == OPK_CONV) {
      dc_node_set_int(&n, "stride", 1);
      static const char *const pads[] = {"pad_t", "pad_b", "pad_l", "pad_r"};
      for (int i = 0; i < 4; i++) dc_node_set_int(&n, pads[i], 1);
    }
  }
  n.scope = "bench.op";
  DC_TRY(dc_infer_type(m, &n, &n.type));
  n.type.dtype = act; /* the op writes the activation dtype it reads */
  *op = dc_module_add_node(m, &n);
  if (*op < 0) return dc_nomem("building the module");
  if (act == DT_F32) return NULL;
  dc_node back = dc_node_make(OP_CAST, 1, op);
  back.type = n.type;
  back.type.dtype = DT_F32;
  int32_t out;
  return add_node(m, back, "bench.out", &out);
}

/* The module of case c with activations in act, through the pass pipeline
 * (--layout nhwc for an NHWC conv) and its weights' conversions (the NHWC
 * repack) written beside the plan. */
static dc_status *build_module(const bench_case *c, const char *name, dc_dtype wt, dc_dtype act, const char *wpath,
                               const char *plan_path, dc_module **out) {
  *out = NULL;
  dc_st_file f;
  int have_weights = c->op != OPK_ATTENTION;
  if (have_weights) DC_TRY(dc_st_open(wpath, &f));
  dc_module *m = dc_module_create();
  dc_status *st = m ? NULL : dc_nomem("building the module");
  if (!st && have_weights) {
    dc_weight_file wf = {wpath, f.header_hash, f.file.size};
    if (dc_module_add_file(m, &wf) < 0) st = dc_nomem("building the module");
  }
  int32_t op = -1;
  if (!st) st = add_op(m, c, have_weights ? &f : NULL, act, &op);
  if (!st) st = dc_module_add_output(m, "y", m->nnodes - 1);
  if (!st) st = dc_module_set_meta(m, "class", "cuda_microbench");
  if (!st) st = dc_module_set_meta(m, "entry", name);
  if (have_weights) dc_st_close(&f);
  if (!st) st = dc_verify(m, "cuda_microbench");
  dc_memory_options mem = {.layout = c->nhwc ? LAYOUT_NHWC : 0};
  dc_pipeline_options po = {.memory = &mem};
  if (!st) st = dc_pipeline_run(m, &po);
  char *cast_path = st ? NULL : dc_asprintf("%s.weights.safetensors", plan_path);
  if (!st && !cast_path) st = dc_nomem("naming the weights file");
  if (!st) st = dc_store_cast_weights(m, cast_path, 0, NULL);
  dc_free(cast_path);
  if (st) return dc_module_destroy(m), st;
  *out = m;
  return NULL;
}

/* The node the case times: the one matrix op left after the passes. */
static int32_t find_op(const dc_module *m) {
  for (int32_t i = 0; i < m->nnodes; i++)
    if (dc_node_flops(m, i) > 0) return i;
  return -1;
}

/* Every kernel of m generated (no NVRTC): whether this build's generators
 * take its dtypes, before the compile is paid for. */
static dc_status *generators_take(const dc_module *m, dc_cuda_compute compute) {
  dc_cuda_options o = {compute};
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (dc_op_get(m->nodes[i].op)->flags & OPF_LEAF) continue;
    dc_cuda_kernel k = {0};
    dc_status *st = dc_cuda_gen_node(m, i, &o, "probe", &k);
    dc_cuda_kernel_deinit(&k);
    DC_TRY(st);
  }
  return NULL;
}

static dc_status *write_plan(dc_module *m, const dc_nvrtc *nv, const dc_cuda_arch *archs, int narchs,
                             dc_cuda_compute compute, const char *path) {
  dc_cuda_emit_options eo = {.compute = compute, .archs = archs, .narchs = narchs};
  dc_plan plan = {.target = DC_TARGET_CUDA, .module = m};
  dc_buf text;
  dc_buf_init(&text);
  dc_status *st = dc_print(m, &text);
  if (!st) {
    dc_buf_u8(&text, 0);
    st = dc_buf_status(&text, "printing the IR");
  }
  char archs_text[256];
  plan.ir_text = (char *)text.data;
  plan.options_json = dc_asprintf("{\"target\":\"cuda\",\"compute_dtype\":\"%s\",\"cuda_arch\":\"%s\","
                                  "\"nvrtc_version\":\"%s\",\"model\":\"cuda_microbench\"}",
                                  dc_cuda_compute_name(compute),
                                  dc_cuda_archs_str(archs, narchs, archs_text, sizeof archs_text),
                                  dc_nvrtc_version(nv));
  if (!st && !plan.options_json) st = dc_nomem("writing the plan options");
  dc_cuda_emit_report rep;
  if (!st) {
    st = dc_emit_cuda_kernels(m, nv, &eo, &plan.cuda, &rep);
    if (!st)
      printf("  %d kernel(s), %d compile(s), %d from the kernel cache, %.1f s%s\n", rep.nkernels, rep.ncompiles,
             rep.ncached, rep.seconds, rep.nwarnings ? "; NVRTC warned (below)" : "");
    for (int w = 0; !st && w < rep.nwarnings; w++)
      printf("  warning: %s for %s: %s\n", rep.warnings[w].kernel, rep.warnings[w].arch ? rep.warnings[w].arch : "?",
             rep.warnings[w].text);
    dc_cuda_emit_report_deinit(&rep);
  }
  if (!st) st = dc_plan_write(path, &plan);
  dc_plan_cuda_deinit(&plan.cuda);
  dc_free(plan.options_json);
  dc_buf_deinit(&text);
  return st;
}

static void case_names(const bench_case *c, compiled *out) {
  static const char *const cases[] = {"conv3x3_nchw", "linear", "attention"};
  snprintf(out->name, sizeof out->name, "%s", c->op == OPK_CONV && c->nhwc ? "conv3x3_nhwc" : cases[c->op]);
  int n = op_ndims[c->op], at = 0;
  for (int k = 0; k < n; k++)
    at += snprintf(out->shape + at, sizeof out->shape - (size_t)at, "%s%lld", k ? "x" : "", (long long)c->d[k]);
}

/* Compiles case i into work/case<i>.dplan.  With bf16 compute the op gets
 * bf16 activations when this build takes them; else f32 (compiled->act). */
static dc_status *compile_case(const options *o, int i, const dc_nvrtc *nv, const dc_cuda_arch *archs, int narchs,
                               compiled *out) {
  const bench_case *c = &o->cases[i];
  dc_dtype wt = o->compute == DC_CUDA_COMPUTE_F32 ? DT_F32 : DT_BF16;
  char *wpath = dc_asprintf("%s/case%d.weights.safetensors", o->work, i);
  out->plan_path = dc_asprintf("%s/case%d.dplan", o->work, i);
  if (!wpath || !out->plan_path) return dc_free(wpath), dc_nomem("naming the case's files");
  dc_status *st = c->op == OPK_ATTENTION ? NULL : write_weights(c, wt, wpath);
  dc_module *m = NULL;
  if (!st && wt == DT_BF16) {
    dc_status *why = build_module(c, out->name, wt, DT_BF16, wpath, out->plan_path, &m);
    if (!why) why = generators_take(m, o->compute);
    if (why) {
      printf("  activations f32: this build does not take bf16 ones here (%s)\n", dc_status_message(why));
      dc_status_free(why);
      dc_module_destroy(m);
      m = NULL;
    }
  }
  if (!st && !m) st = build_module(c, out->name, wt, DT_F32, wpath, out->plan_path, &m);
  dc_free(wpath);
  if (!st) {
    out->step = find_op(m);
    if (out->step < 0) st = dc_error(DC_ERR_INTERNAL, "case %s: no matrix op left after the passes", out->name);
  }
  if (!st) {
    out->flops = dc_node_flops(m, out->step);
    const dc_node *n = &m->nodes[out->step];
    out->act = m->nodes[n->inputs[0]].type.dtype;
    st = write_plan(m, nv, archs, narchs, o->compute, out->plan_path);
  }
  dc_module_destroy(m);
  return st;
}

/* ---- timing --------------------------------------------------------------------------- */

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

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The runtime of this build says nothing about cuBLASLt (no report of the
 * nodes it runs there), so a cuBLASLt row would time the generated kernel
 * again under another name. */
static int cublaslt_in_build(void) { return 0; }

/* The op's step time of each timed run, in seconds, into t[o->repeat]. */
static dc_status *time_case(const options *o, const bench_case *c, const compiled *k, double *t) {
  if (c->cublaslt) unsetenv("DIFFC_CUBLASLT");
  else setenv("DIFFC_CUBLASLT", "0", 1); /* the generated kernel, also where cuBLASLt could run it */
  drt_options ro = {.backend = "cuda", .device = o->device, .no_verify_weights = 1};
  drt_plan *p = NULL;
  DC_TRY(drt_load(k->plan_path, &ro, &p));
  drt_set_random_inputs(p, 1);
  dc_status *st = drt_set_profiling(p, 1);
  for (int r = 0; !st && r < o->warmup; r++) st = drt_run(p, NULL);
  for (int r = 0; !st && r < o->repeat; r++) {
    double before = drt_step_seconds(p, k->step);
    st = drt_run(p, NULL);
    t[r] = drt_step_seconds(p, k->step) - before;
  }
  drt_destroy(p);
  return st;
}

static void print_row(const options *o, const bench_case *c, const compiled *k, const double *t, const char *status) {
  printf("BENCH impl=%s case=%s shape=%s compute=%s act=%s", c->cublaslt ? "diffc+cublaslt" : "diffc", k->name,
         k->shape, dc_cuda_compute_name(o->compute), dc_dtype_name(k->act));
  if (t) {
    double med = o->repeat % 2 ? t[o->repeat / 2] : (t[o->repeat / 2 - 1] + t[o->repeat / 2]) / 2;
    double tf = med > 0 ? (double)k->flops / med * 1e-12 : 0;
    printf(" median_ms=%.4f min_ms=%.4f tflops=%.1f pct_peak=%.1f", med * 1e3, t[0] * 1e3, tf, tf / o->peak * 100);
  } else {
    printf(" median_ms=- min_ms=- tflops=- pct_peak=-");
  }
  printf(" status=%s\n", status);
  fflush(stdout);
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
    if (!k[i].plan_path) continue;
    char *w = dc_asprintf("%s.weights.safetensors", k[i].plan_path);
    if (w) unlink(w);
    dc_free(w);
    unlink(k[i].plan_path);
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
    case_names(&o->cases[i], &k[i]);
    if (o->cases[i].cublaslt) { /* the same plan as the row before, run with cuBLASLt allowed */
      k[i].plan_path = dc_strdup(k[i - 1].plan_path);
      k[i].step = k[i - 1].step, k[i].flops = k[i - 1].flops, k[i].act = k[i - 1].act;
      k[i].error = k[i - 1].error ? dc_strdup(k[i - 1].error) : NULL;
      *ok += !k[i].error;
      continue;
    }
    printf("%s %s (%s):\n", k[i].name, k[i].shape, dc_cuda_compute_name(o->compute));
    dc_status *cs = compile_case(o, i, nv, archs, narchs, &k[i]);
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
    const bench_case *c = &o.cases[i];
    if (k[i].error) print_row(&o, c, &k[i], NULL, k[i].error);
    else if (c->cublaslt && !cublaslt_in_build()) print_row(&o, c, &k[i], NULL, "cuBLASLt: not in this build");
    else if (absent) print_row(&o, c, &k[i], NULL, "no GPU");
    else {
      dc_status *ts = t ? time_case(&o, c, &k[i], t) : dc_nomem("the timings");
      if (ts) {
        char *why = dc_asprintf("FAIL: %s", dc_status_message(ts));
        print_row(&o, c, &k[i], NULL, why ? why : "FAIL");
        dc_free(why);
        dc_status_free(ts);
        failed = 1;
      } else {
        qsort(t, (size_t)o.repeat, sizeof *t, cmp_double);
        print_row(&o, c, &k[i], t, "ok");
      }
    }
  }
  dc_free(t);
  if (owned_work) remove_work(&o, k, o.ncases);
  for (int i = 0; i < o.ncases; i++) dc_free(k[i].plan_path), dc_free(k[i].error);
  int code = absent && !failed ? 77 : failed ? 1 : 0;
  dc_free(absent);
  dc_free(owned_work);
  return code;
}
