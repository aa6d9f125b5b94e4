/* test_llvm_gemm.c — what of the LLVM conv2d and linear kernels (k_gemm.c,
 * k_conv.c, k_linear.c) has no analogue on another backend; their shapes
 * and epilogues are rows of the op case table (tests/op_cases_gemm.c).
 * Here: the same generator at 8 and 4 lanes (AVX2, SSE2) whatever the
 * host, the k loop's registers in the assembly (48 FMAs per step, no
 * spills), and the fused gelu against double erf on a dense grid; the
 * default's choice of the Winograd F(2×2, 3×3) conv (k_winograd.c) on
 * VAE/UNet shapes (the forced Winograd rows are in the case table).
 *
 * With DIFFC_BENCH=1 it also times SD1.5-sized shapes on 2 threads and
 * prints GFLOP/s; DIFFC_BENCH=winograd times 3×3 convs both ways on one
 * thread, where the Winograd path's thresholds come from (or the shapes in
 * DIFFC_BENCH_SHAPES, "C,O,HW;..."; printed, not
 * asserted; off by default so ctest stays fast; DIFFC_BENCH_ONLY=1 skips
 * the checks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/llvm/llvm_codegen.h"
#include "kernel_harness.h"
#include "runtime/cpu_kernels.h"
#include "runtime/kernels.h"
#include "support/threadpool.h"
#include "testutil.h"

enum { RES_NONE, RES_FULL, RES_CHANNEL }; /* residual: none, output-shaped, [N,O,1,1] / [N] */

static const char *act_name(int act) { return dc_act_name((dc_act)act); }

typedef struct {
  int64_t n, c, h, w, o, kh, kw, stride, pt, pb, pl, pr;
} conv_shape;

static int32_t add_conv(dc_module *m, const conv_shape *s, int bias, int act, int res) {
  int32_t in[4];
  int nin = 0;
  in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->c, s->h, s->w});
  in[nin++] = kh_input(m, 4, (int64_t[]){s->o, s->c, s->kh, s->kw});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){s->o});
  int64_t ho = (s->h + s->pt + s->pb - s->kh) / s->stride + 1, wo = (s->w + s->pl + s->pr - s->kw) / s->stride + 1;
  if (res == RES_FULL) in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->o, ho, wo});
  if (res == RES_CHANNEL) in[nin++] = kh_input(m, 4, (int64_t[]){s->n, s->o, 1, 1});
  dc_node n = dc_node_make(OP_CONV2D, nin, in);
  dc_node_set_int(&n, "stride", s->stride);
  dc_node_set_int(&n, "pad_t", s->pt);
  dc_node_set_int(&n, "pad_b", s->pb);
  dc_node_set_int(&n, "pad_l", s->pl);
  dc_node_set_int(&n, "pad_r", s->pr);
  dc_node_set_int(&n, "bias", bias);
  dc_node_set_int(&n, "act", act);
  dc_node_set_int(&n, "residual", res != RES_NONE);
  return kh_node(m, n);
}

/* x [lead..., k] · w[n, k]ᵀ; res: RES_FULL (output-shaped) or RES_CHANNEL ([nout]). */
static int32_t add_linear(dc_module *m, int rank, const int64_t *xdims, int64_t n, int bias, int act, int res) {
  int32_t in[4];
  int nin = 0;
  int64_t k = xdims[rank - 1], odims[DC_MAX_DIMS];
  in[nin++] = kh_input(m, rank, xdims);
  in[nin++] = kh_input(m, 2, (int64_t[]){n, k});
  if (bias) in[nin++] = kh_input(m, 1, (int64_t[]){n});
  memcpy(odims, xdims, sizeof(int64_t) * (size_t)rank);
  odims[rank - 1] = act == ACT_GEGLU ? n / 2 : n;
  if (res == RES_FULL) in[nin++] = kh_input(m, rank, odims);
  if (res == RES_CHANNEL) in[nin++] = kh_input(m, 1, &odims[rank - 1]);
  dc_node nd = dc_node_make(OP_LINEAR, nin, in);
  dc_node_set_int(&nd, "bias", bias);
  dc_node_set_int(&nd, "act", act);
  dc_node_set_int(&nd, "residual", res != RES_NONE);
  return kh_node(m, nd);
}

