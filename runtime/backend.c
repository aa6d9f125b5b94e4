/* backend.c — the backends the runtime knows (backend.h): which one runs a
 * plan, and what the plan's target says about its kernels.  The one place
 * where a plan's target decides anything in the runtime. */
#include "backend.h"

#include <string.h>

#include "cuda_backend.h"

const drt_backend_i *const drt_backends[] = {&drt_backend_cuda, &drt_backend_llvm, &drt_backend_reference, NULL};

static const drt_backend_i *find_backend(const char *name) {
  for (int i = 0; drt_backends[i]; i++)
    if (!strcmp(drt_backends[i]->name, name)) return drt_backends[i];
  return NULL;
}

static dc_status *unknown_backend(const char *name) {
  char list[128] = "";
  size_t len = 0;
  for (int i = 0; drt_backends[i] && len < sizeof list; i++)
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", drt_backends[i]->name);
  return dc_error(DC_ERR_ARGUMENT, "backend \"%s\" is not available (backends: %s)", name, list);
}

dc_status *drt_check_target(const dc_plan *plan, const char *path) {
  if (plan->target != DC_TARGET_CPU && plan->target != DC_TARGET_CUDA)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: the plan was built for target %u, which this diffrun does not know", path,
                    plan->target);
  return NULL;
}

dc_status *drt_backend_choose(const dc_plan *plan, const char *path, const char *asked, const drt_backend_i **out) {
  *out = NULL;
  const drt_backend_i *wanted = asked ? find_backend(asked) : NULL;
  if (asked && !wanted) return unknown_backend(asked);
  int cuda_plan = plan->target == DC_TARGET_CUDA;
  if (wanted == &drt_backend_cuda && !cuda_plan)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s: --backend cuda needs a plan compiled for CUDA, and this one targets the CPU; recompile "
                    "with diffc --target cuda (or run this one with --backend llvm or reference)",
                    path);
  if (cuda_plan) /* it holds no CPU kernels: llvm means the reference kernels */
    *out = !wanted || wanted == &drt_backend_cuda ? &drt_backend_cuda : &drt_backend_reference;
  else if (wanted) /* llvm refuses a plan without kernels at create */
    *out = wanted;
  else
    *out = plan->kernels.nobjects > 0 ? &drt_backend_llvm : &drt_backend_reference;
  return NULL;
}

void drt_describe_target(const dc_plan *plan, drt_plan_info *in, char *archs, size_t cap) {
  in->archs = archs;
  archs[0] = 0;
  if (plan->target == DC_TARGET_CUDA) {
    in->target = "cuda";
    in->compute = plan->cuda.compute ? plan->cuda.compute : "f32";
    in->kernels = plan->cuda.nkernels;
    dc_plan_cuda_archs(&plan->cuda, archs, cap);
  } else {
    const dc_plan_kernels *k = &plan->kernels;
    in->target = "cpu";
    in->compute = "f32";
    in->kernels = k->nentries;
    if (k->triple) snprintf(archs, cap, "%s, cpu %s", k->triple, k->cpu ? k->cpu : "?");
  }
}
