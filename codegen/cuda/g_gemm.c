/* g_gemm.c — conv2d, conv3d and linear as one tiled GEMM, C[M, N] = A[M, K] · B[K, N],
 * with the epilogue of ops.def fused (bias, act, residual).
 *
 *   linear: A = x viewed as [M, K] (rows of the input), B[k][j] = w[j][k].
 *   conv2d: an implicit GEMM: M = N·Ho·Wo (rows = output pixels), N = O,
 *           K = C·kh·kw; A's element (m, k) is the input pixel tap (n, c,
 *           ho·s + r - pt, wo·s + q - pl), zero in the padding.  g_row() and
 *           g_a() hold all of that address generation.
 *     NCHW  k = (c, r, q): w[O][C][kh][kw] rows are B's columns as stored;
 *           a thread stages one A row (consecutive threads: consecutive
 *           pixels, adjacent in NCHW) and the output is written plane by
 *           plane (rows fastest).
 *     NHWC  (--layout nhwc, a node with layout nhwc) k = (r, q, c), c
 *           fastest, matching w[O][kh][kw][C]: a tap is a run of C
 *           contiguous floats, so a thread stages 4 consecutive k (one
 *           16-byte load when C % 4 == 0, else 4 scalar ones) and
 *           consecutive threads walk along k; the C tile is row-major
 *           [pixel][O], the NHWC output itself (columns fastest, as linear).
 *   conv3d: the NCHW implicit GEMM with time: M = B·To·Ho·Wo (rows = output
 *           voxels), K = C·kt·kh·kw, k = (c, t, r, q) as w[O][C][kt][kh][kw]
 *           is stored; A's element is the tap (n, c, to·st + t, ho·sh + r -
 *           ph, wo·sw + q - pw), zero in the H / W padding (time has none).
 *           The output is written volume by volume (G_P = To·Ho·Wo): the
 *           NCHW epilogue unchanged, and the bias its only epilogue.
 *
 * Two main loops here, picked by dc_cuda_options.compute:
 *   F32        plain FMA (no TF32): 64x64 block tile, BK 16, 256 threads,
 *              each a 4x4 register tile; matches the reference to ~1e-7.
 *   BF16/F16   linear and NHWC convs go to g_mma_gemm.c (mma.sync; which
 *              shapes it takes is dc_mma_gemm_takes); an NCHW conv stays here
 *              on nvcuda::wmma 16x16x16, f32 accumulation: 64x64 tile with
 *              4 warps (2x2 of 32x32) or, when the GEMM has a block per SM
 *              (dc_cuda_options.sm_count), 128x128 with 8 warps (2x4 of
 *              64x32); BK 32.  Inputs are rounded to bf16/half as staged.
 * Both stage the next K tile in registers while the current one is used
 * (two shared buffers, one barrier per K step), and both store the
 * accumulator tile to shared memory, where one epilogue reads it: geglu
 * needs columns j and j + H together, so the block's B columns are the pairs
 * (its first half the "value" columns, its second half the matching "gate"
 * columns).
 *
 * The weight (input 1) may be f32, bf16, f16, f8e4m3 or f8e5m2: it is read
 * with dc_cuda_loader(dtype), converted to f32 in registers, then rounded
 * to the compute type when staged.  x, the residual, the gate and the output
 * are activations: f32, bf16 or f16 each (G_XLD, G_RLD, G_GLD load them as
 * f32, G_OST rounds the f32 epilogue result once, as it stores).
 *
 * A linear's gated residual (ops.def) ends the epilogue with
 * res + mod[m / S, gate_at + j] · v, the product and the sum each rounded
 * (__fmul_rn, __fadd_rn), as the gated_add generator keeps them.
 *
 * Aliasing: out may be the residual's buffer.  Each output element is
 * written once, by the epilogue thread that reads its residual element just
 * before, so the in-place handover is safe. */
#include "g_gemm.h"

#include <string.h>


/* ---- validation and shapes --------------------------------------------- */
static const dc_type *input_type(const dc_module *m, const dc_node *n, int i) {
  return &m->nodes[n->inputs[i]].type;
}

static int weight_dtype_ok(dc_dtype t) {
  return t == DT_F32 || t == DT_BF16 || t == DT_F16 || t == DT_F8_E4M3 || t == DT_F8_E5M2;
}

/* x, residual, gate and output f32, bf16 or f16 (activations); the weight
 * and bias any storage dtype (layerwise casting casts a module's bias with
 * its weight). */
static dc_status *check_dtypes(const dc_module *m, const dc_node *n) {
  char b[160];
  int nparams = 1 + (int)dc_node_int(n, "bias");
  for (int i = 0; i < n->ninputs; i++) {
    const dc_type *t = input_type(m, n, i);
    int param = i >= 1 && i <= nparams;
    if (param ? !weight_dtype_ok(t->dtype) : !dc_cuda_float_io(t->dtype))
      return dc_error(DC_ERR_UNSUPPORTED, "input %d is %s; expected %s", i, dc_type_str(t, b, sizeof b),
                      param ? "f32, bf16, f16, f8e4m3 or f8e5m2" : "f32, bf16 or f16");
  }
  if (!dc_cuda_float_io(n->type.dtype))
    return dc_error(DC_ERR_UNSUPPORTED, "output is %s; expected f32, bf16 or f16", dc_dtype_name(n->type.dtype));
  return NULL;
}

/* Indices are int inside the kernel (global offsets long long). */
static dc_status *check_int_range(const gemm *g) {
  const int64_t lim = (int64_t)1 << 30;
  if (g->m >= lim || g->ncols >= lim || g->k >= lim)
    return dc_error(DC_ERR_UNSUPPORTED, "GEMM of %lld x %lld x %lld is too large for 32-bit tile indices",
                    (long long)g->m, (long long)g->ncols, (long long)g->k);
  return NULL;
}

