/* support.h — the small runtime every diffc module stands on: status values,
 * an injectable allocator (with failure injection for tests), a bump arena,
 * a growable byte buffer, a bounds-checked byte reader, and file helpers
 * (mmap, read-all, write-to-temp-then-rename).
 *
 * Errors are values: a function that can fail returns dc_status* (NULL means
 * success).  A status owns one message that names the file, the key or
 * tensor, what was expected and what was found.  Callers add context on the
 * way up with dc_status_annotate ("while loading X: ..."). */
#ifndef DC_SUPPORT_H
#define DC_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- status (support/status.c) ---------------------------------------- */
typedef enum {
  DC_OK = 0,
  DC_ERR_IO,          /* a file could not be opened, read or written */
  DC_ERR_FORMAT,      /* input bytes or text are malformed */
  DC_ERR_UNSUPPORTED, /* well-formed, but diffc does not handle it yet */
  DC_ERR_MISMATCH,    /* a shape, dtype, name or hash differs from what was expected */
  DC_ERR_ARGUMENT,    /* a bad command-line or API argument */
  DC_ERR_NOMEM,       /* an allocation failed */
  DC_ERR_INTERNAL,    /* one of our own invariants failed */
} dc_status_code;

typedef struct dc_status dc_status;

dc_status *dc_error(dc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
dc_status *dc_error_v(dc_status_code code, const char *fmt, va_list ap);
/* Prefixes the message with context ("ctx: old message"); returns st.
 * Passing NULL returns NULL, so it can wrap any call. */
dc_status *dc_status_annotate(dc_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *dc_status_message(const dc_status *st);
dc_status_code dc_status_code_of(const dc_status *st);
void dc_status_free(dc_status *st);

#define DC_TRY(expr)                    \
  do {                                  \
    dc_status *dc_try_st_ = (expr);     \
    if (dc_try_st_) return dc_try_st_;  \
  } while (0)

/* ---- allocator (support/alloc.c) --------------------------------------- */
/* Every host allocation in diffc goes through these.  Tests can make the Nth
 * allocation fail (dc_alloc_fail_after) to check that each failure yields a
 * clean error and no leak. */
void *dc_malloc(size_t n);
void *dc_calloc(size_t count, size_t size);
void *dc_realloc(void *p, size_t n);
void dc_free(void *p);
char *dc_strdup(const char *s);
char *dc_strndup(const char *s, size_t n);
char *dc_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dc_alloc_fail_after(long n); /* -1 disables; 0 fails the next one */
long dc_alloc_count(void);         /* allocations attempted so far (sizes a failure sweep) */
dc_status *dc_nomem(const char *what);

/* Checked size arithmetic: return 0 on overflow. */
int dc_mul_overflows(uint64_t a, uint64_t b, uint64_t *out);
int dc_add_overflows(uint64_t a, uint64_t b, uint64_t *out);

/* ---- arena (support/arena.c) ------------------------------------------- */
/* A bump allocator that owns everything of one compilation (the IR). */
typedef struct dc_arena dc_arena;
dc_arena *dc_arena_create(void);
void dc_arena_destroy(dc_arena *a);
void *dc_arena_alloc(dc_arena *a, size_t n); /* zeroed, 16-byte aligned; NULL on OOM */
char *dc_arena_strdup(dc_arena *a, const char *s);
char *dc_arena_printf(dc_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- growable buffer (support/buf.c) ----------------------------------- */
typedef struct {
  uint8_t *data;
  size_t len, cap;
  int failed; /* sticky: set when an allocation failed; data is then unusable */
} dc_buf;
void dc_buf_init(dc_buf *b);
void dc_buf_deinit(dc_buf *b);
void dc_buf_append(dc_buf *b, const void *p, size_t n);
void dc_buf_printf(dc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dc_buf_u8(dc_buf *b, uint8_t v);
/* s as a JSON string, quoted, with '"', '\\' and control characters escaped. */
void dc_buf_json_string(dc_buf *b, const char *s);
void dc_buf_u32(dc_buf *b, uint32_t v); /* little-endian */
void dc_buf_u64(dc_buf *b, uint64_t v);
void dc_buf_i64(dc_buf *b, int64_t v);
void dc_buf_f64(dc_buf *b, double v);
void dc_buf_str(dc_buf *b, const char *s); /* u32 length + bytes (no NUL) */
/* Returns a status if the buffer ever failed to grow. */
dc_status *dc_buf_status(const dc_buf *b, const char *what);

/* ---- bounds-checked reader (support/buf.c) ----------------------------- */
/* Every read checks the remaining length; the first failure sticks and the
 * message names `what` and the byte offset. */
typedef struct {
  const uint8_t *data;
  size_t size, pos;
  const char *what; /* e.g. "unet.dplan: section SCHD" */
  dc_status *err;
} dc_reader;
void dc_reader_init(dc_reader *r, const void *data, size_t size, const char *what);
uint8_t dc_read_u8(dc_reader *r);
uint32_t dc_read_u32(dc_reader *r);
uint64_t dc_read_u64(dc_reader *r);
int64_t dc_read_i64(dc_reader *r);
double dc_read_f64(dc_reader *r);
/* Reads a length-prefixed string into a fresh dc_malloc'd NUL-terminated copy
 * (or into the arena when a != NULL).  Rejects lengths above max_len. */
char *dc_read_str(dc_reader *r, dc_arena *a, uint32_t max_len);
const void *dc_read_bytes(dc_reader *r, size_t n);
void dc_reader_fail(dc_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- files (support/fileio.c) ------------------------------------------ */
typedef struct {
  const uint8_t *data; /* NULL for an empty file */
  size_t size;
  char *path;
} dc_mapped_file;
dc_status *dc_file_map(const char *path, dc_mapped_file *out);
void dc_file_unmap(dc_mapped_file *f);
/* Lets the kernel drop the pages wholly inside [offset, offset + bytes) of
 * the mapping from this process (they stay in the page cache and fault back
 * in if read again): reading a large file once, e.g. to hash it, then does
 * not keep it all in the resident set. */
void dc_file_release(const dc_mapped_file *f, uint64_t offset, uint64_t bytes);
/* Reads a whole file, NUL-terminated; *out must be dc_free'd. */
dc_status *dc_file_read_all(const char *path, char **out, size_t *out_size);
int dc_file_exists(const char *path);
int dc_dir_exists(const char *path);
char *dc_path_join(const char *dir, const char *name); /* dc_malloc'd */
/* path made absolute without resolving symlinks (cwd joined in front of a
 * relative one, leading "./" dropped): what a plan records, so that it runs
 * from any folder yet names files as the user laid them out. dc_malloc'd. */
char *dc_path_absolute(const char *path);
/* The folder a path is in ("." for a bare name). dc_malloc'd. */
char *dc_path_parent(const char *path);
/* diffc's cache root, where the kernel cache (codegen/kernel_cache.h) and
 * the calibration profiles (diffrun --calibrate) live: $DIFFC_CACHE_DIR,
 * else $XDG_CACHE_HOME/diffc, else $HOME/.cache/diffc.  dc_malloc'd; NULL
 * when none of the three is set (or memory ran out). */
char *dc_cache_root_dir(void);
/* mkdir -p (mode 0755): 0, or the errno of the first level that could not
 * be made (ENOTDIR when a level exists but is not a folder). */
int dc_make_dirs(const char *dir);

/* Writes go to "<path>.tmp.<pid>" and are renamed into place on commit, so a
 * crash or error never leaves a half-written file under the final name. */
typedef struct {
  FILE *fp;
  char *path, *tmp_path;
  int failed;
} dc_atomic_file;
dc_status *dc_atomic_open(const char *path, dc_atomic_file *out);
void dc_atomic_write(dc_atomic_file *f, const void *p, size_t n);
dc_status *dc_atomic_commit(dc_atomic_file *f); /* always closes f */
void dc_atomic_abort(dc_atomic_file *f);
/* The whole file at once: open, write, commit. */
dc_status *dc_atomic_write_file(const char *path, const void *data, size_t n);

/* ---- misc -------------------------------------------------------------- */
double dc_now_seconds(void);
/* "1.5 MiB" style; writes into buf (>= 32 bytes) and returns it. */
const char *dc_format_bytes(uint64_t bytes, char *buf, size_t cap);
/* "4GiB", "512 MiB", "3GB", "1e9", "123456": bytes as accelerate's
 * max_memory parses them (KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB
 * of 1024, B or no unit plain bytes).  Returns 0 and sets *out, or -1. */
int dc_parse_bytes(const char *s, uint64_t *out);
uint64_t dc_hash64(const void *p, size_t n); /* xxHash64, seed 0 */

/* The bits of a float and back, without aliasing games. */
static inline uint32_t dc_f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
static inline float dc_f32_from_bits(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

#endif
