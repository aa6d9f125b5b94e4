/* kgen.c — one LLVM module per plan: target machine, per-node kernel
 * functions with the common ABI, the O3 pipeline, object emission; and the
 * helpers of kgen.h. */
#include "kgen.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h> /* LLVM_VERSION_STRING */
#include <string.h>

struct dc_llvm {
  dc_kgen g;
  char *cpu_attr;
  char *features_attr;
  char *tune_attr; /* NULL: tune for target-cpu */
  int prefer512;
};

static dc_status *llvm_error(LLVMErrorRef e, const char *what) {
  char *msg = LLVMGetErrorMessage(e);
  dc_status *st = dc_error(DC_ERR_INTERNAL, "LLVM: %s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return st;
}

static void init_types(dc_kgen *g) {
  g->f32 = LLVMFloatTypeInContext(g->ctx);
  g->f64 = LLVMDoubleTypeInContext(g->ctx);
  g->i1 = LLVMInt1TypeInContext(g->ctx);
  g->i8 = LLVMInt8TypeInContext(g->ctx);
  g->i32 = LLVMInt32TypeInContext(g->ctx);
  g->i64 = LLVMInt64TypeInContext(g->ctx);
  g->voidt = LLVMVoidTypeInContext(g->ctx);
  g->pf32 = LLVMPointerType(g->f32, 0);
  g->pi8 = LLVMPointerType(g->i8, 0);
  g->ppi8 = LLVMPointerType(g->pi8, 0);
  g->vf32 = LLVMVectorType(g->f32, (unsigned)g->vw);
  g->pvf32 = LLVMPointerType(g->vf32, 0);
}

dc_status *dc_llvm_create(const dc_cpu_target *t, dc_llvm **out) {
  *out = NULL;
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMTargetRef target;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(t->triple, &target, &err)) {
    dc_status *st = dc_error(DC_ERR_UNSUPPORTED, "LLVM has no target for %s: %s", t->triple, err);
    LLVMDisposeMessage(err);
    return st;
  }
  dc_llvm *l = dc_calloc(1, sizeof *l);
  if (!l) return dc_nomem("creating the LLVM module");
  dc_kgen *g = &l->g;
  g->vw = dc_cpu_target_vector_width(t);
  g->winograd = 1;
  l->prefer512 = g->vw == 16;
  l->features_attr = dc_strdup(t->features);
  l->cpu_attr = dc_strdup(t->cpu);
  l->tune_attr = t->tune ? dc_strdup(t->tune) : NULL;
  /* The large code model: diffrun links the object with ORC's RuntimeDyld,
   * whose section allocations can land more than 2 GiB apart; with the
   * small model a RIP-relative reference to a constant pool would then be
   * silently truncated (seen as a crash in about half of the runs). */
  g->tm = LLVMCreateTargetMachine(target, t->triple, t->cpu, t->features, LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                  LLVMCodeModelLarge);
  g->ctx = LLVMContextCreate();
  g->mod = LLVMModuleCreateWithNameInContext("diffc_kernels", g->ctx);
  g->b = LLVMCreateBuilderInContext(g->ctx);
  LLVMSetTarget(g->mod, t->triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(g->tm);
  LLVMSetModuleDataLayout(g->mod, dl);
  LLVMDisposeTargetData(dl);
  init_types(g);
  *out = l;
  return l->features_attr && l->cpu_attr && (l->tune_attr || !t->tune) ? NULL : dc_nomem("creating the LLVM module");
}

void dc_llvm_set_winograd(dc_llvm *l, int on) { l->g.winograd = on; }

void dc_llvm_destroy(dc_llvm *l) {
  if (!l) return;
  if (l->g.b) LLVMDisposeBuilder(l->g.b);
  if (l->g.mod) LLVMDisposeModule(l->g.mod);
  if (l->g.ctx) LLVMContextDispose(l->g.ctx);
  if (l->g.tm) LLVMDisposeTargetMachine(l->g.tm);
  dc_free(l->features_attr);
  dc_free(l->cpu_attr);
  dc_free(l->tune_attr);
  dc_free(l);
}

static void add_string_attr(dc_kgen *g, const char *k, const char *v) {
  LLVMAddAttributeAtIndex(g->fn, LLVMAttributeFunctionIndex,
                          LLVMCreateStringAttribute(g->ctx, k, (unsigned)strlen(k), v, (unsigned)strlen(v)));
}

static void add_enum_attr(dc_kgen *g, unsigned idx, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(g->fn, idx, LLVMCreateEnumAttribute(g->ctx, kind, 0));
}

static void begin_function(dc_llvm *l, const char *symbol) {
  dc_kgen *g = &l->g;
  LLVMTypeRef params[3] = {g->ppi8, g->i64, g->i64};
  g->fn = LLVMAddFunction(g->mod, symbol, LLVMFunctionType(g->voidt, params, 3, 0));
  add_string_attr(g, "target-cpu", l->cpu_attr);
  add_string_attr(g, "target-features", l->features_attr);
  if (l->tune_attr) add_string_attr(g, "tune-cpu", l->tune_attr);
  if (l->prefer512) add_string_attr(g, "prefer-vector-width", "512");
  add_enum_attr(g, LLVMAttributeFunctionIndex, "nounwind");
  add_enum_attr(g, 1, "noalias");
  g->bufs = LLVMGetParam(g->fn, 0);
  g->tid = LLVMGetParam(g->fn, 1);
  g->nthreads = LLVMGetParam(g->fn, 2);
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, g->fn, "entry"));
}

