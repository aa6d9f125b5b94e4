/* test_cuda_lt.c — the CUDA backend's GEMMs on cuBLASLt (runtime/cuda_gemm_lt.c,
 * runtime/cublaslt.c), host side, through the fake driver and a fake
 * cuBLASLt (cuda_fake_lt.h) that computes every matmul on the CPU from the
 * descriptors it was given.  The plan: bf16 activations (built here, so the
 * test does not wait for bf16 plans from diffc) through a linear with a
 * bias, one with a residual, one with bias + gelu_tanh, one with the erf gelu
 * (not eligible: its NVRTC kernel runs, emulated from an f32 twin of the
 * module) and an NCHW 1x1 conv2d (a batched GEMM).  Integer-valued data
 * keep every sum exact, so the outputs must equal the f32 twin's reference
 * outputs rounded to bf16, bit for bit.  Checked: the calls (handle,
 * descriptors, layouts, heuristic, matmul per run, destroys at unload), the
 * epilogues and bias pointers, beta and C for the residual, the workspace,
 * the timed choice, the algorithm cache (written, read, a corrupt one
 * replaced), and the fallbacks: the eligibility rule, DIFFC_CUBLASLT=0,
 * no library, no algorithm. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_fake_driver.h"
#include "cuda_fake_lt.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/cuda_backend.h"
#include "runtime/kernels.h"
#include "testutil.h"

#ifdef DC_HAVE_CUBLASLT_H /* the toolkit's header, where installed: our values must be its own */
#include <cublasLt.h>
#define SAME(ours, theirs) _Static_assert((int)(ours) == (int)(theirs), #ours " differs from " #theirs)
SAME(DC_LT_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS);
SAME(DC_LT_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_NOT_INITIALIZED);
SAME(DC_LT_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED);
SAME(DC_LT_STATUS_INVALID_VALUE, CUBLAS_STATUS_INVALID_VALUE);
SAME(DC_LT_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_EXECUTION_FAILED);
SAME(DC_LT_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_NOT_SUPPORTED);
SAME(DC_LT_R_32F, CUDA_R_32F);
SAME(DC_LT_R_16F, CUDA_R_16F);
SAME(DC_LT_R_16BF, CUDA_R_16BF);
SAME(DC_LT_COMPUTE_32F, CUBLAS_COMPUTE_32F);
SAME(DC_LT_OP_N, CUBLAS_OP_N);
SAME(DC_LT_OP_T, CUBLAS_OP_T);
SAME(DC_LT_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSA);
SAME(DC_LT_DESC_TRANSB, CUBLASLT_MATMUL_DESC_TRANSB);
SAME(DC_LT_DESC_EPILOGUE, CUBLASLT_MATMUL_DESC_EPILOGUE);
SAME(DC_LT_DESC_BIAS_POINTER, CUBLASLT_MATMUL_DESC_BIAS_POINTER);
SAME(DC_LT_DESC_BIAS_DATA_TYPE, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
SAME(DC_LT_LAYOUT_BATCH_COUNT, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
SAME(DC_LT_LAYOUT_STRIDED_BATCH_OFFSET, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
SAME(DC_LT_PREF_MAX_WORKSPACE_BYTES, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
SAME(DC_LT_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
SAME(DC_LT_PREF_MIN_ALIGNMENT_B_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES);
SAME(DC_LT_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES);
SAME(DC_LT_PREF_MIN_ALIGNMENT_D_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);
SAME(DC_LT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_DEFAULT);
SAME(DC_LT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BIAS);
SAME(DC_LT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU);
SAME(DC_LT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS);
_Static_assert(sizeof(dc_lt_algo) == sizeof(cublasLtMatmulAlgo_t), "cublasLtMatmulAlgo_t's size");
_Static_assert(sizeof(dc_lt_heuristic) == sizeof(cublasLtMatmulHeuristicResult_t), "the heuristic result's size");
_Static_assert(offsetof(dc_lt_heuristic, workspace_size) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize) &&
                   offsetof(dc_lt_heuristic, state) == offsetof(cublasLtMatmulHeuristicResult_t, state),
               "the heuristic result's layout");
static const int header_checked = 1;
#else
static const int header_checked = 0;
#endif

enum { NW = 5 };
static uint16_t W1[10 * 8], B1[10], W2[10 * 8], WC[5 * 8], WH[10 * 8];
static const void *WDATA[NW] = {W1, B1, W2, WC, WH};

typedef struct {
  dc_module *m;
  dc_plan_cuda k;
  int32_t lin_bias, lin_res, lin_gelu_tanh, lin_gelu, conv, res_in, hidden, lin_inplace, lin_same, conv_nhwc;
} graph;

static uint64_t rng = 99;
static float small_int(int range) { /* -range..range */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((int)((rng >> 33) % (uint64_t)(2 * range + 1)) - range);
}

static graph plan, twin; /* bf16 activations; the same graph in f32 */

/* The IR's type rules want f32 activations: the bf16 plan takes each
 * node's type from its f32 twin (built first), in bf16. */
static int32_t add(dc_module *m, dc_node n, dc_dtype dt) {
  if (dt == DT_F32) CHECK_OK(dc_infer_type(m, &n, &n.type));
  else n.type = twin.m->nodes[m->nnodes].type, n.type.dtype = dt;
  return dc_module_add_node(m, &n);
}

static int32_t weight(dc_module *m, const char *name, int rank, const int64_t *dims) {
  dc_weight w = {.name = name, .type = {DT_BF16, rank, {0}}};
  memcpy(w.type.dims, dims, (size_t)rank * sizeof *dims);
  w.bytes = dc_type_bytes(&w.type);
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = dc_module_add_weight(m, &w);
  n.type = w.type;
  return dc_module_add_node(m, &n);
}

static int32_t linear(dc_module *m, int32_t x, int32_t w, int32_t bias, int32_t residual, dc_act act, dc_dtype dt) {
  int32_t in[4] = {x, w}, nin = 2;
  if (bias >= 0) in[nin++] = bias;
  if (residual >= 0) in[nin++] = residual;
  dc_node n = dc_node_make(OP_LINEAR, nin, in);
  dc_node_set_int(&n, "bias", bias >= 0);
  dc_node_set_int(&n, "residual", residual >= 0);
  dc_node_set_int(&n, "act", act);
  n.scope = "mlp";
  return add(m, n, dt);
}

/* The plan's module in activation dtype dt (bf16), or its f32 twin. */
static void build(graph *g, dc_dtype dt) {
  dc_module *m = g->m = dc_module_create();
  dc_type xt = {dt, 3, {2, 3, 8}}, rt = {dt, 3, {2, 3, 10}}, ct = {dt, 4, {2, 8, 2, 3}};
  int32_t x = dc_module_add_input(m, "x", &xt, INIT_NORMAL), r = dc_module_add_input(m, "r", &rt, INIT_NORMAL);
  int32_t xc = dc_module_add_input(m, "xc", &ct, INIT_NORMAL);
  dc_type ht = {dt, 4, {2, 2, 3, 8}}; /* NHWC */
  int32_t xh = dc_module_add_input(m, "xh", &ht, INIT_NORMAL);
  m->nodes[xh].layout = LAYOUT_NHWC;
  int32_t w1 = weight(m, "w1", 2, (int64_t[]){10, 8}), b1 = weight(m, "b1", 1, (int64_t[]){10});
  int32_t w2 = weight(m, "w2", 2, (int64_t[]){10, 8}), wc = weight(m, "wc", 4, (int64_t[]){5, 8, 1, 1});
  int32_t wh = weight(m, "wh", 4, (int64_t[]){10, 1, 1, 8}); /* [O, kh, kw, C] */
  g->res_in = r;
  g->lin_bias = linear(m, x, w1, b1, -1, ACT_NONE, dt);
  g->lin_res = linear(m, x, w2, -1, r, ACT_NONE, dt);
  g->lin_gelu_tanh = linear(m, x, w1, b1, -1, ACT_GELU_TANH, dt);
  g->lin_gelu = linear(m, x, w1, b1, -1, ACT_GELU, dt);
  /* bias + a residual whose bytes the output takes over (memplan: in place), so C == D */
  g->hidden = linear(m, x, w2, -1, -1, ACT_NONE, dt);
  g->lin_inplace = linear(m, x, w1, b1, g->hidden, ACT_NONE, dt);
  g->lin_same = linear(m, x, w2, b1, -1, ACT_NONE, dt); /* lin_bias's problem: its choice, no second search */
  dc_node conv = dc_node_make(OP_CONV2D, 2, (int32_t[]){xc, wc});
  dc_node_set_int(&conv, "stride", 1);
  conv.scope = "proj";
  g->conv = add(m, conv, dt);
  dc_node convh = dc_node_make(OP_CONV2D, 3, (int32_t[]){xh, wh, b1}); /* channels last, with a bias: one GEMM */
  dc_node_set_int(&convh, "stride", 1);
  dc_node_set_int(&convh, "bias", 1);
  convh.layout = LAYOUT_NHWC;
  convh.scope = "proj_nhwc";
  g->conv_nhwc = add(m, convh, dt);
  const char *names[] = {"bias", "res", "gelu_tanh", "gelu", "conv", "inplace", "same", "conv_nhwc"};
  int32_t outs[] = {g->lin_bias,    g->lin_res,    g->lin_gelu_tanh, g->lin_gelu,
                    g->conv,        g->lin_inplace, g->lin_same,      g->conv_nhwc};
  for (int i = 0; i < 8; i++) CHECK_OK(dc_module_add_output(m, names[i], outs[i]));
  CHECK_OK(dc_memplan(m, NULL));
}

/* One kernel per computing node, images for sm_90. */
static void build_kernels(graph *g) {
  const dc_module *m = g->m;
  dc_plan_cuda *k = &g->k;
  memset(k, 0, sizeof *k);
  k->nnodes = m->nnodes;
  k->kernel_of_node = dc_calloc((size_t)m->nnodes, sizeof(int32_t));
  k->kernels = dc_calloc((size_t)m->nnodes, sizeof *k->kernels);
  for (int32_t s = 0; s < m->nnodes; s++) {
    int leaf = dc_op_get(m->nodes[s].op)->flags & OPF_LEAF;
    k->kernel_of_node[s] = leaf ? -1 : k->nkernels;
    if (leaf) continue;
    dc_plan_cuda_kernel *kk = &k->kernels[k->nkernels++];
    kk->name = dc_asprintf("k%d", (int)s);
    kk->grid[0] = kk->grid[1] = kk->grid[2] = 1;
    kk->block[0] = 64, kk->block[1] = kk->block[2] = 1;
    kk->images = dc_calloc(1, sizeof *kk->images);
    kk->nimages = 1;
    kk->images[0].arch = dc_strdup("sm_90");
    kk->images[0].kind = DC_CUDA_IMAGE_CUBIN;
    kk->images[0].data = (uint8_t *)dc_strdup("\x7f" "ELF fake");
    kk->images[0].size = 9;
  }
}

static void free_kernels(dc_plan_cuda *k) {
  for (int i = 0; i < k->nkernels; i++) {
    dc_free(k->kernels[i].name);
    dc_free(k->kernels[i].images[0].arch);
    dc_free(k->kernels[i].images[0].data);
    dc_free(k->kernels[i].images);
  }
  dc_free(k->kernels);
  dc_free(k->kernel_of_node);
}

/* The NVRTC kernels, emulated: decode the bf16 inputs, run the twin's
 * reference kernel, round the output to bf16. */
static int run_kernel_on_twin(int kernel, const unsigned grid[3], const unsigned block[3], unsigned smem,
                              void **params) {
  int32_t s = fk.kernel_node[kernel];
  const dc_node *n = &twin.m->nodes[s];
  const void *in[DC_MAX_INPUTS];
  float *tmp[DC_MAX_INPUTS] = {0};
  for (int i = 0; i < n->ninputs; i++) {
    const void *p = *(void **)params[i + 1];
    const dc_type *t = &twin.m->nodes[n->inputs[i]].type;
    in[i] = p;
    if (t->dtype != DT_F32 || twin.m->nodes[n->inputs[i]].op == OP_WEIGHT) continue;
    tmp[i] = malloc(dc_type_numel(t) * sizeof(float));
    for (size_t e = 0; e < dc_type_numel(t); e++) tmp[i][e] = dc_bf16_to_f32(((const uint16_t *)p)[e]);
    in[i] = tmp[i];
  }
  float *out = malloc(dc_type_numel(&n->type) * sizeof(float));
  dc_status *st = dc_ref_kernel_for(n->op)(twin.m, n, in, out);
  uint16_t *dst = *(void **)params[0];
  for (size_t e = 0; !st && e < dc_type_numel(&n->type); e++) dst[e] = dc_f32_to_bf16(out[e]);
  for (int i = 0; i < n->ninputs; i++) free(tmp[i]);
  free(out);
  if (st) dc_status_free(st);
  return st ? DC_CUDA_ERROR_LAUNCH_FAILED : 0;
}

static dc_lt_api lt_fake;

static dc_cuda_backend *create(const dc_cuda_backend_options *o) {
  dc_cu_api api = fake_api();
  dc_cuda_backend *b = NULL;
  fake_bind(plan.m, &plan.k);
  fk.execute = run_kernel_on_twin;
  CHECK_OK(dc_cuda_backend_create("lt.dplan", plan.m, &plan.k, WDATA, &api, o, &b));
  return b;
}

/* Inputs: small integers (bf16 holds them exactly); the same values in f32. */
static float **set_inputs(dc_cuda_backend *b) {
  const dc_module *m = plan.m;
  float **f = calloc((size_t)m->ninputs, sizeof *f);
  for (int i = 0; i < m->ninputs; i++) {
    size_t n = dc_type_numel(&m->nodes[m->inputs[i].node].type);
    uint16_t *dev = (uint16_t *)dc_cuda_backend_input(b, i);
    f[i] = malloc(n * sizeof(float));
    for (size_t e = 0; e < n; e++) f[i][e] = small_int(3), dev[e] = dc_f32_to_bf16(f[i][e]);
  }
  return f;
}

/* Every output equals the f32 twin's reference output rounded to bf16. */
static int outputs_exact(dc_cuda_backend *b, float **inputs) {
  const dc_module *m = twin.m;
  float **v = calloc((size_t)m->nnodes, sizeof *v);
  int same = 1;
  for (int32_t s = 0; s < m->nnodes; s++) {
    const dc_node *n = &m->nodes[s];
    if (n->op == OP_WEIGHT) continue;
    v[s] = malloc(dc_type_bytes(&n->type) + 4);
    if (n->op == OP_INPUT) memcpy(v[s], inputs[n->ref], dc_type_bytes(&n->type));
    else {
      const void *in[DC_MAX_INPUTS];
      for (int i = 0; i < n->ninputs; i++)
        in[i] = m->nodes[n->inputs[i]].op == OP_WEIGHT ? WDATA[m->nodes[n->inputs[i]].ref] : v[n->inputs[i]];
      CHECK_OK(dc_ref_kernel_for(n->op)(m, n, in, v[s]));
    }
  }
  for (int i = 0; i < m->noutputs; i++) {
    int32_t s = m->outputs[i].node;
    const uint16_t *got = (const uint16_t *)dc_cuda_backend_output(b, i);
    for (size_t e = 0; e < dc_type_numel(&m->nodes[s].type); e++)
      if (got[e] != dc_f32_to_bf16(v[s][e])) {
        if (same) fprintf(stderr, "output %s[%zu]: got %g, want %g\n", m->outputs[i].name, e, dc_bf16_to_f32(got[e]),
                          v[s][e]);
        same = 0;
      }
  }
  for (int32_t s = 0; s < m->nnodes; s++) free(v[s]);
  free(v);
  return same;
}

static void free_inputs(float **f) {
  for (int i = 0; i < plan.m->ninputs; i++) free(f[i]);
  free(f);
}

static int launches_of(int32_t s) {
  char name[32];
  int n = 0;
  snprintf(name, sizeof name, "k%d", (int)s);
  for (int i = 0; i < fk.ncalls; i++) n += fk.calls[i].kind == C_LAUNCH && !strcmp(fk.calls[i].fn, name);
  return n;
}

/* The real library, where installed: every entry the table names exists
 * (nothing is called but its version: there is no GPU here). */
static void test_real_library(void) {
  dc_lt_api real;
  dc_status *st = dc_lt_api_load(NULL, &real);
  if (st) {
    printf("real cuBLASLt: not installed here (%s)\n", dc_status_message(st));
    dc_status_free(st);
    return;
  }
  size_t version = real.GetVersion();
  CHECK(version >= 11000 && real.Matmul && real.MatmulAlgoCheck);
  printf("real cuBLASLt: loaded, every entry resolved, version %zu\n", version);
  dc_lt_api_unload(&real);
  CHECK_ERR(dc_lt_api_load("libcublasLt-none.so", &real), "cuBLASLt was not found (libcublasLt-none.so");
}

static void check_no_leaks(const char *what) {
  int ok = live_objs() == 0 && live_blocks(0) == 0 && live_blocks(1) == 0 && fk.ctx_refs == 0 && fl_live() == 0;
  CHECK(ok);
  if (!ok) fprintf(stderr, "%s: leaked driver objects %d, blocks %d/%d, cuBLASLt objects %d\n", what, live_objs(),
                   live_blocks(0), live_blocks(1), fl_live());
}

static const fl_call *matmul_of(int nth) {
  for (int i = 0; i < fl.ncalls; i++)
    if (fl.calls[i].kind == L_MATMUL && nth-- == 0) return &fl.calls[i];
  return NULL;
}

/* ==== the rule ======================================================================= */
static void test_rule(void) {
  const char *why[5];
  int32_t steps[5] = {plan.lin_bias, plan.lin_res, plan.lin_gelu_tanh, plan.lin_gelu, plan.conv};
  for (int i = 0; i < 5; i++) why[i] = dc_cuda_lt_why_not(plan.m, steps[i]);
  CHECK(!why[0] && !why[1] && !why[2] && !why[4]);
  CHECK(why[3] && strstr(why[3], "no epilogue"));
  const char *mixed = dc_cuda_lt_why_not(twin.m, twin.lin_bias);
  CHECK(mixed && strstr(mixed, "different dtypes"));
  dc_node n = plan.m->nodes[plan.lin_res];
  dc_node_set_int(&n, "act", ACT_GELU_TANH);
  dc_module *m = plan.m;
  dc_node saved = m->nodes[plan.lin_res];
  m->nodes[plan.lin_res] = n;
  const char *res_act = dc_cuda_lt_why_not(m, plan.lin_res);
  m->nodes[plan.lin_res] = saved;
  CHECK(res_act && strstr(res_act, "residual after an activation"));
  printf("rule: bias, residual, bias+gelu_tanh and an NCHW 1x1 conv run on cuBLASLt; erf gelu: \"%s\"; "
         "f32 activations, bf16 weights: \"%s\"; "
         "residual after gelu_tanh: \"%s\"\n",
         why[3], dc_cuda_lt_why_not(twin.m, twin.lin_bias), res_act);
}

/* ==== a plan on cuBLASLt ============================================================== */
static void test_runs(void) {
  fake_reset(9, 0);
  fl_reset();
  fl.cost[0] = 5, fl.cost[1] = 1, fl.cost[2] = 3; /* candidate 2 is the fastest */
  dc_cuda_backend *b = create(NULL);
  if (!b) return;
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(b);
  CHECK(bi->lt_eligible == 8 && bi->lt_steps == 8 && bi->lt_candidates == 24 && bi->lt_problems == 7 &&
        !bi->lt_note[0]);
  if (bi->lt_note[0]) fprintf(stderr, "note: %s\n", bi->lt_note);
  CHECK(fl_count(L_CREATE) == 1 && fl_count(L_DESC) == 8 && fl_count(L_LAYOUT) == 24 && fl_count(L_HEURISTIC) == 7);
  int heur_ok = 1;
  for (int i = 0; i < fl.ncalls; i++)
    if (fl.calls[i].kind == L_HEURISTIC)
      heur_ok &= fl.calls[i].ws_asked == (32u << 20) && fl.calls[i].align[0] >= 2 && fl.calls[i].align[3] >= 2;
  CHECK(heur_ok);
  /* timing: 3 candidates x 3 reps per GEMM; the cheapest (id 2) wins; its workspace is the one allocated */
  CHECK(fl_count(L_MATMUL) == 7 * 9 && bi->lt_workspace_bytes == fl.ws[1]);
  CHECK(strstr(bi->lt_cache, "wrote ") != NULL);
  int before = fl.ncalls;
  float **in = set_inputs(b);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(outputs_exact(b, in));
  /* per run: one matmul per GEMM step, in schedule order, on the compute stream; the erf gelu launches its kernel */
  int32_t order[8] = {plan.lin_bias,    plan.lin_res,  plan.lin_gelu_tanh, plan.hidden,
                      plan.lin_inplace, plan.lin_same, plan.conv,          plan.conv_nhwc};
  int ok = fl.ncalls - before == 8 && launches_of(plan.lin_gelu) == 1 && launches_of(plan.lin_bias) == 0;
  uint64_t wsp = 0;
  for (int i = 0; i < 8 && ok; i++) {
    const fl_call *c = &fl.calls[before + i];
    ok &= c->kind == L_MATMUL && c->algo == 2 && c->workspace_bytes == fl.ws[1];
    wsp = i ? wsp : c->workspace;
    ok &= c->workspace == wsp && wsp;
    int epi = order[i] == plan.lin_bias || order[i] == plan.lin_inplace || order[i] == plan.lin_same ||
                      order[i] == plan.conv_nhwc
                  ? DC_LT_EPILOGUE_BIAS
              : order[i] == plan.lin_gelu_tanh ? DC_LT_EPILOGUE_GELU_BIAS : DC_LT_EPILOGUE_DEFAULT;
    ok &= c->desc->epilogue == epi && c->desc->compute == DC_LT_COMPUTE_32F;
    if (epi != DC_LT_EPILOGUE_DEFAULT) /* the bias pointer is the bias weight's place */
      ok &= c->desc->bias_type == DC_LT_R_16BF &&
            !memcmp(c->desc->bias, B1, sizeof B1);
    ok &= order[i] == plan.lin_res ? c->beta == 1.0f && c->c != c->d
          : order[i] == plan.lin_inplace ? c->beta == 1.0f && c->c == c->d /* the residual's own bytes */
                                          : c->beta == 0.0f;
    ok &= order[i] == plan.conv ? c->desc->transa == DC_LT_OP_N : c->desc->transa == DC_LT_OP_T;
  }
  CHECK(ok);
  printf("a run: 8 GEMM steps as cuBLASLt matmuls (bias, residual as C with beta 1, bias+gelu_tanh, none, bias + a "
         "residual in place (C == D), a batched NCHW 1x1 conv, an NHWC 1x1 conv with a bias, one more of the first's "
         "problem: 7 heuristic calls), the erf gelu on its kernel; outputs equal the f32 twin's rounded to bf16, bit "
         "for bit; the timed choice took candidate 2 of 3 (the fake's cheapest), workspace %llu bytes\n",
         (unsigned long long)bi->lt_workspace_bytes);
  free_inputs(in);
  dc_cuda_backend_destroy(b);
  CHECK(fl_count(L_DESTROY) == 1 && fl_count(L_DESC_DESTROY) == 8 && fl_count(L_LAYOUT_DESTROY) == 24);
  check_no_leaks("cuBLASLt run");
}

/* The second load reads the cache (no heuristic, each algorithm checked);
 * a corrupt one is ignored, chosen again and rewritten. */
static char *cache_file(void) {
  char *dir = tu_path("cache/cublaslt");
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls %s/*.algos 2>/dev/null | head -1", dir);
  FILE *p = popen(cmd, "r");
  char line[512] = "";
  if (p && !fgets(line, sizeof line, p)) line[0] = 0;
  if (p) pclose(p);
  free(dir);
  line[strcspn(line, "\n")] = 0;
  return line[0] ? strdup(line) : NULL;
}

static void test_cache(void) {
  fake_reset(9, 0);
  fl_reset();
  fl.cost[0] = 5, fl.cost[1] = 1, fl.cost[2] = 3;
  dc_cuda_backend *b = create(NULL);
  if (!b) return;
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(b);
  CHECK(fl_count(L_HEURISTIC) == 0 && fl_count(L_CHECK) == 8 && bi->lt_steps == 8 &&
        !strncmp(bi->lt_cache, "read ", 5));
  float **in = set_inputs(b);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(outputs_exact(b, in) && matmul_of(0) && matmul_of(0)->algo == 2);
  free_inputs(in);
  dc_cuda_backend_destroy(b);
  char *path = cache_file();
  CHECK(path != NULL);
  if (!path) return;
  tu_write_file(path, "diffc cublaslt algorithms 1 junk\n", 33);
  fake_reset(9, 0);
  fl_reset();
  b = create(NULL);
  bi = b ? dc_cuda_backend_get_info(b) : NULL;
  CHECK(bi && bi->lt_steps == 8 && fl_count(L_HEURISTIC) == 7 && strstr(bi->lt_cache, "ignored ") &&
        strstr(bi->lt_cache, "first line"));
  if (bi) printf("cache: the second load read it (8 algorithms checked, no heuristic); a corrupt one: \"%s\"\n",
                 bi->lt_cache);
  dc_cuda_backend_destroy(b);
  /* rewritten: the next load reads it again */
  fake_reset(9, 0);
  fl_reset();
  b = create(NULL);
  bi = b ? dc_cuda_backend_get_info(b) : NULL;
  CHECK(bi && !strncmp(bi->lt_cache, "read ", 5) && fl_count(L_HEURISTIC) == 0);
  dc_cuda_backend_destroy(b);
  check_no_leaks("cache");
  free(path);
}

/* ==== fallbacks ====================================================================== */
static void check_fallback(dc_cuda_backend *b, const char *what, const char *note) {
  const dc_cuda_backend_info *bi = dc_cuda_backend_get_info(b);
  float **in = set_inputs(b);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  int ok = outputs_exact(b, in) && bi->lt_steps == 0 && bi->lt_eligible == 8 && !bi->lt_workspace_bytes &&
           fl_count(L_MATMUL) == 0 && launches_of(plan.lin_bias) == 1 && launches_of(plan.conv) == 1 &&
           strstr(bi->lt_note, note) != NULL;
  CHECK(ok);
  printf("%s: every step on its NVRTC kernel, outputs exact: \"%s\"\n", what, bi->lt_note);
  free_inputs(in);
  dc_cuda_backend_destroy(b);
  check_no_leaks(what);
}

static void test_fallbacks(void) {
  fake_reset(9, 0);
  fl_reset();
  setenv("DIFFC_CUBLASLT", "0", 1);
  dc_cuda_backend *b = create(NULL);
  unsetenv("DIFFC_CUBLASLT");
  if (b) check_fallback(b, "DIFFC_CUBLASLT=0", "DIFFC_CUBLASLT=0");
  CHECK(fl.ncalls == 0);

  fake_reset(9, 0);
  fl_reset();
  dc_cuda_backend_options o = {0};
  o.no_cublaslt = 1;
  if ((b = create(&o))) check_fallback(b, "--no-cublaslt", "--no-cublaslt");

  fake_reset(9, 0);
  fl_reset();
  dc_lt_api_set_missing(1);
  b = create(NULL);
  dc_lt_api_set_missing(0);
  if (b) check_fallback(b, "no library", "cuBLASLt was not found");

  fake_reset(9, 0); /* the fake driver without a fake cuBLASLt: never the real library */
  fl_reset();
  dc_lt_api_set_override(NULL);
  b = create(NULL);
  dc_lt_api_set_override(&lt_fake);
  if (b) check_fallback(b, "a fake driver alone", "fake CUDA driver");

  fake_reset(9, 0);
  fl_reset();
  fl.ncands = 0;
  char *dir = tu_path("cache-none");
  setenv("DIFFC_CACHE_DIR", dir, 1);
  b = create(NULL);
  if (b) check_fallback(b, "no algorithm", "no algorithm");
  char *root = tu_path("cache");
  setenv("DIFFC_CACHE_DIR", root, 1);
  free(dir), free(root);

  /* an f32 plan never opens cuBLASLt */
  fake_reset(9, 0);
  fl_reset();
  dc_cu_api api = fake_api();
  build_kernels(&twin);
  fake_bind(twin.m, &twin.k);
  fk.execute = NULL;
  CHECK_OK(dc_cuda_backend_create("f32.dplan", twin.m, &twin.k, WDATA, &api, NULL, &b));
  CHECK(b && dc_cuda_backend_get_info(b)->lt_eligible == 0 && fl.ncalls == 0);
  dc_cuda_backend_destroy(b);
  free_kernels(&twin.k);
  check_no_leaks("f32 plan");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  for (size_t i = 0; i < sizeof W1 / 2; i++) W1[i] = dc_f32_to_bf16(small_int(2)), W2[i] = dc_f32_to_bf16(small_int(2));
  for (size_t i = 0; i < sizeof B1 / 2; i++) B1[i] = dc_f32_to_bf16(small_int(4));
  for (size_t i = 0; i < sizeof WC / 2; i++) WC[i] = dc_f32_to_bf16(small_int(2));
  for (size_t i = 0; i < sizeof WH / 2; i++) WH[i] = dc_f32_to_bf16(small_int(2));
  char *root = tu_path("cache");
  setenv("DIFFC_CACHE_DIR", root, 1);
  free(root);
  build(&twin, DT_F32);
  build(&plan, DT_BF16);
  build_kernels(&plan);
  lt_fake = fake_lt_api();
  dc_lt_api_set_override(&lt_fake);
  printf("runtime/cublaslt.h's values and struct layouts: %s\n",
         header_checked ? "equal the toolkit's cublasLt.h (compile-time checks)" : "not checked (no cublasLt.h here)");
  test_real_library();
  test_rule();
  test_runs();
  test_cache();
  test_fallbacks();
  dc_lt_api_set_override(NULL);
  free_kernels(&plan.k);
  dc_module_destroy(plan.m);
  dc_module_destroy(twin.m);
  return tu_finish();
}
