/* budget_choose.c — diffc --memory-budget in the driver: the options the
 * search may change must not be given too (refused, naming them), the cost
 * model's profile is found, the frontend graph is built once per build
 * variant that changes it (VAE slicing, tiling), passes/budget.c searches,
 * and the chosen options replace the user's for the real compile. */
#include <string.h>
#include <unistd.h>

#include "codegen/kernel_cache.h"
#include "compile.h"
#include "frontend/registry.h"

/* The options the search chooses; giving one with --memory-budget is refused
 * (a fixed option would silently shrink the search). */
static dc_status *check_not_given(const dc_compile_options *o) {
  const dc_memory_options *m = &o->memory;
  const char *given = m->offload ? "--offload" : m->group_level ? "--group-level" : m->blocks_per_group ? "--blocks-per-group"
                      : m->prefetch ? "--prefetch" : m->host_memory ? "--host-memory" : o->vae_slicing ? "--vae-slicing"
                      : o->vae_tiling ? "--vae-tiling" : o->no_hoist ? "--no-hoist" : o->offload_dir ? "--offload-dir"
                      : m->storage != DT_F32 ? "--storage-dtype" : NULL;
  if (given)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s with --memory-budget: the budget search chooses --offload, --group-level, --blocks-per-group, "
                    "--prefetch, --host-memory, --vae-slicing, --vae-tiling, --no-hoist and (with --allow-cast) "
                    "--storage-dtype itself; drop %s, or drop --memory-budget",
                    given, given);
  if (m->nskip_cast && !o->nallow_cast)
    return dc_error(DC_ERR_ARGUMENT, "--skip-cast with --memory-budget needs --allow-cast (the dtypes it may store in)");
  return NULL;
}

/* --calibration FILE, else calibration-<target>.json in the cache root when
 * it exists (a bad one there is a warning: the defaults are used), else the
 * built-in defaults. */
static dc_status *load_profile(const dc_compile_options *o, dc_cost_profile *p) {
  const char *target = o->target && !strcmp(o->target, "cuda") ? "cuda" : "cpu";
  if (o->calibration) return dc_cost_profile_load(o->calibration, target, p);
  dc_cost_profile_default(!strcmp(target, "cuda"), p);
  char *root = dc_kcache_default_dir();
  char *path = root ? dc_asprintf("%s/calibration-%s.json", root, target) : NULL;
  dc_free(root);
  if (path && dc_file_exists(path)) {
    dc_status *st = dc_cost_profile_load(path, target, p);
    dc_progress pr = {o->progress, o->progress_ctx};
    if (st) dc_progress_pause(&pr);
    if (st) fprintf(stderr, "diffc: warning: %s; using the built-in defaults\n", dc_status_message(st));
    dc_status_free(st);
  }
  dc_free(path);
  return NULL;
}

/* Whether the graph took a VAE option ("requested, no effect: ..." when not). */
static int took_effect(const dc_module *m, const char *key) {
  const char *v = dc_module_get_meta(m, key);
  return !v || strncmp(v, "requested, no effect", 20) != 0;
}

enum { NVARIANTS = 4 };
static const struct {
  const char *flags;
  int slicing, tiling;
} variant_opts[NVARIANTS] = {{"", 0, 0}, {"--vae-slicing", 1, 0}, {"--vae-tiling", 0, 1}, {"--vae-slicing --vae-tiling", 1, 1}};

typedef struct {
  dc_module *m[NVARIANTS];
  int index[NVARIANTS]; /* variant_opts index of each built graph */
  dc_budget_variant v[NVARIANTS];
  int n, loop_steps;
} variants;

static void variants_free(variants *vs) {
  for (int i = 0; i < vs->n; i++) dc_module_destroy(vs->m[i]);
}

/* Builds the frontend graph with each VAE option the class takes, keeping
 * those that change it. */
