/* fit_advice.c — see fit_advice.h. */
#include "fit_advice.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "support/support.h"

void dc_fit_advice(const char *options_json, uint64_t budget, char *buf, size_t cap) {
  buf[0] = 0;
  cJSON *j = options_json ? cJSON_Parse(options_json) : NULL;
  const cJSON *fit = j ? cJSON_GetObjectItemCaseSensitive(j, "fit") : NULL, *a;
  size_t n = 0;
  int fits = 0;
  double least = -1;
  const char *least_flags = NULL;
  cJSON_ArrayForEach(a, fit) {
    const cJSON *flags = cJSON_GetObjectItemCaseSensitive(a, "flags"), *bytes = cJSON_GetObjectItemCaseSensitive(a, "device_bytes");
    if (!cJSON_IsString(flags) || !cJSON_IsNumber(bytes) || !flags->valuestring[0]) continue;
    char b[32];
    if (least < 0 || bytes->valuedouble < least) least = bytes->valuedouble, least_flags = flags->valuestring;
    if (bytes->valuedouble > (double)budget || n + 1 >= cap) continue;
    n += (size_t)snprintf(buf + n, cap - n, "%s%s (needs %s)", fits ? ", " : "; these diffc options fit: ", flags->valuestring,
                          dc_format_bytes((uint64_t)bytes->valuedouble, b, sizeof b));
    if (n >= cap) n = cap - 1;
    fits++;
  }
  if (!fits && least_flags) {
    char b[32];
    snprintf(buf, cap, "; no offload option fits: the smallest, %s, still needs %s (a smaller batch or resolution "
             "shrinks the activations)", least_flags, dc_format_bytes((uint64_t)least, b, sizeof b));
  }
  cJSON_Delete(j);
}
