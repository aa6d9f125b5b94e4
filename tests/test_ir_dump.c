/* test_ir_dump.c — the words of the IR dump (ir/print.c) are true (issue
 * 11, items 10 and 11): an offloaded plan's weights line gives all the
 * weights and splits them into resident and offloaded, and the offload line
 * says where they wait (pinned host memory, their own files, or the
 * --offload-dir group files); values after the frontend's token permutes
 * carry the layout their dims have; a timestep input's tag says what
 * --random-inputs does with it; --vae-tiling and --vae-slicing are recorded
 * with their tiles, or with why they have no effect at this size.  Every
 * dump read here also round-trips through ir/parse.c. */
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "passes/passes.h"
#include "testutil.h"

/* The dump's line that starts with prefix, copied ("" if none). */
static const char *line_of(const char *text, const char *prefix, char *buf, size_t cap) {
  buf[0] = 0;
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (strncmp(p, prefix, strlen(prefix)) != 0) continue;
    size_t n = strcspn(p, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    break;
  }
  return buf;
}

static void check_has(const char *what, const char *text, const char *needle) {
  CHECK(strstr(text, needle) != NULL);
  if (!strstr(text, needle)) printf("  %s: no \"%s\" in \"%.300s\"\n", what, needle, text);
}

/* The text parses back to a module that prints the same text. */
static void check_round_trip(const char *what, const char *text) {
  dc_module *m = NULL;
  CHECK_OK(dc_parse(text, strlen(text), what, &m));
  char *again = m ? tu_ir_text(m) : NULL;
  CHECK(again && strcmp(again, text) == 0);
  if (again && strcmp(again, text) != 0) printf("  %s: the parsed dump prints differently\n", what);
  dc_free(again);
  dc_module_destroy(m);
}

static char *fixture_model(const char *name) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *fx = dc_path_join(dir, name), *model = dc_path_join(fx, "model");
  dc_free(dir), dc_free(fx);
  return model;
}

/* The whole compile but codegen (the dump diffc --dump-ir writes). */
static char *compiled_dump(const dc_compile_options *co) {
  dc_folder f;
  dc_module *m = NULL;
  CHECK_OK(dc_compile_module(co, &f, &m));
  char *text = m ? tu_ir_text(m) : NULL;
  dc_module_destroy(m);
  dc_folder_close(&f);
  return text;
}

/* Offloaded weights: counted, split, and placed where the runtime keeps them. */
static void test_offload_words(void) {
  char *model = fixture_model("vae_tiny"), line[512];
  dc_compile_options co = {.model = model, .entry = "decode"};
  co.memory.offload = DC_OFFLOAD_GROUP;
  co.memory.group_level = DC_GROUP_LEAF;
  char *pinned = compiled_dump(&co);
  co.memory.host_memory = DC_HOST_ON_DEMAND;
  char *on_demand = compiled_dump(&co);
  char *dir = tu_path("offload");
  co.memory.host_memory = DC_HOST_DEFAULT;
  co.offload_dir = dir;
  char *in_dir = compiled_dump(&co);
  co = (dc_compile_options){.model = model, .entry = "decode"};
  char *resident = compiled_dump(&co);
  if (pinned && on_demand && in_dir && resident) {
    /* all 70 tensors (7724 bytes) counted, none resident: not "0 B" */
    line_of(pinned, "# weights: ", line, sizeof line);
    check_has("pinned", line, "70 tensors, 7.5 KiB (7724 bytes) in 1 file(s): resident 0 B, offloaded 7.5 KiB");
    line_of(resident, "# weights: ", line, sizeof line);
    check_has("resident", line, "70 tensors, 7.5 KiB (7724 bytes) in 1 file(s), all resident on the device");
    check_has("pinned", line_of(pinned, "# offloaded: ", line, sizeof line), "pinned host memory");
    check_has("pinned", pinned, "64 B, offloaded, file 0 @ ");
    /* on-demand and --offload-dir: on disk, never "in host memory" */
    line_of(on_demand, "# offloaded: ", line, sizeof line);
    check_has("on-demand", line, "on disk in their weight files, read at every upload");
    CHECK(strstr(line, "host memory") == NULL);
    line_of(in_dir, "# offloaded: ", line, sizeof line);
    check_has("--offload-dir", line, "on disk in the offload_dir group files, read at every upload");
    CHECK(strstr(line, "host memory") == NULL);
    check_has("--offload-dir", line_of(in_dir, "# offload_dir = ", line, sizeof line), "(35 group files)");
    CHECK(strstr(resident, "# offloaded") == NULL);
    check_round_trip("pinned", pinned);
    check_round_trip("on-demand", on_demand);
    check_round_trip("--offload-dir", in_dir);
  }
  printf("offload: weights line split resident/offloaded; pinned, on-demand and --offload-dir said as they are\n");
  dc_free(pinned), dc_free(on_demand), dc_free(in_dir), dc_free(resident), dc_free(dir), dc_free(model);
}

