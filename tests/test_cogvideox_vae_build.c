/* test_cogvideox_vae_build.c — the AutoencoderKLCogVideoX builder
 * (frontend/cogvideox_vae.c, frontend/blocks/autoencoder_kl_cogvideox.c) on
 * the cogvideox_vae fixture's weights: how frame batching is unrolled (the
 * second batch's causal convs read the first batch's cache frames, and only
 * they), that batching lowers the planned peak, the output shapes, and the
 * exact messages of the configs and inputs it refuses.  The numbers
 * themselves are checked against diffusers by fixture_check. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/compile.h"
#include "frontend/frontend.h"
#include "testutil.h"

static char *fixture_model(void) {
  char *dir = dc_path_join(tu_source_dir, "fixtures/cogvideox_vae/model");
  return dir;
}

static dc_status *build_in(const char *dir, const char *entry, const dc_input_shape *shape, int no_batching,
                           int tiling, dc_module **out) {
  dc_folder f;
  dc_folder_options fo = {NULL, NULL};
  *out = NULL;
  DC_TRY(dc_folder_open(dir, &fo, &f));
  dc_build_options opt = {.entry = entry, .shapes = shape, .nshapes = shape ? 1 : 0,
                          .vae_no_frame_batching = no_batching, .vae_tiling = tiling, .clip_hidden_index = -1};
  dc_status *st = dc_frontend_build(&f, &opt, out);
  dc_folder_close(&f);
  return st;
}

static int count_scope(const dc_module *m, dc_op op, const char *scope) {
  int n = 0;
  for (int i = 0; i < m->nnodes; i++)
    n += m->nodes[i].op == op && m->nodes[i].scope && !strcmp(m->nodes[i].scope, scope);
  return n;
}

static int32_t nth_scope(const dc_module *m, dc_op op, const char *scope, int k) {
  for (int i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == op && m->nodes[i].scope && !strcmp(m->nodes[i].scope, scope) && k-- == 0) return i;
  return -1;
}

static const dc_type *output_type(const dc_module *m, const char *name) {
  for (int i = 0; i < m->noutputs; i++)
    if (!strcmp(m->outputs[i].name, name)) return &m->nodes[m->outputs[i].node].type;
  return NULL;
}

static int is5(const dc_type *t, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e) {
  return t && t->rank == 5 && t->dims[0] == a && t->dims[1] == b && t->dims[2] == c && t->dims[3] == d &&
         t->dims[4] == e;
}

static uint64_t planned_peak(dc_module *m) {
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  uint64_t p = l.live_peak_bytes;
  dc_liveness_deinit(&l);
  return p;
}

/* z 1x4x5x2x3: batches of latent frames [0,3) and [3,5).  The first batch's
 * conv_in pads with its first frame; the second's reads a slice of the
 * first batch's padded input (its last 2 frames), which nothing else reads. */
static void test_batches(void) {
  char *dir = fixture_model();
  dc_input_shape z = {"z", 5, {1, 4, 5, 2, 3}};
  dc_module *m = NULL, *whole = NULL;
  CHECK_OK(build_in(dir, "decode", &z, 0, 0, &m));
  CHECK_OK(build_in(dir, "decode", &z, 1, 0, &whole));
  if (m && whole) {
    CHECK(is5(output_type(m, "sample"), 1, 3, 17, 16, 24));
    CHECK(is5(output_type(whole, "sample"), 1, 3, 17, 16, 24));
    CHECK(count_scope(m, OP_CONV3D, "decoder.conv_in.conv") == 2);
    CHECK(count_scope(whole, OP_CONV3D, "decoder.conv_in.conv") == 1);
    int32_t c0 = nth_scope(m, OP_CONV3D, "decoder.conv_in.conv", 0);
    int32_t c1 = nth_scope(m, OP_CONV3D, "decoder.conv_in.conv", 1);
    int32_t pad0 = m->nodes[c0].inputs[0], pad1 = m->nodes[c1].inputs[0];
    CHECK(m->nodes[pad0].op == OP_CONCAT && m->nodes[pad1].op == OP_CONCAT);
    CHECK(m->nodes[pad0].type.dims[2] == 3 + 2 && m->nodes[pad1].type.dims[2] == 2 + 2);
    int32_t cache = m->nodes[pad1].inputs[0];
    CHECK(m->nodes[cache].op == OP_SLICE && m->nodes[cache].inputs[0] == pad0);
    CHECK(dc_node_int(&m->nodes[cache], "start") == 3 && dc_node_int(&m->nodes[cache], "end") == 5);
    int readers = 0;
    for (int i = 0; i < m->nnodes; i++)
      for (int k = 0; k < m->nodes[i].ninputs; k++) readers += m->nodes[i].inputs[k] == cache;
    CHECK(readers == 1);
    /* the last batch keeps no cache: the slices of conv_in's input are the
     * first frame (batch 0) and the cache (batch 0 for batch 1) only */
    CHECK(count_scope(m, OP_SLICE, "decoder.conv_in") == 2);
    CHECK(!strcmp(dc_module_get_meta(m, "vae_frame_batching"),
                  "2 batches of 2 latent frames (the first 3), conv caches chained"));
    /* one batch's activations at a time: a smaller peak than the whole video's */
    uint64_t pb = planned_peak(m), pw = planned_peak(whole);
    CHECK(pb < pw);
    printf("  ok: decode batches chain the conv caches (live peak %llu bytes batched, %llu whole)\n",
           (unsigned long long)pb, (unsigned long long)pw);
  }
  dc_module_destroy(m);
  dc_module_destroy(whole);
  dc_input_shape x = {"sample", 5, {1, 3, 17, 16, 24}};
  CHECK_OK(build_in(dir, "encode", &x, 0, 0, &m));
  if (m) {
    CHECK(is5(output_type(m, "mean"), 1, 4, 5, 2, 3) && is5(output_type(m, "logvar"), 1, 4, 5, 2, 3));
    CHECK(count_scope(m, OP_CONV3D, "encoder.conv_out.conv") == 2); /* frames [0,9) and [9,17) */
    printf("  ok: encode in two batches of frames -> mean, logvar 1x4x5x2x3\n");
  }
  dc_module_destroy(m);
  free(dir);
}

