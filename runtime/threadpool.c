/* threadpool.c — a fork/join pool: a generation counter under a mutex wakes
 * the workers; the last one to finish wakes the caller.  Workers spin
 * briefly before sleeping, since kernels are launched back to back. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct dc_pool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  atomic_long generation;
  atomic_int remaining;
  dc_pool_fn fn;
  void *ctx;
  int quit;
};

typedef struct {
  dc_pool *p;
  int64_t tid;
} worker_arg;

static void finish_one(dc_pool *p) {
  if (atomic_fetch_sub(&p->remaining, 1) == 1) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

static void *worker(void *arg) {
  dc_pool *p = ((worker_arg *)arg)->p;
  int64_t tid = ((worker_arg *)arg)->tid;
  dc_free(arg);
  long seen = 0;
  for (;;) {
    for (int spin = 0; spin < 20000 && atomic_load(&p->generation) == seen; spin++) __builtin_ia32_pause();
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->generation) == seen && !p->quit) pthread_cond_wait(&p->wake, &p->mu);
    int quit = p->quit;
    pthread_mutex_unlock(&p->mu);
    if (quit) return NULL;
    seen = atomic_load(&p->generation);
    p->fn(p->ctx, tid, p->n);
    finish_one(p);
  }
}

dc_status *dc_pool_create(int nthreads, dc_pool **out) {
  *out = NULL;
  if (nthreads <= 0) nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nthreads < 1) nthreads = 1;
  dc_pool *p = dc_calloc(1, sizeof *p);
  if (!p) return dc_nomem("creating the thread pool");
  p->n = nthreads;
  p->threads = dc_calloc((size_t)nthreads, sizeof *p->threads);
  if (!p->threads) {
    dc_free(p);
    return dc_nomem("creating the thread pool");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  for (int t = 1; t < nthreads; t++) {
    worker_arg *a = dc_malloc(sizeof *a);
    if (!a || pthread_create(&p->threads[t], NULL, worker, (a->p = p, a->tid = t, a)) != 0) {
      dc_free(a);
      p->n = t; /* the threads started so far are joined by destroy */
      dc_pool_destroy(p);
      return dc_error(DC_ERR_NOMEM, "cannot start worker thread %d of %d", t, nthreads);
    }
  }
  *out = p;
  return NULL;
}

void dc_pool_destroy(dc_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int t = 1; t < p->n; t++) pthread_join(p->threads[t], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  dc_free(p->threads);
  dc_free(p);
}

int dc_pool_size(const dc_pool *p) { return p->n; }

void dc_pool_run(dc_pool *p, dc_pool_fn fn, void *ctx) {
  if (p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store(&p->remaining, p->n);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->generation, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  fn(ctx, 0, p->n);
  if (atomic_fetch_sub(&p->remaining, 1) == 1) return;
  for (int spin = 0; spin < 200000 && atomic_load(&p->remaining) > 0; spin++) __builtin_ia32_pause();
  pthread_mutex_lock(&p->mu);
  while (atomic_load(&p->remaining) > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
