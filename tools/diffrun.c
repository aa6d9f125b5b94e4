/* diffrun — execute a diffc plan.  A thin CLI over runtime/diffrun.h: read
 * inputs from a .safetensors file (or make seeded random ones), run, write
 * outputs, report time and memory. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "pipeline/generate.h"
#include "pipeline/png.h"
#include "driver/compile.h"
#include "runtime/diffrun.h"

static const char usage[] =
    "usage: diffrun PLAN [options]\n"
    "       diffrun PIPELINE_PLAN --prompt TEXT [generation options] -o out.png\n"
    "\n"
    "Executes a plan written by diffc: a CPU plan on this machine's CPU, a plan compiled with\n"
    "diffc --target cuda on an NVIDIA GPU (through the driver, libcuda.so.1, found at run time).\n"
    "A pipeline plan (diffc PIPELINE_DIR) goes from a prompt to images as diffusers' pipeline does;\n"
    "steps, guidance, scheduler and prompts change without recompiling.\n"
    "\n"
    "generation options (a pipeline plan):\n"
    "  --prompt TEXT       what to draw (UTF-8; CLIP's tokenizer cuts it at 77 tokens, T5's at the\n"
    "                      plan's max_sequence_length, and diffrun says what was cut)\n"
    "  --negative-prompt TEXT  what to steer away from (default: none; SDXL then uses zeros, as\n"
    "                      diffusers' force_zeros_for_empty_prompt; SD3 encodes \"\"; Flux takes none)\n"
    "  --steps N           denoising steps (default 50; Flux and SD3 28)\n"
    "  --guidance G        guidance scale (default 7.5; SDXL 5.0; Flux 3.5; SD3 7.0): classifier-free\n"
    "                      guidance, where G <= 1 runs no unconditional half; Flux dev's embedded\n"
    "                      guidance (Flux runs no CFG; schnell ignores G)\n"
    "  --guidance-rescale F  diffusers' guidance_rescale (default 0; SD and SDXL)\n"
    "  --scheduler NAME    a scheduler class instead of the pipeline's (from its config, as\n"
    "                      diffusers' from_config): PNDMScheduler, EulerDiscreteScheduler,\n"
    "                      EulerAncestralDiscreteScheduler, DDIMScheduler,\n"
    "                      DPMSolverMultistepScheduler, LMSDiscreteScheduler,\n"
    "                      FlowMatchEulerDiscreteScheduler (flow-matching pipelines only),\n"
    "                      CogVideoXDDIMScheduler, CogVideoXDPMScheduler\n"
    "  --scheduler-set KEY=VALUE  change one key of the scheduler's config (a JSON value), as\n"
    "                      from_config(config, KEY=VALUE): e.g. use_karras_sigmas=true; repeatable\n"
    "  --seed N            the initial noise: torch.randn from torch.Generator().manual_seed(N),\n"
    "                      diffusers' latents for that seed (default 0)\n"
    "  --latents FILE      start from the tensor \"latents\" [B,C,H/8,W/8] of a .safetensors file\n"
    "                      instead (diffusers' latents= argument; for Flux the noise before its 2x2\n"
    "                      packing, which diffrun then packs as diffusers packs its randn)\n"
    "  --original-size HxW, --crop TOPxLEFT, --target-size HxW\n"
    "                      SDXL's size conditioning (default: the image size, 0x0, the image size)\n"
    "  -o, --output FILE.png  write the image (8-bit RGB; the parameters in a \"parameters\" text\n"
    "                      chunk); with --batch N plans, FILE-0.png ... FILE-(N-1).png.  A video\n"
    "                      pipeline writes one PNG per frame: FILE-000.png, FILE-001.png, ...\n"
    "                      (with a batch, FILE-0-000.png ... FILE-1-000.png ...)\n"
    "  --video FILE.apng   a video pipeline: write each video as an animated PNG (8-bit RGB,\n"
    "                      looping; the parameters in a text chunk; readers without APNG show\n"
    "                      the first frame); with a batch, FILE-0.apng, FILE-1.apng, ...\n"
    "  --fps N             the animated PNG's frame rate (1 to 65535; default 8, the rate of\n"
    "                      CogVideoX's training videos and of its pipeline's export example)\n"
    "  --outputs FILE      also write \"image\" [B,3,H,W] in [0,1] (diffusers' output_type=\"pt\"; a\n"
    "                      video pipeline: \"frames\" [B,F,3,H,W]) and the final \"latents\" to a\n"
    "                      .safetensors file\n"
    "\n"
    "options:\n"
    "  --inputs FILE       read the inputs from a .safetensors file: one tensor per plan input,\n"
    "                      under the input's name, with the plan's shape: F32 for an f32 input,\n"
    "                      I64 or I32 for an integer one (token ids, as transformers writes\n"
    "                      them; converted to the plan's integer width); other tensors in the\n"
    "                      file are ignored\n"
    "  --random-inputs     fill the inputs with seeded random values instead (normal; timesteps\n"
    "                      uniform integers in [0, 1000); integer inputs such as token ids\n"
    "                      uniform integers in [0, 1000), ids every supported tokenizer knows)\n"
    "  --seed N            seed for --random-inputs (default 0)\n"
    "  --outputs FILE      write the outputs to a .safetensors file (temporary name, then rename)\n"
    "  --repeat N          run N times and report each run's time (default 1)\n"
    "  --backend NAME      kernels to run: cuda (a CUDA plan's GPU kernels; its default), llvm (a\n"
    "                      CPU plan's compiled kernels; its default) or reference (the plain C\n"
    "                      kernels every backend is tested against, on the CPU, for any plan;\n"
    "                      on a CUDA plan llvm means reference too: it holds no CPU kernels)\n"
    "  --device N          CUDA device to run on (default 0)\n"
    "  --no-cublaslt       cuda: run every GEMM step on diffc's NVRTC kernel instead of cuBLASLt\n"
    "                      (DIFFC_CUBLASLT=0 does the same).  By default linear and 1x1 conv2d\n"
    "                      steps with bf16 or f16 operands whose epilogue cuBLASLt has (bias,\n"
    "                      gelu_tanh, a residual) run on cuBLASLt when libcublasLt loads, with\n"
    "                      algorithms chosen at load and cached under the cache root\n"
    "  --device-memory SIZE  CPU backends: model a device of SIZE (e.g. 4GiB, 512MiB, 3GB): a plan\n"
    "                      that needs more fails before running, naming the diffc options that fit\n"
    "  --threads N         worker threads for the llvm backend (default: one per online CPU)\n"
    "  --check-finite      fail at the first step whose output holds NaN or Inf, naming the step\n"
    "                      and its module path (off by default; one pass over each output; on\n"
    "                      CUDA each step's output is also copied back, which is slow)\n"
    "  --profile           time every step and print where the time went: per op, per class of\n"
    "                      diffc's cost model (conv3x3, conv, linear, attention, memory, copy),\n"
    "                      and the slowest steps with their module paths (CUDA: device time, by\n"
    "                      events)\n"
    "  --trace FILE.json   record every kernel, upload and copy of the run(s) on one clock and\n"
    "                      write them as a Chrome trace (open in ui.perfetto.dev or chrome://tracing):\n"
    "                      a process per device, a compute and a copy track in each; a pipeline's\n"
    "                      generation is one trace, each phase run a span around its kernels\n"
    "  --no-cuda-graphs    CUDA: enqueue every run's steps on streams, one driver call per kernel (also\n"
    "                      DIFFC_CUDA_GRAPHS=0).  By default a one-GPU plan's first run (of each\n"
    "                      phase) captures its steps, the offloaded weights' uploads included, into a\n"
    "                      CUDA graph, and later runs replay it with one launch; --profile, --trace,\n"
    "                      --check-finite, on-demand uploads and --device-map plans use streams anyway\n"
    "  --no-verify-weights skip hashing the weights' bytes at load, for a store you trust: by\n"
    "                      default every tensor the plan reads is hashed (XXH3) and compared with\n"
    "                      the compile-time hash, and a changed tensor refuses the plan (its file\n"
    "                      size and safetensors header are checked either way)\n"
    "  --trusted-keys FILE run the plan only if it is signed (diffc --sign) by one of the Ed25519\n"
    "                      public keys in FILE (one per line: 64 hex digits, then an optional\n"
    "                      comment; '#' lines are skipped; diffc keygen writes one) and the\n"
    "                      signature verifies; checked before any of the plan is parsed\n"
    "  --calibrate[=FILE]  measure this machine with the plan and write the calibration profile that\n"
    "                      diffc --memory-budget reads: each kernel class's rate from timed runs on\n"
    "                      random inputs (one warm-up, then 3 runs, or --repeat N), the fixed cost\n"
    "                      per step, and copy bandwidths measured directly (host->device, disk\n"
    "                      reads, device->device; 256 MiB each).  FILE defaults to\n"
    "                      calibration-TARGET.json in $DIFFC_CACHE_DIR, $XDG_CACHE_HOME/diffc or\n"
    "                      ~/.cache/diffc, where diffc looks for it\n"
    "  --memory-timeline FILE.svg  after the run, draw the plan's device memory over the schedule as\n"
    "                      an SVG picture (as diffc --memory-timeline: bytes per step by kind, the\n"
    "                      arena's high-water mark, the peak, the uploads, phases and modules) with\n"
    "                      the memory the run observed as a red line; with --info or --print-ir,\n"
    "                      the prediction alone, without running\n"
    "  --print-ir          print the IR stored in the plan and exit\n"
    "  --info              print the plan's target, kernels, inputs and outputs, then its memory\n"
    "                      report (the peak per device and what is live at it, offloaded weights,\n"
    "                      bytes copied per run, phase and image, workspace), and exit (no GPU\n"
    "                      needed)\n"
    "  --format text|json  with --info: text (the default), or the memory report alone as JSON,\n"
    "                      sizes in bytes (fields: docs/memory-report.md)\n"
    "  -v, --verbose       say what the backend chose: the CUDA graph captured (launches, time) or why\n"
    "                      runs use streams\n"
    "  -q, --quiet         print only errors and warnings\n"
    "  -h, --help          this help\n"
    "\n"
    "Reports wall time and arithmetic rate (GFLOP/s of conv2d, linear and attention) per run,\n"
    "the peak of the device arena (measured, and as the plan predicted it), resident weight\n"
    "bytes and the process's peak host memory (max RSS); on CUDA also the kernels' device time\n"
    "and the device memory held (arena + weights).\n"
    "\n"
    "Security: a plan is an executable. It carries machine code that diffrun links and runs, so\n"
    "a plan from someone else is as dangerous as a shared library from someone else; its xxHash\n"
    "checksums stop accidents, not attackers. Run plans you did not build only with\n"
    "--trusted-keys, holding the public keys of people you trust.\n";

typedef struct {
  const char *plan, *inputs, *outputs, *backend;
  /* a pipeline plan */
  const char *prompt, *negative_prompt, *scheduler, *latents, *png, *video;
  int fps; /* --fps; 0 = not given */
  const char *scheduler_set[16];
  int nscheduler_set;
  int steps, has_seed, generation;
  double guidance, guidance_rescale;
  int64_t original_size[2], crop[2], target_size[2];
  int has_original_size, has_crop, has_target_size;
  int random_inputs, repeat, print_ir, info, quiet, threads, profile, check_finite, device;
  int no_verify_weights, no_cuda_graphs, verbose;
  int notes_printed; /* -v: drt_note's notes printed so far */
  int no_cublaslt;
  int calibrate;              /* --calibrate[=FILE] */
  const char *calibrate_file; /* its FILE, or NULL for the default location */
  int json; /* --format json */
  const char *trusted_keys, *memory_timeline;
  const char *trace; /* --trace FILE */
  uint64_t device_memory;
  unsigned long long seed;
} options;

