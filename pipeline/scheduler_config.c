/* scheduler_config.c — scheduler_config.json: the classes diffc implements,
 * each with its config schema (every argument of its __init__ in diffusers
 * 0.42, with diffusers' default), and the reading of a config into
 * sched_cfg.
 *
 * The policy is the model configs' (frontend/config_check.c): a key is an
 * argument of the class, or bookkeeping ("_class_name", "_diffusers_version",
 * any "_" key), or — as diffusers' from_config drops them — an argument of
 * another scheduler of the same family (KarrasDiffusionSchedulers), which is
 * how one config serves several classes (SDXL's EulerDiscreteScheduler
 * config carries PNDM's "skip_prk_steps").  Anything else is refused naming
 * the nearest key.  A value diffc does not implement is refused naming the
 * file, the key, the value and what is supported.
 *
 * FlowMatchEulerDiscreteScheduler is outside that family (diffusers lists
 * no compatible classes for it); the family's keys in its config are
 * dropped all the same, as from_config ignores them.  A class override
 * never crosses between flow-matching and noise-prediction classes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/registry.h"
#include "scheduler_internal.h"

/* ---- the schemas ---------------------------------------------------------- */

#define COMMON_KEYS                                                                                  \
  {"num_train_timesteps", DC_KEY_INT, "1000", 0, "an integer from 2 to 1000000"},                  \
      {"beta_start", DC_KEY_NUM, "0.0001", 0, NULL}, {"beta_end", DC_KEY_NUM, "0.02", 0, NULL},    \
      {"beta_schedule", DC_KEY_STR, "\"linear\"", 0, "linear, scaled_linear, squaredcos_cap_v2"},  \
      {"trained_betas", DC_KEY_ANY, "null", 1, "null, or a list of num_train_timesteps numbers"}

#define SPACING_KEY(def) {"timestep_spacing", DC_KEY_STR, def, 0, "linspace, leading, trailing"}
#define OFFSET_KEY {"steps_offset", DC_KEY_INT, "0", 0, "an integer from 0 to 1000000"}
#define RESCALE_KEY {"rescale_betas_zero_snr", DC_KEY_BOOL, "false", 0, NULL}
#define SIGMA_KEYS                                                                                    \
  {"use_karras_sigmas", DC_KEY_BOOL, "false", 0, NULL},                                              \
      {"use_exponential_sigmas", DC_KEY_BOOL, "false", 0, NULL},                                     \
      {"use_beta_sigmas", DC_KEY_BOOL, "false", 0, "false (beta sigmas need scipy's beta distribution)"}
#define THRESHOLD_KEYS                                                                              \
  {"thresholding", DC_KEY_BOOL, "false", 0, "false"},                                              \
      {"dynamic_thresholding_ratio", DC_KEY_NUM, "0.995", 0, NULL},                                 \
      {"sample_max_value", DC_KEY_NUM, "1.0", 0, NULL}

static const dc_config_key pndm_keys[] = {
    COMMON_KEYS,
    {"skip_prk_steps", DC_KEY_BOOL, "false", 0, NULL},
    {"set_alpha_to_one", DC_KEY_BOOL, "false", 0, NULL},
    {"prediction_type", DC_KEY_STR, "\"epsilon\"", 0, "epsilon, v_prediction"},
    SPACING_KEY("\"leading\""),
    OFFSET_KEY,
    {NULL, 0, NULL, 0, NULL},
};