/* ---- running a kernel on chosen inputs (gelu grid, timing) ---- */
typedef struct {
  dc_plan_kernels k;
  dc_cpu_code *code;
  dc_cpu_kernel_fn *fns;
  dc_pool *pool;
  void *bufs[8];
  int nbufs;
  uint8_t *scratch;
  dc_cpu_kernel_fn fn;
  double cpu[64]; /* per thread: CPU seconds in the last run_all */
} runner;

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_part(void *ctx, int64_t part, int64_t nparts, int thread) {
  runner *r = ctx;
  void *bufs[8];
  memcpy(bufs, r->bufs, sizeof bufs);
  bufs[r->nbufs] = r->scratch + (size_t)thread * r->k.entries[0].scratch_bytes;
  double t0 = cpu_now();
  r->fn(bufs, part, nparts);
  if (thread < 64) r->cpu[thread] += cpu_now() - t0;
}

/* The kernel split into one part per pool thread; r->cpu[t] is thread t's
 * CPU time in it. */
static void run_all(runner *r) {
  memset(r->cpu, 0, sizeof r->cpu);
  int nt = dc_pool_size(r->pool);
  dc_pool_run(r->pool, nt, nt, run_part, r);
}

/* A target with W-lane vectors: 16 the host (AVX-512 here), 8 AVX2
 * (diffc --cpu x86-64-v3), 4 SSE2 (diffc --cpu generic), so the
 * generator's narrower paths run too. */
static dc_status *target_of_width(int width, dc_cpu_target *t) {
  if (width == 4) return dc_cpu_target_generic(t);
  if (width == 8) return dc_cpu_target_named("x86-64-v3", t);
  return dc_cpu_target_host(t);
}

/* Compiles node id for a W-lane target and loads it; bufs[1..] are the
 * caller's. */
static dc_status *runner_init_algo(runner *r, const dc_module *m, int32_t id, int threads, int width, int winograd);

static dc_status *runner_init(runner *r, const dc_module *m, int32_t id, int threads, int width) {
  return runner_init_algo(r, m, id, threads, width, 1);
}

/* winograd = 0: 3×3 convs take the direct path whatever their shape. */
static dc_status *runner_init_algo(runner *r, const dc_module *m, int32_t id, int threads, int width, int winograd) {
  memset(r, 0, sizeof *r);
  dc_cpu_target t;
  DC_TRY(target_of_width(width, &t));
  dc_llvm *g = NULL;
  dc_cpu_kernel ck;
  int has = 0;
  dc_buf obj;
  dc_buf_init(&obj);
  dc_status *st = dc_llvm_create(&t, &g);
  if (!st) dc_llvm_set_winograd(g, winograd);
  if (!st) st = dc_llvm_emit_node(g, m, id, &ck, &has);
  if (!st && !has) st = dc_error(DC_ERR_UNSUPPORTED, "no LLVM kernel");
  if (!st) st = kh_finish_cached(g, &ck, &obj);
  dc_llvm_destroy(g);
  r->k.triple = t.triple;
  r->k.cpu = t.cpu;
  r->k.features = t.features;
  dc_free(t.tune);
  if (st) {
    dc_buf_deinit(&obj);
    return st;
  }
  r->k.objects = dc_calloc(1, sizeof *r->k.objects);
  if (!r->k.objects) return dc_nomem("kernel object");
  r->k.objects[0] = (dc_plan_object){obj.data, obj.len};
  r->k.nobjects = 1;
  r->k.entries = dc_calloc(1, sizeof *r->k.entries);
  r->k.entries[0] = (dc_plan_kernel){id, ck.symbol, ck.scratch_bytes};
  r->k.nentries = 1;
  r->fns = calloc((size_t)m->nnodes, sizeof *r->fns);
  r->nbufs = m->nodes[id].ninputs + 1;
  DC_TRY(dc_cpu_code_load("gemm test", &r->k, m->nnodes, &r->code, r->fns));
  r->fn = r->fns[id];
  DC_TRY(dc_pool_create(threads, &r->pool));
  if (posix_memalign((void **)&r->scratch, 64, ck.scratch_bytes * (size_t)threads + 64))
    return dc_nomem("kernel scratch");
  return NULL;
}

