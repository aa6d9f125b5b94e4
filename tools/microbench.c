/* microbench.c — one case of tools/cuda_microbench: the one-op module, its
 * compile and its timing (the contract is microbench.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "microbench.h"
#include "codegen/emit_cuda.h"
#include "driver/compile.h"
#include "driver/weight_store.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "plan/plan_format.h"
#include "runtime/diffrun.h"
#include "support/dtype_convert.h"

const char *const mb_op_names[3] = {"conv", "linear", "attention"};
const int mb_op_ndims[3] = {5, 3, 4};

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
static dc_status *write_weights(const mb_case *c, dc_dtype wt, const char *path) {
  dc_type w, b;
  if (c->op == MB_CONV) w = (dc_type){wt, 4, {c->d[4], c->d[1], 3, 3}}, b = (dc_type){wt, 1, {c->d[4]}};
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

static dc_status *add_op(dc_module *m, const mb_case *c, const dc_st_file *f, dc_dtype act, int32_t *op) {
  dc_node n;
  if (c->op == MB_ATTENTION) {
    dc_type t = {DT_F32, 3, {c->d[0], c->d[2], c->d[1] * c->d[3]}};
    int32_t qkv[3];
    DC_TRY(add_activation(m, "q", &t, act, &qkv[0]));
    DC_TRY(add_activation(m, "k", &t, act, &qkv[1]));
    DC_TRY(add_activation(m, "v", &t, act, &qkv[2]));
    n = dc_node_make(OP_ATTENTION, 3, qkv);
    dc_node_set_int(&n, "heads", c->d[1]);
    dc_node_set_float(&n, "scale", 1 / sqrt((double)c->d[3]));
  } else {
    dc_type t = c->op == MB_CONV ? (dc_type){DT_F32, 4, {c->d[0], c->d[1], c->d[2], c->d[3]}}
                                  : (dc_type){DT_F32, 2, {c->d[0], c->d[1]}};
    int32_t in[3];
    DC_TRY(add_activation(m, "x", &t, act, &in[0]));
    DC_TRY(add_weight(m, f, "w", &in[1]));
    DC_TRY(add_weight(m, f, "b", &in[2]));
    n = dc_node_make(c->op == MB_CONV ? OP_CONV2D : OP_LINEAR, 3, in);
    dc_node_set_int(&n, "bias", 1);
    if (c->op == MB_CONV) {
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
static dc_status *build_module(const mb_case *c, const char *name, dc_dtype wt, dc_dtype act, const char *wpath,
                               const char *plan_path, dc_module **out) {
  *out = NULL;
  dc_st_file f;
  int have_weights = c->op != MB_ATTENTION;
  if (have_weights) DC_TRY(dc_st_open(wpath, &f));
  dc_module *m = dc_module_create();
  dc_status *st = m ? NULL : dc_nomem("building the module");
  if (!st && have_weights) {
    dc_weight_file wf = {wpath, f.header_hash, f.file.size};
    if (dc_module_add_file(m, &wf) < 0) st = dc_nomem("building the module");
  }
  /* bf16 values between the casts are legal only where the module says so
   * (as --compute-dtype bf16 compiles a model: pass activation-dtype) */
  if (!st && act != DT_F32) st = dc_module_set_meta(m, "activation_dtype", dc_dtype_name(act));
  int32_t op = -1;
  if (!st) st = add_op(m, c, have_weights ? &f : NULL, act, &op);
  if (!st) st = dc_module_add_output(m, "y", m->nnodes - 1);
  if (!st) st = dc_module_set_meta(m, "class", "cuda_microbench");
  if (!st) st = dc_module_set_meta(m, "entry", name);
  if (have_weights) dc_st_close(&f);
  if (!st) st = dc_verify(m, "cuda_microbench");
  dc_memory_options mem = {.layout = c->nhwc ? LAYOUT_NHWC : 0, .activation = act != DT_F32 ? act : 0};
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
  dc_cuda_options o = {.compute = compute};
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
  /* tiles for the GPU the case will be timed on, as diffc chooses them */
  dc_cuda_emit_options eo = {.compute = compute, .archs = archs, .narchs = narchs, .sm_count = dc_gpu0_sm_count()};
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

