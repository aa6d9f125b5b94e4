/* test_clip_build.c — the CLIP text encoder classes (frontend/clip_text.c)
 * and the ops they brought, beyond what the fixtures prove against
 * transformers:
 *   - the reference kernels of causal_attention and eos_pool against
 *     computations written out here (they are the oracle of the other
 *     backends, so they are checked by hand too);
 *   - config and input errors, each with its message (unsupported
 *     hidden_act, heads, a null projection_dim, too many tokens, hidden
 *     state indices, a missing or extra weight), and the position_ids
 *     buffer older checkpoints hold;
 *   - the graph: a 16-bit token table read as stored (no cast in the
 *     arena), and hidden_state alone keeps no layer past the one it names
 *     once dce drops what no output reads;
 *   - the runtime refuses ids outside the table, naming input, index and
 *     bound, and fills random ids inside it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "driver/compile.h"
#include "passes/passes.h"
#include "runtime/diffrun.h"
#include "runtime/kernels.h"
#include "testutil.h"

/* ---- the reference kernels by hand ----------------------------------------- */

static int32_t add_in(dc_module *m, const char *name, dc_dtype t, int rank, const int64_t *dims) {
  dc_type ty = {t, rank, {0}};
  memcpy(ty.dims, dims, sizeof(int64_t) * (size_t)rank);
  return dc_module_add_input(m, name, &ty, INIT_NORMAL);
}

static int32_t add_op(dc_module *m, dc_node n) {
  dc_status *st = dc_infer_type(m, &n, &n.type);
  CHECK_OK(st);
  return st ? -1 : dc_module_add_node(m, &n);
}

/* softmax over keys 0..i of q_i·k_j·scale, in double, per head. */
static void naive_causal(const float *q, const float *k, const float *v, int s, int h, int d, double scale,
                         double *out) {
  int hd = h * d;
  for (int hh = 0; hh < h; hh++)
    for (int i = 0; i < s; i++) {
      double p[16], mx = -INFINITY, sum = 0;
      for (int j = 0; j <= i; j++) {
        double dot = 0;
        for (int e = 0; e < d; e++) dot += (double)q[i * hd + hh * d + e] * k[j * hd + hh * d + e];
        p[j] = dot * scale;
        mx = p[j] > mx ? p[j] : mx;
      }
      for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - mx);
      for (int e = 0; e < d; e++) {
        double o = 0;
        for (int j = 0; j <= i; j++) o += p[j] / sum * v[j * hd + hh * d + e];
        out[i * hd + hh * d + e] = o;
      }
    }
}

static void test_ref_causal_attention(void) {
  enum { S = 7, H = 2, D = 3 };
  float q[S * H * D], k[S * H * D], v[S * H * D], y[S * H * D];
  double want[S * H * D];
  for (int i = 0; i < S * H * D; i++) q[i] = sinf(0.7f * (float)i), k[i] = cosf(1.3f * (float)i), v[i] = (float)(i % 5) - 2;
  dc_module *m = dc_module_create();
  int64_t dims[3] = {1, S, H * D};
  int32_t in[3] = {add_in(m, "q", DT_F32, 3, dims), add_in(m, "k", DT_F32, 3, dims), add_in(m, "v", DT_F32, 3, dims)};
  dc_node n = dc_node_make(OP_CAUSAL_ATTENTION, 3, in);
  dc_node_set_int(&n, "heads", H);
  dc_node_set_float(&n, "scale", 0.5);
  int32_t id = add_op(m, n);
  const void *ins[3] = {q, k, v};
  CHECK_OK(dc_ref_kernel_for(OP_CAUSAL_ATTENTION)(m, &m->nodes[id], ins, y));
  naive_causal(q, k, v, S, H, D, 0.5, want);
  double err = 0;
  for (int i = 0; i < S * H * D; i++) err = fmax(err, fabs(y[i] - want[i]));
  CHECK(err < 1e-6);
  /* query 0 sees key 0 alone: its output is v_0 exactly */
  CHECK(y[0] == v[0] && y[D] == v[D]);
  printf("causal_attention reference vs the mask written out: max |diff| %.2g\n", err);
  dc_module_destroy(m);
}

