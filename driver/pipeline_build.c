/* pipeline_build.c — a whole text-to-image pipeline as one module with
 * phases (ir.h, "phases"; driver/pipeline_build.h).
 *
 * Each component is built by its class's builder into a module of its own
 * (the frontend knows nothing of pipelines), then merged into the pipeline's
 * module: node scopes and weight names gain the component's name
 * ("unet.down_blocks.0..."), a component's inputs become the values that
 * feed them, and the phases say what runs when:
 *
 *   text             the prompt's and the negative prompt's token ids through
 *                    the text encoder(s): the UNet's encoder_hidden_states
 *                    (and SDXL's pooled text_embeds) for both halves of
 *                    classifier-free guidance
 *   prologue         SDXL's add_time_ids (inputs); empty otherwise until the
 *                    hoist pass moves loop-invariant work here
 *   denoise.uncond*  the UNet on the unconditional half (a loop phase; the
 *                    host skips it when guidance <= 1)
 *   denoise.cond*    the UNet on the conditional half (a loop phase)
 *   decode           the VAE's decoder on the final latents
 *
 * The two halves are two copies of the UNet's graph over the same weights
 * (one weight node each), at the batch of one half: same kernels, half the
 * activations of diffusers' concatenated batch, and a guidance that changes
 * at run time without a recompile.  The host (pipeline/run.c) sets each
 * phase's inputs, runs it, and does the scheduler's arithmetic between
 * steps. */
#include "pipeline_build.h"
#include "pipeline_build_internal.h"

#include <stdio.h>
#include <string.h>

#include "frontend/registry.h"


/* ---- merging a component module into the pipeline's ---------------------- */

static dc_status *weight_node_slot(merger *g, int32_t w, int32_t **slot) {
  if (w >= g->cap_weight_node) {
    int32_t cap = w * 2 + 64;
    int32_t *grown = dc_realloc(g->weight_node, sizeof *grown * (size_t)cap);
    if (!grown) return dc_nomem("merging pipeline components");
    for (int32_t i = g->cap_weight_node; i < cap; i++) grown[i] = -1;
    g->weight_node = grown, g->cap_weight_node = cap;
  }
  *slot = &g->weight_node[w];
  return NULL;
}

static int32_t find_file(const dc_module *m, const char *path) {
  for (int32_t i = 0; i < m->nfiles; i++)
    if (!strcmp(m->files[i].path, path)) return i;
  return -1;
}

static int32_t find_weight(const dc_module *m, const char *name) {
  for (int32_t i = m->nweights - 1; i >= 0; i--)
    if (!strcmp(m->weights[i].name, name)) return i;
  return -1;
}

/* The pipeline's weight for component weight w (added the first time). */
static dc_status *merge_weight(merger *g, const dc_module *c, const char *prefix, int32_t w, int32_t *out) {
  char *name = dc_arena_printf(g->m->arena, "%s.%s", prefix, c->weights[w].name);
  if (!name) return dc_nomem("merging pipeline components");
  if ((*out = find_weight(g->m, name)) >= 0) return NULL;
  const dc_weight_file *f = &c->files[c->weights[w].file];
  int32_t file = find_file(g->m, f->path);
  if (file < 0 && (file = dc_module_add_file(g->m, f)) < 0) return dc_nomem("merging pipeline components");
  dc_weight copy = c->weights[w];
  copy.name = name;
  copy.file = file;
  if ((*out = dc_module_add_weight(g->m, &copy)) < 0) return dc_nomem("merging pipeline components");
  return NULL;
}

static const char *prefixed(dc_module *m, const char *prefix, const char *s) {
  if (!s) return dc_arena_strdup(m->arena, prefix);
  return dc_arena_printf(m->arena, "%s.%s", prefix, s);
}

/* A component's node as the pipeline's: inputs mapped, strings and
 * constant bytes copied into the pipeline's arena, weights shared. */
