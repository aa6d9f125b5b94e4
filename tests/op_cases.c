/* op_cases.c — the rows of the op case table (op_cases.h) and what they
 * need: node building, input data, tolerances.  Rows come from the old
 * per-backend files (test_llvm_kernels, test_llvm_elementwise,
 * test_cuda_data, test_cuda_elementwise, test_cuda_norm), merged: a row
 * either file had runs on every backend, except rows too big for the CUDA
 * emulator (millions of threads, each a fiber), marked OC_CPU with why. */
#include "op_cases.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kernels.h"

#define NDIMS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define F32(...) {DT_F32, NDIMS(__VA_ARGS__), {__VA_ARGS__}}
#define TY(t, ...) {t, NDIMS(__VA_ARGS__), {__VA_ARGS__}}
#define I(n, v) {n, v, 0, 0}
#define F(n, v) {n, 0, v, 1}
#define PERM(...) .nlist = NDIMS(__VA_ARGS__), .list = {__VA_ARGS__}
#define BIG "too big for the CUDA emulator"

/* ---- tolerances ------------------------------------------------------------ */
oc_tol oc_default_tol(dc_op op, int backend) {
  switch (op) {
    case OP_SILU:
    case OP_GELU:
    case OP_QUICK_GELU:
    case OP_GELU_TANH: /* LLVM: double math rounded once, within an ulp; CUDA: f32 expf */
    case OP_GEGLU: return (oc_tol){0, 1e-6, 0};
    case OP_GROUP_NORM:
    case OP_LAYER_NORM: /* double statistics in the reference; f32 in the kernels */
    case OP_MOD_LAYER_NORM: /* and its modulation's two f32 steps are the reference's */
    case OP_RMS_NORM: /* LLVM: double sum of squares, then x·rstd·w in f32 (rstd rounded: ~1.5 ulp);
                       * CUDA: f32 warp sums */
      return (oc_tol){0, backend == OC_CUDA ? 1e-5 : 1e-6, 0};
    case OP_CONV2D:
    case OP_CONV3D:
    case OP_LINEAR:
    case OP_ATTENTION: /* f32 sums in another order; bf16 / f16 operands on the tensor cores */
    case OP_CAUSAL_ATTENTION:
    case OP_ATTENTION_BIAS: /* the bias added after the scale, as the reference; the sums as attention's */
      return (oc_tol){0, backend == OC_CUDA_TC ? 1e-2 : 1e-5, 0};
    default: return (oc_tol){1, 0, 0}; /* clamp, add, mul, scale, gated_add (the reference's roundings, one
                                        * or two IEEE operations), cast, time_embed, every move, embedding
                                        * and eos_pool (row copies): bit for bit; so are rope (each product
                                        * rounded, then the sum, no FMA), rope_freqs (the same double
                                        * math, rounded once; the emulator's cos and sin are the
                                        * host's) and relative_position_bias (the reference's buckets,
                                        * table values copied) */
  }
}

/* Tolerances of the special-value and sweep rows on LLVM. */
#define LLVM_TOL(e, l2, mr) .tol = {{e, l2, mr}, {0, 0, 0}}

/* ---- the static rows ----------------------------------------------------------- */
#define UNARY(op_, where_, ip, ...) \
  {.op = op_, .nin = 1, .in = {F32(__VA_ARGS__)}, .scale = 3.0, .inplace = ip, .where = where_}
#define CLAMP(ip, ...) \
  {.op = OP_CLAMP, .nin = 1, .in = {F32(__VA_ARGS__)}, .attrs = {F("min", -1.5), F("max", 2.0)}, .scale = 3.0, .inplace = ip}
#define BIN(op_, ip, a, b) {.op = op_, .nin = 2, .in = {a, b}, .scale = 2.0, .inplace = ip}
#define BIN_CPU(op_, ip, a, b) {.op = op_, .nin = 2, .in = {a, b}, .scale = 2.0, .inplace = ip, .where = OC_CPU, .why = BIG}
#define SCALE(ip, f, ...) \
  {.op = OP_SCALE, .nin = 1, .in = {F32(__VA_ARGS__)}, .attrs = {F("factor", f)}, .scale = 3.0, .inplace = ip}
#define GATED(ip, alias_, at_, x, mod)                                                                      \
  {.op = OP_GATED_ADD, .nin = 3, .in = {x, x, mod}, .attrs = {I("at", at_)}, .scale = 2.0, .inplace = ip, \
   .alias = alias_}
#define GEGLU(where_, ...) {.op = OP_GEGLU, .nin = 1, .in = {F32(__VA_ARGS__)}, .scale = 2.0, .where = where_}

static const op_case elementwise_rows[] = {
#define UNARY_SHAPES(op_)                                                                                     \
  UNARY(op_, 0, 0, 16), UNARY(op_, 0, 0, 1), UNARY(op_, 0, 0, 17), UNARY(op_, 0, 0, 3, 5, 7, 9),               \
      UNARY(op_, 0, 0, 64, 1000), UNARY(op_, 0, 1, 2, 4, 63, 65), UNARY(op_, 0, 1, 2, 4, 16, 16) /* vector path */
  UNARY_SHAPES(OP_SILU),
  UNARY_SHAPES(OP_GELU),
  UNARY_SHAPES(OP_QUICK_GELU),
  UNARY_SHAPES(OP_GELU_TANH),
  CLAMP(0, 16), CLAMP(0, 1), CLAMP(0, 17), CLAMP(0, 3, 5, 7, 9), CLAMP(0, 64, 1000), CLAMP(1, 2, 4, 63, 65),
  CLAMP(1, 2, 4, 16, 16),
  /* special values: on LLVM silu per element too; gelu by rel L2 only (the
   * reference's own tail is inexact, see the sweep) */
  {.op = OP_SILU, .nin = 1, .in = {F32(0)}, .data = OC_SPECIALS, .max_threads = 2, LLVM_TOL(0, 1e-6, 1e-6)},
  {.op = OP_GELU, .nin = 1, .in = {F32(0)}, .data = OC_SPECIALS, .max_threads = 2},
  {.op = OP_QUICK_GELU, .nin = 1, .in = {F32(0)}, .data = OC_SPECIALS, .max_threads = 2, LLVM_TOL(0, 1e-6, 1e-6)},
  /* gelu_tanh: NaN at -inf, inf at inf, -0 far below 0, as the reference's 0.5·x·(1 + tanh(t)) */
  {.op = OP_GELU_TANH, .nin = 1, .in = {F32(0)}, .data = OC_SPECIALS, .max_threads = 2},
  {.op = OP_CLAMP, .nin = 1, .in = {F32(0)}, .attrs = {F("min", 0.0), F("max", 88.0)}, .data = OC_SPECIALS,
   .max_threads = 2},
  /* scale: one multiply (Flux's timestep · 1000): overflow to inf, inf · 0 = NaN, subnormals */
  SCALE(0, 1000.0, 16), SCALE(0, 1000.0, 1), SCALE(0, -0.37, 17), SCALE(0, 0.5, 3, 5, 7, 9), SCALE(0, 3.0, 64, 1000),
  SCALE(1, 1e-3, 2, 4, 63, 65), SCALE(1, 1000.0, 2, 4, 16, 16),
  {.op = OP_SCALE, .nin = 1, .in = {F32(0)}, .attrs = {F("factor", 1000.0)}, .data = OC_SPECIALS, .max_threads = 2},
  {.op = OP_SCALE, .nin = 1, .in = {F32(0)}, .attrs = {F("factor", 0.0)}, .data = OC_SPECIALS, .max_threads = 2},
  {.op = OP_SCALE, .nin = 1, .in = {F32(0)}, .attrs = {F("factor", 1e-20)}, .data = OC_SPECIALS, .max_threads = 2},
  /* every 2^-12 in [lo, 40] and ±1e-38..1e38: gelu within one ulp (1.2e-7)
   * of the reference's double evaluation from -5 up (below, its 1 + erf(x/√2)
   * cancels in double), silu within 1e-6 from -40.  (An exhaustive run over
   * every float >= -5 found gelu within one ulp, silu within 3.5e-7.) */
  {.op = OP_GELU, .nin = 1, .in = {F32(0)}, .data = OC_SWEEP, .scale = -5, .max_threads = 2, .where = OC_CPU,
   .why = "the LLVM kernels' accuracy sweep", LLVM_TOL(0, 1e-7, 1.2e-7)},
  {.op = OP_SILU, .nin = 1, .in = {F32(0)}, .data = OC_SWEEP, .scale = -40, .max_threads = 2, .where = OC_CPU,
   .why = "the LLVM kernels' accuracy sweep", LLVM_TOL(0, 1e-7, 1e-6)},
  {.op = OP_QUICK_GELU, .nin = 1, .in = {F32(0)}, .data = OC_SWEEP, .scale = -40, .max_threads = 2, .where = OC_CPU,
   .why = "the LLVM kernels' accuracy sweep", LLVM_TOL(0, 1e-7, 1e-6)},
  /* gelu_tanh from -5 as gelu: below it the reference's own 1 + tanh(t) in
   * double keeps fewer digits than a float has.  (A run over every 13th
   * float in [-5, 40] found the LLVM kernel within one ulp, 1.19e-7.) */
  {.op = OP_GELU_TANH, .nin = 1, .in = {F32(0)}, .data = OC_SWEEP, .scale = -5, .max_threads = 2, .where = OC_CPU,
   .why = "the LLVM kernels' accuracy sweep", LLVM_TOL(0, 1e-7, 1.2e-7)},
  /* add and mul: [N,C,H,W] with every broadcast pattern the UNet and VAE
   * use, and the rest (a multiple of 4 inside: the vector path) */
#define A4 F32(2, 20, 8, 8)
#define BOTH(ip_add, ip_mul, b)                                                  \
  {.op = OP_ADD, .nin = 2, .in = {A4, b}, .scale = 2.0, .inplace = ip_add},       \
  {.op = OP_MUL, .nin = 2, .in = {A4, b}, .scale = 2.0, .inplace = ip_mul}
  BOTH(1, 0, F32(2, 20, 8, 8)), BOTH(0, 0, F32(2, 20, 1, 1)), BOTH(0, 0, F32(20, 1, 1)), BOTH(0, 1, F32(1, 20, 1, 1)),
  BOTH(0, 0, F32(1)), BOTH(0, 0, F32(8)), BOTH(1, 0, F32(1, 1, 8, 8)), BOTH(0, 0, F32(2, 1, 8, 8)),
  BOTH(0, 0, F32(2, 20, 1, 8)), BOTH(0, 1, F32(20, 8, 1)), BOTH(0, 0, F32(2, 1, 1, 1)), BOTH(0, 0, F32(1, 1, 1, 8)),
  /* odd sizes: the scalar path */
  BIN(OP_ADD, 1, F32(3, 5, 7, 9), F32(3, 5, 7, 9)), BIN(OP_ADD, 0, F32(3, 5, 7, 9), F32(5, 1, 9)),
  BIN(OP_MUL, 0, F32(3, 5, 7, 9), F32(5, 1, 9)), BIN(OP_MUL, 1, F32(3, 5, 7, 9), F32(3, 1, 7, 1)),
  BIN(OP_MUL, 0, F32(3, 5, 7, 9), F32(7, 9)), BIN(OP_ADD, 0, F32(3, 5, 7, 9), F32(7, 9)),
  BIN(OP_ADD, 0, F32(3, 5, 7, 9), F32(3, 5, 1, 1)), BIN(OP_ADD, 0, F32(3, 5, 7, 9), F32(1)),
  BIN(OP_MUL, 0, F32(3, 5, 7, 9), F32(1)),
  /* token rows [B,S,C] with [C] and friends; one element; a long 1-D row */
  BIN(OP_ADD, 0, F32(2, 77, 40), F32(40)), BIN(OP_ADD, 0, F32(2, 77, 40), F32(1, 1, 40)),
  BIN(OP_MUL, 0, F32(2, 77, 40), F32(2, 1, 40)), BIN(OP_MUL, 1, F32(2, 77, 40), F32(2, 77, 1)),
  BIN(OP_ADD, 0, F32(1), F32(1)), BIN(OP_ADD, 0, F32(1001), F32(1)), BIN(OP_MUL, 0, F32(3, 1001), F32(3, 1)),
  /* SD shapes, in place as the memory planner runs them */
  BIN(OP_ADD, 1, F32(2, 320, 32, 32), F32(2, 320, 1, 1)), BIN(OP_MUL, 1, F32(2, 1024, 320), F32(320)),
  BIN_CPU(OP_ADD, 1, F32(2, 320, 64, 64), F32(2, 320, 64, 64)),
  BIN_CPU(OP_ADD, 1, F32(2, 320, 64, 64), F32(2, 320, 1, 1)), BIN_CPU(OP_MUL, 1, F32(2, 4096, 320), F32(320)),
  /* gated_add: x, y [B,S,C], gate mod[b, at..at+C): C = 1, one row, odd C,
   * batches whose gates differ, the gate chunk last in mod, in place over x
   * and over y (a DiT's x + gate·attn(x)), SD3/Flux widths */
  GATED(0, 0, 0, F32(1, 1, 1), F32(1, 1)), GATED(0, 0, 2, F32(1, 1, 3), F32(1, 9)),
  GATED(0, 0, 80, F32(2, 77, 40), F32(2, 240)), GATED(0, 0, 34, F32(3, 5, 17), F32(3, 51)),
  GATED(0, 0, 16, F32(1, 16, 16), F32(1, 48)), GATED(1, 0, 33, F32(2, 9, 33), F32(2, 99)),
  GATED(1, 1, 64, F32(2, 4, 64), F32(2, 128)), GATED(1, 0, 0, F32(4, 3, 65), F32(4, 130)),
  GATED(0, 0, 2 * 1536, F32(2, 7, 1536), F32(2, 6 * 1536)),
  {.op = OP_GATED_ADD, .nin = 3, .in = {F32(2, 1024, 3072), F32(2, 1024, 3072), F32(2, 6 * 3072)},
   .attrs = {I("at", 5 * 3072)}, .scale = 2.0, .inplace = 1, .where = OC_CPU, .why = BIG},
  GEGLU(0, 2, 77, 80), GEGLU(0, 3, 5, 34), GEGLU(0, 2), GEGLU(0, 1, 34), GEGLU(0, 2, 64, 2560),
  {.op = OP_GEGLU, .nin = 1, .in = {F32(2, 256, 2560)}, .scale = 2.0, .where = OC_CPU, .why = BIG},
};

