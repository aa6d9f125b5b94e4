/* compile.c — see compile.h.  The order here is the data flow of
 * docs/ARCHITECTURE.md:
 * check the options (and, for --target cuda, find NVRTC) before any work,
 * open the folder, build the graph, run the pipeline (verifier between
 * passes), print the IR, compile the kernels for the target, write the
 * plan. */
#include "compile.h"
#include "weight_store.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "codegen/emit_cuda.h"
#include "runtime/cuda_driver.h"
#include "frontend/registry.h"
#include "codegen/emit_kernels.h"
#include "passes/passes.h"
#include "pipeline/scheduler.h"
#include "pipeline/tokenizer.h"
#include "pipeline/tokenizer_t5.h"
#include "plan/plan_format.h"


/* The caller's progress callback as a sink (support/progress.h). */
static dc_progress progress_of(const dc_compile_options *o) { return (dc_progress){o->progress, o->progress_ctx}; }

/* A line of ours on stderr: the caller's progress line is cleared first. */
static void say(const dc_compile_options *o, const char *fmt, ...) {
  dc_progress pr = progress_of(o);
  dc_progress_pause(&pr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

static dc_status *dump_to_stderr(void *user, const char *pass, const dc_module *m) {
  dc_buf b;
  dc_buf_init(&b);
  dc_status *st = dc_print(m, &b);
  if (!st) fprintf(stderr, "# ---- IR after %s ----\n%.*s", pass, (int)b.len, (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

static dc_status *write_text(const char *path, const dc_buf *text) {
  if (!strcmp(path, "-")) {
    fwrite(text->data, 1, text->len, stdout);
    return NULL;
  }
  dc_atomic_file f;
  DC_TRY(dc_atomic_open(path, &f));
  dc_atomic_write(&f, text->data, text->len);
  return dc_atomic_commit(&f);
}

/* What the options ask of the code generator, checked before any work. */
typedef struct {
  int cuda;
  dc_cuda_compute compute;
  dc_nvrtc *nv; /* --target cuda */
  dc_cuda_arch archs[DC_CUDA_MAX_ARCHS];
  int narchs;
  int sm_count;        /* the SMs the GEMM tiles are chosen for */
  const char *sm_from; /* where that count came from, for the plan's OPTS */
} target_ctx;

/* --conv-algo as a dc_conv_algo; -1 for an unknown name. */
static int conv_algo(const dc_compile_options *o) {
  if (!o->conv_algo || !strcmp(o->conv_algo, "auto")) return DC_CONV_AUTO;
  if (!strcmp(o->conv_algo, "direct")) return DC_CONV_DIRECT;
  return !strcmp(o->conv_algo, "winograd") ? DC_CONV_WINOGRAD : -1;
}

static dc_status *check_cpu_options(const dc_compile_options *o, const target_ctx *t) {
  if (o->cpu) { /* the name is checked here, before the model is read */
    dc_cpu_target named;
    DC_TRY(dc_cpu_target_named(o->cpu, &named));
    dc_cpu_target_deinit(&named);
  }
  if (t->compute != DC_CUDA_COMPUTE_F32)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "--compute-dtype %s: the cpu target computes in f32 only for now (bf16 and f16 are the tensor-core "
                    "precisions of --target cuda)",
                    o->compute);
  if (o->cuda_arch) return dc_error(DC_ERR_ARGUMENT, "--cuda-arch %s: only for --target cuda", o->cuda_arch);
  if (o->cuda_sm_count) return dc_error(DC_ERR_ARGUMENT, "--cuda-sm-count %d: only for --target cuda", o->cuda_sm_count);
  if (conv_algo(o) < 0)
    return dc_error(DC_ERR_ARGUMENT, "--conv-algo %s: expected auto, direct or winograd", o->conv_algo);
  return dc_cpu_codegen_check(); /* after the argument errors: a build without LLVM has no CPU code generator */
}

/* GPU 0's SM count through the driver, or 0 when there is no driver or GPU
 * (compiling for a GPU elsewhere is normal: nothing here is an error). */
int dc_gpu0_sm_count(void) {
  dc_cu_api api;
  dc_status *st = dc_cu_api_open(NULL, &api);
  if (st) {
    dc_status_free(st);
    return 0;
  }
  int count = 0, sms = 0;
  dc_cu_device dev;
  int ok = api.Init(0) == DC_CUDA_SUCCESS && api.DeviceGetCount(&count) == DC_CUDA_SUCCESS && count > 0 &&
           api.DeviceGet(&dev, 0) == DC_CUDA_SUCCESS &&
           api.DeviceGetAttribute(&sms, DC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == DC_CUDA_SUCCESS;
  dc_cu_api_unload(&api);
  return ok && sms > 0 ? sms : 0;
}

/* --cuda-sm-count, else GPU 0's, else 132: the H100 / H200 count. */
static void choose_sm_count(const dc_compile_options *o, target_ctx *t) {
  int found = o->cuda_sm_count > 0 ? 0 : dc_gpu0_sm_count();
  t->sm_count = o->cuda_sm_count > 0 ? o->cuda_sm_count : found > 0 ? found : 132;
  t->sm_from = o->cuda_sm_count > 0 ? "--cuda-sm-count" : found > 0 ? "GPU 0" : "default (Hopper; no GPU present)";
}

static dc_status *open_target(const dc_compile_options *o, target_ctx *t) {
  memset(t, 0, sizeof *t);
  const char *target = o->target ? o->target : "cpu";
  if (strcmp(target, "cpu") != 0 && strcmp(target, "cuda") != 0)
    return dc_error(DC_ERR_ARGUMENT, "--target %s: expected cpu or cuda", target);
  t->cuda = !strcmp(target, "cuda");
  if (o->compute && dc_cuda_compute_from_name(o->compute, &t->compute) != 0)
    return dc_error(DC_ERR_ARGUMENT, "--compute-dtype %s: expected f32, bf16 or f16", o->compute);
  if (o->kernel_cache && o->no_kernel_cache)
    return dc_error(DC_ERR_ARGUMENT, "--kernel-cache %s and --no-kernel-cache contradict each other", o->kernel_cache);
  if (!t->cuda) return check_cpu_options(o, t);
  if (o->cpu) return dc_error(DC_ERR_ARGUMENT, "--cpu %s: only for --target cpu", o->cpu);
  if (o->conv_algo) return dc_error(DC_ERR_ARGUMENT, "--conv-algo %s: only for --target cpu", o->conv_algo);
  if (o->cuda_sm_count < 0) return dc_error(DC_ERR_ARGUMENT, "--cuda-sm-count %d: expected a positive count", o->cuda_sm_count);
  DC_TRY(dc_status_annotate(dc_nvrtc_load(&t->nv), "--target cuda"));
  choose_sm_count(o, t);
  return dc_nvrtc_parse_archs(t->nv, o->cuda_arch, t->archs, &t->narchs);
}

static void close_target(target_ctx *t) { dc_nvrtc_unload(t->nv); }

/* Provenance stored in the plan's OPTS section. */
/* The memory options as diffc flags, for the plan's OPTS and --info. */
/* (A dc_buf: --skip-cast patterns have no length limit.) */
static void memory_flags(const dc_compile_options *o, dc_buf *b) {
  const dc_memory_options *mo = &o->memory;
  dc_buf_printf(b, "--offload %s", dc_offload_name(mo->offload));
  if (mo->group_level) dc_buf_printf(b, " --group-level %s", dc_group_level_name(mo->group_level));
  if (mo->blocks_per_group) dc_buf_printf(b, " --blocks-per-group %d", mo->blocks_per_group);
  if (mo->prefetch) dc_buf_printf(b, " --prefetch=%d", mo->prefetch);
  if (mo->host_memory)
    dc_buf_printf(b, " --host-memory %s", mo->host_memory == DC_HOST_PINNED ? "pinned" : "on-demand");
  if (o->vae_slicing) dc_buf_printf(b, " --vae-slicing");
  if (o->vae_tiling) dc_buf_printf(b, " --vae-tiling");
  if (o->vae_no_frame_batching) dc_buf_printf(b, " --no-vae-frame-batching");
  if (mo->storage != DT_F32 && !mo->storage_all) dc_buf_printf(b, " --storage-dtype %s", dc_dtype_name(mo->storage));
  for (int i = 0; i < mo->nskip_cast; i++) dc_buf_printf(b, " --skip-cast %s", mo->skip_cast[i]);
  dc_buf_u8(b, 0);
}

static char *options_json(const dc_compile_options *o, const target_ctx *t, const char *model_dir, const dc_buf *fit,
                          const dc_buf *budget) {
  dc_buf mem;
  dc_buf_init(&mem);
  memory_flags(o, &mem);
  cJSON *j = mem.failed ? NULL : cJSON_CreateObject();
  if (j) cJSON_AddStringToObject(j, "memory", (const char *)mem.data);
  dc_buf_deinit(&mem);
  if (!j) return NULL;
  if (o->offload_dir) cJSON_AddStringToObject(j, "offload_dir", o->offload_dir);
  if (fit && fit->len) cJSON_AddRawToObject(j, "fit", (const char *)fit->data);
  if (budget && budget->len) cJSON_AddRawToObject(j, "budget", (const char *)budget->data);
  cJSON_AddStringToObject(j, "diffc_version", DIFFC_VERSION);
  char *model = dc_path_absolute(model_dir);
  if (model) cJSON_AddStringToObject(j, "model", model);
  dc_free(model);
  if (o->component) cJSON_AddStringToObject(j, "component", o->component);
  if (o->variant) cJSON_AddStringToObject(j, "variant", o->variant);
  if (o->entry) cJSON_AddStringToObject(j, "entry", o->entry);
  cJSON_AddStringToObject(j, "target", t->cuda ? "cuda" : "cpu");
  cJSON_AddStringToObject(j, "compute_dtype", dc_cuda_compute_name(t->compute));
  if (t->cuda) {
    char archs[256];
    cJSON_AddStringToObject(j, "cuda_arch", dc_cuda_archs_str(t->archs, t->narchs, archs, sizeof archs));
    cJSON_AddStringToObject(j, "nvrtc_version", dc_nvrtc_version(t->nv));
    cJSON_AddNumberToObject(j, "cuda_sm_count", t->sm_count);
    cJSON_AddStringToObject(j, "cuda_sm_count_from", t->sm_from);
  } else {
    cJSON_AddStringToObject(j, "cpu", o->cpu ? o->cpu : "native");
    cJSON_AddStringToObject(j, "conv_algo", o->conv_algo ? o->conv_algo : "auto");
  }
  char *s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return s;
}

/* --debug LIST: channels that trace the compiler's decisions to stderr.
 * Sets *on when `name` is in the list; an unknown channel is an error. */
static const char *const debug_channels[] = {"memplan"};
enum { NDEBUG_CHANNELS = sizeof debug_channels / sizeof debug_channels[0] };

static dc_status *debug_on(const char *list, const char *name, int *on) {
  *on = 0;
  const char *p = list;
  while (p && *p) {
    size_t len = strcspn(p, ",");
    int known = 0;
    for (int i = 0; i < NDEBUG_CHANNELS; i++)
      known |= strlen(debug_channels[i]) == len && !strncmp(p, debug_channels[i], len);
    if (!known)
      return dc_error(DC_ERR_ARGUMENT, "--debug %s: unknown channel \"%.*s\" (channels: memplan)", list, (int)len, p);
    *on |= strlen(name) == len && !strncmp(p, name, len);
    p += len;
    if (*p == ',') p++;
  }
  return NULL;
}

/* Runs the pipeline, with memplan's trace on stderr when asked, then checks
 * the memory plan: a pass that ran after memplan and moved nodes is caught
 * here rather than by diffrun. */
static dc_status *run_passes(const dc_compile_options *o, const dc_memory_options *mem, dc_module *m) {
  int trace;
  DC_TRY(debug_on(o->debug, "memplan", &trace));
  dc_progress pr = progress_of(o);
  if (trace || o->dump_after || o->verbose) dc_progress_pause(&pr); /* the passes print lines of their own */
  dc_pipeline_options po = {.dump_after = o->dump_after, .dump = dump_to_stderr, .verbose = o->verbose,
                            .memory = mem};
  if (trace) dc_memplan_trace(stderr);
  dc_status *st = dc_pipeline_run(m, &po);
  dc_memplan_trace(NULL);
  dc_liveness l;
  if (!st) st = dc_liveness_compute(m, &l);
  if (!st) {
    st = dc_status_annotate(dc_memplan_check(m, &l), "after the pipeline");
    dc_liveness_deinit(&l);
  }
  if (!st) st = dc_place_check_budgets(m, mem);
  return st;
}

dc_status *dc_load_device_map(const char *path, dc_map_entry **out, int *n) {
  *out = NULL, *n = 0;
  dc_json_doc d;
  DC_TRY(dc_json_load(path, &d));
  dc_status *st = NULL;
  if (!cJSON_IsObject(d.root))
    st = dc_error(DC_ERR_FORMAT, "%s: a device map is a JSON object of module path -> device, got a %s", path,
                  dc_json_type_name(d.root));
  size_t count = 0, chars = 0;
  for (cJSON *e = st ? NULL : d.root->child; e; e = e->next) count++, chars += strlen(e->string) + 1;
  dc_map_entry *m = st ? NULL : dc_malloc(sizeof *m * (count + 1) + chars + 1);
  if (!st && !m) st = dc_nomem("reading the device map");
  char *text = m ? (char *)(m + count + 1) : NULL;
  int k = 0;
  for (cJSON *e = st ? NULL : d.root->child; e && !st; e = e->next, k++) {
    int dev = -100;
    if (cJSON_IsNumber(e) && e->valuedouble == (double)(int)e->valuedouble) dev = (int)e->valuedouble;
    else if (cJSON_IsString(e) && !strcmp(e->valuestring, "cpu")) dev = DC_ON_CPU;
    else if (cJSON_IsString(e) && !strcmp(e->valuestring, "disk")) dev = DC_ON_DISK;
    else if (cJSON_IsString(e) && !strncmp(e->valuestring, "cuda:", 5) && e->valuestring[5] >= '0' &&
             e->valuestring[5] <= '9' && !e->valuestring[6])
      dev = e->valuestring[5] - '0';
    if (dev == -100 || dev >= DC_MAX_DEVICES || (dev < 0 && dev != DC_ON_CPU && dev != DC_ON_DISK)) {
      char *v = cJSON_PrintUnformatted(e);
      st = dc_error(DC_ERR_FORMAT, "%s: module \"%s\": expected a device (a GPU number 0..%d, \"cuda:N\", \"cpu\" or "
                    "\"disk\"), got %s", path, e->string, DC_MAX_DEVICES - 1, v ? v : "?");
      cJSON_free(v);
      break;
    }
    strcpy(text, e->string);
    m[k] = (dc_map_entry){text, dev};
    text += strlen(text) + 1;
  }
  dc_json_free(&d);
  if (st) return dc_free(m), st;
  *out = m, *n = k;
  return NULL;
}

/* --host-memory against --offload-dir: weights in a dir stay on disk and
 * are read at each upload, so the default there is on-demand and pinned
 * (everything read into host memory at load) contradicts the dir. */
static dc_status *resolve_host_memory(const dc_compile_options *o, dc_memory_options *mem) {
  *mem = o->memory;
  if (!o->offload_dir || mem->offload == DC_OFFLOAD_NONE) return NULL; /* (the dir's own check names that) */
  if (mem->host_memory == DC_HOST_PINNED)
    return dc_error(DC_ERR_ARGUMENT,
                    "--host-memory pinned contradicts --offload-dir %s (the weights there stay on disk and are read "
                    "at each upload); drop one of them",
                    o->offload_dir);
  mem->host_memory = DC_HOST_ON_DEMAND;
  return NULL;
}

/* An option the frontend could not apply at this size (diffusers skips it
 * too, so the graph is right) is said on stderr, always: the user asked for
 * it and would otherwise believe it is on.  The dump header has the line. */
static void note_no_effect(const dc_compile_options *o, const dc_module *m, const char *key, const char *option) {
  static const char no_effect[] = "requested, no effect: ";
  const char *v = dc_module_get_meta(m, key);
  if (v && strncmp(v, no_effect, sizeof no_effect - 1) == 0)
    say(o, "diffc: note: %s has no effect: %s\n", option, v + sizeof no_effect - 1);
}

/* VAE slicing and tiling, and a text encoder's hidden state, mean
 * something only for the classes whose facts say so (an unsupported class
 * is left to the frontend's message). */
static dc_status *check_class_options(const dc_compile_options *o, const dc_folder *f) {
  unsigned asked = (o->vae_slicing ? DC_FACT_VAE_SLICING : 0) |
                   (o->vae_tiling || o->tile_size || o->tile_overlap ? DC_FACT_VAE_TILING : 0);
  char names[256];
  if (asked && f->desc && (f->desc->facts.options & asked) != asked)
    return dc_error(DC_ERR_ARGUMENT, "--vae-slicing, --vae-tiling, --tile-size and --tile-overlap apply to an "
                    "%s; %s is a %s", dc_class_names_with(asked, names, sizeof names), f->dir, f->class_name);
  if (o->vae_no_frame_batching && f->desc && !(f->desc->facts.options & DC_FACT_VAE_FRAME_BATCHING))
    return dc_error(DC_ERR_ARGUMENT, "--no-vae-frame-batching applies to %s (a video VAE); %s is a %s",
                    dc_class_names_with(DC_FACT_VAE_FRAME_BATCHING, names, sizeof names), f->dir, f->class_name);
  if ((o->clip_hidden_state || o->clip_final_norm) && f->desc && !(f->desc->facts.options & DC_FACT_CLIP_HIDDEN))
    return dc_error(DC_ERR_ARGUMENT, "--clip-hidden-state and --clip-final-norm apply to a %s; %s is a %s",
                    dc_class_names_with(DC_FACT_CLIP_HIDDEN, names, sizeof names), f->dir, f->class_name);
  return NULL;
}

/* A single-file checkpoint (the original CompVis / Stability layout). */
static int is_single_file(const char *path) {
  size_t n = strlen(path);
  return n > 12 && !strcmp(path + n - 12, ".safetensors") && dc_file_exists(path) && !dc_dir_exists(path);
}

/* Whether the options name a whole pipeline: a pipeline folder without
 * --component, or a single-file checkpoint of a pipeline (not a DiT's
 * transformer alone; a file diffc cannot read goes the pipeline way, whose
 * open reports why). */
int dc_compile_is_pipeline(const dc_compile_options *o) {
  if (is_single_file(o->model)) {
    int model = 0;
    dc_status_free(dc_single_file_holds_model(o->model, &model));
    return !model;
  }
  if (o->component || !dc_dir_exists(o->model)) return 0;
  char *mi = dc_path_join(o->model, "model_index.json");
  int yes = mi && dc_file_exists(mi);
  dc_free(mi);
  return yes;
}

/* The options a pipeline does not take (they name one model's inputs). */
static dc_status *check_pipeline_options(const dc_compile_options *o) {
  if (o->entry) return dc_error(DC_ERR_ARGUMENT, "--entry %s: a pipeline has no entries; compile a component with --component NAME", o->entry);
  if (o->clip_hidden_state || o->clip_final_norm)
    return dc_error(DC_ERR_ARGUMENT, "--clip-hidden-state and --clip-final-norm apply to a text encoder compiled alone; "
                    "a pipeline takes the hidden state its class uses (--clip-skip N moves it back)");
  if (o->nshapes)
    return dc_error(DC_ERR_ARGUMENT, "--input %s: a pipeline's inputs come from --height, --width and --batch; --input "
                    "applies to one component (--component NAME)", o->shapes[0].name);
  if (o->vae_no_frame_batching)
    return dc_error(DC_ERR_ARGUMENT, "--no-vae-frame-batching applies to a video VAE compiled alone (--component vae); "
                    "a pipeline decodes as diffusers does, in frame batches");
  return NULL;
}

/* The tokenizers and the scheduler are parsed now, so a bad file fails the
 * compile (naming the file and line) rather than the first run; the
 * tokenizers' length is the text encoders' sequence. */
static dc_status *check_pipeline_files(const dc_pipeline_source *src, int *tokens) {
  const dc_text_files *toks[2] = {&src->tokenizer, &src->tokenizer_2};
  /* CLIP tokenizers: SDXL's and SD3's two, Flux's first (its second is T5's) */
  int nclip = src->kind == DC_PIPE_COGVIDEOX ? 0 : src->kind == DC_PIPE_FLUX ? 1 : src->has_text_encoder_2 ? 2 : 1;
  *tokens = 0;
  for (int i = 0; i < nclip; i++) {
    dc_clip_tokenizer *t = NULL;
    DC_TRY(dc_clip_tokenizer_parse(toks[i], &t));
    int n = dc_clip_tokenizer_max_length(t);
    dc_clip_tokenizer_free(t);
    if (*tokens && n != *tokens)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: model_max_length %d, but the first tokenizer's is %d", toks[i]->origin,
                      n, *tokens);
    *tokens = n;
  }
  if (src->kind == DC_PIPE_COGVIDEOX) { /* its tokenizer is T5's */
    dc_t5_tokenizer *t = NULL;
    DC_TRY(dc_t5_tokenizer_parse(&src->tokenizer, &t));
    dc_t5_tokenizer_free(t);
  }
  dc_scheduler *s = NULL;
  DC_TRY(dc_scheduler_parse(&src->scheduler, NULL, &s));
  dc_scheduler_free(s);
  const cJSON *mean = cJSON_GetObjectItemCaseSensitive(src->vae.config.root, "latents_mean");
  if (mean && !cJSON_IsNull(mean))
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"latents_mean\" is set; the pipelines diffc runs do not use it yet "
                    "(diffusers' SDXL pipeline denormalises the latents with it)", src->vae.config.path);
  return NULL;
}

static dc_status *build_pipeline(const dc_compile_options *o, dc_compile_pipeline *pl, dc_module **m) {
  DC_TRY(check_pipeline_options(o));
  if (is_single_file(o->model)) {
    if (o->component || o->variant)
      return dc_error(DC_ERR_ARGUMENT, "%s is a single-file checkpoint: --component and --variant apply to folders",
                      o->model);
    DC_TRY(dc_single_file_open(o->model, o->config_dir, &pl->src));
    if (o->verbose) say(o, "diffc: %s: a %s checkpoint\n", o->model, pl->src.family);
  } else {
    if (o->config_dir) return dc_error(DC_ERR_ARGUMENT, "--config %s applies to a single-file checkpoint", o->config_dir);
    DC_TRY(dc_pipeline_source_open_folder(o->model, o->variant, &pl->src));
  }
  pl->open = 1;
  if (pl->src.has_safety_checker)
    say(o, "diffc: note: %s has a safety_checker; diffc does not run it\n", o->model);
  int tokens = 0;
  DC_TRY(check_pipeline_files(&pl->src, &tokens));
  dc_pipeline_build_options bo = {.height = o->height, .width = o->width, .batch = o->batch, .tokens = tokens,
                                  .clip_skip = o->clip_skip, .vae_slicing = o->vae_slicing,
                                  .vae_tiling = o->vae_tiling, .tile_size = o->tile_size,
                                  .tile_overlap = o->tile_overlap};
  bo.max_sequence_length = o->max_sequence_length;
  bo.num_frames = o->num_frames;
  DC_TRY(dc_pipeline_build(&pl->src, &bo, m, &pl->info));
  if (o->verbose) say(o, "diffc: %s: %s, %d nodes\n", o->model, pl->src.class_name, (*m)->nnodes);
  return NULL;
}

/* One model: the folder's class builds it. */
static dc_status *build_model(const dc_compile_options *o, dc_folder *f, dc_module **m) {
  if (o->height || o->width || o->batch || o->clip_skip || o->max_sequence_length || o->num_frames)
    return dc_error(DC_ERR_ARGUMENT, "--height, --width, --batch, --clip-skip, --max-sequence-length and --num-frames "
                    "apply to a pipeline folder; for one model, give its input shapes with --input NAME=DIMS");
  if (is_single_file(o->model)) { /* a DiT's transformer alone */
    if (o->component || o->variant)
      return dc_error(DC_ERR_ARGUMENT, "%s is a single-file checkpoint: --component and --variant apply to folders",
                      o->model);
    DC_TRY(dc_single_file_open_model(o->model, o->config_dir, f));
  } else {
    if (o->config_dir)
      return dc_error(DC_ERR_ARGUMENT, "--config %s applies to a single-file checkpoint", o->config_dir);
    dc_folder_options fo = {o->component, o->variant};
    DC_TRY(dc_folder_open(o->model, &fo, f));
  }
  if (o->verbose) say(o, "diffc: %s: %s, %d tensors in %d file(s)\n", f->dir, f->class_name, f->nentries, f->nshards);
  dc_build_options bo = {.entry = o->entry,
                         .shapes = o->shapes,
                         .nshapes = o->nshapes,
                         .vae_slicing = o->vae_slicing,
                         .vae_tiling = o->vae_tiling,
                         .tile_size = o->tile_size,
                         .tile_overlap = o->tile_overlap,
                         .vae_no_frame_batching = o->vae_no_frame_batching,
                         .clip_hidden_index = o->clip_hidden_state ? o->clip_hidden_index : -1,
                         .clip_hidden_final_norm = o->clip_final_norm};
  DC_TRY(check_class_options(o, f));
  DC_TRY(dc_frontend_build(f, &bo, m));
  if (o->verbose) say(o, "diffc: frontend built %d nodes\n", (*m)->nnodes);
  return NULL;
}

dc_status *dc_compile_build_frontend(const dc_compile_options *o, dc_folder *f, dc_compile_pipeline *pl,
                                     dc_module **m) {
  if (dc_compile_is_pipeline(o)) return build_pipeline(o, pl, m);
  return build_model(o, f, m);
}

/* The module, and (fit != NULL) the device bytes each offload alternative
 * would need (passes/fit.c), from the frontend graph before the passes. */
/* Layerwise casting writes the converted weights beside the plan, then
 * --offload-dir copies every offloaded group into its own file and points
 * the module there: when the plan reads nothing from the weights file any
 * more, it goes (a 12B model's fp8 weights would otherwise sit on disk
 * twice, 8 GiB of them never read). */
static dc_status *drop_unread_cast_weights(const dc_compile_options *o, const dc_module *m, const char *plan_path) {
  char *wpath = dc_asprintf("%s.weights.safetensors", plan_path);
  if (!wpath) return dc_nomem("naming the weights file");
  int read = 0;
  for (int32_t i = 0; i < m->nfiles; i++) read |= !strcmp(m->files[i].path, wpath);
  char *abs = read ? NULL : dc_path_absolute(wpath);
  for (int32_t i = 0; abs && i < m->nfiles; i++) read |= !strcmp(m->files[i].path, abs);
  if (!read && dc_file_exists(wpath) && unlink(wpath) == 0 && o->verbose)
    say(o, "diffc: %s: removed, every weight it held is in the offload dir\n", wpath);
  dc_free(abs);
  dc_free(wpath);
  return NULL;
}

static dc_status *compile_module(const dc_compile_options *o, dc_folder *f, dc_compile_pipeline *pl, dc_module **m,
                                  dc_buf *fit, const char *plan_path) {
  memset(f, 0, sizeof *f);
  *m = NULL;
  DC_TRY(dc_memory_options_check(&o->memory));
  dc_memory_options mem;
  DC_TRY(resolve_host_memory(o, &mem));
  mem.no_hoist = o->no_hoist;
  if ((o->tile_size || o->tile_overlap) && !o->vae_tiling)
    return dc_error(DC_ERR_ARGUMENT, "--tile-size and --tile-overlap need --vae-tiling");
  dc_progress pr = progress_of(o);
  dc_progress_stage(&pr, "building graph");
  if (dc_compile_is_pipeline(o)) DC_TRY(build_pipeline(o, pl, m));
  else DC_TRY(build_model(o, f, m));
  note_no_effect(o, *m, "vae_tiling", "--vae-tiling");
  note_no_effect(o, *m, "vae_slicing", "--vae-slicing");
  dc_progress_stage(&pr, "passes");
  if (fit) DC_TRY(dc_fit_table(*m, &o->memory, fit));
  DC_TRY(run_passes(o, &mem, *m));
  if (plan_path) { /* layerwise casting: the converted weights beside the plan */
    char *wpath = dc_asprintf("%s.weights.safetensors", plan_path);
    if (!wpath) return dc_nomem("naming the weights file");
    dc_status *st = dc_store_cast_weights(*m, wpath, o->verbose, &pr);
    dc_free(wpath);
    DC_TRY(st);
  }
  int on_disk = 0;
  for (int32_t w = 0; w < (*m)->nweights; w++) on_disk |= (*m)->weights[w].place == DC_PLACE_DISK;
  if (on_disk && !o->offload_dir)
    return dc_error(DC_ERR_ARGUMENT, "--device-map put modules on disk: add --offload-dir DIR for their files");
  if (!o->offload_dir) return NULL;
  dc_offload_store_report r;
  /* with --offload, every offloaded group goes to the dir; with only a
   * device map, the groups of the modules it put on disk */
  DC_TRY(dc_store_offload_groups(*m, o->offload_dir, o->memory.offload == DC_OFFLOAD_NONE, o->verbose, &pr, &r));
  if (o->verbose) say(o, "diffc: --offload-dir %s: %d group file(s) written, %d reused\n", o->offload_dir, r.written, r.reused);
  return plan_path ? drop_unread_cast_weights(o, *m, plan_path) : NULL;
}

dc_status *dc_compile_module(const dc_compile_options *o, dc_folder *f, dc_module **m) {
  dc_compile_pipeline pl; /* a pipeline's module holds nothing of its source */
  memset(&pl, 0, sizeof pl);
  dc_status *st = compile_module(o, f, &pl, m, NULL, NULL);
  dc_compile_pipeline_close(&pl);
  return st;
}

void dc_compile_pipeline_close(dc_compile_pipeline *pl) {
  if (pl->open) dc_pipeline_source_close(&pl->src);
  memset(pl, 0, sizeof *pl);
}

static dc_status *emit_kernels(const dc_compile_options *o, const dc_module *m, dc_plan_kernels *k) {
  dc_cpu_target t;
  DC_TRY(dc_cpu_target_named(o->cpu, &t));
  dc_progress pr = progress_of(o);
  dc_cpu_emit_options eo = {.verbose = o->verbose, .cache_dir = o->kernel_cache, .no_cache = o->no_kernel_cache,
                            .conv_algo = (dc_conv_algo)conv_algo(o), .progress = &pr};
  dc_status *st = dc_emit_cpu_kernels(m, &t, &eo, k);
  dc_cpu_target_deinit(&t);
  return st;
}

static dc_status *emit_cuda(const dc_compile_options *o, const target_ctx *t, const dc_module *m, dc_plan_cuda *c,
                            dc_compile_report *rep) {
  dc_progress pr = progress_of(o);
  dc_cuda_emit_options eo = {.compute = t->compute,
                             .sm_count = t->sm_count,
                             .archs = t->archs,
                             .narchs = t->narchs,
                             .cache_dir = o->kernel_cache,
                             .no_cache = o->no_kernel_cache,
                             .verbose = o->verbose,
                             .progress = &pr};
  dc_cuda_emit_report r;
  dc_status *st = dc_emit_cuda_kernels(m, t->nv, &eo, c, &r);
  dc_progress_pause(&pr); /* the report's lines follow */
  dc_cuda_emit_report_print(&r, t->nv, &eo, stderr);
  if (rep) {
    rep->cuda_kernels = r.nkernels;
    rep->cuda_compiles = r.ncompiles;
    rep->cuda_cached = r.ncached;
    rep->cuda_warnings = r.nwarnings;
  }
  dc_cuda_emit_report_deinit(&r);
  return st;
}

static dc_status *emit_target(const dc_compile_options *o, const target_ctx *t, const dc_module *m, dc_plan *plan,
                              dc_compile_report *rep) {
  if (t->cuda) return emit_cuda(o, t, m, &plan->cuda, rep);
  return emit_kernels(o, m, &plan->kernels);
}

/* The PIPE section: what the host needs to run the phases (pipeline/
 * generate.c reads it) and the tokenizer and scheduler files. */
static char *pipeline_json(const dc_compile_options *o, const dc_compile_pipeline *pl) {
  const dc_pipeline_info *pi = &pl->info;
  cJSON *j = cJSON_CreateObject();
  if (!j) return NULL;
  static const char *const kinds[] = {"sd", "sdxl", "flux", "sd3", "cogvideox"};
  cJSON_AddStringToObject(j, "class", pl->src.class_name);
  cJSON_AddStringToObject(j, "kind", kinds[pi->kind]);
  cJSON_AddBoolToObject(j, "sdxl", pi->sdxl);
  cJSON_AddNumberToObject(j, "t5_tokens", (double)pi->t5_tokens);
  cJSON_AddBoolToObject(j, "guidance_embeds", pi->guidance_embeds);
  cJSON_AddBoolToObject(j, "has_uncond", pi->has_uncond);
  cJSON_AddNumberToObject(j, "patch", (double)pi->patch);
  cJSON_AddNumberToObject(j, "height", (double)pi->height);
  cJSON_AddNumberToObject(j, "width", (double)pi->width);
  cJSON_AddNumberToObject(j, "batch", (double)pi->batch);
  cJSON_AddNumberToObject(j, "tokens", (double)pi->tokens);
  cJSON_AddNumberToObject(j, "vae_scale_factor", (double)pi->vae_scale);
  cJSON_AddNumberToObject(j, "latent_channels", (double)pi->latent_channels);
  cJSON_AddNumberToObject(j, "scaling_factor", pi->scaling_factor);
  cJSON_AddNumberToObject(j, "shift_factor", pi->shift_factor);
  cJSON_AddBoolToObject(j, "force_zeros_for_empty_prompt", pl->src.force_zeros_for_empty_prompt);
  cJSON_AddBoolToObject(j, "has_safety_checker", pl->src.has_safety_checker);
  cJSON_AddNumberToObject(j, "clip_skip", o->clip_skip);
  if (pi->kind == DC_PIPE_COGVIDEOX) {
    cJSON_AddNumberToObject(j, "num_frames", (double)pi->num_frames);
    cJSON_AddNumberToObject(j, "latent_frames", (double)pi->latent_frames);
    cJSON_AddNumberToObject(j, "frames", (double)pi->frames);
    cJSON_AddNumberToObject(j, "vae_scale_factor_temporal", (double)pi->vae_scale_temporal);
  }
  char *s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return s;
}

static dc_status *add_files(dc_text_files *out, const char *dir, const dc_text_files *in) {
  for (int i = 0; i < in->nfiles; i++) {
    char name[300];
    snprintf(name, sizeof name, "%s/%s", dir, in->files[i].name);
    DC_TRY(dc_text_files_add(out, name, in->files[i].data, in->files[i].size));
  }
  return NULL;
}

static dc_status *pipeline_section(const dc_compile_options *o, const dc_compile_pipeline *pl, dc_plan *plan) {
  char *json = pipeline_json(o, pl);
  if (!json) return dc_nomem("writing the pipeline section");
  plan->pipeline_json = dc_strdup(json);
  cJSON_free(json);
  plan->pipeline_files.origin = dc_strdup(pl->src.origin);
  if (!plan->pipeline_json || !plan->pipeline_files.origin) return dc_nomem("writing the pipeline section");
  DC_TRY(add_files(&plan->pipeline_files, "tokenizer", &pl->src.tokenizer));
  DC_TRY(add_files(&plan->pipeline_files, "tokenizer_2", &pl->src.tokenizer_2));
  DC_TRY(add_files(&plan->pipeline_files, "tokenizer_3", &pl->src.tokenizer_3));
  return add_files(&plan->pipeline_files, "scheduler", &pl->src.scheduler);
}

static dc_status *emit(const dc_compile_options *o, const target_ctx *t, const dc_folder *f,
                       const dc_compile_pipeline *pl, dc_module *m, const dc_buf *fit, const dc_buf *budget,
                       const char *plan_path, dc_compile_report *rep) {
  dc_buf text;
  dc_buf_init(&text);
  dc_status *st = dc_print(m, &text);
  if (!st && o->dump_ir) st = write_text(o->dump_ir, &text);
  if (!st) {
    dc_buf_u8(&text, 0);
    st = dc_buf_status(&text, "printing the IR");
  }
  char *opts = st ? NULL : options_json(o, t, pl->open ? pl->src.origin : f->dir, fit, budget);
  if (!st && !opts) st = dc_nomem("writing the plan options");
  if (!st) {
    dc_plan plan = {.target = t->cuda ? DC_TARGET_CUDA : DC_TARGET_CPU, .options_json = opts,
                    .ir_text = (char *)text.data, .module = m, .sign_secret = o->sign_secret};
    if (pl->open) st = pipeline_section(o, pl, &plan);
    if (!st) st = emit_target(o, t, m, &plan, rep);
    dc_progress pr = progress_of(o);
    if (!st) dc_progress_stage(&pr, "writing plan");
    if (!st) st = dc_plan_write(plan_path, &plan);
    dc_plan_kernels_deinit(&plan.kernels);
    dc_plan_cuda_deinit(&plan.cuda);
    dc_free(plan.pipeline_json);
    dc_text_files_free(&plan.pipeline_files);
  }
  if (opts) cJSON_free(opts);
  dc_buf_deinit(&text);
  return st;
}

/* --target cuda with --compute-dtype bf16/f16: activations stored in it
 * between kernels, and (without --storage-dtype, and outside a budget
 * search, which chooses the storage dtype itself) every float weight too,
 * as diffusers' pipe.to(dtype): no forward casts a weight. */
static void compute_defaults(dc_compile_options *o, const target_ctx *t) {
  o->memory.constants_as_weights = t->cuda; /* the CUDA runtime places no constants */
  if (!t->cuda || t->compute == DC_CUDA_COMPUTE_F32) return;
  dc_dtype d = t->compute == DC_CUDA_COMPUTE_BF16 ? DT_BF16 : DT_F16;
  o->memory.activation = d;
  if (o->storage_dtype_given || o->memory_budget) return;
  o->memory.storage = d;
  o->memory.storage_all = 1;
}

dc_status *dc_compile(const dc_compile_options *given, const char *plan_path, dc_compile_report *rep) {
  double t0 = dc_now_seconds();
  dc_compile_options base = *given;  /* with what --compute-dtype implies */
  dc_compile_options chosen = *given; /* with --memory-budget, the options the search chose */
  const dc_compile_options *o = &chosen, *user = &base;
  if (rep) memset(rep, 0, sizeof *rep);
  int unused;
  DC_TRY(debug_on(o->debug, "", &unused)); /* bad options fail before any work */
  target_ctx t;
  dc_status *st = open_target(o, &t);
  if (!st) compute_defaults(&base, &t), chosen = base;
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_module *m = NULL;
  dc_buf fit;
  dc_buf_init(&fit);
  dc_compile_pipeline pl;
  memset(&pl, 0, sizeof pl);
  dc_buf budget;
  dc_buf_init(&budget);
  if (!st && user->memory_budget) st = dc_compile_budget(user, &chosen, &budget, NULL);
  else if (!st && (user->nallow_cast || user->calibration))
    st = dc_error(DC_ERR_ARGUMENT, "%s applies to --memory-budget", user->nallow_cast ? "--allow-cast" : "--calibration");
  if (!st) st = compile_module(o, &f, &pl, &m, &fit, plan_path);
  if (!st && user->memory_budget) st = dc_compile_budget_check(o, m);
  if (!st) {
    dc_buf_u8(&fit, 0);
    st = dc_buf_status(&fit, "the memory alternatives");
  }
  if (!st && budget.len) {
    dc_buf_u8(&budget, 0);
    st = dc_buf_status(&budget, "the budget search's summary");
  }
  if (!st) st = emit(o, &t, &f, &pl, m, &fit, &budget, plan_path, rep);
  if (!st && o->memory_timeline) st = dc_memory_timeline_write(m, NULL, o->memory_timeline);
  dc_buf_deinit(&fit);
  dc_buf_deinit(&budget);
  if (!st && rep) {
    dc_liveness l;
    st = dc_liveness_compute(m, &l);
    if (!st) {
      rep->steps = m->nnodes;
      for (int32_t i = 0; i < m->nnodes; i++) rep->cast_steps += m->nodes[i].op == OP_CAST;
      rep->weight_bytes = l.weight_bytes;
      rep->offloaded_weight_bytes = l.host_weight_bytes;
      rep->peak_activation_bytes = l.peak_bytes;
      rep->seconds = dc_now_seconds() - t0;
      dc_liveness_deinit(&l);
    }
  }
  close_target(&t);
  dc_module_destroy(m);
  dc_folder_close(&f);
  dc_compile_pipeline_close(&pl);
  return st;
}
