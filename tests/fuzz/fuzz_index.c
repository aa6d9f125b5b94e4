/* fuzz_index.c — the sharded index reader: the bytes are
 * diffusion_pytorch_model.safetensors.index.json in a folder with a config
 * and two small real shards (written once with dc_st_write):
 *   diffusion_pytorch_model-00001-of-00002.safetensors: a.weight [2,2], b.bias [3]
 *   diffusion_pytorch_model-00002-of-00002.safetensors: c.weight [4]
 * dc_folder_open must give a status or a folder whose entries are sound. */
#include "frontend/frontend.h"
#include "fuzz_common.h"

#define SHARD1 "diffusion_pytorch_model-00001-of-00002.safetensors"
#define SHARD2 "diffusion_pytorch_model-00002-of-00002.safetensors"

static void setup(const char *dir) {
  static const float v[4] = {1, 2, 3, 4};
  char p[400];
  fuzz_mkdir(dir);
  fuzz_cleanup_add(dir);
  fuzz_write_text(dir, "config.json", "{\"_class_name\": \"UNet2DConditionModel\", \"in_channels\": 4}");
  snprintf(p, sizeof p, "%s/config.json", dir);
  fuzz_cleanup_add(p);
  dc_st_out s1[2] = {{"a.weight", {DT_F32, 2, {2, 2}}, v}, {"b.bias", {DT_F32, 1, {3}}, v}};
  dc_st_out s2[1] = {{"c.weight", {DT_F32, 1, {4}}, v}};
  snprintf(p, sizeof p, "%s/" SHARD1, dir);
  dc_status *st = dc_st_write(p, s1, 2);
  fuzz_cleanup_add(p);
  snprintf(p, sizeof p, "%s/" SHARD2, dir);
  if (!st) st = dc_st_write(p, s2, 1);
  fuzz_cleanup_add(p);
  if (st) {
    fprintf(stderr, "fuzz harness: %s\n", dc_status_message(st));
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[256], index[400];
  if (!dir[0]) {
    fuzz_tmp_path(dir, sizeof dir, "index", "");
    setup(dir);
    snprintf(index, sizeof index, "%s/diffusion_pytorch_model.safetensors.index.json", dir);
    fuzz_cleanup_add(index);
  }
  fuzz_write_file(index, data, size);
  dc_folder f;
  dc_status *st = dc_folder_open(dir, NULL, &f);
  if (st) {
    fuzz_drop(st);
    return 0;
  }
  for (int i = 0; i < f.nentries; i++) {
    const struct dc_folder_entry *e = &f.entries[i];
    if (e->shard < 0 || e->shard >= f.nshards || !e->tensor || !e->name) abort();
    if (dc_folder_find(&f, e->name) == NULL) abort();
  }
  (void)dc_folder_find(&f, "no.such.tensor");
  dc_folder_close(&f);
  return 0;
}
