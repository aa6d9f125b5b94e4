/* nvrtc.c — see nvrtc.h.  The NVRTC API is declared here rather than taken
 * from the toolkit's nvrtc.h, so diffc builds on machines without CUDA; the
 * few signatures used are stable since CUDA 11. */
#define _GNU_SOURCE /* dladdr */
#include "nvrtc.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_codegen.h"

typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct nvrtc_program_s *nvrtcProgram;

typedef struct {
  nvrtcResult (*Version)(int *major, int *minor);
  nvrtcResult (*GetNumSupportedArchs)(int *n);
  nvrtcResult (*GetSupportedArchs)(int *archs);
  nvrtcResult (*CreateProgram)(nvrtcProgram *prog, const char *src, const char *name, int nheaders,
                               const char *const *headers, const char *const *include_names);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *prog);
  nvrtcResult (*CompileProgram)(nvrtcProgram prog, int nopts, const char *const *opts);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram prog, size_t *size);
  nvrtcResult (*GetProgramLog)(nvrtcProgram prog, char *log);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram prog, size_t *size);
  nvrtcResult (*GetCUBIN)(nvrtcProgram prog, char *cubin);
  nvrtcResult (*GetPTXSize)(nvrtcProgram prog, size_t *size);
  nvrtcResult (*GetPTX)(nvrtcProgram prog, char *ptx);
  const char *(*GetErrorString)(nvrtcResult r);
} nvrtc_api;

#define MAX_SUPPORTED 64
#define LOG_LINES 15 /* of a failed compile's log, in the error message */

struct dc_nvrtc {
  nvrtc_api api;
  char *library, *version, *supported_text, *includes_text;
  char *include_opts[2]; /* "-I<cuda>/include", "-I<cuda>/include/cccl" */
  int ninclude;
  int supported[MAX_SUPPORTED];
  int nsupported;
};

static const char *const lib_names[] = {"libnvrtc.so.13", "libnvrtc.so", "libnvrtc.so.12"};
enum { NLIB_NAMES = sizeof lib_names / sizeof lib_names[0] };

/* ---- finding and loading the library ----------------------------------- */

/* Directories to try, in order; "" stands for the dynamic loader's path. */
static int library_dirs(const char **dirs, char bufs[][PATH_MAX]) {
  int n = 0;
  static const char *const envs[] = {"CUDA_HOME", "CUDA_PATH"};
  for (int e = 0; e < 2; e++) {
    const char *root = getenv(envs[e]);
    if (!root || !*root) continue;
    snprintf(bufs[n], PATH_MAX, "%s/lib64", root);
    dirs[n] = bufs[n], n++;
    snprintf(bufs[n], PATH_MAX, "%s/lib", root);
    dirs[n] = bufs[n], n++;
  }
  dirs[n++] = "";
  dirs[n++] = "/usr/local/cuda/lib64";
  dirs[n++] = "/usr/local/cuda/lib";
  return n;
}