static void runner_deinit(runner *r) {
  dc_pool_destroy(r->pool);
  dc_cpu_code_destroy(r->code);
  dc_plan_kernels_deinit(&r->k);
  free(r->fns);
  free(r->scratch);
}

/* gelu through linear{x = 1, K = 1, act=gelu}: y[j] = gelu(w[j]) at every
 * point of a dense grid, against the double formula the reference uses.
 * Down to x = -5 the reference is accurate, so the fused gelu must equal it
 * rounded (but for ties); below, the reference's 1 + erf cancels and only
 * the absolute error is bounded. */
static void check_gelu_grid(void) {
  enum { N = 1 << 20 };
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, 2, (int64_t[]){1, 1}, N, 0, ACT_GELU, RES_NONE);
  runner r;
  dc_status *st = runner_init(&r, m, y, 2, 16);
  CHECK_OK(st);
  if (!st) {
    float *x = malloc(N * sizeof *x), *out = malloc(N * sizeof *out), one = 1.0f;
    for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * (float)i / N;
    r.bufs[0] = out, r.bufs[1] = &one, r.bufs[2] = x;
    run_all(&r);
    double maxrel = 0, maxabs = 0;
    int differ = 0;
    for (int i = 0; i < N; i++) {
      double xd = x[i], ref = 0.5 * xd * (1.0 + erf(xd * 0.70710678118654752440));
      double err = fabs(out[i] - ref);
      if (xd > -5 && fabs(ref) > 0 && err / fabs(ref) > maxrel) maxrel = err / fabs(ref);
      if (xd > -5) differ += out[i] != (float)ref;
      if (xd <= -5 && err > maxabs) maxabs = err;
    }
    printf("gelu grid [-12, 12], %d points: max rel error %.3g and %d differ from the rounded reference "
           "(x > -5); max abs error %.3g below\n", N, maxrel, differ, maxabs);
    CHECK(maxrel <= 0x1p-24);   /* the float rounding of an exact result */
    CHECK(differ <= N / 10000); /* ties */
    CHECK(maxabs <= 1e-7);
    free(x);
    free(out);
  }
  runner_deinit(&r);
  dc_module_destroy(m);
}

/* Node y compiled for a W-lane target, on 2 threads, against the
 * reference.  inplace: the output buffer is the residual's, as the memory
 * planner may arrange (dc_node_inplace_input): the residual must be read
 * before it is overwritten. */
