/* bench_kernels.c — times single LLVM kernels at SD1.5 sizes (compiled for
 * the host, or the --cpu target $DIFFC_TEST_CPU names, as the kernel tests
 * do; linked as diffrun links them; best of N runs on 1 or 2 threads).
 * Built by CMake, never run by CTest: the unit tests only check.  Printed,
 * not asserted.
 *
 *   bench_kernels [norm|elementwise|layout|gemm|winograd|attention|positions|gated|conv3d|all]   (default all)
 *
 * norm: group_norm+silu 2x320x64x64, layer_norm 8192x320, Flux's
 * mod_layer_norm (no affine, one sample's shift and scale) and a weighted
 * rms_norm at 4608x3072 (and layer_norm there, to compare), the UNet's
 * [B,C,HW] -> [B,HW,C] permute and a bf16 -> f32 cast (GB/s read +
 * written); elementwise: silu, gelu and gelu_tanh 2x4096x1280, a broadcast add;
 * layout: SD1.5 convs, group_norm+silu and upsample, NCHW against NHWC;
 * gemm: SD1.5 convs and linears on 2 threads, GFLOP/s by wall and by the
 * slower thread's CPU time ($DIFFC_BENCH_WIDTH=8: the AVX2 kernels);
 * winograd: 3×3 convs on one thread, Winograd and direct, where its
 * thresholds come from (or the shapes in $DIFFC_BENCH_SHAPES, "C,O,HW;...");
 * attention: SD1.5- and VAE-shaped attention, Flux's (24 heads of 128 at
 * 768 and 4608 tokens) and T5-XXL's biased one (attention_bias, 64 heads of
 * 64, 512 tokens; and the same without the bias, for the bias's cost) on 1
 * and 2 threads (4·B·H·Sq·Sk·D flops) with the load average;
 * positions: the position encodings at those sizes: rope (the kernel and
 * the reference), and the reference kernels that rope_freqs and
 * relative_position_bias run on (their LLVM marks, codegen/llvm/k_table.c);
 * gated: a DiT's linear + gated_add against the linear with the gate fused;
 * conv3d: CogVideoX's VAE 3x3x3 convs on 2 threads, Winograd and direct,
 * each beside the direct 3x3 conv2d of one of its frames. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel_harness.h"
#include "kernel_runner.h"
#include "runtime/kernels.h"

static void report_status(dc_status *st) {
  if (!st) return;
  fprintf(stderr, "bench_kernels: %s\n", dc_status_message(st));
  dc_status_free(st);
  exit(1);
}

/* Node y on 1 and 2 threads: ms and GB/s of `bytes` moved. */
static void time_node(const char *what, dc_module *m, int32_t y, double bytes, int iters) {
  for (int threads = 1; threads <= 2; threads++) {
    double s;
    report_status(kh_time(m, y, threads, iters, &s));
    printf("bench %-32s %d thread(s): %8.3f ms, %6.1f GB/s\n", what, threads, s * 1e3, bytes / s * 1e-9);
  }
}

