/* budget.c — diffc --memory-budget: the fastest memory options whose plan
 * fits the device.  Not a pass: like fit.c it runs the pipeline on copies
 * of the frontend graph, once per candidate, so every peak is the peak that
 * plan really has; the cost model (cost_model.c) predicts each one's time.
 *
 * Candidates: every build variant the driver gives (VAE slicing / tiling,
 * already pruned to those that change the graph) x storage dtype (fp32 and
 * what --allow-cast allows) x offload (none, model, sequential, group block
 * with 1, 2, 4 blocks per group up to the longest block list, group leaf;
 * group offload with prefetch 0, 1, 2) x hoisting on / off (modules with a
 * loop) x placement (none, sequential, balanced) when --max-memory names
 * several GPUs and --device-map is not given.  The passes before "place" do
 * not depend on the offload options, so they run once per (variant, dtype)
 * and each candidate copies their result.
 * Host memory: pinned, unless --max-memory cpu= is given and the offloaded
 * weights exceed it (then on-demand, timed as such).
 *
 * A candidate fits when every device's resident weights + arena peak is
 * within its budget (--max-memory N= for GPU N, else --memory-budget).
 * The choice is the fastest that fits (the smaller peak on a tie), so a
 * larger budget never gives a slower prediction. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct {
  dc_offload_kind offload;
  dc_group_level level;
  int per_group, prefetch;
} offload_alt;

/* The longest block list among the weights: the largest N + 1 of a path
 * component followed by an index (down_blocks.3 -> 4), as offload.c groups. */
static int longest_block_list(const dc_module *m) {
  int longest = 0;
  for (int32_t w = 0; w < m->nweights; w++)
    for (const char *p = m->weights[w].name; (p = strchr(p, '.')) != NULL; p++) {
      char *end;
      long i = strtol(p + 1, &end, 10);
      if (end > p + 1 && *end == '.' && p[1] >= '0' && p[1] <= '9' && i + 1 > longest && i < 1000000) longest = (int)i + 1;
    }
  return longest;
}

static int offload_alternatives(const dc_module *prefix, offload_alt *out) {
  int n = 0;
  out[n++] = (offload_alt){DC_OFFLOAD_NONE, DC_GROUP_NONE, 0, 0};
  out[n++] = (offload_alt){DC_OFFLOAD_MODEL, DC_GROUP_NONE, 0, 0};
  out[n++] = (offload_alt){DC_OFFLOAD_SEQUENTIAL, DC_GROUP_NONE, 0, 0};
  int longest = longest_block_list(prefix);
  /* 2 blocks per group differ from 1 only with lists of 2 or more, 4 from 2 only with 3 or more */
  for (int per = 1; per <= 4 && longest > 0 && (per == 1 || longest > per / 2); per *= 2)
    for (int pf = 0; pf <= 2; pf++) out[n++] = (offload_alt){DC_OFFLOAD_GROUP, DC_GROUP_BLOCK, per, pf};
  for (int pf = 0; pf <= 2; pf++) out[n++] = (offload_alt){DC_OFFLOAD_GROUP, DC_GROUP_LEAF, 0, pf};
  return n;
}

static int has_loop(const dc_module *m) {
  for (int p = 0; p < m->nphases; p++)
    if (m->phases[p].loop) return 1;
  return 0;
}

static const char *storage_flag(dc_dtype d) {
  switch (d) {
    case DT_F8_E4M3: return "fp8_e4m3";
    case DT_F8_E5M2: return "fp8_e5m2";
    case DT_BF16: return "bf16";
    case DT_F16: return "fp16";
    default: return "fp32";
  }
}