static dc_status *parse_int(const char *opt, const char *v, long long lo, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo) return dc_error(DC_ERR_ARGUMENT, "%s %s: expected an integer >= %lld", opt, v, lo);
  *out = x;
  return NULL;
}

/* Outputs are written as safetensors; a name whose extension says another
 * format (img.png, out.npy) would give the user a file their tools cannot
 * open, so it is refused before any work.  No extension is fine. */
static dc_status *check_output_name(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  const char *dot = strrchr(base, '.');
  if (!dot || dot == base || !strcmp(dot, ".safetensors")) return NULL;
  return dc_error(DC_ERR_ARGUMENT,
                  "--outputs %s: diffrun writes outputs as safetensors, not as the \"%s\" the name says; "
                  "name the file *.safetensors (image output is not supported yet)",
                  path, dot + 1);
}

/* "HxW" (or "TOPxLEFT") as two non-negative integers. */
static dc_status *parse_pair(const char *opt, const char *v, int64_t out[2]) {
  char *end;
  errno = 0;
  long long a = strtoll(v, &end, 10);
  if (end == v || *end != 'x' || a < 0 || errno) return dc_error(DC_ERR_ARGUMENT, "%s %s: expected AxB, e.g. 1024x1024", opt, v);
  const char *b = end + 1;
  long long c = strtoll(b, &end, 10);
  if (end == b || *end || c < 0 || errno) return dc_error(DC_ERR_ARGUMENT, "%s %s: expected AxB, e.g. 1024x1024", opt, v);
  out[0] = a, out[1] = c;
  return NULL;
}

static dc_status *parse_real(const char *opt, const char *v, double lo, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end || !isfinite(x) || x < lo) return dc_error(DC_ERR_ARGUMENT, "%s %s: expected a number >= %g", opt, v, lo);
  *out = x;
  return NULL;
}