static void check_custom(dc_module *m, int32_t y, const char *what, int width, int inplace) {
  const dc_node *n = &m->nodes[y];
  runner r;
  dc_status *st = runner_init(&r, m, y, 2, width);
  if (st && width == 8 && strstr(dc_status_message(st), "features this machine lacks")) {
    /* a host without AVX2 and FMA cannot run x86-64-v3 code */
    printf("%-64s 8 lanes: skipped, %s\n", what, dc_status_message(st));
    dc_status_free(st);
    st = NULL;
    width = 0;
  }
  CHECK_OK(st);
  if (!st && width) {
    const void *in[DC_MAX_INPUTS];
    uint64_t seed = 99;
    for (int i = 0; i < n->ninputs; i++) {
      size_t cnt = dc_type_numel(&m->nodes[n->inputs[i]].type);
      float *d = malloc(cnt * sizeof *d);
      for (size_t j = 0; j < cnt; j++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        d[j] = (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5);
      }
      in[i] = r.bufs[i + 1] = d;
    }
    size_t numel = dc_type_numel(&n->type);
    float *want = malloc(numel * sizeof *want), *got = malloc(numel * sizeof *got);
    CHECK_OK(dc_ref_kernel_for(n->op)(m, n, in, want));
    r.bufs[0] = inplace ? r.bufs[n->ninputs] : got; /* the residual is the last input */
    run_all(&r);
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < numel; i++) {
      double d = (double)((float *)r.bufs[0])[i] - want[i];
      d2 += d * d;
      r2 += (double)want[i] * want[i];
    }
    double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
    printf("%-64s %s%d lanes, 2 threads: rel L2 %.2g\n", what, inplace ? "in place, " : "", width, rel);
    CHECK(rel <= 1e-5);
    for (int i = 1; i <= n->ninputs; i++) free(r.bufs[i]);
    free(want);
    free(got);
  }
  runner_deinit(&r);
}

/* The same generator at 8 lanes (AVX2) and 4 (SSE2, the portable target). */
static void width_cases(void) {
  dc_module *m = dc_module_create();
  conv_shape rows = {1, 17, 9, 16, 13, 3, 3, 1, 1, 1, 1, 1}, gath = {2, 5, 13, 7, 6, 3, 3, 2, 0, 1, 0, 1};
  conv_shape pw = {1, 300, 5, 6, 13, 1, 1, 1, 0, 0, 0, 0};
  int32_t y[] = {add_conv(m, &rows, 1, ACT_SILU, RES_CHANNEL), add_conv(m, &gath, 1, ACT_GELU, RES_FULL),
                 add_conv(m, &pw, 1, ACT_NONE, RES_FULL),
                 add_linear(m, 3, (int64_t[]){2, 7, 300}, 34, 1, ACT_GEGLU, RES_FULL),
                 add_linear(m, 2, (int64_t[]){13, 33}, 17, 1, ACT_SILU, RES_CHANNEL)};
  const char *what[] = {"conv 1x17x9x16->13 k3x3 b1 silu r2 (rows packer)",
                        "conv 2x5x13x7->6 k3x3 s2 p(0,1,0,1) b1 gelu r1 (gather packer)",
                        "conv 1x300x5x6->13 k1x1 b1 r1 (pointwise packer)", "linear [2,7,300] x 34 b1 geglu r1",
                        "linear [13,33] x 17 b1 silu r2"};
  for (int w = 8; w >= 4; w /= 2)
    for (int i = 0; i < 5; i++) check_custom(m, y[i], what[i], w, 0);
  dc_module_destroy(m);
}

/* ---- Winograd F(2×2, 3×3) (k_winograd.c): forced on awkward shapes, its
 * rows are in the op case table (op_cases_gemm.c, .winograd); here the
 * default's choice ---- */
/* The default (dc_llvm_set_winograd 1) takes the path only where it pays:
 * VAE-sized convs yes; small images, few channels, 1×1, stride 2, and C so
 * large that the weight block would not fit its scratch bound, no. */