/* The exact diffc options that reproduce a candidate (beside the user's own). */
static void candidate_flags(const dc_budget_request *r, dc_budget_candidate *c) {
  dc_buf b;
  dc_buf_init(&b);
  const dc_memory_options *o = &c->options;
  dc_buf_printf(&b, "--offload %s", dc_offload_name(o->offload));
  if (o->offload == DC_OFFLOAD_GROUP) {
    dc_buf_printf(&b, " --group-level %s", dc_group_level_name(o->group_level));
    if (o->group_level == DC_GROUP_BLOCK) dc_buf_printf(&b, " --blocks-per-group %d", o->blocks_per_group);
    if (o->prefetch) dc_buf_printf(&b, " --prefetch=%d", o->prefetch);
  }
  if (o->host_memory == DC_HOST_ON_DEMAND) dc_buf_printf(&b, " --host-memory on-demand");
  if (o->storage != DT_F32) dc_buf_printf(&b, " --storage-dtype %s", storage_flag(o->storage));
  if (o->no_hoist) dc_buf_printf(&b, " --no-hoist");
  if (o->device_map != r->base.device_map)
    dc_buf_printf(&b, " --device-map %s", o->device_map == DC_MAP_SEQUENTIAL ? "sequential" : "balanced");
  const char *v = r->variants[c->variant].flags;
  if (v && *v) dc_buf_printf(&b, " %s", v);
  dc_buf_u8(&b, 0);
  snprintf(c->flags, sizeof c->flags, "%s", b.failed ? "?" : (const char *)b.data);
  dc_buf_deinit(&b);
}

uint64_t dc_budget_of_device(const dc_budget_request *r, int d) {
  if (d < r->base.max_memory.ngpus && r->base.max_memory.gpu[d]) return r->base.max_memory.gpu[d];
  return r->budget;
}

/* Runs the per-candidate passes on a copy of prefix and measures it. */
static dc_status *evaluate(const dc_budget_request *r, const dc_module *prefix, dc_budget_candidate *c, int *skip) {
  dc_module *m = NULL;
  *skip = 0;
  DC_TRY(dc_module_clone_borrowing(prefix, &m));
  dc_pipeline_options po = {.memory = &c->options, .first_pass = "place"};
  dc_status *st = dc_pipeline_run(m, &po);
  /* a placement the search added that the GPUs cannot hold, or that puts
   * modules on disk (that needs --offload-dir, which the search does not
   * choose), is no candidate */
  int searched_map = c->options.device_map != r->base.device_map;
  int on_disk = 0;
  for (int32_t w = 0; !st && w < m->nweights; w++) on_disk |= m->weights[w].place == DC_PLACE_DISK;
  if ((st && searched_map && dc_status_code_of(st) == DC_ERR_ARGUMENT) || (!st && searched_map && on_disk)) {
    dc_status_free(st);
    dc_module_destroy(m);
    return *skip = 1, NULL;
  }
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED) { /* e.g. no block lists: not a candidate here */
    dc_status_free(st);
    dc_module_destroy(m);
    return *skip = 1, NULL;
  }
  dc_liveness l;
  if (!st) st = dc_liveness_compute(m, &l);
  if (st) {
    dc_module_destroy(m);
    return st;
  }
  c->ndevices = l.ndevices;
  c->over = 0, c->device_bytes = 0;
  for (int d = 0; d < l.ndevices; d++) {
    uint64_t bytes = l.dev_weights[d] + l.dev_peak[d], budget = dc_budget_of_device(r, d);
    c->per_device[d] = bytes;
    if (bytes > c->device_bytes) c->device_bytes = bytes;
    if (bytes > budget && bytes - budget > c->over) c->over = bytes - budget;
  }
  c->host_bytes = l.host_weight_bytes;
  dc_liveness_deinit(&l);
  /* pinned holds every offloaded weight in host memory: over a cpu budget, read them on demand */
  if (r->base.max_memory.has_cpu && c->host_bytes > r->base.max_memory.cpu) c->options.host_memory = DC_HOST_ON_DEMAND;
  dc_cost_estimate e;
  st = dc_cost_estimate_module(m, r->profile, r->loop_steps,
                               c->options.host_memory ? (int)c->options.host_memory : DC_HOST_PINNED, &e);
  if (!st) {
    c->seconds = e.seconds, c->copy_stall_seconds = e.copy_stall_seconds;
    memcpy(c->class_seconds, e.class_seconds, sizeof c->class_seconds);
  }
  dc_module_destroy(m);
  return st;
}

