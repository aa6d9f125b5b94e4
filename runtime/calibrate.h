/* calibrate.h — the pieces of diffrun --calibrate (calibrate.c) that tests
 * reach below drt_calibrate: the CUDA copy measurements, through a driver
 * table (the fake driver's in tests), and the default profile path. */
#ifndef DC_CALIBRATE_H
#define DC_CALIBRATE_H

#include "cuda_driver.h"

/* Host-to-device bandwidth in GB/s: `bytes` from pinned host memory
 * (cuMemHostAlloc) to a device buffer with cuMemcpyHtoDAsync on a
 * non-blocking stream, timed by events around each copy, best of reps.
 * Retains and makes current the device's primary context, releases it at
 * the end; everything it made is freed, also on error. */
dc_status *drt_cuda_h2d_gbps(const dc_cu_api *api, int device, uint64_t bytes, int reps, double *gbps);

/* Device-to-device bandwidth in GB/s between `device` and the next device
 * (cuMemcpyPeerAsync, peer access enabled where the devices allow it, as
 * diffrun's transfers do), best of reps.  *measured = 0 and nothing is
 * touched when there is one device. */
dc_status *drt_cuda_d2d_gbps(const dc_cu_api *api, int device, uint64_t bytes, int reps, double *gbps, int *measured);

/* calibration-<target>.json in the cache root (dc_cache_root_dir), the
 * folder created; dc_malloc'd into *out.  An error when no root is set or
 * it cannot be made. */
dc_status *drt_calibration_default_path(const char *target, char **out);

#endif
