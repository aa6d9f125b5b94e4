/* g_norm.c — group_norm (then act), layer_norm, mod_layer_norm and
 * rms_norm, one launch per node.
 *
 * Statistics are f32 but accurate for groups with a large mean, where the
 * reference sums in double: every value is first shifted by the group's
 * (row's) first element, so the sums see deviations of the size of the
 * spread, not of the mean; the mean of the shifted values is then removed
 * in a second pass before squaring (two-pass variance).  The output is
 * ((x - shift) - mean') · (rstd · gamma) + beta, so the large mean never
 * enters a rounding.
 *
 *   group_norm: one block per (sample, group), the group read three times
 *               (stats, variance, output), block-wide sums through
 *               dc_block_sum.  NCHW: the group is one contiguous run of
 *               (C/G)·H·W values.  NHWC (a node with layout nhwc, x[N, ...,
 *               C]): it is C/G contiguous channels at each position, every
 *               C floats; value i of the group is position i / (C/G),
 *               channel i % (C/G), so consecutive threads still read runs.
 *   layer_norm: one warp per row.  Rows up to 2048 wide are held in
 *               registers (read once); wider rows are read three times.
 *   mod_layer_norm: layer_norm's kernel (gamma and beta optional), each
 *               row's result then n·(1 + scale) + shift with its sample's
 *               chunks of mod, the product rounded first (__fmul_rn,
 *               __fadd_rn: no fma), as the reference.
 *   rms_norm:   one warp per row, as layer_norm: the f32 sum of x² (no
 *               shift: a mean square has no mean to cancel), y = x·rstd (·w).
 * Every operand (x, gamma, beta, mod, w, out) may be f32, bf16 or f16: it is
 * loaded as f32 (x_ld, gamma_ld, ...), the statistics are f32 whatever the
 * dtypes, and the output is rounded once as it is stored (out_st).
 * No norm writes in place (ops.def), but each element is still read before
 * it is written. */
#include "cgen.h"

/* A float literal that round-trips the double (e.g. eps). */
static void emit_float_define(dc_buf *b, const char *name, double v) {
  dc_buf_printf(b, "#define %s %.9ef\n", name, (float)v);
}

/* Every operand f32, bf16 or f16 (activations and stored gammas alike). */
static dc_status *check_float_io(const dc_module *m, const dc_node *n) {
  char b[160];
  for (int i = 0; i < n->ninputs; i++) {
    const dc_type *t = &m->nodes[n->inputs[i]].type;
    if (!dc_cuda_float_io(t->dtype))
      return dc_error(DC_ERR_UNSUPPORTED, "input %d is %s; expected f32, bf16 or f16", i, dc_type_str(t, b, sizeof b));
  }
  return dc_cuda_need_float_io(n, "output", n->type.dtype);
}

/* The operands' element types and accessors (cgen.h): out, then the
 * inputs under the names the kernel gives them. */
static void emit_operands(dc_buf *b, const dc_module *m, const dc_node *n, const char *const *tags) {
  dc_cuda_emit_typed(b, "out", n->type.dtype);
  for (int i = 0; i < n->ninputs; i++) dc_cuda_emit_typed(b, tags[i], m->nodes[n->inputs[i]].type.dtype);
}

static void emit_act(dc_buf *b, int act, const char *indent) {
  if (act == ACT_SILU) dc_buf_printf(b, "%sy = dc_silu(y);\n", indent);
  if (act == ACT_GELU) dc_buf_printf(b, "%sy = dc_gelu(y);\n", indent);
}

/* ---- GROUP_NORM --------------------------------------------------------- */
/* Threads per block: about 8 values each, a multiple of 32, at most 1024. */
static uint32_t group_threads(int64_t len) {
  int64_t t = (len + 7) / 8;
  t = (t + 31) / 32 * 32;
  if (t < 32) t = 32;
  if (t > 1024) t = 1024;
  return (uint32_t)t;
}

/* Where value i of the block's group is, from xg (the group's first value),
 * and its channel: NCHW one run, NHWC runs of CPG every C. */
