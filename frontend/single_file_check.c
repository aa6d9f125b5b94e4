/* single_file_check.c — the tensors mapped out of a single-file checkpoint
 * against what each component's config implies.  diffusers loads a converted
 * state dict non-strictly (a key it does not expect is dropped, one it lacks
 * keeps its initial value); here every name must be the model's, every
 * tensor of the model must be there, and every shape must be the config's,
 * so a checkpoint read with the wrong config fails with the tensor named. */
#include "registry.h"
#include "single_file.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tensors of transformers' CLIPTextModel[WithProjection] -------------- */

typedef struct {
  int64_t vocab, hidden, inter, layers, positions, projection;
  int with_projection;
} sf_clip_dims;

static dc_status *sf_expect(dc_weight_list *l, int rank, const int64_t *dims, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static dc_status *sf_expect(dc_weight_list *l, int rank, const int64_t *dims, const char *fmt, ...) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    dc_weight_spec *items = dc_realloc(l->items, sizeof *items * (size_t)cap);
    if (!items) return dc_nomem("listing a text encoder's tensors");
    l->items = items, l->cap = cap;
  }
  char name[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  dc_weight_spec *s = &l->items[l->n];
  memset(s, 0, sizeof *s);
  if (!(s->name = dc_strdup(name))) return dc_nomem("listing a text encoder's tensors");
  s->rank = rank;
  memcpy(s->dims, dims, sizeof(int64_t) * (size_t)rank);
  l->n++;
  return NULL;
}

/* CLIPTextConfig's defaults where a key is absent; the class from "architectures". */
static dc_status *sf_clip_read(const char *config_path, sf_clip_dims *d) {
  dc_json_doc doc;
  DC_TRY(dc_json_load(config_path, &doc));
  const char *cls = NULL;
  const dc_class_desc *desc;
  dc_status *st = dc_class_of_config(&doc, &cls, &desc);
  if (!st && strcmp(cls, "CLIPTextModel") != 0 && strcmp(cls, "CLIPTextModelWithProjection") != 0)
    st = dc_error(DC_ERR_UNSUPPORTED,
                  "%s: the text encoder is %s; the text encoders of SD1.x, SD2.x and SDXL are CLIPTextModel and "
                  "CLIPTextModelWithProjection",
                  config_path, cls);
  if (!st) d->with_projection = !strcmp(cls, "CLIPTextModelWithProjection");
  if (!st) st = dc_json_int(&doc, "vocab_size", 49408, &d->vocab);
  if (!st) st = dc_json_int(&doc, "hidden_size", 512, &d->hidden);
  if (!st) st = dc_json_int(&doc, "intermediate_size", 2048, &d->inter);
  if (!st) st = dc_json_int(&doc, "num_hidden_layers", 12, &d->layers);
  if (!st) st = dc_json_int(&doc, "max_position_embeddings", 77, &d->positions);
  if (!st) st = dc_json_int(&doc, "projection_dim", 512, &d->projection);
  dc_json_free(&doc);
  return st;
}

static dc_status *sf_clip_layer(dc_weight_list *l, const sf_clip_dims *d, int64_t n) {
  const long long i = (long long)n;
  const int64_t dd[2] = {d->hidden, d->hidden}, up[2] = {d->inter, d->hidden}, down[2] = {d->hidden, d->inter};
  static const char *const proj[4] = {"q", "k", "v", "out"};
  for (int k = 0; k < 4; k++) {
    DC_TRY(sf_expect(l, 2, dd, "text_model.encoder.layers.%lld.self_attn.%s_proj.weight", i, proj[k]));
    DC_TRY(sf_expect(l, 1, dd, "text_model.encoder.layers.%lld.self_attn.%s_proj.bias", i, proj[k]));
  }
  for (int k = 1; k <= 2; k++) {
    DC_TRY(sf_expect(l, 1, dd, "text_model.encoder.layers.%lld.layer_norm%d.weight", i, k));
    DC_TRY(sf_expect(l, 1, dd, "text_model.encoder.layers.%lld.layer_norm%d.bias", i, k));
  }
  DC_TRY(sf_expect(l, 2, up, "text_model.encoder.layers.%lld.mlp.fc1.weight", i));
  DC_TRY(sf_expect(l, 1, up, "text_model.encoder.layers.%lld.mlp.fc1.bias", i));
  DC_TRY(sf_expect(l, 2, down, "text_model.encoder.layers.%lld.mlp.fc2.weight", i));
  return sf_expect(l, 1, down, "text_model.encoder.layers.%lld.mlp.fc2.bias", i);
}

static int sf_spec_cmp(const void *a, const void *b) {
  return strcmp(((const dc_weight_spec *)a)->name, ((const dc_weight_spec *)b)->name);
}

/* transformers' modeling_clip.py, under the "text_model." names the released
 * SD repositories' checkpoints use. */
