/* cost_model.c — how long a planned module takes, predicted from the
 * achieved rate of each kernel class (docs/ARCHITECTURE.md, "Budget
 * fitting and the cost model"; the formula and the profile format are the
 * calibration's too).
 *
 * Contract: dc_cost_estimate_module reads a verified, planned module and
 * changes nothing.  A kernel step of class c with F flops and B bytes of
 * traffic takes overhead + max(F / gflops[c], B / memory_gbps) (FLOP
 * classes) or overhead + B / memory_gbps (memory); an upload of B bytes
 * takes B / h2d_gbps from pinned host memory, B / min(h2d, disk) on demand
 * (read from its file at each upload); a transfer B / d2d_gbps.  Each
 * device has a compute stream (kernels in schedule order) and a copy
 * stream (uploads in schedule order): an upload starts when its copy
 * stream is free and every compute step of its device before it in the
 * schedule has finished (its arena slot is free by liveness); a kernel
 * starts when its compute stream is free and every copy it reads has
 * finished.  Phases are simulated separately (the host synchronises
 * between them); a pipeline's image is its non-loop phases once and its
 * loop phases loop_steps times.
 *
 * Profiles (JSON, written by diffrun --calibrate) are read here; every
 * error names the file and the key. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "frontend/frontend.h"
#include "passes.h"

/* Built-in rates, used without a calibration profile.
 *
 * CPU: a conservative figure for a 2-core AVX-512 Xeon as this project's CI
 * machine: 2 cores x 2 FMA units x 16 f32 lanes x 2 flops x ~2.5 GHz is
 * ~320 GFLOP/s peak; the LLVM kernels reach a fraction of it on GEMM-shaped
 * work (bench/README's unet forward figures are in the tens of GFLOP/s), so
 * 60 for conv3x3 (Winograd helps), 45 for other convs, 50 for linear, 30 for
 * attention; element-wise work streams at ~10 GB/s on two cores.  Uploads
 * are memcpys on the CPU backend (~8 GB/s), the page cache reads at ~2 GB/s.
 *
 * CUDA: H200 datasheet figures at a realistic fraction.  The datasheet
 * gives 67 TFLOP/s FP32 (non-tensor), 4.8 TB/s HBM3e and PCIe Gen5 x16
 * (64 GB/s per direction) and NVLink 900 GB/s; f32 convs and GEMMs in
 * NVRTC kernels without tensor cores reach ~40 % of FP32 peak, attention
 * less; HBM streaming ~70 %; pinned PCIe copies ~80 % (50 GB/s); NVMe reads
 * ~3 GB/s; device-to-device over NVLink ~60 % (540 GB/s).  Launch overhead
 * ~5 us per kernel; the CPU's per-step dispatch ~2 us. */
static const dc_cost_profile cpu_defaults = {
    .overhead_s = 2e-6,
    .gflops = {[DC_COST_CONV3X3] = 60, [DC_COST_CONV] = 45, [DC_COST_LINEAR] = 50, [DC_COST_ATTENTION] = 30},
    .memory_gbps = 10, .h2d_gbps = 8, .disk_gbps = 2, .d2d_gbps = 8};
static const dc_cost_profile cuda_defaults = {
    .overhead_s = 5e-6,
    .gflops = {[DC_COST_CONV3X3] = 27000, [DC_COST_CONV] = 27000, [DC_COST_LINEAR] = 27000,
               [DC_COST_ATTENTION] = 15000},
    .memory_gbps = 3400, .h2d_gbps = 50, .disk_gbps = 3, .d2d_gbps = 540};

void dc_cost_profile_default(int cuda, dc_cost_profile *p) {
  *p = cuda ? cuda_defaults : cpu_defaults;
  snprintf(p->source, sizeof p->source, "built-in %s defaults", cuda ? "cuda" : "cpu");
}

/* A positive number at key k of object o; errors name the file and the path. */
/* A rate or overhead: positive, finite and below a bound no machine
 * reaches (rates 1e7 GFLOP/s or GB/s, overhead 1 s per step), so that sums
 * over a schedule stay finite and candidates compare. */