/* eos_pool: rows at the first eos (none: 0), or at the first largest id. */
static void test_ref_eos_pool(void) {
  enum { B = 4, S = 5, D = 2 };
  const int64_t ids[B * S] = {1, 9, 3, 9, 2, /* eos 9 twice: 1; max 9 twice: 1 */
                              4, 4, 4, 4, 4, /* no eos: 0; all equal: 0 */
                              9, 0, 0, 0, 8, /* eos first: 0; max first: 0 */
                              0, 1, 2, 3, 7}; /* no eos: 0; max last: 4 */
  static const int want_eos[B] = {1, 0, 0, 0}, want_max[B] = {1, 0, 0, 4};
  float x[B * S * D], y[B * D];
  for (int i = 0; i < B * S * D; i++) x[i] = (float)i;
  for (int argmax = 0; argmax <= 1; argmax++) {
    dc_module *m = dc_module_create();
    int32_t in[2] = {add_in(m, "x", DT_F32, 3, (int64_t[]){B, S, D}), add_in(m, "ids", DT_I64, 2, (int64_t[]){B, S})};
    dc_node n = dc_node_make(OP_EOS_POOL, 2, in);
    dc_node_set_int(&n, "argmax", argmax);
    dc_node_set_int(&n, "eos", 9);
    int32_t id = add_op(m, n);
    const void *ins[2] = {x, ids};
    CHECK_OK(dc_ref_kernel_for(OP_EOS_POOL)(m, &m->nodes[id], ins, y));
    for (int b = 0; b < B; b++) {
      int p = argmax ? want_max[b] : want_eos[b];
      CHECK(y[b * D] == x[(b * S + p) * D] && y[b * D + 1] == x[(b * S + p) * D + 1]);
    }
    dc_module_destroy(m);
  }
}

/* The type rules: ids are integers, nothing else is; a causal attention
 * has as many queries as keys. */
static void test_type_rules(void) {
  dc_module *m = dc_module_create();
  int32_t ids = add_in(m, "ids", DT_I64, 2, (int64_t[]){2, 3}), table = add_in(m, "t", DT_F32, 2, (int64_t[]){10, 4});
  int32_t x = add_in(m, "x", DT_F32, 3, (int64_t[]){2, 3, 4}), kv = add_in(m, "kv", DT_F32, 3, (int64_t[]){2, 5, 4});
  dc_type t;
  dc_node n = dc_node_make(OP_EMBEDDING, 2, (int32_t[]){table, table});
  CHECK_ERR(dc_infer_type(m, &n, &t), "expected token ids (i32 or i64)");
  n = dc_node_make(OP_EMBEDDING, 2, (int32_t[]){ids, table});
  CHECK_OK(dc_infer_type(m, &n, &t));
  CHECK(t.dtype == DT_F32 && t.rank == 3 && t.dims[2] == 4);
  n = dc_node_make(OP_ADD, 2, (int32_t[]){x, ids});
  CHECK_ERR(dc_infer_type(m, &n, &t), "input 1 is i64[2,3]; expected f32");
  n = dc_node_make(OP_CAUSAL_ATTENTION, 3, (int32_t[]){x, kv, kv});
  dc_node_set_int(&n, "heads", 2);
  CHECK_ERR(dc_infer_type(m, &n, &t), "causal attention needs as many queries as keys");
  n = dc_node_make(OP_EOS_POOL, 2, (int32_t[]){x, ids});
  dc_node_set_int(&n, "argmax", 2);
  CHECK_ERR(dc_infer_type(m, &n, &t), "argmax must be 0 or 1");
  dc_module_destroy(m);
}

/* ---- a small CLIP folder ---------------------------------------------------- */

static const char tiny_config[] =
    "{\"architectures\": [\"%s\"], \"model_type\": \"clip_text_model\", \"vocab_size\": 10, \"hidden_size\": 4, "
    "\"intermediate_size\": 8, \"num_hidden_layers\": 2, \"max_position_embeddings\": 5%s}";
#define HEADS_PROJ ", \"num_attention_heads\": 2, \"projection_dim\": 3"

/* dir/config.json for class with `keys`, and a model.safetensors of zeros
 * holding what record mode lists (weights; else one tensor: a config the
 * builder refuses lists none), but `drop` (NULL: none) and with `extra`
 * (NULL: none) added. */