static void read_epilogue(const dc_module *m, const dc_node *n, gemm *g) {
  g->has_bias = dc_node_int(n, "bias") != 0;
  g->out = n->type;
  g->rtype = g->gtype = DT_F32;
  if (n->op == OP_CONV3D) return; /* the bias is its whole epilogue (no act or residual attribute) */
  g->has_res = dc_node_int(n, "residual") != 0;
  g->act = (int)dc_node_int(n, "act");
  g->geglu = g->act == ACT_GEGLU;
  g->out = n->type;
  if (g->has_res) g->res = *input_type(m, n, 2 + g->has_bias);
  g->rtype = g->has_res ? g->res.dtype : DT_F32;
  int gate = dc_node_gate_slot(n);
  g->has_gate = gate >= 0;
  g->gtype = g->has_gate ? input_type(m, n, gate)->dtype : DT_F32;
  if (g->has_gate) {
    g->gate_rows = n->type.dims[1];
    g->gate_ld = input_type(m, n, gate)->dims[1];
    g->gate_at = dc_node_int(n, "gate_at");
  }
}

/* dims are physical (ir/ir.h): NCHW x[N,C,H,W] w[O,C,kh,kw] out[N,O,Ho,Wo],
 * NHWC x[N,H,W,C] w[O,kh,kw,C] out[N,Ho,Wo,O]. */
static void read_conv(const dc_module *m, const dc_node *n, gemm *g) {
  const dc_type *x = input_type(m, n, 0), *w = input_type(m, n, 1);
  g->conv = 1;
  g->nhwc = n->layout == LAYOUT_NHWC;
  if (g->nhwc) {
    g->ci = x->dims[3], g->hi = x->dims[1], g->wi = x->dims[2];
    g->kh = w->dims[1], g->kw = w->dims[2];
    g->ho = n->type.dims[1], g->wo = n->type.dims[2];
  } else {
    g->ci = x->dims[1], g->hi = x->dims[2], g->wi = x->dims[3];
    g->kh = w->dims[2], g->kw = w->dims[3];
    g->ho = n->type.dims[2], g->wo = n->type.dims[3];
  }
  g->stride = dc_node_int(n, "stride");
  g->pt = dc_node_int(n, "pad_t"), g->pl = dc_node_int(n, "pad_l");
  g->m = x->dims[0] * g->ho * g->wo;
  g->ncols = w->dims[0];
  g->k = g->ci * g->kh * g->kw;
  g->outc = g->ncols;
}

/* x[B,C,T,H,W] w[O,C,kt,kh,kw] out[B,O,To,Ho,Wo]; padding in H and W only. */
static void read_conv3d(const dc_module *m, const dc_node *n, gemm *g) {
  const dc_type *x = input_type(m, n, 0), *w = input_type(m, n, 1);
  g->conv = g->conv3d = 1;
  g->ci = x->dims[1], g->ti = x->dims[2], g->hi = x->dims[3], g->wi = x->dims[4];
  g->kd = w->dims[2], g->kh = w->dims[3], g->kw = w->dims[4];
  g->to = n->type.dims[2], g->ho = n->type.dims[3], g->wo = n->type.dims[4];
  g->st = dc_node_int(n, "stride_t"), g->sh = dc_node_int(n, "stride_h"), g->sw = dc_node_int(n, "stride_w");
  g->pt = dc_node_int(n, "pad_h"), g->pl = dc_node_int(n, "pad_w");
  g->m = x->dims[0] * g->to * g->ho * g->wo;
  g->ncols = g->outc = w->dims[0];
  g->k = g->ci * g->kd * g->kh * g->kw;
}

static void read_linear(const dc_module *m, const dc_node *n, gemm *g) {
  const dc_type *w = input_type(m, n, 1);
  g->ncols = w->dims[0];
  g->k = w->dims[1];
  g->outc = g->geglu ? g->ncols / 2 : g->ncols;
  g->m = g->outc ? (int64_t)dc_type_numel(&n->type) / g->outc : 0;
}

/* Tile shape.  The 128x128 tensor-core tile needs 66 KiB of shared memory
 * (dynamic) and pays off only when its grid still covers a large GPU
 * (~132 SMs); otherwise 64x64 keeps more blocks in flight. */
static void pick_tile(gemm *g, const dc_cuda_options *o) {
  g->compute = o->compute;
  g->wmma = o->compute != DC_CUDA_COMPUTE_F32;
  if (!g->wmma) {
    g->bm = g->bn = 64, g->bk = 16, g->threads = 256;
    return;
  }
  int64_t big_blocks = ((g->m + 127) / 128) * ((g->ncols + 127) / 128);
  g->bk = 32;
  if (big_blocks >= dc_cuda_sm_count(o))
    g->fm = 4, g->fn = 2, g->wgm = 2, g->wgn = 4; /* 128x128, 8 warps of 64x32 */
  else
    g->fm = 2, g->fn = 2, g->wgm = 2, g->wgn = 2; /* 64x64, 4 warps of 32x32 */
  g->bm = g->wgm * g->fm * 16;
  g->bn = g->wgn * g->fn * 16;
  g->threads = 32 * g->wgm * g->wgn;
}

/* Shared bytes: the two staging buffers, overlaid by the f32 C tile once
 * the main loop is done. */
