/* test_unet_build.c — the UNet2DConditionModel builder (frontend/unet.c).
 *
 * Part 1 builds graphs from small configs written to a temp folder with
 * all-zero weights whose names and shapes come from an independent listing
 * of diffusers' module tree below (a builder asking for a wrong name or shape
 * fails here): output shapes, input defaults and overrides, metadata, scopes,
 * the number of attention nodes, and the exact messages of the error cases.
 *
 * Part 2 is the real proof: for every UNet run in tests/fixtures (recorded
 * with diffusers in fp32) it builds the graph, runs it node by node with the
 * reference kernels and compares out.sample with diffusers' to relative L2
 * within the run's tolerance.  Missing fixtures are reported and skipped. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"
#include "testutil.h"

/* ---- diffusers' parameter list, written from the torch modules ---------- */

typedef struct {
  int n;
  int64_t boc[4], heads[4], tlayers[4];
  int down_attn[4], up_attn[4];
  int64_t layers, groups, cross, in_ch, out_ch, size;
  int linear, mid;          /* mid: 0 none, 1 UNetMidBlock2DCrossAttn, 2 UNetMidBlock2D */
  int64_t add_time, text;   /* text_time when add_time > 0 */
} unet_spec;

/* diffusers' own tiny test config. */
static const unet_spec TINY = {2, {4, 8}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, 1, 4, 8, 4, 4, 16, 0, 1, 0, 0};
/* SDXL's structure at the width of the unet_sdxl fixture. */
static const unet_spec XL = {3, {16, 32, 64}, {1, 2, 4}, {1, 2, 2}, {0, 1, 1}, {1, 1, 0},
                             2, 8, 32, 4, 4, 16, 1, 1, 8, 32};


/* The module path fmt... in s (160 bytes); returns s. */
static const char *at(char *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s, 160, fmt, ap);
  va_end(ap);
  return s;
}

static void conv(tu_params *ps, const char *m, int64_t cin, int64_t cout, int64_t k) {
  tu_params_add(ps, 4, (int64_t[]){cout, cin, k, k}, "%s.weight", m);
  tu_params_add(ps, 1, &cout, "%s.bias", m);
}

static void linear(tu_params *ps, const char *m, int64_t in, int64_t out, int bias) {
  tu_params_add(ps, 2, (int64_t[]){out, in}, "%s.weight", m);
  if (bias) tu_params_add(ps, 1, &out, "%s.bias", m);
}

static void norm(tu_params *ps, const char *m, int64_t c) {
  tu_params_add(ps, 1, &c, "%s.weight", m);
  tu_params_add(ps, 1, &c, "%s.bias", m);
}

static void resnet(tu_params *ps, const char *m, int64_t cin, int64_t cout, int64_t temb) {
  char s[160];
  norm(ps, at(s, "%s.norm1", m), cin);
  conv(ps, at(s, "%s.conv1", m), cin, cout, 3);
  linear(ps, at(s, "%s.time_emb_proj", m), temb, cout, 1);
  norm(ps, at(s, "%s.norm2", m), cout);
  conv(ps, at(s, "%s.conv2", m), cout, cout, 3);
  if (cin != cout) conv(ps, at(s, "%s.conv_shortcut", m), cin, cout, 1);
}

static void attn(tu_params *ps, const char *m, int64_t dim, int64_t kv) {
  char s[160];
  linear(ps, at(s, "%s.to_q", m), dim, dim, 0);
  linear(ps, at(s, "%s.to_k", m), kv, dim, 0);
  linear(ps, at(s, "%s.to_v", m), kv, dim, 0);
  linear(ps, at(s, "%s.to_out.0", m), dim, dim, 1);
}

