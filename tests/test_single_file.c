/* test_single_file.c — single-file checkpoints in the original CompVis /
 * Stability layout (frontend/single_file*.c) against the diffusers folders
 * they were made from (tests/fixtures/single_file, written by
 * tools/make_fixtures_single_file.py, where diffusers' own from_single_file
 * loaded each file equal to its folder):
 *   - every tensor of each folder's unet, vae, text_encoder(_2) is in the
 *     single-file source under the same name, dtype and shape, and its entry
 *     points at identical bytes (the transposed text_projection compared
 *     element by element); nothing more is there;
 *   - the family (SD1.x, SD2.x, SDXL base) and the pipeline facts;
 *   - tokenizers and scheduler from the config folder, and from the bundled
 *     defaults (the real data/, whose full-size configs the tiny fixtures
 *     must fail against with the tensor named; and a DIFFC_DATA_DIR made
 *     from the fixture's configs, which must succeed);
 *   - binding the transposed text_projection adds a permute, no copy;
 *   - errors: other layouts (a Flux transformer, inpainting, a diffusers UNet file, an
 *     unknown key set), a missing, an unexpected, a duplicated and an
 *     unmapped tensor, a truncated file, a config folder of another family,
 *     a bad DIFFC_DATA_DIR;
 *   - allocation failure at points spread over an open: clean errors, no
 *     leaks (the sanitizer build). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/pipeline_source.h"
#include "testutil.h"

static char *fx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fx(const char *fmt, ...) {
  char rel[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof rel, fmt, ap);
  va_end(ap);
  return dc_asprintf("%s/fixtures/single_file/%s", tu_source_dir, rel);
}

static char *data_path(const char *rel) { return dc_asprintf("%s/../data/%s", tu_source_dir, rel); }

/* ---- comparing a component with its folder ----------------------------------- */

/* One tensor of the reference folder: its header entry and its file's bytes. */
typedef struct {
  const dc_st_tensor *t;
  const uint8_t *base;
} ref_tensor;

static void check_bytes(const struct dc_folder_entry *e, const uint8_t *got_base, const ref_tensor *r) {
  const dc_st_tensor *g = e->tensor, *w = r->t;
  const uint8_t *gp = got_base + g->offset, *wp = r->base + w->offset;
  CHECK(g->bytes == w->bytes);
  if (g->bytes != w->bytes) return;
  if (!e->transposed) {
    CHECK(memcmp(gp, wp, (size_t)w->bytes) == 0);
    return;
  }
  /* stored [C,R] = the reference [R,C] transposed */
  int64_t rows = w->dims[0], cols = w->dims[1];
  size_t es = (size_t)dc_dtype_size(w->dtype);
  int same = 1;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      same &= memcmp(gp + (size_t)(j * rows + i) * es, wp + (size_t)(i * cols + j) * es, es) == 0;
  CHECK(same);
}

static void check_tensor(const dc_folder *got, const ref_tensor *r, int *ntransposed) {
  const struct dc_folder_entry *e = dc_folder_find(got, r->t->name);
  if (!e) fprintf(stderr, "  %s: no \"%s\"\n", got->dir, r->t->name);
  CHECK(e != NULL);
  if (!e) return;
  CHECK(e->tensor->dtype == r->t->dtype);
  int64_t dims[DC_MAX_DIMS];
  memcpy(dims, e->tensor->dims, sizeof dims);
  if (e->transposed) dims[0] = e->tensor->dims[1], dims[1] = e->tensor->dims[0];
  CHECK(e->tensor->rank == r->t->rank && memcmp(dims, r->t->dims, sizeof(int64_t) * (size_t)r->t->rank) == 0);
  CHECK(strcmp(e->name, r->t->name) == 0 && strcmp(e->tensor->name, r->t->name) == 0);
  check_bytes(e, got->shards[e->shard].file.data, r);
  *ntransposed += e->transposed;
}

static void check_component(const dc_folder *got, const ref_tensor *refs, int n, int want_transposed) {
  int transposed = 0;
  CHECK(got->nentries == n);
  CHECK(got->nshards == 1 && got->borrowed);
  for (int i = 0; i < n; i++) check_tensor(got, &refs[i], &transposed);
  CHECK(transposed == want_transposed);
  printf("  %s: %d tensors, same names, dtypes, shapes and bytes%s\n", got->dir, n,
         want_transposed ? " (text_projection stored transposed)" : "");
}