static void winograd_choice(void) {
  static const struct {
    conv_shape s;
    int w16, w8; /* expected at 16 and 8 lanes */
  } cases[] = {
      {{1, 512, 32, 32, 512, 3, 3, 1, 1, 1, 1, 1}, 1, 1},  {{1, 128, 256, 256, 3, 3, 3, 1, 1, 1, 1, 1}, 1, 1},
      {{1, 512, 16, 16, 512, 3, 3, 1, 1, 1, 1, 1}, 0, 1},  {{1, 1280, 8, 8, 1280, 3, 3, 1, 1, 1, 1, 1}, 0, 0},
      {{1, 4, 32, 32, 512, 3, 3, 1, 1, 1, 1, 1}, 0, 0},    {{1, 64, 64, 64, 64, 3, 3, 2, 1, 1, 1, 1}, 0, 0},
      {{1, 64, 64, 64, 64, 1, 1, 1, 0, 0, 0, 0}, 0, 0},    {{1, 320, 24, 24, 320, 3, 3, 1, 1, 1, 1, 1}, 1, 1},
      /* large C: U blocks of 48 output channels fit its 4 MiB at C = 1280, not at 2560 */
      {{1, 1280, 16, 16, 1280, 3, 3, 1, 1, 1, 1, 1}, 0, 1}, {{1, 2560, 16, 16, 1280, 3, 3, 1, 1, 1, 1, 1}, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int w = 16; w >= 8; w /= 2) {
      dc_module *m = dc_module_create();
      int32_t y = add_conv(m, &cases[i].s, 1, ACT_NONE, RES_NONE);
      dc_cpu_target t;
      dc_llvm *g = NULL;
      dc_cpu_kernel ck = {0};
      int has = 0;
      dc_status *st = target_of_width(w, &t);
      if (!st) st = dc_llvm_create(&t, &g);
      if (!st) st = dc_llvm_emit_node(g, m, y, &ck, &has);
      CHECK_OK(st);
      int vw = st ? 0 : dc_cpu_target_vector_width(&t); /* the host may have 8 lanes, or 4 */
      int want = vw == 16 ? cases[i].w16 : vw == 8 ? cases[i].w8 : -1;
      CHECK(!st && (want < 0 || (strstr(ck.symbol, "_winograd") != NULL) == want));
      dc_free(ck.symbol);
      dc_llvm_destroy(g);
      if (!st) dc_cpu_target_deinit(&t);
      dc_module_destroy(m);
    }
}

/* ---- what the micro-kernel compiles to ---- */
/* In assembly text, the loop with the most FMAs among the blocks that
 * branch back to their own label (the unrolled k loop; an epilogue's exp
 * polynomial has FMAs too but is no loop): its FMA count and how many of
 * its instructions touch the stack. */
static void kloop_block(const char *asm_text, int *fmas, int *stack) {
  *fmas = *stack = 0;
  int f = 0, st = 0;
  char label[64] = "";
  for (const char *line = asm_text; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < 255 ? len : 255), line);
    line += len + (end ? 1 : 0);
    if (buf[0] != '\t' && buf[0] != ' ' && buf[0] != '#' && strchr(buf, ':')) { /* ".LBB0_5:": a new block */
      snprintf(label, sizeof label, "%.*s", (int)(strchr(buf, ':') - buf), buf);
      f = st = 0;
      continue;
    }
    if (buf[0] != '\t' || buf[1] == '.') continue; /* comments, directives */
    f += strstr(buf, "vfmadd") != NULL;
    st += strstr(buf, "(%rsp)") != NULL; /* a spill or reload (rbp is a general register here) */
    if (buf[1] != 'j') continue;
    const char *target = strrchr(buf, '\t');
    if (label[0] && target && !strcmp(target + 1, label) && f > *fmas) *fmas = f, *stack = st;
    f = st = 0; /* what follows a branch falls through unlabelled */
    label[0] = 0;
  }
}

/* AVX2 has 16 vector registers, AVX-512 32: at both widths the k loop of
 * the conv (direct and Winograd) and linear kernels holds its 6 × 2-vector tile in registers
 * (6·2 FMAs per k, unrolled 4 times or a multiple, and no spill or reload
 * through the stack). */
