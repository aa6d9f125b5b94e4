/* test_vae_tiling.c — VAE slicing and tiling (frontend/vae.c, op blend):
 *  - the graphs match diffusers' enable_tiling / enable_slicing outputs on
 *    the vae_tiled fixture (tiled decode, sliced+tiled decode, tiled encode
 *    with a 2-pixel edge tile, sliced encode) to 1e-4, on the reference
 *    kernels, with the arena diffrun measures equal to the planned one;
 *  - the tile grid is diffusers' (tiles of Lt latents every 0.75·Lt);
 *  - slicing alone is bit-identical to the unsliced graph, and lowers the
 *    activation peak; tiling switches on only above the tile size;
 *  - the blend kernel against a transcription of blend_v / blend_h;
 *  - bad --tile-size / --tile-overlap values get one message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/diffrun.h"
#include "runtime/kernels.h"
#include "plan/plan_format.h"
#include "testutil.h"

typedef struct {
  int nout;
  char **name;
  float **out;
  size_t *numel;
  uint64_t arena, device; /* device: resident weights + arena */
} run_result;

static void result_free(run_result *r) {
  for (int i = 0; i < r->nout; i++) free(r->out[i]), free(r->name[i]);
  free(r->out), free(r->name), free(r->numel);
}

static dc_status *build(const char *fixture, const dc_build_options *bo, dc_module **m) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *fx = dc_path_join(dir, fixture), *model = dc_path_join(fx, "model");
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_status *st = dc_folder_open(model, NULL, &f);
  if (!st) st = dc_frontend_build(&f, bo, m);
  dc_folder_close(&f);
  dc_free(dir), dc_free(fx), dc_free(model);
  return st;
}

static int count_op(const dc_module *m, dc_op op) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) n += m->nodes[i].op == op;
  return n;
}

/* Runs module m (passes with the memory options mem, then the reference
 * kernels) on the io file's inputs. */
static int run_with(dc_module *m, const dc_memory_options *mem, const dc_st_file *io, run_result *r) {
  memset(r, 0, sizeof *r);
  dc_pipeline_options po = {.memory = mem};
  CHECK_OK(dc_pipeline_run(m, &po));
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  r->device = l.weight_bytes + l.peak_bytes;
  dc_liveness_deinit(&l);
  dc_buf b;
  dc_buf_init(&b);
  CHECK_OK(dc_print(m, &b));
  dc_buf_u8(&b, 0);
  char *path = tu_path("tiled.dplan");
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = (char *)b.data, .module = m};
  drt_plan *p = NULL;
  drt_stats s = {0};
  drt_options ro = {.backend = "reference"};
  dc_status *st = dc_plan_write(path, &plan);
  if (!st) st = drt_load(path, &ro, &p);
  for (int i = 0; !st && i < drt_input_count(p); i++) {
    const drt_tensor_info *in = drt_input_info(p, i);
    const dc_st_tensor *t = dc_st_find(io, in->name);
    if (!t) st = dc_error(DC_ERR_MISMATCH, "the io file lacks input %s", in->name);
    else st = drt_set_input(p, in->name, (const float *)(io->file.data + t->offset), t->bytes / 4);
  }
  if (!st) st = drt_run(p, &s);
  int ok = !st;
  CHECK_OK(st);
  if (ok) {
    CHECK(s.device_peak_bytes == s.device_predicted_bytes);
    r->arena = s.device_peak_bytes;
    r->nout = drt_output_count(p);
    r->out = calloc((size_t)r->nout, sizeof *r->out);
    r->name = calloc((size_t)r->nout, sizeof *r->name);
    r->numel = calloc((size_t)r->nout, sizeof *r->numel);
    for (int i = 0; i < r->nout; i++) {
      const char *name = drt_output_info(p, i)->name;
      const float *o = drt_output(p, name, &r->numel[i]);
      r->name[i] = strdup(name);
      r->out[i] = malloc(r->numel[i] * sizeof(float) + 1);
      memcpy(r->out[i], o, r->numel[i] * sizeof(float));
    }
  }
  drt_destroy(p);
  dc_buf_deinit(&b);
  free(path);
  return ok;
}

static int run(dc_module *m, const dc_st_file *io, run_result *r) { return run_with(m, NULL, io, r); }