dc_status *dc_llvm_emit_node(dc_llvm *l, const dc_module *m, int32_t id, dc_cpu_kernel *out, int *has_kernel) {
  dc_kgen *g = &l->g;
  const dc_node *n = &m->nodes[id];
  memset(out, 0, sizeof *out);
  dc_kgen_emit_fn emit = dc_kgen_emitter_for(n->op);
  *has_kernel = emit != NULL;
  if (!emit) return NULL;
  out->symbol = dc_asprintf("k%d_%s", id, dc_op_get(n->op)->name);
  if (!out->symbol) return dc_nomem("emitting a kernel");
  g->m = m;
  g->n = n;
  g->id = id;
  g->scratch_bytes = 0;
  g->variant = NULL;
  begin_function(l, out->symbol);
  dc_status *st = emit(g);
  if (!st && g->variant) { /* the algorithm shows in profiles and disassembly */
    char *named = dc_asprintf("%s_%s", out->symbol, g->variant);
    if (!named) st = dc_nomem("emitting a kernel");
    else dc_free(out->symbol), out->symbol = named, LLVMSetValueName2(g->fn, named, strlen(named));
  }
  if (st) {
    dc_free(out->symbol);
    out->symbol = NULL;
    return dc_status_annotate(st, "generating the kernel of %%%d (%s)", id, n->scope ? n->scope : "");
  }
  LLVMBuildRetVoid(g->b);
  out->node = id;
  out->scratch_bytes = (g->scratch_bytes + 63) & ~(uint64_t)63;
  return NULL;
}

/* What dc_llvm_finish does to a module, for the cache key: change it when
 * the pipeline or its options change. */
#define PIPELINE "default<O3> loop-vectorize slp-vectorize loop-unroll; object file, large code model, PIC, O3 codegen"

dc_status *dc_llvm_kernel_key(dc_llvm *l, dc_cpu_kernel *k, uint64_t *key) {
  LLVMValueRef fn = LLVMGetNamedFunction(l->g.mod, k->symbol);
  if (!fn) return dc_error(DC_ERR_INTERNAL, "kernel %s is not in its module", k->symbol);
  /* "k12_conv2d_winograd" -> "dck_<key>_conv2d_winograd": what the kernel is
   * stays readable in profiles and disassembly, the node number goes */
  const char *what = strchr(k->symbol, '_');
  what = what ? what : "";
  LLVMSetValueName2(fn, "dc_kernel", 9); /* the plan's node number is no part of the code */
  char *ir = LLVMPrintModuleToString(l->g.mod);
  dc_buf b;
  dc_buf_init(&b);
  /* The object defines the symbol named below: a change to how it is named
   * changes this string, so that no entry with the old name is found. */
  dc_buf_str(&b, "diffc CPU kernel cache key 2: dck_<key><what>");
  dc_buf_str(&b, what);
  dc_buf_str(&b, ir);
  dc_buf_str(&b, PIPELINE);
  dc_buf_str(&b, "LLVM " LLVM_VERSION_STRING);
  LLVMDisposeMessage(ir);
  char *triple = LLVMGetTargetMachineTriple(l->g.tm), *cpu = LLVMGetTargetMachineCPU(l->g.tm),
       *features = LLVMGetTargetMachineFeatureString(l->g.tm);
  dc_buf_str(&b, triple);
  dc_buf_str(&b, cpu);
  dc_buf_str(&b, features);
  LLVMDisposeMessage(triple), LLVMDisposeMessage(cpu), LLVMDisposeMessage(features);
  dc_status *st = dc_buf_status(&b, "hashing a kernel");
  if (!st) *key = dc_hash64(b.data, b.len);
  dc_buf_deinit(&b);
  char *name = st ? NULL : dc_asprintf("dck_%016llx%s", (unsigned long long)*key, what);
  if (!st && !name) st = dc_nomem("naming a kernel");
  if (st) return st;
  LLVMSetValueName2(fn, name, strlen(name));
  dc_free(k->symbol);
  k->symbol = name;
  return NULL;
}