static uint32_t smem_bytes(const gemm *g) {
  uint32_t stage, ctile;
  if (g->wmma) {
    stage = 2u * (uint32_t)(g->bm + g->bn) * (uint32_t)(g->bk + 8) * 2u;
    ctile = (uint32_t)g->bm * (uint32_t)(g->bn + 4) * 4u;
  } else {
    stage = 2u * (uint32_t)g->bk * (uint32_t)(g->bm + 4 + g->bn + 4) * 4u;
    ctile = (uint32_t)g->bm * (uint32_t)(g->bn + 1) * 4u;
  }
  return stage > ctile ? stage : ctile;
}

enum { STATIC_SMEM_MAX = 48 * 1024 };

/* ---- emitted text ------------------------------------------------------- */
/* The conv geometry and the operands' types and loads (x, weight, bias,
 * output, residual, gate) as the kernel text names them; shared with the
 * mma.sync generator (g_gemm.h). */
static void emit_operands(dc_buf *b, const gemm *g) {
  if (g->conv3d)
    dc_buf_printf(b,
                  "#define G_CI %lld\n#define G_TI %lld\n#define G_HI %lld\n#define G_WI %lld\n#define G_KD %lld\n"
                  "#define G_KH %lld\n#define G_KW %lld\n#define G_TO %lld\n#define G_HO %lld\n#define G_WO %lld\n"
                  "#define G_P (G_TO * G_HO * G_WO)\n#define G_ST %lld\n#define G_SH %lld\n#define G_SW %lld\n"
                  "#define G_PT %lld\n#define G_PL %lld\n",
                  (long long)g->ci, (long long)g->ti, (long long)g->hi, (long long)g->wi, (long long)g->kd,
                  (long long)g->kh, (long long)g->kw, (long long)g->to, (long long)g->ho, (long long)g->wo,
                  (long long)g->st, (long long)g->sh, (long long)g->sw, (long long)g->pt, (long long)g->pl);
  else if (g->conv)
    dc_buf_printf(b,
                  "#define G_CI %lld\n#define G_HI %lld\n#define G_WI %lld\n#define G_KH %lld\n#define G_KW %lld\n"
                  "#define G_HO %lld\n#define G_WO %lld\n#define G_P (G_HO * G_WO)\n"
                  "#define G_STRIDE %lld\n#define G_PT %lld\n#define G_PL %lld\n",
                  (long long)g->ci, (long long)g->hi, (long long)g->wi, (long long)g->kh, (long long)g->kw,
                  (long long)g->ho, (long long)g->wo, (long long)g->stride, (long long)g->pt, (long long)g->pl);
  dc_buf_printf(b, "typedef %s g_w_t;\n#define G_WLD %s\n", dc_cuda_ctype(g->wtype), dc_cuda_loader(g->wtype));
  dc_buf_printf(b, "typedef %s g_b_t;\n#define G_BIAS(i) %s(bias, (i))\n", dc_cuda_ctype(g->btype), dc_cuda_loader(g->btype));
  dc_buf_printf(b, "typedef %s g_x_t;\n#define G_XLD %s\n", dc_cuda_ctype(g->xtype), dc_cuda_loader(g->xtype));
  dc_buf_printf(b, "typedef %s g_o_t;\n#define G_OST %s\n", dc_cuda_ctype(g->otype), dc_cuda_storer(g->otype));
  if (g->has_res) dc_buf_printf(b, "typedef %s g_r_t;\n#define G_RLD %s\n", dc_cuda_ctype(g->rtype), dc_cuda_loader(g->rtype));
  if (g->has_gate) dc_buf_printf(b, "typedef %s g_g_t;\n#define G_GLD %s\n", dc_cuda_ctype(g->gtype), dc_cuda_loader(g->gtype));
}

static void emit_defines(dc_buf *b, const gemm *g, const char *what) {
  static const char *const compute_desc[] = {"f32 FMA (no tensor cores)", "bf16 tensor cores (WMMA 16x16x16), f32 accumulation",
                                             "f16 tensor cores (WMMA 16x16x16), f32 accumulation"};
  dc_buf_printf(b,
                "#include \"dc_cuda.cuh\"\n"
                "/* %s as a GEMM M=%lld N=%lld K=%lld; %s; weights %s; act %s%s%s (generated by diffc) */\n"
                "#if defined(__CUDACC__)\n#define G_UNROLL _Pragma(\"unroll\")\n#else\n#define G_UNROLL\n#endif\n",
                what, (long long)g->m, (long long)g->ncols, (long long)g->k, compute_desc[g->compute],
                dc_dtype_name(g->wtype), dc_act_name((dc_act)g->act), g->has_bias ? ", bias" : "",
                g->has_gate ? ", gated residual" : g->has_res ? ", residual" : "");
  dc_buf_printf(b,
                "#define G_M %lld\n#define G_N %lld\n#define G_K %lld\n#define G_OUTC %lld\n"
                "#define G_BM %d\n#define G_BN %d\n#define G_BK %d\n#define G_NT %d\n"
                "#define G_OBN %d /* output columns per block */\n"
                "#define G_KT ((G_K + G_BK - 1) / G_BK > 0 ? (G_K + G_BK - 1) / G_BK : 1)\n"
                "#define G_APT (G_BM * G_BK / G_NT) /* A values each thread stages */\n"
                "#define G_BPT (G_BN * G_BK / G_NT)\n",
                (long long)g->m, (long long)g->ncols, (long long)g->k, (long long)g->outc, g->bm, g->bn, g->bk,
                g->threads, g->geglu ? g->bn / 2 : g->bn);
  emit_operands(b, g);
  if (g->wmma) {
    int bf = g->compute == DC_CUDA_COMPUTE_BF16;
    dc_buf_printf(b,
                  "typedef %s g_in_t;\n#define G_TO_IN(v) %s(v)\n"
                  "#define G_LDS (G_BK + 8) /* staged rows, K-contiguous: A [BM][LDS], B [BN][LDS] */\n"
                  "#define G_LDC (G_BN + 4)\n#define G_FM %d\n#define G_FN %d\n#define G_WGN %d\n",
                  bf ? "__nv_bfloat16" : "__half", bf ? "__float2bfloat16_rn" : "__float2half_rn", g->fm, g->fn,
                  g->wgn);
  } else {
    dc_buf_printf(b, "#define G_LDA (G_BM + 4) /* staged A [BK][LDA] */\n#define G_LDB (G_BN + 4)\n"
                     "#define G_LDC (G_BN + 1)\n");
  }
}

