/* test_llvm_gemm.c — what of the LLVM conv2d and linear kernels (k_gemm.c,
 * k_conv.c, k_linear.c) has no analogue on another backend; their shapes
 * and epilogues are rows of the op case table (tests/op_cases_gemm.c).
 * Here: the same generator at 8 and 4 lanes (AVX2, SSE2) whatever the
 * host, the k loop's registers in the assembly (48 FMAs per step, no
 * spills), the fused gelu against double erf and the fused gelu_tanh
 * against a long double σ form on a dense grid; the
 * default's choice of the Winograd F(2×2, 3×3) conv (k_winograd.c) on
 * VAE/UNet shapes (the forced Winograd rows are in the case table).
 * Timings of these kernels: bench/bench_kernels (gemm, winograd). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/llvm/llvm_codegen.h"
#include "kernel_harness.h"
#include "kernel_runner.h"
#include "runtime/cpu_kernels.h"
#include "runtime/kernels.h"
#include "support/threadpool.h"
#include "testutil.h"

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

/* gelu_tanh the way no cancellation hurts: x·σ(2t) in long double, σ of a
 * negative argument as e^(2t)/(1 + e^(2t)). */
static double gelu_tanh_exact(double x) {
  long double xl = x, t = 0.79788456080286535587989211986876L * (xl + 0.044715L * xl * xl * xl);
  long double e = expl(-2 * fabsl(t)), sig = t >= 0 ? 1 / (1 + e) : e / (1 + e);
  return (double)(xl * sig);
}

/* The fused gelu_tanh on the same grid: unlike the reference (whose
 * 1 + tanh cancels below -5), the kernel's σ form is accurate everywhere,
 * so it must be the exact value rounded (but for ties) over all of
 * [-12, 12]: within half an ulp, and half the smallest subnormal where the
 * result is subnormal. */
static void check_gelu_tanh_grid(void) {
  enum { N = 1 << 20 };
  dc_module *m = dc_module_create();
  int32_t y = add_linear(m, 2, (int64_t[]){1, 1}, N, 0, ACT_GELU_TANH, RES_NONE);
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
      double ref = gelu_tanh_exact(x[i]), err = fabs(out[i] - ref);
      differ += out[i] != (float)ref;
      if (fabs(ref) >= FLT_MIN && err / fabs(ref) > maxrel) maxrel = err / fabs(ref);
      if (fabs(ref) < FLT_MIN && err > maxabs) maxabs = err;
    }
    printf("gelu_tanh grid [-12, 12], %d points: max rel error %.3g (normal results), max abs error %.3g "
           "(subnormal), %d differ from the exact value rounded\n", N, maxrel, maxabs, differ);
    CHECK(maxrel <= 0x1p-24 * (1 + 1e-9)); /* the float rounding of an exact result, and double's digits */
    CHECK(maxabs <= 0x1p-150 * (1 + 1e-9));
    CHECK(differ <= N / 10000); /* ties */
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

int main(int argc, char **argv) {
  tu_init(argc, argv);
  check_gelu_grid();
  check_gelu_tanh_grid();
  width_cases();
  check_kloop_registers();
  winograd_choice();
  return tu_finish();
}