static dc_status *merge_node(merger *g, const dc_module *c, const char *prefix, int32_t phase, int32_t i,
                             const int32_t *map, int32_t *out) {
  dc_node n = c->nodes[i];
  for (int k = 0; k < n.ninputs; k++) n.inputs[k] = map[n.inputs[k]];
  n.phase = phase;
  n.scope = prefixed(g->m, prefix, n.scope);
  n.absorbed = n.absorbed ? dc_arena_strdup(g->m->arena, n.absorbed) : NULL;
  if (!n.scope || (c->nodes[i].absorbed && !n.absorbed)) return dc_nomem("merging pipeline components");
  if (n.op == OP_CONSTANT) {
    size_t bytes = (size_t)dc_type_bytes(&n.type);
    void *copy = dc_arena_alloc(g->m->arena, bytes + 1);
    if (!copy) return dc_nomem("merging pipeline components");
    memcpy(copy, n.data, bytes);
    n.data = copy;
  }
  if (n.op == OP_WEIGHT) {
    int32_t w = -1, *slot = NULL;
    DC_TRY(merge_weight(g, c, prefix, n.ref, &w));
    DC_TRY(weight_node_slot(g, w, &slot));
    if (*slot >= 0) return *out = *slot, NULL; /* the other CFG half's UNet: the same weight node */
    n.ref = w;
    if ((*slot = *out = dc_module_add_node(g->m, &n)) < 0) return dc_nomem("merging pipeline components");
    return NULL;
  }
  *out = dc_module_add_node(g->m, &n);
  return *out < 0 ? dc_nomem("merging pipeline components") : NULL;
}

static int32_t bound(const binding *b, int nb, const char *name) {
  for (int i = 0; i < nb; i++)
    if (!strcmp(b[i].name, name)) return b[i].node;
  return -1;
}

/* Merges component c into phase `phase`: every input of c must be bound
 * (types equal); out[i] receives the pipeline node of c's output
 * outputs[i]. */
dc_status *pb_merge(merger *g, const dc_module *c, const char *prefix, int32_t phase, const binding *b, int nb,
                        const char *const *outputs, int nout, int32_t *out) {
  int32_t *map = dc_malloc(sizeof *map * ((size_t)c->nnodes + 1));
  if (!map) return dc_nomem("merging pipeline components");
  dc_status *st = NULL;
  for (int32_t i = 0; i < c->nnodes && !st; i++) {
    if (c->nodes[i].op != OP_INPUT) {
      st = merge_node(g, c, prefix, phase, i, map, &map[i]);
      continue;
    }
    const char *name = c->inputs[c->nodes[i].ref].name;
    map[i] = bound(b, nb, name);
    char t1[160], t2[160];
    if (map[i] < 0)
      st = dc_error(DC_ERR_INTERNAL, "pipeline: %s input \"%s\" is not fed", prefix, name);
    else if (!dc_type_equal(&g->m->nodes[map[i]].type, &c->nodes[i].type))
      st = dc_error(DC_ERR_INTERNAL, "pipeline: %s input \"%s\" is %s, fed %s", prefix, name,
                    dc_type_str(&c->nodes[i].type, t1, sizeof t1), dc_type_str(&g->m->nodes[map[i]].type, t2, sizeof t2));
  }
  for (int k = 0; k < nout && !st; k++) {
    out[k] = -1;
    for (int i = 0; i < c->noutputs; i++)
      if (!strcmp(c->outputs[i].name, outputs[k])) out[k] = map[c->outputs[i].node];
    if (out[k] < 0) st = dc_error(DC_ERR_INTERNAL, "pipeline: %s has no output \"%s\"", prefix, outputs[k]);
  }
  dc_free(map);
  return st;
}

/* ---- small graph pieces ------------------------------------------------- */

