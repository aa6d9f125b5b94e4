/* test_vae_build.c — the AutoencoderKL builder (frontend/vae.c).
 *
 * Part 1 builds graphs from small configs written to a temp folder with
 * all-zero weights, whose names and shapes come from an independent listing
 * of diffusers' module tree below (so a builder that asks for a wrong name or
 * shape fails here): output shapes of both entries, metadata, scopes, the
 * verifier, and the exact messages of the error cases.
 *
 * Part 2 is the real proof: for every VAE run in tests/fixtures (recorded
 * with diffusers in fp32) it builds the graph, executes it node by node with
 * the reference kernels, and compares the outputs with diffusers' to relative
 * L2 <= 1e-4.  Missing fixtures are reported and skipped. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"
#include "driver/compile.h"
#include "runtime/diffrun.h"
#include "testutil.h"

/* ---- diffusers' parameter list, written from the torch modules ---------- */

typedef struct {
  int64_t boc[4];
  int n;
  int64_t layers, groups, in_ch, out_ch, latent;
  int quant, post_quant, attn;
  int old_attn_names; /* query/key/value/proj_attn, as pre-0.14 checkpoints */
} vae_spec;


/* "<fmt>" formatted into one of 8 rotating buffers: module paths for the
 * listing below, nested at most two deep. */
static const char *P(const char *fmt, ...) {
  static char bufs[8][160];
  static int next;
  char *b = bufs[next++ % 8];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof bufs[0], fmt, ap);
  va_end(ap);
  return b;
}

static void conv(tu_params *ps, const char *m, int64_t cin, int64_t cout, int64_t k) {
  tu_params_add(ps, 4, (int64_t[]){cout, cin, k, k}, "%s.weight", m);
  tu_params_add(ps, 1, &cout, "%s.bias", m);
}

static void norm(tu_params *ps, const char *m, int64_t c) {
  tu_params_add(ps, 1, &c, "%s.weight", m);
  tu_params_add(ps, 1, &c, "%s.bias", m);
}

static void linear(tu_params *ps, const char *m, int64_t c) {
  tu_params_add(ps, 2, (int64_t[]){c, c}, "%s.weight", m);
  tu_params_add(ps, 1, &c, "%s.bias", m);
}

static void resnet(tu_params *ps, const char *m, int64_t cin, int64_t cout) {
  norm(ps, P("%s.norm1", m), cin);
  conv(ps, P("%s.conv1", m), cin, cout, 3);
  norm(ps, P("%s.norm2", m), cout);
  conv(ps, P("%s.conv2", m), cout, cout, 3);
  if (cin != cout) conv(ps, P("%s.conv_shortcut", m), cin, cout, 1);
}

static void mid(tu_params *ps, const vae_spec *s, const char *part, int64_t c) {
  static const char *now[] = {"to_q", "to_k", "to_v", "to_out.0"};
  static const char *old[] = {"query", "key", "value", "proj_attn"};
  resnet(ps, P("%s.mid_block.resnets.0", part), c, c);
  resnet(ps, P("%s.mid_block.resnets.1", part), c, c);
  if (!s->attn) return;
  norm(ps, P("%s.mid_block.attentions.0.group_norm", part), c);
  for (int i = 0; i < 4; i++)
    linear(ps, P("%s.mid_block.attentions.0.%s", part, s->old_attn_names ? old[i] : now[i]), c);
}