dc_status *dc_llvm_finish(dc_llvm *l, dc_buf *obj) {
  dc_kgen *g = &l->g;
  char *err = NULL;
  if (LLVMVerifyModule(g->mod, LLVMReturnStatusAction, &err)) {
    dc_status *st = dc_error(DC_ERR_INTERNAL, "generated LLVM IR is invalid: %.2000s", err);
    LLVMDisposeMessage(err);
    return st;
  }
  LLVMDisposeMessage(err);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(opts, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
  LLVMPassBuilderOptionsSetLoopUnrolling(opts, 1);
  LLVMErrorRef e = LLVMRunPasses(g->mod, "default<O3>", g->tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  if (e) return llvm_error(e, "optimizing the kernels");
  LLVMMemoryBufferRef mb;
  if (LLVMTargetMachineEmitToMemoryBuffer(g->tm, g->mod, LLVMObjectFile, &err, &mb)) {
    dc_status *st = dc_error(DC_ERR_INTERNAL, "LLVM could not emit object code: %s", err);
    LLVMDisposeMessage(err);
    return st;
  }
  dc_buf_append(obj, LLVMGetBufferStart(mb), LLVMGetBufferSize(mb));
  LLVMDisposeMemoryBuffer(mb);
  return dc_buf_status(obj, "storing object code");
}

dc_status *dc_llvm_asm_text(dc_llvm *l, char **out) {
  *out = NULL;
  char *err = NULL;
  LLVMMemoryBufferRef mb;
  if (LLVMTargetMachineEmitToMemoryBuffer(l->g.tm, l->g.mod, LLVMAssemblyFile, &err, &mb)) {
    dc_status *st = dc_error(DC_ERR_INTERNAL, "LLVM could not emit assembly: %s", err);
    LLVMDisposeMessage(err);
    return st;
  }
  size_t n = LLVMGetBufferSize(mb);
  *out = dc_malloc(n + 1);
  if (*out) memcpy(*out, LLVMGetBufferStart(mb), n), (*out)[n] = 0;
  LLVMDisposeMemoryBuffer(mb);
  return *out ? NULL : dc_nomem("reading the kernels' assembly");
}

char *dc_llvm_ir_text(dc_llvm *l) {
  char *s = LLVMPrintModuleToString(l->g.mod);
  char *copy = dc_strdup(s);
  LLVMDisposeMessage(s);
  return copy;
}

/* ---- helpers ---- */
/* The vector helpers (kgen.h's gk_*): every emitter's, so that no kernel
 * file needs another's (k_stored.c and k_gemm.c used to call each other). */
static LLVMTypeRef vi32t(dc_kgen *g) { return LLVMVectorType(g->i32, (unsigned)g->vw); }

LLVMValueRef gk_i32(dc_kgen *g, int64_t v) { return LLVMConstInt(g->i32, (unsigned long long)v, 1); }

LLVMValueRef gk_iota(dc_kgen *g) {
  LLVMValueRef e[16];
  for (int i = 0; i < g->vw; i++) e[i] = gk_i32(g, i);
  return LLVMConstVector(e, (unsigned)g->vw);
}

LLVMValueRef gk_isplat(dc_kgen *g, LLVMValueRef v) {
  if (LLVMTypeOf(v) != g->i32) v = LLVMBuildTrunc(g->b, v, g->i32, "");
  LLVMValueRef undef = LLVMGetUndef(vi32t(g));
  LLVMValueRef one = LLVMBuildInsertElement(g->b, undef, v, gk_i32(g, 0), "");
  return LLVMBuildShuffleVector(g->b, one, undef, LLVMConstNull(vi32t(g)), "");
}

LLVMValueRef gk_lanes_below(dc_kgen *g, LLVMValueRef first, LLVMValueRef end) {
  LLVMValueRef lanes = LLVMBuildAdd(g->b, gk_isplat(g, first), gk_iota(g), "");
  return LLVMBuildICmp(g->b, LLVMIntSLT, lanes, gk_isplat(g, end), "lanes");
}

LLVMValueRef gk_call_intr(dc_kgen *g, const char *name, LLVMTypeRef *tys, int ntys, LLVMValueRef *args,
                              int nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, tys, (size_t)ntys);
  LLVMTypeRef fty = LLVMIntrinsicGetType(g->ctx, id, tys, (size_t)ntys);
  return LLVMBuildCall2(g->b, fty, fn, args, (unsigned)nargs, "");
}

LLVMValueRef gk_mload(dc_kgen *g, LLVMValueRef p, LLVMValueRef mask) {
  LLVMTypeRef tys[2] = {g->vf32, g->pvf32};
  LLVMValueRef args[4] = {LLVMBuildBitCast(g->b, p, g->pvf32, ""), gk_i32(g, 4), mask, LLVMConstNull(g->vf32)};
  return gk_call_intr(g, "llvm.masked.load", tys, 2, args, 4);
}

void gk_mstore(dc_kgen *g, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask) {
  LLVMTypeRef tys[2] = {g->vf32, g->pvf32};
  LLVMValueRef args[4] = {v, LLVMBuildBitCast(g->b, p, g->pvf32, ""), gk_i32(g, 4), mask};
  gk_call_intr(g, "llvm.masked.store", tys, 2, args, 4);
}

LLVMValueRef gk_gather(dc_kgen *g, LLVMValueRef base, LLVMValueRef idx, LLVMValueRef mask) {
  LLVMValueRef ptrs = LLVMBuildGEP2(g->b, g->f32, base, &idx, 1, "");
  LLVMTypeRef tys[2] = {g->vf32, LLVMVectorType(g->pf32, (unsigned)g->vw)};
  LLVMValueRef args[4] = {ptrs, gk_i32(g, 4), mask, LLVMConstNull(g->vf32)};
  return gk_call_intr(g, "llvm.masked.gather", tys, 2, args, 4);
}

LLVMValueRef gk_min(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, a, b, ""), a, b, "min");
}

