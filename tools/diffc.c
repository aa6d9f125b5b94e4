/* diffc — compile a diffusers model folder into a plan file.
 * A thin layer over the library: parse options, open the folder, build the
 * graph, run the pass pipeline, write the IR dump and the plan. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/emit_kernels.h"
#include "driver/compile.h"
#include "frontend/registry.h"
#include "passes/passes.h"
#include "pipeline/generate.h"
#include "plan/plan_sign.h"
#include "runtime/diffrun.h"


#define MAX_SHAPES 16

static const char usage[] =
    "usage: diffc MODEL_DIR -o PLAN [options]\n"
    "       diffc PIPELINE_DIR -o PLAN [--height H] [--width W] [--batch N] [options]\n"
    "       diffc CHECKPOINT.safetensors -o PLAN [--config DIR] [pipeline options]\n"
    "       diffc TRANSFORMER.safetensors -o PLAN [--config DIR] [--input NAME=DIMS ...] [options]\n"
    "       diffc keygen SECRETFILE PUBFILE\n"
    "       diffc inspect PLAN [--format text|json]\n"
    "\n"
    "Compiles a diffusers model folder (config.json + .safetensors weights, single file,\n"
    "sharded with an index, or a variant) into one plan file that diffrun executes.\n"
    "A pipeline folder (model_index.json: StableDiffusionPipeline, StableDiffusionXLPipeline,\n"
    "FluxPipeline, StableDiffusion3Pipeline)\n"
    "compiles whole: text encoders, the denoising loop and the VAE decoder in one plan that\n"
    "diffrun PLAN --prompt TEXT -o out.png runs; the memory options apply across components.\n"
    "A single-file checkpoint in the original CompVis/Stability layout (SD1.x, SD2.x, SDXL base)\n"
    "compiles the same way, its tensors read in place under diffusers' names; its configs,\n"
    "tokenizers and scheduler come from diffc's bundled defaults for the family it is, or from\n"
    "--config DIR (a diffusers pipeline folder of that family). So does Stability's SD3 / SD3.5\n"
    "file with CLIP-L and CLIP-G (no T5). Black Forest Labs' FLUX.1-dev / schnell file, or an SD3\n"
    "file of the transformer (and VAE), compiles as one model, the transformer, with diffusers'\n"
    "input names; --config DIR then names a pipeline folder with transformer/config.json, or the\n"
    "transformer's own folder.\n"
    "\n"
    "options:\n"
    "  -o, --output PLAN        where to write the plan (written to a temporary name, then renamed)\n"
    "  --component NAME         MODEL_DIR is a pipeline folder (model_index.json): compile only this\n"
    "                           component, e.g. unet, vae or text_encoder\n"
    "  --height H, --width W    pipeline: the image size in pixels, multiples of 8 (Flux, SD3: of 16)\n"
    "                           (default: the UNet's sample_size x the VAE's scale factor, as\n"
    "                           diffusers; Flux and SD3: 1024)\n"
    "  --batch N                pipeline: images per prompt (default 1)\n"
    "  --clip-skip N            pipeline: take the text encoder's hidden state N layers before the\n"
    "                           last, as diffusers' clip_skip (default 0)\n"
    "  --max-sequence-length N  Flux and SD3 pipelines: T5's prompt tokens, as diffusers'\n"
    "                           max_sequence_length (1..512; default 512 Flux, 256 SD3)\n"
    "  --config DIR             single-file checkpoint: take configs, tokenizers and scheduler from\n"
    "                           this diffusers pipeline folder instead of the bundled defaults\n"
    "  --no-hoist               pipeline: compute nothing once before the denoising loop (by\n"
    "                           default the text embeddings' cross-attention keys and values and\n"
    "                           SDXL's added-condition embedding are computed once per image and\n"
    "                           kept; the dump's \"hoist\" line says the bytes held and FLOPs saved)\n"
    "  --variant NAME           read diffusion_pytorch_model.NAME.safetensors (e.g. fp16, bf16;\n"
    "                           model.NAME.safetensors for a transformers model)\n"
    "  --entry NAME             what to compile: one of the model class's entries (listed below;\n"
    "                           without --entry, the one marked default)\n"
    "  --input NAME=DIMS        static shape of an input, e.g. --input sample=2x4x64x64;\n"
    "                           repeatable. Defaults: batch 1, the config's sample_size, 77 tokens\n"
    "  --target cpu|cuda        the plan's target (default cpu). cuda compiles every kernel with\n"
    "                           NVRTC from the CUDA toolkit (libnvrtc.so.13, looked for in\n"
    "                           $CUDA_HOME, $CUDA_PATH, the loader's path, /usr/local/cuda); no GPU\n"
    "                           is needed to compile\n"
    "  --cpu NAME               cpu target: CPU the kernels are compiled for: native = this\n"
    "                           machine's features (the default; diffrun refuses the plan on a CPU\n"
    "                           lacking them); generic = a portable x86-64 baseline (SSE2); an\n"
    "                           x86-64 level x86-64-v2|x86-64-v3 (AVX2, FMA)|x86-64-v4 (AVX-512);\n"
    "                           or a CPU, tuned for, using its level's features: haswell, skylake,\n"
    "                           znver1, znver2, znver3 (v3), skylake-avx512, icelake-server,\n"
    "                           sapphirerapids (v4). An AVX-512 machine runs v3 code, so it can\n"
    "                           measure AVX2 kernels\n"
    "  --conv-algo auto|direct|winograd\n"
    "                           cpu target: 3x3 stride-1 convolutions (conv3d: 3x3 stride 1 in H\n"
    "                           and W) by Winograd F(2x2,3x3) where it pays (auto, the default:\n"
    "                           enough channels and pixels), never (direct: the im2col GEMM,\n"
    "                           the reference's order of sums), or wherever it is correct\n"
    "                           (winograd)\n"
    "  --cuda-arch LIST         cuda target: architectures, comma-separated: sm_NN for a cubin,\n"
    "                           compute_NN for PTX that newer GPUs compile when loading\n"
    "                           (default sm_80,sm_90,compute_90)\n"
    "  --cuda-sm-count N        cuda target: the GPU's streaming multiprocessors, for which the\n"
    "                           matrix kernels choose their tiles (default: GPU 0's count when a CUDA\n"
    "                           driver and GPU are present, else 132, an H100 / H200: the default\n"
    "                           assumes Hopper when no GPU is present); recorded in the plan, and\n"
    "                           diffrun warns when the GPU it runs on has another count\n"
    "  --compute-dtype f32|bf16|f16\n"
    "                           precision of the matrix work (conv2d, linear, attention): f32 (the\n"
    "                           default; plain FMA, no TF32), or bf16/f16 on tensor cores with f32\n"
    "                           accumulation (cuda target only; the cpu target computes in f32).\n"
    "                           bf16/f16 also store the values kernels pass each other in that dtype\n"
    "                           (statistics, softmax and sums stay f32; plan inputs and outputs f32)\n"
    "                           and, without --storage-dtype, every float weight\n"
    "  --kernel-cache DIR       where compiled kernels (CPU objects, CUDA images) are cached, keyed by\n"
    "                           a hash of everything the compiler's output depends on (default\n"
    "                           $DIFFC_CACHE_DIR, else $XDG_CACHE_HOME/diffc, else ~/.cache/diffc)\n"
    "  --no-kernel-cache        compile every kernel, read and write no cache\n"
    "\n"
    "memory (each shows in the IR dump: what moved where, when, and the resulting peak):\n"
    "  --offload none|model|sequential|group\n"
    "                           keep weights in host memory and copy them into device memory before\n"
    "                           use: model = all at the start, held for the run; sequential = each\n"
    "                           layer right before use, freed after (diffusers\n"
    "                           enable_sequential_cpu_offload); group = by --group-level (diffusers\n"
    "                           enable_group_offload)\n"
    "  --group-level block|leaf group offload (required with it): block = --blocks-per-group\n"
    "                           consecutive entries of each block list (down_blocks.N, up_blocks.N;\n"
    "                           the rest stays resident); leaf = each conv/linear/norm module its own\n"
    "                           group\n"
    "  --blocks-per-group N     block level: blocks per group (default 1)\n"
    "  --prefetch[=DEPTH]       group offload: issue each group's copy DEPTH groups ahead (default 1)\n"
    "                           on the copy stream, so it overlaps compute\n"
    "  --offload-dir DIR        offloaded groups' weights live in DIR, one safetensors file per group\n"
    "                           named by a hash of its content (a stale or partial file is never used)\n"
    "  --host-memory pinned|on-demand\n"
    "                           offloaded weights: pinned = read into page-locked host memory at load\n"
    "                           (fastest copies; the default without --offload-dir); on-demand = read\n"
    "                           from the plan's files at each upload through a small pinned bounce\n"
    "                           buffer, so host memory stays small (diffusers low_cpu_mem_usage; the\n"
    "                           default with --offload-dir)\n"
    "  --storage-dtype fp8_e4m3|fp8_e5m2|bf16|fp16|fp32\n"
    "                           store conv/linear weights in this dtype (in host memory, over the copy\n"
    "                           and on the device; written beside the plan as PLAN.weights.safetensors);\n"
    "                           the kernels upcast as they load (diffusers enable_layerwise_casting).\n"
    "                           fp32, the default, casts nothing: weights stay as the checkpoint has them\n"
    "                           (but cuda --compute-dtype bf16/f16 stores every float weight in it)\n"
    "  --skip-cast PATTERN      modules whose path (or an ancestor's) matches this regex keep their\n"
    "                           dtype; repeatable; replaces the defaults pos_embed, patch_embed, norm,\n"
    "                           ^proj_in$, ^proj_out$ (a UNet always adds norm)\n"
    "  --layout nchw|nhwc       nhwc = channels_last: convolution regions run in NHWC with weights\n"
    "                           repacked at compile time, transposes only at region edges (the dump\n"
    "                           shows every value's layout); nchw, the default, is PyTorch's layout\n"
    "  --device-map balanced|auto|sequential|FILE.json\n"
    "                           place modules (down_blocks.N, mid_block..., conv_in) across GPUs, cpu\n"
    "                           and disk under --max-memory, as accelerate does: sequential fills GPU\n"
    "                           0 first; balanced/auto spread the weights evenly; FILE.json maps module\n"
    "                           paths to 0, 1, \"cuda:N\", \"cpu\" or \"disk\". Data crossing devices moves\n"
    "                           by explicit transfer steps; cpu/disk modules run on GPU 0 with their\n"
    "                           weights uploaded before use. The dump prints the map and each device's peak\n"
    "  --memory-budget SIZE     find the fastest plan whose device bytes (resident weights + the arena\n"
    "                           peak) fit SIZE per device (--max-memory N=SIZE overrides GPU N): diffc\n"
    "                           compiles every combination of --offload (with its group levels,\n"
    "                           blocks per group 1/2/4 and prefetch 0/1/2), --vae-slicing and\n"
    "                           --vae-tiling (where they change the graph), --no-hoist (pipelines),\n"
    "                           --host-memory on-demand (only when the offloaded weights exceed\n"
    "                           --max-memory cpu=), --allow-cast's dtypes and, when --max-memory names\n"
    "                           several GPUs and no --device-map is given, --device-map sequential and\n"
    "                           balanced; predicts each one's time\n"
    "                           with its cost model, and prints the choice (the exact options), its\n"
    "                           peak and time, two runners-up with why they lost, and how many\n"
    "                           candidates it tried in what time (also in the plan's options, which\n"
    "                           diffrun --info shows). The options it chooses cannot be given with it\n"
    "                           (diffc refuses them; --layout, --device-map, --max-memory and\n"
    "                           --skip-cast stay as given). When nothing fits, the error names the\n"
    "                           smallest device peak diffc can reach and its options\n"
    "  --allow-cast LIST        --memory-budget may also store conv/linear weights in these dtypes\n"
    "                           (comma-separated: fp8_e4m3, fp8_e5m2, bf16, fp16), as --storage-dtype\n"
    "  --calibration FILE       the cost model's rates (diffrun --calibrate writes them); default\n"
    "                           calibration-cpu.json / calibration-cuda.json in the kernel cache's\n"
    "                           folder when present, else built-in estimates, which diffc says\n"
    "  --max-memory LIST        budgets, e.g. 0=4GiB,1=4GiB,cpu=32GiB (GiB/MiB: powers of 1024; GB/MB:\n"
    "                           of 1000, as accelerate parses them); each device's weights + activations\n"
    "                           must fit, or diffc says by how much they do not\n"
    "  --vae-slicing            VAE classes (below): encode/decode one sample of the batch at a time\n"
    "  --vae-tiling             VAE classes (below): diffusers' tiled encode/decode above the tile size\n"
    "  --tile-size PX           tile size in image pixels (default: the config's sample_size; a video VAE\n"
    "                           with sample_height/sample_width: half of each, and PX sets both)\n"
    "  --tile-overlap F         tile overlap factor (default 0.25; a video VAE: 1/6 for rows and 1/5 for\n"
    "                           columns, and F sets both)\n"
    "  --no-vae-frame-batching  video VAE classes (below): run the encoder/decoder over all frames in one\n"
    "                           pass instead of diffusers' batches of 8 frames (encode) / 2 latent frames\n"
    "                           (decode) with chained conv caches; the output then differs from\n"
    "                           diffusers' encode/decode (it is vae.encoder/vae.decoder on the whole input)\n"
    "  --clip-hidden-state K    text encoders (below): also output hidden_state, transformers'\n"
    "                           hidden_states[K] (0: the embeddings, K: after encoder layer K)\n"
    "  --clip-final-norm        put hidden_state through final_layer_norm (SD's clip_skip does)\n"
    "\n"
    "  --memory-report[=FILE]   after writing the plan, write its memory report to FILE (bare, or\n"
    "                           FILE '-': stdout): the peak per device and what is live at it, by\n"
    "                           kind and by module; offloaded weights and where they wait; bytes\n"
    "                           copied per run, phase and image; workspace outside the arena\n"
    "  --format text|json       the memory report as text (the default, human units) or JSON\n"
    "                           (sizes in bytes; the fields are in docs/memory-report.md)\n"
    "  --dump-ir FILE           write the final IR text (types, bytes, live ranges, peak) to FILE\n"
    "                           ('-' for stdout)\n"
    "  --memory-timeline FILE.svg\n"
    "                           draw the plan's device memory over the schedule as an SVG picture:\n"
    "                           bytes per step stacked by kind (resident weights, held through the\n"
    "                           loop, uploaded weights in flight, activations), the arena's\n"
    "                           high-water mark, the peak with its op and module path, each upload\n"
    "                           with its prefetch distance, the phases and top-level modules\n"
    "  --dump-after PASS        print the IR to stderr after PASS (frontend, shape-infer,\n"
    "                           fuse-norm-act, fuse-epilogue, cast-weights, layout, dce, place,\n"
    "                           offload, hoist, memplan, all)\n"
    "  --debug LIST             trace the compiler's decisions to stderr; channels: memplan (which\n"
    "                           placement won, then each value's arena offset and why: in place\n"
    "                           over its parent, or the lowest offset free over its lifetime)\n"
    "  --sign SECRETFILE        sign the plan with this Ed25519 key (made by diffc keygen; it must\n"
    "                           be mode 0600): diffrun --trusted-keys then runs it only if one of\n"
    "                           its keys made the signature and the plan is unchanged since\n"
    "                           signing\n"
    "  --list-passes            print the pass pipeline and exit\n"
    "  --no-progress            draw no progress line (one is drawn on stderr only when it is a\n"
    "                           terminal: stages, kernels compiled and cached, weight bytes)\n"
    "  -v, --verbose            print each stage's details and timings (and NVRTC's warnings)\n"
    "  -h, --help               this help\n"
    "  --version                print the version\n"
    "\n"
    "Model classes, their entries, and inputs -> outputs by the diffusers forward-argument names\n"
    "(timestep is [B]; --input overrides each input's default shape):\n";

/* After the classes, which come from the frontend's registry. */
static const char usage_tail[] =
    "Activations are fp32; bf16/fp16/fp8 weights are converted to fp32 when read (and, with\n"
    "--compute-dtype bf16|f16, rounded to that precision inside the matrix kernels).\n"
    "\n"
    "diffc keygen SECRETFILE PUBFILE makes an Ed25519 key pair for --sign: the secret key\n"
    "(mode 0600; keep it private) and the public key, one line of 64 hex digits and a comment,\n"
    "which is what diffrun --trusted-keys reads (any number of such lines). It never\n"
    "overwrites a file. A plan is machine code: run plans from others only if signed by a key\n"
    "you trust.\n"
    "\n"
    "diffc inspect PLAN prints the memory report of a plan already written (as --memory-report\n"
    "does after compiling); --format json prints it as JSON. It reads the plan and checks its\n"
    "weight files' sizes and headers, but runs nothing and needs no GPU.\n";