dc_status *pb_add_input(dc_module *m, const char *name, dc_dtype dt, int rank, const int64_t *dims, int32_t phase,
                            int32_t *out) {
  dc_type t = {dt, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  *out = dc_module_add_input(m, name, &t, INIT_NORMAL);
  if (*out < 0) return dc_nomem("adding the pipeline's inputs");
  m->nodes[*out].phase = phase;
  return NULL;
}

dc_status *pb_add_op(dc_module *m, dc_node n, const char *scope, int32_t *out) {
  n.scope = scope;
  DC_TRY(dc_infer_type(m, &n, &n.type));
  *out = dc_module_add_node(m, &n);
  return *out < 0 ? dc_nomem("building the pipeline") : NULL;
}

/* x [1, ...] repeated to [n, ...] along axis 0 (diffusers repeats each
 * prompt's embeddings num_images_per_prompt times). */
dc_status *pb_repeat_batch(dc_module *m, int32_t x, int64_t n, int32_t *out) {
  int32_t acc = x;
  for (int64_t i = 1; i < n; i++) {
    dc_node c = dc_node_make(OP_CONCAT, 2, (int32_t[]){acc, x});
    dc_node_set_int(&c, "axis", 0);
    DC_TRY(pb_add_op(m, c, "pipeline.repeat", &acc));
  }
  *out = acc;
  return NULL;
}

/* ---- the components ------------------------------------------------------- */

dc_status *pb_build_component(const dc_folder *f, dc_build_options *bo, dc_module **out) {
  dc_status *st = dc_frontend_build(f, bo, out);
  return st ? dc_status_annotate(st, "%s", f->dir) : NULL;
}

int64_t pb_vae_scale(const dc_pipeline_source *src) {
  const cJSON *boc = cJSON_GetObjectItemCaseSensitive(src->vae.config.root, "block_out_channels");
  int n = cJSON_IsArray(boc) ? cJSON_GetArraySize(boc) : 1;
  return (int64_t)1 << (n > 0 ? n - 1 : 0);
}

dc_status *pb_read_int(const dc_folder *f, const char *key, int64_t def, int64_t *out) {
  return dc_json_int(&f->config, key, def, out);
}

/* The UNet halves the latents once per down block but the last; diffusers
 * resizes the upsampled maps when a size does not divide (its
 * forward_upsample_size), which the UNet builder does not do yet: such a
 * size is refused here, in the pipeline's terms. */
static dc_status *check_unet_multiple(const dc_pipeline_source *src, const dc_pipeline_info *info) {
  const cJSON *boc = cJSON_GetObjectItemCaseSensitive(src->unet.config.root, "block_out_channels");
  int n = cJSON_IsArray(boc) ? cJSON_GetArraySize(boc) : 4;
  int64_t mult = (int64_t)1 << (n > 0 ? n - 1 : 0), px = mult * info->vae_scale;
  if (info->latent_h % mult == 0 && info->latent_w % mult == 0) return NULL;
  return dc_error(DC_ERR_UNSUPPORTED, "--height %lld --width %lld: the UNet downsamples the %lldx%lld latents %d times, "
                  "so diffc needs height and width to be multiples of %lld px for this pipeline (diffusers resizes "
                  "the upsampled maps to fit other multiples of 8; diffc does not yet)",
                  (long long)info->height, (long long)info->width, (long long)info->latent_h,
                  (long long)info->latent_w, n - 1, (long long)px);
}

/* The size diffusers defaults to, and the checks it makes (check_inputs:
 * multiples of 8), with the latent size the VAE's downsampling gives. */
static dc_status *resolve_size(const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                               dc_pipeline_info *info) {
  int64_t sample = 0;
  DC_TRY(pb_read_int(&src->unet, "sample_size", 64, &sample));
  info->vae_scale = pb_vae_scale(src);
  info->height = o->height ? o->height : sample * info->vae_scale;
  info->width = o->width ? o->width : sample * info->vae_scale;
  for (int i = 0; i < 2; i++) {
    int64_t v = i ? info->width : info->height;
    if (v % 8 || v % info->vae_scale || v <= 0)
      return dc_error(DC_ERR_ARGUMENT, "--%s %lld: must be a positive multiple of 8%s (default %lld: the UNet's "
                      "sample_size %lld x the VAE's scale factor %lld)",
                      i ? "width" : "height", (long long)v,
                      info->vae_scale > 8 ? " and of the VAE's scale factor" : "", (long long)(sample * info->vae_scale),
                      (long long)sample, (long long)info->vae_scale);
  }
  info->latent_h = info->height / info->vae_scale;
  info->latent_w = info->width / info->vae_scale;
  DC_TRY(check_unet_multiple(src, info));
  info->has_uncond = 1, info->patch = 1;
  DC_TRY(pb_read_int(&src->unet, "in_channels", 4, &info->latent_channels));
  info->batch = o->batch ? o->batch : 1;
  if (info->batch < 1 || info->batch > 64)
    return dc_error(DC_ERR_ARGUMENT, "--batch %lld: images per prompt must be 1..64", (long long)o->batch);
  double sf = 0.18215, shift = 0;
  DC_TRY(dc_json_num(&src->vae.config, "scaling_factor", 0.18215, &sf));
  DC_TRY(dc_json_num(&src->vae.config, "shift_factor", 0, &shift));
  info->scaling_factor = sf, info->shift_factor = shift;
  return NULL;
}

/* Number of layers of a CLIP text encoder (its config). */
static dc_status *clip_layers(const dc_folder *f, int64_t *layers) {
  return pb_read_int(f, "num_hidden_layers", 12, layers);
}

/* Which hidden state a pipeline takes (notes: SD the last, through the
 * final norm, or hidden_states[-(clip_skip+1)] through it; SDXL
 * hidden_states[-(clip_skip+2)] without it). */
static dc_status *text_options(const dc_folder *f, int sdxl, int clip_skip, dc_build_options *bo) {
  int64_t layers;
  DC_TRY(clip_layers(f, &layers));
  int64_t index = sdxl ? layers - 1 - clip_skip : layers - clip_skip;
  if (index < 0)
    return dc_error(DC_ERR_ARGUMENT, "--clip-skip %d: %s has %lld layers", clip_skip, f->dir, (long long)layers);
  bo->clip_hidden_index = (int)index;
  bo->clip_hidden_final_norm = !sdxl;
  return NULL;
}

typedef struct {
  int32_t hidden[2];  /* per half (0 uncond, 1 cond): encoder_hidden_states [N,S,D] */
  int32_t pooled[2];  /* SDXL: text_embeds [N,P] */
} text_values;

/* One text encoder over the halves whose ids are given (see the header).
 * diffusers applies clip_skip to the prompt only (the negative prompt takes
 * the class's usual hidden state), so the halves may read different layers;
 * an equal pair is built once. */
dc_status *pb_encode_halves(merger *g, const dc_folder *f, dc_build_options bo[2], const char *prefix,
                           const int32_t ids[2], const char *const *outs, int nout, int64_t batch,
                           int32_t out[2][2]) {
  dc_module *c[2] = {NULL, NULL};
  int same = bo[0].clip_hidden_index == bo[1].clip_hidden_index &&
             bo[0].clip_hidden_final_norm == bo[1].clip_hidden_final_norm;
  dc_status *st = NULL;
  for (int h = 0; h < 2 && !st; h++) {
    if (ids[h] < 0 || (h == 1 && same && c[0])) continue;
    st = pb_build_component(f, &bo[h], &c[h]);
  }
  for (int h = 0; h < 2 && !st; h++) {
    if (ids[h] < 0) continue;
    int32_t got[2] = {-1, -1};
    binding b[] = {{"input_ids", ids[h]}};
    st = pb_merge(g, c[h] ? c[h] : c[0] ? c[0] : c[1], prefix, 0, b, 1, outs, nout, got);
    for (int k = 0; k < nout && !st; k++) st = pb_repeat_batch(g->m, got[k], batch, &out[h][k]);
  }
  dc_module_destroy(c[0]);
  dc_module_destroy(c[1]);
  return st;
}

/* The halves' options for one encoder: clip_skip for the prompt only. */
dc_status *pb_half_options(const dc_folder *f, int sdxl, int clip_skip, int64_t tokens, dc_input_shape *shape,
                               dc_build_options bo[2]) {
  *shape = (dc_input_shape){"input_ids", 2, {1, tokens}};
  for (int h = 0; h < 2; h++) {
    bo[h] = (dc_build_options){.shapes = shape, .nshapes = 1};
    DC_TRY(text_options(f, sdxl, h == 1 ? clip_skip : 0, &bo[h]));
  }
  return NULL;
}

/* SDXL's force_zeros_for_empty_prompt: the negative embeddings times the
 * input "negative_scale" (0 for an empty negative prompt, else 1). */
static dc_status *scale_negative(dc_module *m, int32_t scale, int32_t *v) {
  dc_node n = dc_node_make(OP_MUL, 2, (int32_t[]){*v, scale});
  return pb_add_op(m, n, "pipeline.force_zeros", v);
}

static dc_status *build_text(merger *g, const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                             const dc_pipeline_info *info, text_values *tv) {
  dc_module *m = g->m;
  int sdxl = info->sdxl;
  int32_t ids[2], ids2[2];
  int64_t dims[2] = {1, info->tokens};
  DC_TRY(pb_add_input(m, "negative_input_ids", DT_I64, 2, dims, 0, &ids[0]));
  DC_TRY(pb_add_input(m, "input_ids", DT_I64, 2, dims, 0, &ids[1]));
  if (sdxl) {
    DC_TRY(pb_add_input(m, "negative_input_ids_2", DT_I64, 2, dims, 0, &ids2[0]));
    DC_TRY(pb_add_input(m, "input_ids_2", DT_I64, 2, dims, 0, &ids2[1]));
  }
  dc_input_shape shape;
  dc_build_options bo[2];
  DC_TRY(pb_half_options(&src->text_encoder, sdxl, o->clip_skip, info->tokens, &shape, bo));
  int32_t out[2][2];
  DC_TRY(pb_encode_halves(g, &src->text_encoder, bo, "text_encoder", ids, (const char *const[]){"hidden_state"}, 1,
                          info->batch, out));
  tv->hidden[0] = out[0][0], tv->hidden[1] = out[1][0];
  if (!sdxl) return NULL;
  int32_t hidden2[2];
  DC_TRY(pb_half_options(&src->text_encoder_2, 1, o->clip_skip, info->tokens, &shape, bo));
  DC_TRY(pb_encode_halves(g, &src->text_encoder_2, bo, "text_encoder_2", ids2,
                          (const char *const[]){"hidden_state", "text_embeds"}, 2, info->batch, out));
  for (int h = 0; h < 2; h++) hidden2[h] = out[h][0], tv->pooled[h] = out[h][1];
  for (int h = 0; h < 2; h++) { /* the two encoders' states side by side (768 + 1280 = 2048 in SDXL) */
    dc_node c = dc_node_make(OP_CONCAT, 2, (int32_t[]){tv->hidden[h], hidden2[h]});
    dc_node_set_int(&c, "axis", 2);
    DC_TRY(pb_add_op(m, c, "pipeline.concat_text", &tv->hidden[h]));
  }
  if (!src->force_zeros_for_empty_prompt) return NULL;
  int32_t scale;
  DC_TRY(pb_add_input(m, "negative_scale", DT_F32, 1, (int64_t[]){1}, 0, &scale));
  DC_TRY(scale_negative(m, scale, &tv->hidden[0]));
  return scale_negative(m, scale, &tv->pooled[0]);
}

/* The UNet, once per CFG half, each in its loop phase. */
static dc_status *build_denoise(merger *g, const dc_pipeline_source *src, const dc_pipeline_info *info,
                                const text_values *tv, int32_t prologue, const int32_t phase[2]) {
  dc_module *m = g->m;
  int64_t n = info->batch, sample[4] = {n, info->latent_channels, info->latent_h, info->latent_w};
  const dc_type *hs = &m->nodes[tv->hidden[1]].type;
  int32_t time_ids[2] = {-1, -1};
  if (info->sdxl) {
    DC_TRY(pb_add_input(m, "negative_add_time_ids", DT_F32, 2, (int64_t[]){n, 6}, prologue, &time_ids[0]));
    DC_TRY(pb_add_input(m, "add_time_ids", DT_F32, 2, (int64_t[]){n, 6}, prologue, &time_ids[1]));
  }
  dc_input_shape shapes[5] = {{"sample", 4, {sample[0], sample[1], sample[2], sample[3]}},
                              {"timestep", 1, {n}},
                              {"encoder_hidden_states", 3, {hs->dims[0], hs->dims[1], hs->dims[2]}}};
  int nshapes = 3;
  if (info->sdxl) {
    const dc_type *pt = &m->nodes[tv->pooled[1]].type;
    shapes[nshapes++] = (dc_input_shape){"text_embeds", 2, {pt->dims[0], pt->dims[1]}};
    shapes[nshapes++] = (dc_input_shape){"time_ids", 2, {n, 6}};
  }
  dc_build_options bo = {.shapes = shapes, .nshapes = nshapes};
  dc_module *c = NULL;
  DC_TRY(pb_build_component(&src->unet, &bo, &c));
  static const char *const half_name[2] = {"uncond", "cond"};
  dc_status *st = NULL;
  for (int h = 0; h < 2 && !st; h++) {
    char name[64];
    int32_t x = -1, t = -1, out = -1;
    snprintf(name, sizeof name, "sample.%s", half_name[h]);
    st = pb_add_input(m, name, DT_F32, 4, sample, phase[h], &x);
    snprintf(name, sizeof name, "timestep.%s", half_name[h]);
    if (!st) st = pb_add_input(m, name, DT_F32, 1, (int64_t[]){n}, phase[h], &t);
    binding b[] = {{"sample", x}, {"timestep", t}, {"encoder_hidden_states", tv->hidden[h]},
                   {"text_embeds", info->sdxl ? tv->pooled[h] : -1}, {"time_ids", time_ids[h]}};
    if (!st) st = pb_merge(g, c, "unet", phase[h], b, 5, (const char *const[]){"sample"}, 1, &out);
    snprintf(name, sizeof name, "noise_pred.%s", half_name[h]);
    if (!st) st = dc_module_add_output(m, name, out);
  }
  dc_module_destroy(c);
  return st;
}

dc_status *pb_merge_vae_decode(merger *g, const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                               int rank, const int64_t *z, int32_t phase, int32_t *out) {
  int32_t latents;
  DC_TRY(pb_add_input(g->m, "latents", DT_F32, rank, z, phase, &latents));
  dc_input_shape shape = {"z", rank, {0}};
  memcpy(shape.dims, z, (size_t)rank * sizeof *z);
  dc_build_options bo = {.entry = "decode",
                         .shapes = &shape,
                         .nshapes = 1,
                         .vae_slicing = o->vae_slicing,
                         .vae_tiling = o->vae_tiling,
                         .tile_size = o->tile_size,
                         .tile_overlap = o->tile_overlap};
  dc_module *c = NULL;
  DC_TRY(pb_build_component(&src->vae, &bo, &c));
  binding b[] = {{"z", latents}};
  dc_status *st = pb_merge(g, c, "vae", phase, b, 1, (const char *const[]){"sample"}, 1, out);
  for (int i = 0; i < c->nmeta && !st; i++) /* what the VAE's options did (tiling, slicing), for the dump */
    if (!strncmp(c->meta[i].key, "vae_", 4)) st = dc_module_set_meta(g->m, c->meta[i].key, c->meta[i].value);
  dc_module_destroy(c);
  return st;
}

dc_status *pb_build_decode(merger *g, const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                           const dc_pipeline_info *info, int32_t phase) {
  int64_t z[4] = {info->batch, info->latent_channels, info->latent_h, info->latent_w};
  int32_t image;
  DC_TRY(pb_merge_vae_decode(g, src, o, 4, z, phase, &image));
  return dc_module_add_output(g->m, "image", image);
}

/* ---- the facts the passes read ----------------------------------------------- */

/* Group offload's block modules of every component, under its name; a
 * component with none has its block lists at its top ("unet" ->
 * unet.down_blocks.N). */
dc_status *pb_pipeline_facts(dc_module *m, const dc_pipeline_source *src) {
  enum { NCOMP = 6 };
  const dc_folder *comps[NCOMP] = {&src->text_encoder, &src->text_encoder_2, &src->text_encoder_3,
                                   &src->unet,         &src->transformer,    &src->vae};
  const char *names[NCOMP] = {"text_encoder", "text_encoder_2", "text_encoder_3", "unet", "transformer", "vae"};
  const char **blocks = dc_arena_alloc(m->arena, sizeof *blocks * 64);
  const char **skip = dc_arena_alloc(m->arena, sizeof *skip * 64);
  dc_model_facts *facts = dc_arena_alloc(m->arena, sizeof *facts);
  if (!blocks || !skip || !facts) return dc_nomem("building the pipeline");
  int nb = 0, ns = 0;
  for (int i = 0; i < NCOMP; i++) {
    const dc_class_desc *d = comps[i]->dir ? comps[i]->desc : NULL;
    if (!d) continue;
    if (!d->facts.block_modules) blocks[nb++] = names[i];
    for (const char *const *b = d->facts.block_modules; b && *b && nb < 62; b++)
      if (!(blocks[nb++] = dc_arena_printf(m->arena, "%s.%s", names[i], *b))) return dc_nomem("building the pipeline");
    for (const char *const *s = d->facts.skip_cast; s && *s && ns < 62; s++) skip[ns++] = *s;
  }
  blocks[nb] = NULL, skip[ns] = NULL;
  facts->block_modules = blocks;
  facts->skip_cast = skip;
  facts->options = DC_FACT_VAE_SLICING | DC_FACT_VAE_TILING;
  m->facts = facts;
  return NULL;
}

/* ---- the whole ------------------------------------------------------------------------- */

static dc_status *add_phases(dc_module *m, int32_t ph[5]) {
  static const char *const names[5] = {"text", "prologue", "denoise.uncond", "denoise.cond", "decode"};
  for (int i = 0; i < 5; i++)
    if ((ph[i] = dc_module_add_phase(m, names[i], i == 2 || i == 3)) < 0) return dc_nomem("building the pipeline");
  return NULL;
}

static dc_status *build_all(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_pipeline_info *info,
                            dc_module *m) {
  merger g = {m, NULL, 0};
  int32_t ph[5];
  text_values tv;
  dc_status *st = add_phases(m, ph);
  if (!st) st = build_text(&g, src, o, info, &tv);
  if (!st) st = build_denoise(&g, src, info, &tv, ph[1], &ph[2]);
  if (!st) st = pb_build_decode(&g, src, o, info, ph[4]);
  if (!st) st = pb_pipeline_facts(m, src);
  dc_free(g.weight_node);
  return st;
}

static dc_status *set_meta(dc_module *m, const dc_pipeline_source *src, const dc_pipeline_info *info) {
  char *model = dc_path_absolute(src->origin);
  if (!model) return dc_nomem("building the pipeline");
  dc_status *st = dc_module_set_meta(m, "class", src->class_name);
  if (!st) st = dc_module_set_meta(m, "model", model);
  dc_free(model);
  char size[96];
  if (info->kind == DC_PIPE_COGVIDEOX)
    snprintf(size, sizeof size, "%lldx%lld, %lld frames asked (%lld latent frames)", (long long)info->width,
             (long long)info->height, (long long)info->num_frames, (long long)info->latent_frames);
  else
    snprintf(size, sizeof size, "%lldx%lld, %lld image(s) per prompt", (long long)info->width,
             (long long)info->height, (long long)info->batch);
  if (!st) st = dc_module_set_meta(m, "pipeline", size);
  return st;
}

dc_status *dc_pipeline_build(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_module **out,
                             dc_pipeline_info *info) {
  *out = NULL;
  memset(info, 0, sizeof *info);
  info->kind = src->kind;
  info->sdxl = src->kind == DC_PIPE_SDXL;
  info->tokens = o->tokens ? o->tokens : 77;
  if (o->clip_skip < 0) return dc_error(DC_ERR_ARGUMENT, "--clip-skip %d: must be 0 or more", o->clip_skip);
  int dit = src->kind == DC_PIPE_FLUX || src->kind == DC_PIPE_SD3, video = src->kind == DC_PIPE_COGVIDEOX;
  if (!dit && !video && o->max_sequence_length)
    return dc_error(DC_ERR_ARGUMENT, "--max-sequence-length %d: %s has no T5 text encoder (it applies to Flux, SD3 "
                    "and CogVideoX pipelines)", o->max_sequence_length, src->class_name);
  if (!video && o->num_frames)
    return dc_error(DC_ERR_ARGUMENT, "--num-frames %lld: %s makes images (it applies to CogVideoX pipelines)",
                    (long long)o->num_frames, src->class_name);
  DC_TRY(video ? pb_resolve_video(src, o, info) : dit ? pb_resolve_dit(src, o, info) : resolve_size(src, o, info));
  dc_module *m = dc_module_create();
  if (!m) return dc_nomem("building the pipeline");
  dc_status *st = set_meta(m, src, info);
  if (!st) st = video ? pb_build_video(src, o, info, m) : dit ? pb_build_dit(src, o, info, m) : build_all(src, o, info, m);
  if (!st) st = dc_phases_sync_meta(m);
  if (!st) st = dc_verify(m, "pipeline build");
  if (st) {
    dc_module_destroy(m);
    return st;
  }
  *out = m;
  return NULL;
}