static int32_t input_of(dc_module *m, dc_dtype dt, int rank, const int64_t *dims) {
  dc_type t = {dt, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  return dc_module_add_input(m, "x", &t, INIT_NORMAL);
}

static int32_t norm_node(dc_module *m, dc_op op, int rank, const int64_t *dims, dc_layout layout) {
  int64_t c = op == OP_GROUP_NORM ? dims[layout == LAYOUT_NHWC ? rank - 1 : 1] : dims[rank - 1];
  int32_t in[3] = {kh_input(m, rank, dims), kh_input(m, 1, &c), kh_input(m, 1, &c)};
  dc_node n = dc_node_make(op, 3, in);
  dc_node_set_float(&n, "eps", op == OP_GROUP_NORM ? 1e-6 : 1e-5);
  if (op == OP_GROUP_NORM) dc_node_set_int(&n, "groups", 32), dc_node_set_int(&n, "act", ACT_SILU);
  n.layout = layout;
  return kh_node(m, n);
}

/* The DiT norms at Flux's 4608 tokens x 3072: mod_layer_norm without affine
 * (x [1,4608,3072], mod [1,6·3072]: shift at 0, scale at 3072) and rms_norm
 * with a weight.  GB/s of x read and y written (mod and w are small). */
static void bench_dit_norms(void) {
  const int64_t s = 4608, c = 3072;
  dc_module *m = dc_module_create();
  time_node("layer_norm 4608x3072 (to compare)", m, norm_node(m, OP_LAYER_NORM, 2, (int64_t[]){s, c}, LAYOUT_ROWMAJOR),
            2.0 * 4 * s * c, 10);
  dc_module_destroy(m);
  m = dc_module_create();
  int32_t in[2] = {kh_input(m, 3, (int64_t[]){1, s, c}), kh_input(m, 2, (int64_t[]){1, 6 * c})};
  dc_node n = dc_node_make(OP_MOD_LAYER_NORM, 2, in);
  dc_node_set_float(&n, "eps", 1e-6);
  dc_node_set_int(&n, "scale_at", c);
  dc_node_set_int(&n, "shift_at", 0);
  time_node("mod_layer_norm 4608x3072", m, kh_node(m, n), 2.0 * 4 * s * c, 10);
  dc_module_destroy(m);
  m = dc_module_create();
  int32_t rin[2] = {kh_input(m, 2, (int64_t[]){s, c}), kh_input(m, 1, &c)};
  n = dc_node_make(OP_RMS_NORM, 2, rin);
  dc_node_set_float(&n, "eps", 1e-6);
  time_node("rms_norm 4608x3072", m, kh_node(m, n), 2.0 * 4 * s * c, 10);
  dc_module_destroy(m);
}

static void bench_norm(void) {
  dc_module *m = dc_module_create();
  time_node("group_norm+silu 2x320x64x64", m, norm_node(m, OP_GROUP_NORM, 4, (int64_t[]){2, 320, 64, 64}, LAYOUT_NCHW),
            2.0 * 4 * 2 * 320 * 64 * 64, 20);
  dc_module_destroy(m);
  m = dc_module_create();
  time_node("layer_norm 8192x320", m, norm_node(m, OP_LAYER_NORM, 2, (int64_t[]){8192, 320}, LAYOUT_ROWMAJOR),
            2.0 * 4 * 8192 * 320, 20);
  dc_module_destroy(m);
  bench_dit_norms();
  m = dc_module_create();
  int32_t x = kh_input(m, 3, (int64_t[]){2, 320, 4096});
  dc_node n = dc_node_make(OP_PERMUTE, 1, &x);
  n.nlist = 3;
  memcpy(n.list, (int64_t[]){0, 2, 1}, 3 * sizeof(int64_t));
  time_node("permute 2x320x4096 (0,2,1)", m, kh_node(m, n), 2.0 * 4 * 2 * 320 * 4096, 20);
  dc_module_destroy(m);
  m = dc_module_create();
  x = input_of(m, DT_BF16, 2, (int64_t[]){4096, 2560});
  n = dc_node_make(OP_CAST, 1, &x);
  n.type = (dc_type){DT_F32, 2, {4096, 2560}};
  time_node("cast bf16>f32 4096x2560", m, kh_node(m, n), 6.0 * 4096 * 2560, 20);
  dc_module_destroy(m);
}

static void bench_elementwise(void) {
  const int64_t d[3] = {2, 4096, 1280};
  dc_op ops[3] = {OP_SILU, OP_GELU, OP_GELU_TANH};
  for (int i = 0; i < 3; i++) {
    dc_module *m = dc_module_create();
    int32_t x = kh_input(m, 3, d);
    char what[48];
    snprintf(what, sizeof what, "%s 2x4096x1280", dc_op_get(ops[i])->name);
    time_node(what, m, kh_node(m, dc_node_make(ops[i], 1, &x)), 8.0 * 2 * 4096 * 1280, 10);
    dc_module_destroy(m);
  }
  dc_module *m = dc_module_create();
  int32_t ins[2] = {kh_input(m, 4, (int64_t[]){2, 320, 64, 64}), kh_input(m, 4, (int64_t[]){2, 320, 1, 1})};
  time_node("add 2x320x64x64 + 2x320x1x1", m, kh_node(m, dc_node_make(OP_ADD, 2, ins)), 8.0 * 2 * 320 * 4096, 10);
  dc_module_destroy(m);
}

/* ---- layout: NCHW against NHWC, 2 threads ---- */
static double time_2t(dc_module *m, int32_t y, int iters) {
  double s;
  report_status(kh_time(m, y, 2, iters, &s));
  return s;
}

static void bench_layout_conv(int64_t c, int64_t hw, int64_t o, int64_t k) {
  double t[2];
  for (int l = 0; l < 2; l++) {
    dc_module *m = dc_module_create();
    int64_t x[4] = {2, c, hw, hw}, w[4] = {o, c, k, k}, xl[4] = {2, hw, hw, c}, wl[4] = {o, k, k, c};
    int32_t in[3] = {kh_input(m, 4, l ? xl : x), kh_input(m, 4, l ? wl : w), kh_input(m, 1, &o)};
    dc_node n = dc_node_make(OP_CONV2D, 3, in);
    dc_node_set_int(&n, "stride", 1);
    dc_node_set_int(&n, "bias", 1);
    const char *pads[4] = {"pad_t", "pad_l", "pad_b", "pad_r"};
    for (int p = 0; p < 4; p++) dc_node_set_int(&n, pads[p], k / 2);
    n.layout = l ? LAYOUT_NHWC : LAYOUT_NCHW;
    t[l] = time_2t(m, kh_node(m, n), 3);
    dc_module_destroy(m);
  }
  double flop = 2.0 * 2 * (double)(hw * hw) * (double)o * (double)(c * k * k);
  printf("bench conv 2x%lldx%lldx%lld->%lld k%lld: NCHW %.1f GFLOP/s, NHWC %.1f GFLOP/s\n", (long long)c,
         (long long)hw, (long long)hw, (long long)o, (long long)k, flop / t[0] * 1e-9, flop / t[1] * 1e-9);
}

/* group_norm + silu (groups 32) or upsample x2 of x [N,C,H,W], both
 * layouts: GB/s of x read and y written. */
static void bench_layout_data(dc_op op, int64_t n, int64_t c, int64_t hw) {
  double t[2];
  for (int l = 0; l < 2; l++) {
    dc_module *m = dc_module_create();
    int64_t x[4] = {n, c, hw, hw}, xl[4] = {n, hw, hw, c};
    int32_t y;
    if (op == OP_GROUP_NORM) {
      y = norm_node(m, op, 4, l ? xl : x, l ? LAYOUT_NHWC : LAYOUT_NCHW);
    } else {
      int32_t in = kh_input(m, 4, l ? xl : x);
      dc_node nd = dc_node_make(op, 1, &in);
      dc_node_set_int(&nd, "factor", 2);
      nd.layout = l ? LAYOUT_NHWC : LAYOUT_NCHW;
      y = kh_node(m, nd);
    }
    t[l] = time_2t(m, y, 5);
    dc_module_destroy(m);
  }
  double bytes = 4.0 * (double)(n * c * hw * hw) * (op == OP_GROUP_NORM ? 2 : 5);
  printf("bench %s %lldx%lldx%lldx%lld: NCHW %.1f GB/s, NHWC %.1f GB/s\n", dc_op_get(op)->name, (long long)n,
         (long long)c, (long long)hw, (long long)hw, bytes / t[0] * 1e-9, bytes / t[1] * 1e-9);
}

static void bench_layout(void) {
  bench_layout_conv(320, 64, 320, 3);
  bench_layout_conv(640, 32, 640, 3);
  bench_layout_conv(1280, 16, 1280, 3);
  bench_layout_conv(320, 64, 320, 1);
  bench_layout_data(OP_GROUP_NORM, 2, 320, 64);
  bench_layout_data(OP_GROUP_NORM, 1, 128, 256);
  bench_layout_data(OP_GROUP_NORM, 2, 1280, 16);
  bench_layout_data(OP_UPSAMPLE, 2, 1280, 16);
  bench_layout_data(OP_UPSAMPLE, 1, 256, 128);
}

/* ---- gemm and winograd: conv2d and linear (the old test_llvm_gemm DIFFC_BENCH modes) ---- */
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
           dc_act_name((dc_act)act));
  bench(what, m, y, 2.0 * (double)mrows * (double)k * (double)n);
  dc_module_destroy(m);
}

