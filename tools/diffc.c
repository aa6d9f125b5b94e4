/* diffc — compile a diffusers model folder into a plan file.
 * A thin layer over the library: parse options, open the folder, build the
 * graph, run the pass pipeline, write the IR dump and the plan. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/compile.h"
#include "passes/passes.h"


#define MAX_SHAPES 16

static const char usage[] =
    "usage: diffc MODEL_DIR -o PLAN [options]\n"
    "\n"
    "Compiles a diffusers model folder (config.json + .safetensors weights, single file,\n"
    "sharded with an index, or a variant) into one plan file that diffrun executes.\n"
    "\n"
    "options:\n"
    "  -o, --output PLAN        where to write the plan (written to a temporary name, then renamed)\n"
    "  --component NAME         MODEL_DIR is a pipeline folder (model_index.json): compile this\n"
    "                           component, e.g. unet or vae\n"
    "  --variant NAME           read diffusion_pytorch_model.NAME.safetensors (e.g. fp16, bf16)\n"
    "  --entry NAME             what to compile: forward (UNet2DConditionModel); encode or decode\n"
    "                           (AutoencoderKL, default decode)\n"
    "  --input NAME=DIMS        static shape of an input, e.g. --input sample=2x4x64x64;\n"
    "                           repeatable. Defaults: batch 1, the config's sample_size, 77 tokens\n"
    "  --target cpu             the plan's target (only cpu for now)\n"
    "  --cpu native|generic     CPU the kernels are compiled for: this machine's features (the\n"
    "                           default; diffrun refuses the plan on a CPU lacking them), or a\n"
    "                           portable x86-64 baseline\n"
    "  --dump-ir FILE           write the final IR text (types, bytes, live ranges, peak) to FILE\n"
    "                           ('-' for stdout)\n"
    "  --dump-after PASS        print the IR to stderr after PASS (frontend, shape-infer,\n"
    "                           fuse-norm-act, fuse-epilogue, dce, memplan, all)\n"
    "  --debug LIST             trace the compiler's decisions to stderr; channels: memplan (which\n"
    "                           placement won, then each value's arena offset and why: in place\n"
    "                           over its parent, or the lowest offset free over its lifetime)\n"
    "  --list-passes            print the pass pipeline and exit\n"
    "  -v, --verbose            print progress and timings\n"
    "  -h, --help               this help\n"
    "  --version                print the version\n"
    "\n"
    "Inputs and outputs use the diffusers forward-argument names:\n"
    "  UNet2DConditionModel: sample, timestep [B], encoder_hidden_states, and for SDXL-style\n"
    "                        models text_embeds, time_ids; output sample\n"
    "  AutoencoderKL encode: sample (image) -> mean, logvar;  decode: z -> sample\n"
    "All computation is fp32; bf16/fp16/fp8 weights are converted to fp32 when read.\n";

typedef struct {
  const char *model, *output, *component, *variant, *entry, *target, *dump_ir, *dump_after, *debug, *cpu;
  dc_input_shape shapes[MAX_SHAPES];
  int nshapes, verbose;
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

static dc_status *parse_args(int argc, char **argv, options *o, int *exit_now) {
  memset(o, 0, sizeof *o);
  o->target = "cpu";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "--version")) {
      printf("diffc %s\n", DIFFC_VERSION);
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "--list-passes")) {
      int n;
      const dc_pass *ps = dc_pass_list(&n);
      for (int k = 0; k < n; k++) printf("%-12s %s\n", ps[k].name, ps[k].summary);
      return *exit_now = 1, NULL;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose = 1;
      continue;
    }
    if (!strcmp(a, "-o") || !strcmp(a, "--output")) slot = &o->output;
    else if (!strcmp(a, "--component")) slot = &o->component;
    else if (!strcmp(a, "--variant")) slot = &o->variant;
    else if (!strcmp(a, "--entry")) slot = &o->entry;
    else if (!strcmp(a, "--target")) slot = &o->target;
    else if (!strcmp(a, "--dump-ir")) slot = &o->dump_ir;
    else if (!strcmp(a, "--dump-after")) slot = &o->dump_after;
    else if (!strcmp(a, "--debug")) slot = &o->debug;
    else if (!strcmp(a, "--cpu")) slot = &o->cpu;
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
    *slot = argv[++i];
  }
  if (!o->model) return dc_error(DC_ERR_ARGUMENT, "no model folder given (see diffc --help)");
  if (!o->output) return dc_error(DC_ERR_ARGUMENT, "no output plan given: use -o PLAN");
  if (strcmp(o->target, "cpu") != 0)
    return dc_error(DC_ERR_UNSUPPORTED, "--target %s: only the cpu target is available in this version", o->target);
  return NULL;
}

int main(int argc, char **argv) {
  options o;
  int exit_now = 0;
  dc_status *st = parse_args(argc, argv, &o, &exit_now);
  if (!st && !exit_now) {
    dc_compile_options co = {o.model, o.component, o.variant, o.entry, o.shapes, o.nshapes,
                             o.dump_after, o.dump_ir, o.verbose, o.debug, o.cpu};
    dc_compile_report rep;
    st = dc_compile(&co, o.output, &rep);
    if (!st) {
      char b1[32], b2[32];
      fprintf(stderr, "diffc: wrote %s: %d steps, weights %s, peak activations %s (%.0f ms)\n", o.output, rep.steps,
              dc_format_bytes(rep.weight_bytes, b1, sizeof b1), dc_format_bytes(rep.peak_activation_bytes, b2, sizeof b2),
              rep.seconds * 1e3);
    }
  }
  for (int i = 0; i < o.nshapes; i++) dc_free((void *)o.shapes[i].name);
  if (st) {
    fprintf(stderr, "diffc: error: %s\n", dc_status_message(st));
    dc_status_free(st);
    return 1;
  }
  return 0;
}
