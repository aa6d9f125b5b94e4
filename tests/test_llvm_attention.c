/* test_llvm_attention.c — what of the LLVM flash-style attention kernel has
 * no analogue on another backend; its shapes (head sizes, partial query and
 * key blocks, peaky softmax) are rows of the op case table
 * (tests/op_cases_attention.c).  Here: the kernel's vector exp against
 * libm's exp over its whole range.  Its timings: bench/bench_kernels attention. */
#include <float.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm/kgen.h"
#include "kernel_harness.h"
#include "runtime/cpu_kernels.h"
#include "testutil.h"

/* defined in codegen/llvm/k_attention.c */
LLVMValueRef dc_k_attention_exp(dc_kgen *g, LLVMValueRef x);

/* ---- the vector exp ----------------------------------------------------- */
/* Builds `void vexp(void **bufs, i64, i64)`: bufs[0][i] = exp(bufs[1][i])
 * for n floats (n a multiple of the vector width), through the kernel's exp,
 * compiled for the host and linked like a plan's kernels. */
static dc_status *build_exp(int64_t n, dc_plan_kernels *k, dc_cpu_code **code, dc_cpu_kernel_fn *fn) {
  dc_cpu_target t;
  DC_TRY(kh_target(&t));
  k->triple = t.triple, k->cpu = t.cpu, k->features = t.features; /* the caller frees them */
  dc_free(t.tune);
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMTargetRef target;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(t.triple, &target, &err)) {
    dc_status *st = dc_error(DC_ERR_INTERNAL, "no LLVM target for %s: %s", t.triple, err);
    LLVMDisposeMessage(err);
    return st;
  }
  dc_kgen g = {.vw = dc_cpu_target_vector_width(&t)};
  g.tm = LLVMCreateTargetMachine(target, t.triple, t.cpu, t.features, LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                 LLVMCodeModelDefault);
  g.ctx = LLVMContextCreate();
  g.mod = LLVMModuleCreateWithNameInContext("exp_test", g.ctx);
  g.b = LLVMCreateBuilderInContext(g.ctx);
  g.f32 = LLVMFloatTypeInContext(g.ctx);
  g.i32 = LLVMInt32TypeInContext(g.ctx);
  g.i64 = LLVMInt64TypeInContext(g.ctx);
  g.pf32 = LLVMPointerType(g.f32, 0);
  g.pi8 = LLVMPointerType(LLVMInt8TypeInContext(g.ctx), 0);
  g.vf32 = LLVMVectorType(g.f32, (unsigned)g.vw);
  g.pvf32 = LLVMPointerType(g.vf32, 0);
  LLVMTypeRef params[3] = {LLVMPointerType(g.pi8, 0), g.i64, g.i64};
  g.fn = LLVMAddFunction(g.mod, "vexp", LLVMFunctionType(LLVMVoidTypeInContext(g.ctx), params, 3, 0));
  LLVMAttributeRef feats =
      LLVMCreateStringAttribute(g.ctx, "target-features", 15, t.features, (unsigned)strlen(t.features));
  LLVMAddAttributeAtIndex(g.fn, LLVMAttributeFunctionIndex, feats);
  g.bufs = LLVMGetParam(g.fn, 0);
  LLVMPositionBuilderAtEnd(g.b, LLVMAppendBasicBlockInContext(g.ctx, g.fn, "entry"));
  LLVMValueRef out = kg_buf(&g, 0), in = kg_buf(&g, 1);
  kg_loop l;
  kg_for(&g, &l, kg_i64(&g, 0), kg_i64(&g, n), g.vw, "i");
  kg_vstore(&g, dc_k_attention_exp(&g, kg_vload(&g, kg_gep(&g, in, l.i))), kg_gep(&g, out, l.i));
  kg_end(&g, &l);
  LLVMBuildRetVoid(g.b);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e = LLVMRunPasses(g.mod, "default<O2>", g.tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  LLVMMemoryBufferRef mb = NULL;
  dc_status *st = e ? dc_error(DC_ERR_INTERNAL, "optimizing the exp test") : NULL;
  if (e) LLVMConsumeError(e);
  if (!st && LLVMTargetMachineEmitToMemoryBuffer(g.tm, g.mod, LLVMObjectFile, &err, &mb)) {
    st = dc_error(DC_ERR_INTERNAL, "emitting the exp test: %s", err);
    LLVMDisposeMessage(err);
  }
  if (!st) {
    k->objects = calloc(1, sizeof *k->objects);
    k->objects[0].size = LLVMGetBufferSize(mb);
    k->objects[0].data = malloc(k->objects[0].size);
    memcpy(k->objects[0].data, LLVMGetBufferStart(mb), k->objects[0].size);
    k->nobjects = 1;
    LLVMDisposeMemoryBuffer(mb);
    k->entries = calloc(1, sizeof *k->entries);
    k->entries[0] = (dc_plan_kernel){0, "vexp", 0};
    k->nentries = 1;
    st = dc_cpu_code_load("exp test", k, 1, code, fn);
  }
  LLVMDisposeBuilder(g.b);
  LLVMDisposeModule(g.mod);
  LLVMContextDispose(g.ctx);
  LLVMDisposeTargetMachine(g.tm);
  return st;
}