/* A folder tmp/<name> with the fixture's weights and its config with one
 * key's value replaced (the JSON text "key": value). */
static char *with_config(const char *name, const char *key, const char *value) {
  char *src = fixture_model(), *dir = tu_path(name);
  CHECK(dc_make_dirs(dir) == 0);
  char *cfg = dc_path_join(src, "config.json"), *text = NULL;
  size_t n = 0;
  CHECK_OK(dc_file_read_all(cfg, &text, &n));
  char *at = text ? strstr(text, key) : NULL;
  CHECK(at != NULL);
  char out[4096];
  if (at) {
    char *colon = strchr(at, ':'), *end = colon;
    while (*end && *end != ',' && *end != '\n') end++;
    if (*colon && colon[1] == ' ' && colon[2] == '[') end = strchr(colon, ']') + 1; /* a list */
    snprintf(out, sizeof out, "%.*s: %s%s", (int)(colon - text), text, value, end);
    char *p = dc_path_join(dir, "config.json");
    tu_write_file(p, out, strlen(out));
    dc_free(p);
  }
  char *rel = dc_path_join(src, "diffusion_pytorch_model.safetensors"), *w = dc_path_absolute(rel);
  dc_free(rel);
  char *link = dc_path_join(dir, "diffusion_pytorch_model.safetensors");
  unlink(link);
  CHECK(symlink(w, link) == 0);
  dc_free(w), dc_free(link), dc_free(cfg), dc_free(text);
  free(src);
  return dir;
}

static void expect_error(const char *name, const char *key, const char *value, const char *entry,
                         const dc_input_shape *shape, const char *needle) {
  char *dir = key ? with_config(name, key, value) : fixture_model();
  dc_module *m = NULL;
  CHECK_ERR(build_in(dir, entry, shape, 0, 0, &m), needle);
  CHECK(m == NULL);
  free(dir);
}

static void test_errors(void) {
  expect_error("cvx_types", "\"down_block_types\"", "[\"CogVideoXDownBlock3D\", \"DownEncoderBlock2D\", "
               "\"CogVideoXDownBlock3D\", \"CogVideoXDownBlock3D\"]", "encode", NULL,
               "\"down_block_types\"[1] is \"DownEncoderBlock2D\"; AutoencoderKLCogVideoX builds only "
               "CogVideoXDownBlock3D");
  expect_error("cvx_time", "\"temporal_compression_ratio\"", "3", "decode", NULL,
               "\"temporal_compression_ratio\" is 3; diffc supports powers of two");
  expect_error("cvx_pq", "\"use_post_quant_conv\"", "true", "decode", NULL,
               "\"use_post_quant_conv\" is true with \"latent_channels\" 4 != \"out_channels\" 3: diffusers sizes "
               "that conv by out_channels and cannot run it on the latents");
  expect_error("cvx_act", "\"act_fn\"", "\"gelu\"", "decode", NULL,
               "\"act_fn\" is \"gelu\", which diffc does not support (supported: silu, swish)");
  expect_error(NULL, NULL, NULL, "decode", &(dc_input_shape){"z", 5, {1, 3, 2, 2, 3}},
               "input \"z\" [1,3,2,2,3]: AutoencoderKLCogVideoX");
  expect_error(NULL, NULL, NULL, "decode", &(dc_input_shape){"z", 4, {1, 4, 2, 3}}, "z");
  /* a tile that leaves no stride: refused before anything is built */
  char *dir = with_config("cvx_tile", "\"sample_height\"", "16");
  dc_module *m = NULL;
  CHECK_ERR(build_in(dir, "decode", &(dc_input_shape){"z", 5, {1, 4, 1, 4, 4}}, 0, 1, &m),
            "leave no stride of at least one latent");
  free(dir);
  printf("  ok: refused configs and inputs, with the key and the value\n");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_batches();
  test_errors();
  return tu_finish();
}
