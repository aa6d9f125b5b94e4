/* progress.c — see progress.h. */
#include "support/progress.h"

#include <stddef.h>
#include <string.h>

static int on(const dc_progress *p) { return p && p->fn; }

void dc_progress_stage(const dc_progress *p, const char *stage) {
  if (!on(p)) return;
  dc_progress_event e = {.stage = stage};
  p->fn(p->ctx, &e);
}

void dc_progress_pause(const dc_progress *p) {
  if (!on(p)) return;
  dc_progress_event e = {.stage = NULL};
  p->fn(p->ctx, &e);
}

void dc_progress_count_begin(dc_progress_counter *c, const dc_progress *p, const char *stage, int64_t total,
                             int bytes) {
  memset(c, 0, sizeof *c);
  c->p = p;
  c->e = (dc_progress_event){.stage = stage, .total = total, .bytes = bytes};
  pthread_mutex_init(&c->lock, NULL);
  if (on(p)) p->fn(p->ctx, &c->e);
}

void dc_progress_count_add(dc_progress_counter *c, int64_t n, int64_t cached) {
  if (!on(c->p)) return;
  pthread_mutex_lock(&c->lock);
  c->e.done += n;
  c->e.cached += cached;
  dc_progress_event e = c->e; /* the callback gets a copy: it may keep nothing of ours */
  c->p->fn(c->p->ctx, &e);
  pthread_mutex_unlock(&c->lock);
}

void dc_progress_count_end(dc_progress_counter *c) { pthread_mutex_destroy(&c->lock); }
