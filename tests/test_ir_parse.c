/* test_ir_parse.c — the IR text parser (ir/parse.c): every fixture's dump
 * reads back into a module whose dump is the same text, before and after
 * the passes; the parsed module runs the passes to the same result as the
 * original (text to text); and broken text gets a message naming the line. */
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "testutil.h"

/* Parses text and checks the parsed module dumps to the same text. */
static dc_module *round_trip(const char *what, const char *text) {
  dc_module *m = NULL;
  CHECK_OK(dc_parse(text, strlen(text), what, &m));
  if (!m) return NULL;
  char *again = tu_ir_text(m);
  CHECK(again && strcmp(again, text) == 0);
  if (again && strcmp(again, text) != 0) {
    size_t i = 0;
    while (again[i] && again[i] == text[i]) i++;
    printf("  %s: dumps differ at byte %zu: \"%.60s\" vs \"%.60s\"\n", what, i, text + i, again + i);
  }
  dc_free(again);
  return m;
}

static void fixture_case(const char *name, const char *entry, const dc_input_shape *shapes, int nshapes) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *fx = dc_path_join(dir, name), *model = dc_path_join(fx, "model");
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_build_options bo = {.entry = entry, .shapes = shapes, .nshapes = nshapes};
  dc_module *m = NULL;
  CHECK_OK(dc_folder_open(model, NULL, &f));
  CHECK_OK(dc_frontend_build(&f, &bo, &m));
  if (m) {
    /* Before the passes: the frontend's graph, no memory plan. */
    char *before = tu_ir_text(m);
    dc_module *parsed = before ? round_trip(name, before) : NULL;
    /* The passes on the original and on the parsed text give the same text. */
    dc_pipeline_options po = {0};
    CHECK_OK(dc_pipeline_run(m, &po));
    if (parsed) CHECK_OK(dc_pipeline_run(parsed, &po));
    char *after = tu_ir_text(m), *after_parsed = parsed ? tu_ir_text(parsed) : NULL;
    CHECK(after && after_parsed && strcmp(after, after_parsed) == 0);
    /* After memory planning: offsets and the arena size survive. */
    dc_module *planned = after ? round_trip(name, after) : NULL;
    if (planned) CHECK(planned->arena_bytes == m->arena_bytes);
    printf("%-10s %-8s %5d values: text -> module -> text identical before and after the passes\n", name, entry,
           (int)m->nnodes);
    dc_module_destroy(planned);
    dc_module_destroy(parsed);
    dc_free(before), dc_free(after), dc_free(after_parsed);
  }
  dc_module_destroy(m);
  dc_folder_close(&f);
  dc_free(dir), dc_free(fx), dc_free(model);
}

static void expect_error(const char *text, const char *needle) {
  dc_module *m = NULL;
  dc_status *st = dc_parse(text, strlen(text), "x.ir", &m);
  CHECK(st != NULL && m == NULL);
  if (st) {
    CHECK(strstr(dc_status_message(st), needle) != NULL);
    if (!strstr(dc_status_message(st), needle)) printf("  got: %s (wanted %s)\n", dc_status_message(st), needle);
    dc_status_free(st);
  }
  dc_module_destroy(m);
}

static void test_errors(void) {
  const char *in = "%0 = input \"x\" : f32[2,3]  # row, dev0, 24 B, live 0..1\n";
  char buf[1024];
  expect_error("%1 = input \"x\" : f32[2]  # row, dev0, 8 B, live 0..0\n", "x.ir:1: expected %0");
  expect_error("%0 = frobnicate(%0) : f32[2]  # x, row, dev0, 8 B, live 0..0\n", "unknown op \"frobnicate\"");
  snprintf(buf, sizeof buf, "%s%%1 = silu(%%5) : f32[2,3]  # s, row, dev0, 24 B, live 1..1\n", in);
  expect_error(buf, "x.ir:2: %5 is not an earlier value");
  snprintf(buf, sizeof buf, "%s%%1 = silu(%%0) : f33[2,3]  # s, row, dev0, 24 B, live 1..1\n", in);
  expect_error(buf, "unknown dtype \"f33\"");
  snprintf(buf, sizeof buf, "%s%%1 = clamp(%%0) {max=1, mi=0} : f32[2,3]  # s, row, dev0, 24 B, live 1..1\n", in);
  expect_error(buf, "expected \"min\"");
  snprintf(buf, sizeof buf, "%s%%1 = silu(%%0) : f32[2,4]  # s, row, dev0, 24 B, live 1..1\n", in);
  expect_error(buf, "x.ir"); /* the verifier: stored type differs from the inferred one */
  snprintf(buf, sizeof buf, "%s%%1 = silu(%%0) : f32[2,3]  # s, sideways, dev0, 24 B, live 1..1\n", in);
  expect_error(buf, "expected a layout");
  snprintf(buf, sizeof buf, "%s%%1 = weight @w : f32[2]  # row, dev0, 8 B, resident, file 3 @ 0\n", in);
  expect_error(buf, "file 3 is not listed");
  snprintf(buf, sizeof buf, "%shello\n", in);
  expect_error(buf, "x.ir:2: expected a value");
  snprintf(buf, sizeof buf, "%soutput y = %%7\n", in);
  expect_error(buf, "%7 is not an earlier value");
  /* Two planned values that overlap in the arena while both are live. */
  snprintf(buf, sizeof buf,
           "%%0 = input \"x\" : f32[16]  # row, dev0, 64 B, live 0..2, @off 0\n"
           "%%1 = silu(%%0) : f32[16]  # s, row, dev0, 64 B, live 1..2, @off 0\n"
           "%%2 = add(%%0, %%1) : f32[16]  # s, row, dev0, 64 B, live 2..2, @off 128\n"
           "output y = %%2\n# peak activations: 192 B (192 bytes) while %%2 runs; live then:\n"
           "# arena: 192 B planned (live bytes at most 192 B: 100%% packed), 0 values in place\n");
  expect_error(buf, "overlap");
  printf("bad IR text: 11 cases, each one message naming the line or the values\n");
}

