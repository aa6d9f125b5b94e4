/* kgen.h — the kernel writer's kit: the LLVM handles of the module being
 * built, the current kernel's ABI values (see llvm_codegen.h), and small
 * helpers for loops, thread partitioning, loads/stores and vector math, so
 * each kernel file (k_*.c) reads as the loop nest it generates.
 *
 * Kernels are written with explicit <W x float> vectors (W = g->vw, 16 with
 * AVX-512) and llvm.fmuladd, not left to the auto-vectorizer. */
#ifndef DC_KGEN_H
#define DC_KGEN_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "llvm_codegen.h"

typedef struct dc_kgen {
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTargetMachineRef tm;
  LLVMTypeRef f32, f64, i1, i8, i32, i64, voidt, pf32, pi8, ppi8, vf32, pvf32;
  int vw; /* f32 lanes per vector */
  /* The kernel being emitted. */
  LLVMValueRef fn, bufs, tid, nthreads;
  const dc_module *m;
  const dc_node *n;
  int32_t id;
  uint64_t scratch_bytes; /* per thread; the emitter sets it if it needs scratch */
  int winograd;           /* conv2d's Winograd path: 0 off, 1 where it pays, 2 always (dc_llvm_set_winograd) */
  const char *variant;    /* set by an emitter with several algorithms: appended to the symbol (k3_conv2d_winograd) */
} dc_kgen;

/* An emitter fills g->fn's body (the builder is positioned in its entry
 * block; the caller adds `ret void` at the current position afterwards). */
typedef dc_status *(*dc_kgen_emit_fn)(dc_kgen *g);
/* NULL when op has no LLVM kernel (yet); see k_table.c. */
dc_kgen_emit_fn dc_kgen_emitter_for(dc_op op);

/* Types of the current node's output (i = 0) and inputs (i = 1..). */
const dc_type *kg_type(const dc_kgen *g, int i);

/* bufs[i] as float* (0 = output, 1.. = inputs); the scratch as float*. */
LLVMValueRef kg_buf(dc_kgen *g, int i);
LLVMValueRef kg_scratch(dc_kgen *g);

LLVMValueRef kg_i64(dc_kgen *g, int64_t v);
LLVMValueRef kg_f32(dc_kgen *g, double v);
LLVMValueRef kg_vf32(dc_kgen *g, double v); /* splat constant */

/* for (i = start; i < end; i += step) { body }:
 *   kg_loop l; kg_for(g, &l, start, end, step, "c");  ... use l.i ...  kg_end(g, &l); */
typedef struct {
  LLVMValueRef i, end, step;
  LLVMBasicBlockRef head, body, exit;
} kg_loop;
void kg_for(dc_kgen *g, kg_loop *l, LLVMValueRef start, LLVMValueRef end, int64_t step, const char *name);
void kg_end(dc_kgen *g, kg_loop *l);

/* This thread's share [lo, hi) of total work items (contiguous, balanced). */
void kg_split(dc_kgen *g, LLVMValueRef total, LLVMValueRef *lo, LLVMValueRef *hi);

LLVMValueRef kg_gep(dc_kgen *g, LLVMValueRef pf32, LLVMValueRef idx);
LLVMValueRef kg_load(dc_kgen *g, LLVMValueRef pf32);
void kg_store(dc_kgen *g, LLVMValueRef v, LLVMValueRef pf32);
/* W floats at p (no alignment assumed). */
LLVMValueRef kg_vload(dc_kgen *g, LLVMValueRef pf32);
void kg_vstore(dc_kgen *g, LLVMValueRef v, LLVMValueRef pf32);
LLVMValueRef kg_splat(dc_kgen *g, LLVMValueRef scalar);
/* a*b+c through llvm.fmuladd (scalar or vector, by a's type). */
LLVMValueRef kg_fma(dc_kgen *g, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c);
/* A call to an overloaded intrinsic such as "llvm.exp" or "llvm.maxnum". */
LLVMValueRef kg_intrinsic(dc_kgen *g, const char *name, LLVMTypeRef overload, LLVMValueRef *args, int nargs);
/* Sum of a vector's lanes (any float vector type), by halving shuffles (fixed order). */
LLVMValueRef kg_hsum(dc_kgen *g, LLVMValueRef v);