/* A diffusers component (unet, vae) opened as diffc opens a pipeline's. */
static void check_diffusers_component(const dc_folder *got, const char *dir, const char *component) {
  dc_folder ref;
  dc_status *st = dc_folder_open(dir, &(dc_folder_options){.component = component}, &ref);
  CHECK_OK(st);
  if (st) return;
  ref_tensor *refs = calloc((size_t)ref.nentries, sizeof *refs);
  for (int i = 0; i < ref.nentries; i++)
    refs[i] = (ref_tensor){ref.entries[i].tensor, ref.shards[ref.entries[i].shard].file.data};
  check_component(got, refs, ref.nentries, 0);
  free(refs);
  dc_folder_close(&ref);
}

/* A transformers text encoder: <dir>/<component>/model.safetensors. */
static void check_text_encoder(const dc_folder *got, const char *dir, const char *component, int transposed) {
  char *path = dc_asprintf("%s/%s/model.safetensors", dir, component);
  dc_st_file ref;
  dc_status *st = dc_st_open(path, &ref);
  CHECK_OK(st);
  dc_free(path);
  if (st) return;
  ref_tensor *refs = calloc((size_t)ref.ntensors, sizeof *refs);
  for (int i = 0; i < ref.ntensors; i++) refs[i] = (ref_tensor){&ref.tensors[i], ref.file.data};
  check_component(got, refs, ref.ntensors, transposed);
  free(refs);
  dc_st_close(&ref);
}

/* The text file `name` of fs equals the file at path. */
static void check_text_file(const dc_text_files *fs, const char *name, const char *path) {
  const dc_text_file *f = dc_text_files_find(fs, name);
  char *want = NULL;
  size_t n = 0;
  dc_status *st = dc_file_read_all(path, &want, &n);
  CHECK_OK(st);
  CHECK(f != NULL);
  if (f && want) CHECK(f->size == n && memcmp(f->data, want, n) == 0);
  dc_free(want);
}

static void check_tokenizer(const dc_text_files *fs, const char *config_dir, const char *name) {
  char *vocab = data_path("clip_tokenizer/vocab.json"), *merges = data_path("clip_tokenizer/merges.txt");
  char *cfg = dc_asprintf("%s/%s/tokenizer_config.json", config_dir, name);
  check_text_file(fs, "vocab.json", vocab);
  check_text_file(fs, "merges.txt", merges);
  check_text_file(fs, "tokenizer_config.json", cfg);
  dc_free(vocab);
  dc_free(merges);
  dc_free(cfg);
}

static int all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* ---- the fixtures --------------------------------------------------------------- */

typedef struct {
  const char *name, *family, *pipeline;
  int te2;
} fixture;

static const fixture fixtures[] = {
    {"sd1", "SD1.x", "StableDiffusionPipeline", 0},
    {"sd2", "SD2.x", "StableDiffusionPipeline", 0},
    {"sdxl", "SDXL base", "StableDiffusionXLPipeline", 1},
};

static void check_source(const dc_pipeline_source *s, const fixture *x, const char *dir) {
  CHECK(s->family && strcmp(s->family, x->family) == 0);
  CHECK(strcmp(s->class_name, x->pipeline) == 0);
  CHECK(s->has_text_encoder_2 == x->te2);
  CHECK(s->force_zeros_for_empty_prompt == x->te2); /* the SDXL fixture's model_index says true */
  CHECK(s->has_safety_checker == 0);
  check_diffusers_component(&s->unet, dir, "unet");
  check_diffusers_component(&s->vae, dir, "vae");
  check_text_encoder(&s->text_encoder, dir, "text_encoder", 0);
  if (x->te2) check_text_encoder(&s->text_encoder_2, dir, "text_encoder_2", 1);
  else CHECK(s->text_encoder_2.nentries == 0 && s->tokenizer_2.nfiles == 0);
  check_tokenizer(&s->tokenizer, dir, "tokenizer");
  if (x->te2) check_tokenizer(&s->tokenizer_2, dir, "tokenizer_2");
  char *sched = dc_asprintf("%s/scheduler/scheduler_config.json", dir);
  check_text_file(&s->scheduler, "scheduler_config.json", sched);
  dc_free(sched);
}

static void test_fixture(const fixture *x) {
  printf("%s: %s.safetensors with the config folder %s/\n", x->family, x->name, x->name);
  char *file = fx("%s.safetensors", x->name), *dir = fx("%s", x->name);
  dc_pipeline_source s;
  dc_status *st = dc_single_file_open(file, dir, &s);
  CHECK_OK(st);
  if (!st) {
    check_source(&s, x, dir);
    CHECK(strcmp(s.origin, file) == 0);
    dc_pipeline_source_close(&s);
    CHECK(all_zero(&s, sizeof s));
  }
  dc_free(file);
  dc_free(dir);
}

