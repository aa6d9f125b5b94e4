/* model_facts.h — what the passes and the compiler driver may know about a
 * model's class without knowing the class.
 *
 * The frontend keeps one descriptor per supported class (frontend/registry.h);
 * each descriptor holds one dc_model_facts, and every module the frontend
 * builds points to it (dc_module.facts).  A pass that needs a class-specific
 * fact reads it here, never the class name: adding a class is then a change
 * to the frontend only.  A module with no facts (parsed from text, read from
 * a plan, built by hand in a test) gets the behaviour of a class with none:
 * block lists at the top level only, no extra skip patterns, no VAE options.
 *
 * The facts mirror the class attributes diffusers keys the same decisions by
 * (ModelMixin._group_offload_block_modules, _skip_layerwise_casting_patterns). */
#ifndef DC_MODEL_FACTS_H
#define DC_MODEL_FACTS_H

/* Build options that mean something for a class (dc_model_facts.options). */
enum {
  DC_FACT_VAE_SLICING = 1 << 0, /* --vae-slicing: diffusers enable_slicing */
  DC_FACT_VAE_TILING = 1 << 1,  /* --vae-tiling, --tile-size, --tile-overlap: enable_tiling */
  DC_FACT_CLIP_HIDDEN = 1 << 2, /* --clip-hidden-state, --clip-final-norm: a text encoder's hidden_states[k] */
  DC_FACT_VAE_FRAME_BATCHING = 1 << 3, /* --no-vae-frame-batching: a video VAE's coder over all frames at once */
};

typedef struct dc_model_facts {
  /* Group offload at block level: top-level modules whose children are
   * looked in for block lists (a path component followed by an index, such
   * as encoder.down_blocks.0), as diffusers' _group_offload_block_modules;
   * NULL-terminated, or NULL for block lists at the top level only
   * (down_blocks.0, as in a UNet). */
  const char *const *block_modules;
  /* Layerwise casting: patterns this class always skips, on top of the
   * user's or diffusers' defaults (_skip_layerwise_casting_patterns);
   * NULL-terminated, or NULL for none. */
  const char *const *skip_cast;
  /* DC_FACT_* bits: which build options apply. */
  unsigned options;
} dc_model_facts;

#endif
