/* threadpool.c — a fork/join pool.  Each worker has its own futex word
 * (slot.gen) that the caller bumps to hand it a run; the caller waits on
 * `remaining`, which the workers count down.  Every wait spins for at most
 * SPIN_NS (kernels are launched back to back, so a worker usually finds the
 * next run within that) and then sleeps in the kernel.  The spin is bounded
 * in time, not in pause instructions, because a pause costs 10 cycles on one
 * CPU and 140 on another; and it is short, because on a busy machine a
 * spinning thread takes the core the thread it waits for needs (issue 11:
 * the old 200000-pause spins made 2 threads 17x slower than 1 beside one
 * busy core).
 *
 * Sleeping without a lost wake-up: a waiter sets its `sleeping` flag and then
 * re-reads the word; a waker changes the word and then reads the flag (both
 * sequentially consistent), so at least one of them sees the other, and
 * FUTEX_WAIT itself refuses to sleep once the word has changed. */
#include "threadpool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 20000 /* 20 µs: a few kernel launches' gap, far below a scheduler tick */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* One worker's hand-off word, on its own cache line so that posting to one
 * worker does not disturb another's spin. */
typedef struct {
  atomic_uint gen;      /* bumped by the caller for every run this worker takes part in */
  atomic_uint sleeping; /* the worker is (about to be) asleep on gen */
  char pad[64 - 2 * sizeof(atomic_uint)];
} slot;

struct dc_pool {
  int n;
  pthread_t *threads;
  slot *slots; /* [n]; slot 0 (the caller) unused */
  /* The current run, written before the workers' gen is bumped and read by
   * them after, so the bump publishes it. */
  dc_pool_fn fn;
  void *ctx;
  int64_t active;
  atomic_uint remaining;       /* workers of the current run still running */
  atomic_uint caller_sleeping; /* the caller is (about to be) asleep on remaining */
  atomic_int quit;
};

typedef struct {
  dc_pool *p;
  int64_t tid;
} worker_arg;

static void futex_wait(atomic_uint *w, unsigned v) { syscall(SYS_futex, (void *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0); }
static void futex_wake(atomic_uint *w, int n) { syscall(SYS_futex, (void *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0); }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns once *w != v: spinning up to SPIN_NS, then asleep. */
static void wait_change(atomic_uint *w, unsigned v, atomic_uint *sleeping) {
  uint64_t start = now_ns();
  for (;;) {
    for (int i = 0; i < 32; i++) {
      if (atomic_load_explicit(w, memory_order_acquire) != v) return;
      cpu_relax();
    }
    if (now_ns() - start > SPIN_NS) break;
  }
  atomic_store(sleeping, 1);
  while (atomic_load(w) == v) futex_wait(w, v);
  atomic_store(sleeping, 0);
}

/* After changing *w: wakes its waiter if it may be asleep. */
static void wake(atomic_uint *w, atomic_uint *sleeping) {
  if (atomic_load(sleeping)) futex_wake(w, 1);
}

static void *worker(void *arg) {
  dc_pool *p = ((worker_arg *)arg)->p;
  int64_t tid = ((worker_arg *)arg)->tid;
  dc_free(arg);
  slot *s = &p->slots[tid];
  unsigned seen = 0;
  for (;;) {
    wait_change(&s->gen, seen, &s->sleeping);
    seen = atomic_load(&s->gen);
    if (atomic_load(&p->quit)) return NULL;
    p->fn(p->ctx, tid, p->active);
    if (atomic_fetch_sub(&p->remaining, 1) == 1) wake(&p->remaining, &p->caller_sleeping);
  }
}

/* Bumps worker t's word: a run for it, or (with quit set) its exit. */
static void post(dc_pool *p, int t) {
  atomic_fetch_add(&p->slots[t].gen, 1);
  wake(&p->slots[t].gen, &p->slots[t].sleeping);
}

dc_status *dc_pool_create(int nthreads, dc_pool **out) {
  *out = NULL;
  if (nthreads <= 0) nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nthreads < 1) nthreads = 1;
  dc_pool *p = dc_calloc(1, sizeof *p);
  if (!p) return dc_nomem("creating the thread pool");
  p->threads = dc_calloc((size_t)nthreads, sizeof *p->threads);
  p->slots = dc_calloc((size_t)nthreads, sizeof *p->slots);
  p->n = 1; /* the threads started so far; destroy joins them */
  if (!p->threads || !p->slots) {
    dc_pool_destroy(p);
    return dc_nomem("creating the thread pool");
  }
  for (int t = 1; t < nthreads; t++) {
    worker_arg *a = dc_malloc(sizeof *a);
    if (!a || pthread_create(&p->threads[t], NULL, worker, (a->p = p, a->tid = t, a)) != 0) {
      dc_free(a);
      dc_pool_destroy(p);
      return dc_error(DC_ERR_NOMEM, "cannot start worker thread %d of %d", t, nthreads);
    }
    p->n = t + 1;
  }
  *out = p;
  return NULL;
}

void dc_pool_destroy(dc_pool *p) {
  if (!p) return;
  atomic_store(&p->quit, 1);
  for (int t = 1; t < p->n; t++) post(p, t);
  for (int t = 1; t < p->n; t++) pthread_join(p->threads[t], NULL);
  dc_free(p->threads);
  dc_free(p->slots);
  dc_free(p);
}

int dc_pool_size(const dc_pool *p) { return p->n; }

void dc_pool_run(dc_pool *p, dc_pool_fn fn, void *ctx) { dc_pool_run_n(p, p->n, fn, ctx); }

void dc_pool_run_n(dc_pool *p, int n, dc_pool_fn fn, void *ctx) {
  if (n > p->n) n = p->n;
  if (n <= 1) {
    fn(ctx, 0, 1);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->active = n;
  atomic_store(&p->remaining, (unsigned)(n - 1));
  for (int t = 1; t < n; t++) post(p, t);
  fn(ctx, 0, n);
  for (unsigned r; (r = atomic_load(&p->remaining)) != 0;) wait_change(&p->remaining, r, &p->caller_sleeping);
}
