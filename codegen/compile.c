/* compile.c — see compile.h.  The order here is the data flow of DESIGN.md:
 * open the folder, build the graph, run the pipeline (verifier between
 * passes), print the IR, write the plan. */
#include "compile.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "codegen/emit_kernels.h"
#include "passes/passes.h"
#include "runtime/plan_format.h"


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

/* Provenance stored in the plan's OPTS section. */
static char *options_json(const dc_compile_options *o, const dc_folder *f) {
  cJSON *j = cJSON_CreateObject();
  if (!j) return NULL;
  cJSON_AddStringToObject(j, "diffc_version", DIFFC_VERSION);
  cJSON_AddStringToObject(j, "model", f->dir);
  if (o->component) cJSON_AddStringToObject(j, "component", o->component);
  if (o->variant) cJSON_AddStringToObject(j, "variant", o->variant);
  if (o->entry) cJSON_AddStringToObject(j, "entry", o->entry);
  cJSON_AddStringToObject(j, "target", "cpu");
  cJSON_AddStringToObject(j, "cpu", o->cpu ? o->cpu : "native");
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
static dc_status *run_passes(const dc_compile_options *o, dc_module *m) {
  int trace;
  DC_TRY(debug_on(o->debug, "memplan", &trace));
  dc_pipeline_options po = {o->dump_after, dump_to_stderr, NULL, o->verbose};
  if (trace) dc_memplan_trace(stderr);
  dc_status *st = dc_pipeline_run(m, &po);
  dc_memplan_trace(NULL);
  dc_liveness l;
  if (!st) st = dc_liveness_compute(m, &l);
  if (!st) {
    st = dc_status_annotate(dc_memplan_check(m, &l), "after the pipeline");
    dc_liveness_deinit(&l);
  }
  return st;
}

static dc_status *build(const dc_compile_options *o, dc_folder *f, dc_module **m) {
  dc_folder_options fo = {o->component, o->variant};
  DC_TRY(dc_folder_open(o->model, &fo, f));
  if (o->verbose) fprintf(stderr, "diffc: %s: %s, %d tensors in %d file(s)\n", f->dir, f->class_name, f->nentries, f->nshards);
  dc_build_options bo = {o->entry, o->shapes, o->nshapes};
  DC_TRY(dc_frontend_build(f, &bo, m));
  if (o->verbose) fprintf(stderr, "diffc: frontend built %d nodes\n", (*m)->nnodes);
  return run_passes(o, *m);
}

static dc_status *cpu_target(const char *cpu, dc_cpu_target *t) {
  if (!cpu || !strcmp(cpu, "native")) return dc_cpu_target_host(t);
  if (!strcmp(cpu, "generic")) return dc_cpu_target_generic(t);
  return dc_error(DC_ERR_ARGUMENT, "--cpu %s: expected native or generic", cpu);
}

static dc_status *emit_kernels(const dc_compile_options *o, const dc_module *m, dc_plan_kernels *k) {
  dc_cpu_target t;
  DC_TRY(cpu_target(o->cpu, &t));
  dc_status *st = dc_emit_cpu_kernels(m, &t, o->verbose, k);
  dc_cpu_target_deinit(&t);
  return st;
}

static dc_status *emit(const dc_compile_options *o, const dc_folder *f, dc_module *m, const char *plan_path) {
  dc_buf text;
  dc_buf_init(&text);
  dc_status *st = dc_print(m, &text);
  if (!st && o->dump_ir) st = write_text(o->dump_ir, &text);
  if (!st) {
    dc_buf_u8(&text, 0);
    st = dc_buf_status(&text, "printing the IR");
  }
  char *opts = st ? NULL : options_json(o, f);
  if (!st && !opts) st = dc_nomem("writing the plan options");
  if (!st) {
    dc_plan plan = {.target = DC_TARGET_CPU, .options_json = opts, .ir_text = (char *)text.data, .module = m};
    st = emit_kernels(o, m, &plan.kernels);
    if (!st) st = dc_plan_write(plan_path, &plan);
    dc_plan_kernels_deinit(&plan.kernels);
  }
  if (opts) cJSON_free(opts);
  dc_buf_deinit(&text);
  return st;
}

dc_status *dc_compile(const dc_compile_options *o, const char *plan_path, dc_compile_report *rep) {
  double t0 = dc_now_seconds();
  int unused;
  DC_TRY(debug_on(o->debug, "", &unused)); /* a bad --debug or --cpu fails before any work */
  if (o->cpu && strcmp(o->cpu, "native") != 0 && strcmp(o->cpu, "generic") != 0)
    return dc_error(DC_ERR_ARGUMENT, "--cpu %s: expected native or generic", o->cpu);
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_module *m = NULL;
  dc_status *st = build(o, &f, &m);
  if (!st) st = emit(o, &f, m, plan_path);
  if (!st && rep) {
    dc_liveness l;
    st = dc_liveness_compute(m, &l);
    if (!st) {
      rep->steps = m->nnodes;
      rep->weight_bytes = l.weight_bytes;
      rep->peak_activation_bytes = l.peak_bytes;
      rep->seconds = dc_now_seconds() - t0;
      dc_liveness_deinit(&l);
    }
  }
  dc_module_destroy(m);
  dc_folder_close(&f);
  return st;
}
