/* progress.h — how a long compile tells its caller where it is.
 *
 * The driver and the code generators report stages in order ("building
 * graph", "passes", "kernels", "writing weights", "writing plan") to a
 * callback the caller gives (dc_compile_options.progress); diffc draws them
 * as one line on a terminal.  A stage with a count ("kernels": distinct
 * kernels, or kernel x arch compiles for CUDA; "writing weights": bytes)
 * reports 0/total first, then every step, ending at total/total.
 *
 * Kernels compile on a thread pool, so a count goes through a
 * dc_progress_counter: its mutex makes the callbacks one at a time and the
 * counts monotonic, whichever thread finished a step.  The callback is
 * called for every step (a test sees them all); a caller drawing a
 * terminal line throttles it itself.
 *
 * Other output: before the library prints a line to stderr while a stage is
 * shown (a note, a -v line, an IR dump), it calls dc_progress_pause, an
 * event with stage NULL, so the caller clears its line first and the two
 * never share a line. */
#ifndef DC_PROGRESS_H
#define DC_PROGRESS_H

#include <pthread.h>
#include <stdint.h>

typedef struct {
  const char *stage;   /* NULL: clear the progress line, other output follows */
  int64_t done, total; /* steps so far and in all; total 0: a stage without a count */
  int64_t cached;      /* "kernels": of done, how many came from the kernel cache */
  int bytes;           /* done and total count bytes */
} dc_progress_event;

typedef void (*dc_progress_fn)(void *ctx, const dc_progress_event *e);

/* Where events go; a NULL sink or fn drops them. */
typedef struct {
  dc_progress_fn fn;
  void *ctx;
} dc_progress;

/* A stage without a count. */
void dc_progress_stage(const dc_progress *p, const char *stage);
void dc_progress_pause(const dc_progress *p);

typedef struct {
  const dc_progress *p;
  pthread_mutex_t lock;
  dc_progress_event e;
} dc_progress_counter;

/* Starts a counted stage and reports 0/total. */
void dc_progress_count_begin(dc_progress_counter *c, const dc_progress *p, const char *stage, int64_t total,
                             int bytes);
/* n more steps done (cached of them from a cache), from any thread. */
void dc_progress_count_add(dc_progress_counter *c, int64_t n, int64_t cached);
void dc_progress_count_end(dc_progress_counter *c);

#endif
