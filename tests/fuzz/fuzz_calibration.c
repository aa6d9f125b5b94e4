/* fuzz_calibration.c — the calibration profile reader (passes/cost_model.c,
 * dc_cost_profile_load): all but the last byte are the profile's JSON, the
 * last byte's low bit picks the target it is read for (cpu, cuda).  A
 * profile is a file anyone can put in the cache folder, which diffc reads
 * by default.  On success every rate must be positive and finite, and a
 * kernel's predicted time too (the search divides by them).  Errors are
 * expected; crashes, leaks, undefined behaviour and bad rates are the
 * findings. */
#include <math.h>

#include "fuzz_common.h"
#include "passes/passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  char path[256];
  fuzz_tmp_path(path, sizeof path, "calibration", ".json");
  fuzz_write_file(path, data, size - 1);
  const char *target = data[size - 1] & 1 ? "cuda" : "cpu";
  dc_cost_profile p;
  dc_status *st = dc_cost_profile_load(path, target, &p);
  if (!st) {
    for (int c = 0; c < DC_COST_CLASSES; c++) {
      double t = dc_cost_kernel_seconds(&p, (dc_cost_class)c, 1u << 30, 1u << 20);
      if (!(t >= 0) || isinf(t)) abort();
    }
  }
  dc_status_free(st);
  unlink(path);
  return 0;
}
