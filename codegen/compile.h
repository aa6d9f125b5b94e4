/* compile.h — the compiler driver: model folder → frontend → passes → plan
 * file.  diffc is a CLI over this; tests call it directly. */
#ifndef DC_COMPILE_H
#define DC_COMPILE_H

#include "frontend/frontend.h"

#define DIFFC_VERSION "0.1.0"

typedef struct {
  const char *model;      /* model or pipeline folder */
  const char *component;  /* pipeline component, or NULL */
  const char *variant;    /* weights variant, or NULL */
  const char *entry;      /* NULL = the model's default */
  const dc_input_shape *shapes;
  int nshapes;
  const char *dump_after; /* pass name, "all", or NULL */
  const char *dump_ir;    /* path for the final IR text ("-" = stdout), or NULL */
  int verbose;
  const char *debug;      /* comma-separated channels tracing decisions to stderr ("memplan"), or NULL */
  const char *cpu;        /* kernels for "native" (this machine; the default when NULL) or "generic" x86-64 */
} dc_compile_options;

typedef struct {
  int steps;
  uint64_t weight_bytes, peak_activation_bytes;
  double seconds;
} dc_compile_report;

/* Writes the plan to plan_path atomically; on error nothing is left there. */
dc_status *dc_compile(const dc_compile_options *o, const char *plan_path, dc_compile_report *rep);

#endif