void mb_names(const mb_case *c, mb_compiled *out) {
  static const char *const cases[] = {"conv3x3_nchw", "linear", "attention"};
  snprintf(out->name, sizeof out->name, "%s", c->op == MB_CONV && c->nhwc ? "conv3x3_nhwc" : cases[c->op]);
  int n = mb_op_ndims[c->op], at = 0;
  for (int k = 0; k < n; k++)
    at += snprintf(out->shape + at, sizeof out->shape - (size_t)at, "%s%lld", k ? "x" : "", (long long)c->d[k]);
}

dc_status *mb_compile(const mb_case *c, dc_cuda_compute compute, const char *work, int index, const dc_nvrtc *nv,
                      const dc_cuda_arch *archs, int narchs, mb_compiled *out) {
  mb_names(c, out);
  dc_dtype wt = compute == DC_CUDA_COMPUTE_F32 ? DT_F32 : DT_BF16;
  char *wpath = dc_asprintf("%s/case%d.weights.safetensors", work, index);
  out->plan_path = dc_asprintf("%s/case%d.dplan", work, index);
  if (!wpath || !out->plan_path) return dc_free(wpath), dc_nomem("naming the case's files");
  dc_status *st = c->op == MB_ATTENTION ? NULL : write_weights(c, wt, wpath);
  dc_module *m = NULL;
  if (!st && wt == DT_BF16) { /* bf16 activations where this build takes them */
    dc_status *why = build_module(c, out->name, wt, DT_BF16, wpath, out->plan_path, &m);
    if (!why) why = generators_take(m, compute);
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
    out->act = m->nodes[m->nodes[out->step].inputs[0]].type.dtype;
    st = write_plan(m, nv, archs, narchs, compute, out->plan_path);
  }
  dc_module_destroy(m);
  return st;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

dc_status *mb_time(const mb_case *c, const mb_compiled *k, int device, int warmup, int repeat, double *t, char *note,
                   size_t note_cap) {
  drt_stats stats;
  memset(&stats, 0, sizeof stats);
  if (note_cap) note[0] = 0;
  if (c->cublaslt) unsetenv("DIFFC_CUBLASLT");
  else setenv("DIFFC_CUBLASLT", "0", 1); /* the generated kernel, also where cuBLASLt could run it */
  drt_options ro = {.backend = "cuda", .device = device, .no_verify_weights = 1};
  drt_plan *p = NULL;
  DC_TRY(drt_load(k->plan_path, &ro, &p));
  drt_set_random_inputs(p, 1);
  dc_status *st = drt_set_profiling(p, 1);
  for (int r = 0; !st && r < warmup; r++) st = drt_run(p, NULL);
  for (int r = 0; !st && r < repeat; r++) {
    double before = drt_step_seconds(p, k->step);
    st = drt_run(p, &stats);
    t[r] = drt_step_seconds(p, k->step) - before;
  }
  /* A cuBLASLt row says so when the runtime kept the step on its kernel. */
  if (!st && c->cublaslt && !stats.cublaslt_steps && note_cap)
    snprintf(note, note_cap, "cuBLASLt did not run it (%s)",
             stats.cublaslt_note && *stats.cublaslt_note ? stats.cublaslt_note : "not eligible");
  drt_destroy(p);
  if (!st) qsort(t, (size_t)repeat, sizeof *t, cmp_double);
  return st;
}

void mb_row(const mb_case *c, const mb_compiled *k, dc_cuda_compute compute, const double *t, int repeat, double peak,
            const char *status, char *buf, size_t cap) {
  int at = snprintf(buf, cap, "BENCH impl=%s case=%s shape=%s compute=%s act=%s", c->cublaslt ? "diffc+cublaslt" : "diffc",
                    k->name, k->shape, dc_cuda_compute_name(compute), dc_dtype_name(k->act));
  if (at < 0 || (size_t)at >= cap) return;
  if (t) {
    double med = repeat % 2 ? t[repeat / 2] : (t[repeat / 2 - 1] + t[repeat / 2]) / 2;
    double tf = med > 0 ? (double)k->flops / med * 1e-12 : 0;
    at += snprintf(buf + at, cap - (size_t)at, " median_ms=%.4f min_ms=%.4f tflops=%.1f pct_peak=%.1f", med * 1e3,
                   t[0] * 1e3, tf, tf / peak * 100);
  } else {
    at += snprintf(buf + at, cap - (size_t)at, " median_ms=- min_ms=- tflops=- pct_peak=-");
  }
  if (at >= 0 && (size_t)at < cap) snprintf(buf + at, cap - (size_t)at, " status=%s", status);
}
