/* threadpool.h — the CPU backend's worker threads, created once per loaded
 * plan: dc_pool_run(fn) calls fn(ctx, tid, n) on every thread (the caller
 * is thread 0) and returns when all have returned; dc_pool_run_n runs fn on
 * the first n threads only (the others are not woken), so a small op need
 * not pay for waking threads it cannot keep busy.
 *
 * Waiting threads (workers between runs, the caller for the workers) spin a
 * few microseconds, then sleep on a futex: back-to-back kernels find the
 * workers awake, and a busy machine gets its cores back instead of losing
 * them to spinning (issue 11). */
#ifndef DC_THREADPOOL_H
#define DC_THREADPOOL_H

#include "support/support.h"

typedef struct dc_pool dc_pool;
typedef void (*dc_pool_fn)(void *ctx, int64_t tid, int64_t nthreads);

/* nthreads <= 0 means one per online CPU. */
dc_status *dc_pool_create(int nthreads, dc_pool **out);
void dc_pool_destroy(dc_pool *p);
int dc_pool_size(const dc_pool *p);
void dc_pool_run(dc_pool *p, dc_pool_fn fn, void *ctx);
/* fn(ctx, tid, n) for tid in [0, n), n clamped to [1, dc_pool_size(p)];
 * n == 1 runs fn on the caller alone. */
void dc_pool_run_n(dc_pool *p, int n, dc_pool_fn fn, void *ctx);

#endif