/* The generation options of a pipeline plan; *used = 0 for another. */
static dc_status *generation_arg(int argc, char **argv, int *i, options *o, int *used) {
  static const char *const names[] = {"--prompt", "--negative-prompt", "--steps", "--guidance", "--guidance-rescale",
                                      "--scheduler", "--latents", "--original-size", "--crop", "--target-size",
                                      "--scheduler-set", "-o", "--output", "--video", "--fps"};
  const char *a = argv[*i];
  int k = -1;
  for (int j = 0; j < (int)(sizeof names / sizeof names[0]); j++)
    if (!strcmp(a, names[j])) k = j;
  *used = k >= 0;
  if (k < 0) return NULL;
  if (*i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffrun --help)", a);
  const char *v = argv[++*i];
  long long x = 0;
  o->generation = 1;
  switch (k) {
    case 0: return o->prompt = v, NULL;
    case 1: return o->negative_prompt = v, NULL;
    case 2:
      DC_TRY(parse_int(a, v, 1, &x));
      return o->steps = (int)(x > 100000 ? 100000 : x), NULL;
    case 3: return parse_real(a, v, 0, &o->guidance);
    case 4: return parse_real(a, v, 0, &o->guidance_rescale);
    case 5: return o->scheduler = v, NULL;
    case 6: return o->latents = v, NULL;
    case 7: o->has_original_size = 1; return parse_pair(a, v, o->original_size);
    case 8: o->has_crop = 1; return parse_pair(a, v, o->crop);
    case 9: o->has_target_size = 1; return parse_pair(a, v, o->target_size);
    case 10:
      if (o->nscheduler_set == 16) return dc_error(DC_ERR_ARGUMENT, "--scheduler-set: at most 16");
      if (!strchr(v, '=')) return dc_error(DC_ERR_ARGUMENT, "--scheduler-set %s: expected KEY=VALUE, e.g. use_karras_sigmas=true", v);
      o->scheduler_set[o->nscheduler_set++] = v;
      return NULL;
    case 13: return o->video = v, NULL;
    case 14:
      DC_TRY(parse_int(a, v, 1, &x));
      if (x > 65535) return dc_error(DC_ERR_ARGUMENT, "--fps %s: an animated PNG takes 1 to 65535 frames per second", v);
      return o->fps = (int)x, NULL;
    default: return o->png = v, NULL;
  }
}

static dc_status *check_png_name(const char *path) {
  size_t n = strlen(path);
  if (n > 4 && !strcasecmp(path + n - 4, ".png")) return NULL;
  return dc_error(DC_ERR_ARGUMENT, "-o %s: diffrun writes images as PNG: name the file *.png", path);
}

/* --video: an animated PNG, named *.apng (or *.png, which APNG files may carry). */
static dc_status *check_video_names(const options *o) {
  if (o->fps && !o->video) return dc_error(DC_ERR_ARGUMENT, "--fps %d: the frame rate is --video's; give --video FILE.apng", o->fps);
  if (!o->video) return NULL;
  size_t n = strlen(o->video);
  if ((n > 5 && !strcasecmp(o->video + n - 5, ".apng")) || (n > 4 && !strcasecmp(o->video + n - 4, ".png")))
    return NULL;
  return dc_error(DC_ERR_ARGUMENT, "--video %s: diffrun writes videos as animated PNG: name the file *.apng",
                  o->video);
}

/* --trace is written after the run: a path that cannot be written is
 * refused before the run is spent (a temporary file made and removed). */
static dc_status *check_writable(const char *path) {
  dc_atomic_file f;
  DC_TRY(dc_status_annotate(dc_atomic_open(path, &f), "--trace"));
  dc_atomic_abort(&f);
  return NULL;
}

/* How many GEMM steps ran on cuBLASLt, or why none did (once per run). */
static void print_cublaslt(const drt_stats *s) {
  char b1[32];
  if (!s->gemm_steps) return;
  printf("cuBLASLt: %d of %d GEMM step(s) eligible by its rule ran on it", s->cublaslt_steps, s->gemm_steps);
  if (s->cublaslt_workspace_bytes)
    printf(", workspace %s outside the arena", dc_format_bytes(s->cublaslt_workspace_bytes, b1, sizeof b1));
  printf("%s%s\n", *s->cublaslt_note ? "; " : "", s->cublaslt_note);
  if (*s->cublaslt_cache) printf("cuBLASLt algorithm cache: %s\n", s->cublaslt_cache);
}

static dc_status *parse_args(int argc, char **argv, options *o, int *exit_now) {
  memset(o, 0, sizeof *o);
  o->repeat = 1;
  o->guidance = NAN;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return *exit_now = 1, NULL;
    }
    int used = 0;
    DC_TRY(generation_arg(argc, argv, &i, o, &used));
    if (used) continue;
    if (!strcmp(a, "--random-inputs")) o->random_inputs = 1;
    else if (!strcmp(a, "--print-ir")) o->print_ir = 1;
    else if (!strcmp(a, "--info")) o->info = 1;
    else if (!strcmp(a, "--profile")) o->profile = 1;
    else if (!strcmp(a, "--check-finite")) o->check_finite = 1;
    else if (!strcmp(a, "--no-verify-weights")) o->no_verify_weights = 1;
    else if (!strcmp(a, "--no-cuda-graphs")) o->no_cuda_graphs = 1;
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->verbose = 1;
    else if (!strcmp(a, "--no-cublaslt")) o->no_cublaslt = 1;
    else if (!strcmp(a, "--calibrate") || !strncmp(a, "--calibrate=", 12)) {
      if (a[11] == '=' && !a[12]) return dc_error(DC_ERR_ARGUMENT, "--calibrate=: name the profile's FILE, or drop '='");
      o->calibrate = 1;
      o->calibrate_file = a[11] == '=' ? a + 12 : NULL;
    } else if (!strcmp(a, "--format")) {
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "--format needs text or json (see diffrun --help)");
      const char *v = argv[++i];
      if (strcmp(v, "text") && strcmp(v, "json"))
        return dc_error(DC_ERR_ARGUMENT, "--format %s: expected text or json", v);
      o->json = !strcmp(v, "json");
    }
    else if (!strcmp(a, "--trusted-keys")) {
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "--trusted-keys needs a FILE of public keys (see diffrun --help)");
      if (o->trusted_keys)
        return dc_error(DC_ERR_ARGUMENT, "--trusted-keys given twice (%s and %s): put all the keys in one file",
                        o->trusted_keys, argv[i + 1]);
      o->trusted_keys = argv[++i];
    }
    else if (!strcmp(a, "--memory-timeline")) {
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "--memory-timeline needs a FILE.svg (see diffrun --help)");
      if (o->memory_timeline)
        return dc_error(DC_ERR_ARGUMENT, "--memory-timeline given twice (%s and %s): give it once", o->memory_timeline,
                        argv[i + 1]);
      o->memory_timeline = argv[++i];
      DC_TRY(dc_memory_timeline_check_path(o->memory_timeline));
    } else if (!strcmp(a, "--trace")) {
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "--trace needs a FILE.json to write the run trace to");
      if (o->trace)
        return dc_error(DC_ERR_ARGUMENT, "--trace given twice (%s and %s): give it once", o->trace, argv[i + 1]);
      o->trace = argv[++i];
    }
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = 1;
    else if (!strcmp(a, "--inputs") || !strcmp(a, "--outputs") || !strcmp(a, "--backend") ||
             !strcmp(a, "--seed") || !strcmp(a, "--repeat") || !strcmp(a, "--threads") || !strcmp(a, "--device") ||
             !strcmp(a, "--device-memory")) {
      if (i + 1 >= argc) return dc_error(DC_ERR_ARGUMENT, "%s needs a value (see diffrun --help)", a);
      const char *v = argv[++i];
      long long x;
      const char **slot = !strcmp(a, "--inputs") ? &o->inputs : !strcmp(a, "--outputs") ? &o->outputs
                          : !strcmp(a, "--backend") ? &o->backend : NULL;
      if (slot && *slot) return dc_error(DC_ERR_ARGUMENT, "%s given twice (%s and %s): give it once", a, *slot, v);
      if (slot) *slot = v;
      else if (!strcmp(a, "--seed")) {
        DC_TRY(parse_int(a, v, 0, &x));
        o->seed = (unsigned long long)x;
        o->has_seed = 1;
      } else if (!strcmp(a, "--threads")) {
        DC_TRY(parse_int(a, v, 1, &x));
        o->threads = (int)(x > 256 ? 256 : x);
      } else if (!strcmp(a, "--device-memory")) {
        if (dc_parse_bytes(v, &o->device_memory) != 0 || !o->device_memory)
          return dc_error(DC_ERR_ARGUMENT, "--device-memory %s: expected a size such as 4GiB, 512MiB or 3GB", v);
      } else if (!strcmp(a, "--device")) {
        DC_TRY(parse_int(a, v, 0, &x));
        if (x > 1024) return dc_error(DC_ERR_ARGUMENT, "--device %s: expected a CUDA device ordinal", v);
        o->device = (int)x;
      } else {
        DC_TRY(parse_int(a, v, 1, &x));
        o->repeat = (int)(x > 1000000 ? 1000000 : x);
      }
    } else if (a[0] == '-') {
      return dc_error(DC_ERR_ARGUMENT, "unknown option %s (see diffrun --help)", a);
    } else if (!o->plan) {
      o->plan = a;
    } else {
      return dc_error(DC_ERR_ARGUMENT, "unexpected argument %s", a);
    }
  }
  if (!o->plan) return dc_error(DC_ERR_ARGUMENT, "no plan given (see diffrun --help)");
  if (o->inputs && o->random_inputs) return dc_error(DC_ERR_ARGUMENT, "--inputs and --random-inputs exclude each other");
  if (o->json && !o->info) return dc_error(DC_ERR_ARGUMENT, "--format json applies to --info: give --info too");
  if (o->outputs) DC_TRY(check_output_name(o->outputs));
  if (o->png) DC_TRY(check_png_name(o->png));
  DC_TRY(check_video_names(o));
  if (o->calibrate && (o->inputs || o->random_inputs || o->outputs || o->profile || o->info || o->print_ir ||
                       o->generation))
    return dc_error(DC_ERR_ARGUMENT, "--calibrate runs the plan on random inputs by itself: it takes none of --inputs, "
                    "--random-inputs, --outputs, --profile, --info, --print-ir or the generation options");
  if (o->trace) DC_TRY(check_writable(o->trace));
  if (o->generation && (o->inputs || o->random_inputs))
    return dc_error(DC_ERR_ARGUMENT, "--inputs/--random-inputs run one model's plan; the generation options (--prompt, "
                    "--steps, ...) run a pipeline plan: give one kind");
  return NULL;
}