static void print_usage(void) {
  dc_buf b;
  dc_buf_init(&b);
  dc_classes_describe(&b);
  fputs(usage, stdout);
  fwrite(b.data, 1, b.len, stdout);
  fputs(usage_tail, stdout);
  printf("\ntargets of this build: %s\n", dc_build_targets());
  dc_buf_deinit(&b);
}

typedef struct {
  const char *model, *output, *component, *variant, *entry, *target, *dump_ir, *dump_after, *debug, *cpu, *conv_algo;
  const char *cuda_arch, *compute, *kernel_cache, *offload_dir, *sign, *config_dir, *memory_timeline;
  const char *memory_report; /* --memory-report[=FILE]: "-" for stdout */
  int report_json;           /* --format json */
  const char *format;        /* --format as given */
  dc_input_shape shapes[MAX_SHAPES];
  int nshapes, verbose, no_progress, no_kernel_cache, vae_slicing, vae_tiling, vae_no_frame_batching;
  int clip_hidden_state, clip_hidden_index, clip_final_norm;
  unsigned seen_memory_options; /* bit k: memory_arg's takes_value[k] was given */
  int64_t tile_size, height, width, batch;
  int clip_skip, no_hoist, max_sequence_length, cuda_sm_count;
  double tile_overlap;
  dc_memory_options memory;
  const char *skip[32];
  dc_map_entry *map; /* --device-map FILE.json, read */
  uint64_t memory_budget;  /* --memory-budget */
  dc_dtype allow_cast[4];  /* --allow-cast */
  int nallow_cast;
  const char *calibration; /* --calibration */
} options;

