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
 *   single_file_check.c: the mapped names against what each component's
 *                        config implies: nothing missing, nothing extra,
 *                        every shape equal
 */
#ifndef DC_SINGLE_FILE_H
#define DC_SINGLE_FILE_H

#include "frontend.h"

typedef enum { SF_UNET, SF_VAE, SF_TE, SF_TE2, SF_NCOMP } sf_comp;
extern const char *const sf_comp_names[SF_NCOMP]; /* "unet", "vae", "text_encoder", "text_encoder_2" */

/* One model family a single file can hold. */
typedef struct {
  const char *name;       /* data/single_file/<name>: "sd1", "sd2", "sdxl" */
  const char *label;      /* for messages: "SD1.x", "SD2.x", "SDXL base" */
  const char *pipeline;   /* the diffusers pipeline class */
  const char *te_prefix;  /* the text encoder's tensors */
  int te_openclip;        /* 1: OpenCLIP's own names (SD2); 0: transformers' CLIP names */
  int te_drop_last;       /* SD2 encodes with the penultimate OpenCLIP block: the file's last block is unused */
  const char *te2_prefix; /* SDXL's OpenCLIP bigG, NULL when there is no second encoder */
} sf_family;

/* What the name mapping needs from the component configs. */
typedef struct {
  int64_t unet_per_block;     /* layers_per_block + 1: LDM input/output blocks per diffusers block */
  const char *unet_label_emb; /* what LDM's label_emb is: "add_embedding" (SDXL's text_time), "class_embedding", NULL */
  int64_t vae_up_blocks;      /* LDM numbers the decoder's up blocks in reverse */
  int64_t te_layers;          /* the text encoder config's num_hidden_layers */
} sf_facts;

/* One diffusers tensor: a view of bytes of the checkpoint, no copy. */
typedef struct {
  dc_st_tensor t;     /* t.name: the diffusers name (owned); dtype, offset, bytes: of the stored
                         bytes; dims: as diffusers has them, except for a transposed view (stored) */
  const char *source; /* the checkpoint's tensor the bytes belong to (its name, for messages) */
  sf_comp comp;
  int transposed;     /* the bytes hold the 2-D transpose (OpenCLIP's text_projection) */
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

/* Checks the views of one component against the tensors its config implies
 * (config_path): for the UNet and the VAE the weights diffc's builder asks
 * for (dc_frontend_weight_list), for the CLIP text encoders the tensors of
 * transformers' CLIPTextModel[WithProjection]. */
dc_status *sf_check_component(const char *file, sf_comp comp, const sf_view *views, int n,
                              const char *config_path);

#endif
