/* test_threadpool.c — the fork/join pool (support/threadpool.h) on 1..4
 * threads:
 *  - many back-to-back runs with part counts below, at and above the thread
 *    count: every part of a run is called exactly once with the run's part
 *    count, on a thread below the pool's size, and a run returns only after
 *    every part has finished (checked through the data each wrote);
 *  - nthreads beyond the pool or below 1 is clamped; nthreads 1 runs every
 *    part on the caller, in order; no parts is no call;
 *  - runs with gaps, so that workers have gone to sleep when the next run
 *    is posted, and runs where one part is slow, so that the others sleep
 *    while they wait: the futex paths;
 *  - the point of claiming parts: when a worker is held up inside its first
 *    part, the caller takes every other part instead of waiting for it;
 *  - adaptive mode: when every part a worker takes keeps the caller waiting
 *    (a worker preempted by other work), the pool goes solo for a spell,
 *    runs every part on the caller, then measures again and, finding the
 *    same, starts a longer spell; a pool not in adaptive mode never does;
 *  - destroy while the workers are idle (asleep, or just started), and
 *    right after a run.
 * Timing is not checked here (bench/threads.sh measures it). */
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "support/threadpool.h"
#include "testutil.h"

#define MAX_THREADS 4
#define MAX_PARTS 64
#define N 4096

typedef struct {
  long run;                    /* the run being executed */
  long seen[MAX_PARTS];        /* per part: the last run it took part in */
  atomic_int calls[MAX_PARTS]; /* per part: calls in the current run */
  atomic_int bad;              /* calls with the wrong nparts, or a thread out of range */
  atomic_int by_thread[MAX_THREADS];
  int64_t want_parts;
  int pool_size;
  int slow_part;      /* this part sleeps slow_ms (-1: none) */
  int slow_worker;    /* the first part a worker (thread > 0) runs sleeps slow_ms */
  atomic_int slowed;  /* slow_worker: it has happened */
  int slow_ms;
  int in_order;       /* nthreads 1: parts must come 0, 1, 2, ... */
  atomic_int next_in_order;
  double data[N], sum[MAX_PARTS];
} job;

static void sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL); }

/* Each part sums its slice of data and records that it ran. */
static void work(void *ctx, int64_t part, int64_t nparts, int thread) {
  job *j = ctx;
  if (nparts != j->want_parts || thread < 0 || thread >= j->pool_size || part < 0 || part >= nparts)
    atomic_fetch_add(&j->bad, 1);
  if (j->in_order && (thread != 0 || atomic_fetch_add(&j->next_in_order, 1) != part)) atomic_fetch_add(&j->bad, 1);
  atomic_fetch_add(&j->calls[part], 1);
  atomic_fetch_add(&j->by_thread[thread], 1);
  if (part == j->slow_part) sleep_ms(j->slow_ms);
  if (j->slow_worker && thread > 0 && atomic_exchange(&j->slowed, 1) == 0) sleep_ms(j->slow_ms);
  else if (j->slow_worker) sleep_ms(1); /* parts long enough for the worker to wake and claim one */
  double s = 0;
  for (int64_t i = N * part / nparts; i < N * (part + 1) / nparts; i++) s += j->data[i];
  j->sum[part] = s;
  j->seen[part] = j->run;
}

/* One run of nparts parts on nthreads threads; 1 when every part ran once,
 * no other did, and the slices add up, all visible when the run returns. */
static int one_run(dc_pool *p, job *j, int nthreads, int nparts) {
  j->run++;
  j->want_parts = nparts;
  j->pool_size = dc_pool_size(p);
  j->in_order = nthreads <= 1 || j->pool_size == 1 || nparts == 1;
  atomic_store(&j->next_in_order, 0);
  for (int t = 0; t < MAX_PARTS; t++) atomic_store(&j->calls[t], 0);
  dc_pool_run(p, nthreads, nparts, work, j);
  double total = 0;
  int ok = atomic_load(&j->bad) == 0;
  for (int t = 0; t < MAX_PARTS; t++) {
    int calls = atomic_load(&j->calls[t]);
    ok &= t < nparts ? calls == 1 && j->seen[t] == j->run : calls == 0;
    if (t < nparts) total += j->sum[t];
  }
  return ok && (nparts < 1 || total == (double)N * (N - 1) / 2);
}