static void vae_params(const vae_spec *s, tu_params *ps) {
  ps->n = 0;
  conv(ps, "encoder.conv_in", s->in_ch, s->boc[0], 3);
  int64_t ch = s->boc[0];
  for (int i = 0; i < s->n; i++) {
    for (int j = 0; j < s->layers; j++)
      resnet(ps, P("encoder.down_blocks.%d.resnets.%d", i, j), j ? s->boc[i] : ch, s->boc[i]);
    ch = s->boc[i];
    if (i < s->n - 1) conv(ps, P("encoder.down_blocks.%d.downsamplers.0.conv", i), ch, ch, 3);
  }
  mid(ps, s, "encoder", ch);
  norm(ps, "encoder.conv_norm_out", ch);
  conv(ps, "encoder.conv_out", ch, 2 * s->latent, 3);
  if (s->quant) conv(ps, "quant_conv", 2 * s->latent, 2 * s->latent, 1);
  if (s->post_quant) conv(ps, "post_quant_conv", s->latent, s->latent, 1);
  ch = s->boc[s->n - 1];
  conv(ps, "decoder.conv_in", s->latent, ch, 3);
  mid(ps, s, "decoder", ch);
  for (int i = 0; i < s->n; i++) {
    int64_t out = s->boc[s->n - 1 - i];
    for (int j = 0; j < s->layers + 1; j++)
      resnet(ps, P("decoder.up_blocks.%d.resnets.%d", i, j), j ? out : ch, out);
    ch = out;
    if (i < s->n - 1) conv(ps, P("decoder.up_blocks.%d.upsamplers.0.conv", i), ch, ch, 3);
  }
  norm(ps, "decoder.conv_norm_out", ch);
  conv(ps, "decoder.conv_out", ch, s->out_ch, 3);
}

/* ---- writing a model folder ---------------------------------------------- */

static const vae_spec TINY = {{2, 4}, 2, 1, 2, 3, 3, 4, 1, 1, 1, 0};
static const vae_spec SD = {{16, 32, 64, 64}, 4, 2, 8, 3, 3, 4, 1, 1, 1, 0};
static const vae_spec NOATTN = {{8, 16}, 2, 1, 4, 3, 3, 4, 0, 0, 0, 0};

typedef struct {
  const char *extra; /* more config keys, ",\"k\": v" */
  const char *drop; /* a tensor to leave out */
  const char *reshape; /* a tensor whose first dim is made one larger */
  const char *add; /* one more [1] tensor */
  const vae_spec *weights_of; /* the weights of another spec than the config's */
  const char *set; /* a tensor whose values are `values` instead of zeros */
  const float *values;
} tweaks;

static void write_config(const char *dir, const vae_spec *s, const char *extra) {
  char boc[64] = "", types_d[256] = "", types_u[256] = "", text[2048];
  for (int i = 0; i < s->n; i++) {
    size_t l = strlen(boc);
    snprintf(boc + l, sizeof boc - l, "%s%lld", i ? ", " : "", (long long)s->boc[i]);
    strcat(types_d, i ? ", \"DownEncoderBlock2D\"" : "\"DownEncoderBlock2D\"");
    strcat(types_u, i ? ", \"UpDecoderBlock2D\"" : "\"UpDecoderBlock2D\"");
  }
  extra = extra ? extra : "";
  char d[300] = "", u[300] = "";
  if (!strstr(extra, "down_block_types"))
    snprintf(d, sizeof d, ", \"down_block_types\": [%s]", types_d);
  if (!strstr(extra, "up_block_types"))
    snprintf(u, sizeof u, ", \"up_block_types\": [%s]", types_u);
  snprintf(
      text, sizeof text,
      "{\"_class_name\": \"AutoencoderKL\", \"block_out_channels\": [%s], \"in_channels\": %lld,"
      " \"out_channels\": %lld, \"latent_channels\": %lld, \"layers_per_block\": %lld,"
      " \"norm_num_groups\": %lld, \"use_quant_conv\": %s, \"use_post_quant_conv\": %s,"
      " \"mid_block_add_attention\": %s%s%s%s}\n",
      boc, (long long)s->in_ch, (long long)s->out_ch, (long long)s->latent, (long long)s->layers,
      (long long)s->groups, s->quant ? "true" : "false", s->post_quant ? "true" : "false",
      s->attn ? "true" : "false", d, u, extra);
  char *p = dc_path_join(dir, "config.json");
  tu_write_file(p, text, strlen(text));
  dc_free(p);
}

