/* frontend.h — from a diffusers folder on disk to an IR module.
 *
 * Sections (file: exports)
 *   frontend/safetensors.c: dc_st_open/close/find — the format's rules, checked
 *                           dc_st_write — write tensors (diffrun outputs, tests)
 *   frontend/json.c:        dc_json_* — parse with line:column errors; typed getters
 *                           whose messages name the file and the key
 *   frontend/folder.c:      dc_folder_open — config.json + weights (single file,
 *                           sharded index, variant) or a pipeline's component
 *   frontend/weights.c:     dc_weights_init/get/check_all_used — check a weight's
 *                           presence and shape against what the config implies and
 *                           add it to the IR; dc_frontend_weight_list — the weights
 *                           a config implies, with no checkpoint (record mode)
 *   frontend/registry.c:    the supported classes, one descriptor each (registry.h)
 *   frontend/config_check.c: the one config policy (known keys, bookkeeping, nulls)
 *   frontend/unet.c:        the UNet2DConditionModel class: config, forward, descriptor
 *   frontend/vae.c:         the AutoencoderKL class (encode, decode; slicing, tiling)
 *   frontend/clip_text.c:   transformers' CLIPTextModel and CLIPTextModelWithProjection
 *   frontend/blocks/:       diffusers' building blocks the classes compose (blocks.h)
 *   frontend/build.c:       dc_frontend_build — build through the folder's class descriptor
 */
#ifndef DC_FRONTEND_H
#define DC_FRONTEND_H

#include <cjson/cJSON.h>

#include "../ir/ir.h"

/* ---- safetensors ------------------------------------------------------ */
typedef struct {
  char *name;
  dc_dtype dtype;
  int rank;
  int64_t dims[DC_MAX_DIMS];
  uint64_t offset; /* absolute offset in the file (8 + header_len + begin) */
  uint64_t bytes;
} dc_st_tensor;

typedef struct {
  dc_mapped_file file;
  uint64_t header_len;   /* N, the JSON header's length */
  uint64_t header_hash;  /* xxHash64 of the first 8 + N bytes */
  dc_st_tensor *tensors; /* sorted by name */
  int ntensors;
} dc_st_file;

/* Maps the file and validates the header against the format's rules:
 * 8-byte LE length <= 100,000,000 and within the file, JSON object header,
 * known dtypes, rank <= DC_MAX_DIMS, non-negative dims, data_offsets that
 * tile the data buffer with no holes or overlaps, end - begin == numel *
 * dtype size, and 8 + N + buffer size == file size.  Every error names the
 * file, the tensor and the byte offsets. */
dc_status *dc_st_open(const char *path, dc_st_file *out);
void dc_st_close(dc_st_file *f);
const dc_st_tensor *dc_st_find(const dc_st_file *f, const char *name);

/* Writes float tensors (or any dtype) to a safetensors file atomically. */
typedef struct {
  const char *name;
  dc_type type;
  const void *data; /* type.dtype elements, C order */
} dc_st_out;
dc_status *dc_st_write(const char *path, const dc_st_out *tensors, int n);

/* ---- JSON with good messages ------------------------------------------ */
typedef struct {
  char *path;   /* shown in messages, e.g. "models/unet/config.json" */
  char *text;
  cJSON *root;
} dc_json_doc;

/* Errors: "<path>:<line>:<col>: not valid JSON (...)" */
dc_status *dc_json_load(const char *path, dc_json_doc *out);
void dc_json_free(dc_json_doc *d);
/* Parses text[0..n) (need not be NUL-terminated) as one JSON value.  A syntax
 * error returns NULL with *err_at the byte offset and why[] its description;
 * running out of memory returns NULL with why[0] == 0. */
cJSON *dc_json_parse_bytes(const char *text, size_t n, size_t *err_at, char why[64]);
/* The value as JSON text, shortened to fit cap ("\"gelu\"", "2.5",
 * "[[1,2],[3]]", "absent" for NULL), into buf; returns buf.  For messages. */
const char *dc_json_show(const cJSON *v, char *buf, size_t cap);
/* "string", "number", "bool", "list", "object", "null" — for messages. */
const char *dc_json_type_name(const cJSON *v);
/* Typed getters.  `def` is used when the key is absent or null; a present key
 * of the wrong type is an error: "<path>: \"key\" must be ..., got ...". */
dc_status *dc_json_int(const dc_json_doc *d, const char *key, int64_t def, int64_t *out);
/* dc_json_int, and a value below min is an error naming the file and key. */
dc_status *dc_json_int_min(const dc_json_doc *d, const char *key, int64_t def, int64_t min, int64_t *out);
dc_status *dc_json_num(const dc_json_doc *d, const char *key, double def, double *out);
dc_status *dc_json_bool(const dc_json_doc *d, const char *key, int def, int *out);
/* *out is NULL when absent/null and def is NULL; the string belongs to d. */
dc_status *dc_json_str(const dc_json_doc *d, const char *key, const char *def, const char **out);
/* A list of ints, or (when allow_scalar) one int broadcast to `want` entries
 * (want 0 means: take the list's length).  Checks the length against want
 * (when want > 0) and each entry >= min_value.  *out_n receives the count. */
