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
/* Sum of a vector's lanes, by halving shuffles (fixed order). */
LLVMValueRef kg_hsum(dc_kgen *g, LLVMValueRef v);

#endif