static const dc_config_key euler_keys[] = {
    COMMON_KEYS,
    {"prediction_type", DC_KEY_STR, "\"epsilon\"", 0, "epsilon, v_prediction, sample, original_sample"},
    {"interpolation_type", DC_KEY_STR, "\"linear\"", 0, "linear, log_linear"},
    SIGMA_KEYS,
    {"sigma_min", DC_KEY_NUM, "null", 1, NULL},
    {"sigma_max", DC_KEY_NUM, "null", 1, NULL},
    SPACING_KEY("\"linspace\""),
    {"timestep_type", DC_KEY_STR, "\"discrete\"", 0, "discrete, continuous"},
    OFFSET_KEY,
    RESCALE_KEY,
    {"final_sigmas_type", DC_KEY_STR, "\"zero\"", 0, "zero, sigma_min"},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_config_key euler_a_keys[] = {
    COMMON_KEYS,
    {"prediction_type", DC_KEY_STR, "\"epsilon\"", 0, "epsilon, v_prediction"},
    SPACING_KEY("\"linspace\""),
    OFFSET_KEY,
    RESCALE_KEY,
    {NULL, 0, NULL, 0, NULL},
};

static const dc_config_key ddim_keys[] = {
    COMMON_KEYS,
    {"clip_sample", DC_KEY_BOOL, "true", 0, NULL},
    {"set_alpha_to_one", DC_KEY_BOOL, "true", 0, NULL},
    OFFSET_KEY,
    {"prediction_type", DC_KEY_STR, "\"epsilon\"", 0, "epsilon, sample, v_prediction"},
    THRESHOLD_KEYS,
    {"clip_sample_range", DC_KEY_NUM, "1.0", 0, NULL},
    SPACING_KEY("\"leading\""),
    RESCALE_KEY,
    {NULL, 0, NULL, 0, NULL},
};

static const dc_config_key dpm_keys[] = {
    COMMON_KEYS,
    {"solver_order", DC_KEY_INT, "2", 0, "1, 2, 3"},
    {"prediction_type", DC_KEY_STR, "\"epsilon\"", 0, "epsilon, sample, v_prediction"},
    THRESHOLD_KEYS,
    {"algorithm_type", DC_KEY_STR, "\"dpmsolver++\"", 0, "dpmsolver++, deis (diffusers' alias of dpmsolver++)"},
    {"solver_type", DC_KEY_STR, "\"midpoint\"", 0, "midpoint, heun, logrho, bh1, bh2 (the last three as midpoint)"},
    {"lower_order_final", DC_KEY_BOOL, "true", 0, NULL},
    {"euler_at_final", DC_KEY_BOOL, "false", 0, NULL},
    SIGMA_KEYS,
    {"use_lu_lambdas", DC_KEY_BOOL, "false", 0, NULL},
    {"use_flow_sigmas", DC_KEY_BOOL, "false", 0, "false"},
    {"flow_shift", DC_KEY_NUM, "1.0", 0, NULL},
    {"final_sigmas_type", DC_KEY_STR, "\"zero\"", 0, "zero, sigma_min"},
    {"lambda_min_clipped", DC_KEY_NUM, "-Infinity", 0, NULL},
    {"variance_type", DC_KEY_STR, "null", 1, "null"},
    SPACING_KEY("\"linspace\""),
    OFFSET_KEY,
    RESCALE_KEY,
    {"use_dynamic_shifting", DC_KEY_BOOL, "false", 0, "false"},
    {"time_shift_type", DC_KEY_STR, "\"exponential\"", 0, "exponential"},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_config_key lms_keys[] = {
    COMMON_KEYS,
    SIGMA_KEYS,
    {"prediction_type", DC_KEY_STR, "\"epsilon\"", 0, "epsilon, sample, v_prediction"},
    SPACING_KEY("\"linspace\""),
    OFFSET_KEY,
    {NULL, 0, NULL, 0, NULL},
};

/* FlowMatchEulerDiscreteScheduler: no betas; its sigmas are the flow's
 * time, shifted (shift, or mu when use_dynamic_shifting). */
static const dc_config_key flow_keys[] = {
    {"num_train_timesteps", DC_KEY_INT, "1000", 0, "an integer from 1 to 1000000"},
    {"shift", DC_KEY_NUM, "1.0", 0, NULL},
    {"use_dynamic_shifting", DC_KEY_BOOL, "false", 0, NULL},
    {"base_shift", DC_KEY_NUM, "0.5", 0, NULL},
    {"max_shift", DC_KEY_NUM, "1.15", 0, NULL},
    {"base_image_seq_len", DC_KEY_INT, "256", 0, "an integer from 0 to 1000000000"},
    {"max_image_seq_len", DC_KEY_INT, "4096", 0, "an integer from 0 to 1000000000"},
    {"invert_sigmas", DC_KEY_BOOL, "false", 0, NULL},
    {"shift_terminal", DC_KEY_NUM, "null", 1, NULL},
    SIGMA_KEYS,
    {"time_shift_type", DC_KEY_STR, "\"exponential\"", 0, "exponential, linear"},
    {"stochastic_sampling", DC_KEY_BOOL, "false", 0, NULL},
    {NULL, 0, NULL, 0, NULL},
};

/* CogVideoXDDIMScheduler and CogVideoXDPMScheduler take the same
 * arguments, with the latent-diffusion betas as defaults; clip_sample,
 * clip_sample_range and sample_max_value are arguments their steps never
 * read. */
static const dc_config_key cogvideox_keys[] = {
    {"num_train_timesteps", DC_KEY_INT, "1000", 0, "an integer from 2 to 1000000"},
    {"beta_start", DC_KEY_NUM, "0.00085", 0, NULL},
    {"beta_end", DC_KEY_NUM, "0.012", 0, NULL},
    {"beta_schedule", DC_KEY_STR, "\"scaled_linear\"", 0, "linear, scaled_linear, squaredcos_cap_v2"},
    {"trained_betas", DC_KEY_ANY, "null", 1, "null, or a list of num_train_timesteps numbers"},
    {"clip_sample", DC_KEY_BOOL, "true", 0, NULL},
    {"set_alpha_to_one", DC_KEY_BOOL, "true", 0, NULL},
    OFFSET_KEY,
    {"prediction_type", DC_KEY_STR, "\"epsilon\"", 0, "epsilon, sample, v_prediction"},
    {"clip_sample_range", DC_KEY_NUM, "1.0", 0, NULL},
    {"sample_max_value", DC_KEY_NUM, "1.0", 0, NULL},
    SPACING_KEY("\"leading\""),
    RESCALE_KEY,
    {"snr_shift_scale", DC_KEY_NUM, "3.0", 0, NULL},
    {NULL, 0, NULL, 0, NULL},
};

typedef struct {
  sched_kind kind;
  dc_class_desc desc; /* name, schema: what dc_config_check needs */
} sched_class;

#define DESC(nm, schema) {.name = nm, .library = DC_LIB_DIFFUSERS, .keys = schema}
static const sched_class classes[] = {
    {SK_PNDM, DESC("PNDMScheduler", pndm_keys)},
    {SK_EULER, DESC("EulerDiscreteScheduler", euler_keys)},
    {SK_EULER_A, DESC("EulerAncestralDiscreteScheduler", euler_a_keys)},
    {SK_DDIM, DESC("DDIMScheduler", ddim_keys)},
    {SK_DPM, DESC("DPMSolverMultistepScheduler", dpm_keys)},
    {SK_LMS, DESC("LMSDiscreteScheduler", lms_keys)},
    {SK_FLOW, DESC("FlowMatchEulerDiscreteScheduler", flow_keys)},
    {SK_COGX_DDIM, DESC("CogVideoXDDIMScheduler", cogvideox_keys)},
    {SK_COGX_DPM, DESC("CogVideoXDPMScheduler", cogvideox_keys)},
};
enum { NCLASSES = sizeof classes / sizeof classes[0] };

const char *dc_scheduler_class_names(void) {
  return "PNDMScheduler, EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DDIMScheduler, "
         "DPMSolverMultistepScheduler, LMSDiscreteScheduler, FlowMatchEulerDiscreteScheduler, "
         "CogVideoXDDIMScheduler, CogVideoXDPMScheduler";
}

/* The arguments of every scheduler in diffusers' KarrasDiffusionSchedulers
 * (0.42), which from_config drops from a config when the class it builds
 * does not take them. */
static const char *const family_keys[] = {
    "algorithm_type", "beta_end", "beta_schedule", "beta_start", "clip_sample", "clip_sample_range",
    "disable_corrector", "dynamic_thresholding_ratio", "euler_at_final", "final_sigmas_type", "flow_shift",
    "interpolation_type", "lambda_min_clipped", "lower_order_final", "noise_sampler_seed",
    "num_train_timesteps", "predict_x0", "prediction_type", "rescale_betas_zero_snr", "rho",
    "sample_max_value", "set_alpha_to_one", "shift_terminal", "sigma_data", "sigma_max", "sigma_min",
    "sigma_schedule", "skip_prk_steps", "solver_order", "solver_p", "solver_type", "steps_offset",
    "thresholding", "time_shift_type", "timestep_spacing", "timestep_type", "trained_betas",
    "use_beta_sigmas", "use_dynamic_shifting", "use_exponential_sigmas", "use_flow_sigmas",
    "use_karras_sigmas", "use_lu_lambdas", "variance_type", NULL,
};

/* ---- the JSON document ---------------------------------------------------- */

/* Python's json writes float('-inf') as -Infinity (DPMSolverMultistepScheduler's
 * lambda_min_clipped default), which JSON proper lacks: outside strings each
 * "Infinity" becomes "1e999999", a number of the same length that parses to
 * infinity, so positions in syntax errors stay true. */
static void replace_infinity(char *t, size_t n) {
  int in_str = 0;
  for (size_t i = 0; i < n; i++) {
    if (in_str) {
      if (t[i] == '\\') i++;
      else if (t[i] == '"') in_str = 0;
    } else if (t[i] == '"') {
      in_str = 1;
    } else if (n - i >= 8 && memcmp(t + i, "Infinity", 8) == 0) {
      memcpy(t + i, "1e999999", 8);
      i += 7;
    }
  }
}

static dc_status *syntax_error(const char *path, const char *text, size_t at, const char *why) {
  int line = 1, col = 1;
  for (size_t i = 0; i < at; i++) {
    if (text[i] == '\n') line++, col = 1;
    else col++;
  }
  return dc_error(DC_ERR_FORMAT, "%s:%d:%d: not valid JSON (%s)", path, line, col, why);
}

static int key_cmp(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Python's json keeps the last of a repeated key, cJSON the first: refuse. */
static dc_status *unique_keys(const char *path, const cJSON *obj) {
  int n = cJSON_GetArraySize(obj), i = 0;
  if (n < 2) return NULL;
  const cJSON **keys = dc_malloc(sizeof *keys * (size_t)n);
  if (!keys) return dc_nomem("checking scheduler_config.json");
  for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c;
  qsort(keys, (size_t)n, sizeof *keys, key_cmp);
  dc_status *st = NULL;
  for (i = 1; i < n && !st; i++)
    if (!strcmp(keys[i - 1]->string, keys[i]->string))
      st = dc_error(DC_ERR_FORMAT, "%s: key \"%s\" appears twice", path, keys[i]->string);
  dc_free(keys);
  return st;
}

/* d->path set by the caller; d->text and d->root filled from the bytes. */
static dc_status *doc_from_bytes(dc_json_doc *d, const uint8_t *data, size_t n) {
  d->text = dc_malloc(n + 1);
  if (!d->text) return dc_nomem("reading scheduler_config.json");
  if (n) memcpy(d->text, data, n);
  d->text[n] = 0;
  replace_infinity(d->text, n);
  size_t at;
  char why[64];
  d->root = dc_json_parse_bytes(d->text, n, &at, why);
  if (!d->root) return why[0] ? syntax_error(d->path, d->text, at, why) : dc_nomem("parsing scheduler_config.json");
  if (!cJSON_IsObject(d->root))
    return dc_error(DC_ERR_FORMAT, "%s: expected a JSON object at the top level, got %s", d->path,
                    dc_json_type_name(d->root));
  return unique_keys(d->path, d->root);
}

/* ---- which keys count ----------------------------------------------------- */

static int listed(const char *const *list, const char *key) {
  for (; *list; list++)
    if (!strcmp(*list, key)) return 1;
  return 0;
}

/* from_config: the keys listed in "_use_default_values" take the class's
 * defaults, as if absent. */
static dc_status *drop_used_defaults(dc_json_doc *d) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(d->root, "_use_default_values");
  if (!list || cJSON_IsNull(list)) return NULL;
  if (!cJSON_IsArray(list))
    return dc_error(DC_ERR_FORMAT, "%s: \"_use_default_values\" must be a list of strings, got %s", d->path,
                    dc_json_type_name(list));
  for (const cJSON *k = list->child; k; k = k->next) {
    if (!cJSON_IsString(k))
      return dc_error(DC_ERR_FORMAT, "%s: \"_use_default_values\" must be a list of strings, got a %s in it",
                      d->path, dc_json_type_name(k));
    if (strcmp(k->valuestring, "_use_default_values") != 0)
      cJSON_DeleteItemFromObjectCaseSensitive(d->root, k->valuestring);
  }
  return NULL;
}

/* from_config: the keys of the family the class does not take. */
static void drop_family_keys(dc_json_doc *d, const dc_class_desc *c) {
  cJSON *v = d->root->child;
  while (v) {
    cJSON *next = v->next;
    if (listed(family_keys, v->string) && !dc_config_key_find(c, v->string))
      cJSON_Delete(cJSON_DetachItemViaPointer(d->root, v));
    v = next;
  }
}

/* CogVideoX's snr_shift_scale with a class that does not take it:
 * from_config drops it (with a warning), which changes the training
 * schedule the model was trained on unless it is 1; so 1 is dropped and
 * any other value refused. */
static dc_status *drop_snr_shift(dc_json_doc *d, const dc_class_desc *c) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(d->root, "snr_shift_scale");
  if (!v || dc_config_key_find(c, "snr_shift_scale")) return NULL;
  if (cJSON_IsNumber(v) && v->valuedouble == 1.0) {
    cJSON_DeleteItemFromObjectCaseSensitive(d->root, "snr_shift_scale");
    return NULL;
  }
  char buf[96];
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: \"snr_shift_scale\" is %s, a shift of the training schedule that %s does not take (diffusers' "
                  "from_config drops it and samples another schedule than the model's); diffc refuses it (use "
                  "CogVideoXDDIMScheduler or CogVideoXDPMScheduler)",
                  d->path, dc_json_show(v, buf, sizeof buf), c->name);
}

