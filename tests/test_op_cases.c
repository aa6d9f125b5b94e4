/* test_op_cases.c — runs the op case table (op_cases.h) on the backends
 * named by argv[2] ("reference", "llvm", "cuda"; all three when absent;
 * only llvm when $DIFFC_TEST_CPU names another CPU target, which changes
 * the LLVM kernels alone), and only the rows of the ops named in argv[3]
 * when given ("rms_norm,gated_add": a run while writing a kernel):
 *   reference  every output element written (runs into buffers pre-filled
 *              two ways agree) and, for in-place rows, the output written
 *              over input 0 equal to the separate one; for NHWC rows, the
 *              bits of the NCHW reference on the same data permuted;
 *   llvm       the LLVM kernel against the reference on 1..3 threads, and in
 *              place (tests/kernel_harness.h);
 *   cuda       the generated CUDA C in the emulator against the reference,
 *              and in place; guard bytes catch stray writes
 *              (tests/cuda_harness.h; no host C++ compiler: skipped).
 * Each within its row's tolerance, else its op's on that backend
 * (oc_default_tol).  Then the coverage check: every op a backend lowers with
 * a kernel (ir/lowering.h) has rows that ran there.  Ops a backend marks
 * instead (the runtime's copies, a reference kernel, a refusal) need none
 * there: upload, transfer and constant have rows on the reference backend,
 * whose kernels they are.
 * $DIFFC_OC_OPS, a comma-separated list of op names, runs only those ops'
 * rows (and checks only their coverage): for working on a few ops. */
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda_codegen.h"
#include "codegen/llvm/llvm_codegen.h"
#include "cuda_harness.h"
#include "op_cases.h"
#include "runtime/kernels.h"
#include "testutil.h"

static int cuda_skipped;
static int ran[3][OP_COUNT]; /* rows run per backend (0 reference, 1 llvm, 2 cuda) and op */

static int tol_ok(const oc_tol *t, const kh_result *r) {
  if (t->exact) return r->bit_exact;
  return r->rel_l2 <= t->rel_l2 && (t->max_rel <= 0 || r->max_rel <= t->max_rel);
}

/* A row with bf16/f16 activations (c->act): both sides compute in f32 from
 * the same (rounded) inputs and round their result once, to the activation
 * dtype.  Results the f32 tolerance calls equal round to the same value,
 * or, where they straddle a rounding boundary, to neighbours one ulp apart:
 * at most 2^-7 relative for bf16 (8 significant bits) and 2^-10 for f16
 * (11 bits).  A bit-exact op stays bit-exact (equal f32 bits round alike). */
static oc_tol act_tol(oc_tol t, dc_dtype act) {
  double ulp = act == DT_BF16 ? 0x1p-7 : 0x1p-10;
  if (t.exact) return t;
  t.rel_l2 += ulp;
  if (t.max_rel > 0) t.max_rel += ulp;
  return t;
}

static oc_tol tol_of(const op_case *c, int backend) {
  const oc_tol *t = &c->tol[backend == OC_CUDA_TC ? 2 : backend == OC_CUDA ? 1 : 0];
  oc_tol tol = t->exact || t->rel_l2 > 0 ? *t : oc_default_tol(c->op, backend);
  return c->act ? act_tol(tol, c->act) : tol;
}

static void report(const char *backend, const char *what, const char *how, const kh_result *r, int ok) {
  printf("%-5s %-64s %-10s rel L2 %.2g, max rel %.2g%s%s\n", backend, what, how, r->rel_l2, r->max_rel,
         r->bit_exact ? " (bit-exact)" : "", ok ? "" : "  <-- FAILED");
}

/* ---- reference: self-consistency ----------------------------------------------- */
static void **random_inputs(const dc_module *m, const dc_node *n, double scale) {
  void **in = calloc(DC_MAX_INPUTS, sizeof *in);
  uint64_t s = 7;
  for (int i = 0; i < n->ninputs; i++) {
    const dc_type *t = &m->nodes[n->inputs[i]].type;
    size_t numel = dc_type_numel(t);
    float *d = malloc(numel * sizeof *d + 64); /* f32 values; a narrow dtype reads them as codes */
    for (size_t j = 0; j < numel; j++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      d[j] = (float)(scale * ((double)(s >> 40) / (double)(1ull << 23) - 1.0));
    }
    in[i] = d;
  }
  return in;
}