/* NHWC: k = (r, q, c), c fastest.  g_a4 reads 4 consecutive k from a
 * multiple of 4: with C % 4 == 0 they are one tap's channels c..c+3, one
 * 16-byte load (x is 64-byte aligned, the offset a multiple of 4 floats),
 * and K % 4 == 0, so one bounds check covers all four. */
static void emit_a_nhwc(dc_buf *b, const gemm *g) {
  dc_buf_printf(b,
                "/* Implicit im2col of the NHWC input: row m = (n, ho, wo), column k = (r, q, c), c fastest. */\n"
                "struct g_arow { const g_x_t *p; int hb, wb; bool ok; };\n"
                "DC_DEVICE g_arow g_row(const g_x_t *__restrict__ x, int m) {\n"
                "  const int wo = m %% G_WO, ho = (m / G_WO) %% G_HO, n = m / G_P;\n"
                "  g_arow r = {x + (long long)n * G_HI * G_WI * G_CI, ho * G_STRIDE - G_PT, wo * G_STRIDE - G_PL, m < G_M};\n"
                "  return r;\n"
                "}\n"
                "/* The offset of tap k's channel in the sample, or -1 in the padding / past K. */\n"
                "DC_DEVICE long long g_tap(const g_arow &r, int k) {\n"
                "  const int c = k %% G_CI, t = k / G_CI, hi = r.hb + t / G_KW, wi = r.wb + t %% G_KW;\n"
                "  if (!r.ok || k >= G_K || (unsigned)hi >= (unsigned)G_HI || (unsigned)wi >= (unsigned)G_WI) return -1;\n"
                "  return ((long long)hi * G_WI + wi) * G_CI + c;\n"
                "}\n");
  if (g->ci % 4 == 0 && g->xtype == DT_F32)
    dc_buf_printf(b,
                  "struct __align__(16) g_f4 { float v[4]; };\n"
                  "DC_DEVICE void g_a4(const g_arow &r, int k, float *v) {\n"
                  "  const long long at = g_tap(r, k);\n"
                  "  if (at < 0) {\n"
                  "    v[0] = v[1] = v[2] = v[3] = 0.0f;\n"
                  "    return;\n"
                  "  }\n"
                  "  const g_f4 f = *reinterpret_cast<const g_f4 *>(r.p + at);\n"
                  "  v[0] = f.v[0], v[1] = f.v[1], v[2] = f.v[2], v[3] = f.v[3];\n"
                  "}\n");
  else
    dc_buf_printf(b,
                  "DC_DEVICE void g_a4(const g_arow &r, int k, float *v) { /* one value at a time (C %% 4 != 0, or 16-bit x) */\n"
                  "  G_UNROLL for (int i = 0; i < 4; i++) {\n"
                  "    const long long at = g_tap(r, k + i);\n"
                  "    v[i] = at < 0 ? 0.0f : G_XLD(r.p, at);\n"
                  "  }\n"
                  "}\n");
}

/* A's element (m, k), zero outside the matrix and in the padding, in two
 * steps: g_row(x, m) does the row's part of the address once, g_a(row, k)
 * (NHWC: g_a4, 4 k at a time) the rest.  This is the whole A address
 * generation. */
static void emit_a(dc_buf *b, const gemm *g) {
  if (!g->conv) {
    dc_buf_printf(b, "struct g_arow { const g_x_t *p; bool ok; };\n"
                     "DC_DEVICE g_arow g_row(const g_x_t *__restrict__ x, int m) {\n"
                     "  g_arow r = {x + (long long)m * G_K, m < G_M};\n  return r;\n}\n"
                     "DC_DEVICE float g_a(const g_arow &r, int k) { return r.ok && k < G_K ? G_XLD(r.p, k) : 0.0f; }\n");
    return;
  }
  if (g->nhwc) {
    emit_a_nhwc(b, g);
    return;
  }
  if (g->conv3d) {
    dc_buf_printf(b,
                  "/* Implicit im2col of the [B,C,T,H,W] input: row m = (n, to, ho, wo), column k = (c, t, r, q). */\n"
                  "struct g_arow { const g_x_t *p; int hb, wb; bool ok; };\n"
                  "DC_DEVICE g_arow g_row(const g_x_t *__restrict__ x, int m) {\n"
                  "  const int wo = m %% G_WO, ho = (m / G_WO) %% G_HO, to = (m / (G_WO * G_HO)) %% G_TO, n = m / G_P;\n"
                  "  g_arow r = {x + ((long long)n * G_CI * G_TI + to * G_ST) * G_HI * G_WI, ho * G_SH - G_PT,\n"
                  "              wo * G_SW - G_PL, m < G_M};\n"
                  "  return r;\n"
                  "}\n"
                  "DC_DEVICE float g_a(const g_arow &r, int k) {\n"
                  "  const int q = k %% G_KW, t = k / G_KW, hi = r.hb + t %% G_KH, u = t / G_KH, c = u / G_KD, wi = r.wb + q;\n"
                  "  if (!r.ok || k >= G_K || (unsigned)hi >= (unsigned)G_HI || (unsigned)wi >= (unsigned)G_WI) return 0.0f;\n"
                  "  return G_XLD(r.p, (((long long)c * G_TI + u %% G_KD) * G_HI + hi) * G_WI + wi); /* frame to·st + t */\n"
                  "}\n");
    return;
  }
  dc_buf_printf(b,
                "/* Implicit im2col of the NCHW input: row m = (n, ho, wo), column k = (c, r, q). */\n"
                "struct g_arow { const g_x_t *p; int hb, wb; bool ok; };\n"
                "DC_DEVICE g_arow g_row(const g_x_t *__restrict__ x, int m) {\n"
                "  const int wo = m %% G_WO, ho = (m / G_WO) %% G_HO, n = m / G_P;\n"
                "  g_arow r = {x + (long long)n * G_CI * G_HI * G_WI, ho * G_STRIDE - G_PT, wo * G_STRIDE - G_PL, m < G_M};\n"
                "  return r;\n"
                "}\n"
                "DC_DEVICE float g_a(const g_arow &r, int k) {\n"
                "  const int q = k %% G_KW, t = k / G_KW, c = t / G_KH, hi = r.hb + t %% G_KH, wi = r.wb + q;\n"
                "  if (!r.ok || k >= G_K || (unsigned)hi >= (unsigned)G_HI || (unsigned)wi >= (unsigned)G_WI) return 0.0f;\n"
                "  return G_XLD(r.p, ((long long)c * G_HI + hi) * G_WI + wi);\n"
                "}\n");
}