static void bench_gemm(void) {
  bench_conv(320, 320, 64, 3);
  bench_conv(640, 640, 32, 3);
  bench_conv(1280, 1280, 16, 3);
  bench_conv(320, 320, 64, 1);
  bench_linear(4096, 320, 320, ACT_NONE);
  bench_linear(4096, 320, 2560, ACT_GEGLU);
  bench_linear(8192, 1280, 320, ACT_NONE);
}

/* conv3d 3x3x3, pad 1 in H and W, over T + 2 frames (a causal conv after
 * its padding frames): CogVideoX's VAE decoder convs, on 2 threads,
 * Winograd where it applies and direct (GFLOP/s count the direct conv's
 * multiply-adds for both), with the direct 3x3 conv2d of one frame beside
 * them for the rate. */
static void bench_conv3d_shape(int64_t c, int64_t o, int64_t t, int64_t h, int64_t w) {
  dc_module *m = dc_module_create();
  int32_t in[3] = {kh_input(m, 5, (int64_t[]){1, c, t + 2, h, w}), kh_input(m, 5, (int64_t[]){o, c, 3, 3, 3}),
                   kh_input(m, 1, &o)};
  dc_node n = dc_node_make(OP_CONV3D, 3, in);
  dc_node_set_int(&n, "bias", 1);
  const char *attrs[5] = {"stride_t", "stride_h", "stride_w", "pad_h", "pad_w"};
  for (int a = 0; a < 5; a++) dc_node_set_int(&n, attrs[a], 1);
  char what[96];
  snprintf(what, sizeof what, "conv3d 3x3x3 %lld->%lld @%lldx%lldx%lld", (long long)c, (long long)o, (long long)t,
           (long long)h, (long long)w);
  int32_t y = kh_node(m, n);
  for (int wino = 1; wino >= 0; wino--) bench_algo(what, m, y, 2.0 * (double)(c * 27) * (double)o * (double)(t * h * w), wino, 2);
  dc_module_destroy(m);
  m = dc_module_create();
  conv_shape s = {1, c, h, w, o, 3, 3, 1, 1, 1, 1, 1};
  snprintf(what, sizeof what, "conv2d 3x3 %lld->%lld @%lldx%lld", (long long)c, (long long)o, (long long)h,
           (long long)w);
  double flops = 2.0 * (double)(c * 9) * (double)o * (double)(h * w);
  bench_algo(what, m, add_conv(m, &s, 1, ACT_NONE, RES_NONE), flops, 0, 2);
  dc_module_destroy(m);
}