/* ---- data movement (random bytes: bits, not values) --------------------------- */
#define RESHAPE(from, to, where_) {.op = OP_RESHAPE, .nin = 1, .in = {from}, .out = to, .data = OC_BYTES, .where = where_}
#define PERMUTE(where_, x, ...) {.op = OP_PERMUTE, .nin = 1, .in = {x}, PERM(__VA_ARGS__), .data = OC_BYTES, .where = where_}
#define UPSAMPLE(f, where_, ...) \
  {.op = OP_UPSAMPLE, .nin = 1, .in = {F32(__VA_ARGS__)}, .attrs = {I("factor", f)}, .data = OC_BYTES, .where = where_}
#define CONCAT(axis, a, b, where_) \
  {.op = OP_CONCAT, .nin = 2, .in = {a, b}, .attrs = {I("axis", axis)}, .data = OC_BYTES, .where = where_}
#define SLICE(x, axis, s, e, where_) \
  {.op = OP_SLICE, .nin = 1, .in = {x}, .attrs = {I("axis", axis), I("start", s), I("end", e)}, .data = OC_BYTES, .where = where_}
#define TIME_EMBED(b, dim, flip, shift)                                                                     \
  {.op = OP_TIME_EMBED, .nin = 1, .in = {F32(b)},                                                           \
   .attrs = {I("dim", dim), I("flip_sin_to_cos", flip), F("freq_shift", shift)}, .data = OC_TIMESTEPS}

