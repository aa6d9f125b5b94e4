/* llvm_codegen.h — CPU code generation through the LLVM C API.
 *
 * diffc builds one LLVM module per plan holding one function per kernel,
 * optimizes it (default<O3>) for the plan's CPU target and stores the
 * object code in the plan's KERN section.  diffrun maps that object with
 * LLVM's ORC JIT linker (runtime/cpu_kernels.c): relocation only, no
 * compilation at run time.
 *
 * Every kernel has the C signature
 *     void kernel(void **bufs, int64_t tid, int64_t nthreads);
 * bufs[0] is the output, bufs[1..ninputs] the node's inputs in order, and
 * bufs[ninputs+1] this thread's scratch (scratch_bytes, 64-byte aligned,
 * distinct per thread).  Shapes and attributes are compile-time constants.
 * All threads of the pool call the kernel with their tid; each computes its
 * own part of the output, and the call returns when all have finished.
 *
 * Sections (file: exports)
 *   codegen/llvm/target.c:  dc_cpu_target_* — host or generic target, feature checks
 *   codegen/llvm/kgen.c:    dc_llvm_* — module, per-node emission, object file
 *   codegen/llvm/k_*.c:     the kernels, one file per family (see kgen.h)
 */
#ifndef DC_LLVM_CODEGEN_H
#define DC_LLVM_CODEGEN_H

#include "ir/ir.h"
#include "ir/lowering.h"

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

typedef struct dc_llvm dc_llvm;

typedef struct {
  int32_t node;
  char *symbol;
  uint64_t scratch_bytes; /* per thread */
} dc_cpu_kernel;

dc_status *dc_llvm_create(const dc_cpu_target *t, dc_llvm **out);
void dc_llvm_destroy(dc_llvm *g);
/* Whether 3×3 stride-1 conv2d kernels emitted from now on use
 * Winograd F(2×2, 3×3): 1 (the default) where it pays, 0 never (every
 * conv2d is the direct one: comparisons, benchmarks), 2 wherever it is
 * correct, however small (tests). */
void dc_llvm_set_winograd(dc_llvm *g, int on);
/* Emits the kernel of node id.  *out is set (symbol owned by the caller)
 * or, when the op has no LLVM kernel yet, *has_kernel = 0 and the runtime
 * runs the reference kernel for that node. */
dc_status *dc_llvm_emit_node(dc_llvm *g, const dc_module *m, int32_t id, dc_cpu_kernel *out, int *has_kernel);
/* For a module holding one kernel k (just emitted): its cache key, an
 * xxh64 of the kernel's LLVM IR as generated (with a fixed entry name), the
 * target, the optimization pipeline and LLVM's version, that is of
 * everything its object code depends on; and the kernel renamed
 * "dck_<key in hex>_<op>[_<variant>]" (k->symbol too), so that equal kernels from any plan
 * have equal objects and two kernels in one plan never share a name unless
 * they are equal. */
dc_status *dc_llvm_kernel_key(dc_llvm *g, dc_cpu_kernel *k, uint64_t *key);
/* Verifies, optimizes and writes the object file into obj. */
dc_status *dc_llvm_finish(dc_llvm *g, dc_buf *obj);
/* The machine code of the module (after dc_llvm_finish) as assembly text,
 * dc_malloc'd: for tests that check what the micro-kernels compile to. */
dc_status *dc_llvm_asm_text(dc_llvm *g, char **out);
/* The LLVM IR text of the module (for tests and --dump-llvm). */
char *dc_llvm_ir_text(dc_llvm *g);

/* How the llvm backend lowers op: an LLVM kernel, or the mark that says
 * why it has none (ir/lowering.h; the marks are in k_table.c). */
dc_lowering dc_llvm_lowering(dc_op op);
int dc_llvm_has_kernel(dc_op op);

#endif