static dc_status *parse_dims(const char *arg, dc_input_shape *s) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg)
    return dc_error(DC_ERR_ARGUMENT, "--input %s: expected NAME=DIMS, e.g. sample=2x4x64x64", arg);
  s->name = dc_strndup(arg, (size_t)(eq - arg));
  if (!s->name) return dc_nomem("parsing arguments");
  s->rank = 0;
  const char *p = eq + 1;
  while (*p) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 1 || errno || s->rank == DC_MAX_DIMS || (*end && *end != 'x' && *end != ','))
      return dc_error(DC_ERR_ARGUMENT, "--input %s: DIMS must be positive integers separated by 'x' (at most %d)", arg,
                      DC_MAX_DIMS);
    s->dims[s->rank++] = v;
    p = *end ? end + 1 : end;
  }
  if (s->rank == 0) return dc_error(DC_ERR_ARGUMENT, "--input %s: no dimensions", arg);
  return NULL;
}

/* A whole-string integer in [lo, hi], or an error naming the option. */
static dc_status *int_arg(const char *opt, const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi)
    return dc_error(DC_ERR_ARGUMENT, "%s %s: expected an integer from %lld to %lld", opt, s, lo, hi);
  return *out = v, NULL;
}

/* The memory options; *used = 0 when `a` is none of them. */
static dc_status *memory_arg(int argc, char **argv, int *i, options *o, int *used) {
  const char *a = argv[*i];
  long long v = 0;
  *used = 1;
  if (!strcmp(a, "--vae-slicing")) return o->vae_slicing = 1, NULL;
  if (!strcmp(a, "--vae-tiling")) return o->vae_tiling = 1, NULL;
  if (!strcmp(a, "--no-vae-frame-batching")) return o->vae_no_frame_batching = 1, NULL;
  if (!strcmp(a, "--prefetch")) return o->memory.prefetch = 1, NULL;
  if (!strncmp(a, "--prefetch=", 11)) {
    DC_TRY(int_arg("--prefetch", a + 11, 1, 64, &v));
    return o->memory.prefetch = (int)v, NULL;
  }
  static const char *const takes_value[] = {"--offload",   "--group-level",  "--blocks-per-group", "--offload-dir",
                                            "--tile-size", "--tile-overlap", "--storage-dtype",    "--skip-cast",
                                            "--host-memory", "--layout", "--device-map", "--max-memory"};
  int k = -1;
  for (int j = 0; j < (int)(sizeof takes_value / sizeof takes_value[0]); j++)
    if (!strcmp(a, takes_value[j])) k = j;
  if (k < 0) return *used = 0, NULL;
  if (*i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffc --help)", a);
  const char *s = argv[++*i];
  if (k != 7 && (o->seen_memory_options & (1u << k))) /* --skip-cast (7) is the repeatable one */
    return dc_error(DC_ERR_ARGUMENT, "%s given twice: give it once", a);
  o->seen_memory_options |= 1u << k;
  switch (k) {
    case 0:
      for (int kind = DC_OFFLOAD_NONE; kind <= DC_OFFLOAD_GROUP; kind++)
        if (!strcmp(s, dc_offload_name((dc_offload_kind)kind))) return o->memory.offload = (dc_offload_kind)kind, NULL;
      return dc_error(DC_ERR_ARGUMENT, "--offload %s: expected none, model, sequential or group", s);
    case 1:
      if (!strcmp(s, "block")) return o->memory.group_level = DC_GROUP_BLOCK, NULL;
      if (!strcmp(s, "leaf")) return o->memory.group_level = DC_GROUP_LEAF, NULL;
      return dc_error(DC_ERR_ARGUMENT, "--group-level %s: expected block or leaf", s);
    case 2:
      DC_TRY(int_arg("--blocks-per-group", s, 1, 1 << 20, &v));
      return o->memory.blocks_per_group = (int)v, NULL;
    case 3: return o->offload_dir = s, NULL;
    case 4:
      DC_TRY(int_arg("--tile-size", s, 1, 1 << 20, &v));
      return o->tile_size = v, NULL;
    case 6: {
      static const struct {
        const char *name;
        dc_dtype d;
      } st[] = {{"fp8_e4m3", DT_F8_E4M3}, {"fp8_e5m2", DT_F8_E5M2}, {"bf16", DT_BF16}, {"fp16", DT_F16}, {"fp32", DT_F32}};
      for (size_t j = 0; j < sizeof st / sizeof st[0]; j++)
        if (!strcmp(s, st[j].name)) return o->memory.storage = st[j].d, NULL;
      return dc_error(DC_ERR_ARGUMENT, "--storage-dtype %s: expected fp8_e4m3, fp8_e5m2, bf16, fp16 or fp32", s);
    }
    case 7:
      if (o->memory.nskip_cast == 32) return dc_error(DC_ERR_ARGUMENT, "--skip-cast: at most 32 patterns");
      o->skip[o->memory.nskip_cast++] = s;
      o->memory.skip_cast = o->skip;
      return NULL;
    case 8:
      if (!strcmp(s, "pinned")) return o->memory.host_memory = DC_HOST_PINNED, NULL;
      if (!strcmp(s, "on-demand")) return o->memory.host_memory = DC_HOST_ON_DEMAND, NULL;
      return dc_error(DC_ERR_ARGUMENT, "--host-memory %s: expected pinned or on-demand", s);
    case 9:
      if (!strcmp(s, "nhwc")) return o->memory.layout = LAYOUT_NHWC, NULL;
      if (!strcmp(s, "nchw")) return o->memory.layout = LAYOUT_NCHW, NULL;
      return dc_error(DC_ERR_ARGUMENT, "--layout %s: expected nhwc (channels_last) or nchw", s);
    case 10:
      if (!strcmp(s, "balanced")) return o->memory.device_map = DC_MAP_BALANCED, NULL;
      if (!strcmp(s, "auto")) return o->memory.device_map = DC_MAP_AUTO, NULL;
      if (!strcmp(s, "sequential")) return o->memory.device_map = DC_MAP_SEQUENTIAL, NULL;
      if (strlen(s) > 5 && !strcmp(s + strlen(s) - 5, ".json")) {
        o->memory.device_map = DC_MAP_FILE;
        o->memory.device_map_file = s;
        dc_free(o->map);
        DC_TRY(dc_load_device_map(s, &o->map, &o->memory.nmap));
        o->memory.map = o->map;
        return NULL;
      }
      return dc_error(DC_ERR_ARGUMENT, "--device-map %s: expected balanced, auto, sequential or a FILE.json", s);
    case 11: return dc_parse_max_memory(s, &o->memory.max_memory);
    case 5: {
      char *end;
      double f = strtod(s, &end);
      if (!*s || *end || !(f > 0 && f < 1))
        return dc_error(DC_ERR_ARGUMENT, "--tile-overlap %s: expected a factor between 0 and 1, e.g. 0.25", s);
      return o->tile_overlap = f, NULL;
    }
    default: return *used = 0, NULL; /* not reached: k indexes takes_value */
  }
}