static const op_case data_rows[] = {
  RESHAPE(F32(2, 3, 5, 7), F32(6, 35), 0), RESHAPE(TY(DT_F16, 3, 1001), TY(DT_F16, 3003), 0),
  RESHAPE(TY(DT_F8_E5M2, 13), TY(DT_F8_E5M2, 13, 1), 0), RESHAPE(F32(2, 32, 16, 16), F32(2, 32, 256), 0),
  RESHAPE(F32(1), F32(1, 1), 0),
  {.op = OP_RESHAPE, .nin = 1, .in = {F32(2, 320, 64, 64)}, .out = F32(2, 320, 4096), .data = OC_BYTES,
   .where = OC_CPU, .why = BIG},
  /* the UNet's transposes: [B,C,HW] <-> [B,HW,C], NCHW <-> NHWC, heads */
  PERMUTE(0, F32(2, 320, 1024), 0, 2, 1), PERMUTE(0, F32(2, 1024, 320), 0, 2, 1),
  PERMUTE(OC_CPU, F32(2, 320, 4096), 0, 2, 1), PERMUTE(OC_CPU, F32(2, 4096, 320), 0, 2, 1),
  PERMUTE(0, F32(2, 320, 16, 16), 0, 2, 3, 1), PERMUTE(0, F32(2, 16, 16, 320), 0, 3, 1, 2),
  PERMUTE(0, F32(2, 77, 8, 40), 0, 2, 1, 3), PERMUTE(0, F32(2, 8, 77, 40), 0, 2, 1, 3),
  /* partial tiles, tiny, identity, size-1 dims, the transposed batch */
  PERMUTE(0, F32(3, 17, 33), 0, 2, 1), PERMUTE(0, F32(17, 33), 1, 0), PERMUTE(0, F32(16, 16), 1, 0),
  PERMUTE(0, F32(65, 97), 1, 0), PERMUTE(0, F32(1, 5), 1, 0), PERMUTE(0, F32(7), 0),
  PERMUTE(0, F32(3, 4, 5), 0, 1, 2), PERMUTE(0, F32(3, 1, 5), 2, 1, 0), PERMUTE(0, F32(40, 33, 48), 2, 0, 1),
  PERMUTE(0, F32(5, 33, 40), 2, 1, 0), PERMUTE(0, F32(2, 3, 4, 5, 6), 4, 2, 0, 3, 1),
  PERMUTE(0, F32(2, 3, 1, 4, 5, 3), 5, 0, 4, 1, 3, 2), PERMUTE(0, TY(DT_F16, 2, 40, 33), 0, 2, 1),
  PERMUTE(0, TY(DT_BF16, 2, 5, 6, 7), 3, 1, 0, 2), PERMUTE(0, TY(DT_F8_E4M3, 5, 19, 18), 2, 1, 0),
  UPSAMPLE(2, 0, 2, 4, 5, 7), UPSAMPLE(2, 0, 1, 3, 8, 16), UPSAMPLE(2, 0, 2, 3, 17, 33), UPSAMPLE(3, 0, 2, 3, 17, 33),
  UPSAMPLE(2, 0, 3, 5, 7), UPSAMPLE(2, 0, 1, 2, 3, 4, 5), UPSAMPLE(1, 0, 2, 3, 4, 5), UPSAMPLE(4, 0, 1, 1, 1, 1),
  UPSAMPLE(8, 0, 1, 2, 4, 20), UPSAMPLE(16, 0, 1, 2, 3, 5),
  UPSAMPLE(17, 0, 1, 2, 3, 5), /* above the LLVM vector width: the scalar path */
  UPSAMPLE(2, 0, 2, 32, 16, 16), UPSAMPLE(2, OC_CPU, 2, 320, 32, 32),
  /* NHWC (shapes channels first): a pixel of 28 bytes (4-byte copies), 32
   * (16-byte), 24 (8-byte, factor 3), and factor 1 */
#define UP_NHWC(f, ...) \
  {.op = OP_UPSAMPLE, .nin = 1, .in = {F32(__VA_ARGS__)}, .attrs = {I("factor", f)}, .data = OC_BYTES, .layout = LAYOUT_NHWC}
  UP_NHWC(2, 2, 40, 8, 8), UP_NHWC(2, 1, 17, 5, 7), UP_NHWC(3, 1, 3, 4, 5), UP_NHWC(1, 2, 5, 3, 3),
  UP_NHWC(2, 2, 7, 5, 3), UP_NHWC(2, 1, 8, 4, 3), UP_NHWC(3, 1, 6, 3, 2),
  CONCAT(0, F32(2, 3, 5, 7), F32(4, 3, 5, 7), 0), CONCAT(1, F32(2, 3, 5, 7), F32(2, 4, 5, 7), 0),
  CONCAT(2, F32(2, 3, 5, 7), F32(2, 3, 4, 7), 0), CONCAT(3, F32(2, 3, 5, 7), F32(2, 3, 5, 4), 0),
  CONCAT(0, TY(DT_F16, 3, 2, 9, 5), TY(DT_F16, 1, 2, 9, 5), 0), CONCAT(1, TY(DT_F16, 3, 2, 9, 5), TY(DT_F16, 3, 1, 9, 5), 0),
  CONCAT(2, TY(DT_F16, 3, 2, 9, 5), TY(DT_F16, 3, 2, 1, 5), 0), CONCAT(3, TY(DT_F16, 3, 2, 9, 5), TY(DT_F16, 3, 2, 9, 1), 0),
  CONCAT(1, F32(2, 64, 16, 16), F32(2, 32, 16, 16), 0), /* a UNet skip connection (16-byte units) */
  CONCAT(1, F32(2, 320, 64, 64), F32(2, 320, 64, 64), OC_CPU), CONCAT(1, F32(2, 640, 32, 32), F32(2, 320, 32, 32), OC_CPU),
  CONCAT(0, F32(1, 4, 8, 8), F32(1, 4, 8, 8), 0), /* classifier-free guidance's batch */
  CONCAT(0, F32(1, 4, 64, 64), F32(1, 4, 64, 64), 0), CONCAT(0, TY(DT_F8_E5M2, 13), TY(DT_F8_E5M2, 7), 0),
#define SD F32(3, 10, 7, 9)
#define SD16 TY(DT_BF16, 3, 10, 7, 9)
  SLICE(SD, 0, 1, 3, 0), SLICE(SD, 1, 2, 9, 0), SLICE(SD, 2, 0, 1, 0), SLICE(SD, 3, 4, 9, 0),
  SLICE(SD16, 0, 0, 3, 0), SLICE(SD16, 1, 0, 10, 0), SLICE(SD16, 2, 0, 7, 0), SLICE(SD16, 3, 0, 9, 0),
  SLICE(F32(2, 64, 2560), 2, 1280, 2560, 0), SLICE(F32(2, 64, 2560), 2, 0, 1280, 0), /* geglu's halves */
  SLICE(F32(2, 64, 10240), 2, 5120, 10240, OC_CPU), SLICE(F32(2, 64, 10240), 2, 0, 5120, OC_CPU),
  SLICE(F32(4, 300000), 1, 7, 299999, OC_CPU), /* runs longer than a chunk */
  SLICE(TY(DT_F8_E4M3, 2, 5, 12), 2, 3, 12, 0),
  TIME_EMBED(2, 320, 1, 0.0), TIME_EMBED(8, 321, 0, 1.0), TIME_EMBED(1, 2, 1, 0.0), TIME_EMBED(3, 256, 0, 1.0),
  TIME_EMBED(64, 1280, 1, 0.0),
  /* half - shift = 0: every value NaN (0/0), whose bits the LLVM kernel's
   * libm calls give with another sign than the reference's */
  {.op = OP_TIME_EMBED, .nin = 1, .in = {F32(5)}, .attrs = {I("dim", 3), I("flip_sin_to_cos", 1), F("freq_shift", 1.0)},
   .data = OC_TIMESTEPS, .where = OC_REF | OC_CUDA, .why = "NaN bits differ on LLVM"},
  /* copies and placements: kernels on the reference backend only; LLVM and
   * CUDA mark upload and transfer as the runtime's copies, and constant as
   * placed by its reference kernel (LLVM) or refused (CUDA) (ir/lowering.h) */
#define COPY(op_, where_, x, ...) \
  {.op = op_, .nin = 1, .in = {x}, .out = x, .attrs = {__VA_ARGS__}, .data = OC_BYTES, .where = where_, .why = RUNTIME_COPY}
#define RUNTIME_COPY "a copy the runtime does itself on llvm and cuda"
  COPY(OP_UPLOAD, OC_REF, F32(2, 3, 5, 7), I("group", 1), I("hold", 0)),
  COPY(OP_UPLOAD, OC_REF, TY(DT_BF16, 3, 1001), I("group", 0), I("hold", 1)),
  COPY(OP_TRANSFER, OC_REF, F32(2, 320, 16, 16)), COPY(OP_TRANSFER, OC_REF, TY(DT_F8_E4M3, 13)),
#define CONSTANT(x) {.op = OP_CONSTANT, .out = x, .data = OC_BYTES, .where = OC_REF, .why = "placed by its reference kernel on llvm; refused on cuda"}
  CONSTANT(F32(1)), CONSTANT(F32(2, 77, 77)), CONSTANT(TY(DT_I32, 5, 3)), CONSTANT(TY(DT_I64, 1, 77)),
};

/* ---- the ops that read token ids (bit for bit) --------------------------------------- */
#define EMBED(range, data_, ids, table) {.op = OP_EMBEDDING, .nin = 2, .in = {ids, table}, .data = data_, .scale = range}
#define POOL(argmax, eos, range, x, ids)                                                                   \
  {.op = OP_EOS_POOL, .nin = 2, .in = {x, ids}, .attrs = {I("argmax", argmax), I("eos", eos)}, .data = OC_TOKENS, \
   .scale = range}

static const op_case text_rows[] = {
  /* CLIP's token embedding: 77 ids of the real vocabulary; i32 ids; ids
   * outside the table (negative and past it) give zero rows, and the
   * CUDA emulator's guard bytes and ASan see no read outside it */
  EMBED(49408, OC_TOKENS, TY(DT_I64, 2, 77), F32(49408, 8)),
  EMBED(1000, OC_TOKENS, TY(DT_I64, 1, 77), F32(1000, 768)),
  EMBED(300, OC_TOKENS, TY(DT_I32, 3, 5, 7), F32(300, 33)),
  EMBED(5, OC_TOKENS_OUT, TY(DT_I64, 64), F32(5, 16)),
  EMBED(7, OC_TOKENS_OUT, TY(DT_I32, 2, 50), F32(7, 3)),
  EMBED(1, OC_TOKENS, TY(DT_I64, 1), F32(1, 1)),
  /* the table as a 16-bit or fp8 checkpoint stores it, decoded as read */
  {.op = OP_EMBEDDING, .nin = 2, .in = {TY(DT_I64, 2, 77), F32(49408, 8)}, .data = OC_TOKENS, .scale = 49408,
   .wdtype = DT_F16},
  {.op = OP_EMBEDDING, .nin = 2, .in = {TY(DT_I32, 3, 11), F32(50, 37)}, .data = OC_TOKENS_OUT, .scale = 50,
   .wdtype = DT_BF16},
  {.op = OP_EMBEDDING, .nin = 2, .in = {TY(DT_I64, 9), F32(20, 5)}, .data = OC_TOKENS, .scale = 20,
   .wdtype = DT_F8_E4M3},
  /* CLIP's pooler: the first eos (ids from a small range: several eos in a
   * row, or none, which pools position 0), or the first largest id */
  POOL(0, 7, 10, F32(4, 77, 16), TY(DT_I64, 4, 77)),
  POOL(0, 3, 40, F32(8, 13, 5), TY(DT_I64, 8, 13)),
  POOL(0, 2, 3, F32(3, 9, 768), TY(DT_I32, 3, 9)),
  POOL(1, 2, 10, F32(4, 77, 16), TY(DT_I64, 4, 77)),
  POOL(1, 2, 49408, F32(2, 77, 40), TY(DT_I32, 2, 77)),
  POOL(0, 5, 10, F32(1, 1, 7), TY(DT_I64, 1, 1)),
};

/* ---- cast (bit for bit) ----------------------------------------------------------- */
#define CODES(from, to) {.op = OP_CAST, .nin = 1, .in = {TY(from, 0)}, .out = TY(to, 0), .data = OC_CODES}
#define ROUND(to, n, data_, where_) \
  {.op = OP_CAST, .nin = 1, .in = {F32(n)}, .out = TY(to, n), .data = data_, .where = where_}
#define NARROW_RANDOM(from) {.op = OP_CAST, .nin = 1, .in = {TY(from, 3, 5, 7)}, .out = F32(3, 5, 7)}