static job *new_job(void) {
  static job j;
  memset(&j, 0, sizeof j);
  for (int i = 0; i < N; i++) j.data[i] = i; /* sums are exact in double */
  j.slow_part = -1;
  return &j;
}

static void back_to_back(int threads) {
  dc_pool *p = NULL;
  CHECK_OK(dc_pool_create(threads, &p));
  if (!p) return;
  CHECK(dc_pool_size(p) == threads);
  job *j = new_job();
  int good = 0, runs = 5000;
  for (int r = 0; r < runs; r++) good += one_run(p, j, r % threads + 1, 1 + (r * 7) % MAX_PARTS);
  CHECK(good == runs);
  /* clamping: more threads than the pool or than parts, fewer than one; no parts */
  CHECK(one_run(p, j, threads + 3, 5) && one_run(p, j, 4, 2) && one_run(p, j, 0, 3) && one_run(p, j, -2, 7));
  CHECK(one_run(p, j, threads, 0));
  printf("%d thread(s): %d back-to-back runs of 1..%d parts on 1..%d threads, %d correct\n", threads, runs, MAX_PARTS,
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
    good += one_run(p, j, threads, 2 * threads);
  }
  j->slow_ms = 20;
  for (int slow = 0; slow < 2 * threads; slow++, runs++) { /* each part in turn is slow */
    j->slow_part = slow;
    good += one_run(p, j, threads, 2 * threads);
  }
  j->slow_part = -1;
  CHECK(good == runs);
  printf("%d thread(s): %d runs posted to sleeping workers or waiting on a slow part, %d correct\n", threads, runs,
         good);
  sleep_ms(5);
  dc_pool_destroy(p); /* idle: every worker asleep */
}

/* A worker held up in its first part (as a worker the scheduler does not
 * run would be) holds up that part only: the caller runs all the others.
 * With a fixed share per thread it would wait for half of them. */
static void caller_takes_the_rest(void) {
  dc_pool *p = NULL;
  CHECK_OK(dc_pool_create(2, &p));
  if (!p) return;
  job *j = new_job();
  j->slow_ms = 300; /* longer than the caller's 64 parts of 1 ms */
  int nparts = MAX_PARTS, worst = nparts, good = 0, held = 0;
  for (int r = 0; r < 5; r++) {
    j->slow_worker = 1;
    atomic_store(&j->slowed, 0);
    for (int t = 0; t < MAX_THREADS; t++) atomic_store(&j->by_thread[t], 0);
    good += one_run(p, j, 2, nparts);
    int by_caller = atomic_load(&j->by_thread[0]);
    held += atomic_load(&j->slowed);
    if (by_caller < worst) worst = by_caller;
  }
  j->slow_worker = 0;
  CHECK(good == 5);
  CHECK(worst >= nparts - 1);
  printf("5 runs, the worker held up 300 ms in its first part in %d of them: the caller ran at least %d of %d "
         "parts\n", held, worst, nparts);
  dc_pool_destroy(p);
}

/* Part work for the adaptive test: the caller's parts take 20 µs of CPU,
 * a worker's 3 ms, as if the scheduler had preempted it for a time slice. */
typedef struct {
  atomic_int by_worker;
} straggle_job;

static void spin_us(long us) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void straggle(void *ctx, int64_t part, int64_t nparts, int thread) {
  straggle_job *j = ctx;
  if (thread > 0) {
    atomic_fetch_add(&j->by_worker, 1);
    sleep_ms(3);
  } else {
    spin_us(20);
  }
}