/* A fresh folder tmp/<name> holding the spec's model with zero weights. */
static char *make_model(const char *name, const vae_spec *s, const tweaks *tw) {
  static tu_params ps;
  static const float zeros[64 * 64 * 9];
  static const tweaks none = {0};
  if (!tw) tw = &none;
  char *dir = tu_path(name);
  mkdir(dir, 0755);
  write_config(dir, s, tw->extra);
  vae_params(tw->weights_of ? tw->weights_of : s, &ps);
  if (tw->add) tu_params_add(&ps, 1, (int64_t[]){1}, "%s", tw->add);
  dc_st_out out[512];
  int n = 0;
  for (int i = 0; i < ps.n; i++) {
    if (tw->drop && strcmp(ps.p[i].name, tw->drop) == 0) continue;
    out[n] = (dc_st_out){ps.p[i].name, ps.p[i].type, zeros};
    if (tw->reshape && strcmp(ps.p[i].name, tw->reshape) == 0) out[n].type.dims[0]++;
    if (tw->set && strcmp(ps.p[i].name, tw->set) == 0) out[n].data = tw->values;
    n++;
  }
  char *w = dc_path_join(dir, "diffusion_pytorch_model.safetensors");
  CHECK_OK(dc_st_write(w, out, n));
  dc_free(w);
  return dir;
}

static dc_status *build_in(const char *dir, const char *component, const char *entry,
                           const dc_input_shape *shapes, int nshapes, dc_module **out) {
  dc_folder f;
  dc_folder_options fo = {component, NULL};
  *out = NULL;
  DC_TRY(dc_folder_open(dir, &fo, &f));
  dc_build_options opt = {.entry = entry, .shapes = shapes, .nshapes = nshapes};
  dc_status *st = dc_frontend_build(&f, &opt, out);
  dc_folder_close(&f);
  return st;
}

static dc_status *build(const char *dir, const char *entry, const dc_input_shape *shapes,
                        int nshapes, dc_module **out) {
  return build_in(dir, NULL, entry, shapes, nshapes, out);
}

static const dc_type *output_type(const dc_module *m, const char *name) {
  for (int i = 0; i < m->noutputs; i++)
    if (strcmp(m->outputs[i].name, name) == 0) return &m->nodes[m->outputs[i].node].type;
  return NULL;
}

static int type_is(const dc_type *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return t && t->rank == 4 && t->dims[0] == a && t->dims[1] == b && t->dims[2] == c &&
         t->dims[3] == d;
}

static int has_scope(const dc_module *m, dc_op op, const char *scope) {
  for (int i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == op && m->nodes[i].scope && strcmp(m->nodes[i].scope, scope) == 0)
      return 1;
  return 0;
}

static int count_op(const dc_module *m, dc_op op) {
  int k = 0;
  for (int i = 0; i < m->nnodes; i++) k += m->nodes[i].op == op;
  return k;
}

/* ---- part 1: structure ---------------------------------------------------- */