static char *tiny_folder(const char *name, const char *cls, const char *keys, int weights, const char *drop,
                         const char *extra) {
  char *dir = tu_path(name), *config = dc_path_join(dir, "config.json"), *text = dc_asprintf(tiny_config, cls, keys);
  mkdir(dir, 0755);
  tu_write_file(config, text, strlen(text));
  dc_weight_list l = {0};
  if (weights) CHECK_OK(dc_frontend_weight_list(config, NULL, &l));
  static float zeros[256];
  dc_st_out *t = calloc((size_t)l.n + 1, sizeof *t);
  int n = 0;
  for (int i = 0; i < l.n; i++) {
    if (drop && !strcmp(l.items[i].name, drop)) continue;
    t[n].name = l.items[i].name;
    t[n].type = (dc_type){DT_F32, l.items[i].rank, {0}};
    memcpy(t[n].type.dims, l.items[i].dims, sizeof(int64_t) * (size_t)l.items[i].rank);
    t[n++].data = zeros;
  }
  if (extra || !weights) t[n++] = (dc_st_out){extra ? extra : "x", {DT_I64, 2, {1, 5}}, zeros};
  char *st = dc_path_join(dir, "model.safetensors");
  CHECK_OK(dc_st_write(st, t, n));
  free(t);
  dc_free(st);
  dc_weight_list_deinit(&l);
  dc_free(config);
  dc_free(text);
  return dir;
}

static dc_status *build_dir(const char *dir, const dc_build_options *opt, dc_module **m) {
  dc_folder f;
  *m = NULL;
  DC_TRY(dc_folder_open(dir, NULL, &f));
  dc_status *st = dc_frontend_build(&f, opt, m);
  dc_folder_close(&f);
  return st;
}

static void check_build_err(const char *dir, const dc_build_options *opt, const char *msg) {
  dc_module *m = NULL;
  CHECK_ERR(build_dir(dir, opt, &m), msg);
  dc_module_destroy(m);
}

static void test_config_errors(void) {
  dc_build_options off = {.clip_hidden_index = -1};
  char *d = tiny_folder("act", "CLIPTextModel", HEADS_PROJ ", \"hidden_act\": \"gelu_new\"", 0, NULL, NULL);
  check_build_err(d, &off, "\"hidden_act\" is \"gelu_new\", which diffc does not support (supported: quick_gelu, gelu)");
  free(d);
  d = tiny_folder("heads", "CLIPTextModel", ", \"num_attention_heads\": 3", 0, NULL, NULL);
  check_build_err(d, &off, "\"hidden_size\" 4 is not a multiple of \"num_attention_heads\" 3");
  free(d);
  d = tiny_folder("eoslist", "CLIPTextModel", HEADS_PROJ ", \"eos_token_id\": [2, 49407]", 0, NULL, NULL);
  check_build_err(d, &off, "\"eos_token_id\" must be");
  free(d);
  d = tiny_folder("proj", "CLIPTextModelWithProjection", ", \"num_attention_heads\": 2, \"projection_dim\": null", 0,
                  NULL, NULL);
  check_build_err(d, &off, "\"projection_dim\" is null, but CLIPTextModelWithProjection projects to it");
  free(d);
}

static void test_weights_and_inputs(void) {
  dc_build_options off = {.clip_hidden_index = -1};
  char *d = tiny_folder("missing", "CLIPTextModel", HEADS_PROJ, 1, "text_model.encoder.layers.1.mlp.fc2.bias", NULL);
  check_build_err(d, &off, "weight \"text_model.encoder.layers.1.mlp.fc2.bias\" is missing (the config implies [4])");
  free(d);
  d = tiny_folder("extra", "CLIPTextModel", HEADS_PROJ, 1, NULL, "text_model.extra.weight");
  check_build_err(d, &off, "1 weight in the checkpoint is not used by the CLIPTextModel graph: \"text_model.extra.weight\"");
  free(d);
  /* transformers 4's buffer is read by nothing, and refused by nothing */
  d = tiny_folder("position_ids", "CLIPTextModel", HEADS_PROJ, 1, NULL, "text_model.embeddings.position_ids");
  dc_module *m = NULL;
  CHECK_OK(build_dir(d, &off, &m));
  CHECK(m && m->noutputs == 2 && !strcmp(m->outputs[0].name, "last_hidden_state"));
  CHECK(m && m->ninputs == 1 && m->nodes[m->inputs[0].node].type.dtype == DT_I64 &&
        m->nodes[m->inputs[0].node].type.dims[1] == 5); /* [1, max_position_embeddings] */
  dc_module_destroy(m);
  dc_input_shape six = {"input_ids", 2, {1, 6}};
  dc_build_options opt = {.shapes = &six, .nshapes = 1, .clip_hidden_index = -1};
  check_build_err(d, &opt, "input \"input_ids\" [1,6]: 6 tokens, more than \"max_position_embeddings\" (5,");
  opt = (dc_build_options){.clip_hidden_index = 3};
  check_build_err(d, &opt, "clip_hidden_index (--clip-hidden-state) 3: ");
  check_build_err(d, &opt, "has 2 encoder layers, so hidden_states has indices 0..2");
  opt = (dc_build_options){.clip_hidden_index = -1, .clip_hidden_final_norm = 1};
  check_build_err(d, &opt, "give clip_hidden_index (--clip-hidden-state) too");
  free(d);
}

