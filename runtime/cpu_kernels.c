/* cpu_kernels.c — see cpu_kernels.h. */
#include "cpu_kernels.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <string.h>

#include "support/cpu_target.h"

struct dc_cpu_code {
  LLVMOrcLLJITRef jit;
};

static dc_status *llvm_err(LLVMErrorRef e, const char *path, const char *what) {
  char *msg = LLVMGetErrorMessage(e);
  dc_status *st = dc_error(DC_ERR_FORMAT, "%s: %s: %s", path, what, msg);
  LLVMDisposeErrorMessage(msg);
  return st;
}

static dc_status *check_target(const char *path, const dc_plan_kernels *k) {
  dc_cpu_target t = {k->triple, k->cpu, k->features, NULL};
  char *missing = NULL;
  if (dc_cpu_target_runs_here(&t, &missing)) return NULL;
  dc_status *st = dc_error(DC_ERR_UNSUPPORTED,
                           "%s: the plan's kernels were compiled for a CPU with features this machine lacks (%s); "
                           "recompile here, or with diffc --cpu generic for a portable plan (or run it with --backend reference)",
                           path, missing ? missing : "unknown");
  dc_free(missing);
  return st;
}

static dc_status *link_object(const char *path, const dc_plan_kernels *k, dc_cpu_code *c) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&c->jit, NULL);
  if (e) return llvm_err(e, path, "cannot create the kernel linker");
  LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(c->jit);
  /* Kernels may call libm (expf, erff): resolve from this process. */
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(c->jit), NULL, NULL);
  if (e) return llvm_err(e, path, "cannot resolve process symbols");
  LLVMOrcJITDylibAddGenerator(jd, gen);
  for (int i = 0; i < k->nobjects; i++) {
    LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)k->objects[i].data,
                                                                       k->objects[i].size, "diffc_kernels");
    e = LLVMOrcLLJITAddObjectFile(c->jit, jd, mb);
    if (e) return llvm_err(e, path, "cannot link the plan's kernel object");
  }
  return NULL;
}

dc_status *dc_cpu_code_load(const char *path, const dc_plan_kernels *k, int32_t nnodes, dc_cpu_code **out,
                            dc_cpu_kernel_fn *fn_of_node) {
  *out = NULL;
  for (int32_t i = 0; i < nnodes; i++) fn_of_node[i] = NULL;
  if (k->nobjects == 0) return NULL;
  DC_TRY(check_target(path, k));
  dc_cpu_code *c = dc_calloc(1, sizeof *c);
  if (!c) return dc_nomem("loading kernels");
  dc_status *st = link_object(path, k, c);
  for (int i = 0; !st && i < k->nentries; i++) {
    LLVMOrcExecutorAddress addr = 0;
    LLVMErrorRef e = LLVMOrcLLJITLookup(c->jit, &addr, k->entries[i].symbol);
    if (e) st = llvm_err(e, path, "kernel symbol missing from the object");
    else fn_of_node[k->entries[i].node] = (dc_cpu_kernel_fn)(uintptr_t)addr;
  }
  if (st) {
    dc_cpu_code_destroy(c);
    return st;
  }
  *out = c;
  return NULL;
}

void dc_cpu_code_destroy(dc_cpu_code *c) {
  if (!c) return;
  if (c->jit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(c->jit);
    if (e) LLVMConsumeError(e);
  }
  dc_free(c);
}