/* The GEMM column of the block's local column jl, or -1 past the end. */
static void emit_col(dc_buf *b, const gemm *g) {
  if (g->geglu)
    dc_buf_printf(b, "/* geglu: local columns [0, OBN) are values j, [OBN, BN) their gates j + H. */\n"
                     "DC_DEVICE int g_col(int by, int jl) {\n"
                     "  const int j = by * G_OBN + jl %% G_OBN;\n"
                     "  return j < G_OUTC ? (jl < G_OBN ? j : G_OUTC + j) : -1;\n}\n");
  else
    dc_buf_printf(b, "DC_DEVICE int g_col(int by, int jl) {\n"
                     "  const int j = by * G_BN + jl;\n  return j < G_N ? j : -1;\n}\n");
}

/* Index into the residual of output element oi: numpy broadcasting with
 * the strides as constants (identity when the shapes match). */
static void emit_res_index(dc_buf *b, const gemm *g) {
  if (!g->has_res) return;
  dc_buf_printf(b, "DC_DEVICE long long g_res(long long oi) {\n");
  if (dc_type_numel(&g->res) == dc_type_numel(&g->out)) {
    dc_buf_printf(b, "  return oi;\n}\n");
    return;
  }
  dc_buf_printf(b, "  long long ri = 0;\n");
  int64_t rstride = 1;
  for (int d = g->out.rank - 1; d >= 0; d--) {
    int rd = d - (g->out.rank - g->res.rank);
    int64_t rdim = rd >= 0 ? g->res.dims[rd] : 1;
    if (rdim != 1) dc_buf_printf(b, "  ri += (oi %% %lldLL) * %lldLL;\n", (long long)g->out.dims[d], (long long)rstride);
    if (d > 0) dc_buf_printf(b, "  oi /= %lldLL;\n", (long long)g->out.dims[d]);
    rstride *= rdim;
  }
  dc_buf_printf(b, "  return ri;\n}\n");
}

/* Reads the C tile cs[BM][LDC], finishes and writes the block's outputs:
 * an NCHW conv walks rows fastest (consecutive pixels are adjacent), linear
 * and an NHWC conv columns fastest (the output is row-major [M][OUTC]). */
static void emit_epilogue(dc_buf *b, const gemm *g) {
  dc_buf_printf(b, "DC_DEVICE void g_epilogue(g_o_t *out, const float *cs, int m0, int by%s%s) {\n"
                   "  for (int e = threadIdx.x; e < G_BM * G_OBN; e += G_NT) {\n",
                g->has_bias ? ", const g_b_t *__restrict__ bias" : "",
                g->has_gate ? ", const g_r_t *res, const g_g_t *__restrict__ gate"
                : g->has_res ? ", const g_r_t *res" : "");
  int planes = g->conv && !g->nhwc;
  if (planes)
    dc_buf_printf(b, "    const int ml = e %% G_BM, cl = e / G_BM;\n");
  else
    dc_buf_printf(b, "    const int cl = e %% G_OBN, ml = e / G_OBN;\n");
  dc_buf_printf(b, "    const int m = m0 + ml, j = by * G_OBN + cl;\n"
                   "    if (m >= G_M || j >= G_OUTC) continue;\n"
                   "    float v = cs[ml * G_LDC + cl]%s;\n",
                g->has_bias ? " + G_BIAS(j)" : "");
  if (g->geglu)
    dc_buf_printf(b, "    v = v * dc_gelu(cs[ml * G_LDC + cl + G_OBN]%s);\n", g->has_bias ? " + G_BIAS(G_OUTC + j)" : "");
  if (g->act == ACT_SILU) dc_buf_printf(b, "    v = dc_silu(v);\n");
  if (g->act == ACT_GELU) dc_buf_printf(b, "    v = dc_gelu(v);\n");
  if (g->act == ACT_QUICK_GELU) dc_buf_printf(b, "    v = v * (1.0f / (1.0f + expf(-(1.702f * v)))); /* quick_gelu */\n");
  if (g->act == ACT_GELU_TANH) dc_buf_printf(b, "    v = %s; /* gelu_tanh */\n", DC_CUDA_GELU_TANH("v"));
  if (planes)
    dc_buf_printf(b, "    const long long oi = ((long long)(m / G_P) * G_OUTC + j) * G_P + m %% G_P;\n");
  else
    dc_buf_printf(b, "    const long long oi = (long long)m * G_OUTC + j;\n");
  if (g->has_gate) /* __fmul_rn / __fadd_rn: the product rounded first, never one fma (gated_add's bits) */
    dc_buf_printf(b,
                  "    const float gv = G_GLD(gate, (long long)(m / %lld) * %lldLL + %lldLL + j); /* sample m / S's chunk */\n"
                  "    v = __fadd_rn(G_RLD(res, g_res(oi)), __fmul_rn(gv, v)); /* res read before out[oi]: it may be out */\n",
                  (long long)g->gate_rows, (long long)g->gate_ld, (long long)g->gate_at);
  else if (g->has_res)
    dc_buf_printf(b, "    v += G_RLD(res, g_res(oi)); /* read just before out[oi]: res may be out */\n");
  dc_buf_printf(b, "    G_OST(out, oi, v); /* rounded once, here */\n  }\n}\n");
}