static const char *dims_str(int rank, const int64_t *dims, char *buf, size_t cap) {
  return dc_dims_str(dims, rank, buf, cap);
}

/* An integer tensor of the file as the input's integer dtype (I32 and I64
 * both accepted: transformers writes ids as int64); values that do not fit
 * an i32 input are refused, naming the first. */
static dc_status *convert_ints(const char *path, const char *name, const dc_st_tensor *t, const uint8_t *src,
                               const char *want, size_t numel, void **out) {
  int want64 = !strcmp(want, "i64");
  void *d = dc_malloc(numel * (want64 ? 8 : 4) + 1);
  if (!d) return dc_nomem("reading inputs");
  for (size_t k = 0; k < numel; k++) {
    int64_t v;
    if (t->dtype == DT_I64) memcpy(&v, src + 8 * k, 8);
    else {
      int32_t v32;
      memcpy(&v32, src + 4 * k, 4);
      v = v32;
    }
    if (!want64 && (v < INT32_MIN || v > INT32_MAX)) {
      dc_free(d);
      return dc_error(DC_ERR_MISMATCH, "%s: tensor \"%s\" holds %lld at element %zu, which does not fit the plan's i32 input",
                      path, name, (long long)v, k);
    }
    if (want64) ((int64_t *)d)[k] = v;
    else ((int32_t *)d)[k] = (int32_t)v;
  }
  *out = d;
  return NULL;
}

/* One input from the file: its dtype must be of the input's kind (float
 * for f32, integer for i32/i64); the data is copied (it may be unaligned). */
static dc_status *bind_one(drt_plan *p, const char *path, const dc_st_file *f, const dc_st_tensor *t,
                           const drt_tensor_info *info) {
  int want_int = strcmp(info->dtype, "f32") != 0, have_int = t->dtype == DT_I32 || t->dtype == DT_I64;
  if (want_int != have_int || (!want_int && t->dtype != DT_F32)) {
    char b[160];
    return dc_error(DC_ERR_MISMATCH, "%s: tensor \"%s\" has dtype %s, but the plan's input %s is %s%s: expected %s", path,
                    info->name, dc_dtype_safetensors_name(t->dtype), info->name, info->dtype,
                    dims_str(info->rank, info->dims, b, sizeof b), want_int ? "I64 or I32" : "F32");
  }
  const uint8_t *src = f->file.data + t->offset;
  void *tmp = NULL;
  dc_status *st;
  if (want_int) st = convert_ints(path, info->name, t, src, info->dtype, info->numel, &tmp);
  else if (!(tmp = dc_malloc(t->bytes ? t->bytes : 1))) st = dc_nomem("reading inputs");
  else st = (memcpy(tmp, src, t->bytes), NULL);
  if (!st) st = drt_set_input_data(p, info->name, info->dtype, tmp, info->numel);
  dc_free(tmp);
  return st;
}

static dc_status *bind_inputs(drt_plan *p, const char *path) {
  dc_st_file f;
  DC_TRY(dc_st_open(path, &f));
  dc_status *st = NULL;
  for (int i = 0; i < drt_input_count(p) && !st; i++) {
    const drt_tensor_info *info = drt_input_info(p, i);
    const dc_st_tensor *t = dc_st_find(&f, info->name);
    char b1[160], b2[160];
    if (!t) {
      st = dc_error(DC_ERR_MISMATCH, "%s: no tensor \"%s\" (the plan's input %s %s)", path, info->name, info->name,
                    dims_str(info->rank, info->dims, b1, sizeof b1));
    } else if (t->rank != info->rank || memcmp(t->dims, info->dims, sizeof(int64_t) * (size_t)t->rank) != 0) {
      st = dc_error(DC_ERR_MISMATCH, "%s: tensor \"%s\" has shape %s but the plan was compiled for %s (recompile with --input %s=...)",
                    path, info->name, dims_str(t->rank, t->dims, b1, sizeof b1),
                    dims_str(info->rank, info->dims, b2, sizeof b2), info->name);
    } else {
      st = bind_one(p, path, &f, t, info);
    }
  }
  dc_st_close(&f);
  return st;
}

static dc_status *write_outputs(drt_plan *p, const char *path) {
  int n = drt_output_count(p);
  dc_st_out *outs = dc_calloc((size_t)n, sizeof *outs);
  if (!outs) return dc_nomem("writing outputs");
  for (int i = 0; i < n; i++) {
    const drt_tensor_info *info = drt_output_info(p, i);
    outs[i].name = info->name;
    outs[i].type.dtype = DT_F32;
    outs[i].type.rank = info->rank;
    memcpy(outs[i].type.dims, info->dims, sizeof info->dims);
    outs[i].data = drt_output(p, info->name, NULL);
  }
  dc_status *st = dc_st_write(path, outs, n);
  dc_free(outs);
  return st;
}