const dc_type *kg_type(const dc_kgen *g, int i) {
  return i == 0 ? &g->n->type : &g->m->nodes[g->n->inputs[i - 1]].type;
}

LLVMValueRef kg_i64(dc_kgen *g, int64_t v) { return LLVMConstInt(g->i64, (unsigned long long)v, 1); }
LLVMValueRef kg_f32(dc_kgen *g, double v) { return LLVMConstReal(g->f32, v); }
LLVMValueRef kg_vf32(dc_kgen *g, double v) { return kg_splat(g, kg_f32(g, v)); }

LLVMValueRef kg_buf(dc_kgen *g, int i) {
  LLVMValueRef idx = kg_i64(g, i);
  LLVMValueRef slot = LLVMBuildInBoundsGEP2(g->b, g->pi8, g->bufs, &idx, 1, "bufslot");
  LLVMValueRef p = LLVMBuildLoad2(g->b, g->pi8, slot, "buf");
  return LLVMBuildBitCast(g->b, p, g->pf32, "bufp");
}

LLVMValueRef kg_scratch(dc_kgen *g) { return kg_buf(g, g->n->ninputs + 1); }

void kg_for(dc_kgen *g, kg_loop *l, LLVMValueRef start, LLVMValueRef end, int64_t step, const char *name) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l->head = LLVMAppendBasicBlockInContext(g->ctx, g->fn, name);
  l->body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, name);
  l->exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, name);
  l->end = end;
  l->step = kg_i64(g, step);
  LLVMBuildBr(g->b, l->head);
  LLVMPositionBuilderAtEnd(g->b, l->head);
  l->i = LLVMBuildPhi(g->b, g->i64, name);
  LLVMAddIncoming(l->i, &start, &pre, 1);
  LLVMValueRef more = LLVMBuildICmp(g->b, LLVMIntSLT, l->i, end, "more");
  LLVMBuildCondBr(g->b, more, l->body, l->exit);
  LLVMPositionBuilderAtEnd(g->b, l->body);
}

