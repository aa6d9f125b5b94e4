/* cpu_kernels.h — binds the compiled kernels stored in a plan: the object
 * code is linked in memory by LLVM's ORC JIT linker (relocation and symbol
 * lookup only — nothing is compiled when a plan loads), after checking the
 * plan's CPU features against this machine.
 *
 * Why ORC and not a shared object: diffc would need an external linker to
 * make a .so, and diffrun a file to dlopen it from; ORC links the object
 * straight from the plan's bytes with the LLVM library diffc already uses.
 * A build without LLVM (-DDIFFC_LLVM=OFF) links codegen/llvm_off/llvm_off.c
 * instead, whose dc_cpu_code_load refuses the plan and names the reference
 * backend. */
#ifndef DC_CPU_KERNELS_H
#define DC_CPU_KERNELS_H

#include "plan/plan_format.h"

typedef void (*dc_cpu_kernel_fn)(void **bufs, int64_t tid, int64_t nthreads);

typedef struct dc_cpu_code dc_cpu_code;

/* Links kernels->object and resolves every kernel's symbol; fn_of_node[i]
 * receives node i's kernel or NULL (an array of nnodes entries). */
dc_status *dc_cpu_code_load(const char *plan_path, const dc_plan_kernels *k, int32_t nnodes,
                            dc_cpu_code **out, dc_cpu_kernel_fn *fn_of_node);
void dc_cpu_code_destroy(dc_cpu_code *c);

#endif