dc_status *dc_json_int_list(const dc_json_doc *d, const char *key, int allow_scalar, int want,
                            int64_t min_value, int64_t *out, int max_n, int *out_n,
                            int *out_present);
/* A list of strings; the strings belong to d. */
dc_status *dc_json_str_list(const dc_json_doc *d, const char *key, const char **out, int max_n,
                            int *out_n);

/* ---- model folders ---------------------------------------------------- */
struct dc_weight_list;

typedef struct {
  char *dir;            /* the model folder (the component folder for pipelines) */
  dc_json_doc config;   /* config.json */
  const char *class_name; /* as the config names it (registry.h: dc_class_of_config) */
  const struct dc_class_desc *desc; /* its descriptor, NULL for a class diffc does not support */
  dc_st_file *shards;   /* one or more weight files */
  int nshards;
  /* name -> (shard, tensor) for every tensor of every shard, sorted by name */
  struct dc_folder_entry {
    const char *name;
    int shard;
    const dc_st_tensor *tensor;
    /* The bytes hold the 2-D transpose of the weight `name`: the tensor is
     * [dims[1], dims[0]] of diffusers' tensor (OpenCLIP's text_projection is
     * stored [D,P], transformers' is [P,D]).  dc_weights_get checks the
     * transposed shape and binds a permute after the weight: no copy. */
    int transposed;
    /* The bytes hold the weight's two halves along dim 0 in the other order:
     * the original Flux and SD3 checkpoints' final AdaLayerNormContinuous
     * linear makes (shift, scale) where diffusers' makes (scale, shift).  No
     * copy swaps them back: only a builder that reads the two chunks by
     * offset may bind such a weight, and it asks first
     * (dc_weights_halves_swapped); dc_weights_get refuses it otherwise. */
    int halves_swapped;
  } *entries;
  int nentries;
  /* The shards belong to another owner (dc_folder_from_views): close leaves
   * them mapped and the tensors the entries point at alone. */
  int borrowed;
  /* Record mode (dc_frontend_weight_list): no weight files; every weight a
   * builder asks for is appended here and bound to a placeholder.  NULL for
   * a folder opened from disk. */
  struct dc_weight_list *record;
  /* Storage the folder owns beside its fields (a single-file checkpoint
   * opened as one model: the mapped file and the renamed views the entries
   * point at): dc_folder_close calls close_owner(owner) last. */
  void *owner;
  void (*close_owner)(void *owner);
} dc_folder;

typedef struct {
  const char *component; /* for a pipeline folder: "unet", "vae"; NULL otherwise */
  const char *variant;   /* "fp16", "bf16"...: diffusion_pytorch_model.<variant>.safetensors */
} dc_folder_options;

/* Opens a model folder: config.json, then the weights:
 *   diffusion_pytorch_model[.<variant>].safetensors, or
 *   diffusion_pytorch_model.safetensors[.index.<variant>].json with weight_map
 * (every shard it names must exist and hold exactly the tensors mapped to it);
 * for a transformers model (a config with "architectures") the stem is
 * "model": model[.<variant>].safetensors, model.safetensors.index[.<variant>].json.
 * A folder with model_index.json is a pipeline: `component` selects a
 * subfolder (an error lists the components when it is missing). */
dc_status *dc_folder_open(const char *path, const dc_folder_options *opt, dc_folder *out);
/* The stem of the weight file names the config's library writes:
 * "diffusion_pytorch_model" (diffusers: the config has "_class_name") or
 * "model" (transformers). */
const char *dc_weights_stem(const dc_json_doc *config);
void dc_folder_close(dc_folder *f);
/* A folder over tensors another owner holds: a single-file checkpoint
 * (frontend/single_file.c) presents each component's tensors under diffusers'
 * names without copying them.  `dir` names the component in messages and as
 * the plan's provenance ("sd15.safetensors (unet)"); the config is read from
 * config_path.  The folder keeps a sorted copy of `entries` (names unique,
 * shard 0 = `file`); `file` and the tensors the entries point at must
 * outlive the folder. */
dc_status *dc_folder_from_views(const char *dir, const char *config_path, dc_st_file *file,
                                const struct dc_folder_entry *entries, int n, dc_folder *out);
const struct dc_folder_entry *dc_folder_find(const dc_folder *f, const char *name);

/* ---- binding weights into the IR -------------------------------------- */
/* Tracks which tensors of the folder the builder used (so unused ones can be
 * reported) and adds OP_WEIGHT nodes.  Non-f32 weights (and f32 weights whose
 * offset is not 4-byte aligned) get a following OP_CAST to f32. */
typedef struct {
  dc_module *m;
  const dc_folder *folder;
  int32_t *file_of_shard; /* module file index per shard, -1 until used */
  unsigned char *used;    /* per folder entry */
  unsigned char *halves_asked; /* per folder entry: dc_weights_halves_swapped was asked */
} dc_weights;