static void check_kloop_registers(void) {
  dc_module *m = dc_module_create();
  conv_shape s = {1, 40, 8, 16, 24, 3, 3, 1, 1, 1, 1, 1}, big = {1, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1, 1};
  int32_t ids[3] = {add_conv(m, &s, 1, ACT_SILU, RES_FULL),
                    add_linear(m, 2, (int64_t[]){50, 300}, 40, 1, ACT_NONE, RES_NONE),
                    add_conv(m, &big, 1, ACT_SILU, RES_FULL)};
  const char *what[3] = {"conv 1x40x8x16->24 k3x3", "linear [50,300] x 40", "conv 1x64x32x32->64 k3x3"};
  for (int w = 16; w >= 8; w /= 2)
    for (int i = 0; i < 3; i++) {
      dc_cpu_target t;
      dc_llvm *g = NULL;
      dc_cpu_kernel ck = {0};
      int has = 0;
      char *text = NULL;
      dc_buf obj;
      dc_buf_init(&obj);
      dc_status *st = target_of_width(w, &t);
      if (!st) st = dc_llvm_create(&t, &g);
      if (!st) st = dc_llvm_emit_node(g, m, ids[i], &ck, &has);
      if (!st) st = dc_llvm_finish(g, &obj);
      if (!st) st = dc_llvm_asm_text(g, &text);
      CHECK_OK(st);
      int fmas = 0, stack = 0;
      if (text) kloop_block(text, &fmas, &stack);
      printf("%-30s %2d lanes (%s): k loop %d FMAs, %d stack accesses (%s)\n", what[i], w, t.cpu, fmas, stack,
             ck.symbol ? ck.symbol : "");
      /* the small conv is direct, the large one Winograd: both on the same micro-kernel */
      CHECK(ck.symbol && (strstr(ck.symbol, "_winograd") != NULL) == (i == 2));
      CHECK(fmas >= 6 * 2 * 4 && fmas % (6 * 2 * 4) == 0 && stack == 0); /* LLVM may unroll it further */
      dc_free(text);
      dc_free(ck.symbol);
      dc_buf_deinit(&obj);
      dc_llvm_destroy(g);
      if (!st) dc_cpu_target_deinit(&t);
    }
  dc_module_destroy(m);
}

/* ---- timing (DIFFC_BENCH=1) ---- */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* DIFFC_BENCH_WIDTH=8 times the AVX2 kernels (16, the host's, by default). */
static int bench_width(void) {
  const char *w = getenv("DIFFC_BENCH_WIDTH");
  return w && atoi(w) == 8 ? 8 : 16;
}

static void bench_algo(const char *what, dc_module *m, int32_t y, double flops, int winograd, int threads) {
  runner r;
  dc_status *st = runner_init_algo(&r, m, y, threads, bench_width(), winograd);
  if (st) {
    printf("%s: %s\n", what, dc_status_message(st));
    dc_status_free(st);
    runner_deinit(&r);
    return;
  }
  const dc_node *n = &m->nodes[y];
  for (int i = 0; i <= n->ninputs; i++) {
    const dc_type *t = i ? &m->nodes[n->inputs[i - 1]].type : &n->type;
    size_t cnt = dc_type_numel(t);
    float *d = malloc(cnt * sizeof *d + 64);
    for (size_t j = 0; j < cnt; j++) d[j] = (float)((j * 2654435761u) % 1000) / 1000.0f - 0.5f;
    r.bufs[i] = d;
  }
  run_all(&r);
  /* Wall time, and the slower thread's CPU time: what the wall time would
   * be with a core per thread (the box is shared; other jobs steal cores). */
  double best = 1e30, best_cpu = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    run_all(&r);
    double dt = now() - t0, cpu = 0;
    for (int t = 0; t < threads; t++) cpu = r.cpu[t] > cpu ? r.cpu[t] : cpu;
    if (dt < best) best = dt;
    if (cpu < best_cpu) best_cpu = cpu;
  }
  printf("bench %-40s %-8s %7.2f ms %6.1f GFLOP/s wall, %6.1f GFLOP/s by thread CPU time (%d threads, %d lanes)\n",
         what, winograd ? "" : "direct", best * 1e3, flops / best * 1e-9, flops / best_cpu * 1e-9, threads,
         bench_width());
  for (int i = 0; i <= n->ninputs; i++) free(r.bufs[i]);
  runner_deinit(&r);
}

