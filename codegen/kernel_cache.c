/* kernel_cache.c — see kernel_cache.h. */
#include "kernel_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAGIC "DCKCACHE"
#define ENTRY_FORMAT 1u
#define HEADER_SIZE 40u

char *dc_kcache_default_dir(void) { return dc_cache_root_dir(); }

static void set_warning(dc_kcache *c, char *msg) {
  pthread_mutex_lock(&c->lock);
  if (!c->warning) c->warning = msg, msg = NULL;
  pthread_mutex_unlock(&c->lock);
  dc_free(msg);
}

void dc_kernel_image_deinit(dc_kernel_image *k) {
  dc_buf_deinit(&k->image);
  dc_free(k->log);
  k->log = NULL;
}

dc_status *dc_kcache_open(const char *dir, int disabled, const char *kind, dc_kcache *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_init(&out->lock, NULL);
  snprintf(out->kind, sizeof out->kind, "%s", kind);
  if (disabled) return NULL;
  char *d = dir ? dc_strdup(dir) : dc_kcache_default_dir();
  if (!d) {
    if (dir) return dc_nomem("opening the kernel cache");
    out->warning = dc_strdup("no kernel cache: none of DIFFC_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
    return NULL;
  }
  int err = dc_make_dirs(d);
  if (err) {
    out->warning = dc_asprintf("kernel cache %s cannot be created (%s); compiling without it", d, strerror(err));
    dc_free(d);
    return NULL;
  }
  out->dir = d;
  return NULL;
}

void dc_kcache_close(dc_kcache *c) {
  dc_free(c->dir);
  dc_free(c->warning);
  pthread_mutex_destroy(&c->lock);
  memset(c, 0, sizeof *c);
}

char *dc_kcache_entry_path(const dc_kcache *c, uint64_t key) {
  return c->dir ? dc_asprintf("%s/%s-%016llx.bin", c->dir, c->kind, (unsigned long long)key) : NULL;
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Checks the header against key and the file size; returns the payload
 * size, or 0 when the entry is not valid. */
static uint64_t check_header(const uint8_t *d, size_t size, uint64_t key) {
  if (size < HEADER_SIZE || memcmp(d, MAGIC, 8) != 0 || get_le(d + 8, 4) != ENTRY_FORMAT) return 0;
  uint64_t payload = get_le(d + 24, 8);
  if (get_le(d + 16, 8) != key || payload != size - HEADER_SIZE) return 0;
  if (dc_hash64(d + HEADER_SIZE, payload) != get_le(d + 32, 8)) return 0;
  return payload;
}

/* Splits a verified payload into log and image; 0 on success. */
static int parse_payload(const uint8_t *p, uint64_t n, dc_kernel_image *out) {
  if (n < 16) return -1;
  uint64_t log_size = get_le(p, 8);
  if (log_size > n - 16) return -1;
  uint64_t image_size = get_le(p + 8 + log_size, 8);
  if (image_size == 0 || image_size != n - 16 - log_size) return -1;
  if (log_size) {
    out->log = dc_strndup((const char *)p + 8, log_size);
    if (!out->log) return -1;
  }
  dc_buf_append(&out->image, p + 16 + log_size, image_size);
  return out->image.failed ? -1 : 0;
}

static void count(dc_kcache *c, int *counter) {
  pthread_mutex_lock(&c->lock);
  (*counter)++;
  pthread_mutex_unlock(&c->lock);
}

int dc_kcache_get(dc_kcache *c, uint64_t key, dc_kernel_image *out) {
  memset(out, 0, sizeof *out);
  dc_buf_init(&out->image);
  char *path = dc_kcache_entry_path(c, key), *data = NULL;
  size_t size = 0;
  if (!path || !dc_file_exists(path)) {
    dc_free(path);
    if (c->dir) count(c, &c->misses);
    return 0;
  }
  dc_status *st = dc_file_read_all(path, &data, &size);
  dc_free(path);
  uint64_t payload = st ? 0 : check_header((const uint8_t *)data, size, key);
  int ok = payload && parse_payload((const uint8_t *)data + HEADER_SIZE, payload, out) == 0;
  dc_status_free(st);
  dc_free(data);
  if (!ok) dc_kernel_image_deinit(out);
  count(c, ok ? &c->hits : &c->rejected);
  return ok;
}

static void put_le(dc_buf *b, uint64_t v) { dc_buf_u64(b, v); }

void dc_kcache_put(dc_kcache *c, uint64_t key, const dc_kernel_image *o) {
  pthread_mutex_lock(&c->lock);
  int read_only = c->read_only;
  pthread_mutex_unlock(&c->lock);
  char *path = read_only ? NULL : dc_kcache_entry_path(c, key);
  if (!path) return;
  size_t log_size = o->log ? strlen(o->log) : 0;
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_append(&b, MAGIC, 8);
  dc_buf_u32(&b, ENTRY_FORMAT);
  dc_buf_u32(&b, 0);
  put_le(&b, key);
  put_le(&b, 16 + log_size + o->image.len);
  put_le(&b, 0); /* the payload hash, filled in below */
  put_le(&b, log_size);
  dc_buf_append(&b, o->log, log_size);
  put_le(&b, o->image.len);
  dc_buf_append(&b, o->image.data, o->image.len);
  dc_status *st = dc_buf_status(&b, "writing a kernel cache entry");
  if (!st) {
    uint64_t h = dc_hash64(b.data + HEADER_SIZE, b.len - HEADER_SIZE);
    for (int i = 0; i < 8; i++) b.data[32 + i] = (uint8_t)(h >> (8 * i));
    dc_atomic_file f;
    st = dc_atomic_open(path, &f);
    if (!st) {
      dc_atomic_write(&f, b.data, b.len);
      st = dc_atomic_commit(&f);
    }
  }
  dc_buf_deinit(&b);
  dc_free(path);
  if (!st) return count(c, &c->written);
  set_warning(
      c, dc_asprintf("kernel cache %s cannot be written (%s); compiling without it", c->dir, dc_status_message(st)));
  dc_status_free(st);
  pthread_mutex_lock(&c->lock);
  c->read_only = 1; /* stop trying: every later write would fail the same way */
  pthread_mutex_unlock(&c->lock);
}