/* ---- typed buffers, constants, masked tails, variables, branches ---- */
/* bufs[i] as a pointer to elements of type t (i8, i16, i32, f32, ...). */
LLVMValueRef kg_buf_as(dc_kgen *g, int i, LLVMTypeRef t);
/* &p[idx] where p points to elements of type t. */
LLVMValueRef kg_gep_t(dc_kgen *g, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef idx);
/* A constant of scalar or vector type t with every lane v. */
LLVMValueRef kg_fconst(LLVMTypeRef t, double v);
LLVMValueRef kg_iconst(LLVMTypeRef t, int64_t v);
/* The first n lanes (n known when generating) of a vector of type vt at p,
 * a pointer to its elements: a plain unaligned load when n is every lane,
 * else a masked load whose other lanes come from fill (NULL: zeros), so a
 * tail never reads past the end of a buffer. */
LLVMValueRef kg_vload_n(dc_kgen *g, LLVMTypeRef vt, LLVMValueRef p, int n, LLVMValueRef fill);
void kg_vstore_n(dc_kgen *g, LLVMValueRef v, LLVMValueRef p, int n);
/* A local variable of type t: an alloca in the entry block, which O3 turns
 * into registers (how loop-carried accumulators are written). */
LLVMValueRef kg_var(dc_kgen *g, LLVMTypeRef t, const char *name);
/* if (cond) { ... }:  kg_cond c; kg_if(g, &c, cond); ...; kg_endif(g, &c); */
typedef struct {
  LLVMBasicBlockRef then, done;
} kg_cond;
void kg_if(dc_kgen *g, kg_cond *c, LLVMValueRef cond);
void kg_endif(dc_kgen *g, kg_cond *c);

/* Masked and gathered <W x float> access, i32 lane vectors (defined in
 * k_gemm.c, whose packers use them most). */
LLVMValueRef gk_i32(dc_kgen *g, int64_t v);
LLVMValueRef gk_iota(dc_kgen *g);                    /* <W x i32> 0..W-1 */
LLVMValueRef gk_isplat(dc_kgen *g, LLVMValueRef v);  /* i32 or i64 scalar -> <W x i32> */
LLVMValueRef gk_lanes_below(dc_kgen *g, LLVMValueRef first, LLVMValueRef end); /* first+lane < end */
LLVMValueRef gk_mload(dc_kgen *g, LLVMValueRef pf32, LLVMValueRef mask);       /* zero where masked off */
void gk_mstore(dc_kgen *g, LLVMValueRef v, LLVMValueRef pf32, LLVMValueRef mask);
LLVMValueRef gk_gather(dc_kgen *g, LLVMValueRef base, LLVMValueRef idx, LLVMValueRef mask);
LLVMValueRef gk_min(dc_kgen *g, LLVMValueRef a, LLVMValueRef b);               /* i64 */
/* A call to intrinsic name overloaded on tys[0..ntys). */
LLVMValueRef gk_call_intr(dc_kgen *g, const char *name, LLVMTypeRef *tys, int ntys, LLVMValueRef *args, int nargs);

/* Math on f32 scalars or vectors, for any kernel's epilogue (defined in
 * k_elementwise.c):
 *   kg_expf: e^x within about 1 ulp, subnormal results included, inf above
 *            88.72, NaN kept (a polynomial, no libm call);
 *   kg_silu: x / (1 + kg_expf(-x)), the reference's formula (kg_quick_gelu
 *            below likewise);
 *   kg_gelu: exact (erf) gelu x·Φ(x), evaluated in double like the
 *            reference and rounded once: within one ulp of it (every float
 *            >= -5 checked), nearly always bit-exact; about 3× the cost of
 *            kg_silu. */
LLVMValueRef kg_expf(dc_kgen *g, LLVMValueRef x);
LLVMValueRef kg_silu(dc_kgen *g, LLVMValueRef x);
LLVMValueRef kg_gelu(dc_kgen *g, LLVMValueRef x);
/* kg_quick_gelu: x · 1/(1 + kg_expf(-(1.702·x))), the reference's formula
 * with the products rounded as it rounds them. */
LLVMValueRef kg_quick_gelu(dc_kgen *g, LLVMValueRef x);
/* kg_gelu_tanh: gelu(approximate="tanh") as x·σ(2t) in double, rounded
 * once: within one ulp of the reference from -5 up (every 13th float in
 * [-5, 40] checked), more accurate below; NaN at -inf as the reference;
 * a little cheaper than kg_gelu. */
LLVMValueRef kg_gelu_tanh(dc_kgen *g, LLVMValueRef x);

#endif