/* An NHWC row: the NHWC reference's output (out) is, permuted back, the
 * bits the NCHW reference gives on the inputs permuted back (by design of
 * runtime/kernels_ref_nn.c: a layout change is bit-exact on the reference). */
static int nhwc_agrees(const op_case *c, const dc_module *m, int32_t y, void *const *in, const void *out) {
  const dc_node *n = &m->nodes[y];
  dc_module *m2 = dc_module_create();
  int32_t y2 = oc_build_nchw(c, m2);
  int ok = y2 >= 0;
  if (ok) {
    const void *in2[DC_MAX_INPUTS];
    void *owned[DC_MAX_INPUTS] = {0};
    for (int i = 0; i < n->ninputs; i++) {
      const dc_node *x = &m->nodes[n->inputs[i]];
      in2[i] = x->layout == LAYOUT_NHWC ? owned[i] = oc_channels(in[i], dc_dtype_size(x->type.dtype), x->type.rank,
                                                                  x->type.dims, 0)
                                        : in[i];
    }
    const dc_node *n2 = &m2->nodes[y2];
    size_t bytes = (size_t)dc_type_bytes(&n2->type);
    void *want = malloc(bytes + 64), *back = oc_channels(out, dc_dtype_size(n->type.dtype), n->type.rank, n->type.dims, 0);
    dc_status *st = dc_ref_run(m2, n2, in2, want);
    CHECK_OK(st);
    ok = !st && memcmp(want, back, bytes) == 0;
    free(want), free(back);
    for (int i = 0; i < n->ninputs; i++) free(owned[i]);
  }
  dc_module_destroy(m2);
  return ok;
}

static void run_reference(const op_case *c, const dc_module *m, int32_t y, void **given, const char *what) {
  const dc_node *n = &m->nodes[y];
  void **in = given ? given : random_inputs(m, n, c->scale ? c->scale : 1.0);
  size_t bytes = (size_t)dc_type_bytes(&n->type);
  uint8_t *a = malloc(bytes + 64), *b = malloc(bytes + 64);
  memset(a, 0xff, bytes), memset(b, 0x00, bytes);
  dc_status *st = dc_ref_run(m, n, (const void *const *)in, a);
  if (!st) st = dc_ref_run(m, n, (const void *const *)in, b);
  int ok = !st && memcmp(a, b, bytes) == 0;
  if (!st && c->inplace) { /* out over a copy of input c->alias */
    const void *alias[DC_MAX_INPUTS];
    memcpy(b, in[c->alias], bytes);
    for (int i = 0; i < n->ninputs; i++) alias[i] = i == c->alias ? b : in[i];
    st = dc_ref_run(m, n, alias, b);
    ok = ok && !st && memcmp(a, b, bytes) == 0;
  }
  if (!st && n->op == OP_CONSTANT) ok = ok && memcmp(a, n->data, bytes) == 0; /* its bytes placed */
  if (!st && c->layout == LAYOUT_NHWC) ok = ok && nhwc_agrees(c, m, y, in, a);
  CHECK_OK(st);
  CHECK(ok);
  kh_result r = {0, 0, 0, ok};
  report("ref", what, c->layout == LAYOUT_NHWC ? (c->inplace ? "=nchw/ip" : "=nchw") : c->inplace ? "written/ip" : "written", &r, ok);
  if (!given) oc_free_inputs(in);
  free(a), free(b);
}

/* ---- llvm ------------------------------------------------------------------------ */
static void run_llvm_as(const op_case *c, const dc_module *m, int32_t y, void **given, const char *what);

static void run_llvm(const op_case *c, const dc_module *m, int32_t y, void **given, const char *what) {
  static const int wino[3] = {1, 2, 0}; /* OC_WINO_* as dc_llvm_set_winograd takes them */
  const char *env = getenv("DIFFC_TEST_CPU");
  if (c->cpu && env && *env) return; /* a row with a target of its own runs once */
  kh_options o = {wino[c->winograd], c->cpu};
  kh_set_options(&o);
  run_llvm_as(c, m, y, given, what);
  kh_set_options(NULL);
}

