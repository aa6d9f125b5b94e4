/* k_elementwise.c — kernels for unary elementwise ops: each thread takes a
 * contiguous share of the elements, a vector loop over W lanes and a scalar
 * tail.  silu(x) = x / (1 + exp(-x)), the reference kernel's formula. */
#include "kgen.h"

static LLVMValueRef silu(dc_kgen *g, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef one = LLVMGetTypeKind(t) == LLVMVectorTypeKind ? kg_vf32(g, 1.0) : kg_f32(g, 1.0);
  LLVMValueRef negx = LLVMBuildFNeg(g->b, x, "");
  LLVMValueRef e = kg_intrinsic(g, "llvm.exp", t, &negx, 1);
  return LLVMBuildFDiv(g->b, x, LLVMBuildFAdd(g->b, one, e, ""), "silu");
}

typedef LLVMValueRef (*unary_fn)(dc_kgen *g, LLVMValueRef x);

static dc_status *unary(dc_kgen *g, unary_fn f) {
  int64_t n = (int64_t)dc_type_numel(kg_type(g, 0));
  LLVMValueRef out = kg_buf(g, 0), in = kg_buf(g, 1), lo, hi;
  /* Split in whole vectors so only the last thread has a tail. */
  int64_t nvec = n / g->vw;
  kg_split(g, kg_i64(g, nvec), &lo, &hi);
  kg_loop l;
  kg_for(g, &l, lo, hi, 1, "v");
  LLVMValueRef off = LLVMBuildNSWMul(g->b, l.i, kg_i64(g, g->vw), "");
  kg_vstore(g, f(g, kg_vload(g, kg_gep(g, in, off))), kg_gep(g, out, off));
  kg_end(g, &l);
  if (n % g->vw) {
    LLVMValueRef last = LLVMBuildICmp(g->b, LLVMIntEQ, g->tid, LLVMBuildNSWSub(g->b, g->nthreads, kg_i64(g, 1), ""), "");
    LLVMBasicBlockRef tail = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "tail");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "done");
    LLVMBuildCondBr(g->b, last, tail, done);
    LLVMPositionBuilderAtEnd(g->b, tail);
    kg_loop t;
    kg_for(g, &t, kg_i64(g, nvec * g->vw), kg_i64(g, n), 1, "t");
    kg_store(g, f(g, kg_load(g, kg_gep(g, in, t.i))), kg_gep(g, out, t.i));
    kg_end(g, &t);
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, done);
  }
  return NULL;
}

dc_status *dc_k_silu(dc_kgen *g) { return unary(g, silu); }