static const op_case cast_rows[] = {
  CODES(DT_F16, DT_F32), CODES(DT_F16, DT_BF16), CODES(DT_F16, DT_F16),
  CODES(DT_BF16, DT_F32), CODES(DT_BF16, DT_F16), CODES(DT_BF16, DT_BF16),
  CODES(DT_F8_E4M3, DT_F32), CODES(DT_F8_E4M3, DT_F16), CODES(DT_F8_E5M2, DT_F32), CODES(DT_F8_E5M2, DT_F16),
  /* length 0: the whole generated set */
  ROUND(DT_F16, 0, OC_ROUNDING, OC_CPU), ROUND(DT_BF16, 0, OC_ROUNDING, OC_CPU), ROUND(DT_F32, 0, OC_ROUNDING, OC_CPU),
  ROUND(DT_F16, 0, OC_ROUNDING_HALF, 0), ROUND(DT_BF16, 0, OC_ROUNDING_HALF, 0), ROUND(DT_F32, 0, OC_ROUNDING_HALF, 0),
  ROUND(DT_F16, 1, OC_ROUNDING, 0), ROUND(DT_BF16, 17, OC_ROUNDING, 0), ROUND(DT_BF16, 17, OC_ROUNDING_HALF, 0),
  NARROW_RANDOM(DT_F16), NARROW_RANDOM(DT_BF16), NARROW_RANDOM(DT_F8_E4M3), NARROW_RANDOM(DT_F8_E5M2),
};

/* ---- group_norm, layer_norm ---------------------------------------------------------- */
#define GN(g, act, eps, data_, scale_, where_, ...)                                                       \
  {.op = OP_GROUP_NORM, .nin = 1, .in = {F32(__VA_ARGS__)}, .attrs = {I("groups", g), I("act", act), F("eps", eps)}, \
   .data = data_, .scale = scale_, .where = where_}
#define LN(eps, data_, scale_, where_, ...) \
  {.op = OP_LAYER_NORM, .nin = 1, .in = {F32(__VA_ARGS__)}, .attrs = {F("eps", eps)}, .data = data_, .scale = scale_, .where = where_}

/* rms_norm of x over its last dim c, with the weight [c] (w 1) or none */
#define RMS(w, eps, data_, scale_, where_, c, x) \
  {.op = OP_RMS_NORM, .nin = 1 + (w), .in = {x, F32(c)}, .attrs = {F("eps", eps)}, .data = data_, .scale = scale_, .where = where_}
/* mod_layer_norm of x [b,s,c] by mod [b,m] at scale_at, shift_at; gamma and beta [c] when affine */
#define MLN(affine, data_, scale_, where_, b, s, c, m, scale_at, shift_at)                                  \
  {.op = OP_MOD_LAYER_NORM, .nin = (affine) ? 4 : 2, .in = {F32(b, s, c), F32(b, m), F32(c), F32(c)},      \
   .attrs = {F("eps", 1e-6), I("scale_at", scale_at), I("shift_at", shift_at)}, .data = data_, .scale = scale_, \
   .where = where_}

static const op_case norm_rows[] = {
  GN(32, ACT_SILU, 1e-6, OC_NORMAL, 2.0, OC_CPU, 2, 320, 64, 64), GN(32, ACT_NONE, 1e-6, OC_NORMAL, 2.0, OC_CPU, 2, 320, 64, 64),
  GN(1, ACT_NONE, 1e-6, OC_NORMAL, 2.0, 0, 1, 64, 32, 32), /* one 64K-element group */
  GN(3, ACT_SILU, 1e-6, OC_NORMAL, 2.0, 0, 3, 6, 5, 7), GN(6, ACT_GELU, 1e-6, OC_NORMAL, 2.0, 0, 3, 6, 5, 7), /* 1-channel groups */
  GN(8, ACT_NONE, 1e-6, OC_NORMAL, 2.0, 0, 2, 8, 9, 9), GN(2, ACT_NONE, 1e-6, OC_NORMAL, 2.0, 0, 2, 4, 1, 1), /* 2 a group */
  GN(32, ACT_SILU, 1e-6, OC_NORMAL, 2.0, 0, 1, 32, 4, 4), /* exactly one vector */
  GN(8, ACT_GELU, 1e-6, OC_NORMAL, 2.0, 0, 2, 32, 100), GN(4, ACT_NONE, 1e-6, OC_NORMAL, 2.0, 0, 5, 12),
  GN(2, ACT_SILU, 1e-6, OC_NORMAL, 2.0, 0, 1, 4, 3, 5, 7),
  GN(32, ACT_NONE, 1e-6, OC_NORMAL, 1.0, 0, 2, 64, 9, 7), GN(32, ACT_SILU, 1e-6, OC_NORMAL, 1.0, 0, 2, 64, 9, 7),
  GN(32, ACT_GELU, 1e-6, OC_NORMAL, 1.0, 0, 2, 64, 9, 7),
  GN(4, ACT_SILU, 1e-6, OC_NORMAL, 3.0, 0, 2, 12, 5), GN(2, ACT_NONE, 1e-6, OC_NORMAL, 1.0, 0, 1, 8, 3, 4, 5),
  GN(3, ACT_NONE, 1e-6, OC_NORMAL, 1.0, 0, 1, 6, 1, 1),
  GN(4, ACT_SILU, 1e-6, OC_NORMAL, 1.0, 0, 1, 64, 48, 48), /* 36864 a group: 1024 CUDA threads */
  /* a mean far from 0: the statistics must not lose the spread */
  GN(4, ACT_SILU, 1e-6, OC_OFFSET, 300.0, 0, 2, 40, 17, 19), GN(2, ACT_NONE, 1e-6, OC_OFFSET, -1000.0, 0, 1, 16, 64, 64),
  GN(2, ACT_NONE, 1e-5, OC_BIG_MEAN, 100.0, 0, 2, 32, 24, 24), GN(4, ACT_NONE, 1e-5, OC_BIG_MEAN, 1e4, 0, 1, 64, 48, 48),
  LN(1e-5, OC_NORMAL, 2.0, OC_CPU, 8192, 320), LN(1e-5, OC_NORMAL, 2.0, 0, 3, 77, 768), LN(1e-5, OC_NORMAL, 2.0, 0, 5, 17),
  LN(1e-5, OC_NORMAL, 2.0, 0, 7, 1), LN(1e-5, OC_NORMAL, 2.0, 0, 33), LN(1e-5, OC_NORMAL, 2.0, 0, 2, 9, 40),
  LN(1e-6, OC_NORMAL, 1.0, 0, 2, 77, 64), LN(1e-6, OC_NORMAL, 2.0, 0, 1, 13, 320), /* 13 rows: a partial block */
  LN(1e-6, OC_NORMAL, 1.0, 0, 3, 77), LN(1e-6, OC_NORMAL, 1.0, 0, 9, 1), /* one value a row: y = beta */
  LN(1e-6, OC_NORMAL, 1.0, 0, 4, 2048),   /* the widest row CUDA keeps in registers */
  LN(1e-6, OC_NORMAL, 1.0, 0, 1, 5, 2100), /* streamed from memory */
  LN(1e-5, OC_OFFSET, 500.0, 0, 2, 64, 320), LN(1e-5, OC_OFFSET, -20.0, 0, 3, 1280),
  LN(1e-5, OC_BIG_MEAN, 100.0, 0, 2, 9, 1280), LN(1e-5, OC_BIG_MEAN, 1e4, 0, 3, 4100),
  /* rms_norm: T5's (weighted, eps 1e-6), the per-head q/k norms (rows of a
   * head's 64 or 128 dims), one value a row, one row, odd widths, the widest
   * row CUDA keeps in registers and a streamed one; unweighted; rows with a
   * mean far from 0 (nothing to cancel in a mean square, but checked) */
  RMS(1, 1e-6, OC_NORMAL, 2.0, 0, 64, F32(2, 77, 64)), RMS(1, 1e-6, OC_NORMAL, 1.0, 0, 128, F32(2, 9, 3, 128)),
  RMS(1, 1e-6, OC_NORMAL, 2.0, 0, 17, F32(5, 17)), RMS(1, 1e-6, OC_NORMAL, 2.0, 0, 1, F32(7, 1)),
  RMS(1, 1e-5, OC_NORMAL, 2.0, 0, 33, F32(33)), RMS(1, 1e-6, OC_NORMAL, 1.0, 0, 320, F32(1, 13, 320)),
  RMS(1, 1e-6, OC_NORMAL, 1.0, 0, 2048, F32(4, 2048)), RMS(1, 1e-6, OC_NORMAL, 1.0, 0, 2100, F32(1, 5, 2100)),
  RMS(0, 1e-6, OC_NORMAL, 2.0, 0, 768, F32(3, 77, 768)), RMS(0, 1e-6, OC_NORMAL, 2.0, 0, 40, F32(2, 9, 40)),
  RMS(0, 1e-6, OC_NORMAL, 2.0, 0, 1, F32(9, 1)), RMS(0, 1e-6, OC_NORMAL, 2.0, 0, 4100, F32(3, 4100)),
  RMS(0, 0.0, OC_NORMAL, 1e-3, 0, 23, F32(3, 23)), /* eps 0: x / rms(x) */
  RMS(1, 1e-6, OC_OFFSET, 500.0, 0, 320, F32(2, 64, 320)), RMS(1, 1e-6, OC_BIG_MEAN, 1e4, 0, 4096, F32(3, 4096)),
  RMS(1, 1e-6, OC_NORMAL, 1.0, OC_CPU, 4096, F32(2, 512, 4096)),
  /* mod_layer_norm (no affine, eps 1e-6, as Flux's and SD3's AdaLayerNorm):
   * chunks in Flux's order (shift, scale, gate), in other orders, the same
   * chunk twice; 2 samples with their own mods; C = 1, one row, odd C; the
   * widest cached row and a streamed one; with gamma and beta (4 inputs) */
  MLN(0, OC_NORMAL, 1.0, 0, 2, 77, 64, 6 * 64, 64, 0), MLN(0, OC_NORMAL, 1.0, 0, 1, 1, 1, 2, 1, 0),
  MLN(0, OC_NORMAL, 1.0, 0, 3, 5, 17, 3 * 17, 17, 34), MLN(0, OC_NORMAL, 1.0, 0, 2, 13, 320, 640, 0, 320),
  MLN(0, OC_NORMAL, 1.0, 0, 2, 4, 2048, 3 * 2048, 2048, 0), MLN(0, OC_NORMAL, 1.0, 0, 1, 5, 2100, 4200, 2100, 0),
  MLN(0, OC_NORMAL, 2.0, 0, 4, 3, 33, 33, 0, 0), MLN(0, OC_NORMAL, 1.0, 0, 1, 40, 3, 9, 6, 3),
  MLN(1, OC_NORMAL, 1.0, 0, 2, 77, 40, 120, 40, 80), MLN(1, OC_NORMAL, 1.0, 0, 3, 9, 33, 99, 66, 0),
  MLN(1, OC_NORMAL, 1.0, 0, 1, 7, 1, 3, 2, 1), MLN(1, OC_NORMAL, 1.0, 0, 2, 3, 2100, 4200, 0, 2100),
  /* a mean far from 0: the statistics keep the spread */
  MLN(0, OC_OFFSET, 500.0, 0, 2, 64, 320, 960, 320, 640), MLN(1, OC_OFFSET, -20.0, 0, 3, 5, 1280, 2560, 1280, 0),
  MLN(0, OC_BIG_MEAN, 100.0, 0, 2, 9, 1280, 3 * 1280, 0, 1280), MLN(1, OC_BIG_MEAN, 1e4, 0, 1, 3, 4100, 8200, 4100, 0),
  MLN(0, OC_NORMAL, 1.0, OC_CPU, 2, 1024, 3072, 6 * 3072, 3072, 0),
  /* NHWC (--layout nhwc; shapes channels first): the old test_layout_kernels
   * (LLVM) and test_cuda_layout (CUDA) cases, at the NCHW kernels' bounds */
#define GN_NHWC(g, act, data_, scale_, ...)                                                                   \
  {.op = OP_GROUP_NORM, .nin = 1, .in = {F32(__VA_ARGS__)}, .attrs = {I("groups", g), I("act", act), F("eps", 1e-6)}, \
   .data = data_, .scale = scale_, .layout = LAYOUT_NHWC}
  GN_NHWC(32, ACT_SILU, OC_NORMAL, 2.0, 2, 320, 16, 16), /* 10 channels a group: blocks of 2 groups */
  GN_NHWC(32, ACT_NONE, OC_NORMAL, 2.0, 1, 128, 24, 20), /* VAE: 4 channels a group, 4 groups a vector */
  GN_NHWC(32, ACT_SILU, OC_NORMAL, 2.0, 1, 640, 8, 8),   /* 20 a group: a masked tail vector */
  GN_NHWC(32, ACT_NONE, OC_NORMAL, 2.0, 2, 1280, 4, 4),  /* 40 a group */
  GN_NHWC(32, ACT_SILU, OC_NORMAL, 2.0, 1, 2560, 3, 3),  /* 80 a group: two passes of vectors */
  GN_NHWC(7, ACT_SILU, OC_NORMAL, 2.0, 3, 21, 5, 7),     /* odd groups, one 21-channel block */
  GN_NHWC(5, ACT_GELU, OC_NORMAL, 2.0, 2, 15, 9, 4), GN_NHWC(6, ACT_NONE, OC_NORMAL, 2.0, 2, 6, 5, 7), /* 1-channel groups */
  GN_NHWC(1, ACT_NONE, OC_NORMAL, 2.0, 1, 64, 12, 12),   /* one group of every channel */
  GN_NHWC(32, ACT_SILU, OC_OFFSET, 300.0, 2, 96, 7, 9),  /* mean far from 0 */
  GN_NHWC(8, ACT_GELU, OC_NORMAL, 2.0, 2, 32, 50),       /* [N, C, L] vs [N, L, C] */
  GN_NHWC(4, ACT_NONE, OC_NORMAL, 2.0, 5, 12),           /* no spatial dims */
  GN_NHWC(32, ACT_SILU, OC_NORMAL, 1.7, 2, 64, 9, 7),    /* 32 groups of 2 channels */
  GN_NHWC(3, ACT_SILU, OC_BIG_MEAN, 0.0, 1, 96, 5, 6),   /* odd groups, 32 channels each */
  GN_NHWC(7, ACT_NONE, OC_BIG_MEAN, 0.0, 2, 21, 3, 5),   /* odd C, 3 channels a group */
  GN_NHWC(4, ACT_GELU, OC_NORMAL, 2.0, 2, 12, 13),
  GN_NHWC(4, ACT_SILU, OC_BIG_MEAN, 0.0, 1, 64, 48, 48), /* 36864 a group: 1024 CUDA threads */
  GN_NHWC(2, ACT_NONE, OC_BIG_MEAN, 100.0, 2, 32, 12, 12), /* a large mean keeps its spread */
};