static void emit_group_addressing(dc_buf *b, int nhwc, int64_t ch) {
  if (!nhwc) {
    dc_buf_printf(b, "#define GN_AT(i) (i)\n#define GN_CH(i) (c0 + (i) / GN_REST)\n");
    return;
  }
  dc_buf_printf(b, "#define GN_C %lldLL /* NHWC: channels last */\n"
                   "#define GN_AT(i) ((long long)((i) / GN_CPG) * GN_C + (i) %% GN_CPG)\n"
                   "#define GN_CH(i) (c0 + (i) %% GN_CPG)\n",
                (long long)ch);
}

/* The offset of the block's group in x: sample * GROUPS + group = block. */
static const char *group_base(int nhwc) {
  return nhwc ? "(long long)(blockIdx.x / GN_GROUPS) * GN_REST * GN_C + c0; /* sample's positions, then channel c0 */"
              : "(long long)blockIdx.x * GN_LEN; /* block = sample * GROUPS + group */";
}

dc_status *dc_cuda_gen_group_norm(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                                  dc_cuda_kernel *out) {
  (void)o; /* statistics are f32 whatever the tensor-core precision */
  DC_TRY(check_float_io(m, n));
  const dc_type *tx = &m->nodes[n->inputs[0]].type;
  int nhwc = n->layout == LAYOUT_NHWC;
  if (tx->rank < 2) return dc_error(DC_ERR_MISMATCH, "group_norm of rank %d; expected at least [N, C]", tx->rank);
  int64_t batch = tx->dims[0], ch = tx->dims[nhwc ? tx->rank - 1 : 1], groups = dc_node_int(n, "groups");
  if (groups < 1 || ch % groups)
    return dc_error(DC_ERR_MISMATCH, "%lld channels do not split into %lld groups", (long long)ch, (long long)groups);
  int64_t rest = batch * ch != 0 ? (int64_t)dc_type_numel(tx) / (batch * ch) : 0, cpg = ch / groups;
  int64_t len = cpg * rest, blocks = batch * groups;
  int act = (int)dc_node_int(n, "act");
  if (blocks == 0) return dc_error(DC_ERR_UNSUPPORTED, "group_norm of an empty tensor");
  if (len >= ((int64_t)1 << 31) || blocks >= ((int64_t)1 << 31))
    return dc_error(DC_ERR_UNSUPPORTED, "groups of %lld values (%lld of them) exceed 32-bit indices", (long long)len,
                    (long long)blocks);
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b,
                "#include \"dc_cuda.cuh\"\n"
                "/* group_norm of [%lld, %s%lld%s] in %lld groups of %lld values, act %s (generated by diffc) */\n"
                "#define GN_LEN %lld\n#define GN_REST %lld\n#define GN_CPG %lld\n#define GN_GROUPS %lld\n",
                (long long)batch, nhwc ? "..., " : "", (long long)ch, nhwc ? " (NHWC)" : ", ...", (long long)groups,
                (long long)len, dc_act_name((dc_act)act), (long long)len, (long long)rest, (long long)cpg,
                (long long)groups);
  emit_float_define(&b, "GN_EPS", dc_node_float(n, "eps"));
  emit_group_addressing(&b, nhwc, ch);
  static const char *const tags[] = {"x", "gamma", "beta"};
  emit_operands(&b, m, n, tags);
  dc_buf_printf(&b,
                "DC_KERNEL void %s(out_t *out, const x_t *__restrict__ x, const gamma_t *__restrict__ gamma,\n"
                "                  const beta_t *__restrict__ beta) {\n"
                "  __shared__ float red[32];\n"
                "  const int c0 = (blockIdx.x %% GN_GROUPS) * GN_CPG;\n"
                "  const long long base = %s\n"
                "  const x_t *xg = x + base;\n"
                "  const float shift = GN_LEN > 0 ? x_ld(xg, 0) : 0.0f;\n"
                "  float s = 0.0f;\n"
                "  for (int i = threadIdx.x; i < GN_LEN; i += blockDim.x) s += x_ld(xg, GN_AT(i)) - shift;\n"
                "  const float mean = dc_block_sum(s, red) / (float)GN_LEN; /* of the shifted values */\n"
                "  float q = 0.0f;\n"
                "  for (int i = threadIdx.x; i < GN_LEN; i += blockDim.x) {\n"
                "    const float d = (x_ld(xg, GN_AT(i)) - shift) - mean;\n"
                "    q += d * d;\n"
                "  }\n"
                "  const float rstd = 1.0f / sqrtf(dc_block_sum(q, red) / (float)GN_LEN + GN_EPS);\n"
                "  for (int i = threadIdx.x; i < GN_LEN; i += blockDim.x) {\n"
                "    const int c = GN_CH(i);\n"
                "    float y = ((x_ld(xg, GN_AT(i)) - shift) - mean) * (rstd * gamma_ld(gamma, c)) + beta_ld(beta, c);\n",
                name, group_base(nhwc));
  emit_act(&b, act, "    ");
  dc_buf_printf(&b, "    out_st(out, base + GN_AT(i), y);\n  }\n}\n");
  out->grid[0] = (uint32_t)(blocks > 0 ? blocks : 1);
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = group_threads(len);
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = 0;
  return dc_cuda_finish(&b, name, out);
}