/* The memory report after the plan's description (--info); a pipeline's
 * per-image bytes at its default steps. */
static dc_status *print_memory_report(drt_plan *p, int json) {
  char *text;
  DC_TRY(drt_memory_report(p, json, dc_generate_default_steps(p), &text));
  fputs(text, stdout);
  free(text);
  return NULL;
}

static dc_status *print_info(drt_plan *p, int json) {
  char b[160];
  const drt_plan_info *in = drt_info(p);
  if (json) return print_memory_report(p, 1);
  printf("model: %s, entry %s\n", drt_meta(p, "class") ? drt_meta(p, "class") : "?",
         drt_meta(p, "entry") ? drt_meta(p, "entry") : "?");
  printf("target: %s, compute precision %s, %d compiled kernel(s)%s%s\n", in->target, in->compute, in->kernels,
         in->archs[0] ? " for " : "", in->archs);
  printf("arithmetic: %.3f GFLOP per run (conv2d, linear, attention)\n", (double)in->flops * 1e-9);
  printf("signature: %s\n", in->signature);
  if (in->memory_budget[0]) printf("memory budget: %s\n", in->memory_budget);
  for (int i = 0; i < drt_input_count(p); i++) {
    const drt_tensor_info *t = drt_input_info(p, i);
    printf("input  %-22s %s%s\n", t->name, t->dtype, dims_str(t->rank, t->dims, b, sizeof b));
  }
  for (int i = 0; i < drt_output_count(p); i++) {
    const drt_tensor_info *t = drt_output_info(p, i);
    printf("output %-22s %s%s\n", t->name, t->dtype, dims_str(t->rank, t->dims, b, sizeof b));
  }
  printf("\n");
  return print_memory_report(p, 0);
}

/* --random-inputs fills an integer input with ids in a fixed range: say so,
 * since a model's vocabulary may be larger and the range matters. */
static void note_random_ints(drt_plan *p) {
  char b[160];
  for (int i = 0; i < drt_input_count(p); i++) {
    const drt_tensor_info *t = drt_input_info(p, i);
    if (strcmp(t->dtype, "f32") != 0)
      printf("input %s (%s%s): --random-inputs filled it with uniform integers in [0, %d)\n", t->name, t->dtype,
             dims_str(t->rank, t->dims, b, sizeof b), DRT_RANDOM_INT_END);
  }
}

/* Totals per cost-model class (diffc --memory-budget predicts these; the
 * classes of ir/flops.c, so a conv splits into conv3x3 and conv), in the
 * classes' fixed order so scripts can read them.  A class with no step is
 * left out; copy is the copy stream's busy time, which overlaps kernels. */
static void print_class_times(const drt_step_time *t, int n, int runs, double total) {
  static const char *const classes[] = {"conv3x3", "conv", "linear", "attention", "memory", "copy"};
  enum { NCLASSES = sizeof classes / sizeof classes[0] };
  double s[NCLASSES] = {0};
  int steps[NCLASSES] = {0};
  for (int i = 0; i < n; i++)
    for (int k = 0; k < NCLASSES; k++)
      if (!strcmp(t[i].cost_class, classes[k])) s[k] += t[i].seconds, steps[k]++;
  printf("per cost-model class:\n");
  for (int k = 0; k < NCLASSES; k++)
    if (steps[k])
      printf("  %-20s %5d steps %9.2f ms/run %5.1f%%%s\n", classes[k], steps[k], s[k] / runs * 1e3,
             total > 0 ? 100 * s[k] / total : 0, k == NCLASSES - 1 ? " (copy stream, overlaps kernels)" : "");
}

/* Where the time went: totals per op and per cost-model class, then the
 * slowest steps. */
static void print_profile(const drt_plan *p, int runs) {
  enum { MAX = 100000, TOP = 15 };
  drt_step_time *t = dc_calloc(MAX, sizeof *t);
  if (!t) return;
  int n = drt_profile(p, t, MAX);
  double total = 0;
  for (int i = 0; i < n; i++) total += t[i].seconds;
  printf("profile over %d run(s): %.3f s in kernels per run\n", runs, total / runs);
  const char *ops[64];
  double op_s[64];
  int op_n[64], nops = 0;
  for (int i = 0; i < n; i++) {
    int k = 0;
    while (k < nops && strcmp(ops[k], t[i].op) != 0) k++;
    if (k == nops && nops < 64) ops[nops] = t[i].op, op_s[nops] = 0, op_n[nops++] = 0;
    if (k < nops) op_s[k] += t[i].seconds, op_n[k]++;
  }
  /* Largest first: the table is read from the top for what to optimize.
   * Ties keep the order of first appearance (insertion sort is stable). */
  for (int k = 1; k < nops; k++)
    for (int j = k; j > 0 && op_s[j] > op_s[j - 1]; j--) {
      const char *to = ops[j];
      double ts = op_s[j];
      int tn = op_n[j];
      ops[j] = ops[j - 1], op_s[j] = op_s[j - 1], op_n[j] = op_n[j - 1];
      ops[j - 1] = to, op_s[j - 1] = ts, op_n[j - 1] = tn;
    }
  printf("per op, slowest first:\n");
  for (int k = 0; k < nops; k++)
    printf("  %-20s %5d steps %9.2f ms/run %5.1f%%\n", ops[k], op_n[k], op_s[k] / runs * 1e3,
           total > 0 ? 100 * op_s[k] / total : 0);
  print_class_times(t, n, runs, total);
  printf("slowest steps:\n");
  for (int i = 0; i < n && i < TOP; i++)
    printf("  %%%-6d %-12s %9.2f ms/run  %s\n", t[i].step, t[i].op, t[i].seconds / runs * 1e3, t[i].scope);
  dc_free(t);
}

/* Without --check-finite nothing looks at the values, so a NaN image would
 * be written with exit 0 and no word.  One pass over each output is cheap
 * next to the run; the warning says how to find the step that made them. */
static void warn_nonfinite_outputs(drt_plan *p) {
  for (int i = 0; i < drt_output_count(p); i++) {
    const drt_tensor_info *info = drt_output_info(p, i);
    const float *y = drt_output(p, info->name, NULL);
    if (!y) continue;
    uint64_t nan = 0, inf = 0, first = 0;
    for (uint64_t k = 0; k < info->numel; k++) {
      if (isfinite(y[k])) continue;
      if (!nan && !inf) first = k;
      if (isnan(y[k])) nan++;
      else inf++;
    }
    if (nan || inf)
      fprintf(stderr,
              "diffrun: warning: output \"%s\" holds %llu NaN and %llu Inf of %llu values (the first at element "
              "%llu); rerun with --check-finite to stop at the step that made them\n",
              info->name, (unsigned long long)nan, (unsigned long long)inf, (unsigned long long)info->numel,
              (unsigned long long)first);
  }
}

/* "12.3 GFLOP/s" or "312.4 TFLOP/s" into buf. */
static const char *rate_str(double flops, double seconds, char *buf, size_t cap) {
  double r = seconds > 0 ? flops / seconds : 0;
  if (r >= 1e12) snprintf(buf, cap, "%.1f TFLOP/s", r * 1e-12);
  else snprintf(buf, cap, "%.1f GFLOP/s", r * 1e-9);
  return buf;
}