static dc_status *positive_below(const char *path, const cJSON *o, const char *where, const char *k, double most,
                                 double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!v) return dc_error(DC_ERR_FORMAT, "%s: \"%s%s\" is missing", path, where, k);
  if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !(v->valuedouble <= most))
    return dc_error(DC_ERR_FORMAT, "%s: \"%s%s\" must be a positive number no larger than %g", path, where, k, most);
  *out = v->valuedouble;
  return NULL;
}

static dc_status *positive(const char *path, const cJSON *o, const char *where, const char *k, double *out) {
  return positive_below(path, o, where, k, 1e7, out);
}

static dc_status *read_classes(const char *path, const cJSON *classes, dc_cost_profile *p) {
  if (!classes) return NULL; /* no class measured: every class keeps its default */
  if (!cJSON_IsObject(classes)) return dc_error(DC_ERR_FORMAT, "%s: \"classes\" must be an object", path);
  for (const cJSON *c = classes->child; c; c = c->next) {
    int k = -1;
    for (int i = 0; i < DC_COST_COPY; i++)
      if (!strcmp(c->string, dc_cost_class_name((dc_cost_class)i))) k = i;
    if (k < 0)
      return dc_error(DC_ERR_FORMAT, "%s: \"classes.%s\": no such kernel class (conv3x3, conv, linear, attention, memory)",
                      path, c->string);
    if (!cJSON_IsObject(c)) return dc_error(DC_ERR_FORMAT, "%s: \"classes.%s\" must be an object", path, c->string);
    char where[64];
    snprintf(where, sizeof where, "classes.%s.", c->string);
    if (k == DC_COST_MEMORY) DC_TRY(positive(path, c, where, "gbps", &p->memory_gbps));
    else DC_TRY(positive(path, c, where, "gflops", &p->gflops[k]));
  }
  return NULL;
}

static dc_status *read_profile(const char *path, const cJSON *r, const char *target, dc_cost_profile *p) {
  if (!cJSON_IsObject(r)) return dc_error(DC_ERR_FORMAT, "%s: a calibration profile is a JSON object", path);
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(r, "format"), *v = cJSON_GetObjectItemCaseSensitive(r, "version");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "target");
  if (!cJSON_IsString(f) || strcmp(f->valuestring, "diffc-calibration") != 0)
    return dc_error(DC_ERR_FORMAT, "%s: \"format\" must be \"diffc-calibration\" (written by diffrun --calibrate)", path);
  if (!cJSON_IsNumber(v) || v->valuedouble != 1)
    return dc_error(DC_ERR_FORMAT, "%s: \"version\": expected 1, the version this diffc reads", path);
  if (!cJSON_IsString(t) || strcmp(t->valuestring, target) != 0)
    return dc_error(DC_ERR_FORMAT, "%s: \"target\" is %s%s%s; the plan's target is %s", path, cJSON_IsString(t) ? "\"" : "",
                    cJSON_IsString(t) ? t->valuestring : "missing", cJSON_IsString(t) ? "\"" : "", target);
  double overhead_us = 0;
  DC_TRY(positive_below(path, r, "", "overhead_us", 1e6, &overhead_us));
  p->overhead_s = overhead_us * 1e-6;
  DC_TRY(read_classes(path, cJSON_GetObjectItemCaseSensitive(r, "classes"), p));
  const cJSON *copy = cJSON_GetObjectItemCaseSensitive(r, "copy");
  if (!cJSON_IsObject(copy)) return dc_error(DC_ERR_FORMAT, "%s: \"copy\" is missing or not an object", path);
  DC_TRY(positive(path, copy, "copy.", "h2d_gbps", &p->h2d_gbps));
  DC_TRY(positive(path, copy, "copy.", "disk_gbps", &p->disk_gbps));
  return positive(path, copy, "copy.", "d2d_gbps", &p->d2d_gbps);
}

dc_status *dc_cost_profile_load(const char *path, const char *target, dc_cost_profile *p) {
  dc_cost_profile_default(!strcmp(target, "cuda"), p);
  dc_json_doc d;
  DC_TRY(dc_status_annotate(dc_json_load(path, &d), "calibration profile"));
  dc_status *st = read_profile(path, d.root, target, p);
  dc_json_free(&d);
  if (st) {
    dc_cost_profile_default(!strcmp(target, "cuda"), p);
    return st;
  }
  p->calibrated = 1;
  snprintf(p->source, sizeof p->source, "%s", path);
  return NULL;
}

