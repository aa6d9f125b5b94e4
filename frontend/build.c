/* build.c — builds a folder's model through its class descriptor
 * (registry.h): checks the config against the class's schema and the entry
 * against its entries, records what the model is in the module's metadata
 * and points the module to the class's facts, and checks the user's input
 * shape overrides name inputs the model really has. */
#include <string.h>

#include "frontend.h"
#include "registry.h"

int dc_frontend_supports_class(const char *class_name) {
  return dc_class_find(DC_LIB_DIFFUSERS, class_name) || dc_class_find(DC_LIB_TRANSFORMERS, class_name);
}

const char *dc_frontend_supported_classes(void) {
  static char names[256]; /* built from the registry, so it cannot go stale */
  if (!names[0]) dc_class_names_with(0, names, sizeof names);
  return names;
}

dc_status *dc_build_input_shape(const dc_build_options *opt, const char *name, int rank,
                                const int64_t *def, int64_t *out) {
  for (int i = 0; opt && i < opt->nshapes; i++) {
    const dc_input_shape *s = &opt->shapes[i];
    if (strcmp(s->name, name) != 0) continue;
    if (s->rank != rank) {
      char b1[160], b2[160];
      return dc_error(DC_ERR_ARGUMENT, "--input %s=%s: \"%s\" has rank %d (default shape %s), got %d dims",
                      name, dc_dims_str(s->dims, s->rank, b1, sizeof b1), name, rank,
                      dc_dims_str(def, rank, b2, sizeof b2), s->rank);
    }
    for (int d = 0; d < rank; d++)
      if (s->dims[d] < 1) return dc_error(DC_ERR_ARGUMENT, "--input %s: dimensions must be positive", name);
    memcpy(out, s->dims, sizeof(int64_t) * (size_t)rank);
    return NULL;
  }
  memcpy(out, def, sizeof(int64_t) * (size_t)rank);
  return NULL;
}

dc_status *dc_build_check_shapes(const dc_build_options *opt, const dc_module *m) {
  for (int i = 0; opt && i < opt->nshapes; i++) {
    int found = 0;
    for (int k = 0; k < m->ninputs; k++) found |= strcmp(m->inputs[k].name, opt->shapes[i].name) == 0;
    if (found) continue;
    char names[512] = "";
    for (int k = 0; k < m->ninputs; k++) {
      size_t len = strlen(names);
      snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "", m->inputs[k].name);
    }
    return dc_error(DC_ERR_ARGUMENT, "--input %s: the model has no input \"%s\" (inputs: %s)",
                    opt->shapes[i].name, opt->shapes[i].name, names);
  }
  return NULL;
}

/* "forward" when the class has one entry; "encode and decode" otherwise. */
static dc_status *entry_error(const dc_class_desc *c, const char *entry) {
  int n = 0;
  while (c->entries[n].name) n++;
  if (n == 1)
    return dc_error(DC_ERR_ARGUMENT, "%s has one entry point, \"%s\"; got \"%s\"", c->name, c->entries[0].name,
                    entry);
  char names[256] = "";
  for (int i = 0; i < n; i++) {
    size_t len = strlen(names);
    snprintf(names + len, sizeof names - len, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ", c->entries[i].name);
  }
  return dc_error(DC_ERR_ARGUMENT, "%s has entries %s, got \"%s\"", c->name, names, entry);
}

static dc_status *build_class(const dc_folder *f, const dc_class_desc *c, const dc_build_options *opt,
                              dc_module *m) {
  char *model = dc_path_absolute(f->dir); /* provenance that means the same from any folder */
  dc_status *st = model ? dc_module_set_meta(m, "class", f->class_name) : dc_nomem("creating the IR module");
  if (!st) st = dc_module_set_meta(m, "model", model);
  dc_free(model);
  m->facts = &c->facts;
  if (!st) st = c->build(f, opt, m);
  /* A shape the graph cannot have comes from a config value no earlier
   * check caught: name the config as the culprit, with what failed. */
  if (st && dc_status_code_of(st) == DC_ERR_MISMATCH && !strstr(dc_status_message(st), f->dir))
    st = dc_status_annotate(st, "%s: this config, with these input shapes, gives a graph that cannot be built "
                                "(check the keys that set this layer's channels, groups or heads)",
                            f->config.path);
  if (!st) st = dc_build_check_shapes(opt, m);
  if (!st) st = dc_verify(m, "frontend");
  return st;
}

dc_status *dc_frontend_build(const dc_folder *f, const dc_build_options *opt, dc_module **out) {
  *out = NULL;
  const dc_class_desc *c = f->desc;
  if (!c) /* dc_class_of_config named it by "_class_name", else by "architectures" */
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: \"%s\" is \"%s\", which diffc does not support "
                    "(supported: %s)",
                    f->config.path,
                    cJSON_GetObjectItemCaseSensitive(f->config.root, "_class_name") ? "_class_name" : "architectures",
                    f->class_name, dc_frontend_supported_classes());
  dc_build_options o = {.clip_hidden_index = -1};
  if (opt) o = *opt;
  if (!o.entry) o.entry = c->default_entry;
  if (!dc_entry_find(c, o.entry)) return entry_error(c, o.entry);
  DC_TRY(dc_config_check(c, &f->config));
  dc_module *m = dc_module_create();
  if (!m) return dc_nomem("creating the IR module");
  dc_status *st = build_class(f, c, &o, m);
  if (st) {
    dc_module_destroy(m);
    return st;
  }
  *out = m;
  return NULL;
}