static void bench_conv3d(void) {
  bench_conv3d_shape(128, 128, 3, 60, 90); /* the decoder's last up block at a reduced 480x720 / 8 */
  bench_conv3d_shape(512, 512, 2, 30, 45);
  bench_conv3d_shape(16, 512, 2, 30, 45); /* conv_in: the latent's 16 channels */
  bench_conv3d_shape(128, 3, 3, 60, 90);  /* conv_out: 3 channels */
}

static void bench_winograd(void) {
  const char *env = getenv("DIFFC_BENCH_SHAPES"); /* "C,O,HW;C,O,HW..." instead of the list below */
  long long c, o, hw;
  if (env) {
    for (const char *p = env; p && sscanf(p, "%lld,%lld,%lld", &c, &o, &hw) == 3; p = strchr(p, ';'), p = p ? p + 1 : p)
      bench_conv_algos(c, o, hw);
    return;
  }
  static const int64_t shapes[][3] = {{512, 512, 32}, {512, 512, 64}, {256, 256, 128}, {128, 128, 128},
                                      {128, 3, 128},  {640, 640, 32}, {1280, 1280, 16}, {320, 320, 64},
                                      {512, 512, 24}, {512, 512, 16}, {512, 512, 12},   {512, 512, 8},
                                      {64, 64, 64},   {16, 16, 64},   {8, 8, 64},       {4, 512, 32}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bench_conv_algos(shapes[i][0], shapes[i][1], shapes[i][2]);
}

/* ---- attention (the old test_llvm_attention DIFFC_BENCH mode) ---- */
/* The 1-minute load average: other work on the machine skews wall time. */
static double load_average(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f && fscanf(f, "%lf", &l) != 1) l = -1;
  if (f) fclose(f);
  return l;
}

/* q [B,Sq,H·D], k and v [B,Sk,H·D], scale 1/sqrt(D); with a bias
 * [H,Sq,Sk] (attention_bias), scale 1 as T5's. */
