/* fit_advice.h — what to tell a user whose plan does not fit the device:
 * the plan's OPTS hold the device bytes each offload alternative would need
 * (diffc computes them: passes/fit.c); this turns them into advice. */
#ifndef DC_FIT_ADVICE_H
#define DC_FIT_ADVICE_H

#include <stddef.h>
#include <stdint.h>

/* Writes "; these diffc options fit: --offload ... (needs X), ..." for the
 * alternatives needing at most `budget` bytes, or "; even --offload
 * sequential needs X" when none does, into buf (always NUL-terminated; ""
 * when the plan records no alternatives). */
void dc_fit_advice(const char *options_json, uint64_t budget, char *buf, size_t cap);

#endif
