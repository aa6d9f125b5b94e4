/* testutil.h — a tiny test harness: CHECK macros that print the failed
 * expression with file:line, helpers for temp dirs and writing files, and a
 * summary line "N passed, N failed" that CTest logs show. */
#ifndef DC_TESTUTIL_H
#define DC_TESTUTIL_H

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "runtime/diffrun.h"
#include "support/support.h"

extern int tu_passed, tu_failed;
extern const char *tu_source_dir; /* argv[1]: tests/ in the source tree */

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (cond) tu_passed++;                                                   \
    else {                                                                   \
      tu_failed++;                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

/* Checks that st is an error whose message contains `needle`; frees st. */
#define CHECK_ERR(st, needle) tu_check_err((st), (needle), __FILE__, __LINE__)
/* Checks that st is NULL; prints and frees it otherwise. */
#define CHECK_OK(st) tu_check_ok((st), __FILE__, __LINE__)

void tu_check_err(dc_status *st, const char *needle, const char *file, int line);
void tu_check_ok(dc_status *st, const char *file, int line);
void tu_init(int argc, char **argv);
int tu_finish(void); /* prints the summary; returns the exit code: 1 on a failure or when no check ran */
/* skipped: the test could not run its main part here (no GPU, no NVRTC);
 * then 77 (ctest's skip) unless a check that did run failed, else as
 * tu_finish. */
int tu_finish_or_skip(int skipped);

/* A fresh temporary directory (removed by tu_finish). */
const char *tu_tmpdir(void);
char *tu_path(const char *name); /* tmpdir/name, malloc'd */
void tu_write_file(const char *path, const void *data, size_t n);
/* Files in the scratch folder with ".tmp." in their name: an atomic
 * writer's temporaries left behind. */
int tu_tmp_files_left(void);

/* Expected weights (name and type) of a model, for writing checkpoints. */
typedef struct {
  char name[128];
  dc_type type;
} tu_param;
typedef struct {
  tu_param p[1024];
  int n;
} tu_params;
/* Appends an f32 parameter named by fmt... with the given shape. */
void tu_params_add(tu_params *ps, int rank, const int64_t *dims, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Relative L2 error of got against want: sqrt(sum (got-want)^2 / sum want^2)
 * (the plain root sum of squares when want is all zero); NaN or Inf in got
 * makes it non-finite. */
double tu_rel_l2(const float *got, const float *want, size_t n);
/* The module's IR text (dc_print), malloc'd; NULL, counted as a failed
 * check, if printing fails. */
char *tu_ir_text(const dc_module *m);
/* The input shapes recorded in a fixture io file: every tensor not named
 * out.*; returns how many (at most max). */
int tu_io_shapes(const dc_st_file *io, dc_input_shape *shapes, int max);
/* Sets plan input t->name from io tensor t: f32, or integer ids (i32, i64)
 * in their own dtype (a copy: tensors in the file need not be aligned). */
dc_status *tu_set_io_input(drt_plan *p, const dc_st_file *io, const dc_st_tensor *t);
/* drt_load(plan, backend) with the io file's recorded inputs set; NULL (and
 * a failed CHECK) on error. */
drt_plan *tu_load_with_inputs(const char *plan, const char *backend, const dc_st_file *io);
/* The fixture model tests/fixtures/<fixture> (e.g. "unet_tiny/model",
 * "pipelines/sd") through the front half of a compile (dc_compile_module:
 * graph and passes, no kernels) with these memory options and the model's
 * default entry; on error the check fails and the test exits with its
 * summary. */
struct dc_memory_options;
dc_module *tu_compile_fixture(const char *fixture, const struct dc_memory_options *mem);
/* The same with the checkpoint variant ("bf16" reads *.bf16.safetensors); NULL: none. */
dc_module *tu_compile_fixture_variant(const char *fixture, const char *variant, const struct dc_memory_options *mem);

#endif