static dc_status *push(dc_budget_result *res, const dc_budget_candidate *c) {
  if (res->n == res->cap) {
    int cap = res->cap ? res->cap * 2 : 32;
    dc_budget_candidate *p = dc_realloc(res->c, sizeof *p * (size_t)cap);
    if (!p) return dc_nomem("the budget search");
    res->c = p, res->cap = cap;
  }
  res->c[res->n++] = *c;
  return NULL;
}

/* The frontend graph of one variant through the passes before "place", in
 * one storage dtype. */
static dc_status *run_prefix(const dc_module *frontend, const dc_memory_options *o, dc_module **out) {
  DC_TRY(dc_module_clone_borrowing(frontend, out));
  dc_pipeline_options po = {.memory = o, .last_pass = "dce"};
  dc_status *st = dc_pipeline_run(*out, &po);
  if (st) dc_module_destroy(*out), *out = NULL;
  return st;
}

static dc_status *search_variant(const dc_budget_request *r, int v, dc_dtype storage, dc_budget_result *res) {
  dc_memory_options o = r->base;
  o.offload = DC_OFFLOAD_NONE, o.group_level = DC_GROUP_NONE, o.blocks_per_group = 0, o.prefetch = 0;
  o.host_memory = DC_HOST_DEFAULT, o.storage = storage, o.no_hoist = 0;
  dc_module *prefix = NULL;
  DC_TRY(run_prefix(r->variants[v].frontend, &o, &prefix));
  offload_alt alts[32];
  int nalts = offload_alternatives(prefix, alts);
  int hoists = has_loop(prefix) ? 2 : 1;
  /* several GPUs in --max-memory and no --device-map: also spread over them */
  dc_device_map_kind maps[3] = {r->base.device_map};
  int nmaps = 1;
  if (r->base.device_map == DC_MAP_NONE && r->base.max_memory.ngpus > 1)
    maps[nmaps++] = DC_MAP_SEQUENTIAL, maps[nmaps++] = DC_MAP_BALANCED;
  dc_status *st = NULL;
  for (int k = 0; k < nmaps * nalts * hoists && !st; k++) {
    int pm = k / (nalts * hoists), a = k / hoists % nalts, h = k % hoists;
    dc_budget_candidate c;
    memset(&c, 0, sizeof c);
    c.variant = v;
    c.options = o;
    c.options.device_map = maps[pm];
    c.options.offload = alts[a].offload, c.options.group_level = alts[a].level;
    c.options.blocks_per_group = alts[a].per_group, c.options.prefetch = alts[a].prefetch;
    c.options.no_hoist = h;
    int skip;
    st = evaluate(r, prefix, &c, &skip);
    if (!st && !skip) {
      candidate_flags(r, &c);
      st = push(res, &c);
    }
  }
  dc_module_destroy(prefix);
  return st;
}

/* Faster first; on equal time the smaller peak. */
static int better(const dc_budget_candidate *a, const dc_budget_candidate *b) {
  if (a->seconds != b->seconds) return a->seconds < b->seconds;
  return a->device_bytes < b->device_bytes;
}

