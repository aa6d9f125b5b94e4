/* fuzz_common.h — helpers shared by the fuzz targets (header-only, static).
 * The loaders read files, so every target writes its input to a per-process
 * temporary path first: /tmp/diffc-fuzz-<pid>-<target>[/...]. */
#ifndef DIFFC_FUZZ_COMMON_H
#define DIFFC_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef DIFFC_SOURCE_DIR
#define DIFFC_SOURCE_DIR "."
#endif

/* "/tmp/diffc-fuzz-<pid>-<target><suffix>" in buf. */
static inline const char *fuzz_tmp_path(char *buf, size_t n, const char *target, const char *suffix) {
  snprintf(buf, n, "/tmp/diffc-fuzz-%ld-%s%s", (long)getpid(), target, suffix ? suffix : "");
  return buf;
}

/* Writes (data, size) to path, replacing it; aborts on I/O errors (they are
 * the harness's, not the input's). */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    abort();
  }
  if (size && fwrite(data, 1, size, f) != size) {
    perror(path);
    abort();
  }
  if (fclose(f) != 0) {
    perror(path);
    abort();
  }
}

static inline void fuzz_write_text(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  fuzz_write_file(path, (const uint8_t *)text, strlen(text));
}

/* Copies a file (e.g. a fixture) to dst; aborts when it cannot. */
static inline void fuzz_copy_file(const char *src, const char *dst) {
  char *data = NULL;
  size_t size = 0;
  dc_status *st = dc_file_read_all(src, &data, &size);
  if (st) {
    fprintf(stderr, "fuzz harness: %s\n", dc_status_message(st));
    abort();
  }
  fuzz_write_file(dst, (const uint8_t *)data, size);
  dc_free(data);
}

static inline void fuzz_mkdir(const char *dir) {
  if (mkdir(dir, 0755) != 0) {
    struct stat s;
    if (stat(dir, &s) != 0 || !S_ISDIR(s.st_mode)) {
      perror(dir);
      abort();
    }
  }
}

/* Paths removed at exit (files first, then their folders: register a folder
 * before the files in it). */
static char *fuzz_cleanup_paths[32];
static int fuzz_ncleanup;
static inline void fuzz_cleanup_run(void) {
  for (int i = fuzz_ncleanup - 1; i >= 0; i--) {
    remove(fuzz_cleanup_paths[i]);
    free(fuzz_cleanup_paths[i]);
  }
  fuzz_ncleanup = 0;
}
static inline void fuzz_cleanup_add(const char *path) {
  if (fuzz_ncleanup == 0) atexit(fuzz_cleanup_run);
  if (fuzz_ncleanup < 32) {
    size_t n = strlen(path) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, path, n), fuzz_cleanup_paths[fuzz_ncleanup++] = c;
  }
}

/* Frees a status (the loaders' errors are expected, not findings); prints
 * it when DIFFC_FUZZ_VERBOSE is set. */
static inline void fuzz_drop(dc_status *st) {
  if (st) {
    if (getenv("DIFFC_FUZZ_VERBOSE")) fprintf(stderr, "  status: %s\n", dc_status_message(st));
    dc_status_free(st);
  }
}

#endif
