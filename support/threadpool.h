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
/* Adaptive modes (none by default; diffrun's pool has both), for pools of
 * short parts only (a pool of long jobs, compiles, should not use them):
 *   DC_POOL_ADAPT_STRAGGLE  when the caller keeps losing time off the CPU
 *                           (waiting for a preempted worker, or preempted
 *                           itself), runs go to the caller alone for a
 *                           spell, then are measured again;
 *   DC_POOL_ADAPT_LOAD      a run is not split while the machine's other
 *                           runnable threads already hold the cores it would
 *                           need (/proc/stat's procs_running, read every 20 ms).
 * threadpool.c says why.  An adaptive pool that goes solo runs a run as one
 * part, fn(ctx, 0, 1, 0): its fn must do the whole run's work when asked for
 * part 0 of 1, as a kernel's even split does. */
enum { DC_POOL_ADAPT_STRAGGLE = 1, DC_POOL_ADAPT_LOAD = 2 };
void dc_pool_set_adaptive(dc_pool *p, int modes);
/* How many solo spells an adaptive pool has begun (tests, diagnostics). */
long dc_pool_solo_spells(const dc_pool *p);
/* A thread of this process outside the pool starts (+1) or stops (-1)
 * running work of the same run (the CPU copy stream's memcpy): the
 * adaptive check counts it as ours, not as another process holding the
 * cores, so a copy beside the kernels does not send them to one thread.
 * NULL p: nothing. */
void dc_pool_sibling_running(dc_pool *p, int delta);

#endif