/* Without a config folder: the real bundled defaults, full-size models, which
 * the tiny fixture's first UNet tensor cannot match; the message names the
 * tensor, its diffusers name, both shapes and the family's config. */
static void test_bundled_mismatch(const fixture *x) {
  char *file = fx("%s.safetensors", x->name);
  char *want = dc_asprintf("/single_file/%s/unet/config.json implies [", x->name);
  dc_pipeline_source s;
  dc_status *st = dc_single_file_open(file, NULL, &s);
  if (st) printf("  %s with the bundled %s configs: %s\n", x->name, x->family, dc_status_message(st));
  CHECK_ERR(st, want);
  CHECK(all_zero(&s, sizeof s));
  dc_free(want);
  dc_free(file);
}

/* ---- bundled defaults from DIFFC_DATA_DIR ---------------------------------------- */

static void copy_file(const char *from, const char *to) {
  char *text = NULL;
  size_t n = 0;
  CHECK_OK(dc_file_read_all(from, &text, &n));
  tu_write_file(to, text, n);
  dc_free(text);
}

static void copy_into(const char *src_dir, const char *dst_dir, const char *rel) {
  char *from = dc_path_join(src_dir, rel), *to = dc_path_join(dst_dir, rel);
  char *parent = dc_path_parent(to);
  mkdir(parent, 0755);
  copy_file(from, to);
  dc_free(parent);
  dc_free(from);
  dc_free(to);
}

/* A data folder whose sd1 defaults are the fixture's configs: the bundled
 * path (tokenizer_config.json only, vocab and merges from clip_tokenizer/). */
static char *make_data_dir(void) {
  char *data = tu_path("data"), *sf = dc_path_join(data, "single_file"), *sd1 = dc_path_join(sf, "sd1");
  char *clip = dc_path_join(data, "clip_tokenizer"), *src = fx("sd1"), *real = data_path("clip_tokenizer");
  mkdir(data, 0755), mkdir(sf, 0755), mkdir(sd1, 0755), mkdir(clip, 0755);
  static const char *const files[] = {"model_index.json", "unet/config.json", "vae/config.json",
                                      "text_encoder/config.json", "scheduler/scheduler_config.json",
                                      "tokenizer/tokenizer_config.json"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) copy_into(src, sd1, files[i]);
  copy_into(real, clip, "vocab.json");
  copy_into(real, clip, "merges.txt");
  dc_free(sf), dc_free(sd1), dc_free(clip), dc_free(src), dc_free(real);
  return data;
}

static void test_data_dir(void) {
  printf("bundled defaults found through DIFFC_DATA_DIR\n");
  char *data = make_data_dir(), *file = fx("sd1.safetensors"), *dir = fx("sd1");
  setenv("DIFFC_DATA_DIR", data, 1);
  dc_pipeline_source s;
  dc_status *st = dc_single_file_open(file, NULL, &s);
  CHECK_OK(st);
  if (!st) {
    check_source(&s, &fixtures[0], dir);
    CHECK(strncmp(s.unet.config.path, data, strlen(data)) == 0); /* the configs came from there */
    dc_pipeline_source_close(&s);
  }
  setenv("DIFFC_DATA_DIR", dir, 1); /* a folder without single_file/ */
  CHECK_ERR(dc_single_file_open(file, NULL, &s), "no single_file/ folder there");
  unsetenv("DIFFC_DATA_DIR");
  free(data);
  dc_free(file);
  dc_free(dir);
}

/* ---- transposed weights bind as a permute ------------------------------------------ */

static void test_bind_transposed(void) {
  printf("binding the transposed text_projection\n");
  char *file = fx("sdxl.safetensors"), *dir = fx("sdxl");
  dc_pipeline_source s;
  dc_status *st = dc_single_file_open(file, dir, &s);
  CHECK_OK(st);
  if (!st) {
    const struct dc_folder_entry *e = dc_folder_find(&s.text_encoder_2, "text_projection.weight");
    CHECK(e && e->transposed && e->tensor->rank == 2);
    int64_t p = e ? e->tensor->dims[1] : 0, d = e ? e->tensor->dims[0] : 0; /* stored [D,P] */
    dc_module *m = dc_module_create();
    dc_weights w;
    CHECK_OK(dc_weights_init(&w, m, &s.text_encoder_2));
    int32_t id = -1, again = -1;
    CHECK_OK(dc_weights_get(&w, "text_projection.weight", 2, (int64_t[]){p, d}, &id));
    CHECK(id >= 0 && m->nodes[id].op == OP_PERMUTE && m->nodes[id].type.dims[0] == p && m->nodes[id].type.dims[1] == d);
    const dc_node *cast = id >= 0 ? &m->nodes[m->nodes[id].inputs[0]] : NULL; /* f16 -> f32, then [D,P] -> [P,D] */
    CHECK(cast && cast->op == OP_CAST && m->nodes[cast->inputs[0]].op == OP_WEIGHT);
    CHECK(cast && e && m->weights[m->nodes[cast->inputs[0]].ref].offset == e->tensor->offset);
    CHECK_OK(dc_weights_get(&w, "text_projection.weight", 2, (int64_t[]){p, d}, &again));
    CHECK(again == id);
    CHECK_ERR(dc_weights_get(&w, "text_projection.weight", 2, (int64_t[]){d, p}, &again),
              "\"text_projection.weight\" has shape [5,6] but the config implies [6,5]");
    dc_weights_deinit(&w);
    dc_module_destroy(m);
    dc_pipeline_source_close(&s);
  }
  dc_free(file);
  dc_free(dir);
}

