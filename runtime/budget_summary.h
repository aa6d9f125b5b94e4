/* budget_summary.h — what diffc --memory-budget chose, for diffrun --info:
 * the plan's OPTS "budget" (written by passes/budget.c) as one line. */
#ifndef DC_BUDGET_SUMMARY_H
#define DC_BUDGET_SUMMARY_H

#include <stddef.h>

/* "2.0 GiB: chose --offload ... (device peak X, predicted Y s per forward;
 * cost model Z)" into buf (always NUL-terminated); "" when the plan was
 * compiled without a budget or its OPTS do not parse. */
void dc_budget_summary(const char *options_json, char *buf, size_t cap);

#endif