/* ---- generated rows: random permutes ---------------------------------------------------- */
static uint32_t next_u32(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 32);
}

/* Three permutes per rank: ranks 2..6 with dims 1..20 (rank <= 3) or 1..6,
 * and ranks 2..4 with dims 1..40, 1..20, 1..9; every third one f16. */
static int random_permutes(op_case *out) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int n = 0;
  for (int set = 0; set < 2; set++)
    for (int rank = 2; rank <= (set ? 4 : 6); rank++)
      for (int rep = 0; rep < 3; rep++) {
        op_case c = {.op = OP_PERMUTE, .nin = 1, .data = OC_BYTES, .nlist = rank};
        c.in[0] = (oc_shape){rep == 2 ? DT_F16 : DT_F32, rank, {0}};
        for (int i = 0; i < rank; i++) {
          uint32_t cap = set ? (rank == 2 ? 40 : rank == 3 ? 20 : 9) : (rank <= 3 ? 20 : 6);
          c.in[0].dims[i] = 1 + next_u32(&s) % cap;
          c.list[i] = i;
        }
        for (int i = rank - 1; i > 0; i--) {
          int j = (int)(next_u32(&s) % (uint32_t)(i + 1));
          int64_t t = c.list[i];
          c.list[i] = c.list[j], c.list[j] = t;
        }
        out[n++] = c;
      }
  return n;
}

#define COUNT(a) (int)(sizeof a / sizeof a[0])

const op_case *oc_table(int *n) {
  static op_case *table;
  static int len;
  if (!table) {
    const op_case *parts[] = {elementwise_rows, data_rows, cast_rows, norm_rows, text_rows};
    const int counts[] = {COUNT(elementwise_rows), COUNT(data_rows), COUNT(cast_rows), COUNT(norm_rows),
                          COUNT(text_rows)};
    int total = 64 + 416 + 160 + 160; /* random permutes, conv2d, conv3d and linear, attention, blend and positions,
                                       * bf16/f16 activation rows */
    for (int p = 0; p < 5; p++) total += counts[p];
    table = calloc((size_t)total, sizeof *table);
    for (int p = 0; p < 5; p++) {
      memcpy(table + len, parts[p], sizeof *table * (size_t)counts[p]);
      len += counts[p];
    }
    len += random_permutes(table + len);
    len += oc_gemm_rows(table + len);
    len += oc_attention_rows(table + len);
    len += oc_act_rows(table, len, table + len, total - len);
    if (len > total) { /* the generated rows outgrew their room above */
      fprintf(stderr, "oc_table: %d rows in room for %d\n", len, total);
      abort();
    }
  }
  *n = len;
  return table;
}

/* ---- building the node ---------------------------------------------------------------- */
static int64_t data_len(const op_case *c); /* generated inputs' length (OC_SPECIALS...) */

/* The channels-last order of a channels-first shape of rank r: perm[i] is
 * the source dim of dim i (0, 2, 3, ..., 1); back: (0, r-1, 1, 2, ...). */
static void channel_perm(int rank, int to_last, int *perm) {
  perm[0] = 0;
  for (int d = 1; d < rank; d++) perm[d] = to_last ? (d == rank - 1 ? 1 : d + 1) : (d == 1 ? rank - 1 : d - 1);
}

void *oc_channels(const void *src, int es, int rank, const int64_t *dims, int to_last) {
  int perm[DC_MAX_DIMS];
  int64_t n = 1, sstr[DC_MAX_DIMS], idx[DC_MAX_DIMS] = {0}, out[DC_MAX_DIMS];
  channel_perm(rank, to_last, perm);
  for (int d = rank - 1; d >= 0; d--) sstr[d] = n, n *= dims[d];
  for (int d = 0; d < rank; d++) out[d] = dims[perm[d]];
  uint8_t *dst = malloc((size_t)n * (size_t)es + 64);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < rank; d++) off += idx[d] * sstr[perm[d]];
    memcpy(dst + i * es, (const uint8_t *)src + off * es, (size_t)es);
    for (int d = rank - 1; d >= 0 && ++idx[d] == out[d]; d--) idx[d] = 0;
  }
  return dst;
}