/* ---- LAYER_NORM, MOD_LAYER_NORM, RMS_NORM -------------------------------- */
enum { LN_WARPS = 8, LN_MAX_CACHED = 64 /* values per lane kept in registers */ };

/* What a row's value d (centred, a C expression) becomes at channel c. */
typedef enum { LN_PLAIN, LN_MOD, LN_MOD_AFFINE } ln_kind;

static void emit_ln_out(dc_buf *b, ln_kind k, const char *d) {
  if (k == LN_PLAIN) dc_buf_printf(b, "(%s) * (rstd * gamma_ld(gamma, c)) + beta_ld(beta, c)", d);
  else if (k == LN_MOD_AFFINE)
    dc_buf_printf(b, "__fadd_rn(__fmul_rn((%s) * (rstd * gamma_ld(gamma, c)) + beta_ld(beta, c), 1.0f + mod_ld(sc, c)), mod_ld(sh, c))", d);
  else dc_buf_printf(b, "__fadd_rn(__fmul_rn((%s) * rstd, 1.0f + mod_ld(sc, c)), mod_ld(sh, c))", d);
}

/* The row held in v[] (lane + 32 i): read once. */
static void emit_layer_cached(dc_buf *b, ln_kind k) {
  dc_buf_printf(b,
                "  float v[LN_VPL], s = 0.0f;\n"
                "  LN_UNROLL for (int i = 0; i < LN_VPL; i++) {\n"
                "    const int c = lane + 32 * i;\n"
                "    v[i] = c < LN_C ? x_ld(xr, c) - shift : 0.0f;\n"
                "    s += v[i];\n"
                "  }\n"
                "  const float mean = dc_warp_sum(s) / (float)LN_C; /* of the shifted values */\n"
                "  float q = 0.0f;\n"
                "  LN_UNROLL for (int i = 0; i < LN_VPL; i++) {\n"
                "    const float d = v[i] - mean;\n"
                "    if (lane + 32 * i < LN_C) q += d * d;\n"
                "  }\n"
                "  const float rstd = 1.0f / sqrtf(dc_warp_sum(q) / (float)LN_C + LN_EPS);\n"
                "  LN_UNROLL for (int i = 0; i < LN_VPL; i++) {\n"
                "    const int c = lane + 32 * i;\n"
                "    if (c < LN_C) out_st(yr, c, ");
  emit_ln_out(b, k, "v[i] - mean");
  dc_buf_printf(b, ");\n  }\n");
}