/* --format text|json into *json; NULL or an error naming the value. */
static dc_status *format_arg(const char *v, int *json) {
  if (strcmp(v, "text") && strcmp(v, "json")) return dc_error(DC_ERR_ARGUMENT, "--format %s: expected text or json", v);
  return *json = !strcmp(v, "json"), NULL;
}

/* --memory-report (stdout), --memory-report=FILE, --format; *used = 0 for
 * another option.  The file is an "=" argument so that a bare flag before
 * the model folder does not take the folder for its file. */
static dc_status *report_arg(int argc, char **argv, int *i, options *o, int *used) {
  const char *a = argv[*i];
  *used = 1;
  if (!strcmp(a, "--memory-report") || !strncmp(a, "--memory-report=", 16)) {
    const char *file = a[15] == '=' ? a + 16 : "-";
    if (!*file) return dc_error(DC_ERR_ARGUMENT, "--memory-report=: name a FILE, or '-' for stdout");
    if (o->memory_report) return dc_error(DC_ERR_ARGUMENT, "--memory-report given twice: give it once");
    return o->memory_report = file, NULL;
  }
  if (strcmp(a, "--format")) return *used = 0, NULL;
  if (*i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "--format needs text or json (see diffc --help)");
  if (o->format) return dc_error(DC_ERR_ARGUMENT, "--format given twice: give it once");
  o->format = argv[++*i];
  return format_arg(o->format, &o->report_json);
}