static const sched_class *class_named(const char *name) {
  for (int i = 0; i < NCLASSES; i++)
    if (name && !strcmp(classes[i].desc.name, name)) return &classes[i];
  return NULL;
}

/* Whether the config is a flow-matching scheduler's: a FlowMatch class, or
 * a "flow_prediction" prediction_type (DPM-Solver as SANA configures it). */
static int config_is_flow(const dc_json_doc *d) {
  const cJSON *cn = cJSON_GetObjectItemCaseSensitive(d->root, "_class_name");
  const cJSON *pt = cJSON_GetObjectItemCaseSensitive(d->root, "prediction_type");
  return (cJSON_IsString(cn) && !strncmp(cn->valuestring, "FlowMatch", 9)) ||
         (cJSON_IsString(pt) && !strcmp(pt->valuestring, "flow_prediction"));
}

/* from_config across the two kinds of model: diffusers builds the other
 * class and samples garbage (a flow model's output is a velocity, a noise
 * model's a noise estimate); diffc refuses. */
static dc_status *same_kind_of_model(const dc_json_doc *d, const sched_class *cls) {
  int to_flow = cls->kind == SK_FLOW, from_flow = config_is_flow(d);
  if (to_flow == from_flow) return NULL;
  char buf[96];
  const cJSON *cn = cJSON_GetObjectItemCaseSensitive(d->root, "_class_name");
  const char *was = cn ? dc_json_show(cn, buf, sizeof buf) : "absent";
  return dc_error(DC_ERR_UNSUPPORTED,
                  "scheduler \"%s\" (for %s) samples %s models, but the config is a %s scheduler's (\"_class_name\" "
                  "%s): a model trained for one cannot be sampled by the other, so diffc refuses the switch (%s)",
                  cls->desc.name, d->path, to_flow ? "flow-matching" : "noise-prediction",
                  from_flow ? "flow-matching" : "noise-prediction", was,
                  from_flow ? "use FlowMatchEulerDiscreteScheduler" : "use a noise-prediction scheduler");
}

