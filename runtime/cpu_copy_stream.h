/* cpu_copy_stream.h — the CPU executor's model of a GPU copy engine: a
 * second thread that runs a plan's upload steps (pass offload) while the
 * calling thread, the compute stream, runs the kernels.
 *
 * The ordering is a GPU's: an upload starts only once the compute stream
 * has finished every step before it in the schedule (so the arena bytes it
 * overwrites are free: liveness placed it there), and a kernel waits only
 * for the uploads it reads.  Prefetch is then real overlap: the pass moved
 * uploads earlier, and their copies run while the steps in between compute.
 * A copy reads its weight from the host block (pinned) or from its file
 * through the bounce buffer (on-demand; host_weights.h).  A failed read
 * stops both streams and is the run's error.  A mutex and a condition
 * variable stand in for CUDA events. */
#ifndef DC_CPU_COPY_STREAM_H
#define DC_CPU_COPY_STREAM_H

#include <pthread.h>

#include "diffrun.h"
#include "host_weights.h"
#include "support/threadpool.h"

typedef struct {
  const char *path;            /* the plan, for messages */
  const dc_module *m;
  dc_host_weights *host;
  uint8_t *const *arena;       /* per device: its arena (values at arena + offset) */
  double *step_seconds;        /* NULL, or per node: each upload's time is added */
  drt_trace_event *trace;      /* NULL, or the run's step slots: upload s fills trace[s - first] */
  dc_pool *pool;               /* the compute stream's pool (told while a copy runs), or NULL */
  int32_t first, end;          /* the run's steps */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int32_t computed;            /* the compute stream has finished every step < computed */
  int32_t copied;              /* every upload < copied is in the arena */
  uint64_t top[DC_MAX_DEVICES]; /* highest byte of each arena the uploads occupied */
  int stop;                    /* the compute stream failed or ended: stop copying */
  dc_status *err;              /* the copy stream failed (a weight read): the compute stream stops */
} dc_copy_stream;

/* Starts the thread for the uploads among steps [first, end) (the run's:
 * all, or one phase); it copies nothing until dc_copy_stream_may_start.
 * On failure nothing is left to stop. */
dc_status *dc_copy_stream_start(dc_copy_stream *c, const char *path, const dc_module *m, dc_host_weights *host,
                                uint8_t *const *arena, double *step_seconds, drt_trace_event *trace, int32_t first,
                                int32_t end, dc_pool *pool);

/* The compute stream has reached upload step s: every step before it is
 * done, so the upload may overwrite its place. */
void dc_copy_stream_may_start(dc_copy_stream *c, int32_t s);

/* Blocks until every upload node n reads is in its place.  When the copy
 * stream failed instead, its error is handed over (the run's error). */
dc_status *dc_copy_stream_wait(dc_copy_stream *c, const dc_node *n);

/* Ends the run: when st (the compute stream's status) is NULL, lets the
 * copy stream finish every upload of the run (some may have no reader in
 * it: a phase's held weights); else stops it at once.  Joins the thread,
 * raises arena_top[d] to what the uploads occupied, and returns the run's
 * status: st, else the copy stream's error. */
dc_status *dc_copy_stream_stop(dc_copy_stream *c, dc_status *st, uint64_t *arena_top);

#endif
