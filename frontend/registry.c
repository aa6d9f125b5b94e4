/* registry.c — the table of supported model classes and the lookups over
 * it (registry.h).  Adding a class: its descriptor in its own file, one
 * line in `classes` below. */
#include "registry.h"

#include <string.h>

static const dc_class_desc *const classes[] = {
    &dc_class_unet_2d_condition,
    &dc_class_autoencoder_kl,
    &dc_class_autoencoder_kl_cogvideox,
    &dc_class_clip_text_model,
    &dc_class_clip_text_model_with_projection,
    &dc_class_t5_encoder_model,
    &dc_class_flux_transformer_2d,
    &dc_class_sd3_transformer_2d,
    &dc_class_cogvideox_transformer_3d,
};

const dc_class_desc *const *dc_classes(int *n) {
  *n = (int)(sizeof classes / sizeof classes[0]);
  return classes;
}

const dc_class_desc *dc_class_find(dc_library lib, const char *name) {
  for (size_t i = 0; name && i < sizeof classes / sizeof classes[0]; i++)
    if (classes[i]->library == lib && !strcmp(classes[i]->name, name)) return classes[i];
  return NULL;
}

/* transformers names a class by "architectures" (["CLIPTextModel"]); a
 * config may list several heads of one model, and the first is the one
 * saved. */
static const char *first_architecture(const dc_json_doc *config) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(config->root, "architectures");
  const cJSON *first = cJSON_IsArray(a) ? a->child : NULL;
  return cJSON_IsString(first) ? first->valuestring : NULL;
}

dc_status *dc_class_of_config(const dc_json_doc *config, const char **name, const dc_class_desc **out) {
  *out = NULL;
  DC_TRY(dc_json_str(config, "_class_name", NULL, name));
  if (*name) {
    *out = dc_class_find(DC_LIB_DIFFUSERS, *name);
    return NULL;
  }
  *name = first_architecture(config);
  if (*name) {
    *out = dc_class_find(DC_LIB_TRANSFORMERS, *name);
    return NULL;
  }
  return dc_error(DC_ERR_FORMAT, "%s: no \"_class_name\" (is this a diffusers model config?)", config->path);
}

const char *dc_class_names_with(unsigned options, char *buf, size_t cap) {
  buf[0] = 0;
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
    if ((classes[i]->facts.options & options) != options) continue;
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", classes[i]->name);
  }
  return buf;
}

const dc_entry_io *dc_entry_io_find(const dc_entry_io *list, const char *name) {
  for (; list && list->name; list++)
    if (!strcmp(list->name, name)) return list;
  return NULL;
}

const dc_entry_desc *dc_entry_find(const dc_class_desc *c, const char *name) {
  for (const dc_entry_desc *e = c->entries; e->name; e++)
    if (!strcmp(e->name, name)) return e;
  return NULL;
}

/* "a, b, c, d (with X)": a condition is said once, after the last of the
 * inputs it adds. */
static void describe_io(dc_buf *b, const dc_entry_io *io) {
  for (int i = 0; io[i].name; i++) {
    const char *when = io[i].when, *next = io[i + 1].name ? io[i + 1].when : NULL;
    int last_of_run = when && !(next && !strcmp(next, when));
    dc_buf_printf(b, "%s%s%s%s%s", i ? ", " : "", io[i].name, last_of_run ? " (with " : "", last_of_run ? when : "",
                  last_of_run ? ")" : "");
  }
}

void dc_classes_describe(dc_buf *b) {
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
    const dc_class_desc *c = classes[i];
    dc_buf_printf(b, "  %s%s\n", c->name,
                  c->facts.options & DC_FACT_VAE_FRAME_BATCHING
                      ? " (--vae-slicing, --vae-tiling, --no-vae-frame-batching apply)"
                      : c->facts.options & DC_FACT_VAE_TILING ? " (--vae-slicing, --vae-tiling apply)" : "");
    for (const dc_entry_desc *e = c->entries; e->name; e++) {
      dc_buf_printf(b, "    %s%s: ", e->name, !strcmp(e->name, c->default_entry) ? " (default)" : "");
      describe_io(b, e->inputs);
      dc_buf_printf(b, " -> ");
      describe_io(b, e->outputs);
      dc_buf_printf(b, "\n");
    }
  }
}
