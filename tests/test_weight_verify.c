/* test_weight_verify.c — a plan never runs on weight bytes that changed
 * since compile (issue 11, item 1).  On a copy of the vae_tiny fixture:
 * 4 bytes overwritten inside decoder.conv_in.weight (same size, same
 * header) are refused, naming the file and the tensor; the untouched file
 * and the restored one load; drt_options.no_verify_weights skips the check;
 * of two changed tensors the first in the file is named; a changed tensor
 * the plan does not read (the encoder's, in a decode plan) is no reason to
 * refuse.  The files diffc writes itself are covered the same way: the
 * --storage-dtype and --layout nhwc weights beside the plan and the
 * --offload-dir group files. */
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "testutil.h"

static char *model_dir, *model_weights;

/* Overwrites 4 bytes at byte `at` of tensor `name` in `path` with `val`;
 * returns the 4 bytes that were there (to restore them). */
static uint32_t poke(const char *path, const char *name, uint64_t at, uint32_t val) {
  dc_st_file f;
  CHECK_OK(dc_st_open(path, &f));
  const dc_st_tensor *t = dc_st_find(&f, name);
  CHECK(t && t->bytes >= at + 4);
  uint64_t off = t ? t->offset + at : 0;
  dc_st_close(&f);
  uint32_t old = 0;
  FILE *fp = fopen(path, "r+b");
  CHECK(fp && fseek(fp, (long)off, SEEK_SET) == 0 && fread(&old, 4, 1, fp) == 1);
  CHECK(fp && fseek(fp, (long)off, SEEK_SET) == 0 && fwrite(&val, 4, 1, fp) == 1);
  if (fp) fclose(fp);
  return old;
}

static dc_status *load(const char *plan, int no_verify) {
  drt_options o = {.backend = "reference", .threads = 1, .no_verify_weights = no_verify};
  drt_plan *p = NULL;
  dc_status *st = drt_load(plan, &o, &p);
  if (!st) {
    drt_set_random_inputs(p, 1);
    drt_stats s;
    st = drt_run(p, &s);
    if (!st) CHECK((drt_info(p)->verified_bytes > 0) == !no_verify);
  }
  drt_destroy(p);
  return st;
}

/* The refusal names the plan, the file, the tensor and the remedy. */
static void check_refused(const char *plan, const char *file, const char *tensor) {
  char want[4096];
  snprintf(want, sizeof want, "%s: weight file %s changed since compile: the bytes of tensor %s (", plan, file, tensor);
  dc_status *st = load(plan, 0);
  CHECK(st != NULL);
  if (!st) return;
  const char *msg = dc_status_message(st);
  CHECK(strstr(msg, want) != NULL);
  CHECK(strstr(msg, "the plan must be recompiled") != NULL);
  if (!strstr(msg, want)) fprintf(stderr, "  got: %s\n  want: %s\n", msg, want);
  dc_status_free(st);
}

static void compile(const char *plan, dc_compile_options co) {
  co.model = model_dir;
  co.entry = "decode";
  CHECK_OK(dc_compile(&co, plan, NULL));
}

static void test_original_file(void) {
  char *plan = tu_path("plain.dplan");
  compile(plan, (dc_compile_options){0});
  CHECK_OK(load(plan, 0));
  uint32_t old = poke(model_weights, "decoder.conv_in.weight", 40, 0x40600000u); /* 3.5f */
  check_refused(plan, model_weights, "decoder.conv_in.weight");
  CHECK_OK(load(plan, 1)); /* the opt-out runs it (on the changed bytes, as asked) */
  poke(model_weights, "decoder.conv_in.weight", 40, old);
  CHECK_OK(load(plan, 0)); /* restored: accepted again, nothing was cached */
  printf("checkpoint: 4 bytes changed inside decoder.conv_in.weight are refused; untouched, restored and "
         "--no-verify-weights load\n");

  /* Two tensors changed: the message names the one first in the file. */
  dc_st_file f;
  CHECK_OK(dc_st_open(model_weights, &f));
  const dc_st_tensor *a = dc_st_find(&f, "decoder.conv_in.weight"), *b = dc_st_find(&f, "decoder.conv_out.weight");
  CHECK(a && b);
  int a_first = a && b && a->offset < b->offset;
  dc_st_close(&f);
  uint32_t oa = poke(model_weights, "decoder.conv_in.weight", 0, 0x3f800000u);
  uint32_t ob = poke(model_weights, "decoder.conv_out.weight", 0, 0x3f800000u);
  check_refused(plan, model_weights, a_first ? "decoder.conv_in.weight" : "decoder.conv_out.weight");
  dc_status *st = load(plan, 0);
  CHECK(st && strstr(dc_status_message(st), "(and 1 more tensor)"));
  dc_status_free(st);
  poke(model_weights, "decoder.conv_in.weight", 0, oa);
  poke(model_weights, "decoder.conv_out.weight", 0, ob);

  /* The encoder is not part of a decode plan: its bytes do not matter. */
  uint32_t oe = poke(model_weights, "encoder.conv_in.weight", 0, 0x3f800000u);
  CHECK_OK(load(plan, 0));
  poke(model_weights, "encoder.conv_in.weight", 0, oe);
  printf("checkpoint: the first changed tensor in the file is named; a tensor the plan does not read is ignored\n");
  free(plan);
}

