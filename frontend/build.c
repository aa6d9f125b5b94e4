/* build.c — chooses the graph builder by config.json's _class_name, records
 * what the model is in the module's metadata, and checks the user's input
 * shape overrides name inputs the model really has. */
#include <string.h>

#include "frontend.h"

typedef dc_status *(*builder_fn)(const dc_folder *, const dc_build_options *, dc_module *);

static const struct {
  const char *class_name;
  builder_fn build;
} builders[] = {
    {"UNet2DConditionModel", dc_build_unet},
    {"AutoencoderKL", dc_build_vae},
};

int dc_frontend_supports_class(const char *class_name) {
  for (size_t i = 0; i < sizeof builders / sizeof builders[0]; i++)
    if (!strcmp(class_name, builders[i].class_name)) return 1;
  return 0;
}

const char *dc_frontend_supported_classes(void) {
  static char names[256]; /* built from the table, so it cannot go stale */
  if (!names[0])
    for (size_t i = 0; i < sizeof builders / sizeof builders[0]; i++) {
      size_t n = strlen(names);
      snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", builders[i].class_name);
    }
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

dc_status *dc_frontend_build(const dc_folder *f, const dc_build_options *opt, dc_module **out) {
  *out = NULL;
  for (size_t i = 0; i < sizeof builders / sizeof builders[0]; i++) {
    if (strcmp(f->class_name, builders[i].class_name) != 0) continue;
    dc_module *m = dc_module_create();
    if (!m) return dc_nomem("creating the IR module");
    char *model = dc_path_absolute(f->dir); /* provenance that means the same from any folder */
    dc_status *st = model ? dc_module_set_meta(m, "class", f->class_name) : dc_nomem("creating the IR module");
    if (!st) st = dc_module_set_meta(m, "model", model);
    dc_free(model);
    if (!st) st = builders[i].build(f, opt, m);
    /* A shape the graph cannot have comes from a config value no earlier
     * check caught: name the config as the culprit, with what failed. */
    if (st && dc_status_code_of(st) == DC_ERR_MISMATCH && !strstr(dc_status_message(st), f->dir))
      st = dc_status_annotate(st, "%s: this config, with these input shapes, gives a graph that cannot be built "
                                  "(check the keys that set this layer's channels, groups or heads)",
                              f->config.path);
    if (!st) st = dc_build_check_shapes(opt, m);
    if (!st) st = dc_verify(m, "frontend");
    if (st) {
      dc_module_destroy(m);
      return st;
    }
    *out = m;
    return NULL;
  }
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: \"_class_name\" is \"%s\", which diffc does not support "
                  "(supported: %s)",
                  f->config.path, f->class_name, dc_frontend_supported_classes());
}
