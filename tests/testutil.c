/* testutil.c — see testutil.h. */
#include <dirent.h>
#include <math.h>
#include "testutil.h"
#include "driver/compile.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int tu_passed, tu_failed;
const char *tu_source_dir = ".";
static char tmpdir[256];

void tu_init(int argc, char **argv) {
  if (argc > 1) tu_source_dir = argv[1];
  setvbuf(stdout, NULL, _IOLBF, 0);
}

void tu_check_err(dc_status *st, const char *needle, const char *file, int line) {
  if (!st) {
    tu_failed++;
    fprintf(stderr, "%s:%d: expected an error containing \"%s\", got success\n", file, line, needle);
    return;
  }
  if (strstr(dc_status_message(st), needle)) {
    tu_passed++;
    printf("  ok: error \"%s\"\n", dc_status_message(st));
  } else {
    tu_failed++;
    fprintf(stderr, "%s:%d: expected an error containing \"%s\", got \"%s\"\n", file, line, needle,
            dc_status_message(st));
  }
  dc_status_free(st);
}

void tu_check_ok(dc_status *st, const char *file, int line) {
  if (!st) {
    tu_passed++;
    return;
  }
  tu_failed++;
  fprintf(stderr, "%s:%d: unexpected error: %s\n", file, line, dc_status_message(st));
  dc_status_free(st);
}

const char *tu_tmpdir(void) {
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/diffc-test-XXXXXX");
    if (!mkdtemp(tmpdir)) {
      perror("mkdtemp");
      exit(1);
    }
  }
  return tmpdir;
}

char *tu_path(const char *name) {
  char *p = malloc(strlen(tu_tmpdir()) + strlen(name) + 2);
  sprintf(p, "%s/%s", tu_tmpdir(), name);
  return p;
}

void tu_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n) {
    perror(path);
    exit(1);
  }
  fclose(f);
}

static void remove_tmpdir(void) {
  if (tmpdir[0]) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
  }
}

int tu_finish(void) {
  remove_tmpdir();
  printf("%d passed, %d failed\n", tu_passed, tu_failed);
  if (tu_passed + tu_failed == 0) { /* a test that checked nothing proves nothing */
    printf("FAILED: no check ran\n");
    return 1;
  }
  return tu_failed ? 1 : 0;
}

int tu_finish_or_skip(int skipped) {
  if (!skipped) return tu_finish();
  remove_tmpdir();
  printf("%d passed, %d failed\n", tu_passed, tu_failed);
  return tu_failed ? 1 : 77;
}

void tu_params_add(tu_params *ps, int rank, const int64_t *dims, const char *fmt, ...) {
  if (ps->n == (int)(sizeof ps->p / sizeof ps->p[0])) {
    fprintf(stderr, "tu_params_add: more than %d parameters\n", ps->n);
    exit(1);
  }
  tu_param *p = &ps->p[ps->n++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->name, sizeof p->name, fmt, ap);
  va_end(ap);
  p->type.dtype = DT_F32;
  p->type.rank = rank;
  memcpy(p->type.dims, dims, sizeof(int64_t) * (size_t)rank);
}

double tu_rel_l2(const float *got, const float *want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - want[i];
    num += d * d;
    den += (double)want[i] * want[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

int tu_io_shapes(const dc_st_file *io, dc_input_shape *shapes, int max) {
  int n = 0;
  for (int i = 0; i < io->ntensors && n < max; i++) {
    const dc_st_tensor *t = &io->tensors[i];
    if (strncmp(t->name, "out.", 4) == 0) continue;
    shapes[n] = (dc_input_shape){.name = t->name, .rank = t->rank};
    memcpy(shapes[n++].dims, t->dims, sizeof t->dims);
  }
  return n;
}

dc_status *tu_set_io_input(drt_plan *p, const dc_st_file *io, const dc_st_tensor *t) {
  void *d = malloc(t->bytes + 1);
  if (!d) return dc_nomem("copying an input");
  memcpy(d, io->file.data + t->offset, t->bytes);
  dc_status *st = drt_set_input_data(p, t->name, dc_dtype_name(t->dtype), d, t->bytes / (size_t)dc_dtype_size(t->dtype));
  free(d);
  return st;
}

drt_plan *tu_load_with_inputs(const char *plan, const char *backend, const dc_st_file *io) {
  drt_plan *p = NULL;
  drt_options o = {.backend = backend};
  CHECK_OK(drt_load(plan, &o, &p));
  for (int i = 0; p && i < io->ntensors; i++) {
    const dc_st_tensor *t = &io->tensors[i];
    if (strncmp(t->name, "out.", 4) == 0) continue;
    CHECK_OK(tu_set_io_input(p, io, t));
  }
  return p;
}

char *tu_ir_text(const dc_module *m) {
  dc_buf b;
  dc_buf_init(&b);
  dc_status *st = dc_print(m, &b);
  dc_buf_u8(&b, 0);
  if (st) {
    CHECK_OK(st);
    dc_buf_deinit(&b);
    return NULL;
  }
  return (char *)b.data;
}

int tu_tmp_files_left(void) {
  DIR *d = opendir(tu_tmpdir());
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  return n;
}

dc_module *tu_compile_fixture(const char *fixture, const struct dc_memory_options *mem) {
  return tu_compile_fixture_variant(fixture, NULL, mem);
}

dc_module *tu_compile_fixture_variant(const char *fixture, const char *variant, const struct dc_memory_options *mem) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *model = dc_path_join(dir, fixture);
  dc_compile_options o = {.model = model, .variant = variant, .memory = *mem};
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_module *m = NULL;
  dc_status *st = dc_compile_module(&o, &f, &m);
  CHECK_OK(st);
  dc_folder_close(&f);
  dc_free(dir), dc_free(model);
  if (st) {
    dc_module_destroy(m);
    exit(tu_finish());
  }
  return m;
}
