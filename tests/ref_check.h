/* ref_check.h — what the reference-kernel tests (test_ref_*.c,
 * test_dtype_convert.c) share, header-only like the other test fixtures:
 * a deterministic generator, inputs added to a module, index arithmetic,
 * running one node's reference kernel after type inference (run_node), and
 * the closeness checks against values computed independently in double. */
#ifndef DC_REF_CHECK_H
#define DC_REF_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/kernels.h"
#include "testutil.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

static uint32_t rng_state = 12345;
static float frand(void) { /* deterministic, in [-1, 1) */
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((rng_state >> 8) / 8388608.0 - 1.0);
}

static float *rand_buf(int64_t count) {
  float *p = malloc((size_t)(count ? count : 1) * sizeof *p);
  for (int64_t i = 0; i < count; i++) p[i] = frand();
  return p;
}

static int32_t add_in(dc_module *m, dc_dtype dt, int rank, const int64_t *dims) {
  dc_type t = {dt, rank, {0}};
  char name[32];
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  snprintf(name, sizeof name, "in%d", m->ninputs);
  return dc_module_add_input(m, name, &t, INIT_NORMAL);
}
#define DIMS(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((int64_t[]){__VA_ARGS__})
#define IN32(m, ...) add_in((m), DT_F32, DIMS(__VA_ARGS__))

/* Row-major position of idx in dims, and its inverse. */
static int64_t ravel(const int64_t *idx, const int64_t *dims, int rank) {
  int64_t at = 0;
  for (int d = 0; d < rank; d++) at = at * dims[d] + idx[d];
  return at;
}

static void unravel(int64_t at, const int64_t *dims, int rank, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = at % dims[d];
    at /= dims[d];
  }
}

static int64_t numel_of(const int64_t *dims, int rank) {
  int64_t count = 1;
  for (int d = 0; d < rank; d++) count *= dims[d];
  return count;
}

/* Infers the node's type (unless the op has a given type), adds it to m and
 * runs its reference kernel.  Returns the output (free()) or NULL. */
static void *run_node(dc_module *m, dc_node nd, const void *const *in) {
  dc_type t;
  dc_status *st = dc_infer_type(m, &nd, &t);
  if (st) {
    CHECK_OK(st);
    return NULL;
  }
  nd.type = t;
  int32_t id = dc_module_add_node(m, &nd);
  void *out = malloc(dc_type_bytes(&t) + 4);
  dc_ref_kernel k = dc_ref_kernel_for(nd.op);
  CHECK(k != NULL);
  st = k(m, &m->nodes[id], in, out);
  if (st) {
    CHECK_OK(st);
    free(out);
    return NULL;
  }
  return out;
}

/* Compares got to want with |got - want| <= tol·max(1, |want|); reports the
 * worst error.  NaN in want must be NaN in got. */
static void check_close(const char *what, const float *got, const double *want, int64_t count,
                        double tol) {
  double worst = 0;
  int64_t bad = -1;
  if (!got) return;
  for (int64_t i = 0; i < count; i++) {
    double err = isnan(want[i]) ? (isnan(got[i]) ? 0 : INFINITY) : fabs(got[i] - want[i]);
    double lim = tol * (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
    if (err > lim && bad < 0) bad = i;
    if (err > worst) worst = err;
  }
  CHECK(bad < 0);
  if (bad >= 0)
    fprintf(stderr, "  %s: element %lld is %.9g, expected %.9g\n", what, (long long)bad,
            got[bad], want[bad]);
  printf("  %s: %lld values, max abs error %.3g\n", what, (long long)count, worst);
}

static void check_closef(const char *what, const float *got, const float *want, int64_t count,
                         double tol) {
  double *w = malloc((size_t)count * sizeof *w);
  for (int64_t i = 0; i < count; i++) w[i] = want[i];
  check_close(what, got, w, count, tol);
  free(w);
}

#pragma GCC diagnostic pop

#endif