static dc_status *build_variants(const dc_compile_options *o, variants *vs) {
  memset(vs, 0, sizeof *vs);
  unsigned vae_options = 0;
  for (int k = 0; k < NVARIANTS; k++) {
    dc_compile_options vo = *o;
    vo.vae_slicing = variant_opts[k].slicing, vo.vae_tiling = variant_opts[k].tiling;
    unsigned need = (vo.vae_slicing ? DC_FACT_VAE_SLICING : 0) | (vo.vae_tiling ? DC_FACT_VAE_TILING : 0);
    if ((need & vae_options) != need) continue; /* not a VAE option of this class */
    dc_folder f;
    dc_compile_pipeline pl;
    memset(&f, 0, sizeof f);
    memset(&pl, 0, sizeof pl);
    dc_module *m = NULL;
    dc_status *st = dc_compile_build_frontend(&vo, &f, &pl, &m);
    if (!st && k == 0) {
      int pipeline = pl.open;
      vae_options = pipeline ? DC_FACT_VAE_SLICING | DC_FACT_VAE_TILING : f.desc ? f.desc->facts.options : 0;
      if (pipeline) vs->loop_steps = pl.info.kind == DC_PIPE_FLUX || pl.info.kind == DC_PIPE_SD3 ? 28 : 50; /* CogVideoX: 50 */
    }
    dc_folder_close(&f);
    dc_compile_pipeline_close(&pl);
    if (st) return dc_module_destroy(m), st;
    int tile_asked = o->tile_size || o->tile_overlap; /* a tile size given: only the tiled graphs */
    if ((vo.vae_slicing && !took_effect(m, "vae_slicing")) || (vo.vae_tiling && !took_effect(m, "vae_tiling")) ||
        (tile_asked && !vo.vae_tiling)) {
      dc_module_destroy(m);
      continue;
    }
    vs->m[vs->n] = m, vs->index[vs->n] = k;
    vs->v[vs->n] = (dc_budget_variant){variant_opts[k].flags, m};
    vs->n++;
  }
  if (!vs->n)
    return dc_error(DC_ERR_ARGUMENT, "--tile-size and --tile-overlap with --memory-budget: %s, so the search has "
                    "no tiled graph to choose; drop them", vae_options & DC_FACT_VAE_TILING
                    ? "tiling changes nothing at this input size" : "this model takes no --vae-tiling");
  return NULL;
}

dc_status *dc_compile_budget(const dc_compile_options *o, dc_compile_options *eff, dc_buf *json, dc_budget_result *keep) {
  *eff = *o;
  if (keep) memset(keep, 0, sizeof *keep);
  DC_TRY(check_not_given(o));
  DC_TRY(dc_memory_options_check(&o->memory));
  dc_cost_profile prof;
  DC_TRY(load_profile(o, &prof));
  variants vs;
  dc_status *built = build_variants(o, &vs);
  if (built) return variants_free(&vs), built;
  dc_budget_request r = {.budget = o->memory_budget, .base = o->memory, .casts = o->allow_cast,
                         .ncasts = o->nallow_cast, .loop_steps = vs.loop_steps, .profile = &prof,
                         .variants = vs.v, .nvariants = vs.n};
  r.base.no_hoist = 0;
  dc_budget_result res;
  dc_status *st = dc_budget_search(&r, &res);
  if (!st && res.chosen < 0) st = dc_budget_no_fit(&r, &res);
  if (!st) {
    dc_progress pr = {o->progress, o->progress_ctx}; /* our lines, not over the progress line */
    dc_progress_pause(&pr);
    dc_budget_print(&r, &res, stderr);
    if (!prof.calibrated)
      fprintf(stderr, "diffc: note: the predicted times are uncalibrated estimates (%s); diffrun --calibrate "
              "measures this machine\n", prof.source);
    st = dc_budget_json(&r, &res, json);
    const dc_budget_candidate *c = &res.c[res.chosen];
    eff->memory = c->options;
    eff->no_hoist = c->options.no_hoist;
    eff->vae_slicing = variant_opts[vs.index[c->variant]].slicing;
    eff->vae_tiling = variant_opts[vs.index[c->variant]].tiling;
  }
  if (keep) *keep = res;
  else dc_budget_result_free(&res);
  variants_free(&vs);
  return st;
}

dc_status *dc_compile_budget_check(const dc_compile_options *o, const dc_module *m) {
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  dc_status *st = NULL;
  dc_budget_request r = {.budget = o->memory_budget, .base = o->memory};
  for (int d = 0; d < l.ndevices && !st; d++) {
    uint64_t bytes = l.dev_weights[d] + l.dev_peak[d];
    if (bytes > dc_budget_of_device(&r, d))
      st = dc_error(DC_ERR_INTERNAL, "--memory-budget: the chosen plan needs %llu bytes on device %d, over its budget "
                    "of %llu; the search measured less", (unsigned long long)bytes, d,
                    (unsigned long long)dc_budget_of_device(&r, d));
  }
  dc_liveness_deinit(&l);
  return st;
}
