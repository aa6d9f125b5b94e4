/* threadpool.h — the CPU backend's worker threads, created once per loaded
 * plan.  dc_pool_run(p, nthreads, nparts, fn) calls fn(ctx, part, nparts,
 * thread) once for every part in [0, nparts) and returns when all have
 * returned.  Parts are claimed by whichever of the first nthreads threads
 * (the caller is thread 0) gets to them first, so the caller never waits
 * for a worker that has not been scheduled: it takes that worker's parts.
 * `thread` (< dc_pool_size) names the thread running the part, for
 * per-thread scratch; a part must not depend on which thread runs it.
 *
 * Waiting threads (workers between runs, the caller for the workers) spin a
 * few microseconds, then sleep on a futex: back-to-back kernels find the
 * workers awake, and a busy machine gets its cores back instead of losing
 * them to spinning (issue 11). */
#ifndef DC_THREADPOOL_H
#define DC_THREADPOOL_H

#include "support/support.h"

typedef struct dc_pool dc_pool;
typedef void (*dc_pool_fn)(void *ctx, int64_t part, int64_t nparts, int thread);

/* A run's part count is clamped to this. */
#define DC_POOL_MAX_PARTS ((int64_t)1 << 30)

/* nthreads <= 0 means one per online CPU. */
dc_status *dc_pool_create(int nthreads, dc_pool **out);
void dc_pool_destroy(dc_pool *p);
int dc_pool_size(const dc_pool *p);
/* fn(ctx, part, nparts, thread) for every part in [0, nparts) on at most
 * nthreads threads (clamped to [1, dc_pool_size(p)] and to nparts);
 * nthreads == 1 runs every part on the caller, in order. */
void dc_pool_run(dc_pool *p, int nthreads, int64_t nparts, dc_pool_fn fn, void *ctx);
/* Adaptive mode (off by default; diffrun's pool has it on): when workers
 * preempted by other work on the machine keep the caller waiting, runs go
 * to the caller alone for a while, then are measured again (threadpool.c).
 * For short parts only: a pool of long jobs (compiles) should not use it. */
void dc_pool_set_adaptive(dc_pool *p, int on);
/* How many solo spells an adaptive pool has begun (tests, diagnostics). */
long dc_pool_solo_spells(const dc_pool *p);

#endif
