/* cuda_images.c — which of a kernel's images (cubins per arch, PTX) a
 * device loads, and loading them into its context as modules: cubins for
 * the device's major architecture beat PTX (no JIT at load), a kernel's
 * shared memory must fit what the device lets it opt in to, and a device
 * with no image that suits it is refused before anything is allocated,
 * naming the --cuda-arch that would fit. */
#include "cuda_backend_impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define SMEM_DEFAULT_LIMIT (48u * 1024u) /* above it a kernel must opt in */

/* ---- images ------------------------------------------------------------ */
/* "sm_90" -> 90, 'a' suffix etc.; 0 when the name is not an arch. */
static int parse_arch(const char *arch, const char *prefix, char *suffix) {
  size_t n = strlen(prefix);
  if (strncmp(arch, prefix, n) != 0 || !isdigit((unsigned char)arch[n])) return 0;
  char *end;
  long v = strtol(arch + n, &end, 10);
  if (v <= 0 || v > 10000 || (*end && ((*end != 'a' && *end != 'f') || end[1]))) return 0;
  *suffix = *end;
  return (int)v;
}

/* Higher is better; -1 when the image cannot run on major.minor.  Cubins
 * always beat PTX (no JIT at load); among equals the arch-specific 'a'
 * build beats the plain one, which beats the family 'f' one. */
static int image_score(const dc_plan_cuda_image *img, int major, int minor) {
  int dev = major * 10 + minor, cubin = img->kind == DC_CUDA_IMAGE_CUBIN;
  char suffix = 0;
  int v = parse_arch(img->arch, cubin ? "sm_" : "compute_", &suffix);
  if (!v || (img->kind != DC_CUDA_IMAGE_CUBIN && img->kind != DC_CUDA_IMAGE_PTX)) return -1;
  int ok;
  if (suffix == 'a') ok = v == dev;
  else if (cubin || suffix == 'f') ok = v / 10 == major && v % 10 <= minor;
  else ok = v <= dev;
  if (!ok) return -1;
  return (cubin ? 1 << 20 : 0) + v * 4 + (suffix == 'a' ? 2 : suffix == 'f' ? 0 : 1);
}

int dc_cuda_pick_image(const dc_plan_cuda_kernel *k, int major, int minor) {
  int best = -1, best_score = -1;
  for (int i = 0; i < k->nimages; i++) {
    int s = image_score(&k->images[i], major, minor);
    if (s > best_score) best = i, best_score = s;
  }
  return best;
}

const char *dc_plan_cuda_archs(const dc_plan_cuda *k, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < k->nkernels; i++)
    for (int j = 0; j < k->kernels[i].nimages; j++) {
      const char *a = k->kernels[i].images[j].arch;
      int seen = 0;
      for (int i2 = 0; i2 <= i && !seen; i2++)
        for (int j2 = 0; j2 < (i2 == i ? j : k->kernels[i2].nimages) && !seen; j2++)
          seen = strcmp(k->kernels[i2].images[j2].arch, a) == 0;
      if (!seen && len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", a);
    }
  return buf;
}

/* ---- the images each device loads ------------------------------------------- */
static dc_status *no_image_error(const dc_cuda_backend *b, int d) {
  const dc_cuda_device_info *di = &b->info.dev[d];
  char archs[512];
  dc_plan_cuda_archs(b->k, archs, sizeof archs);
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: device %d (%s) has compute capability %d.%d, and the plan has no image for it (it holds %s: a "
                  "cubin sm_XY runs on X.Y and later GPUs of the same major X, PTX compute_XY on X.Y or newer); "
                  "recompile with diffc --target cuda --cuda-arch sm_%d%d",
                  b->path, di->ordinal, di->name, di->cc_major, di->cc_minor, archs[0] ? archs : "no images",
                  di->cc_major, di->cc_minor);
}

