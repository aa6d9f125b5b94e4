/* status.c — errors as values.  A status is one heap message plus a code.
 * If even the status cannot be allocated we return a static out-of-memory
 * status, so an error is never lost (freeing it is a no-op). */
#include "support.h"

#include <stdlib.h>
#include <string.h>

struct dc_status {
  dc_status_code code;
  char *message;
};

static dc_status oom_status = {DC_ERR_NOMEM, "out of memory"};

dc_status *dc_error_v(dc_status_code code, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  /* Status objects use plain malloc: reporting an injected allocation
   * failure must not itself fail. */
  dc_status *st = malloc(sizeof *st);
  char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (!st || !msg) {
    free(st);
    free(msg);
    return &oom_status;
  }
  vsnprintf(msg, (size_t)n + 1, fmt, ap);
  st->code = code;
  st->message = msg;
  return st;
}

dc_status *dc_error(dc_status_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dc_status *st = dc_error_v(code, fmt, ap);
  va_end(ap);
  return st;
}

dc_status *dc_status_annotate(dc_status *st, const char *fmt, ...) {
  if (!st || st == &oom_status) return st;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return st;
  size_t old = strlen(st->message);
  char *msg = malloc((size_t)n + 2 + old + 1);
  if (!msg) return st;
  va_start(ap, fmt);
  vsnprintf(msg, (size_t)n + 1, fmt, ap);
  va_end(ap);
  memcpy(msg + n, ": ", 2);
  memcpy(msg + n + 2, st->message, old + 1);
  free(st->message);
  st->message = msg;
  return st;
}

const char *dc_status_message(const dc_status *st) { return st ? st->message : "ok"; }
dc_status_code dc_status_code_of(const dc_status *st) { return st ? st->code : DC_OK; }

void dc_status_free(dc_status *st) {
  if (!st || st == &oom_status) return;
  free(st->message);
  free(st);
}