/* Transformer2DModel; channels divisible by heads in every spec here. */
static void transformer(tu_params *ps, const unet_spec *u, const char *m, int64_t c, int64_t layers) {
  char s[160];
  norm(ps, at(s, "%s.norm", m), c);
  if (u->linear) linear(ps, at(s, "%s.proj_in", m), c, c, 1);
  else conv(ps, at(s, "%s.proj_in", m), c, c, 1);
  for (int64_t k = 0; k < layers; k++) {
    char b[160];
    at(b, "%s.transformer_blocks.%lld", m, (long long)k);
    norm(ps, at(s, "%s.norm1", b), c);
    attn(ps, at(s, "%s.attn1", b), c, c);
    norm(ps, at(s, "%s.norm2", b), c);
    attn(ps, at(s, "%s.attn2", b), c, u->cross);
    norm(ps, at(s, "%s.norm3", b), c);
    linear(ps, at(s, "%s.ff.net.0.proj", b), c, 8 * c, 1);
    linear(ps, at(s, "%s.ff.net.2", b), 4 * c, c, 1);
  }
  if (u->linear) linear(ps, at(s, "%s.proj_out", m), c, c, 1);
  else conv(ps, at(s, "%s.proj_out", m), c, c, 1);
}

static void unet_params(const unet_spec *u, tu_params *ps) {
  char s[160];
  int64_t t = 4 * u->boc[0], n = u->n;
  ps->n = 0;
  conv(ps, "conv_in", u->in_ch, u->boc[0], 3);
  linear(ps, "time_embedding.linear_1", u->boc[0], t, 1);
  linear(ps, "time_embedding.linear_2", t, t, 1);
  if (u->add_time) {
    linear(ps, "add_embedding.linear_1", u->text + 6 * u->add_time, t, 1);
    linear(ps, "add_embedding.linear_2", t, t, 1);
  }
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < u->layers; j++) {
      int64_t cin = j ? u->boc[i] : u->boc[i ? i - 1 : 0];
      resnet(ps, at(s, "down_blocks.%d.resnets.%d", i, j), cin, u->boc[i], t);
      if (u->down_attn[i])
        transformer(ps, u, at(s, "down_blocks.%d.attentions.%d", i, j), u->boc[i], u->tlayers[i]);
    }
    if (i < n - 1) conv(ps, at(s, "down_blocks.%d.downsamplers.0.conv", i), u->boc[i], u->boc[i], 3);
  }
  int64_t c = u->boc[n - 1];
  if (u->mid) resnet(ps, "mid_block.resnets.0", c, c, t);
  if (u->mid == 1) {
    transformer(ps, u, "mid_block.attentions.0", c, u->tlayers[n - 1]);
    resnet(ps, "mid_block.resnets.1", c, c, t);
  }
  for (int i = 0; i < n; i++) { /* up block i mirrors down block n-1-i */
    int r = (int)n - 1 - i;
    int64_t prev = u->boc[i ? r + 1 : r], out = u->boc[r], skip_last = u->boc[r ? r - 1 : 0];
    for (int j = 0; j <= u->layers; j++) {
      int64_t cin = (j ? out : prev) + (j == u->layers ? skip_last : out);
      resnet(ps, at(s, "up_blocks.%d.resnets.%d", i, j), cin, out, t);
      if (u->up_attn[i])
        transformer(ps, u, at(s, "up_blocks.%d.attentions.%d", i, j), out, u->tlayers[r]);
    }
    if (i < n - 1) conv(ps, at(s, "up_blocks.%d.upsamplers.0.conv", i), out, out, 3);
  }
  norm(ps, "conv_norm_out", u->boc[0]);
  conv(ps, "conv_out", u->boc[0], u->out_ch, 3);
}

/* ---- model folders -------------------------------------------------------- */

typedef struct {
  const char *extra;    /* more config keys, ", \"key\": value"; replaces keys written by default */
  const char *drop;     /* a tensor to leave out */
  const char *reshape;  /* a tensor whose first dim is made one larger */
  const char *add;      /* one more [1] tensor */
  const unet_spec *weights_of; /* the weights of another spec than the config's */
} tweaks;

static void list(char *buf, size_t cap, const int64_t *v, int n) {
  buf[0] = 0;
  for (int i = 0; i < n; i++) {
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "%s%lld", i ? ", " : "", (long long)v[i]);
  }
}