static void emit_epilogue_call(dc_buf *b, const gemm *g) {
  dc_buf_printf(b, "  g_epilogue(out, cs, m0, by%s%s);\n}\n", g->has_bias ? ", bias" : "",
                g->has_gate ? ", res, gate" : g->has_res ? ", res" : "");
}

/* Global -> registers for one K tile, and registers -> shared in the
 * compute type.  Thread t stages A elements (G_A_ML(i), G_A_KL(i)): for an
 * NCHW conv a fixed row and every (NT/BM)-th k (consecutive threads read
 * consecutive pixels, adjacent in NCHW), for an NHWC conv groups of 4
 * consecutive k, group t + NT·j of the tile in row-major order (consecutive
 * threads read along a tap's channels), for linear a fixed k and every
 * (NT/BK)-th row (consecutive threads read a row).  B elements: fixed k,
 * every (NT/BK)-th column (weight rows are K-contiguous in both layouts). */
static void emit_stage(dc_buf *b, const gemm *g) {
  if (g->nhwc)
    dc_buf_printf(b, "#define G_AV (G_BK / 4) /* 4-k groups per staged A row */\n"
                     "#define G_A_ML(i) ((threadIdx.x + (i) / 4 * G_NT) / G_AV)\n"
                     "#define G_A_KL(i) ((threadIdx.x + (i) / 4 * G_NT) %% G_AV * 4 + (i) %% 4)\n"
                     "static_assert(G_BK %% 4 == 0 && G_APT %% 4 == 0 && G_NT %% G_AV == 0, \"a thread stages 4-k groups\");\n");
  else if (g->conv)
    dc_buf_printf(b, "#define G_A_ML(i) (threadIdx.x %% G_BM)\n#define G_A_KL(i) (threadIdx.x / G_BM + (i) * (G_NT / G_BM))\n"
                     "static_assert(G_NT %% G_BM == 0, \"a thread stages one A row\");\n");
  else
    dc_buf_printf(b, "#define G_A_ML(i) (threadIdx.x / G_BK + (i) * (G_NT / G_BK))\n#define G_A_KL(i) (threadIdx.x %% G_BK)\n");
  dc_buf_printf(b, "#define G_B_JL(i) (threadIdx.x / G_BK + (i) * (G_NT / G_BK))\n#define G_B_KL (threadIdx.x %% G_BK)\n"
                   "static_assert(G_NT %% G_BK == 0 && (G_BM * G_BK) %% G_NT == 0 && (G_BN * G_BK) %% G_NT == 0, \"tile\");\n"
                   "DC_DEVICE void g_load(const g_x_t *__restrict__ x, const g_w_t *__restrict__ w, int m0, int by, int k0,\n"
                   "                       float *ra, float *rb) {\n");
  if (g->nhwc)
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_APT; i += 4) g_a4(g_row(x, m0 + G_A_ML(i)), k0 + G_A_KL(i), ra + i);\n");
  else if (g->conv)
    dc_buf_printf(b, "  const g_arow row = g_row(x, m0 + G_A_ML(0));\n"
                     "  G_UNROLL for (int i = 0; i < G_APT; i++) ra[i] = g_a(row, k0 + G_A_KL(i));\n");
  else
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_APT; i++) ra[i] = g_a(g_row(x, m0 + G_A_ML(i)), k0 + G_A_KL(i));\n");
  dc_buf_printf(b, "  const int k = k0 + G_B_KL;\n"
                   "  G_UNROLL for (int i = 0; i < G_BPT; i++) {\n"
                   "    const int col = g_col(by, G_B_JL(i));\n"
                   "    rb[i] = col >= 0 && k < G_K ? G_WLD(w, (long long)col * G_K + k) : 0.0f;\n  }\n}\n");
  if (g->wmma)
    dc_buf_printf(b, "DC_DEVICE void g_store(g_in_t *as, g_in_t *bs, const float *ra, const float *rb) {\n"
                     "  G_UNROLL for (int i = 0; i < G_APT; i++) as[G_A_ML(i) * G_LDS + G_A_KL(i)] = G_TO_IN(ra[i]);\n"
                     "  G_UNROLL for (int i = 0; i < G_BPT; i++) bs[G_B_JL(i) * G_LDS + G_B_KL] = G_TO_IN(rb[i]);\n}\n");
  else
    dc_buf_printf(b, "DC_DEVICE void g_store(float *as, float *bs, const float *ra, const float *rb) {\n"
                     "  G_UNROLL for (int i = 0; i < G_APT; i++) as[G_A_KL(i) * G_LDA + G_A_ML(i)] = ra[i];\n"
                     "  G_UNROLL for (int i = 0; i < G_BPT; i++) bs[G_B_KL * G_LDB + G_B_JL(i)] = rb[i];\n}\n");
}