/* A tiled VAE runs its decoder once per tile, each run its own offload
 * groups over the same weights: --offload-dir writes each weight once (it
 * read past its table of source files, and crashed, on the second run). */
static void test_offload_dir_tiled(void) {
  char *model = fixture_model("vae_tiled"), *dir = tu_path("offload_tiled"), line[512];
  dc_input_shape two = {"z", 4, {2, 4, 16, 16}};
  dc_compile_options co = {.model = model, .entry = "decode", .shapes = &two, .nshapes = 1,
                           .vae_tiling = 1, .vae_slicing = 1, .tile_size = 24, .offload_dir = dir};
  co.memory.offload = DC_OFFLOAD_GROUP;
  co.memory.group_level = DC_GROUP_LEAF;
  char *text = compiled_dump(&co);
  if (text) {
    /* 35 leaf modules, each run once per tile: 280 groups, 35 files */
    check_has("tiled --offload-dir", line_of(text, "# offload = ", line, sizeof line), ": 280 groups, 560 uploads");
    check_has("tiled --offload-dir", line_of(text, "# offload_dir = ", line, sizeof line), "(35 group files)");
    check_has("tiled --offload-dir", line_of(text, "# weights: ", line, sizeof line), "in 35 file(s): resident 0 B");
    check_round_trip("tiled --offload-dir", text);
  }
  printf("offload: a tiled VAE's repeated groups go to --offload-dir once each\n");
  dc_free(text), dc_free(dir), dc_free(model);
}

/* --device-map with a module on the cpu: its weights are uploaded to device
 * 0, so device 0's arena holds them and device 1's holds only activations. */
static void test_device_words(void) {
  char *model = fixture_model("vae_tiny"), *path = tu_path("map.json"), line[512];
  const char *json = "{\"\": 0, \"decoder.up_blocks.1\": \"cpu\", \"decoder.conv_out\": 1}";
  tu_write_file(path, json, strlen(json));
  dc_map_entry *map = NULL;
  int n = 0;
  CHECK_OK(dc_load_device_map(path, &map, &n));
  dc_compile_options co = {.model = model, .entry = "decode"};
  co.memory.device_map = DC_MAP_FILE, co.memory.device_map_file = path, co.memory.map = map, co.memory.nmap = n;
  char *text = map ? compiled_dump(&co) : NULL;
  if (text) {
    check_has("cpu module", line_of(text, "# weights: ", line, sizeof line), ": resident 6.7 KiB, offloaded 872 B");
    check_has("cpu module", line_of(text, "#   device 0: ", line, sizeof line),
              "+ arena (activations and uploaded weights) ");
    check_has("cpu module", line_of(text, "#   device 1: ", line, sizeof line), "= weights 228 B + activations ");
    check_round_trip("cpu module", text);
  }
  printf("device map: each device's line says whether its arena holds uploaded weights\n");
  dc_free(text), dc_free(map), dc_free(path), dc_free(model);
}

/* Every value line whose op matches: its layout field is want. */
static int check_layouts(const char *what, const char *text, const char *op_text, const char *want) {
  int n = 0;
  char field[16];
  snprintf(field, sizeof field, ", %s, dev", want);
  for (const char *p = strstr(text, op_text); p; p = strstr(p + 1, op_text)) {
    const char *eol = strchr(p, '\n'), *hit = strstr(p, field);
    n++;
    CHECK(hit && eol && hit < eol);
    if (!hit || !eol || hit > eol) printf("  %s: \"%.*s\" is not labelled %s\n", what, (int)(eol ? eol - p : 80), p, want);
  }
  return n;
}

/* The [B,HW,C] tokens reshaped back to [B,H,W,C]: labelled nhwc. */
static int check_token_exits(const char *what, const char *text) {
  int n = 0;
  for (const char *p = strstr(text, "{perm=[0,3,1,2]}"); p; p = strstr(p + 1, "{perm=[0,3,1,2]}")) {
    const char *line = p;
    while (line > text && line[-1] != '\n') line--;
    int from = atoi(strstr(line, "permute(%") + 9); /* the permute reads the reshape */
    char head[32];
    snprintf(head, sizeof head, "\n%%%d = reshape(", from);
    const char *r = strstr(text, head), *eol = r ? strchr(r + 1, '\n') : NULL, *hit = r ? strstr(r, ", nhwc, dev") : NULL;
    n++;
    CHECK(r && hit && hit < eol);
    if (!r || !hit || hit > eol) printf("  %s: %%%d, read by the token exit permute, is not an nhwc reshape\n", what, from);
  }
  return n;
}