static dc_status *choose_class(const dc_json_doc *d, const char *override, const sched_class **out) {
  const cJSON *cn = cJSON_GetObjectItemCaseSensitive(d->root, "_class_name");
  if (override) {
    *out = class_named(override);
    if (!*out)
      return dc_error(DC_ERR_UNSUPPORTED, "scheduler \"%s\" (for %s) is not one diffc implements (supported: %s)",
                      override, d->path, dc_scheduler_class_names());
    return same_kind_of_model(d, *out);
  }
  if (!cJSON_IsString(cn))
    return dc_error(DC_ERR_FORMAT, "%s: \"_class_name\" must name the scheduler class, got %s", d->path,
                    cn ? dc_json_type_name(cn) : "nothing");
  *out = class_named(cn->valuestring);
  if (!*out)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: \"_class_name\" is \"%s\", a scheduler diffc does not implement (supported: %s)", d->path,
                    cn->valuestring, dc_scheduler_class_names());
  return NULL;
}

/* ---- reading values ------------------------------------------------------- */

typedef struct {
  const dc_json_doc *d;
  const dc_class_desc *c;
  sched_cfg *cfg;
} reader;

static const char *show(const cJSON *v, char *buf, size_t cap) { return dc_json_show(v, buf, cap); }

static dc_status *unsupported(const reader *r, const char *key) {
  const dc_config_key *k = dc_config_key_find(r->c, key);
  char buf[96];
  return dc_error(DC_ERR_UNSUPPORTED, "%s: \"%s\" is %s, which diffc does not support for %s (supported: %s)",
                  r->d->path, key, show(cJSON_GetObjectItemCaseSensitive(r->d->root, key), buf, sizeof buf),
                  r->c->name, k && k->supported ? k->supported : "other values");
}

