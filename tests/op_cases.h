/* op_cases.h — the one op case table every backend runs (as ggml's
 * test-backend-ops): each op's awkward cases listed once — shapes,
 * attributes, dtypes, in-place runs, special data — with a per-op, per-
 * backend tolerance.  tests/test_op_cases.c runs every row on the reference
 * kernels (self-consistency: every output element written, in-place runs
 * equal to separate ones), the LLVM kernels (tests/kernel_harness.h, 1..3
 * threads) and the CUDA generators in the emulator (tests/cuda_harness.h),
 * each against the reference kernel.
 *
 * Adding an op (docs/ARCHITECTURE.md, "Adding an op"): rows in op_cases.c
 * (or op_cases_gemm.c / op_cases_attention.c), and its default tolerance
 * in oc_default_tol; test_op_cases fails for an op that some backend lowers
 * with a kernel but that no row covers on that backend. */
#ifndef DC_OP_CASES_H
#define DC_OP_CASES_H

#include "ir/ir.h"

enum { OC_REF = 1, OC_LLVM = 2, OC_CUDA = 4, OC_CPU = OC_REF | OC_LLVM, OC_ALL = 7 };
/* Tolerance key only: the CUDA rows of conv2d and linear again with bf16
 * (and f16) tensor-core compute. */
enum { OC_CUDA_TC = 8 };
enum { OC_CC_F32 = 1, OC_CC_BF16 = 2, OC_CC_F16 = 4, OC_CC_GEMM = OC_CC_F32 | OC_CC_BF16 };

/* llvm: which 3×3 stride-1 conv kernel (dc_llvm_set_winograd's 1, 2, 0). */
enum { OC_WINO_AUTO = 0, OC_WINO_FORCE, OC_WINO_NEVER };

/* What the inputs hold. */
typedef enum {
  OC_NORMAL = 0,    /* random normal(0,1) * scale (the harnesses' own; narrow dtypes: random finite codes) */
  OC_BYTES,         /* random bytes, NaN patterns included: moves copy bits, not values */
  OC_SPECIALS,      /* ±0, ±inf, NaNs, subnormals, exp's and erf's edges (input 0, 1-D) */
  OC_SWEEP,         /* every 2^-12 in [lo, 40] and a log sweep of magnitudes (silu, gelu) */
  OC_CODES,         /* every code of input 0's 8- or 16-bit dtype, plus 7 */
  OC_ROUNDING,      /* f32 values at f16/bf16 rounding edges: values, ties, ±1 ulp, specials, 2^20 random */
  OC_ROUNDING_HALF, /* the same edges as bit offsets of half an ulp, then random bits up to 724k values */
  OC_TIMESTEPS,     /* 0, 999, 1, 500.5, 981, 0.25, 12345, -3, then random in [0, 1000) */
  OC_OFFSET,        /* norms: x = scale + normal, gamma, beta (and mod) normal */
  OC_BIG_MEAN,      /* norms: x = scale + uniform(-1,1), gamma 1 ± 0.5, beta ± 0.5, mod ± 0.5 */
  OC_STORED,        /* conv2d, linear: normal(0,1) f32, the weight random finite codes of wdtype */
  OC_INTEGERS,      /* small integers rint(2·normal), in each input's dtype: every partial sum exact */
  OC_TOKENS,        /* token ids: integer inputs uniform in [0, scale), float inputs normal(0,1) */
  OC_TOKENS_OUT,    /* the same with ids in [-4, scale + 4): some outside a table of scale rows */
  OC_POSITIONS,     /* rope_freqs: integer positions in [0, scale), every 5th fractional, and 0, -17,
                     * 1e3, 4095.5, 65535, 1e5 first */
  OC_MASK,          /* attention_bias: q, k, v normal(0,1)*scale; the bias normal(0,1) with masked keys:
                     * -1e9 scattered, -inf on the first 3/4 of the keys in odd heads (never the last) */
} oc_data;

typedef struct {
  int exact;      /* bit for bit */
  double rel_l2;  /* else rel L2 <= this */
  double max_rel; /* and max rel <= this, when > 0 */
} oc_tol;

typedef struct {
  dc_dtype dtype; /* DT_F32 when 0 */
  int rank;
  int64_t dims[DC_MAX_DIMS];
} oc_shape;

typedef struct {
  const char *name;
  int64_t i;
  double f;
  int is_float;
} oc_attr;