/* One fixture run: build with the options, run, compare with diffusers. */
static void fixture_run(const char *io_name, const char *entry, int tiling, int slicing, int want_tiles) {
  char *dir = dc_path_join(tu_source_dir, "fixtures/vae_tiled"), *io_path = dc_path_join(dir, io_name);
  dc_st_file io;
  memset(&io, 0, sizeof io);
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shape = {strcmp(entry, "encode") == 0 ? "sample" : "z", 4, {0}};
  const dc_st_tensor *t = dc_st_find(&io, shape.name);
  CHECK(t != NULL);
  if (t) memcpy(shape.dims, t->dims, sizeof shape.dims);
  dc_build_options bo = {.entry = entry, .shapes = &shape, .nshapes = 1, .vae_tiling = tiling, .vae_slicing = slicing};
  dc_module *m = NULL;
  CHECK_OK(build("vae_tiled", &bo, &m));
  run_result r;
  if (m && t) {
    /* Each tile runs the whole decoder (or encoder): count its conv_in. */
    int tiles = 0;
    for (int32_t i = 0; i < m->nnodes; i++)
      tiles += m->nodes[i].op == OP_CONV2D && m->nodes[i].scope &&
               (!strcmp(m->nodes[i].scope, "decoder.conv_in") || !strcmp(m->nodes[i].scope, "encoder.conv_in"));
    CHECK(tiles == want_tiles);
    int blends = count_op(m, OP_BLEND);
    if (run(m, &io, &r)) {
      for (int i = 0; i < r.nout; i++) {
        char key[64];
        snprintf(key, sizeof key, "out.%s", r.name[i]);
        const dc_st_tensor *w = dc_st_find(&io, key);
        CHECK(w && w->bytes == r.numel[i] * 4);
        if (!w || w->bytes != r.numel[i] * 4) continue;
        double e = tu_rel_l2(r.out[i], (const float *)(io.file.data + w->offset), r.numel[i]);
        CHECK(e <= 1e-4);
        printf("  %-36s %-7s %2d tile(s), %2d blends: rel L2 %.2e vs diffusers, arena %llu B\n", io_name, r.name[i],
               tiles, blends, e, (unsigned long long)r.arena);
      }
      result_free(&r);
    }
  }
  dc_module_destroy(m);
  dc_st_close(&io);
  dc_free(dir), dc_free(io_path);
}

/* Slicing moves no arithmetic: bit-identical, and the peak goes down. */
static void test_slicing_exact(void) {
  dc_input_shape shape = {"z", 4, {3, 4, 16, 16}};
  run_result a, b;
  dc_module *plain = NULL, *sliced = NULL;
  dc_build_options bo = {.entry = "decode", .shapes = &shape, .nshapes = 1};
  CHECK_OK(build("vae_tiny", &bo, &plain));
  bo.vae_slicing = 1;
  CHECK_OK(build("vae_tiny", &bo, &sliced));
  /* Inputs: the same seeded data for both. */
  char *path = tu_path("z.safetensors");
  float *z = malloc(3 * 4 * 16 * 16 * sizeof *z);
  for (int i = 0; i < 3 * 4 * 16 * 16; i++) z[i] = (float)sin(0.37 * i);
  dc_st_out o = {"z", {DT_F32, 4, {3, 4, 16, 16}}, z};
  CHECK_OK(dc_st_write(path, &o, 1));
  dc_st_file io;
  memset(&io, 0, sizeof io);
  CHECK_OK(dc_st_open(path, &io));
  if (plain && sliced && run(plain, &io, &a)) {
    if (run(sliced, &io, &b)) {
      CHECK(a.numel[0] == b.numel[0] && memcmp(a.out[0], b.out[0], a.numel[0] * 4) == 0);
      CHECK(b.arena < a.arena);
      printf("slicing, batch 3: bit-identical to unsliced; arena %llu -> %llu B\n", (unsigned long long)a.arena,
             (unsigned long long)b.arena);
      result_free(&b);
    }
    result_free(&a);
  }
  /* Tiling at or below the tile size changes nothing: the same graph. */
  dc_module *small = NULL;
  bo.vae_slicing = 0;
  bo.vae_tiling = 1;
  CHECK_OK(build("vae_tiny", &bo, &small));
  if (small) CHECK(count_op(small, OP_BLEND) == 0 && count_op(small, OP_SLICE) == 0);
  printf("tiling with latents at the tile size (16): no tiles, as diffusers\n");
  dc_module_destroy(small);
  dc_st_close(&io);
  dc_module_destroy(plain);
  dc_module_destroy(sliced);
  free(z);
  free(path);
}