/* The class's default for key as JSON text ("true", "\"leading\"", "2"). */
static const char *def_of(const reader *r, const char *key) { return dc_config_key_find(r->c, key)->def; }

/* Each get_* leaves *out alone when the class does not take the key. */
static dc_status *get_bool(const reader *r, const char *key, int *out) {
  if (!dc_config_key_find(r->c, key)) return NULL;
  return dc_json_bool(r->d, key, !strcmp(def_of(r, key), "true"), out);
}

/* A bool diffc implements only as false. */
static dc_status *get_false(const reader *r, const char *key) {
  int b = 0;
  DC_TRY(get_bool(r, key, &b));
  return b ? unsupported(r, key) : NULL;
}

static dc_status *get_num(const reader *r, const char *key, double *out) {
  if (!dc_config_key_find(r->c, key)) return NULL;
  return dc_json_num(r->d, key, strtod(def_of(r, key), NULL), out);
}

static dc_status *get_int(const reader *r, const char *key, int64_t min, int64_t max, int64_t *out) {
  if (!dc_config_key_find(r->c, key)) return NULL;
  DC_TRY(dc_json_int(r->d, key, strtoll(def_of(r, key), NULL, 10), out));
  if (*out < min || *out > max)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"%s\" is %lld, which diffc does not support for %s (supported: %s)",
                    r->d->path, key, (long long)*out, r->c->name, dc_config_key_find(r->c, key)->supported);
  return NULL;
}

