/* pipeline.c — the list of passes, in order, and the loop that runs them
 * with the verifier in between.  The list is the one place that says in
 * which order the passes run; the comment above a pass says what must come
 * before and after it, so a new pass goes where those constraints put it. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* The passes that need no options, adapted to the one pass signature. */
static dc_status *shape_infer(dc_module *m, const dc_memory_options *o) { return dc_pass_shape_infer(m); }
static dc_status *fuse_norm_act(dc_module *m, const dc_memory_options *o) { return dc_pass_fuse_norm_act(m); }
static dc_status *fuse_epilogue(dc_module *m, const dc_memory_options *o) { return dc_pass_fuse_epilogue(m); }
static dc_status *dce(dc_module *m, const dc_memory_options *o) { return dc_pass_dce(m); }
static dc_status *memplan(dc_module *m, const dc_memory_options *o) { return dc_pass_memplan(m); }

static const dc_pass passes[] = {
    {"shape-infer", "derive every value's type from its inputs (checks what the frontend built)",
     shape_infer},
    /* Fusion.  Attention needs no pass: the frontend already emits QK^T,
     * scale, softmax and ·V as one OP_ATTENTION. */
    {"fuse-norm-act", "fold a silu/gelu into the group_norm it reads (group_norm{act})",
     fuse_norm_act},
    {"fuse-epilogue",
     "fold silu/gelu, geglu, a residual add and a gated residual into conv2d/linear epilogues",
     fuse_epilogue},
    /* Before dce (the casts it bypasses die there) and offload (uploads
     * then carry the storage dtype). */
    {"cast-weights", "store conv/linear weights in --storage-dtype; the kernels upcast as they load",
     dc_pass_cast_weights},
    /* After the fusions (their patterns are NCHW-agnostic but simpler
     * before) and cast-weights (a repack keeps the storage dtype); before dce,
     * which removes the permutes it composed away. */
    {"layout", "--layout nhwc: conv regions channels-last, weights repacked, permutes only at region edges",
     dc_pass_layout},
    /* After layout (a module output's last permute is a value to keep f32)
     * and cast-weights; before dce (nothing it needs), place and offload
     * (transfers and uploads copy the dtype they read) and memplan (sizes). */
    {"activation-dtype", "cuda --compute-dtype bf16/f16: computed values stored in it between kernels (outputs f32)",
     dc_pass_activation_dtype},
    /* After cast-weights and activation-dtype (position tables keep their
     * f32 bytes); before dce and offload (the new weights offload by scope). */
    {"constant-weights", "cuda: every f32 constant becomes a weight with its bytes, written beside the plan",
     dc_pass_constant_weights},
    {"dce", "remove values no output depends on; drop weights nothing reads", dce},
    /* After dce (only live weights count); before offload, which uploads
     * what it put on cpu or disk, and memplan, which plans each device. */
    {"place", "--device-map: modules across devices under --max-memory, transfers where data crosses",
     dc_pass_place},
    /* After dce (only live weights move) and before memplan (uploads take
     * arena space like any value). */
    {"offload", "keep weights in host memory and upload each group into the arena before use (--offload)",
     dc_pass_offload},
    /* After offload (its held uploads move too); before memplan, which
     * sees the hoisted values live through the loop. */
    {"hoist", "compute once, before a loop, what every iteration would compute alike (and upload held weights once)",
     dc_pass_hoist},
    /* memplan stays last: the offsets it assigns hold for this node order only. */
    {"memplan", "assign every activation an offset in one arena (best fit, in place where allowed)",
     memplan},
};

const dc_pass *dc_pass_list(int *count) {
  *count = (int)(sizeof passes / sizeof passes[0]);
  return passes;
}

static int pass_known(const char *name) {
  if (strcmp(name, "all") == 0 || strcmp(name, "frontend") == 0) return 1;
  for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++)
    if (strcmp(passes[i].name, name) == 0) return 1;
  return 0;
}

static dc_status *maybe_dump(const dc_pipeline_options *opt, const char *pass, const dc_module *m) {
  if (!opt || !opt->dump || !opt->dump_after) return NULL;
  if (strcmp(opt->dump_after, "all") != 0 && strcmp(opt->dump_after, pass) != 0) return NULL;
  return opt->dump(opt->user, pass, m);
}

dc_status *dc_pipeline_run(dc_module *m, const dc_pipeline_options *opt) {
  if (opt && opt->dump_after && !pass_known(opt->dump_after)) {
    char names[256] = "frontend";
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
      strncat(names, ", ", sizeof names - strlen(names) - 1);
      strncat(names, passes[i].name, sizeof names - strlen(names) - 1);
    }
    return dc_error(DC_ERR_ARGUMENT, "--dump-after %s: no such pass (passes: %s, all)", opt->dump_after, names);
  }
  if (opt && opt->memory) DC_TRY(dc_memory_options_check(opt->memory));
  size_t first = 0, last = sizeof passes / sizeof passes[0] - 1;
  for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
    if (opt && opt->first_pass && !strcmp(opt->first_pass, passes[i].name)) first = i;
    if (opt && opt->last_pass && !strcmp(opt->last_pass, passes[i].name)) last = i;
  }
  DC_TRY(dc_phases_sync_meta(m));
  /* Declared before the first pass: from here on the type rules let values
   * and weights be bf16/f16 (cast-weights gives gammas typed weights before
   * activation-dtype stores the computed values). */
  if (opt && opt->memory && opt->memory->activation != DT_F32)
    DC_TRY(dc_module_set_meta(m, "activation_dtype", dc_dtype_name(opt->memory->activation)));
  if (first == 0) {
    DC_TRY(dc_verify(m, "frontend"));
    DC_TRY(maybe_dump(opt, "frontend", m));
  }
  for (size_t i = first; i <= last; i++) {
    double t0 = dc_now_seconds();
    DC_TRY(dc_status_annotate(passes[i].run(m, opt ? opt->memory : NULL), "pass %s", passes[i].name));
    DC_TRY(dc_phases_sync_meta(m)); /* node ids moved: the table's first nodes follow */
    DC_TRY(dc_verify(m, passes[i].name));
    if (opt && opt->verbose)
      fprintf(stderr, "diffc: pass %-16s %6d nodes  %.1f ms\n", passes[i].name, m->nnodes,
              (dc_now_seconds() - t0) * 1e3);
    DC_TRY(maybe_dump(opt, passes[i].name, m));
  }
  return NULL;
}