typedef struct {
  dc_op op;
  int nin;
  oc_shape in[5];      /* group_norm, layer_norm: x only (gamma and beta follow from it); rms_norm
                        * and mod_layer_norm: every input, nin of them (a gated linear: 5) */
  oc_attr attrs[8];
  int nlist;           /* permute's perm */
  int64_t list[DC_MAX_DIMS];
  oc_shape out;        /* reshape, cast, and moves of a non-f32 dtype: the type stated; rank 0: inferred */
  oc_data data;
  double scale;        /* OC_NORMAL: the scale (0 = 1); OC_OFFSET/OC_BIG_MEAN: the mean */
  int inplace;         /* also run with the output written over input `alias` */
  int alias;           /* 0, or a residual's input index (conv2d, linear; a gated linear's mod follows it) */
  dc_dtype wdtype;     /* conv2d, linear: the weight (input 1) stored in it (0: f32) */
  int wbias;           /* and the bias (input 2) too */
  dc_dtype act;        /* 0, or bf16/f16 activations: the module's activation dtype (ir.h), the
                        * output and every float input stored in it (gammas and weights too, as
                        * --compute-dtype bf16 stores them on cuda; wdtype still wins), the data
                        * made as for f32 and rounded to it; reference and CUDA only.  Generated
                        * from the f32 rows (oc_act_rows), never written in the tables */
  dc_layout layout;    /* 0: NCHW at rank 4, else row-major.  LAYOUT_NHWC (conv2d, group_norm,
                        * upsample): shapes are given channels first; the node and its inputs of
                        * rank >= 2 are built channels last, and the reference run also checks
                        * that the NHWC reference gives the NCHW one's bits on permuted data */
  int cuda_computes;   /* cuda: OC_CC_* precisions to run (0: f32); the tensor cores' at tol[2] */
  int cuda_sm_count;   /* cuda: the SM count the GEMM tiles are chosen for (dc_cuda_options; 0: the default) */
  int winograd;        /* llvm: OC_WINO_* (dc_llvm_set_winograd); FORCE also checks the kernel compiled was it */
  const char *cpu;     /* llvm: a diffc --cpu target of the row's own ("generic": 4 lanes); not rerun
                        * under $DIFFC_TEST_CPU */
  int where;           /* OC_* backends; 0 = all */
  int max_threads;     /* llvm: 1..max_threads (0 = 3) */
  const char *why;     /* why a row skips a backend, or what it is */
  oc_tol tol[3];       /* per backend (llvm, cuda, cuda tensor cores); all zero: oc_default_tol */
} op_case;

/* The table; *n gets its length.  Built once (some rows are generated from
 * a fixed seed: random permutes). */
const op_case *oc_table(int *n);
/* The op's tolerance on backend OC_LLVM, OC_CUDA or OC_CUDA_TC. */
oc_tol oc_default_tol(dc_op op, int backend);
/* Adds the row's node (and its inputs) to m; returns its id, or -1. */
int32_t oc_build(const op_case *c, dc_module *m);
/* The row's input data for *_with comparisons (NULL for OC_NORMAL): one
 * malloc'd buffer per input of node id; free with oc_free_inputs. */
void **oc_inputs(const op_case *c, const dc_module *m, int32_t id);
void oc_free_inputs(void **in);
/* "permute[0,2,1]/f16 [2,40,33]" and the like. */
void oc_describe(const op_case *c, char *buf, size_t cap);
/* The conv2d and linear rows (op_cases_gemm.c) into out; returns how many. */
int oc_gemm_rows(op_case *out);
/* Rows with bf16 and f16 activations, made from the table's first n rows:
 * for each computing op (and layout, stored weight, residual), its smallest
 * row that CUDA runs, once per activation dtype; returns how many. */
int oc_act_rows(const op_case *rows, int n, op_case *out, int cap);
/* The attention and blend rows (op_cases_attention.c); returns how many. */
int oc_attention_rows(op_case *out);
/* The rows' NHWC twin: with c->layout LAYOUT_NHWC, the NCHW node of the same
 * row (c->layout 0) into m; returns its id, or -1. */
int32_t oc_build_nchw(const op_case *c, dc_module *m);
/* src (elements of es bytes, dims) permuted channels last (to_last) or
 * back; malloc'd. */
void *oc_channels(const void *src, int es, int rank, const int64_t *dims, int to_last);

#endif