static void choose(dc_budget_result *res) {
  res->chosen = res->smallest = -1;
  res->runner[0] = res->runner[1] = -1;
  for (int i = 0; i < res->n; i++) {
    const dc_budget_candidate *c = &res->c[i];
    if (res->smallest < 0 || c->over < res->c[res->smallest].over ||
        (c->over == res->c[res->smallest].over && c->device_bytes < res->c[res->smallest].device_bytes))
      res->smallest = i;
    if (!c->over && (res->chosen < 0 || better(c, &res->c[res->chosen]))) res->chosen = i;
  }
  if (res->chosen < 0) return;
  /* the runners-up: the fastest that was over budget but faster than the
   * choice (what more memory would buy), and the fastest fitting one after
   * it; then whichever is next fastest */
  int over = -1, next = -1;
  const dc_budget_candidate *ch = &res->c[res->chosen];
  for (int i = 0; i < res->n; i++) {
    const dc_budget_candidate *c = &res->c[i];
    if (i == res->chosen) continue;
    if (c->over && better(c, ch) && (over < 0 || better(c, &res->c[over]))) over = i;
    if (!c->over && (next < 0 || better(c, &res->c[next]))) next = i;
  }
  int k = 0;
  if (over >= 0) res->runner[k++] = over;
  if (next >= 0) res->runner[k++] = next;
  for (int i = 0; k < 2 && i < res->n; i++) { /* fewer than two so far: the fastest others */
    int best = -1;
    for (int j = 0; j < res->n; j++)
      if (j != res->chosen && j != res->runner[0] && (best < 0 || better(&res->c[j], &res->c[best]))) best = j;
    if (best < 0) break;
    res->runner[k++] = best;
  }
}

dc_status *dc_budget_search(const dc_budget_request *r, dc_budget_result *res) {
  memset(res, 0, sizeof *res);
  double t0 = dc_now_seconds();
  dc_dtype storages[8] = {r->base.storage};
  int ns = 1;
  for (int i = 0; i < r->ncasts && ns < 8; i++)
    if (r->casts[i] != r->base.storage) storages[ns++] = r->casts[i];
  dc_status *st = NULL;
  for (int v = 0; v < r->nvariants && !st; v++)
    for (int s = 0; s < ns && !st; s++) st = search_variant(r, v, storages[s], res);
  if (!st && !res->n) st = dc_error(DC_ERR_INTERNAL, "--memory-budget: no memory option applies to this model");
  if (st) {
    dc_budget_result_free(res);
    return st;
  }
  choose(res);
  res->seconds = dc_now_seconds() - t0;
  return NULL;
}

void dc_budget_result_free(dc_budget_result *res) {
  dc_free(res->c);
  memset(res, 0, sizeof *res);
}

static const char *per_what(const dc_budget_request *r) { return r->loop_steps ? "image" : "forward"; }

/* " (50 denoising steps, the pipeline's default)" for a pipeline, else "". */
static void steps_note(const dc_budget_request *r, char *buf, size_t cap) {
  if (r->loop_steps) snprintf(buf, cap, " at %d denoising steps, the pipeline's default", r->loop_steps);
  else buf[0] = 0;
}

/* Why a runner-up lost to the choice. */
static void why_lost(const dc_budget_candidate *c, const dc_budget_candidate *ch, char *buf, size_t cap) {
  char b[32];
  if (c->over) snprintf(buf, cap, "over budget by %s", dc_format_bytes(c->over, b, sizeof b));
  else if (c->seconds > ch->seconds) {
    double pct = ch->seconds > 0 ? (c->seconds / ch->seconds - 1) * 100 : 0.0;
    if (pct < 0.1) snprintf(buf, cap, "slower by < 0.1 %%");
    else snprintf(buf, cap, "slower by %.1f %%", pct);
  }
  else snprintf(buf, cap, "as fast, more memory");
}

static void time_str(double s, char *buf, size_t cap) {
  if (s >= 1) snprintf(buf, cap, "%.2f s", s);
  else snprintf(buf, cap, "%.2f ms", s * 1e3);
}

dc_status *dc_budget_no_fit(const dc_budget_request *r, const dc_budget_result *res) {
  char b1[32], b2[32];
  const dc_budget_candidate *s = &res->c[res->smallest];
  return dc_error(DC_ERR_UNSUPPORTED,
                  "--memory-budget %s: no plan fits; the smallest device peak diffc can reach is %s (weights + "
                  "activations, with %s; %d candidates tried)",
                  dc_format_bytes(r->budget, b1, sizeof b1), dc_format_bytes(s->device_bytes, b2, sizeof b2), s->flags,
                  res->n);
}