static void bench_attention_at(const char *what, int64_t b, int64_t h, int64_t d, int64_t sq, int64_t sk, int threads,
                               int bias) {
  dc_module *m = dc_module_create();
  int32_t in[4] = {kh_input(m, 3, (int64_t[]){b, sq, h * d}), kh_input(m, 3, (int64_t[]){b, sk, h * d}),
                   kh_input(m, 3, (int64_t[]){b, sk, h * d}), bias ? kh_input(m, 3, (int64_t[]){h, sq, sk}) : 0};
  dc_node n = dc_node_make(bias ? OP_ATTENTION_BIAS : OP_ATTENTION, bias ? 4 : 3, in);
  dc_node_set_int(&n, "heads", h);
  dc_node_set_float(&n, "scale", bias ? 1.0 : 1.0 / sqrt((double)d));
  double s = 0;
  report_status(kh_time(m, kh_node(m, n), threads, 5, &s));
  printf("bench %-28s B=%lld H=%lld Sq=%-4lld Sk=%-4lld D=%-3lld %d thread(s): %8.2f ms, %6.1f GFLOP/s "
         "(load average %.1f)\n",
         what, (long long)b, (long long)h, (long long)sq, (long long)sk, (long long)d, threads, s * 1e3,
         4.0 * (double)(b * h * sq * sk * d) / s * 1e-9, load_average());
  dc_module_destroy(m);
}

/* The best of `iters` runs of node y's reference kernel on random inputs, in seconds. */
static double time_reference(dc_module *m, int32_t y, int iters) {
  const dc_node *n = &m->nodes[y];
  void *in[DC_MAX_INPUTS] = {0}, *out = malloc((size_t)dc_type_bytes(&n->type) + 64);
  for (int i = 0; i < n->ninputs; i++) {
    const dc_type *t = &m->nodes[n->inputs[i]].type;
    float *v = malloc((size_t)dc_type_bytes(t) + 64);
    for (uint64_t j = 0; j < dc_type_numel(t); j++) v[j] = (float)(j % 97); /* positions; table values */
    in[i] = v;
  }
  double best = INFINITY;
  for (int it = 0; it <= iters; it++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    report_status(dc_ref_kernel_for(n->op)(m, n, (const void *const *)in, out));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (it > 0 && s < best) best = s; /* the first run warms caches and pages */
  }
  for (int i = 0; i < n->ninputs; i++) free(in[i]);
  free(out);
  return best;
}

/* Flux's rope tables (text and image ids, axes 16/56/56) and rope itself on
 * q [1, S, 24·128]; T5-XXL's position bias (32 buckets, 64 heads, S x S). */
static void bench_positions(int64_t flux_tokens, int64_t t5_tokens) {
  dc_module *m = dc_module_create();
  dc_node f = dc_node_make(OP_ROPE_FREQS, 1, (int32_t[]){kh_input(m, 2, (int64_t[]){flux_tokens, 3})});
  f.nlist = 3, f.list[0] = 16, f.list[1] = 56, f.list[2] = 56;
  dc_node_set_float(&f, "theta", 10000.0);
  int32_t freqs = kh_node(m, f);
  double s = time_reference(m, freqs, 5);
  printf("bench rope_freqs (reference)  S=%-5lld axes 16,56,56       1 thread:  %8.2f ms\n", (long long)flux_tokens, s * 1e3);
  dc_node r = dc_node_make(OP_ROPE, 2, (int32_t[]){kh_input(m, 3, (int64_t[]){1, flux_tokens, 24 * 128}), freqs});
  dc_node_set_int(&r, "heads", 24);
  dc_node_set_int(&r, "start", 0);
  int32_t y = kh_node(m, r);
  time_node("rope Flux q", m, y, 4.0 * (double)(2 * flux_tokens * 24 * 128 + flux_tokens * 256), 5);
  s = time_reference(m, y, 5);
  printf("bench rope Flux q (reference)          1 thread:  %8.3f ms\n", s * 1e3);
  dc_type tab = {DT_F32, 2, {32, 64}}, out = {DT_F32, 3, {64, t5_tokens, t5_tokens}};
  dc_node b = dc_node_make(OP_REL_POS_BIAS, 1, (int32_t[]){dc_module_add_input(m, "table", &tab, INIT_NORMAL)});
  dc_node_set_int(&b, "bidirectional", 1);
  dc_node_set_int(&b, "max_distance", 128);
  b.type = out;
  b.layout = LAYOUT_ROWMAJOR;
  s = time_reference(m, dc_module_add_node(m, &b), 5);
  printf("bench relative_position_bias (reference) H=64 S=%lld 1 thread: %8.2f ms, %6.1f GB/s written\n",
         (long long)t5_tokens, s * 1e3, 4.0 * 64 * (double)(t5_tokens * t5_tokens) / s * 1e-9);
  dc_module_destroy(m);
}