double dc_cost_kernel_seconds(const dc_cost_profile *p, dc_cost_class c, uint64_t flops, uint64_t bytes) {
  double mem = (double)bytes / (p->memory_gbps * 1e9);
  switch (c) {
    case DC_COST_CONV3X3:
    case DC_COST_CONV:
    case DC_COST_LINEAR:
    case DC_COST_ATTENTION: return p->overhead_s + fmax((double)flops / (p->gflops[c] * 1e9), mem);
    case DC_COST_MEMORY: return p->overhead_s + mem;
    default: return 0;
  }
}

double dc_cost_step_seconds(const dc_cost_profile *p, const dc_module *m, int32_t id, int on_demand) {
  const dc_node *n = &m->nodes[id];
  dc_cost_class c = dc_node_cost_class(m, id);
  if (c == DC_COST_NONE) return 0;
  if (c == DC_COST_COPY) {
    double b = (double)dc_type_bytes(&n->type);
    if (n->op == OP_TRANSFER) return b / (p->d2d_gbps * 1e9);
    return b / ((on_demand ? fmin(p->h2d_gbps, p->disk_gbps) : p->h2d_gbps) * 1e9);
  }
  return dc_cost_kernel_seconds(p, c, dc_node_flops(m, id), dc_node_traffic_bytes(m, id));
}

static double dmax(double a, double b) { return a > b ? a : b; }

/* One phase, nodes [first, end): both streams of every device from time 0. */
static double simulate(const dc_cost_profile *p, const dc_module *m, int32_t first, int32_t end, int on_demand,
                       double *finish, dc_cost_estimate *e, double weight) {
  double compute_free[DC_MAX_DEVICES] = {0}, copy_free[DC_MAX_DEVICES] = {0}, last = 0;
  for (int32_t i = first; i < end; i++) {
    const dc_node *n = &m->nodes[i];
    dc_cost_class c = dc_node_cost_class(m, i);
    int d = n->device >= 0 && n->device < DC_MAX_DEVICES ? n->device : 0;
    double t = dc_cost_step_seconds(p, m, i, on_demand);
    finish[i] = 0;
    if (c == DC_COST_NONE) continue;
    e->class_seconds[c] += weight * t;
    if (c == DC_COST_COPY) {
      double start = dmax(copy_free[d], compute_free[d]); /* the compute before it in the schedule is done */
      for (int k = 0; k < n->ninputs; k++) /* a transfer's source, computed on another device */
        if (n->inputs[k] >= first) start = dmax(start, finish[n->inputs[k]]);
      finish[i] = copy_free[d] = start + t;
      e->copy_seconds += weight * t;
    } else {
      double start = compute_free[d];
      for (int k = 0; k < n->ninputs; k++) {
        int32_t in = n->inputs[k];
        if (in >= first && dc_node_cost_class(m, in) == DC_COST_COPY) start = dmax(start, finish[in]);
      }
      e->copy_stall_seconds += weight * (start - compute_free[d]);
      e->compute_seconds += weight * t;
      finish[i] = compute_free[d] = start + t;
    }
    last = dmax(last, finish[i]);
  }
  return last;
}

dc_status *dc_cost_estimate_module(const dc_module *m, const dc_cost_profile *p, int loop_steps, int host_memory,
                                   dc_cost_estimate *out) {
  memset(out, 0, sizeof *out);
  const char *hm = dc_module_get_meta(m, "host_memory");
  int on_demand = host_memory == DC_HOST_ON_DEMAND || (host_memory == DC_HOST_DEFAULT && hm && !strcmp(hm, "on-demand"));
  double *finish = dc_malloc(sizeof *finish * (size_t)(m->nnodes ? m->nnodes : 1));
  if (!finish) return dc_nomem("predicting the plan's time");
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  int nph = m->nphases ? m->nphases : 1;
  out->nphases = m->nphases;
  out->loop_steps = 0;
  for (int ph = 0; ph < nph; ph++) {
    int loop = m->nphases && m->phases[ph].loop;
    double times = loop ? (loop_steps > 0 ? loop_steps : 1) : 1;
    if (loop) out->loop_steps = loop_steps > 0 ? loop_steps : 1;
    double s = simulate(p, m, first[ph], end[ph], on_demand, finish, out, times);
    out->phase_seconds[ph] = s;
    out->seconds += times * s;
  }
  dc_free(finish);
  return NULL;
}