/* Appends ", \"key\": value" unless extra sets the key itself. */
static void key(char *text, size_t cap, const char *extra, const char *k, const char *fmt, ...) {
  char quoted[80], val[400];
  snprintf(quoted, sizeof quoted, "\"%s\"", k);
  if (extra && strstr(extra, quoted)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(val, sizeof val, fmt, ap);
  va_end(ap);
  size_t l = strlen(text);
  snprintf(text + l, cap - l, ", %s: %s", quoted, val);
}

static void write_config(const char *dir, const unet_spec *u, const char *extra) {
  static const char *mids[] = {"null", "\"UNetMidBlock2DCrossAttn\"", "\"UNetMidBlock2D\""};
  char text[4096] = "{\"_class_name\": \"UNet2DConditionModel\", \"_diffusers_version\": \"0.42.1\"";
  char boc[64], heads[64], tl[64], down[256] = "", up[256] = "";
  list(boc, sizeof boc, u->boc, u->n);
  list(heads, sizeof heads, u->heads, u->n);
  list(tl, sizeof tl, u->tlayers, u->n);
  for (int i = 0; i < u->n; i++) {
    strcat(down, i ? ", " : ""), strcat(up, i ? ", " : "");
    strcat(down, u->down_attn[i] ? "\"CrossAttnDownBlock2D\"" : "\"DownBlock2D\"");
    strcat(up, u->up_attn[i] ? "\"CrossAttnUpBlock2D\"" : "\"UpBlock2D\"");
  }
  key(text, sizeof text, extra, "block_out_channels", "[%s]", boc);
  key(text, sizeof text, extra, "attention_head_dim", "[%s]", heads);
  key(text, sizeof text, extra, "transformer_layers_per_block", "[%s]", tl);
  key(text, sizeof text, extra, "down_block_types", "[%s]", down);
  key(text, sizeof text, extra, "up_block_types", "[%s]", up);
  key(text, sizeof text, extra, "mid_block_type", "%s", mids[u->mid]);
  key(text, sizeof text, extra, "layers_per_block", "%lld", (long long)u->layers);
  key(text, sizeof text, extra, "norm_num_groups", "%lld", (long long)u->groups);
  key(text, sizeof text, extra, "cross_attention_dim", "%lld", (long long)u->cross);
  key(text, sizeof text, extra, "in_channels", "%lld", (long long)u->in_ch);
  key(text, sizeof text, extra, "out_channels", "%lld", (long long)u->out_ch);
  key(text, sizeof text, extra, "sample_size", "%lld", (long long)u->size);
  key(text, sizeof text, extra, "use_linear_projection", "%s", u->linear ? "true" : "false");
  if (u->add_time) {
    key(text, sizeof text, extra, "addition_embed_type", "\"text_time\"");
    key(text, sizeof text, extra, "addition_time_embed_dim", "%lld", (long long)u->add_time);
    key(text, sizeof text, extra, "projection_class_embeddings_input_dim", "%lld",
        (long long)(u->text + 6 * u->add_time));
  }
  size_t l = strlen(text);
  snprintf(text + l, sizeof text - l, "%s}\n", extra ? extra : "");
  char *p = dc_path_join(dir, "config.json");
  tu_write_file(p, text, strlen(text));
  dc_free(p);
}

/* A fresh folder tmp/<name> holding the spec's model with zero weights. */
static char *make_model(const char *name, const unet_spec *u, const tweaks *tw) {
  static tu_params ps;
  static dc_st_out out[1024];
  static const float zeros[128 * 128 * 9]; /* the largest tensor of any spec here */
  static const tweaks none = {0};
  if (!tw) tw = &none;
  char *dir = tu_path(name);
  mkdir(dir, 0755);
  write_config(dir, u, tw->extra);
  unet_params(tw->weights_of ? tw->weights_of : u, &ps);
  if (tw->add) tu_params_add(&ps, 1, (int64_t[]){1}, "%s", tw->add);
  int n = 0;
  for (int i = 0; i < ps.n; i++) {
    if (tw->drop && strcmp(ps.p[i].name, tw->drop) == 0) continue;
    out[n] = (dc_st_out){ps.p[i].name, ps.p[i].type, zeros};
    if (tw->reshape && strcmp(ps.p[i].name, tw->reshape) == 0) out[n].type.dims[0]++;
    n++;
  }
  char *w = dc_path_join(dir, "diffusion_pytorch_model.safetensors");
  CHECK_OK(dc_st_write(w, out, n));
  dc_free(w);
  return dir;
}

static dc_status *build_in(const char *dir, const dc_folder_options *fo, const char *entry,
                           const dc_input_shape *shapes, int nshapes, dc_module **out) {
  dc_folder f;
  *out = NULL;
  DC_TRY(dc_folder_open(dir, fo, &f));
  dc_build_options opt = {.entry = entry, .shapes = shapes, .nshapes = nshapes};
  dc_status *st = dc_frontend_build(&f, &opt, out);
  dc_folder_close(&f);
  return st;
}

static dc_status *build(const char *dir, const dc_input_shape *shapes, int nshapes, dc_module **out) {
  return build_in(dir, NULL, NULL, shapes, nshapes, out);
}

static const dc_type *io_type(const dc_module *m, const dc_io *io, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(io[i].name, name) == 0) return &m->nodes[io[i].node].type;
  return NULL;
}