/* A string that must be one of names[] (NULL-terminated); *out receives
 * its index.  The default comes from the schema. */
static dc_status *get_choice(const reader *r, const char *key, const char *const *names, int *out) {
  if (!dc_config_key_find(r->c, key)) return NULL;
  char def[64];
  snprintf(def, sizeof def, "%s", def_of(r, key) + 1);
  def[strcspn(def, "\"")] = 0;
  const char *s;
  DC_TRY(dc_json_str(r->d, key, def, &s));
  for (int i = 0; names[i]; i++)
    if (!strcmp(s, names[i])) return *out = i, NULL;
  return unsupported(r, key);
}

/* ---- the keys ------------------------------------------------------------- */

static dc_status *read_trained_betas(const reader *r) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->d->root, "trained_betas");
  if (!v || cJSON_IsNull(v)) return NULL;
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != r->cfg->num_train_timesteps)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: \"trained_betas\" must be null or a list of num_train_timesteps (%lld) numbers, got %s",
                    r->d->path, (long long)r->cfg->num_train_timesteps,
                    cJSON_IsArray(v) ? "a list of another length" : dc_json_type_name(v));
  float *b = dc_malloc(sizeof(float) * (size_t)r->cfg->num_train_timesteps);
  if (!b) return dc_nomem("reading trained_betas");
  int i = 0;
  for (const cJSON *e = v->child; e; e = e->next, i++) {
    if (!cJSON_IsNumber(e)) {
      dc_free(b);
      return dc_error(DC_ERR_FORMAT, "%s: \"trained_betas\"[%d] must be a number, got %s", r->d->path, i,
                      dc_json_type_name(e));
    }
    b[i] = (float)e->valuedouble; /* torch.tensor(trained_betas, dtype=float32) */
  }
  r->cfg->trained_betas = b;
  r->cfg->beta_schedule = BETAS_TRAINED;
  return NULL;
}

static dc_status *read_betas(const reader *r) {
  static const char *const schedules[] = {"linear", "scaled_linear", "squaredcos_cap_v2", NULL};
  static const sched_betas kinds[] = {BETAS_LINEAR, BETAS_SCALED_LINEAR, BETAS_COSINE};
  sched_cfg *c = r->cfg;
  int which = 0;
  DC_TRY(get_int(r, "num_train_timesteps", 2, 1000000, &c->num_train_timesteps));
  DC_TRY(get_num(r, "beta_start", &c->beta_start));
  DC_TRY(get_num(r, "beta_end", &c->beta_end));
  DC_TRY(get_choice(r, "beta_schedule", schedules, &which));
  c->beta_schedule = kinds[which];
  DC_TRY(read_trained_betas(r));
  return get_bool(r, "rescale_betas_zero_snr", &c->rescale_zero_snr);
}

/* Whether word is one of the ", "-separated list. */
static int in_list(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; p; p = strstr(p, ", "), p = p ? p + 2 : NULL)
    if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

/* prediction_type, which each class supports a part of; "original_sample"
 * is Euler's synonym of "sample". */
static dc_status *read_prediction(const reader *r) {
  static const char *const names[] = {"epsilon", "v_prediction", "sample", "original_sample", NULL};
  static const sched_pred preds[] = {PRED_EPSILON, PRED_V, PRED_SAMPLE, PRED_SAMPLE};
  int which = 0;
  DC_TRY(get_choice(r, "prediction_type", names, &which));
  if (!in_list(dc_config_key_find(r->c, "prediction_type")->supported, names[which]))
    return unsupported(r, "prediction_type");
  r->cfg->prediction = preds[which];
  return NULL;
}

static dc_status *read_spacing(const reader *r) {
  static const char *const names[] = {"leading", "trailing", "linspace", NULL};
  int which = 0;
  DC_TRY(get_choice(r, "timestep_spacing", names, &which));
  r->cfg->spacing = (sched_spacing)which;
  return get_int(r, "steps_offset", 0, 1000000, &r->cfg->steps_offset);
}

/* use_karras_sigmas / use_exponential_sigmas / use_beta_sigmas (and DPM's
 * use_lu_lambdas), in the order set_timesteps tests them. */