/* dlopen's the first candidate that loads; *searched says what was tried. */
static void *open_library(dc_buf *searched, char *last_error, size_t cap) {
  const char *explicit_path = getenv("DIFFC_NVRTC");
  if (explicit_path && *explicit_path) {
    dc_buf_printf(searched, "%s ($DIFFC_NVRTC)", explicit_path);
    void *h = dlopen(explicit_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(last_error, cap, "%s", dlerror());
    return h;
  }
  const char *dirs[8];
  char bufs[4][PATH_MAX];
  int ndirs = library_dirs(dirs, bufs);
  for (int i = 0; i < NLIB_NAMES; i++) dc_buf_printf(searched, "%s%s", i ? ", " : "", lib_names[i]);
  dc_buf_printf(searched, " in ");
  for (int d = 0; d < ndirs; d++) {
    dc_buf_printf(searched, "%s%s", d ? ", " : "", dirs[d][0] ? dirs[d] : "the dynamic loader's path");
    for (int i = 0; i < NLIB_NAMES; i++) {
      char path[PATH_MAX + 32];
      if (dirs[d][0])
        snprintf(path, sizeof path, "%s/%s", dirs[d], lib_names[i]);
      else
        snprintf(path, sizeof path, "%s", lib_names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
      snprintf(last_error, cap, "%s", dlerror());
    }
  }
  return NULL;
}

/* Resolves every entry point; returns the first missing name, or NULL. */
static const char *resolve(void *lib, nvrtc_api *a) {
#define RESOLVE(field, sym)            \
  do {                                 \
    void *p_ = dlsym(lib, sym);        \
    if (!p_) return sym;               \
    memcpy(&a->field, &p_, sizeof p_); \
  } while (0)
  RESOLVE(Version, "nvrtcVersion");
  RESOLVE(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
  RESOLVE(GetSupportedArchs, "nvrtcGetSupportedArchs");
  RESOLVE(CreateProgram, "nvrtcCreateProgram");
  RESOLVE(DestroyProgram, "nvrtcDestroyProgram");
  RESOLVE(CompileProgram, "nvrtcCompileProgram");
  RESOLVE(GetProgramLogSize, "nvrtcGetProgramLogSize");
  RESOLVE(GetProgramLog, "nvrtcGetProgramLog");
  RESOLVE(GetCUBINSize, "nvrtcGetCUBINSize");
  RESOLVE(GetCUBIN, "nvrtcGetCUBIN");
  RESOLVE(GetPTXSize, "nvrtcGetPTXSize");
  RESOLVE(GetPTX, "nvrtcGetPTX");
  RESOLVE(GetErrorString, "nvrtcGetErrorString");
#undef RESOLVE
  return NULL;
}

static const char *result_name(const dc_nvrtc *nv, nvrtcResult r) {
  const char *s = nv->api.GetErrorString(r);
  return s ? s : "unknown NVRTC error";
}

static dc_status *query_version_and_archs(dc_nvrtc *nv) {
  int major = 0, minor = 0, n = 0;
  nvrtcResult r = nv->api.Version(&major, &minor);
  if (r) return dc_error(DC_ERR_IO, "%s: nvrtcVersion failed: %s", nv->library, result_name(nv, r));
  nv->version = dc_asprintf("%d.%d", major, minor);
  r = nv->api.GetNumSupportedArchs(&n);
  if (!r && (n < 1 || n > MAX_SUPPORTED))
    return dc_error(DC_ERR_IO, "%s: NVRTC reports %d supported architectures (expected 1..%d)", nv->library, n,
                    MAX_SUPPORTED);
  if (!r) r = nv->api.GetSupportedArchs(nv->supported);
  if (r) return dc_error(DC_ERR_IO, "%s: nvrtcGetSupportedArchs failed: %s", nv->library, result_name(nv, r));
  nv->nsupported = n;
  dc_buf b;
  dc_buf_init(&b);
  for (int i = 0; i < n; i++) dc_buf_printf(&b, "%s%d", i ? " " : "", nv->supported[i]);
  dc_buf_u8(&b, 0);
  if (b.failed || !nv->version) {
    dc_buf_deinit(&b);
    return dc_nomem("loading NVRTC");
  }
  nv->supported_text = (char *)b.data;
  return NULL;
}

/* ---- finding the CUDA headers ------------------------------------------ */

static int file_in(const char *dir, const char *name, int want_dir) {
  char *path = dc_path_join(dir, name);
  int yes = path && (want_dir ? dc_dir_exists(path) : dc_file_exists(path));
  dc_free(path);
  return yes;
}

static int has_cuda_headers(const char *dir) { return file_in(dir, "cuda_bf16.h", 0) && file_in(dir, "mma.h", 0); }

/* Appends dir to cands unless it names one already there (resolving
 * symlinks and "..", so the library's ../include and $CUDA_HOME/include
 * count once). */
static void add_candidate(char cands[][PATH_MAX], int *n, const char *dir) {
  char real[PATH_MAX];
  const char *key = realpath(dir, real) ? real : dir;
  for (int i = 0; i < *n; i++) {
    char other[PATH_MAX];
    if (!strcmp(realpath(cands[i], other) ? other : cands[i], key)) return;
  }
  snprintf(cands[(*n)++], PATH_MAX, "%s", dir);
}

/* Candidate include dirs in order (see nvrtc.h); returns how many. */
static int include_candidates(const char *library, char cands[][PATH_MAX]) {
  int n = 0;
  char dir[PATH_MAX];
  static const char *const envs[] = {"CUDA_HOME", "CUDA_PATH"};
  for (int e = 0; e < 2; e++) {
    const char *root = getenv(envs[e]);
    if (!root || !*root) continue;
    snprintf(dir, sizeof dir, "%s/include", root);
    add_candidate(cands, &n, dir);
  }
  const char *slash = strrchr(library, '/');
  if (slash) {
    snprintf(dir, sizeof dir, "%.*s/../include", (int)(slash - library), library);
    add_candidate(cands, &n, dir);
  }
  add_candidate(cands, &n, "/usr/local/cuda/include");
  return n;
}

static dc_status *find_includes(dc_nvrtc *nv) {
  char cands[4][PATH_MAX];
  int n = include_candidates(nv->library, cands);
  for (int i = 0; i < n; i++) {
    if (!has_cuda_headers(cands[i])) continue;
    char real[PATH_MAX];
    const char *dir = realpath(cands[i], real) ? real : cands[i];
    nv->include_opts[nv->ninclude++] = dc_asprintf("-I%s", dir);
    if (file_in(dir, "cccl", 1)) nv->include_opts[nv->ninclude++] = dc_asprintf("-I%s/cccl", dir);
    for (int k = 0; k < nv->ninclude; k++)
      if (!nv->include_opts[k]) return dc_nomem("loading NVRTC");
    nv->includes_text = nv->ninclude == 2 ? dc_asprintf("%s %s", nv->include_opts[0], nv->include_opts[1])
                                          : dc_strdup(nv->include_opts[0]);
    return nv->includes_text ? NULL : dc_nomem("loading NVRTC");
  }
  dc_buf b;
  dc_buf_init(&b);
  for (int i = 0; i < n; i++) dc_buf_printf(&b, "%s%s", i ? ", " : "", cands[i]);
  dc_buf_u8(&b, 0);
  dc_status *st = dc_error(DC_ERR_IO,
                           "NVRTC was found (%s) but not the CUDA headers it needs (cuda_bf16.h, mma.h); looked in %s. "
                           "Set CUDA_HOME to the CUDA toolkit",
                           nv->library, b.failed ? "?" : (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

/* ---- load / unload ------------------------------------------------------ */

static dc_status *not_found(const dc_buf *searched, const char *last_error) {
  return dc_error(DC_ERR_UNSUPPORTED,
                  "NVRTC, the CUDA toolkit's runtime compiler, was not found: tried %s (last error: %s). Install the "
                  "CUDA toolkit or set CUDA_HOME to it; CPU plans need no toolkit (--target cpu)",
                  searched->failed ? "?" : (const char *)searched->data, last_error);
}

static dc_status *library_path(void *lib, dc_nvrtc *nv) {
  Dl_info info;
  void *sym = dlsym(lib, "nvrtcVersion");
  nv->library = dc_strdup(sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "libnvrtc");
  return nv->library ? NULL : dc_nomem("loading NVRTC");
}

dc_status *dc_nvrtc_load(dc_nvrtc **out) {
  *out = NULL;
  dc_buf searched;
  dc_buf_init(&searched);
  char last_error[512] = "none";
  void *lib = open_library(&searched, last_error, sizeof last_error);
  dc_buf_u8(&searched, 0);
  if (!lib) {
    dc_status *st = not_found(&searched, last_error);
    dc_buf_deinit(&searched);
    return st;
  }
  dc_buf_deinit(&searched);
  /* The library is never dlclose'd: NVRTC keeps per-process state, and a
   * loaded toolkit library costing nothing more when reused is simpler
   * than reference counting it. */
  dc_nvrtc *nv = dc_calloc(1, sizeof *nv);
  if (!nv) return dc_nomem("loading NVRTC");
  dc_status *st = library_path(lib, nv);
  const char *missing = st ? NULL : resolve(lib, &nv->api);
  if (!st && missing)
    st = dc_error(DC_ERR_UNSUPPORTED, "%s has no %s: not a usable NVRTC (CUDA 11.2 or newer is needed)", nv->library,
                  missing);
  if (!st) st = query_version_and_archs(nv);
  if (!st) st = find_includes(nv);
  if (st) {
    dc_nvrtc_unload(nv);
    return st;
  }
  *out = nv;
  return NULL;
}

void dc_nvrtc_unload(dc_nvrtc *nv) {
  if (!nv) return;
  dc_free(nv->library);
  dc_free(nv->version);
  dc_free(nv->supported_text);
  dc_free(nv->includes_text);
  for (int i = 0; i < nv->ninclude; i++) dc_free(nv->include_opts[i]);
  dc_free(nv);
}

const char *dc_nvrtc_version(const dc_nvrtc *nv) { return nv->version; }
const char *dc_nvrtc_library(const dc_nvrtc *nv) { return nv->library; }
const char *dc_nvrtc_include_dirs(const dc_nvrtc *nv) { return nv->includes_text; }
const char *dc_nvrtc_supported_archs(const dc_nvrtc *nv) { return nv->supported_text; }

/* ---- architectures ------------------------------------------------------ */

static int supported(const dc_nvrtc *nv, int number) {
  for (int i = 0; i < nv->nsupported; i++)
    if (nv->supported[i] == number) return 1;
  return 0;
}

/* "sm_90", "sm_90a", "compute_80": 0 when the spelling is right. */
static int parse_one(const char *s, size_t len, dc_cuda_arch *a) {
  memset(a, 0, sizeof *a);
  size_t prefix = len > 3 && !strncmp(s, "sm_", 3) ? 3 : len > 8 && !strncmp(s, "compute_", 8) ? 8 : 0;
  if (!prefix || len >= sizeof a->name) return -1;
  size_t i = prefix;
  int number = 0;
  for (; i < len && s[i] >= '0' && s[i] <= '9' && number < 10000; i++) number = number * 10 + (s[i] - '0');
  if (i == prefix || (i < len && !(s[i] == 'a' && i + 1 == len && number >= 90))) return -1;
  memcpy(a->name, s, len);
  a->number = number;
  a->ptx = prefix == 8;
  return 0;
}

dc_status *dc_nvrtc_parse_archs(const dc_nvrtc *nv, const char *list, dc_cuda_arch *out, int *n) {
  *n = 0;
  const char *text = list && *list ? list : DC_CUDA_DEFAULT_ARCHS, *p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    dc_cuda_arch a;
    if (parse_one(p, len, &a) != 0)
      return dc_error(DC_ERR_ARGUMENT,
                      "--cuda-arch %s: \"%.*s\" is not an architecture; expected sm_NN (a cubin) or compute_NN (PTX), "
                      "NN one of %s",
                      text, (int)len, p, nv->supported_text);
    if (!supported(nv, a.number))
      return dc_error(DC_ERR_ARGUMENT,
                      "--cuda-arch %s: NVRTC %s does not support %s; it supports %s (as sm_NN or compute_NN)", text,
                      nv->version, a.name, nv->supported_text);
    for (int i = 0; i < *n; i++)
      if (!strcmp(out[i].name, a.name))
        return dc_error(DC_ERR_ARGUMENT, "--cuda-arch %s: %s is listed twice", text, a.name);
    if (*n == DC_CUDA_MAX_ARCHS)
      return dc_error(DC_ERR_ARGUMENT, "--cuda-arch %s: at most %d architectures", text, DC_CUDA_MAX_ARCHS);
    out[(*n)++] = a;
    if (!p[len]) break;
    p += len + 1;
  }
  return NULL;
}

const char *dc_cuda_archs_str(const dc_cuda_arch *a, int n, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "," : "", a[i].name);
  return buf;
}

/* ---- compiling ---------------------------------------------------------- */

/* Fills opts (at most 8) for arch; arch_opt is the storage of the first. */
static int compile_options(const dc_nvrtc *nv, const dc_cuda_arch *arch, char *arch_opt, size_t cap,
                           const char **opts) {
  int n = 0;
  snprintf(arch_opt, cap, "--gpu-architecture=%s", arch->name);
  opts[n++] = arch_opt;
  opts[n++] = "-std=c++17";
  for (int i = 0; i < nv->ninclude; i++) opts[n++] = nv->include_opts[i];
  opts[n++] = "--fmad=true"; /* the default, stated: fused multiply-add yes, fast math no */
  return n;
}

/* The log text, or NULL when empty or unavailable. */
static char *program_log(const dc_nvrtc *nv, nvrtcProgram prog) {
  size_t size = 0;
  if (nv->api.GetProgramLogSize(prog, &size) || size <= 1) return NULL;
  char *log = dc_malloc(size + 1);
  if (!log) return NULL;
  if (nv->api.GetProgramLog(prog, log)) {
    dc_free(log);
    return NULL;
  }
  log[size] = 0;
  size_t len = strlen(log); /* without the blank lines NVRTC ends it with */
  while (len > 0 && strchr(" \t\r\n", log[len - 1])) log[--len] = 0;
  return log;
}

/* The error of a failed compile: the first LOG_LINES lines of the log. */
static dc_status *compile_error(const char *name, const dc_cuda_arch *arch, const char *what, const char *log) {
  if (!log)
    return dc_error(DC_ERR_INTERNAL, "NVRTC could not compile kernel %s for %s (%s), and gave no log", name, arch->name,
                    what);
  const char *end = log;
  for (int lines = 0; *end && lines < LOG_LINES; lines++) {
    const char *nl = strchr(end, '\n');
    end = nl ? nl + 1 : end + strlen(end);
  }
  int more = 0;
  for (const char *p = end; *p; p++) more += *p == '\n' || !p[1];
  char tail[64] = "";
  if (more) snprintf(tail, sizeof tail, "... (%d more lines)", more);
  return dc_error(DC_ERR_INTERNAL, "NVRTC could not compile kernel %s for %s (%s):\n%.*s%s", name, arch->name, what,
                  (int)(end - log), log, tail);
}

static dc_status *fetch_image(const dc_nvrtc *nv, nvrtcProgram prog, const char *name, const dc_cuda_arch *arch,
                              dc_buf *image) {
  size_t size = 0;
  nvrtcResult r = arch->ptx ? nv->api.GetPTXSize(prog, &size) : nv->api.GetCUBINSize(prog, &size);
  /* A virtual arch leaves the cubin empty (size 0) while "succeeding". */
  if (r || size == 0)
    return dc_error(DC_ERR_INTERNAL, "NVRTC compiled kernel %s for %s but gave no %s (%s)", name, arch->name,
                    arch->ptx ? "PTX" : "cubin", r ? result_name(nv, r) : "size 0");
  uint8_t *data = dc_malloc(size);
  if (!data) return dc_nomem("copying a CUDA image");
  r = arch->ptx ? nv->api.GetPTX(prog, (char *)data) : nv->api.GetCUBIN(prog, (char *)data);
  if (!r && arch->ptx && data[size - 1] != 0) r = -1;
  if (r) {
    dc_free(data);
    return dc_error(DC_ERR_INTERNAL, "NVRTC: reading the %s of kernel %s for %s failed", arch->ptx ? "PTX" : "cubin",
                    name, arch->name);
  }
  dc_buf_append(image, data, size);
  dc_free(data);
  return dc_buf_status(image, "copying a CUDA image");
}

dc_status *dc_nvrtc_compile(const dc_nvrtc *nv, const char *name, const char *source, const dc_cuda_arch *arch,
                            dc_nvrtc_output *out) {
  memset(out, 0, sizeof *out);
  dc_buf_init(&out->image);
  const char *opts[8], *headers[2] = {dc_cuda_prelude_text(), dc_cuda_mma_text()};
  const char *header_names[2] = {"dc_cuda.cuh", "dc_mma.cuh"};
  char arch_opt[64], file[160];
  int nopts = compile_options(nv, arch, arch_opt, sizeof arch_opt, opts);
  snprintf(file, sizeof file, "%s.cu", name);
  nvrtcProgram prog = NULL;
  nvrtcResult r = nv->api.CreateProgram(&prog, source, file, 2, headers, header_names);
  if (r) return compile_error(name, arch, result_name(nv, r), NULL);
  r = nv->api.CompileProgram(prog, nopts, opts);
  char *log = program_log(nv, prog);
  dc_status *st =
      r ? compile_error(name, arch, result_name(nv, r), log) : fetch_image(nv, prog, name, arch, &out->image);
  nv->api.DestroyProgram(&prog);
  if (!st && log && *log)
    out->log = log;
  else
    dc_free(log);
  if (st) dc_nvrtc_output_deinit(out);
  return st;
}

void dc_nvrtc_output_deinit(dc_nvrtc_output *o) { dc_kernel_image_deinit(o); }

int dc_nvrtc_cache_key(const dc_nvrtc *nv, const char *source, const dc_cuda_arch *arch, uint64_t *key) {
  const char *opts[8];
  char arch_opt[64];
  int nopts = compile_options(nv, arch, arch_opt, sizeof arch_opt, opts);
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_str(&b, "diffc CUDA kernel cache key 1");
  dc_buf_str(&b, source);
  dc_buf_str(&b, dc_cuda_prelude_text());
  /* Only for the sources that use it, so the keys of all others stay as
   * they were before dc_mma.cuh existed. */
  if (strstr(source, "#include \"dc_mma.cuh\"")) dc_buf_str(&b, dc_cuda_mma_text());
  for (int i = 0; i < nopts; i++) dc_buf_str(&b, opts[i]);
  dc_buf_str(&b, nv->version);
  dc_buf_str(&b, arch->name);
  int ok = !b.failed;
  if (ok) *key = dc_hash64(b.data, b.len);
  dc_buf_deinit(&b);
  return ok;
}
