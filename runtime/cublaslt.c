/* cublaslt.c — finds cuBLASLt at run time: dlopen the toolkit's
 * libcublasLt, then every entry point by name, so the binaries carry no
 * link-time dependency on it and a machine without it runs the NVRTC GEMM
 * kernels instead (cuda_gemm_lt.c decides, and says why). */
#include "cublaslt.h"

#include <dlfcn.h>
#include <string.h>

static dc_status *resolve_all(void *lib, const char *libname, dc_lt_api *out) {
  void *fn;
#define DC_LT_RESOLVE(ret, name, params)                                                                   \
  fn = dlsym(lib, "cublasLt" #name);                                                                       \
  if (!fn)                                                                                                 \
    return dc_error(DC_ERR_UNSUPPORTED, "%s has no cublasLt" #name ": a cuBLASLt from CUDA 11 or newer is needed", \
                    libname);                                                                              \
  memcpy(&out->name, &fn, sizeof fn);
  DC_LT_API_ENTRIES(DC_LT_RESOLVE)
#undef DC_LT_RESOLVE
  return NULL;
}

static dc_status *load_one(const char *libname, dc_lt_api *out) {
  void *lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    return dc_error(DC_ERR_UNSUPPORTED, "cuBLASLt was not found (%s)", why ? why : libname);
  }
  dc_status *st = resolve_all(lib, libname, out);
  if (st) {
    memset(out, 0, sizeof *out);
    dlclose(lib);
    return st;
  }
  out->lib = lib;
  return NULL;
}

/* The sonames of CUDA 13 and 12, then the development link. */
dc_status *dc_lt_api_load(const char *libname, dc_lt_api *out) {
  memset(out, 0, sizeof *out);
  if (libname) return load_one(libname, out);
  static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
  dc_status *first = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    dc_status *st = load_one(names[i], out);
    if (!st) {
      dc_status_free(first);
      return NULL;
    }
    if (first) dc_status_free(st);
    else first = st;
  }
  return first;
}

/* Like the driver, the library keeps state for the process's life (its
 * kernels' modules): unloading forgets the table and leaves it mapped. */
void dc_lt_api_unload(dc_lt_api *api) { memset(api, 0, sizeof *api); }

static const dc_lt_api *override_api;
static int pretend_missing;

void dc_lt_api_set_override(const dc_lt_api *fake) { override_api = fake; }
void dc_lt_api_set_missing(int missing) { pretend_missing = missing; }

dc_status *dc_lt_api_open(const char *libname, int real_driver, dc_lt_api *out) {
  memset(out, 0, sizeof *out);
  if (pretend_missing)
    return dc_error(DC_ERR_UNSUPPORTED, "cuBLASLt was not found (%s: cannot open shared object file (test))",
                    libname ? libname : "libcublasLt.so.13");
  if (override_api) {
    *out = *override_api;
    out->lib = NULL;
    return NULL;
  }
  if (!real_driver)
    return dc_error(DC_ERR_UNSUPPORTED, "cuBLASLt is not used beside a test's fake CUDA driver (no fake cuBLASLt "
                    "was given)");
  return dc_lt_api_load(libname, out);
}

dc_status *dc_lt_check(const dc_lt_api *api, dc_lt_status r, const char *call) {
  if (r == DC_LT_STATUS_SUCCESS) return NULL;
  const char *name = api && api->GetStatusName ? api->GetStatusName(r) : NULL;
  return dc_error(r == DC_LT_STATUS_ALLOC_FAILED ? DC_ERR_NOMEM : DC_ERR_IO, "%s: %s (cublasStatus_t %d)", call,
                  name ? name : "unknown status", r);
}