static dc_status *read_sigma_kind(const reader *r) {
  int karras = 0, expo = 0, beta = 0, lu = 0;
  DC_TRY(get_bool(r, "use_karras_sigmas", &karras));
  DC_TRY(get_bool(r, "use_exponential_sigmas", &expo));
  DC_TRY(get_bool(r, "use_beta_sigmas", &beta));
  DC_TRY(get_bool(r, "use_lu_lambdas", &lu));
  if (karras + expo + beta > 1)
    return dc_error(DC_ERR_FORMAT,
                    "%s: only one of \"use_karras_sigmas\", \"use_exponential_sigmas\" and \"use_beta_sigmas\" may "
                    "be true (diffusers refuses more)",
                    r->d->path);
  if (beta) return unsupported(r, "use_beta_sigmas");
  r->cfg->sigmas = karras ? SIGMAS_KARRAS : lu ? SIGMAS_LU : expo ? SIGMAS_EXPONENTIAL : SIGMAS_PLAIN;
  return NULL;
}

/* A number or null (absent: null). */
static dc_status *read_optional_num(const dc_json_doc *d, const char *key, int *has, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->root, key);
  if (!v || cJSON_IsNull(v)) return NULL;
  *has = 1;
  return dc_json_num(d, key, 0, out);
}

/* sigma_min and sigma_max are EulerDiscreteScheduler's arguments, but
 * from_config registers the keys a class does not take into its config
 * ("hidden" keys), and DPM-Solver's and LMS's sigma conversions read them
 * from there when present: so they count for every class that converts
 * sigmas.  Read before the family's other keys are dropped. */
static dc_status *read_sigma_bounds(const dc_json_doc *d, sched_cfg *c) {
  DC_TRY(read_optional_num(d, "sigma_min", &c->has_sigma_min, &c->sigma_min));
  return read_optional_num(d, "sigma_max", &c->has_sigma_max, &c->sigma_max);
}

/* A hidden flag (see read_sigma_bounds) the pipeline tests for truth:
 * true, false, or null or absent (false). */
static dc_status *read_hidden_flag(const dc_json_doc *d, const char *key, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->root, key);
  *out = 0;
  if (!v || cJSON_IsNull(v)) return NULL;
  return dc_json_bool(d, key, 0, out);
}

static dc_status *read_final_sigmas(const reader *r) {
  static const char *const names[] = {"zero", "sigma_min", NULL};
  int which = 0;
  DC_TRY(get_choice(r, "final_sigmas_type", names, &which));
  r->cfg->final_sigma_min = which == 1;
  return NULL;
}

static dc_status *read_euler(const reader *r) {
  static const char *const interp[] = {"linear", "log_linear", NULL};
  static const char *const types[] = {"discrete", "continuous", NULL};
  sched_cfg *c = r->cfg;
  int which = 0;
  DC_TRY(get_choice(r, "interpolation_type", interp, &c->log_linear));
  DC_TRY(get_choice(r, "timestep_type", types, &which));
  c->continuous_v = which == 1 && c->prediction == PRED_V;
  return NULL;
}

static dc_status *read_ddim(const reader *r) {
  sched_cfg *c = r->cfg;
  double range = 1.0;
  DC_TRY(get_bool(r, "clip_sample", &c->clip_sample));
  DC_TRY(get_num(r, "clip_sample_range", &range));
  c->clip_sample_range = (float)range;
  return NULL;
}

static dc_status *read_dpm(const reader *r) {
  static const char *const algorithms[] = {"dpmsolver++", "deis", NULL};
  static const char *const solvers[] = {"midpoint", "heun", "logrho", "bh1", "bh2", NULL};
  static const char *const shifts[] = {"exponential", NULL};
  sched_cfg *c = r->cfg;
  int64_t order = 2;
  int which = 0;
  double ignored;
  DC_TRY(get_int(r, "solver_order", 1, 3, &order));
  c->solver_order = (int)order;
  DC_TRY(get_choice(r, "algorithm_type", algorithms, &which));
  DC_TRY(get_choice(r, "solver_type", solvers, &which));
  c->heun = which == 1;
  DC_TRY(get_bool(r, "lower_order_final", &c->lower_order_final));
  DC_TRY(get_bool(r, "euler_at_final", &c->euler_at_final));
  DC_TRY(get_false(r, "use_flow_sigmas"));
  DC_TRY(get_num(r, "flow_shift", &ignored));
  DC_TRY(get_num(r, "lambda_min_clipped", &c->lambda_min_clipped));
  const cJSON *vt = cJSON_GetObjectItemCaseSensitive(r->d->root, "variance_type");
  if (vt && !cJSON_IsNull(vt)) return unsupported(r, "variance_type");
  DC_TRY(get_false(r, "use_dynamic_shifting"));
  return get_choice(r, "time_shift_type", shifts, &which);
}

