/* test_threadpool.c — the fork/join pool (runtime/threadpool.h) on 1..4
 * threads:
 *  - many back-to-back runs: every thread of a run is called exactly once
 *    with its tid and the run's thread count, and a run returns only after
 *    every thread has finished it (checked through the data each wrote);
 *  - dc_pool_run_n: only threads [0, n) run, with nthreads = n; n beyond
 *    the pool or below 1 is clamped;
 *  - runs with gaps, so that workers have gone to sleep when the next run
 *    is posted, and runs where the caller's share (or the last worker's) is
 *    slow, so that the others sleep while they wait: the futex paths;
 *  - destroy while the workers are idle (asleep, or just started), and
 *    right after a run.
 * Timing is not checked here (bench/threads.sh measures it). */
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "runtime/threadpool.h"
#include "testutil.h"

#define MAX_THREADS 4
#define N 4096
#define RUN_ALL INT_MIN /* one_run: dc_pool_run instead of dc_pool_run_n */

typedef struct {
  long run;                       /* the run being executed */
  long seen[MAX_THREADS];         /* per tid: the last run it took part in */
  atomic_int calls[MAX_THREADS];  /* per tid: calls in the current run */
  atomic_int bad_n;               /* calls whose nthreads differed from want_n */
  int64_t want_n;
  int slow_tid;                   /* this tid sleeps slow_ms in its share (-1: none) */
  int slow_ms;
  double data[N], sum[MAX_THREADS];
} job;

static void sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL); }

/* Each thread sums its slice of data and records that it ran. */
static void work(void *ctx, int64_t tid, int64_t n) {
  job *j = ctx;
  if (n != j->want_n) atomic_fetch_add(&j->bad_n, 1);
  atomic_fetch_add(&j->calls[tid], 1);
  if (tid == j->slow_tid) sleep_ms(j->slow_ms);
  double s = 0;
  for (int64_t i = N * tid / n; i < N * (tid + 1) / n; i++) s += j->data[i];
  j->sum[tid] = s;
  j->seen[tid] = j->run;
}

/* One run on n threads (n as passed to dc_pool_run_n, or RUN_ALL);
 * 1 when every thread [0, eff) ran once, none other did, and the slices
 * add up, all visible to the caller when the run returns. */
static int one_run(dc_pool *p, job *j, int n) {
  int size = dc_pool_size(p), eff = n == RUN_ALL ? size : n < 1 ? 1 : n > size ? size : n;
  j->run++;
  j->want_n = eff;
  for (int t = 0; t < MAX_THREADS; t++) atomic_store(&j->calls[t], 0);
  if (n == RUN_ALL) dc_pool_run(p, work, j);
  else dc_pool_run_n(p, n, work, j);
  double total = 0;
  int ok = atomic_load(&j->bad_n) == 0;
  for (int t = 0; t < MAX_THREADS; t++) {
    int calls = atomic_load(&j->calls[t]);
    ok &= t < eff ? calls == 1 && j->seen[t] == j->run : calls == 0;
    if (t < eff) total += j->sum[t];
  }
  return ok && total == (double)N * (N - 1) / 2;
}

static job *new_job(void) {
  static job j;
  memset(&j, 0, sizeof j);
  for (int i = 0; i < N; i++) j.data[i] = i; /* sums are exact in double */
  j.slow_tid = -1;
  return &j;
}

static void back_to_back(int threads) {
  dc_pool *p = NULL;
  CHECK_OK(dc_pool_create(threads, &p));
  if (!p) return;
  CHECK(dc_pool_size(p) == threads);
  job *j = new_job();
  int good = 0, runs = 5000;
  for (int r = 0; r < runs; r++) good += one_run(p, j, r % 3 == 0 ? RUN_ALL : r % threads + 1);
  CHECK(good == runs);
  /* clamping: more threads than the pool, and fewer than one */
  CHECK(one_run(p, j, threads + 3) && one_run(p, j, 0) && one_run(p, j, -2));
  printf("%d thread(s): %d back-to-back runs (dc_pool_run and dc_pool_run_n on 1..%d), %d correct\n", threads, runs,
         threads, good);
  dc_pool_destroy(p); /* right after a run */
}

static void sleepers(int threads) {
  dc_pool *p = NULL;
  CHECK_OK(dc_pool_create(threads, &p));
  if (!p) return;
  job *j = new_job();
  int good = 0, runs = 0;
  for (int r = 0; r < 20; r++, runs++) { /* the workers are asleep when each run is posted */
    sleep_ms(2);
    good += one_run(p, j, RUN_ALL);
  }
  j->slow_ms = 20;
  for (int slow = 0; slow < threads; slow++, runs++) { /* the caller's share, then each worker's, is slow */
    j->slow_tid = slow;
    good += one_run(p, j, RUN_ALL);
  }
  j->slow_tid = -1;
  CHECK(good == runs);
  printf("%d thread(s): %d runs posted to sleeping workers or waiting on a slow share, %d correct\n", threads, runs,
         good);
  sleep_ms(5);
  dc_pool_destroy(p); /* idle: every worker asleep */
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  for (int t = 1; t <= MAX_THREADS; t++) back_to_back(t);
  for (int t = 1; t <= MAX_THREADS; t++) sleepers(t);
  for (int t = 1; t <= MAX_THREADS; t++) { /* destroy before the workers ever waited, or while they spin */
    dc_pool *p = NULL;
    CHECK_OK(dc_pool_create(t, &p));
    dc_pool_destroy(p);
  }
  printf("create + destroy at once on 1..%d threads: no hang\n", MAX_THREADS);
  return tu_finish();
}