static void print_run(int r, const drt_stats *s) {
  char b1[32], b2[32];
  printf("run %d: %.4f s", r, s->seconds);
  if (s->flops > 0) printf(", %s", rate_str(s->flops, s->seconds, b1, sizeof b1));
  if (!strcmp(s->backend, "cuda"))
    printf(" (kernels %.3f s on the device%s%s)", s->kernel_seconds, s->flops > 0 ? ", " : "",
           s->flops > 0 ? rate_str(s->flops, s->kernel_seconds, b2, sizeof b2) : "");
  printf("\n");
}

/* ---- a pipeline plan: prompt to image ---------------------------------------------- */

/* One line on a terminal, rewritten per step: phase, step, s/step, ETA. */
typedef struct {
  int tty;
  double start, step_start;
} progress_state;

static void progress(void *ctx, const char *phase, int step, int n) {
  progress_state *s = ctx;
  double now = dc_now_seconds();
  if (!s->tty) return;
  if (!strcmp(phase, "denoise")) {
    if (step == 1) s->step_start = now;
    double per = step > 1 ? (now - s->step_start) / (step - 1) : 0;
    if (per > 0)
      fprintf(stderr, "\r\033[Kdenoise %d/%d  %.2f s/step  ETA %.0f s", step, n, per, per * (n - step + 1));
    else fprintf(stderr, "\r\033[Kdenoise %d/%d", step, n);
  } else {
    fprintf(stderr, "\r\033[K%s", !strcmp(phase, "text") ? "text encoding" : "decode");
  }
  fflush(stderr);
}

static void note(void *ctx, const char *text) {
  progress_state *s = ctx;
  fprintf(stderr, "%sdiffrun: note: %s\n", s->tty ? "\r\033[K" : "", text);
}

/* --latents FILE: the tensor "latents" with the plan's latent shape, F32. */
static dc_status *read_latents(drt_plan *p, const char *path, float **out) {
  int64_t want[4];
  DC_TRY(dc_generate_latent_shape(p, want));
  dc_st_file f;
  DC_TRY(dc_st_open(path, &f));
  const dc_st_tensor *t = dc_st_find(&f, "latents");
  char b1[160], b2[160];
  dc_status *st = NULL;
  if (!t) st = dc_error(DC_ERR_MISMATCH, "%s: no tensor \"latents\" (expected F32%s)", path, dims_str(4, want, b1, sizeof b1));
  else if (t->dtype != DT_F32 || t->rank != 4 || memcmp(t->dims, want, sizeof want))
    st = dc_error(DC_ERR_MISMATCH, "%s: tensor \"latents\" is %s%s, but the plan's latents are F32%s", path,
                  dc_dtype_safetensors_name(t->dtype), dims_str(t->rank, t->dims, b1, sizeof b1),
                  dims_str(4, want, b2, sizeof b2));
  if (!st && !(*out = dc_malloc(t->bytes))) st = dc_nomem("reading the latents");
  if (!st) memcpy(*out, f.file.data + t->offset, t->bytes);
  dc_st_close(&f);
  return st;
}

/* The A1111-style parameters text image tools show. */
static char *parameters_text(const options *o, const dc_generate_result *r, drt_plan *p) {
  const char *model = drt_meta(p, "model");
  const char *base = model ? strrchr(model, '/') : NULL;
  return dc_asprintf("%s\n%s%s%sSteps: %d, Sampler: %s, CFG scale: %g, Seed: %llu, Size: %lldx%lld, Model: %s, "
                     "Generator: diffc %s",
                     o->prompt ? o->prompt : "", o->negative_prompt ? "Negative prompt: " : "",
                     o->negative_prompt ? o->negative_prompt : "", o->negative_prompt ? "\n" : "",
                     o->steps ? o->steps : 50, r->scheduler, r->guidance, o->seed, (long long)r->width,
                     (long long)r->height, base ? base + 1 : model ? model : "?", DIFFC_VERSION);
}

/* FILE.png, or FILE-0.png ... for a batch (FILE.apng: FILE-0.apng ...); the
 * name was checked to end in its extension. */
static char *image_path(const char *png, int64_t batch, int64_t i) {
  if (batch == 1) return dc_strdup(png);
  size_t n = (size_t)(strrchr(png, '.') - png);
  return dc_asprintf("%.*s-%lld%s", (int)n, png, (long long)i, png + n);
}

static dc_status *write_images(const options *o, drt_plan *p, const dc_generate_result *r) {
  char *params = parameters_text(o, r, p);
  if (!params) return dc_nomem("writing the image");
  dc_png_text text = {"parameters", params};
  size_t per = (size_t)(3 * r->height * r->width);
  dc_status *st = NULL;
  for (int64_t b = 0; b < r->batch && !st; b++) {
    char *path = image_path(o->png, r->batch, b);
    st = path ? dc_png_write_chw(path, r->image + per * (size_t)b, (int)r->height, (int)r->width, &text, 1)
              : dc_nomem("writing the image");
    if (!st && !o->quiet) printf("wrote %s\n", path);
    dc_free(path);
  }
  dc_free(params);
  return st;
}

/* A video pipeline's videos [batch, F, 3, H, W]: -o as one PNG per frame,
 * --video as one animated PNG per video. */
static dc_status *write_videos(const options *o, drt_plan *p, const dc_generate_result *r) {
  if (r->frames > INT32_MAX) return dc_error(DC_ERR_UNSUPPORTED, "%lld frames: diffrun writes at most %d", (long long)r->frames, INT32_MAX);
  char *params = parameters_text(o, r, p);
  if (!params) return dc_nomem("writing the video");
  dc_png_text text = {"parameters", params};
  int nf = (int)r->frames, h = (int)r->height, w = (int)r->width, fps = o->fps ? o->fps : 8;
  size_t per = (size_t)(r->frames * 3 * r->height * r->width);
  dc_status *st = NULL;
  for (int64_t b = 0; b < r->batch && !st; b++) {
    const float *video = r->image + per * (size_t)b;
    if (o->png) st = dc_png_write_frames(o->png, r->batch, b, video, nf, h, w, &text, 1);
    if (!st && o->png && !o->quiet) {
      char *first = dc_png_frame_path(o->png, r->batch, b, 0), *last = dc_png_frame_path(o->png, r->batch, b, nf - 1);
      printf("wrote %s ... %s (%d frames)\n", first ? first : "?", last ? last : "?", nf);
      dc_free(first);
      dc_free(last);
    }
    char *path = !st && o->video ? image_path(o->video, r->batch, b) : NULL;
    if (!st && o->video) st = path ? dc_apng_write_chw(path, video, nf, h, w, fps, &text, 1) : dc_nomem("writing the video");
    if (!st && path && !o->quiet) printf("wrote %s (%d frames at %d fps)\n", path, nf, fps);
    dc_free(path);
  }
  dc_free(params);
  return st;
}

static dc_status *write_generation(const char *path, const dc_generate_result *r) {
  if (r->frames) { /* a video pipeline's: [B, F, 3, H, W] and [B, F', C, h, w] */
    dc_st_out t[2] = {
        {"frames", {DT_F32, 5, {r->batch, r->frames, 3, r->height, r->width}}, r->image},
        {"latents", {DT_F32, 5, {r->batch, r->latent_frames, r->latent_channels, r->latent_h, r->latent_w}}, r->latents}};
    return dc_st_write(path, t, 2);
  }
  dc_st_out t[2] = {{"image", {DT_F32, 4, {r->batch, 3, r->height, r->width}}, r->image},
                    {"latents", {DT_F32, 4, {r->batch, r->latent_channels, r->latent_h, r->latent_w}}, r->latents}};
  return dc_st_write(path, t, 2);
}