void kg_end(dc_kgen *g, kg_loop *l) {
  LLVMValueRef next = LLVMBuildNSWAdd(g->b, l->i, l->step, "next");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMBuildBr(g->b, l->head);
  LLVMAddIncoming(l->i, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(g->b, l->exit);
}

void kg_split(dc_kgen *g, LLVMValueRef total, LLVMValueRef *lo, LLVMValueRef *hi) {
  LLVMValueRef t1 = LLVMBuildNSWAdd(g->b, g->tid, kg_i64(g, 1), "tid1");
  *lo = LLVMBuildSDiv(g->b, LLVMBuildNSWMul(g->b, total, g->tid, ""), g->nthreads, "lo");
  *hi = LLVMBuildSDiv(g->b, LLVMBuildNSWMul(g->b, total, t1, ""), g->nthreads, "hi");
}

LLVMValueRef kg_gep(dc_kgen *g, LLVMValueRef p, LLVMValueRef idx) {
  return LLVMBuildInBoundsGEP2(g->b, g->f32, p, &idx, 1, "");
}
LLVMValueRef kg_load(dc_kgen *g, LLVMValueRef p) { return LLVMBuildLoad2(g->b, g->f32, p, ""); }
void kg_store(dc_kgen *g, LLVMValueRef v, LLVMValueRef p) { LLVMBuildStore(g->b, v, p); }

LLVMValueRef kg_vload(dc_kgen *g, LLVMValueRef p) {
  LLVMValueRef vp = LLVMBuildBitCast(g->b, p, g->pvf32, "");
  LLVMValueRef v = LLVMBuildLoad2(g->b, g->vf32, vp, "");
  LLVMSetAlignment(v, 4);
  return v;
}

void kg_vstore(dc_kgen *g, LLVMValueRef v, LLVMValueRef p) {
  LLVMValueRef vp = LLVMBuildBitCast(g->b, p, g->pvf32, "");
  LLVMValueRef s = LLVMBuildStore(g->b, v, vp);
  LLVMSetAlignment(s, 4);
}

LLVMValueRef kg_splat(dc_kgen *g, LLVMValueRef scalar) {
  LLVMValueRef undef = LLVMGetUndef(g->vf32);
  LLVMValueRef one = LLVMBuildInsertElement(g->b, undef, scalar, kg_i64(g, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(g->i32, (unsigned)g->vw));
  return LLVMBuildShuffleVector(g->b, one, undef, zeros, "splat");
}

LLVMValueRef kg_intrinsic(dc_kgen *g, const char *name, LLVMTypeRef overload, LLVMValueRef *args, int nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, &overload, 1);
  LLVMTypeRef fty = LLVMIntrinsicGetType(g->ctx, id, &overload, 1);
  return LLVMBuildCall2(g->b, fty, fn, args, (unsigned)nargs, "");
}

LLVMValueRef kg_fma(dc_kgen *g, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return kg_intrinsic(g, "llvm.fmuladd", LLVMTypeOf(a), args, 3);
}

LLVMValueRef kg_hsum(dc_kgen *g, LLVMValueRef v) {
  LLVMTypeRef vt = LLVMTypeOf(v);
  int lanes = (int)LLVMGetVectorSize(vt);
  for (int half = lanes / 2; half >= 1; half /= 2) {
    LLVMValueRef mask[64];
    for (int i = 0; i < lanes; i++) mask[i] = LLVMConstInt(g->i32, (unsigned long long)((i + half) % lanes), 0);
    LLVMValueRef sh = LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(vt), LLVMConstVector(mask, (unsigned)lanes), "");
    v = LLVMBuildFAdd(g->b, v, sh, "");
  }
  return LLVMBuildExtractElement(g->b, v, kg_i64(g, 0), "");
}

