/* test_fusion.c — the fusion passes (passes/fuse_*.c): on small graphs built
 * by hand, each fusion happens where it should, names what it absorbed, and
 * stays out when the intermediate has another reader, is a graph output, or
 * would break the epilogue order; the fused node sits where the schedule
 * stays topological.  Every graph (and the diffusers fixtures) is compiled
 * twice, with the whole pipeline and with the pipeline minus the fusion
 * passes, and run through the runtime: the outputs must be bit-identical
 * (on the reference kernels; the gated residuals and the DiT fixtures on
 * the LLVM kernels too).
 * The pipeline's verifier runs after every pass, as in diffc. */
#include <stdlib.h>
#include <string.h>

#include "codegen/emit_kernels.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/diffrun.h"
#include "plan/plan_format.h"
#include "testutil.h"

/* ---- a weight pool and a small graph builder -------------------------- */
typedef struct {
  const char *name;
  int rank;
  int64_t dims[4];
} pool_weight;

static const pool_weight pool[] = {
    {"conv.weight", 4, {4, 4, 3, 3}}, {"conv.bias", 1, {4}},       {"conv2.weight", 4, {4, 4, 3, 3}},
    {"short.weight", 4, {4, 4, 1, 1}}, {"big.weight", 4, {4, 4, 5, 5}}, {"norm.weight", 1, {4}},
    {"norm.bias", 1, {4}},            {"lin.weight", 2, {8, 8}},    {"lin.bias", 1, {8}},
    {"proj.weight", 2, {16, 8}},      {"proj.bias", 1, {16}},      {"temb.weight", 2, {4, 8}},
    {"temb.bias", 1, {4}},
};
enum { NPOOL = sizeof pool / sizeof pool[0] };
static char *pool_path;

static void write_pool(void) {
  dc_st_out t[NPOOL];
  float *data[NPOOL];
  uint32_t s = 7;
  for (int i = 0; i < NPOOL; i++) {
    dc_type ty = {DT_F32, pool[i].rank, {0}};
    memcpy(ty.dims, pool[i].dims, sizeof pool[i].dims);
    data[i] = malloc(dc_type_bytes(&ty));
    for (uint64_t k = 0; k < dc_type_numel(&ty); k++) {
      s = s * 1664525u + 1013904223u;
      data[i][k] = (float)((s >> 8) / 8388608.0 - 1.0) * 0.5f;
    }
    t[i] = (dc_st_out){pool[i].name, ty, data[i]};
  }
  pool_path = tu_path("pool.safetensors");
  CHECK_OK(dc_st_write(pool_path, t, NPOOL));
  for (int i = 0; i < NPOOL; i++) free(data[i]);
}

typedef struct {
  dc_module *m;
  dc_st_file f;
  int32_t file;
} graph;

static void graph_init(graph *g) {
  CHECK_OK(dc_st_open(pool_path, &g->f));
  g->m = dc_module_create();
  dc_weight_file wf = {pool_path, g->f.header_hash, g->f.file.size};
  g->file = dc_module_add_file(g->m, &wf);
  CHECK_OK(dc_module_set_meta(g->m, "class", "Test"));
}

static dc_module *graph_done(graph *g) {
  dc_st_close(&g->f);
  return g->m;
}

static int32_t add(graph *g, dc_node n) {
  CHECK_OK(dc_infer_type(g->m, &n, &n.type));
  if (n.layout == LAYOUT_ROWMAJOR && n.type.rank == 4) n.layout = LAYOUT_NCHW;
  return dc_module_add_node(g->m, &n);
}

static int32_t W(graph *g, const char *name) {
  const dc_st_tensor *t = dc_st_find(&g->f, name);
  dc_weight w = {.name = name, .file = g->file, .offset = t->offset, .bytes = t->bytes, .type = {t->dtype, t->rank, {0}}};
  memcpy(w.type.dims, t->dims, sizeof t->dims);
  dc_node n = dc_node_make(OP_WEIGHT, 0, NULL);
  n.ref = dc_module_add_weight(g->m, &w);
  n.type = w.type;
  return dc_module_add_node(g->m, &n);
}

