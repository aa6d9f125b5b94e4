/* cpu_target.h — which CPU a plan's kernels are compiled for, and whether
 * they run on this one (cpu_target.c, through LLVM's host queries): the
 * compiler picks a target with it and the runtime checks a plan's target
 * before linking its kernels, so it lives below both.  A build without LLVM
 * (-DDIFFC_LLVM=OFF) links codegen/llvm_off/llvm_off.c instead, where naming
 * a target is an error saying the build has no CPU code generator. */
#ifndef DC_CPU_TARGET_H
#define DC_CPU_TARGET_H

#include "support/support.h"

typedef struct {
  char *triple;   /* "x86_64-pc-linux-gnu" */
  char *cpu;      /* LLVM's name: "generic" on CPUs newer than LLVM 14, "x86-64" for portable plans */
  char *features; /* "+avx512f,+fma,..." or "" */
  char *tune;     /* a CPU to tune for (LLVM's "tune-cpu"), or NULL: --cpu haswell, znver1, ... */
} dc_cpu_target;

/* The machine diffc runs on (LLVMGetHostCPUName/Features). */
dc_status *dc_cpu_target_host(dc_cpu_target *out);
/* A portable x86-64 target (SSE2 only): `diffc --cpu generic`. */
dc_status *dc_cpu_target_generic(dc_cpu_target *out);
/* `diffc --cpu NAME`: native (or NULL), generic, an x86-64 psABI level
 * (x86-64, x86-64-v2, -v3, -v4) or a CPU name (haswell, znver1, ...: its
 * level's features, tuned for it); an unknown name is DC_ERR_ARGUMENT
 * listing the known ones. */
dc_status *dc_cpu_target_named(const char *name, dc_cpu_target *out);
void dc_cpu_target_deinit(dc_cpu_target *t);
/* Whether code for `t` runs on this machine: the triple's architecture
 * matches and every "+feature" of t is present on the host.  On failure,
 * *missing (dc_malloc'd) lists the missing features. */
int dc_cpu_target_runs_here(const dc_cpu_target *t, char **missing);
/* 16 when the target has AVX-512F, 8 with AVX2, 4 otherwise: the f32
 * vector width kernels are written for. */
int dc_cpu_target_vector_width(const dc_cpu_target *t);

#endif