/* Rows too wide for registers: three strided passes over global memory. */
static void emit_layer_streamed(dc_buf *b, ln_kind k) {
  dc_buf_printf(b,
                "  float s = 0.0f;\n"
                "  for (int c = lane; c < LN_C; c += 32) s += x_ld(xr, c) - shift;\n"
                "  const float mean = dc_warp_sum(s) / (float)LN_C; /* of the shifted values */\n"
                "  float q = 0.0f;\n"
                "  for (int c = lane; c < LN_C; c += 32) {\n"
                "    const float d = (x_ld(xr, c) - shift) - mean;\n"
                "    q += d * d;\n"
                "  }\n"
                "  const float rstd = 1.0f / sqrtf(dc_warp_sum(q) / (float)LN_C + LN_EPS);\n"
                "  for (int c = lane; c < LN_C; c += 32) out_st(yr, c, ");
  emit_ln_out(b, k, "(x_ld(xr, c) - shift) - mean");
  dc_buf_printf(b, ");\n");
}

/* A kernel of one warp per row of x's (input 0's) last dim: the checks, the
 * source's head (through LN_EPS) into b, and the blocks to launch. */
static dc_status *rows_head(const dc_module *m, const dc_node *n, dc_buf *b, int64_t *vpl, int64_t *blocks) {
  DC_TRY(check_float_io(m, n));
  const dc_type *tx = &m->nodes[n->inputs[0]].type;
  int64_t c = tx->dims[tx->rank - 1], rows = c ? (int64_t)dc_type_numel(tx) / c : 0;
  const char *op = dc_op_get(n->op)->name;
  *vpl = (c + 31) / 32, *blocks = (rows + LN_WARPS - 1) / LN_WARPS;
  if (rows == 0) return dc_error(DC_ERR_UNSUPPORTED, "%s of an empty tensor", op);
  if (c >= ((int64_t)1 << 30) || *blocks >= ((int64_t)1 << 31))
    return dc_error(DC_ERR_UNSUPPORTED, "%lld rows of %lld values exceed the kernel's indices", (long long)rows,
                    (long long)c);
  dc_buf_init(b);
  dc_buf_printf(b,
                "#include \"dc_cuda.cuh\"\n"
                "/* %s of %lld rows of %lld, one warp per row (generated by diffc) */\n"
                "#if defined(__CUDACC__)\n#define LN_UNROLL _Pragma(\"unroll\")\n#else\n#define LN_UNROLL\n#endif\n"
                "#define LN_C %lld\n#define LN_ROWS %lldLL\n#define LN_VPL %lld\n",
                op, (long long)rows, (long long)c, (long long)c, (long long)rows, (long long)*vpl);
  emit_float_define(b, "LN_EPS", dc_node_float(n, "eps"));
  return NULL;
}

/* The kernel's first lines after its signature: this warp's row. */
static const char row_prologue[] =
    "  const int lane = threadIdx.x % 32;\n"
    "  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;\n"
    "  if (row >= LN_ROWS) return; /* the whole warp: it shares the row */\n"
    "  const x_t *xr = x + row * LN_C;\n"
    "  out_t *yr = out + row * LN_C;\n";

static dc_status *rows_finish(dc_buf *b, int64_t blocks, const char *name, dc_cuda_kernel *out) {
  dc_buf_printf(b, "}\n");
  out->grid[0] = (uint32_t)blocks;
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = 32 * LN_WARPS;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = 0;
  return dc_cuda_finish(b, name, out);
}

/* layer_norm and mod_layer_norm: the row's mean and rstd, then
 * emit_ln_out's expression (kind k). */