/* ---- errors ------------------------------------------------------------------------- */

static uint8_t zeros[4096];

/* Writes `to`: the tensors of `from` except `skip`, plus the extras. */
static void write_variant(const char *from, const char *to, const char *skip, const dc_st_out *extra, int nextra) {
  dc_st_file f;
  CHECK_OK(dc_st_open(from, &f));
  dc_st_out *out = calloc((size_t)(f.ntensors + nextra), sizeof *out);
  int n = 0;
  for (int i = 0; i < f.ntensors; i++) {
    const dc_st_tensor *t = &f.tensors[i];
    if (skip && !strcmp(t->name, skip)) continue;
    dc_st_out o = {.name = t->name, .data = f.file.data + t->offset};
    o.type.dtype = t->dtype, o.type.rank = t->rank;
    memcpy(o.type.dims, t->dims, sizeof o.type.dims);
    out[n++] = o;
  }
  for (int i = 0; i < nextra; i++) out[n++] = extra[i];
  CHECK_OK(dc_st_write(to, out, n));
  free(out);
  dc_st_close(&f);
}

static dc_st_out zero_tensor(const char *name, int rank, const int64_t *dims) {
  dc_st_out o = {.name = name, .data = zeros};
  o.type.dtype = DT_F16, o.type.rank = rank;
  memcpy(o.type.dims, dims, sizeof(int64_t) * (size_t)rank);
  return o;
}

/* Opens `path` with the sd1 config folder and expects `needle`. */
static void check_open_err(const char *path, const char *config, const char *needle) {
  dc_pipeline_source s;
  dc_status *st = dc_single_file_open(path, config, &s);
  if (st) printf("  %s\n", dc_status_message(st));
  CHECK_ERR(st, needle);
  CHECK(all_zero(&s, sizeof s));
}

static void test_other_layouts(void) {
  printf("other layouts are refused by name\n");
  char *p = tu_path("flux.safetensors");
  dc_st_out flux[] = {zero_tensor("double_blocks.0.img_attn.norm.key_norm.scale", 1, (int64_t[]){128}),
                      zero_tensor("img_in.weight", 2, (int64_t[]){8, 4})};
  CHECK_OK(dc_st_write(p, flux, 2));
  /* a Flux transformer is one model (test_single_file_dit.c), not a pipeline */
  check_open_err(p, NULL, "a FLUX.1-schnell transformer checkpoint, not a whole pipeline");
  dc_st_out odd[] = {zero_tensor("something.weight", 1, (int64_t[]){4})};
  CHECK_OK(dc_st_write(p, odd, 1));
  check_open_err(p, NULL, "not a checkpoint layout diffc knows: no SD UNet");
  dc_st_out diffusers_unet[] = {zero_tensor("conv_in.weight", 4, (int64_t[]){8, 4, 3, 3}),
                                zero_tensor("time_embedding.linear_1.weight", 2, (int64_t[]){8, 8})};
  CHECK_OK(dc_st_write(p, diffusers_unet, 2));
  check_open_err(p, NULL, "a diffusers UNet weights file: open its model or pipeline folder");
  char *sd1 = fx("sd1.safetensors"), *inpaint = tu_path("inpaint.safetensors");
  dc_st_out in9[] = {zero_tensor("model.diffusion_model.input_blocks.0.0.weight", 4, (int64_t[]){8, 9, 3, 3})};
  write_variant(sd1, inpaint, "model.diffusion_model.input_blocks.0.0.weight", in9, 1);
  check_open_err(inpaint, NULL,
                 "recognised as SD1.x inpainting (it has \"model.diffusion_model.input_blocks.0.0.weight\")");
  free(p), free(inpaint), dc_free(sd1);
}

