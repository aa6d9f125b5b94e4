/* threadpool.c — a fork/join pool whose runs are split into parts that the
 * threads claim as they get to them.  A run of n parts posts to the workers
 * it may use and then claims parts itself; every thread takes the next
 * unclaimed part from one atomic word until none is left, and the caller
 * returns once every part has finished.  So a worker that the scheduler has
 * not run yet costs nothing: the caller (and the other workers) take its
 * share, and nobody waits for a thread that has not started a part (issue
 * 11: with a static split, a descheduled worker's share made the caller wait
 * a whole time slice, and 2 threads on a busy machine ran slower than 1).
 *
 * Each worker has its own futex word (slot.gen) that the caller bumps to
 * wake it; the caller waits on `done`, which the workers count up.  Every
 * wait spins for at most SPIN_NS (kernels are launched back to back, so a
 * worker usually finds the next run within that) and then sleeps in the
 * kernel.  The spin is bounded in time, not in pause instructions, because a
 * pause costs 10 cycles on one CPU and 140 on another; and it is short,
 * because on a busy machine a spinning thread takes the core the thread it
 * waits for needs.
 *
 * The claim word holds (parts of the current run) << 32 | (next part).  A
 * claim is a compare-and-swap on the whole word, so it takes a part of the
 * run whose parts it saw; fn and ctx are read only after a successful claim
 * and the run cannot end (so the caller cannot overwrite them) before that
 * part is counted in `done`.  A late worker that finds a newer run's word
 * simply takes part in that run, which is as correct as any other thread.
 *
 * Adaptive pools (dc_pool_set_adaptive; diffrun's) also notice when the
 * machine is oversubscribed.  With more runnable threads than cores, the
 * scheduler preempts someone for a time slice (milliseconds, far longer than
 * a part): a worker holding a part, and the caller waits for it; or the
 * caller itself, and the run stalls.  On a machine whose other cores are
 * busy, 2 threads then ran 1.1-1.6x slower than 1.  So the caller measures,
 * per run, its time off the CPU (wall time less its thread CPU time: asleep
 * waiting, or preempted) beyond two of its own parts' time; when over a
 * window of runs that excess is more than STRAGGLE of the runs' time, the
 * pool runs everything on the caller for a spell (SPELL_NS at first,
 * doubling while the next window says the same, up to SPELL_MAX_NS), then
 * measures again.  An ordinary imbalance (the last part) stays under two
 * parts' time and never counts; neither does a run where a worker took
 * every part, since the caller was then not needed.
 *
 * Sleeping without a lost wake-up: a waiter sets its `sleeping` flag and then
 * re-reads the word; a waker changes the word and then reads the flag (both
 * sequentially consistent), so at least one of them sees the other, and
 * FUTEX_WAIT itself refuses to sleep once the word has changed. */
#include "threadpool.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 20000 /* 20 µs: a few kernel launches' gap, far below a scheduler tick */
#define WINDOW 8                  /* split runs per decision */
#define STRAGGLE 0.25             /* share of a window's time lost to preempted workers that goes solo */
#define SPELL_NS 50000000ull      /* the first solo spell: 50 ms */
#define SPELL_MAX_NS 1000000000ull /* the longest: 1 s, so a machine that frees up is noticed soon */
#define LOOK_NS 20000000ull        /* how often the system's runnable count is read: 20 ms */

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
  /* The current run, written before the claim word is published and read
   * by a thread only after it has claimed a part of it. */
  dc_pool_fn fn;
  void *ctx;
  _Atomic uint64_t claim;      /* nparts << 32 | next unclaimed part */
  atomic_uint done;            /* parts of the current run finished */
  atomic_uint caller_sleeping; /* the caller is (about to be) asleep on done */
  atomic_int quit;
  atomic_int siblings;         /* threads of this process outside the pool that run now (the copy stream) */
  /* adaptive mode, the caller's alone */
  int adaptive;
  int window_runs;
  uint64_t window_ns, window_excess_ns;
  uint64_t solo_until_ns, spell_ns;
  long spells;
  uint64_t looked_ns; /* when /proc/stat was last read */
  int crowded;        /* it said other threads hold the cores we would use */
  int cpus;           /* online CPUs */
};

typedef struct {
  dc_pool *p;
  int64_t tid;
} worker_arg;

static void futex_wait(atomic_uint *w, unsigned v) { syscall(SYS_futex, (void *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0); }
static void futex_wake(atomic_uint *w, int n) { syscall(SYS_futex, (void *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0); }

/* CPU time of the calling thread (its time off the CPU shows contention). */
static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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

/* Takes parts of the current run until none is left; returns how many. */
static int take_parts(dc_pool *p, int thread) {
  uint64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
  for (int taken = 0;; taken++) {
    uint32_t nparts = (uint32_t)(v >> 32), part = (uint32_t)v;
    if (part >= nparts) return taken;
    if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel, memory_order_acquire))
      continue; /* v now holds the word another thread left */
    p->fn(p->ctx, part, nparts, thread);
    if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == nparts)
      wake(&p->done, &p->caller_sleeping);
    v = atomic_load_explicit(&p->claim, memory_order_acquire);
  }
}

