/* fuzz_safetensors.c — the safetensors header reader (dc_st_open): any bytes
 * give a status or a file whose tensors all lie inside it. */
#include "frontend/frontend.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[256];
  if (!path[0]) {
    fuzz_tmp_path(path, sizeof path, "safetensors", ".safetensors");
    fuzz_cleanup_add(path);
  }
  fuzz_write_file(path, data, size);
  dc_st_file f;
  dc_status *st = dc_st_open(path, &f);
  if (st) {
    fuzz_drop(st);
    return 0;
  }
  volatile uint64_t sum = 0;
  for (int i = 0; i < f.ntensors; i++) {
    const dc_st_tensor *t = &f.tensors[i];
    if (t->offset + t->bytes > f.file.size || t->offset + t->bytes < t->offset) abort();
    if (t->bytes) sum += f.file.data[t->offset] + f.file.data[t->offset + t->bytes - 1];
    if (dc_st_find(&f, t->name) == NULL) abort();
  }
  (void)dc_st_find(&f, "no such tensor");
  (void)sum;
  dc_st_close(&f);
  return 0;
}