/* blend against blend_v transcribed: b[y] = a[-E+y]*(1-y/E) + b[y]*(y/E). */
static void test_blend_kernel(void) {
  dc_module *m = dc_module_create();
  dc_type tx = {DT_F32, 4, {1, 2, 5, 3}}, tp = {DT_F32, 4, {1, 2, 7, 3}};
  int32_t x = dc_module_add_input(m, "x", &tx, INIT_NORMAL), p = dc_module_add_input(m, "p", &tp, INIT_NORMAL);
  int32_t in[2] = {x, p};
  dc_node n = dc_node_make(OP_BLEND, 2, in);
  dc_node_set_int(&n, "axis", 2);
  dc_node_set_int(&n, "extent", 4);
  CHECK_OK(dc_infer_type(m, &n, &n.type));
  int32_t id = dc_module_add_node(m, &n);
  float xv[30], pv[42], out[30], want[30];
  for (int i = 0; i < 30; i++) xv[i] = (float)cos(i * 1.3);
  for (int i = 0; i < 42; i++) pv[i] = (float)sin(i * 0.7);
  memcpy(want, xv, sizeof want);
  for (int c = 0; c < 2; c++)
    for (int y = 0; y < 4; y++)
      for (int w = 0; w < 3; w++) {
        float t1 = pv[(c * 7 + 7 - 4 + y) * 3 + w] * (float)(1 - y / 4.0), t2 = xv[(c * 5 + y) * 3 + w] * (float)(y / 4.0);
        want[(c * 5 + y) * 3 + w] = t1 + t2;
      }
  const void *ins[2] = {xv, pv};
  CHECK_OK(dc_ref_kernel_for(OP_BLEND)(m, &m->nodes[id], ins, out));
  CHECK(memcmp(out, want, sizeof out) == 0);
  /* In place over x, as the planner may arrange. */
  CHECK_OK(dc_ref_kernel_for(OP_BLEND)(m, &m->nodes[id], ins, xv));
  CHECK(memcmp(xv, want, sizeof want) == 0);
  printf("blend: the reference kernel is diffusers' blend_v bit for bit, also in place\n");
  dc_module_destroy(m);
}

static void test_bad_options(void) {
  dc_module *m = NULL;
  dc_build_options bo = {.entry = "decode", .vae_tiling = 1, .tile_overlap = 1.5};
  CHECK_ERR(build("vae_tiny", &bo, &m), "--tile-overlap 1.5: the overlap factor must be in (0, 1)");
  bo.tile_overlap = 0;
  bo.tile_size = 1;
  CHECK_ERR(build("vae_tiny", &bo, &m), "--tile-size 1: a tile must be at least 2 pixels");
  dc_module_destroy(m);
}

/* Tiling with offload: each tile's decoder uploads its weights again (as
 * diffusers' hooks onload a module at every call) instead of holding them
 * across tiles, so offload still lowers the peak; outputs bit-identical. */
static void test_tiling_with_offload(void) {
  dc_input_shape shape = {"z", 4, {1, 4, 40, 28}};
  dc_build_options bo = {.entry = "decode", .shapes = &shape, .nshapes = 1, .vae_tiling = 1};
  char *dir = dc_path_join(tu_source_dir, "fixtures/vae_tiled"), *io_path = dc_path_join(dir, "io_decode_tiled.safetensors");
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_module *plain = NULL, *off = NULL;
  CHECK_OK(build("vae_tiled", &bo, &plain));
  CHECK_OK(build("vae_tiled", &bo, &off));
  run_result a, b;
  dc_memory_options mo = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_LEAF, .prefetch = 1};
  if (plain && off && run(plain, &io, &a)) {
    if (run_with(off, &mo, &io, &b)) {
      int uploads = count_op(off, OP_UPLOAD), weights = off->nweights;
      CHECK(uploads > 10 * weights); /* each of the 12 tiles uploads the decoder's weights again */
      CHECK(a.numel[0] == b.numel[0] && memcmp(a.out[0], b.out[0], a.numel[0] * 4) == 0);
      CHECK(b.device < a.device);
      printf("tiled decode (12 tiles) + leaf offload + prefetch: %d uploads of %d weights, device %llu -> %llu B, "
             "bit-identical\n", uploads, weights, (unsigned long long)a.device, (unsigned long long)b.device);
      result_free(&b);
    }
    result_free(&a);
  }
  dc_module_destroy(plain);
  dc_module_destroy(off);
  dc_st_close(&io);
  dc_free(dir), dc_free(io_path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_blend_kernel();
  test_bad_options();
  test_slicing_exact();
  test_tiling_with_offload();
  printf("vae_tiled fixture vs diffusers (enable_tiling / enable_slicing), reference kernels:\n");
  fixture_run("io_decode_tiled.safetensors", "decode", 1, 0, 12);
  fixture_run("io_decode_sliced_tiled.safetensors", "decode", 1, 1, 8);
  fixture_run("io_encode_tiled.safetensors", "encode", 1, 0, 9);
  fixture_run("io_encode_sliced.safetensors", "encode", 0, 1, 2);
  return tu_finish();
}
