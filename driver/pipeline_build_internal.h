/* pipeline_build_internal.h — what the pipeline builders share:
 * pipeline_build.c (the SD and SDXL pipelines, the merger, the whole),
 * pipeline_build_dit.c (Flux and SD3) and pipeline_build_video.c
 * (CogVideoX). */
#ifndef DC_PIPELINE_BUILD_INTERNAL_H
#define DC_PIPELINE_BUILD_INTERNAL_H

#include "pipeline_build.h"

/* A component input's name and the pipeline value that feeds it. */
typedef struct {
  const char *name;
  int32_t node;
} binding;

typedef struct {
  dc_module *m;         /* the pipeline's module */
  int32_t *weight_node; /* per pipeline weight: its OP_WEIGHT node, -1 before the first */
  int32_t cap_weight_node;
} merger;

/* Merges component c into phase `phase` under `prefix`: every input of c
 * bound (types equal; a binding to -1 is no binding); out[i] receives the
 * pipeline node of c's output outputs[i].  Weights are shared between
 * merges of the same component (the CFG halves). */
dc_status *pb_merge(merger *g, const dc_module *c, const char *prefix, int32_t phase, const binding *b, int nb,
                    const char *const *outputs, int nout, int32_t *out);
/* A pipeline input of the given type in `phase`. */
dc_status *pb_add_input(dc_module *m, const char *name, dc_dtype dt, int rank, const int64_t *dims, int32_t phase,
                        int32_t *out);
/* n (type inferred) appended with scope. */
dc_status *pb_add_op(dc_module *m, dc_node n, const char *scope, int32_t *out);
/* x [1, ...] repeated to [n, ...] (num_images_per_prompt). */
dc_status *pb_repeat_batch(dc_module *m, int32_t x, int64_t n, int32_t *out);
/* The pipeline input "latents" of shape z (rank dims) in `phase`, decoded by
 * the VAE (with the build's slicing and tiling options; their metadata
 * copied for the dump): out is the VAE's "sample". */
dc_status *pb_merge_vae_decode(merger *g, const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                               int rank, const int64_t *z, int32_t phase, int32_t *out);
/* A component's module (errors annotated with its folder). */
dc_status *pb_build_component(const dc_folder *f, dc_build_options *bo, dc_module **out);
dc_status *pb_read_int(const dc_folder *f, const char *key, int64_t def, int64_t *out);
/* The VAE's scale factor, 2^(len(block_out_channels) - 1), as the pipelines
 * compute vae_scale_factor. */
int64_t pb_vae_scale(const dc_pipeline_source *src);
/* One text encoder merged (in the text phase) once per CFG half whose ids[h]
 * >= 0, bo[h] that half's options (equal options build one module):
 * out[h][k] is its output outs[k] (nout <= 2), repeated to the batch. */
dc_status *pb_encode_halves(merger *g, const dc_folder *f, dc_build_options bo[2], const char *prefix,
                            const int32_t ids[2], const char *const *outs, int nout, int64_t batch,
                            int32_t out[2][2]);
/* A CLIP encoder's options for the two CFG halves (clip_skip on the prompt
 * only), its input_ids of `tokens`; sdxl: hidden_states[-(skip+2)] without
 * the final norm (SDXL, SD3), else through it (SD). */
dc_status *pb_half_options(const dc_folder *f, int sdxl, int clip_skip, int64_t tokens, dc_input_shape *shape,
                           dc_build_options bo[2]);
/* The VAE's decoder in `phase` on the input "latents"; output "image". */
dc_status *pb_build_decode(merger *g, const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                           const dc_pipeline_info *info, int32_t phase);
/* Group offload's block lists and the cast skip patterns of every component. */
dc_status *pb_pipeline_facts(dc_module *m, const dc_pipeline_source *src);

/* pipeline_build_dit.c: the size, tokens and the whole module of a Flux or
 * SD3 pipeline. */
dc_status *pb_resolve_dit(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_pipeline_info *info);
dc_status *pb_build_dit(const dc_pipeline_source *src, const dc_pipeline_build_options *o, const dc_pipeline_info *info,
                        dc_module *m);

/* pipeline_build_video.c: the size, frames and tokens, and the whole module
 * of a CogVideoX pipeline (info->frames set from the VAE's output). */
dc_status *pb_resolve_video(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_pipeline_info *info);
dc_status *pb_build_video(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_pipeline_info *info,
                          dc_module *m);

#endif