static void run_llvm_as(const op_case *c, const dc_module *m, int32_t y, void **given, const char *what) {
  oc_tol tol = tol_of(c, OC_LLVM);
  double scale = c->scale ? c->scale : 1.0;
  int maxt = c->max_threads ? c->max_threads : 3;
  for (int ip = 0; ip <= c->inplace; ip++)
    for (int threads = 1; threads <= maxt; threads++) {
      kh_result r;
      uint64_t seed = 42 + (uint64_t)threads;
      int same = 1; /* a residual read from the output buffer gives the bits of a separate one */
      dc_status *st = ip ? kh_compare_aliased(m, y, threads, seed, scale, c->alias, &r, c->alias ? &same : NULL)
                    : given ? kh_compare_with(m, y, threads, (const void *const *)given, &r)
                            : kh_compare(m, y, threads, seed, scale, &r);
      CHECK_OK(st);
      if (st) return;
      const char *sym = kh_last_symbol();
      size_t ls = strlen(sym);
      int wino = ls >= 9 && strcmp(sym + ls - 9, "_winograd") == 0; /* the kernel compiled was Winograd's */
      int ok = tol_ok(&tol, &r) && same && (c->winograd != OC_WINO_FORCE || wino);
      CHECK(ok);
      char how[32];
      snprintf(how, sizeof how, "%dt%s%s%s%s", threads, ip ? "/ip" : "", wino ? "/wino" : "", c->cpu ? "/" : "",
               c->cpu ? c->cpu : "");
      report("llvm", what, how, &r, ok);
    }
}

/* ---- cuda (the emulator) ------------------------------------------------------------ */
static int is_skip(dc_status *st) {
  if (!st || dc_status_code_of(st) != DC_ERR_UNSUPPORTED || !strstr(dc_status_message(st), "C++ compiler")) return 0;
  printf("SKIP cuda: %s\n", dc_status_message(st));
  dc_status_free(st);
  cuda_skipped = 1;
  return 1;
}

/* One compute precision: f32, or (backend OC_CUDA_TC) the tensor cores'. */
static void run_cuda_as(const op_case *c, const dc_module *m, int32_t y, void **given, const char *what,
                        dc_cuda_compute compute, int backend) {
  oc_tol tol = tol_of(c, backend);
  double scale = c->scale ? c->scale : 1.0;
  dc_cuda_options o = {.compute = compute, .sm_count = c->cuda_sm_count};
  for (int ip = 0; ip <= c->inplace && !cuda_skipped; ip++) {
    kh_result r;
    dc_status *st = ip ? ch_compare_aliased(m, y, &o, 42, scale, c->alias, &r)
                  : given ? ch_compare_with(m, y, &o, (const void *const *)given, &r)
                          : ch_compare(m, y, &o, 42, scale, &r);
    if (is_skip(st)) return;
    CHECK_OK(st);
    if (st) return;
    int ok = tol_ok(&tol, &r);
    CHECK(ok);
    char how[24];
    snprintf(how, sizeof how, "emu%s%s", compute == DC_CUDA_COMPUTE_F32 ? "" : compute == DC_CUDA_COMPUTE_BF16 ? "/bf16" : "/f16",
             ip ? "/ip" : "");
    report("cuda", what, how, &r, ok);
  }
}