dc_status *dc_weights_init(dc_weights *w, dc_module *m, const dc_folder *folder);
void dc_weights_deinit(dc_weights *w);
/* Returns (in *out) the f32 value of tensor `name`, whose shape must equal
 * dims[0..rank).  Errors:
 *   "<dir>: weight \"conv_in.weight\" is missing (the config implies [16,4,3,3])"
 *   "<dir>: weight \"conv_in.weight\" has shape [32,4,3,3] but the config implies [16,4,3,3]" */
dc_status *dc_weights_get(dc_weights *w, const char *name, int rank, const int64_t *dims,
                          int32_t *out);
/* Whether weight `name` is stored with its two halves along dim 0 swapped
 * (dc_folder_entry.halves_swapped; 0 for a missing name and in record mode),
 * and the caller's promise that it reads the halves by offset accordingly:
 * dc_weights_get then binds it as stored. */
dc_status *dc_weights_halves_swapped(dc_weights *w, const char *name, int *swapped);
/* Lists unused tensors (an error naming the first few: a checkpoint with
 * weights the builder did not use means the graph is not the model). */
dc_status *dc_weights_check_all_used(const dc_weights *w);

/* ---- the weights a config implies (record mode) ------------------------ */
typedef struct {
  char *name; /* "down_blocks.0.resnets.0.conv1.weight" */
  int rank;
  int64_t dims[DC_MAX_DIMS];
} dc_weight_spec;

typedef struct dc_weight_list {
  dc_weight_spec *items; /* sorted by name once dc_frontend_weight_list returns */
  int n, cap;
} dc_weight_list;

/* Builds the model of config_path (a diffusers config.json) with no
 * checkpoint, at the config's default input shapes, and lists every weight
 * the builder asks for with the shape the config implies: exactly the
 * tensors a checkpoint must hold for every entry of the model to compile
 * (an AutoencoderKL lists its encoder and its decoder, whichever `entry` is;
 * NULL = the default entry).  A weight asked for twice with two shapes is an
 * internal error.  *out is empty on error. */
dc_status *dc_frontend_weight_list(const char *config_path, const char *entry,
                                   dc_weight_list *out);
void dc_weight_list_deinit(dc_weight_list *l);
/* The spec named `name`, or NULL (a sorted list: binary search). */
const dc_weight_spec *dc_weight_list_find(const dc_weight_list *l, const char *name);

/* ---- graph builders --------------------------------------------------- */
/* Input shapes requested by the user (--input NAME=DIMS). */
typedef struct {
  const char *name;
  int rank;
  int64_t dims[DC_MAX_DIMS];
} dc_input_shape;

typedef struct {
  const char *entry;               /* "forward" (UNet), "encode"/"decode" (VAE); NULL = default */
  const dc_input_shape *shapes;    /* overrides of the default input shapes */
  int nshapes;
  /* AutoencoderKL (diffusers enable_slicing / enable_tiling): */
  int vae_slicing;     /* encode/decode one sample of the batch at a time */
  int vae_tiling;      /* tiled encode/decode above the tile size */
  int64_t tile_size;   /* image pixels per tile; 0 = the config's sample_size */
  double tile_overlap; /* overlap factor; 0 = 0.25 (AutoencoderKLCogVideoX: 1/6 for rows, 1/5 for columns) */
  /* AutoencoderKLCogVideoX: the coder over all frames in one pass instead
   * of diffusers' frame batches (whose GroupNorms see one batch each). */
  int vae_no_frame_batching;
  /* CLIPTextModel(WithProjection): one more output, "hidden_state", for the
   * pipelines: transformers' hidden_states[clip_hidden_index] (0 = the
   * embeddings, k = after encoder layer k), through final_layer_norm when
   * clip_hidden_final_norm.  -1 = no such output.  NOTE: 0 is an index, so
   * options made with {0} must set -1 themselves (build.c, weights.c and the
   * driver do). */
  int clip_hidden_index;
  int clip_hidden_final_norm;
  /* CLIPTextModelWithProjection: text_embeds is the pooled output itself,
   * no text_projection bound (projection_dim must equal hidden_size): the
   * identity diffusers puts in SD3 single files' CLIP-L. */
  int clip_identity_projection;
} dc_build_options;

/* Builds the IR for the folder's model class.  Unknown classes, block
 * types, or config values are errors naming the file, key and value. */
dc_status *dc_frontend_build(const dc_folder *f, const dc_build_options *opt, dc_module **out);
/* Whether a config's _class_name has a graph builder; and their names,
 * ", "-separated, for messages. */
int dc_frontend_supports_class(const char *class_name);
const char *dc_frontend_supported_classes(void);

/* Helper shared by the builders: the shape for input `name`, from the
 * options if given (rank must match) else from `def`.  An override naming
 * an input the model does not have is reported by dc_build_check_shapes. */
dc_status *dc_build_input_shape(const dc_build_options *opt, const char *name, int rank,
                                const int64_t *def, int64_t *out);
dc_status *dc_build_check_shapes(const dc_build_options *opt, const dc_module *m);

#endif
