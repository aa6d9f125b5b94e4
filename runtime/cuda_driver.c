/* cuda_driver.c — finds the NVIDIA driver at run time: dlopen libcuda.so.1,
 * then every entry point through cuGetProcAddress at the CUDA 12.0 ABI, so
 * the binaries carry no link-time dependency on the driver and a machine
 * without one still runs CPU plans. */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <string.h>

typedef dc_cu_result (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                            unsigned long long flags, int *symbol_status);

static const char *symbol_status_text(int status) {
  switch (status) {
    case DC_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: return "not found";
    case DC_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: return "the driver is older than that version";
    default: return "unknown symbol status";
  }
}

static dc_status *resolve(get_proc_address_fn gp, const char *libname, const char *symbol, void **out) {
  int status = DC_CU_GET_PROC_ADDRESS_SUCCESS;
  *out = NULL;
  dc_cu_result r = gp(symbol, out, DC_CU_API_VERSION, DC_CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != DC_CUDA_SUCCESS || !*out)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: cuGetProcAddress(\"%s\", CUDA %d.%d) gave no entry point (CUresult %d, %s); a driver for "
                    "CUDA 12.0 or newer is needed",
                    libname, symbol, DC_CU_API_VERSION / 1000, DC_CU_API_VERSION % 1000 / 10, r,
                    symbol_status_text(status));
  return NULL;
}

/* dlerror() usually starts with the library's name already. */
static dc_status *no_driver(const char *libname) {
  const char *why = dlerror();
  if (!why) why = "dlopen failed";
  size_t n = strlen(libname);
  if (strncmp(why, libname, n) == 0 && why[n] == ':')
    return dc_error(DC_ERR_UNSUPPORTED, "no NVIDIA driver was found (%s)", why);
  return dc_error(DC_ERR_UNSUPPORTED, "no NVIDIA driver was found (%s: %s)", libname, why);
}

static dc_status *resolve_all(get_proc_address_fn gp, const char *libname, dc_cu_api *out) {
  void *fn;
#define DC_CU_RESOLVE(name, params)                       \
  DC_TRY(resolve(gp, libname, "cu" #name, &fn));         \
  memcpy(&out->name, &fn, sizeof fn);
  DC_CU_API_ENTRIES(DC_CU_RESOLVE)
#undef DC_CU_RESOLVE
  return NULL;
}

dc_status *dc_cu_api_load(const char *libname, dc_cu_api *out) {
  memset(out, 0, sizeof *out);
  if (!libname) libname = "libcuda.so.1";
  void *lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return no_driver(libname);
  void *sym = dlsym(lib, "cuGetProcAddress_v2");
  if (!sym)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12.0; update the driver",
                    libname);
  get_proc_address_fn gp;
  memcpy(&gp, &sym, sizeof sym);
  dc_status *st = resolve_all(gp, libname, out);
  if (st) {
    memset(out, 0, sizeof *out);
    return st;
  }
  out->lib = lib;
  return NULL;
}

/* The driver starts threads of its own and registers exit handlers; the
 * library stays loaded for the life of the process (as the CUDA runtime
 * keeps it), so unloading only forgets the table.  dlopen counts
 * references, so loading again is cheap. */
void dc_cu_api_unload(dc_cu_api *api) { memset(api, 0, sizeof *api); }

static const dc_cu_api *override_api;

void dc_cu_api_set_override(const dc_cu_api *fake) { override_api = fake; }

dc_status *dc_cu_api_open(const char *libname, dc_cu_api *out) {
  if (override_api) {
    *out = *override_api;
    out->lib = NULL;
    return NULL;
  }
  return dc_cu_api_load(libname, out);
}

const char *dc_cu_result_text(const dc_cu_api *api, dc_cu_result r, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (api && api->GetErrorName && api->GetErrorName(r, &name) != DC_CUDA_SUCCESS) name = NULL;
  if (api && api->GetErrorString && api->GetErrorString(r, &text) != DC_CUDA_SUCCESS) text = NULL;
  if (name && text) snprintf(buf, cap, "%s (%s)", name, text);
  else if (name) snprintf(buf, cap, "%s", name);
  else snprintf(buf, cap, "CUresult %d", r);
  return buf;
}

dc_status *dc_cu_check(const dc_cu_api *api, dc_cu_result r, const char *call) {
  if (r == DC_CUDA_SUCCESS) return NULL;
  char text[256];
  return dc_error(r == DC_CUDA_ERROR_OUT_OF_MEMORY ? DC_ERR_NOMEM : DC_ERR_IO, "%s: %s", call,
                  dc_cu_result_text(api, r, text, sizeof text));
}