/* An input of shape s; in an NHWC row, one of rank >= 2 channels last. */
static int32_t add_input_in(dc_module *m, const oc_shape *s, dc_layout layout) {
  dc_type t = {s->dtype ? s->dtype : DT_F32, s->rank, {0}};
  int last = layout == LAYOUT_NHWC && s->rank >= 2, perm[DC_MAX_DIMS];
  channel_perm(s->rank, 1, perm);
  for (int d = 0; d < s->rank; d++) t.dims[d] = s->dims[last ? perm[d] : d];
  char name[32];
  snprintf(name, sizeof name, "in%d", m->ninputs);
  int32_t id = dc_module_add_input(m, name, &t, INIT_NORMAL);
  if (id >= 0 && last) m->nodes[id].layout = LAYOUT_NHWC;
  return id;
}

static int32_t add_input(dc_module *m, const oc_shape *s) { return add_input_in(m, s, 0); }

/* A row whose input 0 is 1-D of length 0 takes its length from its data. */
static oc_shape sized(const oc_shape *s, int64_t len) {
  oc_shape r = *s;
  if (r.rank == 1 && r.dims[0] == 0) r.dims[0] = len;
  return r;
}

static int is_norm(dc_op op) { return op == OP_GROUP_NORM || op == OP_LAYER_NORM; }

/* What input i of a norm holds, for OC_OFFSET and OC_BIG_MEAN data. */
typedef enum { ROLE_X, ROLE_GAMMA, ROLE_BETA, ROLE_MOD } norm_role;

static norm_role role_of(dc_op op, int i) {
  if (i == 0) return ROLE_X;
  if (op == OP_MOD_LAYER_NORM) return i == 1 ? ROLE_MOD : i == 2 ? ROLE_GAMMA : ROLE_BETA;
  return i == 1 ? ROLE_GAMMA : ROLE_BETA; /* group_norm, layer_norm; rms_norm's weight */
}

/* A constant's value: random bytes of its type (the values a constant holds
 * are any bits; the placement copies them). */
static int32_t build_constant(const op_case *c, dc_module *m) {
  dc_type t = {c->out.dtype, c->out.rank, {0}};
  memcpy(t.dims, c->out.dims, sizeof(int64_t) * (size_t)c->out.rank);
  size_t bytes = (size_t)dc_type_bytes(&t);
  uint8_t *v = malloc(bytes + 1);
  uint64_t s = 11;
  for (size_t i = 0; i < bytes; i++) v[i] = (uint8_t)next_u32(&s);
  int32_t id = dc_module_add_constant(m, "oc.constant", &t, v);
  free(v);
  return id;
}

int32_t oc_build_nchw(const op_case *c, dc_module *m) {
  op_case twin = *c;
  twin.layout = 0;
  return oc_build(&twin, m);
}

/* The ops whose rows take an activation dtype: those that compute (not the
 * byte moves, whose kernels copy any dtype already, nor cast, constant and
 * the runtime's copies), but rope_freqs, whose tables stay f32. */
static int computes(dc_op op) {
  switch (op) {
    case OP_RESHAPE: case OP_PERMUTE: case OP_UPSAMPLE: case OP_CONCAT: case OP_SLICE: case OP_CAST:
    case OP_CONSTANT: case OP_UPLOAD: case OP_TRANSFER: case OP_ROPE_FREQS: case OP_PROBE: return 0;
    default: return 1;
  }
}

/* A row's size for picking one of its kind: its input elements, but rows
 * under 64 of them (a partial warp, no grid-stride loop) rank last. */
static uint64_t row_numel(const op_case *c) {
  uint64_t total = 0;
  for (int i = 0; i < (c->nin ? c->nin : 1); i++) {
    uint64_t e = 1;
    for (int d = 0; d < c->in[i].rank; d++) e *= (uint64_t)c->in[i].dims[d];
    total += e;
  }
  return total >= 64 ? total : UINT64_MAX / 2 - total;
}

/* The data kinds an activation row can make and round (oc_inputs). */
static int act_data(oc_data d) {
  return d == OC_NORMAL || d == OC_OFFSET || d == OC_BIG_MEAN || d == OC_MASK || d == OC_TIMESTEPS || d == OC_STORED ||
         d == OC_TOKENS;
}

/* Rows of one kind for the activation rows: the same op and layout, a
 * residual or not, a stored weight or not, CUDA running both. */
static int same_kind(const op_case *o, const op_case *c) {
  return o->op == c->op && o->layout == c->layout && (o->wdtype != 0) == (c->wdtype != 0) &&
         (o->alias != 0) == (c->alias != 0) && ((o->where ? o->where : OC_ALL) & OC_CUDA) &&
         !o->out.rank && act_data(o->data) && !dc_dtype_is_int(o->in[0].dtype) == !dc_dtype_is_int(c->in[0].dtype);
}

int oc_act_rows(const op_case *rows, int n, op_case *out, int cap) {
  static const dc_dtype acts[2] = {DT_BF16, DT_F16};
  int len = 0;
  for (int i = 0; i < n; i++) {
    const op_case *c = &rows[i];
    int cuda = (c->where ? c->where : OC_ALL) & OC_CUDA;
    if (!cuda || !computes(c->op) || c->out.rank || c->act || !act_data(c->data) ||
        (dc_dtype_is_int(c->in[0].dtype) && c->op != OP_EMBEDDING) ||
        (c->in[0].dtype && c->in[0].dtype != DT_F32 && c->op != OP_EMBEDDING && c->op != OP_REL_POS_BIAS))
      continue;
    int best = i, seen = 0; /* the smallest row of its kind, the first of equal ones */
    for (int j = 0; j < n; j++) {
      const op_case *o = &rows[j];
      if (j == i || !same_kind(o, c)) continue;
      if (row_numel(o) < row_numel(&rows[best])) best = j;
      if (j < i && row_numel(o) == row_numel(c)) seen = 1;
    }
    if (best != i) continue;
    for (int a = 0; a < 2 && !seen && len < cap; a++) {
      /* f16 tensor cores take no bf16 weight: its random codes (the in-place runs') overflow f16 */
      if (acts[a] == DT_F16 && c->wdtype == DT_BF16) continue;
      op_case r = *c;
      r.act = acts[a];
      r.where = OC_REF | OC_CUDA; /* the CPU kernels never take bf16/f16 activations */
      r.why = "bf16/f16 activations are --target cuda's";
      memset(r.tol, 0, sizeof r.tol);
      out[len++] = r;
    }
  }
  return len;
}

int32_t oc_build(const op_case *c, dc_module *m) {
  if (c->op == OP_CONSTANT) return build_constant(c, m);
  int64_t len = data_len(c);
  oc_shape x = sized(&c->in[0], len);
  int32_t ins[5] = {add_input_in(m, &x, c->layout), 0, 0, 0, 0};
  int nin = c->nin;
  if (is_norm(c->op)) {
    int64_t ch = c->op == OP_GROUP_NORM ? x.dims[1] : x.dims[x.rank - 1];
    oc_shape v = {DT_F32, 1, {ch}};
    ins[1] = add_input(m, &v), ins[2] = add_input(m, &v), nin = 3;
  } else
    for (int i = 1; i < nin; i++) ins[i] = add_input_in(m, &c->in[i], c->layout);
  dc_node n = dc_node_make(c->op, nin, ins);
  n.layout = c->layout; /* the type rules read it */
  for (int a = 0; a < 8 && c->attrs[a].name; a++) {
    if (c->attrs[a].is_float) dc_node_set_float(&n, c->attrs[a].name, c->attrs[a].f);
    else dc_node_set_int(&n, c->attrs[a].name, c->attrs[a].i);
  }
  n.nlist = c->nlist;
  memcpy(n.list, c->list, sizeof(int64_t) * (size_t)c->nlist);
  dc_type t;
  if (c->out.rank) { /* the type stated: reshape, cast */
    oc_shape o = sized(&c->out, len);
    t = (dc_type){o.dtype, o.rank, {0}};
    memcpy(t.dims, o.dims, sizeof(int64_t) * (size_t)o.rank);
  } else if (x.dtype && x.dtype != DT_F32 && !dc_dtype_is_int(x.dtype)) {
    /* the IR's type rules take f32 for permute, concat and slice; the kernels
     * move elements of any size: state the type, inferred as if f32 */
    dc_node probe = n;
    dc_module *f = dc_module_create();
    oc_shape fx = x, fb = c->in[1];
    fx.dtype = fb.dtype = DT_F32;
    int32_t fins[2] = {add_input(f, &fx), nin > 1 ? add_input(f, &fb) : 0};
    memcpy(probe.inputs, fins, sizeof fins);
    dc_status *st = dc_infer_type(f, &probe, &t);
    dc_module_destroy(f);
    if (st) {
      fprintf(stderr, "oc_build: %s\n", dc_status_message(st));
      dc_status_free(st);
      return -1;
    }
    t.dtype = x.dtype;
  } else {
    dc_status *st = dc_infer_type(m, &n, &t);
    if (st) {
      fprintf(stderr, "oc_build: %s\n", dc_status_message(st));
      dc_status_free(st);
      return -1;
    }
  }
  n.type = t;
  n.layout = c->layout ? c->layout : t.rank == 4 ? LAYOUT_NCHW : LAYOUT_ROWMAJOR;
  if (c->act) { /* every float value in the activation dtype: what the type rules then allow */
    if (dc_module_set_meta(m, "activation_dtype", dc_dtype_name(c->act))) return -1;
    for (int i = 0; i < nin; i++)
      if (m->nodes[ins[i]].type.dtype == DT_F32) m->nodes[ins[i]].type.dtype = c->act; /* timesteps too: Flux's t·1000 */
    n.type.dtype = c->act;
  }
  /* the IR's type rule takes an f32 weight; the kernels read any storage dtype */
  if (c->wdtype) m->nodes[ins[1]].type.dtype = c->wdtype;
  if (c->wdtype && c->wbias) m->nodes[ins[2]].type.dtype = c->wdtype;
  return dc_module_add_node(m, &n);
}

