/* buf.c — a growable byte buffer for writers and a bounds-checked reader for
 * parsers of untrusted bytes.  Both are little-endian by definition. */
#include "support.h"

#include <string.h>

void dc_buf_init(dc_buf *b) { memset(b, 0, sizeof *b); }
void dc_buf_deinit(dc_buf *b) {
  dc_free(b->data);
  memset(b, 0, sizeof *b);
}

void dc_buf_append(dc_buf *b, const void *p, size_t n) {
  if (b->failed || n == 0) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    uint8_t *d = dc_realloc(b->data, cap);
    if (!d) {
      b->failed = 1;
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

void dc_buf_printf(dc_buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->failed = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    dc_buf_append(b, small, (size_t)n);
    return;
  }
  char *big = dc_malloc((size_t)n + 1);
  if (!big) {
    b->failed = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  dc_buf_append(b, big, (size_t)n);
  dc_free(big);
}

void dc_buf_u8(dc_buf *b, uint8_t v) { dc_buf_append(b, &v, 1); }
void dc_buf_json_string(dc_buf *b, const char *s) {
  dc_buf_u8(b, '"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') dc_buf_printf(b, "\\%c", c);
    else if (c < 0x20) dc_buf_printf(b, "\\u%04x", c);
    else dc_buf_u8(b, c);
  }
  dc_buf_u8(b, '"');
}
void dc_buf_u32(dc_buf *b, uint32_t v) {
  uint8_t x[4];
  for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
  dc_buf_append(b, x, 4);
}
void dc_buf_u64(dc_buf *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
  dc_buf_append(b, x, 8);
}
void dc_buf_i64(dc_buf *b, int64_t v) { dc_buf_u64(b, (uint64_t)v); }
void dc_buf_f64(dc_buf *b, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  dc_buf_u64(b, u);
}
void dc_buf_str(dc_buf *b, const char *s) {
  size_t n = strlen(s);
  dc_buf_u32(b, (uint32_t)n);
  dc_buf_append(b, s, n);
}

dc_status *dc_buf_status(const dc_buf *b, const char *what) {
  return b->failed ? dc_nomem(what) : NULL;
}

void dc_reader_init(dc_reader *r, const void *data, size_t size, const char *what) {
  r->data = data;
  r->size = size;
  r->pos = 0;
  r->what = what;
  r->err = NULL;
}

void dc_reader_fail(dc_reader *r, const char *fmt, ...) {
  if (r->err) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->err = dc_error(DC_ERR_FORMAT, "%s: at byte %zu: %s", r->what, r->pos, msg);
}

const void *dc_read_bytes(dc_reader *r, size_t n) {
  if (r->err) return NULL;
  if (n > r->size - r->pos) {
    dc_reader_fail(r, "needs %zu more bytes but only %zu remain (truncated?)", n, r->size - r->pos);
    return NULL;
  }
  const void *p = r->data + r->pos;
  r->pos += n;
  return p;
}

static uint64_t read_le(dc_reader *r, int n) {
  const uint8_t *p = dc_read_bytes(r, (size_t)n);
  uint64_t v = 0;
  if (!p) return 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

uint8_t dc_read_u8(dc_reader *r) { return (uint8_t)read_le(r, 1); }
uint32_t dc_read_u32(dc_reader *r) { return (uint32_t)read_le(r, 4); }
uint64_t dc_read_u64(dc_reader *r) { return read_le(r, 8); }
int64_t dc_read_i64(dc_reader *r) { return (int64_t)read_le(r, 8); }
double dc_read_f64(dc_reader *r) {
  uint64_t u = read_le(r, 8);
  double d;
  memcpy(&d, &u, 8);
  return d;
}

char *dc_read_str(dc_reader *r, dc_arena *a, uint32_t max_len) {
  uint32_t n = dc_read_u32(r);
  if (r->err) return NULL;
  if (n > max_len) {
    dc_reader_fail(r, "string length %u exceeds the limit %u", n, max_len);
    return NULL;
  }
  const char *p = dc_read_bytes(r, n);
  if (!p) return NULL;
  if (memchr(p, 0, n)) {
    dc_reader_fail(r, "string contains a NUL byte");
    return NULL;
  }
  char *s = a ? dc_arena_alloc(a, (size_t)n + 1) : dc_malloc((size_t)n + 1);
  if (!s) {
    if (!r->err) r->err = dc_nomem("reading a string");
    return NULL;
  }
  memcpy(s, p, n);
  s[n] = 0;
  return s;
}