static int dims_are(const dc_type *t, int rank, ...) {
  va_list ap;
  int ok = t && t->rank == rank;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) ok &= t && t->dims[i] == va_arg(ap, int64_t);
  va_end(ap);
  return ok;
}
#define DIMS(t, ...) dims_are((t), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), __VA_ARGS__)

static const dc_node *find_scope(const dc_module *m, dc_op op, const char *scope) {
  for (int i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == op && m->nodes[i].scope && strcmp(m->nodes[i].scope, scope) == 0) return &m->nodes[i];
  return NULL;
}

static int count_op(const dc_module *m, dc_op op) {
  int k = 0;
  for (int i = 0; i < m->nnodes; i++) k += m->nodes[i].op == op;
  return k;
}

/* ---- part 1: structure ---------------------------------------------------- */

static void test_tiny(void) {
  printf("diffusers' tiny UNet config\n");
  char *dir = make_model("tiny", &TINY, NULL);
  dc_module *m;
  CHECK_OK(build(dir, NULL, 0, &m));
  if (m) {
    CHECK(m->ninputs == 3 && m->noutputs == 1);
    CHECK(DIMS(io_type(m, m->outputs, m->noutputs, "sample"), 1, 4, 16, 16));
    CHECK(DIMS(io_type(m, m->inputs, m->ninputs, "sample"), 1, 4, 16, 16));
    CHECK(DIMS(io_type(m, m->inputs, m->ninputs, "timestep"), 1));
    CHECK(DIMS(io_type(m, m->inputs, m->ninputs, "encoder_hidden_states"), 1, 77, 8));
    CHECK(m->inputs[1].init == INIT_TIMESTEP && m->inputs[0].init == INIT_NORMAL);
    /* down 0: 1 transformer, mid: 1, up 1: 2; two attentions each */
    CHECK(count_op(m, OP_ATTENTION) == 8);
    printf("  %d nodes, %d weights, %d attention nodes\n", m->nnodes, m->nweights, count_op(m, OP_ATTENTION));
    const dc_node *a = find_scope(m, OP_ATTENTION, "down_blocks.0.attentions.0.transformer_blocks.0.attn2");
    CHECK(a && dc_node_int(a, "heads") == 2 && fabs(dc_node_float(a, "scale") - 1 / sqrt(2.0)) < 1e-12);
    a = find_scope(m, OP_ATTENTION, "up_blocks.1.attentions.1.transformer_blocks.0.attn1");
    CHECK(a && dc_node_int(a, "heads") == 2);
    CHECK(find_scope(m, OP_UPSAMPLE, "up_blocks.0.upsamplers.0") != NULL);
    CHECK(find_scope(m, OP_CONCAT, "up_blocks.1") != NULL);
    CHECK(find_scope(m, OP_GEGLU, "mid_block.attentions.0.transformer_blocks.0.ff.net.0") != NULL);
    CHECK(find_scope(m, OP_TIME_EMBED, "time_proj") != NULL);
    const dc_node *ds = find_scope(m, OP_CONV2D, "down_blocks.0.downsamplers.0.conv");
    CHECK(ds && dc_node_int(ds, "stride") == 2 && dc_node_int(ds, "pad_t") == 1 && dc_node_int(ds, "pad_r") == 1);
    const char *entry = dc_module_get_meta(m, "entry"), *cfg = dc_module_get_meta(m, "config");
    CHECK(entry && strcmp(entry, "forward") == 0);
    CHECK(cfg && strstr(cfg, "block_out_channels=4,8") && strstr(cfg, "heads=2,2"));
    printf("  config: %s\n", cfg ? cfg : "?");
    dc_module_destroy(m);
  }
  /* batch and a non-square size from --input sample; the others follow the batch */
  dc_input_shape s = {"sample", 4, {2, 4, 16, 24}};
  CHECK_OK(build(dir, &s, 1, &m));
  if (m) {
    CHECK(DIMS(io_type(m, m->outputs, m->noutputs, "sample"), 2, 4, 16, 24));
    CHECK(DIMS(io_type(m, m->inputs, m->ninputs, "timestep"), 2));
    CHECK(DIMS(io_type(m, m->inputs, m->ninputs, "encoder_hidden_states"), 2, 77, 8));
    dc_module_destroy(m);
  }
  free(dir);
}