/* The fuzz seeds (tests/fuzz/corpus/ir) are valid: they must parse and
 * their dumps round-trip, or the fuzzer starts from nothing. */
static void test_seeds(void) {
  static const char *seeds[] = {"small_planned.ir",         "vae_tiny_decode.ir",
                                 "vae_tiny_decode_nhwc_2dev.ir", "vae_tiny_encode_frontend.ir",
                                 "vae_tiled_decode_tiled_sliced.ir", "vae_tiny_decode_offload_dir.ir",
                                 "unet_tiny_forward.ir",     "old_words.ir",
                                 "flux_dev_forward_gated.ir", "conv3d_causal.ir"};
  for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/fuzz/corpus/ir/%s", tu_source_dir, seeds[i]);
    char *text = NULL;
    size_t n = 0;
    CHECK_OK(dc_file_read_all(path, &text, &n));
    if (!text) continue;
    dc_module *m = NULL, *again = NULL;
    CHECK_OK(dc_parse(text, n, seeds[i], &m));
    char *printed = m ? tu_ir_text(m) : NULL;
    if (printed) again = round_trip(seeds[i], printed);
    CHECK(again != NULL);
    dc_module_destroy(again);
    dc_module_destroy(m);
    dc_free(printed);
    dc_free(text);
  }
  printf("fuzz seeds parse and round-trip\n");
}

/* Dumps of older versions read: "host" for an offloaded weight and
 * "random timesteps" for a timestep input mean what the new words mean, and
 * print as the new words. */
static void test_old_words(void) {
  char path[512], *text = NULL;
  size_t n = 0;
  snprintf(path, sizeof path, "%s/fuzz/corpus/ir/old_words.ir", tu_source_dir);
  CHECK_OK(dc_file_read_all(path, &text, &n));
  dc_module *m = NULL;
  if (text) CHECK_OK(dc_parse(text, n, "old_words.ir", &m));
  char *printed = m ? tu_ir_text(m) : NULL;
  if (printed) {
    CHECK(m->inputs[0].init == INIT_TIMESTEP && m->inputs[1].init == INIT_NORMAL);
    CHECK(strstr(printed, "%0 = input \"t\" : f32[2]  # row, dev0, 8 B, live 0..4, @off 0, timestep "
                          "(--random-inputs: uniform integers 0..999)\n") != NULL);
    CHECK(strstr(printed, "%2 = weight @m.w : f32[16]  # row, dev0, 64 B, offloaded, file 0 @ 136\n") != NULL);
    CHECK(strstr(printed, "# weights: 1 tensors, 64 B (64 bytes) in 1 file(s): resident 0 B, offloaded 64 B\n") != NULL);
  }
  printf("an older dump's words (host, random timesteps) read as today's and print as them\n");
  dc_free(printed);
  dc_module_destroy(m);
  dc_free(text);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  fixture_case("unet_tiny", "forward", NULL, 0);
  const dc_input_shape sd15[] = {
      {"sample", 4, {2, 4, 16, 24}}, {"encoder_hidden_states", 3, {2, 77, 32}}, {"timestep", 1, {2}}};
  fixture_case("unet_sd15", "forward", sd15, 3);
  fixture_case("unet_sdxl", "forward", NULL, 0);
  fixture_case("vae_sd", "decode", NULL, 0);
  fixture_case("vae_sd", "encode", NULL, 0);
  fixture_case("flux_dev", "forward", NULL, 0); /* gelu_tanh, gated linears, rope */
  fixture_case("sd35", "forward", NULL, 0);
  test_errors();
  test_seeds();
  test_old_words();
  return tu_finish();
}
