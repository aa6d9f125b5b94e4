/* single_file.h — the parts of frontend/single_file*.c, which read a
 * checkpoint in the original CompVis / Stability layout as a pipeline source
 * (pipeline_source.h: dc_single_file_open).
 *
 *   single_file.c:       open: recognise the family, find its configs (bundled
 *                        data/single_file/<family> or a diffusers folder),
 *                        build the four folders and the text files
 *   single_file_map.c:   every tensor of the file to its diffusers name
 *                        (diffusers' loaders/single_file_utils.py conversions),
 *                        or knowingly ignored, or an error naming it
 *   single_file_dit.c:   the same for the DiT transformers (Black Forest
 *                        Labs' Flux, Stability's SD3 / SD3.5 MMDiT): fused
 *                        q,k,v(,mlp) rows split into views, the final
 *                        norm's swapped halves flagged
 *   single_file_check.c: the mapped names against what each component's
 *                        config implies: nothing missing, nothing extra,
 *                        every shape equal
 */
#ifndef DC_SINGLE_FILE_H
#define DC_SINGLE_FILE_H

#include "frontend.h"

typedef enum { SF_UNET, SF_VAE, SF_TE, SF_TE2, SF_TRANSFORMER, SF_NCOMP } sf_comp;
extern const char *const sf_comp_names[SF_NCOMP]; /* "unet", "vae", "text_encoder", "text_encoder_2", "transformer" */

/* The DiT layouts (sf_family.dit). */
typedef enum { SF_DIT_NONE, SF_DIT_FLUX, SF_DIT_SD3 } sf_dit;

/* One model family a single file can hold. */
typedef struct {
  const char *name;       /* data/single_file/<name>: "sd1", "sd2", "sdxl" */
  const char *label;      /* for messages: "SD1.x", "SD2.x", "SDXL base" */
  const char *pipeline;   /* the diffusers pipeline class */
  const char *te_prefix;  /* the text encoder's tensors */
  int te_openclip;        /* 1: OpenCLIP's own names (SD2); 0: transformers' CLIP names */
  int te_drop_last;       /* SD2 encodes with the penultimate OpenCLIP block: the file's last block is unused */
  const char *te2_prefix; /* SDXL's OpenCLIP bigG, NULL when there is no second encoder */
  sf_dit dit;             /* a DiT's transformer (Flux, SD3): then te_* are unused */
  const char *model_class; /* DiT: the transformer's diffusers class */
} sf_family;

/* What the name mapping needs from the component configs. */
typedef struct {
  int64_t unet_per_block;     /* layers_per_block + 1: LDM input/output blocks per diffusers block */
  const char *unet_label_emb; /* what LDM's label_emb is: "add_embedding" (SDXL's text_time), "class_embedding", NULL */
  int64_t vae_up_blocks;      /* LDM numbers the decoder's up blocks in reverse */
  int64_t te_layers;          /* the text encoder config's num_hidden_layers */
  int64_t dit_dim;            /* DiT: num_attention_heads * attention_head_dim (the fused rows' unit) */
  int64_t dit_layers;         /* DiT: num_layers (SD3: the last joint block is context_pre_only) */
  const char *dit_config;     /* DiT: the transformer config's path, for messages */
} sf_facts;

/* One diffusers tensor: a view of bytes of the checkpoint, no copy. */
typedef struct {
  dc_st_tensor t;     /* t.name: the diffusers name (owned); dtype, offset, bytes: of the stored
                         bytes; dims: as diffusers has them, except for a transposed view (stored) */
  const char *source; /* the checkpoint's tensor the bytes belong to (its name, for messages) */
  sf_comp comp;
  int transposed;     /* the bytes hold the 2-D transpose (OpenCLIP's text_projection) */
  int halves_swapped; /* the two halves of dim 0 in the other order (dc_folder_entry.halves_swapped) */
} sf_view;

typedef struct {
  sf_view *v;
  int n, cap;
  int nignored; /* tensors of the file knowingly left out */
} sf_views;

/* Maps every tensor of f (path: for messages) into out, sorted by
 * (component, diffusers name).  A tensor no rule knows is an error naming
 * it (and counting the others). */
dc_status *sf_map_tensors(const dc_st_file *f, const sf_family *fam, const sf_facts *facts, sf_views *out);
void sf_views_free(sf_views *v);
/* The patterns sf_map_tensors ignores, for documentation and messages. */
const char *sf_ignored_patterns(void);

/* ---- shared by single_file_map.c and single_file_dit.c ---------------------- */

typedef struct {
  const dc_st_file *f;
  const sf_family *fam;
  const sf_facts *facts;
  sf_views *out;
  const char *bad; /* the first tensor no rule knows (file order) */
  char why[512];   /* and why */
  int nbad;
} sf_ctx;

/* s past `prefix`, or NULL when s does not start with it. */
const char *sf_after(const char *s, const char *prefix);
/* "12.rest" -> 12 and "rest"; NULL unless s is decimal digits then a dot. */
const char *sf_num(const char *s, int64_t *out);
/* Counts t as unknown (the first one is reported, with why). */
dc_status *sf_unknown(sf_ctx *c, const dc_st_tensor *t, const char *why);
/* Appends the view of t called `name` (owned; NULL means out of memory),
 * returned in *out when asked. */
dc_status *sf_add(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, char *name, sf_view **out);
/* Appends the view of rows [row0, row0 + nrows) along dim 0 of t (a fused
 * tensor's part: the same bytes at an offset, a smaller first dim). */
dc_status *sf_add_rows(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, char *name, int64_t row0, int64_t nrows);
/* Renames by a table of {original prefix, diffusers prefix}:
 * "<head><new><tail>"; *hit is 0 when no entry matches. */
dc_status *sf_rename(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, const char *head, const char *rest,
                     const char *const (*table)[2], int n, int *hit);
/* The VAE under first_stage_model. (LDM names). */
dc_status *sf_map_vae(sf_ctx *c, const dc_st_tensor *t, const char *rest);
/* A DiT transformer's tensor, its name past model.diffusion_model. (or the
 * whole name in a file of the transformer alone). */
dc_status *sf_map_dit(sf_ctx *c, const dc_st_tensor *t, const char *rest);
/* The DiT transformer's tensors that are knowingly left out, for messages. */
const char *sf_dit_ignored_patterns(const sf_family *fam);

#define SF_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Checks the views of one component against the tensors its config implies
 * (config_path): for the UNet and the VAE the weights diffc's builder asks
 * for (dc_frontend_weight_list), for the CLIP text encoders the tensors of
 * transformers' CLIPTextModel[WithProjection] (without text_projection
 * when identity_projection: SD3's CLIP-L, which diffusers gives the identity). */
dc_status *sf_check_component(const char *file, sf_comp comp, const sf_view *views, int n,
                              const char *config_path, int identity_projection);

#endif