static void bench_attention(void) {
  for (int threads = 1; threads <= 2; threads++) {
    bench_attention_at("SD1.5 64x64 self-attention", 2, 8, 40, 4096, 4096, threads, 0);
    bench_attention_at("SD1.5 64x64 cross-attention", 2, 8, 40, 4096, 77, threads, 0);
    bench_attention_at("VAE mid-block attention", 1, 1, 512, 4096, 4096, threads, 0);
    bench_attention_at("Flux 256² joint attention", 1, 24, 128, 768, 768, threads, 0);
    bench_attention_at("Flux 1024² joint attention", 1, 24, 128, 4608, 4608, threads, 0);
    bench_attention_at("T5-XXL biased self-attention", 1, 64, 64, 512, 512, threads, 1);
    bench_attention_at("T5-XXL shape, no bias", 1, 64, 64, 512, 512, threads, 0);
  }
}

/* ---- gated: a DiT's to_out + gated residual, unfused and fused, 2 threads ----
 * linear [1,S,K]·[N,K]ᵀ + bias then gated_add (r + mod-chunk · y) as two
 * kernels, against the linear with the gate in its epilogue (one pass over
 * the output instead of three streams more). */
static void bench_gated_at(int64_t s, int64_t k, int64_t n) {
  dc_module *m = dc_module_create();
  int32_t x = kh_input(m, 3, (int64_t[]){1, s, k}), w = kh_input(m, 2, (int64_t[]){n, k}), b = kh_input(m, 1, &n);
  int32_t r = kh_input(m, 3, (int64_t[]){1, s, n}), mod = kh_input(m, 2, (int64_t[]){1, 6 * n});
  dc_node lin = dc_node_make(OP_LINEAR, 3, (int32_t[]){x, w, b});
  dc_node_set_int(&lin, "bias", 1);
  int32_t y = kh_node(m, lin);
  dc_node ga = dc_node_make(OP_GATED_ADD, 3, (int32_t[]){r, y, mod});
  dc_node_set_int(&ga, "at", 2 * n);
  int32_t g = kh_node(m, ga);
  dc_node fused = dc_node_make(OP_LINEAR, 5, (int32_t[]){x, w, b, r, mod});
  dc_node_set_int(&fused, "bias", 1);
  dc_node_set_int(&fused, "residual", 1);
  dc_node_set_int(&fused, "gate", 1);
  dc_node_set_int(&fused, "gate_at", 2 * n);
  int32_t f = kh_node(m, fused);
  double tl = time_2t(m, y, 5), tg = time_2t(m, g, 5), tf = time_2t(m, f, 5);
  printf("bench gated 1x%lldx%lld -> %lld, 2 threads: linear %.2f ms + gated_add %.2f ms = %.2f ms; fused %.2f ms "
         "(%.3f of the pair)\n",
         (long long)s, (long long)k, (long long)n, tl * 1e3, tg * 1e3, (tl + tg) * 1e3, tf * 1e3, tf / (tl + tg));
  dc_module_destroy(m);
}

static void bench_gated(void) {
  bench_gated_at(4096, 1024, 1024);
  bench_gated_at(4096, 256, 1024); /* a short K: the epilogue's share grows */
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  int all = strcmp(which, "all") == 0, any = 0;
  if (all || strcmp(which, "norm") == 0) bench_norm(), any = 1;
  if (all || strcmp(which, "elementwise") == 0) bench_elementwise(), any = 1;
  if (all || strcmp(which, "layout") == 0) bench_layout(), any = 1;
  if (all || strcmp(which, "gemm") == 0) bench_gemm(), any = 1;
  if (all || strcmp(which, "winograd") == 0) bench_winograd(), any = 1;
  if (all || strcmp(which, "attention") == 0) bench_attention(), any = 1;
  if (all || strcmp(which, "positions") == 0) bench_positions(4608, 512), any = 1;
  if (all || strcmp(which, "gated") == 0) bench_gated(), any = 1;
  if (all || strcmp(which, "conv3d") == 0) bench_conv3d(), any = 1;
  if (!any) {
    fprintf(stderr, "usage: bench_kernels [norm|elementwise|layout|gemm|winograd|attention|positions|gated|conv3d|all]\n");
    return 2;
  }
  return 0;
}