/* ---- input data ------------------------------------------------------------------------ */
static float *special_values(int64_t *n) {
  static const float base[] = {0.0f, 1.0f, 0.5f, 2.0f, 3.0f, 5.5f, 7.0f, 7.07f, 10.0f, 20.0f, 36.9f, 37.0f, 38.0f,
                               80.0f, 86.0f, 87.3f, 88.0f, 88.7f, 88.72283172607421875f, 88.72284f, 89.0f, 103.0f,
                               103.97f, 104.0f, 105.0f, 1e10f, 1e30f, FLT_MAX, FLT_MIN, 1e-30f, 1e-40f, 1e-45f,
                               1e-7f, 1.5f, 1.49999f, 2.00001f, INFINITY};
  int nb = (int)(sizeof base / sizeof base[0]), k = 0;
  float *v = malloc(sizeof(float) * (size_t)(2 * nb + 6));
  for (int i = 0; i < nb; i++) v[k++] = base[i], v[k++] = -base[i];
  v[k++] = NAN;
  v[k++] = -NAN;
  v[k++] = dc_f32_from_bits(0x7f800001u); /* signalling NaN */
  v[k++] = dc_f32_from_bits(0x7fc12345u); /* NaN with a payload */
  v[k++] = dc_f32_from_bits(0xffc12345u); /* negative NaN with a payload */
  if (n) *n = k;
  return v;
}

static float *sweep(double lo, int64_t *n) {
  int64_t k = 0, cap = 80 * 4096 + 2 * 2000 + 1;
  float *v = malloc(sizeof(float) * (size_t)cap);
  for (int64_t i = (int64_t)lo * 4096; i <= 40 * 4096 - 1; i++) v[k++] = (float)i / 4096.0f;
  for (int i = 0; i < 2000; i++) {
    float mag = powf(10.0f, -38.0f + 76.0f * (float)i / 2000.0f);
    v[k++] = mag;
    if (lo < -5 || mag <= 5) v[k++] = -mag; /* gelu (lo -5): no negatives beyond -5 */
  }
  if (n) *n = k;
  return v;
}

static void *all_codes(int bytes, int64_t *n) {
  int64_t count = bytes == 2 ? 65536 : 256, len = count + 7;
  uint8_t *d = malloc((size_t)(len * bytes));
  for (int64_t i = 0; i < len; i++) {
    if (bytes == 2) ((uint16_t *)d)[i] = (uint16_t)(i % count);
    else d[i] = (uint8_t)(i % count);
  }
  if (n) *n = len;
  return d;
}

static const uint32_t f32_specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                                        0x7fbfffffu, 0xff812345u, 0x00000001u, 0x80000001u, 0x007fffffu,
                                        0x00800000u, 0x477ff000u, 0x477fefffu, 0x38800000u, 0x387fffffu,
                                        0x33000000u, 0x33000001u, 0x32ffffffu, 0x7f7fffffu, 0xff7fffffu};

/* Every f16 and bf16 value, the exact midpoints between neighbours (ties)
 * and one ulp either side, specials, and 2^20 random bit patterns. */
static float *rounding(int64_t *n) {
  int64_t cap = 2 * 65536 * 4 + (1 << 20) + 64, k = 0;
  float *v = malloc(sizeof(float) * (size_t)cap);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (uint32_t h = 0; h < 65536; h++) {
    float a = dc_f16_to_f32((uint16_t)h), b = dc_f16_to_f32((uint16_t)(h + 1)), c = dc_bf16_to_f32((uint16_t)h);
    v[k++] = a;
    if ((h & 0x7c00) != 0x7c00 && ((h + 1) & 0x7c00) != 0x7c00 && (h & 0x7fff) != 0x7fff) {
      float mid = (float)(((double)a + (double)b) / 2);
      v[k++] = mid;
      v[k++] = dc_f32_from_bits(dc_f32_bits(mid) + 1);
      v[k++] = dc_f32_from_bits(dc_f32_bits(mid) - 1);
    }
    v[k++] = c;
    v[k++] = dc_f32_from_bits(dc_f32_bits(c) | 0x8000); /* bf16 ties */
    v[k++] = dc_f32_from_bits(dc_f32_bits(c) | 0x8001);
    v[k++] = dc_f32_from_bits(dc_f32_bits(c) | 0x7fff);
  }
  for (int i = 0; i < COUNT(f32_specials); i++) v[k++] = dc_f32_from_bits(f32_specials[i]);
  for (int i = 0; i < (1 << 20); i++) v[k++] = dc_f32_from_bits(next_u32(&s));
  if (n) *n = k;
  return v;
}

/* Every 16-bit value of f16 and bf16 as f32 bits, plus half an ulp (a tie)
 * and its neighbours; specials; random bits up to 724k values. */
static float *rounding_half(int64_t *n) {
  int64_t cap = 65536 * 8 + 20 + 200000, k = 0;
  float *v = malloc(sizeof(float) * (size_t)cap);
  for (uint32_t h = 0; h < 65536; h++) {
    uint32_t bits[2] = {dc_f32_bits(dc_f16_to_f32((uint16_t)h)), dc_f32_bits(dc_bf16_to_f32((uint16_t)h))};
    uint32_t half_ulp[2] = {0x1000u, 0x8000u};
    for (int t = 0; t < 2; t++) {
      v[k++] = dc_f32_from_bits(bits[t]);
      v[k++] = dc_f32_from_bits(bits[t] + half_ulp[t]);
      v[k++] = dc_f32_from_bits(bits[t] + half_ulp[t] - 1);
      v[k++] = dc_f32_from_bits(bits[t] + half_ulp[t] + 1);
    }
  }
  for (int i = 0; i < COUNT(f32_specials); i++) v[k++] = dc_f32_from_bits(f32_specials[i]);
  uint64_t s = 5;
  while (k < cap) v[k++] = dc_f32_from_bits(next_u32(&s));
  if (n) *n = k;
  return v;
}

/* The generated data of a row whose length comes from it; *n its length. */
static void *generated(const op_case *c, int64_t *n) {
  switch (c->data) {
    case OC_SPECIALS: return special_values(n);
    case OC_SWEEP: return sweep(c->scale, n);
    case OC_CODES: return all_codes(dc_dtype_size(c->in[0].dtype), n);
    case OC_ROUNDING: return rounding(n);
    case OC_ROUNDING_HALF: return rounding_half(n);
    default: *n = 0; return NULL;
  }
}

static int64_t data_len(const op_case *c) {
  int64_t n = 0;
  free(generated(c, &n));
  return n;
}

static float *fill(size_t n, uint64_t *s, double center, double spread, int normal) {
  float *d = malloc(n * sizeof *d + 64);
  for (size_t i = 0; i < n; i++) {
    double u1 = ((double)(next_u32(s) >> 8) + 0.5) / 16777216.0, u2 = ((double)(next_u32(s) >> 8) + 0.5) / 16777216.0;
    d[i] = (float)(normal ? center + spread * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)
                          : center + spread * (2 * u1 - 1));
  }
  return d;
}

/* n random finite codes of dtype t, uniform in [-1, 1) before rounding
 * (fp8: any mantissa, a moderate exponent range, as weights have). */
static void *weight_codes(dc_dtype t, size_t n, uint64_t *s) {
  uint8_t *b = malloc(n * 4 + 64);
  for (size_t i = 0; i < n; i++) {
    uint32_t r = next_u32(s);
    float f = (float)((double)(r >> 8) / 8388608.0 - 1.0);
    switch (t) {
      case DT_BF16: ((uint16_t *)b)[i] = dc_f32_to_bf16(f); break;
      case DT_F16: ((uint16_t *)b)[i] = dc_f32_to_f16(f); break;
      case DT_F8_E4M3: b[i] = (uint8_t)((r & 0x80u) | ((4u + (r >> 8) % 6u) << 3) | (r & 7u)); break;    /* 2^-3 .. 2^2 */
      case DT_F8_E5M2: b[i] = (uint8_t)((r & 0x80u) | ((12u + (r >> 8) % 6u) << 2) | (r & 3u)); break; /* 2^-3 .. 2^2 */
      default: ((float *)b)[i] = f; break;
    }
  }
  return b;
}

/* numel(t) ids of t's integer dtype, uniform in [lo, hi). */
static void *token_ids(const dc_type *t, int64_t lo, int64_t hi, uint64_t *s) {
  size_t n = dc_type_numel(t);
  uint8_t *b = malloc(n * 8 + 64);
  for (size_t j = 0; j < n; j++) {
    uint64_t r = (uint64_t)next_u32(s) << 32;
    r |= next_u32(s);
    int64_t v = lo + (int64_t)(r % (uint64_t)(hi - lo));
    if (t->dtype == DT_I32) ((int32_t *)b)[j] = (int32_t)v;
    else ((int64_t *)b)[j] = v;
  }
  return b;
}

/* rope_freqs's positions: integers in [0, range), every 5th plus a
 * quarter, after the special ones (large angles, a negative position). */
static float *positions(size_t n, double range, uint64_t *s) {
  static const float first[] = {0.0f, -17.0f, 1e3f, 4095.5f, 65535.0f, 1e5f};
  float *p = malloc(n * sizeof *p + 64);
  for (size_t j = 0; j < n; j++) {
    p[j] = (float)(next_u32(s) % (uint32_t)(range > 1 ? range : 1));
    if (j % 5 == 4) p[j] += 0.25f;
  }
  for (size_t j = 0; j < n && j < (size_t)COUNT(first); j++) p[j] = first[j];
  return p;
}