/* Keys read for their type only: diffc implements them by what they
 * switch off (thresholding false). */
static dc_status *read_inert(const reader *r) {
  double ignored;
  DC_TRY(get_false(r, "thresholding"));
  DC_TRY(get_num(r, "dynamic_thresholding_ratio", &ignored));
  return get_num(r, "sample_max_value", &ignored);
}

/* FlowMatchEulerDiscreteScheduler's keys (no betas, no prediction type). */
static dc_status *read_flow(const reader *r) {
  static const char *const shifts[] = {"exponential", "linear", NULL};
  sched_cfg *c = r->cfg;
  int which = 0, has_terminal = 0;
  DC_TRY(get_int(r, "num_train_timesteps", 1, 1000000, &c->num_train_timesteps));
  DC_TRY(get_num(r, "shift", &c->shift));
  DC_TRY(get_bool(r, "use_dynamic_shifting", &c->dynamic_shifting));
  DC_TRY(get_num(r, "base_shift", &c->base_shift));
  DC_TRY(get_num(r, "max_shift", &c->max_shift));
  DC_TRY(get_int(r, "base_image_seq_len", 0, 1000000000, &c->base_seq_len));
  DC_TRY(get_int(r, "max_image_seq_len", 0, 1000000000, &c->max_seq_len));
  DC_TRY(get_bool(r, "invert_sigmas", &c->invert_sigmas));
  DC_TRY(read_optional_num(r->d, "shift_terminal", &has_terminal, &c->shift_terminal));
  c->has_shift_terminal = has_terminal && c->shift_terminal != 0; /* `if self.config.shift_terminal:` */
  DC_TRY(read_sigma_kind(r));
  DC_TRY(get_choice(r, "time_shift_type", shifts, &which));
  c->linear_time_shift = which == 1;
  return get_bool(r, "stochastic_sampling", &c->stochastic);
}

static dc_status *read_values(const reader *r) {
  if (r->c->keys == flow_keys) return read_flow(r);
  sched_cfg *c = r->cfg;
  c->lambda_min_clipped = -INFINITY;
  c->clip_sample_range = 1.0f;
  c->solver_order = 2;
  DC_TRY(read_betas(r));
  DC_TRY(read_prediction(r));
  DC_TRY(read_spacing(r));
  DC_TRY(read_sigma_kind(r));
  DC_TRY(read_final_sigmas(r));
  DC_TRY(get_bool(r, "set_alpha_to_one", &c->set_alpha_to_one));
  DC_TRY(get_bool(r, "skip_prk_steps", &c->skip_prk_steps));
  DC_TRY(read_inert(r));
  DC_TRY(read_euler(r));
  DC_TRY(read_ddim(r));
  DC_TRY(get_num(r, "snr_shift_scale", &c->snr_shift_scale));
  return read_dpm(r);
}

/* ---- parse ---------------------------------------------------------------- */

dc_status *sched_read_config(const dc_text_files *files, const char *override, dc_scheduler *s) {
  const char *origin = files->origin ? files->origin : "(scheduler)";
  const dc_text_file *f = dc_text_files_find(files, "scheduler_config.json");
  s->path = dc_asprintf("%s/scheduler_config.json", origin);
  if (!s->path) return dc_nomem("reading scheduler_config.json");
  if (!f) return dc_error(DC_ERR_IO, "%s: not found (a pipeline's scheduler folder holds it)", s->path);
  dc_json_doc d = {.path = s->path};
  const sched_class *cls = NULL;
  dc_status *st = doc_from_bytes(&d, f->data, f->size);
  if (!st) st = drop_used_defaults(&d);
  if (!st) st = choose_class(&d, override, &cls);
  if (!st) st = read_sigma_bounds(&d, &s->c);
  if (!st && cls->kind == SK_FLOW) st = read_hidden_flag(&d, "use_flow_sigmas", &s->c.use_flow_sigmas);
  if (!st) st = drop_snr_shift(&d, &cls->desc);
  if (!st) {
    drop_family_keys(&d, &cls->desc);
    st = dc_config_check(&cls->desc, &d);
  }
  if (!st) {
    s->kind = cls->kind;
    s->class_name = cls->desc.name;
    reader r = {&d, &cls->desc, &s->c};
    st = read_values(&r);
  }
  cJSON_Delete(d.root);
  dc_free(d.text);
  return st;
}
