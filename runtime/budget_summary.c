/* budget_summary.c — see budget_summary.h. */
#include "budget_summary.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#include "support/support.h"

void dc_budget_summary(const char *options_json, char *buf, size_t cap) {
  buf[0] = 0;
  cJSON *j = options_json ? cJSON_Parse(options_json) : NULL;
  const cJSON *b = j ? cJSON_GetObjectItemCaseSensitive(j, "budget") : NULL;
  const cJSON *budget = cJSON_GetObjectItemCaseSensitive(b, "memory_budget"), *per = cJSON_GetObjectItemCaseSensitive(b, "per");
  const cJSON *ch = cJSON_GetObjectItemCaseSensitive(b, "chosen"), *cal = cJSON_GetObjectItemCaseSensitive(b, "calibration");
  const cJSON *flags = cJSON_GetObjectItemCaseSensitive(ch, "flags"), *bytes = cJSON_GetObjectItemCaseSensitive(ch, "device_bytes");
  const cJSON *secs = cJSON_GetObjectItemCaseSensitive(ch, "seconds");
  const cJSON *calibrated = cJSON_GetObjectItemCaseSensitive(b, "calibrated");
  if (cJSON_IsNumber(budget) && cJSON_IsString(flags) && cJSON_IsNumber(bytes) && cJSON_IsNumber(secs) &&
      cJSON_IsString(per) && cJSON_IsString(cal)) {
    char b1[32], b2[32];
    snprintf(buf, cap, "%s: chose %s (device peak %s, predicted %.3g s per %s; cost model %s%s)",
             dc_format_bytes((uint64_t)budget->valuedouble, b1, sizeof b1), flags->valuestring,
             dc_format_bytes((uint64_t)bytes->valuedouble, b2, sizeof b2), secs->valuedouble, per->valuestring,
             cal->valuestring, cJSON_IsTrue(calibrated) ? "" : ", uncalibrated");
  }
  cJSON_Delete(j);
}