static int32_t input(graph *g, const char *name, int rank, const int64_t *dims) {
  dc_type t = {DT_F32, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  return dc_module_add_input(g->m, name, &t, INIT_NORMAL);
}
#define IN(g, name, ...) \
  input((g), (name), sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

static int32_t conv(graph *g, int32_t x, const char *w, int pad, int bias) {
  int32_t ins[3] = {x, W(g, w), bias ? W(g, "conv.bias") : -1};
  dc_node n = dc_node_make(OP_CONV2D, bias ? 3 : 2, ins);
  dc_node_set_int(&n, "bias", bias);
  dc_node_set_int(&n, "stride", 1);
  dc_node_set_int(&n, "pad_t", pad);
  dc_node_set_int(&n, "pad_b", pad);
  dc_node_set_int(&n, "pad_l", pad);
  dc_node_set_int(&n, "pad_r", pad);
  n.scope = "conv";
  return add(g, n);
}

static int32_t linear(graph *g, int32_t x, const char *prefix) {
  char wn[32], bn[32];
  snprintf(wn, sizeof wn, "%s.weight", prefix);
  snprintf(bn, sizeof bn, "%s.bias", prefix);
  int32_t w = W(g, wn), b = W(g, bn);
  dc_node n = dc_node_make(OP_LINEAR, 3, (int32_t[]){x, w, b});
  dc_node_set_int(&n, "bias", 1);
  n.scope = "linear";
  return add(g, n);
}

static int32_t group_norm(graph *g, int32_t x) {
  int32_t ga = W(g, "norm.weight"), be = W(g, "norm.bias");
  dc_node n = dc_node_make(OP_GROUP_NORM, 3, (int32_t[]){x, ga, be});
  dc_node_set_int(&n, "groups", 2);
  dc_node_set_float(&n, "eps", 1e-5);
  n.scope = "norm";
  return add(g, n);
}

static int32_t op1(graph *g, dc_op op, int32_t x) { return add(g, dc_node_make(op, 1, &x)); }
static int32_t op2(graph *g, dc_op op, int32_t a, int32_t b) {
  return add(g, dc_node_make(op, 2, (int32_t[]){a, b}));
}

static int32_t reshape(graph *g, int32_t x, int rank, const int64_t *dims) {
  dc_node n = dc_node_make(OP_RESHAPE, 1, &x);
  n.type = (dc_type){DT_F32, rank, {0}};
  memcpy(n.type.dims, dims, sizeof(int64_t) * (size_t)rank);
  return add(g, n);
}

/* ---- compile twice, run twice ----------------------------------------- */
static int is_fusion(const char *pass) { return strncmp(pass, "fuse-", 5) == 0; }

/* The pipeline's passes in order (minus the fusion passes when asked), the
 * verifier after each, as dc_pipeline_run does. */
static dc_status *run_passes(dc_module *m, int fuse) {
  int n;
  const dc_pass *p = dc_pass_list(&n);
  DC_TRY(dc_verify(m, "frontend"));
  for (int i = 0; i < n; i++) {
    if (!fuse && is_fusion(p[i].name)) continue;
    DC_TRY(dc_status_annotate(p[i].run(m, NULL), "pass %s", p[i].name));
    DC_TRY(dc_verify(m, p[i].name));
  }
  return NULL;
}

static int count_op(const dc_module *m, dc_op op) {
  int k = 0;
  for (int i = 0; i < m->nnodes; i++) k += m->nodes[i].op == op;
  return k;
}

/* Inputs to feed: from a fixture's io file (by name), else seeded random. */
typedef struct {
  const dc_st_file *io;
  uint64_t seed;
} feed;

typedef struct {
  int steps;
  uint64_t peak; /* measured device peak, checked equal to the plan's */
  float **out;   /* per output, malloc'd */
  size_t *numel;
  int nout;
} run_result;

static void result_free(run_result *r) {
  for (int i = 0; i < r->nout; i++) free(r->out[i]);
  free(r->out);
  free(r->numel);
}

static void set_inputs(drt_plan *p, const feed *fd) {
  if (!fd->io) {
    drt_set_random_inputs(p, fd->seed);
    return;
  }
  for (int i = 0; i < drt_input_count(p); i++) {
    const drt_tensor_info *info = drt_input_info(p, i);
    const dc_st_tensor *t = dc_st_find(fd->io, info->name);
    CHECK(t && t->bytes == info->numel * 4);
    if (!t || t->bytes != info->numel * 4) continue;
    float *d = malloc(t->bytes);
    memcpy(d, fd->io->file.data + t->offset, t->bytes);
    CHECK_OK(drt_set_input(p, info->name, d, info->numel));
    free(d);
  }
}

/* The plan's LLVM kernels for the host (llvm) or none (the reference's). */
static dc_status *emit_kernels(const dc_module *m, const char *backend, dc_plan *plan) {
  if (strcmp(backend, "llvm") != 0) return NULL;
  dc_cpu_target t;
  DC_TRY(dc_cpu_target_host(&t));
  dc_cpu_emit_options eo = {0};
  dc_status *st = dc_emit_cpu_kernels(m, &t, &eo, &plan->kernels);
  dc_cpu_target_deinit(&t);
  return st;
}

/* Writes m (compiled) as a plan, loads it, runs it on `backend` (reference,
 * or llvm on 2 threads); m stays the caller's. */
static int run_module(dc_module *m, const feed *fd, const char *name, const char *backend, run_result *r) {
  char *text = tu_ir_text(m), *path = tu_path(name);
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = text, .module = m};
  drt_options opts = {.backend = backend, .threads = 2};
  drt_plan *p = NULL;
  drt_stats s = {0};
  memset(r, 0, sizeof *r);
  dc_status *st = emit_kernels(m, backend, &plan);
  if (!st) st = dc_plan_write(path, &plan);
  dc_plan_kernels_deinit(&plan.kernels);
  if (!st) st = drt_load(path, &opts, &p);
  if (!st) {
    set_inputs(p, fd);
    st = drt_run(p, &s);
  }
  int ok = st == NULL;
  CHECK_OK(st);
  if (ok) {
    r->steps = s.steps;
    r->peak = s.device_peak_bytes;
    CHECK(s.device_peak_bytes == s.device_predicted_bytes);
    r->nout = drt_output_count(p);
    r->out = calloc((size_t)r->nout, sizeof *r->out);
    r->numel = calloc((size_t)r->nout, sizeof *r->numel);
    for (int i = 0; i < r->nout; i++) {
      const float *o = drt_output(p, drt_output_info(p, i)->name, &r->numel[i]);
      r->out[i] = malloc(r->numel[i] * sizeof(float) + 1);
      memcpy(r->out[i], o, r->numel[i] * sizeof(float));
    }
  }
  drt_destroy(p);
  dc_free(text);
  free(path);
  return ok;
}

/* Runs both modules on the same inputs on `backend`; their outputs must
 * match bit for bit.  Prints the steps and peaks. */
static void compare_on(const char *what, dc_module *plain, dc_module *fused, const feed *fd, const char *backend) {
  run_result a, b;
  if (!run_module(plain, fd, "plain.dplan", backend, &a)) return;
  if (!run_module(fused, fd, "fused.dplan", backend, &b)) {
    result_free(&a);
    return;
  }
  int same = a.nout == b.nout;
  for (int i = 0; same && i < a.nout; i++)
    same = a.numel[i] == b.numel[i] && memcmp(a.out[i], b.out[i], a.numel[i] * sizeof(float)) == 0;
  CHECK(same);
  printf("  %s on %s: %d -> %d steps, activation peak %llu -> %llu bytes, outputs %s\n", what, backend, a.steps,
         b.steps, (unsigned long long)a.peak, (unsigned long long)b.peak, same ? "bit-identical" : "DIFFER");
  result_free(&a);
  result_free(&b);
}

/* On the reference kernels, and with `llvm` on the LLVM ones too (their
 * fused epilogues must round as the separate kernels do). */
static void compare_runs(const char *what, dc_module *plain, dc_module *fused, const feed *fd, int llvm) {
  compare_on(what, plain, fused, fd, "reference");
  if (llvm) compare_on(what, plain, fused, fd, "llvm");
}

typedef dc_module *(*builder)(void);

/* Builds the graph twice, compiles it with and without fusion, checks the
 * fused dump holds each of `want` and none of `reject`, and compares runs. */
static void fusion_case_on(const char *what, builder build, const char *const *want, const char *const *reject,
                           int llvm) {
  dc_module *plain = build(), *fused = build();
  CHECK_OK(run_passes(plain, 0));
  CHECK_OK(run_passes(fused, 1));
  char *dump = tu_ir_text(fused);
  int ok = 1;
  for (int i = 0; want && want[i]; i++)
    if (!strstr(dump, want[i])) {
      fprintf(stderr, "  %s: the fused dump lacks \"%s\"\n", what, want[i]);
      ok = 0;
    }
  for (int i = 0; reject && reject[i]; i++)
    if (strstr(dump, reject[i])) {
      fprintf(stderr, "  %s: the fused dump has \"%s\"\n", what, reject[i]);
      ok = 0;
    }
  CHECK(ok);
  if (!ok) fprintf(stderr, "%s", dump);
  feed fd = {NULL, 1};
  compare_runs(what, plain, fused, &fd, llvm);
  dc_free(dump);
  dc_module_destroy(plain);
  dc_module_destroy(fused);
}
static void fusion_case(const char *what, builder build, const char *const *want, const char *const *reject) {
  fusion_case_on(what, build, want, reject, 0);
}
#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- the graphs ------------------------------------------------------- */
/* A resnet: norm → silu → conv1 → + temb (computed after conv1) → norm →
 * silu → conv2 → + x.  conv1's add can only sit where the add was. */
static dc_module *resnet(void) {
  graph g;
  graph_init(&g);
  int32_t x = IN(&g, "x", 2, 4, 5, 5), t = IN(&g, "temb", 2, 8);
  int32_t h = conv(&g, op1(&g, OP_SILU, group_norm(&g, x)), "conv.weight", 1, 1);
  int32_t e = reshape(&g, linear(&g, op1(&g, OP_SILU, t), "temb"), 4, (int64_t[]){2, 4, 1, 1});
  h = op2(&g, OP_ADD, h, e);
  h = conv(&g, op1(&g, OP_SILU, group_norm(&g, h)), "conv2.weight", 1, 1);
  CHECK_OK(dc_module_add_output(g.m, "y", op2(&g, OP_ADD, x, h)));
  return graph_done(&g);
}

static void test_resnet(void) {
  printf("resnet block:\n");
  fusion_case("norm+silu twice, conv1 + temb add (placed at the add), conv2 + skip add (as add's b)", resnet,
              LIST("%4 = group_norm(%0, %2, %3) {act=silu, eps=1e-05, groups=2} : f32[2,4,5,5]  "
                   "# absorbed silu, norm",
                   "%11 = reshape(%10) : f32[2,4,1,1]",
                   "%12 = conv2d(%4, %5, %6, %11) {act=none, bias=1, pad_b=1, pad_l=1, pad_r=1, pad_t=1, residual=1, "
                   "stride=1} : f32[2,4,5,5]  # absorbed add, conv",
                   "%15 = group_norm(%12, %13, %14) {act=silu, eps=1e-05, groups=2} : f32[2,4,5,5]  "
                   "# absorbed silu",
                   "%18 = conv2d(%15, %16, %17, %0) {act=none, bias=1, pad_b=1, pad_l=1, pad_r=1, pad_t=1, residual=1, "
                   "stride=1} : f32[2,4,5,5]  # absorbed add, conv",
                   "%7 = silu(%1) : f32[2,8]", "output y = %18"),
              LIST(" = add(", " = group_norm(%12, %13, %14) {act=none"));
}

/* A transformer feed-forward: linear → geglu → linear → + x, then a
 * linear → silu → + x (act, then residual, in one node). */
static dc_module *feed_forward(void) {
  graph g;
  graph_init(&g);
  int32_t x = IN(&g, "x", 2, 3, 8);
  int32_t h = linear(&g, op1(&g, OP_GEGLU, linear(&g, x, "proj")), "lin");
  h = op2(&g, OP_ADD, h, x);
  int32_t k = op1(&g, OP_SILU, linear(&g, h, "lin"));
  CHECK_OK(dc_module_add_output(g.m, "y", op2(&g, OP_ADD, k, h)));
  return graph_done(&g);
}

static void test_feed_forward(void) {
  printf("feed-forward:\n");
  fusion_case("linear + geglu, linear + residual, linear + silu + residual", feed_forward,
              LIST("%3 = linear(%0, %1, %2) {act=geglu, bias=1, gate=0, gate_at=0, residual=0} : f32[2,3,8]  "
                   "# absorbed geglu, linear",
                   "%6 = linear(%3, %4, %5, %0) {act=none, bias=1, gate=0, gate_at=0, residual=1} : f32[2,3,8]  "
                   "# absorbed add, linear",
                   "%9 = linear(%6, %7, %8, %6) {act=silu, bias=1, gate=0, gate_at=0, residual=1} : f32[2,3,8]  # absorbed silu, "
                   "add, linear"),
              LIST(" = geglu(", " = add(", " = silu("));
}

/* A DiT block's gated residuals: x + mod-chunk · linear(x), then with an
 * act in between (never in place: the residual is also the linear's x),
 * then a linear whose value is also a graph output (not folded: it must
 * stay materialized). */
static int32_t gated_add(graph *g, int32_t x, int32_t y, int32_t mod, int64_t at) {
  dc_node n = dc_node_make(OP_GATED_ADD, 3, (int32_t[]){x, y, mod});
  dc_node_set_int(&n, "at", at);
  n.scope = "gate";
  return add(g, n);
}

static dc_module *gated_residuals(void) {
  graph g;
  graph_init(&g);
  int32_t x = IN(&g, "x", 2, 3, 8), mod = IN(&g, "mod", 2, 24);
  int32_t h = gated_add(&g, x, linear(&g, x, "lin"), mod, 8);
  h = gated_add(&g, h, op1(&g, OP_SILU, linear(&g, h, "lin")), mod, 16);
  int32_t kept = linear(&g, h, "lin");
  CHECK_OK(dc_module_add_output(g.m, "y", gated_add(&g, h, kept, mod, 0)));
  CHECK_OK(dc_module_add_output(g.m, "kept", kept));
  return graph_done(&g);
}

static void test_gated_residuals(void) {
  printf("gated residuals:\n");
  fusion_case_on("linear + gated_add, linear + silu + gated_add, not an output's linear", gated_residuals,
              LIST("%4 = linear(%0, %2, %3, %0, %1) {act=none, bias=1, gate=1, gate_at=8, residual=1} : f32[2,3,8]  "
                   "# absorbed gated_add(gate), linear",
                   "%7 = linear(%4, %5, %6, %4, %1) {act=silu, bias=1, gate=1, gate_at=16, residual=1} : "
                   "f32[2,3,8]  # absorbed silu, gated_add(gate), linear",
                   "%10 = linear(%7, %8, %9) {act=none, bias=1, gate=0, gate_at=0, residual=0}",
                   "%11 = gated_add(%7, %10, %1) {at=0}"),
              LIST(" = silu("), 1);
}

/* Nothing may fuse: conv's value is read twice; norm's value is a graph
 * output; a broadcast producer as add's b; act after a residual. */
static dc_module *no_fusion(void) {
  graph g;
  graph_init(&g);
  int32_t x = IN(&g, "x", 1, 4, 5, 5);
  int32_t c = conv(&g, x, "conv.weight", 1, 1);
  int32_t s = op1(&g, OP_SILU, c);
  int32_t twice = op2(&g, OP_ADD, s, c);           /* conv read by silu and add */
  int32_t n = group_norm(&g, twice);
  int32_t out2 = op1(&g, OP_SILU, n);              /* norm is an output */
  int32_t small = conv(&g, x, "big.weight", 0, 1); /* [1,4,1,1] */
  int32_t bc = op2(&g, OP_ADD, out2, small);       /* producer broadcast as b */
  int32_t cv = conv(&g, bc, "conv2.weight", 1, 0);
  int32_t r = op2(&g, OP_ADD, cv, x);              /* the residual fuses ... */
  CHECK_OK(dc_module_add_output(g.m, "y", op1(&g, OP_GELU, r))); /* ... so gelu may not follow */
  CHECK_OK(dc_module_add_output(g.m, "norm", n));
  return graph_done(&g);
}

static void test_no_fusion(void) {
  printf("where fusion must not happen:\n");
  fusion_case("two readers, graph output, broadcast b, act after residual", no_fusion,
              LIST("%3 = conv2d(%0, %1, %2) {act=none, bias=1, pad_b=1, pad_l=1, pad_r=1, pad_t=1, residual=0",
                   "%4 = silu(%3)", "%5 = add(%4, %3)", "%8 = group_norm(%5, %6, %7) {act=none",
                   "%9 = silu(%8)", "%13 = add(%9, %12) : f32[1,4,5,5]",
                   "%15 = conv2d(%13, %14, %0) {act=none, bias=0, pad_b=1, pad_l=1, pad_r=1, pad_t=1, residual=1, "
                   "stride=1} : f32[1,4,5,5]  # absorbed add",
                   "%16 = gelu(%15)"),
              LIST("act=silu", "act=gelu", "absorbed silu"));
}

/* conv's silu is itself a graph output: conv absorbs it and the output
 * moves to the fused node; the add reading the silu is then not fused (the
 * value must stay materialized). */
static dc_module *output_consumer(void) {
  graph g;
  graph_init(&g);
  int32_t x = IN(&g, "x", 1, 4, 5, 5);
  int32_t s = op1(&g, OP_SILU, conv(&g, x, "conv.weight", 1, 1));
  CHECK_OK(dc_module_add_output(g.m, "act", s));
  CHECK_OK(dc_module_add_output(g.m, "y", op2(&g, OP_ADD, s, x)));
  return graph_done(&g);
}

static void test_output_consumer(void) {
  fusion_case("a fused consumer that is an output stays one", output_consumer,
              LIST("%3 = conv2d(%0, %1, %2) {act=silu, bias=1, pad_b=1, pad_l=1, pad_r=1, pad_t=1, residual=0, stride=1}",
                   "%4 = add(%3, %0)", "output act = %3"),
              LIST("residual=1"));
}

/* Both add operands are single-reader convs (conv2 + conv_shortcut): the
 * later one absorbs the add and keeps its place. */
static dc_module *two_candidates(void) {
  graph g;
  graph_init(&g);
  int32_t x = IN(&g, "x", 1, 4, 5, 5);
  int32_t a = conv(&g, x, "conv.weight", 1, 1), b = conv(&g, x, "short.weight", 0, 0);
  CHECK_OK(dc_module_add_output(g.m, "y", op2(&g, OP_ADD, a, b)));
  return graph_done(&g);
}

static void test_two_candidates(void) {
  fusion_case("add of two convs: the later absorbs it, in its own place", two_candidates,
              LIST("%3 = conv2d(%0, %1, %2) {act=none, bias=1, pad_b=1, pad_l=1, pad_r=1, pad_t=1, residual=0",
                   "%5 = conv2d(%0, %4, %3) {act=none, bias=0, pad_b=0, pad_l=0, pad_r=0, pad_t=0, residual=1, "
                   "stride=1} : f32[1,4,5,5]  # absorbed add"),
              NULL);
}

/* ---- dead readers ----------------------------------------------------- */
/* A reader dce has not removed yet still counts: conservative, never
 * wrong.  The fusion passes on their own leave the linear alone; the
 * pipeline's dce then drops the dead reader. */
static void test_dead_reader(void) {
  graph g;
  graph_init(&g);
  int32_t x = IN(&g, "x", 2, 8);
  int32_t l = linear(&g, x, "lin");
  op2(&g, OP_ADD, l, x); /* dead: no output reads it */
  CHECK_OK(dc_module_add_output(g.m, "y", op1(&g, OP_SILU, l)));
  dc_module *m = graph_done(&g);
  CHECK_OK(dc_pass_fuse_epilogue(m));
  CHECK_OK(dc_verify(m, "fuse-epilogue"));
  CHECK(count_op(m, OP_SILU) == 1 && count_op(m, OP_ADD) == 1);
  printf("dead reader: a reader dce has not removed yet blocks the fusion (%d nodes kept)\n", m->nnodes);
  dc_module_destroy(m);
}

/* ---- allocation failures ---------------------------------------------- */
/* Every allocation of the fusion passes may fail: each failure is a clean
 * out-of-memory error (valgrind checks that nothing leaks). */
static void test_alloc_failures(void) {
  int nomem = 0, ok = 0;
  for (long k = 0; k < 100 && !ok; k++) {
    dc_module *m = resnet();
    dc_alloc_fail_after(k);
    dc_status *st = dc_pass_fuse_norm_act(m);
    if (!st) st = dc_pass_fuse_epilogue(m);
    dc_alloc_fail_after(-1);
    if (!st) ok = 1;
    else nomem += dc_status_code_of(st) == DC_ERR_NOMEM, dc_status_free(st);
    dc_module_destroy(m);
  }
  CHECK(ok && nomem >= 8);
  printf("allocation failures: %d clean out-of-memory errors, then success\n", nomem);
}

/* ---- the diffusers fixtures ------------------------------------------- */
static int count_fused(const dc_module *m, dc_op op, const char *attr) {
  int k = 0;
  for (int i = 0; i < m->nnodes; i++) k += m->nodes[i].op == op && dc_node_int(&m->nodes[i], attr) != 0;
  return k;
}

static void print_fused_counts(const dc_module *m) {
  int act = count_fused(m, OP_CONV2D, "act") + count_fused(m, OP_LINEAR, "act");
  int res = count_fused(m, OP_CONV2D, "residual") + count_fused(m, OP_LINEAR, "residual");
  printf("    fused: %d group_norm{act}, %d conv2d/linear with act, %d with residual (%d gated); "
         "left: %d silu, %d add, %d geglu, %d gated_add\n",
         count_fused(m, OP_GROUP_NORM, "act"), act, res, count_fused(m, OP_LINEAR, "gate"), count_op(m, OP_SILU),
         count_op(m, OP_ADD), count_op(m, OP_GEGLU), count_op(m, OP_GATED_ADD));
}

static void fixture_case(const char *name, const char *entry, const char *io_name, int llvm) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *fx = dc_path_join(dir, name);
  char *model = dc_path_join(fx, "model"), *io_path = dc_path_join(fx, io_name);
  dc_folder f;
  dc_st_file io;
  dc_input_shape shapes[8];
  memset(&f, 0, sizeof f);
  memset(&io, 0, sizeof io);
  CHECK_OK(dc_st_open(io_path, &io));
  dc_build_options bo = {.entry = entry, .shapes = shapes, .nshapes = tu_io_shapes(&io, shapes, 8)};
  dc_module *plain = NULL, *fused = NULL;
  CHECK_OK(dc_folder_open(model, NULL, &f));
  CHECK_OK(dc_frontend_build(&f, &bo, &plain));
  CHECK_OK(dc_frontend_build(&f, &bo, &fused));
  if (plain && fused) {
    CHECK_OK(run_passes(plain, 0));
    CHECK_OK(run_passes(fused, 1));
    char what[128];
    snprintf(what, sizeof what, "%s %s (%s)", name, entry, io_name);
    feed fd = {&io, 0};
    compare_runs(what, plain, fused, &fd, llvm);
    print_fused_counts(fused);
  }
  dc_module_destroy(plain);
  dc_module_destroy(fused);
  dc_folder_close(&f);
  dc_st_close(&io);
  dc_free(dir), dc_free(fx), dc_free(model), dc_free(io_path);
}

static void test_fixtures(void) {
  printf("diffusers fixtures, compiled with and without fusion:\n");
  fixture_case("unet_tiny", "forward", "io_forward.safetensors", 0);
  fixture_case("unet_sd15", "forward", "io_forward.safetensors", 0);
  fixture_case("unet_sdxl", "forward", "io_forward.safetensors", 0);
  fixture_case("vae_sd", "decode", "io_decode.safetensors", 0);
  fixture_case("vae_sd", "encode", "io_encode.safetensors", 0);
  /* the DiTs' gated residuals on LLVM too */
  fixture_case("flux_dev", "forward", "io_forward.safetensors", 1);
  fixture_case("sd35", "forward", "io_forward.safetensors", 1);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  write_pool();
  test_resnet();
  test_feed_forward();
  test_gated_residuals();
  test_no_fusion();
  test_output_consumer();
  test_two_candidates();
  test_dead_reader();
  test_alloc_failures();
  test_fixtures();
  free(pool_path);
  return tu_finish();
}