static void test_tiny(void) {
  char *dir = make_model("tiny", &TINY, NULL);
  dc_module *m;
  CHECK_OK(build(dir, "encode", NULL, 0, &m));
  if (m) {
    /* default: batch 1, sample_size 32 (diffusers' default), one downsample */
    CHECK(type_is(&m->nodes[m->inputs[0].node].type, 1, 3, 32, 32));
    CHECK(type_is(output_type(m, "mean"), 1, 4, 16, 16));
    CHECK(type_is(output_type(m, "logvar"), 1, 4, 16, 16));
    CHECK_OK(dc_verify(m, "test"));
    CHECK(strcmp(dc_module_get_meta(m, "entry"), "encode") == 0);
    CHECK(strcmp(dc_module_get_meta(m, "scaling_factor"), "0.18215") == 0);
    CHECK(dc_module_get_meta(m, "shift_factor") == NULL);
    CHECK(has_scope(m, OP_ATTENTION, "encoder.mid_block.attentions.0"));
    CHECK(has_scope(m, OP_CONV2D, "encoder.down_blocks.0.downsamplers.0.conv"));
    CHECK(has_scope(m, OP_CONV2D, "quant_conv"));
    CHECK(has_scope(m, OP_CLAMP, "latent_dist"));
    CHECK(!has_scope(m, OP_CONV2D, "decoder.conv_in")); /* checked, not built */
    for (int i = 0; i < m->nnodes; i++) {
      const dc_node *n = &m->nodes[i];
      if (n->op == OP_ATTENTION)
        CHECK(dc_node_int(n, "heads") == 1 && fabs(dc_node_float(n, "scale") - 0.5) < 1e-12);
      if (n->op == OP_CONV2D && strstr(n->scope, "downsamplers"))
        CHECK(dc_node_int(n, "pad_t") == 0 && dc_node_int(n, "pad_b") == 1 &&
              dc_node_int(n, "pad_l") == 0 && dc_node_int(n, "pad_r") == 1 &&
              dc_node_int(n, "stride") == 2);
    }
    printf("  ok: tiny encode: %d nodes, mean/logvar f32[1,4,16,16]\n", m->nnodes);
    dc_module_destroy(m);
  }
  CHECK_OK(build(dir, NULL, NULL, 0, &m)); /* NULL entry = decode */
  if (m) {
    CHECK(strcmp(dc_module_get_meta(m, "entry"), "decode") == 0);
    CHECK(strcmp(m->inputs[0].name, "z") == 0);
    CHECK(type_is(&m->nodes[m->inputs[0].node].type, 1, 4, 16, 16));
    CHECK(type_is(output_type(m, "sample"), 1, 3, 32, 32));
    CHECK(has_scope(m, OP_CONV2D, "post_quant_conv"));
    CHECK(has_scope(m, OP_UPSAMPLE, "decoder.up_blocks.0.upsamplers.0"));
    CHECK(has_scope(m, OP_CONV2D, "decoder.up_blocks.0.upsamplers.0.conv"));
    CHECK(has_scope(m, OP_CONV2D, "decoder.up_blocks.1.resnets.1.conv_shortcut") == 0);
    CHECK(has_scope(m, OP_CONV2D, "decoder.up_blocks.1.resnets.0.conv_shortcut"));
    CHECK(count_op(m, OP_UPSAMPLE) == 1);
    printf("  ok: tiny decode (entry NULL): %d nodes, sample f32[1,3,32,32]\n", m->nnodes);
    dc_module_destroy(m);
  }
  free(dir);
}

static void test_sd_shapes(void) {
  char *dir = make_model("sd", &SD,
                         &(tweaks){.extra = ", \"sample_size\": 64, \"scaling_factor\": 0.13025,"
                                            " \"shift_factor\": 0.0609, \"force_upcast\": true,"
                                            " \"latents_mean\": null, \"act_fn\": \"silu\""});
  dc_module *m;
  dc_input_shape img = {"sample", 4, {1, 3, 64, 48}};
  CHECK_OK(build(dir, "encode", &img, 1, &m));
  if (m) {
    CHECK(type_is(output_type(m, "mean"), 1, 4, 8, 6));
    CHECK(count_op(m, OP_CONV2D) > 20);
    CHECK(strcmp(dc_module_get_meta(m, "scaling_factor"), "0.13025") == 0);
    CHECK(strcmp(dc_module_get_meta(m, "shift_factor"), "0.0609") == 0);
    printf("  ok: sd encode 1x3x64x48 -> mean f32[1,4,8,6]\n");
    dc_module_destroy(m);
  }
  dc_input_shape z = {"z", 4, {2, 4, 8, 6}};
  CHECK_OK(build(dir, "decode", &z, 1, &m));
  if (m) {
    CHECK(type_is(output_type(m, "sample"), 2, 3, 64, 48));
    CHECK(count_op(m, OP_UPSAMPLE) == 3);
    CHECK(strstr(dc_module_get_meta(m, "note"), "latents / scaling_factor + shift_factor") != NULL);
    CHECK(has_scope(m, OP_SILU, "decoder.up_blocks.3.resnets.2.nonlinearity"));
    CHECK(has_scope(m, OP_SILU, "decoder.conv_act"));
    printf("  ok: sd decode 2x4x8x6 -> sample f32[2,3,64,48]\n");
    dc_module_destroy(m);
  }
  CHECK_OK(build(dir, "decode", NULL, 0, &m)); /* default z: sample_size 64 / 8 */
  if (m) CHECK(type_is(&m->nodes[m->inputs[0].node].type, 1, 4, 8, 8));
  dc_module_destroy(m);
  free(dir);
}

