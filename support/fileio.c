/* fileio.c — mmap for weights (never copied), read-all for small text files,
 * and atomic writes (temp name + fsync + rename) for every output we make. */
#include "support.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

dc_status *dc_file_map(const char *path, dc_mapped_file *out) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return dc_error(DC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return dc_error(DC_ERR_IO, "%s: not a regular file", path);
  }
  out->size = (size_t)st.st_size;
  if (out->size > 0) {
    void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return dc_error(DC_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, out->size, strerror(e));
    }
    out->data = p;
  }
  close(fd);
  out->path = dc_strdup(path);
  if (!out->path) {
    dc_file_unmap(out);
    return dc_nomem("mapping a file");
  }
  return NULL;
}

void dc_file_release(const dc_mapped_file *f, uint64_t offset, uint64_t bytes) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (!f->data || offset > f->size || bytes > f->size - offset || !page) return;
  uint64_t start = (offset + page - 1) / page * page, end = (offset + bytes) / page * page;
  /* the mapping is PROT_READ and MAP_PRIVATE: no page of it was ever written,
   * so dropping one loses nothing; a later read faults the file back in */
  if (end > start) (void)madvise((void *)(f->data + start), (size_t)(end - start), MADV_DONTNEED);
}

void dc_file_unmap(dc_mapped_file *f) {
  if (f->data) munmap((void *)f->data, f->size);
  dc_free(f->path);
  memset(f, 0, sizeof *f);
}

dc_status *dc_file_read_all(const char *path, char **out, size_t *out_size) {
  *out = NULL;
  FILE *fp = fopen(path, "rb");
  if (!fp) return dc_error(DC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  dc_buf b;
  dc_buf_init(&b);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0) dc_buf_append(&b, chunk, n);
  int err = ferror(fp);
  fclose(fp);
  dc_buf_u8(&b, 0);
  if (err) {
    dc_buf_deinit(&b);
    return dc_error(DC_ERR_IO, "%s: read error", path);
  }
  if (b.failed) {
    dc_buf_deinit(&b);
    return dc_nomem("reading a file");
  }
  *out = (char *)b.data;
  if (out_size) *out_size = b.len - 1;
  return NULL;
}

int dc_file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
int dc_dir_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *dc_path_join(const char *dir, const char *name) {
  size_t n = strlen(dir);
  if (n > 0 && dir[n - 1] == '/') return dc_asprintf("%s%s", dir, name);
  return dc_asprintf("%s/%s", dir, name);
}

char *dc_path_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return dc_strdup(".");
  if (slash == path) return dc_strdup("/");
  return dc_strndup(path, (size_t)(slash - path));
}

char *dc_path_absolute(const char *path) {
  if (path[0] == '/') return dc_strdup(path);
  while (path[0] == '.' && path[1] == '/') path += 2 + strspn(path + 2, "/");
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) return dc_strdup(path); /* still a path that opens from here */
  return !path[0] || !strcmp(path, ".") ? dc_strdup(cwd) : dc_path_join(cwd, path);
}

char *dc_cache_root_dir(void) {
  const char *d = getenv("DIFFC_CACHE_DIR");
  if (d && *d) return dc_strdup(d);
  d = getenv("XDG_CACHE_HOME");
  if (d && *d) return dc_path_join(d, "diffc");
  d = getenv("HOME");
  if (d && *d) return dc_asprintf("%s/.cache/diffc", d);
  return NULL;
}

int dc_make_dirs(const char *dir) {
  char *p = dc_strdup(dir);
  if (!p) return ENOMEM;
  int err = 0;
  for (char *s = p + 1; !err; s++) {
    if (*s != '/' && *s) continue;
    char saved = *s;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      err = errno;
    else if (!dc_dir_exists(p))
      err = ENOTDIR;
    *s = saved;
    if (!saved) break;
  }
  dc_free(p);
  return err;
}

dc_status *dc_atomic_open(const char *path, dc_atomic_file *out) {
  memset(out, 0, sizeof *out);
  out->path = dc_strdup(path);
  /* pid and a per-process count: two threads may write the same path (two
   * equal kernels into the kernel cache) without sharing a temporary */
  static atomic_uint serial;
  out->tmp_path = dc_asprintf("%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&serial, 1));
  if (!out->path || !out->tmp_path) {
    dc_atomic_abort(out);
    return dc_nomem("opening an output file");
  }
  out->fp = fopen(out->tmp_path, "wb");
  if (!out->fp) {
    /* Name the path the user gave: the temporary name is ours.  A missing
     * or unwritable folder is the usual cause, so say which folder. */
    int err = errno;
    char *dir = dc_path_parent(path);
    dc_status *st = dir && !dc_dir_exists(dir)
                        ? dc_error(DC_ERR_IO, "%s: cannot create: no folder %s", path, dir)
                        : dc_error(DC_ERR_IO, "%s: cannot create: %s", path, strerror(err));
    dc_free(dir);
    dc_atomic_abort(out);
    return st;
  }
  return NULL;
}

void dc_atomic_write(dc_atomic_file *f, const void *p, size_t n) {
  if (f->failed || !f->fp || n == 0) return;
  if (fwrite(p, 1, n, f->fp) != n) f->failed = errno ? errno : EIO;
}

dc_status *dc_atomic_commit(dc_atomic_file *f) {
  dc_status *st = NULL;
  if (!f->fp) return dc_error(DC_ERR_INTERNAL, "atomic file committed twice");
  if (!f->failed && fflush(f->fp) != 0) f->failed = errno;
  if (!f->failed && fsync(fileno(f->fp)) != 0) f->failed = errno;
  if (fclose(f->fp) != 0 && !f->failed) f->failed = errno;
  f->fp = NULL;
  if (f->failed) {
    st = dc_error(DC_ERR_IO, "%s: write failed: %s", f->path, strerror(f->failed));
  } else if (rename(f->tmp_path, f->path) != 0) {
    st = dc_error(DC_ERR_IO, "%s: cannot rename into place: %s", f->path, strerror(errno));
  }
  if (st) unlink(f->tmp_path);
  dc_free(f->path);
  dc_free(f->tmp_path);
  f->path = f->tmp_path = NULL;
  return st;
}

dc_status *dc_atomic_write_file(const char *path, const void *data, size_t n) {
  dc_atomic_file f;
  DC_TRY(dc_atomic_open(path, &f));
  dc_atomic_write(&f, data, n);
  return dc_atomic_commit(&f);
}

void dc_atomic_abort(dc_atomic_file *f) {
  if (f->fp) fclose(f->fp);
  if (f->tmp_path) unlink(f->tmp_path);
  dc_free(f->path);
  dc_free(f->tmp_path);
  memset(f, 0, sizeof *f);
}

double dc_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *dc_format_bytes(uint64_t bytes, char *buf, size_t cap) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
  else snprintf(buf, cap, "%.1f %s", v, units[u]);
  return buf;
}

uint64_t dc_hash64(const void *p, size_t n) { return XXH64(p, n, 0); }

int dc_parse_bytes(const char *s, uint64_t *out) {
  static const struct {
    const char *unit;
    double scale;
  } units[] = {{"", 1},       {"B", 1},          {"KB", 1e3},       {"MB", 1e6},          {"GB", 1e9},
               {"TB", 1e12},  {"KiB", 1024.0},   {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !(v >= 0)) return -1;
  while (*end == ' ') end++;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].unit)) {
      double bytes = v * units[i].scale;
      if (bytes >= 18446744073709551615.0) return -1;
      *out = (uint64_t)bytes;
      return 0;
    }
  return -1;
}
