/* trace.h — what the runtime makes of a run trace (diffrun.h, "Run trace"):
 * the Chrome trace-event JSON file and the measured memory series.  The
 * session (runtime.c) records the events; these read them. */
#ifndef DC_TRACE_H
#define DC_TRACE_H

#include "diffrun.h"
#include "ir/ir.h"

/* Writes the events as Chrome trace-event JSON ("JSON Object Format") to
 * path, atomically: per device a process named "device D (device)", per
 * stream a thread ("compute", "copy"), one complete event per step, copy
 * and run; backend names the kernels' origin in the metadata. */
dc_status *dc_trace_write_json(const dc_module *m, const char *backend, const char *device,
                               const drt_trace_event *ev, int32_t n, const char *path);

/* The device memory the traced runs observed, by kind and step (ir.h). */
dc_status *dc_trace_memory(const dc_module *m, const dc_liveness *l, const drt_trace_event *ev, int32_t n,
                           dc_mem_series *out);

#endif