static void test_noattn_and_old_names(void) {
  char *dir = make_model("noattn", &NOATTN, NULL);
  dc_module *m;
  CHECK_OK(build(dir, "encode", &(dc_input_shape){"sample", 4, {1, 3, 16, 16}}, 1, &m));
  if (m) {
    CHECK(count_op(m, OP_ATTENTION) == 0);
    CHECK(!has_scope(m, OP_CONV2D, "quant_conv"));
    CHECK(type_is(output_type(m, "logvar"), 1, 4, 8, 8));
    dc_module_destroy(m);
  }
  CHECK_OK(build(dir, "decode", NULL, 0, &m));
  if (m) CHECK(!has_scope(m, OP_CONV2D, "post_quant_conv") && count_op(m, OP_ATTENTION) == 0);
  dc_module_destroy(m);
  free(dir);
  printf("  ok: no attention, no quant convs\n");

  vae_spec old = TINY;
  old.old_attn_names = 1;
  dir = make_model("oldnames", &old, NULL);
  CHECK_OK(build(dir, "decode", NULL, 0, &m));
  if (m) CHECK(has_scope(m, OP_LINEAR, "decoder.mid_block.attentions.0.proj_attn"));
  dc_module_destroy(m);
  free(dir);
  printf(
      "  ok: deprecated attention names (query/key/value/proj_attn) as diffusers renames them\n");
}

static void expect_error(const char *name, const vae_spec *s, const tweaks *tw, const char *entry,
                         const dc_input_shape *shape, const char *needle) {
  char *dir = make_model(name, s, tw);
  dc_module *m = NULL;
  CHECK_ERR(build(dir, entry, shape, shape ? 1 : 0, &m), needle);
  CHECK(m == NULL);
  free(dir);
}

static void test_errors(void) {
  expect_error("e_entry", &TINY, NULL, "forward", NULL,
               "AutoencoderKL has entries encode and decode, got \"forward\"");
  expect_error(
      "e_block", &TINY,
      &(tweaks){.extra =
                    ", \"down_block_types\": [\"AttnDownEncoderBlock2D\", \"DownEncoderBlock2D\"]"},
      "encode", NULL,
      "e_block/config.json: \"down_block_types\"[0] is \"AttnDownEncoderBlock2D\", which diffc "
      "does not support (supported: DownEncoderBlock2D)");
  expect_error(
      "e_up", &TINY, &(tweaks){.extra = ", \"up_block_types\": [\"UpDecoderBlock2D\"]"}, "decode",
      NULL, "\"up_block_types\" has 1 entries but \"block_out_channels\" has 2; they must match");
  expect_error("e_act", &TINY, &(tweaks){.extra = ", \"act_fn\": \"gelu\""}, "decode", NULL,
               "\"act_fn\" is \"gelu\", which diffc does not support (supported: silu, swish)");
  expect_error("e_groups", &(vae_spec){{2, 4}, 2, 1, 4, 3, 3, 4, 1, 1, 1, 0}, NULL, "decode", NULL,
               "\"norm_num_groups\" 4 does not divide \"block_out_channels\"[0] = 2");
  expect_error("e_div", &TINY, NULL, "encode", &(dc_input_shape){"sample", 4, {1, 3, 32, 33}},
               "input \"sample\" [1,3,32,33]: height and width must be multiples of 2");
  expect_error("e_chan", &TINY, NULL, "decode", &(dc_input_shape){"z", 4, {1, 3, 8, 8}},
               "expects 4 channels (latent_channels)");
  expect_error(
      "e_missing", &TINY, &(tweaks){.drop = "decoder.mid_block.attentions.0.to_k.bias"}, "decode",
      NULL,
      "weight \"decoder.mid_block.attentions.0.to_k.bias\" is missing (the config implies [4])");
  /* the other half's weights are checked too, with a message that says why */
  expect_error("e_missing2", &TINY, &(tweaks){.drop = "encoder.conv_out.weight"}, "decode", NULL,
               "while checking the encoder weights (the decode entry does not use them)");
  expect_error(
      "e_shape", &TINY, &(tweaks){.reshape = "encoder.down_blocks.0.downsamplers.0.conv.weight"},
      "encode", NULL,
      "weight \"encoder.down_blocks.0.downsamplers.0.conv.weight\" has shape [3,2,3,3] but the "
      "config implies [2,2,3,3]");
  expect_error("e_extra", &TINY, &(tweaks){.add = "decoder.stray.weight"}, "encode", NULL,
               "1 weight in the checkpoint is not used by the AutoencoderKL graph: "
               "\"decoder.stray.weight\"");
  /* use_quant_conv false but the checkpoint has quant_conv: not silently dropped */
  vae_spec noq = TINY;
  noq.quant = 0;
  expect_error(
      "e_quant", &noq, &(tweaks){.weights_of = &TINY}, "encode", NULL,
      "2 weights in the checkpoint are not used by the AutoencoderKL graph: \"quant_conv.bias\", "
      "\"quant_conv.weight\"");
}