/* The memory report of a written plan, read back as diffrun reads it
 * (inspect: no kernels linked, no GPU), to FILE (temporary name, then
 * rename) or stdout ("-"). */
static dc_status *write_memory_report(const char *plan, int json, const char *file) {
  drt_plan *p;
  drt_options ro = {.inspect = 1};
  DC_TRY(drt_load(plan, &ro, &p));
  char *text;
  dc_status *st = drt_memory_report(p, json, dc_generate_default_steps(p), &text);
  drt_destroy(p);
  if (st) return st;
  if (!strcmp(file, "-")) {
    fputs(text, stdout);
  } else {
    st = dc_atomic_write_file(file, text, strlen(text));
    if (st) st = dc_status_annotate(st, "--memory-report=%s", file);
  }
  free(text);
  return st;
}

/* --memory-budget SIZE, --allow-cast LIST, --calibration FILE. */
static dc_status *budget_arg(int argc, char **argv, int *i, options *o) {
  const char *a = argv[*i];
  if (*i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffc --help)", a);
  const char *s = argv[++*i];
  if (!strcmp(a, "--calibration")) {
    if (o->calibration) return dc_error(DC_ERR_ARGUMENT, "--calibration given twice: give it once");
    return o->calibration = s, NULL;
  }
  if (!strcmp(a, "--memory-budget")) {
    if (o->memory_budget) return dc_error(DC_ERR_ARGUMENT, "--memory-budget given twice: give it once");
    if (dc_parse_bytes(s, &o->memory_budget) != 0 || !o->memory_budget)
      return dc_error(DC_ERR_ARGUMENT, "--memory-budget %s: expected a size such as 6GiB, 512MiB or 8GB", s);
    return NULL;
  }
  for (const char *p = s; *p;) { /* --allow-cast fp8_e4m3,bf16 */
    static const struct {
      const char *name;
      dc_dtype d;
    } st[] = {{"fp8_e4m3", DT_F8_E4M3}, {"fp8_e5m2", DT_F8_E5M2}, {"bf16", DT_BF16}, {"fp16", DT_F16}};
    size_t n = strcspn(p, ",");
    int k = -1;
    for (int j = 0; j < 4; j++)
      if (strlen(st[j].name) == n && !strncmp(p, st[j].name, n)) k = j;
    if (k < 0 || o->nallow_cast == 4)
      return dc_error(DC_ERR_ARGUMENT, "--allow-cast %s: expected storage dtypes from fp8_e4m3, fp8_e5m2, bf16, fp16, "
                      "comma-separated", s);
    o->allow_cast[o->nallow_cast++] = st[k].d;
    p += n + (p[n] == ',');
  }
  return NULL;
}