static void test_variants(void) {
  printf("SDXL-style (text_time, linear projections, deeper transformers), mid blocks, padding 0\n");
  char *dir = make_model("xl", &XL, NULL);
  dc_module *m;
  dc_input_shape s[2] = {{"sample", 4, {2, 4, 16, 16}}, {"encoder_hidden_states", 3, {2, 5, 32}}};
  CHECK_OK(build(dir, s, 2, &m));
  if (m) {
    CHECK(m->ninputs == 5);
    CHECK(DIMS(io_type(m, m->outputs, m->noutputs, "sample"), 2, 4, 16, 16));
    CHECK(DIMS(io_type(m, m->inputs, m->ninputs, "text_embeds"), 2, 32));
    CHECK(DIMS(io_type(m, m->inputs, m->ninputs, "time_ids"), 2, 6));
    /* down 1, 2: 2 x 2 blocks; mid: 2 blocks; up 0, 1: 3 x 2 blocks; two attentions each */
    CHECK(count_op(m, OP_ATTENTION) == 44);
    CHECK(count_op(m, OP_TIME_EMBED) == 2);
    const dc_node *a = find_scope(m, OP_ATTENTION, "up_blocks.0.attentions.2.transformer_blocks.1.attn2");
    CHECK(a && dc_node_int(a, "heads") == 4 && fabs(dc_node_float(a, "scale") - 1 / 4.0) < 1e-12);
    a = find_scope(m, OP_TIME_EMBED, "add_time_proj");
    CHECK(a && dc_node_int(a, "dim") == 8 && dc_node_int(a, "flip_sin_to_cos") == 1);
    printf("  %d nodes, %d attention nodes\n", m->nnodes, count_op(m, OP_ATTENTION));
    dc_module_destroy(m);
  }
  free(dir);

  unet_spec u = TINY;
  u.mid = 2;
  dir = make_model("mid_plain", &u, NULL);
  CHECK_OK(build(dir, NULL, 0, &m));
  if (m) CHECK(count_op(m, OP_ATTENTION) == 6 && find_scope(m, OP_CONV2D, "mid_block.resnets.0.conv1"));
  dc_module_destroy(m), free(dir);
  u.mid = 0;
  dir = make_model("mid_none", &u, &(tweaks){.extra = ", \"downsample_padding\": 0"});
  CHECK_OK(build(dir, NULL, 0, &m));
  if (m) {
    const dc_node *ds = find_scope(m, OP_CONV2D, "down_blocks.0.downsamplers.0.conv");
    CHECK(count_op(m, OP_ATTENTION) == 6);
    CHECK(ds && dc_node_int(ds, "pad_t") == 0 && dc_node_int(ds, "pad_l") == 0 && dc_node_int(ds, "pad_b") == 1 &&
          dc_node_int(ds, "pad_r") == 1);
    CHECK(DIMS(io_type(m, m->outputs, m->noutputs, "sample"), 1, 4, 16, 16));
  }
  dc_module_destroy(m), free(dir);
}

static void expect_error(const char *name, const unet_spec *u, const tweaks *tw, const char *entry,
                         const dc_input_shape *s, int ns, const char *needle) {
  char *dir = make_model(name, u, tw);
  dc_module *m = NULL;
  CHECK_ERR(build_in(dir, NULL, entry, s, ns, &m), needle);
  CHECK(m == NULL);
  free(dir);
}

#define EXTRA(text) (&(tweaks){.extra = (text)})