static dc_status *exec_one(const char *dir, const char *entry, float **out_mean,
                           float **out_logvar);

/* With all weights zero, quant_conv's bias is the encoder's output, so the
 * outputs show which half is the mean (the first, as torch.chunk) and that
 * only logvar is clamped to [-30, 20]. */
static void test_latent_dist(void) {
  static const float bias[8] = {1, 2, 33, -44, 25, -40, 5, 6};
  char *dir = make_model("dist", &TINY, &(tweaks){.set = "quant_conv.bias", .values = bias});
  float *mean = NULL, *logvar = NULL;
  CHECK_OK(exec_one(dir, "encode", &mean, &logvar));
  if (mean && logvar) {
    const int hw = 16 * 16;
    CHECK(mean[0] == 1 && mean[hw] == 2 && mean[2 * hw] == 33 && mean[3 * hw + 5] == -44);
    CHECK(logvar[0] == 20 && logvar[hw] == -30 && logvar[2 * hw] == 5 && logvar[3 * hw + 7] == 6);
    printf("  ok: mean = channels [0,4) unclamped, logvar = channels [4,8) clamped to [-30, 20]\n");
  }
  free(mean), free(logvar), free(dir);
}

/* Every allocation of a build failing in turn: each must give a clean error
 * (and, under ASan, no leak), never a crash or a half-built module. */
static void test_out_of_memory(void) {
  char *dir = make_model("oom", &TINY, NULL);
  int fails = 0, bad = 0, done = 0;
  for (long k = 0; k < 20000 && !done; k++) {
    dc_module *m = NULL;
    dc_alloc_fail_after(k);
    dc_status *st = build(dir, "encode", NULL, 0, &m);
    dc_alloc_fail_after(-1);
    done = st == NULL;
    bad += done ? m == NULL : m != NULL;
    fails += !done;
    dc_module_destroy(m);
    dc_status_free(st);
  }
  CHECK(done && bad == 0);
  printf("  ok: %d injected allocation failures, each a clean error\n", fails);
  free(dir);
}

/* Compiles `entry` with default shapes to a plan, runs it through the
 * runtime with zero inputs and returns copies of the outputs "mean" and
 * "logvar" (malloc'd).  (The numbers against diffusers are checked by the
 * fixture tests, tests/fixture_check.c, through the same path.) */
static dc_status *exec_one(const char *dir, const char *entry, float **out_mean,
                           float **out_logvar) {
  char *plan_path = tu_path("dist.dplan");
  dc_compile_options co = {.model = dir, .entry = entry};
  drt_plan *p = NULL;
  dc_status *st = dc_compile(&co, plan_path, NULL);
  if (!st) st = drt_load(plan_path, NULL, &p);
  drt_stats stats;
  if (!st) st = drt_run(p, &stats); /* inputs start zeroed */
  for (int i = 0; !st && i < drt_output_count(p); i++) {
    const drt_tensor_info *info = drt_output_info(p, i);
    float **dst = strcmp(info->name, "mean") == 0 ? out_mean : out_logvar;
    *dst = malloc(info->numel * sizeof(float));
    memcpy(*dst, drt_output(p, info->name, NULL), info->numel * sizeof(float));
  }
  drt_destroy(p);
  free(plan_path);
  return st;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  printf("structure and errors (zero weights):\n");
  test_tiny();
  test_sd_shapes();
  test_noattn_and_old_names();
  test_errors();
  test_out_of_memory();
  test_latent_dist();
  return tu_finish();
}