static void emit_params(dc_buf *b, const gemm *g, const char *name) {
  dc_buf_printf(b, "DC_KERNEL void %s(g_o_t *out, const g_x_t *__restrict__ x, const g_w_t *__restrict__ w", name);
  if (g->has_bias) dc_buf_printf(b, ", const g_b_t *__restrict__ bias");
  if (g->has_res) dc_buf_printf(b, ", const g_r_t *res");
  if (g->has_gate) dc_buf_printf(b, ", const g_g_t *__restrict__ gate");
  dc_buf_printf(b, ") {\n");
}

static void emit_signature(dc_buf *b, const gemm *g, const char *name) {
  emit_params(b, g, name);
  /* WMMA needs 32-byte aligned tiles: the kernel has no static shared
   * memory beside g_smem, so the dynamic buffer starts at the base of the
   * block's shared window, and every tile offset is a multiple of 32. */
  if (smem_bytes(g) > STATIC_SMEM_MAX)
    dc_buf_printf(b, "  DC_DYNAMIC_SMEM(g_smem);\n");
  else
    dc_buf_printf(b, "  __shared__ __align__(128) unsigned char g_smem[%u];\n", smem_bytes(g));
}

/* The software pipeline shared by both main loops: tile kt+1 is loaded into
 * registers while tile kt (buffer kt & 1) is used, then stored into the
 * other buffer, which every thread finished reading one barrier ago. */
static void emit_pipeline(dc_buf *b, const char *a_size, const char *b_size, const char *compute) {
  dc_buf_printf(b,
                "  float ra[G_APT], rb[G_BPT];\n"
                "  g_load(x, w, m0, by, 0, ra, rb);\n"
                "  g_store(as, bs, ra, rb);\n"
                "  __syncthreads();\n"
                "  for (int kt = 0; kt < G_KT; kt++) {\n"
                "    const int cur = kt & 1;\n"
                "    if (kt + 1 < G_KT) g_load(x, w, m0, by, (kt + 1) * G_BK, ra, rb);\n"
                "%s"
                "    if (kt + 1 < G_KT) g_store(as + (cur ^ 1) * %s, bs + (cur ^ 1) * %s, ra, rb);\n"
                "    __syncthreads();\n"
                "  }\n",
                compute, a_size, b_size);
}

static void emit_kernel_fma(dc_buf *b, const gemm *g, const char *name) {
  emit_signature(b, g, name);
  dc_buf_printf(b, "  float *as = reinterpret_cast<float *>(g_smem), *bs = as + 2 * G_BK * G_LDA;\n"
                   "  float *cs = reinterpret_cast<float *>(g_smem); /* after the main loop */\n"
                   "  const int m0 = blockIdx.x * G_BM, by = blockIdx.y;\n"
                   "  const int tx = threadIdx.x %% 16, ty = threadIdx.x / 16; /* rows ty + 16i, cols tx + 16j */\n"
                   "  float acc[4][4];\n"
                   "  G_UNROLL for (int i = 0; i < 4; i++) G_UNROLL for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;\n");
  emit_pipeline(b, "G_BK * G_LDA", "G_BK * G_LDB",
                "    {\n"
                "      const float *a_s = as + cur * G_BK * G_LDA, *b_s = bs + cur * G_BK * G_LDB;\n"
                "      G_UNROLL for (int kk = 0; kk < G_BK; kk++) {\n"
                "        float av[4], bv[4];\n"
                "        G_UNROLL for (int i = 0; i < 4; i++) av[i] = a_s[kk * G_LDA + ty + 16 * i];\n"
                "        G_UNROLL for (int j = 0; j < 4; j++) bv[j] = b_s[kk * G_LDB + tx + 16 * j];\n"
                "        G_UNROLL for (int i = 0; i < 4; i++) G_UNROLL for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];\n"
                "      }\n"
                "    }\n");
  dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < 4; i++) G_UNROLL for (int j = 0; j < 4; j++)\n"
                   "    cs[(ty + 16 * i) * G_LDC + tx + 16 * j] = acc[i][j];\n"
                   "  __syncthreads();\n");
  emit_epilogue_call(b, g);
}

static void emit_kernel_wmma(dc_buf *b, const gemm *g, const char *name) {
  emit_signature(b, g, name);
  dc_buf_printf(b,
                "  using namespace nvcuda;\n"
                "  g_in_t *as = reinterpret_cast<g_in_t *>(g_smem), *bs = as + 2 * G_BM * G_LDS;\n"
                "  float *cs = reinterpret_cast<float *>(g_smem); /* after the main loop */\n"
                "  const int m0 = blockIdx.x * G_BM, by = blockIdx.y;\n"
                "  const int warp = threadIdx.x / 32, wm = warp / G_WGN, wn = warp %% G_WGN;\n"
                "  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[G_FM][G_FN];\n"
                "  G_UNROLL for (int i = 0; i < G_FM; i++) G_UNROLL for (int j = 0; j < G_FN; j++) wmma::fill_fragment(acc[i][j], 0.0f);\n");
  emit_pipeline(b, "G_BM * G_LDS", "G_BN * G_LDS",
                "    {\n"
                "      const g_in_t *a_s = as + cur * G_BM * G_LDS + wm * (G_FM * 16) * G_LDS;\n"
                "      const g_in_t *b_s = bs + cur * G_BN * G_LDS + wn * (G_FN * 16) * G_LDS;\n"
                "      G_UNROLL for (int kk = 0; kk < G_BK; kk += 16) {\n"
                "        wmma::fragment<wmma::matrix_a, 16, 16, 16, g_in_t, wmma::row_major> fa[G_FM];\n"
                "        wmma::fragment<wmma::matrix_b, 16, 16, 16, g_in_t, wmma::col_major> fb[G_FN];\n"
                "        G_UNROLL for (int i = 0; i < G_FM; i++) wmma::load_matrix_sync(fa[i], a_s + i * 16 * G_LDS + kk, G_LDS);\n"
                "        G_UNROLL for (int j = 0; j < G_FN; j++) wmma::load_matrix_sync(fb[j], b_s + j * 16 * G_LDS + kk, G_LDS);\n"
                "        G_UNROLL for (int i = 0; i < G_FM; i++) G_UNROLL for (int j = 0; j < G_FN; j++)\n"
                "          wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);\n"
                "      }\n"
                "    }\n");
  dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_FM; i++) G_UNROLL for (int j = 0; j < G_FN; j++)\n"
                   "    wmma::store_matrix_sync(cs + (wm * G_FM * 16 + i * 16) * G_LDC + wn * G_FN * 16 + j * 16, acc[i][j],\n"
                   "                            G_LDC, wmma::mem_row_major);\n"
                   "  __syncthreads();\n");
  emit_epilogue_call(b, g);
}