static void test_config_errors(void) {
  printf("config errors\n");
  expect_error("e_type", &TINY, EXTRA(", \"down_block_types\": [\"CrossAttnDownBlock2D\", \"SimpleCrossAttnDownBlock2D\"]"),
               NULL, NULL, 0,
               "config.json: \"down_block_types\"[1] is \"SimpleCrossAttnDownBlock2D\", which diffc does not support "
               "(supported: CrossAttnDownBlock2D, DownBlock2D)");
  expect_error("e_up", &TINY, EXTRA(", \"up_block_types\": [\"UpBlock2D\", \"AttnUpBlock2D\"]"), NULL, NULL, 0,
               "config.json: \"up_block_types\"[1] is \"AttnUpBlock2D\", which diffc does not support "
               "(supported: CrossAttnUpBlock2D, UpBlock2D)");
  expect_error("e_act", &TINY, EXTRA(", \"act_fn\": \"gelu\""), NULL, NULL, 0,
               "config.json: \"act_fn\" is \"gelu\", which diffc does not support (supported: silu, swish)");
  expect_error("e_heads", &TINY, EXTRA(", \"attention_head_dim\": [2, 2, 2]"), NULL, NULL, 0,
               "config.json: \"attention_head_dim\" must have 2 entries, got 3");
  expect_error("e_heads_big", &TINY, EXTRA(", \"attention_head_dim\": 16"), NULL, NULL, 0,
               "down_blocks.0.attentions.0 has 4 channels but 16 attention heads");
  expect_error("e_nah", &TINY, EXTRA(", \"num_attention_heads\": 2"), NULL, NULL, 0,
               "\"num_attention_heads\" is set, which diffusers itself refuses");
  expect_error("e_mid", &TINY, EXTRA(", \"mid_block_type\": \"UNetMidBlock2DSimpleCrossAttn\""), NULL, NULL, 0,
               "\"mid_block_type\" is \"UNetMidBlock2DSimpleCrossAttn\", which diffc does not support "
               "(supported: UNetMidBlock2DCrossAttn, UNetMidBlock2D, null)");
  expect_error("e_scale", &TINY, EXTRA(", \"mid_block_scale_factor\": 1.5"), NULL, NULL, 0,
               "\"mid_block_scale_factor\" is 1.5, which diffc does not support (supported: 1)");
  expect_error("e_oca", &TINY, EXTRA(", \"only_cross_attention\": [false, true]"), NULL, NULL, 0,
               "\"only_cross_attention\" is [false,true], which diffc does not support (supported: false)");
  expect_error("e_cad", &TINY, EXTRA(", \"cross_attention_dim\": [8, 8]"), NULL, NULL, 0,
               "\"cross_attention_dim\" is [8,8], which diffc does not support (supported: an integer)");
  expect_error("e_tl", &TINY, EXTRA(", \"transformer_layers_per_block\": [[1], [1]]"), NULL, NULL, 0,
               "\"transformer_layers_per_block\" is [[1],[1]], which diffc does not support");
  expect_error("e_shift", &TINY, EXTRA(", \"resnet_time_scale_shift\": \"scale_shift\""), NULL, NULL, 0,
               "\"resnet_time_scale_shift\" is \"scale_shift\", which diffc does not support (supported: default)");
  expect_error("e_class", &TINY, EXTRA(", \"class_embed_type\": \"timestep\""), NULL, NULL, 0,
               "\"class_embed_type\" is \"timestep\", which diffc does not support (supported: null)");
  expect_error("e_add", &TINY, EXTRA(", \"addition_embed_type\": \"text\""), NULL, NULL, 0,
               "\"addition_embed_type\" is \"text\", which diffc does not support (supported: null, \"text_time\")");
  expect_error("e_center", &TINY, EXTRA(", \"center_input_sample\": true"), NULL, NULL, 0,
               "\"center_input_sample\" is true, which diffc does not support (supported: false)");
  expect_error("e_pad", &TINY, EXTRA(", \"downsample_padding\": 2"), NULL, NULL, 0,
               "\"downsample_padding\" is 2, which diffc does not support (supported: 0, 1)");
  expect_error("e_unknown", &TINY, EXTRA(", \"resnet_pre_norm\": false"), NULL, NULL, 0,
               "config.json: \"resnet_pre_norm\" is not an argument of UNet2DConditionModel that diffc knows");
  expect_error("e_null", &TINY, EXTRA(", \"norm_num_groups\": null"), NULL, NULL, 0,
               "config.json: \"norm_num_groups\" is null, which diffc does not support");
  expect_error("e_lens", &TINY, EXTRA(", \"up_block_types\": [\"UpBlock2D\"]"), NULL, NULL, 0,
               "\"down_block_types\" has 2 entries but \"up_block_types\" has 1");
  expect_error("e_boc", &TINY, EXTRA(", \"block_out_channels\": []"), NULL, NULL, 0,
               "\"block_out_channels\" has 0 entries but \"down_block_types\" has 2");
  expect_error("e_ocal", &TINY, EXTRA(", \"only_cross_attention\": [false]"), NULL, NULL, 0,
               "\"only_cross_attention\" must have 2 entries, got 1");
  expect_error("e_entry", &TINY, NULL, "decode", NULL, 0,
               "UNet2DConditionModel has one entry point, \"forward\"; got \"decode\"");
}

