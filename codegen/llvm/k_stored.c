/* k_stored.c — reading weights stored in another dtype (layerwise casting,
 * pass cast-weights) as f32 inside the kernel that uses them: bf16 is a
 * shift, f16 a few integer operations and selects (no F16C dependence, no
 * runtime library call), fp8 a lookup in a 256-entry table built from the
 * reference decoders, so every path decodes exactly as the reference does. */
#include "k_gemm.h"

#include "support/dtype_convert.h"

LLVMTypeRef kg_elem_type(dc_kgen *g, dc_dtype t) {
  switch (t) {
    case DT_F16:
    case DT_BF16: return LLVMInt16TypeInContext(g->ctx);
    case DT_F8_E4M3:
    case DT_F8_E5M2: return g->i8;
    default: return g->f32;
  }
}

LLVMValueRef kg_buf_typed(dc_kgen *g, int i, dc_dtype t) { return kg_buf_as(g, i, kg_elem_type(g, t)); }

/* The decode table of an fp8 dtype, one per module. */
static LLVMValueRef f8_table(dc_kgen *g, dc_dtype t) {
  const char *name = t == DT_F8_E4M3 ? "dc_f8e4m3_table" : "dc_f8e5m2_table";
  LLVMValueRef gv = LLVMGetNamedGlobal(g->mod, name);
  if (!gv) {
    LLVMValueRef vals[256];
    for (int i = 0; i < 256; i++)
      vals[i] = LLVMConstReal(g->f32, t == DT_F8_E4M3 ? dc_f8e4m3_to_f32((uint8_t)i) : dc_f8e5m2_to_f32((uint8_t)i));
    LLVMTypeRef at = LLVMArrayType(g->f32, 256);
    gv = LLVMAddGlobal(g->mod, at, name);
    LLVMSetInitializer(gv, LLVMConstArray(g->f32, vals, 256));
    LLVMSetGlobalConstant(gv, 1);
    LLVMSetLinkage(gv, LLVMPrivateLinkage);
  }
  return LLVMBuildBitCast(g->b, gv, g->pf32, "f8tab");
}

/* f16 bits (i32 or <W x i32>, zero-extended) to f32, exactly. */
static LLVMValueRef f16_bits_to_f32(dc_kgen *g, LLVMValueRef h, LLVMTypeRef it, LLVMTypeRef ft) {
  LLVMBuilderRef b = g->b;
#define C(v) (LLVMGetTypeKind(it) == LLVMVectorTypeKind ? gk_isplat(g, gk_i32(g, (int32_t)(v))) : gk_i32(g, (int32_t)(v)))
  LLVMValueRef sign = LLVMBuildShl(b, LLVMBuildAnd(b, h, C(0x8000), ""), C(16), "");
  LLVMValueRef e = LLVMBuildAnd(b, LLVMBuildLShr(b, h, C(10), ""), C(31), "");
  LLVMValueRef man = LLVMBuildAnd(b, h, C(0x3ff), "");
  LLVMValueRef normal = LLVMBuildOr(b, LLVMBuildShl(b, LLVMBuildAdd(b, e, C(112), ""), C(23), ""),
                                    LLVMBuildShl(b, man, C(13), ""), "");
  LLVMValueRef special = LLVMBuildOr(b, C(0x7f800000), LLVMBuildShl(b, man, C(13), ""), "");
  LLVMValueRef sub = LLVMBuildBitCast(
      b, LLVMBuildFMul(b, LLVMBuildUIToFP(b, man, ft, ""),
                       LLVMGetTypeKind(ft) == LLVMVectorTypeKind ? kg_vf32(g, 5.9604644775390625e-8) : kg_f32(g, 5.9604644775390625e-8), ""),
      it, "");
  LLVMValueRef bits = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, e, C(31), ""), special, normal, "");
  bits = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, e, C(0), ""), sub, bits, "");
#undef C
  return LLVMBuildBitCast(b, LLVMBuildOr(b, bits, sign, ""), ft, "f16tof32");
}

LLVMValueRef kg_load_f32_from(dc_kgen *g, dc_dtype t, LLVMValueRef p, LLVMValueRef idx) {
  if (t == DT_F32) return kg_load(g, kg_gep(g, p, idx));
  LLVMTypeRef et = kg_elem_type(g, t);
  LLVMValueRef raw = LLVMBuildLoad2(g->b, et, kg_gep_t(g, et, p, idx), "");
  if (t == DT_F8_E4M3 || t == DT_F8_E5M2)
    return kg_load(g, kg_gep(g, f8_table(g, t), LLVMBuildZExt(g->b, raw, g->i64, "")));
  LLVMValueRef w = LLVMBuildZExt(g->b, raw, g->i32, "");
  if (t == DT_BF16) return LLVMBuildBitCast(g->b, LLVMBuildShl(g->b, w, gk_i32(g, 16), ""), g->f32, "bf16");
  return f16_bits_to_f32(g, w, g->i32, g->f32);
}

LLVMValueRef kg_gather_f32_from(dc_kgen *g, dc_dtype t, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef mask) {
  if (t == DT_F32) return gk_gather(g, p, idx, mask);
  LLVMTypeRef et = kg_elem_type(g, t), vet = LLVMVectorType(et, (unsigned)g->vw);
  LLVMTypeRef vi32 = LLVMVectorType(g->i32, (unsigned)g->vw);
  LLVMValueRef ptrs = LLVMBuildGEP2(g->b, et, p, &idx, 1, "");
  LLVMTypeRef tys[2] = {vet, LLVMVectorType(LLVMPointerType(et, 0), (unsigned)g->vw)};
  LLVMValueRef args[4] = {ptrs, gk_i32(g, t == DT_F8_E4M3 || t == DT_F8_E5M2 ? 1 : 2), mask, LLVMConstNull(vet)};
  LLVMValueRef raw = gk_call_intr(g, "llvm.masked.gather", tys, 2, args, 4);
  LLVMValueRef w = LLVMBuildZExt(g->b, raw, vi32, "");
  if (t == DT_F8_E4M3 || t == DT_F8_E5M2) return gk_gather(g, f8_table(g, t), w, mask);
  if (t == DT_BF16) return LLVMBuildBitCast(g->b, LLVMBuildShl(g->b, w, gk_isplat(g, gk_i32(g, 16)), ""), g->vf32, "bf16");
  return f16_bits_to_f32(g, w, vi32, g->vf32);
}