static void test_bad_tensors(void) {
  printf("missing, unexpected, duplicated tensors; truncated file; wrong config folder\n");
  char *sd1 = fx("sd1.safetensors"), *dir = fx("sd1"), *bad = tu_path("bad.safetensors");
  write_variant(sd1, bad, "model.diffusion_model.out.2.bias", NULL, 0);
  check_open_err(bad, dir, "no tensor of the checkpoint is the unet's \"conv_out.bias\" [4]");
  write_variant(sd1, bad, "cond_stage_model.transformer.text_model.encoder.layers.1.mlp.fc2.weight", NULL, 0);
  check_open_err(bad, dir, "the text_encoder's \"text_model.encoder.layers.1.mlp.fc2.weight\" [4,11]");
  dc_st_out unknown[] = {zero_tensor("model.diffusion_model.input_blocks.1.0.in_layers.1.weight", 1, (int64_t[]){8}),
                         zero_tensor("cond_stage_model.extra", 1, (int64_t[]){8})};
  write_variant(sd1, bad, NULL, unknown, 2);
  check_open_err(bad, dir,
                 "tensor \"cond_stage_model.extra\" is not part of an SD1.x checkpoint as diffc reads it (not under a "
                 "prefix of the family's components); and 1 more");
  dc_st_out extra[] = {zero_tensor("model.diffusion_model.input_blocks.1.1.extra.weight", 1, (int64_t[]){8})};
  write_variant(sd1, bad, NULL, extra, 1);
  check_open_err(bad, dir,
                 "tensor \"model.diffusion_model.input_blocks.1.1.extra.weight\" becomes the unet's "
                 "\"down_blocks.0.attentions.0.extra.weight\", which the config");
  dc_st_out dup[] = {zero_tensor("model.diffusion_model.output_blocks.2.2.conv.bias", 1, (int64_t[]){16})};
  write_variant(sd1, bad, NULL, dup, 1);
  check_open_err(bad, dir,
                 "tensors \"model.diffusion_model.output_blocks.2.1.conv.bias\" and "
                 "\"model.diffusion_model.output_blocks.2.2.conv.bias\" both become the unet's "
                 "\"up_blocks.0.upsamplers.0.conv.bias\"");
  char *text = NULL;
  size_t n = 0;
  CHECK_OK(dc_file_read_all(sd1, &text, &n));
  tu_write_file(bad, text, n - 100);
  dc_free(text);
  check_open_err(bad, dir, "truncated");
  char *xl = fx("sdxl");
  check_open_err(sd1, xl, "\"_class_name\" is \"StableDiffusionXLPipeline\", but ");
  check_open_err(sd1, xl, "is an SD1.x checkpoint (StableDiffusionPipeline)");
  char *sd2 = fx("sd2");
  check_open_err(sd1, sd2, "/sd2/unet/config.json"); /* an SD pipeline folder, but not this model's */
  free(bad), dc_free(sd1), dc_free(dir), dc_free(xl), dc_free(sd2);
}

/* ---- allocation failure ------------------------------------------------------------ */

static void test_alloc_failures(void) {
  char *file = fx("sdxl.safetensors"), *dir = fx("sdxl");
  dc_pipeline_source s;
  long before = dc_alloc_count();
  dc_status *st = dc_single_file_open(file, dir, &s);
  CHECK_OK(st);
  if (!st) dc_pipeline_source_close(&s);
  long total = dc_alloc_count() - before, points = 0, clean = 0;
  /* every one of the first 300 (opening, recognising, configs), then 700
   * spread over the rest (mostly the UNet's graph built in record mode) */
  for (long n = 0; n < total; n += n < 300 ? 1 : (total - 300) / 700 + 1, points++) {
    dc_alloc_fail_after(n);
    st = dc_single_file_open(file, dir, &s);
    dc_alloc_fail_after(-1);
    if (st) clean += dc_status_message(st)[0] != 0 && all_zero(&s, sizeof s);
    else dc_pipeline_source_close(&s);
    dc_status_free(st);
  }
  printf("allocation failure at %ld of %ld points of an open: %ld clean errors\n", points, total, clean);
  CHECK(clean == points);
  dc_free(file);
  dc_free(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) test_fixture(&fixtures[i]);
  printf("the bundled defaults (data/) are the released models' sizes\n");
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) test_bundled_mismatch(&fixtures[i]);
  test_data_dir();
  test_bind_transposed();
  test_other_layouts();
  test_bad_tensors();
  test_alloc_failures();
  return tu_finish();
}
