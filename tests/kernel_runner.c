/* kernel_runner.c — see kernel_runner.h. */
#include "kernel_runner.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- running a kernel on chosen inputs (gelu grid, timing) ---- */

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_part(void *ctx, int64_t part, int64_t nparts, int thread) {
  runner *r = ctx;
  void *bufs[8];
  memcpy(bufs, r->bufs, sizeof bufs);
  bufs[r->nbufs] = r->scratch + (size_t)thread * r->k.entries[0].scratch_bytes;
  double t0 = cpu_now();
  r->fn(bufs, part, nparts);
  if (thread < 64) r->cpu[thread] += cpu_now() - t0;
}

/* The kernel split into one part per pool thread; r->cpu[t] is thread t's
 * CPU time in it. */
void run_all(runner *r) {
  memset(r->cpu, 0, sizeof r->cpu);
  int nt = dc_pool_size(r->pool);
  dc_pool_run(r->pool, nt, nt, run_part, r);
}

/* A target with W-lane vectors: 16 the host (AVX-512 here), 8 AVX2
 * (diffc --cpu x86-64-v3), 4 SSE2 (diffc --cpu generic), so the
 * generator's narrower paths run too. */
dc_status *target_of_width(int width, dc_cpu_target *t) {
  if (width == 4) return dc_cpu_target_generic(t);
  if (width == 8) return dc_cpu_target_named("x86-64-v3", t);
  return dc_cpu_target_host(t);
}

/* Compiles node id for a W-lane target and loads it; bufs[1..] are the
 * caller's. */
dc_status *runner_init(runner *r, const dc_module *m, int32_t id, int threads, int width) {
  return runner_init_algo(r, m, id, threads, width, 1);
}

/* winograd = 0: 3×3 convs take the direct path whatever their shape. */
dc_status *runner_init_algo(runner *r, const dc_module *m, int32_t id, int threads, int width, int winograd) {
  memset(r, 0, sizeof *r);
  dc_cpu_target t;
  DC_TRY(target_of_width(width, &t));
  DC_TRY(kh_compile_kernel(m, id, &t, winograd, &r->k));
  r->fns = calloc((size_t)m->nnodes, sizeof *r->fns);
  r->nbufs = m->nodes[id].ninputs + 1;
  DC_TRY(dc_cpu_code_load("gemm test", &r->k, m->nnodes, &r->code, r->fns));
  r->fn = r->fns[id];
  DC_TRY(dc_pool_create(threads, &r->pool));
  if (posix_memalign((void **)&r->scratch, 64, r->k.entries[0].scratch_bytes * (size_t)threads + 64))
    return dc_nomem("kernel scratch");
  return NULL;
}

void runner_deinit(runner *r) {
  dc_pool_destroy(r->pool);
  dc_cpu_code_destroy(r->code);
  dc_plan_kernels_deinit(&r->k);
  free(r->fns);
  free(r->scratch);
}