static void run_cuda(const op_case *c, const dc_module *m, int32_t y, void **given, const char *what) {
  /* norms are f32 whatever the tensor-core precision: random rows generate for bf16 */
  int norm = c->op == OP_GROUP_NORM || c->op == OP_LAYER_NORM || c->op == OP_RMS_NORM || c->op == OP_MOD_LAYER_NORM;
  int cc = c->cuda_computes ? c->cuda_computes : OC_CC_F32;
  if (cc & OC_CC_F32) run_cuda_as(c, m, y, given, what, norm && !given ? DC_CUDA_COMPUTE_BF16 : DC_CUDA_COMPUTE_F32, OC_CUDA);
  if (c->act) { /* --compute-dtype sets both: bf16 activations with bf16 tensor cores, f16 with f16 */
    if (cc & (OC_CC_BF16 | OC_CC_F16))
      run_cuda_as(c, m, y, given, what, c->act == DT_BF16 ? DC_CUDA_COMPUTE_BF16 : DC_CUDA_COMPUTE_F16, OC_CUDA_TC);
    return;
  }
  if (cc & OC_CC_BF16) run_cuda_as(c, m, y, given, what, DC_CUDA_COMPUTE_BF16, OC_CUDA_TC);
  if (cc & OC_CC_F16) run_cuda_as(c, m, y, given, what, DC_CUDA_COMPUTE_F16, OC_CUDA_TC);
}

/* ---- the table -------------------------------------------------------------------------- */
static void run_case(const op_case *c, int backends) {
  char what[160];
  oc_describe(c, what, sizeof what);
  dc_module *m = dc_module_create();
  int32_t y = oc_build(c, m);
  CHECK(y >= 0);
  if (y >= 0) {
    void **given = oc_inputs(c, m, y);
    int where = (c->where ? c->where : OC_ALL) & backends;
    if (where & OC_REF) run_reference(c, m, y, given, what), ran[0][c->op]++;
    if (where & OC_LLVM) run_llvm(c, m, y, given, what), ran[1][c->op]++;
    if ((where & OC_CUDA) && !cuda_skipped) run_cuda(c, m, y, given, what), ran[2][c->op] += !cuda_skipped;
    oc_free_inputs(given);
  }
  dc_module_destroy(m);
}

/* argv[3], else $DIFFC_OC_OPS: the ops whose rows run (all when neither
 * is given), by name, comma-separated. */
static const char *only_ops;

static int op_selected(dc_op op) {
  const char *list = only_ops ? only_ops : getenv("DIFFC_OC_OPS"), *name = dc_op_get(op)->name;
  size_t len = strlen(name);
  if (!list || !*list) return 1;
  for (const char *p = list;; p++) {
    size_t n = strcspn(p, ",");
    if (n == len && strncmp(p, name, len) == 0) return 1;
    p += n;
    if (!*p) return 0;
  }
}

/* Every op a backend lowers with a kernel has rows that ran there. */
static void check_coverage(int backends) {
  static const dc_lowering_fn lowering[3] = {dc_ref_lowering, dc_llvm_lowering, dc_cuda_lowering};
  static const char *names[3] = {"reference", "llvm", "cuda"};
  for (int b = 0; b < 3; b++) {
    if (!(backends & (1 << b)) || (b == 2 && cuda_skipped)) continue;
    for (int op = 0; op < OP_COUNT; op++) {
      if (lowering[b]((dc_op)op).how != DC_LOWER_KERNEL || !op_selected((dc_op)op)) continue;
      int ok = ran[b][op] > 0;
      CHECK(ok);
      if (!ok) fprintf(stderr, "%s lowers %s with a kernel, but no row of the case table ran there\n", names[b],
                       dc_op_get((dc_op)op)->name);
    }
  }
}

static int backends_named(const char *arg) {
  const char *cpu = getenv("DIFFC_TEST_CPU");
  if (cpu && *cpu) return OC_LLVM; /* another CPU target changes the LLVM kernels only */
  if (!arg) return OC_ALL;
  if (strcmp(arg, "reference") == 0) return OC_REF;
  if (strcmp(arg, "llvm") == 0) return OC_LLVM;
  if (strcmp(arg, "cuda") == 0) return OC_CUDA;
  fprintf(stderr, "test_op_cases: unknown backend %s (reference, llvm or cuda)\n", arg);
  exit(2);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(tu_source_dir);
  int backends = backends_named(argc > 2 ? argv[2] : NULL), n = 0;
  only_ops = argc > 3 ? argv[3] : NULL;
  const op_case *table = oc_table(&n);
  for (int i = 0; i < n; i++)
    if (op_selected(table[i].op)) run_case(&table[i], backends);
  check_coverage(backends);
  return tu_finish_or_skip(backends == OC_CUDA && cuda_skipped);
}