/* attention_bias's bias [H, Sq, Sk]: normal(0,1), with masks as a padding or
 * attention mask adds them: -1e9 at scattered keys, -inf on the first three
 * quarters of the keys in odd heads (whole leading key blocks: the running
 * max is -inf until a later block), never on the last key, so every row
 * keeps a finite score. */
static float *masked_bias(const dc_type *t, uint64_t *s) {
  int64_t heads = t->dims[0], sq = t->dims[1], sk = t->dims[2];
  float *b = fill(dc_type_numel(t), s, 0.0, 1.0, 1);
  for (int64_t h = 0; h < heads; h++)
    for (int64_t i = 0; i < sq; i++)
      for (int64_t j = 0; j + 1 < sk; j++) {
        float *v = &b[(h * sq + i) * sk + j];
        if ((i * 3 + j * 7 + h) % 5 == 0) *v = -1e9f;
        if (h % 2 && j < sk - sk / 4) *v = -INFINITY;
      }
  return b;
}

/* An activation row's inputs: the row's data made as for f32, rounded to
 * each input's dtype (the activation dtype; f32 timesteps as they are;
 * stored weights and token ids as the f32 row makes them). */
static void **act_inputs(const op_case *c, const dc_module *m, int32_t id) {
  op_case f = *c;
  f.act = 0;
  dc_module *fm = dc_module_create();
  int32_t fid = fm ? oc_build(&f, fm) : -1;
  const dc_node *n = &m->nodes[id];
  void **in = NULL;
  if (fid >= 0 && f.data != OC_NORMAL) in = oc_inputs(&f, fm, fid);
  else if (fid >= 0) { /* normal(0, 1) * scale, as the harnesses' own; a stored weight's random finite codes */
    uint64_t s = 42;
    in = calloc(DC_MAX_INPUTS, sizeof *in);
    for (int i = 0; i < n->ninputs; i++) {
      const dc_type *ft = &fm->nodes[fm->nodes[fid].inputs[i]].type;
      in[i] = ft->dtype == DT_F32 ? (void *)fill(dc_type_numel(ft), &s, 0.0, c->scale ? c->scale : 1.0, 1)
                                  : weight_codes(ft->dtype, dc_type_numel(ft), &s);
    }
  }
  for (int i = 0; in && i < n->ninputs; i++) {
    const dc_type *t = &m->nodes[n->inputs[i]].type, *ft = &fm->nodes[fm->nodes[fid].inputs[i]].type;
    if (ft->dtype != DT_F32 || t->dtype == DT_F32) continue;
    const float *v = in[i];
    uint16_t *h = malloc(dc_type_numel(t) * 2 + 64);
    for (size_t j = 0; j < dc_type_numel(t); j++) h[j] = t->dtype == DT_BF16 ? dc_f32_to_bf16(v[j]) : dc_f32_to_f16(v[j]);
    free(in[i]);
    in[i] = h;
  }
  dc_module_destroy(fm);
  return in;
}

void **oc_inputs(const op_case *c, const dc_module *m, int32_t id) {
  if (c->act) return act_inputs(c, m, id);
  if (c->data == OC_NORMAL) return NULL;
  const dc_node *n = &m->nodes[id];
  void **in = calloc(DC_MAX_INPUTS, sizeof *in);
  uint64_t s = 42;
  for (int i = 0; i < n->ninputs; i++) {
    const dc_type *t = &m->nodes[n->inputs[i]].type;
    size_t numel = dc_type_numel(t), bytes = (size_t)dc_type_bytes(t);
    if (c->data == OC_BYTES) {
      uint8_t *b = malloc(bytes + 4);
      for (size_t j = 0; j < bytes; j++) b[j] = (uint8_t)next_u32(&s);
      in[i] = b;
    } else if (c->data == OC_TIMESTEPS) {
      static const float some[] = {0.0f, 999.0f, 1.0f, 500.5f, 981.0f, 0.25f, 12345.0f, -3.0f};
      float *ts = fill(numel, &s, 500, 500, 0);
      for (size_t j = 0; j < numel && j < 8; j++) ts[j] = some[j];
      in[i] = ts;
    } else if (c->data == OC_INTEGERS) {
      float *v = fill(numel, &s, 0.0, 2.0, 1);
      uint8_t *b = malloc(numel * 4 + 64);
      for (size_t j = 0; j < numel; j++) {
        float r = rintf(v[j]);
        if (t->dtype == DT_BF16) ((uint16_t *)b)[j] = dc_f32_to_bf16(r);
        else ((float *)b)[j] = r;
      }
      free(v);
      in[i] = b;
    } else if (c->data == OC_TOKENS || c->data == OC_TOKENS_OUT) {
      in[i] = dc_dtype_is_int(t->dtype) ? token_ids(t, c->data == OC_TOKENS_OUT ? -4 : 0,
                                                    (int64_t)c->scale + (c->data == OC_TOKENS_OUT ? 4 : 0), &s)
              : t->dtype == DT_F32      ? (void *)fill(numel, &s, 0.0, 1.0, 1)
                                        : weight_codes(t->dtype, numel, &s); /* a stored table */
    } else if (c->data == OC_STORED) {
      in[i] = t->dtype == DT_F32 ? (void *)fill(numel, &s, 0.0, c->scale ? c->scale : 1.0, 1) : weight_codes(t->dtype, numel, &s);
    } else if (c->data == OC_POSITIONS) {
      in[i] = positions(numel, c->scale, &s);
    } else if (c->data == OC_MASK) {
      in[i] = i < 3 ? fill(numel, &s, 0.0, c->scale ? c->scale : 1.0, 1) : masked_bias(t, &s);
    } else if (c->data == OC_OFFSET) {
      in[i] = fill(numel, &s, i == 0 ? c->scale : 0.0, 1.0, 1);
    } else if (c->data == OC_BIG_MEAN) { /* by role: x, gamma, beta, mod */
      static const double center[4] = {0, 1.0, 0.0, 0.0}, spread[4] = {1.0, 0.5, 0.5, 0.5};
      norm_role r = role_of(n->op, i);
      in[i] = fill(numel, &s, r == ROLE_X ? c->scale : center[r], spread[r], 0);
    } else {
      int64_t len = 0;
      uint8_t *g = generated(c, &len), *b = malloc(bytes + 4);
      /* a short row takes the generated values from the fourth on */
      size_t from = (size_t)len > numel + 3 ? 3 * (size_t)dc_dtype_size(t->dtype) : 0;
      memcpy(b, g + from, bytes);
      free(g);
      in[i] = b;
    }
  }
  return in;
}

void oc_free_inputs(void **in) {
  for (int i = 0; in && i < DC_MAX_INPUTS; i++) free(in[i]);
  free(in);
}

static const char *data_name(oc_data d) {
  static const char *names[] = {"", "bytes", "specials", "sweep", "all codes", "rounding", "rounding/half-ulp",
                                "timesteps", "offset", "big mean", "stored", "integers", "tokens",
                                "tokens, some outside", "positions", "masked"};
  return names[d];
}

void oc_describe(const op_case *c, char *buf, size_t cap) {
  char d[96], l[64] = "", b[96] = "";
  const oc_shape *x = &c->in[0];
  dc_dims_str(x->dims, x->rank, d, sizeof d);
  if (c->nlist) dc_dims_str(c->list, c->nlist, l, sizeof l);
  if (c->nin > 1 && !is_norm(c->op)) {
    char e[80];
    snprintf(b, sizeof b, " by %s", dc_dims_str(c->in[1].dims, c->in[1].rank, e, sizeof e));
  }
  if (c->op == OP_CONSTANT) x = &c->out, dc_dims_str(x->dims, x->rank, d, sizeof d);
  int k = snprintf(buf, cap, "%s%s %s%s%s", dc_op_get(c->op)->name, l, dc_dtype_name(x->dtype ? x->dtype : DT_F32), d, b);
  for (int a = 0; a < 8 && c->attrs[a].name && k < (int)cap; a++) {
    const oc_attr *t = &c->attrs[a];
    if (strcmp(t->name, "act") == 0 && t->i >= 0 && t->i < ACT_COUNT) /* by name: act=gelu_tanh */
      k += snprintf(buf + k, cap - (size_t)k, " act=%s", dc_act_name((dc_act)t->i));
    else
      k += t->is_float ? snprintf(buf + k, cap - (size_t)k, " %s=%g", t->name, t->f)
                       : snprintf(buf + k, cap - (size_t)k, " %s=%lld", t->name, (long long)t->i);
  }
  if (c->out.rank && k < (int)cap) {
    char o[96];
    k += snprintf(buf + k, cap - (size_t)k, " -> %s%s", dc_dtype_name(c->out.dtype),
                  dc_dims_str(c->out.dims, c->out.rank, o, sizeof o));
  }
  if (c->wdtype && k < (int)cap) k += snprintf(buf + k, cap - (size_t)k, " w%s:%s", c->wbias ? "+b" : "", dc_dtype_name(c->wdtype));
  if (c->act && k < (int)cap) k += snprintf(buf + k, cap - (size_t)k, " act:%s", dc_dtype_name(c->act));
  if (c->layout == LAYOUT_NHWC && k < (int)cap) k += snprintf(buf + k, cap - (size_t)k, " nhwc");
  if (c->cuda_sm_count && k < (int)cap) k += snprintf(buf + k, cap - (size_t)k, " sm=%d", c->cuda_sm_count);
  if (c->data && k < (int)cap) snprintf(buf + k, cap - (size_t)k, " (%s)", data_name(c->data));
}