static void print_generation(const dc_generate_result *r) {
  char b1[32], b2[32], b3[32], b4[32];
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  if (r->frames) printf("%lld video(s) of %lld frames", (long long)r->batch, (long long)r->frames);
  else printf("%lld image(s)", (long long)r->batch);
  printf(" %lldx%lld: %.3f s (text %.3f s, denoise %.3f s = %.3f s/step over %d steps with %d UNet "
         "runs, decode %.3f s), %s, guidance %g, backend %s",
         (long long)r->width, (long long)r->height,
         r->text_seconds + r->denoise_seconds + r->decode_seconds, r->text_seconds, r->denoise_seconds,
         r->steps ? r->denoise_seconds / r->steps : 0, r->steps, r->unet_runs, r->decode_seconds, r->scheduler,
         r->guidance, r->backend ? r->backend : "?");
  if (r->threads) printf(" on %d thread(s)", r->threads);
  printf("\ndevice arena peak: %s measured, %s predicted by the plan; uploaded %s; host peak RSS: %s\n",
         dc_format_bytes(r->device_peak_bytes, b1, sizeof b1), dc_format_bytes(r->device_predicted_bytes, b2, sizeof b2),
         dc_format_bytes(r->uploaded_bytes, b3, sizeof b3), dc_format_bytes((uint64_t)ru.ru_maxrss * 1024, b4, sizeof b4));
}

static dc_status *write_trace(const drt_plan *p, const char *path, int quiet) {
  DC_TRY(drt_trace_write(p, path));
  if (!quiet) printf("trace: %d events written to %s (open it in ui.perfetto.dev or chrome://tracing)\n",
                     drt_trace_count(p), path);
  return NULL;
}

static dc_status *run_pipeline(const options *o, drt_plan *p) {
  if (!o->png && !o->outputs && !o->video)
    return dc_error(DC_ERR_ARGUMENT, "nowhere to put the image: give -o FILE.png (a video pipeline: and/or --video "
                    "FILE.apng) and/or --outputs FILE.safetensors");
  float *latents = NULL;
  if (o->latents) DC_TRY(read_latents(p, o->latents, &latents));
  progress_state ps = {.tty = !o->quiet && isatty(2), .start = dc_now_seconds()};
  dc_generate_options go = {.prompt = o->prompt, .negative_prompt = o->negative_prompt, .steps = o->steps,
                            .guidance = o->guidance, .guidance_rescale = o->guidance_rescale,
                            .scheduler = o->scheduler, .scheduler_set = o->scheduler_set,
                            .nscheduler_set = o->nscheduler_set, .seed = o->seed, .latents = latents,
                            .has_original_size = o->has_original_size, .has_crops = o->has_crop,
                            .has_target_size = o->has_target_size, .progress = progress, .progress_ctx = &ps,
                            .note = o->quiet ? NULL : note, .note_ctx = &ps};
  memcpy(go.original_size, o->original_size, sizeof go.original_size);
  memcpy(go.crops_coords_top_left, o->crop, sizeof go.crops_coords_top_left);
  memcpy(go.target_size, o->target_size, sizeof go.target_size);
  dc_generate_result r;
  /* --memory-timeline draws the memory the run observed: recorded like --trace */
  dc_status *st = o->trace || o->memory_timeline ? drt_set_tracing(p, 1) : NULL;
  if (!st) st = dc_generate(p, &go, &r);
  else memset(&r, 0, sizeof r);
  if (ps.tty) fprintf(stderr, "\r\033[K");
  dc_free(latents);
  if (!st && !r.frames && o->video)
    st = dc_error(DC_ERR_ARGUMENT, "--video %s: this pipeline makes images, not videos (write them with -o FILE.png)",
                  o->video);
  if (!st && r.frames && (o->png || o->video)) st = write_videos(o, p, &r);
  else if (!st && o->png) st = write_images(o, p, &r);
  if (!st && o->outputs) st = write_generation(o->outputs, &r);
  if (!st && o->trace) st = write_trace(p, o->trace, o->quiet);
  if (!st && !o->quiet) print_generation(&r);
  if (!st && r.device_peak_bytes > r.device_predicted_bytes)
    st = dc_error(DC_ERR_INTERNAL, "measured device peak exceeds the plan's prediction");
  dc_generate_result_free(&r);
  return st;
}

/* ---- --calibrate ---------------------------------------------------------------------- */
static void print_calibration(const drt_calibration *c) {
  printf("calibrated on %s, backend %s", c->device, c->backend);
  if (strcmp(c->backend, "cuda") != 0) printf(", %d thread(s)", c->threads);
  printf(": %d timed run(s) of %.4f s after a warm-up\n", c->runs, c->run_seconds);
  printf("  %-10s %6s %11s  %s\n", "class", "steps", "s per run", "rate");
  for (int i = 0; i < c->nclasses; i++) {
    const drt_class_rate *r = &c->classes[i];
    printf("  %-10s %6d %11.6f  %.2f %s\n", r->name, r->steps, r->seconds, r->rate,
           strcmp(r->name, "memory") ? "GFLOP/s" : "GB/s");
  }
  printf("  overhead per kernel step: %.2f us%s%s%s\n", c->overhead_us, c->overhead_note[0] ? " (" : "", c->overhead_note,
         c->overhead_note[0] ? ")" : "");
  printf("copy bandwidth: host->device %.2f GB/s%s, disk reads %.2f GB/s%s, device->device %.2f GB/s%s\n",
         c->h2d_gbps, c->h2d_measured ? "" : " (default)", c->disk_gbps, c->disk_measured ? "" : " (default)",
         c->d2d_gbps, c->d2d_measured ? "" : " (default)");
  if (c->copy_note[0]) printf("  not measured: %s\n", c->copy_note);
  printf("wrote %s\n", c->path);
}

static dc_status *calibrate(const options *o, drt_plan *p) {
  drt_calibrate_options co = {.output = o->calibrate_file, .runs = o->repeat > 1 ? o->repeat : 0};
  drt_calibration c;
  if (!o->quiet) {
    printf("calibrating on %s: timing the plan's steps, then copies and disk reads (256 MiB each)\n", o->plan);
    fflush(stdout);
  }
  DC_TRY(drt_calibrate(p, &co, &c));
  if (!o->quiet) print_calibration(&c);
  return NULL;
}

/* -v: the backend's notes not printed yet (each arises once). */
static void print_notes(options *o, const drt_plan *p) {
  const char *n;
  if (!o->verbose) return;
  while ((n = drt_note(p, o->notes_printed))) {
    fprintf(stderr, "diffrun: %s\n", n);
    o->notes_printed++;
  }
}