static void bench(const char *what, dc_module *m, int32_t y, double flops) { bench_algo(what, m, y, flops, 1, 2); }

/* A 3×3 conv both ways (Winograd where it applies, and direct), on one
 * thread: where the Winograd path starts to pay.  GFLOP/s count the direct
 * conv's multiply-adds for both. */
static void bench_conv_algos(int64_t c, int64_t o, int64_t hw) {
  dc_module *m = dc_module_create();
  conv_shape s = {1, c, hw, hw, o, 3, 3, 1, 1, 1, 1, 1};
  int32_t y = add_conv(m, &s, 1, ACT_NONE, RES_NONE);
  char what[96];
  snprintf(what, sizeof what, "conv 3x3 %lld->%lld @%lldx%lld", (long long)c, (long long)o, (long long)hw, (long long)hw);
  for (int w = 1; w >= 0; w--) bench_algo(what, m, y, 2.0 * (double)(c * 9) * (double)o * (double)(hw * hw), w, 1);
  dc_module_destroy(m);
}

static void bench_conv(int64_t c, int64_t o, int64_t hw, int64_t k) {
  dc_module *m = dc_module_create();
  int64_t p = k / 2;
  conv_shape s = {1, c, hw, hw, o, k, k, 1, p, p, p, p};
  int32_t y = add_conv(m, &s, 1, ACT_NONE, RES_NONE);
  char what[96];
  snprintf(what, sizeof what, "conv %lldx%lld %lld->%lld @%lldx%lld", (long long)k, (long long)k, (long long)c,
           (long long)o, (long long)hw, (long long)hw);
  bench(what, m, y, 2.0 * (double)(c * k * k) * (double)o * (double)(hw * hw));
  dc_module_destroy(m);
}

static void bench_linear(int64_t mrows, int64_t k, int64_t n, int act) {
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, 2, (int64_t[]){mrows, k}, n, 1, act, RES_NONE);
  char what[96];
  snprintf(what, sizeof what, "linear M=%lld K=%lld N=%lld %s", (long long)mrows, (long long)k, (long long)n,
           act_name(act));
  bench(what, m, y, 2.0 * (double)mrows * (double)k * (double)n);
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (getenv("DIFFC_BENCH_ONLY")) goto benches;
  check_gelu_grid();
  width_cases();
  check_kloop_registers();
  winograd_choice();
benches:;
  const char *b = getenv("DIFFC_BENCH");
  const char *shapes_env = getenv("DIFFC_BENCH_SHAPES"); /* "C,O,HW;C,O,HW..." instead of the list below */
  if (b && !strcmp(b, "winograd") && shapes_env) {
    long long c, o, hw;
    for (const char *p = shapes_env; p && sscanf(p, "%lld,%lld,%lld", &c, &o, &hw) == 3; p = strchr(p, ';'), p = p ? p + 1 : p)
      bench_conv_algos(c, o, hw);
  } else if (b && !strcmp(b, "winograd")) {
    static const int64_t shapes[][3] = {{512, 512, 32}, {512, 512, 64}, {256, 256, 128}, {128, 128, 128},
                                        {128, 3, 128},  {640, 640, 32}, {1280, 1280, 16}, {320, 320, 64},
                                        {512, 512, 24}, {512, 512, 16}, {512, 512, 12},   {512, 512, 8},
                                        {64, 64, 64},   {16, 16, 64},   {8, 8, 64},       {4, 512, 32}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      bench_conv_algos(shapes[i][0], shapes[i][1], shapes[i][2]);
  } else if (b) {
    bench_conv(320, 320, 64, 3);
    bench_conv(640, 640, 32, 3);
    bench_conv(1280, 1280, 16, 3);
    bench_conv(320, 320, 64, 1);
    bench_linear(4096, 320, 320, ACT_NONE);
    bench_linear(4096, 320, 2560, ACT_GEGLU);
    bench_linear(8192, 1280, 320, ACT_NONE);
  }
  return tu_finish();
}
