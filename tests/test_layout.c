/* test_layout.c — --layout nhwc (passes/layout.c) on the diffusers fixtures:
 * on the reference kernels the NHWC plan's outputs are bit-identical to the
 * NCHW plan's (the reference sums in the same order in both layouts); on the
 * llvm backend they match diffusers to the fixture's tolerance; a permute
 * appears only where the model's NCHW inputs enter and its outputs leave;
 * every conv weight is repacked; the dump round-trips through the parser;
 * and the layout composes with casting, offload and VAE tiling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../driver/compile.h"
#include "../runtime/diffrun.h"
#include "testutil.h"

typedef struct {
  const char *fixture, *entry, *io;
  int vae_tiling;
  int permutes;     /* what --layout nhwc should leave: -1 = only report */
} layout_case;

static const layout_case cases[] = {
    {"unet_sd15", "forward", "io_forward.safetensors", 0, 2},  /* sample in, sample out */
    {"unet_sdxl", "forward", "io_forward.safetensors", 0, 2},  /* linear proj_in/out transformers */
    {"vae_sd", "decode", "io_decode.safetensors", 0, 2},
    {"vae_sd", "encode", "io_encode.safetensors", 0, 3},  /* sample in; mean and logvar out */
    {"vae_tiled", "decode", "io_decode_tiled.safetensors", 1, -1}, /* one in per tile */
};

static char *fixture_path(const char *fixture, const char *leaf) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *fx = dc_path_join(dir, fixture), *p = dc_path_join(fx, leaf);
  dc_free(dir), dc_free(fx);
  return p;
}

static dc_compile_options options(const layout_case *c, char *model, const dc_input_shape *shapes, int nshapes,
                                  dc_layout layout) {
  dc_compile_options o = {.model = model, .entry = c->entry, .shapes = shapes, .nshapes = nshapes,
                          .vae_tiling = c->vae_tiling};
  o.memory.layout = layout;
  return o;
}

static int count_op(const dc_module *m, dc_op op) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) n += m->nodes[i].op == op;
  return n;
}

/* The compiled module: every conv2d and its weight NHWC; the permutes left. */
static int check_module(const layout_case *c, const dc_compile_options *o) {
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_module *m = NULL;
  dc_status *st = dc_compile_module(o, &f, &m);
  CHECK_OK(st);
  int permutes = -1;
  if (!st) {
    int bad = 0;
    for (int32_t i = 0; i < m->nnodes; i++) {
      const dc_node *n = &m->nodes[i];
      if (n->op == OP_CONV2D && (n->layout != LAYOUT_NHWC || m->nodes[n->inputs[1]].layout != LAYOUT_NHWC ||
                                 m->nodes[n->inputs[1]].op != OP_WEIGHT))
        bad++;
    }
    CHECK(bad == 0);
    permutes = count_op(m, OP_PERMUTE);
    if (c->permutes >= 0) CHECK(permutes == c->permutes);
    CHECK(dc_module_get_meta(m, "layout") != NULL);
    dc_buf text, again;
    dc_buf_init(&text);
    dc_buf_init(&again);
    CHECK_OK(dc_print(m, &text));
    dc_module *back = NULL;
    CHECK_OK(dc_parse((const char *)text.data, text.len, "nhwc dump", &back));
    if (back) CHECK_OK(dc_print(back, &again));
    CHECK(back && again.len == text.len && memcmp(again.data, text.data, text.len) == 0);
    CHECK(strstr((const char *)text.data, ", nhwc, dev0,") != NULL);
    dc_module_destroy(back);
    dc_buf_deinit(&text);
    dc_buf_deinit(&again);
  }
  dc_module_destroy(m);
  dc_folder_close(&f);
  return permutes;
}

static drt_plan *run(const char *plan, const char *backend, const dc_st_file *io) {
  drt_plan *p = tu_load_with_inputs(plan, backend, io);
  if (p) CHECK_OK(drt_run(p, NULL));
  return p;
}