/* --storage-dtype and --layout nhwc: the converted weights diffc wrote
 * beside the plan are the file the plan reads them from. */
static void test_beside_plan(const char *name, dc_compile_options co) {
  char *plan = tu_path(name), wpath[4096];
  compile(plan, co);
  snprintf(wpath, sizeof wpath, "%s.weights.safetensors", plan);
  CHECK(dc_file_exists(wpath));
  CHECK_OK(load(plan, 0));
  uint32_t old = poke(wpath, "decoder.conv_in.weight", 8, 0x12345678u);
  check_refused(plan, wpath, "decoder.conv_in.weight");
  CHECK_OK(load(plan, 1));
  poke(wpath, "decoder.conv_in.weight", 8, old);
  CHECK_OK(load(plan, 0));
  printf("%s: a changed tensor in %s.weights.safetensors is refused\n", name, name);
  free(plan);
}

/* --offload-dir: the group file holding decoder.conv_in.weight. */
static void test_offload_dir(void) {
  char *plan = tu_path("offload.dplan"), *dir = tu_path("offload");
  dc_compile_options co = {.offload_dir = dir};
  co.memory.offload = DC_OFFLOAD_GROUP;
  co.memory.group_level = DC_GROUP_LEAF;
  compile(plan, co);
  CHECK_OK(load(plan, 0));
  char cmd[4200], group[4096] = "";
  snprintf(cmd, sizeof cmd, "ls '%s'", dir);
  FILE *ls = popen(cmd, "r");
  char line[512];
  while (ls && !group[0] && fgets(line, sizeof line, ls)) {
    line[strcspn(line, "\n")] = 0;
    char *path = dc_path_join(dir, line);
    dc_st_file f;
    dc_status *st = dc_st_open(path, &f);
    if (!st && dc_st_find(&f, "decoder.conv_in.weight")) snprintf(group, sizeof group, "%s", path);
    if (!st) dc_st_close(&f);
    dc_status_free(st);
    dc_free(path);
  }
  if (ls) pclose(ls);
  CHECK(group[0] != 0);
  if (group[0]) {
    uint32_t old = poke(group, "decoder.conv_in.weight", 4, 0xdeadbeefu);
    check_refused(plan, group, "decoder.conv_in.weight");
    CHECK_OK(load(plan, 1));
    poke(group, "decoder.conv_in.weight", 4, old);
    CHECK_OK(load(plan, 0));
  }
  printf("--offload-dir: a changed tensor in a group file is refused\n");
  free(plan), free(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  /* A copy: the test writes into the weights. */
  model_dir = tu_path("vae");
  char *src = dc_path_join(tu_source_dir, "fixtures/vae_tiny/model"), cmd[4096];
  snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, model_dir);
  CHECK(system(cmd) == 0);
  model_weights = dc_path_join(model_dir, "diffusion_pytorch_model.safetensors");
  test_original_file();
  dc_compile_options cast = {0}, nhwc = {0};
  cast.memory.storage = DT_BF16;
  nhwc.memory.layout = LAYOUT_NHWC;
  test_beside_plan("cast.dplan", cast);
  test_beside_plan("nhwc.dplan", nhwc);
  test_offload_dir();
  dc_free(src), dc_free(model_weights), free(model_dir);
  return tu_finish();
}