/* A transformer's (and the VAE mid-block attention's) token entry
 * permute(0,2,3,1) makes [B,H,W,C]: nhwc; the exit reshapes tokens to
 * [B,H,W,C] (nhwc) and permutes back to nchw. */
static void test_layout_labels(void) {
  char *model = fixture_model("unet_tiny"), *vae = fixture_model("vae_tiny"), line[512];
  dc_compile_options vo = {.model = vae, .entry = "decode"};
  char *text = compiled_dump(&vo);
  if (text) {
    CHECK(check_layouts("vae", text, "{perm=[0,2,3,1]}", "nhwc") == 1);
    CHECK(check_layouts("vae", text, "{perm=[0,3,1,2]}", "nchw") == 1);
    CHECK(check_token_exits("vae", text) == 1);
  }
  dc_free(text), dc_free(vae);
  dc_compile_options co = {.model = model};
  text = compiled_dump(&co);
  if (text) {
    int in = check_layouts("nchw plan", text, "{perm=[0,2,3,1]}", "nhwc");
    int out = check_layouts("nchw plan", text, "{perm=[0,3,1,2]}", "nchw");
    CHECK(in > 0 && in == out && check_token_exits("unet", text) == out);
    /* the timestep input says what --random-inputs fills it with */
    check_has("timestep", line_of(text, "%1 = input \"timestep\"", line, sizeof line),
              ", timestep (--random-inputs: uniform integers 0..999)");
    check_round_trip("unet_tiny", text);
    printf("layouts: %d token permutes in and %d out labelled by their dims (nhwc in, nchw out)\n", in, out);
  }
  dc_free(text);
  co.memory.layout = LAYOUT_NHWC; /* the layout pass still runs over the relabelled graph */
  text = compiled_dump(&co);
  if (text) {
    check_has("nhwc plan", text, "# layout = nhwc");
    check_round_trip("unet_tiny nhwc", text);
  }
  dc_free(text), dc_free(model);
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* --vae-tiling / --vae-slicing: the tiles built, or why none. */
static void test_vae_words(void) {
  char *model = fixture_model("vae_tiled"), line[512];
  /* vae_tiled: 2 blocks (factor 2); a 64 px tile is 32 latents, z is 16x16 */
  dc_input_shape one = {"z", 4, {1, 4, 16, 16}}, two = {"z", 4, {2, 4, 16, 16}};
  dc_compile_options co = {.model = model, .entry = "decode", .shapes = &one, .nshapes = 1,
                           .vae_tiling = 1, .vae_slicing = 1, .tile_size = 64};
  char *none = compiled_dump(&co);
  co.shapes = &two, co.tile_size = 16;
  char *tiled = compiled_dump(&co);
  co.vae_tiling = co.vae_slicing = 0, co.tile_size = 0;
  char *plain = compiled_dump(&co);
  if (none && tiled && plain) {
    check_has("no effect", line_of(none, "# vae_tiling = ", line, sizeof line),
              "requested, no effect: z 16x16 latents fits one tile of 32 latents (--tile-size 64 px)");
    check_has("no effect", line_of(none, "# vae_slicing = ", line, sizeof line), "requested, no effect: batch 1");
    CHECK(count(none, "conv2d") == count(plain, "conv2d")); /* the graph is the untiled one, as diffusers' */
    /* 16 px tiles = 8 latents every 6: 3x3 per sample, two samples */
    check_has("tiled", line_of(tiled, "# vae_tiling = ", line, sizeof line),
              "tiles of 8x8 latents (16 px) every 6 latents, overlap 0.25, blended over 4 px: 3x3 = 9 tiles per "
              "sample, 18 in all");
    check_has("sliced", line_of(tiled, "# vae_slicing = ", line, sizeof line), "one sample at a time: 2 slices");
    CHECK(count(tiled, "  # decoder.conv_in, ") == 18); /* one decoder per tile */
    CHECK(strstr(plain, "# vae_") == NULL);
    check_round_trip("no effect", none);
    check_round_trip("tiled", tiled);
  }
  printf("vae: tiling and slicing recorded with their tiles, or as having no effect at this size\n");
  dc_free(none), dc_free(tiled), dc_free(plain), dc_free(model);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_offload_words();
  test_offload_dir_tiled();
  test_device_words();
  test_layout_labels();
  test_vae_words();
  return tu_finish();
}