void dc_budget_print(const dc_budget_request *r, const dc_budget_result *res, FILE *f) {
  char b1[32], b2[32], t[32];
  const dc_budget_candidate *ch = &res->c[res->chosen];
  time_str(ch->seconds, t, sizeof t);
  fprintf(f, "diffc: --memory-budget %s%s: chose %s\n", dc_format_bytes(r->budget, b1, sizeof b1),
          r->base.max_memory.ngpus ? " (the GPUs --max-memory names: its budgets)" : "", ch->flags);
  char steps[64];
  steps_note(r, steps, sizeof steps);
  fprintf(f, "diffc:   device peak %s (weights + activations), predicted %s per %s%s (cost model: %s%s)\n",
          dc_format_bytes(ch->device_bytes, b2, sizeof b2), t, per_what(r), steps, r->profile->source,
          r->profile->calibrated ? "" : ", uncalibrated");
  for (int k = 0; k < 2; k++) {
    if (res->runner[k] < 0) continue;
    const dc_budget_candidate *c = &res->c[res->runner[k]];
    char why[64];
    why_lost(c, ch, why, sizeof why);
    time_str(c->seconds, t, sizeof t);
    fprintf(f, "diffc:   runner-up %s: %s, %s per %s: %s\n", c->flags, dc_format_bytes(c->device_bytes, b2, sizeof b2),
            t, per_what(r), why);
  }
  fprintf(f, "diffc:   %d candidates tried in %.2f s\n", res->n, res->seconds);
}

/* {"conv3x3":s,...,"copy":s}: the classes that take time (not "none"). */
static void class_seconds_json(dc_buf *b, const dc_budget_candidate *c) {
  dc_buf_printf(b, ",\"class_seconds\":{");
  for (int k = 0; k < DC_COST_NONE; k++)
    dc_buf_printf(b, "%s\"%s\":%.6g", k ? "," : "", dc_cost_class_name((dc_cost_class)k), c->class_seconds[k]);
  dc_buf_printf(b, "}");
}

static void candidate_json(dc_buf *b, const dc_budget_candidate *c, const char *why, int classes) {
  dc_buf_printf(b, "{\"flags\":\"%s\",\"device_bytes\":%" PRIu64 ",\"seconds\":%.6g", c->flags, c->device_bytes,
                c->seconds);
  if (classes) class_seconds_json(b, c);
  if (why) dc_buf_printf(b, ",\"lost\":\"%s\"", why);
  dc_buf_printf(b, "}");
}

dc_status *dc_budget_json(const dc_budget_request *r, const dc_budget_result *res, dc_buf *b) {
  const dc_budget_candidate *ch = &res->c[res->chosen];
  dc_buf_printf(b, "{\"memory_budget\":%" PRIu64 ",\"per\":\"%s\",", r->budget, per_what(r));
  if (r->loop_steps) dc_buf_printf(b, "\"loop_steps\":%d,", r->loop_steps);
  dc_buf_printf(b, "\"calibration\":\"");
  for (const char *p = r->profile->source; *p; p++) /* a path: escape what JSON needs */
    if (*p == '"' || *p == '\\') dc_buf_printf(b, "\\%c", *p);
    else if ((unsigned char)*p >= 0x20) dc_buf_u8(b, (uint8_t)*p);
  dc_buf_printf(b, "\",\"calibrated\":%s,\"chosen\":", r->profile->calibrated ? "true" : "false");
  candidate_json(b, ch, NULL, 1);
  dc_buf_printf(b, ",\"runners_up\":[");
  int first = 1;
  for (int k = 0; k < 2; k++) {
    if (res->runner[k] < 0) continue;
    char why[64];
    why_lost(&res->c[res->runner[k]], ch, why, sizeof why);
    dc_buf_printf(b, "%s", first ? "" : ",");
    candidate_json(b, &res->c[res->runner[k]], why, 0);
    first = 0;
  }
  dc_buf_printf(b, "],\"candidates\":%d,\"search_seconds\":%.3f}", res->n, res->seconds);
  return dc_buf_status(b, "the budget search's summary");
}