static void *worker(void *arg) {
  dc_pool *p = ((worker_arg *)arg)->p;
  int thread = (int)((worker_arg *)arg)->tid;
  dc_free(arg);
  slot *s = &p->slots[thread];
  unsigned seen = 0;
  for (;;) {
    wait_change(&s->gen, seen, &s->sleeping);
    seen = atomic_load(&s->gen);
    if (atomic_load(&p->quit)) return NULL;
    take_parts(p, thread);
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

void dc_pool_set_adaptive(dc_pool *p, int modes) {
  p->adaptive = modes;
  p->cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
}

/* The kernel's count of runnable threads on the whole machine (procs_running
 * in /proc/stat), or -1 when it cannot be read. */
static int runnable_threads(void) {
  char buf[4096];
  int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *at = strstr(buf, "procs_running ");
  return at ? atoi(at + 14) : -1;
}

/* Whether threads outside this pool already hold the cores a split run
 * would need: runnable threads that are not ours (the caller and the workers
 * awake now) plus the nthreads we would run exceed the CPUs.  Read every
 * LOOK_NS (a read costs some microseconds); the answer holds until then.
 * This catches a machine busy before a single straggler shows (a small model
 * whose steps are shorter than a scheduler slice). */
static int crowded(dc_pool *p, int nthreads, uint64_t now) {
  if (now - p->looked_ns < LOOK_NS) return p->crowded;
  p->looked_ns = now;
  int running = runnable_threads(), ours = 1 + atomic_load(&p->siblings);
  for (int t = 1; t < p->n; t++) ours += !atomic_load(&p->slots[t].sleeping);
  p->crowded = running >= 0 && running - ours + nthreads > p->cpus;
  return p->crowded;
}

long dc_pool_solo_spells(const dc_pool *p) { return p->spells; }

void dc_pool_sibling_running(dc_pool *p, int delta) {
  if (p) atomic_fetch_add(&p->siblings, delta);
}

/* Adaptive mode: after a split run, counts how long the caller waited
 * beyond two of its own parts' time, and decides at the end of a window. */
static void account(dc_pool *p, uint64_t start, uint64_t claimed, uint64_t end, uint64_t cpu_ns, int taken) {
  if (taken == 0) return; /* a worker took every part: it was running, not preempted */
  uint64_t part_ns = (claimed - start) / (uint64_t)taken, wall = end - start;
  /* the caller's time off the CPU in this run: preempted itself, or asleep
   * waiting for a preempted worker; beyond two parts' time, contention */
  uint64_t off = wall > cpu_ns ? wall - cpu_ns : 0;
  p->window_ns += wall;
  p->window_excess_ns += off > 2 * part_ns ? off - 2 * part_ns : 0;
  if (++p->window_runs < WINDOW) return;
  if ((double)p->window_excess_ns > STRAGGLE * (double)p->window_ns) {
    p->spell_ns = p->spell_ns ? p->spell_ns * 2 : SPELL_NS;
    if (p->spell_ns > SPELL_MAX_NS) p->spell_ns = SPELL_MAX_NS;
    p->solo_until_ns = end + p->spell_ns;
    p->spells++;
  } else {
    p->spell_ns = 0;
  }
  p->window_runs = 0;
  p->window_ns = p->window_excess_ns = 0;
}

void dc_pool_run(dc_pool *p, int nthreads, int64_t nparts, dc_pool_fn fn, void *ctx) {
  if (nparts < 1) return;
  if (nparts > DC_POOL_MAX_PARTS) nparts = DC_POOL_MAX_PARTS;
  if (nthreads > p->n) nthreads = p->n;
  if (nthreads > nparts) nthreads = (int)nparts;
  uint64_t start = nthreads > 1 && p->adaptive ? now_ns() : 0, cpu0 = start ? thread_cpu_ns() : 0;
  if (start && (start < p->solo_until_ns || ((p->adaptive & DC_POOL_ADAPT_LOAD) && crowded(p, nthreads, start)))) {
    /* a solo spell, or other work holds the cores: the machine is busy.  The
     * work runs as one part: cut into parts for threads that will not help,
     * a kernel would pay its per-part setup (packing a panel) for nothing */
    fn(ctx, 0, 1, 0);
    return;
  }
  if (nthreads <= 1) {
    for (int64_t part = 0; part < nparts; part++) fn(ctx, part, nparts, 0);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_store_explicit(&p->claim, (uint64_t)nparts << 32, memory_order_release);
  for (int t = 1; t < nthreads; t++) post(p, t);
  int taken = take_parts(p, 0);
  uint64_t claimed = start ? now_ns() : 0;
  for (unsigned d; (d = atomic_load(&p->done)) != (unsigned)nparts;) wait_change(&p->done, d, &p->caller_sleeping);
  if (start && (p->adaptive & DC_POOL_ADAPT_STRAGGLE)) account(p, start, claimed, now_ns(), thread_cpu_ns() - cpu0, taken);
}