/* The image each kernel that runs on device d loads there. */
static dc_status *pick_images(dc_cuda_backend *b, int d) {
  const dc_cuda_device_info *di = &b->info.dev[d];
  for (int i = 0; i < b->k->nkernels; i++) {
    loaded_kernel *lk = &b->dev[d].kern[i];
    if (!lk->used) continue;
    lk->image = dc_cuda_pick_image(&b->k->kernels[i], di->cc_major, di->cc_minor);
    if (lk->image < 0) return no_image_error(b, d);
    const dc_plan_cuda_image *img = &b->k->kernels[i].images[lk->image];
    b->info.jit_kernels += img->kind == DC_CUDA_IMAGE_PTX;
    if (!b->info.image[0])
      snprintf(b->info.image, sizeof b->info.image, img->kind == DC_CUDA_IMAGE_PTX ? "PTX %s (JIT)" : "cubin %s",
               img->arch);
  }
  return NULL;
}

static dc_status *check_shared_memory(const dc_cuda_backend *b, int d) {
  const dc_cuda_device_info *di = &b->info.dev[d];
  int optin = b->dev[d].optin_smem;
  for (int i = 0; i < b->k->nkernels; i++) {
    const dc_plan_cuda_kernel *kk = &b->k->kernels[i];
    if (b->dev[d].kern[i].used && kk->smem_bytes > SMEM_DEFAULT_LIMIT && kk->smem_bytes > (uint32_t)optin)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: kernel %s needs %u bytes of dynamic shared memory per block, but device %d (%s, %d.%d) "
                      "allows at most %d; recompile for this GPU (diffc --cuda-arch sm_%d%d)",
                      b->path, kk->name, kk->smem_bytes, di->ordinal, di->name, di->cc_major, di->cc_minor, optin,
                      di->cc_major, di->cc_minor);
  }
  return NULL;
}

dc_status *dc_cuda_choose_images(dc_cuda_backend *b, int d) {
  DC_TRY(pick_images(b, d));
  return check_shared_memory(b, d);
}

/* ---- modules --------------------------------------------------------------------- */
/* Kernel i into device d's context (current). */
static dc_status *load_module(dc_cuda_backend *b, int d, int i) {
  const dc_plan_cuda_kernel *kk = &b->k->kernels[i];
  loaded_kernel *lk = &b->dev[d].kern[i];
  const dc_plan_cuda_image *img = &kk->images[lk->image];
  dc_status *st;
  if (img->kind == DC_CUDA_IMAGE_PTX) {
    char log[4096] = "";
    int opts[] = {DC_CU_JIT_ERROR_LOG_BUFFER, DC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(uintptr_t)(sizeof log - 1)};
    st = CU(b, ModuleLoadDataEx, &lk->module, img->data, 2, opts, vals);
    if (st && log[0]) { /* what the JIT said is the useful part */
      dc_status *with_log = dc_error(dc_status_code_of(st), "%s; the PTX JIT said: %.600s", dc_status_message(st), log);
      dc_status_free(st);
      st = with_log;
    }
  } else {
    st = CU(b, ModuleLoadData, &lk->module, img->data);
  }
  if (!st) st = CU(b, ModuleGetFunction, &lk->fn, lk->module, kk->name);
  if (!st && kk->smem_bytes > SMEM_DEFAULT_LIMIT)
    st = CU(b, FuncSetAttribute, lk->fn, DC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)kk->smem_bytes);
  char on[48] = "";
  if (b->ndevices > 1) snprintf(on, sizeof on, " on device %d", b->dev[d].ordinal);
  return dc_status_annotate(st, "%s: kernel %s (%s %s)%s", b->path, kk->name,
                            img->kind == DC_CUDA_IMAGE_PTX ? "PTX" : "cubin", img->arch, on);
}

dc_status *dc_cuda_backend_load_kernels(dc_cuda_backend *b) {
  for (int d = 0; d < b->ndevices; d++) {
    DC_TRY(dc_cuda_use_device(b, d));
    for (int i = 0; i < b->k->nkernels; i++)
      if (b->dev[d].kern[i].used) DC_TRY(load_module(b, d, i));
  }
  return dc_cuda_lt_setup(b);
}