static dc_status *gen_layer(const dc_module *m, const dc_node *n, ln_kind k, const char *name, dc_cuda_kernel *out) {
  dc_buf b;
  int64_t vpl, blocks;
  DC_TRY(rows_head(m, n, &b, &vpl, &blocks));
  static const char *const plain_tags[] = {"x", "gamma", "beta"}, *const mod_tags[] = {"x", "mod", "gamma", "beta"};
  emit_operands(&b, m, n, k == LN_PLAIN ? plain_tags : mod_tags);
  if (k == LN_PLAIN)
    dc_buf_printf(&b, "DC_KERNEL void %s(out_t *out, const x_t *__restrict__ x, const gamma_t *__restrict__ gamma,\n"
                      "                  const beta_t *__restrict__ beta) {\n", name);
  else
    dc_buf_printf(&b, "DC_KERNEL void %s(out_t *out, const x_t *__restrict__ x, const mod_t *__restrict__ mod%s) {\n",
                  name, k == LN_MOD_AFFINE ? ",\n                  const gamma_t *__restrict__ gamma, const beta_t *__restrict__ beta" : "");
  dc_buf_printf(&b, "%s  const float shift = x_ld(xr, 0);\n", row_prologue);
  if (k != LN_PLAIN) { /* x [B,S,C]: the row's sample is row / S */
    const dc_type *tx = &m->nodes[n->inputs[0]].type, *tm = &m->nodes[n->inputs[1]].type;
    dc_buf_printf(&b,
                  "  const mod_t *mrow = mod + (row / %lldLL) * %lldLL;\n"
                  "  const mod_t *sc = mrow + %lldLL, *sh = mrow + %lldLL; /* this sample's scale and shift */\n",
                  (long long)tx->dims[1], (long long)tm->dims[1], (long long)dc_node_int(n, "scale_at"),
                  (long long)dc_node_int(n, "shift_at"));
  }
  if (vpl <= LN_MAX_CACHED)
    emit_layer_cached(&b, k);
  else
    emit_layer_streamed(&b, k);
  return rows_finish(&b, blocks, name, out);
}

dc_status *dc_cuda_gen_layer_norm(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                                  dc_cuda_kernel *out) {
  (void)o;
  return gen_layer(m, n, LN_PLAIN, name, out);
}

dc_status *dc_cuda_gen_mod_layer_norm(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                                      dc_cuda_kernel *out) {
  (void)o; /* statistics are f32 whatever the tensor-core precision */
  if (m->nodes[n->inputs[0]].type.rank != 3)
    return dc_error(DC_ERR_MISMATCH, "mod_layer_norm of rank %d; expected x [B, S, C]", m->nodes[n->inputs[0]].type.rank);
  return gen_layer(m, n, n->ninputs == 4 ? LN_MOD_AFFINE : LN_MOD, name, out);
}

/* ---- RMS_NORM: y = x / sqrt(mean(x²) + eps) (· w) ------------------------- */
dc_status *dc_cuda_gen_rms_norm(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                                dc_cuda_kernel *out) {
  (void)o;
  dc_buf b;
  int64_t vpl, blocks;
  int weighted = n->ninputs > 1;
  const char *wmul = weighted ? " * w_ld(w, c)" : "";
  DC_TRY(rows_head(m, n, &b, &vpl, &blocks));
  static const char *const tags[] = {"x", "w"};
  emit_operands(&b, m, n, tags);
  dc_buf_printf(&b, "DC_KERNEL void %s(out_t *out, const x_t *__restrict__ x%s) {\n%s", name,
                weighted ? ", const w_t *__restrict__ w" : "", row_prologue);
  if (vpl <= LN_MAX_CACHED)
    dc_buf_printf(&b,
                  "  float v[LN_VPL], q = 0.0f;\n"
                  "  LN_UNROLL for (int i = 0; i < LN_VPL; i++) {\n"
                  "    const int c = lane + 32 * i;\n"
                  "    v[i] = c < LN_C ? x_ld(xr, c) : 0.0f;\n"
                  "    q += v[i] * v[i];\n"
                  "  }\n"
                  "  const float rstd = 1.0f / sqrtf(dc_warp_sum(q) / (float)LN_C + LN_EPS);\n"
                  "  LN_UNROLL for (int i = 0; i < LN_VPL; i++) {\n"
                  "    const int c = lane + 32 * i;\n"
                  "    if (c < LN_C) out_st(yr, c, v[i] * rstd%s);\n"
                  "  }\n",
                  wmul);
  else
    dc_buf_printf(&b,
                  "  float q = 0.0f;\n"
                  "  for (int c = lane; c < LN_C; c += 32) { const float xc = x_ld(xr, c); q += xc * xc; }\n"
                  "  const float rstd = 1.0f / sqrtf(dc_warp_sum(q) / (float)LN_C + LN_EPS);\n"
                  "  for (int c = lane; c < LN_C; c += 32) out_st(yr, c, x_ld(xr, c) * rstd%s);\n",
                  wmul);
  return rows_finish(&b, blocks, name, out);
}
