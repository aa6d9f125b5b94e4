/* registry.h — the model classes diffc compiles, one descriptor each.
 *
 * A descriptor says everything the rest of diffc may know about a class:
 * how a config names it (diffusers' "_class_name", or for transformers
 * models, which carry none, "architectures" and "model_type"), its config
 * schema (every key with its type, default and supported values), its
 * builder, its entries with their inputs and outputs, and the facts the
 * passes and the driver need (ir/model_facts.h: block lists for group
 * offload, skip patterns for layerwise casting, which options apply).
 *
 * Each class defines its descriptor in its own file (unet.c, vae.c) and the
 * table in registry.c lists them: adding a class is its files under
 * frontend/ plus one line there (docs/ARCHITECTURE.md, "Adding a model
 * class").  Nothing outside frontend/ names a class; tests/class_names_test.sh
 * checks it. */
#ifndef DC_REGISTRY_H
#define DC_REGISTRY_H

#include "frontend.h"

/* Where a class comes from, which decides how its config names it and
 * which bookkeeping keys its config may carry besides its own. */
typedef enum {
  DC_LIB_DIFFUSERS,    /* "_class_name"; every key starting with "_" is bookkeeping */
  DC_LIB_TRANSFORMERS, /* "architectures" (and "model_type"); PretrainedConfig's own keys are bookkeeping */
} dc_library;

/* The JSON a config key holds. */
typedef enum {
  DC_KEY_INT,      /* an integer */
  DC_KEY_NUM,      /* a number */
  DC_KEY_BOOL,     /* true or false */
  DC_KEY_STR,      /* a string */
  DC_KEY_INTS,     /* an integer, or a list (of integers, or of lists: the builder says which) */
  DC_KEY_STRS,     /* a list of strings */
  DC_KEY_BOOLS,    /* a bool, or a list of bools */
  DC_KEY_ANY,      /* anything (read by pipelines, not by the model: latents_mean) */
} dc_key_type;

/* One argument of the class's __init__, as its config.json holds it. */
typedef struct {
  const char *key;
  dc_key_type type;
  const char *def;       /* the class's default, as JSON text ("null" for None) */
  int nullable;          /* an explicit null is taken (diffusers' default is None, or null means something) */
  const char *supported; /* what diffc builds, for messages and docs ("silu, swish"); NULL: any valid value */
} dc_config_key;

/* A forward argument or an output. */
typedef struct {
  const char *name;
  const char *when; /* NULL: always; else the config that adds it ("addition_embed_type \"text_time\"") */
} dc_entry_io;

/* An entry point: what diffc --entry NAME compiles. */
typedef struct {
  const char *name;             /* "forward", "encode", "decode" */
  const dc_entry_io *inputs;    /* terminated by a NULL name */
  const dc_entry_io *outputs;   /* terminated by a NULL name */
} dc_entry_desc;

typedef dc_status *(*dc_build_fn)(const dc_folder *f, const dc_build_options *opt, dc_module *m);

typedef struct dc_class_desc {
  const char *name;         /* diffusers "_class_name", or transformers "architectures" entry */
  dc_library library;
  const char *model_type;   /* transformers: the config's "model_type"; NULL for diffusers */
  const dc_config_key *keys; /* the config schema, terminated by a NULL key */
  const dc_entry_desc *entries; /* terminated by a NULL name */
  const char *default_entry;    /* the entry compiled without --entry */
  /* Builds entry opt->entry (already checked against entries; never NULL)
   * into m, whose metadata "class" and "model" and facts are set. */
  dc_build_fn build;
  dc_model_facts facts;
} dc_class_desc;

/* The descriptors, in the order messages list them; *n receives the count. */
const dc_class_desc *const *dc_classes(int *n);
/* The class a library names so, or NULL. */
const dc_class_desc *dc_class_find(dc_library lib, const char *name);
/* The class of a model config: "_class_name" (diffusers), else the first
 * "architectures" entry (transformers).  *name receives the config's name
 * for it (for messages: it may be a class diffc does not support, and then
 * *out is NULL).  A config naming no class is an error. */
dc_status *dc_class_of_config(const dc_json_doc *config, const char **name, const dc_class_desc **out);
/* The names of the classes whose facts have all of the DC_FACT_* bits in
 * `options` (every class for 0), ", "-separated, into buf; returns buf. */
const char *dc_class_names_with(unsigned options, char *buf, size_t cap);

/* One policy for every config: each key is the class's, or bookkeeping its
 * library ignores ("_diffusers_version", "_name_or_path", ...); an unknown
 * key is refused with the file, the key and the nearest known key; an
 * explicit null is refused where the class does not take one.  The class's
 * own reading of each key then checks its value. */
dc_status *dc_config_check(const dc_class_desc *c, const dc_json_doc *config);
/* The schema entry for key, or NULL. */
const dc_config_key *dc_config_key_find(const dc_class_desc *c, const char *key);

/* An entry's input or output by name, or NULL. */
const dc_entry_io *dc_entry_io_find(const dc_entry_io *list, const char *name);
const dc_entry_desc *dc_entry_find(const dc_class_desc *c, const char *name);

/* For diffc --help: each class, its entries, inputs -> outputs, and the
 * options that apply to it only. */
void dc_classes_describe(dc_buf *b);

/* The descriptors, defined beside their builders. */
extern const dc_class_desc dc_class_unet_2d_condition; /* unet.c */
extern const dc_class_desc dc_class_autoencoder_kl;    /* vae.c */
extern const dc_class_desc dc_class_autoencoder_kl_cogvideox; /* cogvideox_vae.c */
extern const dc_class_desc dc_class_clip_text_model;   /* clip_text.c */
extern const dc_class_desc dc_class_clip_text_model_with_projection; /* clip_text.c */
extern const dc_class_desc dc_class_t5_encoder_model;  /* t5_encoder.c */
extern const dc_class_desc dc_class_flux_transformer_2d; /* flux_transformer.c */
extern const dc_class_desc dc_class_sd3_transformer_2d;  /* sd3_transformer.c */
extern const dc_class_desc dc_class_cogvideox_transformer_3d; /* cogvideox_transformer.c */

#endif
