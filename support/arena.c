/* arena.c — bump allocation in chunks; everything is freed at once. */
#include "support.h"

#include <string.h>

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk;

struct dc_arena {
  chunk *head;
};

dc_arena *dc_arena_create(void) { return dc_calloc(1, sizeof(dc_arena)); }

void dc_arena_destroy(dc_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    dc_free(c);
  }
  dc_free(a);
}

void *dc_arena_alloc(dc_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    chunk *nc = dc_malloc(sizeof(chunk) + cap);
    if (!nc) return NULL;
    nc->next = a->head;
    nc->used = 0;
    nc->cap = cap;
    a->head = c = nc;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

char *dc_arena_strdup(dc_arena *a, const char *s) {
  size_t n = strlen(s);
  char *d = dc_arena_alloc(a, n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

char *dc_arena_printf(dc_arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *d = dc_arena_alloc(a, (size_t)n + 1);
  if (!d) return NULL;
  va_start(ap, fmt);
  vsnprintf(d, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return d;
}
