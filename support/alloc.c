/* alloc.c — the one place host memory is allocated.  A countdown lets tests
 * fail the Nth allocation (SQLite/Lua style) to prove every failure path
 * returns a clean error. */
#include "support.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Atomic: the compiler allocates from several threads (kernel codegen). */
static _Atomic long fail_countdown = -1;
static _Atomic long allocations;

void dc_alloc_fail_after(long n) { fail_countdown = n; }
long dc_alloc_count(void) { return allocations; }

static int should_fail(void) {
  allocations++;
  long c = fail_countdown;
  while (c > 0 && !atomic_compare_exchange_weak(&fail_countdown, &c, c - 1)) {
  }
  return c == 0; /* keeps failing until reset */
}

void *dc_malloc(size_t n) { return should_fail() ? NULL : malloc(n ? n : 1); }
void *dc_calloc(size_t count, size_t size) {
  return should_fail() ? NULL : calloc(count ? count : 1, size ? size : 1);
}
void *dc_realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n ? n : 1); }
void dc_free(void *p) { free(p); }

char *dc_strndup(const char *s, size_t n) {
  char *d = dc_malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}
char *dc_strdup(const char *s) { return dc_strndup(s, strlen(s)); }

char *dc_asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *d = dc_malloc((size_t)n + 1);
  if (!d) return NULL;
  va_start(ap, fmt);
  vsnprintf(d, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return d;
}

dc_status *dc_nomem(const char *what) {
  return dc_error(DC_ERR_NOMEM, "out of memory while %s", what);
}

int dc_mul_overflows(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}
int dc_add_overflows(uint64_t a, uint64_t b, uint64_t *out) {
  return __builtin_add_overflow(a, b, out);
}