static dc_status *run(options *o) {
  drt_plan *p;
  drt_options ro = {.backend = o->backend, .threads = o->threads, .check_finite = o->check_finite,
                    .device = o->device, .inspect = o->print_ir || o->info, .device_memory = o->device_memory,
                    .no_verify_weights = o->no_verify_weights, .trusted_keys = o->trusted_keys,
                    .no_cuda_graphs = o->no_cuda_graphs,
                    .no_cublaslt = o->no_cublaslt};
  DC_TRY(drt_load(o->plan, &ro, &p));
  dc_status *st = NULL;
  const char *warning = drt_info(p)->warning;
  if (warning && *warning) fprintf(stderr, "diffrun: warning: %s\n", warning); /* once per load */
  if (o->print_ir) fputs(drt_ir_text(p), stdout);
  else if (o->info) st = print_info(p, o->json);
  else if (o->calibrate) st = calibrate(o, p);
  else if (dc_plan_is_pipeline(p)) {
    if (o->inputs || o->random_inputs || o->repeat > 1 || o->profile)
      st = dc_error(DC_ERR_ARGUMENT, "%s is a pipeline plan: run it with --prompt TEXT -o out.png (--inputs, "
                    "--random-inputs, --repeat and --profile run one model's plan)", o->plan);
    else st = run_pipeline(o, p);
    print_notes(o, p);
  } else if (o->generation) {
    st = dc_error(DC_ERR_ARGUMENT, "%s is one model's plan, not a pipeline: --prompt, --steps, -o and the other "
                  "generation options need a plan compiled from a pipeline folder; run this one with --inputs FILE",
                  o->plan);
  } else {
    if (o->inputs) st = bind_inputs(p, o->inputs);
    else if (o->random_inputs) {
      drt_set_random_inputs(p, o->seed);
      if (!o->quiet) note_random_ints(p);
    }
    else st = dc_error(DC_ERR_ARGUMENT, "no inputs: use --inputs FILE or --random-inputs (see diffrun --info for the signature)");
    drt_stats s = {0};
    double total = 0;
    if (!st && o->profile) st = drt_set_profiling(p, 1);
    if (!st && (o->trace || o->memory_timeline)) st = drt_set_tracing(p, 1);
    for (int r = 0; r < o->repeat && !st; r++) {
      st = drt_run(p, &s);
      print_notes(o, p);
      total += s.seconds;
      if (!st && !o->quiet) print_run(r + 1, &s);
    }
    if (!st && !o->check_finite) warn_nonfinite_outputs(p); /* --check-finite already looked at every step */
    if (!st && o->outputs) st = write_outputs(p, o->outputs);
    if (!st && o->profile) print_profile(p, o->repeat);
    if (!st && o->trace) st = write_trace(p, o->trace, o->quiet);
    if (!st && !o->quiet) {
      char b1[32], b2[32], b3[32];
      struct rusage ru;
      getrusage(RUSAGE_SELF, &ru);
      printf("mean %.3f s per run over %d run(s), %d steps, backend %s", total / o->repeat, o->repeat, s.steps,
             s.backend);
      if (!strcmp(s.backend, "cuda")) printf(" on %s", drt_info(p)->device);
      else printf(" on %d thread(s)", s.threads);
      if (s.reference_steps) /* ops with no LLVM kernel yet run their plain C reference kernel */
        printf(" (%d steps on reference kernels, for ops with no LLVM kernel yet: %s)", s.reference_steps,
               s.reference_ops);
      printf("\n");
      if (!strcmp(s.backend, "cuda")) {
        printf("device memory held: %s (arena + weight block%s); pinned host buffers: %s\n",
               dc_format_bytes(s.device_total_bytes, b1, sizeof b1),
               s.cublaslt_workspace_bytes ? " + cuBLASLt workspace" : "",
               dc_format_bytes(s.pinned_bytes, b2, sizeof b2));
        print_cublaslt(&s);
      }
      printf("device arena peak: %s measured, %s predicted by the plan (%llu bytes)%s\n",
             dc_format_bytes(s.device_peak_bytes, b1, sizeof b1), dc_format_bytes(s.device_predicted_bytes, b2, sizeof b2),
             (unsigned long long)s.device_peak_bytes, s.device_peak_bytes == s.device_predicted_bytes ? "" : "  MISMATCH");
      for (int d = 0; s.ndevices > 1 && d < s.ndevices; d++) /* --device-map: each device its own arena */
        printf("  device %d: arena %s measured, %s planned; weights %s%s\n", d,
               dc_format_bytes(s.dev_peak_bytes[d], b1, sizeof b1), dc_format_bytes(s.dev_predicted_bytes[d], b2, sizeof b2),
               dc_format_bytes(s.dev_weight_bytes[d], b3, sizeof b3),
               s.dev_peak_bytes[d] == s.dev_predicted_bytes[d] ? "" : "  MISMATCH");
      if (s.ndevices > 1)
        printf("transferred between devices: %s per run\n", dc_format_bytes(s.transferred_bytes, b1, sizeof b1));
      const drt_plan_info *pi = drt_info(p);
      if (pi->verified_bytes)
        printf("weights verified at load: %s hashed in %.3f s (--no-verify-weights skips it)\n",
               dc_format_bytes(pi->verified_bytes, b1, sizeof b1), pi->verify_seconds);
      else if (o->no_verify_weights)
        printf("weights not verified at load (--no-verify-weights): only file sizes and headers were checked\n");
      if (o->trusted_keys) printf("signature: %s\n", pi->signature);
      printf("weights: %s resident (%llu bytes); host peak RSS: %s\n", dc_format_bytes(s.weight_bytes, b1, sizeof b1),
             (unsigned long long)s.weight_bytes, dc_format_bytes((uint64_t)ru.ru_maxrss * 1024, b3, sizeof b3));
      if (s.host_weight_bytes)
        printf("offloaded: %s of weights in host memory or on disk; %s copied to the device per run\n",
               dc_format_bytes(s.host_weight_bytes, b1, sizeof b1), dc_format_bytes(s.uploaded_bytes, b2, sizeof b2));
      if (s.host_weight_bytes && strcmp(s.backend, "cuda") != 0) /* cuda's pinned line is above */
        printf("host memory: %s, %s held for the offloaded weights (%s)\n", s.host_memory,
               dc_format_bytes(s.pinned_bytes, b1, sizeof b1),
               !strcmp(s.host_memory, "on-demand") ? "a bounce buffer; each upload reads its weight's file"
                                                  : "all of them, read at load");
      int differ = s.device_peak_bytes != s.device_predicted_bytes;
      for (int d = 0; d < s.ndevices; d++) differ |= s.dev_peak_bytes[d] != s.dev_predicted_bytes[d];
      if (differ) st = dc_error(DC_ERR_INTERNAL, "measured device peak differs from the plan's prediction");
    }
  }
  /* the predicted timeline, and after a run the memory as the run observed it (drt_memory_measured) */
  if (!st && o->memory_timeline) {
    dc_mem_series measured = {0};
    int ran = !o->info && !o->print_ir && !o->calibrate;
    if (ran) st = drt_memory_measured(p, &measured);
    if (!st) st = drt_memory_timeline(p, ran ? &measured : NULL, o->memory_timeline);
    dc_mem_series_deinit(&measured);
    if (!st && !o->quiet && !o->print_ir) /* --print-ir's stdout is the IR alone */
      printf("wrote the memory timeline %s\n", o->memory_timeline);
  }
  drt_destroy(p);
  return st;
}

int main(int argc, char **argv) {
  options o;
  int exit_now = 0;
  dc_status *st = parse_args(argc, argv, &o, &exit_now);
  if (!st && !exit_now) st = run(&o);
  if (st) {
    fprintf(stderr, "diffrun: error: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 1;
  }
  return 0;
}