static void test_case(const layout_case *c) {
  char *model = fixture_path(c->fixture, "model"), *io_path = fixture_path(c->fixture, c->io);
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shapes[8];
  int nshapes = tu_io_shapes(&io, shapes, 8);
  char *nchw = tu_path("nchw.dplan"), *nhwc = tu_path("nhwc.dplan");
  dc_compile_options on = options(c, model, shapes, nshapes, 0), oh = options(c, model, shapes, nshapes, LAYOUT_NHWC);
  CHECK_OK(dc_compile(&on, nchw, NULL));
  CHECK_OK(dc_compile(&oh, nhwc, NULL));
  int permutes = check_module(c, &oh);
  drt_plan *ref_nchw = run(nchw, "reference", &io), *ref_nhwc = run(nhwc, "reference", &io);
  drt_plan *llvm_nhwc = run(nhwc, "llvm", &io);
  int same = 1;
  double worst = 0;
  for (int i = 0; ref_nchw && ref_nhwc && llvm_nhwc && i < drt_output_count(ref_nchw); i++) {
    const char *name = drt_output_info(ref_nchw, i)->name;
    char key[128];
    snprintf(key, sizeof key, "out.%s", name);
    const dc_st_tensor *want = dc_st_find(&io, key);
    size_t n1 = 0, n2 = 0, n3 = 0;
    const float *a = drt_output(ref_nchw, name, &n1), *b = drt_output(ref_nhwc, name, &n2);
    const float *g = drt_output(llvm_nhwc, name, &n3);
    CHECK(want && a && b && g && n1 == n2 && n2 == n3 && want->bytes == n1 * 4);
    if (!(want && a && b && g && n1 == n2 && n2 == n3 && want->bytes == n1 * 4)) continue;
    float *w = malloc(want->bytes);
    memcpy(w, io.file.data + want->offset, want->bytes);
    same &= memcmp(a, b, n1 * sizeof(float)) == 0;
    double e = tu_rel_l2(g, w, n3);
    if (!(e <= worst)) worst = e;
    free(w);
  }
  CHECK(same);
  CHECK(worst <= 1e-4); /* every fixture's tolerance against diffusers */
  printf("  %-9s %-6s %s: reference nhwc vs nchw %s; llvm nhwc vs diffusers rel L2 %.2e; %d permutes\n", c->fixture,
         c->entry, c->vae_tiling ? "tiled" : "     ", same ? "bit-identical" : "DIFFER", worst, permutes);
  drt_destroy(ref_nchw), drt_destroy(ref_nhwc), drt_destroy(llvm_nhwc);
  dc_st_close(&io);
  free(nchw), free(nhwc);
  dc_free(model), dc_free(io_path);
}

/* NHWC with fp8 storage and group offload: the same numbers as without NHWC
 * on the reference kernels, and the same device peak but for the permutes. */
static void test_combined(void) {
  const layout_case *c = &cases[0];
  char *model = fixture_path(c->fixture, "model"), *io_path = fixture_path(c->fixture, c->io);
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shapes[8];
  int nshapes = tu_io_shapes(&io, shapes, 8);
  float *out[2] = {0};
  size_t n[2] = {0};
  for (int k = 0; k < 2; k++) {
    char *plan = tu_path(k ? "comb_nhwc.dplan" : "comb_nchw.dplan");
    dc_compile_options o = options(c, model, shapes, nshapes, k ? LAYOUT_NHWC : 0);
    o.memory.storage = DT_F8_E4M3;
    o.memory.offload = DC_OFFLOAD_GROUP;
    o.memory.group_level = DC_GROUP_LEAF;
    o.memory.prefetch = 1;
    CHECK_OK(dc_compile(&o, plan, NULL));
    drt_plan *p = run(plan, "reference", &io);
    const float *y = p ? drt_output(p, "sample", &n[k]) : NULL;
    if (y) out[k] = malloc(n[k] * sizeof(float)), memcpy(out[k], y, n[k] * sizeof(float));
    drt_destroy(p);
    free(plan);
  }
  int same = out[0] && out[1] && n[0] == n[1] && memcmp(out[0], out[1], n[0] * sizeof(float)) == 0;
  CHECK(same);
  printf("  unet_sd15 fp8_e4m3 + group leaf offload + prefetch: nhwc vs nchw %s\n", same ? "bit-identical" : "DIFFER");
  free(out[0]), free(out[1]);
  dc_st_close(&io);
  dc_free(model), dc_free(io_path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  printf("--layout nhwc on the fixtures:\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
  test_combined();
  return tu_finish();
}