/* Runs until the pool has begun `spells` solo spells (or 400 runs). */
static int runs_until_spell(dc_pool *p, straggle_job *j, long spells) {
  int runs = 0;
  while (dc_pool_solo_spells(p) < spells && runs < 400) {
    dc_pool_run(p, 2, 8, straggle, j);
    runs++;
  }
  return runs;
}

static void adaptive(void) {
  dc_pool *p = NULL, *plain = NULL;
  CHECK_OK(dc_pool_create(2, &p));
  CHECK_OK(dc_pool_create(2, &plain));
  if (!p || !plain) return;
  dc_pool_set_adaptive(p, DC_POOL_ADAPT_STRAGGLE); /* the load mode would see this machine's other work */
  straggle_job j = {0};
  int runs = runs_until_spell(p, &j, 1);
  CHECK(dc_pool_solo_spells(p) == 1);
  atomic_store(&j.by_worker, 0);
  for (int r = 0; r < 20; r++) dc_pool_run(p, 2, 8, straggle, &j); /* well inside the 50 ms spell */
  CHECK(atomic_load(&j.by_worker) == 0);
  sleep_ms(60); /* the spell is over: measured again, still straggling, a second spell */
  int again = runs_until_spell(p, &j, 2);
  CHECK(dc_pool_solo_spells(p) == 2 && atomic_load(&j.by_worker) > 0);
  for (int r = 0; r < 20; r++) dc_pool_run(plain, 2, 8, straggle, &j);
  CHECK(dc_pool_solo_spells(plain) == 0);
  printf("adaptive pool: a worker holding up the caller on every part started a solo spell after %d runs, the next "
         "20 runs used the caller alone, and after the spell %d more runs started another; a plain pool never "
         "does\n", runs, again);
  dc_pool_destroy(p);
  dc_pool_destroy(plain);
}

/* DC_POOL_ADAPT_LOAD: with every CPU held by a busy thread of this test,
 * runs are not split (the worker takes no part); once they stop and the
 * next look at the machine comes (20 ms), runs split again, unless other
 * work on this machine holds the cores (then that is only reported). */
static atomic_int spinning;
static void *busy(void *arg) {
  (void)arg;
  while (atomic_load(&spinning)) continue;
  return NULL;
}

static void load_mode(void) {
  dc_pool *p = NULL;
  CHECK_OK(dc_pool_create(2, &p));
  if (!p) return;
  dc_pool_set_adaptive(p, DC_POOL_ADAPT_LOAD);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  pthread_t th[64];
  int n = cpus < 64 ? (int)cpus : 64;
  atomic_store(&spinning, 1);
  for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, busy, NULL);
  sleep_ms(30); /* the next look sees them */
  straggle_job j = {0};
  for (int r = 0; r < 20; r++) dc_pool_run(p, 2, 8, straggle, &j);
  int crowded_by_worker = atomic_load(&j.by_worker);
  atomic_store(&spinning, 0);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  CHECK(crowded_by_worker == 0);
  sleep_ms(30);
  atomic_store(&j.by_worker, 0);
  for (int r = 0; r < 20; r++) dc_pool_run(p, 2, 8, straggle, &j);
  printf("load mode: with %d busy threads on %ld CPUs no run was split; without them the worker took %d of 160 "
         "parts%s\n", n, cpus, atomic_load(&j.by_worker),
         atomic_load(&j.by_worker) ? "" : " (other work on this machine holds the cores)");
  dc_pool_destroy(p);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  for (int t = 1; t <= MAX_THREADS; t++) back_to_back(t);
  for (int t = 1; t <= MAX_THREADS; t++) sleepers(t);
  caller_takes_the_rest();
  adaptive();
  load_mode();
  for (int t = 1; t <= MAX_THREADS; t++) { /* destroy before the workers ever waited, or while they spin */
    dc_pool *p = NULL;
    CHECK_OK(dc_pool_create(t, &p));
    dc_pool_destroy(p);
  }
  printf("create + destroy at once on 1..%d threads: no hang\n", MAX_THREADS);
  return tu_finish();
}
