/* session.h — what the runtime's own files outside runtime.c
 * (calibrate.c, memory_report.c)
 * read of a loaded plan beyond the public diffrun.h: the module it runs,
 * the path it was loaded from and the CUDA device it was asked for. */
#ifndef DC_SESSION_H
#define DC_SESSION_H

#include "diffrun.h"
#include "ir/ir.h"
#include "plan/plan_format.h"

const dc_module *drt_plan_module(const drt_plan *p);
const char *drt_plan_path(const drt_plan *p);
int drt_plan_device(const drt_plan *p); /* drt_options.device */
const dc_plan *drt_plan_file(const drt_plan *p);  /* the plan as read (plan/plan_format.h) */
uint64_t drt_plan_bounce_bytes(const drt_plan *p);     /* drt_options.bounce_bytes */

#endif