static void test_weight_and_input_errors(void) {
  printf("weight and input errors\n");
  expect_error("e_missing", &TINY, &(tweaks){.drop = "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight"},
               NULL, NULL, 0,
               "weight \"down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight\" is missing "
               "(the config implies [4,8])");
  expect_error("e_shape", &TINY, &(tweaks){.reshape = "conv_in.weight"}, NULL, NULL, 0,
               "weight \"conv_in.weight\" has shape [5,4,3,3] but the config implies [4,4,3,3]");
  expect_error("e_extra", &TINY, &(tweaks){.add = "class_embedding.weight"}, NULL, NULL, 0,
               "1 weight in the checkpoint is not used by the UNet2DConditionModel graph: \"class_embedding.weight\"");
  unet_spec lin = TINY;
  lin.linear = 1;
  expect_error("e_linear", &TINY, &(tweaks){.weights_of = &lin}, NULL, NULL, 0,
               "weight \"down_blocks.0.attentions.0.proj_in.weight\" has shape [4,4] but the config implies [4,4,1,1]");
  dc_input_shape s = {"sample", 4, {1, 4, 15, 16}};
  expect_error("e_hw", &TINY, NULL, NULL, &s, 1,
               "input \"sample\" is [1,4,15,16] but the model needs [B,4,H,W] with H and W multiples of 2 (1 downsamplers;");
  s = (dc_input_shape){"sample", 4, {1, 3, 16, 16}};
  expect_error("e_ch", &TINY, NULL, NULL, &s, 1, "input \"sample\" is [1,3,16,16] but the model needs [B,4,H,W]");
  s = (dc_input_shape){"timestep", 1, {2}};
  expect_error("e_t", &TINY, NULL, NULL, &s, 1, "input \"timestep\" is [2] but the model needs [1]");
  s = (dc_input_shape){"encoder_hidden_states", 3, {1, 77, 9}};
  expect_error("e_ehs", &TINY, NULL, NULL, &s, 1,
               "input \"encoder_hidden_states\" is [1,77,9] but the model needs [1,S,8]");
  s = (dc_input_shape){"text_embeds", 2, {1, 31}};
  expect_error("e_text", &XL, NULL, NULL, &s, 1, "input \"text_embeds\" is [1,31] but the model needs [1,32]");
  s = (dc_input_shape){"text_embeds", 2, {1, 32}};
  expect_error("e_notext", &TINY, NULL, NULL, &s, 1, "--input text_embeds: the model has no input \"text_embeds\"");
}

/* Every allocation of a build failing in turn: a clean error each time. */
static void test_out_of_memory(void) {
  printf("allocation failures\n");
  char *dir = make_model("oom", &TINY, NULL);
  int n = 0, clean = 1;
  for (;; n++) {
    dc_module *m = NULL;
    dc_alloc_fail_after(n);
    dc_status *st = build(dir, NULL, 0, &m);
    dc_alloc_fail_after(-1);
    if (!st) {
      dc_module_destroy(m);
      break;
    }
    clean &= m == NULL && dc_status_message(st) != NULL;
    dc_status_free(st);
  }
  printf("  %d failing allocations, each a clean error\n", n);
  CHECK(clean && n > 100);
  free(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  printf("structure and errors (zero weights):\n");
  test_tiny();
  test_variants();
  test_config_errors();
  test_weight_and_input_errors();
  test_out_of_memory();
  return tu_finish();
}