/* ---- typed buffers, constants, masked tails, variables, branches ---- */
LLVMValueRef kg_buf_as(dc_kgen *g, int i, LLVMTypeRef t) {
  LLVMValueRef idx = kg_i64(g, i);
  LLVMValueRef slot = LLVMBuildInBoundsGEP2(g->b, g->pi8, g->bufs, &idx, 1, "bufslot");
  LLVMValueRef p = LLVMBuildLoad2(g->b, g->pi8, slot, "buf");
  return LLVMBuildBitCast(g->b, p, LLVMPointerType(t, 0), "bufp");
}

LLVMValueRef kg_gep_t(dc_kgen *g, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef idx) {
  return LLVMBuildInBoundsGEP2(g->b, t, p, &idx, 1, "");
}

static LLVMValueRef splat_const(LLVMTypeRef t, LLVMValueRef lane) {
  if (LLVMGetTypeKind(t) != LLVMVectorTypeKind) return lane;
  unsigned n = LLVMGetVectorSize(t);
  LLVMValueRef lanes[64];
  for (unsigned i = 0; i < n && i < 64; i++) lanes[i] = lane;
  return LLVMConstVector(lanes, n);
}

LLVMValueRef kg_fconst(LLVMTypeRef t, double v) {
  LLVMTypeRef et = LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
  return splat_const(t, LLVMConstReal(et, v));
}

LLVMValueRef kg_iconst(LLVMTypeRef t, int64_t v) {
  LLVMTypeRef et = LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
  return splat_const(t, LLVMConstInt(et, (unsigned long long)v, 1));
}

/* Tails are assembled lane by lane: never a load past the last element, and
 * tails are short, so the scalar accesses cost little. */
LLVMValueRef kg_vload_n(dc_kgen *g, LLVMTypeRef vt, LLVMValueRef p, int n, LLVMValueRef fill) {
  LLVMTypeRef et = LLVMGetElementType(vt);
  int lanes = (int)LLVMGetVectorSize(vt);
  if (n >= lanes) {
    LLVMValueRef v = LLVMBuildLoad2(g->b, vt, LLVMBuildBitCast(g->b, p, LLVMPointerType(vt, 0), ""), "");
    LLVMSetAlignment(v, (unsigned)(LLVMGetTypeKind(et) == LLVMDoubleTypeKind ? 8 : 1));
    return v;
  }
  LLVMValueRef v = fill ? fill : LLVMConstNull(vt);
  for (int i = 0; i < n; i++) {
    LLVMValueRef x = LLVMBuildLoad2(g->b, et, kg_gep_t(g, et, p, kg_i64(g, i)), "");
    v = LLVMBuildInsertElement(g->b, v, x, kg_i64(g, i), "");
  }
  return v;
}

void kg_vstore_n(dc_kgen *g, LLVMValueRef v, LLVMValueRef p, int n) {
  LLVMTypeRef vt = LLVMTypeOf(v), et = LLVMGetElementType(vt);
  int lanes = (int)LLVMGetVectorSize(vt);
  if (n >= lanes) {
    LLVMValueRef s = LLVMBuildStore(g->b, v, LLVMBuildBitCast(g->b, p, LLVMPointerType(vt, 0), ""));
    LLVMSetAlignment(s, 1);
    return;
  }
  for (int i = 0; i < n; i++)
    LLVMBuildStore(g->b, LLVMBuildExtractElement(g->b, v, kg_i64(g, i), ""), kg_gep_t(g, et, p, kg_i64(g, i)));
}

LLVMValueRef kg_var(dc_kgen *g, LLVMTypeRef t, const char *name) {
  LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(g->fn);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(g->ctx);
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  if (first) LLVMPositionBuilderBefore(b, first);
  else LLVMPositionBuilderAtEnd(b, entry);
  LLVMValueRef a = LLVMBuildAlloca(b, t, name);
  LLVMDisposeBuilder(b);
  return a;
}

void kg_if(dc_kgen *g, kg_cond *c, LLVMValueRef cond) {
  c->then = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "then");
  c->done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "endif");
  LLVMBuildCondBr(g->b, cond, c->then, c->done);
  LLVMPositionBuilderAtEnd(g->b, c->then);
}

void kg_endif(dc_kgen *g, kg_cond *c) {
  LLVMBuildBr(g->b, c->done);
  LLVMPositionBuilderAtEnd(g->b, c->done);
}