/* ---- the graph ------------------------------------------------------------------ */

static char *fixture_model(const char *name) { return dc_asprintf("%s/fixtures/%s/model", tu_source_dir, name); }

/* An fp16 checkpoint's token table goes to the embedding as stored. */
static void test_stored_table(void) {
  char *dir = fixture_model("clip_sd15_fp16");
  dc_folder f;
  dc_folder_options fo = {.variant = "fp16"};
  dc_module *m = NULL;
  CHECK_OK(dc_folder_open(dir, &fo, &f));
  dc_build_options opt = {.clip_hidden_index = -1};
  CHECK_OK(dc_frontend_build(&f, &opt, &m));
  int found = 0;
  for (int32_t i = 0; m && i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_EMBEDDING) continue;
    const dc_node *t = &m->nodes[n->inputs[1]];
    found = t->op == OP_WEIGHT && t->type.dtype == DT_F16;
  }
  CHECK(found);
  dc_module_destroy(m);
  dc_folder_close(&f);
  dc_free(dir);
}

/* With hidden_state the only output, dce leaves the embeddings and layers
 * 0..k-1 and nothing of the layers after, the final norm or the pooler. */
static void test_hidden_state_alone(void) {
  char *dir = fixture_model("clip_sd15");
  dc_build_options opt = {.clip_hidden_index = 1};
  dc_module *m = NULL;
  CHECK_OK(build_dir(dir, &opt, &m));
  CHECK(m && m->noutputs == 3 && !strcmp(m->outputs[2].name, "hidden_state"));
  if (m && m->noutputs == 3) {
    m->outputs[0] = m->outputs[2];
    m->noutputs = 1;
    int32_t before = m->nnodes;
    CHECK_OK(dc_pass_dce(m));
    CHECK_OK(dc_verify(m, "dce"));
    int layer0 = 0, later = 0;
    for (int32_t i = 0; i < m->nnodes; i++) {
      const char *s = m->nodes[i].scope ? m->nodes[i].scope : "";
      layer0 += !strncmp(s, "text_model.encoder.layers.0.", 28);
      later += !strncmp(s, "text_model.encoder.layers.1", 27) || !strncmp(s, "text_model.encoder.layers.2", 27) ||
               strstr(s, "final_layer_norm") || strstr(s, "pooler");
    }
    CHECK(layer0 > 0 && later == 0);
    printf("hidden_states[1] alone: %d of %d nodes kept, none past layer 0\n", m->nnodes, before);
  }
  dc_module_destroy(m);
  dc_free(dir);
}

/* ---- the runtime's id check ------------------------------------------------------ */

static void test_runtime_ids(void) {
  char *dir = fixture_model("clip_sd15"), *plan = tu_path("clip.dplan");
  dc_input_shape shape = {"input_ids", 2, {1, 4}};
  dc_compile_options co = {.model = dir, .shapes = &shape, .nshapes = 1};
  dc_compile_report rep;
  CHECK_OK(dc_compile(&co, plan, &rep));
  drt_plan *p = NULL;
  drt_options ro = {.backend = "reference"};
  CHECK_OK(drt_load(plan, &ro, &p));
  if (p) {
    int64_t ids[4] = {49406, 320, 49408, 49407};
    CHECK_ERR(drt_set_input_data(p, "input_ids", "i64", ids, 4),
              "input \"input_ids\"[2] is 49408, outside [0, 49408): the ids index the 49408 rows of "
              "text_model.embeddings.token_embedding");
    ids[2] = -1;
    CHECK_ERR(drt_set_input_data(p, "input_ids", "i64", ids, 4), "input \"input_ids\"[2] is -1, outside [0, 49408)");
    ids[2] = 49407;
    CHECK_OK(drt_set_input_data(p, "input_ids", "i64", ids, 4));
    drt_stats s;
    CHECK_OK(drt_run(p, &s));
    drt_set_random_inputs(p, 3);
    CHECK_OK(drt_run(p, &s));
  }
  drt_destroy(p);
  free(plan);
  dc_free(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_ref_causal_attention();
  test_ref_eos_pool();
  test_type_rules();
  test_config_errors();
  test_weights_and_inputs();
  test_stored_table();
  test_hidden_state_alone();
  test_runtime_ids();
  return tu_finish();
}