static void test_exp(void) {
  enum { N = 1 << 22, NSPECIAL = 16 };
  const double lo = -87.3365447505531, hi = 88.0; /* FLT_MIN's log .. the clamp */
  float *x = malloc((N + NSPECIAL) * sizeof *x), *y = malloc((N + NSPECIAL) * sizeof *y);
  for (int i = 0; i < N; i++) x[i] = (float)(lo + (hi - lo) * i / (N - 1));
  float special[NSPECIAL] = {0.0f, -0.0f, -88.0f, -88.5f, -100.0f, -1e4f, -1e30f, -INFINITY, -87.5f, -87.6f, -87.7f,
                             1.0f, -1.0f, 0.34657359f, -0.34657359f, 1e-7f};
  memcpy(x + N, special, sizeof special);
  dc_plan_kernels k = {0};
  dc_cpu_code *code = NULL;
  dc_cpu_kernel_fn fn = NULL;
  dc_status *st = build_exp(N + NSPECIAL, &k, &code, &fn);
  CHECK_OK(st);
  if (!st) {
    fn((void *[]){y, x}, 0, 1);
    double worst = 0, at = 0;
    for (int i = 0; i < N; i++) {
      double want = exp((double)x[i]), rel = fabs(y[i] - want) / want;
      if (!(rel <= worst)) worst = rel, at = x[i];
    }
    CHECK(worst <= 2e-7);
    printf("vector exp on %d points of [%.4g, %.4g]: max relative error %.3g (at x = %.9g)\n", N, lo, hi, worst, at);
    CHECK(y[N] == 1.0f && y[N + 1] == 1.0f);
    for (int i = 2; i < 8; i++) CHECK(y[N + i] == 0.0f); /* x ≤ -88, -inf: exactly 0 */
    for (int i = 8; i < 11; i++) CHECK(fabs(y[N + i] - exp((double)x[N + i])) < FLT_MIN); /* subnormal results */
    for (int i = 11; i < NSPECIAL; i++) CHECK(fabs(y[N + i] - exp((double)x[N + i])) <= 2e-7 * exp((double)x[N + i]));
    printf("vector exp: exp(0) = 1, exp(x <= -88) = 0 (also -inf), |error| < FLT_MIN for subnormal results\n");
  }
  dc_cpu_code_destroy(code);
  if (k.objects) free(k.objects[0].data);
  free(k.objects);
  free(k.entries);
  dc_cpu_target_deinit(&(dc_cpu_target){k.triple, k.cpu, k.features, NULL});
  free(x);
  free(y);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_exp();
  return tu_finish();
}