/* A plan that cannot be written should fail before minutes of compiling,
 * naming the path the user gave (the writer's temporary name is ours). */
static dc_status *check_output_folder(const char *plan) {
  char *dir = dc_path_parent(plan);
  if (!dir) return dc_nomem("parsing arguments");
  dc_status *st = NULL;
  if (!dc_dir_exists(dir)) st = dc_error(DC_ERR_IO, "-o %s: cannot create the plan: no folder %s", plan, dir);
  else if (access(dir, W_OK) != 0)
    st = dc_error(DC_ERR_IO, "-o %s: cannot create the plan in %s: %s", plan, dir, strerror(errno));
  else if (dc_dir_exists(plan)) st = dc_error(DC_ERR_IO, "-o %s: is a folder; name the plan file, e.g. %s/model.dplan", plan, plan);
  dc_free(dir);
  return st;
}

static dc_status *parse_args(int argc, char **argv, options *o, int *exit_now) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      print_usage();
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "--version")) {
      printf("diffc %s\ntargets: %s\n", DIFFC_VERSION, dc_build_targets());
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "--list-passes")) {
      int n;
      const dc_pass *ps = dc_pass_list(&n);
      /* frontend is no pass but --dump-after accepts it: list it first */
      printf("%-16s %s\n", "frontend", "build the graph from config.json and the weights (before any pass)");
      for (int k = 0; k < n; k++) printf("%-16s %s\n", ps[k].name, ps[k].summary);
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose = 1;
      continue;
    }
    if (!strcmp(a, "--no-progress")) {
      o->no_progress = 1;
      continue;
    }
    if (!strcmp(a, "--no-kernel-cache")) {
      o->no_kernel_cache = 1;
      continue;
    }
    if (!strcmp(a, "--no-hoist")) {
      o->no_hoist = 1;
      continue;
    }
    int64_t *size = !strcmp(a, "--height") ? &o->height : !strcmp(a, "--width") ? &o->width
                    : !strcmp(a, "--batch") ? &o->batch : NULL;
    if (!strcmp(a, "--cuda-sm-count")) {
      long long v;
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffc --help)", a);
      DC_TRY(int_arg(a, argv[++i], 1, 4096, &v));
      o->cuda_sm_count = (int)v;
      continue;
    }
    if (!strcmp(a, "--max-sequence-length")) {
      long long v;
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffc --help)", a);
      DC_TRY(int_arg(a, argv[++i], 1, 512, &v));
      o->max_sequence_length = (int)v;
      continue;
    }
    if (size || !strcmp(a, "--clip-skip")) {
      long long v;
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffc --help)", a);
      DC_TRY(int_arg(a, argv[++i], size ? 1 : 0, size ? 1 << 16 : 64, &v));
      if (size) *size = v;
      else o->clip_skip = (int)v;
      continue;
    }
    if (!strcmp(a, "--clip-final-norm")) {
      o->clip_final_norm = 1;
      continue;
    }
    if (!strcmp(a, "--clip-hidden-state")) {
      long long v;
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffc --help)", a);
      DC_TRY(int_arg(a, argv[++i], 0, 4096, &v));
      o->clip_hidden_state = 1, o->clip_hidden_index = (int)v;
      continue;
    }
    if (!strcmp(a, "--memory-budget") || !strcmp(a, "--allow-cast") || !strcmp(a, "--calibration")) {
      DC_TRY(budget_arg(argc, argv, &i, o));
      continue;
    }
    int used;
    DC_TRY(memory_arg(argc, argv, &i, o, &used));
    if (used) continue;
    DC_TRY(report_arg(argc, argv, &i, o, &used));
    if (used) continue;
    if (!strcmp(a, "-o") || !strcmp(a, "--output")) slot = &o->output;
    else if (!strcmp(a, "--component")) slot = &o->component;
    else if (!strcmp(a, "--variant")) slot = &o->variant;
    else if (!strcmp(a, "--entry")) slot = &o->entry;
    else if (!strcmp(a, "--target")) slot = &o->target;
    else if (!strcmp(a, "--dump-ir")) slot = &o->dump_ir;
    else if (!strcmp(a, "--dump-after")) slot = &o->dump_after;
    else if (!strcmp(a, "--memory-timeline")) slot = &o->memory_timeline;
    else if (!strcmp(a, "--debug")) slot = &o->debug;
    else if (!strcmp(a, "--cpu")) slot = &o->cpu;
    else if (!strcmp(a, "--conv-algo")) slot = &o->conv_algo;
    else if (!strcmp(a, "--cuda-arch")) slot = &o->cuda_arch;
    else if (!strcmp(a, "--compute-dtype")) slot = &o->compute;
    else if (!strcmp(a, "--kernel-cache")) slot = &o->kernel_cache;
    else if (!strcmp(a, "--sign")) slot = &o->sign;
    else if (!strcmp(a, "--config")) slot = &o->config_dir;
    else if (!strcmp(a, "--input")) {
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "--input needs NAME=DIMS");
      if (o->nshapes == MAX_SHAPES) return dc_error(DC_ERR_ARGUMENT, "too many --input options");
      DC_TRY(parse_dims(argv[++i], &o->shapes[o->nshapes++]));
      continue;
    } else if (a[0] == '-') {
      return dc_error(DC_ERR_ARGUMENT, "unknown option %s (see diffc --help)", a);
    } else if (!o->model) {
      o->model = a;
      continue;
    } else {
      return dc_error(DC_ERR_ARGUMENT, "unexpected argument %s: one model folder at a time", a);
    }
    if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffc --help)", a);
    if (*slot) /* taking the last one silently would hide a typo in a long command */
      return dc_error(DC_ERR_ARGUMENT, "%s given twice (%s and %s): give it once", a, *slot, argv[i + 1]);
    *slot = argv[++i];
  }
  if (o->format && !o->memory_report)
    return dc_error(DC_ERR_ARGUMENT, "--format %s applies to the memory report: give --memory-report too", o->format);
  if (!o->model) return dc_error(DC_ERR_ARGUMENT, "no model folder given (see diffc --help)");
  if (!o->output) return dc_error(DC_ERR_ARGUMENT, "no output plan given: use -o PLAN");
  DC_TRY(check_output_folder(o->output));
  if (o->memory_timeline) DC_TRY(dc_memory_timeline_check_path(o->memory_timeline));
  /* diffusers makes num_blocks_per_group a required argument; 1 is the
   * value every example of its guide uses, and the one a user expects */
  if (o->memory.group_level == DC_GROUP_BLOCK && o->memory.blocks_per_group == 0) o->memory.blocks_per_group = 1;
  return NULL; /* the library checks the target options before any work */
}

