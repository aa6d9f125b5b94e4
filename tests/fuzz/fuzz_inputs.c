/* fuzz_inputs.c — diffrun's input file path (tools/diffrun.c bind_inputs):
 * dc_st_open on the bytes, then each input of a fixed signature (unet_tiny's
 * forward at batch 4) looked up, its shape and dtype checked, and its data
 * copied out of the map the way bind_inputs does before drt_set_input. */
#include "frontend/frontend.h"
#include "fuzz_common.h"

typedef struct {
  const char *name;
  int rank;
  int64_t dims[6];
} sig_input;

static const sig_input sig[] = {
    {"sample", 4, {4, 4, 16, 16}},
    {"timestep", 1, {4}},
    {"encoder_hidden_states", 3, {4, 4, 8}},
};

static dc_status *bind(const char *path, double *sum) {
  dc_st_file f;
  DC_TRY(dc_st_open(path, &f));
  dc_status *st = NULL;
  for (size_t i = 0; i < sizeof sig / sizeof sig[0] && !st; i++) {
    const sig_input *in = &sig[i];
    const dc_st_tensor *t = dc_st_find(&f, in->name);
    uint64_t numel = 1;
    for (int k = 0; k < in->rank; k++) numel *= (uint64_t)in->dims[k];
    if (!t) {
      st = dc_error(DC_ERR_MISMATCH, "%s: no tensor \"%s\"", path, in->name);
    } else if (t->rank != in->rank || memcmp(t->dims, in->dims, sizeof(int64_t) * (size_t)t->rank) != 0) {
      st = dc_error(DC_ERR_MISMATCH, "%s: tensor \"%s\" has the wrong shape", path, in->name);
    } else if (t->dtype != DT_F32) {
      st = dc_error(DC_ERR_MISMATCH, "%s: tensor \"%s\" has dtype %s, expected F32", path, in->name,
                    dc_dtype_safetensors_name(t->dtype));
    } else if (t->bytes != numel * sizeof(float)) {
      /* dc_st_open checked bytes == numel * 4; drt_set_input checks numel. */
      abort();
    } else {
      const uint8_t *src = f.file.data + t->offset;
      float *tmp = dc_malloc(t->bytes ? t->bytes : 1);
      if (!tmp) st = dc_nomem("reading inputs");
      else {
        memcpy(tmp, src, t->bytes);
        for (uint64_t k = 0; k < numel; k++) *sum += tmp[k];
        dc_free(tmp);
      }
    }
  }
  dc_st_close(&f);
  return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[256];
  if (!path[0]) {
    fuzz_tmp_path(path, sizeof path, "inputs", ".safetensors");
    fuzz_cleanup_add(path);
  }
  fuzz_write_file(path, data, size);
  double sum = 0;
  fuzz_drop(bind(path, &sum));
  volatile double sink = sum;
  (void)sink;
  return 0;
}