static dc_status *sf_clip_expected(const char *config_path, int identity_projection, dc_weight_list *l) {
  sf_clip_dims d;
  memset(l, 0, sizeof *l);
  DC_TRY(sf_clip_read(config_path, &d));
  dc_status *st = sf_expect(l, 2, (int64_t[]){d.vocab, d.hidden}, "text_model.embeddings.token_embedding.weight");
  if (!st) st = sf_expect(l, 2, (int64_t[]){d.positions, d.hidden}, "text_model.embeddings.position_embedding.weight");
  for (int64_t n = 0; n < d.layers && !st; n++) st = sf_clip_layer(l, &d, n);
  if (!st) st = sf_expect(l, 1, &d.hidden, "text_model.final_layer_norm.weight");
  if (!st) st = sf_expect(l, 1, &d.hidden, "text_model.final_layer_norm.bias");
  if (!st && d.with_projection && !identity_projection) st = sf_expect(l, 2, (int64_t[]){d.projection, d.hidden}, "text_projection.weight");
  if (st) {
    dc_weight_list_deinit(l);
    return st;
  }
  qsort(l->items, (size_t)l->n, sizeof *l->items, sf_spec_cmp);
  return NULL;
}

/* ---- comparing ------------------------------------------------------------------ */

/* The view's shape under its diffusers name. */
static void sf_view_shape(const sf_view *v, int64_t *dims) {
  memcpy(dims, v->t.dims, sizeof(int64_t) * (size_t)v->t.rank);
  if (v->transposed) dims[0] = v->t.dims[1], dims[1] = v->t.dims[0];
}

static dc_status *sf_check_shape(const char *file, const sf_view *v, const dc_weight_spec *s, const char *config) {
  int64_t have[DC_MAX_DIMS];
  sf_view_shape(v, have);
  if (v->t.rank == s->rank && memcmp(have, s->dims, sizeof(int64_t) * (size_t)s->rank) == 0) return NULL;
  char a[160], b[160];
  return dc_error(DC_ERR_MISMATCH, "%s: tensor \"%s\" (the %s's \"%s\") has shape %s%s, but the config %s implies %s",
                  file, v->source, sf_comp_names[v->comp], v->t.name, dc_dims_str(have, v->t.rank, a, sizeof a),
                  v->transposed ? " (stored transposed)" : "", config, dc_dims_str(s->dims, s->rank, b, sizeof b));
}

static dc_status *sf_missing(const char *file, sf_comp comp, const dc_weight_spec *s, int count, const char *config) {
  char a[160];
  return dc_error(DC_ERR_MISMATCH,
                  "%s: no tensor of the checkpoint is the %s's \"%s\" %s, which the config %s implies (%d missing in "
                  "all)",
                  file, sf_comp_names[comp], s->name, dc_dims_str(s->dims, s->rank, a, sizeof a), config, count);
}

/* views (sorted by name) against want (sorted): walk both. */
static dc_status *sf_compare(const char *file, sf_comp comp, const sf_view *views, int n, const dc_weight_list *want,
                             const char *config) {
  int i = 0, k = 0, missing = 0;
  const dc_weight_spec *first_missing = NULL;
  while (i < n || k < want->n) {
    const sf_view *v = i < n ? &views[i] : NULL;
    const dc_weight_spec *s = k < want->n ? &want->items[k] : NULL;
    if (v && i > 0 && !strcmp(views[i - 1].t.name, v->t.name))
      return dc_error(DC_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" both become the %s's \"%s\"", file,
                      views[i - 1].source, v->source, sf_comp_names[comp], v->t.name);
    int c = !v ? 1 : !s ? -1 : strcmp(v->t.name, s->name);
    if (c < 0)
      return dc_error(DC_ERR_MISMATCH,
                      "%s: tensor \"%s\" becomes the %s's \"%s\", which the config %s does not have (a checkpoint "
                      "of another shape than the config?)",
                      file, v->source, sf_comp_names[comp], v->t.name, config);
    if (c > 0) {
      if (missing++ == 0) first_missing = s;
      k++;
      continue;
    }
    DC_TRY(sf_check_shape(file, v, s, config));
    i++, k++;
  }
  return missing ? sf_missing(file, comp, first_missing, missing, config) : NULL;
}

dc_status *sf_check_component(const char *file, sf_comp comp, const sf_view *views, int n, const char *config_path,
                              int identity_projection) {
  dc_weight_list want;
  if (comp != SF_TE && comp != SF_TE2) DC_TRY(dc_frontend_weight_list(config_path, NULL, &want));
  else DC_TRY(sf_clip_expected(config_path, identity_projection, &want));
  dc_status *st = sf_compare(file, comp, views, n, &want, config_path);
  dc_weight_list_deinit(&want);
  return st;
}