/* diffc keygen SECRETFILE PUBFILE */
static int keygen(int argc, char **argv) {
  if (argc == 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) {
    print_usage();
    return 0;
  }
  char id[17];
  dc_status *st = argc != 4 || argv[2][0] == '-' || argv[3][0] == '-'
                      ? dc_error(DC_ERR_ARGUMENT, "usage: diffc keygen SECRETFILE PUBFILE (see diffc --help)")
                      : dc_keygen(argv[2], argv[3], id);
  if (st) {
    fprintf(stderr, "diffc: error: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 1;
  }
  fprintf(stderr,
          "diffc: wrote secret key %s (mode 0600: keep it private) and public key %s (key %s); sign plans with "
          "diffc --sign %s, run them with diffrun --trusted-keys %s\n",
          argv[2], argv[3], id, argv[2], argv[3]);
  return 0;
}

/* diffc inspect PLAN [--format text|json] */
static int inspect(int argc, char **argv) {
  const char *plan = NULL;
  int json = 0;
  dc_status *st = NULL;
  for (int i = 2; i < argc && !st; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return print_usage(), 0;
    if (!strcmp(argv[i], "--format"))
      st = i + 1 < argc ? format_arg(argv[++i], &json)
                        : dc_error(DC_ERR_ARGUMENT, "--format needs text or json (see diffc --help)");
    else if (argv[i][0] == '-') st = dc_error(DC_ERR_ARGUMENT, "diffc inspect: unknown option %s (see diffc --help)", argv[i]);
    else if (plan) st = dc_error(DC_ERR_ARGUMENT, "diffc inspect: one plan at a time (%s and %s)", plan, argv[i]);
    else plan = argv[i];
  }
  if (!st && !plan) st = dc_error(DC_ERR_ARGUMENT, "usage: diffc inspect PLAN [--format text|json] (see diffc --help)");
  if (!st) st = write_memory_report(plan, json, "-");
  if (st) {
    fprintf(stderr, "diffc: error: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 1;
  }
  return 0;
}

/* ---- the progress line ---------------------------------------------------- */

/* One line on a terminal, rewritten in place as diffrun's is: the stage,
 * the kernels compiled (cache hits apart) with an ETA once a few were
 * compiled, or the weight bytes written.  At most ~10 redraws a second; a
 * pause event (the compiler prints a line next) clears it. */
typedef struct {
  int on, drawn;
  const char *stage;
  int64_t last_done;
  double stage_start, last_draw;
} progress_line;

static void progress_clear(progress_line *l) {
  if (!l->drawn) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  l->drawn = 0;
}

static void progress_draw(progress_line *l, const dc_progress_event *e, double now) {
  char b1[32], b2[32], eta[48] = "";
  int64_t compiled = e->done - e->cached;
  if (!e->total) fprintf(stderr, "\r\033[K%s", e->stage);
  else if (e->bytes)
    fprintf(stderr, "\r\033[K%s %s / %s", e->stage, dc_format_bytes((uint64_t)e->done, b1, sizeof b1),
            dc_format_bytes((uint64_t)e->total, b2, sizeof b2));
  else {
    if (compiled >= 3 && e->done < e->total) /* as if the rest all miss the cache */
      snprintf(eta, sizeof eta, "  ETA %.0f s", (now - l->stage_start) / (double)compiled * (double)(e->total - e->done));
    fprintf(stderr, "\r\033[K%s %lld/%lld (%lld cached)%s", e->stage, (long long)e->done, (long long)e->total,
            (long long)e->cached, eta);
  }
  fflush(stderr);
  l->drawn = 1;
  l->last_draw = now;
}

static void progress_event(void *ctx, const dc_progress_event *e) {
  progress_line *l = ctx;
  if (!l->on) return;
  if (!e->stage) {
    progress_clear(l);
    return;
  }
  double now = dc_now_seconds();
  int fresh = !l->stage || strcmp(l->stage, e->stage) != 0 || e->done < l->last_done;
  if (fresh) l->stage = e->stage, l->stage_start = now;
  l->last_done = e->done;
  if (fresh || e->done == e->total || now - l->last_draw >= 0.1) progress_draw(l, e, now);
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "keygen")) return keygen(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "inspect")) return inspect(argc, argv);
  options o;
  int exit_now = 0;
  uint8_t sk[DC_SIGN_SECRET_BYTES];
  dc_status *st = parse_args(argc, argv, &o, &exit_now);
  if (!st && !exit_now && o.sign) st = dc_secret_key_load(o.sign, sk); /* before any work */
  if (!st && !exit_now) {
    dc_compile_options co = {.model = o.model,
                             .component = o.component,
                             .variant = o.variant,
                             .entry = o.entry,
                             .shapes = o.shapes,
                             .nshapes = o.nshapes,
                             .dump_after = o.dump_after,
                             .dump_ir = o.dump_ir,
                             .verbose = o.verbose,
                             .debug = o.debug,
                             .cpu = o.cpu,
                             .conv_algo = o.conv_algo,
                             .target = o.target,
                             .cuda_arch = o.cuda_arch,
                             .cuda_sm_count = o.cuda_sm_count,
                             .compute = o.compute,
                             .kernel_cache = o.kernel_cache,
                             .no_kernel_cache = o.no_kernel_cache,
                             .memory = o.memory,
                             .storage_dtype_given = (o.seen_memory_options & (1u << 6)) != 0,
                             .offload_dir = o.offload_dir,
                             .vae_slicing = o.vae_slicing,
                             .vae_tiling = o.vae_tiling,
                             .vae_no_frame_batching = o.vae_no_frame_batching,
                             .tile_size = o.tile_size,
                             .tile_overlap = o.tile_overlap,
                             .height = o.height,
                             .width = o.width,
                             .batch = o.batch,
                             .clip_skip = o.clip_skip,
                             .max_sequence_length = o.max_sequence_length,
                             .no_hoist = o.no_hoist,
                             .config_dir = o.config_dir,
                             .clip_hidden_state = o.clip_hidden_state,
                             .clip_hidden_index = o.clip_hidden_index,
                             .clip_final_norm = o.clip_final_norm,
                             .memory_timeline = o.memory_timeline,
                             .memory_budget = o.memory_budget,
                             .nallow_cast = o.nallow_cast,
                             .calibration = o.calibration,
                             .sign_secret = o.sign ? sk : NULL};
    progress_line line = {.on = !o.no_progress && isatty(2)};
    co.progress = progress_event, co.progress_ctx = &line;
    memcpy(co.allow_cast, o.allow_cast, sizeof co.allow_cast);
    dc_compile_report rep;
    st = dc_compile(&co, o.output, &rep);
    progress_clear(&line);
    if (!st) {
      char b1[32], b2[32], cuda[96] = "";
      if (rep.cuda_compiles)
        snprintf(cuda, sizeof cuda, ", %d CUDA kernels (%d compiles, %d from the cache)", rep.cuda_kernels,
                 rep.cuda_compiles, rep.cuda_cached);
      char split[96] = ""; /* the resident bytes alone read as "no weights" for an offloaded plan */
      if (rep.offloaded_weight_bytes)
        snprintf(split, sizeof split, " (resident %s, offloaded %s)", dc_format_bytes(rep.weight_bytes, b1, sizeof b1),
                 dc_format_bytes(rep.offloaded_weight_bytes, b2, sizeof b2));
      fprintf(stderr, "diffc: wrote %s: %d steps, weights %s%s, peak activations %s%s (%.0f ms)\n", o.output, rep.steps,
              dc_format_bytes(rep.weight_bytes + rep.offloaded_weight_bytes, b1, sizeof b1), split,
              dc_format_bytes(rep.peak_activation_bytes, b2, sizeof b2), cuda, rep.seconds * 1e3);
      if (o.verbose) fprintf(stderr, "diffc: %d cast steps per run of the schedule\n", rep.cast_steps);
      if (o.memory_timeline) fprintf(stderr, "diffc: wrote the memory timeline %s\n", o.memory_timeline);
    }
    if (!st && o.memory_report) st = write_memory_report(o.output, o.report_json, o.memory_report);
    if (!st && o.sign) {
      char id[17];
      dc_key_id(sk + DC_SIGN_SECRET_BYTES - DC_SIGN_PUBLIC_BYTES, id);
      fprintf(stderr, "diffc: signed %s with key %s (%s)\n", o.output, id, o.sign);
    }
  }
  dc_secret_wipe(sk, sizeof sk);
  for (int i = 0; i < o.nshapes; i++) dc_free((void *)o.shapes[i].name);
  dc_free(o.map);
  if (st) {
    fprintf(stderr, "diffc: error: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 1;
  }
  return 0;
}