static dc_status *generate(gemm *g, const dc_cuda_options *o, const char *what, const char *name,
                           dc_cuda_kernel *out) {
  DC_TRY(check_int_range(g));
  const char *why = NULL;
  g->compute = o->compute;
  if (dc_mma_gemm_takes(g, &why)) return dc_mma_gemm_generate(g, o, what, name, out);
  pick_tile(g, o);
  dc_buf b;
  dc_buf_init(&b);
  emit_defines(&b, g, what);
  emit_a(&b, g);
  emit_col(&b, g);
  emit_res_index(&b, g);
  emit_epilogue(&b, g);
  emit_stage(&b, g);
  if (g->wmma)
    emit_kernel_wmma(&b, g, name);
  else
    emit_kernel_fma(&b, g, name);
  int64_t obn = g->geglu ? g->bn / 2 : g->bn;
  int64_t gx = (g->m + g->bm - 1) / g->bm, gy = (g->outc + obn - 1) / obn;
  if (gy > 65535) {
    dc_buf_deinit(&b);
    return dc_error(DC_ERR_UNSUPPORTED, "%lld output columns need %lld column blocks; the grid allows 65535",
                    (long long)g->outc, (long long)gy);
  }
  out->grid[0] = (uint32_t)(gx > 0 ? gx : 1);
  out->grid[1] = (uint32_t)(gy > 0 ? gy : 1);
  out->grid[2] = 1;
  out->block[0] = (uint32_t)g->threads;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = smem_bytes(g) > STATIC_SMEM_MAX ? smem_bytes(g) : 0;
  return dc_cuda_finish(&b, name, out);
}

/* What conv2d and linear share: operand dtypes (the weight and bias in
 * their stored dtypes) and the epilogue. */
static dc_status *read_common(const dc_module *m, const dc_node *n, gemm *g) {
  memset(g, 0, sizeof *g);
  DC_TRY(check_dtypes(m, n));
  g->xtype = input_type(m, n, 0)->dtype;
  g->wtype = input_type(m, n, 1)->dtype;
  g->btype = dc_node_int(n, "bias") ? input_type(m, n, 2)->dtype : DT_F32;
  g->otype = n->type.dtype;
  read_epilogue(m, n, g);
  return NULL;
}

dc_status *dc_cuda_gen_conv2d(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                              dc_cuda_kernel *out) {
  gemm g;
  DC_TRY(read_common(m, n, &g));
  if (g.geglu) return dc_error(DC_ERR_UNSUPPORTED, "act geglu is for linear only");
  read_conv(m, n, &g);
  return generate(&g, o, g.nhwc ? "conv2d (NHWC)" : "conv2d", name, out);
}

dc_status *dc_cuda_gen_conv3d(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                              dc_cuda_kernel *out) {
  gemm g;
  DC_TRY(read_common(m, n, &g));
  read_conv3d(m, n, &g);
  return generate(&g, o, "conv3d", name, out);
}

dc_status *dc_cuda_gen_linear(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                              dc_cuda_kernel *out) {
  gemm g;
  DC_TRY(read_common(m, n, &g));
  read_linear(m, n, &g);
  return generate(&g, o, "linear", name, out);
}

/* ---- shared with g_mma_gemm.c (g_gemm.h) --------------------------------- */
int dc_cuda_sm_count(const dc_cuda_options *o) { return o->sm_count > 0 ? o->sm_count : 132; }

dc_status *dc_gemm_read(const dc_module *m, const dc_node *n, gemm *g) {
  DC_TRY(read_common(m, n, g));
  if (n->op == OP_CONV2D) {
    if (g->geglu) return dc_error(DC_ERR_UNSUPPORTED, "act geglu is for linear only");
    read_conv(m, n, g);
  } else {
    read_linear(m, n, g);
  }
  return check_int_range(g);
}

void dc_gemm_emit_operands(dc_buf *b, const gemm *g) { emit_operands(b, g); }
void dc_gemm_emit_col(dc_buf *b, const gemm *g) { emit_col(b, g); }
void dc_gemm_emit_res_index(dc_buf *b, const gemm *g) { emit_res_index(b, g); }
void dc_gemm_emit_epilogue(dc_buf *b, const gemm *g) { emit_epilogue(b, g); }
void dc_gemm_emit_params(dc_buf *b, const gemm *g, const char *name) { emit_params(b, g, name); }
void dc_gemm_emit_epilogue_call(dc_buf *b, const gemm *g) { emit_epilogue_call(b, g); }
