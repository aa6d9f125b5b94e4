/* threadpool.h — the CPU backend's worker threads, created once per loaded
 * plan: dc_pool_run(fn) calls fn(ctx, tid, n) on every thread (the caller
 * is thread 0) and returns when all have returned. */
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

#endif
